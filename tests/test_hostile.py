"""Hostile input and faults (and `explain` as a teacher reads it), on a course that
is not Mohler: two concepts (EV evidence, CL claim) on a 0..2 scale, holistic grades 0..2.

Each test runs the command as a user would and checks what it wrote or refused, through the library."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from rubrictool.cli import app
from rubrictool.errors import DataError, RubricError
from rubrictool.io import read_table
from rubrictool.rubric import load_rubric, parse_rubric, rubric_errors
from rubrictool.textsafe import md_inline, md_quote, strip_controls
from tests.support.tiny_models import build_backbone, toy_table

runner = CliRunner()
pytestmark = pytest.mark.usefixtures("one_thread")

ROOT = Path(__file__).resolve().parent.parent
HOSTILE = "<script>alert(1)</script> <img src=x onerror=alert(2)> a|b `code` \x1b[31mRED\x1b[0m \x1b]0;title\x07"

RUBRIC = """\
name: bio2
title: Biology claims (a course that is not Mohler)
version: "0.1"
description: Short answers that state a biological claim and the evidence for it.
fields:
  question: The question.
  reference: A model answer.
  response: The student's answer.
scale: {min: 0, max: 2}
grade: {min: 0, max: 2}
concepts:
  - key: EV
    name: Evidence
    definition: The answer cites an observation that supports the claim.
    levels: &three
      - {value: 0, anchor: none}
      - {value: 1, anchor: partial}
      - {value: 2, anchor: full}
  - key: CL
    name: Claim
    definition: The answer states the correct claim.
    levels: *three
"""


def course_table(n: int = 40, seed: int = 3) -> pd.DataFrame:
    t = toy_table(n, K=2, seed=seed)
    c = t["c"]  # (n, 2) in 0..2
    return pd.DataFrame({"id": [f"bio-{i}" for i in range(n)], "question": t["q"], "response": t["r"],
                         "reference": "a stack stores elements last in first out", "EV": c[:, 0], "CL": c[:, 1],
                         "grade": np.clip(c.sum(1) // 2, 0, 2)})


@pytest.fixture(scope="module")
def course(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A tiny BERT trained through the CLI on the bio2 course (40 answers)."""
    tmp = tmp_path_factory.mktemp("bio2")
    (tmp / "bio2.yaml").write_text(RUBRIC)
    backbone = build_backbone(tmp, "bert")
    course_table().to_csv(tmp / "adjudicated.csv", index=False)
    res = runner.invoke(app, ["train", "--table", str(tmp / "adjudicated.csv"), "--rubric", str(tmp / "bio2.yaml"),
                              "--backbone", backbone, "--epochs", "2", "--max-len", "32", "--out", str(tmp / "run"),
                              "--device", "cpu", "--lr", "3e-3"])
    assert res.exit_code == 0, res.output
    return {"tmp": tmp, "run": tmp / "run", "table": tmp / "adjudicated.csv", "rubric": tmp / "bio2.yaml",
            "backbone": Path(backbone)}


def one_line_error(output: str) -> str:
    assert "Traceback" not in output
    lines = [ln for ln in output.splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith("error:")]
    assert len(errors) == 1, output
    return " ".join(output.split())


# ---------------------------------------------------------------------------- sanitising helpers
def test_strip_controls_removes_escape_sequences_whole_and_keeps_layout() -> None:
    s = strip_controls("a\x1b[31mred\x1b[0m b\x1b]0;evil title\x07c\x1b]8;;http://x\x1b\\link\td\ne\r\x00\x7f\x9b2J"
                       "\u202eevil")
    assert s == "ared bclink\td\neevil"
    assert strip_controls("x\ny\tz", keep="") == "xyz"


