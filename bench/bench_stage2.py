"""Stage II settings on the frozen outputs of one trained run: early stopping vs the whole budget.

Loads a run directory written by `rubrictool train --benchmark mohler`, caches its Stage I outputs p̂
for the run's own train/dev/test split once, then retrains only Stage II (L, η, W from a fresh
initialisation) under several settings and Stage II seeds, and reports dev and test T-Acc / T-F1.
This is the measurement behind the Stage II defaults (README, Design notes).

    .venv/bin/python bench/bench_stage2.py bench/out/train/main-default --seeds 3
    .venv/bin/python bench/bench_stage2.py bench/results/folds/paper/fold-{0,1,2,3,4} --seeds 3

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

import numpy as np
import torch

SETTINGS: dict[str, dict[str, Any]] = {
    "paper patience 3, LR 0.02, 50 ep": {"lr": 0.02, "epochs": 50, "patience": 3},
    "no early stop, LR 0.02, 50 ep": {"lr": 0.02, "epochs": 50, "patience": 50},
    "no early stop, LR 0.05, 30 ep (default)": {"lr": 0.05, "epochs": 30, "patience": 30},
    "no early stop, LR 0.05, 50 ep": {"lr": 0.05, "epochs": 50, "patience": 50},
    "default, epoch chosen on dev NLL": {"lr": 0.05, "epochs": 30, "patience": 30, "select": "nll"},
}
AVERAGED = "no early stop, LR 0.05, 30 ep (default)"  # its seeds' grade logits are also averaged (one row)


def cached_outputs(run: Path, data_dir: str | None) -> tuple[Any, dict[str, dict[str, torch.Tensor]]]:
    import reccbm
    from rubrictool.adjudicate import adjudicate
    from rubrictool.data import load_benchmark, load_concept_passes
    from rubrictool.rubric import load_rubric
    from rubrictool.tables import LLM_PASSES_NOTE
    from rubrictool.train import _encode, prepare_table

    rb = load_rubric("mohler")
    adj = adjudicate(load_concept_passes(), rb, load_benchmark("mohler", data_dir), n_boot=0, coverage=False,
                     note=LLM_PASSES_NOTE)
    split = json.loads((run / "split.json").read_text())
    model, tok, _ = reccbm.load_checkpoint(run)
    df = prepare_table(adj.table, rb).set_index("id", drop=False)
    out: dict[str, dict[str, torch.Tensor]] = {}
    for name in ("train", "dev", "test"):
        enc = _encode(df.loc[split[name]].reset_index(drop=True), rb, tok, model.config.max_len, True)
        assert enc.concepts is not None and enc.grades is not None
        out[name] = {"p": reccbm.cache_concepts(model, enc, tok.pad_token_id),
                     "c": torch.as_tensor(enc.concepts), "y": torch.as_tensor(enc.grades)}
    return model, out


def fresh_head(model: Any) -> None:
    """Re-initialise the Stage II parameters (L, η, W, and the level head's U) of a loaded model."""
    from reccbm import LatentCorrection

    if model.lcec is not None:
        model.lcec = LatentCorrection(model.config.num_concepts, model.config.eps)
    model.W.reset_parameters()
    if model.U is not None:
        with torch.no_grad():
            model.U.zero_()


def retrain(model: Any, d: dict[str, dict[str, torch.Tensor]], cfg: Any) -> tuple[Any, dict[str, float], torch.Tensor]:
    """Stage II from a fresh head (seeded by cfg.seed) on cached outputs: its result, test T-Acc / T-F1 and
    test grade logits."""
    import reccbm

    torch.manual_seed(cfg.seed)
    fresh_head(model)
    r = reccbm.train_grader(model, d["train"]["p"], d["train"]["c"], d["train"]["y"], d["dev"]["p"], d["dev"]["y"], cfg)
    with torch.no_grad():
        logits = model.grade_from_concepts(d["test"]["p"]).grade_logits
    return r, reccbm.task_metrics(d["test"]["y"].numpy(), logits.argmax(1).numpy()), logits


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", type=Path, nargs="+", help="run directories (e.g. every fold of a bench_folds config)")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--data-dir", default=None)
    a = ap.parse_args()
    import reccbm

    logging.getLogger("reccbm").setLevel(logging.WARNING)
    print("| run | setting | best epochs | dev T-F1 | test T-Acc | test T-F1 | test QWK | seconds |\n|---|---|---|---|---|---|---|---|")
    for run in a.runs:
        model, d = cached_outputs(run, a.data_dir)
        y = d["test"]["y"].numpy()
        for name, kw in SETTINGS.items():
            res, logits = [], []
            for seed in range(a.seeds):
                r, t, lg = retrain(model, d, reccbm.StageIIConfig(seed=seed, **kw))
                q = reccbm.grade_metrics(y, lg.argmax(1).numpy())["qwk"]
                res.append((r.best_epoch, r.best["t_f1"], t["t_acc"], t["t_f1"], q, r.seconds))
                logits.append(lg)
            x = np.array(res, dtype=float)
            print(f"| {run} | {name} | {', '.join(str(int(e)) for e in x[:, 0])} | {x[:, 1].mean():.3f} | "
                  f"{x[:, 2].mean():.3f} ± {x[:, 2].std(ddof=1):.3f} | {x[:, 3].mean():.3f} ± {x[:, 3].std(ddof=1):.3f} | "
                  f"{x[:, 4].mean():.3f} ± {x[:, 4].std(ddof=1):.3f} | {x[:, 5].mean():.1f} |", flush=True)
            if name == AVERAGED:  # one grader: the mean of the seeds' logits (contributions average too)
                pred = torch.stack(logits).mean(0).argmax(1).numpy()
                t = reccbm.grade_metrics(y, pred)
                q = t["qwk"]
                print(f"| {run} | {a.seeds} seeds of the default, logits averaged | — | — | {t['t_acc']:.3f} | "
                      f"{t['t_f1']:.3f} | {q:.3f} | — |", flush=True)


if __name__ == "__main__":
    sys.exit(main())
