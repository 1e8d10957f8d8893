"""A tiny trained run on a Mohler-shaped table with two graders, for the explain/intervene/report tests."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from tests.support.tiny_models import build_backbone, mohler_like_table, train_with_cli


def graded_table(n: int = 60, seed: int = 0) -> pd.DataFrame:
    """mohler_like_table plus two graders' scores (grade_me, grade_other) near the gold grade."""
    df = mohler_like_table(n, seed)
    rng = np.random.default_rng(seed + 1)
    df["grade_me"] = np.clip(df["grade"] + rng.choice([-0.5, 0, 0, 0.5], n), 0, 5)
    df["grade_other"] = np.clip(df["grade"] + rng.choice([-1, 0, 0, 0.5], n), 0, 5)
    return df


def inspect_run(tmp: Path, *extra: str, n: int = 60) -> tuple[Path, Path]:
    """(run directory, table path): a tiny BERT trained through the CLI on `graded_table(n)`."""
    tmp.mkdir(parents=True, exist_ok=True)
    df = graded_table(n)
    code, output, run = train_with_cli(tmp, build_backbone(tmp, "bert"), df, *extra)
    assert code == 0, output
    return run, tmp / "adjudicated.csv"


def png_ok(path: Path) -> tuple[int, int]:
    """(width, height) of a valid PNG; raises when the file is not one."""
    from PIL import Image

    with Image.open(path) as im:
        im.verify()
    with Image.open(path) as im:
        assert im.format == "PNG"
        return im.size
