"""Ids that survive the next import: `data import` makes them from the question and the student, so next term's file
never reuses an id of this term's for another answer; `grade` keeps the question, the student and the response beside
each grade; `explain --run R --items NEW ID` explains the answer graded.csv calls ID.

The course is the 48-answer statistics quiz (tests/support/quiz_course.py): an XLSX gradebook headed 'Student', 'Q#',
'Answer', 'Score (0-5)'; next term's file has other students, the questions in another order, and no scores.
"""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from rubrictool.cli import app
from rubrictool.data.importer import read_course_file
from rubrictool.io import read_table
from rubrictool.tables import read_items
from tests.support.quiz_course import quiz_marks, write_quiz_xlsx

runner = CliRunner()


def _import(src: Path, out: Path, *extra: str) -> str:
    res = runner.invoke(app, ["data", "import", str(src), "--out", str(out), *extra])
    assert res.exit_code == 0, res.output
    return " ".join(res.output.split())


def test_next_terms_import_reuses_no_id_of_this_terms(tmp_path: Path) -> None:
    fall = write_quiz_xlsx(tmp_path / "fall.xlsx")
    text = _import(tmp_path / "fall.xlsx", tmp_path / "items.csv")
    items = read_items(tmp_path / "items.csv")
    assert "student <- 'Student' (guessed)" in text and "question <- 'Q#' (guessed)" in text
    assert "grade <- 'Score (0-5)' (guessed)" in text and "the header says 0..5" in text
    assert items["id"].tolist()[:2] == ["q1/s101", "q2/s101"]
    assert items["student"].tolist() == fall["Student"].tolist()
    # next term: other students (s2xx), the questions in another order, no scores
    spring = quiz_marks(seed=1, graded=False).head(20)
    spring = spring.assign(Student=spring["Student"].str.replace("s1", "s2", regex=False),
                           **{"Q#": 5 - spring["Q#"]})
    write_quiz_xlsx(tmp_path / "spring.xlsx", spring)
    _import(tmp_path / "spring.xlsx", tmp_path / "new.csv", "--ungraded")
    new = read_items(tmp_path / "new.csv")
    assert not set(new["id"]) & set(items["id"])  # no id of the training table names another answer
    assert all(i == f"q{q}/{s}" for i, q, s in zip(new["id"], spring["Q#"], spring["Student"]))
    # the same file imported again: the same ids for the same answers
    _import(tmp_path / "fall.xlsx", tmp_path / "again.csv")
    again = read_items(tmp_path / "again.csv")
    assert dict(zip(again["id"], again["response"])) == dict(zip(items["id"], items["response"]))


def test_long_questions_get_the_same_tag_in_any_order(tmp_path: Path) -> None:
    qs = ["Why does ice float on water?", "What makes the sky look blue?"]
    a = pd.DataFrame({"Student": ["s1", "s1", "s2"], "Question": [qs[0], qs[1], qs[0]],
                      "Answer": ["less dense", "scattering", "density"], "Score": [2, 1, 0]})
    b = pd.DataFrame({"Student": ["s9", "s9"], "Question": [qs[1], "  " + qs[0].upper()],  # other order, other case
                      "Answer": ["light scatters", "ice is lighter"], "Score": [1, 2]})
    a.to_csv(tmp_path / "a.csv", index=False)
    b.to_csv(tmp_path / "b.csv", index=False)
    ia, ib = read_course_file(tmp_path / "a.csv").items, read_course_file(tmp_path / "b.csv").items
    tag = {q: i.split("/")[0] for q, i in zip(ia["question"], ia["id"])}
    assert all(re.fullmatch(r"q[0-9a-f]{6}", t) for t in tag.values()) and len(set(tag.values())) == 2
    assert ib["id"].tolist() == [f"{tag[qs[1]]}/s9", f"{tag[qs[0]]}/s9"]
    # a student who answered the same question twice: the second answer gets .2, not another's id
    c = pd.concat([a, a.iloc[[0]].assign(Answer="floats")], ignore_index=True)
    c.to_csv(tmp_path / "c.csv", index=False)
    ic = read_course_file(tmp_path / "c.csv").items
    assert ic["id"].tolist()[-1] == f"{tag[qs[0]]}/s1.2" and ic["id"].is_unique


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.support.tiny_models import tiny_bert_run

    return tiny_bert_run(tmp_path_factory.mktemp("idrun"))


