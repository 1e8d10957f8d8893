"""What ``grade --int8`` does to the grades of a run: the share of answers whose grade changes against float32, and
T-Acc / QWK of each on the run's test split, for torch's dynamic int8 and ONNX Runtime's int8.

    .venv/bin/python lab/int8_effect.py --run RUN [--all]

``--all`` also grades every answer of the run's table (training answers included) for the share changed.
Prints a table and writes RUN-independent numbers to benchmarks/results/int8_effect.json.
"""

from __future__ import annotations

import argparse
import json
from datetime import date
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent

from reccbm.metrics import quadratic_weighted_kappa as qwk
from rubrictool.grade import grade_loaded, load_grader
from rubrictool.provenance import git_revision
from rubrictool.train.runs import open_run


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--run", required=True)
    ap.add_argument("--all", action="store_true")
    args = ap.parse_args()
    run = open_run(args.run)
    table = run.load_table().assign(id=lambda d: d["id"].astype(str)).drop_duplicates("id").set_index("id")
    test_ids = [str(i) for i in run.split["test"]]
    sets = {"test": table.loc[test_ids].reset_index()}
    if args.all:
        sets["all"] = table.reset_index()
    grades: dict[str, dict[str, np.ndarray]] = {}
    for name, (int8, engine) in {"float32": (False, "torch"), "torch int8": (True, "torch"),
                                 "onnx int8": (True, "onnx")}.items():
        grader = load_grader(args.run, int8, engine)
        grades[name] = {s: grade_loaded(grader, df, 64, flags=False)["grade"].to_numpy() for s, df in sets.items()}
    gold = sets["test"]["grade"].to_numpy()
    out: dict[str, object] = {"measured": date.today().isoformat(), "revision": git_revision(), "run": str(args.run),
                              "config": run.config.get("preset"),
                              "encoder": (run.config.get("encoder") or {}).get("used"),
                              "n_test": len(test_ids), "results": {}}
    print(f"{len(test_ids)} test answers" + (f", {len(sets['all'])} answers in all" if args.all else ""))
    for name, g in grades.items():
        row = {"t_acc": float(np.mean(g["test"] == gold)), "qwk": float(qwk(gold.astype(int), g["test"].astype(int)))}
        for s in sets:
            row[f"changed_{s}"] = float(np.mean(g[s] != grades["float32"][s]))
        out["results"][name] = row  # type: ignore[index]
        print(f"  {name:11s} T-Acc {row['t_acc']:.3f}  QWK {row['qwk']:.3f}  "
              + "  ".join(f"changed ({s}) {row[f'changed_{s}']:.1%}" for s in sets))
    dest = ROOT / "benchmarks" / "results" / "int8_effect.json"
    dest.write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {dest}")


if __name__ == "__main__":
    main()
