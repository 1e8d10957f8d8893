"""Training runs in parallel (``--jobs N``): k-fold runs, learning-curve cells and ablation combinations in worker
processes.

Each unit of work is one call of a top-level function (``rubrictool.train.train_model``,
``rubrictool.pipeline.run_train``) with picklable arguments, run in a worker process started with ``spawn`` (no
forked torch state). The workers share the machine: on the CPU each gets ``cores // N`` torch threads; where torch sees
several GPUs, worker i computes on GPU i mod (number of GPUs) (``CUDA_VISIBLE_DEVICES``); with one GPU every worker
shares it. A unit's numbers do not depend on the order in which units run or on which worker runs it: every run seeds
itself (:meth:`reccbm.Recipe.seeded`), so a fold trained in a worker is the fold a serial run trains (the tests
compare them on the CPU). A worker reports no training events; the caller's ``progress`` gets one event per finished
unit. A unit that fails stops the others that have not started; what finished is on disk (runs are resumable).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_EXCEPTION, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from rubrictool.errors import TrainError
from rubrictool.progress import Progress, ProgressFn

__all__ = ["check_jobs", "run_in_workers", "worker_plan"]

# arguments a worker cannot take: callbacks live in the parent process (closures over its progress bars)
_LOCAL_ONLY = ("callback", "progress", "on_run")


def check_jobs(jobs: int) -> int:
    """``jobs`` when it is a sensible number of worker processes; a clear error otherwise (also under
    ``accelerate launch``, whose processes are already one training run)."""
    if jobs < 1:
        raise TrainError(f"--jobs {jobs}: give 1 (one run after another) or more worker processes")
    if jobs > 1 and int(os.environ.get("WORLD_SIZE", "1") or 1) > 1:
        raise TrainError("--jobs runs folds in worker processes; under `accelerate launch` the processes are one "
                         "training run already", hint="drop --jobs, or run without accelerate launch")
    return jobs


def worker_plan(jobs: int, units: int) -> list[dict[str, Any]]:
    """Per worker: the GPU it computes on (None: the CPU, or the one GPU all share) and its torch threads."""
    n = max(1, min(jobs, units))
    gpus = _gpu_count()
    threads = max(1, (os.cpu_count() or 1) // n)
    return [{"gpu": i % gpus if gpus > 1 else None, "threads": threads} for i in range(n)]


def _gpu_count() -> int:
    try:
        import torch

        return int(torch.cuda.device_count())
    except Exception:  # noqa: BLE001 - no usable CUDA: the CPU
        return 0


def _init_worker(plans: Any, hf_offline: str | None) -> None:
    """A new worker: its GPU (before torch initialises CUDA) and threads."""
    plan = plans.get()
    if plan["gpu"] is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = str(plan["gpu"])
    os.environ["OMP_NUM_THREADS"] = str(plan["threads"])
    if hf_offline is not None:
        os.environ["HF_HUB_OFFLINE"] = hf_offline
    import torch

    torch.set_num_threads(plan["threads"])


def _timed(fn: Callable[..., Any], kwargs: dict[str, Any]) -> tuple[Any, float]:
    t0 = time.perf_counter()
    out = fn(**kwargs)
    return out, time.perf_counter() - t0


def run_in_workers(
    fn: Callable[..., Any],
    units: Sequence[tuple[str, dict[str, Any]]],
    jobs: int,
    progress: ProgressFn | None = None,
    task: str = "runs",
) -> dict[str, tuple[Any, float]]:
    """Call ``fn(**kwargs)`` for every (label, kwargs) of ``units`` in up to ``jobs`` worker processes; returns
    {label: (what fn returned, wall seconds of the call)}. ``fn`` is a module-level function; callbacks among the
    kwargs (callback, progress, on_run) are dropped (they cannot cross processes). ``progress`` gets ``task``: units
    finished so far. Raises what a unit raised (the other units that had not started are cancelled) and a TrainError
    when a worker died."""
    import multiprocessing

    check_jobs(jobs)
    if not units:
        return {}
    calls = [(label, {k: v for k, v in kw.items() if k not in _LOCAL_ONLY}) for label, kw in units]
    ctx = multiprocessing.get_context("spawn")
    plans = worker_plan(jobs, len(calls))
    queue = ctx.Queue()
    for plan in plans:
        queue.put(plan)
    where = "GPU" if plans[0]["gpu"] is not None else f"{plans[0]['threads']} CPU thread(s) each"
    if progress:
        progress(Progress(task, 0, len(calls), f"{len(calls)} in {len(plans)} worker processes ({where})"))
    out: dict[str, tuple[Any, float]] = {}
    pool = ProcessPoolExecutor(max_workers=len(plans), mp_context=ctx, initializer=_init_worker,
                               initargs=(queue, os.environ.get("HF_HUB_OFFLINE")))
    try:
        futures: dict[Future[tuple[Any, float]], str] = {pool.submit(_timed, fn, kw): label for label, kw in calls}
        pending = set(futures)
        while pending:
            done, pending = wait(pending, return_when=FIRST_EXCEPTION)
            for fut in done:
                exc = fut.exception()
                if exc is not None:
                    for other in pending:
                        other.cancel()
                    if isinstance(exc, BrokenProcessPool):
                        raise TrainError(f"a worker process died while training {futures[fut]} (out of memory?); "
                                         f"the {len(out)} finished are kept",
                                         hint="run again to resume, with fewer --jobs") from None
                    raise exc
                out[futures[fut]] = fut.result()
                if progress:
                    progress(Progress(task, len(out), len(calls), f"{futures[fut]}: trained in a worker"))
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    return out
