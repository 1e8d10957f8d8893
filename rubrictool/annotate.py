"""LLM pre-annotation: render the rubric prompt, call models through litellm, parse, cache, account.

The paper's annotation stage asks GPT-4o and Gemini-2.5-pro to label every response on every rubric
concept with the prompt of its Appendix "Annotation Pipeline" (``templates/annotate.prompt.j2``).
This module does that for any litellm model string:

1. :func:`render_prompt` fills the template with the item, the rubric and optional in-context examples.
2. :func:`annotate` runs every (item, model) pair with asyncio (``concurrency`` requests per model),
   retrying rate limits, timeouts and 5xx with exponential back-off, and asks once more (a *repair*
   round that sends the parse error back) when a reply cannot be used.
3. :func:`parse_reply` reads the paper's line format ``concept=<name>; label=<level>; evidence=<text>``
   or JSON, leniently, and validates each level against the rubric.
4. :class:`ReplyCache` (SQLite, WAL, one commit per reply) keys replies by model + rendered messages +
   sampling parameters, so a second run makes no call and a killed run resumes without paying twice.
5. Token usage and cost come from litellm; ``budget`` (USD) reserves each request's worst case before
   sending it, so the run stops cleanly before the budget could be exceeded.

The result is the tidy PredictionTable (``item, model, concept, level, evidence, raw_ok`` + usage)
plus failure records with the raw replies and a per-model summary.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import logging
import math
import multiprocessing as mp
import os
import queue as queue_mod
import random
import re
import sqlite3
import sys
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import jinja2
import pandas as pd

from rubrictool.data import load_benchmark
from rubrictool.errors import AnnotateError, DataError
from rubrictool.io import read_table, write_table
from rubrictool.progress import Progress, ProgressFn
from rubrictool.rubric import Rubric, load_rubric
from rubrictool.tables import PREDICTION_COLUMNS, read_items

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # litellm must not fetch its price map

__all__ = [
    "DEFAULT_MODELS",
    "DEFAULT_TEMPLATE",
    "OUTPUT_FORMATS",
    "USAGE_COLUMNS",
    "AnnotateConfig",
    "AnnotateResult",
    "ContextExample",
    "DryRunModel",
    "DryRunReport",
    "Label",
    "ModelSummary",
    "ParseResult",
    "ReplyCache",
    "annotate",
    "cache_key",
    "dry_run",
    "load_examples",
    "load_inputs",
    "load_template",
    "output_paths",
    "output_schema",
    "parse_reply",
    "render_prompt",
    "repair_message",
    "response_format_for",
    "write_outputs",
]

USAGE_COLUMNS = ["repaired", "cached", "prompt_tokens", "completion_tokens", "cost_usd", "error"]
DEFAULT_MODELS = ("gpt-4o", "gemini/gemini-2.5-pro")
OUTPUT_FORMATS = ("line", "json")
DEFAULT_TEMPLATE = Path(__file__).resolve().parent / "templates" / "annotate.prompt.j2"
_CACHE_VERSION = 1
_EVIDENCE_MAX = 500
_EST_EVIDENCE = "the response states the key idea but omits the reason given in the reference"


# == configuration ===========================================================================================


@dataclass(frozen=True)
class AnnotateConfig:
    """Everything that decides which requests are made and how. Fields that change the reply are in the cache key."""

    models: tuple[str, ...] = DEFAULT_MODELS  # litellm model strings, e.g. "gpt-4o", "openai/<alias>"
    format: str = "line"  # "line": the paper's concept=..; label=..; evidence=..  "json": a JSON object + schema
    template: Path | None = None  # None: the bundled templates/annotate.prompt.j2
    examples: Path | None = None  # in-context examples (table with response + one level column per concept)
    benchmark: str | None = None  # the name shown to the model; default the rubric's name
    api_base: str | None = None  # a local OpenAI-compatible server (Ollama, vLLM, llama.cpp)
    api_key_env: str | None = None  # read the key from this env var (never printed or stored)
    concurrency: int = 8  # requests in flight per model
    timeout: float = 120.0  # seconds per request
    max_retries: int = 4  # retries after the first attempt on 429 / timeout / 5xx / connection errors
    backoff: float = 1.0  # first back-off in seconds; doubles each retry (full jitter), capped at 60 s
    temperature: float = 0.0
    max_tokens: int = 1024  # also the worst case the budget reserves per request
    budget: float | None = None  # USD for this run; None: no limit
    limit: int | None = None  # annotate only the first N items
    cache: Path | None = Path(".rubrictool/cache.sqlite")  # None: no cache
    # Client processes. Each draws items from a shared counter with concurrency/workers requests in
    # flight and budget/workers USD; all share the reply cache. >1 helps only when the client's CPU
    # (7-10 ms per litellm call) is the limit: a fast local server at high concurrency (see README).
    # None: auto (see auto_workers).
    workers: int | None = None

    def check(self) -> None:
        if not self.models:
            raise AnnotateError("no model given; pass --model (e.g. --model gpt-4o)")
        if self.format not in OUTPUT_FORMATS:
            raise AnnotateError(f"unknown reply format {self.format!r}; use line or json")
        for name, v, lo in (("concurrency", self.concurrency, 1), ("max-tokens", self.max_tokens, 1), ("workers", 1 if self.workers is None else self.workers, 1)):
            if v < lo:
                raise AnnotateError(f"--{name} must be at least {lo}, got {v}")
        if self.max_retries < 0:
            raise AnnotateError(f"--max-retries must be 0 or more, got {self.max_retries}")
        if not self.timeout > 0:
            raise AnnotateError(f"--timeout must be positive, got {self.timeout}")
        if self.budget is not None and not self.budget > 0:
            raise AnnotateError(f"--budget must be a positive amount in USD, got {self.budget}")
        if self.limit is not None and self.limit < 1:
            raise AnnotateError(f"--limit must be at least 1, got {self.limit}")
        if len(set(self.models)) != len(self.models):
            raise AnnotateError(f"a model is given twice in {list(self.models)}; pass each --model once")

    @property
    def sampling(self) -> dict[str, Any]:
        return {"temperature": self.temperature, "max_tokens": self.max_tokens}


# == prompt ==================================================================================================


@dataclass(frozen=True)
class ContextExample:
    """An in-context example: an input and the annotation it should get (rendered in the run's format)."""

    response: str
    labels: dict[str, tuple[int, str]]  # concept key -> (level, evidence)
    question: str = ""
    reference: str = ""
    context: str = ""


def load_template(path: str | Path | None = None) -> Any:
    """The jinja2 template (bundled by default); syntax errors name file:line."""

    p = Path(path) if path is not None else DEFAULT_TEMPLATE
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise AnnotateError(f"{p}: cannot read the template ({e.__class__.__name__}); pass a UTF-8 jinja2 file") from None
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=False, autoescape=False)
    try:
        tpl = env.from_string(text)
    except jinja2.TemplateSyntaxError as e:
        raise AnnotateError(f"{p}:{e.lineno}: template syntax error: {e.message}") from None
    tpl.filename = str(p)
    return tpl


