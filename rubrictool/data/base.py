"""What every benchmark loader shares: the data directory and the grade rounding rule."""

from __future__ import annotations

import os
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path

from rubrictool.errors import DataError

__all__ = ["DATA_ENV", "benchmark_dir", "resolve_data_dir", "round_half_up"]

DATA_ENV = "RUBRICTOOL_DATA"


def resolve_data_dir(data_dir: str | Path | None = None) -> Path:
    """The folder that holds benchmark data: the option, else $RUBRICTOOL_DATA, else ./data."""
    if data_dir is not None:
        return Path(data_dir)
    env = os.environ.get(DATA_ENV)
    return Path(env) if env else Path("data")


def round_half_up(x: float) -> int:
    """Round .5 up (Python's round() rounds half to even: 2.5 -> 2)."""
    return int(Decimal(str(x)).quantize(Decimal(1), rounding=ROUND_HALF_UP))


def benchmark_dir(name: str, data_dir: str | Path | None, markers: tuple[str, ...], what: str) -> Path:
    """``<data dir>/<name>`` (or the data dir itself) when it holds one of ``markers``; else one clear error
    saying where the files go and which command fetches them."""
    base = resolve_data_dir(data_dir)
    # the data dir itself only when it is the benchmark's folder or the marker is unmistakable (Mohler's
    # data/docs/files): a stray train.csv beside other data is not ASAP 2.0
    bare = base.name == name or len(Path(markers[0]).parts) > 1
    for cand in (base / name, base) if bare else (base / name,):
        if any((cand / m).is_file() for m in markers):
            return cand
    raise DataError(
        f"{base}: no {what} (expected {base / name / markers[0]})",
        hint=f"run `rubrictool data fetch {name}` or point --data-dir / ${DATA_ENV} at a folder holding {name}/",
    )
