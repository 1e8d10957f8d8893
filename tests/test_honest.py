"""What a run says about itself: test size, majority class, bootstrap CIs, warnings, calibration, the implied and
measured concept noise, an inert LCEC, the report's verdict and a constant model's audit — on a statistics course
that is not Mohler (three concepts on 0..2, a 0..2 or pass/fail grade, graders grade_ta and grade_prof)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from rubrictool.cli import app
from rubrictool.evaluate import (
    calibration,
    expected_calibration_error,
    honest_metrics,
    inconclusive,
    lcec_activity,
)
from rubrictool.report.honest import POINTS_MARGIN, verdict
from rubrictool.textsafe import md_inline
from tests.support.stats_course import STATS_KEYS, stats_table, train_stats
from tests.support.tiny_models import build_backbone

runner = CliRunner()


# ---------------------------------------------------------------------------- the numbers, by hand
def test_a_constant_model_on_a_small_split_gets_all_three_warnings() -> None:
    train = np.array([0, 1, 1, 1, 2, 2])  # majority grade 1 (index), shown on the rubric's scale 3..5 as 4
    truth = np.array([1, 1, 0, 2, 1, 1, 2, 1])
    res = honest_metrics(truth, np.ones(8, int), train, n_boot=200, grade_min=3)
    assert res["n_test"] == 8 and isinstance(res["n_test"], int)
    assert res["majority"] == {"grade": 4, "t_acc": 5 / 8, "qwk": pytest.approx(0.0)}
    assert res["top_grade"] == 4 and res["top_share"] == 1.0
    assert [w["code"] for w in res["warnings"]] == ["constant_predictions", "not_above_majority", "small_test"]
    assert "grade 4" in res["warnings"][0]["message"] and "--folds 5" in res["warnings"][2]["message"]
    assert res["ci"]["t_acc"]["lo"] <= 5 / 8 <= res["ci"]["t_acc"]["hi"]


def test_a_model_that_grades_well_on_enough_answers_gets_no_warning() -> None:
    rng = np.random.default_rng(0)
    truth = rng.integers(0, 3, 200)
    pred = np.where(rng.random(200) < 0.9, truth, (truth + 1) % 3)
    res = honest_metrics(truth, pred, rng.integers(0, 3, 300), n_boot=300)
    assert res["warnings"] == [] and res["vs_majority"]["lo"] > 0
    assert res["ci"]["qwk"]["lo"] < res["ci"]["qwk"]["value"] < res["ci"]["qwk"]["hi"]


def test_ece_and_nll_by_hand() -> None:
    probs = np.array([[0.9, 0.1], [0.8, 0.2], [0.35, 0.65], [0.6, 0.4]])
    y = np.array([0, 1, 1, 0])
    cal = calibration(probs, y)
    # bins of 0.1: 0.9 -> [0.9,1) right; 0.8 -> [0.8,0.9) wrong; 0.65 and 0.6 -> [0.6,0.7) both right
    ece = (1 / 4) * abs(1 - 0.9) + (1 / 4) * abs(0 - 0.8) + (2 / 4) * abs(1 - 0.625)
    assert cal["ece"] == pytest.approx(ece) and "10 equal-width bins" in cal["ece_bins"]
    assert cal["nll"] == pytest.approx(-np.mean(np.log([0.9, 0.2, 0.65, 0.6])))
    assert [b["n"] for b in cal["bins"]] == [2, 1, 1]
    assert expected_calibration_error(probs.max(1), probs.argmax(1) == y)["ece"] == pytest.approx(ece)


def test_lcec_is_inert_when_it_neither_shrinks_nor_links() -> None:
    K = 4
    tiny = np.eye(K) + 1e-3 * (1 - np.eye(K))
    assert lcec_activity(np.full(K, 0.99), tiny)["inert"]  # both reasons
    shrinks = lcec_activity(np.full(K, 0.8), tiny)
    assert shrinks["inert"] and "links no concepts" in shrinks["reason"] and "A_kk" not in shrinks["reason"]
    links = np.eye(K)
    links[0, 1] = links[1, 0] = 0.3
    assert not lcec_activity(np.full(K, 0.8), links)["inert"]
    assert inconclusive({"rho": 0.4, "lo": -0.5, "hi": 0.9}) and not inconclusive({"rho": 0.8, "lo": 0.1, "hi": 1.0})
    # three concepts: ρ = 1 with a CI of [1, 1] is no evidence (three ranks agree by chance one time in six)
    from rubrictool.evaluate import spearman_with_ci, why_inconclusive

    three = spearman_with_ci([0.1, 0.2, 0.3], [0.5, 0.6, 0.9])
    assert three is not None and three["rho"] == 1.0 and three["lo"] == three["hi"] == 1.0
    assert inconclusive(three) and "over 3 concepts" in (why_inconclusive(three) or "")
    four = spearman_with_ci([0.1, 0.2, 0.3, 0.4], [0.5, 0.6, 0.9, 1.0])
    assert four is not None and four["n"] == 4 and why_inconclusive(four) in (None, "the CI spans 0")


def test_the_verdict_is_drawn_from_the_numbers() -> None:
    honest = honest_metrics(np.array([0, 1, 2, 1] * 20), np.array([0, 1, 1, 1] * 20), np.array([1, 1, 0]), n_boot=200)
    concepts = pd.DataFrame({"concept": ["MEAN", "SPREAD", "UNITS"], "alpha": [0.9, 0.4, 0.8],
                             "test_reliability": [0.8, 0.7, 0.2]})
    lines = verdict(grades=[0, 1, 2], predicted=[0, 1], honest=honest, concepts=concepts,
                    correlations={"ρ(a, b)": {"rho": 0.3, "lo": -0.4, "hi": 0.8, "n": 6},
                                  "ρ(c, d)": {"rho": 0.9, "lo": 0.5, "hi": 1.0, "n": 6},
                                  "ρ(e, f)": {"rho": 1.0, "lo": 1.0, "hi": 1.0, "n": 3}},
                    lcec={"inert": True, "reason": "mean A_kk is 0.990"})
    text = " ".join(lines)
    assert "never predicts grade 2" in text and "beats the majority class" in text
    assert "do not agree on SPREAD" in text and "UNITS are mostly noise" in text
    assert "Inconclusive (95 % CI spans 0, or over 3 concepts or fewer): ρ(a, b) and ρ(e, f)." in text
    assert "ρ(c, d)" not in text
    assert "LCEC is inert" in text
    assert "SPREAD (α below 0.667): treat its levels as tentative" in text
    two = verdict(grades=[0, 1, 2], predicted=[0, 1], honest=honest, concepts=concepts.assign(alpha=[0.3, 0.4, 0.8]),
                  correlations={}, lcec=None)
    assert "treat these concepts' levels as tentative" in " ".join(two)
    # the points grader on the adjudicated levels is recommended only when it beats the model by the margin and the
    # paired CI of the difference excludes 0
    sure = {"diff": 0.05, "lo": 0.01, "hi": 0.09, "p_not_better": 0.01}
    pts = {"gold_levels": {"t_acc": 0.8, "qwk": 0.71, "vs_model": sure}, "source": "fitted"}
    reliable = concepts.assign(alpha=[0.9, 0.8, 0.8])
    better = " ".join(verdict(grades=[0, 1, 2], predicted=[0, 1], honest=honest, concepts=reliable, correlations={},
                              lcec=None, points=pts, qwk=0.71 - POINTS_MARGIN))
    assert "grades these test answers better than the model (QWK 0.710 against 0.660" in better
    assert "paired 95 % CI [+0.010, +0.090]" in better and "rubric fit-points" in better
    # never on levels whose α is below 0.667 (SPREAD's 0.4): the route would grade new answers from them
    unreliable = " ".join(verdict(grades=[0, 1, 2], predicted=[0, 1], honest=honest, concepts=concepts,
                                  correlations={}, lcec=None, points=pts, qwk=0.71 - POINTS_MARGIN))
    assert "fit-points" not in unreliable and "α below 0.667 on SPREAD: not recommended" in unreliable
    level = " ".join(verdict(grades=[0, 1, 2], predicted=[0, 1], honest=honest, concepts=concepts, correlations={},
                             lcec=None, points=pts, qwk=0.70))
    assert "fit-points" not in level


def test_no_points_advice_on_a_difference_whose_interval_reaches_zero() -> None:
    """Six test answers, QWK 0.444 against 0.000: a large difference, and an interval that reaches below 0."""
    from rubrictool.points import points_ahead

    few = {"diff": 0.444, "lo": -0.25, "hi": 0.9, "p_not_better": 0.2}
    assert points_ahead({"gold_levels": {"t_acc": 0.5, "qwk": 0.444, "vs_model": few}}, 0.0) is None
    assert points_ahead({"gold_levels": {"t_acc": 0.5, "qwk": 0.444}}, 0.0) is None  # no interval recorded: no advice
    sure = few | {"lo": 0.1}
    assert "fit-points" in str(points_ahead({"gold_levels": {"t_acc": 0.5, "qwk": 0.444, "vs_model": sure}}, 0.0))


# ---------------------------------------------------------------------------- runs on the statistics course
@pytest.fixture(scope="module")
def course(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, str]:
    """(run, table, train output): 48 answers, a 0..2 grade, a tiny BERT."""
    tmp = tmp_path_factory.mktemp("stats")
    code, output, run = train_stats(tmp, build_backbone(tmp, "bert"), stats_table(48))
    assert code == 0, output
    return run, tmp / "stats.csv", output


def _split(run: Path) -> dict[str, list[str]]:
    return json.loads((run / "split.json").read_text())  # type: ignore[no-any-return]


def test_a_single_split_run_records_what_it_can_tell(course: tuple[Path, Path, str]) -> None:
    run, table, output = course
    m = json.loads((run / "metrics.json").read_text())
    df = pd.read_csv(table, dtype={"id": str}).set_index("id")
    split = _split(run)
    assert m["n_test"] == len(split["test"]) and isinstance(m["n_test"], int)
    train_grades = df.loc[split["train"], "grade"]
    counts = train_grades.value_counts()
    assert m["majority"]["grade"] == int(counts[counts == counts.max()].index.min())  # ties: the lower grade
    pred = pd.read_csv(run / "test_predictions.csv", dtype={"id": str})
    truth = df.loc[pred["id"], "grade"].to_numpy()
    assert m["majority"]["t_acc"] == pytest.approx(float((truth == m["majority"]["grade"]).mean()))
    assert m["ci"]["t_acc"]["value"] == pytest.approx(float((pred["grade"].to_numpy() == truth).mean()))
    # calibration of what teachers read: ECE again from test_predictions.csv's grade_prob
    ece = expected_calibration_error(pred["grade_prob"], pred["grade"].to_numpy() == truth)["ece"]
    assert m["calibration"]["ece"] == pytest.approx(ece) and m["calibration"]["nll"] > 0
    # warnings: structured, and printed
    codes = [w["code"] for w in m["warnings"]]
    share = pred["grade"].value_counts().max() / len(pred)
    assert ("constant_predictions" in codes) == (share >= 0.9)
    assert ("not_above_majority" in codes) == (m["vs_majority"]["lo"] <= 0)
    assert "small_test" in codes  # 48 answers give a handful of test answers
    flat = " ".join(output.split())
    assert f"n = {m['n_test']} test answers" in flat and "warning: only" in flat and "--folds 5" in flat
    # the points route, recommended when the points grader on the adjudicated levels beats the model by the margin
    gold, qwk = m["points"]["gold_levels"]["qwk"], m["summary"]["qwk"]["mean"]
    vs = m["points"]["gold_levels"]["vs_model"]  # points − model on the same test answers, with its paired CI
    assert vs["diff"] == pytest.approx(gold - qwk, abs=1e-9)
    assert ("note: A points table on the adjudicated concept levels" in flat) == (gold >= qwk + POINTS_MARGIN
                                                                                  and vs["lo"] > 0), flat


def test_the_reliability_table_says_what_sigma2_means(course: tuple[Path, Path, str]) -> None:
    run, table, _ = course
    rel = pd.read_csv(run / "reliability.csv").set_index("concept")
    df = pd.read_csv(table, dtype={"id": str}).set_index("id")
    split = _split(run)
    M = 2
    v = (df.loc[split["train"], STATS_KEYS] / M).var(ddof=0)  # v_k over the training labels
    for k in STATS_KEYS:
        a = float(rel["A_kk"].astype(float)[k])
        assert rel.loc[k, "label_var"] == pytest.approx(v[k])
        assert rel.loc[k, "sigma2_implied"] == pytest.approx(v[k] * (1 - a) / a)
    pred = pd.read_csv(run / "test_predictions.csv", dtype={"id": str})
    gold = df.loc[pred["id"], STATS_KEYS].to_numpy(float) / M
    noise = (pred[[f"{k}_expected" for k in STATS_KEYS]].to_numpy(float) / M - gold).var(0)  # σ̂² on the test answers
    assert rel.loc[STATS_KEYS, "score_sigma2"].to_numpy() == pytest.approx(noise, abs=1e-6)  # float32 outputs
    m = json.loads((run / "metrics.json").read_text())
    from rubrictool.evaluate import spearman_with_ci

    assert m["implied_noise"]["implied_vs_measured"] == spearman_with_ci(rel["sigma2_implied"], rel["score_sigma2"])
    md = (run / "reliability.md").read_text()
    assert "σ²(implied)" in md and "Spearman ρ(σ_k²(implied), σ̂_k²)" in md
    ci = m["implied_noise"]["implied_vs_measured"]
    # three concepts: every correlation over them is marked inconclusive, whatever its CI
    assert ci is None or "inconclusive: over 3 concepts a rank correlation can only be ±1 or ±½" in md


def test_the_report_opens_with_a_verdict_and_warns(course: tuple[Path, Path, str], tmp_path: Path) -> None:
    run, table, _ = course
    out = tmp_path / "rep"
    res = runner.invoke(app, ["report", "--run", str(run), "--table", str(table), "--out", str(out), "--repeats", "1"])
    assert res.exit_code == 0, res.output
    md, page = (out / "report.md").read_text(), (out / "report.html").read_text()
    m = json.loads((run / "metrics.json").read_text())
    assert md.index("## Verdict") < md.index("## Grade metrics")
    if m.get("spearman_ci"):  # three concepts: no CI shown as if it meant something, and marked inconclusive
        assert "(over 3 concepts: no CI). Inconclusive: over 3 concepts" in md and "concepts [1.000, 1.000]" not in md
    doc = json.loads((out / "report.json").read_text())
    # the page escapes Markdown punctuation in every sentence it did not write as markup (hostile-text escaping)
    assert doc["verdict"] and all(f"- {md_inline(v)}" in md for v in doc["verdict"])
    assert [w["code"] for w in doc["warnings"]] == [w["code"] for w in m["warnings"]]
    for w in m["warnings"]:  # the run's warnings, on the page
        assert f"**Warning:** {md_inline(w['message'])}" in md and f'id="warning-{w["code"]}"' in page
    pred = pd.read_csv(run / "test_predictions.csv")
    never = sorted(set(range(3)) - set(pred["grade"]))
    if len(set(pred["grade"])) == 1:
        assert f"grade {pred['grade'].iloc[0]}: it grades nothing" in md
    elif never:
        assert f"never predicts grade{'s' if len(never) > 1 else ''} {never[0]}" in md
    beats = m["vs_majority"]["lo"] > 0
    assert ("It beats the majority class" in md) == beats and ("It does not beat the majority class" in md) != beats
    # integer n, the graders as the table names them, no Mohler names
    agr = pd.read_csv(out / "agreement.csv")
    assert list(agr["pair"]) == ["model vs gold grade", "model vs grade_ta", "model vs grade_prof",
                                 "grade_ta vs grade_prof (human–human)"]
    assert f"| model vs gold grade | {m['n_test']} |" in md and "grade_me" not in md and "grader me" not in page
    assert "adjacent" in agr.columns  # three grades: ±1 still tells something
    # calibration: a diagram and the numbers of metrics.json
    assert (out / "calibration.png").is_file() and f"{m['calibration']['ece']:.3f}" in md
    # σ² implied beside σ̂², and the inert LCEC hides its links
    concepts = pd.read_csv(out / "concepts.csv")
    assert {"sigma2_implied", "score_sigma2"} <= set(concepts.columns) and (out / "implied_noise.png").is_file()
    inert = m["lcec"]["inert"]
    assert ("LCEC is inert in this run" in md) == inert and ("strongest learned links" in md) != inert
    from rubrictool.report.diagnose import partial_from_run

    assert (partial_from_run(run) is None) == inert


def test_a_pass_fail_grade_shows_no_adjacent_agreement(tmp_path: Path) -> None:
    code, output, run = train_stats(tmp_path, build_backbone(tmp_path, "bert"), stats_table(40, seed=1), grade_max=1)
    assert code == 0, output
    out = tmp_path / "rep"
    res = runner.invoke(app, ["report", "--run", str(run), "--table", str(tmp_path / "stats.csv"), "--out", str(out),
                              "--repeats", "1"])
    assert res.exit_code == 0, res.output
    assert "adjacent" not in pd.read_csv(out / "agreement.csv").columns
    md = (out / "report.md").read_text()
    assert "adjacent" not in md and "| T-Acc (exact agreement) |" in md


def test_a_constant_model_is_called_constant_by_train_report_and_audit(tmp_path: Path) -> None:
    """Every training answer grade 1 with every concept at 1: the model can only say 1."""
    code, output, run = train_stats(tmp_path, build_backbone(tmp_path, "bert"), stats_table(48, skew=1.0))
    assert code == 0, output
    m = json.loads((run / "metrics.json").read_text())
    codes = [w["code"] for w in m["warnings"]]
    assert codes[:2] == ["constant_predictions", "not_above_majority"] and m["top_share"] == 1.0
    assert "gives grade 1 to 100 %" in " ".join(output.split())
    res = runner.invoke(app, ["audit", "--run", str(run), "--table", str(tmp_path / "stats.csv"),
                              "--transform", "append_reference", "--transform", "append_keywords"])
    assert res.exit_code == 0, res.output
    flat = " ".join(res.output.split())
    assert "The model is constant" in flat and "mean grade shift" not in flat  # no table that reads as "robust"
    doc = json.loads((run / "audit" / "audit.json").read_text())
    items = pd.read_csv(run / "audit" / "audit_items.csv")
    assert doc["constant_grade"] == 1 and set(items["grade_before"]) | set(items["grade_after"]) == {1}
    assert "**The model is constant:**" in (run / "audit" / "audit.md").read_text()


def test_folds_pool_calibration_and_the_implied_noise(tmp_path: Path) -> None:
    code, output, run = train_stats(tmp_path, build_backbone(tmp_path, "bert"), stats_table(48, seed=2), "--folds", "2")
    assert code == 0, output
    folds = json.loads((run / "folds.json").read_text())
    pooled = pd.read_csv(run / "pooled_predictions.csv")
    ece = expected_calibration_error(pooled["grade_prob"], pooled["grade"] == pooled["grade_true"])["ece"]
    assert folds["calibration"]["ece"] == pytest.approx(ece)
    per_fold = [json.loads((run / f"fold-{i}" / "metrics.json").read_text()) for i in range(2)]
    n = [f["n_test"] for f in per_fold]
    nll = sum(k * f["calibration"]["nll"] for k, f in zip(n, per_fold)) / sum(n)
    assert folds["calibration"]["nll"] == pytest.approx(nll) and sum(n) == len(pooled)
    assert folds["majority"]["t_acc"] == pytest.approx(float((pooled["majority"] == pooled["grade_true"]).mean()))
    assert all(w["code"] != "small_test" for w in folds["warnings"])  # every answer was tested once
    rel = folds["reliability"]
    implied = np.mean([pd.read_csv(run / f"fold-{i}" / "reliability.csv")["sigma2_implied"] for i in range(2)], axis=0)
    assert rel["sigma2_implied_mean"] == pytest.approx(implied.tolist())
    assert rel["score_sigma2_pooled"] == folds["score_reliability"]["sigma2"]
    assert "implied_vs_measured" in rel and "implied_vs_1_minus_alpha" in rel
    assert "majority class" in (run / "folds.md").read_text()
    assert f"n = {len(pooled)} answers pooled over 2 folds" in " ".join(output.split())
    assert not math.isnan(folds["ci"]["t_acc"]["lo"])


def test_a_pass_fail_k_fold_run_and_its_points_grader_show_no_adjacent_agreement_and_say_who_labelled(
        tmp_path: Path) -> None:
    df = stats_table(40, seed=1).assign(label_source="llm")
    code, output, run = train_stats(tmp_path, build_backbone(tmp_path, "bert"), df, "--folds", "2", grade_max=1)
    assert code == 0, output
    md = (run / "folds.md").read_text()
    assert "adjacent" not in md and "| QWK |" in md
    folds = json.loads((run / "folds.json").read_text())
    assert folds["grade_levels"] == 2 and folds["labels"]["source"] == "llm"  # who made the labels, as in each fold
    assert folds["labels"] == json.loads((run / "fold-0" / "metrics.json").read_text())["labels"]
    assert "Labels: an LLM panel" in md and "not expert-validated" in md
    res = runner.invoke(app, ["rubric", "fit-points", "--rubric", str(tmp_path / "stats101.yaml"), "--table",
                              str(tmp_path / "stats.csv"),
                              "--out", str(tmp_path / "points.yaml")])
    assert res.exit_code == 0, res.output
    res = runner.invoke(app, ["rubric", "points", "--rubric", str(tmp_path / "points.yaml"), "--labels",
                              str(tmp_path / "stats.csv")])
    assert res.exit_code == 0, res.output
    assert "QWK" in res.output and "adjacent" not in res.output


def test_a_one_question_course_gets_generic_filler_in_no_subject_and_is_told_so(tmp_path: Path) -> None:
    """Every answer answers the one quiz question: there are no answers to other questions to draw filler from."""
    from rubrictool.audit import FILLER

    df = stats_table(40, seed=3).assign(question="describe the sample")
    code, output, run = train_stats(tmp_path, build_backbone(tmp_path, "bert"), df)
    assert code == 0, output
    res = runner.invoke(app, ["audit", "--run", str(run), "--transform", "append_filler"])
    assert res.exit_code == 0, res.output
    assert "generic filler sentences" in " ".join(res.output.split()) and "--filler FILE" in res.output
    items = pd.read_csv(run / "audit" / "audit_items.csv")
    assert all(sum(f in str(t) for f in FILLER) == 2 for t in items["response_after"])
    assert not any(w in " ".join(FILLER).lower() for w in ("computer", "program", "code"))  # no subject's words
    assert "generic filler" in " ".join(json.loads((run / "audit" / "audit.json").read_text())["notes"])
    (tmp_path / "filler.txt").write_text("The sample was taken on a Tuesday.\nWe used a ruler for it.\n")
    res = runner.invoke(app, ["audit", "--run", str(run), "--transform", "append_filler", "--filler",
                              str(tmp_path / "filler.txt")])
    assert res.exit_code == 0 and "generic filler" not in res.output
    items = pd.read_csv(run / "audit" / "audit_items.csv")
    assert items["response_after"].str.contains("Tuesday").all()


def test_train_notes_the_points_route_only_when_it_is_ahead_by_the_margin() -> None:
    from rubrictool.cli.train import points_note

    vs = {"diff": 0.10, "lo": 0.02, "hi": 0.18, "p_not_better": 0.01}
    pts = {"gold_levels": {"t_acc": 0.7, "t_f1": 0.4, "qwk": 0.78, "vs_model": vs}}
    note = points_note({"summary": {"qwk": {"mean": 0.68, "std": 0.0}}, "points": pts})
    assert note is not None and "(QWK 0.780 against 0.680;" in note and "rubric fit-points" in note
    spans = {"gold_levels": pts["gold_levels"] | {"vs_model": vs | {"lo": -0.01}}}  # the interval reaches 0: no note
    assert points_note({"summary": {"qwk": {"mean": 0.68, "std": 0.0}}, "points": spans}) is None
    assert points_note({"summary": {"qwk": {"mean": 0.76, "std": 0.0}}, "points": pts}) is None
    assert points_note({"summary": {"qwk": {"mean": 0.5, "std": 0.0}}}) is None  # a PLM run: no points grader
