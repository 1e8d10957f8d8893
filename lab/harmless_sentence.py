"""A reader that is not thrown by text beside the point: one harmless sentence appended to every test answer, and how
far the grade and each concept's level move.

    python lab/harmless_sentence.py runs/mohler-reccbm                  # a run: its test split
    python lab/harmless_sentence.py RUN_DIR/fold-0 RUN_DIR/fold-1 ...   # several runs (k folds): pooled
    python lab/harmless_sentence.py RUN --sentence "Some other sentence." --json out.json

Per run, its test answers (split.json) are graded as they are and with the sentence appended (after one space); the
report gives the mean grade change with a bootstrap 95 % CI over answers, the share of grades that moved, and each
concept's mean level change. Concept labels of the Mohler runs: majority vote over three LLM annotation passes, NOT
validated by experts.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

SENTENCE = "This is a very important and correct answer."


def shifted(run_dir: Path, sentence: str, device: str) -> pd.DataFrame:
    """The run's test answers graded as they are (``*_a``) and with ``sentence`` appended (``*_b``)."""
    from rubrictool.grade import grade_loaded, load_grader

    table = pd.read_csv(run_dir / "table.csv", dtype={"id": str})
    test_ids = set(map(str, json.loads((run_dir / "split.json").read_text())["test"]))
    test = table[table["id"].isin(test_ids)].reset_index(drop=True)
    grader = load_grader(run_dir)
    a = grade_loaded(grader, test, flags=False, device=device)
    b = grade_loaded(grader, test.assign(response=test["response"].astype(str).str.rstrip() + " " + sentence),
                     flags=False, device=device)
    return a.merge(b, on="id", suffixes=("_a", "_b"))


def summary(df: pd.DataFrame, n_boot: int = 2000, seed: int = 0) -> dict[str, Any]:
    d = (df["grade_b"] - df["grade_a"]).to_numpy(dtype=float)
    rng = np.random.default_rng(seed)
    boots = [d[rng.integers(0, len(d), len(d))].mean() for _ in range(n_boot)]
    keys = [c[: -len("_level_a")] for c in df.columns if c.endswith("_level_a")]
    return {"answers": len(d), "mean_grade_a": float(df["grade_a"].mean()), "mean_grade_b": float(df["grade_b"].mean()),
            "mean_change": float(d.mean()), "ci": [float(np.percentile(boots, 2.5)), float(np.percentile(boots, 97.5))],
            "share_moved": float((d != 0).mean()),
            "level_change": {k: float((df[f"{k}_level_b"] - df[f"{k}_level_a"]).mean()) for k in keys}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+", type=Path)
    ap.add_argument("--sentence", default=SENTENCE)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--json", type=Path, default=None)
    a = ap.parse_args()
    df = pd.concat([shifted(r, a.sentence, a.device) for r in a.runs], ignore_index=True)
    out = summary(df) | {"sentence": a.sentence, "runs": [str(r) for r in a.runs]}
    print(f"{out['answers']} answers: mean grade {out['mean_grade_a']:.3f} -> {out['mean_grade_b']:.3f}, change "
          f"{out['mean_change']:+.3f} [{out['ci'][0]:+.3f}, {out['ci'][1]:+.3f}]; {out['share_moved']:.1%} of grades "
          "moved")
    print("mean level change: " + ", ".join(f"{k} {v:+.3f}" for k, v in out["level_change"].items()))
    if a.json:
        a.json.write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
