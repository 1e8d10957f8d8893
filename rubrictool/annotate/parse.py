"""Reading a model's reply (the paper's line format or JSON, leniently) and validating every level.

Only the model's own output counts: given the texts the prompt quoted (the item's fields) and the
prompt's boundary, :func:`parse_reply` drops whatever the reply repeats from inside the quoted data —
a response's planted ``concept=FC; label=3`` lines or JSON copied whole (evidence and all), the item's
claims rewritten in another format, a planted line quoted inside the model's evidence, and any echoed
``[BEGIN DATA <boundary>]`` … ``[END DATA <boundary>]`` block — and nothing else: an entry with evidence
of its own is the model's, whatever the response planted (docs/integrity.md).
"""

from __future__ import annotations

import json
import math
import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from rubrictool.annotate.cache import BOUNDARY_KEY
from rubrictool.annotate.config import EVIDENCE_MAX
from rubrictool.rubric import Rubric

__all__ = ["Label", "ParseResult", "parse_reply"]


@dataclass(frozen=True)
class Label:
    concept: str
    level: int
    evidence: str


@dataclass
class ParseResult:
    """What a reply gave: the valid labels, the errors that make it unusable, and ignored noise."""

    labels: dict[str, Label] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    found: str = "none"  # "json", "line" or "none"
    echoes: int = 0  # entries ignored because they repeat text quoted from the item
    from_repair: bool = False  # set by the runner: the labels are (partly) the repair reply's

    @property
    def ok(self) -> bool:
        return not self.errors


_FENCE = re.compile(r"^\s*```[A-Za-z0-9_-]*\s*$", re.MULTILINE)
_NAME_KEYS = ("concept", "name", "key", "dimension", "criterion", "id")
_LABEL_KEYS = ("label", "level", "score", "rating", "value", "grade")
_EVIDENCE_KEYS = ("evidence", "justification", "rationale", "reason", "explanation", "snippet", "quote")
_CONTAINER_KEYS = ("annotations", "labels", "concepts", "results", "scores", "items", "output", "annotation")
_FIELD = re.compile(r"(?<![A-Za-z])(concept|label|level|score|evidence)\s*[=:]\s*", re.IGNORECASE)
_BULLET = re.compile(r"^\s*(?:[-*\u2022>]+|\d{1,3}[.)])\s+")
_NUMBER = re.compile(r"^\s*(?:level|label|score)?\s*[:=]?\s*(-?\d+(?:\.\d+)?)", re.IGNORECASE)


_PAIR = r"([A-Za-z][A-Za-z0-9_]{0,20})\s*[=:]\s*(\d+(?:\.\d+)?)"
_PAIRS = re.compile(_PAIR)
_PAIRS_LINE = re.compile(rf"\s*{_PAIR}(?:\s*[;,|]\s*{_PAIR})+\s*[;,|.]?\s*")
_HEAD = re.compile(r"concept\s*[=:][^;,|\n]*[;,|]\s*(?:label|level|score)\s*[=:]\s*[^\s;,|]+", re.IGNORECASE)


_JSON_KEYED = re.compile(  # "FC": {"label": 2, "evidence": "..."
    r'"([^"{}\n]{1,80})"\s*:\s*\{\s*"(?:label|level|score)"\s*:\s*"?(-?\d+(?:\.\d+)?)"?'
    r'(?:\s*,\s*"(?:evidence|justification|rationale)"\s*:\s*"((?:[^"\\\n]|\\.){0,500}))?',
    re.IGNORECASE,
)
_JSON_LISTED = re.compile(  # {"concept": "FC", "label": 2
    r'\{\s*"(?:concept|name|key)"\s*:\s*"([^"\n]{1,80})"\s*,\s*"(?:label|level|score)"\s*:\s*"?(-?\d+(?:\.\d+)?)',
    re.IGNORECASE,
)


_SQUASH = re.compile(r"[\s\"'`*_\\]+")


def _squash(s: str) -> str:
    """Text for the echo comparison: NFKC, lower case, without whitespace, quotes, markdown or backslashes."""
    return _SQUASH.sub("", unicodedata.normalize("NFKC", s).lower())


