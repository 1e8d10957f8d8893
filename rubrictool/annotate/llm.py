"""litellm: prices, token counts and which provider errors are worth a retry."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Sequence
from typing import Any

__all__ = [
    "connection_error",
    "context_tokens",
    "count_tokens",
    "is_fatal",
    "load_litellm",
    "model_rates",
    "request_price",
    "retry_after",
    "retryable",
    "short_error",
    "too_long_message",
]


def load_litellm() -> Any:
    """litellm, imported on first use: the import costs seconds, which a dry run, the tests of the
    prompt and parser, and every other command never pay."""
    import litellm

    litellm.suppress_debug_info = True  # no "Give Feedback" banners on stdout
    litellm.telemetry = False
    for name in ("LiteLLM", "LiteLLM Router", "LiteLLM Proxy"):  # rubrictool reports failures itself
        logging.getLogger(name).setLevel(logging.ERROR)
    return litellm


_RATES: dict[str, tuple[float, float] | None] = {}


def model_rates(model: str) -> tuple[float, float] | None:
    """USD per prompt token and per completion token from litellm's bundled cost map (memoised)."""
    if model not in _RATES:
        litellm = load_litellm()
        try:
            # priced at a request-sized 1,000 tokens: larger counts would hit long-context tiers
            # (Gemini 2.5 Pro doubles its price above 200k prompt tokens per request)
            a, _ = litellm.cost_per_token(model=model, prompt_tokens=1000, completion_tokens=0)
            _, b = litellm.cost_per_token(model=model, prompt_tokens=0, completion_tokens=1000)
            _RATES[model] = (float(a) / 1000, float(b) / 1000)
        except Exception:  # noqa: BLE001 - litellm raises several types for an unpriced model
            _RATES[model] = None
    return _RATES[model]


def request_price(model: str, prompt_tokens: int, completion_tokens: int) -> float | None:
    """USD for a request (linear rates: the long-context tiers of some models are not modelled); None: unknown."""
    r = model_rates(model)
    return None if r is None else r[0] * prompt_tokens + r[1] * completion_tokens


def context_tokens(model: str) -> int | None:
    """The most prompt tokens ``model`` accepts, from litellm's model map (``max_input_tokens``); None: unknown (a
    local or custom model, or litellm cannot be loaded here — the run itself then says why)."""
    try:
        info = load_litellm().get_model_info(model)
    except Exception:  # noqa: BLE001 - litellm raises several types for a model it does not know
        return None
    n = info.get("max_input_tokens") if isinstance(info, dict) else getattr(info, "max_input_tokens", None)
    return int(n) if isinstance(n, (int, float)) and n > 0 else None


def too_long_message(model: str, too_long: Sequence[tuple[str, int]], total: int, context: int) -> str:
    """One line: how many prompts exceed ``model``'s context (``too_long``: (item id, tokens), longest first)."""
    first, n = too_long[0]
    return (f"{len(too_long)} of {total} prompts are longer than {model}'s context of {context:,} tokens (the longest: "
            f"item {first}, {n:,} tokens): the provider will refuse them, and they will be failure records; shorten "
            "those answers or use a model with a larger context")


def count_tokens(model: str, messages: Sequence[dict[str, Any]] | None = None, text: str | None = None) -> int:
    litellm = load_litellm()
    try:
        if messages is not None:
            return int(litellm.token_counter(model=model, messages=list(messages)))
        return int(litellm.token_counter(model=model, text=text or ""))
    except Exception:  # noqa: BLE001 - unknown tokenizer: ~4 characters per token
        n = sum(len(str(m.get("content", ""))) for m in messages) if messages is not None else len(text or "")
        return max(1, n // 4)


def retryable(e: BaseException) -> bool:
    litellm = load_litellm()
    if isinstance(e, (asyncio.TimeoutError, TimeoutError)):
        return True
    retry_types = (
        litellm.RateLimitError,
        litellm.Timeout,
        litellm.InternalServerError,
        litellm.ServiceUnavailableError,
        litellm.BadGatewayError,
        litellm.APIConnectionError,
    )
    if isinstance(e, retry_types):
        return True
    status = getattr(e, "status_code", None)
    return isinstance(status, int) and (status == 429 or status >= 500)


def connection_error(e: BaseException) -> bool:
    """No HTTP reply came back: connection refused, DNS failure, reset, or a timeout. litellm reports a
    refused connection as an InternalServerError (status 500), so the exception's whole chain is read."""
    import httpx
    import openai

    litellm = load_litellm()
    kinds = (asyncio.TimeoutError, TimeoutError, OSError, litellm.APIConnectionError, litellm.Timeout,
             openai.APIConnectionError, httpx.TransportError)
    seen: set[int] = set()
    cur: BaseException | None = e
    while cur is not None and id(cur) not in seen and len(seen) < 20:
        if isinstance(cur, kinds):
            return True
        seen.add(id(cur))
        cur = cur.__cause__ or cur.__context__
    return False


def is_fatal(e: BaseException) -> bool:
    """Errors that will fail every request of the model: stop instead of failing item by item."""
    litellm = load_litellm()
    return isinstance(e, (litellm.AuthenticationError, litellm.PermissionDeniedError, litellm.NotFoundError))


def retry_after(e: BaseException) -> float | None:
    headers = getattr(e, "litellm_response_headers", None)
    try:
        v = headers.get("retry-after") if headers is not None else None
        return min(float(v), 60.0) if v is not None else None
    except (TypeError, ValueError, AttributeError):
        return None


def short_error(e: BaseException, secrets: Iterable[str] = ()) -> str:
    msg = " ".join(str(e).split())
    for s in secrets:
        if s:
            msg = msg.replace(s, "***")
    return f"{e.__class__.__name__}: {msg[:300] or '(no message)'}"
