"""The concept reader with its dropout kept on at test time: each answer read T times, the level shares p̂ averaged.

A trained encoder reads an answer once, with its dropout off. Read several times with the dropout on (Monte Carlo
dropout), the averaged level shares are those of many thinned encoders — a cheap ensemble that costs reading time
only, not training. This script reads a k-fold run's test answers so, fold by fold with each fold's kept weights,
grades the averaged shares with the fold's own head (``RecCBM.grade_from_concepts``: its LCEC and W), and writes the
result as a pooled predictions file that lab/reader_compare.py pairs against the run's own reading.

Before anything else each fold's model reads its test answers once with the dropout off and must give the run's
kept levels back (it does, unless the weights and the predictions are not one run's).

    python lab/mc_dropout.py ../benchruns/lr-q/default-lr-half --passes 8 --out ../benchruns/lr-q/mc8
    python lab/reader_compare.py ../benchruns/lr-q/mc8 --against ../benchruns/lr-q/default-lr-half \
        --truth benchmarks/results/folds-by-question/plain

Concept labels of the Mohler runs: majority vote over three LLM annotation passes, NOT validated by experts.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
from numpy.typing import NDArray
from reader_compare import pooled
from seed_ensemble import graded_rows
from torch import nn


def dropout_on(model: Any) -> int:
    """Every dropout module of the model's encoder put in training mode (the rest stays in eval mode); how many."""
    n = 0
    for m in model.encoder.modules():
        if isinstance(m, nn.Dropout):
            m.train()
            n += 1
    return n


@torch.no_grad()
def read_shares(model: Any, items: Any, pad_id: int, passes: int, seed: int, batch_size: int = 64) -> NDArray[Any]:
    """(passes, N, K, M+1) level shares: ``passes`` readings with the encoder's dropout on (0: one with it off)."""
    from reccbm.inference import collate_states

    model.eval()
    if passes > 0 and dropout_on(model) == 0:
        raise SystemExit("the model's encoder has no dropout to keep on")
    torch.manual_seed(seed)
    out = []
    for _ in range(max(passes, 1)):
        parts = []
        for start in range(0, len(items), batch_size):
            batch = collate_states(items, np.arange(start, min(start + batch_size, len(items))), pad_id, None)
            logits, _ = model.concepts(batch)
            parts.append(logits.float().softmax(-1).numpy())
        out.append(np.concatenate(parts))
    model.eval()
    return np.stack(out)


def load_fold(fold_dir: Path) -> tuple[Any, Any, dict[str, Any], pd.DataFrame]:
    """A k-fold run's fold: its model, tokenizer, model.json and table.csv (indexed by id); one line (SystemExit) where
    the fold keeps no weights or no table."""
    import reccbm

    try:
        model, tokenizer, meta = reccbm.load_checkpoint(fold_dir)
        table = pd.read_csv(fold_dir / "table.csv", dtype=str).set_index("id")
    except (reccbm.ReccbmError, OSError) as exc:
        why = str(exc).splitlines()[0] if str(exc) else exc.__class__.__name__
        raise SystemExit(f"{why if str(fold_dir) in why else f'{fold_dir}: {why}'}; give a k-fold run whose folds "
                         "keep their weights and table.csv") from None
    return model, tokenizer, meta, table


def mc_run(run: Path, passes: int, seed: int = 0, progress: Callable[[str], None] | None = None
           ) -> tuple[pd.DataFrame, dict[str, Any]]:
    """The run's test answers read with dropout on, ``passes`` times a fold: pooled predictions (id, fold, grade,
    grade_oracle, ``<KEY>_level``, ``<KEY>_p<m>``) and the check of each fold's deterministic reading; ``progress``
    receives a line as each fold ends."""
    import reccbm
    from rubrictool.grade import inputs_for

    base = pooled(run)
    parts, same, n, seconds = [], 0, 0, 0.0
    for fold in sorted(base["fold"].unique()):
        model, tokenizer, meta, table = load_fold(run / f"fold-{int(fold)}")
        keys = list(meta["concept_keys"])
        lo_c = int(meta.get("scale", [1])[0])  # the concept levels' lowest
        lo = int(meta.get("grade", [0])[0])
        mine = base[base["fold"] == fold].reset_index(drop=True)
        df = table.loc[mine["id"]].reset_index()
        items = reccbm.EncodedItems(inputs_for(model, tokenizer, df))
        once = read_shares(model, items, tokenizer.pad_token_id, 0, seed)[0]
        kept = np.stack([mine[f"{k}_level"].to_numpy(int) for k in keys], axis=1)
        same += int((once.argmax(-1) + lo_c == kept).sum())
        n += kept.size
        t0 = time.perf_counter()
        p_bar = read_shares(model, items, tokenizer.pad_token_id, passes, seed + int(fold)).mean(0)  # (N, K, M+1)
        seconds += time.perf_counter() - t0
        parts.append(graded_rows(mine, model, keys, p_bar, lo, lo_c))
        if progress is not None:
            progress(f"fold {int(fold)}: {len(mine)} answers read {passes} times in {time.perf_counter() - t0:.1f} s")
    return pd.concat(parts, ignore_index=True), {"own_levels_reproduced": same / max(n, 1), "levels": n,
                                                 "passes": passes, "reading_seconds": seconds}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run", type=Path, help="a k-fold folder whose folds keep their weights")
    ap.add_argument("--passes", type=int, default=8, help="readings per answer with the dropout on")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, required=True, help="folder for the pooled_predictions.csv it writes")
    a = ap.parse_args()
    if a.passes < 1:
        raise SystemExit(f"--passes {a.passes}: give 1 or more readings per answer")
    if a.out.resolve() == a.run.resolve():
        raise SystemExit(f"--out {a.out}: it would overwrite the run's own predictions; give a folder of its own")
    table, check = mc_run(a.run, a.passes, a.seed, progress=print)
    print(f"read once with the dropout off, each fold gives its kept level for {check['own_levels_reproduced']:.3f} of "
          f"{check['levels']} (answer, concept) pairs; {a.passes} readings with it on took "
          f"{check['reading_seconds']:.1f} s")
    a.out.mkdir(parents=True, exist_ok=True)
    table.to_csv(a.out / "pooled_predictions.csv", index=False)
    (a.out / "mc_dropout.json").write_text(json.dumps({"run": str(a.run)} | check, indent=1) + "\n")
    print(f"wrote {a.out / 'pooled_predictions.csv'} ({len(table)} answers)")


if __name__ == "__main__":
    main()
