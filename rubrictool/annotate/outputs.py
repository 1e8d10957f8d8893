"""Where a run's tables go, writing them, and loading a run's inputs."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import pandas as pd

from rubrictool.annotate.runner import AnnotateResult
from rubrictool.atomic import atomic_write_json
from rubrictool.data import load_benchmark
from rubrictool.errors import AnnotateError
from rubrictool.io import write_table
from rubrictool.outputs import check_output, has_columns
from rubrictool.rubric import Rubric, load_rubric
from rubrictool.tables import read_items

__all__ = ["check_annotate_output", "load_inputs", "output_paths", "write_outputs"]


def output_paths(out: str | Path) -> tuple[Path, Path, Path]:
    """(predictions, failures, summary) paths: ``out`` is a table file (.jsonl/.csv/.parquet) or a folder."""
    p = Path(out)
    if p.suffix.lower() in {".jsonl", ".csv", ".parquet", ".pq", ".json"}:
        return p, p.with_name(p.stem + ".failures.jsonl"), p.with_name(p.stem + ".summary.json")
    return p / "predictions.jsonl", p / "failures.jsonl", p / "summary.json"


def check_annotate_output(out: str | Path, inputs: list[str | Path | None]) -> None:
    """The output rule (rubrictool.outputs) for ``annotate --out``: a table file with its two sibling files, or a
    folder of the three; never an input, never a file that is not a prediction table."""
    pred, fail, summ = output_paths(out)  # not locked here: run_annotation locks the table and the cache
    if pred == Path(out):
        check_output(out, inputs, "file", writes=[fail.name, summ.name], what="a prediction table",
                     own=has_columns("item", "model", "concept", "level"), lock=False)
    else:
        check_output(out, inputs, "folder", writes=[pred.name, fail.name, summ.name],
                     what="the prediction table", lock=False)


def write_outputs(result: AnnotateResult, out: str | Path, cache: str | Path | None = None) -> tuple[Path, Path, Path]:
    """Write the PredictionTable, the failure records (with raw replies) and the summary, each atomically.

    A full disk or a read-only folder is one :class:`AnnotateError` naming the file; every reply is in
    ``cache`` (when the run had one), so a re-run writes the outputs without paying again."""

    pred, fail, summ = output_paths(out)
    current = pred
    try:
        write_table(result.predictions, pred)
        current = fail
        write_table(pd.DataFrame(result.failures, columns=["item", "model", "error", "reply", "repair_reply"]), fail)
        payload = {
            "items": result.total_items,
            "stopped_by_budget": result.stopped_by_budget,
            "failure_share": round(result.failure_share, 6),
            "stopped": dict(result.fatal),  # model -> why it took no more items (wrong key, early stop)
            "cost_usd": round(result.cost_usd, 6),
            "models": {m: asdict(s) for m, s in result.summary.items()},
        }
        current = summ
        atomic_write_json(summ, payload)
    except OSError as e:
        kept = (f"every reply is kept in the cache {cache}: a re-run with the same --cache writes the outputs "
                "without sending anything") if cache is not None else "no cache was kept (--no-cache)"
        raise AnnotateError(f"{current}: cannot write it ({e.strerror or e}); {kept}",
                            hint="free space or fix the folder's permissions, then re-run") from None
    return pred, fail, summ




def load_inputs(
    benchmark: str | None, rubric: str | None, data: str | Path | None, data_dir: str | Path | None
) -> tuple[pd.DataFrame, Rubric]:
    """Items and rubric from ``--benchmark NAME`` (rubric defaults to the same name) or ``--rubric R --items FILE``."""

    if benchmark and data:
        raise AnnotateError("items come from a benchmark or an item table, not both",
                            hint="pass either --benchmark or --items")
    if not benchmark and not data:
        raise AnnotateError("nothing to annotate: no benchmark and no item table",
                            hint="pass --benchmark mohler, or --rubric R --items ITEMS.jsonl")
    if data and not rubric:
        raise AnnotateError("an item table needs a rubric",
                            hint="--items needs --rubric (a bundled rubric name or a YAML path)")
    items = load_benchmark(benchmark, data_dir) if benchmark else read_items(data)  # type: ignore[arg-type]
    return items, load_rubric(rubric or benchmark or "")
