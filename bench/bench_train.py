"""Benchmark of `rubrictool train` on Mohler: REC-CBM vs vanilla CBM vs the PLM baseline.

Side by side on the same splits and seeds (split seed s and model seed s, s = 0..N-1), MiniLM on
CPU, the CLI defaults unless overridden. Also the oracle-concept bound (a linear grade head on the
adjudicated concept LABELS of the training split, scored on the test split), the wall time per
stage, a step-time comparison (Stage I vs PLM on identical batches) and `grade` throughput.

Resumable: every finished run leaves ``<out>/<variant>-s<seed>/metrics.json`` and is skipped when
the script is started again; the summary is rebuilt from whatever is there.

    python bench/bench_train.py --out bench/out/train --seeds 3            # full comparison (hours)
    python bench/bench_train.py --out bench/out/train --only steps         # step times only (~2 min)
    python bench/bench_train.py --out bench/out/train --summary            # tables from what is done

Concept labels: majority vote over three LLM annotation passes, NOT validated by experts.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np
import pandas as pd

VARIANTS = ("reccbm", "vanilla", "plm")


def _table(split_seed: int, data_dir: str | None) -> tuple[Any, pd.DataFrame, dict[str, list[str]]]:
    from rubrictool.adjudicate import adjudicate
    from rubrictool.data import load_benchmark, load_concept_passes, split_items
    from rubrictool.rubric import load_rubric
    from rubrictool.tables import LLM_PASSES_NOTE

    rb = load_rubric("mohler")
    adj = adjudicate(load_concept_passes(), rb, load_benchmark("mohler", data_dir), n_boot=0, coverage=False,
                     note=LLM_PASSES_NOTE)
    return rb, adj.table, split_items(adj.table, seed=split_seed)


CS = (0.01, 0.1, 1.0, 10.0, 100.0, 1000.0)


def tuned_linear_head(X: dict[str, Any], y: dict[str, Any], fit: str = "train",
                      select: str = "dev") -> tuple[dict[str, float], float, dict[float, dict[str, float]]]:
    """Multinomial logistic regression fitted on X[fit] for each L2 strength C in CS, the C with the best
    macro-F1 (then accuracy) on X[select] kept. Returns its test metrics, that C, and every C's test metrics."""
    from sklearn.linear_model import LogisticRegression

    from reccbm import task_metrics

    best: tuple[tuple[float, float], float] | None = None
    per_c: dict[float, dict[str, float]] = {}
    for C in CS:
        clf = LogisticRegression(max_iter=5000, C=C).fit(X[fit], y[fit])
        d = task_metrics(y[select], clf.predict(X[select]))
        if best is None or (d["t_f1"], d["t_acc"]) > best[0]:
            best = ((d["t_f1"], d["t_acc"]), C)
        per_c[C] = task_metrics(y["test"], clf.predict(X["test"]))
    assert best is not None
    return per_c[best[1]], best[1], per_c


def oracle(split_seed: int, data_dir: str | None) -> dict[str, float]:
    """Linear grade head (multinomial logistic regression) on the adjudicated concept labels.

    Two inputs: levels as numbers s = c / M (what the bottleneck's grade head sees) and one-hot levels.
    For each, the L2 strength C is chosen on the dev split by macro-F1 (the trained models' selection
    rule) and the head is scored on test; ``_c1`` keys keep the untuned C = 1 head for comparison.
    """
    from sklearn.preprocessing import OneHotEncoder

    rb, table, split = _table(split_seed, data_dir)
    t = table.set_index("id")
    y = {part: t.loc[split[part], "grade"].astype(int).to_numpy() for part in ("train", "dev", "test")}
    out: dict[str, float] = {}
    for name, onehot in (("levels", False), ("onehot", True)):
        X = {part: t.loc[split[part], rb.keys].to_numpy(float) for part in ("train", "dev", "test")}
        if onehot:
            enc = OneHotEncoder(handle_unknown="ignore").fit(X["train"])
            X = {part: enc.transform(x).toarray() for part, x in X.items()}
        else:
            X = {part: (x - rb.scale.min) / rb.M for part, x in X.items()}  # s = c / M, as the head sees
        m, C, per_c = tuned_linear_head(X, y)
        out[f"t_acc_{name}_c1"], out[f"t_f1_{name}_c1"] = per_c[1.0]["t_acc"], per_c[1.0]["t_f1"]
        out[f"t_acc_{name}"], out[f"t_f1_{name}"], out[f"C_{name}"] = m["t_acc"], m["t_f1"], C
    return out


