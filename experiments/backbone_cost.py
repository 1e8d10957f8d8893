"""What a larger backbone costs per Stage I step, paired: the same Mohler answers through the default model (the answer
compared with its reference, ``model.align``) on MiniLM and on another backbone (a local folder or hub name),
interleaved so that both see the same machine load; and what it costs to read one answer without training (grading,
frozen-encoder states).

One optimiser step = forward, concept loss, OPCC, backward, AdamW step; batch 8, one thread. Each backbone tokenizes
the answers itself (its inputs may be longer or shorter). The ratio is what a fold's encoder stages cost more; Stage II
and the LCEC fit do not change.

    .venv/bin/python experiments/backbone_cost.py /path/to/all-mpnet-base-v2 --steps 8
    .venv/bin/python experiments/backbone_cost.py /path/to/all-mpnet-base-v2 --top 2    # its top two layers alone

``--top N``: the other backbone trains its top N layers only (``stage1.train_top_layers``): its step runs them on the
lower layers' states, computed once beforehand (that one-off cost is reported apart, per answer).

Concept labels: majority vote over three LLM annotation passes, NOT validated by experts.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("backbone", help="the other backbone: a local folder (or a hub name where a hub is reachable)")
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--out", type=Path, default=None, help="write the figures here as JSON too")
    ap.add_argument("--top", type=int, default=0, help="the other backbone trains its top N layers alone (0: all)")
    ap.add_argument("--data-dir", default=os.environ.get("RUBRICTOOL_DATA", "../shared/datasets"))
    a = ap.parse_args()

    import numpy as np
    import torch

    import reccbm
    from reccbm.align import separator_id
    from reccbm.config import ModelConfig, StageIConfig
    from reccbm.data import collate
    from reccbm.encoder import states_layer
    from reccbm.inference import collate_states, encoder_states
    from reccbm.train import _freeze, _optimizer, _stage1_loss
    from rubrictool.errors import RubrictoolError
    from rubrictool.grade import model_inputs
    from rubrictool.pipeline import benchmark_table
    from rubrictool.train import prepare_table

    torch.set_num_threads(1)
    try:
        rb, table, _ = benchmark_table("mohler", a.data_dir)
    except RubrictoolError as exc:  # no data folder: one line, no traceback
        raise SystemExit(f"error: {exc}") from None
    df = prepare_table(table, rb).sample(n=8 * a.steps, random_state=0)
    levels = df[[f"_c_{k}" for k in rb.keys]].to_numpy(np.int64)
    names = {"minilm": reccbm.default_backbone(), "other": a.backbone}
    runs: dict[str, dict[str, object]] = {}
    for key, name in names.items():
        t0 = time.perf_counter()
        tok = reccbm.load_tokenizer(name)
        enc = reccbm.TextEncoder.from_pretrained(name)
        load_s = time.perf_counter() - t0
        items = reccbm.EncodedItems(model_inputs(tok, df, 128), levels)
        torch.manual_seed(0)
        cfg = ModelConfig(num_concepts=len(rb.keys), num_levels=3, num_grades=6, align=True)
        m = reccbm.RecCBM(cfg, enc)
        assert m.align is not None
        m.align.set_sep(separator_id(tok))
        states, states_s = None, 0.0
        if key == "other" and a.top:
            enc.states_layer = states_layer(enc, a.top)
            t1 = time.perf_counter()
            states = encoder_states(enc, items, tok.pad_token_id, 32)
            states_s = (time.perf_counter() - t1) / len(items)
            _freeze(m, "stage1", below=enc.states_layer)  # the embeddings and the layers under the cut stay as they are
        runs[key] = {"model": m, "tok": tok, "items": items, "opt": _optimizer(m, StageIConfig()), "states": states,
                     "states_s_per_answer": states_s,
                     "loss": _stage1_loss(StageIConfig()), "seconds": [], "load_seconds": load_s,
                     "parameters": sum(p.numel() for p in enc.parameters()),
                     "hidden": enc.hidden_size, "layers": getattr(enc.hf_config, "num_hidden_layers", None),
                     "mean_tokens": float(np.mean([len(x["input_ids"]) for x in items.features]))}
    order = list(runs)
    for s in range(a.steps):
        for key in (order if s % 2 == 0 else order[::-1]):
            r = runs[key]
            batch = collate_states(r["items"], list(range(8 * s, 8 * s + 8)), r["tok"].pad_token_id,  # type: ignore[arg-type,attr-defined]
                                   r["states"])  # type: ignore[arg-type]
            t0 = time.perf_counter()
            loss = r["loss"](r["model"], batch)  # type: ignore[operator]
            assert torch.isfinite(loss), f"{names[key]}: the loss is not finite"
            loss.backward()
            r["opt"].step()  # type: ignore[attr-defined]
            r["opt"].zero_grad(set_to_none=True)  # type: ignore[attr-defined]
            r["seconds"].append(time.perf_counter() - t0)  # type: ignore[attr-defined]
    for key, r in runs.items():  # reading without training: what grading and frozen states cost per answer
        m = r["model"]
        m.eval()  # type: ignore[attr-defined]
        batch = collate(r["items"], list(range(min(32, len(df)))), r["tok"].pad_token_id)  # type: ignore[arg-type,attr-defined]
        with torch.inference_mode():
            m(batch)  # type: ignore[operator]
            t0 = time.perf_counter()
            m(batch)  # type: ignore[operator]
            r["read_s_per_answer"] = (time.perf_counter() - t0) / len(batch["input_ids"])
    out: dict[str, object] = {"steps": a.steps, "threads": 1, "batch": 8, "other_top_layers": a.top}
    for key, r in runs.items():
        out[key] = {"backbone": names[key], "parameters": r["parameters"], "hidden": r["hidden"],
                    "layers": r["layers"], "mean_tokens": r["mean_tokens"], "load_seconds": r["load_seconds"],
                    "s_per_step": float(np.median(r["seconds"])),  # type: ignore[arg-type]
                    "read_s_per_answer": r["read_s_per_answer"], "states_s_per_answer": r["states_s_per_answer"]}
    o, mi = out["other"], out["minilm"]
    out["step_ratio"] = o["s_per_step"] / mi["s_per_step"]  # type: ignore[index]
    out["read_ratio"] = o["read_s_per_answer"] / mi["read_s_per_answer"]  # type: ignore[index]
    print(json.dumps(out, indent=1))
    if a.out:
        from rubrictool.atomic import atomic_write_json

        atomic_write_json(a.out, out)


if __name__ == "__main__":
    main()
