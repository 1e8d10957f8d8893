"""`rubrictool data import`: a course's own file (XLSX/CSV/JSONL/Parquet, its own headers) → an ItemTable.

The fixture is a small science course, not Mohler: headers answer/reference_answer/correct, a student id
repeated across questions, one empty answer, grades 0-2, a second sheet.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from rubrictool.cli import app
from rubrictool.data.importer import import_items, parse_columns, read_course_file, write_course_items
from rubrictool.errors import DataError
from rubrictool.io import read_table
from rubrictool.tables import read_items

runner = CliRunner()

QUESTIONS = {
    "What does a plant need for photosynthesis?": "Light, water and carbon dioxide.",
    "What causes erosion of a river bank?": "Flowing water carries soil and rock away.",
}
ANSWERS = [
    ["sunlight water and CO2", "light and water", "soil", "Light, water and carbon dioxide, in the leaves", "  "],
    ["water moving takes the soil", "wind", "the river water carries sand away", "rocks",
     "water moving takes the soil"],
]
GRADES = [[2, 1, 0, 2, 0], [2, 0, 2, 0, 2]]


def science_frame() -> pd.DataFrame:
    rows = []
    for (q, ref), answers, grades in zip(QUESTIONS.items(), ANSWERS, GRADES, strict=True):
        for i, (a, g) in enumerate(zip(answers, grades, strict=True)):
            rows.append({"Student ID": f"s{i + 1}", "Question": q, "answer": a, "reference_answer": ref,
                         "correct": g, "Teacher note": "ok" if g == 2 else None})
    return pd.DataFrame(rows)


@pytest.fixture
def science_xlsx(tmp_path: Path) -> Path:
    path = tmp_path / "science.xlsx"
    with pd.ExcelWriter(path) as w:
        science_frame().to_excel(w, sheet_name="answers", index=False)
        pd.DataFrame({"remark": ["graded by two teachers"]}).to_excel(w, sheet_name="notes", index=False)
    return path


def invoke(*args: str) -> tuple[int, str]:
    res = runner.invoke(app, ["data", "import", *args])
    return res.exit_code, res.output


def test_xlsx_course_guesses_columns_makes_ids_and_refuses_empty_answers_before_writing(
    science_xlsx: Path, tmp_path: Path
) -> None:
    out = tmp_path / "items.csv"
    code, text = invoke(str(science_xlsx), "--out", str(out))
    assert code == 1
    assert not out.exists()  # nothing written
    flat = " ".join(text.split())
    # the report came first: mapping, ids, grade scale, the empty answer with its row and made id
    assert "response <- 'answer' (guessed)" in flat and "grade <- 'correct' (guessed)" in flat
    assert "reference <- 'reference_answer' (guessed)" in flat and "question <- 'Question' (guessed)" in flat
    assert "other sheets: 'notes'" in flat
    assert "student <- 'Student ID' (guessed)" in flat and "made ids <question>/<student>" in flat
    assert "grade ('correct'): 0..2, integers" in flat
    assert re.search(r"empty responses: 1: row 6 \(id q[0-9a-f]{6}/s5\)", flat)  # spreadsheet row 6 (header row 1)
    assert "--drop-empty" in flat

    code, text = invoke(str(science_xlsx), "--out", str(out), "--drop-empty")
    assert code == 0, text
    items = read_items(out)  # the reader every later stage uses
    assert len(items) == 9
    q1, q2 = (items.loc[items["question"] == q, "id"].str.split("/").str[0].iloc[0] for q in QUESTIONS)
    assert items["id"].tolist()[:4] == [f"{q1}/s{i}" for i in (1, 2, 3, 4)]
    assert items["id"].is_unique and q1 != q2
    assert items.loc[items["id"] == f"{q2}/s5", "student"].item() == "s5"
    assert items.loc[items["id"] == f"{q1}/s2", "grade"].item() == 1
    assert set(items["reference"]) == set(QUESTIONS.values())
    assert "Teacher note" in items.columns
    assert "1 empty response(s) left out" in " ".join(text.split())


def test_imported_table_feeds_later_stages(science_xlsx: Path, tmp_path: Path) -> None:
    out = tmp_path / "items.jsonl"
    assert invoke(str(science_xlsx), "--out", str(out), "--drop-empty")[0] == 0
    split = tmp_path / "split.json"
    res = runner.invoke(app, ["data", "split", str(out), "--ratios", "0.6,0.2,0.2", "--out", str(split)])
    assert res.exit_code == 0, res.output
    parts = json.loads(split.read_text())
    assert sorted(parts["train"] + parts["dev"] + parts["test"]) == sorted(read_items(out)["id"])
    res = runner.invoke(app, ["data", "show", str(out), "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)["grade_histogram"] == {"0": 3, "1": 1, "2": 5}


def test_explicit_columns_on_a_csv_with_other_headers(tmp_path: Path) -> None:
    src = tmp_path / "quiz.csv"
    pd.DataFrame({
        "Item": ["Q1", "Q1", "Q2"], "Learner text": ["mean is 3", "median", "sd 2"],
        "Key": ["3", "3", "2"], "Points (0-10)": [10, 4, 7], "Code": ["a1", "a2", "a3"],
    }).to_csv(src, index=False)
    out = tmp_path / "items.parquet"
    code, text = invoke(str(src), "--out", str(out), "--columns", "response=learner text,grade=Points (0-10),id=Code")
    assert code == 0, text
    items = read_items(out)
    assert items["id"].tolist() == ["a1", "a2", "a3"]  # unique ids are kept
    assert items["grade"].tolist() == [10, 4, 7]
    assert items["question"].tolist() == ["Q1", "Q1", "Q2"]  # guessed from "Item"
    assert items["reference"].tolist() == ["3", "3", "2"]  # guessed from "Key"
    assert "ids: column 'Code', all unique" in " ".join(text.split())


def test_made_ids_use_short_question_tokens_and_grade_can_be_left_out(tmp_path: Path) -> None:
    src = tmp_path / "q.jsonl"
    src.write_text("".join(json.dumps({"prompt": q, "student_answer": a, "score": g}) + "\n"
                           for q, a, g in [("Q7", "x", 1), ("Q7", "y", 0), ("Q9", "z", 1)]))
    imported = import_items(src, tmp_path / "items.csv", columns="grade=", ungraded=True)
    tails = [i.split("/")[1] for i in imported.items["id"]]
    assert [i.split("/")[0] for i in imported.items["id"]] == ["Q7", "Q7", "Q9"]  # no student: a hash of the answer
    assert all(re.fullmatch(r"a[0-9a-f]{8}", t) for t in tails) and len(set(tails)) == 3
    assert imported.report.ids == "made" and "grade" not in imported.report.mapping
    assert "score" in imported.items.columns  # kept as an extra column, not used as the grade


def test_repeated_rows_and_scale_reported_in_a_dry_run(tmp_path: Path) -> None:
    src = tmp_path / "c.csv"
    pd.DataFrame({"response": ["a b", "c d", "a b"], "question": ["q", "q", "q"], "grade": ["1", "TRUE", "1"]}).to_csv(
        src, index=False
    )
    out = tmp_path / "items.csv"
    code, text = invoke(str(src), "--out", str(out), "--dry-run")
    assert code == 0, text
    assert not out.exists()
    flat = " ".join(text.split())
    assert "repeated rows: 1 row(s) repeat an earlier row in every column: row 3 = row 1" in flat
    assert "true/false read as 1/0" in flat
    assert "dry run: nothing written" in flat


@pytest.mark.parametrize(
    ("args", "expect"),
    [
        (["--columns", "response=antwort"], ["no column 'antwort'", "its headers: 'Student ID', 'Question', 'answer'"]),
        (["--columns", "answer=answer"], ["'answer' is not an item table column"]),
        (["--sheet", "Sheet9"], ["no sheet 'Sheet9'", "its sheets: 'answers', 'notes'"]),
        (["--columns", "response="], ["no column for the students' answers", "--columns response=HEADER"]),
        # the answers are on the first sheet; the notes sheet has none: name the other sheets and --sheet
        (["--sheet", "notes"], [("no column for the students' answers among the headers of sheet 'notes' (the "
                                "workbook's other sheets: 'answers') ('remark')"), "pick the sheet with --sheet NAME"]),
    ],
)
def test_one_line_errors_name_the_file_and_the_fix(science_xlsx: Path, tmp_path: Path, args: list[str],
                                                   expect: list[str]) -> None:
    code, text = invoke(str(science_xlsx), "--out", str(tmp_path / "o.csv"), *args)
    assert code == 1
    flat = " ".join(text.split())
    assert "Traceback" not in text
    assert "science.xlsx" in flat or "--columns:" in flat  # the file, or the option at fault
    for e in expect:
        assert e in flat
    assert not (tmp_path / "o.csv").exists()


def test_nul_byte_names_row_and_column(tmp_path: Path) -> None:
    src = tmp_path / "nul.csv"
    src.write_bytes(b"answer,grade\nfine,1\nbro\x00ken,2\n")
    with pytest.raises(DataError, match=r"nul.csv: row 2, column 'answer': the cell contains a NUL byte"):
        read_course_file(src)


def test_bad_grade_and_bad_type_and_same_file(tmp_path: Path) -> None:
    src = tmp_path / "g.csv"
    pd.DataFrame({"answer": ["a", "b"], "mark": ["1", "B+"]}).to_csv(src, index=False)
    with pytest.raises(DataError, match=r"row 2, column 'mark': grade 'B\+' is not a number"):
        read_course_file(src)
    with pytest.raises(DataError, match=r"unknown file type '.xls'.*save it as .xlsx"):
        read_course_file(tmp_path / "old.xls")
    ok = tmp_path / "ok.csv"
    pd.DataFrame({"answer": ["a"], "mark": [1]}).to_csv(ok, index=False)
    code, text = invoke(str(ok), "--out", str(ok))
    assert code == 1 and "would overwrite the input" in " ".join(text.split())


def test_parse_columns() -> None:
    assert parse_columns("response=answer, grade=correct,question=") == {
        "response": "answer", "grade": "correct", "question": None
    }
    with pytest.raises(DataError, match="not COLUMN=HEADER"):
        parse_columns("response")


@pytest.mark.parametrize("suffix", [".csv", ".tsv", ".jsonl", ".parquet", ".xlsx"])
def test_every_format_gives_the_same_item_table(tmp_path: Path, suffix: str) -> None:
    df = pd.DataFrame({
        "  Student Answer ": ["light and water", "soil", "wind"],  # headers as teachers type them
        "MODEL-ANSWER": ["light, water, CO2", "light, water, CO2", "moving water"],
        "Score": [2, 0, 1],
        "Question ID": ["P1", "P1", "E1"],
        "Student": [101, "s2", None],  # mixed types in an extra column: kept as text
    })
    src = tmp_path / f"course{suffix}"
    if suffix == ".csv":
        df.to_csv(src, index=False)
    elif suffix == ".tsv":
        df.to_csv(src, index=False, sep="\t")
    elif suffix == ".jsonl":
        df.to_json(src, orient="records", lines=True)
    elif suffix == ".parquet":
        df.assign(Student=df["Student"].astype("string")).to_parquet(src, index=False)  # Parquet: one type a column
    else:
        df.to_excel(src, index=False)
    imported = read_course_file(src)
    assert imported.report.mapping == {"question": "Question ID", "response": "Student Answer",
                                       "reference": "MODEL-ANSWER", "grade": "Score", "student": "Student"}
    items = imported.items
    assert items["id"].tolist()[:2] == ["P1/101", "P1/s2"] and items["id"].iloc[2].startswith("E1/a")
    assert items["response"].tolist() == ["light and water", "soil", "wind"]
    assert items["grade"].tolist() == [2, 0, 1]
    assert imported.report.grade["histogram"] == {"0": 1, "1": 1, "2": 1}
    out = write_course_items(imported, tmp_path / "items.parquet")
    assert read_items(out)["student"].tolist()[:2] == ["101", "s2"]


# ---------------------------------------------------------------------------- grades a grader can learn from
def _quiz_book(tmp_path: Path, scores: list[object] | None = None, drop_scores: bool = False) -> Path:
    """The statistics quiz's gradebook (headers 'Student', 'Q#', 'Answer', 'Score (0-5)'), scores replaced if given."""
    from tests.support.quiz_course import quiz_marks, write_quiz_xlsx

    marks = quiz_marks()
    if scores is not None:
        marks["Score (0-5)"] = pd.Series((scores * len(marks))[: len(marks)], index=marks.index, dtype=object)
    if drop_scores:
        marks = marks.drop(columns="Score (0-5)")
    write_quiz_xlsx(tmp_path / "quiz.xlsx", marks)
    return tmp_path / "quiz.xlsx"


