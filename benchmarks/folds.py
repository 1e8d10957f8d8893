"""5-fold comparison on Mohler: REC-CBM (default and paper presets), vanilla CBM and the PLM baseline.

Every configuration is trained on the same stratified folds (``rubrictool.data.kfold_splits``, fold
seed 0, dev = 1/8 of each fold's training part), MiniLM on CPU. A fold's run is a complete run
directory ``<out>/<config>/fold-<i>/``; a fold with a metrics.json is never retrained, so the script
can be stopped and started again at any time (``--fold 0`` runs one fold of every configuration,
e.g. to screen settings before the full comparison). When every fold of a configuration is done, the
pooled table (``folds.json``, ``folds.md``) is written; ``--summary`` prints the comparison of every
finished configuration with paired bootstrap 95 % CIs against the PLM and vanilla CBM, the oracle
intervention and the reliability figures, and writes ``<out>/summary.md``.

    python bench/bench_folds.py                          # all configs, all folds (a day on 2 cores)
    python bench/bench_folds.py --fold 0                 # one fold of every config
    python bench/bench_folds.py --configs default,plm
    python bench/bench_folds.py --summary                # tables from what is done

The default output folder, bench/results/folds, is committed without the model weights (.gitignore):
metrics, predictions, configs and logs are enough to pool, compare and resume in a later session.

Concept labels: majority vote over three independent LLM annotation passes, NOT validated by experts.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np

# The recipe that was the default until the hold-out and the joint selection were measured (2026-11-25): Stage
# II refitted on a held-out fifth of the training part, the joint epoch chosen on dev T-F1. The screening runs
# made then are stated on top of it, so their configurations stay what they were.
# Every run of the sessions before 2026-11-25 (session 8) had 2 Stage I epochs, the default's then; the
# configurations pin it, so that they stay what they were when the default changes.
HELDOUT: dict[str, dict[str, Any]] = {"stage1": {"epochs": 2}, "joint": {"select": "t_f1"}, "stage2": {"holdout": 0.2}}


def _on(base: dict[str, dict[str, Any]], **sections: dict[str, Any]) -> dict[str, Any]:
    over = {k: dict(v) for k, v in base.items()}
    for sec, values in sections.items():
        over.setdefault(sec, {}).update(values)
    return {"variant": "reccbm", "preset": "default", "overrides": over}


def _on_heldout(**sections: dict[str, Any]) -> dict[str, Any]:
    return _on(HELDOUT, **sections)


def _on_default(**sections: dict[str, Any]) -> dict[str, Any]:
    """The default preset with 2 Stage I epochs (its Stage I until session 8), plus ``sections``."""
    return _on({"stage1": {"epochs": 2}}, **sections)


def _on_s1x3(**sections: dict[str, Any]) -> dict[str, Any]:
    """The default preset of session 8 (3 Stage I epochs), plus ``sections``."""
    return _on({"stage1": {"epochs": 3}}, **sections)


# name -> train_model keyword arguments (variant, preset, overrides)
CONFIGS: dict[str, dict[str, Any]] = {
    "default": {"variant": "reccbm", "preset": "default"},
    "plm": {"variant": "plm", "preset": "paper"},
    "vanilla": {"variant": "vanilla", "preset": "paper"},
    "paper": {"variant": "reccbm", "preset": "paper"},
    # levers one at a time on top of the paper's recipe (screening)
    "paper+level": {"variant": "reccbm", "preset": "paper", "overrides": {"model": {"head": "level"}}},
    # the previous default, measured on all five folds
    "heldout": _on_heldout(),
    # the screening runs behind the previous default (docs/results.md): the two-stage recipe with every other
    # lever, and the joint stage without random interventions
    "two-stage": _on_heldout(stage1={"epochs": 4}, joint={"epochs": 2, "lr": 2e-5, "intervention_p": 0.0},
                             stage2={"intervention_p": 0.0}),
    "joint4": _on_heldout(joint={"intervention_p": 0.0}, stage2={"intervention_p": 0.0}),
    # a default that keeps the concepts: L_con summed over concepts (as in the paper) in Stage I and the joint
    # stage, so the grade loss does not outweigh eight concepts during joint training
    "default+sum": _on_heldout(stage1={"concept_loss": "sum"}),
    # longer training within the main job's 15 minutes: dev T-Acc and C-Acc both still rose at the last joint
    # epoch, and vanilla's concepts (6 Stage I epochs) are more accurate
    "long": _on_heldout(stage1={"epochs": 4}, joint={"epochs": 6}),
    "joint8": _on_heldout(joint={"epochs": 8}),
    "long6": _on_heldout(stage1={"epochs": 6}, joint={"epochs": 4}),
    # the joint selection (T-F1 on ~230 dev answers, the start state competing, Stage I's patience 3) undid joint8
    # on fold 0; "last" keeps the final state of the fixed budget
    "last": _on_heldout(joint={"select": "last"}),
    "long-last": _on_heldout(stage1={"epochs": 4}, joint={"epochs": 6, "select": "last"}),
    "long6-last": _on_heldout(stage1={"epochs": 6}, joint={"epochs": 4, "select": "last"}),
    # no hold-out + "last" became the default (its fold 0 was screened as "nohold-last"); with more interventions:
    "nohold-last-int50": _on_default(joint={"intervention_p": 0.5}, stage2={"intervention_p": 0.5}),
    # the default from 2026-11-25 morning to session 8: 2 Stage I epochs
    "s1x2": _on_default(),
    # concept accuracy on top of s1x2 (its C-Acc is below vanilla's): the grade loss weighs a quarter in the joint
    # stage (jl25); a third Stage I epoch ("s1x3", screened under that name, is the default now: default/); both;
    # a fourth Stage I epoch (s1x4)
    "jl25": _on_default(joint={"lambda_t": 0.25}),
    "jl25-s1x3": _on_default(stage1={"epochs": 3}, joint={"lambda_t": 0.25}),
    "s1x4": _on_default(stage1={"epochs": 4}),
    # session 9, on the default of session 8 (3 Stage I epochs, pinned): Stage II (LCEC and the head) refitted on
    # cross-fitted outputs, every training answer's p̂ from one of two models that never trained on it
    "crossfit2": _on_s1x3(stage2={"crossfit": 2}),
    # the paper's components switched off one at a time in that default (RACE: one pooled vector for every
    # concept; OPCC: λ_r = 0; LCEC: the head reads p̂ directly)
    "no-race": _on_s1x3() | {"race": False},
    "no-opcc": _on_s1x3() | {"opcc": False},
    "no-lcec": _on_s1x3() | {"lcec": False},
}


def _log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def run(out: Path, configs: list[str], folds: int, only: list[int] | None, data_dir: str | None) -> None:
    from rubrictool.data import kfold_splits
    from rubrictool.pipeline import benchmark_table
    from rubrictool.tables import LLM_PASSES_NOTE
    from rubrictool.train import train_folds, train_model

    rb, table, agreement = benchmark_table("mohler", data_dir)
    splits = kfold_splits(table, k=folds, seed=0)
    for name in configs:
        kw = dict(CONFIGS[name])
        root = out / name
        if only is None:
            _log(f"{name}: {folds} folds")
            train_folds(rb, table, root, folds=folds, fold_seed=0, agreement=agreement, notes=[LLM_PASSES_NOTE],
                        progress=lambda ev, n=name: _log(f"{n}: {ev.info}"), **kw)
            continue
        for i in only:
            fold_dir = root / f"fold-{i}"
            if (fold_dir / "metrics.json").is_file():
                _log(f"{name} fold {i}: done")
                continue
            _log(f"{name} fold {i}: train")
            train_model(rb, table, splits[i], fold_dir, agreement=agreement, notes=[LLM_PASSES_NOTE], **kw)


def _fold_rows(out: Path) -> list[dict[str, Any]]:
    rows = []
    for cfg_dir in sorted(p for p in out.iterdir() if p.is_dir()):
        for fold in sorted(cfg_dir.glob("fold-*/metrics.json")):
            m = json.loads(fold.read_text())
            seed = m["seeds"][0]
            rows.append({"config": cfg_dir.name, "fold": fold.parent.name, **seed["test"],
                         "minutes": seed.get("train_seconds", 0.0) / 60,
                         "rho": m.get("spearman_sigma2_vs_1_minus_alpha"),
                         "attention": seed.get("attention")})
    return rows


def summary(out: Path) -> str:
    from rubrictool.evaluate import compare_runs

    lines = [f"# Mohler 5-fold comparison ({time.strftime('%Y-%m-%d')})", "",
             "Concept labels: majority vote over three independent LLM annotation passes, not expert-validated.", ""]
    cols = ("t_acc", "t_f1", "qwk", "pearson", "rmse", "adjacent", "c_acc", "c_f1", "oracle_t_acc")
    pooled = {p.parent.name: json.loads(p.read_text()) for p in sorted(out.glob("*/folds.json"))}
    if pooled:
        lines += ["## Pooled over folds", "", "| model | " + " | ".join(cols) + " |", "|---" * (len(cols) + 1) + "|"]
        for name, s in pooled.items():
            lines.append(f"| {name} | " + " | ".join(f"{s['pooled'].get(c, float('nan')):.3f}" for c in cols) + " |")
        first = next(iter(pooled.values()))
        for b, m in first["baselines"].items():
            lines.append(f"| {b} baseline | " + " | ".join(f"{m.get(c, float('nan')):.3f}" for c in cols) + " |")
        lines.append("")
        for ref in ("plm", "vanilla"):
            if ref not in pooled:
                continue
            for name in pooled:
                if name == ref:
                    continue
                c = compare_runs(out / ref, out / name)
                cells = ", ".join(f"{m} {r['diff']:+.3f} [{r['lo']:+.3f}, {r['hi']:+.3f}]" for m, r in c["metrics"].items())
                lines.append(f"- {name} − {ref} (paired bootstrap, {c['n_items']} items): {cells}")
        lines.append("")
    rows = _fold_rows(out)
    if rows:
        lines += ["## Per fold", "", "| config | fold | " + " | ".join(cols) + " | ρ(σ², 1−α) | entropy ratio | minutes |",
                  "|---" * (len(cols) + 5) + "|"]
        for r in rows:
            ent = f"{np.mean(r['attention']['entropy_ratio']):.3f}" if r.get("attention") else "—"
            rho = f"{r['rho']:.3f}" if r.get("rho") is not None else "—"
            lines.append(f"| {r['config']} | {r['fold']} | " + " | ".join(
                f"{r.get(c, float('nan')):.3f}" for c in cols) + f" | {rho} | {ent} | {r['minutes']:.1f} |")
    text = "\n".join(lines) + "\n"
    (out / "summary.md").write_text(text)
    return text


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=Path("bench/results/folds"))
    ap.add_argument("--configs", default="default,plm,vanilla,paper", help=f"comma list of {', '.join(CONFIGS)}")
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--fold", default=None, help="comma list of fold numbers to run (default: all, then pool)")
    ap.add_argument("--data-dir", default=os.environ.get("RUBRICTOOL_DATA", "../shared/datasets"))
    ap.add_argument("--summary", action="store_true", help="only print the tables of what is done")
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    if not a.summary:
        names = [c for c in a.configs.split(",") if c]
        unknown = [c for c in names if c not in CONFIGS]
        if unknown:
            sys.exit(f"unknown config(s) {unknown}; known: {', '.join(CONFIGS)}")
        only = [int(x) for x in a.fold.split(",")] if a.fold else None
        run(a.out, names, a.folds, only, a.data_dir)
    print(summary(a.out))


if __name__ == "__main__":
    main()
