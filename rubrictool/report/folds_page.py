"""``rubrictool report --run KFOLD``: one page over the pooled predictions of every fold of ``train --folds k``.

Every answer was tested once, by the one fold that did not train on it, so the pooled page covers the whole table
where a single run's page covers its few test answers. :func:`build_folds_report` gathers, from
``pooled_predictions.csv``, ``folds.json`` and the fold runs:

* every grade metric with its 95 % bootstrap CI, beside the same metric of the majority class, the points grader
  (:func:`rubrictool.points.points_column`) and the oracle-concept baseline, each with its CI, and the paired bootstrap
  difference model − baseline with its CI;
* one row per fold, constant folds (the model gives every test answer one grade) marked;
* the verdict in words, drawn from those intervals (a recommendation only where its CI excludes 0);
* with ``curve``, where the folds' number of labelled answers sits on a learning curve;
* what the folds trained with (preset, encoder trained or frozen, backbone) and who made the labels.

:func:`render_folds_markdown` and :func:`render_folds_html` lay out the same blocks; :func:`write_folds_report`
writes report.html (self-contained), report.md, report.json, confusion.png and the tables as CSV.
"""

from __future__ import annotations

import html
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml

from rubrictool.errors import TrainError
from rubrictool.io import writable_dir
from rubrictool.points import points_column
from rubrictool.report import figures
from rubrictool.textsafe import md_inline
from rubrictool.train.kfold import BASELINES, fold_rows, pooled_table, training_text
from rubrictool.train.labels import describe_labels

__all__ = ["FoldsReport", "audit_gain", "build_folds_report", "folds_verdict", "render_folds_html",
           "render_folds_markdown",
           "write_folds_report"]

METRIC_NAMES = {"t_acc": "T-Acc (exact agreement)", "t_f1": "T-F1", "qwk": "QWK", "adjacent": "adjacent agreement (±1)",
                "rmse": "RMSE (lower is better)"}
N_BOOT = 1000


@dataclass
class FoldsReport:
    """The data of the pooled page; ``table``: per metric the model and baselines with CIs (kfold.pooled_table)."""

    title: str
    run: str
    folds: int
    n: int
    training: str
    labels: str | None
    baselines: list[str]
    table: list[dict[str, Any]]
    per_fold: list[dict[str, Any]]
    summary: dict[str, Any]
    verdict: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    curve: dict[str, Any] = field(default_factory=dict)
    unavailable: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    provenance: dict[str, Any] = field(default_factory=dict)
    images: dict[str, bytes] = field(default_factory=dict)
    n_boot: int = N_BOOT
    low_marks: dict[str, Any] = field(default_factory=dict)  # rubrictool.evaluate.low_marks on the pooled answers
    reliability: pd.DataFrame = field(default_factory=pd.DataFrame)  # rubrictool.evaluate.reliability.folds_reliability
    route: dict[str, Any] = field(default_factory=dict)  # rubrictool.route: figures, choice, lines
    pass_mark: str = ""  # the pass mark and the costs of pass/fail errors, in words


def _ci(c: dict[str, float]) -> str:
    return f"{c['value']:.3f} [{c['lo']:.3f}, {c['hi']:.3f}]"


def _diff(c: dict[str, float]) -> str:
    return f"{c['diff']:+.3f} [{c['lo']:+.3f}, {c['hi']:+.3f}]"


