"""Question-grouped splits and k folds: no question in two parts, every item tested once, seeded."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from rubrictool.cli import app
from rubrictool.data import group_kfold_splits, group_split_items, kfold_splits, load_split
from rubrictool.errors import DataError

runner = CliRunner()


def course(n_tasks: int = 14, seed: int = 0) -> pd.DataFrame:
    """A small course that is not Mohler: tasks of 3..17 answers, grades 0..2 that differ by task, the
    grouping column called ``task``."""
    rng = np.random.default_rng(seed)
    rows = []
    for t in range(n_tasks):
        easy = t % 3  # tasks differ in difficulty, so grades cluster by task
        for j in range(3 + (7 * t) % 15):
            g = min(2, max(0, int(rng.integers(0, 3)) + easy - 1))
            rows.append({"id": f"s{t:02d}-{j}", "task": f"T{t}", "question": f"T{t}", "response": f"r {t} {j}",
                         "grade": g})
    return pd.DataFrame(rows)


def _parts_by_group(df: pd.DataFrame, split: dict[str, list[str]], by: str) -> dict[str, set[str]]:
    g = df.set_index("id")[by]
    return {part: set(g.loc[ids]) for part, ids in split.items()}


def test_no_question_crosses_parts_and_every_item_tested_once() -> None:
    df = course()
    folds = group_kfold_splits(df, by="task", k=4, seed=3)
    tested: list[str] = []
    for sp in folds:
        groups = _parts_by_group(df, sp, "task")
        assert not (groups["train"] & groups["test"] or groups["dev"] & groups["test"]
                    or groups["train"] & groups["dev"])
        assert sp["train"] and sp["dev"] and sp["test"]
        assert sorted(sp["train"] + sp["dev"] + sp["test"]) == sorted(df["id"])
        tested += sp["test"]
    assert sorted(tested) == sorted(df["id"])  # every item tested exactly once
    split = group_split_items(df, by="task", seed=1, ratios=(0.6, 0.2, 0.2))
    groups = _parts_by_group(df, split, "task")
    assert not (groups["train"] & groups["test"] or groups["dev"] & groups["test"] or groups["train"] & groups["dev"])
    assert sorted(split["train"] + split["dev"] + split["test"]) == sorted(df["id"])


def test_grouped_splits_are_seeded_and_ignore_row_order() -> None:
    df = course()
    shuffled = df.sample(frac=1.0, random_state=5)
    assert group_kfold_splits(df, by="task", k=4, seed=2) == group_kfold_splits(shuffled, by="task", k=4, seed=2)
    assert group_split_items(df, by="task", seed=2) == group_split_items(shuffled, by="task", seed=2)
    assert kfold_splits(df, k=4, seed=2, by="task") == group_kfold_splits(df, by="task", k=4, seed=2)
    assert any(group_kfold_splits(df, by="task", k=4, seed=s) != group_kfold_splits(df, by="task", k=4, seed=2)
               for s in range(3, 8))


def test_grouped_folds_balance_sizes_and_grades(mohler_items: pd.DataFrame) -> None:
    folds = kfold_splits(mohler_items, k=5, seed=0, by="question")
    grade = mohler_items.set_index("id")["grade"]
    overall = grade.value_counts(normalize=True)
    n = len(mohler_items)
    for sp in folds:
        assert abs(len(sp["test"]) - n / 5) < 0.05 * n / 5  # whole questions, still within 5 % of a fifth
        share = grade.loc[sp["test"]].value_counts(normalize=True).reindex(overall.index, fill_value=0)
        assert (share - overall).abs().max() < 0.04
        assert not set(mohler_items.set_index("id").loc[sp["test"], "question"]) & set(
            mohler_items.set_index("id").loc[sp["train"] + sp["dev"], "question"])


def test_fewer_questions_than_folds_is_a_clear_error() -> None:
    df = course(n_tasks=4)
    with pytest.raises(DataError, match=r"cannot make 5 folds grouped by 'task' from 4 distinct task\(s\).*--folds 3"):
        group_kfold_splits(df, by="task", k=5)
    with pytest.raises(DataError, match="no 'lesson' column"):
        group_kfold_splits(df, by="lesson", k=2)
    with pytest.raises(DataError, match="cannot split 2 distinct 'task' value"):
        group_split_items(df[df["task"].isin(["T0", "T1"])], by="task")


def test_cli_data_split_by_question(tmp_path: Path) -> None:
    df = course()
    items = tmp_path / "course.csv"
    df.to_csv(items, index=False)
    out = tmp_path / "split.json"
    res = runner.invoke(app, ["data", "split", str(items), "--by", "task", "--seed", "4", "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert "grouped by task" in res.output
    split = load_split(out)
    assert split == group_split_items(pd.read_csv(items), by="task", seed=4)
    assert json.loads(out.read_text())["by"] == "task"
    groups = _parts_by_group(df, split, "task")
    assert not groups["train"] & groups["test"]
    res = runner.invoke(app, ["data", "split", str(items), "--by", "lesson", "--out", str(out)])
    assert res.exit_code == 1 and "no 'lesson' column" in res.output


def test_train_folds_by_question_keeps_questions_apart(tmp_path: Path, backbone: str, one_thread: None) -> None:
    from rubrictool.rubric import load_rubric
    from rubrictool.train import TrainOptions, train_folds
    from tests.support.tiny_models import mohler_like_table

    df = mohler_like_table(36).assign(question=[f"Q{i % 6}" for i in range(36)])
    overrides = {"model": {"backbone": backbone, "max_len": 32}, "stage1": {"epochs": 1, "device": "cpu"},
                 "joint": {"epochs": 0}}
    run = tmp_path / "run"
    train_folds(load_rubric("mohler"), df, run, folds=2, by="question",
        options=TrainOptions(overrides=overrides))
    summary = json.loads((run / "folds.json").read_text())
    assert summary["by"] == "question" and summary["n_items"] == 36
    q = df.set_index("id")["question"]
    for i in range(2):
        sp = load_split(run / f"fold-{i}.split.json")
        assert json.loads((run / f"fold-{i}.split.json").read_text())["by"] == "question"
        assert not set(q.loc[sp["test"]]) & set(q.loc[sp["train"] + sp["dev"]])
