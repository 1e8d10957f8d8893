"""The ASAP 2.0 and MOCHA loaders and downloads on small releases built in their published layouts
(tests/support/benchmarks.py): counts, one known item, the extra columns kept, and a clear error naming
the file for malformed and partial archives. Downloads come only from local files and 127.0.0.1."""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import http.server
import json
import threading
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest

from rubrictool.data import (
    ASAP2_KAGGLE_URL,
    ASAP2_URL,
    BENCHMARKS,
    MOCHA_URL,
    describe_benchmark,
    fetch_benchmark,
    load_asap2,
    load_benchmark,
    load_mocha,
    split_items,
)
from rubrictool.data.asap2 import ASAP2
from rubrictool.data.fetch import fetch_archive
from rubrictool.errors import DataError
from rubrictool.rubric import load_rubric
from rubrictool.tables import ITEM_COLUMNS
from tests.support.benchmarks import (
    DEMOGRAPHICS,
    asap2_csv_text,
    asap2_kaggle_zip,
    asap2_release_zip,
    asap2_rows,
    mocha_docs,
    mocha_tar,
)
from tests.support.files import serve_folder


def _leftovers(dest: Path, keep: str) -> list[str]:
    return sorted(p.name for p in dest.iterdir() if p.name != keep)


def test_benchmarks_is_the_one_list() -> None:
    assert BENCHMARKS == ("mohler", "asap2", "mocha")
    for name in BENCHMARKS:
        load_rubric(name)  # every benchmark has its bundled rubric
    assert ASAP2_URL.startswith("https://github.com/scrosseye/ASAP_2.0/") and ASAP2_URL.endswith(".zip")
    assert MOCHA_URL.endswith("anthonywchen/MOCHA/raw/main/data/mocha.tar.gz")
    assert ASAP2_KAGGLE_URL.endswith("learning-agency-lab-automated-essay-scoring-2")


# -- ASAP 2.0 -------------------------------------------------------------------------------------------------


@pytest.fixture
def asap2_dir(tmp_path: Path) -> Path:
    fetch_benchmark("asap2", tmp_path, str(asap2_release_zip(tmp_path / "src" / "ASAP_2_Final_github_train.zip")))
    return tmp_path


def test_asap2_release_counts_known_essay_and_extra_columns(asap2_dir: Path) -> None:
    rows = asap2_rows()
    items = load_asap2(asap2_dir)
    assert len(items) == len(rows) and items["id"].is_unique
    assert list(items.columns[: len(ITEM_COLUMNS)]) == ITEM_COLUMNS
    row = items.set_index("id").loc["0a0d11b"]  # the fourth essay: score 4
    src = rows[3]
    assert row["question"] == src["assignment"]  # the essay prompt
    assert row["response"] == src["full_text"] and "\n\n" in row["response"]  # paragraphs kept
    assert row["grade"] == 4 and items["grade"].dtype.kind == "i"
    assert pd.isna(row["reference"]) and pd.isna(row["context"])
    for col in [*DEMOGRAPHICS, "prompt_name", "essay_word_count"]:  # every other column of the release is kept
        assert col in items.columns, col
        assert str(row[col]) == str(src[col]), col
    assert pd.isna(items.set_index("id").loc[rows[5]["essay_id"], "ell_status"])  # an empty field stays empty
    assert (items["source_file"] == "ASAP_2_Final_github_train.csv").all()
    assert sorted(items["grade"].unique()) == [1, 2, 3, 4, 5, 6]
    assert load_rubric("asap2").grade.min == 1 and load_rubric("asap2").grade.max == 6


def test_asap2_kaggle_layout(tmp_path: Path) -> None:
    path, fetched = fetch_benchmark("asap2", tmp_path, str(asap2_kaggle_zip(tmp_path / "src" / "aes2.zip")))
    assert fetched and (path / "train.csv").is_file() and (path / "test.csv").is_file()
    items = load_benchmark("asap2", tmp_path)
    assert len(items) == len(asap2_rows()) and items["question"].isna().all()  # the competition has no prompt
    assert items.set_index("id").loc["0a0d11b", "grade"] == 4
    assert "prompt_name" not in items.columns


