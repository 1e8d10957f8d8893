"""ONNX Runtime for the encoder E only: faster CPU inference, the rest of REC-CBM stays in torch.

The encoder (nearly all of grading time, most of it in its Linear layers) is exported once with
``torch.onnx.export`` and run by ONNX Runtime; RACE, the concept classifiers, LCEC (float64
Cholesky) and the grade head keep running in torch on the hidden states it returns::

    model, tokenizer, meta = reccbm.load_checkpoint(run_dir)
    use_onnx_encoder(model, run_dir, int8=True)   # model.encoder is now an OnnxEncoder
    reccbm.predict(model, items, tokenizer.pad_token_id)

What gets built (the fastest of the combinations tried on Mohler/MiniLM; docs/results.md):

- ``encoder.onnx``: float32, exported with eager attention so that ONNX Runtime's transformer
  optimizer fuses BERT-like encoders (Attention, EmbedLayerNormalization, SkipLayerNormalization,
  BiasGelu); other families keep the plain export. Checked against torch on a padded batch of
  another shape than the traced one; a graph that disagrees is not used. (Float32 runs as fast
  fused as plain; the fused graph pays off in int8, where Attention becomes one QAttention.)
- ``encoder.int8.onnx``: ``quantize_dynamic`` of the float32 file, QInt8 weights per channel
  (faster than QUInt8 here and closer to float32 than per-tensor QInt8).

Both files are cached in the first writable directory of ``cache_dirs`` (default ``RUN/onnx``),
written atomically (:mod:`reccbm.atomic`), and re-used while ``model.safetensors``
keeps its size and modification time (recorded in the ONNX file's metadata); otherwise rebuilt.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import tempfile
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import Tensor, nn

from reccbm.atomic import atomic_write
from reccbm.errors import ReccbmError
from reccbm.model import TextEncoder

if TYPE_CHECKING:
    from reccbm.model import Model

__all__ = [
    "FLOAT_NAME",
    "FORMAT",
    "INSTALL",
    "INT8_NAME",
    "OnnxEncoder",
    "OnnxExportError",
    "OnnxWriteError",
    "export_encoder",
    "load_onnx_encoder",
    "require_onnx",
    "use_onnx_encoder",
    "weights_stamp",
]

FORMAT = "reccbm-onnx-encoder/1"  # bump to invalidate every cached file after an exporter change
FLOAT_NAME = "encoder.onnx"
INT8_NAME = "encoder.int8.onnx"
OPSET = 17
# Hugging Face model types whose graphs ONNX Runtime's BERT fusions understand.
_BERT_LIKE = {"bert", "roberta", "xlm-roberta", "camembert", "electra"}
_META_FORMAT, _META_WEIGHTS, _META_VARIANT = "reccbm.format", "reccbm.weights", "reccbm.variant"
_META_TOKEN_TYPES = "reccbm.token_types"  # input | unused | absent-only (see _token_types_mode)


class OnnxWriteError(ReccbmError, OSError):
    """A file of the export could not be written (disk full, file-size limit, read-only folder): an OSError
    that names the file, not a sign that the encoder cannot be exported."""

    def __init__(self, exc: OSError, path: str | Path) -> None:
        where = exc.filename or path
        reason = exc.strerror or str(exc) or type(exc).__name__
        super().__init__(f"cannot write {where}: {reason} (OSError errno {exc.errno})")
        self.errno, self.strerror, self.filename = exc.errno, reason, str(where)

    def __str__(self) -> str:
        return str(self.args[0])


def _os_error(exc: BaseException) -> OSError | None:
    """The OSError behind an exporter failure, if any (torch wraps it in its own exception types)."""
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        if isinstance(cur, OSError):
            return cur
        seen.add(id(cur))
        cur = cur.__cause__ or cur.__context__
    return None


class OnnxExportError(ReccbmError):
    """The encoder of this model type cannot be exported to ONNX (or the export disagrees with torch)."""

    def __init__(self, model_type: str, reason: str) -> None:
        super().__init__(f"cannot export the {model_type} encoder to ONNX: {reason}")
        self.model_type = model_type
        self.reason = reason


INSTALL = "pip install 'rubrictool[onnx]'"


def require_onnx() -> None:
    """One clear error when the ONNX engine's packages, an optional extra, are not installed."""
    missing = []
    for name in ("onnx", "onnxruntime"):
        try:
            importlib.import_module(name)
        except ImportError:
            missing.append(name)
    if missing:
        raise ReccbmError(f"the ONNX engine needs {' and '.join(missing)}, not installed here: {INSTALL}")


