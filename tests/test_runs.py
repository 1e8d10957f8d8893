"""Run directories: built aside and renamed into place, a completion record every reader checks, the rubric and the
training table kept in the run, the label source recorded, and a rerun or a kill that never leaves a mix."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

import reccbm
from rubrictool.cli import app
from rubrictool.errors import TrainError
from rubrictool.train.runs import FORMAT_VERSION, RECORD, building, migrate, open_run, run_is_complete
from tests.support.tiny_models import mohler_like_table, train_with_cli

pytestmark = pytest.mark.usefixtures("one_thread")
runner = CliRunner()

COURSE_RUBRIC = """\
name: stats101
title: Statistics 101 quiz
version: "2026.1"
description: A first-draft rubric for a statistics quiz (a course that is not Mohler).
fields:
  question: the quiz question
  response: the student's answer
  reference: the instructor's model answer
scale: {min: 0, max: 2}
grade: {min: 0, max: 2}
concepts:
  - key: MEAN
    name: Mean
    definition: The answer computes or explains the mean correctly.
    levels:
      - {value: 0, anchor: "No mean."}
      - {value: 1, anchor: "A mean with an error."}
      - {value: 2, anchor: "A correct mean."}
  - key: SPREAD
    name: Spread
    definition: The answer describes the spread of the data.
    levels:
      - {value: 0, anchor: "No spread."}
      - {value: 1, anchor: "Spread named, not measured."}
      - {value: 2, anchor: "Spread measured."}
  - key: UNITS
    name: Units
    definition: The answer keeps the units of the data.
    levels:
      - {value: 0, anchor: "No units."}
      - {value: 1, anchor: "Units sometimes."}
      - {value: 2, anchor: "Units throughout."}