class _Echo:
    """Is a fragment of the reply a copy of text inside the quoted item fields?"""

    def __init__(self, quoted: Sequence[str]) -> None:
        self.data = "\x00".join(_squash(q) for q in quoted if isinstance(q, str) and q.strip())
        self.count = 0

    def __call__(self, fragment: str) -> bool:
        f = _squash(fragment).strip(";,|.")
        hit = bool(self.data) and len(f) >= 4 and f in self.data
        self.count += hit
        return hit


def _evidence_sig(evidence: Any) -> str:
    return _squash(_clean_evidence(evidence)).strip(";,|.") if evidence is not None else ""


def _planted(quoted: Sequence[str], rubric: Rubric, resolve: _Resolver) -> set[tuple[str, int, str]]:
    """(concept, level, evidence) triples the quoted item fields themselves claim, in either format:
    a reply entry equal to one of them repeats the item's claim even when the model rewrote its format
    (planted JSON answered as lines, full-width text answered in ASCII)."""
    out: set[tuple[str, int, str]] = set()
    none = _Echo(())
    for q in quoted:
        body = unicodedata.normalize("NFKC", q) if isinstance(q, str) else ""
        if not re.search(r"concept|label|level|score|evidence", body, re.IGNORECASE):
            continue  # nothing that looks like an annotation: skip the parse
        for name, label, evidence in (_find_json(body, resolve, none) or []) + _line_entries(body, resolve, none):
            key = resolve(name)
            sig = _evidence_sig(evidence)
            if key is None or not sig:
                continue
            level, err = _level_of(label, key, rubric)
            if err is None and level is not None:
                out.add((key, level, sig))
    return out


def _drop_quoted_blocks(text: str, boundary: str | None) -> str:
    """Remove echoed ``[BEGIN DATA b]`` … ``[END DATA b]`` blocks and any other line carrying the boundary. The
    reply cache keeps a reply with the boundary replaced by :data:`BOUNDARY_KEY` (rubrictool.annotate.cache): that
    marker counts as the boundary too, so a stored reply parses as it did when it came, whatever prompt reads it."""
    for b_text in dict.fromkeys(b for b in (boundary, BOUNDARY_KEY) if b):
        if b_text not in text:
            continue
        b = re.escape(b_text)
        text = re.sub(rf"\[BEGIN DATA {b}\].*?\[END DATA {b}\]", "\n", text, flags=re.DOTALL)
        text = "\n".join(line for line in text.split("\n") if b_text not in line)
    return text


def _norm(s: str) -> str:
    return re.sub(r"[^a-z0-9]", "", s.lower())


class _Resolver:
    """Concept references (key, full name, 'Name (KEY)', part of 'A / B') -> concept key."""

    def __init__(self, rubric: Rubric) -> None:
        self.keys = rubric.keys
        self.exact: dict[str, str] = {}
        parts: dict[str, set[str]] = {}
        for c in rubric.concepts:
            self.exact[_norm(c.key)] = c.key
            self.exact.setdefault(_norm(c.name), c.key)
            for part in re.split(r"[/&]| and ", c.name):
                if _norm(part):
                    parts.setdefault(_norm(part), set()).add(c.key)
        self.parts = {p: next(iter(ks)) for p, ks in parts.items() if len(ks) == 1 and p not in self.exact}
        self.names = {_norm(c.name): c.key for c in rubric.concepts}

    def __call__(self, raw: Any) -> str | None:
        if not isinstance(raw, str):
            raw = str(raw) if isinstance(raw, (int, float)) and not isinstance(raw, bool) else ""
        s = raw.strip().strip("\"'`*_ ")
        if not s:
            return None
        n = _norm(s)
        if n in self.exact:
            return self.exact[n]
        m = re.search(r"\(([A-Za-z][A-Za-z0-9_]*)\)", s)
        if m and m.group(1) in self.keys:
            return m.group(1)
        head = re.match(r"([A-Za-z][A-Za-z0-9_]*)\s*(?:[-:\u2013\u2014(]|$)", s)
        if head and head.group(1) in self.keys:
            return head.group(1)
        if n in self.parts:
            return self.parts[n]
        hits = {k for name, k in self.names.items() if name and name in n}
        return hits.pop() if len(hits) == 1 else None


