"""What a small course's figures say about themselves: `compare` leaves out adjacent agreement on a two-grade scale
(±1 covers every pair there), and annotate's summary stays readable on an 80-column terminal."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
from rich.console import Console
from typer.testing import CliRunner

from rubrictool.cli import app
from rubrictool.cli.annotate import print_summary

runner = CliRunner()


def _kfold(path: Path, truth: np.ndarray, pred: np.ndarray, grade: tuple[int, int]) -> Path:  # type: ignore[type-arg]
    """A finished k-fold run as compare reads it: pooled_predictions.csv and its first fold's model.json."""
    (path / "fold-0").mkdir(parents=True)
    (path / "fold-0" / "model.json").write_text(json.dumps({"grade": list(grade)}))
    pd.DataFrame({"id": [f"a{i}" for i in range(len(truth))], "grade": pred, "grade_true": truth}).to_csv(
        path / "pooled_predictions.csv", index=False)
    return path


def test_compare_leaves_out_adjacent_agreement_on_a_pass_fail_scale(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    truth = rng.integers(0, 2, size=140)  # a 140-answer human-graded 0/1 set
    a = _kfold(tmp_path / "a", truth, np.where(rng.random(140) < 0.7, truth, 1 - truth), (0, 1))
    b = _kfold(tmp_path / "b", truth, np.where(rng.random(140) < 0.8, truth, 1 - truth), (0, 1))
    res = runner.invoke(app, ["compare", str(a), str(b), "--n-boot", "100"])
    assert res.exit_code == 0, res.output
    assert "adjacent" not in res.output and "t_acc" in res.output and "qwk" in res.output
    truth5 = rng.integers(0, 6, size=60)  # a 0..5 scale: adjacent agreement says something
    a5 = _kfold(tmp_path / "a5", truth5, np.clip(truth5 + rng.integers(-2, 3, size=60), 0, 5), (0, 5))
    b5 = _kfold(tmp_path / "b5", truth5, np.clip(truth5 + rng.integers(-1, 2, size=60), 0, 5), (0, 5))
    res = runner.invoke(app, ["compare", str(a5), str(b5), "--n-boot", "100"])
    assert res.exit_code == 0 and "adjacent" in res.output


def _result() -> SimpleNamespace:
    models = ["openai/gpt-4o", "gemini/gemini-2.5-pro", "anthropic/claude-sonnet-4-5"]
    summary = {m: SimpleNamespace(model=m, items=48, ok=46 - i, failures=2 + i, repaired=i, cached_items=0,
                                  requests=50 + i, retries=i, prompt_tokens=61234, completion_tokens=9876,
                                  cost_usd=0.1234 * (i + 1), price_known=True, seconds=12.5 + i, retried=0)
               for i, m in enumerate(models)}
    return SimpleNamespace(workers=1, total_items=48, summary=summary, predictions=[], failures=[],
                           stopped_by_budget=False, cost_usd=0.0)


def test_annotate_summary_is_readable_at_80_columns() -> None:
    con = Console(width=80, record=True, color_system=None)
    print_summary(_result(), None, con)  # type: ignore[arg-type]
    text = con.export_text()
    assert "…" not in text and max(len(line) for line in text.splitlines()) <= 80
    lines = text.splitlines()
    for i, m in enumerate(("openai/gpt-4o", "gemini/gemini-2.5-pro", "anthropic/claude-sonnet-4-5")):
        assert any(line.strip() == m for line in lines)  # every model named in full, on a line of its own
        assert f"ok {46 - i}, failures {2 + i}, repaired {i}" in " ".join(text.split())
    assert "cost USD 0.3702" in " ".join(text.split()) and "tokens 71,110" in text
    wide = Console(width=160, record=True, color_system=None)
    print_summary(_result(), None, wide)  # type: ignore[arg-type]
    assert "┃ model" in wide.export_text() or "model " in wide.export_text()  # a table where it fits
