"""What a learning curve says, in one reading per variant: the same cells give curve.json, curve.png and the words.

:func:`read_curve` reads curve.csv's cells (:mod:`rubrictool.curve`) once per variant and decides what may be said:

* ``reached`` / ``at_smallest``: the grader beats the majority class at its full-data size, and a size (the first
  one that reaches 90 % of the full-data QWK *and* beats the majority class) gives its 90 % point;
* ``only_full``: the curve has no size below ``all`` for this variant (add smaller sizes);
* ``not_before_full``: smaller sizes were measured, and none of them both reaches 90 % of the full-data QWK and beats
  the majority class: only all the answers do;
* ``below_majority``: the grader does not beat the majority class at its full-data size, so no 90 % point is given
  (the words say at which sizes, if any, it does beat it);
* ``no_full``: no ``all`` size, so there is no full-data QWK to take 90 % of;
* ``not_positive``: the full-data QWK is not above 0;
* ``flat``: the full-data QWK's 95 % CI over its cells (a t-interval over folds × repeats) reaches the majority
  class's QWK: more answers will not help this recipe, and no 90 % point is given.

"Beats the majority class" at a size: the mean over the size's cells (folds × repeats) of the grader's T-Acc is above
the mean of the majority class's T-Acc on the same cells, and its mean QWK is above the majority's (which is 0). QWK
alone cannot say it: a grader whose T-Acc is below always giving the most common grade can still have a QWK above 0.

:func:`reading_sentence` is the one sentence per variant that ``learning-curve`` prints and curve.json keeps;
:func:`plot_curve` marks exactly the ``reach`` of the readings that have one.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

__all__ = ["FRACTION", "METRICS", "beats_majority", "default_sizes", "read_curve", "reading_sentence", "size_order",
           "summarize_curve"]

FRACTION = 0.9
ALL = "all"
METRICS = ("t_acc", "qwk", "t_f1")  # what a curve measures at every size
LADDER = (10, 20, 50, 100, 200, 400, 800, 1600, 3200, 6400, 12800)


def size_order(size: str) -> float:
    """A size token's place on the curve: its number, "all" last."""
    return math.inf if size == ALL else float(size)


def summarize_curve(cells: pd.DataFrame) -> pd.DataFrame:
    """One row per (variant, size), sizes ascending: cells, mean n_train, mean and s.d. of each metric over
    folds × repeats, and the majority baseline's means."""
    rows = []
    for (variant, size), g in cells.assign(size=cells["size"].astype(str)).groupby(["variant", "size"], sort=False):
        row: dict[str, Any] = {"variant": variant, "size": size, "cells": len(g), "n_train": float(g["n_train"].mean())}
        for m in METRICS:
            row[m] = float(g[m].mean())
            row[f"{m}_sd"] = float(g[m].std(ddof=1)) if len(g) > 1 else 0.0
            row[f"majority_{m}"] = float(g[f"majority_{m}"].mean())
        row["qwk_lo"], row["qwk_hi"] = _t_interval(g["qwk"].to_numpy(float))
        if "failing_passed" in g:  # cells written before it have none
            row["failing_passed"] = float(g["failing_passed"].mean())  # NaN where no cell had a failing answer
        rows.append(row)
    out = pd.DataFrame(rows)
    if out.empty:
        return out
    first = {v: i for i, v in enumerate(dict.fromkeys(cells["variant"]))}  # variants in the order the cells list them
    out["_v"], out["_o"] = out["variant"].map(first), out["size"].map(size_order)
    return out.sort_values(["_v", "_o"], kind="stable").drop(columns=["_v", "_o"]).reset_index(drop=True)


def _t_interval(x: Any) -> tuple[float, float]:
    """95 % t-interval of the mean over the cells (folds × repeats); NaN with fewer than two cells."""
    from scipy.stats import t as student

    v = np.asarray(x, dtype=float)
    v = v[~np.isnan(v)]
    if len(v) < 2:
        return float("nan"), float("nan")
    half = float(student.ppf(0.975, len(v) - 1) * v.std(ddof=1) / np.sqrt(len(v)))
    return float(v.mean() - half), float(v.mean() + half)


def beats_majority(row: dict[str, Any]) -> bool:
    """A summary row (:func:`rubrictool.curve.summarize_curve`): mean T-Acc above the majority class's mean T-Acc on
    the same cells, and mean QWK above the majority's."""
    return bool(row["t_acc"] > row["majority_t_acc"] and row["qwk"] > row["majority_qwk"])


def _n(row: dict[str, Any]) -> str:
    return f"{row['n_train']:.0f}"


