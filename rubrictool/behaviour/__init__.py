"""A behavioural test suite for a trained grader: does a mark move for the right reasons?

CheckList-style tests (Ribeiro et al., "Beyond Accuracy: Behavioral Testing of NLP Models with CheckList",
ACL 2020) on a run's test answers, each answer edited and graded again with the run's own grading path
(:func:`rubrictool.grade.grade_loaded`):

* **invariance**: edits that must not move a mark (a final full stop added or removed, case, spaces, a one-letter
  typo in an ordinary word, the sentences reordered, a synonym for an ordinary word, the student's name and id);
* **directional**: edits with an expected direction: the claim negated and the key term swapped for its opposite
  (or the other option of a two-option question) must lower the mark; a bare keyword list, the reference pasted after
  a wrong answer, the question restated, filler and a wrong answer made longer must not raise it;
* **minimum functionality**: minimal pairs, a right and a wrong answer to one question that differ by one word: the
  right one must be graded above the wrong one.

Key words are the content words of the question, the reference and the rubric's level anchors; an edit that must not
change the meaning (typo, synonym) touches only the other words. Every edit is deterministic for a seed.
:func:`run_suite` returns the graded pairs (one row per test and answer); :func:`summarise` turns them (one run's, or
the pooled rows of a k-fold run's folds) into one row per test with the share of marks moved, the mean shift with a
95 % bootstrap CI, the share moved by two marks or more, the expected direction, and the test's verdict in words.

The package: :mod:`~rubrictool.behaviour.edits` (the word lists, the edits, :data:`TESTS`),
:mod:`~rubrictool.behaviour.pairs` (minimal pairs), :mod:`~rubrictool.behaviour.suite` (running the tests on a run)
and :mod:`~rubrictool.behaviour.summary` (the verdicts against :data:`TARGETS`).
"""

from __future__ import annotations

from rubrictool.behaviour.edits import (
    FILLER,
    OPPOSITES,
    TESTS,
    BehaviourTest,
    check_tests,
    edit,
    filler_for,
    first_sentence,
    key_words,
)
from rubrictool.behaviour.pairs import pair_questions, read_pairs
from rubrictool.behaviour.suite import BehaviourResult, run_suite, suite_on_run
from rubrictool.behaviour.summary import TARGETS, failing_sentences, summarise, summary_markdown

__all__ = ["FILLER", "OPPOSITES", "TARGETS", "TESTS", "BehaviourResult", "BehaviourTest", "check_tests", "edit",
           "failing_sentences", "filler_for", "first_sentence", "key_words", "pair_questions", "read_pairs",
           "run_suite",
           "suite_on_run", "summarise", "summary_markdown"]
