"""Agreement figures: Krippendorff's α against hand computations and Krippendorff's own worked
example, the pattern bootstrap against explicit resampling, the ordinal tie rule, reviewer and LLM
agreement, grade agreement and rubric coverage."""

from __future__ import annotations

import math
from typing import Any

import krippendorff
import numpy as np
import numpy.typing as npt
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rubrictool.agreement import (
    LabelCube,
    alpha_counts,
    alpha_from_patterns,
    bootstrap_alpha,
    concept_agreement,
    exact_agreement,
    grade_agreement,
    krippendorff_alpha,
    ordinal_vote,
    pairwise_agreement,
    predictions_vs_consensus,
    reviewer_vs_others,
    rubric_coverage,
    value_counts,
)

NAN = float("nan")

# Krippendorff (2011), "Computing Krippendorff's Alpha-Reliability", section C: 4 observers x 12 units.
K2011 = np.array(
    [
        [1, 2, 3, 3, 2, 1, 4, 1, 2, NAN, NAN, NAN],
        [1, 2, 3, 3, 2, 2, 4, 1, 2, 5, NAN, 3],
        [NAN, 3, 3, 3, 2, 3, 4, 2, 2, 5, 1, NAN],
        [1, 2, 3, 3, 2, 4, 4, 1, 2, 5, 1, NAN],
    ]
)
K2011_PUBLISHED = {"nominal": 0.743, "ordinal": 0.815, "interval": 0.849, "ratio": 0.797}
DOM5 = [1, 2, 3, 4, 5]

# A hand-computed example with missing values: three reviewers, five units, no unit complete.
# Coincidences: o11=2, o12=o21=1, o33=2, o23=o32=1 (unit 5 has one value: not pairable);
# n1=3, n2=2, n3=3, n=8.  interval: D_o=4/8, D_e=96/56 -> α = 17/24; ordinal: δ²(1,2)=δ²(2,3)=6.25,
# δ²(1,3)=25 -> D_o=25/8, D_e=600/56 -> α = 17/24; nominal: α = 1 - 7·4/42 = 1/3.
HAND = np.array(
    [
        [1, 1, NAN],
        [1, NAN, 2],
        [3, 3, NAN],
        [NAN, 2, 3],
        [NAN, NAN, 3],
    ]
)
HAND_ALPHA = {"interval": 17 / 24, "ordinal": 17 / 24, "nominal": 1 / 3}


def _counts(rows_by_unit: npt.NDArray[np.float64], domain: list[int]) -> npt.NDArray[np.int64]:
    return value_counts(rows_by_unit, np.asarray(domain))


@pytest.mark.parametrize("level", list(K2011_PUBLISHED))
def test_krippendorff_2011_worked_example(level: str) -> None:
    counts = _counts(K2011.T, DOM5)  # (units, values)
    assert round(krippendorff_alpha(counts, DOM5, level), 3) == K2011_PUBLISHED[level]
    # the pattern form used for the bootstrap gives the same number
    assert alpha_counts(counts, DOM5, level) == pytest.approx(
        krippendorff_alpha(counts, DOM5, level), abs=1e-12
    )


@pytest.mark.parametrize("level", list(HAND_ALPHA))
def test_hand_computed_alpha_with_missing_values(level: str) -> None:
    counts = _counts(HAND, [1, 2, 3])
    assert krippendorff_alpha(counts, [1, 2, 3], level) == pytest.approx(HAND_ALPHA[level])
    assert alpha_counts(counts, [1, 2, 3], level) == pytest.approx(HAND_ALPHA[level])


def test_missing_reviews_are_missing_values_not_dropped_items() -> None:
    # the same data as a tidy review table: absent rows are missing reviews; no unit is complete,
    # so listwise deletion would leave nothing, yet α is defined and equals the hand value
    rows = [
        {"item": f"u{u}", "reviewer": "ABC"[r], "concept": "FC", "level": int(v)}
        for u, unit in enumerate(HAND)
        for r, v in enumerate(unit)
        if not math.isnan(v)
    ]
    cube = LabelCube.from_reviews(pd.DataFrame(rows), ["FC"], [1, 2, 3])
    table = concept_agreement(cube, "interval", n_boot=0)
    assert table.loc["FC", "alpha"] == pytest.approx(17 / 24)
    assert table.loc["FC", "n_items"] == 5 and table.loc["FC", "n_pairable"] == 4
    assert table.loc["FC", "n_reviewers"] == 3 and table.loc["FC", "n_labels"] == 9


def test_alpha_undefined_is_nan() -> None:
    assert math.isnan(
        krippendorff_alpha(_counts(np.array([[1, 1], [1, 1]]), [1, 2, 3]), [1, 2, 3])
    )  # no variation
    assert math.isnan(
        krippendorff_alpha(_counts(np.array([[1, NAN], [2, NAN]]), [1, 2, 3]), [1, 2, 3])
    )  # nothing pairable
    assert math.isnan(alpha_counts(_counts(np.array([[1, NAN]]), [1, 2, 3]), [1, 2, 3]))


