"""Adjudication: reading and validating reviews, majority vote with the ordinal tie rule,
Dawid-Skene wiring, resolutions, the discussion queue, the training table and the benchmark labels."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from crowdkit.aggregation import DawidSkene

from rubrictool.adjudicate import (
    AdjudicationOptions,
    DawidSkeneVote,
    MajorityVote,
    adjudicate,
    adjudicate_benchmark_labels,
    llm_labels,
    read_resolutions,
    read_reviews,
    write_outputs,
)
from rubrictool.agreement import krippendorff_alpha, value_counts
from rubrictool.data import load_concept_passes
from rubrictool.errors import AdjudicateError, DataError
from rubrictool.io import read_table, write_table
from rubrictool.rubric import load_rubric
from rubrictool.tables import validate_adjudicated, validate_reviews
from rubrictool.votes import soft_targets
from tests.support.toy_reviews import TOY, toy_items, toy_reviews

MOHLER = load_rubric("mohler")


def _decision(decisions: pd.DataFrame, item: str, concept: str) -> Any:
    return decisions.set_index(["item", "concept"]).loc[(item, concept)]


def test_majority_vote_rules_and_flags() -> None:
    mv = MajorityVote((1, 2, 3)).fit(toy_reviews())
    d = mv.decisions_
    assert len(d) == sum(len(v) for v in TOY.values())
    cases = {
        ("q1", "FC"): (3, "unanimous", False, False),
        ("q1", "CC"): (2, "tie-median", True, True),  # 1, 2, 3 -> median
        ("q1", "TU"): (2, "majority", True, False),
        ("q2", "FC"): (1, "tie-lower", True, True),  # 1 vs 3 -> the lower
        ("q2", "CC"): (2, "unanimous", False, False),
        ("q2", "TU"): (3, "single", True, False),
        ("q4", "TU"): (3, "majority", True, False),
    }
    for (item, concept), (level, rule, flagged, tied) in cases.items():
        row = _decision(d, item, concept)
        assert (row["level"], row["rule"], bool(row["flagged"]), bool(row["tied"])) == (
            level,
            rule,
            flagged,
            tied,
        )
    assert mv.labels_.loc[("q1", "CC")] == 2 and mv.labels_.name == "level"
    assert int(_decision(d, "q2", "FC")["n_reviewers"]) == 2


def test_dawid_skene_is_crowdkits_per_concept() -> None:
    rng = np.random.default_rng(0)
    truth = rng.integers(1, 4, 120)
    rows = []
    for r, err in zip("ABCD", (0.05, 0.1, 0.45, 0.45), strict=True):
        wrong = rng.random(120) < err
        lv = np.where(wrong, rng.integers(1, 4, 120), truth)
        rows += [{"item": f"x{i}", "reviewer": r, "concept": "FC", "level": int(v)} for i, v in enumerate(lv)]
    reviews = pd.DataFrame(rows)
    ds = DawidSkeneVote((1, 2, 3)).fit(reviews)
    direct = DawidSkene(n_iter=100, tol=1e-5).fit_predict(
        reviews.rename(columns={"item": "task", "reviewer": "worker", "level": "label"})[
            ["task", "worker", "label"]
        ]
    )
    got = ds.labels_.xs("FC", level="concept")
    assert (got.sort_index().to_numpy() == direct.sort_index().to_numpy()).all()
    mv = MajorityVote((1, 2, 3)).fit(reviews).labels_
    assert ds.changed_ == int((ds.labels_ != mv).sum())
    d = ds.decisions_
    assert (d.loc[d["level"] != d["vote"], "rule"] == "dawid-skene").all()
    assert (d["vote"].to_numpy() == mv.to_numpy()).all()


def test_adjudicate_dawid_skene_reports_changes() -> None:
    res = adjudicate(toy_reviews(), MOHLER, toy_items(),
                     options=AdjudicationOptions(method="dawid-skene", n_boot=50, coverage=False))
    changed = res.agreement["adjudication"]["dawid_skene_changed"]
    assert isinstance(changed, int)
    assert changed == int((res.decisions["level"] != res.decisions["vote"]).sum())
    assert set(res.table["method"]) == {"dawid-skene"}


def test_resolutions_override_and_are_recorded(tmp_path: Path) -> None:
    rubric = MOHLER
    f = tmp_path / "res.csv"
    pd.DataFrame(
        [
            {
                "item": "q1",
                "concept": "CC",
                "level": 3,
                "note": "full coverage after discussion",
                "decided_by": "panel",
            }
        ]
    ).to_csv(f, index=False)
    before = adjudicate(toy_reviews(), rubric, toy_items(),
                        options=AdjudicationOptions(n_boot=0, coverage=False))
    after = adjudicate(
        toy_reviews(), rubric, toy_items(), resolutions=read_resolutions(f, rubric),
        options=AdjudicationOptions(n_boot=0, coverage=False),
    )
    row_b = before.table.set_index("id").loc["q1"]
    row_a = after.table.set_index("id").loc["q1"]
    assert row_b["CC"] == 2 and row_a["CC"] == 3
    assert row_a["n_resolved"] == 1 and row_a["resolved_concepts"] == "CC"
    dec = _decision(after.decisions, "q1", "CC")
    assert (dec["level"], dec["vote"], dec["rule"], bool(dec["resolved"])) == (3, 2, "resolved", True)
    assert dec["note"] == "full coverage after discussion" and dec["decided_by"] == "panel"
    # agreement describes the reviews, not the decisions
    assert after.agreement["concepts"]["CC"]["alpha"] == before.agreement["concepts"]["CC"]["alpha"]
    assert after.agreement["concepts"]["CC"]["resolved"] == 1
    q = after.queue.set_index(["item", "concept"])
    assert q.loc[("q1", "CC"), "status"] == "resolved"


def test_a_resolved_decision_is_its_concepts_whole_soft_target(tmp_path: Path) -> None:
    """With soft concept targets the reviewers' shares are the target; where a resolver decided, the decision is."""
    f = tmp_path / "res.csv"
    pd.DataFrame([{"item": "q1", "concept": "CC", "level": 3}]).to_csv(f, index=False)
    out = adjudicate(toy_reviews(), MOHLER, toy_items(), resolutions=read_resolutions(f, MOHLER),
                     options=AdjudicationOptions(n_boot=0, coverage=False))
    table = out.table
    for key in MOHLER.keys:  # concepts the toy reviewers left out: the lowest level, no votes
        table[key] = table[key].fillna(1)
    write_table(table, tmp_path / "adjudicated.csv")
    df = validate_adjudicated(read_table(tmp_path / "adjudicated.csv"), MOHLER)
    soft = soft_targets(df, MOHLER)
    row = {i: n for n, i in enumerate(df["id"])}
    k = {key: n for n, key in enumerate(MOHLER.keys)}
    np.testing.assert_allclose(soft[row["q1"], k["CC"]], [0, 0, 1])  # votes 1 2 3, resolved to 3
    np.testing.assert_allclose(soft[row["q1"], k["TU"]], [1 / 3, 2 / 3, 0], rtol=1e-6)  # not resolved: the shares
    np.testing.assert_allclose(soft[row["q3"], k["CC"]], [0, 1 / 3, 2 / 3], rtol=1e-6)
    unresolved = soft_targets(df.drop(columns="resolved_concepts"), MOHLER)
    np.testing.assert_allclose(unresolved[row["q1"], k["CC"]], [1 / 3, 1 / 3, 1 / 3], rtol=1e-6)


