"""Loading rubrics with line-accurate errors, validating files, and finding bundled and folder rubrics."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from rubrictool.errors import RubricError
from rubrictool.rubric.schema import Rubric

__all__ = [
    "BUNDLED_DIR",
    "RubricInfo",
    "list_rubrics",
    "load_rubric",
    "parse_rubric",
    "resolve_rubric_path",
    "rubric_errors",
    "rubric_infos",
    "validate_rubric_files",
]

BUNDLED_DIR = Path(__file__).resolve().parent.parent / "rubrics"
"""The rubrics that ship with rubrictool (mohler, asap2, mocha)."""


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


MAX_YAML_CHARS = 1_000_000  # a rubric is a few kB; a megabyte is already far more than any real one
MAX_YAML_ALIASES = 100  # `*name` references: a rubric may reuse an anchor a few times, never thousands
MAX_YAML_DEPTH = 50  # nesting of mappings/lists (a rubric nests about 5 deep)
MAX_YAML_NODES = 100_000  # nodes once every alias is expanded: what a reader of the data would walk


def _event_line(ev: yaml.Event) -> int:
    return ev.start_mark.line + 1 if ev.start_mark is not None else 1


def _check_yaml_size(text: str, file: str) -> None:
    """Refuse YAML that would take too long or too much memory to expand (an alias bomb: each level of
    ``&a [*b, *b, ...]`` multiplies the expanded size) before anything walks it: limits on the text
    size, the number of aliases, the nesting depth, and the node count with aliases expanded. The event
    stream is scanned without building anything, so a refusal takes milliseconds."""
    if len(text) > MAX_YAML_CHARS:
        raise RubricError(f"{file}: (yaml): the file has {len(text):,} characters, more than a rubric needs "
                          f"(limit {MAX_YAML_CHARS:,}); is it the right file?")
    aliases = depth = 0
    anchors: dict[str, int] = {}  # anchor → nodes it expands to
    stack: list[tuple[str | None, int]] = []  # open collections: (anchor, nodes so far)
    try:
        for ev in yaml.parse(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # C scanner when built
            if isinstance(ev, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
                depth = len(stack) + 1
                if depth > MAX_YAML_DEPTH:
                    raise RubricError(f"{file}:{_event_line(ev)}: (yaml): nested more than {MAX_YAML_DEPTH} "
                                      "levels deep; a rubric needs a handful")
                stack.append((ev.anchor, 1))
                continue
            if isinstance(ev, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
                anchor, n = stack.pop()
            elif isinstance(ev, yaml.AliasEvent):
                aliases += 1
                if aliases > MAX_YAML_ALIASES:
                    raise RubricError(f"{file}:{_event_line(ev)}: (yaml): more than {MAX_YAML_ALIASES} "
                                      "aliases (*name); write the repeated text out instead")
                anchor, n = None, anchors.get(str(ev.anchor), 1)
            elif isinstance(ev, yaml.ScalarEvent):
                anchor, n = ev.anchor, 1
            else:
                continue
            if anchor is not None:
                anchors[anchor] = n
            if n > MAX_YAML_NODES:
                raise RubricError(f"{file}:{_event_line(ev)}: (yaml): the aliases (*name) expand to more "
                                  f"than {MAX_YAML_NODES:,} values (an alias bomb?); write the rubric out plainly")
            if stack:
                top_anchor, total = stack[-1]
                stack[-1] = (top_anchor, total + n)
    except yaml.YAMLError as e:
        raise _yaml_error(e, file) from None


def _compose(text: str, file: str) -> tuple[dict[str, Any], dict[Loc, int]]:
    """YAML text → (data, key-path → line); syntax errors, duplicate keys, non-mappings and documents that
    expand too far (:func:`_check_yaml_size`) raise."""
    _check_yaml_size(text, file)
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
                msg = (f"duplicate concept key {key!r} (concept #{first_key[key]} has it too); "
                       "every concept needs its own key")
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
            issues.append((("scale",),
                           f"scale is {smin}..{smax} but every concept has levels {v[0]}..{v[-1]}; make them agree"))
        else:
            for i, v in off:
                msg = (
                    f"concept {concepts[i].get('key')} has levels {v[0]}..{v[-1]} but the rubric scale "
                    f"is {smin}..{smax}: every concept must use the same levels"
                )
                issues.append((("concepts", i, "levels"), msg))
    return issues


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _points_issues(data: dict[str, Any]) -> list[tuple[Loc, str]]:
    """The points checks of :func:`rubrictool.rubric.schema._points_problems`, each at the key that is wrong:
    the level without points, the points that fall, the threshold out of order or out of reach."""
    raw_concepts = data.get("concepts")
    concepts = [c if isinstance(c, dict) else {} for c in raw_concepts] if isinstance(raw_concepts, list) else []
    raw_grading = data.get("grading")
    grading: dict[str, Any] = raw_grading if isinstance(raw_grading, dict) else {}
    raw_levels: list[list[Any]] = [c["levels"] if isinstance(c.get("levels"), list) else [] for c in concepts]
    levels = [[lv if isinstance(lv, dict) else {} for lv in lvs] for lvs in raw_levels]
    has = [[_num(lv.get("points")) for lv in lvs] for lvs in levels]
    if not any(p is not None for ps in has for p in ps):
        if raw_grading is not None:
            return [(("grading",),
                     "grading: is set but no level has points: give every level `points:`, or drop grading")]
        return []
    issues: list[tuple[Loc, str]] = []
    for i, (c, lvs, ps) in enumerate(zip(concepts, levels, has)):
        for j, (lv, pt) in enumerate(zip(lvs, ps)):
            if pt is None and "points" not in lv:
                issues.append((("concepts", i, "levels", j),
                               (f"level {lv.get('value')} of concept {c.get('key')} has no "
                               "points: when any level has points, every level needs them")))
        for j in range(1, len(ps)):
            lo, hi = ps[j - 1], ps[j]
            if lo is not None and hi is not None and hi < lo:
                issues.append((("concepts", i, "levels", j, "points"),
                               (f"points of concept {c.get('key')} fall from {lo:g} at level {lvs[j - 1].get('value')} "
                               f"to {hi:g} at level {lvs[j].get('value')}: a higher level must not earn fewer points")))
    if issues or not all(p is not None for ps in has for p in ps) or not all(has):
        return issues
    lo_total = sum(min(p for p in ps if p is not None) for ps in has)
    hi_total = sum(max(p for p in ps if p is not None) for ps in has)
    raw_gs = data.get("grade")
    gs: dict[str, Any] = raw_gs if isinstance(raw_gs, dict) else {}
    gmin, gmax = _int_or_none(gs.get("min")), _int_or_none(gs.get("max"))
    th = grading.get("thresholds")
    if grading.get("map", "linear") == "linear" and hi_total <= lo_total:
        issues.append((("grading", "map"),
                       f"grading map linear needs a range of totals, but every response earns {lo_total:g} points"))
    if grading.get("map") == "thresholds" and isinstance(th, list) and gmin is not None and gmax is not None:
        nums = [_num(t) for t in th]
        if len(th) != gmax - gmin:
            issues.append((("grading", "thresholds"),
                           (f"thresholds has {len(th)} number(s) but grades {gmin}..{gmax} need "
                           f"{gmax - gmin}: the least total for each of grades {gmin + 1}..{gmax}")))
        else:
            for k in range(1, len(nums)):
                a, b = nums[k - 1], nums[k]
                if a is not None and b is not None and b <= a:
                    issues.append((("grading", "thresholds", k), (f"thresholds must rise: threshold {k} ({b:g}) is not "
                                   f"above threshold {k - 1} ({a:g})")))
            for k, t in enumerate(nums):
                if t is not None and not lo_total < t <= hi_total:
                    issues.append((("grading", "thresholds", k),
                                   (f"threshold {k} ({t:g}) is outside the totals a response "
                                   f"can earn ({lo_total:g}..{hi_total:g}]: grade {gmin + k + 1} could never (or "
                                   "always) be given")))
    return issues


_MODEL_LEVEL_CHECKS = ("contiguous", "duplicate concept key", "outside", "rubric scale", "ascending order",
                       "has no points", "must not earn fewer", "no level has points", "thresholds", "range of totals")


def _collect_errors(e: ValidationError, data: dict[str, Any], lines: dict[Loc, int], file: str) -> list[str]:
    """Every problem of one rubric as ``file:line: field: message`` lines, in file order."""
    found: list[tuple[Loc, str]] = _semantic_issues(data) + _points_issues(data)
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
        rubric = Rubric.model_validate(data)
        rubric._source_file, rubric._source_text = file, text
        return rubric
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
    """A rubric by path, else by name in the user rubric folder ($RUBRICTOOL_RUBRICS: ``<name>.yaml``/``.yml``, or a
    file whose ``name:`` is it), else a bundled rubric (``mohler``, ``asap2``, ``mocha``)."""
    p = Path(name_or_path)
    if p.suffix in {".yaml", ".yml"} or p.exists():
        if not p.is_file():
            raise RubricError(f"{p}: no such rubric file; check the path or run `rubrictool rubric list`")
        return p
    name = str(name_or_path)
    user = os.environ.get("RUBRICTOOL_RUBRICS")
    if user and Path(user).is_dir():
        for cand in (Path(user) / f"{name}.yaml", Path(user) / f"{name}.yml"):
            if cand.is_file():
                return cand
        for cand in sorted([*Path(user).glob("*.yaml"), *Path(user).glob("*.yml")]):
            try:
                head = cand.read_text(encoding="utf-8")[:4096]
            except (OSError, UnicodeDecodeError):
                continue
            if re.search(rf"^name:\s*['\"]?{re.escape(name)}['\"]?\s*$", head, re.MULTILINE):
                return cand
    bundled = BUNDLED_DIR / f"{name}.yaml"
    if bundled.is_file():
        return bundled
    where = f" in {user} ($RUBRICTOOL_RUBRICS) or" if user else ""
    names = ", ".join(sorted({x.stem for x in BUNDLED_DIR.glob('*.yaml')}))
    raise RubricError(f"unknown rubric {name!r}: not{where} among the bundled rubrics ({names}); pass a .yaml path "
                      "or put the file in the folder $RUBRICTOOL_RUBRICS names")


def load_rubric(name_or_path: str | Path) -> Rubric:
    """Load a bundled rubric by name or a rubric file by path, validated."""
    if isinstance(name_or_path, Rubric):
        return name_or_path
    path = resolve_rubric_path(name_or_path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise RubricError(f"{path}: cannot read the rubric ({e.__class__.__name__}); is it a UTF-8 text "
                          "file?") from None
    return parse_rubric(text, str(path))




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
