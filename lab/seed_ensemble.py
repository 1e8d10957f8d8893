"""Trainings read together: each answer's level shares p̂ averaged over the members, graded by the
first member's head (its LCEC and W, ``RecCBM.grade_from_concepts``), written as a pooled predictions file that
lab/reader_compare.py pairs against either member.

The first member is a k-fold folder whose folds keep their weights (``fold-<i>/model.safetensors``); the others are
pooled predictions files of the same table and folds (their ``<KEY>_p<m>`` columns; e.g. a kept default's, whose
weights are not kept). Before anything else the first member's head is checked on its own p̂: it must give its own
grades back (it does, unless the file and the weights are not one run's).

    python lab/seed_ensemble.py ../benchruns/s1-q/default \
        --with benchmarks/results/folds-by-question/default/pooled_predictions.csv --out ../benchruns/s1-q/ensemble
    python lab/reader_compare.py ../benchruns/s1-q/ensemble --against benchmarks/results/folds-by-question/default \
        --truth benchmarks/results/folds-by-question/plain

Without a first member (no weights, no head: ``--with`` files only), the members' level shares are averaged for the
concepts alone: the pooled file keeps each answer's ``<KEY>_p<m>``, ``<KEY>_level``, ``<KEY>_expected`` and the gold
``<KEY>_true`` (lab/question_offsets.py reads it), and the summary gives each member's C-Acc, the mean's, and
the mean's paired bootstrap 95 % CI against the members' mean and against the best member. It asks how much of a
reader's error its trainings share: what averaging many trained readers leaves is not their seeds' noise.

    python lab/seed_ensemble.py --with benchmarks/results/folds-by-question/default/pooled_predictions.csv \
        --with benchmarks/results/folds-by-question/default-train-seed1/pooled_predictions.csv --out
        ../benchruns/together

Concept labels: majority vote over three LLM annotation passes, NOT validated by experts.
"""

from __future__ import annotations

import argparse
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
from numpy.typing import NDArray
from reader_compare import pooled


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


def _c_acc(p: NDArray[Any], t: NDArray[Any], lo: int) -> float:
    return float((p.argmax(-1) + lo == t).mean())


def concepts_together(members: list[pd.DataFrame], names: list[str], n_boot: int = 2000, seed: int = 0
                      ) -> tuple[pd.DataFrame, dict[str, Any]]:
    """The members' level shares averaged, concepts only: a pooled table (id, fold, ``<KEY>_p<m>``, ``<KEY>_level``,
    ``<KEY>_expected``, ``<KEY>_true``) and a summary (each member's C-Acc, the mean's, paired bootstrap 95 % CIs of
    the mean against the members' mean and the best member). Every member must hold the same answers in the same
    folds, with the gold levels (``<KEY>_true``) in the first."""
    if len(members) < 2:
        raise SystemExit("give two or more --with files to read together")
    first = members[0]
    keys = [c[: -len("_true")] for c in first.columns if c.endswith("_true") and f"{c[:-5]}_p1" in first]
    if not keys:
        raise SystemExit(f"{names[0]}: no <KEY>_true with <KEY>_p1 beside it; give a k-fold run's "
                         "pooled_predictions.csv")
    levels = max(int(c.rsplit("_p", 1)[1]) for c in first.columns
                 if c.startswith(f"{keys[0]}_p") and c.rsplit("_p", 1)[1].isdigit())
    base = first.sort_values("id").reset_index(drop=True)
    if f"{keys[0]}_level" in base:  # the lowest level: a level is its shares' argmax from there
        lo = int((base[f"{keys[0]}_level"] - shares(base, keys[:1], levels)[:, 0].argmax(-1)).mode()[0])
    else:
        lo = int(min(base[f"{k}_true"].min() for k in keys))
    p = []
    for name, member in zip(names, members):
        lacking = [c for c in ("id", *(f"{k}_p{m}" for k in keys for m in range(1, levels + 1))) if c not in member]
        if lacking:
            raise SystemExit(f"{name}: no column {lacking[0]}; give a k-fold run's pooled_predictions.csv of the same "
                             "rubric")
        one = base[["id", "fold"]].merge(member, on="id", how="left", suffixes=("", "_m"))
        if one[f"{keys[0]}_p1"].isna().any() or len(one) != len(base):
            raise SystemExit(f"{name}: it lacks answers of {names[0]}; give runs of one table")
        if "fold_m" in one and not (one["fold_m"] == one["fold"]).all():
            raise SystemExit(f"{name}: its folds are not {names[0]}'s (another split); give runs of one split")
        p.append(shares(one, keys, levels))
    t = base[[f"{k}_true" for k in keys]].to_numpy(int)
    mean = np.mean(p, axis=0)
    table = base[["id", "fold"]].copy()
    for j, k in enumerate(keys):
        for m in range(levels):
            table[f"{k}_p{m + 1}"] = mean[:, j, m]
        table[f"{k}_level"] = mean[:, j].argmax(-1) + lo
        table[f"{k}_expected"] = mean[:, j] @ np.arange(lo, lo + levels, dtype=float)
        table[f"{k}_true"] = t[:, j]
    each = {n: _c_acc(x, t, lo) for n, x in zip(names, p)}
    best = max(each, key=lambda n: each[n])
    rng = np.random.default_rng(seed)
    vs_mean, vs_best = [], []
    for _ in range(n_boot):
        i = rng.integers(0, len(t), len(t))
        c = _c_acc(mean[i], t[i], lo)
        vs_mean.append(c - float(np.mean([_c_acc(x[i], t[i], lo) for x in p])))
        vs_best.append(c - _c_acc(p[names.index(best)][i], t[i], lo))
    together = _c_acc(mean, t, lo)

    def ci(point: float, d: list[float]) -> dict[str, float]:
        return {"diff": point, "lo": float(np.percentile(d, 2.5)), "hi": float(np.percentile(d, 97.5))}

    summary = {"answers": len(t), "members": each, "c_acc": together,
               "per_concept": {k: float((mean[:, j].argmax(-1) + lo == t[:, j]).mean()) for j, k in enumerate(keys)},
               "vs_members_mean": ci(together - float(np.mean(list(each.values()))), vs_mean),
               "best_member": best, "vs_best_member": ci(together - each[best], vs_best)}
    return table, summary


