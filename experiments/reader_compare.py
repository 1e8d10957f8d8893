"""A concept-reader candidate against a kept run (by default the `plain` preset's grouped folds), paired, on the items
both tested: T-Acc, T-F1, QWK, C-Acc and the QWK of the grades with every concept corrected by an expert (oracle), with
paired bootstrap 95 % CIs (B − A), and the candidate's T-Acc against the majority class (always the commonest training
grade, the kept run's ``majority`` column).

Works on a finished k-fold run (``pooled_predictions.csv``), on one still running (the finished folds'
``fold-*/test_predictions.csv`` are pooled) and on one run (its ``test_predictions.csv``, e.g. the main job in two
precisions); the gold grades and levels are the kept run's (the same table).

    .venv/bin/python experiments/reader_compare.py /work/benchruns/reader-qf/reader-frozen-align-soft
    .venv/bin/python experiments/reader_compare.py RUN --against benchmarks/results/folds/plain --json out.json
    .venv/bin/python experiments/reader_compare.py RUN_B --against RUN_A --truth benchmarks/results/folds-by-question/plain
    .venv/bin/python experiments/reader_compare.py BF16/main --against FP32/main --truth benchmarks/results/folds/plain

Concept labels: majority vote over three LLM annotation passes, NOT validated by experts.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from numpy.typing import NDArray

KEYS = ("FC", "CC", "TU", "CP", "R", "DU", "EE", "FR")


def pooled(run: Path) -> pd.DataFrame:
    """The run's test predictions: its pooled file, or its finished folds' files with a ``fold`` column."""
    if (run / "pooled_predictions.csv").is_file():
        return pd.read_csv(run / "pooled_predictions.csv", dtype={"id": str})
    if (run / "test_predictions.csv").is_file():  # one run (no folds): its test answers, as fold 0
        return pd.read_csv(run / "test_predictions.csv", dtype={"id": str}).assign(fold=0)
    parts = []
    for f in sorted(run.glob("fold-*/test_predictions.csv")):
        df = pd.read_csv(f, dtype={"id": str})
        df["fold"] = int(f.parent.name.split("-")[1])
        parts.append(df)
    if not parts:
        raise SystemExit(f"{run}: no finished fold (fold-*/test_predictions.csv)")
    return pd.concat(parts, ignore_index=True)


def _metrics(t: NDArray[Any], g: NDArray[Any], lv: NDArray[Any], lt: NDArray[Any], o: NDArray[Any]) -> dict[str, float]:
    """Grade and concept metrics; ``o``: the grades with every concept set to its adjudicated level (an expert's full
    correction: ``grade_oracle``)."""
    from sklearn.metrics import cohen_kappa_score, f1_score

    return {"t_acc": float((t == g).mean()), "t_f1": float(f1_score(t, g, average="macro")),
            "qwk": float(cohen_kappa_score(t, g, weights="quadratic")), "c_acc": float((lv == lt).mean()),
            "oracle_qwk": float(cohen_kappa_score(t, o, weights="quadratic"))}


TRUTH = ["grade_true", "majority", *(f"{k}_true" for k in KEYS)]


def compare(cand: pd.DataFrame, ref: pd.DataFrame, truth: pd.DataFrame, n_boot: int = 2000, seed: int = 0
            ) -> dict[str, Any]:
    """B = ``cand`` against A = ``ref`` on the answers both tested; gold grades, levels and the majority class from
    ``truth`` (a pooled file of the same table, e.g. the kept default's)."""
    cand, ref = (df.drop(columns=[c for c in [*TRUTH, "oracle_concepts"] if c in df.columns]) for df in (cand, ref))
    both = truth[["id", *TRUTH]].merge(ref.merge(cand, on="id", suffixes=("_a", "_b")), on="id")
    t = both["grade_true"].to_numpy()
    ga, gb, maj = both["grade_a"].to_numpy(), both["grade_b"].to_numpy(), both["majority"].to_numpy()
    lt = both[[f"{k}_true" for k in KEYS]].to_numpy()
    la = both[[f"{k}_level_a" for k in KEYS]].to_numpy()
    lb = both[[f"{k}_level_b" for k in KEYS]].to_numpy()
    oa, ob = both["grade_oracle_a"].to_numpy(), both["grade_oracle_b"].to_numpy()
    a, b = _metrics(t, ga, la, lt, oa), _metrics(t, gb, lb, lt, ob)
    rng = np.random.default_rng(seed)
    diffs: dict[str, list[float]] = {m: [] for m in [*a, "t_acc_vs_majority"]}
    for _ in range(n_boot):
        i = rng.integers(0, len(t), len(t))
        ma, mb = _metrics(t[i], ga[i], la[i], lt[i], oa[i]), _metrics(t[i], gb[i], lb[i], lt[i], ob[i])
        for m in a:
            diffs[m].append(mb[m] - ma[m])
        diffs["t_acc_vs_majority"].append(mb["t_acc"] - float((t[i] == maj[i]).mean()))
    point = {m: b[m] - a[m] for m in a} | {"t_acc_vs_majority": b["t_acc"] - float((t == maj).mean())}
    rows = {m: {"diff": point[m], "lo": float(np.percentile(d, 2.5)), "hi": float(np.percentile(d, 97.5))}
            for m, d in diffs.items()}
    per_concept = {k: {"a": float((la[:, j] == lt[:, j]).mean()), "b": float((lb[:, j] == lt[:, j]).mean())}
                   for j, k in enumerate(KEYS)}
    return {"n_items": len(both), "folds": sorted(int(f) for f in both["fold_b"].unique()), "a": a, "b": b,
            "majority_t_acc": float((t == maj).mean()), "paired": rows, "per_concept": per_concept}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run", type=Path, help="the candidate's k-fold folder (finished or not)")
    ap.add_argument("--against", type=Path, default=Path("benchmarks/results/folds-by-question/plain"))
    ap.add_argument("--truth", type=Path, default=None,
                    help="a finished run of the same table whose gold columns to use (default: --against)")
    ap.add_argument("--json", type=Path, default=None)
    a = ap.parse_args()
    ref = pooled(a.against)
    out = compare(pooled(a.run), ref, pooled(a.truth) if a.truth else ref)
    out |= {"run": str(a.run), "against": str(a.against)}
    print(f"{a.run} (B) − {a.against} (A): {out['n_items']} items, folds {out['folds']}")
    print("A " + ", ".join(f"{m} {v:.3f}" for m, v in out["a"].items()))
    print("B " + ", ".join(f"{m} {v:.3f}" for m, v in out["b"].items()) + f"; majority T-Acc {out['majority_t_acc']:.3f}")
    for m, r in out["paired"].items():
        print(f"  {m}: {r['diff']:+.3f} [{r['lo']:+.3f}, {r['hi']:+.3f}]")
    print("per concept (A → B): " + ", ".join(f"{k} {v['a']:.3f}→{v['b']:.3f}" for k, v in out["per_concept"].items()))
    if a.json:
        a.json.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
