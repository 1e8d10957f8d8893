"""Errors the library raises. Only ``rubrictool.cli`` turns them into a message and an exit code."""

from __future__ import annotations

__all__ = [
    "AdjudicateError",
    "AnnotateError",
    "DataError",
    "ReviewError",
    "RubricError",
    "RubrictoolError",
    "TrainError",
]


class RubrictoolError(Exception):
    """Base class: a problem the user can fix; ``str(err)`` is a one-line message saying how."""


class RubricError(RubrictoolError):
    """A rubric inventory is missing, malformed or inconsistent."""


class DataError(RubrictoolError):
    """An item table, label file or benchmark directory is missing or malformed."""


class AnnotateError(RubrictoolError):
    """LLM pre-annotation cannot run (bad template, bad model settings, budget)."""


class ReviewError(RubrictoolError):
    """Label Studio is unreachable, refuses the token, or the project does not match."""


class AdjudicateError(RubrictoolError):
    """Reviews cannot be turned into agreement figures or consensus labels."""


class TrainError(RubrictoolError):
    """The trainer cannot run on the given table, split or configuration."""
