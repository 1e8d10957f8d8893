"""Which route this course's own numbers support: the trained grader, points on the LLM panel's levels, points on
levels people set, or marking by hand.

:func:`route_figures` measures each route on the pooled answers of a k-fold run (every answer tested once):

* the trained grader — its pooled QWK with a 95 % bootstrap CI beside the majority class's QWK;
* points on the levels a route would actually grade from, each table fitted on the other folds' answers
  (:func:`rubrictool.points.points_column`): the panel's own levels (the majority of the panel's votes, from the
  table's ``votes_<KEY>`` columns, or the table's levels when the panel set them all) and the levels people set
  (reviewers or a teacher's resolutions, when they set the table's);
* for each, the low marks (:func:`rubrictool.evaluate.low_marks`) and the α of the levels it reads;
* for the trained grader also the low marks after a teacher reads the first :data:`REVIEW_SHARE` of ``grade``'s review
  queue (:func:`reviewed_figures`: the queue ranked as ``grade`` ranks it, each answer read given its teacher's mark).

:func:`choose_route` applies one rule and says which figure decided: a route is never recommended when its QWK CI
reaches the majority class's QWK, or when the levels it reads have α below :data:`ALPHA_MIN` on any concept; among
the rest the highest QWK wins; and "do not auto-grade" replaces a route whose failing answers are graded a mark or
more too high on average (or when the audit shows a pasted reference gaining a mark or more) — unless, for the
trained grader, reading the review queue's first :data:`REVIEW_SHARE` of the answers brings them under a mark: then the
route is the grader with that review.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

import numpy as np
import pandas as pd
from numpy.typing import NDArray

from rubrictool.evaluate import INFLATED, low_marks
from rubrictool.rubric import Rubric

__all__ = ["ALPHA_MIN", "REVIEW_SHARE", "ROUTES", "choose_route", "panel_levels", "queue_reads", "reviewed_figures",
           "route_figures", "route_lines"]

ALPHA_MIN = 0.67  # Krippendorff's lowest α for tentative conclusions: levels below it are not graded from
REVIEW_SHARE = 0.2  # the share of the answers a teacher reads from grade's review queue in the reviewed route
ROUTES = {
    "grader": "grade with the trained grader (`rubrictool grade --run`)",
    "points_panel": ("points on the LLM panel's levels (annotate and adjudicate each new answer, then "
                     "`rubrictool rubric points`)"),
    "points_reviewed": ("points on levels people set (reviewers or the teacher set each new answer's levels, then "
                        "`rubrictool rubric points`)"),
    "grader_review": ("grade with the trained grader and read the first fifth of its review queue (`rubrictool grade "
                      "--run … --review-budget N`, N a fifth of the answers graded)"),
    "hand": "mark by hand",
}

NAMES = {"grader": "the trained grader", "points_panel": "points on the panel's levels",
         "points_reviewed": "points on levels people set"}


def panel_levels(table: pd.DataFrame, rubric: Rubric) -> pd.DataFrame | None:
    """Per answer the panel's own level of each concept (the most common vote, ties to the lower level) from the
    table's ``votes_<KEY>`` columns; None when the table has no votes of every concept."""
    from rubrictool.votes import VOTES_PREFIX

    cols = [f"{VOTES_PREFIX}{k}" for k in rubric.keys]
    if not all(c in table.columns for c in cols):
        return None

    def vote(cell: Any) -> float:
        votes = [int(float(v)) for v in str(cell).split()] if isinstance(cell, str) and cell.strip() else []
        if not votes:
            return math.nan
        counts = Counter(votes)
        top = max(counts.values())
        return float(min(v for v, n in counts.items() if n == top))

    out = pd.DataFrame({"id": table["id"].astype(str)})
    for k, c in zip(rubric.keys, cols):
        out[k] = table[c].map(vote)
    return out


