"""Shared test set-up: offline environment, the data directory, small fixtures.

Servers the integration tests need (Label Studio, an OpenAI-compatible LLM server) are started by
the fixtures of those tests on 127.0.0.1 and stopped afterwards.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SHARED_DATA = ROOT.parent / "shared" / "datasets"

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
if "RUBRICTOOL_DATA" not in os.environ and SHARED_DATA.is_dir():
    os.environ["RUBRICTOOL_DATA"] = str(SHARED_DATA)


def require_or_skip(ok: bool, why: str) -> None:
    """Skip a test whose server is not installed, except in CI (RUBRICTOOL_REQUIRE_SERVERS=1): fail there."""
    if ok:
        return
    if os.environ.get("RUBRICTOOL_REQUIRE_SERVERS") == "1":
        pytest.fail(f"{why} (RUBRICTOOL_REQUIRE_SERVERS=1: run `bash setup.sh --all`)")
    pytest.skip(why)


@pytest.fixture(scope="session")
def data_dir() -> Path:
    d = Path(os.environ["RUBRICTOOL_DATA"]) if "RUBRICTOOL_DATA" in os.environ else SHARED_DATA
    require_or_skip(
        (d / "mohler" / "data" / "docs" / "files").is_file(),
        f"no Mohler data under {d}; set RUBRICTOOL_DATA (CI expects ../shared/datasets beside the clone)",
    )
    return d


@pytest.fixture(scope="session")
def mohler_items(data_dir: Path):  # type: ignore[no-untyped-def]
    from rubrictool.data import load_mohler

    return load_mohler(data_dir)


@pytest.fixture(scope="session")
def mohler_rubric():  # type: ignore[no-untyped-def]
    from rubrictool.rubric import load_rubric

    return load_rubric("mohler")