def run_variant(variant: str, seed: int, out: Path, data_dir: str | None, overrides: dict[str, Any]) -> dict[str, Any]:
    from rubrictool.pipeline import train_benchmark

    run = out / f"{variant}-s{seed}"
    if (run / "metrics.json").is_file():
        return json.loads((run / "metrics.json").read_text())
    t0 = time.perf_counter()
    res = train_benchmark("mohler", run, data_dir=data_dir, split_seed=seed, variant=variant, seeds=1,
                          overrides=overrides, first_seed=seed)
    res.metrics["wall_seconds"] = time.perf_counter() - t0
    (run / "metrics.json").write_text(json.dumps(res.metrics, indent=2, default=float) + "\n")
    return res.metrics


def step_times(n_steps: int, data_dir: str | None) -> dict[str, float]:
    """Mean seconds per optimiser step (forward + backward + AdamW), batch 8, same batches, interleaved."""
    import torch

    import reccbm
    from reccbm.data import collate
    from reccbm.model import concept_loss, opcc_loss
    from rubrictool.train import _encode, prepare_table

    rb, table, split = _table(0, data_dir)
    df = prepare_table(table, rb)
    tok = reccbm.load_tokenizer(reccbm.default_backbone())
    items = _encode(df[df["id"].isin(split["train"])], rb, tok, 128, True)
    rng = np.random.default_rng(0)
    batches = [collate(items, rng.choice(len(items), 8, replace=False), tok.pad_token_id) for _ in range(n_steps)]
    models = {}
    for v in VARIANTS:
        plm, race, _, lcec = reccbm.variant_flags(v)
        cfg = reccbm.ModelConfig(rb.K, rb.M + 1, rb.S + 1, race=race, lcec=lcec, plm=plm)
        m = reccbm.RecCBM(cfg, reccbm.TextEncoder.from_pretrained(reccbm.default_backbone()))
        models[v] = (m, torch.optim.AdamW(m.stage1_parameters(), lr=1e-5))
    times: dict[str, list[float]] = {v: [] for v in VARIANTS}
    for i, batch in enumerate(batches):
        for v in VARIANTS:
            m, opt = models[v]
            t0 = time.perf_counter()
            o = m(batch)
            if v == "plm":
                loss = torch.nn.functional.cross_entropy(o.grade_logits, batch["grades"])
            else:
                loss = concept_loss(o.concept_logits, batch["concepts"]) + 0.4 * opcc_loss(o.c_hat, batch["concepts"])
            loss.backward()
            opt.step()
            opt.zero_grad()
            if i > 0:  # first step warms up
                times[v].append(time.perf_counter() - t0)
    return {v: float(np.median(t)) for v, t in times.items()}


def throughput(run: Path, data_dir: str | None, n: int = 600) -> dict[str, float]:
    """`grade` responses per second (model loading and the ONNX export excluded) for the torch and onnx
    engines, float32 and --int8, and how often each one's grade equals torch float32's."""
    from rubrictool.data import load_benchmark
    from rubrictool.grade import grade_loaded, load_grader

    items = load_benchmark("mohler", data_dir).sample(n, random_state=0)
    out: dict[str, float] = {}
    graded = {}
    for engine in ("torch", "onnx"):
        for int8 in (False, True):
            name = f"{'onnx_' if engine == 'onnx' else ''}{'int8' if int8 else 'float32'}"
            grader = load_grader(run, int8, engine)  # onnx: exported and cached in RUN/onnx on first use
            grade_loaded(grader, items.head(64))  # warm-up
            t0 = time.perf_counter()
            graded[name] = grade_loaded(grader, items)
            out[name] = round(n / (time.perf_counter() - t0), 1)
    for name in ("int8", "onnx_float32", "onnx_int8"):
        out[f"{name}_same_grade"] = round(float((graded[name]["grade"] == graded["float32"]["grade"]).mean()), 3)
    diff = (graded["onnx_float32"]["grade_prob"] - graded["float32"]["grade_prob"]).abs().max()
    out["onnx_float32_max_prob_diff"] = float(f"{diff:.2g}")
    return out



