"""How much of the concept reader's error on new questions is the question's own offset, and what removing it is worth.

On question-grouped folds each test question is new to its fold's model. Per concept, the error of the expected level
ĉ − c splits into a part shared by a question's answers (its mean over them: the reader reads the question as a whole
too high or too low) and a part within the question. This script, on a run's pooled predictions:

- the share of the squared error that is the questions' offsets, per concept;
- C-Acc with each question's offset removed as the labels give it (an oracle: every answer's true level is used);
- C-Acc with the question means shrunk toward the fold's mean by a factor fitted on the other folds' questions (no
  label of the question is used: only its answers, read together);
- C-Acc with the offset estimated from n labelled answers of the question (shrunk by n / (n + λ)), on its other
  answers, against the reader's own levels on the same answers (``--draws`` random choices of the n).
- how far the questions' offsets are one offset shared by the concepts: the share of their variance (questions ×
  concepts, each concept centred) on the first principal component, and the mean correlation of two concepts'
  offsets over the questions.

With ``--texts`` (the benchmark's answers, from ``--data-dir`` or $RUBRICTOOL_DATA) also: the offset predicted, without
a label of the question, from what its texts show — the reference's and the question's length, its answers' mean
length and length against the reference, how many of the reference's words they use (lab/transfer.py's
overlap features, averaged over the question's answers) — and the question's mean reading, by ridge regression on
the other folds' questions.

With ``--fold-runs RUN`` (the k-fold run that made the pooled predictions, its fold weights kept) also: each fold's
model reads its test questions' reference answers given as the answer, and the offset is predicted, without a label
of the question, from that reading and the question's mean (a least-squares fit on the other folds' questions).

With ``--prior-em`` also: each question's level shares per concept re-estimated from its answers' p̂ alone (no label
of the question) by EM for a shift of the levels' prior (Saerens, Latinne & Decaestecker 2002: p̂ reweighted by the
question's shares over the training answers' shares, the shares the mean of the reweighted p̂, with α pseudo-answers
at the training shares), the level argmax of the reweighted p̂.

A level with an offset is round(ĉ + shift), clipped to the scale; without one the reader's level (argmax p̂).

    python lab/question_offsets.py benchmarks/results/folds-by-question/default/pooled_predictions.csv \
        --json lab/results/question_offsets_default_grouped.json
    python lab/question_offsets.py RUN/pooled_predictions.csv --fold-runs RUN
    python lab/question_offsets.py RUN/pooled_predictions.csv --texts mohler
    python lab/question_offsets.py RUN/pooled_predictions.csv --prior-em 0,5,20,100

Concept labels of the Mohler runs: majority vote over three LLM annotation passes, NOT validated by experts.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd


def concepts_of(d: pd.DataFrame) -> list[str]:
    """The concept keys of a pooled predictions table (columns KEY_expected with KEY_true and KEY_level beside)."""
    return [c[: -len("_expected")] for c in d.columns
            if c.endswith("_expected") and f"{c[:-9]}_true" in d and f"{c[:-9]}_level" in d]


def question_of(ids: pd.Series) -> pd.Series:
    """Mohler's answer ids are QUESTION.ANSWER: the question is all before the last dot."""
    return ids.astype(str).str.rsplit(".", n=1).str[0]