"""


def _course(tmp: Path, n: int = 40) -> tuple[Path, Path]:
    """A stats course (3 concepts 0..2, grade 0..2) as a user folder rubric and an adjudicated CSV."""
    folder = tmp / "my-rubrics"
    folder.mkdir()
    (folder / "stats101.yaml").write_text(COURSE_RUBRIC)
    df = mohler_like_table(n)
    c = df[["FC", "CC", "TU"]].to_numpy() - 1  # 0..2
    table = df[["id", "question", "response", "reference"]].assign(MEAN=c[:, 0], SPREAD=c[:, 1], UNITS=c[:, 2],
                                                                      grade=(c.sum(1) + 1) // 3,
                                                                      label_source="llm")
    data = tmp / "stats101.csv"
    table.to_csv(data, index=False)
    return folder, data


def _train(tmp: Path, backbone: str, data: Path, out: Path, *extra: str) -> tuple[int, str]:
    args = ["train", "--table", str(data), "--rubric", "stats101", "--backbone", backbone, "--epochs", "1",
            "--max-len", "32", "--out", str(out), "--device", "cpu", "--lr", "3e-3", "--cfg", "joint.epochs=1", *extra]
    res = runner.invoke(app, args)
    return res.exit_code, res.output


def test_a_course_run_keeps_its_rubric_table_and_label_source(tmp_path: Path, backbone: str,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    folder, data = _course(tmp_path)
    monkeypatch.setenv("RUBRICTOOL_RUBRICS", str(folder))
    res = runner.invoke(app, ["rubric", "show", "--rubric", "stats101"])  # found by name in the user rubric folder
    assert res.exit_code == 0 and "Statistics 101" in res.output, res.output
    code, output = _train(tmp_path, backbone, data, tmp_path / "run")
    assert code == 0, output
    run = open_run(tmp_path / "run")
    assert json.loads((tmp_path / "run" / RECORD).read_text())["format_version"] == FORMAT_VERSION
    assert run.record["rubric"] == {**run.record["rubric"], "name": "stats101", "version": "2026.1"}
    assert (tmp_path / "run" / "rubric.yaml").read_text() == COURSE_RUBRIC  # the file as written
    assert run.labels["source"] == "llm" and run.labels["expert_validated"] is False
    assert run.metrics["labels"] == run.labels  # in the metrics too
    assert run.record["table"]["rows"] == 40 and run.record["table"]["copy"] == "table.csv"
    monkeypatch.delenv("RUBRICTOOL_RUBRICS")  # the run no longer needs the folder, nor the table's file
    data.unlink()
    assert run.rubric.keys == ["MEAN", "SPREAD", "UNITS"] and run.rubric_version() == "2026.1"
    table = run.load_table()
    assert len(table) == 40 and "copy" in run.source
    res = runner.invoke(app, ["intervene", "--run", str(tmp_path / "run"), "--out", str(tmp_path / "iv")])
    assert res.exit_code == 0, res.output
    res = runner.invoke(app, ["report", "--run", str(tmp_path / "run"), "--out", str(tmp_path / "rep")])
    assert res.exit_code == 0, res.output
    md = (tmp_path / "rep" / "report.md").read_text()
    assert "an LLM panel" in md and "not expert-validated" in md and "2026.1" in md  # label source, rubric version
    assert "cannot be loaded" not in md  # the rubric diagnostics found the run's own rubric
    # rubric diagnose, too, needs only the run: its rubric copy, its table copy, α from its reliability table
    res = runner.invoke(app, ["rubric", "diagnose", "--run", str(tmp_path / "run"), "--out", str(tmp_path / "diag")])
    assert res.exit_code == 0, res.output
    diag = pd.read_csv(tmp_path / "diag" / "rubric_diagnosis.csv").set_index("concept")
    assert list(diag.index) == ["MEAN", "SPREAD", "UNITS"] and diag["drop_one_loss"].notna().all()
    rel = pd.read_csv(tmp_path / "run" / "reliability.csv").set_index("concept")
    pd.testing.assert_series_equal(diag["alpha"], rel["alpha"], check_names=False, check_dtype=False)
    assert "level confusions are left out" in " ".join(res.output.split())
    assert (tmp_path / "diag" / "grade_boundaries.csv").is_file()  # the ceiling, from the run's graded table
    res = runner.invoke(app, ["rubric", "diagnose"])
    assert res.exit_code == 2 and "--adjudicated DIR" in res.output and "--run RUN" in res.output


def test_a_changed_table_is_used_with_a_warning(tmp_path: Path, backbone: str, monkeypatch: pytest.MonkeyPatch) -> None:
    folder, data = _course(tmp_path)
    monkeypatch.setenv("RUBRICTOOL_RUBRICS", str(folder))
    code, output = _train(tmp_path, backbone, data, tmp_path / "run")
    assert code == 0, output
    df = pd.read_csv(data)
    df.loc[0, "response"] = "an answer edited after training"
    df.to_csv(data, index=False)
    run = open_run(tmp_path / "run")
    run.load_table()
    assert any("changed since this run was trained" in w for w in run.warnings)
    # every reader of the run says so, in the terminal and in what it writes
    monkeypatch.delenv("RUBRICTOOL_RUBRICS")
    first = str(df.loc[0, "id"])
    for argv in (["explain", first], ["intervene"], ["report"], ["audit", "--transform", "append_question"]):
        res = runner.invoke(app, [*argv[:1], "--run", str(tmp_path / "run"), *argv[1:]])
        assert res.exit_code == 0, res.output
        assert f"warning: {data} changed since this run was trained" in " ".join(res.output.split()), argv
    assert "changed since this run was trained" in (tmp_path / "run" / "report" / "report.md").read_text()
    audit = json.loads((tmp_path / "run" / "audit" / "audit.json").read_text())
    assert any("changed since this run was trained" in w for w in audit["warnings"])
    assert "**Warning:**" in (tmp_path / "run" / "audit" / "audit.md").read_text()
    res = runner.invoke(app, ["explain", "--run", str(tmp_path / "run"), first, "--items", str(data)])
    assert "is not the table this run was trained on" in " ".join(res.output.split())


def test_a_half_written_or_mixed_run_is_refused_in_one_line(tmp_path: Path, backbone: str) -> None:
    code, output, run = train_with_cli(tmp_path, backbone, mohler_like_table(40))
    assert code == 0, output
    assert run_is_complete(run)
    cfg = run / "config.yaml"
    original = cfg.read_text()
    cfg.write_text(original.replace("variant: reccbm", "variant: vanilla"))  # a file from another training
    assert not run_is_complete(run)
    with pytest.raises(TrainError, match="incomplete or was changed after training: config.yaml"):
        open_run(run)
    data = tmp_path / "adjudicated.csv"
    res = runner.invoke(app, ["grade", "--run", str(run), "--items", str(data), "--out", str(tmp_path / "g.csv")])
    assert res.exit_code == 1 and "config.yaml" in res.output and "train it again" in res.output
    assert "Traceback" not in res.output
    cfg.write_text(original)
    assert run_is_complete(run)
    (run / "model.safetensors").unlink()
    with pytest.raises(TrainError, match="model.safetensors is missing"):
        open_run(run)


def test_a_retrain_that_dies_leaves_the_old_run_whole(tmp_path: Path, backbone: str,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    code, output, run = train_with_cli(tmp_path, backbone, mohler_like_table(40))
    assert code == 0, output
    before = {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()}
    real_save = reccbm.save_checkpoint

    def dies(*a, **kw):  # type: ignore[no-untyped-def]
        real_save(*a, **kw)
        raise KeyboardInterrupt  # killed after the checkpoint, before the profile and the record

    monkeypatch.setattr("reccbm.estimator.save_checkpoint", dies)  # where the Grader saves a run
    code, output, _ = train_with_cli(tmp_path, backbone, mohler_like_table(40), "--variant", "vanilla")
    assert code != 0 and "Traceback" not in output  # Ctrl-C: the CLI exits 130
    after = {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()}
    assert after == before and run_is_complete(run)  # the old run, byte for byte
    assert not [p for p in tmp_path.iterdir() if ".building-" in p.name]  # no staging folder left
    assert json.loads((run / "model.json").read_text())["variant"] == "reccbm"


def test_building_replaces_a_directory_whole_or_not_at_all(tmp_path: Path) -> None:
    target = tmp_path / "run"
    with building(target) as stage:
        (stage / "a.txt").write_text("1")
    assert (target / "a.txt").read_text() == "1"
    with pytest.raises(RuntimeError), building(target) as stage:
        (stage / "b.txt").write_text("2")
        raise RuntimeError("killed")
    assert sorted(p.name for p in target.iterdir()) == ["a.txt"]
    with building(target) as stage:
        (stage / "c.txt").write_text("3")
    assert sorted(p.name for p in target.iterdir()) == ["c.txt"]
    mask = os.umask(0o022)
    os.umask(mask)
    assert oct(target.stat().st_mode & 0o777) == oct(0o777 & ~mask)
    assert RECORD == "run.json"


def test_train_folds_by_question_never_tests_a_question_it_trained_on(tmp_path: Path, backbone: str) -> None:
    df = mohler_like_table(48)
    df["question"] = [f"question {i % 6}" for i in range(len(df))]
    code, output, run = train_with_cli(tmp_path, backbone, df, "--folds", "2", "--by", "question", "--cfg",
                                       "joint.epochs=0")
    assert code == 0, output
    q = df.set_index("id")["question"]
    for i in range(2):
        split = json.loads((run / f"fold-{i}.split.json").read_text())
        seen = set(q[split["train"]]) | set(q[split["dev"]])
        assert seen.isdisjoint(set(q[split["test"]])), f"fold {i} tests a question it trained on"
    assert json.loads((run / "folds.json").read_text())["by"] == "question"
    assert run_is_complete(run / "fold-0") and run_is_complete(run / "fold-1")


def test_every_run_reports_the_points_grader_beside_the_majority_class(tmp_path: Path, backbone: str,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    folder, data = _course(tmp_path)
    monkeypatch.setenv("RUBRICTOOL_RUBRICS", str(folder))
    code, output = _train(tmp_path, backbone, data, tmp_path / "run")
    assert code == 0, output
    m = json.loads((tmp_path / "run" / "metrics.json").read_text())
    pts = m["points"]
    assert "fitted" in pts["source"] and set(pts) >= {"gold_levels", "predicted_levels"}
    # recompute the gold-level points grade: the same table fitted on the training split, applied to the test split
    from rubrictool.points import fit_points, points_baseline
    from rubrictool.rubric import load_rubric

    rb = load_rubric("stats101")
    df = pd.read_csv(data).set_index("id")
    split = json.loads((tmp_path / "run" / "split.json").read_text())
    lv = {s: df.loc[split[s], ["MEAN", "SPREAD", "UNITS"]].to_numpy() for s in ("train", "test")}
    fp = fit_points(rb, lv["train"], df.loc[split["train"], "grade"].to_numpy())
    pred = points_baseline(rb, lv["test"], grade_min=0, points=fp.points, grading=fp.grading)
    want = float((pred == df.loc[split["test"], "grade"].to_numpy()).mean())
    assert pts["gold_levels"]["t_acc"] == pytest.approx(want)
    assert "points grader" in " ".join(output.split())


def test_describe_labels_says_who_made_them() -> None:
    from rubrictool.train.labels import describe_labels

    panel = {"source": "llm", "expert_validated": False, "counts": {"llm": 72},
             "reviewers": ["openai/gpt-4o", "gemini/gemini-2.5-pro"], "method": "majority"}
    assert describe_labels(panel) == ("an LLM panel (openai/gpt-4o, gemini/gemini-2.5-pro; majority vote): "
                                      "not expert-validated")
    mixed = describe_labels({"source": "mixed", "counts": {"human": 50, "llm": 22}, "n_reviewers": 3})
    assert mixed == "a mix of sources (3 reviewers; human 50 answers, llm 22 answers)"
    assert describe_labels({"source": "unknown"}) is None


def test_set_can_be_repeated_in_grade_and_explain(tmp_path: Path, backbone: str,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    folder, data = _course(tmp_path)
    monkeypatch.setenv("RUBRICTOOL_RUBRICS", str(folder))
    code, output = _train(tmp_path, backbone, data, tmp_path / "run")
    assert code == 0, output
    one, two = tmp_path / "one.csv", tmp_path / "two.csv"
    for out, sets in ((one, ["--set", "MEAN=2,UNITS=0"]), (two, ["--set", "MEAN=2", "--set", "UNITS=0"])):
        res = runner.invoke(app, ["grade", "--run", str(tmp_path / "run"), "--items", str(data), "--out", str(out),
                                  *sets])
        assert res.exit_code == 0, res.output
    a, b = pd.read_csv(one), pd.read_csv(two)
    assert (b["MEAN_level"] == 2).all() and (b["UNITS_level"] == 0).all()  # both, not only the last --set
    pd.testing.assert_frame_equal(a, b)
    first = str(pd.read_csv(data)["id"].iloc[0])
    res = runner.invoke(app, ["explain", "--run", str(tmp_path / "run"), first, "--set", "MEAN=2", "--set", "UNITS=0"])
    assert res.exit_code == 0, res.output
    assert "with MEAN=2, UNITS=0:" in " ".join(res.output.split())
    res = runner.invoke(app, ["explain", "--run", str(tmp_path / "run"), first, "--set", "MEAN=2", "--set", "MEAN=1"])
    assert res.exit_code == 1 and "set twice, to 2 and 1" in " ".join(res.output.split())


def test_migrate_brings_every_known_run_format_to_the_current_one(tmp_path: Path) -> None:
    """One function knows older run formats: version 1 named its version "format"; a directory without run.json
    (written before completion records) and a newer or unknown version are refused in one line."""
    v1 = {"format": 1, "run_id": "r", "labels": {"source": "llm"}, "files": {}}
    now = migrate(v1)
    assert now["format_version"] == FORMAT_VERSION == 2 and "format" not in now
    assert {k: v for k, v in now.items() if k != "format_version"} == {k: v for k, v in v1.items() if k != "format"}
    assert "format" in v1  # the record read from disk is not changed in place
    assert migrate(now) == now  # the current format passes unchanged
    where = tmp_path / "old-run" / RECORD
    for record, message in (({}, "written before runs had a completion record (run.json)"),
                            ({"format_version": FORMAT_VERSION + 1}, "newer than this rubrictool reads"),
                            ({"format": "one"}, "unknown run format 'one'"),
                            ({"format_version": 0}, "unknown run format 0")):
        with pytest.raises(TrainError, match=message.replace("(", r"\(").replace(")", r"\)")) as exc:
            migrate(record, where)
        assert "\n" not in str(exc.value) and str(tmp_path / "old-run") in str(exc.value)