def _read_one(s: pd.DataFrame, variant: str, fraction: float) -> dict[str, Any]:
    rows = [{str(k): v for k, v in r.items()} for r in s.to_dict(orient="records")]
    above = [str(r["size"]) for r in rows if beats_majority(r)]
    out: dict[str, Any] = {"variant": variant, "fraction": fraction, "sizes_above_majority": above, "reach": None,
                           "full": None}
    full = next((r for r in rows if r["size"] == ALL), None)
    smaller = [r for r in rows if r["size"] != ALL]
    if full is None:
        return out | {"status": "no_full"}
    out["full"] = {"n_train": float(full["n_train"]), "qwk": float(full["qwk"]), "t_acc": float(full["t_acc"]),
                   "majority_t_acc": float(full["majority_t_acc"]), "majority_qwk": float(full["majority_qwk"]),
                   "qwk_lo": float(full.get("qwk_lo", math.nan)), "qwk_hi": float(full.get("qwk_hi", math.nan)),
                   "failing_passed": float(full.get("failing_passed", math.nan))}
    if not full["qwk"] > 0:
        return out | {"status": "not_positive"}
    if not beats_majority(full):
        return out | {"status": "below_majority"}
    if not math.isnan(out["full"]["qwk_lo"]) and out["full"]["qwk_lo"] <= float(full["majority_qwk"]):
        return out | {"status": "flat"}
    if not smaller:
        return out | {"status": "only_full"}
    target = fraction * float(full["qwk"])
    prev: tuple[float, float] | None = None
    for r in rows:
        n, v = float(r["n_train"]), float(r["qwk"])
        if v >= target and beats_majority(r):
            if r["size"] == ALL:
                break
            if prev is None:
                est, where = n, "at or below the smallest size"
            elif prev[1] >= target:  # a smaller size reached the QWK without beating the majority class
                est, where = n, "the first size that also beats the majority class"
            else:
                t = (target - prev[1]) / (v - prev[1]) if v != prev[1] else 1.0
                est, where = math.exp(math.log(prev[0]) + t * (math.log(n) - math.log(prev[0]))), "between sizes"
            reach = {"variant": variant, "metric": "qwk", "fraction": fraction, "full": float(full["qwk"]),
                     "target": target, "full_n_train": float(full["n_train"]), "size": str(r["size"]),
                     "size_n_train": n, "n_estimate": round(est), "where": where}
            return out | {"status": "at_smallest" if prev is None else "reached", "reach": reach}
        prev = (n, v)
    return out | {"status": "not_before_full"}


def read_curve(cells: pd.DataFrame, fraction: float = FRACTION) -> dict[str, dict[str, Any]]:
    """One reading per variant of curve.csv's cells (see the module docstring), each with its ``sentence``."""
    out: dict[str, dict[str, Any]] = {}
    if cells.empty:
        return out
    s = summarize_curve(cells)
    for variant in dict.fromkeys(str(v) for v in cells["variant"]):
        reading = _read_one(s[s["variant"] == variant].reset_index(drop=True), variant, fraction)
        reading["sentence"] = reading_sentence(reading)
        out[variant] = reading
    return out


def reading_sentence(r: dict[str, Any]) -> str:
    """The reading in one sentence, naming only what the cells support, and the failing answers passed at the
    full-data size when the cells measured them."""
    text = _reading(r)
    fp = (r.get("full") or {}).get("failing_passed")
    if fp is not None and not math.isnan(fp):
        text += f"; with all the answers {100 * fp:.0f} % of the failing test answers get a pass mark"
    return text


def _reading(r: dict[str, Any]) -> str:
    v, pct, full = r["variant"], f"{100 * r['fraction']:.0f} %", r.get("full")
    status = r["status"]
    if status == "no_full":
        return f"{v}: no {pct} point without its full-data cells (add 'all' to --sizes)"
    assert full is not None
    with_all = f"QWK {full['qwk']:.3f} with all {full['n_train']:.0f} answers"
    if status == "not_positive":
        return f"{v}: its full-data QWK is not above 0 ({with_all}); no {pct} point"
    if status == "below_majority":
        above = r["sizes_above_majority"]
        also = (f"; its T-Acc is above the majority class's only at size{'s' if len(above) > 1 else ''} "
                f"{', '.join(above)}" if above else "")
        return (f"{v}: does not beat the majority class {'with all the answers' if above else 'at any size'} "
                f"(with all {full['n_train']:.0f}: T-Acc {full['t_acc']:.3f} against the majority class's "
                f"{full['majority_t_acc']:.3f}{also}): no {pct} point")
    if status == "flat":
        return (f"{v}: flat: more answers will not help this recipe — with all {full['n_train']:.0f} answers its QWK "
                f"{full['qwk']:.3f} has a 95 % CI over the cells [{full['qwk_lo']:.3f}, {full['qwk_hi']:.3f}] that "
                f"reaches the majority class's {full['majority_qwk']:.3f}; no {pct} point")
    if status == "only_full":
        return f"{v}: only its full-data cells ({with_all}); add smaller sizes for its {pct} point"
    if status == "not_before_full":
        return (f"{v}: no smaller size reaches {pct} of its full-data QWK while beating the majority class "
                f"({with_all}): every answer graded so far still counts")
    reach = r["reach"]
    assert reach is not None
    if status == "at_smallest":
        return (f"{v}: its smallest size, {reach['size']} labelled answers, already reaches {pct} of its full-data "
                f"QWK ({reach['target']:.3f} of {full['qwk']:.3f} with {full['n_train']:.0f}) and beats the majority "
                "class; fewer may do")
    return (f"{v}: about {reach['n_estimate']} labelled answers reach {pct} of its full-data QWK "
            f"({reach['target']:.3f} of {full['qwk']:.3f} with {full['n_train']:.0f}; first size at it: "
            f"{reach['size']}), above the majority "
            "class")


def default_sizes(pool: int) -> list[int | str]:
    """The sizes a curve gets when none are given, from the smallest fold's training part (``pool`` answers): the
    sizes of LADDER at most half the pool (the five largest), at least two below the pool when it has room, and
    ``all``. A table of 1,800 answers per fold gets 50, 100, 200, 400, 800, all; one of 38 gets 10, 20, all."""
    sizes = [s for s in LADDER if s <= pool / 2][-5:]
    if len(sizes) < 2:
        sizes = [s for s in LADDER if s < pool][:2]
    return [*sizes, ALL]