def test_a_header_with_its_scale_is_the_grade(tmp_path: Path) -> None:
    src = _quiz_book(tmp_path)
    out = tmp_path / "items.csv"
    code, text = invoke(str(src), "--out", str(out))
    assert code == 0, text
    flat = " ".join(text.split())
    assert "grade <- 'Score (0-5)' (guessed)" in flat and "the header says 0..5" in flat
    assert read_items(out)["grade"].between(0, 5).all()


@pytest.mark.parametrize(("header", "scale"), [("Score (0-5)", (0, 5)), ("Mark [0–10]", (0, 10)),
                                               ("Points /20", (0, 20)),
                                               ("Score out of 4", (0, 4)), ("Grade (max 6)", (0, 6)), ("Grade", None),
                                               ("Grade (final)", None)])
def test_header_scale(header: str, scale: tuple[int, int] | None) -> None:
    from rubrictool.data.importer import header_scale

    assert header_scale(header) == scale


def test_no_grade_column_is_refused_unless_the_answers_are_to_be_graded(tmp_path: Path) -> None:
    src = _quiz_book(tmp_path, drop_scores=True)
    out = tmp_path / "items.csv"
    code, text = invoke(str(src), "--out", str(out))
    flat = " ".join(text.split())
    assert code == 1 and not out.exists()
    assert "no grade column found" in flat and "nothing written" in flat
    assert "--columns grade=HEADER" in flat and "--ungraded" in flat
    code, text = invoke(str(src), "--out", str(out), "--ungraded")
    assert code == 0, text
    assert "grade" not in read_items(out).columns or read_items(out)["grade"].isna().all()
    # --ungraded on a file that has grades contradicts itself
    code, text = invoke(str(_quiz_book(tmp_path)), "--out", str(tmp_path / "x.csv"), "--ungraded")
    assert code == 1 and "holds grades" in " ".join(text.split()) and not (tmp_path / "x.csv").exists()