def test_asap2_release_preferred_over_competition_file(tmp_path: Path) -> None:
    d = tmp_path / "asap2"
    d.mkdir()
    (d / "train.csv").write_text("essay_id,full_text,score\nx1,only in the competition,2\n")
    (d / "ASAP_2_Final_github_train.csv").write_text(asap2_csv_text(asap2_rows(6)))
    assert len(load_asap2(tmp_path)) == 6


def test_asap2_missing_data_says_where_and_how(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"no ASAP 2\.0 data \(expected .*asap2/ASAP_2_Final_github_train\.csv\)") as e:
        load_benchmark("asap2", tmp_path)
    assert "rubrictool data fetch asap2" in (e.value.hint or "")


def _asap2_text(kind: str) -> str:
    rows = asap2_rows(6)
    if kind == "no score column":
        return asap2_csv_text(rows).replace("essay_id,score,", "essay_id,points,", 1)
    if kind == "cut short":  # the download stopped inside a quoted, multi-paragraph essay
        text = asap2_csv_text(rows)
        return text[: text.index(rows[4]["full_text"]) + 20]
    rows[2]["score"] = {"half score": 3.5, "no score": ""}[kind]
    return asap2_csv_text(rows)


@pytest.mark.parametrize(
    ("kind", "message"),
    [
        ("no score column", r"ASAP_2_Final_github_train\.csv: missing column\(s\) score; ASAP 2\.0 files have"),
        ("cut short", r"ASAP_2_Final_github_train\.csv: cannot read as CSV \(.*\); the file is damaged or cut short"),
        ("half score",
         r"ASAP_2_Final_github_train\.csv: row 3 \(essay 0a0d11a\): score 3\.5 is not a whole number 1\.\.6"),
        ("no score", r"ASAP_2_Final_github_train\.csv: row 3 \(essay 0a0d11a\): no score"),
    ],
)
def test_asap2_malformed_file_is_one_clear_error(tmp_path: Path, kind: str, message: str) -> None:
    d = tmp_path / "asap2"
    d.mkdir()
    (d / "ASAP_2_Final_github_train.csv").write_text(_asap2_text(kind))
    with pytest.raises(DataError, match=message):
        load_asap2(tmp_path)


def test_asap2_empty_essay_is_reported_not_dropped(tmp_path: Path) -> None:
    rows = asap2_rows(6)
    rows[2]["full_text"] = "   "
    d = tmp_path / "asap2"
    d.mkdir()
    (d / "ASAP_2_Final_github_train.csv").write_text(asap2_csv_text(rows))
    with pytest.raises(DataError, match=r"row 3: 1 item\(s\) with an empty response \(0a0d11a\)"):
        load_asap2(tmp_path)


def test_asap2_fetch_rejects_partial_or_wrong_archives(tmp_path: Path) -> None:
    wrong = tmp_path / "wrong.zip"
    with zipfile.ZipFile(wrong, "w") as zf:
        zf.writestr("ASAP_2_source_texts/venus.txt", "the source texts, not the essays")
    with pytest.raises(DataError, match=r"wrong\.zip: the archive holds no ASAP_2_Final_github_train\.csv or") as e:
        fetch_benchmark("asap2", tmp_path / "d1", str(wrong))
    assert "put the CSV in <data dir>/asap2/" in (e.value.hint or "")
    cut = asap2_csv_text(asap2_rows(6))
    broken = asap2_release_zip(tmp_path / "broken.zip", csv_text=cut.replace("essay_id,score", "essay_id,points"))
    with pytest.raises(DataError, match=r"ASAP_2_Final_github_train\.csv: missing column\(s\) score"):
        fetch_benchmark("asap2", tmp_path / "d2", str(broken))
    assert not (tmp_path / "d2" / "asap2").exists() and _leftovers(tmp_path / "d2", "asap2") == []
    encrypted = tmp_path / "enc.zip"  # the release's test file is a password-protected zip
    data = bytearray(asap2_release_zip(tmp_path / "plain.zip").read_bytes())
    data[6] |= 1  # set the "encrypted" flag of the first local header and of its central directory entry
    cd = data.rfind(b"PK\x01\x02", 0, data.rfind(b"PK\x01\x02"))
    data[cd + 8] |= 1
    encrypted.write_bytes(bytes(data))
    with pytest.raises(DataError, match=r"enc\.zip: cannot extract \(.*encrypted"):
        fetch_benchmark("asap2", tmp_path / "d3", str(encrypted))