def _ci(t: Any, p: Any, n_boot: int, seed: int) -> dict[str, float]:
    from rubrictool.evaluate import bootstrap_ci  # the one bootstrap (NaN resamples dropped)

    return bootstrap_ci(t, p, "qwk", n_boot, seed)


def _route(pooled: pd.DataFrame, grades: Any, rubric: Rubric, alpha: dict[str, Any],
           levels_by: str, n_boot: int, seed: int) -> dict[str, Any]:
    t, p = pooled["grade_true"].to_numpy(), np.asarray(grades)
    lm = low_marks(t, p, rubric.grade.values, rubric.pass_mark, n_boot, seed)
    return {"qwk": _ci(t, p, n_boot, seed), "alpha": alpha, "levels_by": levels_by, "failing": lm["failing"],
            "n": len(t)}


def queue_reads(pooled: pd.DataFrame, keys: list[str], scale: tuple[int, int], pass_mark: int, n: int,
                sigma2: Any = None, weak: bool = True) -> NDArray[np.bool_] | None:
    """Per pooled answer, whether a teacher reading the first ``n`` answers of ``grade``'s review queue reads it: the
    queue ranked as ``grade`` ranks it (:func:`rubrictool.review_queue.review_queue`; unsureness σ²-weighted with
    ``sigma2``, else equally; with ``weak`` also :func:`~rubrictool.review_queue.weak_pass`), no answer held (pooled
    answers carry no flags). None without the concept columns (``<KEY>_p<level>``, ``<KEY>_expected``)."""
    from rubrictool.review_queue import hold_marks, review_queue, uncertainty_score, weak_pass

    lv = list(range(scale[0], scale[1] + 1))
    cols = [f"{k}_p{v}" for k in keys for v in lv] + [f"{k}_expected" for k in keys]
    if not keys or not all(c in pooled.columns for c in [*cols, "grade_prob"]):
        return None
    probs = np.stack([pooled[[f"{k}_p{v}" for v in lv]].to_numpy(float) for k in keys], axis=1)  # (N, K, L)
    w = None if sigma2 is None or len(sigma2) != len(keys) else np.asarray(sigma2, dtype=float)
    unc = uncertainty_score(np.nan_to_num(probs, nan=1.0 / len(lv)), w)
    graded = pooled.assign(id=pooled["id"].astype(str), flags="", grade=pooled["grade"].astype("Int64"))
    held = hold_marks(graded[["id", "grade", "grade_prob", "flags", *[f"{k}_expected" for k in keys]]])
    ranked_by = weak_pass(held, keys, scale, pass_mark) if weak else None
    queue = review_queue(held, unc, n, keep=(), weak=ranked_by)
    out: NDArray[np.bool_] = graded["id"].isin(set(queue["id"])).to_numpy()
    return out


def reviewed_figures(pooled: pd.DataFrame, rubric: Rubric, sigma2: Any = None, share: float = REVIEW_SHARE,
                     n_boot: int = 1000, seed: int = 0) -> dict[str, Any] | None:
    """The trained grader's low marks after a teacher reads the first ``share`` of the pooled answers in ``grade``'s
    review queue (:func:`queue_reads`), each answer read given its teacher's mark: ``share``, ``n`` (answers read),
    ``caught`` (failing answers passed that the review corrects) and ``failing``
    (:func:`rubrictool.evaluate.low_marks`' figure after the review).
    None without the concept columns (``<KEY>_expected``, ``<KEY>_p<level>``)."""
    n = round(share * len(pooled))
    read = queue_reads(pooled, rubric.keys, (rubric.scale.min, rubric.scale.max), rubric.pass_mark, n, sigma2)
    if read is None:
        return None
    t, p = pooled["grade_true"].to_numpy(), pooled["grade"].to_numpy()
    after = np.where(read, t, p)
    caught = int(((t < rubric.pass_mark) & (p >= rubric.pass_mark) & read).sum())
    lm = low_marks(t, after, rubric.grade.values, rubric.pass_mark, n_boot, seed)
    return {"share": share, "n": n, "caught": caught, "failing": lm["failing"]}


