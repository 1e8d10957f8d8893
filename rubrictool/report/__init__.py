"""Inspect a trained run: explain a grade, simulate interventions, write a report page, diagnose a rubric,
and run the component ablation.

explain.py (decision traces, overrides) · intervene.py (intervention curves) · page.py (the report: data,
HTML), markdown.py (report.md) · figures.py (matplotlib PNGs) · diagnose.py (rubric diagnostics) · ablate.py (ablation)
· run.py (opening a run and its table) · scores.py (machine–human agreement figures). The library returns data and
writes files; only the CLI prints.
"""

from __future__ import annotations

from rubrictool.report.diagnose import Diagnosis, diagnose, diagnose_dir, diagnose_run
from rubrictool.report.explain import ConceptRow, ItemTrace, explain_items, traces_frame
from rubrictool.report.intervene import intervention_curves
from rubrictool.report.markdown import render_markdown
from rubrictool.report.page import (
    Report,
    build_report,
    render_explain_html,
    render_html,
)
from rubrictool.report.run import Run, open_run, parse_overrides, split_rows, table_rows
from rubrictool.report.scores import pair_agreement, smd
from rubrictool.report.write import write_report

__all__ = [
    "ConceptRow",
    "Diagnosis",
    "ItemTrace",
    "Report",
    "Run",
    "build_report",
    "diagnose",
    "diagnose_dir",
    "diagnose_run",
    "explain_items",
    "intervention_curves",
    "open_run",
    "pair_agreement",
    "parse_overrides",
    "render_explain_html",
    "render_html",
    "render_markdown",
    "smd",
    "split_rows",
    "table_rows",
    "traces_frame",
    "write_report",
]