def test_half_marks_are_refused_with_the_fix_and_scaled_or_rounded_on_request(tmp_path: Path) -> None:
    src = _quiz_book(tmp_path, scores=[2.5, 3, 4.5, 1])
    out = tmp_path / "items.csv"
    code, text = invoke(str(src), "--out", str(out))
    flat = " ".join(text.split())
    assert code == 1 and not out.exists()
    assert "grade(s) are not whole numbers (row 2: 2.5)" in flat and "nothing written" in flat
    assert "--grade-scale 2" in flat and "--round-grades" in flat and "--columns grade=HEADER" in flat
    code, text = invoke(str(src), "--out", str(out), "--grade-scale", "2")
    assert code == 0, text
    assert sorted(set(read_items(out)["grade"])) == [2, 5, 6, 9]
    code, text = invoke(str(src), "--out", str(out), "--round-grades")
    assert code == 0, text
    assert sorted(set(read_items(out)["grade"])) == [1, 3, 5]  # 2.5 -> 3, 4.5 -> 5 (half up)
    assert "rounded half up (--round-grades)" in " ".join(text.split())
    src = _quiz_book(tmp_path, scores=["3", "B+"])  # not a number: refused, the fix named
    code, text = invoke(str(src), "--out", str(out))
    assert code == 1 and "is not a number" in text and "--columns grade=HEADER" in " ".join(text.split())


