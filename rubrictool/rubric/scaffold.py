"""Scaffolding a commented rubric YAML for a new course."""

from __future__ import annotations

import re
from pathlib import Path

from rubrictool.atomic import atomic_write_text
from rubrictool.errors import RubricError
from rubrictool.rubric.load import parse_rubric
from rubrictool.rubric.schema import KEY_PATTERN

__all__ = ["new_rubric_file", "scaffold_rubric", "write_scaffold"]


_SCAFFOLD_HEAD = """\
# Rubric inventory for {title}.
# Made by `rubrictool rubric new`; check it with `rubrictool rubric validate {file}` and
# `rubrictool rubric lint -r {file}`. Replace every TODO.
#
# Design criteria (REC-CBM paper, appendix "Rubric Definitions"):
#   * cover the rubric axes that decide the holistic grade,
#   * keep concepts non-redundant (each one adds distinct evidence),
#   * give every level an anchor descriptor an expert can apply consistently.
#
# Free text sits in `>-` blocks: replace the TODO line under `name: >-`, `anchor: >-`, ... with your
# own words on indented lines; commas, colons, quotes, braces and '#' are all fine there.

name: {name}          # file/rubric id: letters, digits, _ . -
title: >-
  {title}
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
    name: >-
      TODO: name of {key}
    group: null          # optional cluster, e.g. "Correctness and coverage"
    reference_is_top: false     # true: the reference answer is at the top level of {key} (e.g. correctness)
    off_topic_is_bottom: false  # true: an answer written for another question is at the bottom level of {key}
    definition: >-
      TODO: the extent to which the answer ... (what {key} measures, in one sentence).
    levels:              # contiguous, ascending; one anchor descriptor per level
{levels}
    examples:            # illustrative excerpts for reviewers (optional: question, reference, note)
      - level: {top}
        text: >-
          TODO: an excerpt of a response at the top level
        note: >-
          TODO: why this excerpt is at level {top}
"""

_SCAFFOLD_LEVEL = """\
      - value: {value}
        anchor: >-
          TODO: what a level-{value} response shows for {key}"""


def scaffold_rubric(
    name: str, keys: list[str], levels: int = 3, grade_min: int = 0, grade_max: int = 5,
    title: str | None = None, file: str | None = None,
) -> str:
    """The text of a commented rubric YAML for a new course; it validates and loads as is.

    Every text a teacher replaces is a folded block scalar (``>-``), never a ``{...}`` flow mapping or a
    plain scalar, so what they type there (commas, colons, quotes, braces) cannot break the YAML;
    the TODO placeholders are what ``rubric lint`` flags."""
    if not re.match(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", name):
        raise RubricError(f"rubric name {name!r}: use letters, digits, '_', '.' or '-' (e.g. cs101)")
    if not keys:
        raise RubricError("a rubric needs at least one concept key", hint="e.g. --concepts FC,CC,TU")
    bad = [k for k in keys if not re.match(KEY_PATTERN, k)]
    if bad:
        raise RubricError(f"concept key(s) {bad}: a key starts with a letter then letters, digits or '_'")
    dups = sorted({k for k in keys if keys.count(k) > 1})
    if dups:
        raise RubricError(f"concept key(s) {dups} given twice; every concept needs its own key")
    if levels < 2:
        raise RubricError(f"{levels} level(s): a concept needs at least 2 ordinal levels", hint="set --levels")
    if grade_max <= grade_min:
        raise RubricError(f"grade scale {grade_min}..{grade_max}: max must be greater than min")
    t = " ".join((title or f"{name} (TODO: course title)").split())  # one line: it also goes into a comment
    head = _SCAFFOLD_HEAD.format(
        name=name, title=t, levels=levels, gmin=grade_min, gmax=grade_max,
        file=file or f"{name}.yaml",
    )
    body = []
    for k in keys:
        lv = "\n".join(_SCAFFOLD_LEVEL.format(value=v, key=k) for v in range(1, levels + 1))
        body.append(_SCAFFOLD_CONCEPT.format(key=k, levels=lv, top=levels))
    text = head + "".join(body)
    parse_rubric(text, file or f"{name}.yaml")  # the scaffold must always load
    return text


def write_scaffold(path: str | Path, text: str, force: bool = False) -> Path:
    """Write a scaffolded rubric atomically; refuse to overwrite an existing file unless ``force``."""
    p = Path(path)
    if p.exists() and not force:
        raise RubricError(f"{p}: already exists", hint="pick another --out or pass --force to overwrite it")
    return atomic_write_text(p, text)


def new_rubric_file(
    out: str | Path, name: str, keys: list[str], levels: int = 3, grade_min: int = 0, grade_max: int = 5,
    title: str | None = None, force: bool = False,
) -> Path:
    """Scaffold a rubric (:func:`scaffold_rubric`) and write it to ``out`` (``rubric new``)."""
    text = scaffold_rubric(name, keys, levels, grade_min, grade_max, title, file=str(out))
    return write_scaffold(out, text, force=force)