def _read(path: Path) -> pd.DataFrame:
    try:
        return pd.read_csv(path, dtype={"id": str})
    except (OSError, ValueError) as exc:
        raise SystemExit(f"--with {path}: cannot read it ({exc.__class__.__name__}); give a "
                         "pooled_predictions.csv") from None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run", type=Path, nargs="?", default=None,
                    help="the first member: a k-fold folder whose folds keep their weights (none: concepts only)")
    ap.add_argument("--with", dest="others", type=Path, action="append", required=True,
                    help="another member's pooled_predictions.csv (repeatable)")
    ap.add_argument("--out", type=Path, required=True, help="folder for the ensemble's pooled_predictions.csv")
    a = ap.parse_args()
    target = (a.out / "pooled_predictions.csv").resolve()
    if (a.run is not None and a.out.resolve() == a.run.resolve()) or target in {p.resolve() for p in a.others}:
        raise SystemExit(f"--out {a.out}: it would overwrite a member's predictions; give a folder of its own")
    from rubrictool.atomic import atomic_write, atomic_write_json

    if a.run is None:
        table, summary = concepts_together([_read(p) for p in a.others], [str(p) for p in a.others])
        for name, c in summary["members"].items():
            print(f"{name}: C-Acc {c:.3f}")
        vm, vb = summary["vs_members_mean"], summary["vs_best_member"]
        print(f"the {len(a.others)} read together: C-Acc {summary['c_acc']:.3f}; against the members' mean "
              f"{vm['diff']:+.3f} [{vm['lo']:+.3f}, {vm['hi']:+.3f}], against the best member {vb['diff']:+.3f} "
              f"[{vb['lo']:+.3f}, {vb['hi']:+.3f}]")
        atomic_write(target, partial(table.to_csv, index=False))
        atomic_write_json(a.out / "ensemble.json", {"with": [str(p) for p in a.others]} | summary)
        print(f"wrote {target} ({len(table)} answers)")
        return
    table, check = ensemble(a.run, [_read(p) for p in a.others])
    print("the first member's head on its own level shares gives its own grade for "
          f"{check['own_grades_reproduced']:.3f} of {check['n']} answers")
    atomic_write(target, partial(table.to_csv, index=False))  # whole files or none: reader_compare reads them
    atomic_write_json(a.out / "ensemble.json", {"first": str(a.run), "with": [str(p) for p in a.others]} | check)
    print(f"wrote {target} ({len(table)} answers)")


if __name__ == "__main__":
    main()
