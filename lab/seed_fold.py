"""One fold of Mohler's k-fold benchmark trained again with another first seed: how far a fold's metrics move with the
training seed alone (the same split, recipe and data; benchmarks/folds.py trains every fold with seed 0).

The paired bootstrap CIs of lab/reader_compare.py resample the test answers of one trained model per fold; they
do not cover what another seed would have trained. A fold trained again here, compared with the same fold of the kept
run (``reader_compare.py OUT --against KEPT``, on that fold's answers), shows that part of the spread.

    python lab/seed_fold.py --config lab/configs/default-contrast1.yaml --by question --fold 3 \
        --seed 1 --out /work/benchruns/seed-q/default-contrast1
    python lab/seed_fold.py --by question --fold 3 --seed 1 --out OUT   # the default preset as it is

The run is ``OUT/fold-<fold>-seed<seed>/`` (a complete run directory: test_predictions.csv, metrics.json); it is not
retrained when it is there.

Concept labels: majority vote over three LLM annotation passes, NOT validated by experts.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", type=Path, default=None, help="a `rubrictool train --config` YAML file (default: none)")
    ap.add_argument("--by", default=None, help="grouped folds, e.g. question (as benchmarks/folds.py --by)")
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--fold", type=int, required=True)
    ap.add_argument("--seed", type=int, required=True, help="the first seed (benchmarks/folds.py: 0)")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--data-dir", default=os.environ.get("RUBRICTOOL_DATA", "../shared/datasets"))
    a = ap.parse_args()
    if not 0 <= a.fold < a.folds:
        ap.error(f"--fold {a.fold}: the folds are 0..{a.folds - 1}")

    from reccbm.errors import ReccbmError
    from rubrictool.data import kfold_splits
    from rubrictool.errors import RubrictoolError
    from rubrictool.pipeline import benchmark_table
    from rubrictool.progress import Progress
    from rubrictool.tables import LLM_PASSES_NOTE
    from rubrictool.train import DataRecord, TrainOptions, train_model
    from rubrictool.train.recipe import load_train_config

    run = a.out / f"fold-{a.fold}-seed{a.seed}"
    if (run / "metrics.json").is_file():
        print(f"{run}: done")
        return
    try:
        over = load_train_config(a.config) if a.config else {}
        rubric, table, agreement = benchmark_table("mohler", a.data_dir)  # with the passes' levels (soft targets)
        splits = kfold_splits(table, k=a.folds, seed=0, by=a.by)  # benchmarks/folds.py's folds

        def show(p: Progress) -> None:  # one line per update on stderr: the stage, its steps, its loss or dev metric
            total = f"/{p.total}" if p.total is not None else ""
            print(f"{p.task}: {p.info}" if p.kind != "progress" else f"{p.task} {p.done}{total} {p.info}",
                  file=sys.stderr, flush=True)

        train_model(rubric, table, splits[a.fold], run,
                    record=DataRecord(agreement=agreement, notes=[LLM_PASSES_NOTE]),
                    options=TrainOptions(overrides=over, first_seed=a.seed), progress=show)
    except (RubrictoolError, ReccbmError) as e:
        raise SystemExit(f"error: {e}") from None
    print(f"{run}: written")

if __name__ == "__main__":
    main()