def study(d: pd.DataFrame, ns: tuple[int, ...] = (1, 3, 5, 10), lam: float = 5.0, draws: int = 20,
          seed: int = 0) -> dict[str, Any]:
    d = d.reset_index(drop=True)
    q = d["question"] if "question" in d else question_of(d["id"])
    keys = concepts_of(d)
    lo = int(min(d[f"{k}_true"].min() for k in keys))
    hi = int(max(d[f"{k}_true"].max() for k in keys))
    per: dict[str, dict[str, float]] = {}
    oracle, shrunk, levels = [], [], []
    for k in keys:
        e, t, lvl = d[f"{k}_expected"].to_numpy(float), d[f"{k}_true"].to_numpy(float), d[f"{k}_level"].to_numpy(float)
        err = e - t
        offset = pd.Series(err).groupby(q.to_numpy()).transform("mean").to_numpy()
        qmean = pd.Series(e).groupby(q.to_numpy()).transform("mean").to_numpy()
        fitted = np.empty(len(d))
        for f in sorted(d["fold"].unique()):
            tr, te = (d["fold"] != f).to_numpy(), (d["fold"] == f).to_numpy()
            x = qmean[tr] - e[tr].mean()
            slope = float(x @ (t[tr] - e[tr]) / max(float(x @ x), 1e-12))  # t − ĉ ≈ slope · (question mean − mean)
            fitted[te] = e[te] + slope * (qmean[te] - e[te].mean())
        per[k] = {"c_acc": float(np.mean(lvl == t)),
                  "offset_share_of_squared_error": float(np.mean(offset ** 2) / np.mean(err ** 2)),
                  "c_acc_oracle_offset": float(np.mean(np.clip(np.rint(e - offset), lo, hi) == t)),
                  "c_acc_shrunk_question_means": float(np.mean(np.clip(np.rint(fitted), lo, hi) == t))}
        oracle.append(per[k]["c_acc_oracle_offset"])
        shrunk.append(per[k]["c_acc_shrunk_question_means"])
        levels.append(per[k]["c_acc"])
    common = shared_offsets(pd.DataFrame({k: (d[f"{k}_expected"] - d[f"{k}_true"]).to_numpy(float) for k in keys})
                            .groupby(q.to_numpy()).mean())
    rng = np.random.default_rng(seed)
    labelled = {}
    for n in ns:
        base, moved = [], []
        for _ in range(draws):
            order = rng.permutation(len(d))
            # position of each answer in the draw
            rank = pd.Series(np.arange(len(d)), index=order).sort_index().to_numpy()
            first = pd.Series(rank).groupby(q.to_numpy()).rank(method="first").to_numpy() <= n
            size = q.map(q.value_counts()).to_numpy()
            calib = first & (size > n)  # a question keeps at least one answer to grade
            rest = ~calib & (pd.Series(calib).groupby(q.to_numpy()).transform("any").to_numpy())
            for k in keys:
                e, t = d[f"{k}_expected"].to_numpy(float), d[f"{k}_true"].to_numpy(float)
                g = (pd.DataFrame({"q": q[calib].to_numpy(), "r": (t - e)[calib]})
                     .groupby("q")["r"].agg(["mean", "size"]))
                shift = (g["mean"] * g["size"] / (g["size"] + lam)).reindex(q[rest].to_numpy()).to_numpy()
                moved.append(float(np.mean(np.clip(np.rint(e[rest] + shift), lo, hi) == t[rest])))
                base.append(float(np.mean(d[f"{k}_level"].to_numpy(float)[rest] == t[rest])))
        labelled[str(n)] = {"c_acc_reader": float(np.mean(base)), "c_acc_with_offset": float(np.mean(moved)),
                            "gain": float(np.mean(moved) - np.mean(base))}
    return {"answers": len(d), "questions": int(q.nunique()), "concepts": per,
            "c_acc": float(np.mean(levels)), "c_acc_oracle_offset": float(np.mean(oracle)),
            "c_acc_shrunk_question_means": float(np.mean(shrunk)),
            "labelled_answers_per_question": labelled, "lambda": lam, "draws": draws, "shared_offsets": common}


def shared_offsets(offsets: pd.DataFrame) -> dict[str, float]:
    """Of a questions × concepts table of offsets: the share of its variance (each concept centred) on the first
    principal component, and the mean correlation of two concepts' offsets over the questions (NaN for one concept)."""
    x = (offsets - offsets.mean()).to_numpy(float)
    var = np.linalg.svd(x, compute_uv=False) ** 2
    corr = offsets.corr().to_numpy()
    pairs = corr[np.triu_indices(len(corr), 1)]
    return {"first_component_share": float(var[0] / var.sum()) if var.sum() > 0 else float("nan"),
            "mean_pairwise_correlation": float(np.mean(pairs)) if len(pairs) else float("nan")}


def prior_em(d: pd.DataFrame, alphas: tuple[float, ...], iters: int = 50) -> dict[str, Any]:
    """C-Acc with each test question's level shares re-estimated by EM from its answers' p̂ (see the module's text):
    per α, the mean over concepts and each concept's. The training shares are the labels' over the other folds."""
    d = d.reset_index(drop=True)
    q = (d["question"] if "question" in d else question_of(d["id"])).to_numpy()
    keys = concepts_of(d)
    lo = int(min(d[f"{k}_true"].min() for k in keys))
    n_levels = int(max(d[f"{k}_true"].max() for k in keys)) - lo + 1
    out: dict[str, Any] = {"c_acc": float(np.mean([np.mean(d[f"{k}_level"] == d[f"{k}_true"]) for k in keys])),
                           "alpha": {}}
    for alpha in alphas:
        per = {}
        for k in keys:
            p = d[[f"{k}_p{lv}" for lv in range(lo, lo + n_levels)]].to_numpy(float)
            t = d[f"{k}_true"].to_numpy(int) - lo
            level = p.argmax(1)
            for f in sorted(d["fold"].unique()):
                te = (d["fold"] == f).to_numpy()
                base = np.maximum(np.bincount(t[~te], minlength=n_levels) / (~te).sum(), 1e-6)
                for question in np.unique(q[te]):
                    rows = np.flatnonzero(te & (q == question))
                    shares, w = base.copy(), p[rows]
                    for _ in range(iters):
                        w = p[rows] * (shares / base)
                        w /= w.sum(1, keepdims=True)
                        shares = (w.sum(0) + alpha * base) / (len(rows) + alpha)
                    level[rows] = w.argmax(1)
            per[k] = float(np.mean(level == t))
        out["alpha"][f"{alpha:g}"] = {"c_acc": float(np.mean(list(per.values()))), "concepts": per}
    return out


