"""Reading the concepts of unseen questions: what the fine-tuned concept encoder adds to the reference answer's words.

On question-grouped folds (``benchmarks/folds.py --by question``) the default's concept accuracy falls well below its
random-fold value. This study asks how much of the concept reading that does transfer is more than lexical overlap
with the reference answer. Per concept, on the pooled test outputs of a k-fold run (every answer tested once by the
fold model that never saw its question; ``pooled_predictions.csv`` carries the fold):

- ``model``: the run's predicted level (``<k>_level``);
- ``overlap``: a multinomial logistic regression on five question-independent features of the answer against its
  reference (share of the reference's content words in the answer, share of the answer's words in the reference,
  log lengths of both, their ratio), fitted on the other folds' answers and their adjudicated levels;
- ``stacked``: the same regression on the model's log level probabilities and those features, fitted on the other
  folds' pooled test outputs (each fold's outputs come from a model that did not see that fold's questions);
- the share of the commonest level (what a constant reader gets).

With ``--semantic`` also: ``semantic``, the regression on the overlap features and six features of the answer against
its reference read by the *pretrained* sentence encoder (the default backbone, frozen, each text read alone, as it was
trained to compare sentences): BERTScore-style precision, recall and F of the token states' best matches, the cosine of
the mean states, and the share of reference tokens matched above 0.5 and 0.7; and ``stacked_semantic``, the model's log
level probabilities with all of them.

The same per-concept accuracies of a random-fold run are printed beside them when ``--random`` is given. Last, the
grade: the model's against a regression on every concept's log probabilities and the overlap features (fitted on the
other folds, as above): does the better concept reading move the grade?

    # the kept runs of `plain` (the default to 2026-11-26) in benchmarks/results/folds-by-question, folds
    .venv/bin/python lab/transfer.py
    .venv/bin/python lab/transfer.py --out lab/results/transfer.json
    .venv/bin/python lab/transfer.py --grouped benchmarks/results/folds-by-question/default \
        --random benchmarks/results/folds/default --semantic --out lab/results/transfer_default_semantic.json

Concept labels: majority vote over three LLM annotation passes, NOT validated by experts.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from numpy.typing import NDArray

STOP = frozenset(("the", "a", "an", "of", "to", "and", "or", "in", "on", "is", "are", "be", "it", "that", "this", "for",
                  "with", "as", "by", "at", "from", "which", "can"))
FEATURES = ("reference words in the answer", "answer words in the reference", "log answer length",
            "log reference length", "length ratio")


def words(text: Any) -> list[str]:
    return [t for t in re.findall(r"[a-z0-9]+", str(text).lower()) if t not in STOP]


def overlap_features(responses: pd.Series, references: pd.Series) -> NDArray[Any]:
    """(N, 5) question-independent features of each answer against its reference answer (FEATURES)."""
    rows = []
    for resp, ref in zip(responses, references):
        a, r = words(resp), words(ref)
        shared = len(set(a) & set(r))
        rows.append([shared / max(1, len(set(r))), shared / max(1, len(set(a))), np.log1p(len(a)), np.log1p(len(r)),
                     len(a) / max(1, len(r))])
    return np.asarray(rows, dtype=float)


SEMANTIC = ("precision", "recall", "F", "mean-state cosine", "reference matched > 0.5", "reference matched > 0.7")


def semantic_features(responses: pd.Series, references: pd.Series, backbone: str | None = None,
                      batch_size: int = 64) -> NDArray[Any]:
    """(N, 6) features of each answer against its reference answer (SEMANTIC) from a frozen sentence encoder's token
    states, each text read alone (``backbone``: a local folder or hub name; None: the default MiniLM)."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    from reccbm.encoder import default_backbone

    path = backbone or default_backbone()
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModel.from_pretrained(path).eval()

    def states(texts: list[str]) -> list[NDArray[Any]]:
        out = []
        for i in range(0, len(texts), batch_size):
            b = tok(texts[i:i + batch_size], padding=True, truncation=True, max_length=128, return_tensors="pt")
            with torch.no_grad():
                h = model(**b).last_hidden_state
            for j in range(h.shape[0]):
                n = int(b["attention_mask"][j].sum())
                x = h[j, 1:n - 1].numpy()  # without [CLS] and [SEP]
                out.append(x if len(x) else np.zeros((1, h.shape[-1]), dtype=np.float32))
        return out

    refs = [str(r) for r in references]
    unique = sorted(set(refs))
    by_ref = dict(zip(unique, states(unique)))
    rows = []
    for a, ref in zip(states([str(r) for r in responses]), refs):
        r = by_ref[ref]
        sim = ((a / (np.linalg.norm(a, axis=1, keepdims=True) + 1e-9))
               @ (r / (np.linalg.norm(r, axis=1, keepdims=True) + 1e-9)).T)
        prec, rec = float(sim.max(1).mean()), float(sim.max(0).mean())
        ma, mr = a.mean(0), r.mean(0)
        rows.append([prec, rec, 2 * prec * rec / max(prec + rec, 1e-9),
                     float(ma @ mr / (np.linalg.norm(ma) * np.linalg.norm(mr) + 1e-9)),
                     float((sim.max(0) > 0.5).mean()), float((sim.max(0) > 0.7).mean())])
    return np.asarray(rows, dtype=float)


