"""The other graded answers to the same question as a memory for the concept reader (not in the paper).

On a question the grader has trained on, its labelled answers to that question are at hand when a new answer to it
comes: each concept's level could also be read from the nearest of them. For each fold run given (a ``train --folds``
or ``benchmarks/folds.py`` fold with its weights), every answer's RACE vectors h_k (Eq. 10) are computed with the
fold's model; a test answer's k-nearest labelled answers (train + dev) to the same question, by the cosine of h_k,
give a level distribution q_k; the reader's p̂_k and q_k are mixed, p = (1 − β) p̂_k + β q_k, with β chosen on the dev
answers (against the training answers' memory) from a grid, one β for all concepts. Reported: C-Acc of p̂ and of p
on the test answers, paired (bootstrap over answers), per concept, and β.

    .venv/bin/python lab/question_memory.py /work/benchruns/cpu-rm/reader-align-soft-moments/fold-{0,1,2,3,4} \
        --out lab/results/question_memory_default_random.json

Concept labels: majority vote over three LLM annotation passes, NOT validated by experts.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

BETAS = [0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8]


def fold_vectors(run: Path) -> dict[str, Any]:
    """h_k (N, K, d) normalised, p̂ (N, K, M+1), levels (N, K) 0-based, question ids and split of one fold run."""
    import numpy as np
    import pandas as pd
    import torch

    from reccbm.checkpoint import load_checkpoint
    from reccbm.data import collate
    from rubrictool.grade import inputs_for

    model, tok, meta = load_checkpoint(run)
    df = pd.read_csv(run / "table.csv", dtype={"id": str, "question_id": str}, keep_default_na=False)
    split = json.loads((run / "split.json").read_text())
    keys = list(meta["concept_keys"])
    levels = df[keys].astype(int).to_numpy() - int(meta["scale"][0])  # the rubric's levels -> 0..M
    items = inputs_for(model, tok, df)
    import reccbm

    enc = reccbm.EncodedItems(items, levels)
    hs, ps = [], []
    with torch.inference_mode():
        for i in range(0, len(df), 64):
            batch = collate(enc, list(range(i, min(i + 64, len(df)))), tok.pad_token_id)
            H = model.token_states(batch)  # (B, T, d), Eq. 7
            logits, alpha = model.bottleneck(H, batch["attention_mask"])  # Eq. 9-11
            assert alpha is not None
            if model.align is not None:
                logits = logits + model.align(H, batch["input_ids"], batch["attention_mask"], alpha)
            h = torch.einsum("bkt,btd->bkd", alpha, H)  # (B, K, d), Eq. 10
            hs.append(torch.nn.functional.normalize(h, dim=-1).numpy())
            ps.append(logits.softmax(-1).numpy())
    return {"ids": df["id"].tolist(), "question": df["question_id"].tolist(), "h": np.concatenate(hs),
            "p": np.concatenate(ps), "levels": levels, "keys": keys, "split": split}


def memory(v: dict[str, Any], query: list[int], bank: list[int], k: int) -> Any:
    """q_k (len(query), K, M+1): the level shares of each query answer's k nearest bank answers to its question, by the
    cosine of h_k (uniform where the question has no bank answer)."""
    import numpy as np

    K, L = v["p"].shape[1], v["p"].shape[2]
    out = np.full((len(query), K, L), 1.0 / L)
    by_q: dict[str, list[int]] = {}
    for j in bank:
        by_q.setdefault(v["question"][j], []).append(j)
    for n, i in enumerate(query):
        same = [j for j in by_q.get(v["question"][i], []) if j != i]
        if not same:
            continue
        sims = np.einsum("kd,nkd->nk", v["h"][i], v["h"][same])  # (n, K)
        top = np.argsort(-sims, axis=0)[:k]  # (k', K)
        for c in range(K):
            lv = v["levels"][np.array(same)[top[:, c]], c]
            out[n, c] = np.bincount(lv, minlength=L)[:L] / len(lv)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+", type=Path, help="fold run directories (with model.safetensors, table.csv)")
    ap.add_argument("--k", type=int, default=5, help="nearest answers per concept (default 5)")
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args()

    import numpy as np
    import torch

    torch.set_num_threads(1)
    correct_p, correct_m, per_fold = [], [], []
    keys: list[str] = []
    for run in a.runs:
        v = fold_vectors(run)
        keys = v["keys"]
        pos = {i: n for n, i in enumerate(v["ids"])}
        tr = [pos[str(i)] for i in v["split"]["train"]]
        dv = [pos[str(i)] for i in v["split"]["dev"]]
        te = [pos[str(i)] for i in v["split"]["test"]]
        q_dev = memory(v, dv, tr, a.k)
        acc = {b: float(((((1 - b) * v["p"][dv] + b * q_dev).argmax(-1)) == v["levels"][dv]).mean()) for b in BETAS}
        beta = max(BETAS, key=lambda b: (acc[b], -b))
        q_te = memory(v, te, tr + dv, a.k)
        mixed = (1 - beta) * v["p"][te] + beta * q_te
        cp = v["p"][te].argmax(-1) == v["levels"][te]  # (n, K)
        cm = mixed.argmax(-1) == v["levels"][te]
        correct_p.append(cp)
        correct_m.append(cm)
        per_fold.append({"run": str(run), "beta": beta, "dev_c_acc": acc, "test_c_acc_reader": float(cp.mean()),
                         "test_c_acc_memory": float(cm.mean()), "test": len(te)})
        print(json.dumps(per_fold[-1]))
    cp, cm = np.concatenate(correct_p), np.concatenate(correct_m)
    rng = np.random.default_rng(0)
    diffs = [float(cm[i].mean() - cp[i].mean()) for i in (rng.integers(0, len(cp), len(cp)) for _ in range(2000))]
    out = {"k": a.k, "answers": len(cp), "c_acc_reader": float(cp.mean()), "c_acc_memory": float(cm.mean()),
           "difference": float(cm.mean() - cp.mean()), "ci95": [float(np.quantile(diffs, 0.025)),
                                                                 float(np.quantile(diffs, 0.975))],
           "per_concept": {k: [float(cp[:, c].mean()), float(cm[:, c].mean())] for c, k in enumerate(keys)},
           "folds": per_fold, "labels": "three LLM annotation passes' majority, not expert-validated"}
    print(json.dumps(out, indent=1))
    if a.out:
        from rubrictool.atomic import atomic_write_json

        atomic_write_json(a.out, out)


if __name__ == "__main__":
    main()
