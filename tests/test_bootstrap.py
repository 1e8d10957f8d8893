"""The one bootstrap and the one paired bootstrap (rubrictool.evaluate), which k-fold runs use too: the same draws as
the loop they replace, and their NaN rule: a resample where the metric is undefined is dropped."""

from __future__ import annotations

import numpy as np
import pytest

from rubrictool.evaluate import BOOTSTRAP_METRICS, bootstrap_ci, paired_bootstrap
from rubrictool.train import kfold


def _loop(t: np.ndarray, stat: object, n_boot: int, seed: int) -> np.ndarray:
    """The resampling loop both copies ran before: one draw of len(t) positions per resample."""
    rng = np.random.default_rng(seed)
    return np.array([stat(rng.integers(0, len(t), len(t))) for _ in range(n_boot)])  # type: ignore[operator]


def test_the_interval_is_the_percentiles_of_the_same_draws_as_before() -> None:
    rng = np.random.default_rng(5)
    t, a, b = rng.integers(0, 4, 60), rng.integers(0, 4, 60), rng.integers(0, 4, 60)
    for m, f in BOOTSTRAP_METRICS.items():
        vals = _loop(t, lambda i, f=f: f(t[i], b[i]), 300, 2)
        assert bootstrap_ci(t, b, m, 300, 2) == {"value": f(t, b), "lo": float(np.percentile(vals, 2.5)),
                                                 "hi": float(np.percentile(vals, 97.5))}
        diffs = _loop(t, lambda i, f=f: f(t[i], b[i]) - f(t[i], a[i]), 300, 2)
        r = paired_bootstrap(t, a, b, m, 300, 2)
        assert (r["lo"], r["hi"]) == (float(np.percentile(diffs, 2.5)), float(np.percentile(diffs, 97.5)))


def test_a_resample_where_qwk_is_undefined_is_dropped_not_spread_as_nan() -> None:
    t, p = np.array([1, 1, 1, 1, 2]), np.array([1, 1, 1, 1, 1])  # a third of the resamples hold only grade 1
    nan_share = np.isnan(_loop(t, lambda i: BOOTSTRAP_METRICS["qwk"](t[i], p[i]), 400, 0)).mean()
    assert 0.2 < nan_share < 0.5  # the case is real: those resamples have no QWK
    ci = bootstrap_ci(t, p, "qwk", 400, 0)
    assert ci == {"value": 0.0, "lo": 0.0, "hi": 0.0}  # a constant model: QWK 0 with the interval [0, 0]
    r = paired_bootstrap(t, p, p, "qwk", 400, 0)
    assert (r["diff"], r["lo"], r["hi"], r["p_not_better"]) == (0.0, 0.0, 0.0, 1.0)


def test_when_every_resample_is_undefined_the_interval_is_nan() -> None:
    t = np.array([2, 2, 2])
    ci = bootstrap_ci(t, t, "qwk", 50, 0)
    assert np.isnan(ci["value"]) and np.isnan(ci["lo"]) and np.isnan(ci["hi"])
    r = paired_bootstrap(t, t, t, "qwk", 50, 0)
    assert np.isnan(r["lo"]) and np.isnan(r["hi"]) and np.isnan(r["p_not_better"])


def test_k_fold_tables_use_the_one_bootstrap() -> None:
    import pandas as pd

    assert kfold.bootstrap_ci is bootstrap_ci and not hasattr(kfold, "paired_ci")
    rng = np.random.default_rng(1)
    pooled = pd.DataFrame({"grade_true": rng.integers(0, 3, 40), "grade": rng.integers(0, 3, 40),
                           "majority": np.ones(40, dtype=int)})
    row = kfold.pooled_table(pooled, ["qwk"], ["majority"], 200, 3)[0]
    t, p, maj = pooled["grade_true"], pooled["grade"], pooled["majority"]
    assert row["model"] == bootstrap_ci(t, p, "qwk", 200, 3)
    assert row["vs_majority"] == paired_bootstrap(t, maj, p, "qwk", 200, 3)  # model − majority


@pytest.mark.parametrize("call", [lambda: bootstrap_ci([1, 2], [1], "t_acc"), lambda: paired_bootstrap([], [], [])])
def test_unequal_or_empty_items_are_refused_in_one_line(call: object) -> None:
    from rubrictool.errors import TrainError

    with pytest.raises(TrainError, match="the same, non-empty set of items"):
        call()  # type: ignore[operator]
