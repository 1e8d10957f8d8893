"""A claim's polarity against the reference: can a check outside the grader see the "not" that reverses an answer?

The default grader moves the expected mark the right way for about two "not"s in three, by a hundredth of a mark
(``lab/claim_strength.py``). This study asks whether a transparent check could catch what it misses, and at what cost
to honest answers. Each answer and its reference are cut into clauses (sentences, then ``;``, ``,``, "but", "while",
"whereas"); each clause's polarity is whether it holds a negation (not, no, never, none, nothing, cannot, without,
neither, nor, n't); each answer clause is matched to the reference clause it is closest to *with the negations taken
out of both* (the pretrained sentence encoder, MiniLM by default, frozen: a clause and its negation then read the
same). A **contradiction** is a matched pair at cosine τ or more whose polarities differ.

It reports, at several τ, the share of answers the check fires on:

- honest answers, by the teachers' mark (all Mohler answers: what a hold on it would cost);
- the behavioural suite's "not" edit of answers marked 4–5 (what it should catch), and its key-term swap;
- the minimal pairs' wrong and right answers (``benchmarks/data/mohler_minimal_pairs.jsonl``).

With ``--peers`` each answer is matched against the clauses of its question's other answers given the top mark as well
(on questions with graded answers, as a grader that keeps its training answers could).

    RUBRICTOOL_DATA=../shared/datasets .venv/bin/python lab/polarity.py --out lab/results/polarity.json
    RUBRICTOOL_DATA=../shared/datasets .venv/bin/python lab/polarity.py --peers --out lab/results/polarity-peers.json

Grades are the teachers'; no concept label is read. About two minutes on a 2-core CPU (the clauses are encoded once).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

NEGATION = re.compile(r"\b(not|no|never|none|nothing|cannot|without|neither|nor)\b|n['’]t\b", re.IGNORECASE)
CUTS = re.compile(r"(?<=[.!?;])\s+|,?\s+(?:but|while|whereas)\s+|,\s+", re.IGNORECASE)
TAUS = (0.7, 0.8, 0.85, 0.9)


def clauses(text: str) -> list[str]:
    """The clauses of ``text`` (at least three letters each)."""
    return [c.strip() for c in CUTS.split(str(text)) if c and len(re.findall(r"[A-Za-z]", c)) >= 3]


def negated(clause: str) -> bool:
    return NEGATION.search(clause) is not None


def stripped(clause: str) -> str:
    """The clause with its negations taken out ("cannot" → "can", "doesn't" → "does")."""
    out = re.sub(r"\bcannot\b", "can", clause, flags=re.IGNORECASE)
    out = re.sub(r"n['’]t\b", "", out)
    out = re.sub(r"\b(not|no|never|none|nothing|without|neither|nor)\b", "", out, flags=re.IGNORECASE)
    return " ".join(out.split())


class Encoder:
    """Clause embeddings (unit length), each text encoded once."""

    def __init__(self, backbone: str | None = None) -> None:
        from sentence_transformers import SentenceTransformer

        from reccbm.encoder import default_backbone

        self.model = SentenceTransformer(backbone or default_backbone(), device="cpu")
        self.cache: dict[str, np.ndarray[Any, Any]] = {}

    def __call__(self, texts: list[str]) -> np.ndarray[Any, Any]:
        new = sorted({t for t in texts if t not in self.cache})
        if new:
            for t, e in zip(new, self.model.encode(new, normalize_embeddings=True, batch_size=128), strict=True):
                self.cache[t] = e
        return np.stack([self.cache[t] for t in texts]) if texts else np.zeros((0, 384))


def contradiction(answer: str, reference: str, encode: Any, peers: list[str] | None = None) -> float:
    """The highest cosine of an answer clause and its closest reference clause (negations taken out) whose polarities
    differ; 0 when every clause agrees with its match (or there is none). With ``peers`` (other answers given the top
    mark) their clauses stand beside the reference's."""
    a, r = clauses(answer), clauses(reference) + [c for p in peers or [] for c in clauses(p)]
    if not a or not r:
        return 0.0
    sims = encode([stripped(c) for c in a]) @ encode([stripped(c) for c in r]).T  # (A, R)
    best = sims.argmax(axis=1)
    score = 0.0
    for i, j in enumerate(best):
        if negated(a[i]) != negated(r[j]):
            score = max(score, float(sims[i, j]))
    return score


