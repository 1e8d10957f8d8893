"""A trained run, opened for inspection: model, rubric scales, the table it was trained on, predictions.

:func:`open_run` opens a run directory (:class:`rubrictool.train.runs.Run`, the one run type) with its model and the
adjudicated table it was trained on: ``--table FILE`` (explain: ``--items FILE``) when given, else the run's copy of it
(or the recorded file), else the bundled benchmark labels the run names (Mohler). :func:`predict_with_attention` runs
the model once over items and keeps, besides :class:`reccbm.Predictions`, each item's tokens and RACE attention α_{k,t}
(Eq. 9) over its response.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from numpy.typing import NDArray

import reccbm
from reccbm import Predictions
from reccbm.data import collate, table_texts
from rubrictool.errors import DataError
from rubrictool.grade import check_finite, inputs_for, parse_overrides
from rubrictool.provenance import git_revision
from rubrictool.train import runs
from rubrictool.train.runs import Run

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


def open_run(run_dir: str | Path, data: str | Path | None = None, data_dir: str | Path | None = None,
             need_table: bool = True) -> Run:
    """:func:`rubrictool.train.runs.open_run` with the model loaded and, when ``need_table``, the training table
    (``data``, else the run's copy or recorded table, else the benchmark's bundled labels)."""
    run = runs.open_run(run_dir, data_dir=data_dir)
    _ = run.model  # load now: every reader of a run needs the model
    if data is not None or need_table:
        run.load_table(data)
    return run


def bundled_labels(run: Run) -> bool:
    """Was the run trained on a benchmark's bundled concept-label passes (its label source says so)?"""
    return run.bundled_labels


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
        raise DataError("this run has no table; pass --table FILE (explain: --items FILE)")
    df = table.assign(id=table["id"].astype(str)).drop_duplicates("id").set_index("id")
    missing = [i for i in ids if i not in df.index]
    if missing:
        raise DataError(f"{len(missing)} {what} not in the table, e.g. {missing[0]!r} (ids look like "
                        f"{df.index[0]!r}): is --table the table the run was trained on?",
                        hint="for answers the run did not train on (e.g. ones you graded), explain them with --items "
                             "and the file that holds them")
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
    feats = inputs_for(run.model, tok, df)  # the answer as written: the tokens the attention is shown on
    enc = reccbm.EncodedItems(feats)
    q, aux, r = table_texts(df)
    preds = reccbm.predict_texts(run.model, tok, q, r, aux, batch_size)
    check_finite(preds, [str(i) for i in df["id"]] if "id" in df.columns else [])
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
        if not run.has_race or start < 0 or not isinstance(model, reccbm.RecCBM):
            alphas.append(None)
            continue
        with torch.no_grad():
            batch = collate(enc, [i], tok.pad_token_id)
            _, alpha = model.concepts(batch)
        assert alpha is not None
        alphas.append(alpha[0, :, start : start + n].float().numpy())  # (K, T_r)
    return AttendedItems(preds, tokens, spans, alphas)


