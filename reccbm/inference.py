"""Batched prediction with a trained model, and what runs a model once over a set of inputs.

* :func:`predict_texts` — :func:`predict` of texts as the model reads them (its input rule, :mod:`reccbm.data`, and
  ``ModelConfig.sentence_orders``, :mod:`reccbm.orders`): the one way from answers to a model's outputs.
* :func:`predict` — grade probabilities, and for REC-CBM the concept outputs p̂ (Eq. 11), ĉ (Eq. 13) and μ_post
  (Eq. 20; s̃ without LCEC), batched, length-sorted, with dynamic padding.
* :func:`cache_concepts` — runs the frozen Stage I model once and keeps p̂ (N, K, M+1) for Stage II (Eq. 28).
* :func:`encoder_states` — a frozen encoder's token states H = E(x) (Eq. 7), once per input (``StageIConfig.encoder =
  "frozen"``: the encoder is never updated, so Stage I, the joint stage and the PLM reuse them instead of running it
  each step).
* :func:`quantize_encoder` — int8 dynamic quantisation of the encoder for CPU inference.

They run on the device they are given (:mod:`reccbm.device`; None: where the model is) and put the model back where it
was afterwards.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from numpy.typing import NDArray
from torch import Tensor, nn

from reccbm.data import EncodedItems, collate, encode_inputs, read_responses
from reccbm.decision import Decision, decide
from reccbm.device import autocast, on_device
from reccbm.errors import ReccbmError
from reccbm.model import Model, TextEncoder
from reccbm.orders import average_readings, expand_orders

__all__ = [
    "Predictions",
    "States",
    "cache_concepts",
    "collate_states",
    "encoder_states",
    "predict",
    "predict_texts",
    "quantize_encoder",
]

@dataclass
class Predictions:
    """Model outputs for N items (numpy); concept fields are None for the PLM baseline."""

    grade_probs: NDArray[Any]  # (N, S+1)
    p_hat: NDArray[Any] | None = None  # (N, K, M+1)
    c_hat: NDArray[Any] | None = None  # (N, K) expected levels ĉ ∈ [0, M]
    mu_post: NDArray[Any] | None = None  # (N, K) corrected concepts (s̃ without LCEC)
    grade_logits: NDArray[Any] | None = None  # (N, S+1) ŷ before the softmax
    cutpoints: Decision | None = None  # the model's decision rule (reccbm/decision.py); None: argmax

    @property
    def grades(self) -> NDArray[Any]:
        """The marks (0..S): the model's decision rule on ``grade_probs``."""
        return decide(self.grade_probs, self.cutpoints)

    @property
    def levels(self) -> NDArray[Any]:
        assert self.p_hat is not None
        out: NDArray[Any] = self.p_hat.argmax(2)
        return out


States = Sequence[Tensor]  # one (T_i, d) tensor of token states per input: a frozen encoder's, see encoder_states


def collate_states(items: EncodedItems, idx: Any, pad_id: int, states: States | None) -> dict[str, Tensor]:
    """collate(), plus the inputs' cached token states right-padded with zeros to the batch's T (``states``, (B, T, d))
    when given: the model then skips its encoder (RecCBM.token_states)."""
    batch = collate(items, idx, pad_id)
    if states is not None:
        B, T = batch["input_ids"].shape
        H = torch.zeros(B, T, states[0].shape[-1], dtype=states[0].dtype)  # (B, T, d)
        for j, i in enumerate(idx):
            H[j, : len(states[i])] = states[i]
        batch["states"] = H
    return batch


@torch.inference_mode()
def encoder_states(encoder: nn.Module, items: EncodedItems, pad_id: int, batch_size: int = 64,
                   device: str | torch.device | None = None, precision: str = "no") -> list[Tensor]:
    """The token states H = E(x) of every input, computed once (no grad, eval mode: dropout off), float32 on the CPU:
    one (T_i, d) tensor per input, its own tokens only. A frozen encoder gives the same H every epoch, so training
    reuses these instead of running E each step (:func:`reccbm.train_concepts`, :func:`reccbm.train_joint`,
    :func:`reccbm.train_plm`). With ``encoder.states_layer`` set (``stage1.train_top_layers``) the states are that
    layer's output (:meth:`reccbm.encoder.TextEncoder.lower`), on which the trained layers above it run each step.
    ``device``: where E runs (None: where it is; it is put back afterwards); ``precision`` "bf16": autocast on a GPU."""
    was_training = encoder.training
    encoder.eval()
    out: list[Tensor] = [torch.empty(0)] * len(items)
    order = np.argsort([len(f["input_ids"]) for f in items.features], kind="stable")  # length-sorted: less padding
    with on_device(encoder, device) as dev, autocast(dev, precision):
        for start in range(0, len(order), batch_size):
            idx = order[start : start + batch_size]
            batch = {k: v.to(dev) for k, v in collate(items, idx, pad_id).items()}
            run = getattr(encoder, "lower", encoder)  # TextEncoder.lower: H, or a lower layer's output
            H = run(batch["input_ids"], batch["attention_mask"], batch.get("token_type_ids"))  # (B, T, d)
            for j, i in enumerate(idx):
                out[i] = H[j, : len(items.features[i]["input_ids"])].float().cpu().clone()  # (T_i, d)
    encoder.train(was_training)
    return out


