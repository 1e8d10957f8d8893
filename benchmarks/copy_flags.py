"""Benchmark: how often ``copies_reference`` fires on honest answers, and how often it catches a pasted reference.

Honest answers: every Mohler answer (the 2,273 of ``rubrictool.data.load_mohler``) and a course of short factual
answers (tests/data/bio-quiz/bio-quiz.csv: 160 answers to 16 biology questions whose right answers mostly use the
expected answer's very words). The false-positive rate is the share of them flagged ``copies_reference`` by
``rubrictool.flags.flag_frame`` (no profile: the copy flags need none). A Mohler answer that does restate its reference
nearly word for word counts as a false positive here too, so the Mohler rate is an upper bound.

Pasted references: for every distinct reference of both courses, four copies a student could hand in: the reference
alone, the reference with a few words before and after it, and near-verbatim copies with one and with two of its
words changed (positions and replacement words drawn with a fixed seed). The detection rate is the share flagged
``copies_reference``, over every reference and over those of ``COPY_MIN_WORDS`` words or more (a shorter reference
is what a short right answer says: the flag, by design, does not fire on it, and a pasted short reference is a right
answer's mark).

Run: .venv/bin/python benchmarks/copy_flags.py [--data-dir ../shared/datasets] [--out benchmarks/out/copy_flags.json]
``--smoke``: the synthetic Mohler-like table and the quiz, results to a temporary folder.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from rubrictool.atomic import atomic_write_text
from rubrictool.data import load_mohler, synthetic_mohler_table
from rubrictool.data.importer import read_course_file
from rubrictool.flags import COPY_MIN_WORDS, flag_frame, words

QUIZ = Path(__file__).resolve().parent.parent / "tests" / "data" / "bio-quiz" / "bio-quiz.csv"
FILLER = ["it", "was", "some", "many", "other", "thing", "also", "very", "just", "this"]


def flagged(items: pd.DataFrame, flag: str = "copies_reference") -> np.ndarray[Any, np.dtype[np.bool_]]:
    """Per row of ``items`` (response, reference, question), whether ``flag`` fires."""
    col = flag_frame(items, pd.DataFrame({"grade": np.zeros(len(items))}), [], None)
    return col.str.split(";").map(lambda fs: flag in fs).to_numpy(dtype=bool)


def pasted(reference: str, rng: np.random.Generator) -> dict[str, str]:
    """Four copies of ``reference`` a student could hand in."""
    toks = words(reference)

    def changed(n: int) -> str:
        out = list(toks)
        for pos in rng.choice(len(out), size=min(n, len(out)), replace=False):
            out[int(pos)] = str(rng.choice([w for w in FILLER if w != out[int(pos)]]))
        return " ".join(out)

    return {"alone": reference, "with_a_few_words": f"I think {reference} and that is it",
            "one_word_changed": changed(1), "two_words_changed": changed(2)}


def rates(name: str, honest: pd.DataFrame, seed: int = 0) -> dict[str, Any]:
    """False-positive rate on ``honest`` and the detection of its references pasted."""
    fp = flagged(honest)
    refs = honest.drop_duplicates("reference")[["question", "reference"]]
    rng = np.random.default_rng(seed)
    rows = [{"question": q, "reference": r, "kind": k, "response": text, "long": len(words(r)) >= COPY_MIN_WORDS}
            for q, r in zip(refs["question"], refs["reference"]) for k, text in pasted(r, rng).items()]
    copies = pd.DataFrame(rows)
    copies["flagged"] = flagged(copies)
    long = copies[copies["long"]]
    return {"course": name, "honest_answers": len(honest), "false_positives": int(fp.sum()),
            "false_positive_rate": float(fp.mean()), "references": len(refs),
            "references_long": int(refs["reference"].map(lambda r: len(words(r)) >= COPY_MIN_WORDS).sum()),
            "detected_all": float(copies["flagged"].mean()),
            "detected_long": float(long["flagged"].mean()) if len(long) else None,
            "detected_long_by_kind": long.groupby("kind")["flagged"].mean().to_dict() if len(long) else {},
            "false_positive_examples": honest.loc[fp, "response"].head(5).tolist()}


def markdown(results: list[dict[str, Any]]) -> str:
    head = ("| course | honest answers | flagged `copies_reference` | pasted references flagged (all) | "
            f"pasted references flagged (≥ {COPY_MIN_WORDS} words) |")
    lines = [head, "|---|---|---|---|---|"]
    for r in results:
        long = "—" if r["detected_long"] is None else f"{r['detected_long']:.1%} of {4 * r['references_long']}"
        lines.append(f"| {r['course']} | {r['honest_answers']} | {r['false_positives']} "
                     f"({r['false_positive_rate']:.1%}) | {r['detected_all']:.1%} of {4 * r['references']} | {long} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data-dir", default=None, help="where mohler/ is (default: $RUBRICTOOL_DATA)")
    ap.add_argument("--out", type=Path, default=Path("benchmarks/out/copy_flags.json"))
    ap.add_argument("--smoke", action="store_true", help="the synthetic Mohler-like table; results to a temp folder")
    args = ap.parse_args()
    mohler = synthetic_mohler_table(40) if args.smoke else load_mohler(args.data_dir)
    quiz = read_course_file(QUIZ).items
    results = [rates("Mohler (synthetic)" if args.smoke else "Mohler", mohler[["question", "reference", "response"]]),
               rates("bio-quiz (short factual answers)", quiz[["question", "reference", "response"]])]
    out = Path(tempfile.mkdtemp()) / "copy_flags.json" if args.smoke else args.out
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out, json.dumps(results, indent=2) + "\n")
    print(markdown(results))
    for r in results:
        print(f"{r['course']}: by kind (long references) {r['detected_long_by_kind']}")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
