"""The one device: every stage of a model trains where its accelerator computes, also when the model was prepared by an
earlier stage; Stage II, LCEC, prediction and checkpoints follow the device they are given; the CPU's numbers stay."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from accelerate import Accelerator

import reccbm
import reccbm.train as rtrain
from reccbm import JointConfig, ReccbmError, StageIConfig, StageIIConfig
from reccbm.device import describe_device, on_device, resolve_device
from tests.support.tiny_models import FAST1, FAST2, encoded, tiny_model, toy_table

pytestmark = pytest.mark.usefixtures("one_thread")

ELSEWHERE = torch.device("meta")  # a device that is not the model's (no GPU needed): tensors can live there


class _ElsewhereAccelerator(Accelerator):  # type: ignore[misc]
    """An Accelerator that computes on ELSEWHERE: it places what it prepares there, as a GPU's would on its GPU."""

    @property
    def device(self) -> torch.device:
        return ELSEWHERE


class _Checked(Exception):
    """Raised by the checking loss once it has seen the first batch (nothing can be computed on 'meta')."""


def _checking_loss(seen: list[set[torch.device]]) -> Any:
    def make(*_: Any) -> Any:
        def loss(model: Any, batch: dict[str, torch.Tensor]) -> torch.Tensor:
            seen.append({p.device for p in model.parameters()} | {t.device for t in batch.values()
                                                                  if isinstance(t, torch.Tensor)})
            raise _Checked

        return loss

    return make


@pytest.mark.parametrize("second", ["stage1", "joint"])
def test_a_second_stage_on_one_model_trains_on_the_accelerators_device(
    backbone: str, monkeypatch: pytest.MonkeyPatch, second: str
) -> None:
    """Stage I, then a second stage on the same model under an accelerator whose device is not the model's: every
    parameter and every batch of the second stage is on that device. Accelerate's prepare() returns a model it
    prepared before as it is, without placing it, and the first stage leaves the model on the CPU: a trainer that
    relies on prepare() for placement trains a CPU model on the device's batches (the crash on a GPU)."""
    model, tok = tiny_model(backbone)
    train, dev = encoded(tok, toy_table(16, seed=1)), encoded(tok, toy_table(8, seed=2))
    cfg = StageIConfig(lr=3e-3, epochs=1, batch_size=8, eval_batch_size=16, device="cpu", max_steps_per_epoch=1)
    reccbm.train_concepts(model, train, dev, cfg, tok.pad_token_id)  # a real CPU stage: the model is prepared now
    assert getattr(model, "_is_accelerate_prepared", False), "accelerate no longer marks a prepared model"
    assert {p.device.type for p in model.parameters()} == {"cpu"}
    seen: list[set[torch.device]] = []
    monkeypatch.setattr(rtrain, "_accelerator", lambda c: _ElsewhereAccelerator(cpu=True))
    monkeypatch.setattr(rtrain, "stage1_loss" if second == "stage1" else "joint_loss", _checking_loss(seen))
    with pytest.raises(_Checked):
        if second == "stage1":
            reccbm.train_concepts(model, train, dev, cfg, tok.pad_token_id)
        else:
            reccbm.train_joint(model, train, dev, cfg, JointConfig(epochs=1, select="last"), StageIIConfig(epochs=1),
                               tok.pad_token_id, reference_c_acc=0.0)
    assert seen == [{ELSEWHERE}], f"the second stage computed on {seen}: the model was not placed on the device"