def main(argv: list[str] | None = None) -> int:
    example = "\n".join(line for line in __doc__.splitlines() if line.startswith("    "))
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog="example:\n" + example,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", default=None, help="benchmark data (default: $RUBRICTOOL_DATA, else ./data)")
    ap.add_argument("--pairs", type=Path, default=Path("benchmarks/data/mohler_minimal_pairs.jsonl"))
    ap.add_argument("--backbone", default=None, help="the sentence encoder (default: MiniLM)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--peers", action="store_true",
                    help="match against the question's other answers given the top mark as well as the reference")
    ap.add_argument("--out", type=Path, default=None, help="also write the figures as JSON here")
    args = ap.parse_args(argv)
    if args.out is not None and Path(args.out).suffix != ".json":
        ap.error(f"--out {args.out}: give a .json file (this study writes JSON, never over its inputs)")

    from rubrictool.behaviour.edits import edit
    from rubrictool.pipeline import benchmark_table

    _, table, _ = benchmark_table("mohler", args.data_dir)
    if not args.pairs.is_file():
        print(f"{args.pairs}: no such file (the minimal pairs; give --pairs)", file=sys.stderr)
        return 2
    pairs = [json.loads(line) for line in args.pairs.read_text(encoding="utf-8").splitlines() if line.strip()]
    print(f"reading {len(table)} answers, their edits and {2 * len(pairs)} pair answers clause by clause "
          "(about two minutes on a 2-core CPU)", file=sys.stderr)
    encode = Encoder(args.backbone)
    rng = np.random.default_rng(args.seed)
    scores: dict[str, list[float]] = {}
    top = table["grade"].max()

    def peers(i: Any) -> list[str] | None:
        if not args.peers:
            return None
        same = table[(table["question_id"] == table.at[i, "question_id"]) & (table["grade"] == top)]
        return [str(x) for x in same.drop(index=i, errors="ignore")["response"]]

    honest = [contradiction(str(table.at[i, "response"]), str(table.at[i, "reference"]), encode, peers(i))
              for i in table.index]
    for g in sorted(table["grade"].unique()):
        scores[f"honest, marked {g}"] = [s for s, y in zip(honest, table["grade"], strict=True) if y == g]
    good = table[table["grade"] >= 4]
    for test in ("negation", "key_swap"):
        out = []
        for i, row in good.iterrows():
            item = {"response": str(row["response"]), "question": str(row["question"]),
                    "reference": str(row["reference"])}
            e = edit(test, item, rng)
            if e is not None:
                out.append(contradiction(e, item["reference"], encode, peers(i)))
        scores[f"suite's {test} of answers marked 4-5"] = out
    refs = table.drop_duplicates("question_id").set_index("question_id")["reference"]
    for side in ("wrong", "right"):
        scores[f"minimal pairs: {side}"] = [
            contradiction(p[side], str(refs[p["question_id"]]), encode,
                          [str(x) for x in table[(table["question_id"] == p["question_id"])
                                                 & (table["grade"] == top)]["response"]] if args.peers else None)
            for p in pairs if p.get("question_id") in refs.index]
    rows = [{"answers": k, "n": len(v), **{f"fires at {t}": float(np.mean(np.asarray(v) >= t)) if v else float("nan")
                                            for t in TAUS}} for k, v in scores.items()]
    df = pd.DataFrame(rows)
    print("Contradiction with the reference (a clause whose polarity differs from its closest reference clause)\n")
    print("| answers | n | " + " | ".join(f"fires at τ {t}" for t in TAUS) + " |")
    print("|---|---:|" + "---:|" * len(TAUS))
    for r in rows:
        print(f"| {r['answers']} | {r['n']} | " + " | ".join(f"{r[f'fires at {t}']:.0%}" for t in TAUS) + " |")
    if args.out:
        from rubrictool.atomic import atomic_write_json

        atomic_write_json(args.out, {"taus": TAUS, "rows": df.to_dict("records")})
    return 0


if __name__ == "__main__":
    from rubrictool.cli import run_script

    run_script(main)  # bad data or run folder: one line, no traceback
