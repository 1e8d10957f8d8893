"""Checkpoints: ``model.safetensors`` + ``model.json`` + ``backbone/`` (HF config and tokenizer).

A run directory is self-contained: loading needs neither the original backbone path nor the
network, and no part of ``rubrictool``::

    model, tokenizer, meta = reccbm.load_checkpoint("runs/mohler")
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

from reccbm.atomic import atomic_write
from reccbm.config import ModelConfig, config_from_dict
from reccbm.data import load_tokenizer
from reccbm.errors import ReccbmError
from reccbm.model import Model, TextEncoder, build_model

__all__ = ["FORMAT", "load_checkpoint", "read_meta", "save_checkpoint"]

FORMAT = "reccbm-checkpoint/1"


def save_checkpoint(
    model: Model, tokenizer: Any, run_dir: str | Path, stage: str, step: int, meta: dict[str, Any] | None = None
) -> Path:
    """Write the weights, the model config, stage/step and caller metadata (concept keys, levels,
    grade scale, ...) into run_dir; returns the path of model.safetensors."""
    from safetensors.torch import save_model

    run = Path(run_dir)
    (run / "backbone").mkdir(parents=True, exist_ok=True)
    model.encoder.hf_config.save_pretrained(run / "backbone")
    tokenizer.save_pretrained(str(run / "backbone"))
    path = run / "model.safetensors"
    atomic_write(path, lambda tmp: save_model(model, str(tmp)))
    doc = {"format": FORMAT, "model_config": asdict(model.config), "stage": stage, "step": step} | (meta or {})
    text = json.dumps(doc, indent=2, default=str) + "\n"
    atomic_write(run / "model.json", lambda tmp: tmp.write_text(text, encoding="utf-8"))
    return path


def read_meta(run_dir: str | Path) -> dict[str, Any]:
    """The parsed model.json of a run directory (clear error when it is not one)."""
    path = Path(run_dir) / "model.json"
    if not path.is_file():
        raise ReccbmError(f"{run_dir} is not a trained model: {path.name} is missing")
    try:
        doc: dict[str, Any] = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise ReccbmError(f"{path} is not valid JSON: {exc}") from exc
    if doc.get("format") != FORMAT:
        raise ReccbmError(f"{path} has format {doc.get('format')!r}, expected {FORMAT!r}")
    return doc


def load_checkpoint(run_dir: str | Path, device: Any = "cpu") -> tuple[Model, Any, dict[str, Any]]:
    """(model in eval mode on ``device``, tokenizer, model.json contents) from a run directory. ``device``: "cpu" (the
    default: where :mod:`reccbm.explain` reads the model), "auto" (CUDA when present), "cuda" or a torch.device
    (:func:`reccbm.device.resolve_device`); :func:`reccbm.predict` also takes a device per call. The model is a
    :class:`reccbm.RecCBM`, or a :class:`reccbm.PLM` when model.json's model_config has ``plm`` (the baseline's weights:
    encoder + plm_head)."""
    from safetensors.torch import load_model
    from transformers import AutoConfig

    run = Path(run_dir)
    meta = read_meta(run)
    try:
        cfg: ModelConfig = config_from_dict(ModelConfig, meta["model_config"])
    except (TypeError, ValueError) as exc:
        raise ReccbmError(f"{run / 'model.json'}: bad model_config: {exc}") from None
    weights = run / "model.safetensors"
    if not weights.is_file():
        raise ReccbmError(f"{run_dir} has no model.safetensors")
    hf_config = AutoConfig.from_pretrained(str(run / "backbone"), local_files_only=True)
    model = build_model(cfg, TextEncoder.from_config(hf_config))
    missing, unexpected = load_model(model, str(weights), strict=False)
    missing = [k for k in missing if not k.endswith("lcec.mu0")]  # older checkpoints: prior mean 0
    if missing or unexpected:
        raise ReccbmError(f"{weights} does not match model.json: missing {missing[:3]}, unexpected {unexpected[:3]}")
    model.eval()
    if device != "cpu":
        from reccbm.device import resolve_device

        model.to(resolve_device(device))
    return model, load_tokenizer(str(run / "backbone")), meta