def _level_column(df: pd.DataFrame, key: str) -> str | None:
    for c in (key, key.lower(), f"label_{key}", f"{key}_label"):
        if c in df.columns:
            return c
    return None


def load_examples(path: str | Path, rubric: Rubric) -> list[ContextExample]:
    """In-context examples from a CSV/JSONL/Parquet table.

    Columns: ``response`` (required), ``question``, ``reference``, ``context``, one level column per
    concept key (e.g. ``FC``) and optionally ``<KEY>_evidence``.
    """

    p = Path(path)
    try:
        df = read_table(p)
    except DataError as e:
        raise AnnotateError(str(e)) from None
    if "response" not in df.columns:
        raise AnnotateError(f"{p}: examples need a 'response' column (and one level column per concept: {', '.join(rubric.keys)})")
    missing = [k for k in rubric.keys if _level_column(df, k) is None]
    if missing:
        raise AnnotateError(f"{p}: examples lack level column(s) {', '.join(missing)}; add one column per concept key")
    out: list[ContextExample] = []
    for i, row in enumerate(df.to_dict(orient="records"), 1):
        labels: dict[str, tuple[int, str]] = {}
        for c in rubric.concepts:
            col = _level_column(df, c.key)
            raw = row.get(col) if col else None
            level = _as_level(raw)
            if level is None or level not in c.values:
                raise AnnotateError(
                    f"{p}: row {i}: column {col}: level {raw!r} is not one of {c.values} (rubric {rubric.name})"
                )
            ev = row.get(f"{c.key}_evidence") or row.get(f"evidence_{c.key}") or ""
            labels[c.key] = (level, _text(ev))
        resp = row.get("response")
        if not isinstance(resp, str) or not resp.strip():
            raise AnnotateError(f"{p}: row {i}: empty response; every example needs one")
        out.append(
            ContextExample(
                response=resp,
                labels=labels,
                question=_text(row.get("question")),
                reference=_text(row.get("reference")),
                context=_text(row.get("context")),
            )
        )
    return out


def _as_level(v: Any) -> int | None:
    if isinstance(v, bool) or v is None:
        return None
    if isinstance(v, str):
        v = v.strip()
        return int(float(v)) if re.fullmatch(r"-?\d+(\.0+)?", v) else None
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return int(f) if math.isfinite(f) and f.is_integer() else None


def _text(v: Any) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return ""
    return str(v)


def format_labels(labels: dict[str, tuple[int, str]], rubric: Rubric, fmt: str) -> str:
    """An annotation in the requested output format (used for in-context examples and estimates)."""
    if fmt == "json":
        return json.dumps({k: {"label": lv, "evidence": ev} for k, (lv, ev) in labels.items()}, ensure_ascii=False)
    return "\n".join(f"concept={k}; label={lv}; evidence={ev}" for k, (lv, ev) in labels.items())


def _rubric_definitions(rubric: Rubric) -> str:
    """Definition and score scale of every concept, as the paper inserts them.

    The rubric's illustrative excerpts are left out on purpose: the paper says they "are not consumed
    by the pipeline and serve only as anchors for the human reviewers", and small local models copy
    them as evidence and labels (seen with Qwen2.5-Coder-1.5B). Templates still get them as
    ``concepts[].examples``.
    """
    lines = []
    for c in rubric.concepts:
        levels = "; ".join(f"{lv.value} = {lv.anchor}" for lv in c.levels)
        lines.append(f"- {c.key} ({c.name}): {c.definition} Levels: {levels}.")
    return "\n".join(lines)


def render_prompt(
    item: dict[str, Any],
    rubric: Rubric,
    template: Any = None,
    examples: Sequence[ContextExample] = (),
    fmt: str = "line",
    benchmark: str | None = None,
) -> str:
    """The annotation prompt for one item (a row of an ItemTable) — deterministic, so it can key the cache."""

    tpl = template if template is not None else load_template()
    concepts = [
        {
            "key": c.key,
            "name": c.name,
            "definition": c.definition,
            "levels": [(lv.value, lv.anchor) for lv in c.levels],
            "examples": [(ex.text, ex.level) for ex in c.examples],
        }
        for c in rubric.concepts
    ]
    ctx = {
        "benchmark": benchmark or rubric.name,
        "question": _text(item.get("question")),
        "response": _text(item.get("response")),
        "reference": _text(item.get("reference")),
        "context": _text(item.get("context")),
        "fields": dict(rubric.fields),
        "concepts": concepts,
        "keys": rubric.keys,
        "levels": rubric.scale.values,
        "concept_list": ", ".join(f"{c.key} ({c.name})" for c in rubric.concepts),
        "rubric_definitions": _rubric_definitions(rubric),
        "examples": [
            {
                "question": ex.question,
                "reference": ex.reference,
                "context": ex.context,
                "response": ex.response,
                "output": format_labels(ex.labels, rubric, fmt),
            }
            for ex in examples
        ],
        "format": fmt,
    }
    try:
        return str(tpl.render(**ctx)).strip() + "\n"
    except jinja2.UndefinedError as e:
        where = getattr(tpl, "filename", "template")
        raise AnnotateError(
            f"{where}: {e.message}; the template may use: {', '.join(sorted(ctx))}"
        ) from None
    except jinja2.TemplateError as e:
        raise AnnotateError(f"{getattr(tpl, 'filename', 'template')}: cannot render: {e}") from None


def output_schema(rubric: Rubric) -> dict[str, Any]:
    """JSON schema of the JSON output mode: one object per concept key with an integer label and evidence."""
    props = {
        c.key: {
            "type": "object",
            "properties": {
                "label": {"type": "integer", "enum": c.values},
                "evidence": {"type": "string"},
            },
            "required": ["label", "evidence"],
            "additionalProperties": False,
        }
        for c in rubric.concepts
    }
    return {"type": "object", "properties": props, "required": rubric.keys, "additionalProperties": False}


# litellm provider prefixes for an OpenAI-compatible server at --api-base: openai/ goes through the OpenAI
# SDK, hosted_vllm/ through litellm's own HTTP handler (10-25 % less client CPU per call; README).
LOCAL_SERVER_PREFIXES = ("openai/", "hosted_vllm/")


def response_format_for(model: str, rubric: Rubric, fmt: str, api_base: str | None) -> dict[str, Any] | None:
    """What to send as ``response_format``: a JSON schema where the provider supports one, else JSON mode."""
    if fmt != "json":
        return None
    schema = output_schema(rubric)
    if api_base and model.startswith(LOCAL_SERVER_PREFIXES):
        # a local OpenAI-compatible server: llama.cpp (and vLLM) take the schema with json_object and
        # enforce it by grammar; a hosted provider behind a proxy goes through the check below
        return {"type": "json_object", "schema": schema}
    litellm = _litellm()
    try:
        if litellm.supports_response_schema(model=model):
            return {"type": "json_schema", "json_schema": {"name": "concept_annotation", "schema": schema, "strict": True}}
    except Exception:  # noqa: BLE001,S110 - litellm raises many types for unknown models: plain JSON mode
        pass
    return {"type": "json_object"}


