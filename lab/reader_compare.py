"""A concept-reader candidate against a kept run (by default the `plain` preset's grouped folds), paired, on the items
both tested: T-Acc, T-F1, QWK, C-Acc and the QWK of the grades with every concept corrected by an expert (oracle), with
paired bootstrap 95 % CIs (B − A), and the candidate's T-Acc against the majority class (always the commonest training
grade, the kept run's ``majority`` column).

Works on a finished k-fold run (``pooled_predictions.csv``), on one still running (the finished folds'
``fold-*/test_predictions.csv`` are pooled) and on one run (its ``test_predictions.csv``, e.g. the main job in two
precisions); the gold grades and levels are the kept run's (the same table).

A second training of one recipe moves the pooled figures on new questions by about as much as many levers do
(lab/history/concept-reader-levers.md, "A second training of the default"); the CIs here hold each model fixed. With
``--against`` given more than once, A is those trainings together: each metric is their mean on the same answers (and
on each bootstrap resample), so that a candidate is read against the recipe rather than against one of its seeds.

    .venv/bin/python lab/reader_compare.py /work/benchruns/reader-qf/reader-frozen-align-soft
    .venv/bin/python lab/reader_compare.py RUN --against benchmarks/results/folds/plain --json out.json
    .venv/bin/python lab/reader_compare.py RUN_B --against RUN_A --truth benchmarks/results/folds-by-question/plain
    .venv/bin/python lab/reader_compare.py BF16/main --against FP32/main --truth benchmarks/results/folds/plain
    .venv/bin/python lab/reader_compare.py RUN --against benchmarks/results/folds-by-question/default \
        --against benchmarks/results/folds-by-question/default-train-seed1 --truth
        benchmarks/results/folds-by-question/plain

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


def compare(cand: pd.DataFrame, ref: pd.DataFrame | list[pd.DataFrame], truth: pd.DataFrame, n_boot: int = 2000,
            seed: int = 0) -> dict[str, Any]:
    """B = ``cand`` against A = ``ref`` on the answers both tested; gold grades, levels and the majority class from
    ``truth`` (a pooled file of the same table, e.g. the kept default's). ``ref`` a list: several trainings of A's
    recipe, on the answers all of them tested; A's metrics are their mean (on the whole and on each resample)."""
    refs = ref if isinstance(ref, list) else [ref]
    if not refs:
        raise ValueError("no run to compare against")
    drop = [*TRUTH, "oracle_concepts"]
    cols = ["id", "grade", "grade_oracle", *(f"{k}_level" for k in KEYS)]
    both = truth[["id", *TRUTH]].merge(cand.drop(columns=[c for c in drop if c in cand.columns]), on="id")
    for j, r in enumerate(refs):
        both = both.merge(r[cols].rename(columns={c: f"{c}_a{j}" for c in cols[1:]}), on="id")
    if both.empty:
        raise ValueError("the runs share no answer")
    t = both["grade_true"].to_numpy()
    gb, maj, ob = both["grade"].to_numpy(), both["majority"].to_numpy(), both["grade_oracle"].to_numpy()
    lt = both[[f"{k}_true" for k in KEYS]].to_numpy()
    lb = both[[f"{k}_level" for k in KEYS]].to_numpy()
    A = [(both[f"grade_a{j}"].to_numpy(), both[[f"{k}_level_a{j}" for k in KEYS]].to_numpy(),
          both[f"grade_oracle_a{j}"].to_numpy()) for j in range(len(refs))]

    def mean_a(i: NDArray[Any] | slice) -> dict[str, float]:
        ms = [_metrics(t[i], g[i], lv[i], lt[i], o[i]) for g, lv, o in A]
        return {m: float(np.mean([x[m] for x in ms])) for m in ms[0]}

    a, b = mean_a(slice(None)), _metrics(t, gb, lb, lt, ob)
    rng = np.random.default_rng(seed)
    diffs: dict[str, list[float]] = {m: [] for m in [*a, "t_acc_vs_majority"]}
    for _ in range(n_boot):
        i = rng.integers(0, len(t), len(t))
        ma, mb = mean_a(i), _metrics(t[i], gb[i], lb[i], lt[i], ob[i])
        for m in a:
            diffs[m].append(mb[m] - ma[m])
        diffs["t_acc_vs_majority"].append(mb["t_acc"] - float((t[i] == maj[i]).mean()))
    point = {m: b[m] - a[m] for m in a} | {"t_acc_vs_majority": b["t_acc"] - float((t == maj).mean())}
    rows = {m: {"diff": point[m], "lo": float(np.percentile(d, 2.5)), "hi": float(np.percentile(d, 97.5))}
            for m, d in diffs.items()}
    per_concept = {k: {"a": float(np.mean([(lv[:, j] == lt[:, j]).mean() for _, lv, _ in A])),
                       "b": float((lb[:, j] == lt[:, j]).mean())} for j, k in enumerate(KEYS)}
    return {"n_items": len(both), "folds": sorted(int(f) for f in both["fold"].unique()), "a": a, "b": b,
            "trainings_in_a": len(refs), "majority_t_acc": float((t == maj).mean()), "paired": rows,
            "per_concept": per_concept}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run", type=Path, help="the candidate's k-fold folder (finished or not)")
    ap.add_argument("--against", type=Path, action="append", default=None,
                    help="the run to compare with (default: benchmarks/results/folds-by-question/plain); given more "
                         "than once, several trainings of one recipe read together (their mean)")
    ap.add_argument("--truth", type=Path, default=None,
                    help="a finished run of the same table whose gold columns to use (default: the first --against)")
    ap.add_argument("--boots", type=int, default=2000, help="bootstrap resamples for the CIs")
    ap.add_argument("--json", type=Path, default=None)
    a = ap.parse_args(argv)
    if a.boots < 1:
        raise SystemExit(f"--boots {a.boots}: give 1 or more resamples (2000 is the default)")
    against = a.against or [Path("benchmarks/results/folds-by-question/plain")]
    refs = [pooled(p) for p in against]
    try:
        out = compare(pooled(a.run), refs, pooled(a.truth) if a.truth else refs[0], n_boot=a.boots)
    except (KeyError, ValueError) as exc:
        raise SystemExit(f"{a.run} against {', '.join(map(str, against))}: {exc}; give runs of one table") from None
    named = str(against[0]) if len(against) == 1 else " + ".join(map(str, against))
    out |= {"run": str(a.run), "against": str(against[0]) if len(against) == 1 else [str(p) for p in against]}
    print(f"{a.run} (B) − {named} (A{', their mean' if len(against) > 1 else ''}): {out['n_items']} items, "
          f"folds {out['folds']}")
    print("A " + ", ".join(f"{m} {v:.3f}" for m, v in out["a"].items()))
    print("B " + ", ".join(f"{m} {v:.3f}" for m, v in out["b"].items())
          + f"; majority T-Acc {out['majority_t_acc']:.3f}")
    for m, r in out["paired"].items():
        print(f"  {m}: {r['diff']:+.3f} [{r['lo']:+.3f}, {r['hi']:+.3f}]")
    print("per concept (A → B): " + ", ".join(f"{k} {v['a']:.3f}→{v['b']:.3f}" for k, v in out["per_concept"].items()))
    if a.json:
        a.json.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