def _names(values: list[Any]) -> str:
    items = [str(v) for v in values]
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def build_folds_report(run_dir: str | Path, *, curve: str | Path | None = None, n_boot: int = N_BOOT,
                       seed: int = 0) -> FoldsReport:
    """The pooled page of a finished k-fold run (see the module docstring). TrainError for a folder that is not one,
    or whose folds are not all finished."""
    from rubrictool.train.runs import open_run

    path = Path(run_dir)
    if not (path / "pooled_predictions.csv").is_file() or not (path / "folds.json").is_file():
        done = sorted(p.name for p in path.glob("fold-*") if (p / "run.json").is_file())
        raise TrainError(f"{path} is not a finished k-fold run: no pooled_predictions.csv and folds.json "
                         f"({len(done)} fold run(s) finished)",
                         hint="run the same `rubrictool train --folds k --out` again: finished folds are read back")
    summary = json.loads((path / "folds.json").read_text())
    pooled = pd.read_csv(path / "pooled_predictions.csv", dtype={"id": str})
    fold0 = open_run(path / "fold-0")
    rubric = fold0.rubric
    unavailable: list[str] = []
    pts = points_column(pooled, rubric)
    if pts is not None:
        pooled["points"] = pts
    else:
        unavailable.append("the points grader: the pooled answers have no adjudicated level of every concept")
    baselines = [b for b in BASELINES if b in pooled]
    G = int(summary.get("grade_levels") or rubric.grade.max - rubric.grade.min + 1)
    metrics = ["t_acc", "t_f1", "qwk", *(["adjacent"] if G > 2 else []), "rmse"]
    table = pooled_table(pooled, metrics, baselines, n_boot, seed)
    per_fold = fold_rows(pooled, n_boot, seed)
    k = int(summary.get("folds") or len(per_fold))
    title = f"rubrictool report — {rubric.name} · {summary.get('variant')} · {k}-fold · {path.name}"
    r = FoldsReport(title, str(path), k, len(pooled), training_text(summary, fold0.config),
                    describe_labels(summary.get("labels") or {}), baselines, table, per_fold, summary,
                    unavailable=unavailable, notes=[str(n) for n in summary.get("notes") or []], n_boot=n_boot)
    r.warnings = [str(w.get("message")) for w in summary.get("warnings") or [] if isinstance(w, dict)]
    grades = list(range(rubric.grade.min, rubric.grade.max + 1))
    cm = np.zeros((G, G), dtype=np.int64)
    np.add.at(cm, (pooled["grade_true"].to_numpy() - rubric.grade.min, pooled["grade"].to_numpy() - rubric.grade.min),
              1)
    r.images["confusion.png"] = figures.confusion_png(cm, grades)
    from rubrictool.evaluate import low_marks
    from rubrictool.evaluate.reliability import folds_reliability

    r.low_marks = low_marks(pooled["grade_true"].to_numpy(), pooled["grade"].to_numpy(), grades, rubric.pass_mark,
                            n_boot, seed)
    r.reliability = folds_reliability(summary)
    r.route = summary.get("route") or _route(pooled, rubric, summary, fold0.table, n_boot, seed)
    r.route = _route_now(r.route, pooled, rubric, summary, audit_gain(path), n_boot, seed)
    costs = rubric.costs
    stated = ("the rubric states it" if rubric.grade.pass_mark is not None
              else "the scale’s midpoint: the rubric states none")
    r.pass_mark = (f"pass mark {rubric.pass_mark} ({stated}); cost of a failing answer passed {costs.fail_passed:g}, "
                   f"of a passing answer failed {costs.pass_failed:g}")
    r.verdict = folds_verdict(r, grades, sorted({int(g) for g in pooled["grade"]}))
    if curve is not None:
        _curve(r, curve, pooled, summary)
    r.provenance = {
        "k-fold run": str(path), "folds": k, "fold seed": summary.get("fold_seed"),
        "folds grouped by": summary.get("by") or "— (random folds, stratified by grade)",
        "rubric": f"{rubric.name} {rubric.version}", "labels": r.labels or "unknown (the run does not record them)",
        "trained": r.training, "rubrictool revision of the folds": fold0.meta.get("git_revision") or "—",
        "config of fold 0": yaml.safe_dump(fold0.config, sort_keys=False, allow_unicode=True) if fold0.config else "",
    }
    return r


def audit_gain(run: Path) -> float | None:
    """The largest mean grade shift a pasted reference answer (``append_reference``) gains in any audit of the k-fold
    run or of its folds (``audit/audit.json``, as `rubrictool audit` writes it by default); None without one."""
    gains = []
    for doc in [run / "audit" / "audit.json", *sorted(run.glob("fold-*/audit/audit.json"))]:
        try:
            rows = json.loads(doc.read_text()).get("transformations") or []
        except (OSError, ValueError, AttributeError):
            continue
        gains += [float(t["mean_grade_shift"]) for t in rows
                  if isinstance(t, dict) and t.get("transformation") == "append_reference" and "mean_grade_shift" in t]
    return max(gains) if gains else None