_RESOLVERS: dict[int, tuple[Rubric, _Resolver]] = {}


def _resolver(rubric: Rubric) -> _Resolver:
    hit = _RESOLVERS.get(id(rubric))
    if hit is None or hit[0] is not rubric:
        hit = (rubric, _Resolver(rubric))
        _RESOLVERS[id(rubric)] = hit
    return hit[1]


def _level_of(raw: Any, key: str, rubric: Rubric) -> tuple[int | None, str | None]:
    """(level, None) or (None, error)."""
    concept = rubric.concept(key)
    lo, hi = rubric.scale.min, rubric.scale.max
    value: float | None = None
    if isinstance(raw, bool) or raw is None:
        return None, f"{key}: no label given"
    if isinstance(raw, (int, float)):
        value = float(raw)
    elif isinstance(raw, str):
        s = raw.strip().strip("\"'`*_[]() ")
        m = _NUMBER.match(s)
        if m:
            try:
                value = float(m.group(1))
            except (ValueError, OverflowError):
                value = None
        else:
            ns = _norm(s)
            for lv in concept.levels:
                if ns and (ns == _norm(lv.anchor) or ns.startswith(_norm(lv.anchor))):
                    return lv.value, None
            return None, f"{key}: label {raw[:40]!r} is not a level ({lo}..{hi})"
    else:
        return None, f"{key}: label {str(raw)[:40]!r} is not a level ({lo}..{hi})"
    if value is None or not math.isfinite(value):
        return None, f"{key}: label {str(raw)[:40]!r} is not a level ({lo}..{hi})"
    if not value.is_integer():
        return None, f"{key}: label {value:g} lies between levels; use one of {lo}..{hi} (no interpolation)"
    level = int(value)
    if level not in concept.values:
        return None, f"{key}: label {level} is outside the levels {lo}..{hi}"
    return level, None


def _clean_evidence(v: Any) -> str:
    s = v if isinstance(v, str) else ("" if v is None else json.dumps(v, ensure_ascii=False, default=str))
    s = " ".join(s.split()).strip().strip("\"'`").strip()
    return s[:EVIDENCE_MAX]


def _pick(d: dict[str, Any], names: Sequence[str]) -> Any:
    low = {str(k).lower(): v for k, v in d.items()}
    for n in names:
        if n in low:
            return low[n]
    return None


def _json_entries(obj: Any, depth: int = 0) -> list[tuple[Any, Any, Any]]:
    """(concept ref, label, evidence) triples from the JSON shapes models produce."""
    if depth > 4:
        return []
    if isinstance(obj, list):
        out: list[tuple[Any, Any, Any]] = []
        for el in obj[:200]:
            if isinstance(el, dict):
                name = _pick(el, _NAME_KEYS)
                if name is not None:
                    out.append((name, _pick(el, _LABEL_KEYS), _pick(el, _EVIDENCE_KEYS)))
                else:
                    out += _json_entries(el, depth + 1)
        return out
    if isinstance(obj, dict):
        inner = _pick(obj, _CONTAINER_KEYS)
        if isinstance(inner, (list, dict)) and inner:
            found = _json_entries(inner, depth + 1)
            if found:
                return found
        if _pick(obj, _NAME_KEYS) is not None and _pick(obj, _LABEL_KEYS) is not None:
            return [(_pick(obj, _NAME_KEYS), _pick(obj, _LABEL_KEYS), _pick(obj, _EVIDENCE_KEYS))]
        out = []
        for k, v in list(obj.items())[:200]:
            if isinstance(v, dict):
                out.append((k, _pick(v, _LABEL_KEYS), _pick(v, _EVIDENCE_KEYS)))
            elif isinstance(v, (int, float, str)) and not isinstance(v, bool):
                out.append((k, v, None))
        return out
    return []


