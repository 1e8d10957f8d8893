"""The one device reccbm computes on: every training stage, prediction and grading take the same name.

``"auto"`` is a CUDA GPU when torch sees one (under ``accelerate launch``, this process's GPU: ``LOCAL_RANK``), else the
CPU; ``"cpu"`` forces the CPU; ``"cuda"`` or ``"cuda:N"`` asks for a GPU and is refused without one. Between calls a
model lives on the CPU (checkpoints, the decision trace and every numpy read-out expect it there): a function given a
device moves the model there, computes, and puts it back (:func:`on_device`).

bf16 autocast (:func:`autocast`) is opt-in (``StageIConfig.mixed_precision = "bf16"``): off by default until measured
against float32 on a GPU.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any

import torch
from torch import nn

from reccbm.errors import ReccbmError

__all__ = ["DEVICES", "autocast", "describe_device", "model_device", "on_device", "resolve_device"]

DEVICES = ("auto", "cpu", "cuda")  # what a config names; "cuda:N" picks one GPU


def resolve_device(device: str | torch.device | None = "auto") -> torch.device:
    """The torch device that ``device`` names (None = "auto"): a clear error for an unknown name, or a GPU asked for
    where torch sees none."""
    if isinstance(device, torch.device):
        return device
    name = (device or "auto").strip().lower()
    if name == "auto":
        if torch.cuda.is_available():
            rank = os.environ.get("LOCAL_RANK")
            return torch.device("cuda", int(rank) if rank and rank.isdigit() else torch.cuda.current_device())
        return torch.device("cpu")
    if name == "cpu":
        return torch.device("cpu")
    if name == "cuda" or name.startswith("cuda:"):
        if not torch.cuda.is_available():
            built = "without CUDA" if torch.version.cuda is None else "with CUDA " + torch.version.cuda
            raise ReccbmError(f"device {device!r}: torch sees no CUDA GPU here (torch {torch.__version__}, "
                              f"built {built})")
        try:
            dev = torch.device(name)
        except RuntimeError:
            raise ReccbmError(f"device {device!r} is not a device name; use auto, cpu, cuda or cuda:N") from None
        return dev if dev.index is not None else torch.device("cuda", torch.cuda.current_device())
    raise ReccbmError(f"unknown device {device!r}; use auto (CUDA when present), cpu, cuda or cuda:N")


def describe_device(device: str | torch.device | None = "auto") -> dict[str, Any]:
    """What a run computes on, for its record: the device, the GPU's name (or the CPU's threads), torch and CUDA."""
    dev = resolve_device(device)
    out: dict[str, Any] = {"device": str(dev), "torch": torch.__version__, "cuda": torch.version.cuda}
    if dev.type == "cuda":
        props = torch.cuda.get_device_properties(dev)
        out |= {"name": props.name, "memory_gib": round(props.total_memory / 2**30, 1),
                "bf16": bool(torch.cuda.is_bf16_supported())}
    else:
        # the processor and the kernels torch picked for it (AVX2, AVX512, ...): the last bits of a CPU run's numbers
        # depend on them, so two machines with the same install can train different models from the same seed
        out |= {"name": "CPU", "threads": torch.get_num_threads(), "cores": os.cpu_count(), "processor": _processor(),
                "kernels": torch.backends.cpu.get_cpu_capability()}
    return out


def _processor() -> str | None:
    """The CPU's model name (Linux's /proc/cpuinfo; elsewhere what :mod:`platform` says, or None)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or None


def model_device(model: nn.Module) -> torch.device:
    """The device of the model's first parameter (the CPU for a model without parameters)."""
    for p in model.parameters():
        return p.device
    return torch.device("cpu")


@contextmanager
def on_device(model: nn.Module, device: str | torch.device | None) -> Iterator[torch.device]:
    """Run the block with ``model`` on ``device`` (None: where it is now), then put it back where it was.

    Both moves are made outside inference mode, also when the block runs in it (:func:`reccbm.predict`): a move makes
    new parameter and buffer tensors, and tensors made in inference mode can never again be updated in place or saved
    for backward: the next stage that trains the model, or sets LCEC's prior mean, would fail on them."""
    home = model_device(model)
    dev = home if device is None else resolve_device(device)
    if dev != home:
        with torch.inference_mode(False):
            model.to(dev)
    try:
        yield dev
    finally:
        if dev != home:
            with torch.inference_mode(False):
                model.to(home)


def autocast(device: torch.device, precision: str = "no") -> AbstractContextManager[Any]:
    """bf16 autocast on ``device`` when ``precision`` is "bf16" and a CUDA device has bf16 (a CPU runs float32, as
    does every other precision name); a no-op otherwise."""
    if precision == "bf16" and device.type == "cuda" and torch.cuda.is_bf16_supported():
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return nullcontext()