def _route(pooled: pd.DataFrame, rubric: Any, summary: dict[str, Any], table: pd.DataFrame | None, n_boot: int,
           seed: int) -> dict[str, Any]:
    """The route for a k-fold run written before folds.json kept it: the α the folds recorded stand in for
    agreement.json."""
    from rubrictool.route import choose_route, route_figures, route_lines

    if "plm" in str(summary.get("variant")):
        return {}
    score = summary.get("score_reliability") or summary.get("reliability") or {}
    labels = summary.get("labels") or {}
    agreement = {"label_source": labels.get("source") if labels.get("source") in ("llm", "human", "model") else None,
                 "concepts": {k: {"alpha": a} for k, a in zip(score.get("concepts") or [], score.get("alpha") or [])}}
    figs = route_figures(pooled, rubric, table=table, agreement=agreement, labels=labels,
                         sigma2=(summary.get("reliability") or {}).get("sigma2_mean"), n_boot=n_boot, seed=seed)
    return {"figures": figs, "choice": choose_route(figs), "lines": route_lines(figs)}


def _route_now(route: dict[str, Any], pooled: pd.DataFrame, rubric: Any, summary: dict[str, Any],
               gain: float | None, n_boot: int, seed: int) -> dict[str, Any]:
    """The route folds.json kept, with what it could not know: an audit of the run or of its folds since training, and
    the grader's low marks after reading the review queue (:func:`rubrictool.route.reviewed_figures`) for a run
    trained before the route read them."""
    if not route:
        return route
    from rubrictool.route import choose_route, reviewed_figures, route_lines

    figs = dict(route["figures"])
    if gain is not None:
        figs["audit_gain"] = gain
    grader = figs.get("grader")
    if grader is not None and "reviewed" not in grader:
        sigma2 = (summary.get("reliability") or {}).get("sigma2_mean")
        figs["grader"] = dict(grader) | {"reviewed": reviewed_figures(pooled, rubric, sigma2, n_boot=n_boot,
                                                                      seed=seed)}
    if figs == route["figures"]:
        return route
    return {"figures": figs, "choice": choose_route(figs), "lines": route_lines(figs)}


def folds_verdict(r: FoldsReport, grades: list[int], predicted: list[int]) -> list[str]:
    """Short sentences drawn from the pooled intervals: constant folds, grades never given, the majority class, the
    points grader (recommended only when the paired CI of its lead excludes 0), the oracle concepts."""
    from rubrictool.evaluate import low_marks_lines
    from rubrictool.points import points_ahead

    out = list((r.route or {}).get("lines") or [])
    if r.low_marks:
        out.append(low_marks_lines(r.low_marks)[2])
    row = {t["metric"]: t for t in r.table}
    constant = [f for f in r.per_fold if f["constant"]]
    if len(predicted) == 1:
        out.append(f"The model gives every one of the {r.n} answers grade {predicted[0]}, in every fold: it grades "
                   "nothing.")
    elif constant:
        which = _names([f"{f['fold']} (grade {f['top_grade']})" for f in constant])
        many = len(constant) > 1
        out.append(f"In fold{'s' if many else ''} {which} the model gives every test answer one grade: "
                   f"{'those folds’ models grade' if many else 'that fold’s model grades'} nothing, and the pooled "
                   f"numbers mix {'them' if many else 'it'} with the others.")
    never = [g for g in grades if g not in set(predicted)]
    if never and len(predicted) > 1:
        out.append(f"The model never gives grade{'s' if len(never) > 1 else ''} {_names(never)} to any of the {r.n} "
                   "answers.")
    if "majority" in row.get("t_acc", {}):
        vs = row["t_acc"]["vs_majority"]
        out.append(f"It {'beats' if vs['lo'] > 0 else 'does not beat'} the majority class: T-Acc {vs['diff']:+.3f} "
                   f"over it, paired 95 % CI [{vs['lo']:+.3f}, {vs['hi']:+.3f}] over the {r.n} pooled answers.")
    if "points" in row.get("qwk", {}):
        q, vs = row["qwk"], row["qwk"]["vs_points"]  # model − points
        ahead = points_ahead({"gold_levels": {"qwk": q["points"]["value"], "vs_model":
                                              {"diff": -vs["diff"], "lo": -vs["hi"], "hi": -vs["lo"]}}},
                             q["model"]["value"])
        if ahead:
            if not r.route:  # the route (above) decides where it was measured
                out.append(ahead)
        elif vs["lo"] > 0:
            out.append(f"It grades better than the points grader on the adjudicated levels: QWK {vs['diff']:+.3f}, "
                       f"paired 95 % CI [{vs['lo']:+.3f}, {vs['hi']:+.3f}].")
        else:
            out.append(f"The points grader on the adjudicated levels cannot be told apart from it on these answers "
                       f"(QWK model − points {vs['diff']:+.3f}, paired 95 % CI [{vs['lo']:+.3f}, {vs['hi']:+.3f}], "
                       "which spans 0): no route is recommended over the other.")
    if "oracle_concepts" in row.get("qwk", {}):
        o = row["qwk"]["oracle_concepts"]
        out.append(f"A head on the adjudicated concept levels (oracle concepts) reaches QWK {_ci(o)}: the ceiling the "
                   "concept bottleneck works under.")
    if r.labels and "not expert-validated" in r.labels:
        out.append(f"The labels come from {r.labels}.")
    return out


