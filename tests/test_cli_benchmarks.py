"""The CLI on ASAP 2.0 and MOCHA fixtures in their published layouts: data fetch / show, annotate
--benchmark (dry run), adjudicate --benchmark with review files, and train --table with a tiny model,
including the warning that says how many long inputs were cut at max_len."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

import reccbm
from rubrictool.cli import app
from rubrictool.data import describe_benchmark, load_benchmark
from rubrictool.rubric import load_rubric
from rubrictool.tables import read_items
from tests.support.benchmarks import DEMOGRAPHICS, asap2_release_zip, asap2_rows, mocha_docs, mocha_tar
from tests.support.files import serve_folder

runner = CliRunner()
WIDE = {"COLUMNS": "200"}


@pytest.fixture
def data_root(tmp_path: Path) -> Path:
    """A data directory with both benchmarks fetched through the CLI from local archives."""
    d = tmp_path / "data"
    release = asap2_release_zip(tmp_path / "src" / "ASAP_2_Final_github_train.zip")
    res = runner.invoke(app, ["data", "fetch", "asap2", "--dest", str(d), "--url", release.as_uri()])
    assert res.exit_code == 0, res.output
    assert f"fetched: {d / 'asap2'}" in res.output
    archive = mocha_tar(tmp_path / "srv" / "mocha.tar.gz")
    with serve_folder(archive.parent) as base:
        res = runner.invoke(app, ["data", "fetch", "mocha", "--dest", str(d), "--url", f"{base}/mocha.tar.gz"])
    assert res.exit_code == 0, res.output
    res = runner.invoke(app, ["data", "fetch", "mocha", "--dest", str(d), "--url", f"{base}/gone.tar.gz"])
    assert res.exit_code == 0 and "already present" in res.output  # idempotent: the URL is not even read
    return d


@pytest.mark.parametrize("name", ["asap2", "mocha"])
def test_data_show(data_root: Path, name: str) -> None:
    s = describe_benchmark(name, data_root)
    res = runner.invoke(app, ["data", "show", name, "--data-dir", str(data_root)], env=WIDE)
    assert res.exit_code == 0, res.output
    assert f"{s['n_items']} answers over {s['n_questions']} questions" in res.output
    assert f"mean response {s['mean_response_words']} words" in res.output
    assert f"longest {s['max_response_words']})" in res.output
    for g, n in s["grade_histogram"].items():
        assert any(ln.split("│")[1:3] == [f" {g}     ", f" {n:>7} "] for ln in res.output.splitlines() if "│" in ln), g
    items = load_benchmark(name, data_root)
    col = "prompt_name" if name == "asap2" else "dataset"
    assert f"by {col}: " + ", ".join(f"{k} {v}"
                                     for k, v in items[col].value_counts().sort_index().items()) in res.output
    res = runner.invoke(app, ["data", "show", name, "--json"], env={"RUBRICTOOL_DATA": str(data_root)})
    assert json.loads(res.output) == json.loads(json.dumps(s))


@pytest.mark.parametrize("name", ["asap2", "mocha"])
def test_data_export_writes_the_item_file_review_push_reads(data_root: Path, tmp_path: Path, name: str) -> None:
    out = tmp_path / f"{name}-items.jsonl"
    res = runner.invoke(app, ["data", "export", name, "--limit", "7", "--out", str(out), "--data-dir", str(data_root)])
    assert res.exit_code == 0, res.output
    assert f"wrote {out}: 7 items" in " ".join(res.output.split())
    got = read_items(out)
    want = load_benchmark(name, data_root).head(7)
    assert got["id"].tolist() == want["id"].tolist() and got["response"].tolist() == want["response"].tolist()
    assert set(want.columns) <= set(got.columns)  # every column, demographic / dataset ones included
    res = runner.invoke(app, ["data", "export", name, "--limit", "0", "--out", str(out), "--data-dir", str(data_root)])
    assert res.exit_code == 1 and "--limit 0" in res.output


@pytest.mark.parametrize("name", ["asap2", "mocha"])
def test_missing_data_is_one_line_naming_the_fetch_command(tmp_path: Path, name: str) -> None:
    for args in (["data", "show", name], ["data", "export", name, "--out", str(tmp_path / "x.csv")],
                 ["annotate", "--benchmark", name, "--dry-run"],
                 ["adjudicate", "--benchmark", name, "--reviews", str(tmp_path / "r.csv")]):
        (tmp_path / "r.csv").write_text("id,X\n1,1\n")
        res = runner.invoke(app, [*args, "--data-dir", str(tmp_path)], env=WIDE)
        assert res.exit_code == 1, (args, res.output)
        assert f"rubrictool data fetch {name}" in res.output and "Traceback" not in res.output, args
        assert len(res.output.strip().splitlines()) == 1, res.output


def test_annotate_dry_run_renders_the_essay_prompt(data_root: Path) -> None:
    first = asap2_rows()[0]
    res = runner.invoke(app, ["annotate", "--benchmark", "asap2", "--data-dir", str(data_root), "--dry-run",
                              "--model", "gpt-4o", "--limit", "3"], env=WIDE)
    assert res.exit_code == 0, res.output
    assert first["assignment"] in res.output  # question = the essay prompt
    assert first["full_text"].split("\n")[0] in res.output  # the essay
    assert "Thesis Clarity" in res.output and "estimated cost of the whole run" in res.output


def test_annotate_dry_run_renders_passage_question_reference_candidate(data_root: Path) -> None:
    items = load_benchmark("mocha", data_root)
    first = items.iloc[0]
    src = mocha_docs()["train.json"][first["dataset"]][first["mocha_id"]]
    res = runner.invoke(app, ["annotate", "--benchmark", "mocha", "--data-dir", str(data_root), "--dry-run",
                              "--model", "gpt-4o", "--limit", "2"], env=WIDE)
    assert res.exit_code == 0, res.output
    for field in ("context", "question", "reference", "candidate"):
        assert src[field] in res.output, field
    assert "Textual Grounding" in res.output


def _reviews(items: pd.DataFrame, name: str, folder: Path, n: int) -> list[str]:
    """Three reviewers' wide exports for the first n items: levels follow the grade, each reviewer off by one
    on a different concept."""
    rb = load_rubric(name)
    folder.mkdir(parents=True, exist_ok=True)
    sub = items.head(n)
    frac = (sub["grade"].to_numpy(float) - rb.grade.min) / (rb.grade.max - rb.grade.min)
    base = np.rint(rb.scale.min + frac * (rb.scale.max - rb.scale.min)).astype(int)
    specs = []
    for r, reviewer in enumerate("ABC"):
        wide = pd.DataFrame({"id": sub["id"]})
        for k, key in enumerate(rb.keys):
            wide[key] = np.clip(base + (1 if k == r else 0), rb.scale.min, rb.scale.max)
        wide.to_csv(folder / f"{reviewer}.csv", index=False)
        specs.append(str(folder / f"{reviewer}.csv"))
    return specs


def _expected_truncated(table: pd.DataFrame, backbone: str, max_len: int) -> int:
    """Inputs whose question [SEP] reference/context plus response exceed the budget (counted here with the
    tokenizer alone, not with the trainer's encoder)."""
    tok = reccbm.load_tokenizer(backbone)
    budget = max_len - tok.num_special_tokens_to_add(pair=True)
    n = 0
    for row in table.fillna("").to_dict("records"):
        aux = " \n ".join(p for p in (str(row["reference"]), str(row["context"])) if p.strip())
        first = f"{row['question']} {tok.sep_token} {aux}" if aux.strip() else str(row["question"])
        n += len(tok(first, add_special_tokens=False)["input_ids"]) + len(tok(str(row["response"]),
            add_special_tokens=False)["input_ids"]) > budget
    return n


@pytest.mark.usefixtures("one_thread")
@pytest.mark.parametrize("name", ["asap2", "mocha"])
def test_adjudicate_with_review_files_then_train_warns_about_truncation(
    data_root: Path, tmp_path: Path, backbone: str, name: str
) -> None:
    items = load_benchmark(name, data_root)
    n = len(items)  # every item reviewed: 36 essays (6 per grade), 30 MOCHA answers (6 per grade)
    specs = _reviews(items, name, tmp_path / "reviews", n)
    out = tmp_path / "adjudicated"
    args = ["adjudicate", "--benchmark", name, "--data-dir", str(data_root), "--out", str(out), "--bootstrap", "50"]
    for s in specs:
        args += ["--reviews", s]
    res = runner.invoke(app, args, env=WIDE)
    assert res.exit_code == 0, res.output
    table = read_items(out / "adjudicated.csv")
    rb = load_rubric(name)
    assert len(table) == n and list(table["id"]) == list(items["id"])
    assert all(table[k].between(rb.scale.min, rb.scale.max).all() for k in rb.keys)
    extra = DEMOGRAPHICS if name == "asap2" else ["dataset", "split", "source", "score"]
    for col in extra:  # the benchmark's extra columns travel with the labels
        assert col in table.columns, col
    assert json.loads((out / "agreement.json").read_text())["concepts"].keys() == set(rb.keys)

    max_len = 64
    expected = _expected_truncated(table, backbone, max_len)
    assert 0 < expected < n  # the fixture has inputs on both sides of the limit
    run = tmp_path / "run"
    res = runner.invoke(app, ["train", "--table", str(out / "adjudicated.csv"), "--rubric", name, "--backbone",
                              backbone,
                              "--epochs", "1", "--max-len", str(max_len), "--out", str(run), "--device", "cpu"],
                        env=WIDE)
    assert res.exit_code == 0, res.output
    warning = f"{expected} of {n} inputs are longer than max_len={max_len} tokens and were truncated"
    assert f"warning: {warning}" in " ".join(res.output.split())
    assert any(warning in n for n in json.loads((run / "metrics.json").read_text())["notes"])
    assert warning in (run / "train.log").read_text()
    meta = reccbm.read_meta(run)
    assert meta["rubric"] == name and meta["grade"] == [rb.grade.min, rb.grade.max]

    res = runner.invoke(app, ["grade", "--run", str(run), "--items", str(out / "adjudicated.csv"),
                              "--out", str(tmp_path / "graded.csv")], env=WIDE)
    assert res.exit_code == 0, res.output
    assert f"warning: {warning}" in " ".join(res.output.split())
    graded = pd.read_csv(tmp_path / "graded.csv", dtype={"id": str})
    assert len(graded) == n and graded["model_grade"].between(rb.grade.min, rb.grade.max).all()


def test_adjudicate_benchmark_without_reviews_says_what_to_pass(data_root: Path) -> None:
    res = runner.invoke(app, ["adjudicate", "--benchmark", "asap2", "--data-dir", str(data_root)], env=WIDE)
    assert res.exit_code == 1
    assert "no bundled concept labels for benchmark 'asap2'" in res.output and "--reviews" in res.output
    res = runner.invoke(app, ["train", "--benchmark", "mocha", "--data-dir", str(data_root)], env=WIDE)
    assert res.exit_code == 1 and "no concept-label passes for benchmark 'mocha'" in res.output
