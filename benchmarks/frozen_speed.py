"""Training speed with the pretrained encoder trained, frozen, and frozen with its token states cached.

Two measurements on the first ``--n`` Mohler answers (``--n`` train + ``--n // 5`` dev; the concept labels and grades
are random: only the time is measured), each for ``stage1.encoder = train``, ``frozen`` with
``cache_states: false`` (the frozen encoder runs every step) and ``frozen`` (its states computed once):

1. Stage I alone (:func:`reccbm.train_concepts`), ``--steps`` optimiser steps of batch 8: milliseconds per step, and
   the one-off cost of the states (:func:`reccbm.encoder_states` over train + dev);
2. the whole recipe (:func:`reccbm.fit`: Stage I one epoch, Stage II, the joint stage one epoch, LCEC on dev).

    python benchmarks/frozen_speed.py                           # MiniLM, 80 answers, 10 steps
    python benchmarks/frozen_speed.py --n 200 --steps 25
    python benchmarks/frozen_speed.py --smoke --backbone PATH   # a tiny backbone on 24 synthetic answers, 3 steps

Writes ``--out`` (JSON) with the timings, the settings and the machine's load average.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

MODES = (("train", "train", True), ("frozen, uncached", "frozen", False), ("frozen, cached", "frozen", True))


def answers(n: int, smoke: bool, data_dir: str | None) -> tuple[list[str], list[str], list[str]]:
    """(questions, responses, references) of the first n Mohler answers, or n synthetic ones for --smoke."""
    if smoke:
        reference = "a stack stores the last element first and a queue stores the first element first"
        words = reference.split(" ")
        return ["what is a stack"] * n, [" ".join(words[i % 5 :]) for i in range(n)], [reference] * n
    from rubrictool.data import load_benchmark

    items = load_benchmark("mohler", data_dir).iloc[:n]
    return items["question"].tolist(), items["response"].tolist(), items["reference"].fillna("").tolist()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backbone", default="", help="HF name or path (default: the offline MiniLM)")
    ap.add_argument("--n", type=int, default=80, help="training answers (plus n // 5 dev answers)")
    ap.add_argument("--steps", type=int, default=10, help="Stage I optimiser steps timed per mode")
    ap.add_argument("--max-len", type=int, default=128)
    ap.add_argument("--data-dir", default=None, help="data directory (default: RUBRICTOOL_DATA)")
    ap.add_argument("--smoke", action="store_true", help="24 synthetic answers (20 train + 4 dev), 3 steps")
    ap.add_argument("--out", type=Path, default=None,
                    help="JSON to write (default benchmarks/results/frozen_speed.json; --smoke: a temporary file)")
    args = ap.parse_args()
    if args.smoke:
        args.n, args.steps = 20, 3
    if args.out is None:
        args.out = (Path(tempfile.mkdtemp()) / "frozen_speed.json" if args.smoke
                    else Path("benchmarks/results/frozen_speed.json"))

    import numpy as np

    import reccbm
    from rubrictool.provenance import git_revision

    backbone = args.backbone or reccbm.default_backbone()
    n_dev = max(4, args.n // 5)
    q, r, a = answers(args.n + n_dev, args.smoke, args.data_dir)
    tok = reccbm.load_tokenizer(backbone)
    feats = reccbm.encode_inputs(tok, q, r, a, args.max_len)
    rng = np.random.default_rng(0)
    c, y = rng.integers(0, 3, size=(len(feats), 8)), rng.integers(0, 6, size=len(feats))
    train = reccbm.EncodedItems(feats[: args.n], c[: args.n], y[: args.n])
    dev = reccbm.EncodedItems(feats[args.n :], c[args.n :], y[args.n :])
    pad = tok.pad_token_id
    model_cfg = reccbm.ModelConfig(num_concepts=8, num_levels=3, num_grades=6, backbone=backbone, max_len=args.max_len,
                                   head="level")
    stage1 = reccbm.StageIConfig(epochs=1, max_steps_per_epoch=args.steps, device="cpu")
    out: dict[str, Any] = {"backbone": backbone, "n_train": len(train), "n_dev": len(dev), "steps": args.steps,
                           "max_len": args.max_len, "stage1": {}, "fit": {}}

    for name, encoder, cache in MODES:  # 1. Stage I steps
        reccbm.set_seed(0)
        model = reccbm.RecCBM(model_cfg, reccbm.TextEncoder.from_pretrained(backbone))
        t0 = time.perf_counter()
        states = None
        if encoder == "frozen" and cache:
            states = (reccbm.encoder_states(model.encoder, train, pad), reccbm.encoder_states(model.encoder, dev, pad))
        once = time.perf_counter() - t0
        res = reccbm.train_concepts(model, train, dev, replace(stage1, encoder=encoder, cache_states=cache), pad,
                                    states=states)
        out["stage1"][name] = {"ms_per_step": 1000 * res.step_seconds, "steps": res.steps, "states_seconds": once,
                               "stage_seconds": res.seconds}
        print(f"Stage I, {name:16s}: {1000 * res.step_seconds:8.1f} ms/step over {res.steps} steps; states once "
              f"{once:5.2f} s for {len(train) + len(dev)} answers", flush=True)

    recipe = reccbm.Recipe(model_cfg, replace(stage1, max_steps_per_epoch=0), reccbm.JointConfig(epochs=1, lr=5e-5),
                           reccbm.StageIIConfig(epochs=5, lcec_fit="dev"))
    for name, encoder, cache in MODES:  # 2. the whole recipe
        r_mode = replace(recipe, stage1=replace(recipe.stage1, encoder=encoder, cache_states=cache))
        t0 = time.perf_counter()
        fitted = reccbm.fit(train, dev, r_mode, tok)
        seconds = time.perf_counter() - t0
        out["fit"][name] = {"seconds": seconds, "states_seconds": fitted.states_seconds, "steps": fitted.steps}
        print(f"reccbm.fit, {name:16s}: {seconds:6.1f} s ({fitted.steps} steps; states once "
              f"{fitted.states_seconds:.1f} s)", flush=True)

    out |= {"load_average": list(os.getloadavg()), "git_revision": git_revision(),
            "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
