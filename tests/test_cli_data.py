"""`rubrictool data ...`: run each command with CliRunner, then check what it wrote or printed
through the library. Downloads come only from local archives and a server on 127.0.0.1."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from rubrictool.cli import app
from rubrictool.data import describe_benchmark, load_mohler, load_split, split_items
from tests.support.files import build_archive, serve_folder

runner = CliRunner()


def test_data_show_prints_the_summary(data_dir: Path) -> None:
    s = describe_benchmark("mohler", data_dir)
    res = runner.invoke(app, ["data", "show", "mohler", "--data-dir", str(data_dir)], env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    assert f"{s['n_items']} answers over {s['n_questions']} questions" in res.output
    assert f"mean response {s['mean_response_words']} words" in res.output
    for g, n in s["grade_histogram"].items():
        assert any(ln.split("│")[1:3] == [f" {g}     ", f" {n:>7} "] for ln in res.output.splitlines() if "│" in ln), g
    assert f"exact agreement {s['graders']['exact_agreement']:.1%}" in res.output
    assert f"Pearson r {s['graders']['pearson_r']:.3f}" in res.output


def test_data_show_json_uses_env_data_dir(data_dir: Path) -> None:
    res = runner.invoke(app, ["data", "show", "--json"], env={"RUBRICTOOL_DATA": str(data_dir)})
    assert res.exit_code == 0, res.output
    got = json.loads(res.output)
    expected = json.loads(json.dumps(describe_benchmark("mohler", data_dir)))
    assert got == expected and got["n_items"] == 2273


def test_data_show_missing_data_is_one_line_error(tmp_path: Path) -> None:
    res = runner.invoke(app, ["data", "show", "mohler", "--data-dir", str(tmp_path)])
    assert res.exit_code == 1
    assert "error:" in res.output and "rubrictool data fetch mohler" in res.output and "Traceback" not in res.output


def test_data_fetch_file_url_and_idempotent(tmp_path: Path, data_dir: Path) -> None:
    archive = build_archive(data_dir / "mohler", tmp_path / "src" / "ShortAnswerGrading_v2.0.zip")
    dest = tmp_path / "data"
    res = runner.invoke(app, ["data", "fetch", "mohler", "--dest", str(dest), "--url", archive.as_uri()])
    assert res.exit_code == 0, res.output
    assert f"fetched: {dest / 'mohler'}" in res.output
    assert len(load_mohler(dest)) == 2273
    res = runner.invoke(app, ["data", "fetch", "mohler", "--dest", str(dest), "--url", archive.as_uri()])
    assert res.exit_code == 0 and "already present" in res.output


def test_data_fetch_http_and_errors(tmp_path: Path, data_dir: Path) -> None:
    archive = build_archive(data_dir / "mohler", tmp_path / "srv" / "sag.tar.gz", kind="tar")
    with serve_folder(archive.parent) as base:
        res = runner.invoke(app, ["data", "fetch", "--dest", str(tmp_path / "d"), "--url", f"{base}/sag.tar.gz"])
        assert res.exit_code == 0, res.output
        assert len(load_mohler(tmp_path / "d")) == 2273
        res = runner.invoke(app, ["data", "fetch", "--dest", str(tmp_path / "e"), "--url", f"{base}/missing.zip"])
        assert res.exit_code == 1 and "HTTP 404" in res.output
    junk = tmp_path / "junk.zip"
    junk.write_text("not an archive")
    res = runner.invoke(app, ["data", "fetch", "--dest", str(tmp_path / "f"), "--url", str(junk)])
    assert res.exit_code == 1 and "not a zip or tar archive" in res.output
    assert not (tmp_path / "f" / "mohler").exists()


def test_data_split_writes_split_json(tmp_path: Path, data_dir: Path) -> None:
    out = tmp_path / "run" / "split.json"
    res = runner.invoke(app, ["data", "split", "mohler", "--seed", "7", "--out", str(out), "--data-dir", str(data_dir)])
    assert res.exit_code == 0, res.output
    split = load_split(out)
    assert split == split_items(load_mohler(data_dir), seed=7)
    assert json.loads(out.read_text())["seed"] == 7
    assert f"train {len(split['train'])}, dev {len(split['dev'])}, test {len(split['test'])}" in res.output
    res = runner.invoke(app, ["data", "split", "mohler", "--ratios", "0.8,0.2", "--out", str(out)])
    assert res.exit_code == 1 and "exactly three shares" in res.output


def test_data_split_item_file(tmp_path: Path) -> None:
    items = tmp_path / "items.jsonl"
    items.write_text("".join(json.dumps({"id": f"q{i}", "response": f"r {i}", "grade": i % 2}) + "\n"
                             for i in range(10)))
    out = tmp_path / "s.json"
    res = runner.invoke(app, ["data", "split", str(items), "--seed", "0", "--ratios", "0.6,0.2,0.2", "--out", str(out)])
    assert res.exit_code == 0, res.output
    s = load_split(out)
    assert sorted(s["train"] + s["dev"] + s["test"]) == sorted(f"q{i}" for i in range(10))
    assert (len(s["train"]), len(s["dev"]), len(s["test"])) == (6, 2, 2)
    empty = tmp_path / "bad.csv"
    empty.write_text("id,response\n1,\n")
    res = runner.invoke(app, ["data", "split", str(empty), "--out", str(out)])
    assert res.exit_code == 1 and "empty response" in res.output


def test_data_show_item_file(tmp_path: Path) -> None:
    items = tmp_path / "items.csv"
    items.write_text("id,question,response,grade\n1,Q1,one two three,2\n2,Q1,four,0\n3,Q2,five six,2\n")
    res = runner.invoke(app, ["data", "show", str(items), "--json"])
    assert res.exit_code == 0, res.output
    s = json.loads(res.output)
    assert (s["n_items"], s["n_questions"], s["mean_response_words"]) == (3, 2, 2.0)
    assert s["grade_histogram"] == {"0": 1, "2": 2} and s["graders"] is None
