"""Exports: the paper's Markdown table layout and JSON."""

from __future__ import annotations

import json
from pathlib import Path

from rubrictool.errors import RubricError
from rubrictool.rubric.load import load_rubric
from rubrictool.rubric.scaffold import write_scaffold
from rubrictool.rubric.schema import Concept, Example, Rubric

__all__ = ["export_json", "export_markdown", "export_rubric", "write_export"]


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


def write_export(name_or_path: str | Path, fmt: str, out: str | Path | None = None) -> str:
    """Render a rubric (:func:`export_rubric`) and, when ``out`` is given, write it there atomically."""
    text = export_rubric(name_or_path, fmt)
    if out is not None:
        write_scaffold(out, text, force=True)
    return text