@settings(max_examples=60, deadline=None)
@given(
    data=st.lists(
        st.lists(st.one_of(st.none(), st.integers(1, 4)), min_size=3, max_size=3), min_size=2, max_size=25
    ),
    level=st.sampled_from(["nominal", "ordinal", "interval", "ratio"]),
)
def test_pattern_alpha_equals_the_package(data: list[list[int | None]], level: str) -> None:
    arr = np.array([[NAN if v is None else v for v in row] for row in data], dtype=float)
    counts = _counts(arr, [1, 2, 3, 4])
    expected = krippendorff_alpha(counts, [1, 2, 3, 4], level)
    got = alpha_counts(counts, [1, 2, 3, 4], level)
    if math.isnan(expected):
        assert math.isnan(got)
    else:
        assert got == pytest.approx(expected, abs=1e-9)


def test_bootstrap_replicate_equals_alpha_of_the_resampled_items() -> None:
    rng = np.random.default_rng(3)
    levels = np.where(rng.random((200, 3)) < 0.1, NAN, rng.integers(1, 4, (200, 3)).astype(float))
    counts = _counts(levels, [1, 2, 3])
    pairable = counts[counts.sum(axis=1) >= 2]
    idx = rng.integers(0, len(pairable), len(pairable))  # one explicit item resample
    resampled = pairable[idx]
    codes = pairable @ np.array([1, 10, 100])
    patterns, inverse = np.unique(codes, return_inverse=True)
    weights = np.bincount(inverse[idx], minlength=len(patterns)).astype(float)
    pattern_rows = np.array([pairable[inverse == p][0] for p in range(len(patterns))])
    for level in ("ordinal", "interval", "nominal"):
        by_patterns = alpha_from_patterns(pattern_rows, weights[None, :], [1, 2, 3], level)[0]
        direct = krippendorff.alpha(
            value_counts=resampled, value_domain=[1.0, 2.0, 3.0], level_of_measurement=level
        )
        assert by_patterns == pytest.approx(direct, abs=1e-12)


def test_bootstrap_ci_is_seeded_and_brackets_alpha() -> None:
    counts = _counts(K2011.T, DOM5)
    a = krippendorff_alpha(counts, DOM5, "ordinal")
    ci1 = bootstrap_alpha(counts, DOM5, "ordinal", 500, seed=7)
    ci2 = bootstrap_alpha(counts, DOM5, "ordinal", 500, seed=7)
    ci3 = bootstrap_alpha(counts, DOM5, "ordinal", 500, seed=8)
    assert ci1 == ci2 and ci1 != ci3
    assert ci1[0] <= a <= ci1[1] and ci1[0] < ci1[1] <= 1.0
    assert all(math.isnan(x) for x in bootstrap_alpha(counts, DOM5, "ordinal", 0))
    # more items, narrower interval
    big = np.repeat(counts, 20, axis=0)
    lo, hi = bootstrap_alpha(big, DOM5, "ordinal", 500, seed=7)
    assert hi - lo < ci1[1] - ci1[0]


def test_exact_agreement_pools_reviewer_pairs() -> None:
    # item 1: levels 1,1,2 -> 3 pairs, 1 agreeing; item 2: 2,2 -> 1 pair agreeing; item 3: one review
    levels = np.array([[1, 1, 2], [2, 2, NAN], [3, NAN, NAN]])
    assert exact_agreement(_counts(levels, [1, 2, 3])) == pytest.approx(2 / 4)


