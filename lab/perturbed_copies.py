"""Training on perturbed copies: typo, name and sentence-order copies (same levels), negated copies (lower levels).

An experiment on issue "marks that move for the right reasons". From a k-fold split's training part it adds
* a typo copy of a share of the training answers: one word of five or more letters that is not a word of the question
  or the reference gets two neighbouring letters swapped; every level and the grade are kept (a typo changes nothing);
* a negated copy of each training answer marked correct (``--negate-concepts`` at the top level, grade at least
  ``--negate-min-grade``) that has an "is/are/does/can/will/has/have": "not" inserted after the first one; those
  concepts go to the bottom level and the grade to ``--negated-grade`` (the claim is reversed: a heuristic label,
  stated as such);
with ``--negation symmetric`` also, so that the reader cannot take the word "not" for the claim:
* a copy of each training answer marked correct whose claim carries a negation ("is not", "cannot", "doesn't", …) with
  the negation taken out (``affirm``): the same concepts at the bottom and the same grade as a negated copy (heuristic);
* a copy of as many training answers marked correct as got a "not" of a sentence that says "not" about nothing the
  answer claims (``HARMLESS``), appended: every level and the grade kept;
with ``--name-share`` / ``--order-share``, copies that must read the same (every level and the grade kept):
* the student's name or id written into the answer, in forms and with names the behavioural suite does not use
  (``signed``: "Name: Ana Silva\n…", "… - A. Silva", "ID 48213. …", "(Silva, Ana) …"), so the suite's
  ``student_name`` test still measures a form the reader never saw;
* the sentences of an answer of two or more sentences put in another order (``reordered``: shuffled, not the suite's
  rotation, though a shuffle of two sentences is one);
``--negation none`` leaves the negated copies out (invariance copies alone);
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

from reccbm.views import name_view as signed
from reccbm.views import order_view as reordered
from reccbm.views import typo_view as typo
from rubrictool.adjudicate import adjudicate_benchmark_labels

AUX = re.compile(r"\b(is|are|does|can|will|has|have)\b", re.IGNORECASE)


def negate(text: str) -> str | None:
    """"not" after the first is/are/does/can/will/has/have (None: there is none)."""
    m = AUX.search(text)
    if m is None:
        return None
    return text[: m.end()] + " not" + text[m.end():]


NEGATED = re.compile(r"\b(is|are|does|do|can|will|has|have|was|were|should|must) not\b|\bcannot\b"
                     r"|\b(is|are|does|do|ca|wo|has|have|was|were|should)n['’]t\b", re.IGNORECASE)
_AFFIRMED = {"ca": "can", "wo": "will"}
HARMLESS = ("I am not sure I said it all.", "Not much else to add.", "I do not have more to say on it.",
            "This is not all of it, but it is the main point.", "I hope this is not too short.")


def affirm(text: str) -> str | None:
    """The first negation of ``text`` taken out: "is not" → "is", "cannot" → "can", "doesn't" → "does" (None: there
    is none)."""
    m = NEGATED.search(text)
    if m is None:
        return None
    found = m.group(0)
    if found.lower() == "cannot":
        plain = found[:3]
    elif m.group(1):
        plain = m.group(1)
    else:
        aux = m.group(2)
        plain = _AFFIRMED.get(aux.lower(), aux)
        plain = plain[0].upper() + plain[1:] if aux[0].isupper() else plain
    return text[: m.start()] + plain + text[m.end():]


def harmless(text: str, rng: random.Random) -> str:
    """``text`` with a sentence appended that says "not" about nothing the answer claims."""
    body = text.rstrip()
    stop = "" if body.endswith((".", "!", "?")) else "."
    return f"{body}{stop} {rng.choice(HARMLESS)}"


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
    ap.add_argument("--negation", choices=("insert", "symmetric", "none"), default="insert",
                    help="insert: 'not' inserted into correct answers; symmetric: also taken out of those that have "
                         "one, and a harmless 'not' sentence appended to as many correct answers (levels kept); "
                         "none: no negated copies")
    ap.add_argument("--name-share", type=float, default=0.0,
                    help="the share of training answers copied with a name or id written in (levels kept)")
    ap.add_argument("--order-share", type=float, default=0.0,
                    help="the share of multi-sentence training answers copied with their sentences in another order")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    if not args.split.is_file():
        raise SystemExit(f"{args.split}: no such split file (give a k-fold run's fold-<i>.split.json)")
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
        if args.name_share and rng.random() < args.name_share:  # no draw at 0: earlier tables stay as made
            copies.append(row.to_dict() | {"id": f"{row['id']}~name", "response": signed(str(row["response"]), rng),
                                           "method": "copy"})
        if args.order_share and rng.random() < args.order_share:
            r = reordered(str(row["response"]), rng)
            if r is not None:
                copies.append(row.to_dict() | {"id": f"{row['id']}~order", "response": r, "method": "copy"})
        if args.negation == "none":
            continue
        if row["grade"] >= args.negate_min_grade and all(row[k] == 3 for k in negated_keys):
            text = str(row["response"])
            n = affirm(text) if args.negation == "symmetric" and NEGATED.search(text) else negate(text)
            if n is not None:
                new = row.to_dict() | {"id": f"{row['id']}~not", "response": n, "grade": args.negated_grade,
                                       "method": "copy"}
                for k in negated_keys:
                    new[k] = 1
                    new[f"votes_{k}"] = "1 1 1"
                copies.append(new)
                if args.negation == "symmetric":
                    copies.append(row.to_dict() | {"id": f"{row['id']}~harmless", "response": harmless(text, rng),
                                                   "method": "copy"})
    aug = pd.concat([table, pd.DataFrame(copies)], ignore_index=True)
    args.out.mkdir(parents=True, exist_ok=True)
    aug.to_csv(args.out / "table.csv", index=False)
    new_split = dict(split) | {"train": list(split["train"]) + [c["id"] for c in copies]}
    (args.out / "split.json").write_text(json.dumps(new_split, indent=1) + "\n")
    added = {kind: sum(c["id"].endswith(f"~{kind}") for c in copies)
             for kind in ("typo", "name", "order", "not", "harmless")}
    print(f"{len(train)} training answers; added {added['typo']} typo copies, {added['name']} with a name or id, "
          f"{added['order']} with the sentences reordered, {added['not']} with the claim reversed and "
          f"{added['harmless']} with a harmless 'not' sentence")


if __name__ == "__main__":
    main()
