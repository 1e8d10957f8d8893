"""Files written atomically get the mode a new file would have under the process umask (not mkstemp's 0600),
so colleagues on a shared server can read predictions, adjudicated tables, splits and rubrics."""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest

from rubrictool.adjudicate import AdjudicationOptions, run_adjudicate
from rubrictool.atomic import atomic_write_text, new_file_mode
from rubrictool.data import save_split
from rubrictool.io import write_table
from rubrictool.rubric.scaffold import new_rubric_file


@pytest.fixture(params=[0o022, 0o002, 0o077])
def umask(request: pytest.FixtureRequest) -> Iterator[int]:
    old = os.umask(request.param)
    try:
        yield int(request.param)
    finally:
        os.umask(old)


def mode(p: Path) -> int:
    return stat.S_IMODE(p.stat().st_mode)


def test_atomic_writers_respect_the_umask(umask: int, tmp_path: Path) -> None:
    want = 0o666 & ~umask
    assert new_file_mode() == want
    df = pd.DataFrame({"id": ["a", "b"], "response": ["x", "y"]})
    for name in ("t.csv", "t.jsonl", "t.parquet"):
        assert mode(write_table(df, tmp_path / name)) == want
    assert mode(atomic_write_text(tmp_path / "n.txt", "hi")) == want
    assert mode(save_split({"train": ["a"], "dev": [], "test": ["b"]}, tmp_path / "split.json")) == want
    rubric = new_rubric_file(tmp_path / "sci.yaml", "sci", ["EV", "CL"], grade_min=0, grade_max=2)
    assert mode(rubric) == want
    # no temporary file is left behind
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_adjudicate_outputs_are_readable_by_the_group(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        rubric = new_rubric_file(tmp_path / "sci.yaml", "sci", ["EV"], levels=2, grade_min=0, grade_max=2)
        reviews = tmp_path / "reviews.csv"
        pd.DataFrame({"item": ["a", "a", "b", "b"], "reviewer": ["r1", "r2", "r1", "r2"], "concept": "EV",
                      "level": [1, 2, 2, 2]}).to_csv(reviews, index=False)
        res = run_adjudicate(rubric=rubric, reviews=[reviews], out=tmp_path / "adj",
                             options=AdjudicationOptions(n_boot=0))
    finally:
        os.umask(old)
    assert {p.name: mode(p) for p in res.paths.values()} == {p.name: 0o644 for p in res.paths.values()}


def test_a_checkpoint_and_a_learning_curve_are_readable_by_the_group(tmp_path: Path, backbone: str,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """safetensors creates model.safetensors 0600 and the curve's JSON/PNG were renamed from mkstemp files: a colleague
    could neither grade with the run nor read the curve (an ecology course, not Mohler)."""
    from types import SimpleNamespace
    from typing import Any

    import numpy as np

    import reccbm
    from rubrictool.curve import measure as curve
    from tests.support.tiny_models import tiny_model
    from tests.support.toy_course import ecology_rubric, ecology_table

    def fake_train(rb: Any, table: pd.DataFrame, split: dict[str, list[str]], run_dir: Path, **kw: Any) -> Any:
        Path(run_dir).mkdir(parents=True, exist_ok=True)
        grades = table.set_index(table["id"].astype(str))["grade"]
        acc = float(np.mean(grades.loc[split["test"]].to_numpy() == 2))
        pd.DataFrame({"id": split["test"], "grade": 2}).to_csv(Path(run_dir) / "test_predictions.csv", index=False)
        return SimpleNamespace(metrics={"seeds": [{"test": {"t_acc": acc, "qwk": 0.0, "t_f1": acc}}]})

    monkeypatch.setattr(curve, "train_model", fake_train)
    old = os.umask(0o022)
    try:
        model, tok = tiny_model(backbone)
        weights = reccbm.save_checkpoint(model, tok, tmp_path / "run", "stage2", 1)
        options = curve.CurveOptions(sizes=[20], variants=["plm"], repeats=1, folds=3, fold_ids=[0])
        curve.learning_curve(ecology_rubric(tmp_path), ecology_table(60), tmp_path / "c", options)
    finally:
        os.umask(old)
    assert mode(weights) == 0o644 and mode(tmp_path / "run" / "model.json") == 0o644
    written = [p for p in (tmp_path / "c").rglob("*") if p.is_file()]
    assert {p.name for p in written} >= {"curve.json", "curve.png", "curve.csv"}
    assert {p.name: mode(p) for p in written} == {p.name: 0o644 for p in written}


def test_every_atomic_form_respects_the_umask_and_cleans_up(umask: int, tmp_path: Path) -> None:
    from rubrictool.atomic import atomic_write, atomic_write_bytes, atomic_write_json

    want = 0o666 & ~umask
    assert mode(atomic_write_bytes(tmp_path / "b.bin", b"\x00\x01")) == want
    assert mode(atomic_write_json(tmp_path / "j.json", {"a": 1})) == want
    assert mode(atomic_write(tmp_path / "c.csv", lambda tmp: pd.DataFrame({"a": [1]}).to_csv(tmp))) == want
    assert mode(atomic_write_text(tmp_path / "secret", "s", mode=0o600)) == 0o600
    assert (tmp_path / "j.json").read_text() == '{\n "a": 1\n}\n'
    (tmp_path / "keep.txt").write_text("old")

    def half(tmp: Path) -> None:
        tmp.write_text("half")
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError):
        atomic_write(tmp_path / "keep.txt", half)
    assert (tmp_path / "keep.txt").read_text() == "old"  # the old file is whole
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # and no temporary file is left


def test_reccbm_writes_with_the_same_mode(umask: int, tmp_path: Path) -> None:
    from reccbm.atomic import atomic_write as reccbm_write
    from reccbm.atomic import new_file_mode as reccbm_mode

    assert reccbm_mode() == new_file_mode() == 0o666 & ~umask
    assert mode(reccbm_write(tmp_path / "m.json", lambda tmp: tmp.write_text("{}"))) == 0o666 & ~umask


# The one writer (rubrictool.atomic; reccbm.atomic for reccbm, which never imports rubrictool). Nothing else renames
# a temporary file into place or reads the umask. Folders are another matter: a run is built in a staging folder that
# replaces the old one whole (runs.py), a data set is extracted beside its old copy (data/fetch.py, which also streams
# a download into a part file it deletes), and a learning curve keeps a finished cell's folder (curve.py).
_WRITERS = {"rubrictool/atomic.py", "reccbm/atomic.py"}
_FOLDER_SWAPS = {"rubrictool/train/runs.py", "rubrictool/data/fetch.py", "rubrictool/curve/measure.py"}
_DANCE = re.compile(r"mkstemp\(|os\.umask\(|/proc/self/status|\btmp\.replace\(|os\.replace\(|os\.rename\(|"
                    r"os\.chmod\([^)]*0o[0-7]+|O_CREAT[^)]*0o6[0-4]4")
# curve.py still writes its JSON and PNG through mkstemp + publish; its rewrite moves them to atomic_write.
_PENDING: dict[str, tuple[str, ...]] = {}


def test_no_module_writes_files_its_own_way() -> None:
    root = Path(__file__).resolve().parents[1]
    hits = []
    for path in sorted([*root.glob("rubrictool/**/*.py"), *root.glob("reccbm/*.py"), *root.glob("scripts/*.py")]):
        rel = path.relative_to(root).as_posix()
        if rel in _WRITERS:
            continue
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            found = _DANCE.search(line)
            if not found:
                continue
            if rel in _FOLDER_SWAPS and found.group(0) in ("os.replace(", "os.rename("):
                continue
            if any(found.group(0).startswith(p) for p in _PENDING.get(rel, ())):
                continue
            if rel == "rubrictool/data/fetch.py" and "mkstemp(" in line and ".part" in line:
                continue  # the download's part file, deleted after extraction: never a published output
            if rel in ("rubrictool/outputs.py", "rubrictool/pipeline.py") and "mkstemp(" in line and "probe" in line:
                continue  # a write probe (before any work), removed at once: never an output
            if (rel == "rubrictool/review/server.py" and found.group(0).startswith("os.chmod(")
                    and ("0o600" in line or "0o700" in line)):
                continue  # the server's secrets and its folder: owner-only on purpose
            hits.append(f"{rel}:{n}: {line.strip()}")
    assert not hits, "write through rubrictool.atomic (reccbm: reccbm.atomic) instead:\n" + "\n".join(hits)
