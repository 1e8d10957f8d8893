"""Checkpoints: ``model.safetensors`` + ``model.json`` + ``backbone/`` (HF config and tokenizer).

A run directory is self-contained: loading needs neither the original backbone path nor the
network, and no part of ``rubrictool``::

    model, tokenizer, meta = reccbm.load_checkpoint("runs/mohler")

Runs that are parts of one whole (the folds of a k-fold run) may keep their encoder's weights in a folder they
share (``save_checkpoint(..., shared_dir=...)``): the encoder's tensors go to ``encoder-<digest>.safetensors`` there,
named by a digest of their content, so folds whose encoder is the same (a frozen encoder is the backbone's own
weights in every fold) store it once; ``model.safetensors`` holds the rest, and ``model.json``'s ``encoder_weights``
names the shared file (relative to the run), its digest and size. Such a run loads from inside its folder.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from dataclasses import asdict
from pathlib import Path
from typing import Any

from reccbm.atomic import atomic_write
from reccbm.config import ModelConfig, config_from_dict
from reccbm.data import load_tokenizer
from reccbm.decision import CalibratedBayes, Cutpoints, Decision
from reccbm.errors import ReccbmError
from reccbm.model import Model, TextEncoder, build_model

__all__ = ["FORMAT", "load_checkpoint", "read_meta", "save_checkpoint"]

FORMAT = "reccbm-checkpoint/1"


def save_checkpoint(
    model: Model, tokenizer: Any, run_dir: str | Path, stage: str, step: int, meta: dict[str, Any] | None = None,
    shared_dir: str | Path | None = None,
) -> Path:
    """Write the weights, the model config, stage/step and caller metadata (concept keys, levels,
    grade scale, ...) into run_dir; returns the path of model.safetensors. ``shared_dir``: keep the encoder's
    weights there, once per distinct content (see the module docstring), instead of in model.safetensors."""
    from safetensors.torch import save_model

    run = Path(run_dir)
    (run / "backbone").mkdir(parents=True, exist_ok=True)
    model.encoder.hf_config.save_pretrained(run / "backbone")
    tokenizer.save_pretrained(str(run / "backbone"))
    path = run / "model.safetensors"
    doc = {"format": FORMAT, "model_config": asdict(model.config), "stage": stage, "step": step} | (meta or {})
    if isinstance(model.decision, Cutpoints):  # the decision rule fitted after training (reccbm/decision.py)
        doc["decision"] = {"rule": "cutpoints", "cutpoints": list(model.decision.t)}
    elif isinstance(model.decision, CalibratedBayes):
        d = model.decision
        doc["decision"] = {"rule": "bayes", "temperature": d.temperature, "bias": list(d.bias),
                           "cost": [list(r) for r in d.cost]}
    if shared_dir is None:
        atomic_write(path, lambda tmp: save_model(model, str(tmp)))
    else:
        doc["encoder_weights"] = _save_split(model, path, Path(shared_dir), run)
    text = json.dumps(doc, indent=2, default=str) + "\n"
    atomic_write(run / "model.json", lambda tmp: tmp.write_text(text, encoding="utf-8"))
    return path


ENCODER_PREFIX = "encoder."


def _tensors_digest(state: dict[str, Any]) -> str:
    """sha256 over the names, dtypes, shapes and bytes of tensors, in name order."""
    import torch

    h = hashlib.sha256()
    for name in sorted(state):
        t = state[name].detach().cpu().contiguous()
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()


def _save_split(model: Model, path: Path, shared: Path, run: Path) -> dict[str, Any]:
    """model.safetensors without the encoder; the encoder's tensors in ``shared``, named by their digest (written only
    when no file of that content is there yet, atomically). Returns model.json's ``encoder_weights``."""
    from safetensors.torch import save_file

    state = {k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()}
    encoder = {k: v for k, v in state.items() if k.startswith(ENCODER_PREFIX)}
    rest = {k: v.clone() for k, v in state.items() if not k.startswith(ENCODER_PREFIX)}  # no storage shared with enc
    digest = _tensors_digest(encoder)
    target = shared / f"encoder-{digest[:16]}.safetensors"
    if not target.is_file():
        atomic_write(target, lambda tmp: save_file(encoder, str(tmp)))
    atomic_write(path, lambda tmp: save_file(rest, str(tmp)))
    return {"file": os.path.relpath(target, run), "sha256": digest, "bytes": target.stat().st_size}


def _load_split(model: Model, weights: Path, run: Path, shared: dict[str, Any]) -> tuple[list[str], list[str]]:
    from safetensors.torch import load_file

    enc = (run / str(shared.get("file"))).resolve()
    if not enc.is_file():
        raise ReccbmError(f"{run}: its encoder weights are kept in {shared.get('file')} beside it (shared by the folds "
                          "of a k-fold run), which is missing: open the fold inside its k-fold folder")
    if shared.get("bytes") is not None and enc.stat().st_size != shared["bytes"]:
        raise ReccbmError(f"{enc} has {enc.stat().st_size} bytes, the run recorded {shared['bytes']}: it was changed "
                          "or cut short; train the run again")
    state = load_file(str(weights)) | load_file(str(enc))
    result = model.load_state_dict(state, strict=False)
    return list(result.missing_keys), list(result.unexpected_keys)


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
    shared = meta.get("encoder_weights")
    if shared:  # the encoder's weights in a file the run shares with others (a k-fold run's folds)
        missing, unexpected = _load_split(model, weights, run, shared)
    else:
        missing, unexpected = load_model(model, str(weights), strict=False)
    missing = [k for k in missing if not k.endswith("lcec.mu0")]  # older checkpoints: prior mean 0
    if missing or unexpected:
        raise ReccbmError(f"{weights} does not match model.json: missing {missing[:3]}, unexpected {unexpected[:3]}")
    model.decision = _decision(meta, run)
    model.eval()
    if device != "cpu":
        from reccbm.device import resolve_device

        model.to(resolve_device(device))
    return model, load_tokenizer(str(run / "backbone")), meta


def _decision(meta: dict[str, Any], run: Path) -> Decision | None:
    """The decision rule model.json records (None: argmax, as every run before the rule was added)."""
    doc = meta.get("decision")
    if not doc:
        return None
    m = int(meta["model_config"]["num_grades"])

    def numbers(v: Any, n: int) -> bool:
        return isinstance(v, list) and len(v) == n and all(
            isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) for x in v)

    bad = f"{run / 'model.json'}: bad decision"
    rule = doc.get("rule") if isinstance(doc, dict) else None
    if rule == "cutpoints":
        t = doc.get("cutpoints")
        if not numbers(t, m - 1) or sorted(t) != t:
            raise ReccbmError(f"{bad}: cutpoints must be {m - 1} finite non-decreasing numbers")
        return Cutpoints(tuple(float(x) for x in t))
    if rule == "bayes":
        temp, bias, cost = doc.get("temperature"), doc.get("bias"), doc.get("cost")
        if (not numbers([temp], 1) or not numbers(bias, m) or not isinstance(cost, list) or len(cost) != m
                or not all(numbers(r, m) for r in cost)):
            raise ReccbmError(f"{bad}: a bayes rule has a finite temperature, {m} biases and a {m}×{m} cost matrix")
        return CalibratedBayes(float(temp), tuple(float(b) for b in bias),
                               tuple(tuple(float(c) for c in r) for r in cost))
    raise ReccbmError(f"{bad}: unknown rule {rule!r} (cutpoints or bayes)")