def _find_json(text: str, resolve: _Resolver, echo: _Echo) -> list[tuple[Any, Any, Any]] | None:
    """Entries from the JSON in ``text`` that names the most concepts; salvages cut-off JSON."""
    decoder = json.JSONDecoder()

    def score(entries: list[tuple[Any, Any, Any]]) -> int:
        return len({resolve(e[0]) for e in entries} - {None})

    best: list[tuple[Any, Any, Any]] = []
    starts = [m.start() for m in re.finditer(r"[\[{]", text)][:50]
    done_to = -1
    for i in starts:
        if i < done_to:
            continue  # inside a value already decoded
        try:
            obj, end = decoder.raw_decode(text, i)
        except (ValueError, RecursionError):
            continue
        done_to = end
        if echo(text[i:end]):
            continue  # JSON copied from the quoted item, not the model's own
        entries = _json_entries(obj)
        if score(entries) > score(best):
            best = entries
    if starts and score(best) < len(resolve.keys):  # cut off at max_tokens? take the entries that are whole
        found = [(m.group(1), m.group(2), m.group(3)) for m in _JSON_KEYED.finditer(text) if not echo(m.group(0))]
        found += [(m.group(1), m.group(2), None) for m in _JSON_LISTED.finditer(text) if not echo(m.group(0))]
        if score(found) > score(best):
            best = found
    return best or None


def _copied_on(chunk: str, head_end: int, evidence: str | None, ev_start: int | None, echo: _Echo) -> bool:
    """Is a ``concept=..; label=..`` head that follows another entry on its line the item's text quoted
    inside that entry's evidence? Yes when the head is copied from the item and the copy goes on into
    its evidence (or it has none of its own); an entry with evidence of its own is the model's."""
    if not evidence or ev_start is None:
        return echo(chunk[:head_end])
    # the head and the first words of its evidence, as one stretch of the item's text
    return echo(chunk[: ev_start + min(len(chunk) - ev_start, 12)])


def _line_entries(text: str, resolve: _Resolver, echo: _Echo) -> list[tuple[Any, Any, Any]]:
    out: list[tuple[Any, Any, Any]] = []
    for raw_line in text.splitlines():
        line = _BULLET.sub("", raw_line.replace("**", "").replace("__", "")).strip()
        if not line:
            continue
        # several entries on one line: split before each "concept="
        chunks = re.split(r"(?=(?<![A-Za-z])concept\s*[=:])", line, flags=re.IGNORECASE)
        after_entry = False  # an earlier chunk of this line holds text: this one may sit inside its evidence
        for chunk in chunks:
            continuation, after_entry = after_entry, after_entry or bool(chunk.strip())
            # a field runs to the next *new* field name, so "level:" inside evidence stays evidence
            fields: dict[str, str] = {}
            starts: dict[str, int] = {}
            cur, start = "", 0
            for m in _FIELD.finditer(chunk):
                name = m.group(1).lower()
                name = "label" if name in ("level", "score") else name
                if name in fields or name == cur:
                    continue
                if cur:
                    fields[cur] = chunk[start : m.start()]
                cur, start = name, m.end()
                starts[name] = start
            if cur:
                fields[cur] = chunk[start:]
            fields = {k: v.strip().rstrip(";,|").strip() for k, v in fields.items()}
            if ("concept" in fields or "label" in fields) and echo(chunk):
                continue  # a line copied from the quoted item, evidence and all: not the model's own
            head = _HEAD.match(chunk) if continuation else None
            if head and _copied_on(chunk, head.end(), fields.get("evidence"), starts.get("evidence"), echo):
                continue  # "concept=..; label=.." quoted inside another entry's evidence, copied from the item
            if "concept" in fields:
                out.append((fields["concept"], fields.get("label"), fields.get("evidence")))
                continue
            # several "<key>=<level>" on one line ("FC=3; CC=2; TU=3"): one entry each, no evidence
            pairs = _PAIRS.findall(chunk)
            if len(pairs) >= 2 and _PAIRS_LINE.fullmatch(chunk) and all(resolve(k) is not None for k, _ in pairs):
                if not echo(chunk):
                    out += [(k, v, None) for k, v in pairs]
                continue
            # "<name>: <level> ..." or "<name> = <level>; evidence..." without the concept= key
            m2 = re.match(r"^(.{1,80}?)\s*[:=\-\u2013\u2014]\s*(\d+(?:\.\d+)?)\b\s*[;,|\-\u2013\u2014:]?\s*(.*)$",
                          chunk)
            if m2 and resolve(m2.group(1)) is not None and not echo(chunk):
                ev = fields.get("evidence", m2.group(3))
                out.append((m2.group(1), m2.group(2), ev))
    return out


