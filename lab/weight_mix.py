"""The fine-tuned encoder's weights mixed back with the pretrained ones, read on a k-fold run's test answers.

Fine-tuning moves the encoder toward what the training questions' answers share; on inputs unlike the training ones a
model whose weights are interpolated between the pretrained and the fine-tuned ones, θ_λ = (1 − λ) θ_pre + λ θ_ft,
often reads better than either end (WiSE-FT: Wortsman et al., "Robust fine-tuning of zero-shot models", CVPR 2022).
This script reads each fold's test answers with its encoder so mixed, for every λ given, keeps every head the fold
trained (RACE queries, concept classifiers, alignment weights, LCEC, grade head), grades the level shares with the
fold's own head (``RecCBM.grade_from_concepts``) and writes one pooled predictions file per λ that
lab/reader_compare.py pairs against the run's own reading (λ = 1). No training: a fold costs one reading of
its test answers per λ.

Before anything else each fold's model reads its test answers with its own weights and must give the run's kept
levels back (it does, unless the weights and the predictions are not one run's).

    python lab/weight_mix.py ../benchruns/ord-q/default-ordinal --mix 0.5,0.7,0.85 --out ../benchruns/ord-q/mix
    python lab/reader_compare.py ../benchruns/ord-q/mix/mix-0.85 --against ../benchruns/ord-q/default-ordinal \
        --truth benchmarks/results/folds-by-question/plain

Concept labels of the Mohler runs: majority vote over three LLM annotation passes, NOT validated by experts.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
from mc_dropout import load_fold, read_shares
from reader_compare import pooled
from seed_ensemble import graded_rows


def parse_mix(text: str) -> list[float]:
    """"0.5,0.8" -> [0.5, 0.8]; each λ in [0, 1] (0: the pretrained encoder, 1: the fine-tuned one)."""
    try:
        mix = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise SystemExit(f"--mix {text!r}: give weights of the fine-tuned encoder between 0 and 1, e.g. "
                         "0.5,0.8") from None
    bad = [m for m in mix if not 0 <= m <= 1]
    if not mix or bad:
        raise SystemExit(f"--mix {text!r}: give weights of the fine-tuned encoder between 0 and 1, e.g. 0.5,0.8")
    return mix


def mixed_state(pre: dict[str, torch.Tensor], ft: dict[str, torch.Tensor], lam: float) -> dict[str, torch.Tensor]:
    """θ_λ = (1 − λ) θ_pre + λ θ_ft for every floating tensor; integer buffers (position ids) are the fine-tuned
    ones."""
    missing = sorted(set(ft) - set(pre))
    if missing:
        raise SystemExit(f"the pretrained encoder lacks {len(missing)} of the fine-tuned one's tensors "
                         f"(first: {missing[0]}); give a run trained from that backbone")
    return {k: torch.lerp(pre[k].to(v.dtype), v, lam) if v.is_floating_point() else v for k, v in ft.items()}


def mix_run(run: Path, mix: list[float], backbone: str | None = None, progress: Callable[[str], None] | None = None
            ) -> tuple[dict[float, pd.DataFrame], dict[str, Any]]:
    """The run's test answers read with the encoder mixed at each λ of ``mix``: pooled predictions per λ (id, fold,
    grade, grade_oracle, ``<KEY>_level``, ``<KEY>_p<m>``) and the check of each fold's own reading. ``backbone``: the
    pretrained encoder (default: the one the run names, MiniLM where it names none)."""
    import reccbm
    from reccbm.encoder import TextEncoder, default_backbone
    from rubrictool.grade import inputs_for

    base = pooled(run)
    parts: dict[float, list[pd.DataFrame]] = {m: [] for m in mix}
    same, n = 0, 0
    pre: dict[str, torch.Tensor] | None = None
    for fold in sorted(base["fold"].unique()):
        model, tokenizer, meta, table = load_fold(run / f"fold-{int(fold)}")
        if pre is None:
            pre = {k: v.detach().clone() for k, v in TextEncoder.from_pretrained(
                backbone or model.config.backbone or default_backbone()).state_dict().items()}
        keys = list(meta["concept_keys"])
        lo_c = int(meta.get("scale", [1])[0])
        lo = int(meta.get("grade", [0])[0])
        mine = base[base["fold"] == fold].reset_index(drop=True)
        items = reccbm.EncodedItems(inputs_for(model, tokenizer, table.loc[mine["id"]].reset_index()))
        ft = {k: v.detach().clone() for k, v in model.encoder.state_dict().items()}
        once = read_shares(model, items, tokenizer.pad_token_id, 0, 0)[0]
        kept = np.stack([mine[f"{k}_level"].to_numpy(int) for k in keys], axis=1)
        same += int((once.argmax(-1) + lo_c == kept).sum())
        n += kept.size
        for m in mix:
            model.encoder.load_state_dict(mixed_state(pre, ft, m))
            parts[m].append(graded_rows(mine, model, keys, read_shares(model, items, tokenizer.pad_token_id, 0, 0)[0],
                                        lo, lo_c))
        model.encoder.load_state_dict(ft)
        if progress is not None:
            progress(f"fold {int(fold)}: {len(mine)} answers read at {len(mix)} mixes")
    return ({m: pd.concat(p, ignore_index=True) for m, p in parts.items()},
            {"own_levels_reproduced": same / max(n, 1), "levels": n, "mix": mix})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run", type=Path, help="a k-fold folder whose folds keep their weights")
    ap.add_argument("--mix", default="0.5,0.7,0.85", help="weights λ of the fine-tuned encoder, comma-separated")
    ap.add_argument("--backbone", default=None, help="the pretrained encoder (default: the run's own)")
    ap.add_argument("--out", type=Path, required=True, help="folder for one mix-<λ>/pooled_predictions.csv per λ")
    a = ap.parse_args()
    mix = parse_mix(a.mix)
    if a.out.resolve() == a.run.resolve():
        raise SystemExit(f"--out {a.out}: it would overwrite the run's own predictions; give a folder of its own")
    from rubrictool.atomic import atomic_write, atomic_write_json

    tables, check = mix_run(a.run, mix, a.backbone, progress=print)
    print(f"read with its own weights, each fold gives its kept level for {check['own_levels_reproduced']:.3f} of "
          f"{check['levels']} (answer, concept) pairs")
    for m, table in tables.items():  # whole files or none: reader_compare must never read half of one
        path = atomic_write(a.out / f"mix-{m:g}" / "pooled_predictions.csv", partial(table.to_csv, index=False))
        print(f"wrote {path} ({len(table)} answers)")
    atomic_write_json(a.out / "weight_mix.json", {"run": str(a.run)} | check)


if __name__ == "__main__":
    main()