def _ort() -> Any:
    require_onnx()
    import onnxruntime

    return onnxruntime


def weights_stamp(weights: str | Path) -> str:
    """``size:mtime_ns`` of a checkpoint file: a cached export is fresh while this is unchanged."""
    st = Path(weights).stat()
    return f"{st.st_size}:{st.st_mtime_ns}"


# ---------------------------------------------------------------------------- the runtime wrapper
class OnnxEncoder(nn.Module):
    """Drop-in for :class:`reccbm.model.TextEncoder` at inference: (input_ids, attention_mask,
    token_type_ids) -> H (B, T, d) as a float32 CPU tensor, computed by ONNX Runtime.

    threads: intra-op threads (default: torch's, i.e. the physical cores unless set otherwise).
    Idle threads do not spin unless ``OMP_WAIT_POLICY=ACTIVE`` (as for torch: about 1.2x faster when
    other processes share the cores).
    """

    def __init__(self, path: str | Path, hf_config: Any, threads: int | None = None) -> None:
        super().__init__()
        ort = _ort()
        opts = ort.SessionOptions()
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        opts.intra_op_num_threads = threads or torch.get_num_threads()
        opts.inter_op_num_threads = 1
        if os.environ.get("OMP_WAIT_POLICY", "").upper() != "ACTIVE":
            opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self.path = Path(path)
        self.session: Any = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
        self.input_names = [i.name for i in self.session.get_inputs()]
        self.output_name: str = self.session.get_outputs()[0].name
        self.metadata: dict[str, str] = dict(self.session.get_modelmeta().custom_metadata_map)
        self.hf_config = hf_config
        self.hidden_size = int(getattr(hf_config, "hidden_size", 0) or hf_config.d_model)

    def forward(self, input_ids: Tensor, attention_mask: Tensor, token_type_ids: Tensor | None = None) -> Tensor:
        feed = {"input_ids": input_ids, "attention_mask": attention_mask}
        if token_type_ids is not None and self.metadata.get(_META_TOKEN_TYPES) == "absent-only":
            raise ReccbmError(f"{self.path} was exported for inputs without token_type_ids")
        if "token_type_ids" in self.input_names:
            feed["token_type_ids"] = token_type_ids if token_type_ids is not None else torch.zeros_like(input_ids)
        arrays = {k: np.ascontiguousarray(v.detach().cpu().numpy(), dtype=np.int64) for k, v in feed.items()}
        H: Tensor = torch.from_numpy(self.session.run([self.output_name], arrays)[0])  # (B, T, d) float32
        return H


# ---------------------------------------------------------------------------- export
class _ExportWrapper(nn.Module):
    """The encoder with positional inputs and one output (what torch.onnx.export traces)."""

    def __init__(self, encoder: TextEncoder, token_types: bool) -> None:
        super().__init__()
        self.encoder, self.token_types = encoder, token_types

    def forward(self, input_ids: Tensor, attention_mask: Tensor, *rest: Tensor) -> Tensor:
        H: Tensor = self.encoder(input_ids, attention_mask, rest[0] if self.token_types else None)
        return H


