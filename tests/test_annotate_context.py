"""A prompt longer than the model's context (litellm's max_input_tokens) is warned about by the dry run and by the
real run before anything is sent; a model whose context litellm does not know (a local alias) is not checked."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from typer.testing import CliRunner

from rubrictool.cli import app
from tests.support.llm_server import Reply, ScriptedLLMServer, Seen, line_reply

runner = CliRunner()
WORDS = "the prototype lets you test one part of the program early " * 12_500  # ~137k tokens


def _items(tmp_path: Path) -> Path:
    path = tmp_path / "items.csv"
    pd.DataFrame({"id": ["short", "huge"], "question": ["What is a prototype?"] * 2,
                  "response": ["It tests a part early.", WORDS],
                  "reference": ["A model of part of the product."] * 2}).to_csv(path, index=False)
    return path


def test_the_dry_run_warns_of_prompts_longer_than_the_context(tmp_path: Path) -> None:
    res = runner.invoke(app, ["annotate", "--rubric", "mohler", "--items", str(_items(tmp_path)), "--model",
                              "gpt-4o-mini", "--dry-run", "--no-cache"])
    flat = " ".join(res.output.split())
    assert res.exit_code == 0, res.output
    assert "1 of 2 prompts are longer than gpt-4o-mini's context of 128,000 tokens" in flat, flat
    assert "the longest: item huge" in flat


def test_the_real_run_warns_before_sending(tmp_path: Path) -> None:
    def responder(seen: Seen) -> Reply:
        return Reply(content=line_reply(seen.response[:40]))

    with ScriptedLLMServer(responder) as srv:
        res = runner.invoke(app, ["annotate", "--rubric", "mohler", "--items", str(_items(tmp_path)), "--model",
                                  "openai/gpt-4o-mini", "--api-base", srv.url, "--no-cache", "--out",
                                  str(tmp_path / "out"), "--backoff", "0"], env={"OPENAI_API_KEY": "sk-test"})
    flat = " ".join(res.output.split())
    assert "1 of 2 prompts are longer than openai/gpt-4o-mini's context of 128,000 tokens" in flat, flat
