"""Noise put into one concept on purpose (rubrictool.noise, benchmarks/noise.py) on a course that is not Mohler:
the statistics quiz (tests/support/stats_course.py) with three made-up reviewers, a tiny BERT trained on it through
``rubrictool train``, and the direction the Mohler experiment found (docs/results.md): σ_k² rises with wrong labels
in concept k, and α_k — not σ_k² — falls when one reviewer reads concept k at random and the majority absorbs it."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pandas as pd
import pytest

import reccbm
from rubrictool.adjudicate import AdjudicationOptions, adjudicate
from rubrictool.errors import DataError
from rubrictool.evaluate.reliability import concept_alpha
from rubrictool.grade import inputs_for, load_grader
from rubrictool.noise import (
    FIGURES,
    concept_figures,
    label_noise,
    noisy_rank,
    rank_figures,
    reviewer_noise,
    summarise_trials,
)
from rubrictool.rubric import load_rubric
from rubrictool.tables import validate_adjudicated
from tests.support.stats_course import BAD, FILL, GOOD, STATS_KEYS, stats_rubric, stats_table, train_stats
from tests.support.tiny_models import build_backbone

pytestmark = pytest.mark.usefixtures("one_thread")


# ---------------------------------------------------------------------------- the helpers, by hand
def test_label_noise_replaces_that_share_of_one_concept_on_the_given_rows_only() -> None:
    levels = np.zeros((100, 3), dtype=np.int64)
    rows = np.arange(20, 80)
    noisy, picked = label_noise(levels, 1, 0.5, rows, 3, np.random.default_rng(0))
    assert len(picked) == 30 and set(picked) <= set(rows)
    assert (noisy[:, [0, 2]] == 0).all() and (np.delete(noisy[:, 1], picked) == 0).all()
    assert set(noisy[picked, 1]) == {0, 1, 2}  # drawn from the whole scale, the old level included
    assert (levels == 0).all()  # the input is left as it was
    same, none = label_noise(levels, 1, 0.0, rows, 3, np.random.default_rng(0))
    assert len(none) == 0 and (same == levels).all()
    with pytest.raises(DataError, match="outside 0..1"):
        label_noise(levels, 1, 40, rows, 3, np.random.default_rng(0))


def test_reviewer_noise_touches_one_reviewers_levels_of_one_concept() -> None:
    labels = pd.DataFrame([{"item": f"i{i}", "reviewer": r, "concept": c, "level": 1}
                           for i in range(50) for r in "ABC" for c in ("X", "Y")])
    noisy = reviewer_noise(labels, "Y", "B", 0.4, (0, 2), np.random.default_rng(1))
    moved = noisy["level"] != labels["level"]
    assert moved.any() and set(noisy.loc[moved, "reviewer"]) == {"B"} and set(noisy.loc[moved, "concept"]) == {"Y"}
    assert moved.sum() <= 20 and noisy["level"].between(0, 2).all()
    with pytest.raises(DataError, match="no level of reviewer 'D'"):
        reviewer_noise(labels, "Y", "D", 0.4, (0, 2), np.random.default_rng(1))


def test_the_noisy_concept_ranks_first_where_its_figure_is_the_noisiest() -> None:
    assert noisy_rank([0.1, 0.5, 0.2], 1, 1) == 1 and noisy_rank([0.1, 0.5, 0.2], 0, 1) == 3
    assert noisy_rank([0.9, 0.6, 0.8], 1, -1) == 1  # α and the test reliability: the smallest is the noisiest
    assert noisy_rank([0.3, 0.3, 0.1], 0, 1) == 1.5  # ties share their ranks


def test_the_summary_pairs_each_trial_with_its_clean_twin() -> None:
    rows = []
    for concept in ("X", "Y"):
        for fold in (0, 1):
            for rate, value, rank in ((0.0, 0.1, 2.0), (0.4, 0.3, 1.0)):
                rows.append({"kind": "label", "concept": concept, "fold": fold, "seed": 0, "rate": rate,
                             "sigma2": value + 0.01 * fold, "sigma2_rank": rank})
    s = summarise_trials(pd.DataFrame(rows), n_boot=100)
    clean, noisy = s[s["rate"] == 0.0].iloc[0], s[s["rate"] == 0.4].iloc[0]
    assert noisy["first"] == 1.0 and clean["first"] == 0.0
    assert noisy["change"] == pytest.approx(0.2) and noisy["change_lo"] == pytest.approx(0.2)
    assert clean["change"] == 0.0 and noisy["n"] == 4


# ---------------------------------------------------------------------------- on a course that is not Mohler
def _passes(table: pd.DataFrame, rng: np.random.Generator) -> pd.DataFrame:
    """Three reviewers of the course: A gives the table's levels, B and C differ from A on a few."""
    tidy = []
    for reviewer, flip in (("A", 0.0), ("B", 0.1), ("C", 0.1)):
        for key in STATS_KEYS:
            lv = table[key].to_numpy().copy()
            swap = rng.random(len(lv)) < flip
            lv[swap] = rng.integers(0, 3, int(swap.sum()))
            tidy.append(pd.DataFrame({"item": table["id"], "reviewer": reviewer, "concept": key, "level": lv,
                                      "source": "human"}))
    return pd.concat(tidy, ignore_index=True)