def test_filled_queue_is_a_resolutions_file(tmp_path: Path) -> None:
    rubric = MOHLER
    res = adjudicate(toy_reviews(), rubric, toy_items(),
                     options=AdjudicationOptions(n_boot=0, coverage=False))
    queue = res.queue.copy()
    hit = ((queue["item"] == "q2") & (queue["concept"] == "FC")).to_numpy()
    queue.loc[hit, "resolution"] = 2
    queue.loc[hit, "decided_by"] = "ann"
    path = write_table(queue, tmp_path / "queue.csv")
    resolutions = read_resolutions(path, rubric)
    assert resolutions[["item", "concept", "level", "decided_by"]].values.tolist() == [["q2", "FC", 2, "ann"]]


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        ([{"item": "nope", "concept": "CC", "level": 2}], "item nope / concept CC has no reviews"),
        (
            [{"item": "q1", "concept": "CC", "level": 2}, {"item": "q1", "concept": "CC", "level": 3}],
            "resolved more than once",
        ),
    ],
)
def test_bad_resolutions(rows: list[dict[str, object]], message: str) -> None:
    with pytest.raises(AdjudicateError, match=message):
        adjudicate(
            toy_reviews(), MOHLER, resolutions=pd.DataFrame(rows).assign(note=None, decided_by=None),
            options=AdjudicationOptions(n_boot=0),
        )


