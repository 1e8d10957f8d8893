"""Several client processes sharing the items, the concurrency and the budget."""

from __future__ import annotations

import dataclasses
import multiprocessing as mp
import os
import queue as queue_mod
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from rubrictool.annotate.config import AnnotateConfig
from rubrictool.annotate.llm import load_litellm
from rubrictool.annotate.prompt import ItemPrompt
from rubrictool.annotate.runner import ModelSummary, Runner, open_cache, run_with_progress
from rubrictool.errors import AnnotateError
from rubrictool.progress import Progress, ProgressFn
from rubrictool.rubric import Rubric

__all__ = [
    "ShardResult",
    "auto_workers",
    "run_workers",
]


@dataclass
class ShardResult:
    """What one worker process hands back: the same fields annotate() reads from a Runner."""

    rows: list[dict[str, Any]]
    failures: list[dict[str, Any]]
    summary: dict[str, ModelSummary]
    fatal: dict[str, str]
    stopped_by_budget: bool
    cache_error: str = ""


# auto workers: requests in flight per client process, and the smallest run worth starting processes for
AUTO_IN_FLIGHT_PER_WORKER = 8
AUTO_MIN_ITEMS = 64


def auto_workers(config: AnnotateConfig, n_jobs: int) -> int:
    """Client processes for ``--workers`` auto: one, except for a local server (``api_base``) at a
    concurrency above 8 with at least 64 items, where one process per 8 requests in flight (at most two
    per CPU) keeps each event loop's queue of replies short; several processes reach a larger share of
    the ideal rate than one on 2 cores (measured with benchmarks/annotate_throughput.py; the numbers
    are in docs/results.md). A hosted API answering in seconds never needs more than one."""
    if config.workers is not None:
        return max(1, min(config.workers, config.concurrency, n_jobs))
    if not config.api_base or n_jobs < AUTO_MIN_ITEMS or config.concurrency <= AUTO_IN_FLIGHT_PER_WORKER:
        return 1
    cap = 2 * (os.cpu_count() or 1)
    return max(1, min(-(-config.concurrency // AUTO_IN_FLIGHT_PER_WORKER), cap, n_jobs))


def _shard_configs(config: AnnotateConfig, n_jobs: int) -> list[AnnotateConfig]:
    """One config per worker: the concurrency split exactly (never more requests in flight than asked),
    the budget split evenly; at most one worker per request in flight and per item."""
    w = auto_workers(config, n_jobs)
    return [
        dataclasses.replace(
            config,
            workers=1,
            concurrency=config.concurrency // w + (1 if i < config.concurrency % w else 0),
            budget=config.budget / w if config.budget is not None else None,
        )
        for i in range(w)
    ]


def _exit_with(parent: int) -> None:
    """Worker side: end this process as soon as the annotate() process is gone (even after SIGKILL)."""

    def watch() -> None:
        while True:
            time.sleep(0.25)
            try:
                os.kill(parent, 0)
            except (ProcessLookupError, PermissionError):  # gone, or the pid now belongs to someone else
                os._exit(1)

    threading.Thread(target=watch, daemon=True, name="rubrictool-parent-watch").start()


def _shared_take(counter: Any, n: int) -> Callable[[], int]:
    """The next job index from a counter in shared memory that all worker processes draw from (-1: done)."""

    def take() -> int:
        with counter.get_lock():
            i = counter.value
            if i >= n:
                return -1
            counter.value = i + 1
        return int(i)

    return take


def _run_shard(
    rubric: Rubric, config: AnnotateConfig, jobs: list[tuple[str, ItemPrompt]], queue: Any, shard: int, parent: int,
    counters: dict[str, Any], stop_flags: dict[str, Any],
) -> None:
    """Worker process: annotate the items it draws from the shared counters (one per model); progress and
    the result go back through ``queue``."""
    _exit_with(parent)
    try:
        cache = open_cache(config)
        runner = Runner(rubric, config, cache)
        runner.stop_flags = stop_flags  # a model one process stops early, every process stops

        last: dict[str, float] = {}

        def progress(model: str) -> None:
            # at most ~10 messages a second: each put wakes this process's queue feeder thread, which
            # competes with the event loop for the GIL, and the parent for the CPU
            now = time.monotonic()
            if now - last.get(model, 0.0) < 0.1:
                return
            last[model] = now
            send(model)

        def send(model: str) -> None:
            s = runner.summary[model]
            queue.put(("progress", shard, model, s.items, s.cost_usd, s.prompt_tokens + s.completion_tokens,
                       s.failures))

        runner.on_progress = progress
        try:
            run_with_progress(runner, jobs, None, {m: _shared_take(c, len(jobs)) for m, c in counters.items()})
        finally:
            cache.close()
        for m in runner.summary:
            send(m)  # the final counts
        queue.put(("done", ShardResult(runner.rows, runner.failures, runner.summary, runner.fatal,
                                       runner.budget.stopped,
                                        runner.cache_error)))
    except AnnotateError as e:
        queue.put(("error", str(e)))
    except BaseException as e:  # noqa: BLE001 - reported by the parent as one line, never a traceback
        queue.put(("error", f"a worker process failed: {e.__class__.__name__}: {e}"))


def _merge_shards(models: Sequence[str], shards: list[ShardResult]) -> ShardResult:
    summary = {m: ModelSummary(model=m) for m in models}
    for sh in shards:
        for m, s in sh.summary.items():
            t = summary[m]
            for f in ("items", "ok", "failures", "repaired", "cached_items", "retried", "requests", "retries",
                      "prompt_tokens", "completion_tokens", "cost_usd"):
                setattr(t, f, getattr(t, f) + getattr(s, f))
            t.price_known = t.price_known and s.price_known
            t.seconds = max(t.seconds, s.seconds)
            t.stopped_by_budget = t.stopped_by_budget or s.stopped_by_budget
    fatal: dict[str, str] = {}
    for sh in shards:
        for m, why in sh.fatal.items():
            fatal.setdefault(m, why)
    return ShardResult(
        rows=[r for sh in shards for r in sh.rows],
        failures=[f for sh in shards for f in sh.failures],
        summary=summary,
        fatal=fatal,
        stopped_by_budget=any(sh.stopped_by_budget for sh in shards),
        cache_error=next((sh.cache_error for sh in shards if sh.cache_error), ""),
    )


def run_workers(
    rubric: Rubric, config: AnnotateConfig, jobs: list[tuple[str, ItemPrompt]], progress: ProgressFn | None
) -> ShardResult:
    """Share the items among ``config.workers`` processes and merge what they return.

    Each process draws the next item from a counter in shared memory (one per model) whenever one of its
    request slots is free, so a process that gets less CPU simply takes fewer items and all finish together.

    Processes are forked when this process runs a single thread, after litellm is imported here (4-5 s of
    CPU that each worker would otherwise spend on its own), otherwise forked from a fork server that
    imported rubrictool and litellm once (spawned on Windows). Replies land in the shared SQLite cache as
    they arrive, so an interrupted run resumes like a single-process one.
    """

    load_litellm()  # imports litellm, which starts no thread
    if sys.platform.startswith("linux") and threading.active_count() == 1:
        ctx: Any = mp.get_context("fork")
    elif sys.platform != "win32":  # forking a multi-threaded process is unsafe: fork from a clean server
        ctx = mp.get_context("forkserver")
        ctx.set_forkserver_preload(["rubrictool.annotate", "litellm"])  # imported once, not per worker
    else:
        ctx = mp.get_context("spawn")
    # The cache is created here, once: WAL mode and the table are set before the workers open it. Workers that
    # each had to create it at the same moment raced for the write lock ("database is locked").
    open_cache(config).close()
    subs = _shard_configs(config, len(jobs))
    w = len(subs)
    q = ctx.Queue()
    counters = {m: ctx.Value("q", 0) for m in config.models}
    stop_flags = {m: ctx.Value("b", 0) for m in config.models}
    procs = [
        ctx.Process(target=_run_shard, args=(rubric, sub, jobs, q, i, os.getpid(), counters, stop_flags), daemon=True)
        for i, sub in enumerate(subs)
    ]
    for p in procs:
        p.start()
    shards: list[ShardResult] = []
    errors: list[str] = []
    try:
        if progress is not None:
            for m in config.models:
                progress(Progress(m, 0, len(jobs)))
        latest: dict[tuple[int, str], tuple[int, float, int, int]] = {}  # (shard, model) -> items, cost, tokens, failed
        while len(shards) + len(errors) < w:
            try:
                msg = q.get(timeout=1.0)
            except queue_mod.Empty:
                if not any(p.is_alive() for p in procs) and q.empty():
                    errors.append("a worker process exited without a result (killed?); run again to resume from the "
                                  "cache")
                    break
                continue
            if msg[0] == "done":
                shards.append(msg[1])
            elif msg[0] == "error":
                errors.append(msg[1])
                for flag in stop_flags.values():  # the others finish what they have in flight and stop
                    flag.value = 1
            elif progress is not None:
                _, shard, model, *totals = msg
                latest[(shard, model)] = tuple(totals)
                done, cost, tok, failed = (sum(v[i] for (_, m), v in latest.items() if m == model) for i in range(4))
                progress(Progress(model, int(done), len(jobs), f"${cost:.4f} {int(tok):,} tok {int(failed)} failed"))
        for p in procs:
            p.join(timeout=10)
    except BaseException:
        for p in procs:
            if p.is_alive():
                p.terminate()
        raise
    finally:
        q.close()
    if errors:
        raise AnnotateError(errors[0])
    return _merge_shards(config.models, shards)
