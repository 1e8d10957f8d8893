"""A dry run: the first prompts, token counts and the estimated cost, nothing sent."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from rubrictool.annotate.cache import NoCache, ReplyCache, cache_key
from rubrictool.annotate.config import EST_EVIDENCE, AnnotateConfig
from rubrictool.annotate.llm import context_tokens, count_tokens, request_price
from rubrictool.annotate.prompt import ItemPrompt, format_labels, response_format_for
from rubrictool.annotate.runner import prepare
from rubrictool.rubric import Rubric

__all__ = ["DryRunModel", "DryRunReport", "dry_run", "model_estimate"]


@dataclass
class DryRunModel:
    model: str
    requests: int  # requests a run would send (cache hits excluded; repairs not counted)
    cached: int
    prompt_tokens: int  # of the requests to send
    est_completion_tokens: int
    est_cost_usd: float | None  # None: no price known
    first_prompt_tokens: list[int]
    context_tokens: int | None = None  # the most prompt tokens the model accepts (None: unknown)
    too_long: list[tuple[str, int]] | None = None  # (item id, tokens) of the prompts longer than that, longest first


@dataclass
class DryRunReport:
    prompts: list[tuple[str, str]]  # (item id, rendered prompt) of the first items
    models: list[DryRunModel]
    items: int
    response_formats: dict[str, Any]

    @property
    def unpriced(self) -> list[str]:
        """The models with requests to send whose price litellm does not know (local or custom models)."""
        return [m.model for m in self.models if m.est_cost_usd is None and m.requests > 0]

    @property
    def est_cost_usd(self) -> float | None:
        """The estimated cost of the models whose price is known; ``None`` when no model that has requests to
        send has a known price (never a made-up $0). With some models unpriced (:attr:`unpriced`) it is a
        lower bound: the priced models' part only."""
        priced = [m for m in self.models if m.est_cost_usd is not None]
        if self.unpriced and not any(m.requests > 0 for m in priced):
            return None
        return sum(m.est_cost_usd or 0.0 for m in priced)


def model_estimate(model: str, jobs: list[tuple[str, ItemPrompt]], cache: ReplyCache | NoCache,
                   params: dict[str, Any], out_tokens: int, show: int) -> DryRunModel:
    """One model's share of a dry run: the prompts' tokens (the first ``show`` of them), the ones the cache already
    answers, those over the model's context, and the price of the rest at ``out_tokens`` a reply."""
    todo_tokens, cached, first = 0, 0, []
    context, too_long = context_tokens(model), []
    for i, (item_id, prompt) in enumerate(jobs):
        messages = [{"role": "user", "content": prompt.text}]
        n = count_tokens(model, messages)
        if i < show:
            first.append(n)
        if context is not None and n > context:
            too_long.append((item_id, n))
        if cache.get(cache_key(model, messages, params, prompt.boundary)) is not None:
            cached += 1
        else:
            todo_tokens += n
    todo = len(jobs) - cached
    price = request_price(model, todo_tokens, out_tokens * todo) if todo else 0.0
    return DryRunModel(model, todo, cached, todo_tokens, out_tokens * todo, price, first, context,
                       sorted(too_long, key=lambda t: -t[1]))


def dry_run(items: pd.DataFrame, rubric: Rubric, config: AnnotateConfig, show: int = 2) -> DryRunReport:
    """Render the prompts, count tokens and estimate the cost of the run; sends nothing."""
    jobs = prepare(items, rubric, config)
    example_reply = format_labels({k: (rubric.scale.max, EST_EVIDENCE) for k in rubric.keys}, rubric, config.format)
    cache = ReplyCache(config.cache) if config.cache is not None and Path(config.cache).exists() else NoCache()
    models = []
    formats = {}
    try:
        for m in config.models:
            rf = response_format_for(m, rubric, config.format, config.api_base)
            formats[m] = rf
            params = dict(config.sampling, **({"response_format": rf} if rf else {}))
            out_tok = count_tokens(m, text=example_reply)
            models.append(model_estimate(m, jobs, cache, params, out_tok, show))
    finally:
        cache.close()
    return DryRunReport(prompts=[(i, p.text) for i, p in jobs[:show]], models=models, items=len(jobs),
                        response_formats=formats)