def _curve(r: FoldsReport, curve: str | Path, pooled: pd.DataFrame, summary: dict[str, Any]) -> None:
    """Where the folds' labelled answers (each fold's training part: the answers outside it) sit on a learning curve
    of the folds' variant (or of the points route, on a points-only curve), beside the pooled numbers."""
    from rubrictool.report.page import curve_lines, curve_position, curve_variant

    n_train = float(np.mean([len(pooled) - int((pooled["fold"] == f).sum()) for f in pooled["fold"].unique()]))
    variant = curve_variant(str(summary.get("variant")), summary.get("preset"), summary.get("encoder_asked"),
                            [str(e) for e in summary.get("encoder") or []])
    pos = curve_position(curve, n_train, variant, r.unavailable)
    if pos is None:
        return
    row = {t["metric"]: t for t in r.table}
    vs = row["t_acc"].get("vs_majority")
    beats = not all(f["constant"] for f in r.per_fold) and (vs is None or vs["lo"] > 0)
    q, a = row["qwk"]["model"], row["t_acc"]["model"]
    c = pos | {"run_qwk": q["value"], "run_t_acc": a["value"], "run_beats_majority": beats, "run_variant": variant,
               "subject": "Each fold", "own": (f"the pooled folds have QWK {_ci(q)} and T-Acc {_ci(a)} over the "
                                               f"{r.n} answers.")}
    r.curve = c | {"lines": curve_lines(c)}


def render_folds_markdown(r: FoldsReport) -> str:
    """The page as Markdown (confusion.png beside it); text from the data escaped (:mod:`rubrictool.textsafe`)."""
    L = [f"# {md_inline(r.title)}", ""]
    L += [md_inline(p) for p in _intro(r)] + [""]
    if r.verdict:
        L += ["## Verdict", ""] + [f"- {md_inline(v)}" for v in r.verdict] + [""]
    L += [f"**Warning:** {md_inline(w)}" for w in r.warnings] + ([""] if r.warnings else [])
    for heading, paras, head, rows in _blocks(r):
        L += [f"## {heading}", ""]
        if head:
            L += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
            L += ["| " + " | ".join(md_inline(c) for c in row) + " |" for row in rows] + [""]
        L += [md_inline(p) for p in paras] + ([""] if paras else [])
    L += ["![confusion matrix of the pooled answers](confusion.png)", ""]
    if r.unavailable:
        L += ["## Not shown", ""] + [f"- {md_inline(u)}" for u in r.unavailable] + [""]
    L += ["## Provenance", ""] + [f"- {k}: {md_inline(v)}" for k, v in r.provenance.items() if "config" not in k]
    config = str(r.provenance.get("config of fold 0", "")).rstrip()
    if config:
        L += ["", "```yaml", config.replace("```", "'''"), "```"]
    return "\n".join(L) + "\n"