def route_figures(pooled: pd.DataFrame, rubric: Rubric, *, table: pd.DataFrame | None = None,
                  agreement: dict[str, Any] | None = None, labels: dict[str, Any] | None = None,
                  audit_gain: float | None = None, sigma2: Any = None, n_boot: int = 1000,
                  seed: int = 0) -> dict[str, Any]:
    """Each route's figures on the pooled answers (see the module docstring). ``pooled``: pooled_predictions.csv
    (``id, fold, grade_true, grade, majority`` and ``<KEY>_true``); ``table``: the training table (its panel votes);
    ``agreement``: agreement.json (the reviewers' α per concept and who they were); ``labels``: the run's label
    source (who set each level, :func:`rubrictool.train.labels.label_source`); ``audit_gain``: the mark a pasted
    reference gains in the behavioural audit, when it was run; ``sigma2``: the folds' mean σ_k² (the review queue's
    weights, :func:`reviewed_figures`)."""
    from rubrictool.points import points_column

    t = pooled["grade_true"].to_numpy()
    maj = pooled["majority"].to_numpy() if "majority" in pooled else np.full(len(t), np.bincount(t - t.min()).argmax()
                                                                              + t.min())
    conc = (agreement or {}).get("concepts") or {}
    reviewers_alpha = {k: (conc.get(k) or {}).get("alpha") for k in rubric.keys}
    reviewers = str((agreement or {}).get("label_source") or "")
    levels = (labels or {}).get("levels") or {}
    set_by = next(iter(levels)) if len(levels) == 1 else ("mixed" if levels else reviewers or "unknown")
    out: dict[str, Any] = {"majority_qwk": _ci(t, maj, n_boot, seed)["value"], "pass_mark": rubric.pass_mark,
                           "audit_gain": audit_gain, "levels_set_by": set_by, "reviewers": reviewers or None,
                           "grader": _route(pooled, pooled["grade"], rubric, {}, "—", n_boot, seed)}
    out["grader"]["reviewed"] = reviewed_figures(pooled, rubric, sigma2, n_boot=n_boot, seed=seed)
    table_points = points_column(pooled, rubric)
    if table_points is not None and set_by in ("human", "resolution"):
        alpha = reviewers_alpha if set_by == "human" else {k: None for k in rubric.keys}
        out["points_reviewed"] = _route(pooled, table_points, rubric, alpha, set_by, n_boot, seed)
    panel = None
    if set_by == "llm" and table_points is not None:  # the table's levels are the panel's
        panel = table_points
    elif reviewers == "llm" and table is not None:  # the panel's votes beside levels someone else set
        lv = panel_levels(table, rubric)
        if lv is not None:
            lv = lv.set_index("id").reindex(pooled["id"].astype(str))
            if not lv.isna().any().any():
                swapped = pooled.copy()
                for k in rubric.keys:
                    swapped[f"{k}_true"] = lv[k].to_numpy(np.int64)
                panel = points_column(swapped, rubric)
    if panel is not None:
        out["points_panel"] = _route(pooled, panel, rubric, reviewers_alpha, "llm", n_boot, seed)
    return out


def _reviewed_text(rv: dict[str, Any]) -> str:
    f = rv["failing"]
    return (f"a teacher reading the review queue's first {100 * rv['share']:.0f} % of the answers ({rv['n']}) "
            f"corrects {rv['caught']} failing answers passed: {100 * f['passed']:.0f} % of the failing answers keep a "
            f"pass mark, graded {f['mean_error']:+.2f} [{f['mean_error_lo']:+.2f}, {f['mean_error_hi']:+.2f}] marks "
            "too high (under a mark)")


def _qwk(c: dict[str, float]) -> str:
    return f"QWK {c['value']:.3f} [95 % CI {c['lo']:.3f}, {c['hi']:.3f}]"


