"""Reading a learning curve (what :func:`rubrictool.curve.learning_curve` writes): the summary per variant and size,
the answers that reach 90 % of the full-data QWK, where a run sits on a curve (the report page shows it), and the
figure, curve.png. The layout of curve.csv (``CURVE_COLUMNS``) is stated here, with its reader."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from rubrictool.atomic import atomic_write
from rubrictool.curve.reading import METRICS, read_curve, size_order, summarize_curve
from rubrictool.errors import DataError
from rubrictool.io import read_table

__all__ = [
    "ALL",
    "CURVE_COLUMNS",
    "CURVE_FAILING",
    "METRICS",
    "POINTS",
    "curve_title",
    "figure_ticks",
    "plot_curve",
    "position_on_curve",
    "reach_fraction",
    "size_order",
    "summarize_curve",
    "variant_labels",
]

POINTS = "points"  # no model: a points table fitted to the labelled answers' concept levels grades the test answers'
ALL = "all"  # the size token for the fold's whole training part
CURVE_COLUMNS = ["fold", "size", "repeat", "variant", "n_train", "n_dev", "t_acc", "qwk", "t_f1", "majority_t_acc",
                 "majority_qwk", "majority_t_f1", "encoder_epochs", "train_seconds", "encoder"]
CURVE_FAILING = ["failing_passed", "failing_error"]
"""curve.csv's last columns: each cell's failing test answers (below the rubric's pass mark) given a pass mark, and
their mean error (empty for cells written before they were measured; a curve.csv without them still reads)."""


# ---------------------------------------------------------------------------- reading a curve
def _interp_log(n: float, n0: float, v0: float, n1: float, v1: float) -> float:
    if n1 == n0:
        return v0
    t = (math.log(n) - math.log(n0)) / (math.log(n1) - math.log(n0))
    return v0 + t * (v1 - v0)


def reach_fraction(cells: pd.DataFrame, variant: str, fraction: float = 0.9,
                   metric: str = "qwk") -> dict[str, Any] | None:
    """How many labelled answers reach ``fraction`` of the full-data ``metric`` (the "all" size) for ``variant``:
    the first size whose mean reaches it, and the number interpolated (linearly in log n) between that size and the
    one before. None without an "all" size or when the full-data value is not above 0."""
    s = summarize_curve(cells[cells["variant"] == variant])
    if s.empty or ALL not in set(s["size"]):
        return None
    full = float(s.loc[s["size"] == ALL, metric].iloc[0])
    if not full > 0:
        return None
    target = fraction * full
    prev: tuple[float, float] | None = None
    for row in s.to_dict(orient="records"):
        n, v = float(row["n_train"]), float(row[metric])
        if v >= target:
            if prev is None:
                est, where = n, "at or below the smallest size"
            else:
                t = (target - prev[1]) / (v - prev[1])
                est, where = math.exp(math.log(prev[0]) + t * (math.log(n) - math.log(prev[0]))), "between sizes"
            return {"variant": variant, "metric": metric, "fraction": fraction, "full": full, "target": target,
                    "full_n_train": float(s.loc[s["size"] == ALL, "n_train"].iloc[0]), "size": str(row["size"]),
                    "size_n_train": n, "n_estimate": round(est), "where": where}
        prev = (n, v)
    return None  # not reached (cannot happen: the "all" size reaches its own value)


def position_on_curve(curve_csv: str | Path, n_train: float, variant: str) -> dict[str, Any]:
    """Where a run trained on ``n_train`` labelled answers sits on a learning curve (curve.csv) of ``variant``: the
    expected QWK and T-Acc at n_train, interpolated linearly in log n between the neighbouring sizes' means, and
    those neighbours, and the variant's 90 % point (:func:`reach_fraction`). Outside the measured sizes the nearest
    size's values are given and ``within`` is False."""
    p = Path(curve_csv)
    cells = read_table(p)
    missing = sorted(set(CURVE_COLUMNS[:8]) - set(cells.columns))
    if missing:
        raise DataError(f"{p}: not a curve.csv (no column(s) {missing})",
                        hint="give the curve.csv of `rubrictool learning-curve`")
    cells = cells.assign(size=cells["size"].astype(str), variant=cells["variant"].astype(str))
    if variant not in set(cells["variant"]):
        raise DataError(f"{p}: no cells of variant {variant!r}; the curve has "
                        f"{', '.join(sorted(set(cells['variant'])))}")
    if not n_train > 0:
        raise DataError(f"n_train {n_train}: give the number of labelled answers the run trained on (> 0)")
    s = summarize_curve(cells[cells["variant"] == variant]).sort_values("n_train", kind="stable")
    pts = s.to_dict(orient="records")
    reading = read_curve(cells[cells["variant"] == variant])[variant]  # a 90 % point only above the majority class

    def point(r: Any) -> dict[str, Any]:
        return {"size": r["size"], "n_train": r["n_train"], "qwk": r["qwk"], "qwk_sd": r["qwk_sd"], "t_acc": r["t_acc"],
                "t_acc_sd": r["t_acc_sd"], "cells": r["cells"]}

    lower = [r for r in pts if r["n_train"] <= n_train]
    upper = [r for r in pts if r["n_train"] >= n_train]
    lo, hi = (lower[-1] if lower else None), (upper[0] if upper else None)
    if lo is not None and hi is not None:
        qwk = _interp_log(n_train, lo["n_train"], lo["qwk"], hi["n_train"], hi["qwk"])
        t_acc = _interp_log(n_train, lo["n_train"], lo["t_acc"], hi["n_train"], hi["t_acc"])
    else:
        near = lo if lo is not None else hi
        assert near is not None
        qwk, t_acc = near["qwk"], near["t_acc"]
    return {"variant": variant, "n_train": n_train, "qwk": qwk, "t_acc": t_acc, "within": lo is not None
            and hi is not None,
            "lower": point(lo) if lo else None, "upper": point(hi) if hi else None,
            "full": point(pts[-1]) if pts and pts[-1]["size"] == ALL else None, "curve": str(p),
            "reach_90": reading["reach"], "reading": reading}


# ---------------------------------------------------------------------------- the figure
_COLOURS = {"reccbm": "#1f77b4", "plm": "#ff7f0e", "vanilla": "#2ca02c", POINTS: "#9467bd"}
_ENCODER_STYLE = {"frozen": ("-.", "s"), "auto": ((0, (1, 1)), "^")}  # a variant's suffix -> line style, marker


def variant_labels(cells: pd.DataFrame) -> dict[str, str]:
    """Legend names: the variant, and which folds its cells come from when the variants do not share the same folds
    (a curve extended with some variants on fold 0 only must not read as if all were measured on every fold)."""
    folds = {str(v): sorted({int(f) for f in g["fold"]}) for v, g in cells.groupby("variant", sort=False)}
    if len({tuple(f) for f in folds.values()}) <= 1:
        return {v: v for v in folds}
    return {v: f"{v} (fold{'s' if len(f) > 1 else ''} {', '.join(map(str, f))})" for v, f in folds.items()}


def figure_ticks(summary: pd.DataFrame) -> dict[int, str]:
    """x ticks of the figure: each size's answers, and one tick for "all" — whose answers differ a little between
    variants measured on other folds (a mean over five folds beside fold 0 alone), so it is labelled "≈n" then."""
    ticks = {round(float(r["n_train"])): str(int(r["size"])) for r in summary.to_dict(orient="records")
             if r["size"] != ALL}
    full = sorted({round(float(n)) for n in summary.loc[summary["size"] == ALL, "n_train"]})
    if full:
        n = round(float(np.mean(full)))
        ticks[n] = f"{'' if len(full) == 1 else '≈'}{n}\n(all)"
    return dict(sorted(ticks.items()))


def plot_curve(cells: pd.DataFrame, path: str | Path, *, reach: dict[str, dict[str, Any] | None] | None = None,
               title: str = "Learning curve") -> Path:
    """curve.png: QWK and T-Acc against labelled answers (log scale), one line per variant (mean over folds ×
    repeats, band ± 1 s.d.), the majority-class baseline dashed, and where each variant reaches 90 % of its
    full-data QWK (dotted). Written atomically."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    s = summarize_curve(cells)
    names = variant_labels(cells)
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.4))
    for ax, metric, label in ((axes[0], "qwk", "QWK"), (axes[1], "t_acc", "T-Acc")):
        for variant, g in s.groupby("variant", sort=False):
            model, _, encoder = str(variant).partition("-")  # reccbm-frozen: reccbm's colour, its own line and marker
            colour = _COLOURS.get(model, "#7f7f7f")
            style, marker = _ENCODER_STYLE.get(encoder, ("-", "o"))
            x, y, sd = g["n_train"].to_numpy(), g[metric].to_numpy(), g[f"{metric}_sd"].to_numpy()
            ax.plot(x, y, marker=marker, ls=style, color=colour, label=names.get(str(variant), str(variant)))
            ax.fill_between(x, y - sd, y + sd, color=colour, alpha=0.15, lw=0)
            r = (reach or {}).get(str(variant))
            if metric == "qwk" and r:
                ax.axhline(r["target"], color=colour, ls=":", lw=0.9)
                ax.plot([r["n_estimate"]], [r["target"]], marker="v", color=colour, ms=8,
                        label=f"{variant}: 90 % of full QWK at ≈{r['n_estimate']}")
        base = s.groupby("size", sort=False).agg(n=("n_train", "mean"), v=(f"majority_{metric}", "mean"))
        base = base.sort_values("n")
        ax.plot(base["n"], base["v"], ls="--", color="#7f7f7f", label="majority class")
        ax.set_xscale("log")
        ticks = figure_ticks(s)
        ax.set_xticks(list(ticks), list(ticks.values()))
        ax.minorticks_off()
        ax.set_xlabel("labelled answers (train + dev)")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, fontsize=8, loc="lower center", ncol=min(4, len(labels)), frameon=False)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout(rect=(0, 0.06 * math.ceil(len(labels) / 4), 1, 1))
    p = Path(path)
    marked = {v: r["n_estimate"] for v, r in (reach or {}).items() if r}  # the 90 % points drawn, for readers
    try:
        atomic_write(p, lambda tmp: fig.savefig(tmp, format="png", dpi=110,
                                                metadata={"Description": json.dumps({"reach_90": marked})}))
    finally:
        plt.close(fig)
    return p


def curve_title(rubric: str, folds: int, by: str | None, run: list[int] | None = None) -> str:
    """curve.png's title: the rubric and the folds (which of them, when not all)."""
    split = f"{folds} folds grouped by {by}" if by else f"{folds} random folds"
    if run is not None and len(run) < folds:  # say which folds the curve holds when it is not all of them
        split = f"fold{'s' if len(run) > 1 else ''} {', '.join(map(str, run))} of {split}"
    return f"Learning curve: {rubric} ({split}; mean ± 1 s.d. over folds × repeats)"