def test_bad_resolution_level_names_the_row(tmp_path: Path) -> None:
    f = tmp_path / "res.csv"
    f.write_text("item,concept,level\nq1,CC,2\nq1,FC,7\n")
    with pytest.raises(DataError, match=r"res\.csv:row 3: level 7 .* levels must be integers 1\.\.3"):
        read_resolutions(f, MOHLER)


def test_read_reviews_long_wide_and_mixed(tmp_path: Path) -> None:
    reviews = toy_reviews()
    long = reviews.loc[reviews["reviewer"] != "C"]
    long.to_csv(tmp_path / "ab.csv", index=False)
    wide = (
        reviews.loc[reviews["reviewer"] == "C"]
        .pivot(index="item", columns="concept", values="level")
        .reset_index()
    )
    write_table(wide.rename(columns={"item": "id"}), tmp_path / "third.jsonl")
    got = read_reviews([str(tmp_path / "ab.csv"), f"C={tmp_path / 'third.jsonl'}"])
    checked = validate_reviews(got, MOHLER)
    key = ["item", "reviewer", "concept"]
    exp = reviews.sort_values(key).reset_index(drop=True)
    out = checked.sort_values(key).reset_index(drop=True)
    assert out[key + ["level"]].values.tolist() == exp[key + ["level"]].values.tolist()
    # a wide file without NAME= is named by its stem
    assert set(read_reviews([tmp_path / "third.jsonl"])["reviewer"]) == {"third"}


def _write(tmp_path: Path, df: pd.DataFrame, name: str = "r.csv") -> Path:
    p = tmp_path / name
    df.to_csv(p, index=False)
    return p


@pytest.mark.parametrize(
    ("mutate", "error", "message"),
    [
        # read_reviews rejects a file that is no review table; validate_reviews (tables) checks the rows
        (lambda d: d.drop(columns="level"), AdjudicateError, r"missing column\(s\) level"),
        (lambda d: d.iloc[0:0], AdjudicateError, "empty"),
        (
            lambda d: d.assign(concept=d["concept"].where(d.index != 4, "XX")),
            DataError,
            r"r\.csv:row 6: unknown concept 'XX'.*FC, CC",
        ),
        (
            lambda d: d.assign(level=d["level"].where(d.index != 2, 4)),
            DataError,
            r"r\.csv:row 4: level 4 for concept FC of item q1.*1\.\.3",
        ),
        (
            lambda d: d.assign(level=d["level"].astype(object).where(d.index != 0, "high")),
            DataError,
            r"row 2: level 'high'",
        ),
        (lambda d: pd.concat([d, d.iloc[[3]]]), DataError, r"reviewer 'A' reviewed item q1 / CC twice"),
        (lambda d: d.assign(source="robot"), DataError, r"source 'robot'; use human, llm, model"),
    ],
)
def test_bad_reviews_name_the_row(tmp_path: Path, mutate: object, error: type[Exception], message: str) -> None:
    bad = mutate(toy_reviews())  # type: ignore[operator]
    path = _write(tmp_path, bad)
    with pytest.raises(error, match=message):
        df = read_reviews([path])
        validate_reviews(df, MOHLER)


