"""k-fold assignment, grade metrics against scikit-learn/scipy, baselines and the paired bootstrap."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy.stats import pearsonr
from sklearn.metrics import cohen_kappa_score, mean_squared_error

from reccbm.metrics import adjacent_agreement, grade_metrics, pearson, quadratic_weighted_kappa, rmse
from rubrictool.data import kfold_splits
from rubrictool.errors import DataError, TrainError
from rubrictool.evaluate import majority_baseline, oracle_concept_baseline, paired_bootstrap, pooled_metrics


def _items(n: int = 103, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    grades = rng.choice([0, 1, 2, 3, 4, 5], size=n, p=[0.05, 0.05, 0.1, 0.2, 0.25, 0.35])
    return pd.DataFrame({"id": [f"i{i}" for i in range(n)], "grade": grades})


@pytest.mark.parametrize("k", [2, 5])
def test_kfold_every_item_tested_once_disjoint_and_stratified(k: int) -> None:
    items = _items()
    folds = kfold_splits(items, k=k, seed=3)
    assert len(folds) == k
    tested = [i for f in folds for i in f["test"]]
    assert sorted(tested) == sorted(items["id"]) and len(set(tested)) == len(items)  # each exactly once
    sizes = [len(f["test"]) for f in folds]
    assert max(sizes) - min(sizes) <= 1
    grade = dict(zip(items["id"], items["grade"]))
    for f in folds:
        tr, dv, te = set(f["train"]), set(f["dev"]), set(f["test"])
        assert not (tr & dv or tr & te or dv & te) and len(tr | dv | te) == len(items)
        assert 0.08 < len(dv) / (len(tr) + len(dv)) < 0.17  # dev carved from the fold's training part
        for g, n_all in items["grade"].value_counts().items():  # stratified: each grade spread evenly
            n_fold = sum(grade[i] == g for i in te)
            assert abs(n_fold - n_all / k) <= 1.0
    assert kfold_splits(items.sample(frac=1, random_state=1), k=k, seed=3) == folds  # row order does not matter
    assert kfold_splits(items, k=k, seed=4) != folds


def test_kfold_rejects_bad_arguments() -> None:
    with pytest.raises(DataError, match="at least 2 folds"):
        kfold_splits(_items(), k=1)
    with pytest.raises(DataError, match="cannot make 5 folds of 3 items"):
        kfold_splits(_items(3), k=5)


def test_grade_metrics_match_sklearn_and_scipy() -> None:
    rng = np.random.default_rng(0)
    t = rng.integers(0, 6, 200)
    p = np.clip(t + rng.integers(-2, 3, 200), 0, 5)
    assert quadratic_weighted_kappa(t, p) == pytest.approx(cohen_kappa_score(t, p, weights="quadratic"))
    assert quadratic_weighted_kappa(t + 1, p + 1) == pytest.approx(cohen_kappa_score(t, p, weights="quadratic"))
    assert pearson(t, p) == pytest.approx(pearsonr(t, p).statistic)
    assert rmse(t, p) == pytest.approx(np.sqrt(mean_squared_error(t, p)))
    assert adjacent_agreement(t, p) == pytest.approx(np.mean(np.abs(t - p) <= 1))
    m = grade_metrics(t, p)
    assert m["t_acc"] == pytest.approx(np.mean(t == p)) and set(m) >= {"t_f1", "qwk", "pearson", "rmse", "adjacent"}
    assert quadratic_weighted_kappa(t, t) == pytest.approx(1.0)
    assert np.isnan(pearson(t, np.full_like(t, 3)))


def test_paired_bootstrap_known_answers() -> None:
    t = np.arange(100) % 4
    same = paired_bootstrap(t, t, t, "t_acc", n_boot=200)
    assert same["diff"] == 0 and same["lo"] == 0 and same["hi"] == 0 and same["p_not_better"] == 1.0
    wrong = (t + 1) % 4
    r = paired_bootstrap(t, wrong, t, "t_acc", n_boot=200)  # B perfect, A always wrong
    assert r["diff"] == 1.0 and r["lo"] == 1.0 and r["hi"] == 1.0 and r["p_not_better"] == 0.0
    a = t.copy()
    a[:10] = (t[:10] + 1) % 4  # B right on exactly 10 more of 100 items, never worse
    r = paired_bootstrap(t, a, t, "t_acc", n_boot=2000, seed=1)
    assert r["diff"] == pytest.approx(0.10)
    assert 0.0 < r["lo"] < 0.10 < r["hi"] < 0.2  # the CI excludes 0: B is better
    # rmse: lower is better; B better means a negative difference
    r = paired_bootstrap(t, a, t, "rmse", n_boot=500)
    assert r["diff"] < 0 and r["hi"] < 0 and r["p_not_better"] == 0.0
    with pytest.raises(TrainError, match="unknown metric"):
        paired_bootstrap(t, a, t, "nope")


def test_baselines() -> None:
    assert list(majority_baseline([1, 5, 5, 3, 5, 1], 3)) == [5, 5, 5]
    rng = np.random.default_rng(0)
    lv = {s: rng.integers(0, 3, (n, 4)) for s, n in (("train", 300), ("dev", 60), ("test", 60))}
    y = {s: lv[s][:, 0] + lv[s][:, 1] for s in lv}  # the grade is a function of two concepts
    pred = oracle_concept_baseline(lv, y, 3)
    assert np.mean(pred == y["test"]) > 0.9


def test_pooled_metrics_with_oracle_and_concepts() -> None:
    df = pd.DataFrame({"id": list("abcd"), "grade": [1, 2, 3, 3], "grade_true": [1, 2, 2, 3],
                       "grade_oracle": [1, 2, 2, 3], "FC_level": [1, 1, 2, 3], "FC_true": [1, 2, 2, 3]})
    m = pooled_metrics(df, ["FC"])
    assert m["t_acc"] == 0.75 and m["oracle_t_acc"] == 1.0 and m["oracle_gain_t_acc"] == pytest.approx(0.25)
    assert m["c_acc"] == 0.75


def test_spearman_with_ci() -> None:
    from scipy.stats import spearmanr

    from rubrictool.evaluate import spearman_with_ci

    x = np.array([0.1, 0.4, 0.2, 0.9, 0.5, 0.7, 0.3, 0.8])
    r = spearman_with_ci(x, x ** 2, n_boot=300)
    assert r is not None and r["rho"] == pytest.approx(1.0) and r["lo"] == pytest.approx(1.0) and r["n"] == 8
    y = np.array([0.3, 0.1, 0.9, 0.2, 0.8, 0.4, 0.6, 0.5])
    r = spearman_with_ci(x, y, n_boot=500)
    assert r is not None and r["rho"] == pytest.approx(spearmanr(x, y).statistic)
    assert r["lo"] < r["rho"] < r["hi"]
    assert spearman_with_ci([1, 2], [2, 1]) is None and spearman_with_ci([1, 1, 1], [1, 2, 3]) is None


def test_spearman_ci_is_the_resample_by_resample_bootstrap() -> None:
    """The interval is scipy's ρ on each resample (ties averaged, resamples with a constant side skipped), the
    resamples drawn one at a time from the seeded generator: computed here the slow way and compared."""
    from scipy.stats import spearmanr

    from rubrictool.evaluate import spearman_with_ci

    rng = np.random.default_rng(3)
    for n, tied in ((4, True), (6, False), (9, True)):
        x = rng.integers(0, 3, n).astype(float) if tied else rng.normal(size=n)
        y = x + rng.normal(size=n)
        draws, boots = np.random.default_rng(7), []
        for _ in range(400):
            idx = draws.integers(0, n, n)
            if np.unique(x[idx]).size > 1 and np.unique(y[idx]).size > 1:
                boots.append(spearmanr(x[idx], y[idx]).statistic)
        r = spearman_with_ci(x, y, n_boot=400, seed=7)
        assert r is not None
        assert [r["lo"], r["hi"]] == pytest.approx(list(np.percentile(boots, [2.5, 97.5])), abs=1e-12)


def test_concept_score_reliability_recovers_a_known_noise_level() -> None:
    """s̃ = c/M + e with e ~ N(0, σ²) independent of c: σ̂² ≈ σ², reliability ≈ var(c/M)/(var(c/M) + σ²) and the
    least-squares slope of c/M on s̃ ≈ the same ratio (Remark, diagonal case)."""
    from reccbm.metrics import concept_score_reliability

    rng = np.random.default_rng(0)
    n, M = 200_000, 2
    c = np.stack([rng.integers(0, M + 1, n), rng.choice([0, 2], n, p=[0.2, 0.8])], 1)  # (N, 2) levels 0..M
    sd = np.array([0.1, 0.3])
    c_hat = c + M * rng.normal(0, sd, (n, 2))  # expected levels: s̃ = c/M + e
    out = concept_score_reliability(c_hat, c, M)
    var_c = (c / M).var(0)
    assert out["sigma2"] == pytest.approx(sd**2, rel=0.02)
    assert out["reliability"] == pytest.approx(var_c / (var_c + sd**2), rel=0.01)
    assert out["slope"] == pytest.approx(var_c / (var_c + sd**2), rel=0.02)
    perfect = concept_score_reliability(c.astype(float), c, M)
    assert perfect["sigma2"] == [0.0, 0.0] and perfect["reliability"] == [1.0, 1.0]
    with pytest.raises(ValueError, match="two"):
        concept_score_reliability(c_hat[:, :1], c, M)
