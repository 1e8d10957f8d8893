"""Benchmark: how much expert review routing saves on Mohler, measured through the library's own routing and
adjudication (``rubrictool.review.routing.route`` + ``rubrictool.adjudicate.adjudicate(pre_annotations=...)``).

The experts: the Mohler concept passes A, B and C (<data dir>/mohler-concepts) — three independent LLM
annotation passes standing in for three reviewers, NOT expert-validated. The reference is their full
three-review consensus (majority vote, ordinal tie rule) on every item.

The pre-annotations: the trained grader's OUT-OF-FOLD concept predictions (``test_predictions.csv`` of each
fold in ``--folds``; every item is predicted by the fold model that never trained on it). Whatever folds
exist are used, and named in the output. Without any fold, an LLM pass (``--fallback-pass``, default A)
pre-annotates instead — circular, since that pass is also one of the three "experts"; the output says so.

For a share s of the items sent to review (s = 0, 0.05, ..., 1): ``route`` picks round(s·N) items, the three
passes review exactly those, and ``adjudicate`` labels the rest with the pre-annotations' majority vote. The
curve is the share of the N×8 adjudicated labels identical to the full consensus. Routings:

- ``random``: mean over ``--seeds`` seeds (the min–max band is drawn);
- ``uncertainty``: the grader's per-item uncertainty — ``rubrictool.review_queue.uncertainty_score`` (level
  entropy, σ_k²-weighted with LCEC) when the fold predictions carry level probabilities (``<key>_p<level>``);
  folds trained before those columns existed carry only the argmax level and the expected level, and then
  the score is Σ_k σ_k²·|E[level]_k − level_k| (probability mass away from the predicted level), σ_k² from
  the fold's reliability.csv — the output names which one was used;
- ``disagreement``: on the items that several grader variants predicted out of fold (``--panel``: sibling
  folders such as vanilla, paper, two-stage, joint4), the variants are the pre-annotation panel and the
  score is ``rubrictool.review.routing.disagreement_scores``; this population is reported separately, with
  random and uncertainty routing on the same items and the panel's majority vote as the fill;
- with ``model.safetensors`` kept in a fold (newer folds keep it), that fold's test answers are re-graded
  with ``rubrictool.grade.grader_predictions`` and a third population compares the library's own
  uncertainty (level entropy, σ_k²-weighted) with the gap on the same answers (``--no-regrade`` skips it);
- ``oracle``: items ordered by how many of their pre-annotated labels are wrong — it knows the answer, so it
  is a ceiling for any routing, not a routing.

Run: .venv/bin/python benchmarks/review_routing.py --folds benchmarks/out/folds/default \
        [--data-dir ../shared/datasets] [--out benchmarks/results/review_routing] [--seeds 5]
Writes curves.csv, summary.json and routing.png into --out (each atomically; a re-run recomputes, ~1–3 min).
``--smoke``: 30 synthetic items, three synthetic passes and one synthetic fold of grader predictions (level
probabilities included), one random seed, shares in steps of 0.2, results to a temporary folder.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from rubrictool.adjudicate import AdjudicationOptions, MajorityVote, adjudicate
from rubrictool.data import load_benchmark, load_concept_passes
from rubrictool.grade import grader_predictions
from rubrictool.io import write_table
from rubrictool.review.routing import route
from rubrictool.review_queue import uncertainty_score
from rubrictool.rubric import load_rubric
from rubrictool.tables import LLM_PASSES_NOTE

RUBRIC = load_rubric("mohler")
KEYS = list(RUBRIC.keys)
LEVELS = list(RUBRIC.scale.values)
SHARES = np.round(np.linspace(0, 1, 21), 2)
TARGET_IDENTICAL, TARGET_REVIEWED = 0.95, 0.40


def consensus_of(reviews: pd.DataFrame) -> pd.DataFrame:
    """Majority vote (ordinal tie rule) per item and concept: ``item × concept`` levels."""
    d = MajorityVote(LEVELS).fit(reviews).decisions_
    return d.pivot(index="item", columns="concept", values="level")[KEYS]


def fold_predictions(folder: Path) -> tuple[pd.DataFrame, list[str], str]:
    """A variant's out-of-fold predictions (one row per item), the folds used and the uncertainty kind."""
    frames, used, kinds = [], [], set()
    for fold in sorted(folder.glob("fold-*")):
        f = fold / "test_predictions.csv"
        if not f.is_file() or not (fold / "metrics.json").is_file():
            continue  # a fold still training
        df = pd.read_csv(f, dtype={"id": str})
        if f"{KEYS[0]}_level" not in df.columns:
            return pd.DataFrame(), [], "none"  # a PLM: no concepts
        rel = fold / "reliability.csv"
        sigma2 = None
        if rel.is_file():
            r = pd.read_csv(rel).set_index("concept")["sigma2"].reindex(KEYS)
            sigma2 = None if r.isna().any() else r.to_numpy(float)
        levels = df[[f"{k}_level" for k in KEYS]].to_numpy(float)  # (N, K)
        if all(f"{k}_p{lv}" in df.columns for k in KEYS for lv in LEVELS):
            probs = np.stack([df[[f"{k}_p{lv}" for lv in LEVELS]].to_numpy(float) for k in KEYS], axis=1)  # (N, K, L)
            df["uncertainty"] = uncertainty_score(probs, sigma2)
            kinds.add("level entropy" + (", σ²-weighted" if sigma2 is not None else ""))
        else:
            gap = np.abs(df[[f"{k}_expected" for k in KEYS]].to_numpy(float) - levels)  # (N, K)
            w = np.ones(len(KEYS)) if sigma2 is None else sigma2
            df["uncertainty"] = (gap * w).sum(axis=1) / w.sum()
            kinds.add("expected-vs-predicted-level gap" + (", σ²-weighted" if sigma2 is not None else ""))
        frames.append(df)
        used.append(fold.name)
    if not frames:
        return pd.DataFrame(), [], "none"
    return pd.concat(frames, ignore_index=True).drop_duplicates("id"), used, " / ".join(sorted(kinds))


