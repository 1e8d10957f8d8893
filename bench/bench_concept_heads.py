"""Where the grade accuracy goes: concept errors vs the grade head, on the benchmark's trained runs.

For every REC-CBM and vanilla run of `bench_train.py` (``<out>/<variant>-s<seed>``) this caches the
frozen Stage I outputs p̂ on the run's own train/dev/test split and reports

1. concept accuracy of p̂ on train, dev and test — how much cleaner the outputs Stage II trains on
   are than the ones it meets at test time;
2. the test T-Acc / T-F1 of a multinomial logistic-regression grade head on the *predicted*
   s̃ = ĉ/M (L2 strength C chosen on dev macro-F1), fitted on the train outputs and, separately, on
   the dev outputs — the best a linear head on these concept predictions does, next to the
   oracle-concept bound (the same head on the adjudicated labels);
3. Stage II itself retrained from scratch with ``--stage2-seeds`` seeds on the same outputs (the CLI
   defaults), mean ± std — how much of a single run's T-Acc / T-F1 is Stage II's seed.

    .venv/bin/python bench/bench_concept_heads.py --out bench/out/train3 --data-dir ../shared/datasets

Writes ``<out>/concept_heads.json`` and prints Markdown tables.
Concept labels: majority vote over three LLM annotation passes, NOT validated by experts.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np
import torch

PARTS = ("train", "dev", "test")


def _scores(p: torch.Tensor) -> np.ndarray:
    """s̃ = ĉ / M from p̂ (N, K, M+1), as the grade head sees it."""
    from reccbm.model import expected_scores

    return (expected_scores(p) / (p.shape[-1] - 1)).numpy()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("bench/out/train3"), help="bench_train.py output folder")
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--stage2-seeds", type=int, default=3)
    a = ap.parse_args()
    from bench_stage2 import cached_outputs, retrain
    from bench_train import tuned_linear_head

    import reccbm

    logging.getLogger("reccbm").setLevel(logging.WARNING)
    rows: list[dict[str, Any]] = []
    for run in sorted(a.out.glob("*-s*")):
        variant = run.name.rsplit("-s", 1)[0]
        if variant not in ("reccbm", "vanilla") or not (run / "model.json").is_file():
            continue
        _, d = cached_outputs(run, a.data_dir)
        X = {part: _scores(d[part]["p"]) for part in PARTS}
        y = {part: d[part]["y"].numpy() for part in PARTS}
        row: dict[str, Any] = {"run": run.name, "variant": variant}
        for part in PARTS:
            row[f"c_acc_{part}"] = float((d[part]["p"].argmax(-1) == d[part]["c"]).float().mean())
        for fit in ("train", "dev"):  # C chosen on the other of the two splits
            m, _, _ = tuned_linear_head(X, y, fit=fit, select="dev" if fit == "train" else "train")
            row[f"lr_{fit}_t_acc"], row[f"lr_{fit}_t_f1"] = m["t_acc"], m["t_f1"]
        model, _, _ = reccbm.load_checkpoint(run)
        s2 = [retrain(model, d, reccbm.StageIIConfig(seed=seed, epochs=30))[1] for seed in range(a.stage2_seeds)]
        for k in ("t_acc", "t_f1"):
            v = [r[k] for r in s2]
            row[f"s2_{k}_mean"], row[f"s2_{k}_std"], row[f"s2_{k}_runs"] = float(np.mean(v)), float(np.std(v, ddof=1)), v
        rows.append(row)
        print(json.dumps(row), flush=True)
    (a.out / "concept_heads.json").write_text(json.dumps(rows, indent=1) + "\n")

    print("\n| run | C-Acc train | dev | test | LR head on train s̃: T-Acc / T-F1 | on dev s̃ | "
          f"Stage II, {a.stage2_seeds} seeds: T-Acc | T-F1 |\n|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['run']} | {r['c_acc_train']:.3f} | {r['c_acc_dev']:.3f} | {r['c_acc_test']:.3f} | "
              f"{r['lr_train_t_acc']:.3f} / {r['lr_train_t_f1']:.3f} | {r['lr_dev_t_acc']:.3f} / {r['lr_dev_t_f1']:.3f} | "
              f"{r['s2_t_acc_mean']:.3f} ± {r['s2_t_acc_std']:.3f} | {r['s2_t_f1_mean']:.3f} ± {r['s2_t_f1_std']:.3f} |")
    print("\n| variant | Stage II over all splits × seeds: T-Acc | T-F1 |\n|---|---|---|")
    for v in ("reccbm", "vanilla"):
        acc = [x for r in rows if r["variant"] == v for x in r["s2_t_acc_runs"]]
        f1 = [x for r in rows if r["variant"] == v for x in r["s2_t_f1_runs"]]
        if acc:
            print(f"| {v} | {np.mean(acc):.3f} ± {np.std(acc, ddof=1):.3f} | {np.mean(f1):.3f} ± {np.std(f1, ddof=1):.3f} |")


if __name__ == "__main__":
    sys.exit(main())
