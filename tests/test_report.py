"""`rubrictool report | intervene | rubric diagnose | ablate` on tiny runs, checked through what they write."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from rubrictool.cli import app
from rubrictool.report.scores import pair_agreement, smd
from tests.support.inspect_runs import graded_table, inspect_run, png_ok
from tests.support.tiny_models import KEYS, build_backbone

runner = CliRunner()
pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return inspect_run(tmp_path_factory.mktemp("report"), n=80)


def _selected_test(run: Path) -> dict[str, float]:
    m = json.loads((run / "metrics.json").read_text())
    return next(s["test"] for s in m["seeds"] if s["seed"] == m["selected_seed"])


# ------------------------------------------------------------------ agreement figures
def test_qwk_pearson_smd_match_scikit_learn_and_scipy() -> None:
    from scipy.stats import pearsonr
    from sklearn.metrics import cohen_kappa_score

    rng = np.random.default_rng(3)
    human = rng.integers(0, 6, 300)
    machine = np.clip(human + rng.integers(-2, 3, 300), 0, 5)
    a = pair_agreement(human, machine)
    assert a["qwk"] == pytest.approx(cohen_kappa_score(human, machine, weights="quadratic"))
    assert a["pearson"] == pytest.approx(pearsonr(human, machine).statistic)
    pooled = np.sqrt((np.var(human) + np.var(machine)) / 2)
    assert a["smd"] == pytest.approx((machine.mean() - human.mean()) / pooled)
    assert smd([1, 2, 3], [2, 3, 4]) == pytest.approx(1 / np.sqrt(2 / 3))  # one pooled sd up
    assert a["exact"] == pytest.approx(np.mean(human == machine))
    assert a["adjacent"] == pytest.approx(np.mean(np.abs(human - machine) <= 1)) and a["n"] == 300
    # half points (Mohler's graders) are rounded half up for exact agreement and QWK, not for r and SMD
    b = pair_agreement([0.5, 1.5, 2.0, 3.5], [1, 2, 2, 3])
    assert b["exact"] == pytest.approx(0.75) and b["pearson"] == pytest.approx(pearsonr([0.5, 1.5, 2, 3.5],
                                                                                          [1, 2, 2, 3]).statistic)


# ------------------------------------------------------------------ report
def test_report_writes_the_page_its_pngs_and_csvs(tiny: tuple[Path, Path], tmp_path: Path) -> None:
    run, table = tiny
    out = tmp_path / "rep"
    res = runner.invoke(app, ["report", "--run", str(run), "--table", str(table), "--out", str(out),
                              "--repeats", "2"])
    assert res.exit_code == 0, res.output
    for name in ("report.html", "report.md", "report.json", "agreement.csv", "concepts.csv", "intervention.csv",
                 "label_correlations.csv", "partial_correlations.csv", "rubric_diagnosis.csv"):
        assert (out / name).is_file(), name
    pngs = sorted(out.glob("*.png"))
    assert {p.name for p in pngs} >= {"confusion.png", "lcec_heatmaps.png", "intervention.png"}
    assert len([p for p in pngs if p.name.startswith("trace-")]) == 2
    for p in pngs:
        w, h = png_ok(p)
        assert w > 100 and h > 100, p
    page = (out / "report.html").read_text()
    saved = _selected_test(run)
    for key in ("t_acc", "t_f1", "qwk", "rmse", "adjacent", "c_acc", "c_f1"):
        m = re.search(rf'id="metric-{key}" data-value="([^"]*)">([^<]*)<', page)
        assert m, key
        assert float(m.group(1)) == pytest.approx(saved[key], abs=1e-12) and m.group(2) == f"{saved[key]:.3f}"
    assert page.count('src="data:image/png;base64,') == len(pngs)
    rel = pd.read_csv(run / "reliability.csv").set_index("concept")  # the run's test reliability, shown per concept
    for key, value in rel["test_reliability"].items():
        m = re.search(rf'id="test-rel-{key}" data-value="([^"]*)">', page)
        assert m and float(m.group(1)) == pytest.approx(value, abs=1e-12), key
    share = json.loads((run / "metrics.json").read_text()).get("spearman_noise_share")
    assert ('id="noise-share"' in page) == bool(share)
    assert "<script" not in page and "http://" not in page and "https://" not in page
    # machine–human beside human–human
    agr = pd.read_csv(out / "agreement.csv")
    assert list(agr["pair"]) == ["model vs gold grade", "model vs grade_me", "model vs grade_other",
                                 "grade_me vs grade_other (human–human)"]
    split = json.loads((run / "split.json").read_text())
    df = graded_table(80).set_index("id").loc[split["test"]]
    hh = pair_agreement(df["grade_me"], df["grade_other"])
    assert agr.iloc[3]["qwk"] == pytest.approx(hh["qwk"]) and agr.iloc[3]["n"] == len(split["test"])
    assert agr.iloc[0]["exact"] == pytest.approx(saved["t_acc"])
    # LCEC: the learned partial correlations are those of the run's Ω
    import reccbm

    model, _, _ = reccbm.load_checkpoint(run)
    pc = pd.read_csv(out / "partial_correlations.csv", index_col=0)
    assert np.allclose(pc.to_numpy(), reccbm.partial_correlations(reccbm.reliability(model)["Omega"]), atol=1e-9)
    md = (out / "report.md").read_text()
    assert "## Machine–human and human–human agreement" in md and "![confusion matrix](confusion.png)" in md


def test_report_shows_what_the_concepts_cannot_separate_and_where_the_run_sits_on_a_curve(
        tiny: tuple[Path, Path], tmp_path: Path) -> None:
    from rubrictool.curve import position_on_curve
    from rubrictool.io import write_table
    from tests.test_curve import CURVE, _cells

    run, table = tiny
    split = json.loads((run / "split.json").read_text())
    n = len(split["train"]) + len(split["dev"])
    # a curve of the run's variant that brackets its size, and one without it
    rows = [("reccbm", "20", 20, 0.20, 0.40), ("reccbm", "120", 120, 0.50, 0.60), *CURVE[4:]]
    assert 20 < n < 120
    curve = write_table(_cells(rows), tmp_path / "curve.csv")
    out = tmp_path / "rep"
    res = runner.invoke(app, ["report", "--run", str(run), "--out", str(out), "--repeats", "1", "--curve", str(curve)])
    assert res.exit_code == 0, res.output
    want = position_on_curve(curve, n, "reccbm")
    got = json.loads((out / "report.json").read_text())["learning_curve"]
    assert got["n_train"] == n and got["qwk"] == pytest.approx(want["qwk"]) and got["within"]
    assert got["run_qwk"] == pytest.approx(_selected_test(run)["qwk"])
    page, md = (out / "report.html").read_text(), (out / "report.md").read_text()
    line = (f"This run trained on {n} labelled answers (train + dev). On the curve (reccbm), that many answers "
            f"give QWK {want['qwk']:.3f}")
    assert line in page and line in md and "interpolated between 20 and 120 answers" in md
    # the points grader beside the majority class, as the run recorded it
    points = json.loads((run / "metrics.json").read_text())["points"]
    for key in ("gold_levels", "predicted_levels"):
        m = re.search(rf'id="points-{key}" data-value="([^"]*)">', page)
        assert m and float(m.group(1)) == pytest.approx(points[key]["qwk"], abs=1e-12), key
        assert f"{points[key]['t_acc']:.3f} / {points[key]['qwk']:.3f} |" in md
    # a run bigger than every size of the curve: the nearest size is given as that, not as the run's position
    small = write_table(_cells([("reccbm", "10", 10, 0.10, 0.30), ("reccbm", "20", 20, 0.20, 0.40)]),
                        tmp_path / "small.csv")
    res = runner.invoke(app, ["report", "--run", str(run), "--out", str(tmp_path / "rep3"), "--repeats", "1",
                              "--curve", str(small)])
    assert res.exit_code == 0, res.output
    md3 = (tmp_path / "rep3" / "report.md").read_text()
    assert (f"This run trained on {n} labelled answers (train + dev), outside the curve's sizes: "
            "its largest size, 20") in md3
    # the rubric's own ceiling: every boundary of adjacent grades in the table, the same rows as the CSV
    bounds = pd.read_csv(out / "grade_boundaries.csv")
    grades = sorted(set(pd.read_csv(table)["grade"]))
    assert len(bounds) == len(grades) - 1 and (out / "grade_ceiling.csv").is_file()
    block = page.split('id="grade-boundaries"')[1].split("</table>")[0]
    assert block.count("<tr") == len(bounds) + 1
    assert block.count("cannot separate") == int(bounds["named"].sum())
    assert "\n## What the concept levels can tell apart" not in md
    assert "\n### What the concept levels can tell apart" in md
    has_rows = (out / "contrast_pairs.csv").read_text(encoding="utf-8-sig").strip()  # a CSV for people: BOM-marked
    pairs = pd.read_csv(out / "contrast_pairs.csv", encoding="utf-8-sig") if has_rows else pd.DataFrame()
    assert page.count('class="contrast-pair"') == len(pairs)
    # a curve file that is not there: one line before any work
    res = runner.invoke(app, ["report", "--run", str(run), "--curve", str(tmp_path / "no-such.csv")])
    assert res.exit_code == 2 and "does not exist" in " ".join(res.output.split())
    # a curve without the run's variant: the section is not shown, and the page says why
    other = write_table(_cells(CURVE[4:]), tmp_path / "plm-only.csv")
    res = runner.invoke(app, ["report", "--run", str(run), "--out", str(tmp_path / "rep2"), "--repeats", "1",
                              "--curve", str(other)])
    assert res.exit_code == 0, res.output
    assert "position on the learning curve" in res.output and "no cells of variant 'reccbm'" in res.output
    assert json.loads((tmp_path / "rep2" / "report.json").read_text())["learning_curve"] is None


def test_report_says_what_a_run_without_lcec_cannot_show(tmp_path: Path) -> None:
    run, table = inspect_run(tmp_path, "--no-lcec", n=40)
    out = tmp_path / "rep"
    res = runner.invoke(app, ["report", "--run", str(run), "--table", str(table), "--out", str(out), "--repeats", "1"])
    assert res.exit_code == 0, res.output
    assert "not shown: no LCEC layer in this run" in " ".join(res.output.split())
    assert (out / "intervention.png").is_file() and not (out / "partial_correlations.csv").exists()
    assert "no LCEC layer in this run" in (out / "report.html").read_text()


def test_report_of_a_plm_run_shows_grades_and_says_why_nothing_else(tmp_path: Path) -> None:
    run, table = inspect_run(tmp_path, "--variant", "plm", n=40)
    out = tmp_path / "rep"
    res = runner.invoke(app, ["report", "--run", str(run), "--table", str(table), "--out", str(out)])
    assert res.exit_code == 0, res.output
    text = " ".join(res.output.split())
    assert "not shown: PLM run: it grades without concepts" in text
    # grade_prob exists without concepts
    assert {p.name for p in out.glob("*.png")} == {"confusion.png", "calibration.png"}
    page = (out / "report.html").read_text()
    saved = _selected_test(run)
    assert f'id="metric-t_acc" data-value="{saved["t_acc"]!r}"' in page and 'id="metric-c_acc"' not in page


def test_report_needs_only_the_run_and_says_when_its_table_is_gone(tiny: tuple[Path, Path], tmp_path: Path) -> None:
    res = runner.invoke(app, ["report", "--run", str(tiny[0]), "--out", str(tmp_path / "rep")])
    assert res.exit_code == 0, res.output  # the run's copy of its training table
    from rubrictool.errors import DataError
    from rubrictool.train.runs import open_run as open_record

    run = open_record(tiny[0])
    run.record["table"] = {"path": str(tmp_path / "moved.csv"), "copy": None}  # a table too large to copy, then moved
    with pytest.raises(DataError, match="is not available .*moved.csv.*pass --table FILE"):
        run.load_table()


# ------------------------------------------------------------------ intervene
def test_intervene_writes_curves_for_every_k_and_strategy(tiny: tuple[Path, Path], tmp_path: Path) -> None:
    run, table = tiny
    res = runner.invoke(app, ["intervene", "--run", str(run), "--table", str(table), "--out", str(tmp_path),
                              "--repeats", "2"])
    assert res.exit_code == 0, res.output
    c = pd.read_csv(tmp_path / "intervention.csv")
    assert len(c) == 2 * 3 * (len(KEYS) + 1) and set(c["order"]) == {"uncertain", "confident"}
    k0 = c[c["k"] == 0]
    assert np.allclose(k0["t_acc"], _selected_test(run)["t_acc"])
    for name in ("intervention.png", "intervention_qwk.png"):
        assert png_ok(tmp_path / name)[0] > 300


# ------------------------------------------------------------------ rubric diagnose
def _reviews(tmp: Path) -> tuple[Path, list[str]]:
    """Three reviewers' wide files: FC and CP always at the same level; reviewer C reads FR's 2 as 3."""
    df = graded_table(60)
    rng = np.random.default_rng(5)
    specs = []
    for name in ("A", "B", "C"):
        lab = df[["id", *KEYS]].copy()
        noisy = rng.random(len(lab)) < 0.15
        lab.loc[noisy, "R"] = np.clip(lab.loc[noisy, "R"] + 1, 1, 3)
        if name == "C":
            lab.loc[lab["FR"] == 2, "FR"] = 3
        lab.to_csv(tmp / f"{name}.csv", index=False)
        specs += ["--reviews", str(tmp / f"{name}.csv")]
    df.drop(columns=KEYS).to_csv(tmp / "items.csv", index=False)
    return tmp / "items.csv", specs


def test_rubric_diagnose_from_adjudicated_labels_alone(tmp_path: Path) -> None:
    items, specs = _reviews(tmp_path)
    adj = tmp_path / "adjudicated"
    res = runner.invoke(app, ["adjudicate", "--rubric", "mohler", *specs, "--items", str(items), "--out", str(adj),
                              "--bootstrap", "50"])
    assert res.exit_code == 0, res.output
    out = tmp_path / "diag"
    res = runner.invoke(app, ["rubric", "diagnose", "--adjudicated", str(adj), "--out", str(out)])
    assert res.exit_code == 0, res.output
    text = " ".join(res.output.split())
    assert "FC and CP agree on 100 % of answers" in text
    assert re.search(r"FR levels 2 and 3 are confused in 100 % of its \d+ reviewer disagreements", text)
    d = pd.read_csv(out / "rubric_diagnosis.csv")
    assert list(d["concept"]) == KEYS
    fr = d.set_index("concept").loc["FR"]
    assert fr["confused_levels"] == "2–3" and fr["n_disagreements"] > 0
    assert d.set_index("concept").loc["R", "alpha"] < d.set_index("concept").loc["FC", "alpha"]
    assert d["drop_one_loss"].notna().all() and d["partial_corr"].isna().all()
    assert "merge them or sharpen their anchors" in (out / "rubric_diagnosis.md").read_text()
    conf = pd.read_csv(out / "level_confusions.csv")
    fr = conf[conf["concept"] == "FR"]  # only reviewer C reads FR's 2 as 3: A and B never disagree on FR
    assert set(zip(fr["reviewer_a"], fr["reviewer_b"])) == {("A", "C"), ("B", "C")}
    assert set(zip(fr["level_a"], fr["level_b"])) == {(2, 3)}
    assert "reviewer-by-reviewer disagreements" in text


def test_rubric_diagnose_needs_an_adjudicated_folder(tmp_path: Path) -> None:
    res = runner.invoke(app, ["rubric", "diagnose", "--adjudicated", str(tmp_path)])
    assert res.exit_code == 1 and "has no adjudicated.csv" in " ".join(res.output.split())


# ------------------------------------------------------------------ ablate
def test_ablate_trains_each_combination_once_and_draws_the_chart(tmp_path: Path) -> None:
    data = tmp_path / "table.csv"
    graded_table(40).to_csv(data, index=False)
    args = ["ablate", "--table", str(data), "--rubric", "mohler", "--variants", "vanilla,race+lcec,plm", "--backbone",
            build_backbone(tmp_path, "bert"), "--epochs", "1", "--max-len", "32", "--device", "cpu", "--preset",
            "plain",
            "--out", str(tmp_path / "abl")]  # plain: the encoder fine-tuned, whose budget the PLM matches
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    t = pd.read_csv(tmp_path / "abl" / "ablation.csv")
    assert list(t["variant"]) == ["vanilla", "race+lcec", "plm"]
    assert t.loc[t["variant"] == "plm", "c_acc_mean"].isna().all() and t["t_acc_mean"].between(0, 1).all()
    assert png_ok(tmp_path / "abl" / "ablation.png")[0] > 300
    assert "| race+lcec | ✓ |  | ✓ |" in (tmp_path / "abl" / "ablation.md").read_text()
    # a fair baseline: the PLM's encoder trains as many epochs as the concept models' Stage I + joint stage
    import yaml

    cfg = {v: yaml.safe_load((tmp_path / "abl" / v / "config.yaml").read_text()) for v in ("vanilla", "plm")}
    budget = cfg["vanilla"]["stage1"]["epochs"] + cfg["vanilla"]["joint"]["epochs"]
    assert cfg["vanilla"]["stage1"]["epochs"] == 1 and cfg["vanilla"]["joint"]["epochs"] > 0
    assert cfg["plm"]["stage1"]["epochs"] == budget and not cfg["plm"]["joint"]["epochs"]
    rows = t.set_index("variant")["trained_with"]
    assert rows["plm"] == f"plain preset, encoder {budget} epochs"
    assert rows["vanilla"] == f"plain preset, encoder 1 + {budget - 1} epochs (Stage I + joint)"
    assert f"| plain preset, encoder {budget} epochs |" in (tmp_path / "abl" / "ablation.md").read_text()
    mtime = (tmp_path / "abl" / "vanilla" / "metrics.json").stat().st_mtime
    res = runner.invoke(app, args)  # resumable: nothing is retrained
    assert res.exit_code == 0 and res.output.count("finished earlier, read back") == 3
    assert (tmp_path / "abl" / "vanilla" / "metrics.json").stat().st_mtime == mtime
    res = runner.invoke(app, [*args[:6], "vanila", *args[7:]])
    assert res.exit_code == 1 and "unknown variant(s) ['vanila']" in res.output


def test_ablate_with_folds_pools_each_combination(tmp_path: Path) -> None:
    data = tmp_path / "table.csv"
    graded_table(40).to_csv(data, index=False)
    args = ["ablate", "--table", str(data), "--rubric", "mohler", "--variants", "race+opcc", "--folds", "2",
            "--backbone", build_backbone(tmp_path, "bert"), "--epochs", "1", "--max-len", "32", "--device", "cpu",
            "--out", str(tmp_path / "abl")]
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    folds = json.loads((tmp_path / "abl" / "race+opcc" / "folds.json").read_text())
    t = pd.read_csv(tmp_path / "abl" / "ablation.csv")
    assert t["t_acc_mean"].iloc[0] == pytest.approx(folds["pooled"]["t_acc"])
    assert t["t_acc_std"].iloc[0] == pytest.approx(np.std([f["t_acc"] for f in folds["per_fold"]], ddof=1))
    res = runner.invoke(app, args)
    assert res.exit_code == 0 and "finished earlier, read back" in res.output
    res = runner.invoke(app, ["report", "--run", str(tmp_path / "abl" / "race+opcc"), "--table", str(data)])
    assert res.exit_code == 0 and "2 folds, 40 answers pooled" in " ".join(res.output.split())  # the pooled page
    res = runner.invoke(app, ["explain", "--run", str(tmp_path / "abl" / "race+opcc"), "--items", str(data), "q.1"])
    assert res.exit_code == 1 and "is a k-fold run: pass one of its folds, e.g. --run" in " ".join(res.output.split())


def test_a_folder_that_cannot_be_written_is_one_clear_line(tiny: tuple[Path, Path], tmp_path: Path) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("not a folder")
    run, table = tiny
    res = runner.invoke(app, ["intervene", "--run", str(run), "--table", str(table), "--out", str(blocked / "x"),
                              "--repeats", "1"])
    said = " ".join(res.output.split())
    assert res.exit_code == 1 and "cannot write into" in said and "pass --out a path in a folder you can write" in said