def parse_reply(text: Any, rubric: Rubric, quoted: Sequence[str] = (), boundary: str | None = None) -> ParseResult:
    """Read a model's reply (line format or JSON, in code fences or prose) and validate every level.

    ``quoted``: the item fields the prompt quoted; an entry whose text (compared without case,
    whitespace, quotes and markdown) occurs inside one of them is an echo, not the model's output, and
    is ignored (counted in ``echoes``). ``boundary``: the prompt's marker; echoed quoted blocks and
    lines carrying it are dropped. Never raises: anything unusable becomes an entry of ``errors``,
    which the repair round sends back.
    """
    res = ParseResult()
    if not isinstance(text, str) or not text.strip():
        res.errors.append("the reply is empty")
        return res
    resolve = _resolver(rubric)
    body = _FENCE.sub("", text.replace("\r\n", "\n").replace("\ufeff", ""))
    body = _drop_quoted_blocks(body, boundary)
    echo = _Echo(quoted)
    entries = _find_json(body, resolve, echo)
    if entries is not None:
        res.found = "json"
    else:
        entries = _line_entries(body, resolve, echo)
        res.found = "line" if entries else "none"
    planted = _planted(quoted, rubric, resolve)
    conflicts: dict[str, set[int]] = {}
    unknown: list[int] = []  # positions of entries whose concept name is not in the rubric
    for pos, (name, label, evidence) in enumerate(entries):
        key = resolve(name)
        if key is None:
            unknown.append(pos)
            continue
        level, err = _level_of(label, key, rubric)
        if err:
            res.errors.append(err)
            continue
        assert level is not None
        if planted and (key, level, _evidence_sig(evidence)) in planted:
            echo.count += 1  # the item's own claimed label for this concept, evidence and all, rewritten
            continue
        prev = res.labels.get(key)
        if prev is not None and prev.level != level:
            conflicts.setdefault(key, {prev.level}).add(level)
            continue
        if prev is None:
            res.labels[key] = Label(key, level, _clean_evidence(evidence))
    for key, levels in conflicts.items():
        res.labels.pop(key, None)
        res.errors.append(f"{key}: labelled more than once with different levels {sorted(levels)}")
    bad = {e.split(":", 1)[0] for e in res.errors}
    missing = [k for k in rubric.keys if k not in res.labels and k not in bad]
    if (len(missing) == 1 and len(unknown) == 1 and len(entries) == rubric.K
            and unknown[0] == rubric.keys.index(missing[0])):
        # one entry per concept, in the rubric's order, one name garbled (e.g. "CU" for TU) exactly where the
        # only missing concept belongs: read it as that concept instead of paying for a repair round
        name, label, evidence = entries[unknown[0]]
        level, err = _level_of(label, missing[0], rubric)
        if err is None and level is not None:
            res.labels[missing[0]] = Label(missing[0], level, _clean_evidence(evidence))
            res.warnings.append(f"read the entry for unknown concept {str(name)[:40]!r} as {missing[0]} "
                                f"(the only missing concept, in its position)")
            unknown, missing = [], []
    res.echoes = echo.count
    if echo.count:
        res.warnings.append(f"ignored {echo.count} entr{'y' if echo.count == 1 else 'ies'} that repeat text quoted "
                            "from the item (not the model's own output)")
    for pos in unknown:
        res.warnings.append(f"ignored an entry for unknown concept {str(entries[pos][0])[:40]!r}")
    if res.found == "none":
        res.errors.append(
            "no annotation found: expected one line per concept 'concept=<key>; label=<level>; evidence=<text>' or JSON"
        )
    elif missing:
        names = ", ".join(repr(str(entries[pos][0])[:40]) for pos in unknown)
        res.errors.append(f"missing concept(s) {', '.join(missing)}"
                          + (f" (not concept keys of this rubric: {names})" if unknown else ""))
    return res