def test_asap2_fetch_a_bare_csv_and_idempotent(tmp_path: Path) -> None:
    csv_path = tmp_path / "dl" / "ASAP_2_Final_github_train.csv"
    csv_path.parent.mkdir()
    csv_path.write_text(asap2_csv_text(asap2_rows(12)))
    path, fetched = fetch_benchmark("asap2", tmp_path / "data", csv_path.as_uri())
    assert fetched and len(load_asap2(tmp_path / "data")) == 12 and csv_path.is_file()
    assert fetch_benchmark("asap2", tmp_path / "data", "file:///nowhere.zip") == (path, False)


def test_asap2_kaggle_needs_credentials_from_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KAGGLE_USERNAME", raising=False)
    monkeypatch.delenv("KAGGLE_KEY", raising=False)
    with pytest.raises(DataError, match=r"needs credentials: set KAGGLE_USERNAME and KAGGLE_KEY") as e:
        fetch_benchmark("asap2", tmp_path, "kaggle")  # raised before any connection is attempted
    assert "kaggle.com/competitions/learning-agency-lab-automated-essay-scoring-2/data" in (e.value.hint or "")
    assert "<data dir>/asap2/" in (e.value.hint or "")
    assert not (tmp_path / "asap2").exists()


@contextlib.contextmanager
def _auth_server(folder: Path, user: str, key: str) -> Iterator[tuple[str, list[str]]]:
    """Serves ``folder`` only to requests with HTTP basic auth user:key; records each Authorization header."""
    seen: list[str] = []
    expected = "Basic " + base64.b64encode(f"{user}:{key}".encode()).decode()

    class Handler(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *a: object, **kw: object) -> None:
            super().__init__(*a, directory=str(folder), **kw)  # type: ignore[arg-type]

        def do_GET(self) -> None:
            seen.append(self.headers.get("Authorization") or "")
            if seen[-1] != expected:
                self.send_error(401)
                return
            super().do_GET()

        def log_message(self, format: str, *args: object) -> None:
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}", seen
    finally:
        srv.shutdown()
        srv.server_close()


