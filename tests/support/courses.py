"""A small course that is not Mohler, for the annotate tests: a first-year chemistry-lab rubric with its
own concepts (SAFE, METH, UNIT) on levels 0..2 and a 0..10 grade."""

from __future__ import annotations

__all__ = ["COURSE_RUBRIC"]

COURSE_RUBRIC = """\
name: chemlab
title: First-year chemistry lab reports
version: "1.0"
description: Short written answers in a first-year chemistry lab course, graded 0-10 by the lab tutor.
source: course syllabus
fields:
  question: The lab question.
  response: The student's written answer.
  reference: The tutor's model answer.
scale: {min: 0, max: 2}
grade: {min: 0, max: 10}
concepts:
  - key: SAFE
    name: Safety reasoning
    definition: Whether the answer names the hazard and the precaution that controls it.
    levels:
      - {value: 0, anchor: No hazard named}
      - {value: 1, anchor: Hazard named without a precaution}
      - {value: 2, anchor: Hazard and matching precaution}
    examples:
      - {text: "Wear goggles because the acid splashes.", level: 2}
  - key: METH
    name: Method
    definition: Whether the steps of the procedure are in a workable order with quantities.
    levels:
      - {value: 0, anchor: Steps missing or in an unworkable order}
      - {value: 1, anchor: Workable order but quantities missing}
      - {value: 2, anchor: Workable order with quantities}
    examples:
      - {text: "Add 10 mL of HCl to the flask, then titrate.", level: 2}
  - key: UNIT
    name: Units and significant figures
    definition: Whether results carry correct units and a sensible number of significant figures.
    levels:
      - {value: 0, anchor: Units absent}
      - {value: 1, anchor: Units present with errors}
      - {value: 2, anchor: Correct units and precision}
    examples:
      - {text: "0.105 mol/L", level: 2}
"""
