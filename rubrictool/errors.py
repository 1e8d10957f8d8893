"""Errors the library raises. Only ``rubrictool.cli`` turns them into a message and an exit code."""

from __future__ import annotations

from typing import Any

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
    """Base class: a problem the user can fix.

    ``str(err)`` is one line describing the problem in the library's terms; ``hint``, when given, says
    how to fix it on the command line (which option to pass). Only :mod:`rubrictool.cli` shows the
    hint, after the message: ``error: <message>; <hint>``.
    """

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.hint = hint

    def __reduce__(self) -> tuple[Any, ...]:  # the hint survives pickling (an error raised in a worker process)
        return (type(self), (str(self), self.hint))


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