@pytest.mark.usefixtures("one_thread")
def test_grades_join_back_and_explain_reads_the_graded_answer(tmp_path: Path, tiny_run: Path) -> None:
    from tests.support.tiny_models import mohler_like_table

    src = mohler_like_table(6, seed=9)
    book = pd.DataFrame({"Student": [f"s{300 + i // 2}" for i in range(6)], "Q#": [1, 2] * 3,
                         "Question": src["question"], "Answer": src["response"], "Model answer": src["reference"]})
    book.to_csv(tmp_path / "next.csv", index=False)
    _import(tmp_path / "next.csv", tmp_path / "new.csv", "--ungraded", "--columns", "question=Q#")
    out = tmp_path / "graded.csv"
    res = runner.invoke(app, ["grade", "--run", str(tiny_run), "--items", str(tmp_path / "new.csv"), "--out", str(out)])
    assert res.exit_code == 0, res.output
    graded = read_table(out)
    assert list(graded.columns[:4]) == ["id", "question", "student", "response"]
    assert graded["response"].tolist() == book["Answer"].tolist()
    assert graded["student"].tolist() == book["Student"].tolist()
    # --keep names the columns instead
    res = runner.invoke(app, ["grade", "--run", str(tiny_run), "--items", str(tmp_path / "new.csv"), "--out", str(out),
                              "--keep", "student,Question"])
    assert res.exit_code == 0, res.output
    assert list(read_table(out).columns[:3]) == ["id", "student", "Question"]
    res = runner.invoke(app, ["grade", "--run", str(tiny_run), "--items", str(tmp_path / "new.csv"), "--out", str(out),
                              "--keep", "nope"])
    assert res.exit_code == 1 and "--keep nope: no such column" in " ".join(res.output.split())
    # explain the answer graded.csv calls q2/s301: the same answer, the same grade, and no word of a wrong table
    wanted = "q2/s301"
    row = graded.set_index("id").loc[wanted]
    res = runner.invoke(app, ["explain", "--run", str(tiny_run), "--items", str(tmp_path / "new.csv"), wanted,
                              "--out", str(tmp_path / "x")])
    assert res.exit_code == 0, res.output
    flat = " ".join(res.output.split())
    assert str(row["response"]) in flat and "is not the table this run was trained on" not in flat
    ex = pd.read_csv(tmp_path / "x" / "explain.csv")
    assert set(ex["id"]) == {wanted}
    assert int(ex["grade"].iloc[0]) == int(graded.set_index("id")["model_grade"].astype(int)[wanted])
    # without --items the id is not the run's: said so, with the fix
    res = runner.invoke(app, ["explain", "--run", str(tiny_run), wanted])
    assert res.exit_code == 1 and "--items" in res.output


def test_a_resit_is_checked_against_the_courses_earlier_tables(tmp_path: Path) -> None:
    """A student who answers the same question again next term would get the same made id: --against an earlier table
    refuses that, nothing written, and --id-prefix gives the file ids of its own."""
    write_quiz_xlsx(tmp_path / "fall.xlsx")
    _import(tmp_path / "fall.xlsx", tmp_path / "items.csv")
    resit = quiz_marks(graded=False).head(4).assign(Answer="a new attempt at it")  # s101 again, same questions
    write_quiz_xlsx(tmp_path / "resit.xlsx", resit)
    out = tmp_path / "new.csv"
    res = runner.invoke(app, ["data", "import", str(tmp_path / "resit.xlsx"), "--ungraded", "--against",
                              str(tmp_path / "items.csv"), "--out", str(out)])
    flat = " ".join(res.output.split())
    assert res.exit_code == 1 and not out.exists()
    assert "4 id(s) already name another answer in" in flat and "'q1/s101'" in flat and "--id-prefix" in flat
    text = _import(tmp_path / "resit.xlsx", out, "--ungraded", "--against", str(tmp_path / "items.csv"),
                   "--id-prefix", "spring26/")
    assert "made ids spring26/<question>/<student>" in text
    new = read_items(out)
    assert new["id"].tolist()[0] == "spring26/q1/s101"
    assert not set(new["id"]) & set(read_items(tmp_path / "items.csv")["id"])
    # the same answers imported again are no clash
    _import(tmp_path / "fall.xlsx", tmp_path / "again.csv", "--against", str(tmp_path / "items.csv"))
