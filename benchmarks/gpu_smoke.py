"""The trainer on a GPU end to end: the main job (Mohler, the default preset, the 7:2:1 split) and one question-grouped
fold (fold 0 of 5, ``--by question``), then grading the main job's test answers; prints the device's name, every
stage's time and the metrics, and writes them to ``<out>/gpu_smoke.json``.

    python benchmarks/gpu_smoke.py                             # a GPU machine with the project installed
    python benchmarks/gpu_smoke.py --device cpu                # the same on the CPU (the baseline; 20+ minutes)
    python benchmarks/gpu_smoke.py --smoke --backbone PATH     # CPU, 40 synthetic answers, a tiny model (the tests)

On a bare GPU machine without internet that has torch, transformers, accelerate, pandas, typer and rich (the
project is not installed): ``python benchmarks/gpu_pack.py --out .gpu`` here packs what else it needs (wheels, MiniLM
in fp16, the Mohler data) and prints the command to run there, which is::

    python3 -m pip install -q --no-index --no-deps --target /tmp/site .gpu/wheels/*.whl
    PYTHONPATH=/tmp/site:. python3 benchmarks/gpu_smoke.py --pack .gpu

``--pack DIR`` restores MiniLM's weights to float32 (they travel in fp16: half the bytes; the restored model differs
from the original in the last bits, so its numbers are close to, not the same as, a run on the original weights) and
reads the data from ``DIR/datasets``. Concept labels: majority vote over three LLM annotation passes, NOT validated by
experts.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

# The smoke run: one optimiser step per epoch, every stage present, tiny inputs.
SMOKE_CONFIG: dict[str, dict[str, Any]] = {
    "model": {"max_len": 16},
    "stage1": {"epochs": 1, "max_steps_per_epoch": 1, "eval_batch_size": 16},
    "joint": {"epochs": 1},
    "stage2": {"epochs": 1},
}
METRICS = ("t_acc", "t_f1", "qwk", "c_acc")


def _log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def packed_weights(packed: Path) -> dict[str, Any]:
    """The fp16 state dict of a packed backbone folder (``model.fp16.safetensors``, gzipped or not)."""
    import gzip

    from safetensors.torch import load, load_file

    gz = packed / "model.fp16.safetensors.gz"
    raw = load(gzip.decompress(gz.read_bytes())) if gz.exists() else load_file(str(packed / "model.fp16.safetensors"))
    state = dict(raw)
    for key in [k for k in state if k.endswith("::index")]:  # a trimmed embedding (gpu_pack.py): zeros but its rows
        name = key[: -len("::index")]
        index, rows = state.pop(key), state.pop(name + "::rows")
        vocab = json.loads((packed / "config.json").read_text())["vocab_size"]
        state[name] = rows.new_zeros(vocab, rows.shape[1]).index_copy_(0, index, rows)
    return state


def packed_data(pack: Path) -> Path:
    """The data directory of a pack: ``datasets/``, unpacked from ``datasets.tgz`` the first time."""
    import tarfile

    data = pack / "datasets"
    if not data.is_dir() and (pack / "datasets.tgz").exists():
        with tarfile.open(pack / "datasets.tgz") as tar:
            tar.extractall(pack, filter="data")
    return data


def restore_backbone(packed: Path, to: Path) -> str:
    """MiniLM from ``packed`` (config, tokenizer, fp16 weights) as a float32 backbone folder in ``to``."""
    import shutil

    import torch
    from safetensors.torch import save_file

    to.mkdir(parents=True, exist_ok=True)
    for f in packed.iterdir():
        if f.is_file() and not f.name.startswith("model.fp16.safetensors"):
            shutil.copy2(f, to / f.name)
    weights = packed_weights(packed)
    save_file({k: v.to(torch.float32) if v.is_floating_point() else v for k, v in weights.items()},
              str(to / "model.safetensors"), metadata={"format": "pt"})
    return str(to)


def job(name: str, rubric: Any, table: Any, split: dict[str, list[str]], run_dir: Path, overrides: dict[str, Any],
        agreement: Any, notes: list[str]) -> dict[str, Any]:
    """Train one run and report its wall time, every stage's time and its test metrics."""
    from rubrictool.train import DataRecord, TrainOptions, train_model

    _log(f"{name}: {len(split['train'])}/{len(split['dev'])}/{len(split['test'])} answers, training")
    t0 = time.perf_counter()
    res = train_model(rubric, table, split, run_dir,
                      options=TrainOptions(overrides=overrides),
                      record=DataRecord(agreement=agreement, notes=notes))
    wall = time.perf_counter() - t0
    seed = res.metrics["seeds"][0]
    stages = {s: (seed.get(s) or {}).get("seconds") for s in ("stage1", "head_init", "joint", "lcec", "stage2")}
    stages["frozen_states"] = seed.get("states_seconds")
    out = {"wall_seconds": wall, "train_seconds": seed.get("train_seconds"), "stage_seconds": stages,
           "stage1_step_seconds": (seed.get("stage1") or {}).get("step_seconds"),
           "test": {m: seed["test"][m] for m in METRICS if m in seed["test"]},
           "ci": {m: [res.metrics["ci"][m]["lo"], res.metrics["ci"][m]["hi"]] for m in ("t_acc", "qwk")},
           "run": str(run_dir)}
    shown = ", ".join(f"{k} {v:.1f} s" for k, v in stages.items() if v)
    _log(f"{name}: {wall:.1f} s wall (training {out['train_seconds']:.1f} s: {shown})")
    _log(f"{name}: test " + ", ".join(f"{m} {v:.3f}" for m, v in out["test"].items()))
    return out


