"""Where a Stage I step of the default goes on this machine: torch's profiler over a few optimiser steps (forward with
the examples across questions, backward, clipping, AdamW), the ops with the most CPU time, and one AdamW step of the
encoder's weights with torch's per-tensor loop, ``foreach`` and the fused kernel (``stage1.fused_optimizer``).

    .venv/bin/python experiments/step_profile.py --steps 14 --threads 2
    .venv/bin/python experiments/step_profile.py --steps 14 --loop      # the step with the per-tensor AdamW loop

The batches are Mohler answers of similar length (as ``stage1.group_by_length`` makes them), shortest first.
Concept labels: majority vote over three LLM annotation passes, NOT validated by experts.
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=14, help="profiled steps (after two unprofiled ones)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--loop", action="store_true", help="AdamW as torch's per-tensor loop (stage1.fused_optimizer off)")
    ap.add_argument("--rows", type=int, default=15, help="ops listed")
    ap.add_argument("--data-dir", default=os.environ.get("RUBRICTOOL_DATA", "../shared/datasets"))
    a = ap.parse_args()
    if a.steps < 1 or a.threads < 1:
        ap.error("--steps and --threads are at least 1")

    import numpy as np
    import torch
    from torch.profiler import ProfilerActivity, profile

    import reccbm
    from reccbm.align import separator_id
    from reccbm.data import collate
    from reccbm.recipes import recipe
    from reccbm.train import _optimizer, _stage1_loss
    from rubrictool.errors import RubrictoolError
    from rubrictool.grade import model_inputs
    from rubrictool.pipeline import benchmark_table
    from rubrictool.train import prepare_table

    torch.set_num_threads(a.threads)
    try:
        rb, table, _ = benchmark_table("mohler", a.data_dir)
    except RubrictoolError as exc:  # no data folder: one line, no traceback
        raise SystemExit(f"error: {exc}") from None
    n = 8 * (a.steps + 2)
    df = prepare_table(table, rb).sample(n=n, random_state=0)
    tok = reccbm.load_tokenizer(reccbm.default_backbone())
    items = reccbm.EncodedItems(model_inputs(tok, df, 128), df[[f"_c_{k}" for k in rb.keys]].to_numpy(np.int64))
    order = np.argsort([len(f["input_ids"]) for f in items.features], kind="stable")
    r = recipe("default", len(rb.keys), 3, 6, {"stage1": {"contrast_top": (0, 1, 2, 4), "contrast_bottom": (0, 1, 4),
                                                          "soft_targets": 0.0, "fused_optimizer": not a.loop}})
    torch.manual_seed(0)
    model = reccbm.RecCBM(r.model, reccbm.TextEncoder.from_pretrained(reccbm.default_backbone()))
    if model.align is not None:
        model.align.set_sep(separator_id(tok))
    model.train()
    opt, loss_fn = _optimizer(model, r.stage1), _stage1_loss(r.stage1)

    def steps(first: int, count: int) -> list[float]:
        out = []
        for s in range(first, first + count):
            batch = collate(items, order[8 * s: 8 * s + 8], tok.pad_token_id)
            t0 = time.perf_counter()
            loss = loss_fn(model, batch)
            loss.backward()  # type: ignore[no-untyped-call]
            torch.nn.utils.clip_grad_norm_(model.parameters(), r.stage1.grad_clip)
            opt.step()
            opt.zero_grad(set_to_none=True)
            out.append(time.perf_counter() - t0)
        return out

    steps(0, 2)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        seconds = steps(2, a.steps)
    print(f"Stage I step ({'loop' if a.loop else 'fused'} AdamW, {a.threads} threads): median {np.median(seconds):.3f} s")
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=a.rows))

    weights = [p.detach().clone() for p in model.encoder.parameters()]
    for kind, kw in (("loop", {"foreach": False}), ("foreach", {"foreach": True}), ("fused", {"fused": True})):
        params = [torch.nn.Parameter(w.clone()) for w in weights]
        adamw = torch.optim.AdamW(params, lr=2e-5, **kw)  # type: ignore[arg-type]
        times = []
        for _ in range(6):
            for p in params:
                p.grad = torch.randn_like(p) * 1e-3
            t0 = time.perf_counter()
            adamw.step()
            times.append(time.perf_counter() - t0)
        print(f"one AdamW step of the encoder's {sum(w.numel() for w in weights) / 1e6:.1f} M weights, {kind}: "
              f"median {1e3 * float(np.median(times)):.1f} ms")


if __name__ == "__main__":
    main()
