"""Review where it matters: LLM panels as reviewers, routed review (selection, pre-annotation fill,
provenance, α only from reviews), the grader's uncertainty and its predictions as pre-annotations."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from rubrictool.adjudicate import (
    AdjudicationOptions,
    adjudicate,
    pre_annotation_labels,
    read_review_files,
    run_adjudicate,
)
from rubrictool.cli import app
from rubrictool.errors import AdjudicateError, ReviewError
from rubrictool.grade import grader_predictions
from rubrictool.review.routing import disagreement_scores, route
from rubrictool.review.tasks import prediction_payload
from rubrictool.review_queue import level_entropy, uncertainty_score
from rubrictool.rubric import load_rubric

MOHLER = load_rubric("mohler")
KEYS = list(MOHLER.keys)


def _panel_rows(levels: dict[str, dict[str, list[int]]], failed: list[tuple[str, str, str]] = ()) -> pd.DataFrame:
    """A PredictionTable: levels[model][item] = one level per concept; ``failed`` (model, item, concept) rows."""
    rows = []
    for model, per in levels.items():
        for item, lv in per.items():
            for k, v in zip(KEYS, lv, strict=True):
                rows.append({"item": item, "model": model, "concept": k, "level": v, "evidence": "e", "raw_ok": True})
    for model, item, concept in failed:
        rows.append({"item": item, "model": model, "concept": concept, "level": None, "evidence": "", "raw_ok": False})
    return pd.DataFrame(rows)


# -- LLM panels as reviewers -------------------------------------------------------------------------------


def test_prediction_table_as_reviews_skips_and_counts_failures(tmp_path: Path) -> None:
    panel = _panel_rows(
        {"gpt": {"a": [3] * 8, "b": [2] * 8}, "claude": {"a": [3] * 8, "b": [1] * 8}},
        failed=[("claude", "c", "FC"), ("claude", "c", "CC"), ("gpt", "d", "FC")],
    )
    path = tmp_path / "predictions.jsonl"
    panel.to_json(path, orient="records", lines=True)
    read = read_review_files([path])
    assert set(read.table["reviewer"]) == {"gpt", "claude"}
    assert set(read.table["source"]) == {"llm"}
    assert len(read.table) == 32  # the 3 failed rows are not reviews
    assert read.skipped == {"claude": {"labels": 2, "items": 1}, "gpt": {"labels": 1, "items": 1}}

    res = run_adjudicate(rubric="mohler", reviews=[path], out=tmp_path / "out",
                         options=AdjudicationOptions(n_boot=0))
    agreement = json.loads((tmp_path / "out" / "agreement.json").read_text())
    assert agreement["reviewers"] == ["claude", "gpt"]
    assert agreement["reviewer_sources"] == {"gpt": "llm", "claude": "llm"}
    assert agreement["skipped_predictions"]["claude"] == {"labels": 2, "items": 1}
    assert agreement["label_source"] == "llm"
    assert "not expert-validated" in agreement["note"]
    # agreement among the LLMs: item a unanimous, item b 2 vs 1 on every concept
    assert agreement["concepts"]["FC"]["unanimous"] == 0.5
    assert set(res.table["id"]) == {"a", "b"}  # c and d only failed: no labels


def test_mixed_human_and_llm_and_model_sources(tmp_path: Path) -> None:
    human = pd.DataFrame(
        [{"item": i, "reviewer": f"r{r}", "concept": k, "level": 3 if i == "a" else 1}
         for i in ("a", "b") for r in range(3) for k in KEYS]
    )
    human.to_csv(tmp_path / "human.csv", index=False)
    panel = _panel_rows({"gpt": {"a": [3] * 8, "b": [2] * 8}})
    panel.to_csv(tmp_path / "llm.csv", index=False)
    grader = _panel_rows({"run1": {"a": [2] * 8, "b": [1] * 8}}).assign(source="model")
    grader.to_csv(tmp_path / "grader.csv", index=False)
    res = run_adjudicate(rubric="mohler", reviews=[tmp_path / "human.csv", tmp_path / "llm.csv",
                                                   tmp_path / "grader.csv"],
                         out=tmp_path / "out", options=AdjudicationOptions(n_boot=0))
    a = res.agreement
    assert a["reviewers"] == ["r0", "r1", "r2"]  # the consensus is the humans'
    assert a["reviewer_sources"] == {"r0": "human", "r1": "human", "r2": "human", "gpt": "llm", "run1": "model"}
    assert a["label_source"] == "human"
    # the LLM and the model are compared with the human consensus
    assert a["llm_vs_consensus"]["gpt"]["FC"]["exact"] == 0.5
    assert a["llm_vs_consensus"]["run1"]["FC"]["exact"] == 0.5


def test_a_prediction_table_cannot_be_named_like_a_wide_file(tmp_path: Path) -> None:
    path = tmp_path / "p.csv"
    _panel_rows({"gpt": {"a": [3] * 8}}).to_csv(path, index=False)
    with pytest.raises(AdjudicateError, match="prediction table"):
        read_review_files([f"X={path}"])


# -- routed review: fill, provenance, α from reviews only -----------------------------------------------------


def _reviews_and_pre() -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    rng = np.random.default_rng(1)
    items = pd.DataFrame({"id": [f"i{n}" for n in range(12)], "response": "r", "grade": 3})
    reviewed = items["id"][:5]
    rev = pd.DataFrame(
        [{"item": i, "reviewer": f"r{r}", "concept": k, "level": int(rng.integers(1, 4))}
         for i in reviewed for r in range(3) for k in KEYS]
    )
    # item i4 lacks its EE review entirely (a concept nobody labelled)
    rev = rev[~((rev["item"] == "i4") & (rev["concept"] == "EE"))]
    pre = pd.DataFrame(
        [{"item": i, "model": m, "concept": k, "level": 1 + (n + j) % 3, "source": "model" if m == "run" else "llm"}
         for n, i in enumerate(items["id"]) for j, m in enumerate(("gpt", "run", "claude")) for k in KEYS]
    )
    return items, rev, pre


def test_unreviewed_items_take_the_pre_annotation_consensus_and_stay_out_of_alpha() -> None:
    items, rev, pre = _reviews_and_pre()
    plain = adjudicate(rev, MOHLER, items, options=AdjudicationOptions(n_boot=0, coverage=False))
    routed = adjudicate(rev, MOHLER, items,
                        options=AdjudicationOptions(n_boot=0, coverage=False), pre_annotations=pre)
    # α and every agreement figure are the reviews' only
    for k in KEYS:
        assert routed.agreement["concepts"][k]["alpha"] == plain.agreement["concepts"][k]["alpha"]
        assert routed.agreement["concepts"][k]["n_labels"] == plain.agreement["concepts"][k]["n_labels"]
    t = routed.table.set_index("id")
    assert list(t.index) == list(items["id"])  # every item, in the items' order
    # the reviewed items keep the reviews' decisions
    for i in ("i0", "i1", "i2", "i3"):
        assert t.loc[i, "n_reviewers"] == 3 and t.loc[i, "unreviewed_concepts"] == ""
        for k in KEYS:
            assert t.loc[i, k] == plain.table.set_index("id").loc[i, k]
    # i4: EE came from the pre-annotations (levels 2, 3, 1 from gpt, run, claude → median 2)
    assert t.loc["i4", "unreviewed_concepts"] == "EE" and t.loc["i4", "EE"] == 2
    # unreviewed items: majority vote of the three models, marked
    for n in range(5, 12):
        row = t.loc[f"i{n}"]
        levels = sorted(1 + (n + j) % 3 for j in range(3))  # all three differ → the median
        assert row["FC"] == levels[1]
        assert row["n_reviewers"] == 0 and row["method"] == "pre-annotation" and row["label_source"] == "mixed"
        assert row["unreviewed_concepts"] == ",".join(KEYS)
    d = routed.decisions
    assert int((~d["reviewed"]).sum()) == 7 * 8 + 1
    assert set(d.loc[d["reviewed"], "source"]) == {"human"}
    assert set(d.loc[~d["reviewed"], "source"]) == {"mixed"}
    u = routed.agreement["unreviewed"]
    assert (u["n_items"], u["n_labels"], u["models"]) == (7, 57, ["claude", "gpt", "run"])
    # the discussion queue holds reviewed cases only
    assert set(routed.queue["item"]) <= {"i0", "i1", "i2", "i3", "i4"}


def test_pre_annotations_from_files_keep_their_source(tmp_path: Path) -> None:
    _, _, pre = _reviews_and_pre()
    pre[pre["model"] == "run"].drop(columns="source").assign(source="model").to_csv(tmp_path / "g.csv", index=False)
    pre[pre["model"] == "gpt"].drop(columns="source").to_csv(tmp_path / "l.csv", index=False)
    got = pre_annotation_labels([tmp_path / "g.csv", tmp_path / "l.csv"], MOHLER)
    assert got.groupby("model")["source"].first().to_dict() == {"run": "model", "gpt": "llm"}
    with pytest.raises(AdjudicateError, match="in two files"):
        pre_annotation_labels([tmp_path / "l.csv", tmp_path / "l.csv"], MOHLER)


def test_cli_adjudicate_with_pre_annotations_says_how_many_labels_no_one_saw(tmp_path: Path) -> None:
    items, rev, pre = _reviews_and_pre()
    items.to_csv(tmp_path / "items.csv", index=False)
    rev.to_csv(tmp_path / "reviews.csv", index=False)
    pre.drop(columns="source").to_csv(tmp_path / "pre.csv", index=False)
    res = CliRunner().invoke(app, ["adjudicate", "--rubric", "mohler", "--reviews", str(tmp_path / "reviews.csv"),
                                   "--items", str(tmp_path / "items.csv"), "--pre-annotations",
                                   str(tmp_path / "pre.csv"),
                                   "--out", str(tmp_path / "out"), "--bootstrap", "0"])
    assert res.exit_code == 0, res.output
    assert "57 label(s) no reviewer saw (7 item(s) without any review)" in " ".join(res.output.split())
    table = pd.read_csv(tmp_path / "out" / "adjudicated.csv", dtype={"id": str})
    assert (table["label_source"] == "llm").sum() == 7


# -- routing ----------------------------------------------------------------------------------------------


def test_disagreement_score_counts_outvoted_models() -> None:
    pre = _panel_rows({"a": {"x": [1] * 8, "y": [2] * 8, "z": [3] * 8},
                       "b": {"x": [1] * 8, "y": [2] * 7 + [3], "z": [1] * 8},
                       "c": {"x": [1] * 8, "y": [2] * 8, "z": [2] * 8}})
    s = disagreement_scores(pre)
    assert s["x"] == 0.0
    assert s["y"] == pytest.approx(1 / 3)
    assert s["z"] == pytest.approx(8 * 2 / 3)


def test_route_picks_exactly_the_top_n_and_is_deterministic_for_a_seed() -> None:
    ids = [f"i{n}" for n in range(50)]
    unc = np.linspace(0, 1, 50)[::-1].copy()
    unc[[10, 11, 12]] = 0.5  # ties broken by the seed
    pre = pd.DataFrame({"item": ids, "model": "run", "concept": "FC", "level": 2, "uncertainty": unc})
    r = route(ids, pre, "uncertain", 10, seed=3)
    assert len(r.selected) == 10
    assert set(r.selected) == {f"i{n}" for n in range(10)}  # the 10 highest uncertainties
    assert r.table["rank"].tolist() == list(range(1, 51))
    again = route(ids, pre, "uncertain", 13, seed=3)
    assert again.selected == route(ids, pre, "uncertain", 13, seed=3).selected
    picks = {tuple(route(ids, pre, "random", 10, seed=s).selected) for s in range(5)}
    assert len(picks) == 5  # a different sample per seed
    assert route(ids, pre, "random", 10, seed=7).selected == route(ids, pre, "random", 10, seed=7).selected
    # disagreement: the items where models disagree most come first
    dis = _panel_rows({"a": {i: [1] * 8 for i in ids}, "b": {i: ([3] * 8 if i in ("i40", "i41") else [1] * 8)
                                                             for i in ids}})
    assert set(route(ids, dis, "disagreement", 2).selected) == {"i40", "i41"}
    assert len(route(ids, pre, "uncertain", 500).selected) == 50
    with pytest.raises(ReviewError, match="needs the grader's uncertainty"):
        route(ids, dis, "uncertain", 5)
    with pytest.raises(ReviewError, match="at least 1"):
        route(ids, pre, "random", 0)
    with pytest.raises(ReviewError, match="two or more pre-annotation models"):
        route(ids, pre, "disagreement", 5)  # one model cannot disagree with itself


# -- the grader's uncertainty and its predictions -----------------------------------------------------------------


def test_uncertainty_is_normalised_entropy_weighted_by_sigma2() -> None:
    sure = [1.0, 0.0, 0.0]
    flat = [1 / 3, 1 / 3, 1 / 3]
    p = np.array([[sure, sure], [flat, sure], [flat, flat]])  # (3 items, 2 concepts, 3 levels)
    h = level_entropy(p)
    assert h[0] == pytest.approx([0, 0], abs=1e-9) and h[2] == pytest.approx([1, 1])
    assert uncertainty_score(p) == pytest.approx([0, 0.5, 1], abs=1e-9)
    assert uncertainty_score(p, np.array([3.0, 1.0])) == pytest.approx([0, 0.75, 1], abs=1e-9)


def test_grader_prediction_carries_a_confidence_score() -> None:
    rows = pd.DataFrame({"concept": ["FC", "CC"], "level": [3, 2], "uncertainty": [0.25, 0.25]})
    p = prediction_payload("run1", rows)
    assert p["model_version"] == "run1" and p["score"] == 0.75
    assert [r["value"]["choices"] for r in p["result"]] == [["3"], ["2"]]
    assert "score" not in prediction_payload("gpt", rows.drop(columns="uncertainty"))


@pytest.mark.usefixtures("one_thread")
def test_grader_predictions_from_a_tiny_run(tmp_path: Path) -> None:
    from tests.support.tiny_models import mohler_like_table, tiny_bert_run

    run = tiny_bert_run(tmp_path)
    items = mohler_like_table(12, seed=5)
    got = grader_predictions(run, items)
    assert len(got) == 12 * 8 and set(got["model"]) == {"run"} and set(got["source"]) == {"model"}
    assert got["level"].between(1, 3).all() and got["uncertainty"].between(0, 1).all()
    assert bool(got["sigma2_weighted"].iloc[0])  # the default run has LCEC
    # the levels are the argmax of the probabilities grade writes, and the score follows from them
    from rubrictool.grade import grade_items

    graded = grade_items(run, items)
    probs = np.stack([graded[[f"{k}_p{lv}" for lv in (1, 2, 3)]].to_numpy() for k in KEYS], axis=1)
    assert np.allclose(probs.sum(axis=2), 1, atol=1e-5)
    fc = got[got["concept"] == "FC"]["level"].to_numpy()
    assert (fc == probs[:, 0, :].argmax(axis=1) + 1).all()
    assert (graded["FC_level"].to_numpy() == fc).all()


def test_a_bad_selection_fails_before_any_server_call(tmp_path: Path) -> None:
    from rubrictool.review import Connection, PushOptions, push

    items = pd.DataFrame({"id": ["a", "b", "c"], "response": ["x", "y", "z"]})
    items.to_csv(tmp_path / "items.csv", index=False)
    _panel_rows({"gpt": {i: [2] * 8 for i in "abc"}}).to_csv(tmp_path / "p.csv", index=False)
    nowhere = Connection("http://127.0.0.1:9", "k" * 40)  # nothing listens there: any call would fail differently
    with pytest.raises(ReviewError, match="needs the grader's uncertainty"):
        push(nowhere, MOHLER, tmp_path / "items.csv", tmp_path / "p.csv",
             options=PushOptions(select="uncertain", budget=2))
    with pytest.raises(ReviewError, match="go together"):
        push(nowhere, MOHLER, tmp_path / "items.csv", tmp_path / "p.csv",
             options=PushOptions(select="random"))
    with pytest.raises(ReviewError, match="unknown selection"):
        push(nowhere, MOHLER, tmp_path / "items.csv", tmp_path / "p.csv",
             options=PushOptions(select="smart", budget=2))
