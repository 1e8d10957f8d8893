"""`rubrictool learning-curve` on a course that is not Mohler (0..2 levels, grades 1..4) with a tiny BERT: the cells
it writes, resuming after a kill, a rerun that trains nothing, and one-line errors for bad sizes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from rubrictool.cli import app
from rubrictool.curve import CURVE_COLUMNS, CURVE_FAILING, position_on_curve
from rubrictool.io import read_table
from tests.support.toy_course import ecology_rubric, ecology_table

pytestmark = pytest.mark.usefixtures("one_thread")

runner = CliRunner()


def _args(tmp_path: Path, backbone: str, *extra: str) -> list[str]:
    data = tmp_path / "ecology.csv"
    if not data.exists():
        ecology_table(90).to_csv(data, index=False)
    return ["learning-curve", "--table", str(data), "--rubric", str(ecology_rubric(tmp_path)), "--out",
            str(tmp_path / "curve"), "--folds", "3", "--fold", "0", "--variants", "reccbm,plm",
            "--backbone", backbone, "--epochs", "1", "--joint-epochs", "1", "--stage2-epochs", "3", "--max-len", "32",
            # plain: the encoder fine-tuned at every size
            "--lr", "3e-3", "--device", "cpu", "--preset", "plain", *extra]


def _counting(monkeypatch: pytest.MonkeyPatch, fail_at: int | None = None) -> list[str]:
    """Count train_model calls (by run dir name); raise KeyboardInterrupt at call number ``fail_at`` (a kill)."""
    calls: list[str] = []
    from rubrictool.train import train_model as real


    def train(*args: Any, **kw: Any) -> Any:
        calls.append(Path(args[3]).name)
        if fail_at is not None and len(calls) == fail_at:
            raise KeyboardInterrupt
        return real(*args, **kw)

    monkeypatch.setattr("rubrictool.curve.measure.train_model", train)
    return calls


def test_the_curve_is_written_resumed_after_a_kill_and_read_back(tmp_path: Path, backbone: str,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    args = _args(tmp_path, backbone, "--sizes", "12,all", "--repeats", "2")
    out = tmp_path / "curve"
    killed = _counting(monkeypatch, fail_at=3)
    res = runner.invoke(app, args)
    assert res.exit_code == 130 and "a re-run resumes from them" in res.output and len(killed) == 3
    done = sorted(p.name for p in (out / "cells").iterdir())
    assert done == ["fold0-n12-r0-plm.json", "fold0-n12-r0-reccbm.json"]  # the killed cell left no cell file
    assert all(json.loads((out / "cells" / n).read_text())["variant"] in n for n in done)
    assert not (out / "curve.csv").exists()

    calls = _counting(monkeypatch)
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    assert len(calls) == 6 and "6 cell(s) trained, 2 read back" in res.output
    assert "fold0-n12-r0-reccbm" not in calls and "fold0-nall-r0-reccbm" in calls
    cells = read_table(out / "curve.csv")
    assert list(cells.columns) == CURVE_COLUMNS + CURVE_FAILING and len(cells) == 8
    assert {(str(s), r, v) for s, r, v in zip(cells["size"], cells["repeat"], cells["variant"])} == {
        (s, r, v) for s in ("12", "all") for r in (0, 1) for v in ("reccbm", "plm")}
    assert set(cells["fold"]) == {0}
    assert set(cells.loc[cells["size"].astype(str) == "12", "n_train"]) == {12}
    # 90 answers, 3 folds: 60 outside the test part
    assert set(cells.loc[cells["size"].astype(str) == "all", "n_train"]) == {60}
    rates = cells[["t_acc", "majority_t_acc", "t_f1"]]
    assert ((rates >= 0) & (rates <= 1)).all().all() and cells["qwk"].between(-1, 1).all()
    docs = [json.loads(p.read_text()) for p in sorted((out / "cells").glob("*.json"))]
    assert len({tuple(d["test_ids"]) for d in docs}) == 1  # the same test part throughout
    test = set(docs[0]["test_ids"])
    assert all(not (set(d["train_ids"]) | set(d["dev_ids"])) & test for d in docs)
    assert all(set(d["test_predicted"]) <= {1, 2, 3, 4} for d in docs)  # on the course's own grade scale
    png = (out / "curve.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    assert not (out / "work").exists() and not list(out.rglob("*.tmp"))
    summary = json.loads((out / "curve.json").read_text())
    assert summary["settings"]["folds"] == 3 and summary["encoder_epochs"] == {"reccbm": 2, "plm": 2}
    pos = position_on_curve(out / "curve.csv", 30, "plm")
    assert pos["lower"]["size"] == "12" and pos["upper"]["size"] == "all" and pos["within"]

    before = (out / "curve.csv").read_text()
    calls = _counting(monkeypatch, fail_at=1)  # any training now would be a failure
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    assert calls == [] and "0 cell(s) trained, 8 read back" in res.output
    assert (out / "curve.csv").read_text() == before
    res = runner.invoke(app, _args(tmp_path, backbone, "--sizes", "12", "--repeats", "1"))  # a smaller plan
    assert res.exit_code == 0 and calls == [] and "0 cell(s) trained, 2 read back" in " ".join(res.output.split())
    assert (out / "curve.csv").read_text() == before  # the curve is still every cell in the directory


@pytest.mark.parametrize(("sizes", "message"), [
    ("0", "--sizes 0: 0 answers is too few (at least 10"),
    ("12,many", "--sizes 12,many: 'many' is not a number of answers"),
    ("12,61",
     "--sizes: 61 answers is more than a fold's training part (60 answers of 90, 3 folds); give sizes up to 60"),
])
def test_bad_sizes_are_one_line_errors(tmp_path: Path, backbone: str, monkeypatch: pytest.MonkeyPatch, sizes: str,
                                       message: str) -> None:
    calls = _counting(monkeypatch, fail_at=1)
    res = runner.invoke(app, _args(tmp_path, backbone, "--sizes", sizes))
    assert res.exit_code == 1 and calls == []
    text = res.output.strip()
    assert text.startswith("error: ") and message in " ".join(text.split()) and "Traceback" not in text
    assert len(text.splitlines()) <= 2  # one message (Rich may wrap it once on a narrow terminal)


def test_other_bad_options_are_one_line_errors(tmp_path: Path, backbone: str, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _counting(monkeypatch, fail_at=1)
    for extra, message in ((["--variants", "reccbm,bert"],
                            "unknown variant 'bert'; use reccbm, plm, vanilla, reccbm-frozen"),
                           (["--variants", "reccbm-fixed"], "unknown variant 'reccbm-fixed'"),
                           (["--fold", "3"], "--fold 3: '3' is not a fold of 0..2"),
                           (["--repeats", "0"], "--repeats 0: give at least 1")):
        res = runner.invoke(app, _args(tmp_path, backbone, "--sizes", "12", *extra))
        assert res.exit_code == 1 and message in " ".join(res.output.split()) and "Traceback" not in res.output
    res = runner.invoke(app, ["learning-curve", "--rubric", "mohler", "--out", str(tmp_path / "x"), "--sizes", "20"])
    assert res.exit_code == 1 and "give either --benchmark NAME or --table FILE" in res.output
    assert calls == []


def test_frozen_variants_join_a_curve_and_train_only_their_own_cells(tmp_path: Path, backbone: str,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "curve"
    calls = _counting(monkeypatch)
    res = runner.invoke(app, _args(tmp_path, backbone, "--sizes", "12", "--repeats", "1"))
    assert res.exit_code == 0, res.output
    assert sorted(calls) == ["fold0-n12-r0-plm", "fold0-n12-r0-reccbm"]
    calls.clear()
    variants = "reccbm,reccbm-frozen,plm,plm-frozen,vanilla"
    res = runner.invoke(app, _args(tmp_path, backbone, "--sizes", "12", "--repeats", "1", "--variants", variants,
                                   "--keep-runs"))
    assert res.exit_code == 0, res.output
    assert sorted(calls) == ["fold0-n12-r0-plm-frozen", "fold0-n12-r0-reccbm-frozen", "fold0-n12-r0-vanilla"]
    assert "3 cell(s) trained, 2 read back" in " ".join(res.output.split())
    cells = read_table(out / "curve.csv")
    assert list(cells.columns) == CURVE_COLUMNS + CURVE_FAILING
    assert sorted(cells["variant"]) == sorted(variants.split(","))
    encoder = dict(zip(cells["variant"], cells["encoder"]))
    assert encoder == {"reccbm": "train", "reccbm-frozen": "frozen", "plm": "train", "plm-frozen": "frozen",
                       "vanilla": "train"}
    epochs = dict(zip(cells["variant"], cells["encoder_epochs"]))
    assert epochs["reccbm-frozen"] == 0 and epochs["reccbm"] == 2
    docs = {v: json.loads((out / "cells" / f"fold0-n12-r0-{v}.json").read_text()) for v in ("reccbm", "reccbm-frozen")}
    assert docs["reccbm"]["train_ids"] == docs["reccbm-frozen"]["train_ids"]  # the same answers, the encoder differs
    import yaml

    kept = yaml.safe_load((out / "runs" / "fold0-n12-r0-plm-frozen" / "config.yaml").read_text())
    assert kept["variant"] == "plm" and kept["stage1"]["encoder"] == "frozen"
    assert kept["stage1"]["epochs"] == 2  # the PLM's head trains the concept models' Stage I + joint epochs


def test_unlabelled_rows_of_an_adjudicated_table_are_skipped_and_said(tmp_path: Path, backbone: str,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """An answer every model failed on stays in the adjudicated table with empty concept columns: train skips it,
    and so must the curve (it failed on "concept ... = missing is not a level")."""
    df = ecology_table(90)
    keys = [c for c in df.columns if c not in ("id", "question", "response", "reference", "grade")]
    df.loc[[4, 7], keys] = None
    df.to_csv(tmp_path / "ecology.csv", index=False)
    calls = _counting(monkeypatch)
    res = runner.invoke(app, _args(tmp_path, backbone, "--sizes", "12", "--repeats", "1", "--variants", "plm"))
    assert res.exit_code == 0, res.output
    assert "skipping 2 unlabelled row(s)" in " ".join(res.output.split()) and "eco-004, eco-007" in res.output
    assert len(calls) == 1
    doc = json.loads((tmp_path / "curve" / "curve.json").read_text())
    assert any("unlabelled" in n for n in doc["notes"])


def test_the_points_variant_and_what_the_90_percent_line_says(tmp_path: Path) -> None:
    """`--variants points` trains nothing (seconds); the 90 % line says when the smallest size already reaches it, and a
    variant without full-data cells is told to add 'all' instead of being called 'not above 0'."""
    data, rub, out = tmp_path / "ecology.csv", ecology_rubric(tmp_path), tmp_path / "curve"
    ecology_table(150).to_csv(data, index=False)
    base = ["learning-curve", "--table", str(data), "--rubric", str(rub), "--out", str(out), "--folds", "3",
            "--variants", "points", "--repeats", "2"]
    res = runner.invoke(app, [*base, "--sizes", "12,24,all"])
    assert res.exit_code == 0, res.output
    text = " ".join(res.output.split())
    reach = json.loads((out / "curve.json").read_text())["reach_90"]["points"]
    if reach["where"] == "between sizes":
        assert f"points: about {reach['n_estimate']} labelled answers reach 90 %" in text
    else:
        assert f"points: its smallest size, {reach['size']} labelled answers, already reaches 90 %" in text
    res = runner.invoke(app, [*base, "--sizes", "12,24", "--out", str(tmp_path / "no-all")])
    assert res.exit_code == 0, res.output
    assert "points: no 90 % point without its full-data cells (add 'all' to --sizes)" in " ".join(res.output.split())


def test_a_second_curve_on_the_same_folder_stops_at_once_and_harms_nothing(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """Two learning-curve processes on one --out: the second used to clear work/ under the first's cell in training and
    write curve.csv from half the cells. Now, started while the first is inside a cell, it stops with one line naming
    the holder, and the first finishes every cell."""
    import os
    import subprocess
    import sys

    from rubrictool.curve import measure as curve

    data, rub, out = tmp_path / "ecology.csv", ecology_rubric(tmp_path), tmp_path / "curve"
    ecology_table(150).to_csv(data, index=False)
    args = ["learning-curve", "--table", str(data), "--rubric", str(rub), "--out", str(out), "--folds", "3",
            "--variants", "points"]
    root = Path(__file__).resolve().parent.parent
    second: list[subprocess.CompletedProcess[str]] = []
    real = curve._points_cell

    def cell(*a: Any, **kw: Any) -> Any:  # the first call's first cell: start a second call on the same folder
        if not second:
            env = {**os.environ, "PYTHONPATH": str(root), "COLUMNS": "200"}
            second.append(subprocess.run([sys.executable, "-m", "rubrictool.cli", *args, "--sizes", "24"], env=env,
                                         capture_output=True, text=True, timeout=300, check=False))
        return real(*a, **kw)

    monkeypatch.setattr(curve, "_points_cell", cell)
    res = runner.invoke(app, [*args, "--sizes", "12,all", "--repeats", "2"])
    assert res.exit_code == 0, res.output
    (other,) = second
    text = " ".join((other.stdout + other.stderr).split())
    assert other.returncode == 1 and "Traceback" not in text, text
    assert f"the learning curve {out} is in use by another rubrictool learning-curve (pid {os.getpid()} on" in text
    assert "give another --out" in text
    cells = sorted(p.name for p in (out / "cells").glob("*.json"))
    assert len(cells) == 3 * 2 * 2 and not any("-n24-" in c for c in cells)  # the first call's cells, whole
    assert len(read_table(out / "curve.csv")) == 12 and not (out / "work").exists()


def test_fold_runs_of_train_folds_stand_in_for_the_all_cells(tmp_path: Path, backbone: str,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """`--all-from reccbm=F` reads the 'all' cell of each fold from `train --folds` (same folds, table and recipe)
    instead of training it again; a curve with another recipe or other folds is refused in one line."""
    data = tmp_path / "ecology.csv"
    ecology_table(90).to_csv(data, index=False)
    folds = tmp_path / "folds"
    res = runner.invoke(app, ["train", "--table", str(data), "--rubric", str(ecology_rubric(tmp_path)), "--folds", "3",
                              "--preset", "plain",
                              "--out", str(folds), "--backbone", backbone, "--epochs", "1", "--cfg", "joint.epochs=1",
                              "--cfg", "stage2.epochs=3", "--max-len", "32", "--lr", "3e-3", "--device", "cpu"])
    assert res.exit_code == 0, res.output
    out = tmp_path / "curve"
    calls = _counting(monkeypatch)
    res = runner.invoke(app, _args(tmp_path, backbone, "--sizes", "12,all", "--repeats", "1", "--variants", "reccbm",
                                   "--all-from", f"reccbm={folds}"))
    assert res.exit_code == 0, res.output
    assert calls == ["fold0-n12-r0-reccbm"]  # the 'all' cell was not trained again
    assert "1 cell(s) trained, 1 read from fold runs, 0 read back" in " ".join(res.output.split())
    cell = json.loads((out / "cells" / "fold0-nall-r0-reccbm.json").read_text())
    run = json.loads((folds / "fold-0" / "metrics.json").read_text())["seeds"][0]["test"]
    assert cell["qwk"] == pytest.approx(run["qwk"]) and cell["t_acc"] == pytest.approx(run["t_acc"])
    assert cell["source"] == str(folds / "fold-0") and cell["n_train"] == 60 and cell["encoder_epochs"] == 2
    split = json.loads((folds / "fold-0" / "split.json").read_text())
    assert cell["test_ids"] == read_table(folds / "fold-0" / "test_predictions.csv")["id"].astype(str).tolist()
    assert set(cell["test_ids"]) == set(split["test"]) and cell["dev_ids"] == sorted(split["dev"])
    small = json.loads((out / "cells" / "fold0-n12-r0-reccbm.json").read_text())
    assert set(small["test_ids"]) == set(cell["test_ids"])  # the fold runs' test part is the curve's
    doc = json.loads((out / "curve.json").read_text())
    assert doc["from_fold_runs"] == {"fold0-nall-r0-reccbm": str(folds / "fold-0")}
    assert any("read from finished fold runs" in n for n in doc["notes"])
    assert (doc["reach_90"]["reccbm"] is None) == (cell["qwk"] <= 0)  # the imported cell is the 90 % point's full data

    # another recipe (Stage I epochs), other folds (--folds 2) or a variant the curve does not train: one line each
    for extra, message in ((["--lr", "1e-3"],
                            "trained with another configuration (stage1.lr 0.003 in the run, 0.001 here)"),
                           (["--folds", "2"], "its fold is not this curve's fold 0"),
                           (["--variants", "plm"], "'reccbm' is not a trained variant of this curve")):
        calls.clear()
        args = _args(tmp_path, backbone, "--sizes", "12,all", "--repeats", "1", "--variants", "reccbm",
                     "--all-from", f"reccbm={folds}", *extra)
        res = runner.invoke(app, [*args[:2], *args[2:], "--out", str(tmp_path / "other")])
        flat = " ".join(res.output.split())
        assert res.exit_code != 0 and message in flat and "Traceback" not in res.output, flat
        assert not calls  # refused before anything trains
    res = runner.invoke(app, _args(tmp_path, backbone, "--sizes", "12", "--repeats", "1", "--variants", "reccbm",
                                   "--all-from", f"reccbm={folds}"))
    assert res.exit_code != 0 and "which --sizes does not have" in " ".join(res.output.split())
    # a fold not finished there (here: its metrics gone) is trained as usual, and the curve says so
    (folds / "fold-1" / "metrics.json").unlink()
    calls.clear()
    args = _args(tmp_path, backbone, "--sizes", "all", "--repeats", "1", "--variants", "reccbm", "--all-from",
                 f"reccbm={folds}")
    res = runner.invoke(app, [*args[: args.index("--fold")], "--fold", "0,1", *args[args.index("--fold") + 2:],
                              "--out", str(tmp_path / "unfinished")])
    flat = " ".join(res.output.split())
    assert res.exit_code == 0, res.output
    assert calls == ["fold1-nall-r0-reccbm"] and "fold-1 is not a finished fold run; training the cell" in flat
    assert "1 cell(s) trained, 1 read from fold runs" in flat


def test_the_plm_fold_runs_stand_in_for_its_matched_budget_all_cells(tmp_path: Path, backbone: str,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """A PLM trained by `train --variant plm --folds` with the concept models' Stage I + joint epochs (1 + 1 here,
    given as --epochs 2) is the curve's matched-budget PLM: its fold runs are the curve's 'all' cells (its table
    compared on the grades only); the same runs against the unmatched PLM are refused."""
    data = tmp_path / "ecology.csv"
    ecology_table(90).to_csv(data, index=False)
    folds = tmp_path / "plm-folds"
    res = runner.invoke(app, ["train", "--table", str(data), "--rubric", str(ecology_rubric(tmp_path)), "--folds", "3",
                              "--preset", "plain",
                              "--variant", "plm", "--out", str(folds), "--backbone", backbone, "--epochs", "2",
                              "--cfg", "joint.epochs=1", "--cfg", "stage2.epochs=3", "--max-len", "32", "--lr", "3e-3",
                              "--device", "cpu"])
    assert res.exit_code == 0, res.output
    calls = _counting(monkeypatch)
    res = runner.invoke(app, _args(tmp_path, backbone, "--sizes", "all", "--repeats", "1", "--variants", "plm",
                                   "--all-from", f"plm={folds}"))
    assert res.exit_code == 0, res.output
    assert calls == [] and "0 cell(s) trained, 1 read from fold runs" in " ".join(res.output.split())
    text = " ".join(res.output.split())  # no smaller size: no 90 % point to tell (and none below the majority class)
    assert "plm: only its full-data cells" in text or ("plm: " in text and "no 90 % point" in text)
    assert "labelled answers reach 90 %" not in text
    cell = json.loads((tmp_path / "curve" / "cells" / "fold0-nall-r0-plm.json").read_text())
    assert cell["encoder_epochs"] == 2 and cell["source"] == str(folds / "fold-0")
    res = runner.invoke(app, _args(tmp_path, backbone, "--sizes", "all", "--repeats", "1", "--variants", "plm",
                                   "--no-match-budget", "--all-from", f"plm={folds}", "--out", str(tmp_path / "c2")))
    assert res.exit_code != 0 and "trained with another configuration (stage1.epochs 2 in the run, 1 here)" in " ".join(
        res.output.split()), res.output
