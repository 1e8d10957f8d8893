"""How many of the behavioural suite's one-letter typos the input rule reads back to the word as written, with the
encoder's vocabulary alone (``model.normalise``) and with a course lexicon (``model.course_words``), no model needed.

    python lab/typo_readback.py TABLE.csv [--backbone PATH] [--min-answers 2] [--split split.json]

Every answer of the table gets the suite's typo edit (:func:`rubrictool.behaviour.edit`, seed 0, one draw per answer);
a typo is read back when the normalised edited answer equals the normalised answer. The lexicon comes from the
table's answers, or with ``--split`` from its train and dev answers only (a run's), and the typos from its test
answers. Concept labels play no part.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np
import pandas as pd

import reccbm
from reccbm.normalise import normaliser_for
from rubrictool.behaviour import edit


def read_back(table: pd.DataFrame, lexicon_rows: pd.DataFrame, test_rows: pd.DataFrame, backbone: str,
              min_answers: int) -> dict[str, float]:
    tok = reccbm.load_tokenizer(backbone)
    lexicon = reccbm.table_lexicon(tok, lexicon_rows, min_answers)
    readers = {"vocabulary": normaliser_for(tok), "lexicon": normaliser_for(tok, lexicon)}
    hits = dict.fromkeys(readers, 0)
    n = 0
    for i, r in enumerate(test_rows.to_dict(orient="records")):
        q, a, ref = str(r["question"]), str(r["response"]), str(r.get("reference") or "")
        typo = edit("typo", {"response": a, "question": q, "reference": ref}, np.random.default_rng([0, i]))
        if typo is None:
            continue
        n += 1
        for name, read in readers.items():
            hits[name] += read(typo, q, ref) == read(a, q, ref)
    return {"typos": n, "lexicon_words": len(lexicon), **{f"read_back_{k}": v / max(n, 1) for k, v in hits.items()}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("table", type=Path)
    ap.add_argument("--backbone", default="")
    ap.add_argument("--min-answers", type=int, default=2)
    ap.add_argument("--split", type=Path)
    a = ap.parse_args()
    table = pd.read_csv(a.table, keep_default_na=False, dtype={"id": str})
    missing = [c for c in ("id", "question", "response") if c not in table.columns]
    if missing:
        raise SystemExit(f"{a.table}: no column {', '.join(missing)}; pass a table in rubrictool's layout "
                         "(`rubrictool data import` writes one from a spreadsheet)")
    learn, test = table, table
    if a.split:
        split = json.loads(a.split.read_text(encoding="utf-8"))
        learn = table[table["id"].isin([*split["train"], *split.get("dev", [])])]
        test = table[table["id"].isin(split["test"])]
    out = read_back(table, learn, test, a.backbone or reccbm.default_backbone(), a.min_answers)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
