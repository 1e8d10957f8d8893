"""`grade --engine onnx`: the encoder in ONNX Runtime (float32 and int8), its cache, its errors."""

from __future__ import annotations

import json
import os
import shutil
import stat
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import torch
from typer.testing import CliRunner

import reccbm
from reccbm.data import collate
from reccbm.model import TextEncoder
from reccbm.onnx_encoder import FLOAT_NAME, INT8_NAME, OnnxEncoder, export_encoder, require_onnx
from rubrictool.cli import app
from rubrictool.errors import TrainError
from rubrictool.grade import grade_items, load_grader
from rubrictool.train.runs import sha256_file
from tests.support.tiny_models import (
    FAMILIES,
    KEYS,
    build_backbone,
    encoded,
    mohler_like_table,
    tiny_bert_run,
    tiny_model,
    toy_table,
)

pytestmark = pytest.mark.usefixtures("one_thread")

runner = CliRunner()


@pytest.fixture(autouse=True)
def private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The fallback cache (~/.cache/rubrictool/onnx) goes to a temporary folder, never the real one."""
    cache = tmp_path / "xdg-cache"
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    return cache


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # the paper's recipe: on 40 toy items it predicts several grades, which the agreement check needs
    return tiny_bert_run(tmp_path_factory.mktemp("onnxrun"), "--preset", "paper")


@pytest.fixture
def run(trained: Path, tmp_path: Path) -> Path:
    """A private copy of the trained run (tests write its onnx/ cache and change its weights)."""
    return Path(shutil.copytree(trained, tmp_path / "run"))


@pytest.fixture(scope="module")
def new_items() -> pd.DataFrame:
    return mohler_like_table(80, seed=11).drop(columns=KEYS + ["grade"])


def _numeric(df: pd.DataFrame) -> pd.DataFrame:
    return df.drop(columns=["id", "flags"]).astype(float)


def test_onnx_float32_gives_the_torch_grades(run: Path, new_items: pd.DataFrame) -> None:
    ref = grade_items(run, new_items)
    got = grade_items(run, new_items, engine="onnx")
    assert (run / "onnx" / FLOAT_NAME).is_file()
    assert list(got.columns) == list(ref.columns)
    assert (got["grade"] == ref["grade"]).all() and (got["flags"] == ref["flags"]).all()
    np.testing.assert_allclose(got["grade_prob"], ref["grade_prob"], atol=1e-4)
    np.testing.assert_allclose(_numeric(got), _numeric(ref), atol=1e-4)  # levels, μ_post, contributions


def test_onnx_int8_mostly_agrees_and_is_quantised(run: Path, new_items: pd.DataFrame) -> None:
    import onnx

    ref = grade_items(run, new_items)
    got = grade_items(run, new_items, engine="onnx", int8=True)
    path = run / "onnx" / INT8_NAME
    ops = {n.op_type for n in onnx.load(str(path)).graph.node}
    assert ops & {"DynamicQuantizeMatMul", "MatMulInteger", "QAttention"}, ops  # really int8
    assert path.stat().st_size < 0.6 * (run / "onnx" / FLOAT_NAME).stat().st_size
    dprob = np.abs(got["grade_prob"].to_numpy() - ref["grade_prob"].to_numpy())
    assert dprob.max() > 1e-6  # the numbers do shift ...
    assert dprob.mean() < 0.02  # ... a little
    same = float((got["grade"] == ref["grade"]).mean())
    majority = float(ref["grade"].value_counts(normalize=True).iloc[0])
    # the tiny model predicts two grades (46 vs 34 of 80): always answering the majority grade would agree
    # 57 %; int8 agrees on 100 % here (probabilities move by ~2e-5), 97 % on the real MiniLM run
    assert ref["grade"].nunique() >= 2
    assert same >= 0.9 and same >= majority + 0.2, (same, majority)


def test_the_export_is_cached_once_and_rebuilt_when_the_weights_change(run: Path, new_items: pd.DataFrame) -> None:
    enc = load_grader(run, engine="onnx").model_.encoder
    path = run / "onnx" / FLOAT_NAME
    assert isinstance(enc, OnnxEncoder) and enc.path == path
    first = path.stat().st_mtime_ns
    enc = load_grader(run, engine="onnx").model_.encoder
    assert path.stat().st_mtime_ns == first  # re-used, not rewritten
    assert not [p.name for p in path.parent.iterdir() if p.name.endswith(".tmp")]  # no temporary files left
    int8 = run / "onnx" / INT8_NAME
    load_grader(run, int8=True, engine="onnx")
    int8_first = int8.stat().st_mtime_ns
    load_grader(run, int8=True, engine="onnx")
    assert int8.stat().st_mtime_ns == int8_first and path.stat().st_mtime_ns == first

    # new weights (as after re-training): both files are rebuilt, and the grades follow the new weights
    from safetensors.torch import save_model

    model, _, _ = reccbm.load_checkpoint(run)
    with torch.no_grad():
        for p in model.encoder.parameters():
            p.add_(0.05 * torch.randn_like(p))
    old = grade_items(run, new_items, engine="onnx")
    save_model(model, str(run / "model.safetensors"))
    with pytest.raises(TrainError, match="model.safetensors changed after the run was written"):
        grade_items(run, new_items, engine="onnx")  # weights swapped behind the run's completion record
    record = json.loads((run / "run.json").read_text())  # re-training records the new weights
    record["files"]["model.safetensors"] = {"bytes": (run / "model.safetensors").stat().st_size,
                                            "sha256": sha256_file(run / "model.safetensors")}
    (run / "run.json").write_text(json.dumps(record))
    new = grade_items(run, new_items, engine="onnx")
    assert path.stat().st_mtime_ns != first
    np.testing.assert_allclose(new["grade_prob"], grade_items(run, new_items)["grade_prob"], atol=1e-4)
    assert not np.allclose(new["grade_prob"], old["grade_prob"], atol=1e-4)
    load_grader(run, int8=True, engine="onnx")
    assert int8.stat().st_mtime_ns != int8_first


def test_a_read_only_run_directory_uses_the_user_cache(run: Path, private_cache: Path,
                                                        new_items: pd.DataFrame) -> None:
    (run / "onnx").write_text("not a folder")  # RUN/onnx cannot be created (even by root) ...
    mode = run.stat().st_mode
    run.chmod(stat.S_IRUSR | stat.S_IXUSR)  # ... and the run directory is read-only (for non-root users)
    try:
        got = grade_items(run, new_items.head(10), engine="onnx")
    finally:
        run.chmod(mode)
    cached = list((private_cache / "rubrictool" / "onnx").glob(f"*/{FLOAT_NAME}"))
    assert len(cached) == 1
    np.testing.assert_allclose(got["grade_prob"], grade_items(run, new_items.head(10))["grade_prob"], atol=1e-4)


def test_cli_engine_onnx_writes_the_torch_columns(run: Path, tmp_path: Path, new_items: pd.DataFrame) -> None:
    new_items.head(20).to_csv(tmp_path / "new.csv", index=False)
    outs = {}
    for name, extra in (("torch", []), ("onnx", ["--engine", "onnx"]), ("onnx8", ["--engine", "onnx", "--int8"])):
        out = tmp_path / f"{name}.csv"
        res = runner.invoke(app, ["grade", "--run", str(run), "--items", str(tmp_path / "new.csv"), "-o", str(out),
                                  *extra])
        assert res.exit_code == 0, res.output
        assert "graded 20 responses" in res.output
        outs[name] = pd.read_csv(out)
    assert list(outs["onnx"].columns) == list(outs["torch"].columns) == list(outs["onnx8"].columns)
    assert (outs["onnx"]["model_grade"] == outs["torch"]["model_grade"]).all()
    np.testing.assert_allclose(outs["onnx"]["grade_prob"], outs["torch"]["grade_prob"], atol=1e-4)


def test_unknown_engine_is_a_one_line_error(run: Path, tmp_path: Path, new_items: pd.DataFrame) -> None:
    new_items.head(3).to_csv(tmp_path / "new.csv", index=False)
    res = runner.invoke(app, ["grade", "--run", str(run), "--items", str(tmp_path / "new.csv"), "--engine", "tensorrt"])
    assert res.exit_code == 1
    assert res.output.strip() == "error: unknown engine 'tensorrt'; use torch or onnx"


def test_without_the_onnx_extra_the_engine_names_the_install_command(
        run: Path, tmp_path: Path, new_items: pd.DataFrame, monkeypatch: pytest.MonkeyPatch) -> None:
    """onnx and onnxruntime are an optional extra: without them `--engine onnx` is one line naming the command that
    installs them, nothing is written, and torch grading works as before."""
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # `import onnxruntime` now raises ImportError
    new_items.head(3).to_csv(tmp_path / "new.csv", index=False)
    out = tmp_path / "graded.csv"
    res = runner.invoke(app, ["grade", "--run", str(run), "--items", str(tmp_path / "new.csv"), "--engine", "onnx",
                              "--out", str(out)])
    assert res.exit_code == 1
    assert res.output.strip() == ("error: the ONNX engine needs onnxruntime, not installed here: "
                                  "pip install 'rubrictool[onnx]'; or use --engine torch")
    assert not out.exists() and not (run / "onnx").exists()
    monkeypatch.setitem(sys.modules, "onnx", None)
    with pytest.raises(reccbm.ReccbmError, match=r"needs onnx and onnxruntime, not installed here: pip install"):
        require_onnx()
    res = runner.invoke(app, ["grade", "--run", str(run), "--items", str(tmp_path / "new.csv"), "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert len(pd.read_csv(out)) == 3


def test_a_model_that_does_not_export_is_a_one_line_error(run: Path, tmp_path: Path, new_items: pd.DataFrame,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("Exporting the operator 'aten::something' to ONNX opset version 17 is not supported.\n"
                           "Please feel free to request support")

    monkeypatch.setattr(torch.onnx, "export", refuse)
    new_items.head(3).to_csv(tmp_path / "new.csv", index=False)
    res = runner.invoke(app, ["grade", "--run", str(run), "--items", str(tmp_path / "new.csv"), "--engine", "onnx"])
    assert res.exit_code == 1
    assert res.output.strip() == "error: the ONNX engine does not support bert; use --engine torch"
    assert not (run / "onnx" / FLOAT_NAME).exists()


@pytest.mark.parametrize("family", FAMILIES)
def test_every_backbone_family_exports(tmp_path_factory: pytest.TempPathFactory, tmp_path: Path, family: str) -> None:
    """The export matches torch on real tokens for the five families (dynamic batch and length)."""
    backbone = build_backbone(tmp_path_factory.getbasetemp() / "onnx-families", family)
    model, tok = tiny_model(backbone)
    model.eval()
    assert isinstance(model.encoder, TextEncoder)
    enc = OnnxEncoder(export_encoder(model.encoder, tmp_path / "e.onnx"), model.encoder.hf_config)
    items = encoded(tok, toy_table(12))
    for idx in ([0, 1, 2, 3, 4], list(range(12))):
        batch = collate(items, idx, tok.pad_token_id)
        with torch.inference_mode():
            ref = model.encoder(batch["input_ids"], batch["attention_mask"], batch.get("token_type_ids"))
        got = enc(batch["input_ids"], batch["attention_mask"], batch.get("token_type_ids"))
        real = batch["attention_mask"].bool()
        assert got.shape == ref.shape and got.dtype == torch.float32
        assert float((got - ref).abs()[real].max()) < 1e-4
    # the export leaves its file alone (no temporary file); the private cache folder, where a library may put its own
    # files the first time it runs in the process, is the fixture's
    assert sorted(set(os.listdir(tmp_path)) - {"xdg-cache"}) == ["e.onnx"]


def test_the_layer_mix_exports_with_the_backbone(backbone: str, tmp_path: Path) -> None:
    """model.layer_mix: the ONNX encoder gives the mixed H (trained-looking weights, not the even start), not the last
    layer's."""
    model, tok = tiny_model(backbone, layer_mix=True)
    model.eval()
    assert isinstance(model.encoder, TextEncoder) and model.encoder.mix is not None
    with torch.no_grad():
        model.encoder.mix.w.copy_(torch.linspace(-1.0, 2.0, model.encoder.mix.w.numel()))
        model.encoder.mix.gamma.fill_(1.7)
    enc = OnnxEncoder(export_encoder(model.encoder, tmp_path / "e.onnx"), model.encoder.hf_config)
    batch = collate(encoded(tok, toy_table(6)), list(range(6)), tok.pad_token_id)
    with torch.inference_mode():
        ref = model.encoder(batch["input_ids"], batch["attention_mask"], batch.get("token_type_ids"))
        last = model.encoder.module(input_ids=batch["input_ids"],
                                    attention_mask=batch["attention_mask"]).last_hidden_state
    got = enc(batch["input_ids"], batch["attention_mask"], batch.get("token_type_ids"))
    real = batch["attention_mask"].bool()
    assert float((got - ref).abs()[real].max()) < 1e-4
    assert float((got - last).abs()[real].max()) > 1e-2