def test_missing_review_file_and_misused_name(tmp_path: Path) -> None:
    with pytest.raises(AdjudicateError, match=r"reviews file .*missing\.csv: no such file"):
        read_reviews([tmp_path / "missing.csv"])
    path = _write(tmp_path, toy_reviews())
    with pytest.raises(AdjudicateError, match="NAME=PATH names the reviewer of a WIDE file"):
        read_reviews([f"X={path}"])
    with pytest.raises(AdjudicateError, match="no reviews given"):
        read_reviews([])


def test_unknown_item_ids_against_items() -> None:
    reviews = pd.concat(
        [toy_reviews(), pd.DataFrame([{"item": "zz", "reviewer": "A", "concept": "FC", "level": 1}])]
    )
    with pytest.raises(AdjudicateError, match=r"1 item id\(s\) not in the items table \(zz\)"):
        adjudicate(reviews, MOHLER, toy_items(), options=AdjudicationOptions(n_boot=0))


def test_under_reviewed_items_are_reported_not_dropped() -> None:
    res = adjudicate(toy_reviews(), MOHLER, toy_items(),
                     options=AdjudicationOptions(n_boot=0, coverage=False, expected_reviewers=3))
    a = res.agreement
    assert a["under_reviewed"] == {"n_items": 1, "items": ["q2"]}
    row = res.table.set_index("id").loc["q2"]
    assert row["n_reviewers"] == 2 and row["FC"] == 1 and row["TU"] == 3
    assert pd.isna(row["CP"])  # nobody reviewed CP: missing, not invented
    assert a["concepts"]["FC"]["n_items"] == 4 and a["concepts"]["TU"]["n_pairable"] == 3


def test_training_table_layout_and_agreement_json(tmp_path: Path) -> None:
    rubric = MOHLER
    res = adjudicate(toy_reviews(), rubric, toy_items(),
                     options=AdjudicationOptions(n_boot=100, coverage=False))
    t = res.table
    assert list(t.columns[:6]) == ["id", "question", "response", "reference", "context", "grade"]
    assert list(t.columns[6:14]) == rubric.keys
    assert {"n_reviewers", "unanimous", "n_flagged", "flagged_concepts", "method", "label_source"} <= set(
        t.columns
    )
    assert str(t["FC"].dtype) == "Int64"
    q1 = t.set_index("id").loc["q1"]
    assert q1["flagged_concepts"] == "CC,TU" and q1["n_flagged"] == 2 and not q1["unanimous"]
    assert t.set_index("id").loc["q3", "flagged_concepts"] == "CC"
    fc = res.agreement["concepts"]["FC"]
    counts = value_counts(np.array([list(v["FC"]) for v in TOY.values()], dtype=float), np.array([1, 2, 3]))
    assert fc["alpha"] == pytest.approx(krippendorff_alpha(counts, [1, 2, 3], "ordinal"))
    assert len(fc["alpha_ci"]) == 2 and {p["a"] + p["b"] for p in fc["pairwise"]} == {"AB", "AC", "BC"}
    assert set(fc["vs_others"]) == {"A", "B", "C"}
    assert res.agreement["grade"]["graders"] == ["grade_me", "grade_other"]
    # each reviewer's level beside the decision (soft targets), in reviewer order; a concept nobody reviewed: empty
    votes = t.set_index("id")[[f"votes_{k}" for k in rubric.keys]]
    assert votes.loc["q1", "votes_CC"] == "1 2 3" and votes.loc["q2", "votes_FC"] == "1 3"
    assert votes.loc["q2", "votes_TU"] == "3" and votes.loc["q1", "votes_CP"] == ""
    for fmt in ("csv", "jsonl", "parquet"):
        paths = write_outputs(res, tmp_path / fmt, fmt)
        back = read_table(paths["table"])
        back_votes = back.set_index(back["id"].astype(str))[["votes_FC", "votes_CC"]].fillna("").astype(str)
        assert back_votes.loc["q1"].tolist() == ["3 3 3", "1 2 3"] and back_votes.loc["q2"].tolist() == ["1 3", "2 2"]
        assert back["id"].astype(str).tolist() == t["id"].tolist()
        assert (
            back["CC"].tolist() == t["CC"].astype(float).tolist() or back["CC"].tolist() == t["CC"].tolist()
        )
        saved = json.loads(paths["agreement"].read_text())
        assert saved["concepts"]["FC"]["alpha"] == pytest.approx(fc["alpha"])


