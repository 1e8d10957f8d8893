"""The annotation prompt: the jinja2 template, in-context examples, JSON schema and the repair turn."""

from __future__ import annotations

import json
import math
import re
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2
import pandas as pd

from rubrictool.annotate.config import DEFAULT_TEMPLATE
from rubrictool.annotate.llm import load_litellm
from rubrictool.annotate.parse import ParseResult
from rubrictool.errors import AnnotateError, DataError
from rubrictool.io import read_table
from rubrictool.rubric import Rubric

__all__ = [
    "QUOTED_FIELDS",
    "ContextExample",
    "ItemPrompt",
    "load_examples",
    "load_template",
    "new_boundary",
    "output_schema",
    "quote_block",
    "render_item_prompt",
    "render_prompt",
    "repair_message",
    "response_format_for",
    "rubric_definitions",
]


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
        raise AnnotateError(f"{p}: cannot read the template ({e.__class__.__name__}); pass a UTF-8 jinja2 "
                            "file") from None
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
        raise AnnotateError(f"{p}: examples need a 'response' column (and one level column per concept: "
                            f"{', '.join(rubric.keys)})")
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


def rubric_definitions(rubric: Rubric) -> str:
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


QUOTED_FIELDS = ("question", "response", "reference", "context")  # the item fields that enter the prompt as data


def new_boundary() -> str:
    """A fresh random marker for one request's quoted data: 96 bits from :mod:`secrets`, so no response
    written in advance can contain it."""
    return secrets.token_hex(12)


def quote_block(text: str, boundary: str) -> str:
    """``text`` as quoted data: between a ``[BEGIN DATA <boundary>]`` line and an ``[END DATA <boundary>]`` line."""
    return f"[BEGIN DATA {boundary}]\n{text}\n[END DATA {boundary}]"


@dataclass(frozen=True)
class ItemPrompt:
    """One item's rendered prompt, its boundary and the field texts it quotes.

    ``boundary`` is random per prompt; the reply cache replaces it by a constant in its key
    (:func:`rubrictool.annotate.cache.cache_key`), so a re-run hits the cache. ``quoted`` is what the
    reply parser must not take for the model's own output (:func:`rubrictool.annotate.parse.parse_reply`).
    """

    text: str
    boundary: str
    quoted: tuple[str, ...]


def render_prompt(
    item: dict[str, Any],
    rubric: Rubric,
    template: Any = None,
    examples: Sequence[ContextExample] = (),
    fmt: str = "line",
    benchmark: str | None = None,
    boundary: str | None = None,
) -> str:
    """The annotation prompt for one item (a row of an ItemTable); its quoted data is fenced by
    ``boundary`` (default: a fresh random one, see :func:`render_item_prompt`)."""
    return render_item_prompt(item, rubric, template, examples, fmt, benchmark, boundary).text


def render_item_prompt(
    item: dict[str, Any],
    rubric: Rubric,
    template: Any = None,
    examples: Sequence[ContextExample] = (),
    fmt: str = "line",
    benchmark: str | None = None,
    boundary: str | None = None,
) -> ItemPrompt:
    """The prompt for one item with its item fields quoted between a random boundary.

    Deterministic for a given ``boundary``; a boundary that occurs in a field (possible only when the
    caller chose it) is refused, since the field could then close its own quote.
    """

    tpl = template if template is not None else load_template()
    fields = {f: _text(item.get(f)) for f in QUOTED_FIELDS}
    if boundary is None:
        boundary = new_boundary()
        while any(boundary in v for v in fields.values()):  # 2^-96 per field: never, but cheap to rule out
            boundary = new_boundary()
    elif not re.fullmatch(r"[0-9A-Za-z_-]{8,}", boundary) or any(boundary in v for v in fields.values()):
        raise AnnotateError(f"boundary {boundary!r} is unusable: it must be 8+ letters/digits and occur in no field")
    b = boundary
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
        **fields,
        "boundary": b,
        "quote": lambda text: quote_block(_text(text), b),
        "fields": dict(rubric.fields),
        "concepts": concepts,
        "keys": rubric.keys,
        "levels": rubric.scale.values,
        "concept_list": ", ".join(f"{c.key} ({c.name})" for c in rubric.concepts),
        "rubric_definitions": rubric_definitions(rubric),
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
        text = str(tpl.render(**ctx)).strip() + "\n"
    except jinja2.UndefinedError as e:
        where = getattr(tpl, "filename", "template")
        raise AnnotateError(
            f"{where}: {e.message}; the template may use: {', '.join(sorted(ctx))}"
        ) from None
    except jinja2.TemplateError as e:
        raise AnnotateError(f"{getattr(tpl, 'filename', 'template')}: cannot render: {e}") from None
    return ItemPrompt(text, b, tuple(v for v in fields.values() if v.strip()))


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
# SDK, hosted_vllm/ through litellm's own HTTP handler (less client CPU per call; docs/results.md).
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
    litellm = load_litellm()
    try:
        if litellm.supports_response_schema(model=model):
            return {"type": "json_schema", "json_schema": {"name": "concept_annotation", "schema": schema,
                                                           "strict": True}}
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