def as_prediction_table(df: pd.DataFrame, model: str) -> pd.DataFrame:
    """Wide fold predictions → PredictionTable rows ``item, model, concept, level, source, uncertainty``."""
    long = df.melt(id_vars=["id", "uncertainty"], value_vars=[f"{k}_level" for k in KEYS], var_name="concept",
                   value_name="level")
    long["concept"] = long["concept"].str.removesuffix("_level")
    return long.rename(columns={"id": "item"}).assign(model=model, source="model",
                                                      level=lambda d: d["level"].astype(int))


def identical_share(items: pd.DataFrame, reviews: pd.DataFrame, pre: pd.DataFrame, reviewed: set[str],
                    reference: pd.DataFrame) -> float:
    """adjudicate(reviews of the routed items, pre-annotations for the rest) vs the full consensus."""
    rev = reviews[reviews["item"].isin(reviewed)]
    if len(rev) == 0:  # nothing reviewed: every label is the pre-annotations' vote
        table = consensus_of(pre.rename(columns={"model": "reviewer"})).reindex(items["id"])
    else:
        res = adjudicate(rev, RUBRIC, items,
                         options=AdjudicationOptions(n_boot=0, coverage=False), pre_annotations=pre)
        table = res.table.set_index("id")[KEYS]
    got = table.reindex(reference.index)
    return float((got.to_numpy(float) == reference.to_numpy(float)).mean())


def curves_for(population: str, items: pd.DataFrame, reviews: pd.DataFrame, pre: pd.DataFrame,
               reference: pd.DataFrame, routings: list[str], seeds: int,
               signals: dict[str, pd.DataFrame] | None = None) -> list[dict[str, Any]]:
    """Curves of every routing (``signals``: extra uncertainty routings, label → pre-annotations whose
    ``uncertainty`` column ranks the items; the labels that fill stay ``pre``'s)."""
    ids = items["id"].tolist()
    n = len(ids)
    fill = consensus_of(pre.rename(columns={"model": "reviewer"})).reindex(reference.index)
    errors = pd.Series((fill.to_numpy(float) != reference.to_numpy(float)).sum(axis=1), index=reference.index)
    rows = []
    for how in routings + list(signals or {}) + ["oracle"]:
        for seed in range(seeds if how == "random" else 1):
            for s in SHARES:
                budget = int(np.rint(s * n))
                if budget == 0:
                    chosen: set[str] = set()
                elif how == "oracle":
                    chosen = set(errors.sort_values(ascending=False, kind="stable").index[:budget])
                elif signals and how in signals:
                    chosen = set(route(ids, signals[how], "uncertain", budget, seed).selected)
                else:
                    chosen = set(route(ids, pre, "uncertain" if how == "uncertainty" else how, budget, seed).selected)
                rows.append({"population": population, "routing": how, "seed": seed, "share_reviewed": float(s),
                             "items_reviewed": budget,
                             "identical": identical_share(items, reviews, pre, chosen, reference)})
        print(f"  {population}: {how} done", flush=True)
    return rows