@pytest.mark.parametrize(
    ("given", "expected", "tied"),
    [
        ([1, 2, 3], 2, True),  # three reviewers all different: the median
        ([1, 3], 1, True),  # two disagreeing: the lower level
        ([2, 3], 2, True),
        ([2, 2, 3], 2, False),  # plain majority
        ([3, 3, 1], 3, False),
        ([1, 1, 3, 3], 1, True),  # 2-2 split: the lower of the two
        ([1, 2, 2, 3, 3], 2, True),  # modes {2, 3}: the lower
        ([1, 1, 2, 2, 3, 3], 2, True),  # modes {1, 2, 3}: their median
        ([3], 3, False),
    ],
)
def test_ordinal_vote_tie_rules(given: list[int], expected: int, tied: bool) -> None:
    counts = np.bincount(np.array(given) - 1, minlength=3)[None, :]
    idx, was_tied = ordinal_vote(counts)
    assert idx[0] + 1 == expected and bool(was_tied[0]) is tied


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(1, 5), min_size=1, max_size=7))
def test_ordinal_vote_picks_a_most_frequent_level(levels: list[int]) -> None:
    counts = np.bincount(np.array(levels) - 1, minlength=5)
    idx, tied = ordinal_vote(counts[None, :])
    modes = sorted(int(v) + 1 for v in np.flatnonzero(counts == counts.max()))
    assert idx[0] + 1 in modes and bool(tied[0]) == (len(modes) > 1)
    assert idx[0] + 1 == modes[(len(modes) - 1) // 2]  # the (lower) median of the tied levels
    if len(levels) == 2:
        assert idx[0] + 1 == min(levels)  # two reviewers: the lower level


def test_ordinal_vote_without_reviews_is_minus_one() -> None:
    idx, tied = ordinal_vote(np.zeros((2, 3), dtype=np.int64))
    assert idx.tolist() == [-1, -1] and not tied.any()


def _cube(matrix: npt.NDArray[np.float64], reviewers: str = "ABC") -> LabelCube:
    rows = [
        {"item": f"i{u}", "reviewer": reviewers[r], "concept": "FC", "level": int(v)}
        for u, unit in enumerate(matrix)
        for r, v in enumerate(unit)
        if not math.isnan(v)
    ]
    return LabelCube.from_reviews(pd.DataFrame(rows), ["FC"], [1, 2, 3])


def test_pairwise_and_leave_one_out_find_the_drifting_reviewer() -> None:
    rng = np.random.default_rng(0)
    truth = rng.integers(1, 4, 300).astype(float)
    a = truth.copy()
    b = np.where(rng.random(300) < 0.1, np.clip(truth + 1, 1, 3), truth)
    c = rng.integers(1, 4, 300).astype(float)  # C ignores the responses
    cube = _cube(np.stack([a, b, c], axis=1))
    pairs: Any = pairwise_agreement(cube, "ordinal").set_index(["a", "b"])
    assert pairs.loc[("A", "B"), "exact"] == pytest.approx(float((a == b).mean()))
    assert pairs.loc[("A", "B"), "n_items"] == 300
    assert pairs.loc[("A", "B"), "alpha"] > 0.8 and abs(pairs.loc[("A", "C"), "alpha"]) < 0.2
    loo = reviewer_vs_others(cube, "ordinal").set_index("reviewer")
    assert loo["alpha"].idxmin() == "C"
    # A against the consensus of B and C: their vote with the tie rule (lower level when they differ)
    consensus = np.where(b == c, b, np.minimum(b, c))
    assert loo.loc["A", "exact"] == pytest.approx(float((a == consensus).mean()))


def test_predictions_vs_consensus_confusion_matrix() -> None:
    consensus = pd.DataFrame({"item": ["1", "2", "3", "4"], "concept": "FC", "level": [1, 2, 3, 3]})
    preds = pd.DataFrame(
        {
            "item": ["1", "2", "3", "4", "1"],
            "model": ["m"] * 4 + ["n"],
            "concept": "FC",
            "level": [1, 3, 3, 2, 1],
        }
    )
    out = predictions_vs_consensus(preds, consensus, [1, 2, 3]).set_index("model")
    assert out.loc["m", "exact"] == 0.5 and out.loc["m", "n_items"] == 4 and out.loc["n", "n_items"] == 1
    assert out.loc["m", "confusion"] == [[1, 0, 0], [0, 0, 1], [0, 1, 1]]  # rows consensus, columns predicted
    assert out.loc["m", "alpha"] == pytest.approx(
        krippendorff.alpha(
            np.array([[1, 3, 3, 2], [1, 2, 3, 3]], dtype=float),
            level_of_measurement="ordinal",
            value_domain=[1, 2, 3],
        )
    )


def test_grade_agreement_with_missing_grades() -> None:
    items = pd.DataFrame({"grade_me": [5, 4, 3, 2, 1.5, None], "grade_other": [5, 4, 3, 2, 1.5, 3]})
    g = grade_agreement(items, ["grade_me", "grade_other"], n_boot=100)
    assert g["alpha"] == pytest.approx(1.0) and g["exact"] == 1.0 and g["n_items"] == 5
    items.loc[0, "grade_other"] = 2
    g = grade_agreement(items, ["grade_me", "grade_other"], n_boot=100)
    data = items[["grade_me", "grade_other"]].to_numpy(dtype=float).T
    assert g["alpha"] == pytest.approx(krippendorff.alpha(data, level_of_measurement="interval"))
    assert g["mean_abs_diff"] == pytest.approx(3 / 5) and g["exact"] == pytest.approx(4 / 5)


def test_rubric_coverage_sees_which_concept_drives_the_grade() -> None:
    rng = np.random.default_rng(1)
    n = 400
    fc = rng.integers(1, 4, n)
    noise = rng.integers(1, 4, n)
    grade = np.where(fc == 3, 5, np.where(fc == 2, 3, 0))
    table = pd.DataFrame({"FC": fc, "EE": noise, "grade": grade})
    cov = rubric_coverage(table, ["FC", "EE"], [1, 2, 3], folds=5, seed=0)
    assert cov["available"] and cov["n_items"] == n
    assert cov["levels_one_hot"]["accuracy"] == pytest.approx(1.0)
    assert cov["levels_one_hot"]["macro_f1"] == pytest.approx(1.0)
    majority = float(pd.Series(grade).value_counts(normalize=True).max())
    assert cov["majority_class"]["accuracy"] <= majority + 0.05 and cov["majority_class"]["accuracy"] < 0.5
    assert cov["spearman"]["FC"] == pytest.approx(1.0) and abs(cov["spearman"]["EE"]) < 0.15
    # without grades there is nothing to explain
    assert not rubric_coverage(table.drop(columns="grade"), ["FC", "EE"], [1, 2, 3])["available"]
