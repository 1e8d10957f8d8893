"""Grading speed: answers per second of `rubrictool grade` with a trained run, per engine.

The run is loaded once per engine (:func:`rubrictool.grade.load_grader`; export and loading are not timed), one
batch is graded to warm up, then ``--n`` Mohler answers are graded with :func:`rubrictool.grade.grade_loaded`
in batches of ``--batch``. Each engine's grades are compared with torch float32's (the share that agree).

    python benchmarks/grade_speed.py --run runs/mohler-reccbm                      # 600 answers, four engines
    python benchmarks/grade_speed.py --run runs/mohler-reccbm --engines onnx-int8 --n 2000
    python benchmarks/grade_speed.py --smoke --backbone PATH     # a tiny run trained on 24 synthetic answers

Engines: ``torch``, ``torch-int8`` (``grade --int8``), ``onnx`` (``grade --engine onnx``), ``onnx-int8``.
Writes ``--out`` (JSON) with the rates, the agreement and the machine's load average.
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

ENGINES = {"torch": ("torch", False), "torch-int8": ("torch", True), "onnx": ("onnx", False),
           "onnx-int8": ("onnx", True)}


def smoke_run(root: Path, backbone: str, n: int = 24) -> tuple[Path, Any]:
    """A tiny run on the Mohler rubric (one step per stage) and the synthetic answers it was trained on."""
    import numpy as np
    import pandas as pd

    from rubrictool.rubric import load_rubric
    from rubrictool.train import TrainOptions, train_model

    rubric = load_rubric("mohler")
    rng = np.random.default_rng(0)
    words = ["a", "stack", "stores", "elements", "last", "in", "first", "out", "queue", "node"]
    levels = rng.integers(1, 4, size=(n, len(rubric.keys)))  # (N, K)
    table = pd.DataFrame({"id": [f"g.{i}" for i in range(n)], "question": "what is a stack",
                          "response": [" ".join(rng.choice(words, size=5)) for _ in range(n)],
                          "reference": "a stack stores elements last in first out"})
    for k, key in enumerate(rubric.keys):
        table[key] = levels[:, k]
    table["grade"] = np.rint((levels.sum(1) - len(rubric.keys)) * 5 / (2 * len(rubric.keys))).astype(int)
    ids = table["id"].tolist()
    split = {"train": ids[:16], "dev": ids[16:20], "test": ids[20:]}
    over: dict[str, dict[str, Any]] = {"model": {"backbone": backbone, "max_len": 16},
            "stage1": {"epochs": 1, "max_steps_per_epoch": 1, "device": "cpu"}, "joint": {"epochs": 1},
            "stage2": {"epochs": 1}}
    run = root / "run"
    train_model(rubric, table, split, run, options=TrainOptions(overrides=over))
    return run, table


def measure(run: Path, items: Any, engines: list[str], batch: int) -> list[dict[str, Any]]:
    from rubrictool.grade import grade_loaded, load_grader

    rows, reference = [], None
    for name in engines:
        engine, int8 = ENGINES[name]
        grader = load_grader(run, int8, engine)
        grade_loaded(grader, items.head(batch), batch)  # warm-up
        t0 = time.perf_counter()
        graded = grade_loaded(grader, items, batch)
        dt = time.perf_counter() - t0
        grades = graded["grade"].to_numpy()
        if reference is None and name == "torch":
            reference = grades
        same = None if reference is None else float((grades == reference).mean())
        rows.append({"engine": name, "answers": len(items), "seconds": round(dt, 3),
                     "answers_per_s": round(len(items) / dt, 1), "same_grade_as_torch": same})
        print(f"{name}: {len(items) / dt:.1f} answers/s ({len(items)} in {dt:.2f} s)"
              + ("" if same is None else f", same grade as torch float32: {same:.1%}"), flush=True)
    return rows


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", type=Path, default=None, help="a trained run directory")
    ap.add_argument("--n", type=int, default=600, help="Mohler answers to grade")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--engines", default="torch,torch-int8,onnx,onnx-int8", help=f"comma list of {', '.join(ENGINES)}")
    ap.add_argument("--data-dir", default=os.environ.get("RUBRICTOOL_DATA", "../shared/datasets"))
    ap.add_argument("--out", type=Path, default=Path("benchmarks/out/grade_speed.json"))
    ap.add_argument("--smoke", action="store_true", help="a tiny run (needs --backbone), torch and torch-int8 only")
    ap.add_argument("--backbone", default=None, help="--smoke: the small local encoder to train the tiny run with")
    a = ap.parse_args(argv)
    engines = [e for e in a.engines.split(",") if e]
    unknown = [e for e in engines if e not in ENGINES]
    if unknown:
        sys.exit(f"unknown engine(s) {unknown}; known: {', '.join(ENGINES)}")
    if a.smoke:
        if not a.backbone:
            sys.exit("--smoke needs --backbone (a small local encoder)")
        root = Path(tempfile.mkdtemp(prefix="grade-speed-smoke-"))
        run, items = smoke_run(root, a.backbone)
        engines, a.batch = ["torch", "torch-int8"], 8
        if a.out == ap.get_default("out"):
            a.out = root / "grade_speed.json"
    else:
        if a.run is None:
            sys.exit("give --run RUN_DIR (a trained run), or --smoke")
        from rubrictool.data import load_benchmark

        run, items = a.run, load_benchmark("mohler", a.data_dir).head(a.n)
    rows = measure(run, items, engines, a.batch)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps({"date": time.strftime("%Y-%m-%d"), "run": str(run), "batch": a.batch,
                                 "load_avg_1min": os.getloadavg()[0], "cpus": os.cpu_count(), "results": rows},
                                indent=1) + "\n")
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
