"""The behavioural test suite (rubrictool.behaviour) on trained runs: a single run, or the folds of a k-fold run pooled.

Each test answer of each run is edited (invariance: punctuation, case, spaces, a typo, sentence order, a synonym, the
student's name; directional: negation, the key term swapped, a bare keyword list, the reference after a wrong
answer, the question restated, filler, a wrong answer made longer) and graded again with the run's own grading path;
the minimal pairs of ``--pairs`` (default benchmarks/data/mohler_minimal_pairs.jsonl when it exists) are graded too.
The rows of every run given are pooled into one summary: per test the share of marks changed, the mean shift with a
95 % bootstrap CI, the share moved by 2 or more, the share in the expected direction and the verdict against the
targets set for single marks (docs/integrity.md, "Behavioural tests").

    python benchmarks/behaviour.py --name default-main /work/fresh/runs/mohler-reccbm
    python benchmarks/behaviour.py --name default-random /work/folds-out/random/default      # its complete folds
    python benchmarks/behaviour.py --smoke --backbone PATH      # a tiny run trained on 24 synthetic answers

A folder with ``fold-*/`` sub-folders is a k-fold run: its complete folds (model.json and metrics.json) are used.
Writes ``behaviour.json`` and ``behaviour.md`` (the tables; the largest moves are printed) to ``--out`` (default
benchmarks/results/behaviour/<name>/).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = Path(__file__).resolve().parent.parent
PAIRS = ROOT / "benchmarks" / "data" / "mohler_minimal_pairs.jsonl"


def smoke_run(root: Path, backbone: str, n: int = 24) -> Path:
    """A tiny run on the Mohler rubric (one step per stage) trained on synthetic answers."""
    import numpy as np
    import pandas as pd

    from rubrictool.rubric import load_rubric
    from rubrictool.train import TrainOptions, train_model

    rubric = load_rubric("mohler")
    rng = np.random.default_rng(0)
    words = ["a", "stack", "stores", "elements", "last", "in", "first", "out", "queue", "node", "is", "the"]
    levels = rng.integers(1, 4, size=(n, len(rubric.keys)))  # (N, K)
    table = pd.DataFrame({"id": [f"g.{i}" for i in range(n)], "question": "what is a stack, lifo or fifo?",
                          "response": [" ".join(rng.choice(words, size=7)) + "." for _ in range(n)],
                          "reference": "a stack stores elements last in first out"})
    for k, key in enumerate(rubric.keys):
        table[key] = levels[:, k]
    table["grade"] = np.rint((levels.sum(1) - len(rubric.keys)) * 5 / (2 * len(rubric.keys))).astype(int)
    ids = table["id"].tolist()
    split = {"train": ids[:12], "dev": ids[12:16], "test": ids[16:]}
    over: dict[str, dict[str, Any]] = {"model": {"backbone": backbone, "max_len": 24},
            "stage1": {"epochs": 1, "max_steps_per_epoch": 1, "device": "cpu"}, "joint": {"epochs": 1},
            "stage2": {"epochs": 1}}
    run = root / "run"
    train_model(rubric, table, split, run, options=TrainOptions(overrides=over))
    return run


def run_folders(paths: list[Path]) -> list[Path]:
    """Each path as the runs it holds: a k-fold parent's complete folds (model.json and metrics.json), else itself."""
    out: list[Path] = []
    for p in paths:
        folds = sorted(d for d in p.glob("fold-*") if d.is_dir())
        if folds:
            done = [d for d in folds if (d / "model.json").is_file() and (d / "metrics.json").is_file()]
            print(f"{p}: {len(done)} of {len(folds)} folds complete", flush=True)
            out += done
        else:
            out.append(p)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="*", type=Path, help="run folders, or k-fold parents (their complete folds, pooled)")
    ap.add_argument("--name", default="behaviour", help="the results' folder name under benchmarks/results/behaviour/")
    ap.add_argument("--out", type=Path, help="where to write (default benchmarks/results/behaviour/NAME)")
    ap.add_argument("--pairs", type=Path, help=f"minimal pairs (JSONL; default {PAIRS.relative_to(ROOT)} if present)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--data-dir", help="where the Mohler data is (default $RUBRICTOOL_DATA)")
    ap.add_argument("--smoke", action="store_true", help="a tiny run trained here (with --backbone)")
    ap.add_argument("--backbone", help="the tiny backbone of --smoke")
    args = ap.parse_args()

    import pandas as pd

    from rubrictool.atomic import atomic_write_text
    from rubrictool.behaviour import failing_sentences, run_suite, summarise, summary_markdown
    from rubrictool.provenance import git_revision

    tmp = None
    if args.smoke:
        if not args.backbone:
            ap.error("--smoke needs --backbone")
        tmp = tempfile.TemporaryDirectory()
        args.runs = [smoke_run(Path(tmp.name), args.backbone)]
        args.out = args.out or Path(tmp.name) / "out"
    if not args.runs:
        ap.error("name at least one run folder")
    pairs = args.pairs or (PAIRS if PAIRS.is_file() and not args.smoke else None)
    runs = run_folders(args.runs)
    if not runs:
        print("no complete run to test", file=sys.stderr)
        return 1
    t0 = time.perf_counter()
    results = []
    for run in runs:
        t = time.perf_counter()
        res = run_suite(run, data_dir=args.data_dir, seed=args.seed, batch_size=args.batch, pairs=pairs)
        results.append(res)
        print(f"{run}: {res.n} test answers, {len(res.items)} edited, {len(res.pairs)} pairs, "
              f"{time.perf_counter() - t:.0f} s", flush=True)
    items = pd.concat([r.items.assign(run=r.run) for r in results], ignore_index=True)
    pair_rows = pd.concat([r.pairs.assign(run=r.run) for r in results], ignore_index=True)
    summary = summarise(items, pair_rows, results[0].grade_range, args.seed)
    out = args.out or ROOT / "benchmarks" / "results" / "behaviour" / args.name
    out.mkdir(parents=True, exist_ok=True)
    doc = {"name": args.name, "runs": [str(r) for r in runs], "revision": git_revision(), "seed": args.seed,
           "pairs": str(pairs) if pairs else None, "n_answers": sum(r.n for r in results),
           "seconds": round(time.perf_counter() - t0, 1), "failing": failing_sentences(summary),
           "notes": sorted({n for r in results for n in r.notes}),
           "tests": json.loads(summary.to_json(orient="records"))}
    for t in doc["tests"]:  # kept in the tree (results stay small): the largest moves are printed, the sentences
        # are in "failing", the kinds in rubrictool.behaviour
        for k in ("largest", "sentence", "words", "kind", "expect"):
            t.pop(k, None)
        t.update({k: round(v, 3) for k, v in t.items() if isinstance(v, float)})
    atomic_write_text(out / "behaviour.json", json.dumps(doc, ensure_ascii=False) + "\n")
    head = (f"# Behavioural tests: {args.name}\n\n{doc['n_answers']} test answers of {len(runs)} run(s), seed "
            f"{args.seed}; {len(pair_rows)} minimal pairs. Runs: {', '.join(doc['runs'])}.\n\n")
    atomic_write_text(out / "behaviour.md", head + summary_markdown(summary, largest=False))
    print(summary_markdown(summary))
    for s in doc["failing"]:
        print(f"fails: {s}")
    print(f"wrote {out / 'behaviour.json'} and behaviour.md ({doc['seconds']} s)")
    if tmp is not None:
        tmp.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
