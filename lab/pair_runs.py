"""Two runs trained on the same split, compared on its test answers: paired bootstrap 95 % CIs of B − A for T-Acc,
T-F1, QWK and C-Acc, the failing answers (below the rubric's pass mark) each gives a pass mark, and each run's mean
error on the honest answers that say "not", "no", "never" or "n't" (a reader that took the word for the claim marks
them down).

    python lab/pair_runs.py RUN_A RUN_B [--data-dir DIR]

Used for a candidate trained on one fold (e.g. lab/perturbed_copies.py's table) against the default on that fold.
Concept labels (Mohler): majority vote over three independent LLM annotation passes, NOT validated by experts.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import numpy as np

from rubrictool.adjudicate import adjudicate_benchmark_labels
from rubrictool.evaluate import low_marks, paired_bootstrap
from rubrictool.io import read_table
from rubrictool.rubric import load_rubric

NEGATION = re.compile(r"\b(not|no|never)\b|n't\b", re.IGNORECASE)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("run_a", type=Path)
    ap.add_argument("run_b", type=Path)
    ap.add_argument("--data-dir", default="../shared/datasets")
    args = ap.parse_args()
    rubric = load_rubric("mohler")
    table = adjudicate_benchmark_labels("mohler", data_dir=args.data_dir).set_index("id")
    preds = [read_table(r / "test_predictions.csv").astype({"id": str}).set_index("id")
             for r in (args.run_a, args.run_b)]
    ids = [i for i in preds[0].index if i in preds[1].index]
    y = table.loc[ids, "grade"].to_numpy(int)
    a, b = (p.loc[ids, "grade"].to_numpy(int) for p in preds)
    out: dict[str, object] = {"answers": len(ids), "run_a": str(args.run_a), "run_b": str(args.run_b)}
    for metric in ("t_acc", "t_f1", "qwk"):
        out[metric] = paired_bootstrap(y, a, b, metric=metric)
    levels = table.loc[ids, list(rubric.keys)].to_numpy(int)
    hits = [(p.loc[ids, [f"{k}_level" for k in rubric.keys]].to_numpy(int) == levels).mean(1) for p in preds]
    diff = hits[1] - hits[0]
    rng = np.random.default_rng(0)
    boots = [diff[rng.integers(0, len(diff), len(diff))].mean() for _ in range(2000)]
    out["c_acc"] = {"a": float(hits[0].mean()), "b": float(hits[1].mean()), "diff": float(diff.mean()),
                    "lo": float(np.percentile(boots, 2.5)), "hi": float(np.percentile(boots, 97.5))}
    grades = list(range(rubric.grade.min, rubric.grade.max + 1))
    for name, p in (("low_marks_a", a), ("low_marks_b", b)):
        lm = low_marks(y, p, grades, rubric.pass_mark)
        out[name] = {"failing": lm["failing"]}
    negated = np.array([bool(NEGATION.search(str(t))) for t in table.loc[ids, "response"]])
    out["negation_words"] = {"n": int(negated.sum()),
                             **{f"mean_error_{k}": float((g[negated] - y[negated]).mean()) if negated.any() else None
                                for k, g in (("a", a), ("b", b))}}
    print(json.dumps(out, indent=1, default=float))


if __name__ == "__main__":
    main()