def test_stage2_lcec_and_predict_run_on_the_device_they_are_given(backbone: str,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Stage II, the LCEC fit and prediction move the model to the device given (here the CPU, from where a spy sees
    every grade-head call) and put it back where it was."""
    model, tok = tiny_model(backbone)
    train, dev = encoded(tok, toy_table(16, seed=1)), encoded(tok, toy_table(8, seed=2))
    p_tr, p_dev = (reccbm.cache_concepts(model, s, tok.pad_token_id, device="cpu") for s in (train, dev))
    devices: list[torch.device] = []
    real = type(model).grade_from_concepts

    def spy(self: Any, p_hat: torch.Tensor, observed: Any = None) -> Any:
        devices.append(p_hat.device)
        devices.extend({p.device for p in self.parameters()})
        return real(self, p_hat, observed)

    monkeypatch.setattr(type(model), "grade_from_concepts", spy)
    reccbm.train_grader(model, p_tr, torch.as_tensor(train.concepts), torch.as_tensor(train.grades), p_dev,
                        torch.as_tensor(dev.grades), FAST2, device="cpu")
    reccbm.fit_lcec(model, p_dev, torch.as_tensor(dev.concepts), FAST2, device="cpu")
    assert devices and set(devices) == {torch.device("cpu")}
    assert {p.device.type for p in model.parameters()} == {"cpu"}


def test_on_device_puts_the_model_back() -> None:
    moves: list[torch.device] = []

    class Recorded(torch.nn.Linear):
        def to(self, *args: Any, **kwargs: Any) -> Any:  # records the move instead of making it
            moves.append(args[0])
            return self

    m = Recorded(2, 2)
    with on_device(m, ELSEWHERE) as dev:
        assert dev == ELSEWHERE and moves == [ELSEWHERE]
    assert moves == [ELSEWHERE, torch.device("cpu")]
    with on_device(m, None) as dev, on_device(m, "cpu"):
        assert dev == torch.device("cpu")
    assert len(moves) == 2, "a model already on the device is not moved"


def test_a_model_moved_for_prediction_can_train_again(backbone: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Prediction on a device that is not the model's (a GPU's, with the model on the CPU) moves the model there and
    back inside inference mode; the moved tensors must stay trainable: Stage II (on the CPU) sets LCEC's prior mean in
    place and trains the head. Here the move is a copy of every tensor, what a move between two devices makes (the
    crash on a GPU: "Inplace update to inference tensor outside InferenceMode")."""
    import reccbm.device as rdevice

    model, tok = tiny_model(backbone)
    train, dev = encoded(tok, toy_table(16, seed=1)), encoded(tok, toy_table(8, seed=2))

    def move(self: Any, *_: Any, **__: Any) -> Any:  # a move elsewhere and back: new tensors, same values
        return self._apply(lambda t: t.clone())

    monkeypatch.setattr(type(model), "to", move)
    monkeypatch.setattr(rdevice, "model_device", lambda m: ELSEWHERE)  # the model is "elsewhere": predict moves it
    p_tr, p_dev = (reccbm.cache_concepts(model, s, tok.pad_token_id, device="cpu") for s in (train, dev))
    monkeypatch.undo()
    assert not [n for n, t in [*model.named_parameters(), *model.named_buffers()] if t.is_inference()]
    reccbm.train_grader(model, p_tr, torch.as_tensor(train.concepts), torch.as_tensor(train.grades), p_dev,
                        torch.as_tensor(dev.grades), FAST2, device="cpu")


def test_device_names() -> None:
    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_device(None) == resolve_device("auto")
    if not torch.cuda.is_available():
        assert resolve_device("auto") == torch.device("cpu")
        with pytest.raises(ReccbmError, match="no CUDA GPU"):
            resolve_device("cuda")
    with pytest.raises(ReccbmError, match="unknown device"):
        resolve_device("tpu")
    with pytest.raises(ValueError, match="unknown device"):
        StageIConfig(device="gpu")
    info = describe_device("cpu")
    assert info["device"] == "cpu" and info["torch"] == torch.__version__ and info["threads"] >= 1


def test_fit_on_the_cpu_gives_the_numbers_it_gave_before(backbone: str) -> None:
    """The default recipe on the CPU, device "auto" (the CPU here) and "cpu": the same numbers to the last bit, and
    the model comes back on the CPU."""
    model, tok = tiny_model(backbone)
    del model
    train, dev = encoded(tok, toy_table(24, seed=1)), encoded(tok, toy_table(8, seed=2))
    mcfg = reccbm.ModelConfig(num_concepts=3, num_levels=3, num_grades=4, backbone=backbone, max_len=32, head="level",
                              center=True, condition=True)
    outs = []
    for device in ("auto", "cpu"):
        recipe = reccbm.Recipe(mcfg, StageIConfig(lr=3e-3, epochs=1, batch_size=8, eval_batch_size=16, device=device),
                               JointConfig(epochs=1), StageIIConfig(epochs=3, lcec_fit="dev")).seeded(0)
        fitted = reccbm.fit(train, dev, recipe, tok)
        assert {p.device.type for p in fitted.model.parameters()} == {"cpu"}
        outs.append(reccbm.predict(fitted.model, dev, tok.pad_token_id).grade_probs)
    if not torch.cuda.is_available():
        np.testing.assert_array_equal(outs[0], outs[1])


def test_load_checkpoint_places_the_model(backbone: str, tmp_path: Path) -> None:
    model, tok = tiny_model(backbone)
    train, dev = encoded(tok, toy_table(16, seed=1)), encoded(tok, toy_table(8, seed=2))
    reccbm.train_concepts(model, train, dev, FAST1, tok.pad_token_id)
    reccbm.save_checkpoint(model, tok, tmp_path, "stage1", 1)
    loaded, _, _ = reccbm.load_checkpoint(tmp_path, device="cpu")
    assert {p.device.type for p in loaded.parameters()} == {"cpu"}
    if not torch.cuda.is_available():
        with pytest.raises(ReccbmError, match="no CUDA GPU"):
            reccbm.load_checkpoint(tmp_path, device="cuda")


def test_k_dimensional_stages_compute_on_the_cpu_or_on_a_gpu_the_encoder_trains_on() -> None:
    """Stage II and the LCEC fit (small maths over cached p̂): ``stage2.device`` "cpu" (the default) keeps them on the
    CPU wherever the encoder trains; "graph" is the CPU where the encoder trains on the CPU and the encoder's GPU where
    it trains on one (there as CUDA graphs); "same" follows the encoder (a GPU this machine lacks: refused, not
    ignored)."""
    from reccbm.fit import _device, _k_dim_device
    from reccbm.recipes import recipe

    assert recipe("default", 3, 3, 4).stage2.device == "cpu"
    graph_here = recipe("default", 3, 3, 4, {"stage1": {"device": "cpu"}, "stage2": {"device": "graph"}})
    assert _k_dim_device(graph_here) == torch.device("cpu")
    assert _k_dim_device(recipe("default", 3, 3, 4, {"stage1": {"device": "cuda"}})) == torch.device("cpu")
    follow = recipe("default", 3, 3, 4, {"stage1": {"device": "cpu"}, "stage2": {"device": "same"}})
    assert _k_dim_device(follow) == _device(follow) == torch.device("cpu")
    for choice in ("graph", "same"):
        on_gpu = recipe("default", 3, 3, 4, {"stage1": {"device": "cuda"}, "stage2": {"device": choice}})
        if torch.cuda.is_available():
            assert _k_dim_device(on_gpu).type == "cuda"
        else:
            with pytest.raises(ReccbmError, match="no CUDA"):
                _k_dim_device(on_gpu)
    with pytest.raises(ReccbmError, match="Stage II device"):
        recipe("default", 3, 3, 4, {"stage2": {"device": "gpu"}})


class _OnDevice(torch.Tensor):
    """A tensor that behaves as if it lived on a GPU: every read of its values on the host (``tolist``, ``item``,
    ``bool``, ``int``, a copy to the CPU) is counted, since on a GPU each one waits for it; ``.cpu()`` returns a plain
    host tensor, as a copy from a GPU does."""

    reads = 0

    @classmethod
    def __torch_function__(cls, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        name = getattr(func, "__name__", "")
        if name in ("tolist", "item", "__bool__", "__int__", "__index__", "__float__", "cpu"):
            cls.reads += 1
        if name == "cpu":  # a host copy: a plain tensor
            with torch._C.DisableTorchFunctionSubclass():
                return func(*args, **(kwargs or {})).clone()
        return super().__torch_function__(func, types, args, kwargs)


def _batch_of(tok: Any, n: int) -> dict[str, torch.Tensor]:
    from reccbm.data import collate

    items = encoded(tok, toy_table(n))
    return {k: v.as_subclass(_OnDevice) for k, v in collate(items, list(range(n)), tok.pad_token_id).items()}


def test_a_step_reads_the_ids_on_the_host_a_fixed_number_of_times_however_large_the_batch(backbone: str) -> None:
    """The overlap features and the examples across questions read a batch's ids on the host a fixed number of times
    (a copy per batch), not once or twice per answer: on a GPU each read waits for it."""
    from reccbm.align import separator_id
    from reccbm.contrast import contrast_batch

    model, tok = tiny_model(backbone, align=True)
    assert model.align is not None
    model.align.set_sep(separator_id(tok))
    reads = {}
    for n in (4, 24):
        batch = _batch_of(tok, n)
        H = torch.randn(*batch["input_ids"].shape, 16)
        _OnDevice.reads = 0
        model.align.features(H, batch["input_ids"], batch["attention_mask"])
        overlap = _OnDevice.reads
        _OnDevice.reads = 0
        assert contrast_batch(batch, 2, 3, (0, 1), (0,), 2, 0) is not None
        reads[n] = (overlap, _OnDevice.reads)
    assert reads[4] == reads[24], reads
    assert max(reads[24]) <= 4, reads


def test_a_gpu_scales_the_batches_by_the_linear_rule_and_the_cpu_never_does() -> None:
    """stage1.gpu_batch_scale s: on a CUDA device every stage trains on s times the answers a step with s times the
    learning rates, the moving average over as many answers (ema^s), as many examples across questions per answer and
    s times fewer fewest steps; epochs, warm-up and the losses' weights stay. The CPU trains the recipe as it is, and
    the scale is applied once."""
    from reccbm.recipes import recipe

    r = recipe("default", 8, 3, 6, {"stage1": {"gpu_batch_scale": 4, "min_steps": 10}, "joint": {"min_steps": 5}})
    assert r.for_device("cpu") is r
    g = r.for_device(torch.device("cuda", 0))  # a GPU's device name (nothing runs on it here)
    s1, gs1 = r.stage1, g.stage1
    assert (gs1.batch_size, g.stage2.batch_size) == (4 * s1.batch_size, 4 * r.stage2.batch_size)
    for old, new in ((s1.lr, gs1.lr), (s1.frozen_lr, gs1.frozen_lr), (r.joint.lr, g.joint.lr),
                     (r.joint.head_lr, g.joint.head_lr), (r.stage2.lr, g.stage2.lr)):
        assert new == pytest.approx(4 * old)
    assert gs1.ema == pytest.approx(s1.ema ** 4) and 0 < gs1.ema < s1.ema
    assert gs1.contrast_per_batch == 4 * s1.contrast_per_batch
    assert (gs1.min_steps, g.joint.min_steps) == (3, 2)  # ceil(10 / 4), ceil(5 / 4)
    same = ("epochs", "warmup_ratio", "lambda_c", "lambda_r", "contrast", "soft_targets", "query_lr_multiplier")
    assert [getattr(gs1, f) for f in same] == [getattr(s1, f) for f in same]
    assert (g.joint.epochs, g.stage2.epochs, g.stage2.lambda_d) == (r.joint.epochs, r.stage2.epochs, r.stage2.lambda_d)
    assert gs1.gpu_batch_scale == 1 and g.for_device(torch.device("cuda", 0)) is g  # applied once
    assert recipe("plain", 8, 3, 6).scaled(4).stage1.ema == 0.0  # no average stays none
    assert r.scaled(1) is r
    with pytest.raises(ReccbmError, match="gpu_batch_scale"):
        recipe("default", 8, 3, 6, {"stage1": {"gpu_batch_scale": 0}})


class _OnGpu(_OnDevice):
    """An _OnDevice tensor that says it is on a GPU, so that the code takes its GPU forms."""

    @property
    def is_cuda(self) -> bool:  # type: ignore[override]
        return True


def test_a_training_batch_as_the_loader_makes_it_is_never_read_back_from_the_device(backbone: str) -> None:
    """A training batch carries its overlap features and its inputs' CPU copy (reccbm.batches.training_loader): the
    alignment features, the examples across questions and, in its GPU form, L_rank then read nothing back from the
    device."""
    from reccbm.align import separator_id
    from reccbm.batches import HostCopy as _Host
    from reccbm.batches import training_loader as _loader
    from reccbm.contrast import contrast_batch
    from reccbm.model import opcc_loss

    model, tok = tiny_model(backbone, align=True)
    assert model.align is not None
    model.align.set_sep(separator_id(tok))
    made = next(iter(_loader(encoded(tok, toy_table(24)), 24, tok.pad_token_id, seed=0, model=model)))
    host = made["host"]
    assert isinstance(host, _Host) and made["overlap"].shape == (24, 6)
    batch = {k: v.as_subclass(_OnGpu) if isinstance(v, torch.Tensor) else v for k, v in made.items()}  # "moved"
    H = torch.randn(*batch["input_ids"].shape, 16)
    _OnDevice.reads = 0
    f, _ = model.align.features(H, batch["input_ids"], batch["attention_mask"], batch["overlap"])
    assert contrast_batch(host.batch, 2, 3, (0, 1), (0,), 2, 0) is not None
    opcc_loss(torch.rand(24, 3).as_subclass(_OnGpu), batch["concepts"])
    assert _OnDevice.reads == 0
    own = model.align.features(H, made["input_ids"], made["attention_mask"])[0]  # computed from the ids themselves
    torch.testing.assert_close(f.as_subclass(torch.Tensor), own, rtol=0, atol=0)
