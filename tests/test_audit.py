"""`rubrictool audit` on a tiny trained run: every transformation, the grade shift computed right, the
outputs it writes, and determinism for a seed."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from rubrictool.audit import FILLER, TRANSFORMATIONS, audit_run, keywords, transform
from rubrictool.cli import app
from rubrictool.errors import DataError
from rubrictool.flags import COPY_MIN_WORDS, words
from rubrictool.grade import grade_items
from tests.support.inspect_runs import inspect_run, png_ok

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return inspect_run(tmp_path_factory.mktemp("audit"), n=60)


ITEM = {"response": "A stack is last in first out. It has push and pop.",
        "reference": "a stack stores elements last in first out",
        "question": "what is a stack", "correct": "elements go on top and come off the top"}


def test_each_transformation() -> None:
    rng = np.random.default_rng(0)
    assert transform("append_reference", ITEM, rng) == ITEM["response"] + " " + ITEM["reference"]
    assert transform("append_question", ITEM, rng) == ITEM["response"] + " " + ITEM["question"]
    assert keywords(ITEM["reference"]) == ["stack", "stores", "elements", "last", "first", "out"]
    assert transform("append_keywords", ITEM, rng) == ITEM["response"] + " stack stores elements last first out"
    filler = transform("append_filler", ITEM, rng)
    added = filler[len(ITEM["response"]) + 1:]
    assert filler.startswith(ITEM["response"]) and sum(f in added for f in FILLER) == 2
    assert transform("repeat_sentence", ITEM,
                     rng) == ITEM["response"] + " " + " ".join(["A stack is last in first out."] * 3)
    shuffled = transform("shuffled_correct", ITEM, rng)
    assert sorted(shuffled.split()) == sorted(ITEM["correct"].split()) and shuffled != ITEM["correct"]
    with pytest.raises(DataError, match="unknown transformation"):
        transform("nope", ITEM, rng)


def test_audit_cli_writes_table_png_and_the_shift_is_computed_right(tiny: tuple[Path, Path], tmp_path: Path) -> None:
    run, table = tiny
    out = tmp_path / "audit"
    res = CliRunner().invoke(app, ["audit", "--run", str(run), "--table", str(table), "--out", str(out), "--seed", "3"])
    assert res.exit_code == 0, res.output
    summary = pd.read_csv(out / "audit.csv")
    items = pd.read_csv(out / "audit_items.csv", keep_default_na=False)
    assert list(summary["transformation"]) == list(TRANSFORMATIONS)
    split = json.loads((run / "split.json").read_text())
    n = len(split["test"])
    assert (summary["n"] == n).all() and len(items) == n * len(TRANSFORMATIONS)
    # the grade before is the run's own grade of the original answer, the grade after its grade of the
    # transformed answer, recomputed here independently with grade_items
    src = pd.read_csv(table).set_index("id").loc[split["test"]].reset_index()
    before = grade_items(run, src)["grade"].to_numpy()
    for name, part in items.groupby("transformation", sort=False):
        assert part["grade_before"].tolist() == before.tolist()
        regraded = grade_items(run, src.assign(response=part["response_after"].to_numpy()))["grade"].to_numpy()
        assert part["grade_after"].tolist() == regraded.tolist()
        row = summary.set_index("transformation").loc[name]
        assert row["mean_grade_shift"] == pytest.approx((regraded - before).mean())
        assert row["share_raised"] == pytest.approx((regraded > before).mean())
        assert row["share_flagged"] == pytest.approx((part["flags_after"] != "").mean())
    ref = items[items["transformation"] == "append_reference"]
    assert ref["response_after"].tolist() == [f"{r} {a}".strip()
                                              for r, a in zip(src["response"], src["reference"].fillna(""))]
    # appending the reference makes the answer contain it: caught whenever the reference is long enough to tell a
    # copy from a right answer (COPY_MIN_WORDS words); a shorter one is what a right answer says, never flagged
    long_ref = src["reference"].fillna("").map(lambda r: len(words(r)) >= COPY_MIN_WORDS)
    assert all(("copies_reference" in f) == bool(h) for f, h in zip(ref["flags_after"], long_ref))
    for col in [f"shift_{k}" for k in ("FC", "CC", "TU", "CP", "R", "DU", "EE", "FR")]:
        assert col in summary.columns
    doc = json.loads((out / "audit.json").read_text())
    assert doc["n"] == n and len(doc["transformations"]) == len(TRANSFORMATIONS)
    md = (out / "audit.md").read_text()
    assert "| append_reference |" in md and "honest" in md
    w, h = png_ok(out / "audit.png")
    assert w > 600 and h > 200
    assert "gaming audit" in res.output and "wrote" in res.output


def test_audit_is_deterministic_for_a_seed(tiny: tuple[Path, Path]) -> None:
    run, table = tiny
    names = ["append_filler", "shuffled_correct"]
    a = audit_run(run, data=table, seed=5, transformations=names)
    b = audit_run(run, data=table, seed=5, transformations=names)
    c = audit_run(run, data=table, seed=6, transformations=names)
    pd.testing.assert_frame_equal(a.items, b.items)
    pd.testing.assert_frame_equal(a.summary, b.summary)
    assert a.items["response_after"].tolist() != c.items["response_after"].tolist()
    # one random stream per transformation: auditing one alone gives the same texts as with the others
    alone = audit_run(run, data=table, seed=5, transformations=["shuffled_correct"])
    shuffled = a.items[a.items["transformation"] == "shuffled_correct"]
    assert alone.items["response_after"].tolist() == shuffled["response_after"].tolist()
    with pytest.raises(DataError, match="unknown transformation"):
        audit_run(run, data=table, transformations=["nope"])


def test_an_unwritable_out_is_one_clear_error_before_any_grading(tiny: tuple[Path, Path], tmp_path: Path) -> None:
    run, table = tiny
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    res = CliRunner().invoke(app, ["audit", "--run", str(run), "--table", str(table), "--out", str(blocker / "audit")])
    assert res.exit_code == 1 and "cannot write into" in res.output and "Traceback" not in res.output


def test_filler_comes_from_the_courses_own_answers_to_other_questions_or_a_file(
    tiny: tuple[Path, Path], tmp_path: Path
) -> None:
    run, table = tiny
    df = pd.read_csv(table)
    df["question"] = [f"question {i % 4}" for i in range(len(df))]  # four questions, so "other" answers exist
    course = tmp_path / "course.csv"
    df.to_csv(course, index=False)
    res = audit_run(run, data=course, transformations=["append_filler"], seed=1)
    items = res.items
    split = json.loads((run / "split.json").read_text())
    train = df[df["id"].astype(str).isin(split["train"])]
    assert not any(f in " ".join(items["response_after"].astype(str)) for f in FILLER)  # no computer-science filler
    q_of = df.set_index(df["id"].astype(str))["question"]
    before = df.set_index(df["id"].astype(str))["response"].fillna("").astype(str)
    for _, it in items.iterrows():
        added = str(it["response_after"])[len(before[str(it["id"])]):].strip()
        assert added, "no filler appended"
        own = train[train["question"] == q_of[str(it["id"])]]["response"].astype(str)
        assert not any(r and r.split(".")[0] in added for r in own if len(r.split()) >= 4)  # never its own question's
    lines = tmp_path / "filler.txt"
    lines.write_text("The weather was nice.\nMy cat likes boxes.\n")
    res = audit_run(run, data=course, transformations=["append_filler"], seed=1, filler=lines)
    assert all(("weather" in str(r)) and ("cat" in str(r)) for r in res.items["response_after"])
    lines.write_text("only one line\n")
    with pytest.raises(DataError, match="at least two sentences"):
        audit_run(run, data=course, transformations=["append_filler"], seed=1, filler=lines)


def test_audit_runs_the_behavioural_tests_and_the_report_names_a_failing_one(
    tiny: tuple[Path, Path], tmp_path: Path
) -> None:
    """`audit` writes the behavioural tests beside the gaming figures (its summary is what its rows say); the report
    page's Audit section shows them and its verdict names each failing test in words."""
    import shutil

    from rubrictool.behaviour import failing_sentences, summarise

    run_src, table = tiny
    run = tmp_path / "run"
    shutil.copytree(run_src, run)
    res = CliRunner().invoke(app, ["audit", "--run", str(run), "--table", str(table), "--seed", "1"])
    assert res.exit_code == 0, res.output
    out = run / "audit"
    doc = json.loads((out / "behaviour.json").read_text())
    items = pd.read_csv(out / "behaviour_items.csv", keep_default_na=False, dtype={"id": str})
    assert len(items) and set(items["test"]) <= {t["test"] for t in doc["tests"]}
    again = summarise(items, pd.DataFrame(), tuple(doc["grade_range"]), doc["seed"]).set_index("test")
    for t in doc["tests"]:
        assert t["n"] == again.loc[t["test"], "n"]
        assert t["share_changed"] == pytest.approx(again.loc[t["test"], "share_changed"])
        assert t["mean_shift"] == pytest.approx(again.loc[t["test"], "mean_shift"])
    assert doc["failing"] == failing_sentences(again.reset_index())
    assert "behavioural tests" in res.output and "## Behavioural tests" in (out / "audit.md").read_text()
    for sentence in doc["failing"]:
        assert sentence in " ".join(res.output.split())
    rep = CliRunner().invoke(app, ["report", "--run", str(run), "--table", str(table), "--out", str(tmp_path / "rep"),
                                   "--repeats", "1"])
    assert rep.exit_code == 0, rep.output
    page = json.loads((tmp_path / "rep" / "report.json").read_text())
    md = (tmp_path / "rep" / "report.md").read_text()
    assert page["audit"]["failing"] == doc["failing"] and "## Audit" in md and "| gaming | mean grade shift |" in md
    said = " ".join(page["verdict"])
    assert all(s in said for s in doc["failing"])
    assert "wrong reasons" in said if doc["failing"] else "right reasons" in said
    assert "audit-behaviour" in (tmp_path / "rep" / "report.html").read_text()
    # an audit of other weights is named as such, not read as this model's
    doc["model_sha256"] = "0" * 64
    (out / "behaviour.json").write_text(json.dumps(doc))
    rep = CliRunner().invoke(app, ["report", "--run", str(run), "--table", str(table), "--out", str(tmp_path / "rep2"),
                                   "--repeats", "1"])
    assert rep.exit_code == 0, rep.output
    md = (tmp_path / "rep2" / "report.md").read_text()
    assert "other weights than this run's" in md and "wrong reasons" not in md and "right reasons" not in md


def test_audit_verdict_names_the_failing_test_in_a_teachers_words() -> None:
    from rubrictool.report.audit_section import audit_markdown, audit_verdict

    typo = {"test": "typo", "kind": "invariance", "words": "a one-letter typo", "n": 200, "share_changed": 0.11,
            "mean_shift": -0.06, "passes": False}
    case = {"test": "case", "kind": "invariance", "words": "changing upper and lower case", "n": 227,
            "share_changed": 0.0, "mean_shift": 0.0, "passes": True}
    audit = {"dir": "RUN/audit", "stale": False, "behaviour": {
        "n": 227, "tests": [typo, case],
        "failing": ["a one-letter typo moves 11 % of marks (target: at most 2 %, none by 2)"]}}
    assert audit_verdict(audit) == [("Marks move for the wrong reasons (rubrictool audit's behavioural tests, 227 test "
                                    "answers): a one-letter typo moves 11 % of marks (target: at most 2 %, none by "
                                    "2).")]
    assert "| a one-letter typo | 200 | 11.0 % | -0.06 | no |" in audit_markdown(audit)
    assert audit_verdict({}) == [] and "No audit of this run yet" in " ".join(audit_markdown({}))
