"""Item tables, the Mohler loader (original UNT layout), the bundled concept passes, summaries and
`fetch_mohler` against local archives only (file://, plain paths and an HTTP server on 127.0.0.1)."""

from __future__ import annotations

import json
import math
import shutil
import zipfile
from pathlib import Path

import pandas as pd
import pytest

from rubrictool.data import (
    MOHLER_URL,
    describe_benchmark,
    describe_items,
    fetch_benchmark,
    fetch_mohler,
    load_benchmark,
    load_concept_passes,
    load_mohler,
    resolve_data_dir,
    round_half_up,
)
from rubrictool.errors import DataError
from rubrictool.io import read_table, write_table
from rubrictool.rubric import load_rubric
from rubrictool.tables import ITEM_COLUMNS, read_items, read_wide_labels, validate_items
from tests.support.files import build_archive, serve_folder

# -- Mohler loader --------------------------------------------------------------------------------------------


def test_mohler_counts(mohler_items: pd.DataFrame) -> None:
    assert len(mohler_items) == 2273
    assert mohler_items["question_id"].nunique() == 81
    excluded = {"4.6", "4.7", "8.5", "9.5", "9.7", "12.3"}  # marked '#' in data/docs/files
    assert excluded.isdisjoint(set(mohler_items["question_id"]))
    assert mohler_items["id"].is_unique
    assert list(mohler_items.columns[: len(ITEM_COLUMNS)]) == ITEM_COLUMNS
    validate_items(mohler_items, "mohler")  # a valid ItemTable: no empty responses, unique ids


def test_mohler_known_answer(mohler_items: pd.DataFrame) -> None:
    row = mohler_items.set_index("id").loc["1.1.0"]
    assert row["question"] == "What is the role of a prototype program in problem solving?"
    assert row["reference"] == "To simulate the behaviour of portions of the desired software product."
    assert row["response"] == (
        "High risk problems are address in the prototype program to make sure that the program is "
        "feasible. A prototype may also be used to show a company that the software can be possibly programmed."
    )
    # ave 3.5 (me 4, other 3) rounds half UP to 4 (Python's round() would give 4 here but 2 for 2.5)
    assert (row["score_ave"], row["grade"], row["grade_me"], row["grade_other"]) == (3.5, 4, 4.0, 3.0)
    assert list(mohler_items.set_index("id").loc["1.1.6", ["score_ave", "grade"]]) == [2.5, 3]


def test_mohler_exam_scores_are_normalised_to_0_5(mohler_items: pd.DataFrame) -> None:
    items = mohler_items.set_index("id")
    # data/scores/11.1: me 3, other 7.5 on 0..10; ave 3 on 0..5
    assert list(items.loc["11.1.0", ["grade_me", "grade_other", "score_ave", "grade"]]) == [1.5, 3.75, 3.0, 3]
    # data/scores/12.1: me 9, other 10
    assert list(items.loc["12.1.1", ["grade_me", "grade_other"]]) == [4.5, 5.0]
    assert items.loc["12.1.1", "question"] == "What is a pointer?"
    assert mohler_items["grade_me"].max() == 5.0 and mohler_items["grade_other"].max() == 5.0
    assert set(mohler_items["grade"]) == {0, 1, 2, 3, 4, 5}


def test_mohler_br_markup_stripped(mohler_items: pd.DataFrame) -> None:
    for col in ("question", "response", "reference"):
        assert not mohler_items[col].str.contains("<br", regex=False).any(), col
    r = str(mohler_items.set_index("id").loc["1.1.8", "response"])
    assert r.startswith("-To provide an example or model of how the finished program should perfom. -Provides")


def test_load_benchmark_and_missing_data(tmp_path: Path, data_dir: Path) -> None:
    assert len(load_benchmark("mohler", data_dir)) == 2273
    with pytest.raises(DataError, match="no loader for benchmark 'gsm8k'; available: mohler, asap2, mocha"):
        load_benchmark("gsm8k", data_dir)
    with pytest.raises(DataError, match=r"no Mohler data \(expected .*docs/files\)") as err:
        load_mohler(tmp_path)
    assert "rubrictool data fetch mohler" in (err.value.hint or "")


