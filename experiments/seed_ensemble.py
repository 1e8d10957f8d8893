"""Two trainings of one recipe read together: each answer's level shares p̂ averaged over the members, graded by the
first member's head (its LCEC and W, ``RecCBM.grade_from_concepts``), written as a pooled predictions file that
experiments/reader_compare.py pairs against either member.

The first member is a k-fold folder whose folds keep their weights (``fold-<i>/model.safetensors``); the others are
pooled predictions files of the same table and folds (their ``<KEY>_p<m>`` columns; e.g. a kept default's, whose
weights are not kept). Before anything else the first member's head is checked on its own p̂: it must give its own
grades back (it does, unless the file and the weights are not one run's).

    python experiments/seed_ensemble.py ../benchruns/s1-q/default \
        --with benchmarks/results/folds-by-question/default/pooled_predictions.csv --out ../benchruns/s1-q/ensemble
    python experiments/reader_compare.py ../benchruns/s1-q/ensemble --against benchmarks/results/folds-by-question/default \
        --truth benchmarks/results/folds-by-question/plain

Concept labels: majority vote over three LLM annotation passes, NOT validated by experts.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
from numpy.typing import NDArray

from experiments.reader_compare import pooled


def shares(df: pd.DataFrame, keys: list[str], levels: int) -> NDArray[Any]:
    """(N, K, M+1) level shares from a predictions file's ``<KEY>_p<m>`` columns (m = 1..M+1)."""
    return np.stack([df[[f"{k}_p{m}" for m in range(1, levels + 1)]].to_numpy(float) for k in keys], axis=1)


def graded(model: Any, p_hat: NDArray[Any]) -> NDArray[Any]:
    """The head's grade probabilities (N, S+1) for level shares ``p_hat`` (no concept observed)."""
    with torch.no_grad():
        out = model.grade_from_concepts(torch.as_tensor(p_hat, dtype=torch.float32))
    probs: NDArray[Any] = out.grade_logits.float().softmax(-1).numpy()
    return probs


def graded_rows(mine: pd.DataFrame, model: Any, keys: list[str], p_hat: NDArray[Any], lo: int, lo_level: int = 1
                ) -> pd.DataFrame:
    """A pooled predictions table for the answers ``mine`` (its id, fold and grade_oracle kept) read with the level
    shares ``p_hat`` (N, K, M+1): the grade the model's head gives them (``lo``: the lowest grade), each concept's
    level (argmax, from ``lo_level``) and its shares ``<KEY>_p<m>``."""
    out = mine[["id", "fold", "grade_oracle"]].copy()
    out["grade"] = graded(model, p_hat).argmax(-1) + lo
    for j, k in enumerate(keys):
        out[f"{k}_level"] = p_hat[:, j].argmax(-1) + lo_level
        for m in range(p_hat.shape[-1]):
            out[f"{k}_p{m + 1}"] = p_hat[:, j, m]
    return out


def ensemble(first: Path, others: list[pd.DataFrame]) -> tuple[pd.DataFrame, dict[str, Any]]:
    """The ensemble's pooled predictions (id, fold, grade, grade_oracle, ``<KEY>_level``, ``<KEY>_p<m>``) and a check
    of the first member's head on its own shares."""
    import reccbm

    base = pooled(first)
    parts, same, n = [], 0, 0
    for fold in sorted(base["fold"].unique()):
        model, _, meta = reccbm.load_checkpoint(first / f"fold-{int(fold)}")
        keys = list(meta["concept_keys"]) if "concept_keys" in meta else [
            c[: -len("_level")] for c in base.columns if c.endswith("_level")]
        levels = model.config.M + 1
        lo = int(meta.get("grade", [0])[0])
        mine = base[base["fold"] == fold].reset_index(drop=True)
        own = graded(model, shares(mine, keys, levels)).argmax(-1) + lo
        same += int((own == mine["grade"].to_numpy()).sum())
        n += len(mine)
        p = [shares(mine, keys, levels)]
        for other in others:
            o = mine[["id"]].merge(other, on="id", how="left")
            if o[f"{keys[0]}_p1"].isna().any():
                raise SystemExit(f"fold {fold}: an answer of {first} is missing from a --with file")
            p.append(shares(o, keys, levels))
        parts.append(graded_rows(mine, model, keys, np.mean(p, axis=0), lo))
    return pd.concat(parts, ignore_index=True), {"own_grades_reproduced": same / max(n, 1), "n": n}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run", type=Path, help="the first member: a k-fold folder whose folds keep their weights")
    ap.add_argument("--with", dest="others", type=Path, action="append", required=True,
                    help="another member's pooled_predictions.csv (repeatable)")
    ap.add_argument("--out", type=Path, required=True, help="folder for the ensemble's pooled_predictions.csv")
    a = ap.parse_args()
    target = (a.out / "pooled_predictions.csv").resolve()
    if a.out.resolve() == a.run.resolve() or target in {p.resolve() for p in a.others}:
        raise SystemExit(f"--out {a.out}: it would overwrite a member's predictions; give a folder of its own")
    table, check = ensemble(a.run, [pd.read_csv(p, dtype={"id": str}) for p in a.others])
    print(f"the first member's head on its own level shares gives its own grade for {check['own_grades_reproduced']:.3f} "
          f"of {check['n']} answers")
    a.out.mkdir(parents=True, exist_ok=True)
    table.to_csv(a.out / "pooled_predictions.csv", index=False)
    (a.out / "ensemble.json").write_text(json.dumps({"first": str(a.run), "with": [str(p) for p in a.others]} | check,
                                                    indent=1) + "\n")
    print(f"wrote {a.out / 'pooled_predictions.csv'} ({len(table)} answers)")


if __name__ == "__main__":
    main()