def _dummy(encoder: TextEncoder, B: int, T: int, seed: int) -> dict[str, Tensor]:
    """A right-padded batch: the first row full, the others shorter; token types 0 then 1."""
    g = torch.Generator().manual_seed(seed)
    vocab = int(getattr(encoder.hf_config, "vocab_size", 0) or 100)
    ids = torch.randint(min(5, vocab - 1), vocab, (B, T), generator=g)
    mask = torch.ones(B, T, dtype=torch.long)
    for b in range(1, B):
        mask[b, max(2, T - 2 * b - 1):] = 0
    types = torch.zeros(B, T, dtype=torch.long)
    types[:, T // 2:] = 1 if int(getattr(encoder.hf_config, "type_vocab_size", 1) or 1) > 1 else 0
    types = types * mask
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}


def _token_types_mode(encoder: TextEncoder, batch: dict[str, Tensor]) -> str:
    """How the graph treats token types: ``input`` (a graph input; all zeros when absent, which is what
    BERT/RoBERTa do without them), ``unused`` (the model takes none: BART, T5), ``absent-only``
    (GPT-2: zero token types still add an embedding, so the graph is exported for absent ones and
    refuses any at run time)."""
    if not encoder._takes_token_types:
        return "unused"
    ids, mask = batch["input_ids"], batch["attention_mask"]
    with torch.inference_mode():
        same = torch.equal(encoder(ids, mask, None), encoder(ids, mask, torch.zeros_like(ids)))
    return "input" if same else "absent-only"


@contextlib.contextmanager
def _eager_attention(module: nn.Module) -> Iterator[None]:
    """Export with eager attention: its graph is the one ONNX Runtime's Attention fusion recognises
    (SDPA exports correctly but is left unfused). Restored afterwards."""
    config = getattr(module, "config", None)
    before = getattr(config, "_attn_implementation", None)
    setter = getattr(module, "set_attn_implementation", None)
    changed = False
    if callable(setter) and before not in (None, "eager"):
        try:
            setter("eager")
            changed = True
        except (ValueError, TypeError, AttributeError):
            pass
    try:
        yield
    finally:
        if changed and callable(setter):
            setter(before)


def _max_error(path: Path, encoder: TextEncoder, names: list[str]) -> float:
    """Largest |ONNX - torch| over the real tokens of a padded batch of another shape than the traced one."""
    batch = _dummy(encoder, 3, 11, seed=1)
    with torch.inference_mode():
        types = batch["token_type_ids"] if "token_type_ids" in names else None
        ref = encoder(batch["input_ids"], batch["attention_mask"], types).float()
    got = OnnxEncoder(path, encoder.hf_config, threads=1)(**{k: batch[k] for k in names})
    real = batch["attention_mask"].bool()
    if got.shape != ref.shape:
        return float("inf")
    err = (got - ref).abs()[real]
    scale = max(1.0, float(ref[real].abs().max()))
    return float(err.max()) / scale if bool(torch.isfinite(err).all()) else float("inf")


def _save_atomic(model: Any, path: Path, meta: dict[str, str]) -> None:
    """Write an ONNX ModelProto with metadata atomically (:func:`reccbm.atomic.atomic_write`)."""
    import onnx

    del model.metadata_props[:]
    for k, v in meta.items():
        model.metadata_props.add(key=k, value=v)
    atomic_write(path, lambda tmp: onnx.save_model(model, str(tmp)))