def _low_alpha(alpha: dict[str, float | None]) -> list[tuple[str, float]]:
    return [(k, float(a)) for k, a in alpha.items() if a is not None and not math.isnan(float(a))
            and float(a) < ALPHA_MIN]


def choose_route(figs: dict[str, Any]) -> dict[str, Any]:
    """The route the figures support: {"route", "auto_grade", "decided_by", "why_not": {route: reason}}."""
    maj = float(figs["majority_qwk"])
    maj = 0.0 if math.isnan(maj) else maj  # a constant grade's QWK
    why_not: dict[str, str] = {}
    ok: list[tuple[float, str]] = []
    inflated: list[str] = []
    reviewed: str | None = None
    for key in ("grader", "points_panel", "points_reviewed"):
        r = figs.get(key)
        if r is None:
            why_not[key] = "not measured on this course (no levels of that source beside the pooled answers)"
            continue
        q, low, f = r["qwk"], _low_alpha(r.get("alpha") or {}), r["failing"]
        if not q["lo"] > maj:
            why_not[key] = f"its {_qwk(q)} reaches the majority class's QWK {maj:.3f}"
        elif low:
            why_not[key] = ("the levels it reads have α below " + f"{ALPHA_MIN}: "
                            + ", ".join(f"{k} {a:.2f}" for k, a in low))
        elif f["inflated"]:
            why_not[key] = (f"its failing answers are graded {f['mean_error']:+.2f} [{f['mean_error_lo']:+.2f}, "
                            f"{f['mean_error_hi']:+.2f}] marks too high on average ({100 * f['passed']:.0f} % of them "
                            "given a pass mark)")
            inflated.append(key)
            rv = r.get("reviewed")
            if rv and not rv["failing"]["inflated"]:
                reviewed = _reviewed_text(rv)
        else:
            ok.append((q["value"], key))
    gain = figs.get("audit_gain")
    if gain is not None and gain >= INFLATED:
        return {"route": "hand", "auto_grade": False, "why_not": why_not,
                "decided_by": f"the audit: a pasted reference answer gains {gain:+.2f} marks (a mark or more)"}
    if ok:
        _, best = max(ok)
        others = [k for _, k in ok if k != best]
        decided = f"the {_qwk(figs[best]['qwk'])} of {NAMES[best]}, above the majority class's {maj:.3f}"
        if others:
            decided += "; beside it " + ", ".join(f"{NAMES[k]}: {_qwk(figs[k]['qwk'])}" for k in others)
        return {"route": best, "auto_grade": True, "why_not": why_not, "decided_by": decided}
    if reviewed is not None:
        return {"route": "grader_review", "auto_grade": True, "why_not": why_not,
                "decided_by": f"{reviewed}, with the grader's {_qwk(figs['grader']['qwk'])}"}
    if inflated:
        return {"route": "hand", "auto_grade": False, "why_not": why_not,
                "decided_by": "low marks inflated by a mark or more under " + ", ".join(NAMES[k] for k in inflated)}
    return {"route": "hand", "auto_grade": False, "why_not": why_not,
            "decided_by": "no route's figures pass the rule (QWK CI above the majority class's, levels with α ≥ "
                          f"{ALPHA_MIN})"}


def route_lines(figs: dict[str, Any]) -> list[str]:
    """The verdict in words: the route, the figure that decided, and why each other route was not chosen."""
    c = choose_route(figs)
    if c["route"] == "hand":
        head = "Route: do not auto-grade — mark by hand (use the grader and the points table as aids to check marks)."
    else:
        head = f"Route: {ROUTES[c['route']]}."
    out = [head, f"Decided by: {c['decided_by']}."]
    for k, why in c["why_not"].items():
        if k != c["route"]:
            alone = " alone" if c["route"] == "grader_review" and k == "grader" else ""
            out.append(f"Not {NAMES[k]}{alone}: {why}.")
    return out
