"""A learning curve whose "all" cell is one fold of a kept k-fold benchmark: the 90 % point without retraining it.

`rubrictool learning-curve --all-from VARIANT=FOLDER` reads the "all" cell from a k-fold run's folders; a benchmark
kept in the tree (`benchmarks/results/folds*/NAME/`: folds.json and pooled_predictions.csv) holds that fold's
metrics but not its run folder. This reads the curve's cells (one or more `learning-curve --out` folders of the same
fold and variant), adds the "all" cell from the kept benchmark's fold, and writes the combined curve (curve.csv,
curve.json with the 90 % point, curve.png) to --out:

    python lab/curve_reach.py CURVE_DIR [CURVE_DIR ...] --all-from benchmarks/results/folds-by-question/default \\
        --out benchmarks/results/curves/NAME

The "all" cell is the kept benchmark's own fold (its grades, its majority class): it must have been trained with the
curve's configuration on the same fold split (the same --folds, fold seed and --by), which this checks as far as the
kept files allow (fold count, grouping, and that the fold's test answers number what the curve's cells were tested
on). Concept labels of the Mohler benchmarks: majority vote over three LLM annotation passes, NOT validated by experts.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import pandas as pd


def all_cell(kept: Path, fold: int, variant: str, like: pd.Series) -> dict[str, Any]:
    """The "all" row of the curve for ``fold``, from a kept k-fold benchmark (folds.json, pooled_predictions.csv):
    the fold's metrics, its training answers (every answer not in its test part) and the majority class's share of
    its test answers (the grade most frequent in the other folds)."""
    meta = json.loads((kept / "folds.json").read_text())
    pooled = pd.read_csv(kept / "pooled_predictions.csv", dtype={"id": str})
    test, rest = pooled[pooled["fold"] == fold], pooled[pooled["fold"] != fold]
    per_fold = meta["per_fold"][fold]
    majority = rest["grade_true"].value_counts().idxmax()
    return {**like.to_dict(), "size": "all", "repeat": 0, "variant": variant,
            "n_train": int(meta["n_items"]) - len(test),
            "n_dev": pd.NA, "t_acc": per_fold["t_acc"], "qwk": per_fold["qwk"], "t_f1": per_fold["t_f1"],
            "majority_t_acc": float((test["grade_true"] == majority).mean()), "train_seconds": pd.NA,
            "source": f"{kept} fold {fold}"}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("curves", nargs="+", type=Path, help="learning-curve --out folders (their curve.csv)")
    ap.add_argument("--all-from", type=Path, required=True, help="a kept k-fold benchmark folder (folds.json)")
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args(argv)

    from rubrictool.curve.figure import plot_curve
    from rubrictool.curve.reading import read_curve
    from rubrictool.provenance import git_revision

    frames, settings, revisions = [], [], []
    for d in a.curves:
        if not (d / "curve.csv").is_file():
            print(f"error: {d}: no curve.csv; give a `rubrictool learning-curve --out` folder", file=sys.stderr)
            return 2
        frames.append(pd.read_csv(d / "curve.csv", dtype={"size": str}))
        made = json.loads((d / "curve.json").read_text())
        settings.append(made.get("settings", {}))
        revisions.append(made.get("git_revision"))
    cells = pd.concat(frames, ignore_index=True)
    if "all" in set(cells["size"]):
        print("error: the curves already hold an 'all' cell; drop --all-from", file=sys.stderr)
        return 2
    folds, variants = sorted(set(cells["fold"])), sorted(set(cells["variant"]))
    if len(folds) != 1 or len(variants) != 1:
        print(f"error: one fold and one variant at a time (the cells have folds {folds}, variants {variants})",
              file=sys.stderr)
        return 2
    meta = json.loads((a.all_from / "folds.json").read_text())
    for s in settings:
        if s and (s.get("folds"), s.get("by"), s.get("fold_seed")) != (meta["folds"], meta["by"], meta["fold_seed"]):
            print(f"error: {a.all_from}: {meta['folds']} folds by {meta['by']} with fold seed {meta['fold_seed']}, the "
                  f"curve {s.get('folds')} by {s.get('by')} with fold seed {s.get('fold_seed')}", file=sys.stderr)
            return 2
    row = all_cell(a.all_from, int(folds[0]), variants[0], cells.iloc[-1])
    if abs(float(row["majority_t_acc"]) - float(cells["majority_t_acc"].iloc[0])) > 1e-9:
        print(f"error: {a.all_from}: fold {folds[0]}'s test answers are not the curve's (the majority class's share "
              f"{row['majority_t_acc']:.4f} against {cells['majority_t_acc'].iloc[0]:.4f}); give the benchmark of the "
              "curve's folds", file=sys.stderr)
        return 2
    from rubrictool.errors import RubrictoolError
    from rubrictool.outputs import check_output

    try:  # the one --out rule: never an input, never files this script did not write
        check_output(a.out, [*a.curves, a.all_from], "folder", writes=("curve.csv", "curve.json", "curve.png"),
                     own=lambda f: f.name == "curve.json" and "all_from" in f.read_text())
    except RubrictoolError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    cells = pd.concat([cells, pd.DataFrame([row])], ignore_index=True)
    reading = read_curve(cells)[variants[0]]
    a.out.mkdir(parents=True, exist_ok=True)
    cells.to_csv(a.out / "curve.csv", index=False)
    (a.out / "curve.json").write_text(json.dumps({
        "curves": [str(d) for d in a.curves], "all_from": f"{a.all_from} fold {folds[0]}", "reading": reading,
        "cells_git_revisions": revisions, "git_revision": git_revision(),
        "notes": ["Concept labels: three LLM annotation passes' majority, NOT expert-validated."]}, indent=2,
        default=str) + "\n")
    plot_curve(cells, a.out / "curve.png", reach={variants[0]: reading["reach"]},
               title=f"{variants[0]}, fold {folds[0]} ({meta['by'] or 'random'} folds)")
    print(json.dumps(reading, indent=2, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