def test_mohler_corrupt_scores_are_reported(tmp_path: Path, data_dir: Path) -> None:
    root = shutil.copytree(data_dir / "mohler", tmp_path / "mohler")
    ave = root / "data" / "scores" / "2.1" / "ave"
    ave.write_text("\n".join(ave.read_text().split()[:-1]) + "\n")
    with pytest.raises(DataError, match=r"raw/2.1: (\d+) answers but \d+/\d+/\d+ scores"):
        load_mohler(tmp_path)


def test_resolve_data_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    assert resolve_data_dir(tmp_path) == tmp_path
    monkeypatch.setenv("RUBRICTOOL_DATA", str(tmp_path / "env"))
    assert resolve_data_dir() == tmp_path / "env"
    monkeypatch.delenv("RUBRICTOOL_DATA")
    assert resolve_data_dir() == Path("data")


def test_round_half_up() -> None:
    assert [round_half_up(x) for x in (0.5, 1.5, 2.5, 3.49, 4.5, 5.0)] == [1, 2, 3, 3, 5, 5]


# -- concept passes ---------------------------------------------------------------------------------------------------


def test_concept_passes_cover_every_item(mohler_items: pd.DataFrame, data_dir: Path) -> None:
    passes = load_concept_passes(data_dir)
    assert list(passes.columns) == ["item", "reviewer", "concept", "level", "source"]
    assert len(passes) == 3 * 2273 * 8
    assert sorted(passes["reviewer"].unique()) == ["A", "B", "C"]
    assert set(passes["concept"]) == set(load_rubric("mohler").keys)
    assert set(passes["level"]) <= {1, 2, 3} and (passes["source"] == "llm").all()
    for _, g in passes.groupby("reviewer"):
        assert set(g["item"]) == set(mohler_items["id"])
        assert not g.duplicated(["item", "concept"]).any()
    first = passes[(passes["item"] == "1.1.0") & (passes["reviewer"] == "A")].set_index("concept")["level"]
    assert first.to_dict() == {"FC": 2, "CC": 2, "TU": 2, "CP": 2, "R": 3, "DU": 2, "EE": 2, "FR": 2}


def test_concept_passes_come_from_the_data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RUBRICTOOL_DATA", str(tmp_path))
    with pytest.raises(DataError,
                       match=r"mohler-concepts/A\.jsonl: missing; put the three Mohler concept-label passes"):
        load_concept_passes()
    (tmp_path / "mohler-concepts").mkdir()
    for r in "ABC":
        (tmp_path / "mohler-concepts" / f"{r}.jsonl").write_text('{"id": "1.1.0", "FC": 2}\n')
    passes = load_concept_passes()
    assert passes["reviewer"].tolist() == ["A", "B", "C"] and (passes["source"] == "llm").all()


def test_read_wide_labels(tmp_path: Path) -> None:
    p = tmp_path / "ann.csv"
    p.write_text("id,FC,CC\n1,3,2\n2,1,\n")
    tidy = read_wide_labels(p, reviewer="ann", source="human")
    assert tidy.to_dict("records") == [
        {"item": "1", "reviewer": "ann", "concept": "FC", "level": 3, "source": "human"},
        {"item": "2", "reviewer": "ann", "concept": "FC", "level": 1, "source": "human"},
        {"item": "1", "reviewer": "ann", "concept": "CC", "level": 2.0, "source": "human"},
    ]
    (tmp_path / "noid.csv").write_text("x,FC\n1,2\n")
    with pytest.raises(DataError, match="no 'id' column"):
        read_wide_labels(tmp_path / "noid.csv")


# -- ItemTable I/O and errors in every format ------------------------------------------------------------------------

FORMATS = ["csv", "jsonl", "parquet"]


def _write(df: pd.DataFrame, path: Path) -> Path:
    if path.suffix == ".jsonl":  # write by hand so the file holds exactly these values
        path.write_text("".join(json.dumps(r) + "\n" for r in df.to_dict("records")))
        return path
    return write_table(df, path)


