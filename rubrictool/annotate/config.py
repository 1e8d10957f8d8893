"""Settings of an annotation run (:class:`AnnotateConfig`) and the constants the stage shares."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rubrictool.errors import AnnotateError

__all__ = [
    "CACHE_VERSION",
    "DEFAULT_MODELS",
    "DEFAULT_TEMPLATE",
    "EST_EVIDENCE",
    "EVIDENCE_MAX",
    "OUTPUT_FORMATS",
    "USAGE_COLUMNS",
    "AnnotateConfig",
]


os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # litellm must not fetch its price map


USAGE_COLUMNS = ["repaired", "cached", "prompt_tokens", "completion_tokens", "cost_usd", "error"]
DEFAULT_MODELS = ("gpt-4o", "gemini/gemini-2.5-pro")
OUTPUT_FORMATS = ("line", "json")
DEFAULT_TEMPLATE = Path(__file__).resolve().parent.parent / "templates" / "annotate.prompt.j2"
CACHE_VERSION = 1
EVIDENCE_MAX = 500
EST_EVIDENCE = "the response states the key idea but omits the reason given in the reference"




@dataclass(frozen=True)
class AnnotateConfig:
    """Everything that decides which requests are made and how. Fields that change the reply are in the cache key."""

    models: tuple[str, ...] = DEFAULT_MODELS  # litellm model strings, e.g. "gpt-4o", "openai/<alias>"
    format: str = "line"  # "line": the paper's concept=..; label=..; evidence=..  "json": a JSON object + schema
    template: Path | None = None  # None: the bundled templates/annotate.prompt.j2
    examples: Path | None = None  # in-context examples (table with response + one level column per concept)
    benchmark: str | None = None  # the name shown to the model; default the rubric's name
    api_base: str | None = None  # a local OpenAI-compatible server (Ollama, vLLM, llama.cpp)
    api_key_env: str | None = None  # read the key from this env var (never printed or stored)
    concurrency: int = 8  # requests in flight per model
    timeout: float = 120.0  # seconds per request
    max_retries: int = 4  # retries after the first attempt on 429 / timeout / 5xx / connection errors
    backoff: float = 1.0  # first back-off in seconds; doubles each retry (full jitter), capped at 60 s
    temperature: float = 0.0
    max_tokens: int = 1024  # also the worst case the budget reserves per request
    budget: float | None = None  # USD for this run; None: no limit
    limit: int | None = None  # annotate only the first N items
    per_question: int | None = None  # annotate only the first N answers of each question (e.g. a new question's few)
    cache: Path | None = Path(".rubrictool/cache.sqlite")  # None: no cache
    # Client processes. Each draws items from a shared counter with concurrency/workers requests in
    # flight and budget/workers USD; all share the reply cache. >1 helps only when the client's CPU
    # per litellm call is the limit: a fast local server at high concurrency (docs/results.md).
    # None: auto (see auto_workers).
    workers: int | None = None
    retry_failed: bool = False  # send again the items whose cached replies failed (successful replies never)
    allow_draft: bool = False  # send a rubric that still has TODO placeholders or indistinguishable levels
    # the run counts as failed (the CLI exits 3) when more than this share of its (item, model) pairs
    # failed; a failure share is also what stops a run early (see stops.Breaker)
    max_failures: float = 0.05

    def check(self) -> None:
        """One line for the first setting out of range (each names the option that sets it)."""
        if not self.models:
            raise AnnotateError("no model given", hint="pass --model (e.g. --model gpt-4o)")
        if self.format not in OUTPUT_FORMATS:
            raise AnnotateError(f"unknown reply format {self.format!r}; use line or json")
        for name, v, lo in (("concurrency", self.concurrency, 1), ("max_tokens", self.max_tokens, 1),
                            ("workers", 1 if self.workers is None else self.workers, 1)):
            if v < lo:
                raise AnnotateError(f"{name} must be at least {lo}, got {v}", hint=f"set --{name.replace('_', '-')}")
        for name, x in (("timeout", self.timeout), ("backoff", self.backoff), ("temperature", self.temperature),
                        ("budget", self.budget), ("max_failures", self.max_failures)):
            if x is not None and not math.isfinite(x):
                raise AnnotateError(f"{name} must be a finite number, got {x}", hint=f"set --{name.replace('_', '-')}")
        if self.max_retries < 0:
            raise AnnotateError(f"max_retries must be 0 or more, got {self.max_retries}", hint="set --max-retries")
        if not self.timeout > 0:
            raise AnnotateError(f"timeout must be positive, got {self.timeout}", hint="set --timeout")
        if self.backoff < 0:
            raise AnnotateError(f"backoff must be 0 seconds or more, got {self.backoff:g}", hint="set --backoff")
        if not 0 <= self.temperature <= 2:
            raise AnnotateError(f"temperature must lie in 0..2 (the providers' range), got {self.temperature:g}",
                                hint="set --temperature")
        if not 0 <= self.max_failures <= 1:
            raise AnnotateError(f"max_failures must be a share of the annotations, 0..1, got {self.max_failures:g}",
                                hint="set --max-failures (e.g. 0.05 for 5 %)")
        if self.budget is not None and not self.budget > 0:
            raise AnnotateError(f"budget must be a positive amount in USD, got {self.budget}", hint="set --budget")
        if self.limit is not None and self.limit < 1:
            raise AnnotateError(f"limit must be at least 1, got {self.limit}", hint="set --limit")
        if self.per_question is not None and self.per_question < 1:
            raise AnnotateError(f"per_question must be at least 1, got {self.per_question}", hint="set --per-question")
        if len(set(self.models)) != len(self.models):
            raise AnnotateError(f"a model is given twice in {list(self.models)}", hint="pass each --model once")

    @property
    def sampling(self) -> dict[str, Any]:
        return {"temperature": self.temperature, "max_tokens": self.max_tokens}