def leave_fold_out(x: NDArray[Any], y: NDArray[Any], folds: NDArray[Any]) -> NDArray[Any]:
    """Predictions for each fold from a standardised multinomial logistic regression fitted on the other folds."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    out = np.empty(len(y), dtype=y.dtype)
    for f in np.unique(folds):
        test = folds == f
        clf = make_pipeline(StandardScaler(), LogisticRegression(max_iter=3000)).fit(x[~test], y[~test])
        out[test] = clf.predict(x[test])
    return out


def concept_transfer(pooled: pd.DataFrame, items: pd.DataFrame, keys: list[str],
                     semantic: NDArray[Any] | None = None) -> pd.DataFrame:
    """Per concept: the commonest level's share and the accuracy of the model, the overlap probe and the stack; with
    ``semantic`` (the pooled answers' :func:`semantic_features`, in their order) the semantic probe and its stack."""
    items = items.set_index("id").loc[pooled["id"]]
    feats = overlap_features(items["response"], items["reference"])
    folds = pooled["fold"].to_numpy()
    rows = []
    for k in keys:
        y = pooled[f"{k}_true"].to_numpy()
        logp = np.log(pooled[[c for c in pooled.columns if re.fullmatch(rf"{re.escape(k)}_p\d+", c)]].to_numpy(float)
                      + 1e-6)
        row = {"concept": k, "commonest_level": float(pd.Series(y).value_counts(normalize=True).iloc[0]),
               "model": float((pooled[f"{k}_level"].to_numpy() == y).mean()),
               "overlap": float((leave_fold_out(feats, y, folds) == y).mean()),
               "stacked": float((leave_fold_out(np.hstack([logp, feats]), y, folds) == y).mean())}
        if semantic is not None:
            row["semantic"] = float((leave_fold_out(np.hstack([feats, semantic]), y, folds) == y).mean())
            row["stacked_semantic"] = float((leave_fold_out(np.hstack([logp, feats, semantic]), y, folds) == y).mean())
        rows.append(row)
    return pd.DataFrame(rows)


def grade_transfer(pooled: pd.DataFrame, items: pd.DataFrame, keys: list[str]) -> dict[str, dict[str, float]]:
    """T-Acc and QWK of the model's grade and of the stacked grade regression (concept log probabilities + overlap)."""
    from sklearn.metrics import accuracy_score, cohen_kappa_score

    items = items.set_index("id").loc[pooled["id"]]
    logp = np.log(pooled[[c for k in keys for c in pooled.columns if re.fullmatch(rf"{re.escape(k)}_p\d+", c)]]
                  .to_numpy(float) + 1e-6)
    x = np.hstack([logp, overlap_features(items["response"], items["reference"])])
    y = pooled["grade_true"].to_numpy()
    stacked = leave_fold_out(x, y, pooled["fold"].to_numpy())
    return {name: {"t_acc": float(accuracy_score(y, p)), "qwk": float(cohen_kappa_score(y, p, weights="quadratic"))}
            for name, p in (("model", pooled["grade"].to_numpy()), ("stacked", stacked))}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--grouped", default="benchmarks/results/folds-by-question/plain",
                    help="a question-grouped k-fold run (its pooled_predictions.csv)")
    ap.add_argument("--random", default="benchmarks/results/folds/plain",
                    help="the same configuration on random folds, for its per-concept accuracy ('' to skip)")
    ap.add_argument("--data-dir", default=None, help="benchmark data (default: $RUBRICTOOL_DATA, else ./data)")
    ap.add_argument("--semantic", action="store_true",
                    help="also the pretrained sentence encoder's reading of answer against reference (about a minute)")
    ap.add_argument("--backbone", default=None, help="the sentence encoder for --semantic (default: MiniLM)")
    ap.add_argument("--out", default=None, help="also write the table as JSON here")
    args = ap.parse_args(argv)

    from rubrictool.pipeline import benchmark_table

    rb, table, _ = benchmark_table("mohler", args.data_dir)
    pooled = pd.read_csv(Path(args.grouped) / "pooled_predictions.csv", dtype={"id": str})
    items = table.assign(id=table["id"].astype(str))
    semantic = None
    if args.semantic:
        rows = items.set_index("id").loc[pooled["id"]]
        try:
            semantic = semantic_features(rows["response"], rows["reference"], args.backbone)
        except (OSError, ValueError) as exc:  # transformers: no such folder or hub name, not a model
            print(f"--backbone {args.backbone}: cannot load it ({str(exc).splitlines()[0]}); give a local model folder "
                  "or a hub name, or leave it out for MiniLM", file=sys.stderr)
            return 2
    df = concept_transfer(pooled, items, rb.keys, semantic)
    if args.random:
        rnd = pd.read_csv(Path(args.random) / "pooled_predictions.csv", dtype={"id": str})
        df.insert(1, "model_random_folds", [float((rnd[f"{k}_level"] == rnd[f"{k}_true"]).mean()) for k in rb.keys])
    mean = {c: float(df[c].mean()) for c in df.columns if c != "concept"}
    df = pd.concat([df, pd.DataFrame([{"concept": "mean", **mean}])], ignore_index=True)
    print("Concept accuracy on unseen questions (pooled test outputs; concept labels: three LLM passes, not "
          "expert-validated)\n")
    cols = list(df.columns)
    print("| " + " | ".join(cols) + " |\n" + "|---" * len(cols) + "|")
    for r in df.itertuples(index=False):
        print("| " + " | ".join(v if isinstance(v, str) else f"{v:.3f}" for v in r) + " |")
    grade = grade_transfer(pooled, table.assign(id=table["id"].astype(str)), rb.keys)
    print("\nGrade: " + "; ".join(f"{n} T-Acc {m['t_acc']:.3f}, QWK {m['qwk']:.3f}" for n, m in grade.items()))
    if args.out:
        doc = {"grouped": args.grouped, "random": args.random,
               "features": list(FEATURES) + (list(SEMANTIC) if args.semantic else []),
               "table": df.to_dict(orient="records"), "grade": grade}
        Path(args.out).write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