@pytest.mark.parametrize("fmt", FORMATS)
def test_item_table_round_trip(tmp_path: Path, fmt: str) -> None:
    df = pd.DataFrame({"id": ["a1", "007"], "question": ["Q?", "Q?"], "response": ["yes", "no, really"],
                       "grade": [5, 2]})
    items = read_items(write_table(df, tmp_path / f"items.{fmt}"))
    assert items["id"].tolist() == ["a1", "007"]  # ids stay strings (leading zeros kept)
    assert items["response"].tolist() == ["yes", "no, really"]
    assert items["grade"].tolist() == [5, 2]
    assert set(ITEM_COLUMNS) <= set(items.columns) and items["reference"].isna().all()


@pytest.mark.parametrize("fmt", FORMATS)
def test_missing_columns(tmp_path: Path, fmt: str) -> None:
    p = _write(pd.DataFrame({"id": ["1"], "answer": ["x"]}), tmp_path / f"items.{fmt}")
    with pytest.raises(DataError, match=rf"^{p}: missing column\(s\) response; .*found id, answer"):
        read_items(p)


@pytest.mark.parametrize("fmt", FORMATS)
def test_duplicate_ids(tmp_path: Path, fmt: str) -> None:
    p = _write(pd.DataFrame({"id": ["1", "2", "1"], "response": ["a", "b", "c"]}), tmp_path / f"items.{fmt}")
    with pytest.raises(DataError, match=rf"^{p}: duplicate id '1' at rows \[1, 3\]"):
        read_items(p)


@pytest.mark.parametrize("fmt", FORMATS)
def test_empty_responses_are_reported_not_dropped(tmp_path: Path, fmt: str) -> None:
    df = pd.DataFrame({"id": ["1", "2", "3", "4"], "response": ["ok", "", "  ", "fine"]})
    p = _write(df, tmp_path / f"items.{fmt}")
    with pytest.raises(DataError, match=rf"^{p}: row 2: 2 item\(s\) with an empty response \(2, 3\)"):
        read_items(p)


