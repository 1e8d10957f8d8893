"""Rubric inventories: the YAML schema, loading with line-accurate errors, and lookup of bundled rubrics.

A rubric is a list of concepts, each with a definition and one anchor descriptor per ordinal level,
plus the grade scale of the benchmark. Every stage reads it: the annotation prompt, the Label Studio
interface, agreement/adjudication (level validation) and the trainer (M, S, concept keys).
"""

from __future__ import annotations

from rubrictool.rubric.export import (
    export_json,
    export_markdown,
    export_rubric,
    write_export,
)
from rubrictool.rubric.lint import LintWarning, lint_rubric
from rubrictool.rubric.load import (
    BUNDLED_DIR,
    RubricInfo,
    list_rubrics,
    load_rubric,
    parse_rubric,
    resolve_rubric_path,
    rubric_errors,
    rubric_infos,
    validate_rubric_files,
)
from rubrictool.rubric.scaffold import new_rubric_file, scaffold_rubric, write_scaffold
from rubrictool.rubric.schema import Concept, Costs, Example, GradeScale, Grading, Level, Rubric, Scale

__all__ = [
    "BUNDLED_DIR",
    "Concept",
    "Costs",
    "Example",
    "GradeScale",
    "Grading",
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
