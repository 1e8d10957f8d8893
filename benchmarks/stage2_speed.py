"""Time a step of the K-dimensional stages (Stage II over cached concept outputs p̂, with LCEC) on each device: the
measurement behind ``stage2.device`` (docs/results.md, "On a GPU").

    python benchmarks/stage2_speed.py                      # the CPU, and CUDA where torch sees a GPU
    python benchmarks/stage2_speed.py --devices cpu --epochs 3
    python benchmarks/stage2_speed.py --smoke               # one epoch of 80 answers on the CPU (the tests)

The grade head and LCEC of the default recipe (8 concepts, 3 levels, 6 grades), random p̂ for the main job's 1,591
training and 455 dev answers, batches of 8; the encoder is a one-layer random BERT (these stages never run it).
"""

from __future__ import annotations

import argparse
import json
import time

import torch


def model_for(K: int = 8, levels: int = 3, grades: int = 6) -> torch.nn.Module:
    from transformers import BertConfig, BertModel

    from reccbm.model import RecCBM, TextEncoder
    from reccbm.recipes import recipe

    hf = BertConfig(vocab_size=64, hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64)
    r = recipe("default", K, levels, grades)
    return RecCBM(r.model, TextEncoder(BertModel(hf), hf)), r


def time_device(device: str, epochs: int, n: int = 1591, n_dev: int = 455) -> dict[str, float]:
    """Seconds per Stage II step on ``device`` (the head and LCEC of the default recipe, ``epochs`` epochs)."""
    from dataclasses import replace

    import reccbm

    torch.manual_seed(0)
    model, r = model_for()
    K, L, S = r.model.num_concepts, r.model.num_levels, r.model.num_grades
    p, p_dev = torch.softmax(torch.randn(n, K, L), -1), torch.softmax(torch.randn(n_dev, K, L), -1)
    c, y, y_dev = torch.randint(0, L, (n, K)), torch.randint(0, S, (n,)), torch.randint(0, S, (n_dev,))
    cfg = replace(r.stage2, epochs=epochs)
    t0 = time.perf_counter()
    res = reccbm.train_grader(model, p, c, y, p_dev, y_dev, cfg, device=device)
    wall = time.perf_counter() - t0
    return {"steps": res.steps, "seconds": wall, "ms_per_step": 1000 * wall / res.steps}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--devices", default=None, help="comma list (default: cpu, and cuda where there is one)")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--smoke", action="store_true", help="one epoch of 80 answers on the CPU")
    a = ap.parse_args()
    devices = a.devices.split(",") if a.devices else ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    sizes = {"n": 80, "n_dev": 16} if a.smoke else {}
    if a.smoke:
        devices, a.epochs = ["cpu"], 1
    out = {}
    for d in devices:
        time_device(d, 1, **sizes)  # warm-up: allocator, kernels, threads
        out[d] = time_device(d, a.epochs, **sizes)
        print(f"{d}: {out[d]['steps']} steps in {out[d]['seconds']:.2f} s, {out[d]['ms_per_step']:.2f} ms a step",
              flush=True)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
