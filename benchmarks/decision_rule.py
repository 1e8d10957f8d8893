"""Decision rules on a k-fold run's own models: argmax against the rules of :mod:`reccbm.decision`.

A decision rule never changes a model, so every rule is measured on the same fold models: each fold's kept model
predicts its dev answers (which it never trained on) and its test answers once (cached in ``--out``); a rule is
fitted on the dev answers and applied to the test answers; the test answers of every fold are pooled and each rule
is compared with argmax by a paired bootstrap (95 % CIs), with the low-mark figures:
the share of failing answers (below the pass mark) given a pass mark, their mean error, the mean error per
true mark, macro-F1.

    python benchmarks/decision_rule.py --runs /path/to/folds/default --out benchmarks/out/decision/random
    python benchmarks/decision_rule.py --runs R --out O --fail-passed 2 --pass-failed 0   # another cost
    python benchmarks/decision_rule.py --runs R --out O \
        --against benchmarks/results/folds/default/pooled_predictions.csv   # paired with the kept marks
    python benchmarks/decision_rule.py --smoke     # two made-up folds of over-confident, compressed distributions

``--against`` pairs every rule with a kept grader's pooled predictions on the answers both graded (today's default's,
say: the candidate reader and rule against the default as it is), beside the pairing with the run's own argmax. Every
rule's pooled marks are written to ``marks.csv`` (id, true mark, one column a rule), and each table says, besides the
failing answers passed, the share of passing answers each rule fails: the price of the failing answers it catches.
With two folds or more, the calibrated Bayes rule is also fitted on the other folds' test answers rather than the
fold's own dev answers: on question-grouped folds these are answers to questions their model never saw, so the rows
tell whether a rule fitted on seen questions is what fails on new ones.

Concept labels (Mohler): majority vote over three independent LLM annotation passes, NOT validated by experts.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np
import pandas as pd

from reccbm.decision import Cutpoints, bayes_marks, cost_matrix, fit_calibrated_bayes, fit_cutpoints
from reccbm.metrics import macro_f1, quadratic_weighted_kappa
from rubrictool.grade import load_grader
from rubrictool.textsafe import md_table
from rubrictool.train.runs import open_run

SWEEP = (0.0, 1.0, 2.0, 4.0, 8.0, 12.0, 16.0, 24.0)
OTHER_FOLDS = (8.0, 16.0)  # costs of the rule fitted on the other folds' test answers instead of the fold's dev answers


def fold_predictions(fold_dir: Path, cache: Path) -> dict[str, Any]:
    """dev and test grade probabilities of one fold's kept model (cached as .npz)."""
    if cache.is_file():
        z = np.load(cache, allow_pickle=False)
        return {k: z[k] for k in z.files}
    split = json.loads((fold_dir / "split.json").read_text())
    run = open_run(fold_dir)
    table = run.load_table()
    table["id"] = table["id"].astype(str)
    grader = load_grader(fold_dir)  # the fold's reccbm.Grader
    gmin = grader.rubric.grades[0]
    out: dict[str, Any] = {}
    for part in ("dev", "test"):
        rows = table.set_index("id").loc[split[part]].reset_index()
        preds = grader.predictions(rows, batch_size=64)
        out[f"{part}_probs"] = preds.grade_probs.astype(np.float64)
        out[f"{part}_y"] = rows["grade"].to_numpy().astype(np.int64) - gmin
        out[f"{part}_ids"] = np.asarray(rows["id"].astype(str).tolist(), dtype=str)
    tmp = cache.with_suffix(".tmp.npz")
    np.savez(tmp, **out)
    tmp.replace(cache)
    return out


def figures(y: np.ndarray[Any, Any], pred: np.ndarray[Any, Any], pass_index: int, n_marks: int) -> dict[str, Any]:
    fail = y < pass_index
    err = pred - y
    per_mark = {int(m): {"n": int((y == m).sum()), "mean_error": float(err[y == m].mean()) if (y == m).any() else None,
                         "recall": float((pred[y == m] == m).mean()) if (y == m).any() else None}
                for m in range(n_marks)}
    return {"t_acc": float((pred == y).mean()), "t_f1": macro_f1(y, pred),
            "qwk": quadratic_weighted_kappa(y, pred, n_marks),
            "fail_passed": float((pred[fail] >= pass_index).mean()), "fail_error": float(err[fail].mean()),
            "pass_failed": float((pred[~fail] < pass_index).mean()),
            "per_mark": per_mark, "predicted": {int(m): int((pred == m).sum()) for m in range(n_marks)}}


