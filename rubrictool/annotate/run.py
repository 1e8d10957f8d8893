""":func:`annotate`: every item with every model, in one process or shared among several."""

from __future__ import annotations

import time

import pandas as pd

from rubrictool.annotate.config import USAGE_COLUMNS, AnnotateConfig
from rubrictool.annotate.llm import _price
from rubrictool.annotate.runner import (
    AnnotateResult,
    _check_keys,
    _open_cache,
    _prepare,
    _run_with_progress,
    _Runner,
)
from rubrictool.annotate.workers import _run_workers, _ShardResult, auto_workers
from rubrictool.errors import AnnotateError
from rubrictool.progress import ProgressFn
from rubrictool.rubric import Rubric
from rubrictool.tables import PREDICTION_COLUMNS

__all__ = ["annotate"]


def annotate(
    items: pd.DataFrame,
    rubric: Rubric,
    config: AnnotateConfig,
    progress: ProgressFn | None = None,
) -> AnnotateResult:
    """Annotate every item with every model; returns predictions, failure records and a summary per model.

    ``progress`` gets one task per model (items done; info: cost, tokens, failures) and, in a single
    process, a ``total`` task over all models (info: the cost so far).

    Raises :class:`AnnotateError` for bad settings (missing key, unknown template, a budget for a model
    without a known price) before anything is sent, and when a model refuses every request (wrong key,
    unknown model) — what was already answered stays in the cache.
    """
    jobs = _prepare(items, rubric, config)
    _check_keys(config)
    if config.budget is not None:
        unpriced = [m for m in config.models if _price(m, 1000, 1000) is None]
        if unpriced:
            raise AnnotateError(
                f"no price for {', '.join(unpriced)} in litellm's cost map, so a budget cannot be enforced",
                hint="drop --budget for local models, or use a priced model string",
            )
    t_start = time.monotonic()
    runner: _Runner | _ShardResult
    n_workers = auto_workers(config, len(jobs))
    if n_workers > 1:
        runner = _run_workers(rubric, config, jobs, progress)
    else:
        cache = _open_cache(config)
        runner = _Runner(rubric, config, cache)
        try:
            _run_with_progress(runner, jobs, progress)
        finally:
            cache.close()
    if runner.fatal and not any(s.ok for s in runner.summary.values()):
        raise AnnotateError("; ".join(runner.fatal.values()))
    df = pd.DataFrame(runner.rows, columns=PREDICTION_COLUMNS + USAGE_COLUMNS)
    if len(df):
        order = {m: i for i, m in enumerate(config.models)}
        keys = {k: i for i, k in enumerate(rubric.keys)}
        ids = {j[0]: i for i, j in enumerate(jobs)}
        df = df.sort_values(
            by=["model", "item", "concept"],
            key=lambda c: c.map(order if c.name == "model" else ids if c.name == "item" else keys),
            kind="stable",
        ).reset_index(drop=True)
    df["level"] = df["level"].astype("Int64")
    for s in runner.summary.values():
        s.seconds = round(s.seconds or (time.monotonic() - t_start if s.items else 0.0), 3)
    return AnnotateResult(
        predictions=df,
        failures=runner.failures,
        summary=runner.summary,
        stopped_by_budget=runner.stopped_by_budget,
        total_items=len(jobs),
        fatal=dict(runner.fatal),
        workers=n_workers,
    )