def test_keep_empty_imports_empty_answers_for_grade_to_flag(tmp_path: Path) -> None:
    from tests.support.quiz_course import quiz_marks, write_quiz_xlsx

    marks = quiz_marks(graded=False)
    marks.loc[[3, 7], "Answer"] = ""
    write_quiz_xlsx(tmp_path / "new.xlsx", marks)
    out = tmp_path / "new.csv"
    code, text = invoke(str(tmp_path / "new.xlsx"), "--out", str(out), "--ungraded")
    assert code == 1 and "--keep-empty" in text and not out.exists()
    code, text = invoke(str(tmp_path / "new.xlsx"), "--out", str(out), "--ungraded", "--keep-empty")
    assert code == 0, text
    assert "2 empty response(s) kept: `grade` flags them" in " ".join(text.split())
    items = read_table(out)
    assert len(items) == 48 and items["response"].isna().sum() == 2


def test_train_on_a_table_without_grades_names_the_import_fix(tmp_path: Path) -> None:
    from rubrictool.adjudicate.outputs import trainable_rows
    from rubrictool.rubric import load_rubric

    table = pd.DataFrame({"id": ["a", "b"], "question": ["q", "q"], "response": ["x", "y"], "grade": [None, None],
                          **{k: [1, 2] for k in load_rubric("mohler").keys}})
    with pytest.raises(DataError) as e:
        trainable_rows(table, load_rubric("mohler"), "adjudicated.csv")
    assert "grade column is empty" in str(e.value) and "--columns grade=HEADER" in (e.value.hint or "")
    table.to_csv(tmp_path / "adjudicated.csv", index=False)
    res = runner.invoke(app, ["train", "--rubric", "mohler", "--table", str(tmp_path / "adjudicated.csv"), "--out",
                              str(tmp_path / "run")])
    flat = " ".join(res.output.split())
    assert res.exit_code == 1 and "--columns grade=HEADER" in flat and "--items" not in flat.split(";")[0]