def paired(y: np.ndarray[Any, Any], a: np.ndarray[Any, Any], b: np.ndarray[Any, Any], pass_index: int, n_marks: int,
           n_boot: int = 2000, seed: int = 0) -> dict[str, list[float]]:
    """95 % CIs of b − a over answers resampled with replacement (T-Acc, T-F1, QWK, failing passed)."""
    rng = np.random.default_rng(seed)
    stats: dict[str, list[float]] = {"t_acc": [], "t_f1": [], "qwk": [], "fail_passed": []}
    n = len(y)
    for _ in range(n_boot):
        i = rng.integers(0, n, n)
        yy, aa, bb = y[i], a[i], b[i]
        stats["t_acc"].append(float((bb == yy).mean() - (aa == yy).mean()))
        stats["t_f1"].append(macro_f1(yy, bb) - macro_f1(yy, aa))
        stats["qwk"].append(quadratic_weighted_kappa(yy, bb, n_marks) - quadratic_weighted_kappa(yy, aa, n_marks))
        f = yy < pass_index
        stats["fail_passed"].append(float((bb[f] >= pass_index).mean() - (aa[f] >= pass_index).mean()))
    return {k: [float(np.percentile(v, 2.5)), float(np.percentile(v, 97.5))] for k, v in stats.items()}


def markdown(frame: pd.DataFrame) -> str:
    """A DataFrame as a Markdown table, its index as the first column."""
    head = [str(frame.index.name or ""), *(str(c) for c in frame.columns)]
    return "\n".join(md_table(head, ([i, *row] for i, row in zip(frame.index, frame.to_numpy())))).rstrip("\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=Path, default=None, help="a trained run, or a k-fold folder holding fold-<i>/")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--smoke", action="store_true", help="two made-up folds (no model): the rules and the tables run")
    ap.add_argument("--pass-mark", type=int, default=None, help="default: the scale's midpoint rounded up")
    ap.add_argument("--fail-passed", type=float, default=2.0, help="extra cost of a failing answer passed")
    ap.add_argument("--pass-failed", type=float, default=1.0, help="extra cost of a passing answer failed")
    ap.add_argument("--against", type=Path, default=None,
                    help="a kept pooled_predictions.csv (id, grade_true, grade): every rule paired with it as well")
    args = ap.parse_args()
    if args.smoke:
        with tempfile.TemporaryDirectory() as tmp:
            args.runs = args.out = Path(tmp)
            kept = []
            for i in range(2):
                (args.out / f"fold-{i}").mkdir()
                (args.out / f"fold-{i}" / "metrics.json").write_text("{}")
                fold = smoke_predictions(i)
                np.savez(args.out / f"fold-{i}.npz", **fold)
                kept.append(pd.DataFrame({"id": fold["test_ids"], "grade_true": fold["test_y"] + 1, "grade": 6}))
            args.against = args.out / "kept.csv"  # a kept grader that always gives the top mark, on a 1-6 scale
            pd.concat(kept).to_csv(args.against, index=False)
            report(args)
        return
    if args.runs is None or args.out is None:
        ap.error("--runs and --out are needed (or --smoke)")
    if args.against is not None and not args.against.is_file():
        ap.error(f"--against {args.against}: no such file; give a k-fold run's pooled_predictions.csv")
    report(args)


def smoke_predictions(seed: int, n: int = 200) -> dict[str, Any]:
    """A fold's dev and test answers with made-up distributions: true marks 0..5 mostly at the top, read toward 5."""
    rng = np.random.default_rng(seed)
    out: dict[str, Any] = {}
    for part in ("dev", "test"):
        y = rng.choice(6, size=n, p=[0.05, 0.05, 0.1, 0.15, 0.25, 0.4])
        centre = 3.0 + 0.4 * y + rng.normal(0, 0.3, n)
        logits = -((np.arange(6)[None, :] - centre[:, None]) ** 2) / 0.2
        p = np.exp(logits - logits.max(1, keepdims=True))
        out[f"{part}_probs"], out[f"{part}_y"] = p / p.sum(1, keepdims=True), y
        out[f"{part}_ids"] = np.asarray([f"{seed}-{part}{i}" for i in range(n)], dtype=str)
    return out


