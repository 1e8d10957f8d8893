"""Training on perturbed copies: a training table with typo copies (same levels) and negated copies (lower levels).

An experiment on issue "marks that move for the right reasons". From a k-fold split's training part it adds
* a typo copy of a share of the training answers: one word of five or more letters that is not a word of the question
  or the reference gets two neighbouring letters swapped; every level and the grade are kept (a typo changes nothing);
* a negated copy of each training answer marked correct (``--negate-concepts`` at the top level, grade at least
  ``--negate-min-grade``) that has an "is/are/does/can/will/has/have": "not" inserted after the first one; those
  concepts go to the bottom level and the grade to ``--negated-grade`` (the claim is reversed: a heuristic label,
  stated as such);
and writes the table and a split.json whose training part holds the copies (dev and test unchanged), for

    python lab/perturbed_copies.py --split F/fold-0/split.json --out lab/out/perturbed
    rubrictool train --table lab/out/perturbed/table.csv --rubric mohler --split lab/out/perturbed/split.json \
        --agreement … --out runs/perturbed-fold0

Concept labels (Mohler): majority vote over three independent LLM annotation passes, NOT validated by experts.
"""

from __future__ import annotations

import argparse
import json
import random
import re
from pathlib import Path

import pandas as pd

from rubrictool.adjudicate import adjudicate_benchmark_labels

AUX = re.compile(r"\b(is|are|does|can|will|has|have)\b", re.IGNORECASE)
WORD = re.compile(r"[A-Za-z]{5,}")


def typo(text: str, keep: set[str], rng: random.Random) -> str | None:
    """``text`` with two neighbouring letters of one non-key word of 5+ letters swapped (None: no such word)."""
    spots = [m for m in WORD.finditer(text) if m.group(0).lower() not in keep]
    if not spots:
        return None
    m = rng.choice(spots)
    w = m.group(0)
    i = rng.randrange(1, len(w) - 2)  # keep the first letter, as most typos do
    w2 = w[:i] + w[i + 1] + w[i] + w[i + 2:]
    return text[: m.start()] + w2 + text[m.end():]


def negate(text: str) -> str | None:
    """"not" after the first is/are/does/can/will/has/have (None: there is none)."""
    m = AUX.search(text)
    if m is None:
        return None
    return text[: m.end()] + " not" + text[m.end():]


def words(*texts: str) -> set[str]:
    return {w.lower() for t in texts for w in re.findall(r"[A-Za-z]+", t or "")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--split", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--data-dir", default="../shared/datasets")
    ap.add_argument("--typo-share", type=float, default=0.25)
    ap.add_argument("--negate-concepts", default="FC,CC,DU")
    ap.add_argument("--negate-min-grade", type=int, default=4)
    ap.add_argument("--negated-grade", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    table = adjudicate_benchmark_labels("mohler", data_dir=args.data_dir)
    split = json.loads(args.split.read_text())
    train = table[table["id"].astype(str).isin(set(split["train"]))]
    negated_keys = args.negate_concepts.split(",")
    copies = []
    for _, row in train.iterrows():
        keep = words(row["question"], row["reference"])
        if rng.random() < args.typo_share:
            t = typo(str(row["response"]), keep, rng)
            if t is not None:
                copies.append(row.to_dict() | {"id": f"{row['id']}~typo", "response": t, "method": "copy"})
        if row["grade"] >= args.negate_min_grade and all(row[k] == 3 for k in negated_keys):
            n = negate(str(row["response"]))
            if n is not None:
                new = row.to_dict() | {"id": f"{row['id']}~not", "response": n, "grade": args.negated_grade,
                                       "method": "copy"}
                for k in negated_keys:
                    new[k] = 1
                    new[f"votes_{k}"] = "1 1 1"
                copies.append(new)
    aug = pd.concat([table, pd.DataFrame(copies)], ignore_index=True)
    args.out.mkdir(parents=True, exist_ok=True)
    aug.to_csv(args.out / "table.csv", index=False)
    new_split = dict(split) | {"train": list(split["train"]) + [c["id"] for c in copies]}
    (args.out / "split.json").write_text(json.dumps(new_split, indent=1) + "\n")
    n_typo = sum(c["id"].endswith("~typo") for c in copies)
    print(f"{len(train)} training answers; added {n_typo} typo copies and {len(copies) - n_typo} negated copies")


if __name__ == "__main__":
    main()
