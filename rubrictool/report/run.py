"""A trained run, opened for inspection: model, rubric scales, the table it was trained on, predictions.

:func:`open_run` reads a run directory (``rubrictool train``) and finds the adjudicated table it was
trained on: ``--data FILE`` when given, else the bundled benchmark labels the run names (Mohler).
:func:`predict_with_attention` runs the model once over items and keeps, besides
:class:`reccbm.Predictions`, each item's tokens and RACE attention α_{k,t} (Eq. 9) over its response.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml
from numpy.typing import NDArray

import reccbm
from reccbm import Predictions, ReccbmError
from reccbm.data import collate
from rubrictool.errors import DataError, TrainError
from rubrictool.grade import model_inputs, parse_overrides
from rubrictool.provenance import git_revision

__all__ = [
    "AttendedItems",
    "Run",
    "git_revision",
    "open_run",
    "parse_overrides",
    "predict_with_attention",
    "split_rows",
    "table_rows",
]


@dataclass
class Run:
    """A run directory with its model loaded; ``table`` is the adjudicated table (None when unknown)."""

    path: Path
    model: reccbm.RecCBM
    tokenizer: Any
    meta: dict[str, Any]  # model.json
    metrics: dict[str, Any]  # metrics.json ({} when absent)
    config: dict[str, Any]  # config.yaml ({} when absent)
    split: dict[str, list[str]]  # split.json ({} when absent)
    table: pd.DataFrame | None = None
    source: str = "unknown"  # where `table` came from, for the provenance section
    notes: list[str] = field(default_factory=list)
    data_dir: str | Path | None = None  # benchmark data directory (None: $RUBRICTOOL_DATA, else ./data)

    @property
    def keys(self) -> list[str]:
        return list(self.meta["concept_keys"])

    @property
    def names(self) -> list[str]:
        return list(self.meta.get("concept_names") or self.keys)

    @property
    def scale_min(self) -> int:
        return int(self.meta["scale"][0])

    @property
    def grade_min(self) -> int:
        return int(self.meta["grade"][0])

    @property
    def plm(self) -> bool:
        return bool(self.model.config.plm)

    @property
    def has_lcec(self) -> bool:
        return not self.plm and self.model.lcec is not None

    @property
    def has_race(self) -> bool:
        return not self.plm and self.model.bottleneck.Q is not None

    def rubric_version(self) -> str | None:
        from rubrictool.rubric import load_rubric

        try:
            return str(load_rubric(str(self.meta["rubric"])).version)
        except Exception:  # a rubric file that moved: the name is still known  # noqa: BLE001
            return None


def _read(path: Path, kind: str) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        doc = json.loads(path.read_text()) if kind == "json" else yaml.safe_load(path.read_text())
    except (OSError, ValueError, yaml.YAMLError) as exc:
        raise TrainError(f"cannot read {path}: {str(exc).splitlines()[0]}") from None
    return doc if isinstance(doc, dict) else {}


def open_run(run_dir: str | Path, data: str | Path | None = None, data_dir: str | Path | None = None,
             need_table: bool = True) -> Run:
    """Load a run directory; the table from ``data`` or, for a benchmark run, from its bundled labels."""
    path = Path(run_dir)
    if not (path / "model.json").is_file():
        if (path / "fold-0" / "model.json").is_file():
            raise TrainError(f"{path} is a k-fold run: pass one of its folds, e.g. --model {path / 'fold-0'}")
        raise TrainError(f"{path} is not a trained run: model.json is missing (train one with `rubrictool train`)")
    try:
        model, tokenizer, meta = reccbm.load_checkpoint(path)
    except ReccbmError as exc:
        raise TrainError(str(exc)) from None
    run = Run(path, model, tokenizer, meta, _read(path / "metrics.json", "json"), _read(path / "config.yaml", "yaml"),
              _read(path / "split.json", "json"))
    run.notes = [str(n) for n in meta.get("notes") or run.metrics.get("notes") or []]
    run.data_dir = data_dir
    if data is not None:
        from rubrictool.io import read_table

        run.table, run.source = read_table(data), str(data)
    elif need_table:
        run.table, run.source = _benchmark_table(run, data_dir)
    return run


def _benchmark_table(run: Run, data_dir: str | Path | None) -> tuple[pd.DataFrame, str]:
    from rubrictool.pipeline import benchmark_table

    name = str(run.meta.get("rubric"))
    if name == "mohler" and bundled_labels(run):
        _, table, _ = benchmark_table(name, data_dir)
        return table, "Mohler benchmark (UNT short answers) with the bundled concept labels"
    raise DataError(f"{run.path} was trained on a table of your own: pass --data FILE (the adjudicated table)")


def bundled_labels(run: Run) -> bool:
    """Was the run trained on the bundled Mohler LLM labels (its notes say so)?"""
    return any("LLM annotation passes" in n for n in run.notes)


def split_rows(run: Run, split: str = "test") -> pd.DataFrame:
    """The rows of the run's table in one split (split.json order), with 0-based ``_y`` and ``_c_<key>``."""
    ids = [str(i) for i in run.split.get(split, [])]
    if not ids:
        raise DataError(f"{run.path}/split.json has no {split} split")
    return table_rows(run, ids, f"{split} id(s) of the run")