def summary(out: Path) -> str:
    rows = []
    for f in sorted(out.glob("*-s*/metrics.json")):
        m = json.loads(f.read_text())
        s = m["summary"]
        rows.append({"variant": m["variant"], "seed": int(f.parent.name.rsplit("-s", 1)[1]),
                     **{k: s[k]["mean"] for k in ("t_acc", "t_f1", "c_acc", "c_f1") if k in s},
                     "stage1_s": s["stage1_seconds"], "stage1_step_s": s["stage1_step_seconds"],
                     "stage2_s": s["stage2_seconds"], "cache_s": s["cache_seconds"],
                     "epochs": len(m["seeds"][0]["stage1"]["history"]), "wall_s": m.get("wall_seconds", float("nan"))})
    lines = ["Concept labels: majority vote over three LLM annotation passes, NOT validated by experts.", ""]
    if rows:
        df = pd.DataFrame(rows)
        lines += ["| variant | seeds | T-Acc | T-F1 | C-Acc | C-F1 | Stage I s | step s | Stage II s | wall s |",
                  "|---|---|---|---|---|---|---|---|---|---|"]
        for v, g in df.groupby("variant", sort=False):
            def ms(c: str, g: pd.DataFrame = g) -> str:
                if c not in g or g[c].isna().all():
                    return "—"
                return f"{g[c].mean():.3f} ± {g[c].std(ddof=1):.3f}" if len(g) > 1 else f"{g[c].mean():.3f}"
            lines.append(f"| {v} | {','.join(map(str, sorted(g['seed'])))} | {ms('t_acc')} | {ms('t_f1')} | "
                         f"{ms('c_acc')} | {ms('c_f1')} | {g['stage1_s'].mean():.0f} | {g['stage1_step_s'].mean():.3f} | "
                         f"{g['stage2_s'].mean():.2f} | {g['wall_s'].mean():.0f} |")
    for name in ("oracle.json", "steps.json", "throughput.json"):
        if (out / name).is_file():
            lines += ["", f"{name[:-5]}: {(out / name).read_text().strip()}"]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=Path("bench/out/train"))
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--seed-list", default=None,
                    help="run only these seeds, e.g. 1 or 1,2 (to share the runs among processes; the summary reads all)")
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--only", choices=["runs", "oracle", "steps", "throughput"], default=None)
    ap.add_argument("--epochs", type=int, default=None, help="Stage I epochs (default: the CLI default)")
    ap.add_argument("--steps", type=int, default=21, help="steps per variant for the step-time comparison")
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--summary", action="store_true")
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    if not a.summary:
        if a.only in (None, "oracle"):
            res = {s: oracle(s, a.data_dir) for s in range(a.seeds)}
            agg = {k: f"{np.mean([r[k] for r in res.values()]):.3f} ± {np.std([r[k] for r in res.values()], ddof=1):.3f}"
                   for k in res[0]} if a.seeds > 1 else res[0]
            (a.out / "oracle.json").write_text(json.dumps(agg, ensure_ascii=False) + "\n")
        if a.only in (None, "steps"):
            (a.out / "steps.json").write_text(json.dumps(step_times(a.steps, a.data_dir)) + "\n")
        if a.only in (None, "runs"):
            overrides = {"stage1": {"epochs": a.epochs}} if a.epochs else {}
            seeds = [int(x) for x in a.seed_list.split(",")] if a.seed_list else list(range(a.seeds))
            for seed in seeds:
                for v in a.variants.split(","):
                    print(f"== {v} seed {seed}", flush=True)
                    run_variant(v, seed, a.out, a.data_dir, overrides)
                    print(summary(a.out), flush=True)
        if a.only in (None, "throughput") and (a.out / "reccbm-s0" / "model.json").is_file():
            (a.out / "throughput.json").write_text(json.dumps(throughput(a.out / "reccbm-s0", a.data_dir)) + "\n")
    text = summary(a.out)
    (a.out / "summary.md").write_text(text)
    print(text)


if __name__ == "__main__":
    sys.exit(main())