def export_encoder(encoder: TextEncoder, path: str | Path, meta: dict[str, str] | None = None,
                   tolerance: float = 1e-3) -> Path:
    """Export ``encoder`` to a float32 ONNX file (dynamic batch and sequence axes) at ``path``, atomically.

    BERT-like encoders get ONNX Runtime's transformer fusions. The result is checked against torch
    (max error on real tokens, relative to the largest hidden value, ≤ ``tolerance``); a fused graph
    that fails the check falls back to the plain export, a plain export that fails raises
    :class:`OnnxExportError`, as does any exporter error."""
    require_onnx()
    import onnx

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    model_type = str(getattr(encoder.hf_config, "model_type", type(encoder.module).__name__))
    batch = _dummy(encoder, 2, 8, seed=0)
    was_training = encoder.training
    encoder.eval()
    token_types = _token_types_mode(encoder, batch)
    names = ["input_ids", "attention_mask"] + (["token_type_ids"] if token_types == "input" else [])
    meta = dict(meta or {}) | {_META_TOKEN_TYPES: token_types}
    with tempfile.TemporaryDirectory(prefix="reccbm-onnx-") as scratch:
        raw = Path(scratch) / "raw.onnx"
        try:
            with _eager_attention(encoder.module), warnings.catch_warnings(), torch.inference_mode(False):
                warnings.simplefilter("ignore")
                torch.onnx.export(
                    _ExportWrapper(encoder, "token_type_ids" in names).eval(), tuple(batch[n] for n in names), str(raw),
                    dynamo=False, input_names=names, output_names=["hidden"], opset_version=OPSET,
                    dynamic_axes={n: {0: "batch", 1: "sequence"} for n in [*names, "hidden"]},
                )
        except Exception as exc:  # noqa: BLE001 - any exporter failure means: not exportable (unless a write failed)
            os_err = _os_error(exc)
            if os_err is not None:
                raise OnnxWriteError(os_err, raw) from None
            raise OnnxExportError(model_type,
                                  f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:200]}") from None
        finally:
            encoder.train(was_training)
        candidates: list[tuple[str, Path]] = []
        if model_type in _BERT_LIKE:
            fused = Path(scratch) / "fused.onnx"
            with contextlib.suppress(Exception):  # fusions are an optimisation: the plain graph remains
                _fuse_bert(raw, fused, encoder.hf_config)
                candidates.append(("fused", fused))
        candidates.append(("plain", raw))
        errors = []
        for kind, candidate in candidates:
            err = _max_error(candidate, encoder, names)
            if err <= tolerance:
                _save_atomic(onnx.load(str(candidate)), path, meta | {"reccbm.graph": kind})
                return path
            errors.append(f"{kind} graph differs from torch by {err:.2g}")
    raise OnnxExportError(model_type, "; ".join(errors))


def _fuse_bert(src: Path, dst: Path, hf_config: Any) -> None:
    """ONNX Runtime's transformer optimizer, BERT fusions only (no hardware-specific ORT passes)."""
    with warnings.catch_warnings(), _quiet_ort_logs():
        warnings.simplefilter("ignore")
        from onnxruntime.transformers.optimizer import optimize_model

        opt = optimize_model(str(src), model_type="bert", num_heads=int(hf_config.num_attention_heads),
                             hidden_size=int(hf_config.hidden_size), opt_level=0)
        opt.save_model_to_file(str(dst))


@contextlib.contextmanager
def _quiet_ort_logs() -> Iterator[None]:
    """The optimizer and quantizer log fusion counts and advice at INFO/WARNING: keep them quiet."""
    import logging

    loggers = [logging.getLogger(n) for n in ("onnxruntime", "onnxruntime.transformers", "root")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)


def _quantize(src: Path, dst: Path, meta: dict[str, str]) -> Path:
    """Dynamic int8 quantisation of MatMul/Attention weights (QInt8, per channel), written atomically."""
    import onnx

    with warnings.catch_warnings(), _quiet_ort_logs(), tempfile.TemporaryDirectory(prefix="reccbm-onnx-") as scratch:
        warnings.simplefilter("ignore")
        from onnxruntime.quantization import QuantType, quantize_dynamic

        tmp = Path(scratch) / "int8.onnx"
        quantize_dynamic(str(src), str(tmp), weight_type=QuantType.QInt8, per_channel=True,
                         extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT})  # fused ops: float
        _save_atomic(onnx.load(str(tmp)), dst, meta)
    return dst


