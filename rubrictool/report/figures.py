"""Figures (matplotlib, Agg backend): each function returns the PNG bytes of one figure.

Colour: a blue/orange pair readable in grey and by colour-blind readers; diverging heatmaps use the
same −1..1 scale on both sides of a comparison.
"""

from __future__ import annotations

import base64
import io
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
from numpy.typing import NDArray

__all__ = [
    "ablation_png",
    "confusion_png",
    "contributions_png",
    "data_uri",
    "heatmaps_png",
    "intervention_png",
    "reliability_png",
]

BLUE, ORANGE, GREY = "#1f77b4", "#ff7f0e", "#7f7f7f"


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _png(fig: Any) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    _plt().close(fig)
    return buf.getvalue()


def data_uri(png: bytes) -> str:
    """A PNG as a data: URI, for a page that is one self-contained file."""
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


def contributions_png(keys: Sequence[str], contributions: Sequence[float], bias: float, title: str,
                      after: Sequence[float] | None = None, after_label: str = "after override",
                      other: tuple[str, Sequence[float], float] | None = None,
                      label: str = "as predicted") -> bytes:
    """Horizontal bars: each concept's contribution to the grade's logit, the bias, and their sum.

    ``after``: each concept's contribution after an override (hatched bars); ``other``: (label,
    contributions, bias) toward a second grade (the gold or runner-up one; white bars, with its bias and
    sum). The axis always holds every bar and its value label (nothing is clipped)."""
    plt = _plt()
    labels = [*keys, "bias", "= logit"]
    vals = [*contributions, bias, float(np.sum(contributions) + bias)]
    series: list[tuple[str, list[float], dict[str, Any]]] = [
        (label, vals, {"color": [BLUE if v >= 0 else ORANGE for v in vals[:-2]] + [GREY, "black"]})]
    if other is not None:
        o_label, o_vals, o_bias = other
        series.append((o_label, [*o_vals, o_bias, float(np.sum(o_vals) + o_bias)],
                       {"color": "white", "edgecolor": "black"}))
    if after is not None:
        series.append((after_label, list(after), {"color": "none", "edgecolor": "black", "hatch": "//"}))
    y = np.arange(len(labels))
    n = len(series)
    h = 0.8 / n
    fig, ax = plt.subplots(figsize=(6.4, (0.3 + 0.14 * n) * len(labels) + 1.2))
    shown: list[float] = []
    for s_i, (name, v, style) in enumerate(series):
        yy = y[: len(v)] + (s_i - (n - 1) / 2) * h
        ax.barh(yy, v, height=h, label=name, **style)
        for yi, vi in zip(yy, v):
            ax.annotate(f"{vi:+.2f}", (vi, yi), xytext=(3 if vi >= 0 else -3, 0), textcoords="offset points",
                        ha="left" if vi >= 0 else "right", va="center", fontsize=7 if n > 1 else 8)
        shown += v
    if n > 1:
        from matplotlib.patches import Patch

        handles = [Patch(facecolor=BLUE, label=f"{label} (orange: against)"),
                   *(Patch(label=name, **{k: v for k, v in style.items() if k != "color"},
                           facecolor=style["color"]) for name, _, style in series[1:])]
        ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=2, fontsize=8, frameon=False)
    ax.axvline(0, color="black", lw=0.8)
    ax.set_yticks(y, labels)
    ax.invert_yaxis()
    ax.set_xlabel("contribution to the logit")
    ax.set_title(title, fontsize=10)
    lo, hi = min(0.0, *shown), max(0.0, *shown)
    pad = 0.3 * (hi - lo or 1.0)  # room for the "+1.23" labels beyond the longest bars
    ax.set_xlim(lo - pad, hi + pad)
    return _png(fig)


def confusion_png(matrix: NDArray[Any], labels: Sequence[Any], title: str = "human (rows) × model (columns)",
                  xlabel: str = "model grade", ylabel: str = "human grade") -> bytes:
    plt = _plt()
    m = np.asarray(matrix)
    fig, ax = plt.subplots(figsize=(0.55 * len(labels) + 2.2, 0.55 * len(labels) + 1.8))
    ax.imshow(m, cmap="Blues")
    top = m.max() if m.size else 1
    for i in range(m.shape[0]):
        for j in range(m.shape[1]):
            ax.text(j, i, str(int(m[i, j])), ha="center", va="center", fontsize=9,
                    color="white" if m[i, j] > 0.6 * top else "black")
    ax.set_xticks(range(len(labels)), [str(v) for v in labels])
    ax.set_yticks(range(len(labels)), [str(v) for v in labels])
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    return _png(fig)