@pytest.fixture(scope="module")
def course(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The quiz's passes adjudicated, a tiny BERT trained on them (one split), its concept outputs on every answer."""
    tmp = tmp_path_factory.mktemp("noise")
    words = sorted({*GOOD, *BAD, *FILL, "maybe", "describe", "sample", "in", "and", "standard", "0", "1", "2", "3"})
    items = stats_table(160)
    rb = load_rubric(stats_rubric(tmp))
    passes = _passes(items, np.random.default_rng(0))
    adj = adjudicate(passes, rb, items.drop(columns=STATS_KEYS),
                     options=AdjudicationOptions(n_boot=0, coverage=False))
    code, output, run = train_stats(tmp, build_backbone(tmp, "bert", words=words), adj.table, "--encoder", "frozen",
                                    "--split-seed", "1")
    assert code == 0, output
    grader = load_grader(run)  # the run's reccbm.Grader
    model, tok = grader.model_, grader.tokenizer_
    df = validate_adjudicated(adj.table, rb)
    preds = reccbm.predict(model, reccbm.EncodedItems(inputs_for(model, tok, df)), tok.pad_token_id, 64)
    where = {i: p for p, i in enumerate(df["id"])}
    split = json.loads((run / "split.json").read_text())
    pos = {s: np.array([where[i] for i in split[s]]) for s in ("train", "dev", "test")}
    return {"rb": rb, "items": items.drop(columns=STATS_KEYS), "passes": passes, "run": run, "p_hat": preds.p_hat,
            "pos": pos, "levels": df[[f"_c_{k}" for k in rb.keys]].to_numpy(np.int64), "adj": adj}


def _figures(c: dict[str, Any], levels: Any) -> pd.DataFrame:
    pos, p = c["pos"], c["p_hat"]
    return concept_figures(p[pos["dev"]], p[pos["test"]], levels[pos["train"]], levels[pos["dev"]],
                           levels[pos["test"]], 2)


def test_without_noise_the_figures_are_the_runs_reliability_table(course: dict[str, Any]) -> None:
    """The shortcut (LCEC by its moments over the kept model's outputs) gives what the trained run reports."""
    figs = _figures(course, course["levels"])
    rel = pd.read_csv(course["run"] / "reliability.csv")
    for col in ("sigma2", "A_kk", "sigma2_implied", "test_reliability"):
        np.testing.assert_allclose(figs[col], rel[col], rtol=1e-4, atol=1e-6)


def test_sigma2_rises_with_label_noise_in_its_concept(course: dict[str, Any]) -> None:
    """Wrong labels in concept k's training answers raise σ_k² (every concept, mean of five draws), and the other
    concepts' σ² stay as they were."""
    clean = _figures(course, course["levels"])
    rows = np.concatenate([course["pos"]["train"], course["pos"]["dev"]])
    for k in range(3):
        noisy = [_figures(course, label_noise(course["levels"], k, 0.4, rows, 3, np.random.default_rng(s))[0])
                 for s in range(5)]
        rise = np.mean([f["sigma2"].iloc[k] for f in noisy]) - clean["sigma2"].iloc[k]
        assert rise > 0.01, (k, rise)
        others = [j for j in range(3) if j != k]
        np.testing.assert_allclose(noisy[0]["sigma2"].iloc[others], clean["sigma2"].iloc[others])
        assert rank_figures(noisy[0], k)["sigma2_rank"] <= rank_figures(clean, k)["sigma2_rank"]


def test_one_reviewer_at_random_lowers_alpha_more_than_it_moves_sigma2(course: dict[str, Any]) -> None:
    """Reviewer B reads concept k at random on 40 % of the answers: α_k falls below every other concept's, while
    the majority vote keeps σ_k² closer to where it was than the same share of wrong labels puts it."""
    rb, rows = course["rb"], np.concatenate([course["pos"]["train"], course["pos"]["dev"]])
    clean = _figures(course, course["levels"])
    for k, key in enumerate(rb.keys):
        passes = reviewer_noise(course["passes"], key, "B", 0.4, (0, 2), np.random.default_rng(k))
        adj = adjudicate(passes, rb, course["items"], options=AdjudicationOptions(n_boot=0, coverage=False))
        alpha = [concept_alpha(adj.agreement, c)[0] for c in rb.keys]
        assert noisy_rank(alpha, k, FIGURES["alpha"][1]) == 1
        assert alpha[k] < concept_alpha(course["adj"].agreement, key)[0] - 0.1
        df = validate_adjudicated(adj.table, rb).set_index("id").loc[course["adj"].table["id"].astype(str)]
        by_vote = _figures(course, df[[f"_c_{c}" for c in rb.keys]].to_numpy(np.int64))
        wrong = np.mean([_figures(course, label_noise(course["levels"], k, 0.4, rows, 3, np.random.default_rng(s))[0])
                         ["sigma2"].iloc[k] for s in range(5)])
        assert abs(by_vote["sigma2"].iloc[k] - clean["sigma2"].iloc[k]) < wrong - clean["sigma2"].iloc[k]
