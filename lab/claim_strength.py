"""Does a grader read a reversed claim at all, or not even weakly? For the behavioural suite's "not" and key-term swap
(on answers marked 4 or more) and for the minimal pairs, the expected mark Σ_g p(g)·g before and after the edit
beside the mark itself: how often it moves the right way, by how much, and how often by half a mark or more.

    python lab/claim_strength.py RUN [RUN …] --out lab/results/claim-strength/NAME

A mark can stay put while the grade distribution moves the right way (the reader sees the word, too weakly to cross a
mark), or the distribution can stay put too (the reader does not see it): the two call for different levers. Runs
given together (the folds of a k-fold run) are pooled; each run's own test answers, edited with the suite's seeds
(:func:`rubrictool.behaviour.edit`, one stream per test). Concept labels (Mohler): majority vote over three
independent LLM annotation passes, NOT validated by experts.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np
import pandas as pd

from rubrictool.behaviour import TESTS, edit, key_words, pair_questions, read_pairs
from rubrictool.report.run import open_run, split_rows
from rubrictool.textsafe import md_table

PAIRS = Path(__file__).resolve().parent.parent / "benchmarks" / "data" / "mohler_minimal_pairs.jsonl"
EDITS = ("negation", "key_swap")
GOOD = 4  # answers marked at least this (by the grader, as the suite's directional tests count them)


def expected_marks(run: Any, grader: Any, rows: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """(expected mark, mark) of each row as the run's grader reads it (its own input rule and decision)."""
    frame = rows[["question", "reference", "response"]].fillna("").assign(context="")
    preds = grader.predictions(frame)
    g = np.arange(preds.grade_probs.shape[1]) + run.grade_min  # (S+1,)
    return preds.grade_probs @ g, preds.grades + run.grade_min


def edited(test: pd.DataFrame, name: str, seed: int) -> tuple[list[int], list[str]]:
    """The positions of the test answers the edit applies to and their edited texts (the suite's stream)."""
    rng = np.random.default_rng([seed, [t.name for t in TESTS].index(name)])
    idx, texts = [], []
    for i, r in enumerate(test.to_dict(orient="records")):
        item = {"response": str(r["response"]), "question": str(r["question"]), "reference": str(r["reference"]),
                "keys": key_words(str(r["question"]), str(r["reference"]))}
        out = edit(name, item, rng)
        if out is not None:
            idx.append(i)
            texts.append(out)
    return idx, texts


def one_run(path: str, pairs: pd.DataFrame, seed: int) -> dict[str, pd.DataFrame]:
    """Per edit, one row per edited good answer (expected mark and mark before/after); the pairs the run's table
    holds (expected mark and mark of the right and the wrong answer)."""
    from rubrictool.grade import load_grader

    run = open_run(path, None, None)
    grader = load_grader(run.path)
    test = split_rows(run, "test").reset_index(drop=True)
    test["reference"] = test["reference"].fillna("") if "reference" in test else ""
    e0, m0 = expected_marks(run, grader, test)
    out: dict[str, pd.DataFrame] = {}
    for name in EDITS:
        idx, texts = edited(test, name, seed)
        if not idx:
            continue
        e1, m1 = expected_marks(run, grader, test.iloc[idx].assign(response=texts))
        df = pd.DataFrame({"e_before": e0[idx], "e_after": e1, "m_before": m0[idx], "m_after": m1})
        out[name] = df[df["m_before"] >= GOOD]
    pp = pair_questions(pairs, run.table)
    if len(pp):
        er, mr = expected_marks(run, grader, pp.assign(response=pp["right"]))
        ew, mw = expected_marks(run, grader, pp.assign(response=pp["wrong"]))
        out["pairs"] = pd.DataFrame({"e_right": er, "e_wrong": ew, "m_right": mr, "m_wrong": mw})
    return out


def summary(pooled: dict[str, pd.DataFrame]) -> pd.DataFrame:
    rows = []
    for name in EDITS:
        df = pooled.get(name)
        if df is None or not len(df):
            continue
        d = (df["e_after"] - df["e_before"]).to_numpy()
        rows.append({"test": name, "n": len(df), "mark falls": float((df["m_after"] < df["m_before"]).mean()),
                     "expected mark falls": float((d < 0).mean()), "mean change": float(d.mean()),
                     "median change": float(np.median(d)), "falls by ≥ 0.5": float((d <= -0.5).mean())})
    df = pooled.get("pairs")
    if df is not None and len(df):
        d = (df["e_right"] - df["e_wrong"]).to_numpy()
        rows.append({"test": "minimal pairs (right − wrong)", "n": len(df),
                     "mark falls": float((df["m_right"] > df["m_wrong"]).mean()),
                     "expected mark falls": float((d > 0).mean()), "mean change": float(d.mean()),
                     "median change": float(np.median(d)), "falls by ≥ 0.5": float((d >= 0.5).mean())})
    return pd.DataFrame(rows)


def markdown(table: pd.DataFrame, runs: list[str]) -> str:
    head = ["test", "answers", "mark moves the right way", "expected mark moves the right way", "mean change",
            "median change", "by half a mark or more"]
    body = [[r["test"], str(r["n"]), f"{100 * r['mark falls']:.0f} %", f"{100 * r['expected mark falls']:.0f} %",
             f"{r['mean change']:+.3f}", f"{r['median change']:+.3f}", f"{100 * r['falls by ≥ 0.5']:.0f} %"]
            for r in table.to_dict(orient="records")]
    return ("Runs: " + ", ".join(runs) + "\n\nFor the minimal pairs, \"the right way\" is the right answer above the "
            "wrong one and the change is right − wrong.\n\n" + "\n".join(md_table(head, body)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+")
    ap.add_argument("--out", type=Path, default=Path("lab/out/claim-strength"))
    ap.add_argument("--pairs", type=Path, default=PAIRS)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    pairs = read_pairs(a.pairs)
    parts: dict[str, list[pd.DataFrame]] = {}
    for r in a.runs:
        for name, df in one_run(r, pairs, a.seed).items():
            parts.setdefault(name, []).append(df)
    pooled = {k: pd.concat(v, ignore_index=True) for k, v in parts.items()}
    table = summary(pooled)
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "claim_strength.json").write_text(json.dumps({"runs": a.runs, "seed": a.seed,
                                                           "tests": table.to_dict(orient="records")}, indent=1))
    (a.out / "claim_strength.md").write_text(markdown(table, a.runs))
    print(markdown(table, a.runs))


if __name__ == "__main__":
    main()