def repair_message(result: ParseResult, rubric: Rubric, fmt: str) -> str:
    """The follow-up turn of the repair round: what was wrong and the exact format to use."""
    problems = "; ".join(result.errors) or "the reply could not be read"
    levels = ", ".join(str(v) for v in rubric.scale.values)
    if fmt == "json":
        shape = '{"' + rubric.keys[0] + '": {"label": <level>, "evidence": "<brief evidence>"}, ...}'
    else:
        shape = "concept=<key>; label=<level>; evidence=<brief evidence>   (one line per concept)"
    return (
        f"Your reply could not be used: {problems}. Reply again with exactly one entry for each of the "
        f"{rubric.K} concepts ({', '.join(rubric.keys)}), each label one of {levels}, and nothing else, "
        f"in the format:\n{shape}"
    )


# == reply parsing ===========================================================================================


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


_JSON_KEYED = re.compile(  # "FC": {"label": 2, "evidence": "..."
    r'"([^"{}\n]{1,80})"\s*:\s*\{\s*"(?:label|level|score)"\s*:\s*"?(-?\d+(?:\.\d+)?)"?'
    r'(?:\s*,\s*"(?:evidence|justification|rationale)"\s*:\s*"((?:[^"\\\n]|\\.){0,500}))?',
    re.IGNORECASE,
)
_JSON_LISTED = re.compile(  # {"concept": "FC", "label": 2
    r'\{\s*"(?:concept|name|key)"\s*:\s*"([^"\n]{1,80})"\s*,\s*"(?:label|level|score)"\s*:\s*"?(-?\d+(?:\.\d+)?)',
    re.IGNORECASE,
)


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
    return s[:_EVIDENCE_MAX]


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


def _find_json(text: str, resolve: _Resolver) -> list[tuple[Any, Any, Any]] | None:
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
        entries = _json_entries(obj)
        if score(entries) > score(best):
            best = entries
    if starts and score(best) < len(resolve.keys):  # cut off at max_tokens? take the entries that are whole
        found = [(m.group(1), m.group(2), m.group(3)) for m in _JSON_KEYED.finditer(text)]
        found += [(m.group(1), m.group(2), None) for m in _JSON_LISTED.finditer(text)]
        if score(found) > score(best):
            best = found
    return best or None


def _line_entries(text: str, resolve: _Resolver) -> list[tuple[Any, Any, Any]]:
    out: list[tuple[Any, Any, Any]] = []
    for raw_line in text.splitlines():
        line = _BULLET.sub("", raw_line.replace("**", "").replace("__", "")).strip()
        if not line:
            continue
        # several entries on one line: split before each "concept="
        chunks = re.split(r"(?=(?<![A-Za-z])concept\s*[=:])", line, flags=re.IGNORECASE)
        for chunk in chunks:
            # a field runs to the next *new* field name, so "level:" inside evidence stays evidence
            fields: dict[str, str] = {}
            cur, start = "", 0
            for m in _FIELD.finditer(chunk):
                name = m.group(1).lower()
                name = "label" if name in ("level", "score") else name
                if name in fields or name == cur:
                    continue
                if cur:
                    fields[cur] = chunk[start : m.start()]
                cur, start = name, m.end()
            if cur:
                fields[cur] = chunk[start:]
            fields = {k: v.strip().rstrip(";,|").strip() for k, v in fields.items()}
            if "concept" in fields:
                out.append((fields["concept"], fields.get("label"), fields.get("evidence")))
                continue
            # "<name>: <level> ..." or "<name> = <level>; evidence..." without the concept= key
            m2 = re.match(r"^(.{1,80}?)\s*[:=\-\u2013\u2014]\s*(\d+(?:\.\d+)?)\b\s*[;,|\-\u2013\u2014:]?\s*(.*)$", chunk)
            if m2 and resolve(m2.group(1)) is not None:
                ev = fields.get("evidence", m2.group(3))
                out.append((m2.group(1), m2.group(2), ev))
    return out


def parse_reply(text: Any, rubric: Rubric) -> ParseResult:
    """Read a model's reply (line format or JSON, in code fences or prose) and validate every level.

    Never raises: anything unusable becomes an entry of ``errors``, which the repair round sends back.
    """
    res = ParseResult()
    if not isinstance(text, str) or not text.strip():
        res.errors.append("the reply is empty")
        return res
    resolve = _resolver(rubric)
    body = _FENCE.sub("", text.replace("\r\n", "\n").replace("\ufeff", ""))
    entries = _find_json(body, resolve)
    if entries is not None:
        res.found = "json"
    else:
        entries = _line_entries(body, resolve)
        res.found = "line" if entries else "none"
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
    if len(missing) == 1 and len(unknown) == 1 and len(entries) == rubric.K and unknown[0] == rubric.keys.index(missing[0]):
        # one entry per concept, in the rubric's order, one name garbled (e.g. "CU" for TU) exactly where the
        # only missing concept belongs: read it as that concept instead of paying for a repair round
        name, label, evidence = entries[unknown[0]]
        level, err = _level_of(label, missing[0], rubric)
        if err is None and level is not None:
            res.labels[missing[0]] = Label(missing[0], level, _clean_evidence(evidence))
            res.warnings.append(f"read the entry for unknown concept {str(name)[:40]!r} as {missing[0]} "
                                f"(the only missing concept, in its position)")
            unknown, missing = [], []
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


# == cache ===================================================================================================


def cache_key(model: str, messages: Sequence[dict[str, Any]], params: dict[str, Any]) -> str:
    """sha256 of the model string, the rendered messages and the sampling parameters (not key, base, timeout)."""
    payload = json.dumps(
        {"v": _CACHE_VERSION, "model": model, "messages": list(messages), "params": params},
        sort_keys=True,
        ensure_ascii=False,
        separators=(",", ":"),
    )
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class CachedReply:
    text: str
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float


