"""What the concepts allow, on the 5 folds of benchmarks/folds.py: the ceiling a bottleneck grader can reach.

1. ``gold``: grade heads fitted on the *gold* (adjudicated) concept levels of each fold's training part,
   tested on its test part and pooled over the folds — a logistic regression on one-hot levels (the level
   head's form; L2 strength C from 0.1 to 10) and two non-linear heads (random forest, gradient boosting) that
   may read any combination of levels. T-Acc, T-F1 (with the F1 of every grade), QWK. A grader whose grade
   goes through these eight concepts can at best do what its head does on the gold levels. The pooled test
   predictions of the PLM, the default and vanilla CBM (benchmarks/folds.py) are scored beside them.
2. ``decode CONFIG``: the decision rule on a finished configuration's grade distributions (needs the fold
   weights, ``model.safetensors``, which are not committed): argmax (what ``grade`` reports), the rounded
   expected grade, the median grade, and thresholds on the expected grade tuned on each fold's dev part for
   QWK. It shows how far QWK can be bought with T-Acc without retraining.

    .venv/bin/python lab/ceiling.py gold
    .venv/bin/python lab/ceiling.py decode default

Concept labels: majority vote over three independent LLM annotation passes, NOT validated by experts.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np
import pandas as pd
from sklearn.ensemble import HistGradientBoostingClassifier, RandomForestClassifier
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import cohen_kappa_score, f1_score

ROOT = Path(__file__).resolve().parents[1]
FOLDS = ROOT / "benchmarks" / "results" / "folds"  # the pooled predictions kept in the tree (--folds: another folder)
RESULTS = ROOT / "lab" / "results"
REFERENCE = ("plm", "default", "vanilla")


def _scores(y: np.ndarray, p: np.ndarray) -> dict[str, Any]:
    """The project's grade metrics (T-Acc, T-F1, QWK, RMSE) and the F1 of every grade."""
    from reccbm import grade_metrics

    m = grade_metrics(y, p)
    return {k: m[k] for k in ("t_acc", "t_f1", "qwk", "rmse")} | {
        "f1_per_grade": [round(float(v), 3) for v in f1_score(y, p, average=None, labels=sorted(set(y)))]}


def gold(data_dir: str | None) -> dict[str, Any]:
    from rubrictool.data import kfold_splits
    from rubrictool.pipeline import benchmark_table

    rb, table, _ = benchmark_table("mohler", data_dir)
    keys = [c.key for c in rb.concepts]
    levels = table[keys].to_numpy(dtype=np.int64) - 1
    onehot = np.concatenate([np.eye(levels.max() + 1)[levels[:, j]] for j in range(len(keys))], axis=1)
    y = table["grade"].to_numpy(dtype=np.int64)
    pos = {i: n for n, i in enumerate(table["id"].astype(str))}
    splits = kfold_splits(table, k=5, seed=0)
    heads: dict[str, tuple[Any, np.ndarray]] = {
        **{f"logistic C={C}": (lambda C=C: LogisticRegression(C=C, max_iter=3000), onehot) for C in (0.1, 1.0, 10.0)},
        "random forest": (lambda: RandomForestClassifier(500, min_samples_leaf=3, random_state=0), levels),
        "gradient boosting": (lambda: HistGradientBoostingClassifier(max_iter=200, learning_rate=0.05, random_state=0),
                              levels),
    }
    out: dict[str, Any] = {}
    for name, (make, X) in heads.items():
        pred = np.zeros_like(y)
        for s in splits:
            tr = [pos[i] for i in s["train"]]
            te = [pos[i] for i in s["test"]]
            pred[te] = make().fit(X[tr], y[tr]).predict(X[te])
        out[name] = _scores(y, pred)
    # for reference: the pooled test predictions of the finished configurations (committed)
    for cfg in REFERENCE:
        path = FOLDS / cfg / "pooled_predictions.csv"
        if path.is_file():
            pooled = pd.read_csv(path)
            out[f"{cfg}: its pooled test predictions"] = _scores(pooled["grade_true"].to_numpy(),
                                                                 pooled["grade"].to_numpy())
    return out