# ---------------------------------------------------------------------------- cache
def _meta(stamp: str, variant: str) -> dict[str, str]:
    return {_META_FORMAT: FORMAT, _META_WEIGHTS: stamp, _META_VARIANT: variant}


def _is_fresh(metadata: dict[str, str], stamp: str, variant: str) -> bool:
    return all(metadata.get(k) == v for k, v in _meta(stamp, variant).items())


def _open_fresh(path: Path, stamp: str, variant: str, hf_config: Any, threads: int | None) -> OnnxEncoder | None:
    """The cached encoder at ``path`` if it exists, loads and was built from these weights; else None."""
    if not path.is_file():
        return None
    try:
        enc = OnnxEncoder(path, hf_config, threads)
    except Exception:  # noqa: BLE001 - a truncated or foreign file is rebuilt, never trusted
        return None
    return enc if _is_fresh(enc.metadata, stamp, variant) else None


def _file_is_fresh(path: Path, stamp: str, variant: str) -> bool:
    """Cheaper check than opening a session: read only the model's metadata."""
    if not path.is_file():
        return False
    try:
        import onnx

        model = onnx.load(str(path), load_external_data=False)
    except Exception:  # noqa: BLE001
        return False
    return _is_fresh({p.key: p.value for p in model.metadata_props}, stamp, variant)


def load_onnx_encoder(
    run_dir: str | Path,
    encoder: TextEncoder,
    int8: bool = False,
    cache_dirs: Sequence[str | Path] | None = None,
    threads: int | None = None,
) -> OnnxEncoder:
    """The ONNX encoder of a run: a fresh cached file from the first of ``cache_dirs`` that has one,
    else exported (and quantised for int8) into the first of them that is writable.

    ``encoder`` is the run's torch encoder, used only when an export is needed. ``cache_dirs``
    defaults to ``[run_dir/onnx]``; pass fallbacks for read-only run directories."""
    require_onnx()
    run = Path(run_dir)
    weights = run / "model.safetensors"
    if not weights.is_file():
        raise ReccbmError(f"{run_dir} has no model.safetensors")
    stamp = weights_stamp(weights)
    dirs = [Path(d) for d in (cache_dirs if cache_dirs else [run / "onnx"])]
    variant, name = ("int8", INT8_NAME) if int8 else ("float32", FLOAT_NAME)
    for d in dirs:
        found = _open_fresh(d / name, stamp, variant, encoder.hf_config, threads)
        if found is not None:
            return found
    problems = []
    for d in dirs:
        try:
            d.mkdir(parents=True, exist_ok=True)
            fp32 = d / FLOAT_NAME
            if not _file_is_fresh(fp32, stamp, "float32"):
                export_encoder(encoder, fp32, _meta(stamp, "float32"))
            if int8:
                _quantize(fp32, d / INT8_NAME, _meta(stamp, "int8"))
        except OSError as exc:  # read-only, missing or full folder: try the next one
            problems.append(f"{d}: {exc}" if isinstance(exc, OnnxWriteError)
                            else f"{d}: {exc.strerror or exc}" + (f" ({exc.filename})" if exc.filename else ""))
            continue
        return OnnxEncoder(d / name, encoder.hf_config, threads)
    raise ReccbmError(f"cannot write the ONNX encoder to any cache folder ({'; '.join(problems)})")


def use_onnx_encoder(
    model: Model,
    run_dir: str | Path,
    int8: bool = False,
    cache_dirs: Sequence[str | Path] | None = None,
    threads: int | None = None,
) -> Model:
    """Replace ``model.encoder`` by its ONNX Runtime version (in place; inference only). See
    :func:`load_onnx_encoder` for the cache."""
    if not isinstance(model.encoder, TextEncoder):
        raise ReccbmError("the model's encoder is not a torch TextEncoder (already converted?)")
    model.encoder = load_onnx_encoder(run_dir, model.encoder, int8, cache_dirs, threads)
    return model