def render_folds_html(r: FoldsReport) -> str:
    """The same blocks as the Markdown, one self-contained HTML page (the image embedded)."""
    from rubrictool.report.page import template_env

    e = html.escape
    style = template_env().get_template("_report_base.html.j2").module.style()
    out = [(f"<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{e(r.title)}</title>"
            f"{style}</head><body>"),
           f"<h1>{e(r.title)}</h1>", *(f"<p>{e(p)}</p>" for p in _intro(r))]
    if r.verdict:
        out += ["<h2>Verdict</h2>", '<ul id="verdict">', *(f"<li>{e(v)}</li>" for v in r.verdict), "</ul>"]
    out += [f'<p class="note warning"><b>Warning:</b> {e(w)}</p>' for w in r.warnings]
    for n, (heading, paras, head, rows) in enumerate(_blocks(r)):
        out.append(f"<h2>{e(heading)}</h2>")
        if head:
            out.append(f'<table id="block-{n}"><tr>' + "".join(f"<th{' class=l' if i == 0 else ''}>{e(h)}</th>"
                                                              for i, h in enumerate(head)) + "</tr>")
            for row in rows:
                marked = ' class="named"' if any("constant" in c for c in row) else ""
                out.append(f"<tr{marked}>" + "".join(f"<td{' class=l' if i == 0 else ''}>{e(c)}</td>"
                                                     for i, c in enumerate(row)) + "</tr>")
            out.append("</table>")
        out += [f"<p>{e(p)}</p>" for p in paras]
    out.append(f'<img id="img-confusion" alt="confusion matrix of the pooled answers" '
               f'src="{figures.data_uri(r.images["confusion.png"])}">')
    if r.unavailable:
        out += ["<h2>Not shown</h2>", "<ul>", *(f"<li>{e(u)}</li>" for u in r.unavailable), "</ul>"]
    out += ["<h2>Provenance</h2>", "<table>"]
    out += [f'<tr><td class="l">{e(str(k))}</td><td class="l">{e(str(v))}</td></tr>'
            for k, v in r.provenance.items() if "config" not in k]
    out.append("</table>")
    if r.provenance.get("config of fold 0"):
        out.append(f"<pre>{e(str(r.provenance['config of fold 0']))}</pre>")
    return "\n".join(out) + "\n</body></html>\n"


def _intro(r: FoldsReport) -> list[str]:
    return [(f"{r.folds} folds, {r.n} answers pooled: every answer was tested once, by the one fold that did not "
            "train on it."),
            f"Trained: {r.training}.", f"Labels: {r.labels or 'unknown (the run does not record who made them)'}.",
            *([f"The course's {r.pass_mark}."] if r.pass_mark else [])]