def test_markdown_escaping_leaves_no_html_markup_or_table_breaks() -> None:
    md = md_inline(HOSTILE + "\nsecond line ![img](http://evil/p.png)")
    assert "<" not in md and ">" not in md and "\x1b" not in md and "\n" not in md
    assert "&lt;script&gt;" in md and "a\\|b" in md and "\\`code\\`" in md and "!\\[img\\]" in md
    assert "|" not in md.replace("\\|", "")
    quote = md_quote("first\n<b>second</b>")
    assert quote.splitlines() == ["> first", "> &lt;b&gt;second&lt;/b&gt;"]


# ---------------------------------------------------------------------------- rubric YAML alias bombs
def alias_bomb(levels: int) -> str:
    lines = ["name: bomb", 'a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, levels + 1)]
    return "\n".join([*lines, f"concepts: *a{levels}", ""])


def test_an_alias_bomb_is_refused_in_well_under_a_second(tmp_path: Path) -> None:
    path = tmp_path / "bomb.yaml"
    path.write_text(alias_bomb(8))  # 9^9 ≈ 387 million strings once expanded
    t0 = time.perf_counter()
    errors = rubric_errors(path.read_text(), str(path))
    with pytest.raises(RubricError, match="alias"):
        load_rubric(path)
    assert time.perf_counter() - t0 < 1.0
    assert len(errors) == 1 and errors[0].startswith(f"{path}:") and "alias" in errors[0]
    t0 = time.perf_counter()
    res = runner.invoke(app, ["rubric", "validate", str(path)])
    assert time.perf_counter() - t0 < 1.0
    assert res.exit_code == 1 and "alias" in res.output and "Traceback" not in res.output


def test_too_many_aliases_or_too_deep_is_refused_but_a_few_aliases_load() -> None:
    rb = parse_rubric(RUBRIC, "bio2.yaml")  # the two concepts share one &three level list
    assert [c.key for c in rb.concepts] == ["EV", "CL"] and len(rb.concepts[1].levels) == 3
    many = "name: x\nbase: &b 1\nlist: [" + ", ".join(["*b"] * 500) + "]\n"
    with pytest.raises(RubricError, match=r"more than \d+ aliases"):
        parse_rubric(many, "many.yaml")
    deep = "name: x\nconcepts: " + "[" * 200 + "]" * 200 + "\n"
    with pytest.raises(RubricError, match="nested more than"):
        parse_rubric(deep, "deep.yaml")


# ---------------------------------------------------------------------------- NUL bytes at input
@pytest.mark.parametrize("fmt", ["csv", "jsonl", "parquet"])
def test_a_nul_byte_is_refused_naming_file_row_and_column(tmp_path: Path, fmt: str) -> None:
    df = pd.DataFrame({"id": ["a", "b", "c"], "answer_text": ["fine", "also fine", "bad\x00byte"], "grade": [1, 2, 0]})
    path = tmp_path / f"items.{fmt}"
    if fmt == "csv":
        df.to_csv(path, index=False)
    elif fmt == "jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in df.to_dict("records")))
    else:
        df.to_parquet(path, index=False)
    with pytest.raises(DataError) as err:
        read_table(path)
    assert str(err.value) == f"{path}: row 3 (id c), column 'answer_text': the text contains a NUL byte (\\0)"


def test_grade_refuses_a_nul_byte_in_one_line(course: dict[str, Path], tmp_path: Path) -> None:
    data = tmp_path / "new.csv"
    pd.DataFrame({"id": ["n1", "n2"], "response": ["right good yes", "wrong\x00bad"]}).to_csv(data, index=False)
    res = runner.invoke(app, ["grade", "--run", str(course["run"]), "--items", str(data), "--out",
                              str(tmp_path / "g.csv")])
    assert res.exit_code == 1
    assert "row 2 (id n2), column 'response'" in one_line_error(res.output)
    assert not (tmp_path / "g.csv").exists()


# ---------------------------------------------------------------------------- train: a grade that is not a number
def test_train_with_a_word_for_a_grade_is_one_line_naming_file_row_and_column(course: dict[str, Path],
                                                                             tmp_path: Path) -> None:
    df = course_table()
    df["grade"] = df["grade"].astype(object)
    df.loc[7, "grade"] = "five"
    data = tmp_path / "bad.csv"
    df.to_csv(data, index=False)
    res = runner.invoke(app, ["train", "--table", str(data), "--rubric", str(course["rubric"]), "--backbone",
                              str(course["backbone"]), "--epochs", "1", "--out", str(tmp_path / "run"), "--device",
                              "cpu"])
    assert res.exit_code == 1
    text = one_line_error(res.output)
    assert f"{data}: row 8 (id bio-7): column 'grade' = 'five' is not a number" in text
    assert not (tmp_path / "run" / "model.safetensors").exists()


# ---------------------------------------------------------------------------- grade's input policy
def test_empty_whitespace_and_null_responses_get_no_grade_and_the_empty_flag(course: dict[str, Path],
                                                                            tmp_path: Path) -> None:
    data = tmp_path / "new.jsonl"
    rows = [{"id": "n1", "response": "right good yes"}, {"id": "n2", "response": ""},
            {"id": "n3", "response": "   \t "}, {"id": "n4", "response": None},
            {"id": "n5", "response": "wrong bad no"}]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "graded.csv"
    res = runner.invoke(app, ["grade", "--run", str(course["run"]), "--items", str(data), "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert "3 of 5 responses are empty" in " ".join(res.output.split())
    g = read_table(out)
    assert list(g["id"]) == ["n1", "n2", "n3", "n4", "n5"]
    empty = g["id"].isin(["n2", "n3", "n4"])
    assert g.loc[empty, "grade"].isna().all() and g.loc[empty, "grade_prob"].isna().all()
    assert g.loc[empty, "EV_level"].isna().all()
    assert list(g.loc[empty, "flags"]) == ["empty"] * 3
    assert g.loc[~empty, "model_grade"].between(0, 2).all()
    assert not g.loc[~empty, "flags"].fillna("").str.contains("empty").any()
    # the answers with text get exactly the grades they get alone
    alone = tmp_path / "alone.csv"
    pd.DataFrame([rows[0], rows[4]]).to_csv(alone, index=False)
    assert runner.invoke(app, ["grade", "--run", str(course["run"]), "--items", str(alone), "--out",
                               str(tmp_path / "alone_graded.csv")]).exit_code == 0
    ref = read_table(tmp_path / "alone_graded.csv")
    assert list(ref["model_grade"]) == list(g.loc[~empty, "model_grade"])
    raw = pd.read_csv(out, dtype=str, keep_default_na=False)  # as a spreadsheet shows it: 1, not 1.0
    assert raw.loc[raw["id"] == "n1", "model_grade"].iloc[0] in {"0", "1", "2"}
    assert raw.loc[raw["id"] == "n2", "grade"].iloc[0] == ""
    assert np.allclose(ref["grade_prob"], g.loc[~empty, "grade_prob"])


def test_a_table_of_only_empty_answers_is_written_ungraded(course: dict[str, Path], tmp_path: Path) -> None:
    data = tmp_path / "blank.csv"
    pd.DataFrame({"id": ["e1", "e2"], "response": ["", " "]}).to_csv(data, index=False)
    res = runner.invoke(app, ["grade", "--run", str(course["run"]), "--items", str(data), "--out",
                              str(tmp_path / "g.csv")])
    assert res.exit_code == 0, res.output
    g = read_table(tmp_path / "g.csv")
    assert list(g["id"]) == ["e1", "e2"] and g["grade"].isna().all() and list(g["flags"]) == ["empty", "empty"]


def test_duplicate_ids_are_an_error_naming_them(course: dict[str, Path], tmp_path: Path) -> None:
    data = tmp_path / "dups.csv"
    pd.DataFrame({"id": ["x1", "x2", "x1", "x3", "x3"], "response": ["right"] * 5}).to_csv(data, index=False)
    res = runner.invoke(app, ["grade", "--run", str(course["run"]), "--items", str(data), "--out",
                              str(tmp_path / "g.csv")])
    assert res.exit_code == 1
    assert "2 id(s) used more than once: 'x1', 'x3'" in one_line_error(res.output)
    assert not (tmp_path / "g.csv").exists()


def test_out_equal_to_data_is_refused_even_through_a_symlink(course: dict[str, Path], tmp_path: Path) -> None:
    data = tmp_path / "answers.csv"
    pd.DataFrame({"id": ["a1", "a2"], "response": ["right good", "wrong bad"]}).to_csv(data, index=False)
    before = data.read_bytes()
    link = tmp_path / "link.csv"
    link.symlink_to(data)
    for out in (data, link, tmp_path / "." / "answers.csv"):
        res = runner.invoke(app, ["grade", "--run", str(course["run"]), "--items", str(data), "--out", str(out)])
        assert res.exit_code == 1
        assert "would overwrite the input" in one_line_error(res.output)
    assert data.read_bytes() == before


# ---------------------------------------------------------------------------- ONNX under a file-size limit
def test_onnx_under_a_full_disk_names_the_oserror_and_the_file(course: dict[str, Path], tmp_path: Path) -> None:
    """A real fault: RLIMIT_FSIZE (with SIGXFSZ ignored) makes every write past 64 kB fail with EFBIG, as a
    full disk fails with ENOSPC. The message must name that error and the file, not blame the encoder."""
    resource = pytest.importorskip("resource")
    import signal

    data = tmp_path / "new.csv"
    pd.DataFrame({"id": ["n1"], "response": ["right good yes"]}).to_csv(data, index=False)
    run = tmp_path / "run"
    shutil.copytree(course["run"], run)  # its own RUN/onnx cache folder

    def limit() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (64_000, 64_000))

    env = os.environ | {"PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "TMPDIR": str(tmp_path),
                        "XDG_CACHE_HOME": str(tmp_path / "cache"), "COLUMNS": "300"}
    proc = subprocess.run([sys.executable, "-m", "rubrictool.cli", "grade", "--run", str(run), "--items", str(data),
                           "--out", str(tmp_path / "g.csv"), "--engine", "onnx"], preexec_fn=limit, env=env,
                          capture_output=True, text=True, timeout=300, cwd=tmp_path, check=False)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    text = one_line_error(proc.stderr)
    assert "does not support" not in text
    assert "File too large" in text and ".onnx" in text


# ---------------------------------------------------------------------------- explain for hostile ids and teachers
@pytest.fixture(scope="module")
def odd_ids(course: dict[str, Path]) -> Path:
    """The course table with three ids that differ only in an unsafe character, and a hostile answer."""
    df = pd.read_csv(course["table"], dtype={"id": str})
    df.loc[0, "id"], df.loc[1, "id"], df.loc[2, "id"] = "a/b", "a_b", "a:b"
    df.loc[1, "response"] = "right good " + HOSTILE
    path = course["tmp"] / "odd_ids.csv"
    df.to_csv(path, index=False)
    return path


def test_explain_writes_one_png_per_id_and_prints_no_control_characters(course: dict[str, Path], odd_ids: Path,
                                                                      tmp_path: Path) -> None:
    from rubrictool.report.page import trace_file

    out = tmp_path / "x"
    res = runner.invoke(app, ["explain", "--run", str(course["run"]), "--items", str(odd_ids), "a/b", "a_b", "a:b",
                              "--out", str(out)])
    assert res.exit_code == 0, res.output
    names = {trace_file(i) for i in ("a/b", "a_b", "a:b")}
    assert len(names) == 3 and all("/" not in n and ":" not in n for n in names)
    assert {p.name for p in out.glob("*.png")} == names
    assert "\x1b" not in res.output and "\x07" not in res.output
    assert "<script>alert(1)</script>" in res.output  # shown as text, not swallowed as markup
    page = (out / "explain.html").read_text()
    assert "<script>" not in page and "<img src=x" not in page and "&lt;" in page


def test_explain_shows_the_reference_the_gold_grade_contrast_and_a_legend(course: dict[str, Path],
                                                                          tmp_path: Path) -> None:
    from rubrictool.report import explain_items, open_run, table_rows

    run = open_run(course["run"], data=course["table"])
    ids = [str(i) for i in pd.read_csv(course["table"], dtype={"id": str})["id"]]
    traces = explain_items(run, table_rows(run, ids, "answer id(s)"))
    wrong = [t for t in traces if t.gold_grade is not None and t.gold_grade != t.grade]
    right = [t for t in traces if t.gold_grade == t.grade]
    assert wrong, "the tiny model should get some answer wrong"
    for t in traces:
        assert t.reference == "a stack stores elements last in first out"
        assert t.other_logit is not None and t.other_bias is not None
        # contributions toward the compared grade sum to its logit, as those toward the prediction do
        total = sum(c.contribution_other or 0.0 for c in t.concepts) + t.other_bias
        assert total == pytest.approx(t.other_logit, abs=1e-4)
        diff = sum(c.difference or 0.0 for c in t.concepts) + t.bias - t.other_bias
        assert diff == pytest.approx(t.logit - t.other_logit, abs=1e-4)
    for t in wrong:
        assert t.other_kind == "gold" and t.other_grade == t.gold_grade
    for t in right:
        assert t.other_kind == "runner-up" and t.other_grade == t.runner_up
    t = wrong[0]
    out = tmp_path / "x"
    res = runner.invoke(app, ["explain", "--run", str(course["run"]), "--items", str(course["table"]), t.id,
                              "--out", str(out)])
    assert res.exit_code == 0, res.output
    text = " ".join(res.output.split())
    assert "reference answer: a stack stores elements last in first out" in text
    assert f"→ {t.gold_grade} (gold)" in text and f"beat the gold grade {t.gold_grade}" in text and "attends to" in text
    assert "legend" in text and "expected level" in text and "LCEC" in text
    df = pd.read_csv(out / "explain.csv", dtype={"id": str})
    assert set(df["other_kind"]) == {"gold"} and set(df["other_grade"]) == {t.gold_grade}
    page = (out / "explain.html").read_text()
    assert "Reference answer:" in page and "What the columns mean" in page
    assert f"to the gold grade {t.gold_grade}" in page


def test_the_set_chart_holds_every_bar(monkeypatch: pytest.MonkeyPatch) -> None:
    """Bars after an override and toward the compared grade can be longer than the predicted ones: the axis
    must hold them all, with room for their value labels."""
    from rubrictool.report import figures

    figs: list[tuple[float, float, float, float]] = []
    real = figures._png

    def keep(fig: Any) -> bytes:
        ax = fig.axes[0]
        lo, hi = ax.get_xlim()
        ends = [p.get_x() + p.get_width() for p in ax.patches] + [p.get_x() for p in ax.patches]
        figs.append((float(lo), float(hi), float(min(ends)), float(max(ends))))
        return real(fig)

    monkeypatch.setattr(figures, "_png", keep)
    figures.contributions_png(["EV", "CL"], [0.1, -0.2], 0.05, "t", after=[3.0, -4.0],
                              other=("toward 0", [1.5, 2.5], -6.0))
    lo, hi, left, right = figs[0]
    assert lo < left and right < hi and left <= -6.0 and right >= 3.0
    assert (hi - right) > 0.1 * (hi - lo) and (left - lo) > 0.1 * (hi - lo)  # room for the "+3.00" labels


# ---------------------------------------------------------------------------- Markdown outputs
def test_report_md_and_reliability_md_carry_no_html(course: dict[str, Path], odd_ids: Path, tmp_path: Path) -> None:
    df = pd.read_csv(odd_ids, dtype={"id": str})
    df["response"] = df["response"] + " " + HOSTILE
    df["id"] = [f"<b>{i}</b>|x" for i in df["id"]]
    data = tmp_path / "hostile.csv"
    df.to_csv(data, index=False)
    res = runner.invoke(app, ["train", "--table", str(data), "--rubric", str(course["rubric"]), "--backbone",
                              str(course["backbone"]), "--epochs", "1", "--max-len", "32", "--out",
                              str(tmp_path / "run"),
                              "--device", "cpu"])
    assert res.exit_code == 0, res.output
    res = runner.invoke(app, ["report", "--run", str(tmp_path / "run"), "--table", str(data), "--out",
                              str(tmp_path / "rep"), "--repeats", "1"])
    assert res.exit_code == 0, res.output
    assert "\x1b" not in res.output
    for md in (tmp_path / "rep" / "report.md", tmp_path / "run" / "reliability.md"):
        text = md.read_text()
        assert "<script" not in text and "<img" not in text and "<b>" not in text and "\x1b" not in text, md
    report = (tmp_path / "rep" / "report.md").read_text()
    assert "&lt;script&gt;" in report and "### Decision trace &lt;b&gt;" in report
    for line in report.splitlines():
        if line.startswith("### Decision trace"):
            assert "|" not in line.replace("\\|", "")


def test_the_discussion_queue_md_escapes_answers_and_names() -> None:
    from rubrictool.adjudicate import queue_markdown

    rb = parse_rubric(RUBRIC, "bio2.yaml")
    queue = pd.DataFrame({"item": ["<b>i1</b>"], "concept": ["EV"], "concept_name": ["Evidence"], "status": ["open"],
                          "rule": ["tie"], "level": [pd.NA], "anchors": ["none | partial"], "response": [HOSTILE],
                          "question": ["q <i>"], "reference": [""], "alice|bob": [1], "<u>carol</u>": [2]})
    md = queue_markdown(queue, ["alice|bob", "<u>carol</u>"], rb, note="labels by <script>x</script>")
    assert "<script" not in md and "<img" not in md and "<b>" not in md and "<u>" not in md and "\x1b" not in md
    assert "none / partial" in md
    header = next(ln for ln in md.splitlines() if ln.startswith("| concept"))
    assert header.count("|") - header.count("\\|") == 8  # concept, 2 reviewers, decided, rule, status, anchors


# ---------------------------------------------------------------------------- terminal output of other commands
def test_rubric_show_and_list_print_names_without_controls_or_markup(tmp_path: Path) -> None:
    hostile = RUBRIC.replace("name: Evidence", 'name: "Evi\\e[31mdence [bold red]loud[/] \\a"')
    folder = tmp_path / "rubrics"
    folder.mkdir()
    (folder / "bio2.yaml").write_text(hostile)
    assert "\x1b" in load_rubric(folder / "bio2.yaml").concepts[0].name  # the YAML escape really is an ESC
    res = runner.invoke(app, ["rubric", "show", "--rubric", str(folder / "bio2.yaml")])
    assert res.exit_code == 0, res.output
    assert "\x1b" not in res.output and "\x07" not in res.output
    assert "EV Evidence [bold" in res.output and "red]loud[/]" in res.output  # literal text, not Rich markup


def test_an_error_quoting_a_hostile_id_is_printed_clean(course: dict[str, Path]) -> None:
    res = runner.invoke(app, ["explain", "--run", str(course["run"]), "--items", str(course["table"]),
                              "\x1b[2J\x1b]0;pwned\x07[red]nope"])
    assert res.exit_code == 1
    text = one_line_error(res.output)
    assert "\x1b" not in res.output and "\x07" not in res.output and "[red]nope" in text
