"""The verdict's route (rubrictool.route): never a route whose QWK CI reaches the majority class or whose levels have
α below 0.67, "do not auto-grade" when low marks are inflated by a mark or more, and the figure that decided."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from rubrictool.route import choose_route, route_figures, route_lines
from rubrictool.rubric import parse_rubric
from tests.support.stats_course import RUBRIC, STATS_KEYS

RB = parse_rubric(RUBRIC.replace("grade: {min: 0, max: 2}", "grade: {min: 0, max: 4}"), "stats.yaml")  # pass mark 2


def _pooled(n: int = 200, seed: int = 0) -> pd.DataFrame:
    """Five folds of answers whose grade follows their levels (levels 0..2 of three concepts; grade = their sum
    clipped to 0..4), the majority class always grade 2."""
    rng = np.random.default_rng(seed)
    lv = rng.integers(0, 3, size=(n, 3))
    grade = np.clip(lv.sum(1) - 1, 0, 4)
    df = pd.DataFrame({"id": [f"a{i}" for i in range(n)], "fold": np.arange(n) % 5, "grade_true": grade,
                       "majority": 2})
    for k, key in enumerate(STATS_KEYS):
        df[f"{key}_true"] = lv[:, k]
    return df


def _agreement(alpha: float) -> dict[str, Any]:
    return {"label_source": "llm", "concepts": {k: {"alpha": alpha} for k in STATS_KEYS}}


def _panel_labels(n: int) -> dict[str, Any]:
    return {"source": "llm", "levels": {"llm": 3 * n}}


def test_a_grader_at_the_majority_class_and_a_panel_at_alpha_zero_leave_marking_by_hand() -> None:
    df = _pooled()
    df["grade"] = 2  # the trained grader gives every answer the majority class
    figs = route_figures(df, RB, agreement=_agreement(0.02), labels=_panel_labels(len(df)), n_boot=200)
    assert figs["points_panel"]["qwk"]["lo"] > 0.5  # the points route grades well from these levels ...
    c = choose_route(figs)
    assert c["route"] == "hand" and not c["auto_grade"]  # ... but the panel's α is about 0: not recommended
    assert "α below 0.67" in c["why_not"]["points_panel"] and "reaches the majority class" in c["why_not"]["grader"]
    lines = route_lines(figs)
    assert lines[0].startswith("Route: do not auto-grade") and lines[1].startswith("Decided by:")


def test_a_good_route_is_recommended_and_the_figure_that_decided_is_named() -> None:
    df = _pooled()
    df["grade"] = df["grade_true"]
    rng = np.random.default_rng(1)
    flip = rng.random(len(df)) < 0.3
    df.loc[flip, "grade"] = np.clip(df.loc[flip, "grade_true"] + rng.choice([-1, 1], flip.sum()), 0, 4)
    figs = route_figures(df, RB, agreement=_agreement(0.9), labels=_panel_labels(len(df)), n_boot=200)
    c = choose_route(figs)
    assert c["auto_grade"] and c["route"] in ("grader", "points_panel")
    best = max(("grader", "points_panel"), key=lambda k: figs[k]["qwk"]["value"])
    assert c["route"] == best and f"{figs[best]['qwk']['value']:.3f}" in c["decided_by"]


def test_inflated_low_marks_say_do_not_auto_grade() -> None:
    df = _pooled()
    df["grade"] = np.where(df["grade_true"] < 2, df["grade_true"] + 2, df["grade_true"])  # failing answers +2
    figs = route_figures(df, RB, agreement=_agreement(0.2), labels=_panel_labels(len(df)), n_boot=200)
    assert figs["grader"]["qwk"]["lo"] > 0 and figs["grader"]["failing"]["inflated"]
    c = choose_route(figs)
    assert c["route"] == "hand" and "low marks inflated" in c["decided_by"]
    assert "marks too high" in c["why_not"]["grader"]


def test_a_pasted_reference_gaining_a_mark_says_do_not_auto_grade() -> None:
    df = _pooled()
    df["grade"] = df["grade_true"]
    figs = route_figures(df, RB, agreement=_agreement(0.9), labels=_panel_labels(len(df)), audit_gain=1.4, n_boot=100)
    c = choose_route(figs)
    assert c["route"] == "hand" and "pasted reference" in c["decided_by"]


def test_the_panel_route_is_measured_on_the_panels_own_votes_not_the_teachers_levels() -> None:
    """Every level resolved by a teacher: the points route on the panel's levels grades from the panel's votes."""
    df = _pooled()
    df["grade"] = df["grade_true"]
    rng = np.random.default_rng(2)
    table = pd.DataFrame({"id": df["id"]})
    for key in STATS_KEYS:  # the panel votes at random: its levels say nothing of the grade
        table[f"votes_{key}"] = [" ".join(str(v) for v in rng.integers(0, 3, 3)) for _ in range(len(df))]
    labels = {"source": "resolution", "levels": {"resolution": 3 * len(df)}}
    figs = route_figures(df, RB, table=table, agreement=_agreement(-0.1), labels=labels, n_boot=200)
    assert figs["points_reviewed"]["qwk"]["value"] > 0.8 > figs["points_panel"]["qwk"]["value"]
    assert figs["points_reviewed"]["alpha"] == {k: None for k in STATS_KEYS}  # one teacher: no α to hold against it
    c = choose_route(figs)
    assert c["route"] in ("grader", "points_reviewed") and "reaches the majority class" in c["why_not"]["points_panel"]


def _with_readings(df: pd.DataFrame, informative: bool, seed: int = 3) -> pd.DataFrame:
    """The grader's concept readings beside its marks: each concept's level shares (``<KEY>_p<level>``), expected level
    and the mark's probability; ``informative``: the readings follow the answer's levels, else they are noise."""
    rng = np.random.default_rng(seed)
    out = df.assign(grade_prob=0.9)
    for key in STATS_KEYS:
        lv = out[f"{key}_true"].to_numpy() if informative else rng.integers(0, 3, len(out))
        shares = np.full((len(out), 3), 0.1)
        shares[np.arange(len(out)), lv] = 0.8
        for j in range(3):
            out[f"{key}_p{j}"] = shares[:, j]
        out[f"{key}_expected"] = shares @ np.arange(3)
    return out


def test_inflated_low_marks_that_a_fifth_of_the_queue_corrects_route_to_the_grader_with_review() -> None:
    """The grader passes every failing answer (+2 marks), but its concept readings are low on them: the review queue
    (grade's ranking) puts them first, and reading a fifth of the answers leaves the failing ones under a mark too
    high — the route is the grader with that review, said with its figures. Readings that say nothing leave marking
    by hand."""
    df = _pooled()
    df["grade_true"] = np.clip(df[[f"{k}_true" for k in STATS_KEYS]].sum(axis=1), 0, 4)  # failing: a sum of 0 or 1
    df["grade"] = np.where(df["grade_true"] < 2, df["grade_true"] + 2, df["grade_true"])
    figs = route_figures(_with_readings(df, True), RB, agreement=_agreement(0.2), labels=_panel_labels(len(df)),
                         n_boot=200)
    rv = figs["grader"]["reviewed"]
    assert figs["grader"]["failing"]["inflated"] and rv["n"] == 40 and rv["share"] == 0.2
    assert rv["caught"] == int((df["grade_true"] < 2).sum()) and not rv["failing"]["inflated"]
    c = choose_route(figs)
    assert c["route"] == "grader_review" and c["auto_grade"] and "review queue's first 20 %" in c["decided_by"]
    lines = route_lines(figs)
    assert "read the first fifth of its review queue" in lines[0]
    assert any(x.startswith("Not the trained grader alone: its failing answers") for x in lines)
    noise = route_figures(_with_readings(df, False), RB, agreement=_agreement(0.2), labels=_panel_labels(len(df)),
                          n_boot=200)
    assert noise["grader"]["reviewed"]["failing"]["inflated"] and choose_route(noise)["route"] == "hand"
    assert route_figures(df, RB, n_boot=50)["grader"]["reviewed"] is None  # no readings kept: not measured
