"""Untrusted text made safe to show: in a terminal (no control characters) and in Markdown (no HTML, no markup).

Student answers, ids, reviewer notes and model replies are written by people we do not control. They reach
a terminal (``explain`` prints a response) and Markdown files (report.md, discussion_queue.md,
reliability.md) that are opened in viewers which render HTML. Two rules, one function each:

- :func:`strip_controls`: terminal escape sequences (``ESC[31m``, OSC titles and hyperlinks) are removed
  whole, then every other control character (C0 except the kept ``\\n``/``\\t``, DEL, C1) and the Unicode
  bidirectional overrides that reorder what a reader sees.
- :func:`md_text` / :func:`md_inline`: the text with its controls stripped, ``&``, ``<``, ``>`` as HTML
  entities (``<script>`` and ``<img onerror=…>`` show as text) and the Markdown punctuation that could
  open code, emphasis, links, images or table cells backslash-escaped; :func:`md_inline` also folds line
  breaks into spaces for a table cell or a heading, :func:`md_quote` keeps them inside a ``>`` quote.
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["md_inline", "md_quote", "md_table", "md_text", "neutralise_cell", "neutralise_frame", "restore_cell",
           "restore_frame",
           "strip_controls"]

# ESC [ … final byte (CSI), ESC ] … BEL or ESC \ (OSC), ESC P/X/^/_ … ESC \ (DCS and friends), ESC + one byte
_ESCAPES = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]"
    r"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?"
    r"|\x1b[PX^_][^\x1b]*(?:\x1b\\)?"
    r"|\x1b[@-Z\\-_]"
    r"|\x9b[0-?]*[ -/]*[@-~]"
)
_BIDI = "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f"
_MD_PUNCT = re.compile(r"([\\`*_\[\]|~])")


def _controls(keep: str) -> re.Pattern[str]:
    chars = [chr(c) for c in (*range(0x20), 0x7F, *range(0x80, 0xA0)) if chr(c) not in keep]
    return re.compile("[" + re.escape("".join(chars) + _BIDI) + "]")


_CONTROLS = {keep: _controls(keep) for keep in ("\n\t", "")}


def strip_controls(text: object, keep: str = "\n\t") -> str:
    """``text`` as a string without terminal escape sequences or control characters; ``keep`` lists the
    layout characters to leave (``"\\n\\t"`` by default, ``""`` for one line; ``\\r`` is never kept)."""
    s = _ESCAPES.sub("", str(text))
    pattern = _CONTROLS.get(keep) or _controls(keep)
    return pattern.sub("", s)


def md_text(text: object) -> str:
    """Untrusted text for a Markdown paragraph: controls stripped, HTML escaped, Markdown punctuation escaped."""
    s = html.escape(strip_controls(text).replace("\t", " "), quote=False)
    return _MD_PUNCT.sub(r"\\\1", s)


def md_inline(text: object) -> str:
    """:func:`md_text` on one line (table cells, headings, list items): line breaks become spaces."""
    return " ".join(md_text(text).split())


def md_table(head: Sequence[object], rows: Iterable[Sequence[object]]) -> list[str]:
    """The lines of a Markdown table (then one blank line): ``head`` and ``rows`` as given (``md_inline`` the cells
    that hold untrusted text first)."""
    return ["| " + " | ".join(str(h) for h in head) + " |", "|" + "---|" * len(head),
            *("| " + " | ".join(str(c) for c in r) + " |" for r in rows), ""]


def md_quote(text: object) -> str:
    """A ``> `` block quote of untrusted text, every line quoted (a line break cannot end the quote)."""
    return "\n".join("> " + line for line in md_text(text).splitlines() or [""])


# -- spreadsheet formulas (OWASP CSV injection) -------------------------------------------------------------------

_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def neutralise_cell(value: object) -> object:
    """A text cell that a spreadsheet would run as a formula (it starts with ``=``, ``+``, ``-``, ``@``, a tab or a
    carriage return) with ``'`` put before it (OWASP's rule: the spreadsheet shows the text, runs nothing). A cell
    that already starts with ``'`` before such a character gets one more, so :func:`restore_cell` gives back exactly
    what was written. Anything else (numbers, missing values, other text) unchanged."""
    if isinstance(value, str) and value.lstrip("'").startswith(_FORMULA_START):
        return "'" + value
    return value


def restore_cell(value: object) -> object:
    """The inverse of :func:`neutralise_cell`: the text as it was before it was written for people."""
    if isinstance(value, str) and value.startswith("'") and value.lstrip("'").startswith(_FORMULA_START):
        return value[1:]
    return value


def _text_columns(df: pd.DataFrame) -> list[object]:
    from pandas.api.types import (  # pandas only when a table is written or read
        is_object_dtype,
        is_string_dtype,
    )

    return [c for c in df.columns if is_object_dtype(df[c]) or is_string_dtype(df[c])]


def neutralise_frame(df: pd.DataFrame) -> pd.DataFrame:
    """A copy of ``df`` with every text cell (and column name) neutralised (:func:`neutralise_cell`)."""
    out = df.copy()
    for col in _text_columns(out):
        out[col] = out[col].map(neutralise_cell)
    out.columns = [neutralise_cell(c) for c in out.columns]
    return out


def restore_frame(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with every text cell (and column name) restored (:func:`restore_cell`); ``df`` itself when none was
    neutralised."""
    marked = {c for c in _text_columns(df) if df[c].map(lambda v: isinstance(v, str) and v.startswith("'")).any()}
    renamed = [restore_cell(c) for c in df.columns]
    if not marked and renamed == list(df.columns):
        return df
    out = df.copy()
    for col in marked:
        out[col] = out[col].map(restore_cell)
    out.columns = renamed
    return out
