"""Items (and LLM predictions) as Label Studio tasks."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pandas as pd

from rubrictool.review.interface import shown_fields
from rubrictool.rubric import Rubric
from rubrictool.tables import read_predictions

__all__ = [
    "build_tasks",
    "prediction_payload",
    "read_task_predictions",
    "task_data",
]


def _text(v: Any) -> str:
    if v is None or v is pd.NA or (isinstance(v, float) and math.isnan(v)):
        return ""
    return str(v)


def task_data(item: dict[str, Any], rubric: Rubric) -> dict[str, Any]:
    """The ``data`` of one task: the item id and every field the interface shows (empty string when absent)."""
    data: dict[str, Any] = {"item_id": str(item["id"]), "response": _text(item.get("response"))}
    for f in shown_fields(rubric):
        data[f] = _text(item.get(f))
    return data


def prediction_payload(model: str, rows: pd.DataFrame) -> dict[str, Any]:
    """One Label Studio prediction; a grader's rows (with ``uncertainty``) also carry ``score`` = 1 −
    uncertainty, the model confidence Label Studio's Data Manager sorts by (lowest first = least sure)."""
    result = [
        {"from_name": c, "to_name": "response", "type": "choices", "value": {"choices": [str(int(lv))]}}
        for c, lv in zip(rows["concept"], rows["level"])
    ]
    out: dict[str, Any] = {"model_version": str(model), "result": result}
    if "uncertainty" in rows.columns and rows["uncertainty"].notna().any():
        out["score"] = round(1.0 - float(rows["uncertainty"].max()), 6)
    return out


def build_tasks(items: pd.DataFrame, predictions: pd.DataFrame | None, rubric: Rubric) -> list[dict[str, Any]]:
    """Import payloads: one task per item with one prediction per model that has a valid label for it."""
    by_item: dict[str, pd.DataFrame] = {}
    if predictions is not None and len(predictions):
        by_item = {str(k): g for k, g in predictions.groupby("item", sort=False)}
    order = {k: i for i, k in enumerate(rubric.keys)}
    tasks = []
    for item in items.to_dict(orient="records"):
        task: dict[str, Any] = {"data": task_data({str(k): v for k, v in item.items()}, rubric)}
        preds = by_item.get(str(item["id"]))
        if preds is not None:
            preds = preds.assign(_o=preds["concept"].map(order)).sort_values("_o")
            task["predictions"] = [prediction_payload(str(m), g) for m, g in preds.groupby("model", sort=True)]
        tasks.append(task)
    return tasks


def read_task_predictions(path: str | Path, rubric: Rubric, item_ids: set[str]) -> tuple[pd.DataFrame, int]:
    """The valid rows (``raw_ok``) of a PredictionTable for the given items, checked against the rubric,
    and how many valid rows were for other items (a table made for a whole benchmark may be pushed
    for a subset of its items)."""
    df = read_predictions(path, rubric, valid_only=True)
    ours = df["item"].isin(item_ids)
    return df[ours].reset_index(drop=True), int((~ours).sum())
