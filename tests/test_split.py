"""The deterministic, stratified-by-grade 7:2:1 split and its JSON file."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rubrictool.data import load_split, save_split, split_items, split_to_file
from rubrictool.errors import DataError


def test_split_is_deterministic_disjoint_and_covering(mohler_items: pd.DataFrame) -> None:
    a = split_items(mohler_items, seed=0)
    b = split_items(mohler_items.sample(frac=1.0, random_state=7), seed=0)  # row order does not matter
    assert a == b
    ids = [set(a[k]) for k in ("train", "dev", "test")]
    assert not (ids[0] & ids[1] or ids[0] & ids[2] or ids[1] & ids[2])
    assert ids[0] | ids[1] | ids[2] == set(mohler_items["id"])
    assert split_items(mohler_items, seed=1) != a


def test_split_sizes_follow_7_2_1(mohler_items: pd.DataFrame) -> None:
    s = split_items(mohler_items, seed=3)
    n = len(mohler_items)
    for k, share in (("train", 0.7), ("dev", 0.2), ("test", 0.1)):
        assert abs(len(s[k]) / n - share) < 0.01, k


def test_split_is_stratified_by_grade(mohler_items: pd.DataFrame) -> None:
    s = split_items(mohler_items, seed=0)
    grade = mohler_items.set_index("id")["grade"]
    overall = grade.value_counts(normalize=True)
    for k in ("train", "dev", "test"):
        part = grade.loc[s[k]].value_counts(normalize=True).reindex(overall.index, fill_value=0)
        assert (part - overall).abs().max() < 0.02, k
    for g, ids in grade.groupby(grade):  # every grade, even the 14 answers graded 1, reaches test
        n = len(ids)
        n_test = sum(1 for i in ids.index if i in set(s["test"]))
        assert n_test == round(n * 0.1), g


def test_tiny_strata_keep_training_examples() -> None:
    df = pd.DataFrame({"id": [str(i) for i in range(12)], "response": ["r"] * 12, "grade": [0] + [1] * 11})
    s = split_items(df, seed=0)
    assert "0" in s["train"]  # a one-item grade stays in train
    assert sum(len(v) for v in s.values()) == 12


def test_unstratified_when_grades_missing() -> None:
    df = pd.DataFrame({"id": [f"i{i}" for i in range(20)], "response": ["r"] * 20, "grade": [None] * 20})
    s = split_items(df, seed=0)
    assert (len(s["train"]), len(s["dev"]), len(s["test"])) == (14, 4, 2)


def test_bad_ratios_and_empty_table() -> None:
    df = pd.DataFrame({"id": ["1"], "response": ["r"], "grade": [1]})
    with pytest.raises(DataError, match="sum to 1"):
        split_items(df, ratios=(0.5, 0.2, 0.1))
    with pytest.raises(DataError, match="empty item table"):
        split_items(df.iloc[:0])


@settings(max_examples=40, deadline=None)
@given(
    grades=st.lists(st.integers(0, 5), min_size=1, max_size=120),
    seed=st.integers(0, 2**32 - 1),
)
def test_split_partitions_any_table(grades: list[int], seed: int) -> None:
    df = pd.DataFrame({"id": [f"x{i}" for i in range(len(grades))], "response": ["r"] * len(grades), "grade": grades})
    s = split_items(df, seed=seed)
    all_ids = s["train"] + s["dev"] + s["test"]
    assert sorted(all_ids) == sorted(df["id"]) and len(set(all_ids)) == len(all_ids)
    assert s == split_items(df.iloc[::-1], seed=seed)


def test_save_and_load_split(tmp_path: Path, mohler_items: pd.DataFrame) -> None:
    s = split_items(mohler_items, seed=5)
    p = save_split(s, tmp_path / "run" / "split.json", seed=5, meta={"source": "mohler"})
    data = json.loads(p.read_text())
    assert data["seed"] == 5 and data["source"] == "mohler"
    assert load_split(p) == s
    (tmp_path / "bad.json").write_text('{"train": []}')
    with pytest.raises(DataError, match="not a split file"):
        load_split(tmp_path / "bad.json")


def test_split_to_file_from_benchmark_and_item_file(tmp_path: Path, data_dir: Path) -> None:
    sizes = split_to_file("mohler", tmp_path / "split.json", seed=0, data_dir=data_dir)
    assert sum(sizes.values()) == 2273
    assert {k: len(v) for k, v in load_split(tmp_path / "split.json").items()} == sizes
    items = tmp_path / "items.csv"
    items.write_text("id,response,grade\n" + "".join(f"{i},answer {i},{i % 3}\n" for i in range(30)))
    sizes = split_to_file(str(items), tmp_path / "s2.json", seed=1)
    assert sizes == {"train": 21, "dev": 6, "test": 3}
    assert json.loads((tmp_path / "s2.json").read_text())["ratios"] == [0.7, 0.2, 0.1]