def reference_readings(run: Path, device: str = "cpu") -> pd.DataFrame:
    """Each fold model of a k-fold ``run`` reads its test questions' reference answers given as the answer: one row per
    question (``question``, ``fold``, the graded columns such as ``KEY_expected``)."""
    from rubrictool.grade import grade_loaded, load_grader

    rows = []
    for fold_dir in sorted(run.glob("fold-[0-9]*")):
        if not (fold_dir / "split.json").is_file():
            continue
        table = pd.read_csv(fold_dir / "table.csv", dtype=str)
        test = table[table["id"].isin(set(map(str, json.loads((fold_dir / "split.json").read_text())["test"])))]
        refs = test.assign(question=question_of(test["id"])).groupby("question", as_index=False).first()
        refs = refs.assign(id=refs["question"] + ".reference", response=refs["reference"])
        graded = grade_loaded(load_grader(fold_dir), refs, flags=False, device=device)
        rows.append(graded.assign(question=refs["question"].to_numpy(), fold=int(fold_dir.name.split("-")[1])))
    if not rows:
        raise ValueError(f"{run}: no fold-*/ with split.json and weights")
    return pd.concat(rows, ignore_index=True)


def offsets_from_readings(d: pd.DataFrame, readings: pd.DataFrame) -> dict[str, Any]:
    """Per concept, the correlation of the reference's reading with the question's offset, and C-Acc with the offset
    predicted from (reading, question mean) by least squares on the other folds' questions."""
    q = d["question"] if "question" in d else question_of(d["id"])
    keys = concepts_of(d)
    lo = int(min(d[f"{k}_true"].min() for k in keys))
    hi = int(max(d[f"{k}_true"].max() for k in keys))
    per, base, moved = {}, [], []
    for k in keys:
        e, t = d[f"{k}_expected"].to_numpy(float), d[f"{k}_true"].to_numpy(float)
        g = pd.DataFrame({"q": q.to_numpy(), "err": e - t, "e": e, "fold": d["fold"].to_numpy()}).groupby("q").agg(
            offset=("err", "mean"), mean=("e", "mean"), fold=("fold", "first"))
        g = g.join(readings.set_index("question")[f"{k}_expected"].rename("reading"), how="inner")
        out = e.copy()
        for f in sorted(g["fold"].unique()):
            tr, te = g[g["fold"] != f], g[g["fold"] == f]
            X = np.c_[np.ones(len(tr)), tr["reading"], tr["mean"]]
            b = np.linalg.lstsq(X, tr["offset"].to_numpy(), rcond=None)[0]
            shift = pd.Series(np.c_[np.ones(len(te)), te["reading"], te["mean"]] @ b, index=te.index)
            m = (d["fold"] == f).to_numpy()
            out[m] = e[m] - q[m].map(shift).fillna(0).to_numpy()
        r = float(np.corrcoef(g["reading"], g["offset"])[0, 1]) if g["reading"].std() > 0 else float("nan")
        per[k] = {"r_reading_offset": r, "mean_reading": float(g["reading"].mean()),
                  "c_acc": float(np.mean(d[f"{k}_level"] == t)),
                  "c_acc_predicted_offset": float(np.mean(np.clip(np.rint(out), lo, hi) == t))}
        base.append(per[k]["c_acc"])
        moved.append(per[k]["c_acc_predicted_offset"])
    return {"concepts": per, "c_acc": float(np.mean(base)), "c_acc_predicted_offset": float(np.mean(moved))}


FEATURES = ("reference words in the answer", "answer words in the reference", "log answer length",
            "log reference length", "length ratio", "log question length")