def _qwk_thresholds(e: np.ndarray, y: np.ndarray, n_grades: int) -> np.ndarray:
    """Cut points on the expected grade that maximise QWK (coordinate search from the midpoints)."""
    th = np.arange(0.5, n_grades - 1, 1.0)
    for _ in range(3):
        for j in range(len(th)):
            best = (-2.0, th[j])
            for t in np.linspace(th[j] - 0.6, th[j] + 0.6, 25):
                cand = np.sort(np.r_[th[:j], t, th[j + 1:]])
                q = cohen_kappa_score(y, np.digitize(e, cand), weights="quadratic")
                if q > best[0]:
                    best = (q, t)
            th[j] = best[1]
            th = np.sort(th)
    return th


def _grade_probs(grader: Any, df: Any) -> tuple[np.ndarray, np.ndarray]:
    """(grade probabilities, gold grades) of a loaded run (a reccbm.Grader) on the rows of an AdjudicatedTable."""
    probs = grader.predict_proba(df)
    return probs, df["grade"].to_numpy(dtype=np.int64)


def decode(config: str, data_dir: str | None) -> dict[str, Any]:
    from rubrictool.grade import load_grader
    from rubrictool.pipeline import benchmark_table

    _, table, _ = benchmark_table("mohler", data_dir)
    pos = {i: n for n, i in enumerate(table["id"].astype(str))}
    ys: list[np.ndarray] = []
    preds: dict[str, list[np.ndarray]] = {}
    for k in range(5):
        run = FOLDS / config / f"fold-{k}"
        if not (run / "model.safetensors").is_file():
            sys.exit(f"{run}: no model.safetensors (weights are not committed; train the folds here first)")
        grader = load_grader(run)
        split = json.loads((run / "split.json").read_text())
        p_dev, y_dev = _grade_probs(grader, table.iloc[[pos[i] for i in split["dev"]]])
        p_test, y_test = _grade_probs(grader, table.iloc[[pos[i] for i in split["test"]]])
        g = np.arange(p_test.shape[1])
        e = p_test @ g
        th = _qwk_thresholds(p_dev @ g, y_dev, p_test.shape[1])
        rules = {"argmax": p_test.argmax(1), "rounded expected grade": np.clip(np.rint(e), 0, g[-1]).astype(np.int64),
                 "median grade": (np.cumsum(p_test, 1) < 0.5).sum(1),
                 "expected grade, dev-QWK cut points": np.digitize(e, th)}
        for name, p in rules.items():
            preds.setdefault(name, []).append(p)
        ys.append(y_test)
        print(f"{config} fold {k} done", file=sys.stderr, flush=True)
    y = np.concatenate(ys)
    return {name: _scores(y, np.concatenate(p)) for name, p in preds.items()}


def _table(title: str, res: dict[str, Any]) -> str:
    lines = [f"| {title} | T-Acc | T-F1 | QWK | RMSE | F1 per grade |", "|---|---|---|---|---|---|"]
    for name, m in res.items():
        lines.append(f"| {name} | {m['t_acc']:.3f} | {m['t_f1']:.3f} | {m['qwk']:.3f} | {m['rmse']:.3f} | "
                     f"{' / '.join(f'{v:.2f}' for v in m['f1_per_grade'])} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=("gold", "decode"))
    ap.add_argument("config", nargs="?", default="default", help="decode: a finished benchmarks/folds.py configuration")
    ap.add_argument("--data-dir", default=os.environ.get("RUBRICTOOL_DATA", "../shared/datasets"))
    ap.add_argument("--folds", type=Path, default=ROOT / "benchmarks" / "results" / "folds",
                    help="finished benchmarks/folds.py runs (decode needs their weights: benchmarks/out/folds)")
    a = ap.parse_args()
    globals()["FOLDS"] = a.folds
    if a.what == "gold":
        res, title, name = gold(a.data_dir), "head on the gold concept levels (5 folds pooled)", "ceiling_gold.json"
    else:
        res, title, name = decode(a.config,
            a.data_dir), f"{a.config}: decision rule (5 folds pooled)", f"ceiling_decode_{a.config}.json"
    RESULTS.mkdir(parents=True, exist_ok=True)
    tmp = RESULTS / (name + ".tmp")
    tmp.write_text(json.dumps(res, indent=1))
    tmp.replace(RESULTS / name)
    print(_table(title, res))


if __name__ == "__main__":
    main()