def grade_speed(run_dir: Path, table: Any, test_ids: list[str], device: str, repeats: int,
                precision: str = "no") -> dict[str, Any]:
    """Answers graded per second with the run on ``device`` (model loaded once; the best of ``repeats`` passes)."""
    from rubrictool.grade import grade_loaded, load_grader

    grader = load_grader(run_dir)
    items = table[table["id"].astype(str).isin(set(test_ids))]
    many = items.sample(n=max(len(items), 2000), replace=True, random_state=0).assign(id=lambda d: range(len(d)))
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        grade_loaded(grader, many, batch_size=256, flags=False, device=device, precision=precision)
        best = min(best, time.perf_counter() - t0)
    rate = len(many) / best
    _log(f"grade: {len(many)} answers in {best:.2f} s ({rate:.0f}/s, batch 256, best of {repeats})")
    return {"answers": len(many), "seconds": best, "answers_per_second": rate, "batch_size": 256}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=None,
                    help="default benchmarks/out/gpu_smoke (smoke: a temporary folder)")
    ap.add_argument("--device", default="auto", help="auto (CUDA when present), cuda or cpu (smoke: cpu)")
    ap.add_argument("--data-dir", default=os.environ.get("RUBRICTOOL_DATA", "../shared/datasets"))
    ap.add_argument("--pack", type=Path, default=None,
                    help="a folder benchmarks/gpu_pack.py wrote: MiniLM and the data")
    ap.add_argument("--backbone", default=None, help="HF name or path of the encoder (default: MiniLM)")
    ap.add_argument("--bf16", action="store_true", help="bf16 mixed precision (off by default: not measured yet)")
    ap.add_argument("--config", type=Path, default=None,
                    help="a `rubrictool train --config` YAML laid over the default preset (e.g. a reader candidate)")
    ap.add_argument("--skip", default="", help="comma list of main, fold, grade: parts not to run")
    ap.add_argument("--smoke", action="store_true", help="40 synthetic answers, one step per epoch (needs --backbone)")
    a = ap.parse_args(argv)

    from reccbm.device import describe_device
    from rubrictool.data import kfold_splits, split_items

    out = a.out or (Path(tempfile.mkdtemp(prefix="gpu-smoke-")) if a.smoke else Path("benchmarks/out/gpu_smoke"))
    out.mkdir(parents=True, exist_ok=True)
    device = "cpu" if a.smoke else a.device
    backbone, data_dir = a.backbone, a.data_dir
    if a.pack:
        backbone = backbone or restore_backbone(a.pack / "minilm", out / "minilm")
        data_dir = str(packed_data(a.pack))
    over: dict[str, dict[str, Any]] = {}
    if a.config:
        from rubrictool.train import load_train_config

        over = {sec: dict(v) for sec, v in load_train_config(a.config).items()}
    over.setdefault("stage1", {})["device"] = device
    if backbone:
        over.setdefault("model", {})["backbone"] = backbone
    if a.bf16:
        over["stage1"]["mixed_precision"] = "bf16"
    info = describe_device(device)
    import reccbm

    _log(f"device: {info['device']} ({info.get('name')}); torch {info['torch']}, CUDA {info.get('cuda')}; "
         f"reccbm from {Path(reccbm.__file__).parent}")
    if a.smoke:
        if not a.backbone:
            sys.exit("--smoke needs --backbone (a small local encoder; MiniLM is too slow for a smoke run)")
        from rubrictool.data import synthetic_mohler_table
        from rubrictool.rubric import load_rubric

        for sec, values in SMOKE_CONFIG.items():
            over.setdefault(sec, {}).update(values)
        rubric, table, agreement = load_rubric("mohler"), synthetic_mohler_table(questions=10), None
        notes = ["synthetic smoke table"]
    else:
        from rubrictool.pipeline import benchmark_table
        from rubrictool.tables import LLM_PASSES_NOTE

        rubric, table, agreement = benchmark_table("mohler", data_dir)
        notes = [LLM_PASSES_NOTE]
    skip = {s.strip() for s in a.skip.split(",") if s.strip()}
    report: dict[str, Any] = {"device": info, "config": str(a.config) if a.config else None, "bf16": a.bf16,
                              "smoke": a.smoke, "packed_weights": bool(a.pack)}
    t0 = time.perf_counter()
    split = split_items(table, seed=0)  # the main job's split (rubrictool train --benchmark mohler)
    if "main" not in skip:
        report["main"] = job("main job", rubric, table, split, out / "main", over, agreement, notes)
    if "fold" not in skip:
        fold = kfold_splits(table, k=5, seed=0, by="question")[0]
        report["question_fold_0"] = job("question-grouped fold 0/5", rubric, table, fold, out / "fold-q0", over,
                                        agreement, notes)
    if "grade" not in skip and "main" not in skip:
        report["grade"] = grade_speed(out / "main", table, split["test"], device, 1 if a.smoke else 3,
                                      "bf16" if a.bf16 else "no")
    report["total_seconds"] = time.perf_counter() - t0
    path = out / "gpu_smoke.json"
    path.write_text(json.dumps(report, indent=2, default=str) + "\n")
    _log(f"total {report['total_seconds']:.1f} s; wrote {path}")


if __name__ == "__main__":
    main()
