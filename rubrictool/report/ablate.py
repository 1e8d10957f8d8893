"""``rubrictool ablate``: the eight RACE/OPCC/LCEC combinations (and the PLM) on the same split(s) and seeds.

Each combination is an ordinary run directory ``OUT/<variant>`` (``vanilla``, ``race``, ``race+opcc``, …,
``reccbm``, ``plm``), trained by :func:`rubrictool.pipeline.train_on` with the same data, split, seeds and
options. Resumable: a combination whose ``metrics.json`` (``folds.json`` with ``--folds``) exists is read back,
not retrained. The table (mean ± std over seeds; with k folds, the pooled metrics ± their std over
folds) goes to ``ablation.csv``/``.md`` and the bar chart to ``ablation.png``.

Any combination name may end in ``-frozen`` or ``-auto`` (``reccbm-frozen``, ``plm-frozen``): the same combination with
the pretrained encoder frozen (``stage1.encoder``; only the heads train), in its own run directory and table row.
"""

from __future__ import annotations

import copy
import itertools
import json
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from reccbm.config import variant_name
from rubrictool.atomic import atomic_write_bytes, atomic_write_text
from rubrictool.errors import TrainError
from rubrictool.io import write_table
from rubrictool.progress import ProgressFn
from rubrictool.report.figures import ablation_png
from rubrictool.train import ENCODERS, TrainOptions, fair_plm_overrides

__all__ = ["COMBINATIONS", "ablation_markdown", "run_ablation"]

# (plm, race, opcc, lcec), from the vanilla CBM to the full REC-CBM, then the PLM
COMBINATIONS: list[tuple[bool, bool, bool, bool]] = [
    (False, r, o, lc) for lc, o, r in itertools.product((False, True), repeat=3)
] + [(True, False, False, False)]
METRICS = ("t_acc", "t_f1", "qwk", "c_acc", "c_f1")


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

    from rubrictool.train.runs import trained_with

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


def _combo_options(options: TrainOptions, flags: tuple[bool, bool, bool, bool], encoder: str | None) -> TrainOptions:
    """``options`` for one combination: its variant and switches, its encoder choice, and the PLM's fair encoder
    budget."""
    plm, race, opcc, lcec = flags
    overrides = copy.deepcopy(options.overrides)
    if encoder:
        overrides.setdefault("stage1", {})["encoder"] = encoder
    return replace(options, variant="plm" if plm else "reccbm", race=None if plm else race,
                   opcc=None if plm else opcc, lcec=None if plm else lcec,
                   overrides=fair_plm_overrides(options.preset, overrides) if plm else overrides)