def test_asap2_credentials_are_sent_and_never_shown(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    archive = asap2_kaggle_zip(tmp_path / "srv" / "aes2.zip")
    with _auth_server(archive.parent, "ada", "s3cret-key") as (base, seen):
        spec = dataclasses.replace(ASAP2, credentials_for=base)  # the Kaggle rule, pointed at 127.0.0.1
        monkeypatch.setenv("KAGGLE_USERNAME", "ada")
        monkeypatch.setenv("KAGGLE_KEY", "wrong-key")
        with pytest.raises(DataError, match=r"HTTP 401 \(the server refused the credentials\)") as e:
            fetch_archive(spec, tmp_path / "d1", f"{base}/aes2.zip")
        assert "wrong-key" not in str(e.value) + str(e.value.hint)
        monkeypatch.setenv("KAGGLE_KEY", "s3cret-key")
        _, fetched = fetch_archive(spec, tmp_path / "d2", f"{base}/aes2.zip")
        assert fetched and len(load_asap2(tmp_path / "d2")) == len(asap2_rows())
        assert seen[-1].startswith("Basic ") and _leftovers(tmp_path / "d2", "asap2") == []


# -- MOCHA ------------------------------------------------------------------------------------------------------


@pytest.fixture
def mocha_dir(tmp_path: Path) -> Path:
    fetch_benchmark("mocha", tmp_path, str(mocha_tar(tmp_path / "src" / "mocha.tar.gz")))
    return tmp_path


def test_mocha_counts_known_answer_and_extra_columns(mocha_dir: Path) -> None:
    docs = mocha_docs()
    items = load_mocha(mocha_dir)  # the paper's set: the train split
    assert len(items) == sum(len(v) for v in docs["train.json"].values()) == 30
    assert list(items.columns[: len(ITEM_COLUMNS)]) == ITEM_COLUMNS
    assert items.groupby("dataset").size().to_dict() == {"cosmosqa": 10, "mcscript": 10, "narrativeqa": 10}
    assert (items["split"] == "train").all() and items["id"].is_unique
    src = docs["train.json"]["cosmosqa"]["005f3a04"]
    row = items.set_index("id").loc["cosmosqa-train-005f3a04"]
    assert (row["context"], row["question"], row["reference"], row["response"]) == (
        src["context"], src["question"], src["reference"], src["candidate"])
    assert (row["grade"], row["score"], row["scores"], row["source"],
            row["mocha_id"]) == (5, 5.0, "5", "backtranslation", "005f3a04")
    assert sorted(items["grade"].unique()) == [1, 2, 3, 4, 5]


def test_mocha_splits_and_mean_scores_round_half_up(mocha_dir: Path) -> None:
    items = load_mocha(mocha_dir, splits=("train", "dev", "test"))
    assert items.groupby("split").size().to_dict() == {"dev": 6, "test": 4, "train": 30}
    dev = items[items["split"] == "dev"].set_index("mocha_id")
    assert dev.loc["d0000000", "score"] == pytest.approx(11 / 3) and dev.loc["d0000000", "grade"] == 4
    assert dev.loc["d0000001", "score"] == pytest.approx(10 / 3) and dev.loc["d0000001", "grade"] == 3
    assert dev.loc["d0000003", "grade"] == 5 and dev.loc["d0000000", "scores"] == "3 4 4"
    assert items.loc[items["split"] == "test", "grade"].isna().all()  # test_no_labels: no scores
    with pytest.raises(DataError, match="unknown MOCHA split"):
        load_mocha(mocha_dir, splits=("minimal_pairs",))


def test_mocha_describe_breaks_down_by_dataset_and_split(mocha_dir: Path) -> None:
    s = describe_benchmark("mocha", mocha_dir)
    assert s["n_items"] == 30 and sum(s["grade_histogram"].values()) == 30
    assert s["by"] == {"dataset": {"cosmosqa": 10, "mcscript": 10, "narrativeqa": 10}, "split": {"train": 30}}


def test_mocha_missing_data_says_where_and_how(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"no MOCHA data \(expected .*mocha/train\.json\)") as e:
        load_benchmark("mocha", tmp_path)
    assert "rubrictool data fetch mocha" in (e.value.hint or "")


def test_mocha_partial_and_malformed_files(mocha_dir: Path, tmp_path: Path) -> None:
    d = mocha_dir / "mocha"
    (d / "dev.json").unlink()
    with pytest.raises(DataError, match=r"mocha/dev\.json: missing; the MOCHA release has train\.json"):
        load_mocha(mocha_dir, splits=("train", "dev"))
    text = (d / "train.json").read_text()
    (d / "train.json").write_text(text[: len(text) // 2])  # cut short
    with pytest.raises(DataError, match=r"mocha/train\.json:\d+: invalid JSON .*cut short"):
        load_mocha(mocha_dir)
    docs = mocha_docs()
    del docs["train.json"]["narrativeqa"]["005f3a00"]["candidate"]
    (d / "train.json").write_text(json.dumps(docs["train.json"]))
    with pytest.raises(DataError, match=r"train\.json: narrativeqa/005f3a00: missing field\(s\) candidate"):
        load_mocha(mocha_dir)
    docs = mocha_docs()
    docs["train.json"]["narrativeqa"]["005f3a00"]["score"] = "high"
    (d / "train.json").write_text(json.dumps(docs["train.json"]))
    with pytest.raises(DataError, match=r"narrativeqa/005f3a00: score 'high' is not a number"):
        load_mocha(mocha_dir)
    (d / "train.json").write_text(json.dumps([1, 2]))
    with pytest.raises(DataError, match=r"train\.json: expected \{dataset: \{instance id: instance\}\}"):
        load_mocha(mocha_dir)


def test_mocha_fetch_over_http_then_idempotent(tmp_path: Path) -> None:
    archive = mocha_tar(tmp_path / "srv" / "mocha.tar.gz")
    seen: list[tuple[int, int | None]] = []
    with serve_folder(archive.parent) as base:
        path, fetched = fetch_benchmark("mocha", tmp_path / "d", f"{base}/mocha.tar.gz",
                                        progress=lambda p: seen.append((p.done, p.total)))
    assert fetched and path == tmp_path / "d" / "mocha" and (path / "minimal_pairs.json").is_file()
    assert seen[-1] == (archive.stat().st_size,) * 2 and _leftovers(tmp_path / "d", "mocha") == []
    assert len(load_mocha(tmp_path / "d")) == 30
    assert fetch_benchmark("mocha", tmp_path / "d", "file:///nowhere.tar.gz") == (path, False)


def test_mocha_fetch_rejects_partial_archives_and_keeps_nothing(tmp_path: Path) -> None:
    docs = mocha_docs()
    no_train = {k: v for k, v in docs.items() if k != "train.json"}
    with pytest.raises(DataError,
                       match=r"no-train\.tar\.gz: the archive holds no train\.json; is it the MOCHA release"):
        fetch_benchmark("mocha", tmp_path / "d1", str(mocha_tar(tmp_path / "no-train.tar.gz", no_train)))
    bad = mocha_tar(tmp_path / "bad.tar.gz", raw={"train.json": b'{"narrativeqa": {"x": {"context": '})
    with pytest.raises(DataError, match=r"mocha/train\.json:1: invalid JSON"):
        fetch_benchmark("mocha", tmp_path / "d2", str(bad))
    assert not (tmp_path / "d2" / "mocha").exists() and _leftovers(tmp_path / "d2", "mocha") == []
    good = mocha_tar(tmp_path / "good.tar.gz")
    (tmp_path / "cut.tar.gz").write_bytes(good.read_bytes()[: good.stat().st_size // 2])  # a download cut short
    with pytest.raises(DataError, match=r"cut\.tar\.gz: (not a zip or tar archive|cannot extract)"):
        fetch_benchmark("mocha", tmp_path / "d3", str(tmp_path / "cut.tar.gz"))
    assert not (tmp_path / "d3" / "mocha").exists()


def test_mocha_and_asap2_split_stratified_by_grade(mocha_dir: Path, asap2_dir: Path) -> None:
    for items in (load_mocha(mocha_dir), load_asap2(asap2_dir)):
        split = split_items(items, seed=0)
        assert sorted(split["train"] + split["dev"] + split["test"]) == sorted(items["id"])


def test_a_stray_file_in_the_data_dir_is_not_a_benchmark(tmp_path: Path) -> None:
    (tmp_path / "train.csv").write_text("essay_id,full_text,score\nx,some other data,2\n")
    (tmp_path / "train.json").write_text("{}")
    for name in ("asap2", "mocha"):
        with pytest.raises(DataError, match=rf"no .* data \(expected .*{name}/"):
            load_benchmark(name, tmp_path)
    (tmp_path / "asap2").mkdir()
    (tmp_path / "asap2" / "train.csv").write_text("essay_id,full_text,score\nx,an essay,2\n")
    assert load_benchmark("asap2", tmp_path / "asap2")["id"].tolist() == ["x"]  # --data-dir at the folder itself