def test_non_numeric_grade_and_bad_files(tmp_path: Path) -> None:
    p = tmp_path / "g.csv"
    p.write_text("id,response,grade\n1,a,5\n2,b,high\n")
    with pytest.raises(DataError, match=r"g.csv: row 2: grade 'high' is not a number"):
        read_items(p)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "1", "response": "a"}\n{"id": 2,\n')
    with pytest.raises(DataError, match=r"bad.jsonl:2: invalid JSON"):
        read_table(bad)
    with pytest.raises(DataError, match="unknown table format '.xlsx'"):
        read_table(tmp_path / "x.xlsx")
    with pytest.raises(DataError, match="no such file"):
        read_table(tmp_path / "none.csv")


def test_write_table_is_atomic(tmp_path: Path) -> None:
    p = tmp_path / "t.parquet"
    write_table(pd.DataFrame({"id": ["1"], "response": ["a"]}), p)
    assert [f.name for f in tmp_path.iterdir()] == ["t.parquet"]  # no temp file left behind


# -- summaries ------------------------------------------------------------------------------------------------------


def test_describe_items_on_a_toy_table() -> None:
    df = pd.DataFrame({
        "id": ["1", "2", "3", "4"], "question_id": ["q1", "q1", "q2", "q2"],
        "response": ["one two", "one two three four", "x", "a b c"], "grade": [5, 5, 3, 0],
        "grade_me": [5.0, 4.0, 3.0, 0.0], "grade_other": [5.0, 5.0, 3.0, 2.0],
    })
    s = describe_items(df)
    assert (s["n_items"], s["n_questions"], s["mean_response_words"]) == (4, 2, 2.5)
    assert s["grade_histogram"] == {0: 1, 3: 1, 5: 2}
    g = s["graders"]
    assert g["exact_agreement"] == 0.5 and g["mean_abs_diff"] == 0.75 and g["within_one_point"] == 0.75
    a, b = [5.0, 4.0, 3.0, 0.0], [5.0, 5.0, 3.0, 2.0]
    ma, mb = sum(a) / 4, sum(b) / 4
    cov = sum((x - ma) * (y - mb) for x, y in zip(a, b))
    r = cov / math.sqrt(sum((x - ma) ** 2 for x in a) * sum((y - mb) ** 2 for y in b))
    assert g["pearson_r"] == pytest.approx(r, abs=1e-4)
    assert describe_items(df.drop(columns=["grade_me"]))["graders"] is None


def test_describe_mohler(data_dir: Path, mohler_items: pd.DataFrame) -> None:
    s = describe_benchmark("mohler", data_dir)
    assert s["n_items"] == 2273 and s["n_questions"] == 81
    assert sum(s["grade_histogram"].values()) == 2273
    assert s["grade_histogram"] == mohler_items["grade"].value_counts().to_dict()
    g = s["graders"]
    assert g["n"] == 2273 and 0 < g["exact_agreement"] < 1 and 0 < g["pearson_r"] < 1
    assert g["exact_agreement"] == round(float((mohler_items["grade_me"] == mohler_items["grade_other"]).mean()), 4)


# -- fetch (local archives only; never the network) ----------------------------------------------------------------


@pytest.fixture(scope="module")
def archives(tmp_path_factory: pytest.TempPathFactory, data_dir: Path) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("archives")
    src = data_dir / "mohler"
    return {
        "zip": build_archive(src, d / "ShortAnswerGrading_v2.0.zip"),
        "tar": build_archive(src, d / "ShortAnswerGrading_v2.0.tar.gz", kind="tar"),
        "flat": build_archive(src, d / "flat.zip", prefix="."),
    }


def _leftovers(dest: Path) -> list[str]:
    return sorted(p.name for p in dest.iterdir() if p.name != "mohler")


def test_default_url_is_the_authors_archive() -> None:
    assert MOHLER_URL.endswith("/ShortAnswerGrading_v2.0.zip") and MOHLER_URL.startswith("http")


def test_fetch_file_url_then_idempotent(tmp_path: Path, archives: dict[str, Path]) -> None:
    dest = tmp_path / "data"
    path, fetched = fetch_mohler(dest, archives["zip"].as_uri())
    assert fetched and path == dest / "mohler"
    assert len(load_mohler(dest)) == 2273 and (path / "README").is_file()
    assert _leftovers(dest) == []
    stamp = (path / "data" / "docs" / "files").stat().st_mtime_ns
    again, fetched = fetch_mohler(dest, "file:///does/not/exist.zip")  # present → the URL is not even read
    assert (again, fetched) == (path, False)
    assert (path / "data" / "docs" / "files").stat().st_mtime_ns == stamp


@pytest.mark.parametrize("kind", ["tar", "flat"])
def test_fetch_local_path_tar_and_flat_layouts(tmp_path: Path, archives: dict[str, Path], kind: str) -> None:
    _, fetched = fetch_benchmark("mohler", tmp_path, str(archives[kind]))
    assert fetched and len(load_mohler(tmp_path)) == 2273
    assert archives[kind].is_file()  # a local archive is never deleted


def test_fetch_over_http_with_progress(tmp_path: Path, archives: dict[str, Path]) -> None:
    seen: list[tuple[int, int | None]] = []
    with serve_folder(archives["zip"].parent) as base:
        _, fetched = fetch_mohler(
            tmp_path, f"{base}/{archives['zip'].name}", progress=lambda p: seen.append((p.done, p.total))
        )
        assert fetched and len(load_mohler(tmp_path)) == 2273
        size = archives["zip"].stat().st_size
        assert seen and seen[-1] == (size, size)
        assert _leftovers(tmp_path) == []  # the downloaded temp file is gone
        with pytest.raises(DataError, match=r"nope.zip: HTTP 404"):
            fetch_mohler(tmp_path / "other", f"{base}/nope.zip")
        assert _leftovers(tmp_path / "other") == []


def test_fetch_force_replaces_existing_copy(tmp_path: Path, archives: dict[str, Path]) -> None:
    fetch_mohler(tmp_path, str(archives["zip"]))
    marker = tmp_path / "mohler" / "stale.txt"
    marker.write_text("old")
    _, fetched = fetch_mohler(tmp_path, str(archives["zip"]), force=True)
    assert fetched and not marker.exists() and len(load_mohler(tmp_path)) == 2273
    assert _leftovers(tmp_path) == []


def test_fetch_rejects_bad_sources(tmp_path: Path, data_dir: Path) -> None:
    not_archive = tmp_path / "notes.zip"
    not_archive.write_text("hello")
    with pytest.raises(DataError, match="not a zip or tar archive"):
        fetch_mohler(tmp_path / "d1", str(not_archive))
    wrong = tmp_path / "wrong.zip"
    with zipfile.ZipFile(wrong, "w") as zf:
        zf.writestr("something/else.txt", "x")
    with pytest.raises(DataError, match="holds no data/docs/files"):
        fetch_mohler(tmp_path / "d2", str(wrong))
    with pytest.raises(DataError, match="no such archive"):
        fetch_mohler(tmp_path / "d3", str(tmp_path / "missing.zip"))
    with pytest.raises(DataError, match="unsupported URL scheme"):
        fetch_mohler(tmp_path / "d4", "ftp://example.org/x.zip")
    with pytest.raises(DataError, match="no download for benchmark 'gsm8k'"):
        fetch_benchmark("gsm8k", tmp_path)


def test_fetch_keeps_nothing_when_the_archive_does_not_load(tmp_path: Path, data_dir: Path) -> None:
    broken = shutil.copytree(data_dir / "mohler", tmp_path / "src")
    (broken / "data" / "scores" / "3.1" / "me").write_text("1\n")
    archive = build_archive(broken, tmp_path / "broken.zip")
    dest = tmp_path / "dest"
    with pytest.raises(DataError, match="scores"):
        fetch_mohler(dest, str(archive))
    assert not (dest / "mohler").exists() and _leftovers(dest) == []


def test_mohler_empty_answer_is_reported_not_dropped(tmp_path: Path, data_dir: Path) -> None:
    root = shutil.copytree(data_dir / "mohler", tmp_path / "mohler")
    raw = root / "data" / "raw" / "2.1"
    lines = raw.read_text().splitlines()
    lines[2] = "2.1 <br>"
    raw.write_text("\n".join(lines) + "\n")
    with pytest.raises(DataError, match=r"row \d+: 1 item\(s\) with an empty response \(2\.1\.2\)"):
        load_mohler(tmp_path)


def test_csv_row_with_extra_fields_is_an_error(tmp_path: Path) -> None:
    p = tmp_path / "ragged.csv"
    p.write_text("id,response\n1,yes, and no\n")
    with pytest.raises(DataError, match=r"ragged.csv: a row has more fields than the header; quote text"):
        read_items(p)


def test_the_synthetic_mohler_table_is_a_valid_table_of_the_rubric_and_seeded() -> None:
    """rubrictool.data.synthetic_mohler_table (the benchmarks' smoke data): every concept of the Mohler rubric at a
    level 1..3, grades 0..5 that rise with the levels, the asked number of questions, the same table for one seed."""
    from rubrictool.data import synthetic_mohler_table
    from rubrictool.train import prepare_table

    keys = [c.key for c in load_rubric("mohler").concepts]
    df = synthetic_mohler_table(60, questions=6, seed=3)
    assert len(df) == 60 and df["question"].nunique() == 6 and df["id"].is_unique
    assert df[keys].isin([1, 2, 3]).all().all() and df["grade"].between(0, 5).all()
    by_sum = df.assign(total=df[keys].sum(1)).sort_values("total")
    assert by_sum["grade"].is_monotonic_increasing and by_sum["grade"].nunique() >= 3  # the grade follows the levels
    prepare_table(df, load_rubric("mohler"), need_concepts=True)  # accepted as a training table
    assert synthetic_mohler_table(60, questions=6, seed=3).equals(df)
    assert not synthetic_mohler_table(60, questions=6, seed=4).equals(df)