class ReplyCache:
    """Model replies in SQLite (WAL; each reply committed on arrival, so a killed run loses nothing paid)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.conn = sqlite3.connect(str(self.path), timeout=30, isolation_level=None)
            self.conn.execute("PRAGMA journal_mode=WAL")
            self.conn.execute("PRAGMA synchronous=NORMAL")
            self.conn.execute(
                "CREATE TABLE IF NOT EXISTS replies (key TEXT PRIMARY KEY, model TEXT NOT NULL, reply TEXT NOT NULL,"
                " prompt_tokens INTEGER NOT NULL, completion_tokens INTEGER NOT NULL, cost_usd REAL NOT NULL,"
                " latency_s REAL NOT NULL, created REAL NOT NULL)"
            )
        except sqlite3.Error as e:
            raise AnnotateError(f"{self.path}: cannot open the reply cache ({e}); pass another --cache path") from None

    def get(self, key: str) -> CachedReply | None:
        row = self.conn.execute(
            "SELECT reply, prompt_tokens, completion_tokens, cost_usd FROM replies WHERE key = ?", (key,)
        ).fetchone()
        return CachedReply(row[0], int(row[1]), int(row[2]), float(row[3])) if row else None

    def put(self, key: str, model: str, reply: CachedReply, latency_s: float) -> None:
        with self.conn:  # one atomic transaction per reply
            self.conn.execute(
                "INSERT OR REPLACE INTO replies VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (key, model, reply.text, reply.prompt_tokens, reply.completion_tokens, reply.cost_usd, latency_s, time.time()),
            )

    def __len__(self) -> int:
        return int(self.conn.execute("SELECT COUNT(*) FROM replies").fetchone()[0])

    def close(self) -> None:
        self.conn.close()


class _NoCache:
    def get(self, key: str) -> CachedReply | None:
        return None

    def put(self, key: str, model: str, reply: CachedReply, latency_s: float) -> None:
        pass

    def close(self) -> None:
        pass


# == litellm =================================================================================================


def _litellm() -> Any:
    import litellm

    litellm.suppress_debug_info = True  # no "Give Feedback" banners on stdout
    litellm.telemetry = False
    for name in ("LiteLLM", "LiteLLM Router", "LiteLLM Proxy"):  # rubrictool reports failures itself
        logging.getLogger(name).setLevel(logging.ERROR)
    return litellm


_RATES: dict[str, tuple[float, float] | None] = {}


def _rates(model: str) -> tuple[float, float] | None:
    """USD per prompt token and per completion token from litellm's bundled cost map (memoised)."""
    if model not in _RATES:
        litellm = _litellm()
        try:
            # priced at a request-sized 1,000 tokens: larger counts would hit long-context tiers
            # (Gemini 2.5 Pro doubles its price above 200k prompt tokens per request)
            a, _ = litellm.cost_per_token(model=model, prompt_tokens=1000, completion_tokens=0)
            _, b = litellm.cost_per_token(model=model, prompt_tokens=0, completion_tokens=1000)
            _RATES[model] = (float(a) / 1000, float(b) / 1000)
        except Exception:  # noqa: BLE001 - litellm raises several types for an unpriced model
            _RATES[model] = None
    return _RATES[model]


def _price(model: str, prompt_tokens: int, completion_tokens: int) -> float | None:
    """USD for a request (linear rates: the long-context tiers of some models are not modelled); None: unknown."""
    r = _rates(model)
    return None if r is None else r[0] * prompt_tokens + r[1] * completion_tokens


