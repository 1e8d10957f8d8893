"""Agreement between two sets of scores, as scoring-model evaluations report it (ETS's RSMTool).

QWK, Pearson r, standardised mean difference SMD = (mean(b) − mean(a)) / √((sd(a)² + sd(b)²) / 2)
(population sds; RSMTool's pooled-sd form, where a is the reference, e.g. the human score), exact and
adjacent (|a − b| ≤ 1) agreement. Exact agreement, adjacent agreement and QWK need integer scores:
non-integer scores are rounded half up first (the grader scores of Mohler are halves on 0..5).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from reccbm.metrics import pearson, quadratic_weighted_kappa

__all__ = ["pair_agreement", "round_half_up", "smd"]


def round_half_up(x: ArrayLike) -> np.ndarray[Any, Any]:
    return np.floor(np.asarray(x, dtype=float) + 0.5).astype(np.int64)


def smd(reference: ArrayLike, other: ArrayLike) -> float:
    """Standardised mean difference of `other` from `reference` (NaN when both are constant)."""
    a, b = np.asarray(reference, dtype=float), np.asarray(other, dtype=float)
    pooled = np.sqrt((a.var() + b.var()) / 2)
    return float((b.mean() - a.mean()) / pooled) if pooled > 0 else float("nan")


def pair_agreement(reference: ArrayLike, other: ArrayLike) -> dict[str, Any]:
    """n, QWK, Pearson r, SMD, exact and adjacent agreement of `other` against `reference`."""
    a, b = np.asarray(reference, dtype=float), np.asarray(other, dtype=float)
    ok = ~(np.isnan(a) | np.isnan(b))
    a, b = a[ok], b[ok]
    ia, ib = round_half_up(a), round_half_up(b)
    return {
        "n": len(a),
        "qwk": quadratic_weighted_kappa(ia, ib) if len(a) else float("nan"),
        "pearson": pearson(a, b),
        "smd": smd(a, b) if len(a) else float("nan"),
        "exact": float((ia == ib).mean()) if len(a) else float("nan"),
        "adjacent": float((np.abs(ia - ib) <= 1).mean()) if len(a) else float("nan"),
    }
