"""Benchmark: agreement + adjudication for 30,000 items x 3 reviewers x 8 concepts (target: < 5 s).

Synthetic reviews on the Mohler rubric (levels 1..3): each item and concept has a latent level,
each reviewer reports it with probability 0.85 and a neighbouring level otherwise, 2 % of reviews
are missing; the grade is a noisy function of the latent levels. Timed in one process after a
warm-up call on 300 items (imports of pandas/sklearn/crowd-kit are not counted):

- ``adjudicate``: validation against the rubric, the label cube, majority vote with tie rules,
  α + 1,000-replicate bootstrap CI per concept, pairwise and leave-one-out reviewer agreement,
  training table, discussion queue (CSV + Markdown) and the coverage model (5-fold CV, 2 models);
- ``write``: writing all outputs (CSV);
- optionally ``--dawid-skene`` times the Dawid-Skene consensus instead of majority vote.

Run: .venv/bin/python benchmarks/adjudicate.py [--items 30000] [--bootstrap 1000] [--dawid-skene]
(with RUBRICTOOL_CPU_CLOCK=1 the per-stage times are CPU seconds instead of wall seconds, which
stay meaningful on a machine shared with other jobs)
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import numpy as np
import pandas as pd

from rubrictool.adjudicate import AdjudicationOptions, adjudicate, write_outputs
from rubrictool.rubric import load_rubric


def synthetic(n_items: int, n_reviewers: int = 3, seed: int = 0) -> tuple[pd.DataFrame, pd.DataFrame]:
    rubric = load_rubric("mohler")
    keys = rubric.keys
    rng = np.random.default_rng(seed)
    truth = rng.integers(1, 4, size=(n_items, len(keys)))  # (N, K)
    noise = rng.choice([-1, 0, 1], p=[0.075, 0.85, 0.075], size=(n_items, len(keys), n_reviewers))
    levels = np.clip(truth[:, :, None] + noise, 1, 3)  # (N, K, R)
    ids = np.array([f"i{i}" for i in range(n_items)], dtype=object)
    ii, kk, rr = np.meshgrid(np.arange(n_items), np.arange(len(keys)), np.arange(n_reviewers), indexing="ij")
    reviews = pd.DataFrame(
        {
            "item": ids[ii.ravel()],
            "reviewer": np.array(["A", "B", "C", "D", "E"][:n_reviewers], dtype=object)[rr.ravel()],
            "concept": np.array(keys, dtype=object)[kk.ravel()],
            "level": levels.ravel(),
        }
    )
    reviews = reviews.loc[rng.random(len(reviews)) >= 0.02].reset_index(drop=True)
    grade = np.clip(np.round((truth.sum(axis=1) - 8) / 16 * 5 + rng.normal(0, 0.6, n_items)), 0, 5)
    items = pd.DataFrame({"id": ids, "question": "q", "response": "r", "grade": grade})
    return reviews, items


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--items", type=int, default=30000)
    ap.add_argument("--bootstrap", type=int, default=1000)
    ap.add_argument("--dawid-skene", action="store_true")
    ap.add_argument("--smoke", action="store_true", help="300 items, 20 bootstrap replicates, no warm-up call")
    args = ap.parse_args(argv)
    if args.smoke:
        args.items, args.bootstrap = 300, 20
    rubric = load_rubric("mohler")
    method = "dawid-skene" if args.dawid_skene else "majority"
    if not args.smoke:
        warm_r, warm_i = synthetic(300, seed=1)
        adjudicate(warm_r, rubric, warm_i, options=AdjudicationOptions(method=method, n_boot=50))
    reviews, items = synthetic(args.items)
    stages: dict[str, float] = {}
    c0, t0 = time.process_time(), time.perf_counter()
    result = adjudicate(reviews, rubric, items,
                        options=AdjudicationOptions(method=method, n_boot=args.bootstrap, seed=0),
                        timings=stages)
    c1, t1 = time.process_time(), time.perf_counter()
    with tempfile.TemporaryDirectory() as d:
        write_outputs(result, d, "csv")
    t2 = time.perf_counter()
    a = result.agreement
    print(
        f"{args.items} items x 3 reviewers x {len(rubric.keys)} concepts = {len(reviews)} reviews, "
        f"method {method}, bootstrap {args.bootstrap}"
    )
    print(
        f"adjudicate: {t1 - t0:.2f} s wall ({c1 - c0:.2f} s CPU)   write outputs: {t2 - t1:.2f} s   "
        f"total: {t2 - t0:.2f} s   (load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs)"
    )
    print("stages: " + ", ".join(f"{k} {v:.2f}" for k, v in stages.items()))
    print(
        f"alpha FC {a['concepts']['FC']['alpha']:.3f} CI {a['concepts']['FC']['alpha_ci']}, "
        f"flagged {a['adjudication']['flagged']}, coverage one-hot acc "
        f"{a['coverage']['levels_one_hot']['accuracy']:.3f}"
    )


if __name__ == "__main__":
    main()
