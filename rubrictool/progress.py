"""The one way library functions report progress: a :class:`Progress` event passed to a callback.

A long-running function (a download, an annotation run, a push to Label Studio, grading, training)
takes ``progress: ProgressFn | None`` and calls it with the state of one *task* — a named counter
such as a model's items or the tasks imported so far. The library never prints: the command line
(:mod:`rubrictool.cli`) renders each task as one progress bar. ``reccbm`` stays independent of
rubrictool and reports training through its own ``reccbm.Event``; :func:`training_events` makes the callback
reccbm calls, which translates each (:func:`from_training_event`) into the same events: one channel.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["Progress", "ProgressFn", "counter", "from_training_event", "note", "training_events", "truncation_message",
           "warn", "warn_once"]


@dataclass(frozen=True)
class Progress:
    """The state of one task of a long-running function."""

    task: str  # what advances, shown as the bar's label: a model, "importing tasks", "Stage I epoch 2/6"
    done: int  # units done so far (items, bytes, optimiser steps, epochs)
    total: int | None = None  # units in all; None while unknown
    info: str = ""  # a short status: cost and tokens, the loss, a dev metric
    kind: str = "progress"  # "progress": one bar per task; "warning" or "note": info is a message to show once, no bar


ProgressFn = Callable[[Progress], None]


def warn(progress: ProgressFn | None, message: str) -> None:
    """Tell the user something once (inputs truncated, ...) through the progress callback, if any."""
    if progress is not None:
        progress(Progress("warning", 0, None, message, kind="warning"))


def note(progress: ProgressFn | None, message: str) -> None:
    """Tell the user a fact about the run once (which device trains, ...) through the progress callback, if any."""
    if progress is not None:
        progress(Progress("note", 0, None, message, kind="note"))


def truncation_message(n_truncated: int, n_items: int, max_len: int) -> str:
    """The one wording of "inputs were cut at max_len" (training and grading)."""
    return (
        f"{n_truncated} of {n_items} inputs are longer than max_len={max_len} tokens and were truncated "
        "(the response keeps at least 3/4 of the budget); raise --max-len to keep more of them"
    )


def counter(progress: ProgressFn | None, task: str) -> Callable[[int, int | None], None] | None:
    """A ``(done, total)`` callback that reports as ``task`` through ``progress`` (None stays None)."""
    if progress is None:
        return None
    report = progress

    def update(done: int, total: int | None) -> None:
        report(Progress(task, done, total))

    return update


_STAGES = {"stage1": "Stage I", "joint": "Joint", "stage2": "Stage II", "plm": "PLM", "lcec": "LCEC on dev outputs"}


def from_training_event(ev: Any) -> Progress | None:
    """A ``reccbm.Event`` as a :class:`Progress`: one task per Stage I (joint stage, PLM) epoch counting
    optimiser steps, and one Stage II task counting epochs (Stage II reports only finished epochs)."""
    label = _STAGES.get(ev.stage, ev.stage)
    if getattr(ev, "part", ""):
        label = f"{ev.part}: {label}"
    if ev.stage in ("stage2", "lcec"):
        if ev.kind != "epoch":
            return None
        info = f"dev T-F1 {ev.metrics['t_f1']:.3f}" if ev.stage == "stage2" else f"L_den {ev.metrics['loss']:.4f}"
        return Progress(f"{label} (≤{ev.epochs} epochs)", ev.epoch, ev.epochs, info)
    task = f"{label} epoch {ev.epoch}/{ev.epochs}"
    if ev.kind == "start":
        return Progress(task, 0, ev.steps_per_epoch)
    if ev.kind == "step":
        return Progress(task, ev.step, ev.steps_per_epoch, f"loss {ev.loss:.3f}")
    if ev.kind == "epoch":
        sel = "c_f1" if ev.stage == "stage1" else "t_f1"
        return Progress(task, ev.step, ev.steps_per_epoch, f"dev {sel.upper().replace('_', '-')} {ev.metrics[sel]:.3f}")
    return None


def training_events(progress: ProgressFn | None) -> Callable[[Any], None] | None:
    """The callback :func:`reccbm.fit` reports its ``reccbm.Event``s to, passing each on to ``progress`` as a
    :class:`Progress` (:func:`from_training_event`; events it does not show are dropped). None stays None."""
    if progress is None:
        return None
    report = progress

    def on_event(ev: Any) -> None:
        shown = from_training_event(ev)
        if shown is not None:
            report(shown)

    return on_event


def warn_once(progress: ProgressFn | None) -> ProgressFn | None:
    """``progress`` with each warning shown once however often it is reported (inputs truncated in every run of a
    learning curve). None stays None."""
    if progress is None:
        return None
    report, warned = progress, set()

    def show(ev: Progress) -> None:
        if ev.kind == "warning":
            if ev.info in warned:
                return
            warned.add(ev.info)
        report(ev)

    return show
