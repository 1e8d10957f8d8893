"""``rubrictool ablate``: the eight RACE/OPCC/LCEC combinations (and the PLM) on the same split(s) and seeds.

Each combination is an ordinary run directory ``OUT/<variant>`` (``vanilla``, ``race``, ``race+opcc``, …,
``reccbm``, ``plm``), trained by :func:`rubrictool.pipeline.run_train` with the same data, split, seeds and
options. Resumable: a combination whose ``metrics.json`` (``folds.json`` with ``--folds``) exists is read back,
not retrained. The table (mean ± std over seeds; with k folds, the pooled metrics ± their std over
folds) goes to ``ablation.csv``/``.md`` and the bar chart to ``ablation.png``.

Any combination name may end in ``-frozen`` or ``-auto`` (``reccbm-frozen``, ``plm-frozen``): the same combination with
the pretrained encoder frozen (``stage1.encoder``; only the heads train), in its own run directory and table row.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from reccbm.config import variant_name
from rubrictool.atomic import atomic_write_bytes, atomic_write_text
from rubrictool.errors import TrainError
from rubrictool.io import write_table
from rubrictool.report.figures import ablation_png

__all__ = ["COMBINATIONS", "ENCODERS", "ablation_markdown", "run_ablation"]

# (plm, race, opcc, lcec), from the vanilla CBM to the full REC-CBM, then the PLM
COMBINATIONS: list[tuple[bool, bool, bool, bool]] = [
    (False, r, o, lc) for lc, o, r in itertools.product((False, True), repeat=3)
] + [(True, False, False, False)]
METRICS = ("t_acc", "t_f1", "qwk", "c_acc", "c_f1")
ENCODERS = ("frozen", "auto")  # a combination's suffix: "reccbm-frozen" trains with stage1.encoder = "frozen"


def _row(name: str, flags: tuple[bool, bool, bool, bool], metrics: dict[str, Any], encoder: str) -> dict[str, Any]:
    s = metrics.get("summary", {})
    row: dict[str, Any] = {"variant": name, "race": flags[1], "opcc": flags[2], "lcec": flags[3], "plm": flags[0],
                           "encoder": encoder, "n_seeds": len(metrics.get("seeds", [])) or None}
    for m in METRICS:
        v = s.get(m) or {}
        row[f"{m}_mean"], row[f"{m}_std"] = v.get("mean"), v.get("std")
    return row


def _trained_with(run: Path) -> str:
    """What the run was trained with (its config.yaml; a k-fold run's first fold)."""
    import yaml

    from rubrictool.runs import trained_with

    for cfg in (run / "config.yaml", *sorted(run.glob("fold-*/config.yaml"))):
        if cfg.is_file():
            return trained_with(yaml.safe_load(cfg.read_text()) or {})
    return "—"


def _metrics(run: Path, done_file: str) -> dict[str, Any]:
    """metrics.json of a run; for a k-fold run, the pooled metrics with the std over folds."""
    doc: dict[str, Any] = json.loads((run / done_file).read_text())
    if done_file == "metrics.json":
        return doc
    per_fold = doc.get("per_fold", [])
    summary = {m: {"mean": v, "std": float(np.std([f[m] for f in per_fold if m in f], ddof=1))
                   if sum(m in f for f in per_fold) > 1 else 0.0}
               for m, v in doc.get("pooled", {}).items()}
    return {"summary": summary, "seeds": per_fold}


def run_ablation(
    out: str | Path, *, variants: list[str] | None = None, on_run: Callable[[int, int, str, str], None] | None = None,
    **train_kwargs: Any,
) -> tuple[pd.DataFrame, dict[str, Path]]:
    """Train (or read back) every combination into ``out/<variant>``; ``train_kwargs`` go to
    :func:`rubrictool.pipeline.run_train` (benchmark or data, rubric, seeds, folds, options).
    variants: a subset of the combination names (default all nine), each optionally ending in -frozen or -auto (the
    encoder choice, ENCODERS). on_run(i, n, name, "train"|"done")."""
    from rubrictool.pipeline import run_train
    from rubrictool.train import encoder_epochs

    d = Path(out)
    names = [(variant_name(*f), f) for f in COMBINATIONS]
    combos: list[tuple[str, tuple[bool, bool, bool, bool], str | None]] = [(n, f, None) for n, f in names]
    if variants:
        known = {n for n, _ in names}
        unknown = sorted(v for v in set(variants) if v.partition("-")[0] not in known
                         or v.partition("-")[2] not in ("", *ENCODERS))
        if unknown:
            raise TrainError(f"unknown variant(s) {unknown}; use {', '.join(n for n, _ in names)}, each "
                             f"optionally ending in -{' or -'.join(ENCODERS)}")
        combos = [(v, f, v.partition("-")[2] or None) for n, f in names for v in dict.fromkeys(variants)
                  if v.partition("-")[0] == n]
    rows = []
    done_file = "folds.json" if train_kwargs.get("folds") else "metrics.json"
    for i, (name, (plm, race, opcc, lcec), encoder) in enumerate(combos):
        run = d / name
        if (run / done_file).is_file():
            state = "done"
        else:
            state = "train"
            if on_run:
                on_run(i, len(combos), name, state)
            kw = dict(train_kwargs)
            if plm and kw.get("epochs") is not None:  # a fair baseline: the concept models' Stage I + joint epochs
                kw["epochs"] = encoder_epochs(kw.get("preset") or "default", {"stage1": {"epochs": kw["epochs"]}})
            run_train(out=run, variant="plm" if plm else "reccbm", race=None if plm else race,
                      opcc=None if plm else opcc, lcec=None if plm else lcec, **(kw | {"encoder": encoder}))
        if on_run and state == "done":
            on_run(i, len(combos), name, state)
        rows.append(_row(name, (plm, race, opcc, lcec), _metrics(run, done_file), encoder or "train")
                    | {"trained_with": _trained_with(run)})
    table = pd.DataFrame(rows)
    d.mkdir(parents=True, exist_ok=True)
    paths = {"ablation.csv": d / "ablation.csv", "ablation.md": d / "ablation.md", "ablation.png": d / "ablation.png"}
    write_table(table, paths["ablation.csv"])
    atomic_write_text(paths["ablation.md"], ablation_markdown(table))
    atomic_write_bytes(paths["ablation.png"], ablation_png(table))
    return table, paths


def ablation_markdown(table: pd.DataFrame) -> str:
    def cell(r: dict[str, Any], m: str) -> str:
        mean, std = r.get(f"{m}_mean"), r.get(f"{m}_std")
        return "—" if mean is None or pd.isna(mean) else f"{mean:.3f} ± {(std or 0.0):.3f}"

    names = {"t_acc": "T-Acc", "t_f1": "T-F1", "qwk": "QWK", "c_acc": "C-Acc", "c_f1": "C-F1"}
    lines = ["| variant | RACE | OPCC | LCEC | encoder | " + " | ".join(names[m] for m in METRICS) + " | trained with |",
             "|---|---|---|---|---|" + "---|" * len(METRICS) + "---|"]
    for rec in table.to_dict("records"):
        r = {str(k): v for k, v in rec.items()}
        marks = ["✓" if r[c] else "" for c in ("race", "opcc", "lcec")] + [str(r.get("encoder", "train"))]
        lines.append(f"| {r['variant']} | " + " | ".join(marks) + " | " + " | ".join(cell(r, m) for m in METRICS)
                     + f" | {r.get('trained_with') or '—'} |")
    return "\n".join(["# Ablation (test split, mean ± std over seeds)", "", *lines, ""])
