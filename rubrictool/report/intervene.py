"""``rubrictool intervene``: simulated educator interventions on the run's test split (§Human Intervention).

For k = 0..K and each item, the k most uncertain (or, separately, the k most confident) concept
predictions are replaced by the adjudicated level (oracle), by the most damaging wrong level (wrong) or
by a random level (random, averaged over ``random_repeats`` draws); the frozen grade path runs on the
result and T-Acc and QWK are measured against the gold grades (:mod:`reccbm.explain`).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from numpy.typing import NDArray

import reccbm
from reccbm.decision import decide
from rubrictool.errors import DataError
from rubrictool.report.run import Run

__all__ = ["ORDERS", "intervention_curves", "write_interventions"]

ORDERS = ("uncertain", "confident")


def intervention_curves(
    run: Run, p_hat: NDArray[Any], gold_levels: NDArray[Any], gold_grades: NDArray[Any], *,
    random_repeats: int = 5, seed: int = 0, on_step: Callable[[int, int], None] | None = None,
) -> pd.DataFrame:
    """Rows (order, strategy, k, t_acc, qwk, n_items) for k = 0..K; p_hat (N, K, M+1), gold 0-based."""
    if run.plm:
        raise DataError("this is a PLM run: it has no concepts to intervene on")
    N, K, _ = p_hat.shape
    if gold_levels.shape != (N, K):
        raise DataError("interventions need the adjudicated concept labels of every test item")
    rows: list[dict[str, Any]] = []
    rng = np.random.default_rng(seed)
    targets: dict[str, list[NDArray[Any]]] = {
        "oracle": [gold_levels],
        "wrong": [reccbm.intervention_levels(run.model, p_hat, gold_levels, gold_grades, "wrong")],
        "random": [reccbm.intervention_levels(run.model, p_hat, gold_levels, gold_grades, "random", rng)
                   for _ in range(random_repeats)],
    }
    total, done = len(ORDERS) * len(targets) * (K + 1), 0
    for order in ORDERS:
        ranked = reccbm.concept_order(p_hat, order)  # (N, K)
        rank = np.argsort(ranked, axis=1)  # (N, K): position of concept k in the item's ranking
        for strategy, draws in targets.items():
            for k in range(K + 1):
                replace = rank < k  # (N, K): the k first concepts of each item's ranking
                accs, qwks = [], []
                for levels in draws:
                    pred = decide(reccbm.grades_from_levels(run.model, p_hat, levels, replace), run.model.decision)
                    m = reccbm.grade_metrics(gold_grades, pred)
                    accs.append(m["t_acc"])
                    qwks.append(m["qwk"])
                rows.append({"order": order, "strategy": strategy, "k": k, "t_acc": float(np.mean(accs)),
                             "qwk": float(np.mean(qwks)), "t_acc_std": float(np.std(accs)), "n_items": N})
                done += 1
                if on_step:
                    on_step(done, total)
    return pd.DataFrame(rows)


def write_interventions(curves: pd.DataFrame, out: str | Path) -> dict[str, Path]:
    """intervention.csv, intervention.png (T-Acc) and intervention_qwk.png into `out`."""
    from rubrictool.atomic import atomic_write_bytes
    from rubrictool.io import writable_dir, write_table
    from rubrictool.report.figures import intervention_png

    d = writable_dir(out)
    write_table(curves, d / "intervention.csv")
    atomic_write_bytes(d / "intervention.png", intervention_png(curves, "t_acc"))
    atomic_write_bytes(d / "intervention_qwk.png", intervention_png(curves, "qwk"))
    return {n: d / n for n in ("intervention.csv", "intervention.png", "intervention_qwk.png")}
