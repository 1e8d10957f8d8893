"""Rubric inventories: the YAML schema, loading with line-accurate errors, and lookup of bundled rubrics.

A rubric is a list of concepts, each with a definition and one anchor descriptor per ordinal level,
plus the grade scale of the benchmark. Every stage reads it: the annotation prompt, the Label Studio
interface, agreement/adjudication (level validation) and the trainer (M, S, concept keys).
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from rubrictool.errors import RubricError

__all__ = [
    "BUNDLED_DIR",
    "Concept",
    "Example",
    "Level",
    "LintWarning",
    "Rubric",
    "RubricInfo",
    "Scale",
    "export_json",
    "export_markdown",
    "export_rubric",
    "lint_rubric",
    "list_rubrics",
    "load_rubric",
    "new_rubric_file",
    "parse_rubric",
    "resolve_rubric_path",
    "rubric_errors",
    "rubric_infos",
    "scaffold_rubric",
    "validate_rubric_files",
    "write_export",
    "write_scaffold",
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

Loc = tuple[Any, ...]


def _dotted(loc: Loc) -> str:
    return ".".join(str(p) for p in loc) or "(top level)"


def _node_lines(node: yaml.Node, path: Loc, out: dict[Loc, int], file: str) -> None:
    """Map every key path (``("concepts", 2, "levels", 1, "anchor")``) to its 1-based line."""
    out[path] = node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        seen: dict[Any, int] = {}
        for knode, vnode in node.value:
            line = knode.start_mark.line + 1
            if not isinstance(knode, yaml.ScalarNode):
                raise RubricError(
                    f"{file}:{line}: {_dotted(path)}: a key must be a plain name, not a list or mapping; "
                    "check the brackets on that line"
                )
            key = knode.value
            if key in seen:
                raise RubricError(
                    f"{file}:{line}: {_dotted(path + (key,))}: duplicate key {key!r} (first at line "
                    f"{seen[key]}); remove one of them"
                )
            seen[key] = line
            _node_lines(vnode, path + (key,), out, file)
            out[path + (key,)] = line
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _node_lines(item, path + (i,), out, file)


def _line_for(loc: Loc, lines: dict[Loc, int]) -> int | None:
    for n in range(len(loc), -1, -1):
        if loc[:n] in lines:
            return lines[loc[:n]]
    return None


def _yaml_error(e: yaml.YAMLError, file: str) -> RubricError:
    mark = getattr(e, "problem_mark", None)
    ctx_mark = getattr(e, "context_mark", None)
    where = f"{file}:{mark.line + 1}" if mark is not None else file
    problem = " ".join((getattr(e, "problem", None) or str(e).splitlines()[0]).split())
    ctx = getattr(e, "context", None)
    started = ""
    if ctx and ctx_mark is not None and (mark is None or ctx_mark.line != mark.line):
        started = f" ({ctx.removeprefix('while ')} started at line {ctx_mark.line + 1})"
    return RubricError(f"{where}: (yaml): YAML syntax error: {problem}{started}; fix the indentation/quoting there")


def _compose(text: str, file: str) -> tuple[dict[str, Any], dict[Loc, int]]:
    """YAML text → (data, key-path → line); syntax errors, duplicate keys and non-mappings raise."""
    try:
        root = yaml.compose(text)
    except yaml.YAMLError as e:
        raise _yaml_error(e, file) from None
    if root is None:
        raise RubricError(f"{file}:1: (top level): the file is empty; start from `rubrictool rubric new`")
    lines: dict[Loc, int] = {}
    _node_lines(root, (), lines, file)
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:  # e.g. an unknown !tag: the text parses but cannot be constructed
        raise _yaml_error(e, file) from None
    if not isinstance(data, dict):
        raise RubricError(f"{file}:1: (top level): a rubric must be a YAML mapping (name:, concepts:, ...)")
    return data, lines


def _int_or_none(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _semantic_issues(data: dict[str, Any]) -> list[tuple[Loc, str]]:
    """Cross-field checks on the raw YAML, each located at the exact key that is wrong.

    They repeat what the model validators enforce, but the validators can only point at a whole
    concept; here the location is the offending key, level or example.
    """
    issues: list[tuple[Loc, str]] = []
    concepts = data.get("concepts")
    if not isinstance(concepts, list):
        return issues
    raw_scale = data.get("scale")
    scale: dict[str, Any] = raw_scale if isinstance(raw_scale, dict) else {}
    smin, smax = _int_or_none(scale.get("min")), _int_or_none(scale.get("max"))
    scale_values = list(range(smin, smax + 1)) if smin is not None and smax is not None else None
    first_key: dict[str, int] = {}
    concept_values: list[tuple[int, list[int]]] = []
    for i, c in enumerate(concepts):
        if not isinstance(c, dict):
            continue
        key = c.get("key")
        if isinstance(key, str):
            if key in first_key:
                msg = f"duplicate concept key {key!r} (concept #{first_key[key]} has it too); every concept needs its own key"
                issues.append((("concepts", i, "key"), msg))
            else:
                first_key[key] = i
        label = key if isinstance(key, str) else f"#{i}"
        levels = c.get("levels")
        values: list[int] = []
        if isinstance(levels, list):
            raw = [_int_or_none(lv.get("value")) if isinstance(lv, dict) else None for lv in levels]
            if raw and all(v is not None for v in raw):
                values = [v for v in raw if v is not None]
                expected = list(range(min(values), min(values) + len(values)))
                for j, (got, want) in enumerate(zip(values, expected)):
                    if got != want:
                        msg = (
                            f"levels of concept {label} are {values}; they must be contiguous integers in "
                            f"ascending order, so this level should be {want} (e.g. {expected})"
                        )
                        issues.append((("concepts", i, "levels", j, "value"), msg))
                        values = []
                        break
        if values:
            concept_values.append((i, values))
        lo_hi = (values[0], values[-1]) if values else (
            (scale_values[0], scale_values[-1]) if scale_values else None
        )
        examples = c.get("examples")
        if lo_hi and isinstance(examples, list):
            for j, ex in enumerate(examples):
                lvl = _int_or_none(ex.get("level")) if isinstance(ex, dict) else None
                if lvl is not None and not lo_hi[0] <= lvl <= lo_hi[1]:
                    msg = f"example {j} of concept {label} has level {lvl}, outside its levels {lo_hi[0]}..{lo_hi[1]}"
                    issues.append((("concepts", i, "examples", j, "level"), msg))
    if scale_values is not None and concept_values:
        off = [(i, v) for i, v in concept_values if v != scale_values]
        if off and len(off) == len(concept_values) and len({tuple(v) for _, v in off}) == 1:
            v = off[0][1]
            issues.append((("scale",), f"scale is {smin}..{smax} but every concept has levels {v[0]}..{v[-1]}; make them agree"))
        else:
            for i, v in off:
                msg = (
                    f"concept {concepts[i].get('key')} has levels {v[0]}..{v[-1]} but the rubric scale "
                    f"is {smin}..{smax}: every concept must use the same levels"
                )
                issues.append((("concepts", i, "levels"), msg))
    return issues


_MODEL_LEVEL_CHECKS = ("contiguous", "duplicate concept key", "outside", "rubric scale", "ascending order")


def _collect_errors(e: ValidationError, data: dict[str, Any], lines: dict[Loc, int], file: str) -> list[str]:
    """Every problem of one rubric as ``file:line: field: message`` lines, in file order."""
    found: list[tuple[Loc, str]] = _semantic_issues(data)
    for err in e.errors():
        loc = tuple(err["loc"])
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "value_error" and found and any(s in msg for s in _MODEL_LEVEL_CHECKS):
            continue  # the same problem, already located precisely above
        if err["type"] == "extra_forbidden":
            msg = f"unknown field {loc[-1]!r}; check its spelling against the schema (rubrictool rubric new)"
        elif err["type"] == "missing":
            msg = f"required field {loc[-1]!r} is missing"
        found.append((loc, msg))
    out: list[tuple[int, str]] = []
    for loc, msg in found:
        line = _line_for(loc, lines)
        where = f"{file}:{line}" if line else file
        out.append((line or 0, f"{where}: {_dotted(loc)}: {msg}"))
    seen: set[str] = set()
    ordered = []
    for _, m in sorted(out, key=lambda t: t[0]):
        if m not in seen:
            seen.add(m)
            ordered.append(m)
    return ordered


def rubric_errors(text: str, file: str = "<string>") -> list[str]:
    """All problems of rubric YAML text, one ``file:line: field: message`` string each ([] when valid)."""
    try:
        data, lines = _compose(text, file)
    except RubricError as e:
        return [str(e)]
    try:
        Rubric.model_validate(data)
    except ValidationError as e:
        return _collect_errors(e, data, lines, file) or [f"{file}: (top level): {e.errors()[0]['msg']}"]
    return []


def parse_rubric(text: str, file: str = "<string>") -> Rubric:
    """Parse and validate rubric YAML text; the error names ``file:line``, the field and the fix."""
    data, lines = _compose(text, file)
    try:
        return Rubric.model_validate(data)
    except ValidationError as e:
        errors = _collect_errors(e, data, lines, file) or [f"{file}: (top level): {e.errors()[0]['msg']}"]
        more = f" (+{len(errors) - 1} more; see `rubrictool rubric validate {file}`)" if len(errors) > 1 else ""
        raise RubricError(errors[0] + more) from None


def validate_rubric_files(paths: list[str | Path]) -> dict[str, list[str]]:
    """Check each rubric file; map its path to its problems (an empty list when it is valid)."""
    out: dict[str, list[str]] = {}
    for p in paths:
        path = Path(p)
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            out[str(path)] = [f"{path}: no such file; check the path"]
            continue
        except (OSError, UnicodeDecodeError) as e:
            out[str(path)] = [f"{path}: cannot read it ({e.__class__.__name__}); is it a UTF-8 text file?"]
            continue
        out[str(path)] = rubric_errors(text, str(path))
    return out


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


# -- listing ---------------------------------------------------------------------------------------------------


class RubricInfo(BaseModel):
    """One line of ``rubric list``: a rubric file and what it holds, or why it does not load."""

    path: Path
    bundled: bool
    name: str
    title: str = ""
    version: str = ""
    n_concepts: int = 0
    scale: str = ""
    grade: str = ""
    error: str | None = None


def rubric_infos(folder: str | Path | None = None) -> list[RubricInfo]:
    """Summaries of the bundled rubrics and those in ``folder``; broken files are listed with their error."""
    out = []
    for path in list_rubrics(folder):
        bundled = path.parent.resolve() == BUNDLED_DIR.resolve()
        try:
            r = load_rubric(path)
        except RubricError as e:
            out.append(RubricInfo(path=path, bundled=bundled, name=path.stem, error=str(e)))
            continue
        out.append(
            RubricInfo(
                path=path, bundled=bundled, name=r.name, title=r.title, version=r.version, n_concepts=r.K,
                scale=f"{r.scale.min}..{r.scale.max}", grade=f"{r.grade.min}..{r.grade.max}",
            )
        )
    return out


# -- lint --------------------------------------------------------------------------------------------------------


class LintWarning(BaseModel):
    """Something a rubric designer should look at; not an error (the rubric still loads)."""

    model_config = ConfigDict(frozen=True)

    code: str
    where: str
    message: str

    def __str__(self) -> str:
        return f"{self.where}: {self.code}: {self.message}"


def _norm(text: str) -> str:
    return " ".join(text.lower().replace("/", " ").split()).strip(" .")


_STOP_WORDS = frozenset(
    ["a", "about", "above", "after", "again", "all", "also", "an", "and", "any", "are", "as", "at", "be", "been", "being", "below", "between", "both", "but", "by", "can", "could", "did", "do", "does", "doing", "during", "each", "either", "few", "for", "from", "further", "had", "has", "have", "having", "how", "i", "if", "in", "into", "is", "it", "its", "itself", "just", "may", "might", "more", "most", "much", "must", "no", "nor", "not", "of", "off", "on", "once", "only", "or", "other", "our", "out", "over", "own", "same", "should", "so", "some", "such", "than", "that", "the", "their", "them", "then", "there", "these", "they", "this", "those", "through", "to", "too", "under", "until", "up", "very", "was", "we", "were", "what", "when", "where", "whether", "which", "while", "who", "whom", "why", "will", "with", "within", "without", "would", "you", "your"]
)


def _definition_similarity(texts: list[str]) -> np.ndarray[Any, np.dtype[np.float64]] | None:
    """Pairwise TF-IDF cosine similarity (smooth idf, l2 rows, English stop words removed).

    A few lines of numpy rather than scikit-learn: the same numbers for short texts, and
    ``rubric lint`` starts in well under a second.
    """
    docs = [[w for w in re.findall(r"[a-z0-9]+", t.lower()) if w not in _STOP_WORDS and len(w) > 1] for t in texts]
    vocab = sorted({w for d in docs for w in d})
    if not vocab:
        return None
    index = {w: i for i, w in enumerate(vocab)}
    tf = np.zeros((len(docs), len(vocab)))
    for r, d in enumerate(docs):
        for w in d:
            tf[r, index[w]] += 1
    df = (tf > 0).sum(axis=0)
    idf = np.log((1 + len(docs)) / (1 + df)) + 1
    x = tf * idf
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    x = np.divide(x, norms, out=np.zeros_like(x), where=norms > 0)
    return np.asarray(x @ x.T)


def lint_rubric(rubric: Rubric, similarity: float = 0.5) -> list[LintWarning]:
    """Warnings a rubric designer wants before annotators see the rubric.

    * ``near-duplicate-definition``: two definitions whose TF-IDF cosine similarity (stop words
      removed, idf from this rubric's definitions) is at least ``similarity`` — the paper's
      non-redundancy criterion; the bundled rubrics peak at 0.37.
    * ``repeated-anchor``: the same anchor text on two levels of one concept (raters cannot tell
      the levels apart), or on two concepts (check they really mean the same thing).
    * ``no-examples`` / ``level-without-example``: reviewers anchor on examples.
    * ``placeholder``: TODO text left from ``rubrictool rubric new``.
    """
    warns: list[LintWarning] = []
    concepts = rubric.concepts
    sim = _definition_similarity([c.definition for c in concepts]) if len(concepts) > 1 else None
    for i in range(len(concepts)):
        for j in range(i + 1, len(concepts)):
            a, b = concepts[i], concepts[j]
            score = float(sim[i, j]) if sim is not None else 0.0
            if score >= similarity or _norm(a.definition) == _norm(b.definition):
                warns.append(LintWarning(
                    code="near-duplicate-definition", where=f"concepts.{a.key}+{b.key}",
                    message=f"definitions of {a.key} and {b.key} are {score:.2f} similar (threshold "
                    f"{similarity}); make each concept measure something distinct, or merge them",
                ))
    seen_anchor: dict[str, str] = {}
    for c in concepts:
        within: dict[str, int] = {}
        for lv in c.levels:
            n = _norm(lv.anchor)
            if n in within:
                warns.append(LintWarning(
                    code="repeated-anchor", where=f"concepts.{c.key}.levels.{lv.value}",
                    message=f"level {lv.value} of {c.key} has the same anchor as level {within[n]} "
                    f"({lv.anchor!r}); every level needs its own descriptor",
                ))
            else:
                within[n] = lv.value
            owner = seen_anchor.get(n)
            if owner is not None and not owner.startswith(f"{c.key}."):
                warns.append(LintWarning(
                    code="repeated-anchor", where=f"concepts.{c.key}.levels.{lv.value}",
                    message=f"anchor {lv.anchor!r} is also used by {owner}; say what is specific to {c.name}",
                ))
            seen_anchor.setdefault(n, f"{c.key}.{lv.value}")
        if not c.examples:
            warns.append(LintWarning(
                code="no-examples", where=f"concepts.{c.key}.examples",
                message=f"{c.key} has no examples; add at least one excerpt per level for reviewers",
            ))
        else:
            covered = {ex.level for ex in c.examples}
            missing = [v for v in c.values if v not in covered]
            if missing:
                warns.append(LintWarning(
                    code="level-without-example", where=f"concepts.{c.key}.examples",
                    message=f"{c.key} has no example for level(s) {', '.join(map(str, missing))}",
                ))
        texts = [c.name, c.definition, *(lv.anchor for lv in c.levels), *(ex.text for ex in c.examples)]
        if any("TODO" in t for t in texts):
            warns.append(LintWarning(
                code="placeholder", where=f"concepts.{c.key}",
                message=f"{c.key} still holds TODO placeholder text from `rubrictool rubric new`",
            ))
    for attr in ("title", "description"):
        if "TODO" in getattr(rubric, attr):
            warns.append(LintWarning(code="placeholder", where=attr, message=f"{attr} still holds TODO text"))
    return warns


# -- scaffolding -------------------------------------------------------------------------------------------------

_SCAFFOLD_HEAD = """\
# Rubric inventory for {title}.
# Made by `rubrictool rubric new`; check it with `rubrictool rubric validate {file}` and
# `rubrictool rubric lint {file}`. Replace every TODO.
#
# Design criteria (REC-CBM paper, appendix "Rubric Definitions"):
#   * cover the rubric axes that decide the holistic grade,
#   * keep concepts non-redundant (each one adds distinct evidence),
#   * give every level an anchor descriptor an expert can apply consistently.

name: {name}          # file/rubric id: letters, digits, _ . -
title: {title_q}
version: "0.1"        # bump it whenever definitions or anchors change; runs record it
description: >-
  TODO: one or two sentences on the course, the task and who graded it.
source: null          # where the rubric comes from (paper, syllabus, ...)

# The item-table columns the benchmark fills, and what each holds. Only `response` is required;
# allowed keys: question, response, reference, context.
fields:
  question: The question asked to the student.
  response: The student's answer.
  reference: The instructor's reference answer.

# Ordinal concept levels shared by every concept (REC-CBM's M = max - min).
scale: {{min: 1, max: {levels}}}
# The holistic grade scale of the course (REC-CBM's S = max - min).
grade: {{min: {gmin}, max: {gmax}}}

concepts:
"""

_SCAFFOLD_CONCEPT = """\
  - key: {key}             # short id used in label files and model outputs
    name: TODO name of {key}
    group: null          # optional cluster, e.g. "Correctness and coverage"
    definition: >-
      TODO: the extent to which the answer ... (what {key} measures, in one sentence).
    levels:              # contiguous, ascending; one anchor descriptor per level
{levels}
    examples:            # illustrative excerpts for reviewers (optional question/reference/note)
      - {{text: "TODO: an excerpt of a response at the top level", level: {top}, note: TODO why}}
"""


def scaffold_rubric(
    name: str, keys: list[str], levels: int = 3, grade_min: int = 0, grade_max: int = 5,
    title: str | None = None, file: str | None = None,
) -> str:
    """The text of a commented rubric YAML for a new course; it validates and loads as is."""
    if not re.match(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", name):
        raise RubricError(f"rubric name {name!r}: use letters, digits, '_', '.' or '-' (e.g. cs101)")
    if not keys:
        raise RubricError("give at least one concept key, e.g. --concepts FC,CC,TU")
    bad = [k for k in keys if not re.match(_KEY_PATTERN, k)]
    if bad:
        raise RubricError(f"concept key(s) {bad}: a key starts with a letter then letters, digits or '_'")
    dups = sorted({k for k in keys if keys.count(k) > 1})
    if dups:
        raise RubricError(f"concept key(s) {dups} given twice; every concept needs its own key")
    if levels < 2:
        raise RubricError(f"--levels {levels}: a concept needs at least 2 ordinal levels")
    if grade_max <= grade_min:
        raise RubricError(f"grade scale {grade_min}..{grade_max}: max must be greater than min")
    t = title or f"{name} (TODO: course title)"
    head = _SCAFFOLD_HEAD.format(
        name=name, title=t, title_q=json.dumps(t), levels=levels, gmin=grade_min, gmax=grade_max,
        file=file or f"{name}.yaml",
    )
    body = []
    for k in keys:
        lv = "\n".join(
            f'      - {{value: {v}, anchor: "TODO: what a level-{v} response shows for {k}"}}'
            for v in range(1, levels + 1)
        )
        body.append(_SCAFFOLD_CONCEPT.format(key=k, levels=lv, top=levels))
    text = head + "".join(body)
    parse_rubric(text, file or f"{name}.yaml")  # the scaffold must always load
    return text


def write_scaffold(path: str | Path, text: str, force: bool = False) -> Path:
    """Write a scaffolded rubric atomically; refuse to overwrite an existing file unless ``force``."""
    p = Path(path)
    if p.exists() and not force:
        raise RubricError(f"{p}: already exists; pick another --out or pass --force to overwrite it")
    p.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=p.parent)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)
    os.replace(tmp, p)
    return p


# -- exports and display -------------------------------------------------------------------------------------------


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _example_md(c: Concept, ex: Example) -> str:
    parts = []
    if ex.question:
        parts.append(f"*Q:* {ex.question}")
    if ex.reference:
        parts.append(f"*Reference:* “{ex.reference}”")
    tag = f"{c.key}={ex.level}" + (f", {ex.note}" if ex.note else "")
    parts.append(f"*Response:* “{ex.text}” ({tag})")
    return "<br>".join(parts)


def export_markdown(rubric: Rubric) -> str:
    """The rubric as a Markdown table laid out like the paper's appendix tables."""
    summary = (
        f"**{rubric.title}** — `{rubric.name}` v{rubric.version}: {rubric.K} concepts on levels "
        f"{rubric.scale.min}–{rubric.scale.max}; grades {rubric.grade.min}–{rubric.grade.max}."
    )
    lines = [
        summary,
        "",
        "| Concept | Definition | Example | Score scale |",
        "|---|---|---|---|",
    ]
    for c in rubric.concepts:
        examples = "<br>".join(_example_md(c, ex) for ex in c.examples) or "—"
        scale = "<br>".join(f"{lv.value} = {lv.anchor}" for lv in c.levels)
        lines.append(
            f"| {_md_cell(c.name)} ({c.key}) | {_md_cell(c.definition)} | {_md_cell(examples)} | {_md_cell(scale)} |"
        )
    return "\n".join(lines) + "\n"


def export_json(rubric: Rubric) -> str:
    """The validated rubric as JSON (what any other tool can read without a YAML parser)."""
    return json.dumps(rubric.model_dump(mode="json", exclude_none=True), indent=2, ensure_ascii=False) + "\n"


def export_rubric(name_or_path: str | Path, fmt: str = "markdown") -> str:
    """Load a rubric and render it as ``markdown`` or ``json``."""
    rubric = load_rubric(name_or_path)
    if fmt == "markdown":
        return export_markdown(rubric)
    if fmt == "json":
        return export_json(rubric)
    raise RubricError(f"unknown export format {fmt!r}; use markdown or json")


def new_rubric_file(
    out: str | Path, name: str, keys: list[str], levels: int = 3, grade_min: int = 0, grade_max: int = 5,
    title: str | None = None, force: bool = False,
) -> Path:
    """Scaffold a rubric (:func:`scaffold_rubric`) and write it to ``out`` (``rubric new``)."""
    text = scaffold_rubric(name, keys, levels, grade_min, grade_max, title, file=str(out))
    return write_scaffold(out, text, force=force)


def write_export(name_or_path: str | Path, fmt: str, out: str | Path | None = None) -> str:
    """Render a rubric (:func:`export_rubric`) and, when ``out`` is given, write it there atomically."""
    text = export_rubric(name_or_path, fmt)
    if out is not None:
        write_scaffold(out, text, force=True)
    return text