def table_rows(run: Run, ids: list[str], what: str = "id(s)", table: pd.DataFrame | None = None) -> pd.DataFrame:
    """Rows of `table` (default the run's) with these ids in this order, with 0-based ``_y``/``_c_<key>``."""
    table = run.table if table is None else table
    if table is None:
        raise DataError("this run has no table; pass --data FILE")
    df = table.assign(id=table["id"].astype(str)).drop_duplicates("id").set_index("id")
    missing = [i for i in ids if i not in df.index]
    if missing:
        raise DataError(f"{len(missing)} {what} not in the table, e.g. {missing[0]!r} (ids look like "
                        f"{df.index[0]!r}): is --data the table the run was trained on?")
    out = df.loc[ids].reset_index()
    for col in ("question", "reference", "context", "response"):
        out[col] = out[col].fillna("").astype(str) if col in out.columns else ""
    if "grade" in out.columns and out["grade"].notna().all():
        out["_y"] = pd.to_numeric(out["grade"]).astype(np.int64) - run.grade_min
    if all(k in out.columns and out[k].notna().all() for k in run.keys):
        for k in run.keys:
            out[f"_c_{k}"] = pd.to_numeric(out[k]).astype(np.int64) - run.scale_min
    return out


@dataclass
class AttendedItems:
    """Predictions for N items plus, per item, the response tokens and α over them (K, T_r)."""

    preds: Predictions
    tokens: list[list[str]]  # per item, the response's tokens as text
    spans: list[list[tuple[int, int]]]  # per item, each token's (start, end) in the response text
    alpha: list[NDArray[Any] | None]  # per item (K, T_r) RACE attention on the response tokens, None w/o RACE


def _find(hay: list[int], needle: list[int]) -> int:
    """Start of the last occurrence of needle in hay, -1 if absent."""
    n = len(needle)
    for s in range(len(hay) - n, -1, -1):
        if hay[s : s + n] == needle:
            return s
    return -1


def predict_with_attention(run: Run, items: pd.DataFrame, batch_size: int = 16) -> AttendedItems:
    """One pass of the model over items (question, response, reference, context columns)."""
    import torch

    df = items.reset_index(drop=True)
    df["response"] = df["response"].fillna("").astype(str) if "response" in df.columns else ""
    tok = run.tokenizer
    feats = model_inputs(tok, df, run.model.config.max_len)
    enc = reccbm.EncodedItems(feats)
    preds = reccbm.predict(run.model, enc, tok.pad_token_id, batch_size)
    tokens: list[list[str]] = []
    spans: list[list[tuple[int, int]]] = []
    alphas: list[NDArray[Any] | None] = []
    model = run.model
    for i, text in enumerate(df["response"]):
        r = tok(text, add_special_tokens=False, return_offsets_mapping=True)
        ids, offs = list(feats[i]["input_ids"]), [tuple(o) for o in r["offset_mapping"]]
        start, n = -1, len(r["input_ids"])
        while n > 0 and start < 0:  # the response may have been truncated: its longest kept prefix
            start = _find(ids, list(r["input_ids"][:n]))
            n = n if start >= 0 else n - 1
        tokens.append([text[a:b] for a, b in offs[:n]])
        spans.append([(int(a), int(b)) for a, b in offs[:n]])
        if not run.has_race or start < 0:
            alphas.append(None)
            continue
        with torch.no_grad():
            batch = collate(enc, [i], tok.pad_token_id)
            _, alpha = model.concepts(batch)
        assert alpha is not None
        alphas.append(alpha[0, :, start : start + n].float().numpy())  # (K, T_r)
    return AttendedItems(preds, tokens, spans, alphas)


