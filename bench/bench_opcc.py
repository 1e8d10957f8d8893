"""How much OPCC acts in Stage I: the size of λ_r L_rank next to λ_c L_con, in loss and in gradient.

On Mohler fold 0 (``kfold_splits(k=5, seed=0)``), over training batches of 8 in the length-grouped order
Stage I uses, for two states of the model: the default preset at initialisation (rubric queries, before
any training) and a trained run directory (by default the default preset's fold 0 of bench_folds.py). For
each batch it takes the gradient of λ_c L_con (Eq. 12, summed over concepts as in the paper, and averaged
as in the default preset) and of λ_r L_rank (Eq. 16) with respect to every Stage I parameter (encoder,
queries, concept classifiers), and reports the mean loss values and the ratio of gradient norms
‖∇ λ_r L_rank‖ / ‖∇ λ_c L_con‖, and the cosine between the two gradients.

    RUBRICTOOL_DATA=../shared/datasets .venv/bin/python bench/bench_opcc.py --batches 40

Concept labels: majority vote over three LLM annotation passes, NOT validated by experts.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np
import torch


def grad_vector(model: Any, loss: torch.Tensor) -> torch.Tensor:
    params = [p for p in model.parameters() if p.requires_grad]
    grads = torch.autograd.grad(loss, params, retain_graph=True, allow_unused=True)
    return torch.cat([g.reshape(-1) for g in grads if g is not None])


def measure(model: Any, items: Any, pad: int, batches: int, lambda_r: float) -> dict[str, float]:
    from reccbm.data import collate
    from reccbm.model import concept_loss, opcc_loss
    from reccbm.train import _LengthGroupedBatches

    model.train()
    for p in model.parameters():
        p.requires_grad_(True)
    lengths = [len(f["input_ids"]) for f in items.features]
    rows = []
    for i, idx in enumerate(_LengthGroupedBatches(lengths, 8, seed=0)):
        if i >= batches:
            break
        batch = collate(items, idx, pad)
        out = model(batch)
        c = batch["concepts"]
        terms = {"sum": concept_loss(out.concept_logits, c, "sum"), "mean": concept_loss(out.concept_logits, c, "mean"),
                 "rank": lambda_r * opcc_loss(out.c_hat, c)}
        g = {k: grad_vector(model, v) for k, v in terms.items()}
        rows.append({
            "L_con_sum": terms["sum"].item(), "L_con_mean": terms["mean"].item(), "lr_L_rank": terms["rank"].item(),
            "grad_ratio_sum": float(g["rank"].norm() / g["sum"].norm()),
            "grad_ratio_mean": float(g["rank"].norm() / g["mean"].norm()),
            "cosine": float(torch.nn.functional.cosine_similarity(g["rank"], g["mean"], dim=0)),
        })
    return {k: float(np.mean([r[k] for r in rows])) for k in rows[0]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trained", type=Path, default=Path("bench/results/folds/default/fold-0"))
    ap.add_argument("--batches", type=int, default=40)
    ap.add_argument("--data-dir", default=os.environ.get("RUBRICTOOL_DATA", "../shared/datasets"))
    a = ap.parse_args()
    import reccbm
    from rubrictool.data import kfold_splits
    from rubrictool.pipeline import benchmark_table
    from rubrictool.train import _encode, concept_texts, prepare_table, preset_config

    torch.manual_seed(0)
    rb, table, _ = benchmark_table("mohler", a.data_dir)
    train_ids = kfold_splits(table, k=5, seed=0)[0]["train"]
    df = prepare_table(table, rb).set_index("id", drop=False).loc[train_ids].reset_index(drop=True)
    cfg = preset_config("default")
    lambda_r = float(cfg["stage1"]["lambda_r"])
    mcfg = reccbm.ModelConfig(**(cfg["model"] | {"num_concepts": rb.K, "num_levels": rb.M + 1, "num_grades": rb.S + 1}))
    tok = reccbm.load_tokenizer(reccbm.default_backbone())
    items = _encode(df, rb, tok, mcfg.max_len, True)
    fresh = reccbm.RecCBM(mcfg, reccbm.TextEncoder.from_pretrained(reccbm.default_backbone()))
    reccbm.init_rubric_queries(fresh, tok, concept_texts(rb))
    states = {"default preset, at initialisation": fresh}
    if (a.trained / "model.safetensors").is_file():
        states[f"trained ({a.trained})"] = reccbm.load_checkpoint(a.trained)[0]
    print(f"λ_r = {lambda_r}; {a.batches} training batches of 8 (fold 0)")
    print("| model | L_con summed | L_con averaged | λ_r L_rank | ‖∇λ_r L_rank‖ / ‖∇L_con‖, summed | … averaged | "
          "cos(∇L_rank, ∇L_con) |\n|---|---|---|---|---|---|---|")
    results = {}
    for name, model in states.items():
        m = measure(model, items, tok.pad_token_id, a.batches, lambda_r)
        results[name] = m
        print(f"| {name} | {m['L_con_sum']:.3f} | {m['L_con_mean']:.3f} | {m['lr_L_rank']:.3f} | "
              f"{m['grad_ratio_sum']:.3f} | {m['grad_ratio_mean']:.3f} | {m['cosine']:.3f} |", flush=True)
    out = Path("bench/results/opcc_share.json")
    out.write_text(json.dumps({"lambda_r": lambda_r, "batches": a.batches, "results": results}, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    sys.exit(main())
