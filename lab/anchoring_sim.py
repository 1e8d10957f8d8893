"""What anchoring does to α: a SIMULATION on the three Mohler LLM concept passes A, B and C.

Not a measurement of human reviewers. The passes are three independent LLM annotation passes (not
expert-validated). Pass A plays the model whose levels an anchored review shows pre-selected; passes B
and C play two reviewers' own (blind) judgements. An anchored reviewer submits the shown level instead
of their own with probability p, independently for every (answer, concept) label (p = 0 is blind
review). For each p (20 seeds each) the script reports, per concept and averaged over concepts:

- ``alpha_reviewers``: ordinal Krippendorff α between the two reviewers (what `review status` and
  `adjudicate` report as inter-rater agreement);
- ``alpha_model``: ordinal α between the model (A) and the reviewers' labels pooled as two more
  raters — mean of α(A, B') and α(A, C'), what an LLM-vs-reviewer agreement figure reports;
- ``copied``: the share of reviewer labels that were copies of the model's level (kept only because it
  was shown; a copy can equal the reviewer's own level anyway).

Run: RUBRICTOOL_DATA=/work/shared/datasets python lab/anchoring_sim.py [--seeds 20] [--out FILE.csv]
"""

from __future__ import annotations

import argparse
import sys

import numpy as np
import numpy.typing as npt
import pandas as pd

from rubrictool.agreement import krippendorff_alpha
from rubrictool.data import load_concept_passes
from rubrictool.rubric import load_rubric

P_COPY = (0.0, 0.1, 0.25, 0.5, 0.75)


def alpha2(x: npt.NDArray[np.int64], y: npt.NDArray[np.int64], domain: list[int]) -> float:
    """Ordinal α of two raters who labelled every item: x, y are (N,) levels."""
    counts = np.zeros((len(x), len(domain)), dtype=np.int64)  # (N, V)
    for v in (x, y):
        counts[np.arange(len(v)), np.searchsorted(domain, v)] += 1
    return krippendorff_alpha(counts, domain, "ordinal")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--out", default=None, help="write the per-concept table (CSV) here")
    args = ap.parse_args(argv)
    rubric = load_rubric("mohler")
    domain = rubric.scale.values
    passes = load_concept_passes()
    wide = passes.pivot_table(index=["item", "concept"], columns="reviewer", values="level", aggfunc="first").dropna()
    rows = []
    for concept in rubric.keys:
        w = wide.xs(concept, level="concept")
        a, b, c = (w[r].to_numpy(dtype=np.int64) for r in ("A", "B", "C"))  # (N,) each
        for p in P_COPY:
            for seed in range(args.seeds if p > 0 else 1):
                rng = np.random.default_rng(seed)
                copy_b, copy_c = rng.random(len(a)) < p, rng.random(len(a)) < p  # (N,) each
                b2, c2 = np.where(copy_b, a, b), np.where(copy_c, a, c)
                rows.append({"concept": concept, "p_copy": p, "seed": seed, "n_items": len(a),
                             "alpha_reviewers": alpha2(b2, c2, domain),
                             "alpha_model": (alpha2(a, b2, domain) + alpha2(a, c2, domain)) / 2,
                             "copied": float((copy_b.mean() + copy_c.mean()) / 2)})
    df = pd.DataFrame(rows)
    per = df.groupby(["concept", "p_copy"], sort=False)[["alpha_reviewers", "alpha_model",
                                                         "copied"]].mean().reset_index()
    if args.out:
        per.to_csv(args.out, index=False)
    print(f"SIMULATION on Mohler LLM passes (A = the shown model, B and C = two reviewers); {args.seeds} seeds per p; "
          f"{int(df['n_items'].iloc[0])} answers per concept")
    table = per.pivot(index="concept", columns="p_copy", values="alpha_reviewers").loc[rubric.keys]
    table.loc["mean"] = table.mean()
    print("\nα between the two reviewers, by p (share of labels copied from the shown model):")
    print(table.round(3).to_string())
    model = per.pivot(index="concept", columns="p_copy", values="alpha_model").loc[rubric.keys]
    model.loc["mean"] = model.mean()
    print("\nα between the model (A) and a reviewer, by p:")
    print(model.round(3).to_string())
    per_seed = df[df["p_copy"] > 0].groupby(["p_copy", "seed"])[["alpha_reviewers", "alpha_model"]].mean()
    print("\nseed-to-seed standard deviation of the concept means:")
    print(per_seed.groupby(level="p_copy").std().round(4).to_string())
    return 0


if __name__ == "__main__":
    sys.exit(main())
