""":func:`annotate`: every item with every model, in one process or shared among several;
:func:`run_annotation`: the same, holding the cache and output locks, then writing the outputs."""

from __future__ import annotations

import contextlib
import time
from pathlib import Path

import pandas as pd

from rubrictool.annotate.config import USAGE_COLUMNS, AnnotateConfig
from rubrictool.annotate.llm import context_tokens, count_tokens, request_price, too_long_message
from rubrictool.annotate.outputs import output_paths, write_outputs
from rubrictool.annotate.prompt import ItemPrompt
from rubrictool.annotate.runner import (
    AnnotateResult,
    Runner,
    check_keys,
    open_cache,
    prepare,
    run_with_progress,
)
from rubrictool.annotate.stops import EARLY_STOP
from rubrictool.annotate.workers import ShardResult, auto_workers, run_workers
from rubrictool.errors import AnnotateError
from rubrictool.locks import writer_lock
from rubrictool.progress import ProgressFn, warn
from rubrictool.rubric import Rubric
from rubrictool.rubric.lint import lint_rubric
from rubrictool.tables import PREDICTION_COLUMNS

__all__ = ["annotate", "check_ready", "draft_problems", "run_annotation"]


def draft_problems(rubric: Rubric) -> list[str]:
    """What makes ``rubric`` a draft not to send to a model: ``rubric lint``'s placeholder warnings (TODO
    text left by ``rubric new``) and two levels of one concept with the same anchor (nothing tells them
    apart). Other lint warnings (no examples, near-duplicate definitions, an anchor shared by two
    concepts) are for reviewers and do not stop a run."""
    return [
        str(w) for w in lint_rubric(rubric)
        if w.code == "placeholder" or (w.code == "repeated-anchor" and "same anchor as level" in w.message)
    ]


def check_ready(rubric: Rubric, where: str | Path | None = None) -> None:
    """Raise one line naming the rubric (``where``: its file) and its first draft problem, if any."""
    problems = draft_problems(rubric)
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise AnnotateError(
            f"{where or f'rubric {rubric.name!r}'}: a draft, not sent to any model: {problems[0]}{more}",
            hint="finish it (rubrictool rubric lint lists every problem) or pass --allow-draft",
        )


def _locks(stack: contextlib.ExitStack, config: AnnotateConfig, out: str | Path | None) -> None:
    """One writer per cache and per output (rubrictool.locks)."""
    if config.cache is not None:
        stack.enter_context(writer_lock(config.cache, f"the reply cache {config.cache}",
                                        "wait for it to finish, or pass another --cache"))
    if out is not None:
        pred = output_paths(out)[0]
        stack.enter_context(writer_lock(pred, f"the output {pred}", "wait for it to finish, or pass another --out"))


def _warn_too_long(jobs: list[tuple[str, ItemPrompt]], config: AnnotateConfig, progress: ProgressFn | None) -> None:
    """A warning per model whose context (litellm's max_input_tokens, when known) some prompts exceed, before any
    request: those requests would be refused (and paid for nothing by some providers)."""
    for model in config.models:
        context = context_tokens(model)
        if context is None:
            continue
        too_long = [(item_id, n) for item_id, prompt in jobs
                    if (n := count_tokens(model, [{"role": "user", "content": prompt.text}])) > context]
        if too_long:
            warn(progress, too_long_message(model, sorted(too_long, key=lambda t: -t[1]), len(jobs), context))


def run_annotation(
    items: pd.DataFrame,
    rubric: Rubric,
    config: AnnotateConfig,
    out: str | Path,
    progress: ProgressFn | None = None,
    rubric_file: str | Path | None = None,
) -> tuple[AnnotateResult, tuple[Path, Path, Path]]:
    """:func:`annotate`, then :func:`write_outputs`, holding ``<cache>.lock`` and ``<predictions>.lock``
    throughout: a second run on the same cache or output stops at once (:class:`LockHeld`, naming the
    holder). Returns the result and the paths written. ``rubric_file`` names the rubric in the draft check."""
    config.check()
    if not config.allow_draft:
        check_ready(rubric, rubric_file)
    with contextlib.ExitStack() as stack:
        _locks(stack, config, out)
        result = annotate(items, rubric, config, progress)
        paths = write_outputs(result, out, config.cache)
    return result, paths


def annotate(
    items: pd.DataFrame,
    rubric: Rubric,
    config: AnnotateConfig,
    progress: ProgressFn | None = None,
) -> AnnotateResult:
    """Annotate every item with every model; returns predictions, failure records and a summary per model.

    The rubric must not be a draft (:func:`check_ready`) unless ``config.allow_draft``; the reply
    cache is locked against a second writer for the run (:func:`run_annotation` also locks the output).

    ``progress`` gets one task per model (items done; info: cost, tokens, failures) and, in a single
    process, a ``total`` task over all models (info: the cost so far).

    Raises :class:`AnnotateError` for bad settings (missing key, unknown template, a budget for a model
    without a known price) before anything is sent, and when a model refuses every request (wrong key,
    unknown model) — what was already answered stays in the cache.
    """
    jobs = prepare(items, rubric, config)
    if not config.allow_draft:
        check_ready(rubric)
    check_keys(config)
    _warn_too_long(jobs, config, progress)
    if config.budget is not None:
        unpriced = [m for m in config.models if request_price(m, 1000, 1000) is None]
        if unpriced:
            raise AnnotateError(
                f"no price for {', '.join(unpriced)} in litellm's cost map, so a budget cannot be enforced",
                hint="drop --budget for local models, or use a priced model string",
            )
    t_start = time.monotonic()
    runner: Runner | ShardResult
    n_workers = auto_workers(config, len(jobs))
    with contextlib.ExitStack() as stack:
        _locks(stack, config, None)
        if n_workers > 1:
            runner = run_workers(rubric, config, jobs, progress)
        else:
            cache = open_cache(config)
            runner = Runner(rubric, config, cache)
            try:
                run_with_progress(runner, jobs, progress)
            finally:
                cache.close()
    if runner.cache_error:
        raise AnnotateError(runner.cache_error, hint="free space or fix the folder's permissions, then re-run")
    early = any(EARLY_STOP in why for why in runner.fatal.values())
    if runner.fatal and not early and not any(s.ok for s in runner.summary.values()):
        raise AnnotateError("; ".join(runner.fatal.values()))  # a wrong key or model for every model: nothing to write
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
