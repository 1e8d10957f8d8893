"""What σ_k² detects: noise put into one concept on purpose, on Mohler's table, over the default's kept fold models.

For each concept k in turn and each noise rate (0, 10, 20, 40 %), two kinds of noise (rubrictool.noise):

* label: that share of concept k's adjudicated levels in the fold's training part (train + dev) replaced by levels
  drawn uniformly from the scale; the test labels stay clean;
* reviewer: that share of one pass's levels for concept k (A, B or C, by fold) replaced the same way before the
  majority vote; α_k is computed from the noisy passes and every answer's label is the noisy vote.

Retraining the whole recipe (Stage I + the joint stage) 320 times does not fit two CPU cores, so each trial reuses
a fold's kept model (``rubrictool train --folds 5`` of the default, ``--folds-dir``): its concept outputs p̂ on every
answer are computed once (cached under ``<out>/outputs/``), and LCEC is set by its moments from the noisy labels
(``stage2.lcec_fit = "moments"``: prior from the training levels, σ² from the dev outputs' squared error) — exactly
what the recipe's last steps compute from those labels *given the encoder*; the encoder itself was trained on the
clean labels. ``--head`` also refits the grade head on them (Stage II's head refit, ``train_grader(head_only)``,
started from the kept head) and records the test grade metrics. ``--full-table`` writes one trial's noisy table,
agreement and split for ``rubrictool train`` (the whole recipe, to check the shortcut; rate 0 writes the clean
table); ``--check CLEAN_RUN NOISY_RUN`` sets the whole recipe trained on the noisy table beside the shortcut on the
clean run's encoder.

Each trial is one JSON file under ``<out>/trials/``; a finished trial is never redone. ``--summary`` (also run after
the trials) writes trials.csv, summary.csv, summary.md and noise.png.

    python benchmarks/noise.py --folds-dir /work/folds-out/random/default --out benchmarks/results/noise
    python benchmarks/noise.py --out benchmarks/results/noise --summary
    python benchmarks/noise.py --labels-only --seeds 5 --folds-dir DIR --out benchmarks/results/noise   # no model
    python benchmarks/noise.py --full-table label:FC:0.4 --fold 0 --folds-dir DIR --out benchmarks/results/noise
    python benchmarks/noise.py --smoke                           # a 120-answer synthetic table, made-up outputs

Concept labels: majority vote over three independent LLM annotation passes, NOT validated by experts.
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

import numpy as np
import pandas as pd

RATES = (0.0, 0.1, 0.2, 0.4)
PASSES = ("A", "B", "C")
DEFAULT_OUT = Path("benchmarks/out/noise")
LLM_NOTE = "concept labels: three LLM annotation passes, majority vote; NOT expert-validated"


def _log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


# ---------------------------------------------------------------------------- data and cached outputs
class Course:
    """The clean data: rubric, tidy passes, items, the adjudicated table (validated, one row per answer) and α."""

    def __init__(self, rubric: Any, passes: pd.DataFrame, items: pd.DataFrame) -> None:
        from rubrictool.adjudicate import AdjudicationOptions, adjudicate
        from rubrictool.tables import validate_adjudicated

        self.rubric, self.passes, self.items = rubric, passes, items
        adj = adjudicate(passes, rubric, items,
                         options=AdjudicationOptions(n_boot=0, coverage=False), note=LLM_NOTE)
        self.table = adj.table.reset_index(drop=True)
        self.df = validate_adjudicated(self.table, rubric)
        self.ids = self.df["id"].astype(str).tolist()
        self.levels = self.df[[f"_c_{k}" for k in rubric.keys]].to_numpy(np.int64)  # (N, K) 0-based
        self.alpha = alphas(adj.agreement, rubric.keys)
        self.agreement = adj.agreement

    @property
    def M(self) -> int:
        return int(self.rubric.scale.max - self.rubric.scale.min)

    def positions(self, split: dict[str, list[str]]) -> dict[str, np.ndarray]:
        where = {i: p for p, i in enumerate(self.ids)}
        return {s: np.array([where[i] for i in split[s]], dtype=np.intp) for s in ("train", "dev", "test")}


def alphas(agreement: dict[str, Any], keys: list[str]) -> np.ndarray:
    from rubrictool.evaluate.reliability import concept_alpha

    return np.array([concept_alpha(agreement, k)[0] for k in keys])


def mohler_course(data_dir: str | None) -> Course:
    from rubrictool.data import load_benchmark, load_concept_passes
    from rubrictool.rubric import load_rubric

    return Course(load_rubric("mohler"), load_concept_passes(data_dir), load_benchmark("mohler", data_dir))


def done_folds(folds_dir: Path) -> list[Path]:
    """The fold runs that are complete (model.json and metrics.json written)."""
    return [d for d in sorted(folds_dir.glob("fold-*")) if d.is_dir() and (d / "model.json").is_file()
            and (d / "metrics.json").is_file()]


def fold_outputs(fold: Path, course: Course, out: Path) -> dict[str, Any]:
    """p̂ (N, K, M+1) of the fold's kept model on every answer, in the table's order, cached in <out>/outputs/."""
    import torch

    import reccbm
    from rubrictool.atomic import atomic_write
    from rubrictool.data import load_split
    from rubrictool.grade import inputs_for, load_grader

    path = out / "outputs" / f"{fold.name}.npz"
    if not path.is_file():
        t0 = time.perf_counter()
        grader = load_grader(fold)  # the fold's reccbm.Grader
        model, tok = grader.model_, grader.tokenizer_
        torch.set_num_threads(1)
        preds = reccbm.predict(model, reccbm.EncodedItems(inputs_for(model, tok, course.df)), tok.pad_token_id, 64)
        assert preds.p_hat is not None and isinstance(model, reccbm.RecCBM) and model.lcec is not None
        eps = np.array(model.lcec.eps)

        def write(tmp: Path) -> None:
            with open(tmp, "wb") as fh:
                np.savez_compressed(fh, p_hat=preds.p_hat, ids=np.array(course.ids), eps=eps)

        atomic_write(path, write)
        _log(f"{fold.name}: concept outputs of {len(course.ids)} answers in {time.perf_counter() - t0:.0f} s")
    z = np.load(path)
    if list(z["ids"]) != course.ids:
        sys.exit(f"{path}: cached for another table; delete it to recompute")
    return {"p_hat": z["p_hat"], "eps": float(z["eps"]), "split": course.positions(load_split(fold / "split.json"))}


# ---------------------------------------------------------------------------- one trial
def trial_rng(kind: str, k: int, rate: float, fold: int, seed: int) -> np.random.Generator:
    return np.random.default_rng([seed, fold, k, round(rate * 1000), 1 + ("label", "reviewer").index(kind)])


def noisy_labels(course: Course, kind: str, k: int, rate: float, fold: int, seed: int,
                 pos: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray, pd.DataFrame, dict[str, Any], str]:
    """(levels (N, K) 0-based, α (K,), the adjudicated table, its agreement, the reviewer given noise) of a trial."""
    from rubrictool.adjudicate import AdjudicationOptions, adjudicate
    from rubrictool.noise import label_noise, reviewer_noise
    from rubrictool.tables import validate_adjudicated
    from rubrictool.votes import VOTES_PREFIX

    rng = trial_rng(kind, k, rate, fold, seed)
    key = course.rubric.keys[k]
    if kind == "label":
        rows = np.concatenate([pos["train"], pos["dev"]])
        levels, picked = label_noise(course.levels, k, rate, rows, course.M + 1, rng)
        table = course.table.copy()
        table[key] = levels[:, k] + course.rubric.scale.min
        if f"{VOTES_PREFIX}{key}" in table.columns:  # a replaced label stands alone, as a resolver's decision would
            col = table.columns.get_loc(f"{VOTES_PREFIX}{key}")
            table.iloc[picked, col] = ""
        return levels, course.alpha, table, course.agreement, ""
    reviewer = PASSES[(fold + seed) % len(PASSES)]
    scale = (course.rubric.scale.min, course.rubric.scale.max)
    passes = reviewer_noise(course.passes, key, reviewer, rate, scale, rng)
    adj = adjudicate(passes, course.rubric, course.items,
                     options=AdjudicationOptions(n_boot=0, coverage=False), note=LLM_NOTE)
    df = validate_adjudicated(adj.table, course.rubric).set_index("id").loc[course.ids]
    levels = df[[f"_c_{c}" for c in course.rubric.keys]].to_numpy(np.int64)
    return levels, alphas(adj.agreement, course.rubric.keys), adj.table, adj.agreement, reviewer


def run_trial(course: Course, outs: dict[str, Any], fold: int, kind: str, k: int, rate: float, seed: int,
              head: Any | None) -> dict[str, Any]:
    """One trial's record: per figure every concept's value and the noisy concept's value and rank, and the share of
    concept k's labels the noise changed in the fold's training part (train + dev) and test part. Without a model's
    outputs (``outs["p_hat"]`` None: the labels alone) the figures are α_k alone."""
    from rubrictool.noise import concept_figures, rank_figures

    pos, p = outs["split"], outs["p_hat"]
    levels, alpha, _, _, reviewer = noisy_labels(course, kind, k, rate, fold, seed, pos)
    if p is None:
        figs = pd.DataFrame({"alpha": alpha})
    else:
        figs = concept_figures(p[pos["dev"]], p[pos["test"]], levels[pos["train"]], levels[pos["dev"]],
                               levels[pos["test"]], course.M, outs["eps"])
        figs["alpha"] = alpha
    moved = levels[:, k] != course.levels[:, k]
    fit = np.concatenate([pos["train"], pos["dev"]])
    rec: dict[str, Any] = {"kind": kind, "concept": course.rubric.keys[k], "k": k, "rate": rate, "fold": fold,
                           "seed": seed, "reviewer": reviewer, "changed_fit": float(moved[fit].mean()),
                           "changed_test": float(moved[pos["test"]].mean())}
    rec |= rank_figures(figs, k)
    for fig in figs.columns:
        rec[f"{fig}_all"] = [float(x) for x in figs[fig]]
    if head is not None:
        rec |= head(fold, levels, outs)
    return rec


def head_refit(course: Course, folds_dir: Path) -> Any:
    """A function (fold, levels, outputs) -> test grade metrics after LCEC by its moments and the grade head refitted
    on the noisy labels (``train_grader(head_only=True)``, the default's Stage II settings), both on the kept model's
    outputs; the kept head is where the refit starts (the recipe starts it from the joint stage's head)."""
    import torch

    import reccbm
    from rubrictool.grade import load_grader

    models: dict[int, Any] = {}
    grades = torch.tensor(course.df["_y"].to_numpy(np.int64))
    K, M = len(course.rubric.keys), course.M
    S = int(course.rubric.grade.max - course.rubric.grade.min)
    cfg = reccbm.recipe("default", K, M + 1, S + 1).stage2

    def refit(fold: int, levels: np.ndarray, outs: dict[str, Any]) -> dict[str, Any]:
        if fold not in models:
            models[fold] = load_grader(folds_dir / f"fold-{fold}").model_
        model = models[fold]
        kept = {n: t.detach().clone() for n, t in model.state_dict().items()}
        pos, p = outs["split"], torch.from_numpy(outs["p_hat"]).float()
        c = torch.from_numpy(levels)
        try:
            e = (p * torch.arange(M + 1)).sum(-1) / M  # (N, K) expected scores s̃
            model.lcec.set_from_moments(c[pos["train"]] / M, e[pos["dev"]], c[pos["dev"]] / M, cfg.lcec_ridge)
            t0 = time.perf_counter()
            reccbm.train_grader(model, p[pos["train"]], c[pos["train"]], grades[pos["train"]], p[pos["dev"]],
                                grades[pos["dev"]], cfg, head_only=True)
            with torch.no_grad():
                model.eval()
                pred = model.grade_from_concepts(p[pos["test"]]).grade_logits.argmax(1).numpy()
            m = reccbm.grade_metrics(grades[pos["test"]].numpy(), pred)
            return {"head_seconds": time.perf_counter() - t0} | {f"test_{k}": float(m[k])
                                                                 for k in ("t_acc", "t_f1", "qwk")}
        finally:
            model.load_state_dict(kept)

    return refit


def trial_path(out: Path, kind: str, key: str, rate: float, fold: int, seed: int) -> Path:
    return out / "trials" / f"{kind}-{key}-{round(rate * 100):02d}-fold{fold}-seed{seed}.json"


def run_trials(course: Course, folds_dir: Path, out: Path, kinds: list[str], rates: list[float], seeds: list[int],
               head: bool) -> None:
    folds = done_folds(folds_dir)
    if not folds:
        sys.exit(f"{folds_dir}: no finished fold run (fold-*/ with model.json and metrics.json)")
    _log(f"{len(folds)} finished fold(s): {', '.join(f.name for f in folds)}")
    refit = head_refit(course, folds_dir) if head else None
    for fold_dir in folds:
        outs = fold_outputs(fold_dir, course, out)
        check_clean(course, outs, fold_dir, out)
        fold_trials(course, int(fold_dir.name.split("-")[1]), outs, out, kinds, rates, seeds, refit)


def label_trials(course: Course, folds_dir: Path, out: Path, kinds: list[str], rates: list[float],
                 seeds: list[int]) -> None:
    """The trials' labels alone, on every fold's split (fold-<i>.split.json; no model needed): α_k and the share of
    concept k's labels each kind of noise changes, in <out>/labels/."""
    from rubrictool.data import load_split

    splits = sorted(folds_dir.glob("fold-*.split.json"))
    if not splits:
        sys.exit(f"{folds_dir}: no fold-<i>.split.json")
    for path in splits:
        fold = int(path.name.split(".")[0].split("-")[1])
        outs = {"split": course.positions(load_split(path)), "p_hat": None, "eps": 0.0}
        fold_trials(course, fold, outs, out / "labels", kinds, rates, seeds, None)


def fold_trials(course: Course, fold: int, outs: dict[str, Any], out: Path, kinds: list[str], rates: list[float],
                seeds: list[int], refit: Any | None) -> None:
    """Every trial of one fold not yet done, each written as it ends."""
    from rubrictool.atomic import atomic_write_json

    n, t0 = 0, time.perf_counter()
    for kind in kinds:
        for k, key in enumerate(course.rubric.keys):
            for rate in rates:
                for seed in seeds[:1] if rate == 0 else seeds:  # without noise every draw is the same
                    path = trial_path(out, kind, key, rate, fold, seed)
                    if path.is_file():
                        continue
                    atomic_write_json(path, run_trial(course, outs, fold, kind, k, rate, seed, refit))
                    n += 1
    _log(f"fold {fold}: {n} new trial(s) in {time.perf_counter() - t0:.0f} s")


def check_clean(course: Course, outs: dict[str, Any], fold_dir: Path, out: Path) -> None:
    """The shortcut without noise against the fold run's own reliability table: σ², A_kk, σ²(implied) and the test
    reliability should be the run's, up to float rounding (written to <out>/clean-check-<fold>.csv)."""
    from rubrictool.noise import concept_figures

    pos, p = outs["split"], outs["p_hat"]
    figs = concept_figures(p[pos["dev"]], p[pos["test"]], course.levels[pos["train"]], course.levels[pos["dev"]],
                           course.levels[pos["test"]], course.M, outs["eps"])
    rel = pd.read_csv(fold_dir / "reliability.csv")
    cols = ["sigma2", "A_kk", "sigma2_implied", "test_reliability"]
    both = pd.concat([rel[["concept"] + cols], figs[cols].add_suffix("_shortcut")], axis=1)
    out.mkdir(parents=True, exist_ok=True)
    both.to_csv(out / f"clean-check-{fold_dir.name}.csv", index=False)
    worst = max(float(np.nanmax(np.abs(rel[c].to_numpy(float) - figs[c].to_numpy(float)))) for c in cols)
    _log(f"{fold_dir.name}: the shortcut without noise differs from the run's reliability table by at most {worst:.2e}")


# ---------------------------------------------------------------------------- summary, figure
def read_trials(out: Path) -> pd.DataFrame:
    recs = [json.loads(p.read_text()) for p in sorted((out / "trials").glob("*.json"))]
    return pd.DataFrame(recs)


def summary(out: Path, n_boot: int = 2000,
            title: str = "Mohler, LLM-pass labels, not expert-validated") -> pd.DataFrame:
    from rubrictool.atomic import atomic_write_text
    from rubrictool.noise import FIGURES, summarise_trials

    trials = read_trials(out)
    if trials.empty:
        sys.exit(f"{out}/trials: no trial yet")
    flat = trials[[c for c in trials.columns if not c.endswith("_all")]]
    flat.to_csv(out / "trials.csv", index=False)
    summ = summarise_trials(trials, n_boot)
    summ.to_csv(out / "summary.csv", index=False)
    lines = [(f"# Noise put into one concept on purpose ({len(trials)} trials; folds "
             f"{', '.join(map(str, sorted(trials['fold'].unique())))}; {LLM_NOTE})"), "",
             "Share of the noisy concept's labels changed (training part = train + dev; test part):", "",
             "| kind | rate | training part | test part |", "|---|---|---|---|"]
    for (kind, rate), at in trials.groupby(["kind", "rate"], sort=False):
        lines.append(f"| {kind} | {rate:.0%} | {at['changed_fit'].mean():.1%} | {at['changed_test'].mean():.1%} |")
    lines.append("")
    for kind, of_kind in summ.groupby("kind", sort=False):
        lines += [f"## {kind} noise", "",
                  ("| figure | rate | trials | noisy concept first | mean rank (of 8) | value [95 % CI] | "
                   "change from 0 % [95 % CI] |"),
                  "|---|---|---|---|---|---|---|"]
        for r in of_kind.itertuples():
            lines.append(f"| {FIGURES[str(r.figure)][0]} | {r.rate:.0%} | {r.n} | {r.first:.0%} | {r.mean_rank:.2f} | "
                         f"{r.value:.4f} [{r.value_lo:.4f}, {r.value_hi:.4f}] | "
                         f"{r.change:+.4f} [{r.change_lo:+.4f}, {r.change_hi:+.4f}] |")
        lines.append("")
    atomic_write_text(out / "summary.md", "\n".join(lines))
    plot(summ, out / "noise.png", title)
    return summ


def plot(summ: pd.DataFrame, path: Path, title: str) -> None:
    """One column per kind of noise: above, each figure's change from 0 % for the noisy concept against the rate,
    turned so that noisier is up (α_k and the test reliability fall), with 95 % CIs; below, the share of trials that
    rank the noisy concept first by that figure."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from rubrictool.atomic import atomic_write
    from rubrictool.noise import FIGURES

    kinds = list(dict.fromkeys(summ["kind"]))
    fig, axes = plt.subplots(2, len(kinds), figsize=(5.2 * len(kinds), 6.4), squeeze=False, sharex=True)
    colours = dict(zip(FIGURES, ("#d62728", "#ff7f0e", "#9467bd", "#1f77b4", "#2ca02c")))
    for j, kind in enumerate(kinds):
        of_kind = summ[summ["kind"] == kind]
        top, bottom = axes[0][j], axes[1][j]
        for fig_name, (label, sign) in FIGURES.items():
            s = of_kind[of_kind["figure"] == fig_name].sort_values("rate")
            if s.empty:
                continue
            x = 100 * s["rate"].to_numpy()
            top.errorbar(x, sign * s["change"],
                         yerr=[sign * s["change"] - np.minimum(sign * s["change_lo"], sign * s["change_hi"]),
                               np.maximum(sign * s["change_lo"], sign * s["change_hi"]) - sign * s["change"]],
                         marker="o", capsize=3, color=colours[fig_name], label=label + ("" if sign > 0 else " (fall)"))
            bottom.plot(x, 100 * s["first"], marker="o", color=colours[fig_name], label=label)
        top.axhline(0, color="grey", lw=0.8)
        top.set_title(f"{kind} noise in one concept")
        top.set_ylabel("change from 0 % (noisier ↑)")
        bottom.set_ylabel("noisy concept ranked first (% of trials)")
        bottom.set_ylim(-3, 103)
        bottom.axhline(90, color="grey", lw=0.8, ls="--")
        bottom.set_xlabel("share of concept k's levels replaced (%)")
        bottom.set_xticks([0, 10, 20, 40])
    axes[0][0].legend(fontsize=8, loc="upper left")
    fig.suptitle(f"Which figure finds the noisy concept ({title})", fontsize=10)
    fig.tight_layout()
    def write(tmp: Path) -> None:  # a small file: the kept results stay small (a palette of 24 colours is enough)
        from PIL import Image

        fig.savefig(tmp, format="png", dpi=66)
        with Image.open(tmp) as im:
            small = im.convert("RGB").quantize(colors=24)
        small.save(tmp, format="PNG", optimize=True)

    atomic_write(path, write)
    plt.close(fig)


# ---------------------------------------------------------------------------- the whole recipe, to check the shortcut
def full_table(course: Course, folds_dir: Path, out: Path, spec: str, fold: int, seed: int) -> Path:
    """The noisy table (JSONL), its agreement.json and the fold's split.json of one trial, for `rubrictool train`."""
    from rubrictool.atomic import atomic_write_json
    from rubrictool.data import load_split
    from rubrictool.io import write_table

    kind, key, rate_text = spec.split(":")
    k, rate = course.rubric.keys.index(key), float(rate_text)
    split_file = folds_dir / f"fold-{fold}" / "split.json"
    if not split_file.is_file():
        split_file = folds_dir / f"fold-{fold}.split.json"
    split = load_split(split_file)
    _, _, table, agreement, _ = noisy_labels(course, kind, k, rate, fold, seed, course.positions(split))
    d = out / "full" / f"{kind}-{key}-{round(rate * 100):02d}-fold{fold}"
    write_table(table, d / "table.jsonl")
    atomic_write_json(d / "agreement.json", agreement)
    atomic_write_json(d / "split.json", split)
    _log(f"written {d}: train with\n  nice -n 5 .venv/bin/rubrictool train --table {d}/table.jsonl --rubric mohler "
         f"--agreement {d}/agreement.json --split {d}/split.json --out {d}/run")
    return d


def check(course: Course, out: Path, spec: str, fold: int, clean_run: Path, noisy_run: Path) -> dict[str, Any]:
    """The shortcut against the whole recipe: ``clean_run`` trained on the clean table and ``noisy_run`` on the
    ``--full-table`` table of ``spec`` (KIND:CONCEPT:RATE, draw 0), both on fold ``fold``'s split with the same recipe.
    The shortcut keeps clean_run's encoder and sets LCEC by its moments from the noisy labels; the whole recipe
    retrains everything on them. Per figure: both runs' values (their reliability.csv), the shortcut's with the clean
    and the noisy labels, the noisy concept's rank in each and the Spearman ρ across concepts between the shortcut and
    the whole recipe; written to <out>/full/<name>/check.json."""
    from scipy.stats import spearmanr

    from rubrictool.atomic import atomic_write_json
    from rubrictool.noise import FIGURES, concept_figures, noisy_rank

    kind, key, rate_text = spec.split(":")
    k, rate = course.rubric.keys.index(key), float(rate_text)
    d = out / "full" / f"{kind}-{key}-{round(rate * 100):02d}-fold{fold}"
    outs = fold_outputs(clean_run, course, d)
    pos, p = outs["split"], outs["p_hat"]
    levels = noisy_labels(course, kind, k, rate, fold, 0, pos)[0]
    short = {name: concept_figures(p[pos["dev"]], p[pos["test"]], lv[pos["train"]], lv[pos["dev"]], lv[pos["test"]],
                                   course.M, outs["eps"]) for name, lv in (("clean", course.levels), ("noisy", levels))}
    full = {name: pd.read_csv(run / "reliability.csv") for name, run in (("clean", clean_run), ("noisy", noisy_run))}
    for rel in full.values():
        rel["one_minus_A"] = 1 - rel["A_kk"]
    res: dict[str, Any] = {"spec": spec, "fold": fold, "clean_run": str(clean_run), "noisy_run": str(noisy_run),
                           "labels_changed": int((levels[:, k] != course.levels[:, k]).sum())}
    for fig in ("sigma2", "sigma2_implied", "one_minus_A", "test_reliability"):
        sign = FIGURES[fig][1]
        vec = {f"{src}_{name}": (short if src == "shortcut" else full)[name][fig].to_numpy(float)
               for src in ("shortcut", "full") for name in ("clean", "noisy")}
        res[fig] = {name: v.tolist() for name, v in vec.items()} | {
            f"rank_{name}": noisy_rank(v, k, sign) for name, v in vec.items()} | {
            "change_shortcut": float(vec["shortcut_noisy"][k] - vec["shortcut_clean"][k]),
            "change_full": float(vec["full_noisy"][k] - vec["full_clean"][k]),
            "spearman_noisy": float(spearmanr(vec["shortcut_noisy"], vec["full_noisy"]).statistic),
            "max_abs_clean_difference": float(np.max(np.abs(vec["shortcut_clean"] - vec["full_clean"])))}
        r = res[fig]
        _log(f"{fig}: noisy concept {key} ranked {r['rank_full_noisy']:g} by the whole recipe, "
             f"{r['rank_shortcut_noisy']:g} by the shortcut; its change {r['change_full']:+.4f} (whole) vs "
             f"{r['change_shortcut']:+.4f} (shortcut); ρ across concepts {r['spearman_noisy']:.2f}; clean runs agree "
             f"to {r['max_abs_clean_difference']:.1e}")
    atomic_write_json(d / "check.json", res)
    return res


# ---------------------------------------------------------------------------- smoke
def smoke(out: Path) -> None:
    """A 120-answer synthetic table on Mohler's rubric with three made-up passes (B and C each differ from A on a
    share of levels), made-up concept outputs that are right most of the time, one split; every kind of trial at 0
    and 40 %, the summary and the figure."""
    from rubrictool.data import synthetic_mohler_table
    from rubrictool.rubric import load_rubric

    rb = load_rubric("mohler")
    table = synthetic_mohler_table(n=120, questions=6)
    rng = np.random.default_rng(0)
    tidy = []
    for r, flip in zip(PASSES, (0.0, 0.15, 0.25)):
        for key in rb.keys:
            lv = table[key].to_numpy().copy()
            swap = rng.random(len(lv)) < flip
            lv[swap] = rng.integers(rb.scale.min, rb.scale.max + 1, swap.sum())
            tidy.append(pd.DataFrame({"item": table["id"], "reviewer": r, "concept": key, "level": lv,
                                      "source": "llm"}))
    course = Course(rb, pd.concat(tidy, ignore_index=True), table[["id", "question", "response", "reference", "grade"]])
    logits = 2.5 * np.eye(course.M + 1)[course.levels] + rng.normal(0, 1, course.levels.shape + (course.M + 1,))
    p_hat = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)  # (N, K, M+1)
    order = rng.permutation(len(course.ids))
    split = {"train": order[:80], "dev": order[80:100], "test": order[100:]}
    fold_trials(course, 0, {"p_hat": p_hat, "eps": 1e-4, "split": split}, out, ["label", "reviewer"],
                [0.0, 0.4], [0], None)
    summ = summary(out, n_boot=200, title="synthetic smoke table, made-up outputs")
    print(f"smoke: {len(read_trials(out))} trials, {len(summ)} summary rows; wrote {out / 'noise.png'}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--folds-dir", type=Path, default=Path("benchmarks/out/folds/default"),
                    help="the default's fold runs (fold-0/ … with model.json, metrics.json, split.json)")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT,
                    help="default benchmarks/out/noise (smoke: a temporary folder)")
    ap.add_argument("--kinds", default="label,reviewer")
    ap.add_argument("--rates", default=",".join(str(r) for r in RATES))
    ap.add_argument("--seeds", type=int, default=1, help="noise draws per fold, concept and rate")
    ap.add_argument("--head", action="store_true", help="also refit the grade head on the noisy labels")
    ap.add_argument("--summary", action="store_true", help="only the summary and the figure from the trials done")
    ap.add_argument("--labels-only", action="store_true",
                    help="the noisy labels alone on every fold's split (α_k, labels changed; no model), in "
                         "<out>/labels")
    ap.add_argument("--full-table", default=None, help="KIND:CONCEPT:RATE, e.g. label:FC:0.4 (with --fold)")
    ap.add_argument("--fold", type=int, default=0)
    ap.add_argument("--check", type=Path, nargs=2, default=None, metavar=("CLEAN_RUN", "NOISY_RUN"),
                    help="with --full-table: runs trained on the clean table and on that noisy table (same fold)")
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--smoke", action="store_true")
    a = ap.parse_args()
    if a.smoke:
        smoke(a.out if a.out != DEFAULT_OUT else Path(tempfile.mkdtemp(prefix="noise-smoke-")))
        return
    if a.summary:
        summary(a.out / "labels" if a.labels_only else a.out)
        return
    course = mohler_course(a.data_dir)
    if a.check:
        if not a.full_table:
            sys.exit("--check needs --full-table KIND:CONCEPT:RATE (the noisy run's table)")
        check(course, a.out, a.full_table, a.fold, *a.check)
        return
    if a.full_table:
        full_table(course, a.folds_dir, a.out, a.full_table, a.fold, 0)
        return
    kinds, rates, seeds = a.kinds.split(","), [float(r) for r in a.rates.split(",")], list(range(a.seeds))
    if a.labels_only:
        label_trials(course, a.folds_dir, a.out, kinds, rates, seeds)
        summary(a.out / "labels")
        return
    run_trials(course, a.folds_dir, a.out, kinds, rates, seeds, a.head)
    summary(a.out)


if __name__ == "__main__":
    main()