@torch.inference_mode()
def predict(
    model: Model,
    items: EncodedItems,
    pad_id: int,
    batch_size: int = 64,
    on_batch: Callable[[int], None] | None = None,
    states: States | None = None,
    device: str | torch.device | None = None,
    precision: str = "no",
) -> Predictions:
    """Batched inference (length-sorted, dynamic padding). ``device``: where it runs
    (:func:`reccbm.device.resolve_device`; None: the model's current device); the model is put back where it was
    afterwards. ``precision`` "bf16": bf16 autocast on a GPU that has it (off by default). ``states``: the items' token
    states from this model's (frozen) encoder (:func:`encoder_states`), used instead of running it."""
    if len(items) == 0:
        raise ReccbmError("nothing to predict: no items")
    was_training = model.training
    model.eval()
    order = np.argsort([len(f["input_ids"]) for f in items.features], kind="stable")  # length-sorted
    parts: dict[str, list[NDArray[Any]]] = {"grade_probs": [], "grade_logits": [], "p_hat": [], "c_hat": [],
                                            "mu_post": []}
    with on_device(model, device) as dev, autocast(dev, precision):
        for start in range(0, len(order), batch_size):
            idx = order[start : start + batch_size]
            batch = {k: v.to(dev) for k, v in collate_states(items, idx, pad_id, states).items()}
            out = model(batch)
            parts["grade_probs"].append(out.grade_logits.float().softmax(-1).cpu().numpy())
            parts["grade_logits"].append(out.grade_logits.float().cpu().numpy())
            for name in ("p_hat", "c_hat", "mu_post"):
                t = getattr(out, name)
                if t is not None:
                    parts[name].append(t.float().cpu().numpy())
            if on_batch:
                on_batch(len(idx))
    model.train(was_training)
    inv = np.argsort(order)  # back to the input order

    def cat(name: str) -> NDArray[Any] | None:
        return np.concatenate(parts[name])[inv] if parts[name] else None

    probs = cat("grade_probs")
    assert probs is not None
    return Predictions(probs, cat("p_hat"), cat("c_hat"), cat("mu_post"), cat("grade_logits"),
                       getattr(model, "decision", None))


def predict_texts(
    model: Model,
    tokenizer: Any,
    questions: Sequence[str],
    responses: Sequence[str],
    contexts: Sequence[str],
    batch_size: int = 64,
    on_batch: Callable[[int], None] | None = None,
    device: str | torch.device | None = None,
    precision: str = "no",
    truncated: list[int] | None = None,
) -> Predictions:
    """:func:`predict` of N answers (their questions, responses and contexts as :func:`reccbm.table_texts` gives them)
    read as the model reads them: encoded by its input rule (``max_len``, ``question_input``, ``normalise``,
    ``lexicon``) and, with ``ModelConfig.sentence_orders``, each answer of two or more sentences (after normalising,
    when the model normalises) read in several orders of its sentences and its outputs averaged over them
    (:mod:`reccbm.orders`). ``on_batch`` counts answers;
    ``truncated`` receives the positions of the answers whose input (in any order read) was cut at ``max_len``."""
    cfg = model.config
    n = cfg.sentence_orders
    if n and cfg.normalise:  # normalised first, so that a signature or a slip is undone before the sentences move
        responses = read_responses(tokenizer, questions, responses, contexts, cfg.lexicon)
    flat, owner = expand_orders(list(responses), n) if n else (list(responses), None)
    if owner is not None:
        questions = [questions[i] for i in owner]
        contexts = [contexts[i] for i in owner]
    cut: list[int] = []
    feats = encode_inputs(tokenizer, questions, flat, contexts, cfg.max_len, cut, question=cfg.question_input,
                          normalise=cfg.normalise, lexicon=cfg.lexicon)
    if truncated is not None:
        truncated.extend(sorted({int(owner[i]) for i in cut}) if owner is not None else cut)
    counted = on_batch
    if owner is not None and on_batch is not None:
        done = [0, 0]  # texts read, answers reported

        def counted(k: int) -> None:
            done[0] += k
            answers = int(done[0] * len(responses) // len(flat))
            if answers > done[1]:
                on_batch(answers - done[1])
                done[1] = answers

    pred = predict(model, EncodedItems(feats), tokenizer.pad_token_id, batch_size, counted, device=device,
                   precision=precision)
    if owner is None:
        return pred

    def mean(a: NDArray[Any] | None) -> NDArray[Any] | None:
        return None if a is None else average_readings(a, owner, len(responses))

    probs = mean(pred.grade_probs)
    assert probs is not None
    return Predictions(probs, mean(pred.p_hat), mean(pred.c_hat), mean(pred.mu_post), mean(pred.grade_logits),
                       pred.cutpoints)


def quantize_encoder(model: Model) -> Model:
    """CPU inference: int8 dynamic quantisation of the encoder's Linear layers, weights per output channel (in
    place; ~1.5x faster on AVX2 CPUs; per channel changes fewer grades than one scale per tensor, at the same speed;
    docs/runs.md gives the share). Never use it before training."""
    import warnings

    if not isinstance(model.encoder, TextEncoder):
        raise ReccbmError("int8 quantisation needs the torch encoder (the ONNX engine has its own int8 file)")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic

        model.encoder.module = quantize_dynamic(  # type: ignore[no-untyped-call]
            model.encoder.module, {nn.Linear: per_channel_dynamic_qconfig}, dtype=torch.qint8
        )
    return model


def cache_concepts(model: Model, items: EncodedItems, pad_id: int, batch_size: int = 64,
                   states: States | None = None, device: str | torch.device | None = None,
                   precision: str = "no") -> Tensor:
    """Frozen Stage I outputs p̂ (N, K, M+1), computed once for Stage II (float32, CPU); ``states``, ``device`` and
    ``precision`` as in :func:`predict`."""
    p = predict(model, items, pad_id, batch_size, states=states, device=device, precision=precision).p_hat
    if p is None:
        raise ReccbmError("the PLM baseline has no concept outputs to cache")
    return torch.from_numpy(p)