def question_features(texts: pd.DataFrame) -> pd.DataFrame:
    """One row per question (indexed by it) of what its texts show, from a table with ``id``, ``question``,
    ``response`` and ``reference``: the means over its answers of lab/transfer.py's overlap features of an
    answer against its reference, and the log of the question's word count."""
    from transfer import overlap_features, words

    q = question_of(texts["id"])
    per = pd.DataFrame(overlap_features(texts["response"], texts["reference"]), columns=list(FEATURES[:-1]))
    per["log question length"] = np.log1p(texts["question"].map(lambda s: len(words(s))).to_numpy())
    return per.groupby(q.to_numpy()).mean()


def offsets_from_features(d: pd.DataFrame, features: pd.DataFrame, ridge: float = 5.0) -> dict[str, Any]:
    """Per concept, the offset predicted from the question's ``features`` (``question_features``) and its mean reading
    by ridge regression (standardised features, answers as weights) on the other folds' questions; C-Acc with it
    removed, and the correlation of the prediction with the offset across questions."""
    q = (d["question"] if "question" in d else question_of(d["id"])).astype(str)
    keys = concepts_of(d)
    lo = int(min(d[f"{k}_true"].min() for k in keys))
    hi = int(max(d[f"{k}_true"].max() for k in keys))
    missing = sorted(set(q) - set(features.index.astype(str)))
    if missing:
        raise ValueError(f"no texts for question(s) {', '.join(missing[:3])}; give the benchmark the predictions came "
                         "from")
    per, base, moved = {}, [], []
    for k in keys:
        e, t = d[f"{k}_expected"].to_numpy(float), d[f"{k}_true"].to_numpy(float)
        g = pd.DataFrame({"q": q.to_numpy(), "err": e - t, "e": e, "fold": d["fold"].to_numpy()}).groupby("q").agg(
            offset=("err", "mean"), mean=("e", "mean"), fold=("fold", "first"), n=("e", "size"))
        g = g.join(features, how="left")
        cols = [*features.columns, "mean"]
        predicted = pd.Series(0.0, index=g.index)
        for f in sorted(g["fold"].unique()):
            tr, te = g[g["fold"] != f], g[g["fold"] == f]
            mu, sd = tr[cols].mean(), tr[cols].std(ddof=0).replace(0, 1.0)
            X = np.c_[np.ones(len(tr)), ((tr[cols] - mu) / sd).to_numpy()]
            w = tr["n"].to_numpy(float)
            pen = ridge * np.diag([0.0] + [1.0] * len(cols))
            b = np.linalg.solve(X.T @ (X * w[:, None]) + pen, X.T @ (tr["offset"].to_numpy() * w))
            predicted[te.index] = np.c_[np.ones(len(te)), ((te[cols] - mu) / sd).to_numpy()] @ b
        out = e - q.map(predicted).to_numpy()
        per[k] = {"r_predicted_offset": float(np.corrcoef(predicted, g["offset"])[0, 1]),
                  "c_acc": float(np.mean(d[f"{k}_level"] == t)),
                  "c_acc_predicted_offset": float(np.mean(np.clip(np.rint(out), lo, hi) == t))}
        base.append(per[k]["c_acc"])
        moved.append(per[k]["c_acc_predicted_offset"])
    return {"features": [*features.columns, "question mean reading"], "ridge": ridge, "concepts": per,
            "c_acc": float(np.mean(base)), "c_acc_predicted_offset": float(np.mean(moved))}


