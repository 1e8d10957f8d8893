"""What a model's reply holds (its text, token usage, litellm's cost) and how it is read: the prompt boundary made
canonical for the cache and restored from it, and a parse that never raises."""

from __future__ import annotations

import math
from typing import Any

from rubrictool.annotate.cache import BOUNDARY_KEY
from rubrictool.annotate.parse import ParseResult, parse_reply
from rubrictool.annotate.prompt import ItemPrompt
from rubrictool.rubric import Rubric

__all__ = ["canonical", "reply_text", "response_cost", "restore", "safe_parse", "usage"]


def canonical(text: str, boundary: str | None) -> str:
    """The reply as cached: this prompt's random boundary replaced by a fixed key."""
    return text.replace(boundary, BOUNDARY_KEY) if boundary else text


def restore(text: str, boundary: str | None) -> str:
    """A cached reply with this prompt's boundary put back in place of the fixed key."""
    return text.replace(BOUNDARY_KEY, boundary) if boundary else text


def safe_parse(text: str, rubric: Rubric, prompt: ItemPrompt | None = None) -> ParseResult:
    """The parsed reply; an unreadable one is a parse error, never an exception."""
    try:
        if prompt is None:
            return parse_reply(text, rubric)
        return parse_reply(text, rubric, prompt.quoted, prompt.boundary)
    except Exception as e:  # noqa: BLE001 - parse_reply is fuzzed never to raise; a run must survive regardless
        return ParseResult(errors=[f"unreadable reply ({e.__class__.__name__})"])


def reply_text(resp: Any) -> str:
    """The text of a response's first choice ("" when it has none)."""
    try:
        content = resp.choices[0].message.content
    except (AttributeError, IndexError, KeyError, TypeError):
        return ""
    return content if isinstance(content, str) else ""


def response_cost(resp: Any) -> float | None:
    """The cost litellm computed for this response (it knows provider-specific pricing), if any."""
    try:
        v = resp._hidden_params.get("response_cost")
    except AttributeError:
        return None
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None


def usage(resp: Any) -> tuple[int, int]:
    """A response's (prompt tokens, completion tokens), 0 for what it does not report."""
    u = getattr(resp, "usage", None)
    pt = getattr(u, "prompt_tokens", 0) if u is not None else 0
    ct = getattr(u, "completion_tokens", 0) if u is not None else 0
    return int(pt or 0), int(ct or 0)
