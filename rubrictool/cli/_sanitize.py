"""The one helper every command uses to print text it did not write (answers, ids, concept names, notes,
error messages that quote input): terminal controls stripped, Rich markup escaped."""

from __future__ import annotations

from rich.markup import escape

from rubrictool.textsafe import strip_controls

__all__ = ["shown"]


def shown(text: object, one_line: bool = False) -> str:
    """``text`` safe to print with Rich: no escape sequences or control characters (line breaks and tabs
    kept unless ``one_line``), and ``[...]`` shown literally instead of read as Rich markup."""
    return escape(strip_controls(text, "" if one_line else "\n\t"))