def main(argv: list[str] | None = None) -> int:
    from reccbm import ReccbmError
    from rubrictool.errors import RubrictoolError

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("pooled", type=Path, help="pooled_predictions.csv of a question-grouped k-fold run")
    ap.add_argument("--n", default="1,3,5,10", help="labelled answers per question (comma-separated)")
    ap.add_argument("--lam", type=float, default=5.0, help="shrinkage λ of the offset from n answers: n / (n + λ)")
    ap.add_argument("--draws", type=int, default=20)
    ap.add_argument("--fold-runs", type=Path, help="the k-fold run with its fold weights: read the references too")
    ap.add_argument("--texts", metavar="BENCHMARK",
                    help="predict the offsets from the questions' texts too (e.g. mohler)")
    ap.add_argument("--data-dir", default=None,
                    help="benchmark data for --texts (default: $RUBRICTOOL_DATA, else ./data)")
    ap.add_argument("--prior-em", metavar="ALPHAS",
                    help="re-estimate each question's level shares by EM too, with these "
                    "pseudo-answer weights α (comma-separated, e.g. 0,5,20,100)")
    ap.add_argument("--json", type=Path)
    a = ap.parse_args(argv)
    try:
        alphas = tuple(float(x) for x in a.prior_em.split(",")) if a.prior_em else ()
    except ValueError:
        alphas = (-1.0,)
    if any(not x >= 0 for x in alphas):
        print(f"--prior-em {a.prior_em!r}: give pseudo-answer counts α ≥ 0, comma-separated, e.g. 0,5,20,100",
              file=sys.stderr)
        return 2
    try:
        d = pd.read_csv(a.pooled, dtype={"id": str})
    except (OSError, ValueError) as exc:
        print(f"{a.pooled}: cannot read it ({exc.__class__.__name__}); give a pooled_predictions.csv", file=sys.stderr)
        return 2
    if "fold" not in d or not concepts_of(d):
        print(f"{a.pooled}: no fold column or no KEY_expected/_true/_level columns; give a k-fold run's "
              "pooled_predictions.csv", file=sys.stderr)
        return 2
    out = study(d, tuple(int(n) for n in a.n.split(",")), a.lam, a.draws)
    print(f"{out['answers']} answers, {out['questions']} questions: C-Acc {out['c_acc']:.3f}; the questions' offsets "
          f"removed as the labels give them {out['c_acc_oracle_offset']:.3f}; question means shrunk (no label) "
          f"{out['c_acc_shrunk_question_means']:.3f}")
    for k, v in out["concepts"].items():
        print(f"  {k}: C-Acc {v['c_acc']:.3f}, offsets {v['offset_share_of_squared_error']:.0%} of the squared error, "
              f"oracle {v['c_acc_oracle_offset']:.3f}, shrunk {v['c_acc_shrunk_question_means']:.3f}")
    sh = out["shared_offsets"]
    print(f"  the offsets shared by the concepts: first component {sh['first_component_share']:.0%} of their variance, "
          f"two concepts' offsets correlate {sh['mean_pairwise_correlation']:.2f} on average")
    for n, v in out["labelled_answers_per_question"].items():
        print(f"  {n} labelled answer(s) a question: {v['c_acc_reader']:.3f} -> {v['c_acc_with_offset']:.3f} "
              f"({v['gain']:+.3f})")
    if a.prior_em:
        em = prior_em(d, alphas)
        out["prior_em"] = em
        for alpha, v in em["alpha"].items():
            print(f"  each question's level shares by EM, α {alpha}: C-Acc {em['c_acc']:.3f} -> {v['c_acc']:.3f}")
    if a.texts:
        from rubrictool.data import load_benchmark

        try:
            feats = question_features(load_benchmark(a.texts, a.data_dir))
            fit = offsets_from_features(d, feats)
        except (RubrictoolError, OSError, ValueError, KeyError) as exc:
            print(f"--texts {a.texts}: {str(exc).splitlines()[0] if str(exc) else exc.__class__.__name__}",
                  file=sys.stderr)
            return 2
        out["question_features"] = fit | {"benchmark": a.texts}
        print(f"  offsets predicted from the questions' texts and mean reading: C-Acc {fit['c_acc']:.3f} -> "
              f"{fit['c_acc_predicted_offset']:.3f}")
        for k, v in fit["concepts"].items():
            print(f"    {k}: r(predicted, offset) {v['r_predicted_offset']:+.2f}, C-Acc {v['c_acc']:.3f} -> "
                  f"{v['c_acc_predicted_offset']:.3f}")
    if a.fold_runs:
        try:
            readings = reference_readings(a.fold_runs)
        except (RubrictoolError, ReccbmError, OSError, ValueError, KeyError) as exc:  # not a k-fold run with weights
            print(f"--fold-runs {a.fold_runs}: {str(exc).splitlines()[0] if str(exc) else exc.__class__.__name__}; "
                  "give the k-fold run that made the pooled predictions, its fold-*/ weights kept", file=sys.stderr)
            return 2
        ref = offsets_from_readings(d, readings)
        out["reference_readings"] = ref | {"run": str(a.fold_runs)}
        print(f"  offsets predicted from the reference's reading and the question mean: C-Acc {ref['c_acc']:.3f} -> "
              f"{ref['c_acc_predicted_offset']:.3f}")
        for k, v in ref["concepts"].items():
            print(f"    {k}: the reference read at {v['mean_reading']:.2f} on average; r(reading, offset) "
                  f"{v['r_reading_offset']:+.2f}")
    if a.json:
        a.json.write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