def needed(curve: pd.DataFrame, target: float) -> float | None:
    hit = curve.loc[curve["identical"] >= target, "share_reviewed"]
    return float(hit.min()) if len(hit) else None


def plot(curves: pd.DataFrame, summary: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pops = list(dict.fromkeys(curves["population"]))
    fig, axes = plt.subplots(1, len(pops), figsize=(6.2 * len(pops), 4.8), squeeze=False)
    colors = {"random": "#888888", "uncertainty": "#1f77b4", "uncertainty (gap)": "#9467bd", "disagreement": "#d62728",
              "oracle": "#2ca02c"}
    for ax, pop in zip(axes[0], pops, strict=True):
        c = curves[curves["population"] == pop]
        for how in ["random", "uncertainty", "uncertainty (gap)", "disagreement", "oracle"]:
            d = c[c["routing"] == how]
            if not len(d):
                continue
            g = d.groupby("share_reviewed")["identical"]
            x = g.mean().index.to_numpy()
            style = "--" if how == "oracle" else "-"
            label = "oracle (ceiling: knows the answer)" if how == "oracle" else how
            ax.plot(100 * x, 100 * g.mean().to_numpy(), style, color=colors[how], label=label, lw=2)
            if how == "random" and d["seed"].nunique() > 1:
                ax.fill_between(100 * x, 100 * g.min().to_numpy(), 100 * g.max().to_numpy(), color=colors[how],
                                alpha=0.2)
        ax.axhline(100 * TARGET_IDENTICAL, color="k", lw=0.8, ls=":")
        ax.axvline(100 * TARGET_REVIEWED, color="k", lw=0.8, ls=":")
        ax.text(100 * TARGET_REVIEWED + 1, 100 * TARGET_IDENTICAL + 0.4, "target: ≥95% at ≤40%", fontsize=8)
        info = summary["populations"][pop]
        ax.set_title(f"{pop}\n{info['n_items']} items; pre-annotation: {info['pre_annotation']}", fontsize=9)
        ax.set_xlabel("items sent to three-reviewer review (%)")
        ax.set_ylabel("adjudicated labels identical to full 3-review consensus (%)")
        ax.set_xlim(0, 100)
        ax.set_ylim(min(60.0, 100 * c["identical"].min() - 2), 100.5)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="lower right")
    fig.suptitle("Mohler review routing — reviewers = LLM passes A/B/C (not expert-validated)", fontsize=10)
    fig.tight_layout()
    tmp = path.with_name(f".{path.name}.tmp.png")
    fig.savefig(tmp, dpi=110)
    plt.close(fig)
    os.replace(tmp, path)