def run_ablation(
    out: str | Path,
    *,
    benchmark: str | None,
    data: str | Path | None,
    rubric: str | None,
    options: TrainOptions,
    data_dir: str | Path | None = None,
    variants: list[str] | None = None,
    folds: int = 0,
    split_seed: int = 0,
    on_run: Callable[[int, int, str, str], None] | None = None,
    progress: ProgressFn | None = None,
    jobs: int = 1,
) -> tuple[pd.DataFrame, dict[str, Path]]:
    """Train (or read back) every combination into ``out/<variant>``: the same data (read once,
    :func:`rubrictool.pipeline.resolve_data`), split or folds, seeds and ``options``; each combination sets the variant
    and switches, the PLM trains the concept models' encoder budget (:func:`rubrictool.train.fair_plm_overrides`).
    variants: a subset of the combination names (default all nine), each optionally ending in -frozen or -auto (the
    encoder choice, ENCODERS). on_run(i, n, name, "train"|"done"). jobs > 1: the combinations not trained yet train in
    that many worker processes first (:mod:`rubrictool.train.parallel`), then are read back in order."""
    from rubrictool.pipeline import DataSource, resolve_data, train_on

    d = Path(out)
    combos = _combinations(variants)
    rows = []
    done_file = "folds.json" if folds else "metrics.json"
    source: DataSource | None = None
    todo = [(name, flags, encoder) for name, flags, encoder in combos if not (d / name / done_file).is_file()]
    if jobs > 1 and todo:  # the combinations not trained yet, in worker processes; the loop below reads them back
        from rubrictool.train.parallel import run_in_workers

        source = resolve_data(benchmark=benchmark, data=data, rubric=rubric, data_dir=data_dir, progress=progress)
        run_in_workers(train_on, [(name, {"source": source, "out": d / name,
                                          "options": _combo_options(options, flags, enc),
                                          "split_seed": split_seed, "folds": folds}) for name, flags, enc in todo],
                       jobs, progress, "combinations")
    for i, (name, (plm, race, opcc, lcec), encoder) in enumerate(combos):
        run = d / name
        state = "done" if (run / done_file).is_file() else "train"
        if on_run:
            on_run(i, len(combos), name, state)
        if state == "train":
            source = source or resolve_data(benchmark=benchmark, data=data, rubric=rubric, data_dir=data_dir,
                                            progress=progress)
            train_on(source, run, _combo_options(options, (plm, race, opcc, lcec), encoder), split_seed=split_seed,
                     folds=folds, progress=progress)
        rows.append(_row(name, (plm, race, opcc, lcec), _metrics(run, done_file), encoder or "train")
                    | {"trained_with": _trained_with(run)})
    table = pd.DataFrame(rows)
    d.mkdir(parents=True, exist_ok=True)
    paths = {"ablation.csv": d / "ablation.csv", "ablation.md": d / "ablation.md", "ablation.png": d / "ablation.png"}
    write_table(table, paths["ablation.csv"])
    atomic_write_text(paths["ablation.md"], ablation_markdown(table))
    atomic_write_bytes(paths["ablation.png"], ablation_png(table))
    return table, paths


def _combinations(variants: list[str] | None) -> list[tuple[str, tuple[bool, bool, bool, bool], str | None]]:
    """(name, (plm, race, opcc, lcec), encoder suffix) of the combinations to run: all nine, or those named."""
    names = [(variant_name(*f), f) for f in COMBINATIONS]
    if not variants:
        return [(n, f, None) for n, f in names]
    known = {n for n, _ in names}
    unknown = sorted(v for v in set(variants) if v.partition("-")[0] not in known
                     or v.partition("-")[2] not in ("", *ENCODERS))
    if unknown:
        raise TrainError(f"unknown variant(s) {unknown}; use {', '.join(n for n, _ in names)}, each "
                         f"optionally ending in -{' or -'.join(ENCODERS)}")
    return [(v, f, v.partition("-")[2] or None) for n, f in names for v in dict.fromkeys(variants)
            if v.partition("-")[0] == n]


def ablation_markdown(table: pd.DataFrame) -> str:
    def cell(r: dict[str, Any], m: str) -> str:
        mean, std = r.get(f"{m}_mean"), r.get(f"{m}_std")
        return "—" if mean is None or pd.isna(mean) else f"{mean:.3f} ± {(std or 0.0):.3f}"

    names = {"t_acc": "T-Acc", "t_f1": "T-F1", "qwk": "QWK", "c_acc": "C-Acc", "c_f1": "C-F1"}
    lines = ["| variant | RACE | OPCC | LCEC | encoder | " + " | ".join(names[m] for m in METRICS)
             + " | trained with |",
             "|---|---|---|---|---|" + "---|" * len(METRICS) + "---|"]
    for rec in table.to_dict("records"):
        r = {str(k): v for k, v in rec.items()}
        marks = ["✓" if r[c] else "" for c in ("race", "opcc", "lcec")] + [str(r.get("encoder", "train"))]
        lines.append(f"| {r['variant']} | " + " | ".join(marks) + " | " + " | ".join(cell(r, m) for m in METRICS)
                     + f" | {r.get('trained_with') or '—'} |")
    return "\n".join(["# Ablation (test split, mean ± std over seeds)", "", *lines, ""])
