"""What hashing a run's weights whole costs a `rubrictool grade` of 200 answers (CPU, the default MiniLM encoder).

A run with the default encoder is trained for one step per stage on synthetic answers (its grades are not the point:
its files are the size of a real run's); then ``--n`` answers are graded end to end with
:func:`rubrictool.grade.grade_file` (the run opened and checked, the model loaded, every answer graded, the table
written), alternately with today's check (every file's sha256, the weights whole) and with the check before it (files
over 16 MB by size and a sampled hash of 64 blocks), ``--repeats`` times each, the hash cache emptied before every
grade. Prints and writes (``--out``, JSON) the medians and the added share.

    python benchmarks/run_hash_cost.py --n 200 --repeats 5 --out benchmarks/results/run_hash_cost.json
    python benchmarks/run_hash_cost.py --smoke      # 8 answers, one grade each way
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def sampled_check(path: Path, record: dict[str, Any], full: bool | None = None) -> str | None:
    """The check before whole hashing: sizes; sha256 of files up to 16 MB; a sampled hash of larger ones."""
    from rubrictool.train.runs import sample_sha256, sha256_file

    for name, want in (record.get("files") or {}).items():
        p = path / name
        if not p.is_file() or p.stat().st_size != want.get("bytes"):
            return f"{name} differs"
        if p.stat().st_size <= 16 * 2**20:
            if sha256_file(p) != want.get("sha256"):
                return f"{name} differs"
        elif want.get("sample_sha256") and sample_sha256(p) != want["sample_sha256"]:
            return f"{name} differs"
    return None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--smoke", action="store_true", help="8 answers, one grade each way (checks the script runs)")
    args = ap.parse_args()
    if args.smoke:
        args.n, args.repeats = 8, 1

    import numpy as np
    import pandas as pd

    from rubrictool.marks import GradeOptions, grade_file
    from rubrictool.rubric import load_rubric
    from rubrictool.train import TrainOptions, runs, train_model

    rubric = load_rubric("mohler")
    rng = np.random.default_rng(0)
    words = ["a", "stack", "stores", "elements", "last", "in", "first", "out", "queue", "node", "pointer", "array"]

    def answers(n: int, prefix: str) -> pd.DataFrame:
        return pd.DataFrame({"id": [f"{prefix}.{i}" for i in range(n)], "question": "what is a stack",
                             "response": [" ".join(rng.choice(words, size=int(rng.integers(8, 40)))) for _ in range(n)],
                             "reference": "a stack stores elements last in first out"})

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        table = answers(24, "t")
        levels = rng.integers(1, 4, size=(24, len(rubric.keys)))
        for k, key in enumerate(rubric.keys):
            table[key] = levels[:, k]
        table["grade"] = np.rint((levels.sum(1) - len(rubric.keys)) * 5 / (2 * len(rubric.keys))).astype(int)
        ids = table["id"].tolist()
        over: dict[str, dict[str, Any]] = {"stage1": {"epochs": 1, "max_steps_per_epoch": 1, "device": "cpu"},
                                           "joint": {"epochs": 1}, "stage2": {"epochs": 1}}
        run = root / "run"
        train_model(rubric, table, {"train": ids[:16], "dev": ids[16:20], "test": ids[20:]}, run,
                    options=TrainOptions(overrides=over))
        items = root / "items.csv"
        answers(args.n, "g").to_csv(items, index=False)
        weights = (run / "model.safetensors").stat().st_size
        whole_check = runs.check_record
        times: dict[str, list[float]] = {"whole": [], "sampled": []}
        for i in range(args.repeats * 2 + 1):
            mode = "sampled" if i % 2 else "whole"
            runs.check_record = sampled_check if mode == "sampled" else whole_check  # type: ignore[assignment]
            runs.forget_hashes()
            t0 = time.perf_counter()
            grade_file(run, items, root / "graded.csv", GradeOptions(device="cpu"))
            if i:  # the first grade warms the page cache and the imports
                times[mode].append(time.perf_counter() - t0)
        runs.check_record = whole_check  # type: ignore[assignment]
    med = {k: statistics.median(v) for k, v in times.items()}
    result = {"answers": args.n, "repeats": args.repeats, "weights_bytes": weights,
              "seconds": times, "median_s": med, "added_share": med["whole"] / med["sampled"] - 1,
              "load_average": os.getloadavg()}
    print(json.dumps(result, indent=1))
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