def _blocks(r: FoldsReport) -> list[tuple[str, list[str], list[str], list[list[str]]]]:
    """(heading, paragraphs, table head, table rows) of the page's sections, shared by Markdown and HTML."""
    names = [BASELINES[b] for b in r.baselines]
    head = ["metric", "model [95 % CI]", *(f"{n} [95 % CI]" for n in names),
            *(f"model − {n} [paired 95 % CI]" for n in names)]
    rows = [[METRIC_NAMES.get(t["metric"], t["metric"]), _ci(t["model"]), *(_ci(t[b]) for b in r.baselines),
             *(_diff(t[f"vs_{b}"]) for b in r.baselines)] for t in r.table]
    about = [(f"Intervals: 95 % percentile bootstrap over the {r.n} pooled answers ({r.n_boot} resamples); "
             "differences: paired bootstrap on the same resamples of answers."),
             "Majority class: each fold's most common training grade, given to every test answer of the fold."]
    if "points" in r.baselines:
        about.append("Points grader: a grade from the adjudicated concept levels alone — the rubric's own points, or "
                     "points fitted on each fold's training answers (as `rubric fit-points` fits them) — what grading "
                     "from the table's levels gives (who set them: Labels, above).")
    if "oracle_concepts" in r.baselines:
        about.append("Oracle concepts: a logistic regression from the adjudicated levels to the grade, fitted on each "
                     "fold's training answers: the ceiling of the concept bottleneck.")
    blocks = [("Grade metrics, pooled over the folds", about, head, rows)]
    fhead = ["fold", "test answers", "grades the model gives", "T-Acc [95 % CI]", "majority class T-Acc [95 % CI]",
             "QWK [95 % CI]", "majority class QWK [95 % CI]"]
    frows = []
    for f in r.per_fold:
        given = (f"constant: grade {f['top_grade']} for every answer" if f["constant"] else
                 ", ".join(str(g) for g in f["grades"])
                 + f" (most common {f['top_grade']}, {100 * f['top_share']:.0f} %)")
        frows.append([f"fold {f['fold']}", str(f["n"]), given, _ci(f["t_acc"]),
                      _ci(f["majority_t_acc"]) + f" (grade {f['majority_grade']})" if "majority_t_acc" in f else "—",
                      _ci(f["qwk"]), _ci(f["majority_qwk"]) if "majority_qwk" in f else "—"])
    constant = [f["fold"] for f in r.per_fold if f["constant"]]
    sizes = sorted({f["n"] for f in r.per_fold})
    fparas = [(f"Constant folds (the model gives every test answer one grade: it grades nothing): "
              f"{', '.join(map(str, constant)) if constant else 'none'}. Each fold's CIs are over its own "
              f"{sizes[0] if len(sizes) == 1 else f'{sizes[0]}–{sizes[-1]}'} test answers: read the pooled table "
              "above for the run.")]
    blocks.append(("Per fold", fparas, fhead, frows))
    if r.low_marks:
        from rubrictool.evaluate import low_marks_lines

        lhead, lrows, text = low_marks_lines(r.low_marks)
        blocks.append(("Low marks", [text,
                                     f"The course's {r.pass_mark} (rubric YAML, grade.pass_mark and grade.costs)."],
                       lhead, lrows))
    if len(r.reliability):
        from rubrictool.evaluate.reliability import SIGMA2_MEANING, reliability_rows

        rhead, rrows = reliability_rows(r.reliability)
        about_rel = ("α: the reviewers' agreement on each concept (Krippendorff, 95 % bootstrap CI); σ² and "
                     "σ²(implied): the noise LCEC learned, averaged over the folds; test C-Acc and test reliability: "
                     "on every pooled answer.")
        blocks.append(("Reliability: raters' α beside the model's noise", [about_rel, SIGMA2_MEANING], rhead, rrows))
    if r.curve.get("lines"):
        blocks.append(("On the learning curve", [*r.curve["lines"], f"Curve: {r.curve['curve']}"], [], []))
    return blocks


def write_folds_report(r: FoldsReport, out: str | Path) -> dict[str, Path]:
    """report.html, report.md, report.json, confusion.png, pooled_metrics.csv and per_fold.csv into ``out``."""
    d = writable_dir(out)
    paths: dict[str, Path] = {}
    for name, png in r.images.items():
        (d / name).write_bytes(png)
        paths[name] = d / name
    flat = [{"metric": t["metric"], **{f"{who}_{part}": t[who][part] for who in ("model", *r.baselines)
                                       for part in ("value", "lo", "hi")},
             **{f"model_minus_{b}_{part}": t[f"vs_{b}"][part] for b in r.baselines for part in ("diff", "lo", "hi")}}
            for t in r.table]
    pd.DataFrame(flat).to_csv(d / "pooled_metrics.csv", index=False)
    pd.DataFrame([{k: (v["value"] if isinstance(v, dict) else v) for k, v in f.items() if k != "grades"}
                  | {"grades": " ".join(map(str, f["grades"]))} for f in r.per_fold]
                 ).to_csv(d / "per_fold.csv", index=False)
    (d / "report.html").write_text(render_folds_html(r), encoding="utf-8")
    (d / "report.md").write_text(render_folds_markdown(r), encoding="utf-8")
    (d / "report.json").write_text(json.dumps({"kfold": True, "n": r.n, "folds": r.folds, "table": r.table,
                                               "per_fold": r.per_fold, "verdict": r.verdict, "warnings": r.warnings,
                                               "training": r.training, "labels": r.labels,
                                               "low_marks": r.low_marks, "route": r.route,
                                               "learning_curve": {k: v for k, v in r.curve.items() if k != "lines"}
                                               or None,
                                               "unavailable": r.unavailable}, indent=1, default=float) + "\n")
    for name in ("pooled_metrics.csv", "per_fold.csv", "report.html", "report.md", "report.json"):
        paths[name] = d / name
    return paths
