"""Rubric inventories: the YAML schema, loading with line-accurate errors, and lookup of bundled rubrics.

A rubric is a list of concepts, each with a definition and one anchor descriptor per ordinal level,
plus the grade scale of the benchmark. Every stage reads it: the annotation prompt, the Label Studio
interface, agreement/adjudication (level validation) and the trainer (M, S, concept keys).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from rubrictool.errors import RubricError

__all__ = [
    "Level",
    "Example",
    "Concept",
    "Scale",
    "Rubric",
    "BUNDLED_DIR",
    "load_rubric",
    "parse_rubric",
    "list_rubrics",
    "resolve_rubric_path",
]

BUNDLED_DIR = Path(__file__).resolve().parent / "rubrics"
"""Folder of the rubrics shipped with rubrictool (``rubrics/`` at the top of the repository)."""

_KEY_PATTERN = r"^[A-Za-z][A-Za-z0-9_]*$"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Level(_Strict):
    """One ordinal level of a concept and the anchor descriptor a rater applies."""

    value: int
    anchor: str = Field(min_length=1)

    @field_validator("anchor")
    @classmethod
    def _anchor_not_blank(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("anchor is empty: describe what a response at this level looks like")
        return v.strip()


class Example(_Strict):
    """An illustrative excerpt with the level it was assigned (for reviewers; not used in training)."""

    text: str = Field(min_length=1)
    level: int
    note: str | None = None
    question: str | None = None
    reference: str | None = None


class Concept(_Strict):
    """One rubric dimension (a bottleneck unit in REC-CBM)."""

    key: str = Field(pattern=_KEY_PATTERN)
    name: str = Field(min_length=1)
    definition: str = Field(min_length=1)
    group: str | None = None
    levels: list[Level] = Field(min_length=2)
    examples: list[Example] = Field(default_factory=list)

    @model_validator(mode="after")
    def _levels_contiguous(self) -> Concept:
        values = [lv.value for lv in self.levels]
        expected = list(range(min(values), min(values) + len(values)))
        if sorted(values) != expected or len(set(values)) != len(values):
            raise ValueError(
                f"levels of concept {self.key} are {values}; they must be contiguous integers "
                f"in ascending order, e.g. {expected}"
            )
        if values != sorted(values):
            raise ValueError(f"levels of concept {self.key} must be listed in ascending order")
        lo, hi = values[0], values[-1]
        for i, ex in enumerate(self.examples):
            if not lo <= ex.level <= hi:
                raise ValueError(
                    f"example {i} of concept {self.key} has level {ex.level}, outside {lo}..{hi}"
                )
        return self

    @property
    def values(self) -> list[int]:
        return [lv.value for lv in self.levels]

    def anchor(self, value: int) -> str:
        for lv in self.levels:
            if lv.value == value:
                return lv.anchor
        raise KeyError(value)


class Scale(_Strict):
    """An inclusive integer range, e.g. concept levels 1..3 or grades 0..5."""

    min: int
    max: int
    labels: dict[int, str] | None = None

    @model_validator(mode="after")
    def _ordered(self) -> Scale:
        if self.max <= self.min:
            raise ValueError(f"max ({self.max}) must be greater than min ({self.min})")
        return self

    @property
    def values(self) -> list[int]:
        return list(range(self.min, self.max + 1))

    @property
    def n(self) -> int:
        return self.max - self.min + 1


class Rubric(_Strict):
    """A rubric inventory as stored in ``rubrics/<name>.yaml``."""

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    title: str
    version: str
    description: str
    source: str | None = None
    fields: dict[str, str] = Field(
        description="The benchmark's input fields (question/response/reference/context) and what each holds"
    )
    scale: Scale = Field(description="ordinal concept levels shared by every concept")
    grade: Scale = Field(description="the holistic grade scale")
    concepts: list[Concept] = Field(min_length=1)

    @field_validator("version", mode="before")
    @classmethod
    def _version_str(cls, v: Any) -> Any:
        return str(v) if isinstance(v, (int, float)) else v

    @field_validator("fields")
    @classmethod
    def _known_fields(cls, v: dict[str, str]) -> dict[str, str]:
        allowed = {"question", "response", "reference", "context"}
        unknown = set(v) - allowed
        if unknown:
            raise ValueError(f"unknown input field(s) {sorted(unknown)}; allowed: {sorted(allowed)}")
        if "response" not in v:
            raise ValueError("fields must describe 'response' (the student's answer)")
        return v

    @model_validator(mode="after")
    def _consistent(self) -> Rubric:
        seen: set[str] = set()
        for c in self.concepts:
            if c.key in seen:
                raise ValueError(f"duplicate concept key {c.key!r}: every concept needs its own key")
            seen.add(c.key)
            if c.values != self.scale.values:
                raise ValueError(
                    f"concept {c.key} has levels {c.values} but the rubric scale is "
                    f"{self.scale.min}..{self.scale.max}: every concept must use the same levels"
                )
        return self

    # -- conveniences used by every stage ------------------------------------------------------------
    @property
    def keys(self) -> list[str]:
        return [c.key for c in self.concepts]

    @property
    def K(self) -> int:
        """Number of concepts."""
        return len(self.concepts)

    @property
    def M(self) -> int:
        """Maximum ordinal concept level after shifting levels to 0..M (the paper's M)."""
        return self.scale.max - self.scale.min

    @property
    def S(self) -> int:
        """Maximum grade after shifting grades to 0..S (the paper's S)."""
        return self.grade.max - self.grade.min

    def concept(self, key: str) -> Concept:
        for c in self.concepts:
            if c.key == key:
                return c
        raise RubricError(f"rubric {self.name} has no concept {key!r}; its concepts are {', '.join(self.keys)}")


# -- YAML with line numbers ------------------------------------------------------------------------------


def _node_lines(node: yaml.Node, path: tuple[Any, ...], out: dict[tuple[Any, ...], int], file: str) -> None:
    out[path] = node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        seen: dict[Any, int] = {}
        for knode, vnode in node.value:
            key = knode.value
            line = knode.start_mark.line + 1
            if key in seen:
                raise RubricError(
                    f"{file}:{line}: duplicate key {key!r} (first at line {seen[key]}); remove one of them"
                )
            seen[key] = line
            out[path + (key,)] = line
            _node_lines(vnode, path + (key,), out, file)
            out[path + (key,)] = line
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _node_lines(item, path + (i,), out, file)


def _line_for(loc: tuple[Any, ...], lines: dict[tuple[Any, ...], int]) -> int | None:
    for n in range(len(loc), -1, -1):
        if loc[:n] in lines:
            return lines[loc[:n]]
    return None


def _concept_line_for_message(msg: str, data: Any, lines: dict[tuple[Any, ...], int]) -> int | None:
    """For rubric-level errors that name a concept key, point at that concept's line."""
    if not isinstance(data, dict) or not isinstance(data.get("concepts"), list):
        return None
    hits = []
    for i, c in enumerate(data["concepts"]):
        if isinstance(c, dict) and isinstance(c.get("key"), str) and (
            f"{c['key']!r}" in msg or f"concept {c['key']} " in msg
        ):
            hits.append(("concepts", i, "key"))
    if hits:
        return lines.get(hits[-1]) if "duplicate" in msg else lines.get(hits[0])
    return None


def parse_rubric(text: str, file: str = "<string>") -> Rubric:
    """Parse and validate rubric YAML text; errors name ``file:line`` and the field."""
    try:
        root = yaml.compose(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"{file}:{mark.line + 1}" if mark is not None else file
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise RubricError(f"{where}: YAML syntax error: {problem}; fix the indentation/quoting there") from None
    if root is None:
        raise RubricError(f"{file}: the file is empty; start from `rubrictool rubric new`")
    lines: dict[tuple[Any, ...], int] = {}
    _node_lines(root, (), lines, file)
    data = yaml.safe_load(text)
    if not isinstance(data, dict):
        raise RubricError(f"{file}:1: a rubric must be a YAML mapping (name:, concepts:, ...)")
    try:
        return Rubric.model_validate(data)
    except ValidationError as e:
        err = e.errors()[0]
        loc = tuple(err["loc"])
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            msg = f"unknown field {loc[-1]!r}; check its spelling against the schema (rubrictool rubric new)"
        elif err["type"] == "missing":
            msg = f"required field {loc[-1]!r} is missing"
        line = _line_for(loc, lines)
        if not loc or loc == ("concepts",):
            line = _concept_line_for_message(msg, data, lines) or line
        field = ".".join(str(p) for p in loc) or "(top level)"
        where = f"{file}:{line}" if line else file
        more = f" (+{len(e.errors()) - 1} more)" if len(e.errors()) > 1 else ""
        raise RubricError(f"{where}: {field}: {msg}{more}") from None


def list_rubrics(folder: str | Path | None = None) -> list[Path]:
    """Bundled rubrics, then any ``*.yaml``/``*.yml`` in ``folder`` (or $RUBRICTOOL_RUBRICS)."""
    paths = sorted(BUNDLED_DIR.glob("*.yaml"))
    extra = folder or os.environ.get("RUBRICTOOL_RUBRICS")
    if extra:
        d = Path(extra)
        if not d.is_dir():
            raise RubricError(f"{d}: not a folder; pass a folder that holds rubric .yaml files")
        paths += sorted([*d.glob("*.yaml"), *d.glob("*.yml")])
    return paths


def resolve_rubric_path(name_or_path: str | Path) -> Path:
    """A path to a file, or the name of a bundled rubric (``mohler``, ``asap2``, ``mocha``)."""
    p = Path(name_or_path)
    if p.suffix in {".yaml", ".yml"} or p.exists():
        if not p.is_file():
            raise RubricError(f"{p}: no such rubric file; check the path or run `rubrictool rubric list`")
        return p
    bundled = BUNDLED_DIR / f"{name_or_path}.yaml"
    if bundled.is_file():
        return bundled
    names = ", ".join(x.stem for x in list_rubrics())
    raise RubricError(f"unknown rubric {str(name_or_path)!r}; bundled rubrics: {names}, or pass a .yaml path")


def load_rubric(name_or_path: str | Path) -> Rubric:
    """Load a bundled rubric by name or a rubric file by path, validated."""
    if isinstance(name_or_path, Rubric):
        return name_or_path
    path = resolve_rubric_path(name_or_path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise RubricError(f"{path}: cannot read the rubric ({e.__class__.__name__}); is it a UTF-8 text file?") from None
    return parse_rubric(text, str(path))