@pytest.mark.parametrize("fmt", ["csv", "xlsx"])
@pytest.mark.parametrize("case", ["repeated", "empty"])
def test_a_repeated_or_empty_id_is_refused_naming_the_row_a_spreadsheet_shows(tmp_path: Path, fmt: str,
                                                                               case: str) -> None:
    rows: list[list[str | int | None]] = [
        ["id", "answer", "mark"], ["a1", "goggles", 2], ["a2", "gloves", 1], [None, None, None],
        ["a1" if case == "repeated" else None, "a fume hood", 2]]
    src = tmp_path / f"marks.{fmt}"
    if fmt == "xlsx":
        from openpyxl import Workbook

        wb = Workbook()
        for row in [[None, None, None], *rows]:  # a blank row above the header: the header is row 2
            wb.active.append(row)
        wb.save(src)
    else:  # a blank line above the header, and a blank line inside the data, as a spreadsheet saves them
        lines = [",".join("" if v is None else str(v) for v in r) for r in rows]
        src.write_text("\n" + "\n".join(lines) + "\n")
    out = tmp_path / "items.csv"
    code, text = invoke(str(src), "--out", str(out))
    flat = " ".join(text.split())
    assert code == 1 and "Traceback" not in text and not out.exists(), text
    expect = "row 3 and row 6: the id 'a1'" if case == "repeated" else "row 6: empty id in column 'id'"
    assert expect in flat and "the header being row 2" in flat and "--columns id=" in flat, flat
    code, text = invoke(str(src), "--out", str(out), "--columns", "id=")  # the fix it names: ids made
    assert code == 0, text
    items = read_table(out)
    assert items["id"].is_unique and list(items["source_id"].fillna("")) == [
        "a1", "a2", "a1" if case == "repeated" else ""]


def test_made_ids_stay_as_they_are(tmp_path: Path) -> None:
    src = tmp_path / "marks.csv"
    src.write_text("student,question,answer,mark\ns1,Q1,goggles,2\ns1,Q1,gloves,1\n")  # no id column
    imported = read_course_file(src)
    assert imported.report.ids == "made" and imported.items["id"].is_unique