def test_discussion_queue_shows_levels_and_anchors() -> None:
    rubric = MOHLER
    res = adjudicate(toy_reviews(), rubric, toy_items(),
                     options=AdjudicationOptions(n_boot=0, coverage=False, queue="all"))
    q = res.queue.set_index(["item", "concept"])
    assert len(q) == int(res.decisions["flagged"].sum())
    row: Any = q.loc[("q1", "CC")]
    assert (row["A"], row["B"], row["C"], row["level"], row["rule"]) == (1, 2, 3, 2, "tie-median")
    cc = rubric.concept("CC")
    assert row["anchors"] == " | ".join(f"{v}: {cc.anchor(v)}" for v in (1, 2, 3))
    assert row["response"] == "LIFO list" and row["status"] == "open"
    missing: Any = q.loc[("q2", "FC"), "C"]
    assert pd.isna(missing)
    md = res.markdown
    assert "## Item q1" in md and "**Response:** LIFO list" in md
    assert f"| CC ({cc.name}) | 1 | 2 | 3 | 2 | tie-median | open | 1: {cc.anchor(1)} / 2:" in md
    assert "## Item q3" in md and "## Item q4" in md


def test_human_reviews_with_llm_rows_compare_the_llm() -> None:
    reviews = toy_reviews().assign(source="human")
    llm = (
        toy_reviews().loc[lambda d: d["reviewer"] == "A"].assign(reviewer="gpt", source="llm", model="gpt-4o")
    )
    res = adjudicate(pd.concat([reviews, llm]), MOHLER, options=AdjudicationOptions(n_boot=0, coverage=False))
    assert res.agreement["reviewers"] == ["A", "B", "C"]
    assert "gpt-4o" in res.agreement["llm_vs_consensus"]
    assert res.agreement["llm_vs_consensus"]["gpt-4o"]["FC"]["n_items"] == 4


def test_llm_labels_skip_failures(tmp_path: Path) -> None:
    p = tmp_path / "pred.csv"
    pd.DataFrame(
        {
            "item": ["q1", "q2", "q3"],
            "model": "m",
            "concept": "FC",
            "level": [3, None, 9],
            "evidence": "",
            "raw_ok": [True, False, False],
        }
    ).to_csv(p, index=False)
    got = llm_labels(p, MOHLER)
    assert got.values.tolist() == [["q1", "m", "FC", 3]]
    res = adjudicate(toy_reviews(), MOHLER, predictions=got,
                     options=AdjudicationOptions(n_boot=0, coverage=False))
    assert res.agreement["llm_vs_consensus"]["m"]["FC"]["confusion"]["matrix"] == [
        [0, 0, 0],
        [0, 0, 0],
        [0, 0, 1],
    ]


def test_benchmark_labels_are_the_majority_of_the_passes(mohler_items: pd.DataFrame, data_dir: Path) -> None:
    table = adjudicate_benchmark_labels("mohler", data_dir=data_dir)
    assert table["id"].tolist() == mohler_items["id"].tolist() and len(table) == 2273
    passes = load_concept_passes(data_dir)
    wide = passes.pivot_table(index=["item", "concept"], columns="reviewer", values="level")
    # majority of three; with 1-1-1 the median (the passes never split three ways)
    expected = wide.median(axis=1).astype(int)
    got = table.set_index("id")[["FC", "CC", "TU", "CP", "R", "DU", "EE", "FR"]].stack()
    got.index.names = ["item", "concept"]
    assert (got.sort_index().astype(int) == expected.sort_index()).all()
    assert set(table["label_source"]) == {"llm"}
    assert table["grade"].notna().all() and table["response"].notna().all()


def test_benchmark_labels_need_concept_passes() -> None:
    with pytest.raises(AdjudicateError, match="no bundled concept labels for benchmark 'asap2'"):
        adjudicate_benchmark_labels("asap2", items=toy_items())