def _count_tokens(model: str, messages: Sequence[dict[str, Any]] | None = None, text: str | None = None) -> int:
    litellm = _litellm()
    try:
        if messages is not None:
            return int(litellm.token_counter(model=model, messages=list(messages)))
        return int(litellm.token_counter(model=model, text=text or ""))
    except Exception:  # noqa: BLE001 - unknown tokenizer: ~4 characters per token
        n = sum(len(str(m.get("content", ""))) for m in messages) if messages is not None else len(text or "")
        return max(1, n // 4)


def _retryable(e: BaseException) -> bool:
    litellm = _litellm()
    if isinstance(e, (asyncio.TimeoutError, TimeoutError)):
        return True
    retry_types = (
        litellm.RateLimitError,
        litellm.Timeout,
        litellm.InternalServerError,
        litellm.ServiceUnavailableError,
        litellm.BadGatewayError,
        litellm.APIConnectionError,
    )
    if isinstance(e, retry_types):
        return True
    status = getattr(e, "status_code", None)
    return isinstance(status, int) and (status == 429 or status >= 500)


def _fatal(e: BaseException) -> bool:
    """Errors that will fail every request of the model: stop instead of failing item by item."""
    litellm = _litellm()
    return isinstance(e, (litellm.AuthenticationError, litellm.PermissionDeniedError, litellm.NotFoundError))


def _retry_after(e: BaseException) -> float | None:
    headers = getattr(e, "litellm_response_headers", None)
    try:
        v = headers.get("retry-after") if headers is not None else None
        return min(float(v), 60.0) if v is not None else None
    except (TypeError, ValueError, AttributeError):
        return None


def _short_error(e: BaseException, secrets: Iterable[str] = ()) -> str:
    msg = " ".join(str(e).split())
    for s in secrets:
        if s:
            msg = msg.replace(s, "***")
    return f"{e.__class__.__name__}: {msg[:300] or '(no message)'}"


# == the run =================================================================================================


@dataclass
class ModelSummary:
    """Per model: what was done, what failed, what it cost (this run) and how long it took."""

    model: str
    items: int = 0  # items finished (ok + failed)
    ok: int = 0
    failures: int = 0
    repaired: int = 0
    cached_items: int = 0  # items answered entirely from the cache
    requests: int = 0  # HTTP requests sent (incl. retries)
    retries: int = 0
    prompt_tokens: int = 0  # tokens of the replies received in this run (cache hits excluded)
    completion_tokens: int = 0
    cost_usd: float = 0.0
    price_known: bool = True
    seconds: float = 0.0  # wall time from the model's first request to its last reply
    stopped_by_budget: bool = False


@dataclass
class AnnotateResult:
    predictions: pd.DataFrame
    failures: list[dict[str, Any]]
    summary: dict[str, ModelSummary]
    stopped_by_budget: bool = False
    total_items: int = 0
    fatal: dict[str, str] = field(default_factory=dict)  # model -> why it was stopped (wrong key, unknown model)
    workers: int = 1  # client processes the run used

    @property
    def cost_usd(self) -> float:
        return sum(s.cost_usd for s in self.summary.values())


class _BudgetStop(Exception):
    pass


class _CallFailed(Exception):
    def __init__(self, message: str, fatal: bool = False) -> None:
        super().__init__(message)
        self.fatal = fatal


class _Budget:
    """Reserve each request's worst case (prompt + max_tokens) before sending; settle with the real cost."""

    def __init__(self, limit: float | None) -> None:
        self.limit = limit
        self.spent = 0.0
        self.reserved = 0.0
        self.stopped = False

    def reserve(self, amount: float) -> None:
        if self.limit is None:
            return
        if self.stopped or self.spent + self.reserved + amount > self.limit:
            self.stopped = True
            raise _BudgetStop()
        self.reserved += amount

    def settle(self, reserved: float, actual: float) -> None:
        if self.limit is not None:
            self.reserved -= reserved
        self.spent += actual


@dataclass
class _Reply:
    text: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0  # paid in this run (0 for a cache hit)
    cached: bool = False


class _Runner:
    def __init__(self, rubric: Rubric, config: AnnotateConfig, cache: ReplyCache | _NoCache) -> None:
        self.rubric = rubric
        self.config = config
        self.cache = cache
        self.budget = _Budget(config.budget)
        self.summary = {m: ModelSummary(model=m) for m in config.models}
        self.failures: list[dict[str, Any]] = []
        self.rows: list[dict[str, Any]] = []
        self.inflight: dict[str, asyncio.Future[_Reply]] = {}
        self.fatal: dict[str, str] = {}
        self.api_key = os.environ.get(config.api_key_env) if config.api_key_env else None
        # values that must never reach a message: the key in use and every key-like env variable
        self.secrets = [self.api_key or ""] + [
            v for k, v in os.environ.items() if re.search(r"(KEY|TOKEN|SECRET)$", k) and len(v) >= 8
        ]
        self.response_formats = {
            m: response_format_for(m, rubric, config.format, config.api_base) for m in config.models
        }
        self.started: dict[str, float] = {}
        self.on_progress: Any = None
        self._kwargs: dict[str, dict[str, Any]] = {}

    def _call_kwargs(self, model: str) -> dict[str, Any]:
        """What every litellm call for ``model`` carries besides messages and sampling (worked out once:
        the provider-key lookup is not free, and a fast local server makes every millisecond count)."""
        if model not in self._kwargs:
            cfg = self.config
            kw: dict[str, Any] = {"model": model, "timeout": cfg.timeout, "max_retries": 0, "drop_params": True}
            if cfg.api_base:
                kw["api_base"] = cfg.api_base
            if self.api_key is not None:
                kw["api_key"] = self.api_key
            elif cfg.api_base and not _has_provider_key(model):
                kw["api_key"] = "sk-no-key"  # local servers need none, but the OpenAI client wants one
            self._kwargs[model] = kw
        return self._kwargs[model]

    @property
    def stopped_by_budget(self) -> bool:
        return self.budget.stopped

    def _params(self, model: str) -> dict[str, Any]:
        p = dict(self.config.sampling)
        rf = self.response_formats[model]
        if rf is not None:
            p["response_format"] = rf
        return p

    async def call(self, model: str, messages: list[dict[str, Any]]) -> _Reply:
        params = self._params(model)
        key = cache_key(model, messages, params)
        hit = self.cache.get(key)
        if hit is not None:
            return _Reply(hit.text, hit.prompt_tokens, hit.completion_tokens, 0.0, cached=True)
        if key in self.inflight:  # the same prompt is already being asked: pay once
            r = await asyncio.shield(self.inflight[key])
            return _Reply(r.text, r.prompt_tokens, r.completion_tokens, 0.0, cached=True)
        fut: asyncio.Future[_Reply] = asyncio.get_running_loop().create_future()
        self.inflight[key] = fut
        try:
            reply = await self._fetch(model, messages, params, key)
            fut.set_result(reply)
            return reply
        except BaseException as e:
            if isinstance(e, asyncio.CancelledError):
                fut.cancel()
            else:
                fut.set_exception(e)
                fut.exception()  # mark retrieved: waiting duplicates re-raise it, nobody else must
            raise
        finally:
            del self.inflight[key]

    async def _fetch(self, model: str, messages: list[dict[str, Any]], params: dict[str, Any], key: str) -> _Reply:
        litellm = _litellm()
        cfg = self.config
        s = self.summary[model]
        worst = 0.0
        if cfg.budget is not None:
            p = _price(model, int(_count_tokens(model, messages) * 1.1) + 16, cfg.max_tokens)
            worst = p or 0.0
        kwargs: dict[str, Any] = dict(self._call_kwargs(model), messages=messages, **params)
        last: str = ""
        for attempt in range(cfg.max_retries + 1):
            if model in self.fatal:
                raise _CallFailed(self.fatal[model], fatal=True)
            self.budget.reserve(worst)
            self.started.setdefault(model, time.monotonic())
            s.requests += 1
            s.retries += attempt > 0
            t0 = time.monotonic()
            timed_out = False
            try:
                resp = await asyncio.wait_for(litellm.acompletion(**kwargs), timeout=cfg.timeout + 10)
            except BaseException as e:
                timed_out = isinstance(e, (asyncio.TimeoutError, TimeoutError, litellm.Timeout))
                # a timed-out request may still be billed: keep its worst case as spent
                self.budget.settle(worst, worst if timed_out else 0.0)
                if isinstance(e, (asyncio.CancelledError, KeyboardInterrupt)):
                    raise
                last = _short_error(e, self.secrets)
                if _fatal(e):
                    raise _CallFailed(last, fatal=True) from None
                if not _retryable(e):
                    raise _CallFailed(last) from None
                if attempt == cfg.max_retries:
                    break
                delay = _retry_after(e) or random.uniform(0, min(60.0, cfg.backoff * 2**attempt))
                await asyncio.sleep(delay)
                continue
            text = _reply_text(resp)
            pt, ct = _usage(resp)
            price = _response_cost(resp) if _rates(model) is not None else None
            if price is None:
                price = _price(model, pt, ct)
            if price is None:
                s.price_known = False  # a local alias: counted as free, reported as "no price"
            cost = price or 0.0
            self.budget.settle(worst, cost)
            reply = _Reply(text, pt, ct, cost)
            self.cache.put(key, model, CachedReply(text, pt, ct, cost), time.monotonic() - t0)
            s.prompt_tokens += pt
            s.completion_tokens += ct
            s.cost_usd += cost
            return reply
        raise _CallFailed(f"gave up after {cfg.max_retries + 1} attempts: {last}")

    async def annotate_item(self, model: str, item_id: str, prompt: str) -> None:
        s = self.summary[model]
        messages: list[dict[str, Any]] = [{"role": "user", "content": prompt}]
        replies: list[_Reply] = []
        error = ""
        result: ParseResult | None = None
        try:
            first = await self.call(model, messages)
            replies.append(first)
            result = _safe_parse(first.text, self.rubric)
            if not result.ok:
                fix = messages + [
                    {"role": "assistant", "content": first.text},
                    {"role": "user", "content": repair_message(result, self.rubric, self.config.format)},
                ]
                second = await self.call(model, fix)
                replies.append(second)
                again = _safe_parse(second.text, self.rubric)
                merged = {**result.labels, **again.labels}
                only_missing = all(e.startswith("missing concept") for e in again.errors)
                if again.ok:
                    result = again
                elif only_missing and all(k in merged for k in self.rubric.keys):
                    result = ParseResult(labels=merged, found=again.found)  # the repair gave what was missing
                else:
                    result = again if len(again.labels) >= len(result.labels) else result
                    error = "; ".join(again.errors or result.errors)
        except _CallFailed as e:
            error = str(e)
            if e.fatal:
                self.fatal.setdefault(model, f"model {model}: {e}")
        s.items += 1
        ok = result is not None and result.ok and not error
        repaired = len(replies) == 2 and ok
        s.ok += ok
        s.failures += not ok
        s.repaired += repaired
        all_cached = bool(replies) and all(r.cached for r in replies)
        s.cached_items += all_cached
        pt = sum(r.prompt_tokens for r in replies)
        ct = sum(r.completion_tokens for r in replies)
        cost = sum(r.cost_usd for r in replies)
        labels = result.labels if result is not None else {}
        for key in self.rubric.keys:
            lab = labels.get(key)
            self.rows.append(
                {
                    "item": item_id,
                    "model": model,
                    "concept": key,
                    "level": lab.level if lab else None,
                    "evidence": lab.evidence if lab else None,
                    "raw_ok": ok,
                    "repaired": repaired,
                    "cached": all_cached,
                    "prompt_tokens": pt,
                    "completion_tokens": ct,
                    "cost_usd": cost,
                    "error": None if ok else error,
                }
            )
        if not ok:
            self.failures.append(
                {
                    "item": item_id,
                    "model": model,
                    "error": error,
                    "reply": replies[0].text if replies else None,
                    "repair_reply": replies[1].text if len(replies) > 1 else None,
                }
            )
        if model in self.started:
            s.seconds = time.monotonic() - self.started[model]

    async def run_model(self, model: str, jobs: list[tuple[str, str]], take: Callable[[], int] | None = None) -> None:
        """Annotate ``jobs`` with ``model`` at the configured concurrency.

        ``take`` hands out the index of the next job (-1: none left). Worker processes share one counter
        per model, so whoever has a free slot takes the next item and no process idles while another
        still has a backlog; without it, this process takes every job in order.
        """
        if take is None:
            nxt = iter(range(len(jobs)))

            def take() -> int:
                return next(nxt, -1)

        async def worker() -> None:
            while not self.budget.stopped and model not in self.fatal:
                i = take()
                if i < 0:
                    return
                item_id, prompt = jobs[i]
                try:
                    await self.annotate_item(model, item_id, prompt)
                except _BudgetStop:
                    self.summary[model].stopped_by_budget = True
                    return
                if self.on_progress is not None:
                    self.on_progress(model)

        await asyncio.gather(*(worker() for _ in range(min(self.config.concurrency, max(1, len(jobs))))))


def _safe_parse(text: str, rubric: Rubric) -> ParseResult:
    try:
        return parse_reply(text, rubric)
    except Exception as e:  # noqa: BLE001 - parse_reply is fuzzed never to raise; a run must survive regardless
        return ParseResult(errors=[f"unreadable reply ({e.__class__.__name__})"])


def _reply_text(resp: Any) -> str:
    try:
        content = resp.choices[0].message.content
    except (AttributeError, IndexError, KeyError, TypeError):
        return ""
    return content if isinstance(content, str) else ""


def _response_cost(resp: Any) -> float | None:
    """The cost litellm computed for this response (it knows provider-specific pricing), if any."""
    try:
        v = resp._hidden_params.get("response_cost")
    except AttributeError:
        return None
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None


def _usage(resp: Any) -> tuple[int, int]:
    u = getattr(resp, "usage", None)
    pt = getattr(u, "prompt_tokens", 0) if u is not None else 0
    ct = getattr(u, "completion_tokens", 0) if u is not None else 0
    return int(pt or 0), int(ct or 0)


def _has_provider_key(model: str) -> bool:
    litellm = _litellm()
    try:
        return bool(litellm.validate_environment(model=model).get("keys_in_environment"))
    except Exception:  # noqa: BLE001 - an unknown provider: assume no key
        return False


def _check_keys(config: AnnotateConfig) -> None:
    if config.api_key_env:
        if not os.environ.get(config.api_key_env):
            raise AnnotateError(f"--api-key-env {config.api_key_env}: that environment variable is not set or empty")
        return
    if config.api_base:
        return
    litellm = _litellm()
    for m in config.models:
        try:
            env = litellm.validate_environment(model=m)
        except Exception:  # noqa: BLE001,S112 - unknown provider: litellm will report a missing key itself
            continue
        if not env.get("keys_in_environment"):
            missing = ", ".join(env.get("missing_keys") or []) or "its API key"
            raise AnnotateError(
                f"model {m} needs {missing} in the environment (keys are read from the environment only); "
                "or pass --api-base for a local OpenAI-compatible server"
            )


def _prepare(
    items: pd.DataFrame, rubric: Rubric, config: AnnotateConfig
) -> list[tuple[str, str]]:
    config.check()
    if "id" not in items.columns or "response" not in items.columns:
        raise AnnotateError("the item table needs 'id' and 'response' columns")
    rows = items.head(config.limit) if config.limit else items
    template = load_template(config.template)
    examples = load_examples(config.examples, rubric) if config.examples else []
    return [
        (str(r["id"]), render_prompt({str(k): v for k, v in r.items()}, rubric, template, examples, config.format, config.benchmark))
        for r in rows.to_dict(orient="records")
    ]


def _open_cache(config: AnnotateConfig) -> ReplyCache | _NoCache:
    return ReplyCache(config.cache) if config.cache is not None else _NoCache()


def annotate(
    items: pd.DataFrame,
    rubric: Rubric,
    config: AnnotateConfig,
    progress: ProgressFn | None = None,
) -> AnnotateResult:
    """Annotate every item with every model; returns predictions, failure records and a summary per model.

    ``progress`` gets one task per model (items done; info: cost, tokens, failures) and, in a single
    process, a ``total`` task over all models (info: the cost so far).

    Raises :class:`AnnotateError` for bad settings (missing key, unknown template, a budget for a model
    without a known price) before anything is sent, and when a model refuses every request (wrong key,
    unknown model) — what was already answered stays in the cache.
    """
    jobs = _prepare(items, rubric, config)
    _check_keys(config)
    if config.budget is not None:
        unpriced = [m for m in config.models if _price(m, 1000, 1000) is None]
        if unpriced:
            raise AnnotateError(
                f"no price for {', '.join(unpriced)} in litellm's cost map, so --budget cannot be enforced; "
                "drop --budget for local models, or use a priced model string"
            )
    t_start = time.monotonic()
    runner: _Runner | _ShardResult
    n_workers = auto_workers(config, len(jobs))
    if n_workers > 1:
        runner = _run_workers(rubric, config, jobs, progress)
    else:
        cache = _open_cache(config)
        runner = _Runner(rubric, config, cache)
        try:
            _run_with_progress(runner, jobs, progress)
        finally:
            cache.close()
    if runner.fatal and not any(s.ok for s in runner.summary.values()):
        raise AnnotateError("; ".join(runner.fatal.values()))
    df = pd.DataFrame(runner.rows, columns=PREDICTION_COLUMNS + USAGE_COLUMNS)
    if len(df):
        order = {m: i for i, m in enumerate(config.models)}
        keys = {k: i for i, k in enumerate(rubric.keys)}
        ids = {j[0]: i for i, j in enumerate(jobs)}
        df = df.sort_values(
            by=["model", "item", "concept"],
            key=lambda c: c.map(order if c.name == "model" else ids if c.name == "item" else keys),
            kind="stable",
        ).reset_index(drop=True)
    df["level"] = df["level"].astype("Int64")
    for s in runner.summary.values():
        s.seconds = round(s.seconds or (time.monotonic() - t_start if s.items else 0.0), 3)
    return AnnotateResult(
        predictions=df,
        failures=runner.failures,
        summary=runner.summary,
        stopped_by_budget=runner.stopped_by_budget,
        total_items=len(jobs),
        fatal=dict(runner.fatal),
        workers=n_workers,
    )


def _run_with_progress(
    runner: _Runner, jobs: list[tuple[str, str]], progress: ProgressFn | None,
    takes: dict[str, Callable[[], int]] | None = None,
) -> None:
    async def main() -> None:
        await asyncio.gather(*(runner.run_model(m, jobs, (takes or {}).get(m)) for m in runner.config.models))

    if progress is not None:
        report = progress
        done = dict.fromkeys(runner.config.models, 0)
        n_total = len(jobs) * len(runner.config.models)

        def update(model: str) -> None:
            s = runner.summary[model]
            tok = s.prompt_tokens + s.completion_tokens
            done[model] += 1
            report(Progress(model, done[model], len(jobs), f"${s.cost_usd:.4f} {tok:,} tok {s.failures} failed"))
            cost = sum(x.cost_usd for x in runner.summary.values())
            report(Progress("total", sum(done.values()), n_total, f"${cost:.4f}"))

        for m in runner.config.models:
            report(Progress(m, 0, len(jobs)))
        report(Progress("total", 0, n_total, "$0.0000"))
        runner.on_progress = update
    asyncio.run(main())


# == several client processes ===============================================================================


@dataclass
class _ShardResult:
    """What one worker process hands back: the same fields annotate() reads from a _Runner."""

    rows: list[dict[str, Any]]
    failures: list[dict[str, Any]]
    summary: dict[str, ModelSummary]
    fatal: dict[str, str]
    stopped_by_budget: bool


# auto workers: requests in flight per client process, and the smallest run worth starting processes for
AUTO_IN_FLIGHT_PER_WORKER = 8
AUTO_MIN_ITEMS = 64


def auto_workers(config: AnnotateConfig, n_jobs: int) -> int:
    """Client processes for ``--workers`` auto: one, except for a local server (``api_base``) at a
    concurrency above 8 with at least 64 items, where one process per 8 requests in flight (at most two
    per CPU) keeps each event loop's queue of replies short. Measured: 32 in flight against a server
    answering in 200 ms reach 61-67 % of the ideal rate in one process, 71-82 % in two, 80-87 % in four
    on 2 cores (bench/bench_annotate_throughput.py, README). A hosted API answering in seconds never needs more
    than one."""
    if config.workers is not None:
        return max(1, min(config.workers, config.concurrency, n_jobs))
    if not config.api_base or n_jobs < AUTO_MIN_ITEMS or config.concurrency <= AUTO_IN_FLIGHT_PER_WORKER:
        return 1
    cap = 2 * (os.cpu_count() or 1)
    return max(1, min(-(-config.concurrency // AUTO_IN_FLIGHT_PER_WORKER), cap, n_jobs))


def _shard_configs(config: AnnotateConfig, n_jobs: int) -> list[AnnotateConfig]:
    """One config per worker: the concurrency split exactly (never more requests in flight than asked),
    the budget split evenly; at most one worker per request in flight and per item."""
    w = auto_workers(config, n_jobs)
    return [
        dataclasses.replace(
            config,
            workers=1,
            concurrency=config.concurrency // w + (1 if i < config.concurrency % w else 0),
            budget=config.budget / w if config.budget is not None else None,
        )
        for i in range(w)
    ]


def _exit_with(parent: int) -> None:
    """Worker side: end this process as soon as the annotate() process is gone (even after SIGKILL)."""

    def watch() -> None:
        while True:
            time.sleep(0.25)
            try:
                os.kill(parent, 0)
            except (ProcessLookupError, PermissionError):  # gone, or the pid now belongs to someone else
                os._exit(1)

    threading.Thread(target=watch, daemon=True, name="rubrictool-parent-watch").start()


def _shared_take(counter: Any, n: int) -> Callable[[], int]:
    """The next job index from a counter in shared memory that all worker processes draw from (-1: done)."""

    def take() -> int:
        with counter.get_lock():
            i = counter.value
            if i >= n:
                return -1
            counter.value = i + 1
        return int(i)

    return take


def _run_shard(
    rubric: Rubric, config: AnnotateConfig, jobs: list[tuple[str, str]], queue: Any, shard: int, parent: int,
    counters: dict[str, Any],
) -> None:
    """Worker process: annotate the items it draws from the shared counters (one per model); progress and
    the result go back through ``queue``."""
    _exit_with(parent)
    try:
        cache = _open_cache(config)
        runner = _Runner(rubric, config, cache)

        last: dict[str, float] = {}

        def progress(model: str) -> None:
            # at most ~10 messages a second: each put wakes this process's queue feeder thread, which
            # competes with the event loop for the GIL, and the parent for the CPU
            now = time.monotonic()
            if now - last.get(model, 0.0) < 0.1:
                return
            last[model] = now
            send(model)

        def send(model: str) -> None:
            s = runner.summary[model]
            queue.put(("progress", shard, model, s.items, s.cost_usd, s.prompt_tokens + s.completion_tokens, s.failures))

        runner.on_progress = progress
        try:
            _run_with_progress(runner, jobs, None, {m: _shared_take(c, len(jobs)) for m, c in counters.items()})
        finally:
            cache.close()
        for m in runner.summary:
            send(m)  # the final counts
        queue.put(("done", _ShardResult(runner.rows, runner.failures, runner.summary, runner.fatal, runner.budget.stopped)))
    except AnnotateError as e:
        queue.put(("error", str(e)))
    except BaseException as e:  # noqa: BLE001 - reported by the parent as one line, never a traceback
        queue.put(("error", f"a worker process failed: {e.__class__.__name__}: {e}"))


def _merge_shards(models: Sequence[str], shards: list[_ShardResult]) -> _ShardResult:
    summary = {m: ModelSummary(model=m) for m in models}
    for sh in shards:
        for m, s in sh.summary.items():
            t = summary[m]
            for f in ("items", "ok", "failures", "repaired", "cached_items", "requests", "retries",
                      "prompt_tokens", "completion_tokens", "cost_usd"):
                setattr(t, f, getattr(t, f) + getattr(s, f))
            t.price_known = t.price_known and s.price_known
            t.seconds = max(t.seconds, s.seconds)
            t.stopped_by_budget = t.stopped_by_budget or s.stopped_by_budget
    fatal: dict[str, str] = {}
    for sh in shards:
        for m, why in sh.fatal.items():
            fatal.setdefault(m, why)
    return _ShardResult(
        rows=[r for sh in shards for r in sh.rows],
        failures=[f for sh in shards for f in sh.failures],
        summary=summary,
        fatal=fatal,
        stopped_by_budget=any(sh.stopped_by_budget for sh in shards),
    )


def _run_workers(
    rubric: Rubric, config: AnnotateConfig, jobs: list[tuple[str, str]], progress: ProgressFn | None
) -> _ShardResult:
    """Share the items among ``config.workers`` processes and merge what they return.

    Each process draws the next item from a counter in shared memory (one per model) whenever one of its
    request slots is free, so a process that gets less CPU simply takes fewer items and all finish together.

    Processes are forked when this process runs a single thread, after litellm is imported here (4-5 s of
    CPU that each worker would otherwise spend on its own), otherwise forked from a fork server that
    imported rubrictool and litellm once (spawned on Windows). Replies land in the shared SQLite cache as
    they arrive, so an interrupted run resumes like a single-process one.
    """

    _litellm()  # imports litellm, which starts no thread
    if sys.platform.startswith("linux") and threading.active_count() == 1:
        ctx: Any = mp.get_context("fork")
    elif sys.platform != "win32":  # forking a multi-threaded process is unsafe: fork from a clean server
        ctx = mp.get_context("forkserver")
        ctx.set_forkserver_preload(["rubrictool.annotate", "litellm"])  # imported once, not per worker
    else:
        ctx = mp.get_context("spawn")
    subs = _shard_configs(config, len(jobs))
    w = len(subs)
    q = ctx.Queue()
    counters = {m: ctx.Value("q", 0) for m in config.models}
    procs = [
        ctx.Process(target=_run_shard, args=(rubric, sub, jobs, q, i, os.getpid(), counters), daemon=True)
        for i, sub in enumerate(subs)
    ]
    for p in procs:
        p.start()
    shards: list[_ShardResult] = []
    errors: list[str] = []
    try:
        if progress is not None:
            for m in config.models:
                progress(Progress(m, 0, len(jobs)))
        latest: dict[tuple[int, str], tuple[int, float, int, int]] = {}  # (shard, model) -> items, cost, tokens, failed
        while len(shards) + len(errors) < w:
            try:
                msg = q.get(timeout=1.0)
            except queue_mod.Empty:
                if not any(p.is_alive() for p in procs) and q.empty():
                    errors.append("a worker process exited without a result (killed?); run again to resume from the cache")
                    break
                continue
            if msg[0] == "done":
                shards.append(msg[1])
            elif msg[0] == "error":
                errors.append(msg[1])
            elif progress is not None:
                _, shard, model, *totals = msg
                latest[(shard, model)] = tuple(totals)
                done, cost, tok, failed = (sum(v[i] for (_, m), v in latest.items() if m == model) for i in range(4))
                progress(Progress(model, int(done), len(jobs), f"${cost:.4f} {int(tok):,} tok {int(failed)} failed"))
        for p in procs:
            p.join(timeout=10)
    except BaseException:
        for p in procs:
            if p.is_alive():
                p.terminate()
        raise
    finally:
        q.close()
    if errors:
        raise AnnotateError(errors[0])
    return _merge_shards(config.models, shards)


# == dry run =================================================================================================


@dataclass
class DryRunModel:
    model: str
    requests: int  # requests a run would send (cache hits excluded; repairs not counted)
    cached: int
    prompt_tokens: int  # of the requests to send
    est_completion_tokens: int
    est_cost_usd: float | None  # None: no price known
    first_prompt_tokens: list[int]


@dataclass
class DryRunReport:
    prompts: list[tuple[str, str]]  # (item id, rendered prompt) of the first items
    models: list[DryRunModel]
    items: int
    response_formats: dict[str, Any]

    @property
    def est_cost_usd(self) -> float:
        return sum(m.est_cost_usd or 0.0 for m in self.models)


def dry_run(items: pd.DataFrame, rubric: Rubric, config: AnnotateConfig, show: int = 2) -> DryRunReport:
    """Render the prompts, count tokens and estimate the cost of the run; sends nothing."""
    jobs = _prepare(items, rubric, config)
    example_reply = format_labels({k: (rubric.scale.max, _EST_EVIDENCE) for k in rubric.keys}, rubric, config.format)
    cache = ReplyCache(config.cache) if config.cache is not None and Path(config.cache).exists() else _NoCache()
    models = []
    formats = {}
    try:
        for m in config.models:
            rf = response_format_for(m, rubric, config.format, config.api_base)
            formats[m] = rf
            params = dict(config.sampling, **({"response_format": rf} if rf else {}))
            out_tok = _count_tokens(m, text=example_reply)
            todo_tokens, cached, first = 0, 0, []
            for i, (_, prompt) in enumerate(jobs):
                messages = [{"role": "user", "content": prompt}]
                n = _count_tokens(m, messages)
                if i < show:
                    first.append(n)
                if cache.get(cache_key(m, messages, params)) is not None:
                    cached += 1
                else:
                    todo_tokens += n
            todo = len(jobs) - cached
            price = _price(m, todo_tokens, out_tok * todo) if todo else 0.0
            models.append(DryRunModel(m, todo, cached, todo_tokens, out_tok * todo, price, first))
    finally:
        cache.close()
    return DryRunReport(prompts=jobs[:show], models=models, items=len(jobs), response_formats=formats)


# == outputs =================================================================================================


def output_paths(out: str | Path) -> tuple[Path, Path, Path]:
    """(predictions, failures, summary) paths: ``out`` is a table file (.jsonl/.csv/.parquet) or a folder."""
    p = Path(out)
    if p.suffix.lower() in {".jsonl", ".csv", ".parquet", ".pq", ".json"}:
        return p, p.with_name(p.stem + ".failures.jsonl"), p.with_name(p.stem + ".summary.json")
    return p / "predictions.jsonl", p / "failures.jsonl", p / "summary.json"


def write_outputs(result: AnnotateResult, out: str | Path) -> tuple[Path, Path, Path]:
    """Write the PredictionTable, the failure records (with raw replies) and the summary, each atomically."""

    pred, fail, summ = output_paths(out)
    write_table(result.predictions, pred)
    write_table(pd.DataFrame(result.failures, columns=["item", "model", "error", "reply", "repair_reply"]), fail)
    payload = {
        "items": result.total_items,
        "stopped_by_budget": result.stopped_by_budget,
        "cost_usd": round(result.cost_usd, 6),
        "models": {m: asdict(s) for m, s in result.summary.items()},
    }
    tmp = summ.with_name(f".{summ.name}.tmp")
    tmp.write_text(json.dumps(payload, indent=1) + "\n", encoding="utf-8")
    os.replace(tmp, summ)
    return pred, fail, summ


# == the command =============================================================================================


def load_inputs(
    benchmark: str | None, rubric: str | None, data: str | Path | None, data_dir: str | Path | None
) -> tuple[pd.DataFrame, Rubric]:
    """Items and rubric from ``--benchmark NAME`` (rubric defaults to the same name) or ``--rubric R --data FILE``."""

    if benchmark and data:
        raise AnnotateError("pass either --benchmark or --data, not both")
    if not benchmark and not data:
        raise AnnotateError("nothing to annotate: pass --benchmark mohler, or --rubric R --data ITEMS.jsonl")
    if data and not rubric:
        raise AnnotateError("--data needs --rubric (a bundled rubric name or a YAML path)")
    items = load_benchmark(benchmark, data_dir) if benchmark else read_items(data)  # type: ignore[arg-type]
    return items, load_rubric(rubric or benchmark or "")
