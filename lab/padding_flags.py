"""How often the padding flags (``repeats_text``, ``keyword_list``; rubrictool/flags.py) fire on honest answers and
on the gaming probe's padded versions of them (rubrictool/audit.py's transformations), from the text alone:

    .venv/bin/python lab/padding_flags.py [--split test] [--seed 0]

Every Mohler answer (or the test split of the main job's 7:2:1 split, seed 0: the answers `rubrictool audit` games) is
an honest answer; each is padded by ``repeat_sentence`` (its first sentence three more times) and ``append_keywords``
(the reference's content words), and the other transformations are shown for comparison. Per version: the share
flagged by each padding flag, and by any flag that needs no trained run (copies_reference, copies_question and the
two padding flags). The flags read text only, so the share of padded answers flagged is the same for any grader; the
share of those whose grade rises that are flagged needs a run (`rubrictool audit` reports it as "flagged").
Writes benchmarks/results/integrity/padding_flags.json.
"""

from __future__ import annotations

import argparse
import json
import os
from datetime import date
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
os.environ.setdefault("RUBRICTOOL_DATA", str(ROOT.parent / "shared" / "datasets"))

from rubrictool.audit import TRANSFORMATIONS, transform
from rubrictool.data import load_benchmark, split_items
from rubrictool.flags import COPY_SHARE, copy_share, keyword_list, repeats_text
from rubrictool.provenance import git_revision

PADDING = ("repeat_sentence", "append_keywords")


def _flags(response: str, reference: str, question: str) -> dict[str, bool]:
    rep, kw = repeats_text(response), keyword_list(response, reference, question)
    copies = copy_share(reference, response) >= COPY_SHARE or copy_share(question, response) >= COPY_SHARE
    return {"repeats_text": rep, "keyword_list": kw, "any_text_flag": rep or kw or copies}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--split", choices=["all", "test"], default="all")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    items = load_benchmark("mohler")
    if args.split == "test":
        ids = set(split_items(items, seed=0)["test"])
        items = items[items["id"].astype(str).isin(ids)]
    rng = np.random.default_rng(args.seed)
    rows = items.fillna("").to_dict("records")
    versions: dict[str, list[dict[str, bool]]] = {"honest": []}
    examples: dict[str, list[str]] = {}
    for it in rows:
        item = {k: str(it.get(k, "")) for k in ("response", "reference", "question")}
        item["correct"] = item["reference"]
        versions["honest"].append(_flags(item["response"], item["reference"], item["question"]))
        for name in TRANSFORMATIONS:
            text = transform(name, item, rng)
            versions.setdefault(name, []).append(_flags(text, item["reference"], item["question"]))
            if name == "honest" or (versions[name][-1]["any_text_flag"] is False and name in PADDING):
                examples.setdefault(name, []).append(text[:200])
    out = {"measured": date.today().isoformat(), "revision": git_revision(), "answers": len(rows),
           "split": args.split, "seed": args.seed, "shares": {},
           "missed_examples": {k: v[:5] for k, v in examples.items()}}
    for name, flags in versions.items():
        out["shares"][name] = {f: round(float(np.mean([x[f] for x in flags])), 4) for f in flags[0]}
    honest_flagged = [x["repeats_text"] or x["keyword_list"] for x in versions["honest"]]
    out["honest_padding_flagged"] = round(float(np.mean(honest_flagged)), 4)
    print(f"{len(rows)} answers ({args.split}); share flagged (repeats_text / keyword_list / any text flag):")
    for name, s in out["shares"].items():
        print(f"  {name:18s} {s['repeats_text']:.3f} / {s['keyword_list']:.3f} / {s['any_text_flag']:.3f}")
    print(f"honest answers flagged by a padding flag: {out['honest_padding_flagged']:.3f}")
    dest = ROOT / "benchmarks" / "results" / "integrity" / f"padding_flags_{args.split}.json"
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {dest}")


if __name__ == "__main__":
    main()
