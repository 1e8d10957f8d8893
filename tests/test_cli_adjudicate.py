"""`rubrictool adjudicate`: run the command with CliRunner, then check what it wrote through the library."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from rubrictool.agreement import krippendorff_alpha, value_counts
from rubrictool.cli import app
from rubrictool.data import load_concept_passes
from rubrictool.io import read_table, write_table
from tests.support.toy_reviews import toy_items, toy_reviews

runner = CliRunner()
WIDE_ENV = {"COLUMNS": "200"}


def test_mohler_passes_end_to_end(tmp_path: Path, data_dir: Path) -> None:
    out = tmp_path / "adj"
    res = runner.invoke(
        app,
        [
            "adjudicate",
            "--benchmark",
            "mohler",
            "--data-dir",
            str(data_dir),
            "--out",
            str(out),
            "--bootstrap",
            "200",
        ],
        env=WIDE_ENV,
    )
    assert res.exit_code == 0, res.output
    table = read_table(out / "adjudicated.csv")
    assert len(table) == 2273 and table["FC"].between(1, 3).all()
    agreement = json.loads((out / "agreement.json").read_text())
    passes = load_concept_passes(data_dir)
    for key in ("FC", "FR"):
        wide = passes.loc[passes["concept"] == key].pivot(index="item", columns="reviewer", values="level")
        expected = krippendorff_alpha(
            value_counts(wide.to_numpy(dtype=float), np.array([1, 2, 3])), [1, 2, 3], "ordinal"
        )
        c = agreement["concepts"][key]
        assert c["alpha"] == pytest.approx(expected)
        assert c["alpha_ci"][0] <= c["alpha"] <= c["alpha_ci"][1]
        row = next(ln for ln in res.output.splitlines() if ln.startswith(f"│ {key} "))
        assert f"{c['alpha']:.3f} [{c['alpha_ci'][0]:.3f}, {c['alpha_ci'][1]:.3f}]" in row
        assert str(c["flagged"]) in row
    # the default queue holds ties and gaps of two levels: the three passes never differ by two levels and
    # never tie (3 reviewers, 2 distinct levels at most), so every disagreement is a 2-to-1 majority
    queue = read_table(out / "discussion_queue.csv")
    assert len(queue) == agreement["adjudication"]["queue"]["n_cases"] == 0
    assert agreement["adjudication"]["flagged"] == int(table["n_flagged"].sum()) > 0
    assert "other non-unanimous label(s) decided by the vote (--queue all lists them)" in " ".join(res.output.split())
    assert agreement["coverage"]["available"] and agreement["grade"]["graders"] == ["grade_me", "grade_other"]
    assert "NOT expert-validated" in agreement["note"] and "NOT expert-validated" in res.output
    assert "NOT expert-validated" in (out / "discussion_queue.md").read_text()
    assert "coverage (grade from concept levels" in res.output


def _files(tmp_path: Path) -> tuple[list[str], Path]:
    reviews = toy_reviews()
    reviews.loc[reviews["reviewer"] != "C"].to_csv(tmp_path / "ab.csv", index=False)
    wide = (
        reviews.loc[reviews["reviewer"] == "C"]
        .pivot(index="item", columns="concept", values="level")
        .reset_index()
    )
    write_table(wide.rename(columns={"item": "id"}), tmp_path / "c.jsonl")
    items = write_table(toy_items(), tmp_path / "items.csv")
    return [str(tmp_path / "ab.csv"), f"C={tmp_path / 'c.jsonl'}"], items


def test_files_predictions_resolutions_parquet(tmp_path: Path) -> None:
    specs, items = _files(tmp_path)
    preds = tmp_path / "pred.jsonl"
    write_table(
        pd.DataFrame(
            {
                "item": ["q1", "q2"],
                "model": "gpt-4o",
                "concept": "FC",
                "level": [3, 1],
                "evidence": "",
                "raw_ok": True,
            }
        ),
        preds,
    )
    res_file = tmp_path / "res.csv"
    res_file.write_text("item,concept,level,note,decided_by\nq1,CC,3,agreed,panel\n")
    out = tmp_path / "o"
    args = [
        "adjudicate",
        "--rubric",
        "mohler",
        "--items",
        str(items),
        "--predictions",
        str(preds),
        "--resolutions",
        str(res_file),
        "--out-format",
        "parquet",
        "--out",
        str(out),
        "--bootstrap",
        "50",
    ]
    for s in specs:
        args += ["--reviews", s]
    res = runner.invoke(app, args, env=WIDE_ENV)
    assert res.exit_code == 0, res.output
    table = read_table(out / "adjudicated.parquet").set_index("id")
    assert table.loc["q1", "CC"] == 3 and table.loc["q1", "resolved_concepts"] == "CC"
    assert table.loc["q2", "FC"] == 1  # 1 vs 3: the lower level
    agreement = json.loads((out / "agreement.json").read_text())
    assert agreement["reviewers"] == ["A", "B", "C"]
    assert agreement["llm_vs_consensus"]["gpt-4o"]["FC"]["exact"] == 1.0
    decisions = read_table(out / "decisions.parquet")
    assert (
        decisions.loc[(decisions["item"] == "q1") & (decisions["concept"] == "CC"), "decided_by"].item()
        == "panel"
    )
    assert "LLM gpt-4o vs consensus" in res.output


def test_dawid_skene_method(tmp_path: Path) -> None:
    specs, _ = _files(tmp_path)
    out = tmp_path / "ds"
    res = runner.invoke(
        app,
        [
            "adjudicate",
            "-r",
            "mohler",
            "--reviews",
            specs[0],
            "--reviews",
            specs[1],
            "--method",
            "dawid-skene",
            "--out",
            str(out),
            "--bootstrap",
            "0",
        ],
        env=WIDE_ENV,
    )
    assert res.exit_code == 0, res.output
    agreement = json.loads((out / "agreement.json").read_text())
    assert agreement["method"] == "dawid-skene" and isinstance(
        agreement["adjudication"]["dawid_skene_changed"], int
    )
    assert (
        f"Dawid-Skene differs from majority vote on {agreement['adjudication']['dawid_skene_changed']}"
        in res.output
    )
    assert set(read_table(out / "adjudicated.csv")["method"]) == {"dawid-skene"}


def _bad(tmp_path: Path, kind: str) -> list[str]:
    reviews = toy_reviews()
    f = tmp_path / "r.csv"
    base = ["adjudicate", "-r", "mohler", "--out", str(tmp_path / "o"), "--bootstrap", "0"]
    if kind == "unknown concept":
        reviews.loc[1, "concept"] = "ZZ"
    elif kind == "level out of range":
        reviews.loc[1, "level"] = 0
    elif kind == "missing columns":
        reviews = reviews.drop(columns="reviewer")
    elif kind == "empty input":
        f.write_text("item,reviewer,concept,level\n")
        return base + ["--reviews", str(f)]
    elif kind == "unknown reviewer file":
        return base + ["--reviews", str(tmp_path / "nobody.jsonl")]
    elif kind == "unknown item ids":
        items = toy_items().iloc[:2]
        write_table(items, tmp_path / "items.csv")
        base += ["--items", str(tmp_path / "items.csv")]
    elif kind == "unknown method":
        base += ["--method", "vote"]
    elif kind == "unknown format":
        base += ["--out-format", "xlsx"]
    elif kind == "no reviews":
        return base
    reviews.to_csv(f, index=False)
    return base + ["--reviews", str(f)]


@pytest.mark.parametrize(
    ("kind", "message"),
    [
        ("unknown concept", "r.csv:row 3: unknown concept 'ZZ'"),
        ("level out of range", "r.csv:row 3: level 0 for concept FC of item q1"),
        ("missing columns", "missing column(s) reviewer"),
        ("empty input", "empty"),
        ("unknown reviewer file", "nobody.jsonl: no such file"),
        ("unknown item ids", "2 item id(s) not in the items table (q3, q4)"),
        ("unknown method", "unknown method 'vote'; use majority or dawid-skene"),
        ("unknown format", "unknown format 'xlsx'"),
        ("no reviews", "no reviews; pass --reviews FILE"),
    ],
)
def test_bad_input_is_one_clear_line(tmp_path: Path, kind: str, message: str) -> None:
    res = runner.invoke(app, _bad(tmp_path, kind), env=WIDE_ENV)
    assert res.exit_code == 1, res.output
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), res.output
    assert message in lines[0]
    assert "Traceback" not in res.output
    assert not (tmp_path / "o" / "agreement.json").exists()


def test_level_of_measurement_option(tmp_path: Path) -> None:
    specs, _ = _files(tmp_path)
    out = tmp_path / "nominal"
    args = ["adjudicate", "-r", "mohler", "--reviews", specs[0], "--reviews", specs[1], "--out", str(out)]
    res = runner.invoke(app, [*args, "--level-of-measurement", "nominal", "--bootstrap", "0"], env=WIDE_ENV)
    assert res.exit_code == 0, res.output
    agreement = json.loads((out / "agreement.json").read_text())
    reviews = toy_reviews()
    cc = reviews.loc[reviews["concept"] == "CC"].pivot(index="item", columns="reviewer", values="level")
    counts = value_counts(cc.to_numpy(dtype=float), np.array([1, 2, 3]))
    assert agreement["level_of_measurement"] == "nominal"
    assert agreement["concepts"]["CC"]["alpha"] == pytest.approx(
        krippendorff_alpha(counts, [1, 2, 3], "nominal")
    )
    assert agreement["concepts"]["CC"]["alpha_ci"] == [None, None]  # --bootstrap 0: no interval
    assert "(nominal α)" in res.output
