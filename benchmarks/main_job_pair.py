"""Whether one revision's main job trains slower than another's, on a machine whose own speed drifts by the hour:
the README's main job (`rubrictool train --benchmark mohler`) at two checkouts, alternated A B B A A B, each run capped
at --steps optimiser steps an epoch (three Stage I and three joint epochs of that many steps; Stage II whole), so
that a drift over the half hour falls on both alike. Prints each run's wall time, training time and step times, the
two revisions' means, and whether their test predictions are the same file; writes OUT/pair.json.

    git worktree add --detach ../tA REV_A && git worktree add --detach ../tB REV_B
    python benchmarks/main_job_pair.py ../tA ../tB --out benchmarks/out/pair        # on an idle machine

Both checkouts run with this interpreter (its packages), each with its own code first on PYTHONPATH. --smoke: this
checkout as both A and B, one step an epoch on 40 synthetic answers with a tiny --backbone.
"""

from __future__ import annotations

import argparse
import filecmp
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ORDER = "ABBAAB"


def one_run(checkout: Path, out: Path, steps: int, data_dir: str, extra: list[str]) -> dict[str, Any]:
    """The main job at ``checkout`` into ``out``: wall seconds and what its metrics.json says of the time."""
    env = os.environ | {"PYTHONPATH": str(checkout), "RUBRICTOOL_DATA": data_dir}
    cmd = [sys.executable, "-m", "rubrictool.cli", "train", "--cfg", f"stage1.max_steps_per_epoch={steps}",
           "--out", str(out), *extra]
    start = time.perf_counter()
    with open(out.with_suffix(".log"), "w") as log:
        done = subprocess.run(cmd, cwd=checkout, env=env, stdout=log, stderr=subprocess.STDOUT, check=False)
    wall = time.perf_counter() - start
    if done.returncode:
        sys.exit(f"{checkout}: the main job failed (exit {done.returncode}); see {out.with_suffix('.log')}")
    seed = json.loads((out / "metrics.json").read_text())["seeds"][0]
    return {"wall_s": round(wall, 1), "train_s": round(seed["train_seconds"], 1),
            "stage1_step_s": round(seed["stage1"]["step_seconds"], 4),
            "joint_step_s": round(seed["joint"].get("step_seconds", 0.0), 4)}


def revision(checkout: Path) -> str:
    done = subprocess.run(["git", "-C", str(checkout), "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                          check=False)
    return done.stdout.strip() or str(checkout)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("a", type=Path, nargs="?", help="checkout of revision A")
    ap.add_argument("b", type=Path, nargs="?", help="checkout of revision B")
    ap.add_argument("--out", type=Path, default=None, help="default benchmarks/out/main-job-pair")
    ap.add_argument("--steps", type=int, default=50, help="optimiser steps an epoch (default 50)")
    ap.add_argument("--data-dir", default=os.environ.get("RUBRICTOOL_DATA", "../shared/datasets"))
    ap.add_argument("--smoke", action="store_true", help="this checkout as A and B, a tiny --backbone, synthetic data")
    ap.add_argument("--backbone", default=None, help="with --smoke: a small local encoder")
    a = ap.parse_args()
    if a.steps < 1:
        sys.exit(f"--steps is the optimiser steps an epoch, 1 or more; got {a.steps}")
    if a.smoke:
        if not a.backbone:
            sys.exit("--smoke needs --backbone (a small local encoder)")
        root = Path(__file__).resolve().parents[1]
        checkouts = {"A": root, "B": root}
        out = a.out or Path(tempfile.mkdtemp(prefix="pair-smoke-"))
        out.mkdir(parents=True, exist_ok=True)
        from rubrictool.data import synthetic_mohler_table

        synthetic_mohler_table(40).to_csv(out / "smoke.csv", index=False)
        extra = ["--table", str((out / "smoke.csv").resolve()), "--rubric", "mohler", "--backbone", a.backbone,
                 "--epochs", "1", "--cfg", "joint.epochs=1", "--cfg", "stage2.epochs=1", "--max-len", "32",
                 "--device", "cpu"]
        steps = 1
    else:
        if a.a is None or a.b is None:
            sys.exit("give two checkouts, A and B (git worktree add --detach ../tA REV)")
        checkouts = {"A": a.a.resolve(), "B": a.b.resolve()}
        out = a.out or Path("benchmarks/out/main-job-pair")
        out.mkdir(parents=True, exist_ok=True)
        extra, steps = ["--benchmark", "mohler"], a.steps
    out = out.resolve()
    if (out / "pair.json").is_file():
        sys.exit(f"--out {out} holds a finished measurement (pair.json); give another --out, or remove it")
    data_dir = str(Path(a.data_dir).resolve())
    runs = []
    for i, who in enumerate(ORDER, 1):
        r = one_run(checkouts[who], out / f"{who}-{i}", steps, data_dir, extra)
        runs.append({"who": who, "order": i, "when": time.strftime("%H:%M:%S", time.gmtime())} | r)
        print(f"{who} {i} {r}", flush=True)
    same = filecmp.cmp(out / "A-1" / "test_predictions.csv", out / "B-2" / "test_predictions.csv", shallow=False)
    means = {who: {k: round(statistics.mean(r[k] for r in runs if r["who"] == who), 3)
                   for k in ("wall_s", "train_s", "stage1_step_s", "joint_step_s")} for who in "AB"}
    result = {"a": revision(checkouts["A"]), "b": revision(checkouts["B"]), "steps_per_epoch": steps, "runs": runs,
              "means": means, "same_test_predictions": same}
    print(f"A {result['a']} mean {means['A']}\nB {result['b']} mean {means['B']}\n"
          f"the same test predictions: {same}")
    (out / "pair.json").write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {out / 'pair.json'}")


if __name__ == "__main__":
    main()