def report(args: argparse.Namespace) -> None:
    """Every rule on every complete fold of ``args.runs`` (its predictions cached in ``args.out``), pooled."""
    args.out.mkdir(parents=True, exist_ok=True)
    folds = sorted(p for p in args.runs.glob("fold-*") if p.is_dir() and (p / "metrics.json").is_file())
    if not folds and (args.runs / "metrics.json").is_file():
        folds = [args.runs]  # one run: its own dev and test answers
    if not folds:
        raise SystemExit(f"no trained run and no complete fold-<i>/ in {args.runs}")
    y_all: list[np.ndarray[Any, Any]] = []
    ids_all: list[np.ndarray[Any, Any]] = []
    rules_all: dict[str, list[np.ndarray[Any, Any]]] = {}
    folds_used: list[str] = []
    fps = []
    for fd in folds:
        t0 = time.time()
        fps.append(fold_predictions(fd, args.out / f"{fd.name}.npz"))
        print(f"{fd.name}: {len(fps[-1]['test_y'])} test answers ({time.time() - t0:.0f} s)", flush=True)
    for i, (fd, fp) in enumerate(zip(folds, fps)):
        n_marks = fp["dev_probs"].shape[1]
        # below the midpoint fails
        pass_index = args.pass_mark if args.pass_mark is not None else -(-(n_marks - 1) // 2)
        cost = cost_matrix(n_marks, pass_index, args.fail_passed, args.pass_failed)
        plain = cost_matrix(n_marks)
        rules = {
            "argmax": fp["test_probs"].argmax(1),
            "bayes |error|": bayes_marks(fp["test_probs"], plain),
            "bayes course cost": bayes_marks(fp["test_probs"], cost),
            "expected mark rounded": Cutpoints.rounding(n_marks).marks(fp["test_probs"]),
            "cutpoints |error| (dev)": fit_cutpoints(fp["dev_probs"], fp["dev_y"], plain).marks(fp["test_probs"]),
            "cutpoints course cost (dev)": fit_cutpoints(fp["dev_probs"], fp["dev_y"], cost).marks(fp["test_probs"]),
        }
        for extra in SWEEP:  # what a course's cost of passing a failing answer buys
            c = cost_matrix(n_marks, pass_index, extra, args.pass_failed)
            rules[f"calibrated bayes, failing passed costs +{extra:g}"] = fit_calibrated_bayes(
                fp["dev_probs"], fp["dev_y"], c).marks(fp["test_probs"])
            rules[f"cutpoints, failing passed costs +{extra:g}"] = fit_cutpoints(
                fp["dev_probs"], fp["dev_y"], c).marks(fp["test_probs"])
        if len(fps) > 1:  # fitted on the other folds' test answers: on grouped folds, answers to questions unseen
            others = [f for j, f in enumerate(fps) if j != i]
            probs, ys = np.concatenate([f["test_probs"] for f in others]), np.concatenate([f["test_y"] for f in others])
            for extra in OTHER_FOLDS:
                c = cost_matrix(n_marks, pass_index, extra, args.pass_failed)
                rules[f"calibrated bayes on the other folds' test answers, +{extra:g}"] = fit_calibrated_bayes(
                    probs, ys, c).marks(fp["test_probs"])
        for k, v in rules.items():
            rules_all.setdefault(k, []).append(v)
        y_all.append(fp["test_y"])
        ids_all.append(np.asarray(fp["test_ids"]).astype(str))
        folds_used.append(fd.name)
    y = np.concatenate(y_all)
    pooled = {k: np.concatenate(v) for k, v in rules_all.items()}
    ids = np.concatenate(ids_all)
    report: dict[str, Any] = {"runs": str(args.runs), "folds": folds_used, "pass_index": pass_index,
                              "fail_passed_cost": args.fail_passed, "pass_failed_cost": args.pass_failed,
                              "n": len(y), "rules": {}}
    kept = kept_marks(args.against, ids, y) if args.against is not None else None
    if kept is not None:
        report["against"] = {"path": str(args.against), "n": int(kept[0].sum()),
                             **figures(y[kept[0]], kept[1], pass_index, n_marks)}
    print(f"{len(pooled)} rules on {len(y)} answers: paired bootstrap CIs", flush=True)
    for k, pred in pooled.items():
        report["rules"][k] = figures(y, pred, pass_index, n_marks)
        if k != "argmax":
            report["rules"][k]["vs_argmax"] = paired(y, pooled["argmax"], pred, pass_index, n_marks)
        if kept is not None:
            both, a = kept
            report["rules"][k]["vs_against"] = paired(y[both], a, pred[both], pass_index, n_marks)
    (args.out / "decision.json").write_text(json.dumps(report, indent=1) + "\n")
    marks = pd.DataFrame({"id": ids, "grade_true": y, **{k: v for k, v in pooled.items()}})
    tmp = args.out / "marks.csv.tmp"
    marks.to_csv(tmp, index=False)
    tmp.replace(args.out / "marks.csv")
    tables = [rule_table(report, "vs_argmax")]
    if kept is not None:
        a = report["against"]
        tables.append(f"Against {args.against} ({a['n']} answers; T-Acc {a['t_acc']:.3f}, T-F1 {a['t_f1']:.3f}, "
                      f"QWK {a['qwk']:.3f}, failing passed {a['fail_passed']:.0%}, passing failed "
                      f"{a['pass_failed']:.0%}), paired 95 % CIs of rule − kept:\n\n"
                      + rule_table(report, "vs_against"))
    text = "\n\n".join(tables)
    (args.out / "decision.md").write_text(text + "\n")
    print(text)


def kept_marks(path: Path, ids: np.ndarray[Any, Any], y: np.ndarray[Any, Any]
               ) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """A kept pooled_predictions.csv read onto the pooled answers: (which answers it graded, its 0-based marks)."""
    if not path.is_file():
        raise SystemExit(f"--against {path}: no such file; give a k-fold run's pooled_predictions.csv")
    try:
        kept = pd.read_csv(path, dtype={"id": str})
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as e:
        raise SystemExit(f"--against {path}: not a readable CSV ({type(e).__name__}); give a pooled_predictions.csv")
    missing = [c for c in ("id", "grade_true", "grade") if c not in kept.columns]
    if missing:
        raise SystemExit(f"{path}: no column {', '.join(missing)}; --against takes a pooled_predictions.csv")
    kept = kept.set_index("id")
    both = np.isin(ids, kept.index.to_numpy())
    if not both.any():
        raise SystemExit(f"{path}: none of the {len(ids)} pooled answers is in it; is it the same data set?")
    rows = kept.loc[ids[both]]
    offset = rows["grade_true"].to_numpy(int) - y[both]  # its marks on the rubric's scale, ours 0-based
    if len(set(offset.tolist())) != 1:
        raise SystemExit(f"{path}: its true marks do not match the run's for the same ids; is it the same data set?")
    return both, rows["grade"].to_numpy(int) - int(offset[0])


def rule_table(report: dict[str, Any], against: str) -> str:
    """Every rule's pooled figures, with the paired CIs of ``against`` (``vs_argmax`` or ``vs_against``)."""
    rows = []
    for k, r in report["rules"].items():
        ci = r.get(against, {})

        def fmt(m: str, ci: dict[str, list[float]] = ci) -> str:
            return f" [{ci[m][0]:+.3f}, {ci[m][1]:+.3f}]" if m in ci else ""

        pm = r["per_mark"]
        rows.append({"rule": k, "T-Acc": f"{r['t_acc']:.3f}{fmt('t_acc')}", "T-F1": f"{r['t_f1']:.3f}{fmt('t_f1')}",
                     "QWK": f"{r['qwk']:.3f}{fmt('qwk')}",
                     "failing passed": f"{r['fail_passed']:.0%}", "failing error": f"{r['fail_error']:+.2f}",
                     "passing failed": f"{r['pass_failed']:.0%}",
                     "error by mark": " ".join(f"{m}:{pm[m]['mean_error']:+.2f}" for m in pm if pm[m]["n"])})
    return markdown(pd.DataFrame(rows).set_index("rule"))


if __name__ == "__main__":
    main()