def smoke_inputs(root: Path, n: int = 30, seed: int = 0) -> tuple[pd.DataFrame, pd.DataFrame, Path]:
    """Synthetic items, three review passes (ReviewTable) and a fold of grader predictions under ``root``."""
    rng = np.random.default_rng(seed)
    ids = [f"s.{i}" for i in range(n)]
    truth = rng.integers(min(LEVELS), max(LEVELS) + 1, size=(n, len(KEYS)))  # (N, K)
    items = pd.DataFrame({"id": ids, "question": "q", "response": [f"answer {i}" for i in range(n)],
                          "reference": "r", "grade": rng.integers(0, 6, size=n)})
    rows = []
    for reviewer in ("A", "B", "C"):
        noisy = np.clip(truth + rng.choice([-1, 0, 1], p=[0.1, 0.8, 0.1], size=truth.shape), min(LEVELS), max(LEVELS))
        rows += [{"item": ids[i], "reviewer": reviewer, "concept": k, "level": int(noisy[i, j])}
                 for i in range(n) for j, k in enumerate(KEYS)]
    passes = pd.DataFrame(rows)
    fold = root / "folds" / "default" / "fold-0"
    fold.mkdir(parents=True)
    pred = pd.DataFrame({"id": ids})
    for j, k in enumerate(KEYS):
        probs = rng.dirichlet(np.ones(len(LEVELS)), size=n)  # (N, L)
        for li, lv in enumerate(LEVELS):
            pred[f"{k}_p{lv}"] = probs[:, li]
        pred[f"{k}_level"] = np.where(rng.random(n) < 0.7, truth[:, j], np.asarray(LEVELS)[probs.argmax(1)])
        pred[f"{k}_expected"] = probs @ np.asarray(LEVELS, dtype=float)
    pred.to_csv(fold / "test_predictions.csv", index=False)
    (fold / "metrics.json").write_text("{}\n")
    return items, passes, fold.parent


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--folds", type=Path, default=Path("benchmarks/out/folds/default"),
                    help="the grader variant whose out-of-fold predictions pre-annotate (fold-*/test_predictions.csv)")
    ap.add_argument("--panel", nargs="*", default=["vanilla", "paper", "two-stage", "joint4"],
                    help="sibling variant folders of --folds whose OOF concept predictions join the disagreement panel")
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/review_routing"))
    ap.add_argument("--seeds", type=int, default=5, help="seeds of the random routing")
    ap.add_argument("--fallback-pass", default="A", help="LLM pass that pre-annotates when no fold exists")
    ap.add_argument("--no-regrade", dest="regrade", action="store_false",
                    help="do not re-grade the folds that kept model.safetensors (level entropy) ")
    ap.add_argument("--smoke", action="store_true", help="30 synthetic items and one synthetic fold, one seed, "
                    "shares reviewed in steps of 0.2")
    args = ap.parse_args(argv)
    global SHARES
    t0 = time.time()
    if args.smoke:
        root = Path(tempfile.mkdtemp(prefix="routing-smoke-"))
        all_items, passes, args.folds = smoke_inputs(root)
        args.seeds, args.panel, args.regrade = 1, [], False
        SHARES = np.round(np.linspace(0, 1, 6), 2)
        if args.out == ap.get_default("out"):
            args.out = root / "review_routing"
    else:
        passes = load_concept_passes(args.data_dir)
        all_items = load_benchmark("mohler", args.data_dir)[["id", "question", "response", "reference", "grade"]]
    reference_all = consensus_of(passes)

    default, used, kind = fold_predictions(args.folds)
    populations: dict[str, Any] = {}
    rows: list[dict[str, Any]] = []
    if len(default):
        ids = sorted(set(default["id"]) & set(reference_all.index))
        items = all_items[all_items["id"].isin(ids)].reset_index(drop=True)
        pre = as_prediction_table(default[default["id"].isin(ids)], args.folds.name)
        name = "grader out-of-fold"
        populations[name] = {"n_items": len(items), "folds": used, "variant": args.folds.name,
                             "pre_annotation": f"grader '{args.folds.name}' OOF ({', '.join(used)})",
                             "uncertainty": kind, "fill": f"the grader's levels ({args.folds.name})"}
        print(f"{name}: {len(items)} items from {args.folds} {used}; uncertainty = {kind}", flush=True)
        rows += curves_for(name, items, passes, pre, reference_all.loc[items["id"]], ["random", "uncertainty"],
                           args.seeds)
        # the panel of grader variants, where at least two predicted the same items out of fold
        panel = {args.folds.name: default}
        for v in args.panel:
            df, vused, _ = fold_predictions(args.folds.parent / v)
            if len(df):
                panel[v] = df
                populations.setdefault("panel_folds", {})[v] = vused
        if len(panel) >= 2:
            common = sorted(set.intersection(*[set(d["id"]) for d in panel.values()]) & set(reference_all.index))
            if common:
                pitems = all_items[all_items["id"].isin(common)].reset_index(drop=True)
                ppre = pd.concat([as_prediction_table(d[d["id"].isin(common)], v) for v, d in panel.items()],
                                 ignore_index=True)
                ppre.loc[ppre["model"] != args.folds.name, "uncertainty"] = np.nan  # rank by the main grader's only
                pname = "grader panel (items every variant predicted)"
                populations[pname] = {
                    "n_items": len(pitems), "variants": list(panel), "folds": populations.get("panel_folds", {}),
                    "pre_annotation": f"panel of {len(panel)} grader variants, majority vote",
                    "uncertainty": kind, "fill": "majority vote of the panel",
                }
                print(f"{pname}: {len(pitems)} items, variants {list(panel)}", flush=True)
                rows += curves_for(pname, pitems, passes, ppre, reference_all.loc[pitems["id"]],
                                   ["random", "uncertainty", "disagreement"], args.seeds)
        populations.pop("panel_folds", None)
        # the folds that kept their model: the library's own uncertainty (level entropy, σ²-weighted) by
        # re-grading their test answers, next to the gap used above, on the same answers
        if args.regrade:
            graded = []
            for fold in sorted(args.folds.glob("fold-*")):
                if (fold / "model.safetensors").is_file() and (fold / "test_predictions.csv").is_file():
                    test = json.loads((fold / "split.json").read_text())["test"]
                    graded.append(grader_predictions(fold,
                                                     all_items[all_items["id"].isin(test)]).assign(fold=fold.name))
            if graded:
                g = pd.concat(graded, ignore_index=True)
                gids = sorted(set(g["item"]) & set(default["id"]))
                gitems = all_items[all_items["id"].isin(gids)].reset_index(drop=True)
                gap_pre = pre[pre["item"].isin(gids)]
                ent = g[g["item"].isin(gids)][["item", "concept", "uncertainty"]]
                ent_pre = gap_pre.drop(columns="uncertainty").merge(ent, on=["item", "concept"])
                both = gap_pre.merge(g[["item", "concept", "level"]], on=["item", "concept"], suffixes=("", "_g"))
                same = float((both["level"] == both["level_g"]).mean())
                gname = "folds with a saved model: entropy vs gap"
                populations[gname] = {
                    "n_items": len(gitems), "folds": sorted(g["fold"].unique().tolist()),
                    "pre_annotation": f"grader '{args.folds.name}' OOF ({', '.join(sorted(g['fold'].unique()))})",
                    "uncertainty": "uncertainty = level entropy, σ²-weighted (re-graded with rubrictool.grade."
                                   "grader_predictions); uncertainty (gap) = " + kind,
                    "fill": f"the grader's levels ({args.folds.name})", "regraded_levels_identical": float(same),
                }
                print(f"{gname}: {len(gitems)} items; re-graded levels identical to the fold's: {same:.4f}", flush=True)
                rows += curves_for(gname, gitems, passes, ent_pre, reference_all.loc[gitems["id"]],
                                   ["random", "uncertainty"], args.seeds, signals={"uncertainty (gap)": gap_pre})
    else:
        p = passes[passes["reviewer"] == args.fallback_pass]
        pre = p.rename(columns={"reviewer": "model"}).assign(model=f"pass {args.fallback_pass}", source="llm")
        items = all_items[all_items["id"].isin(reference_all.index)].reset_index(drop=True)
        name = f"LLM pass {args.fallback_pass} (fallback)"
        populations[name] = {"n_items": len(items), "folds": [], "pre_annotation": f"LLM pass {args.fallback_pass}",
                             "uncertainty": "none", "fill": f"pass {args.fallback_pass}",
                             "caveat": "circular: the pre-annotating pass is also one of the three reviewers"}
        rows += curves_for(name, items, passes, pre, reference_all.loc[items["id"]], ["random"], args.seeds)

    curves = pd.DataFrame(rows)
    summary: dict[str, Any] = {"date": time.strftime("%Y-%m-%d"), "note": LLM_PASSES_NOTE, "populations": populations,
                               "target": {"identical": TARGET_IDENTICAL, "reviewed": TARGET_REVIEWED},
                               "seconds": round(time.time() - t0, 1)}
    for pop, info in populations.items():
        c = curves[curves["population"] == pop]
        mean = c.groupby(["routing", "share_reviewed"])["identical"].mean().reset_index()
        info["at_0"] = float(mean.loc[mean["share_reviewed"] == 0, "identical"].iloc[0])
        info["at_40"] = {h: float(g.loc[g["share_reviewed"] == TARGET_REVIEWED, "identical"].iloc[0])
                         for h, g in mean.groupby("routing")}
        info["share_needed_for_95"] = {h: needed(g, TARGET_IDENTICAL) for h, g in mean.groupby("routing")}
        best = max((h for h in info["at_40"] if h != "oracle"), key=lambda h: info["at_40"][h])
        info["best_routing"] = best
        info["target_met"] = bool(info["at_40"][best] >= TARGET_IDENTICAL)
        share = info["share_needed_for_95"][best]
        info["judgements_saved_at_95"] = None if share is None else int(np.rint((1 - share) * info["n_items"])) * 8 * 3
    args.out.mkdir(parents=True, exist_ok=True)
    write_table(curves, args.out / "curves.csv")
    fd, tmp = tempfile.mkstemp(dir=args.out, prefix=".summary.")
    with os.fdopen(fd, "w") as fh:
        json.dump(summary, fh, indent=1, ensure_ascii=False)
    os.replace(tmp, args.out / "summary.json")
    plot(curves, summary, args.out / "routing.png")
    print(json.dumps(summary, indent=1, ensure_ascii=False))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