def intervention_png(curves: pd.DataFrame, metric: str = "t_acc") -> bytes:
    """Like the paper's intervention figure: one panel per concept order, one line per strategy."""
    plt = _plt()
    orders = list(dict.fromkeys(curves["order"]))
    fig, axes = plt.subplots(1, len(orders), figsize=(5.2 * len(orders), 3.6), sharey=True, squeeze=False)
    style = {"oracle": (BLUE, "o", "oracle (adjudicated)"), "wrong": (ORANGE, "s", "wrong (most damaging)"),
             "random": (GREY, "^", "random level")}
    for ax, order in zip(axes[0], orders):
        part = curves[curves["order"] == order]
        for strategy, (color, marker, label) in style.items():
            s = part[part["strategy"] == strategy]
            if len(s):
                ax.plot(s["k"], s[metric], color=color, marker=marker, label=label)
        none = part[part["k"] == 0][metric]
        if len(none):
            ax.axhline(float(none.iloc[0]), color="black", lw=0.8, ls=":", label="no intervention")
        ax.set_title(f"the k most {order} concepts replaced", fontsize=10)
        ax.set_xlabel("k (concepts replaced per answer)")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel({"t_acc": "T-Acc", "qwk": "QWK"}.get(metric, metric))
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(labels), fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    return _png(fig)


def reliability_png(rel: pd.DataFrame, rho: float | None) -> bytes:
    """Scatter of 1 − α_k (annotation unreliability) against the learned σ_k², one labelled dot per concept."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(5.0, 3.8))
    x, y = 1 - rel["alpha"].to_numpy(float), rel["sigma2"].to_numpy(float)
    ax.scatter(x, y, color=BLUE)
    for xi, yi, k in zip(x, y, rel["concept"]):
        ax.annotate(str(k), (xi, yi), xytext=(4, 3), textcoords="offset points", fontsize=9)
    ax.set_xlabel("1 − α_k (reviewer disagreement)")
    ax.set_ylabel("learned noise variance σ_k²")
    ax.set_title("reliability: σ_k² vs 1 − α_k" + (f" (Spearman ρ = {rho:.2f})" if rho is not None else ""),
                 fontsize=10)
    ax.grid(alpha=0.3)
    return _png(fig)


def heatmaps_png(keys: Sequence[str], panels: Sequence[tuple[str, NDArray[Any]]]) -> bytes:
    """Side-by-side −1..1 heatmaps (e.g. label correlation and learned partial correlation)."""
    plt = _plt()
    fig, axes = plt.subplots(1, len(panels), figsize=(4.4 * len(panels) + 0.8, 4.2), squeeze=False)
    im = None
    for ax, (title, m) in zip(axes[0], panels):
        im = ax.imshow(m, cmap="RdBu_r", vmin=-1, vmax=1)
        for i in range(m.shape[0]):
            for j in range(m.shape[1]):
                ax.text(j, i, f"{m[i, j]:.2f}".replace("0.", ".").replace("-.", "−."), ha="center", va="center",
                        fontsize=7, color="white" if abs(m[i, j]) > 0.6 else "black")
        ax.set_xticks(range(len(keys)), list(keys), fontsize=8)
        ax.set_yticks(range(len(keys)), list(keys), fontsize=8)
        ax.set_title(title, fontsize=10)
    fig.colorbar(im, ax=list(axes[0]), shrink=0.8)
    return _png(fig)


def ablation_png(table: pd.DataFrame, metrics: Sequence[str] = ("t_acc", "t_f1", "c_f1")) -> bytes:
    """Grouped bars (mean ± std over runs) per variant, one group per variant, one bar per metric."""
    plt = _plt()
    names = {"t_acc": "T-Acc", "t_f1": "T-F1", "c_acc": "C-Acc", "c_f1": "C-F1", "qwk": "QWK"}
    ms = [m for m in metrics if f"{m}_mean" in table.columns]
    x = np.arange(len(table))
    w = 0.8 / max(1, len(ms))
    fig, ax = plt.subplots(figsize=(max(6.0, 0.9 * len(table) + 2), 3.8))
    for j, m in enumerate(ms):
        ax.bar(x + (j - (len(ms) - 1) / 2) * w, table[f"{m}_mean"].fillna(0), w, yerr=table[f"{m}_std"].fillna(0),
               capsize=2, label=names.get(m, m), color=[BLUE, ORANGE, GREY, "#2ca02c", "#9467bd"][j % 5])
    ax.set_xticks(x, list(table["variant"]), rotation=30, ha="right", fontsize=8)
    ax.set_ylim(0, 1)
    ax.set_ylabel("test score (mean ± std)")
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    ax.set_title("ablation: RACE / OPCC / LCEC combinations and the PLM", fontsize=10)
    return _png(fig)
