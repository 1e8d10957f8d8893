"""``rubrictool explain``: the decision trace of single responses, and what-if overrides.

For an item the trace holds the response with each concept's attention over its tokens (RACE, Eq. 9),
each concept's predicted level and its probability, ĉ_k (Eq. 13), s̃_k = ĉ_k / M and μ_post,k (Eq. 20),
and each concept's contribution to the logit of the predicted grade; with the bias they sum exactly to
that logit (Eq. 22; :meth:`reccbm.RecCBM.contributions`). Beside it, the contributions toward a second
grade: the gold grade when it is known and differs, else the runner-up, so a teacher sees which concepts
made the predicted grade beat it (:func:`reccbm.contributions_toward`). An override (``--set FC=3``) replaces the
concept's p̂_k by a one-hot of the given level and runs the frozen grade path again.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

import reccbm
from rubrictool.errors import DataError
from rubrictool.report.run import AttendedItems, Run, predict_with_attention

__all__ = ["SYMBOLS", "ConceptRow", "ItemTrace", "explain_items", "override_arrays", "top_words", "traces_frame",
           "whole_words"]

TOP_TOKENS = 5

SYMBOLS = {  # the legend of every explain view, in words a teacher reads (docs/inspect.md)
    "level (p)": "the level the model reads for the concept, and its probability p̂",
    "ĉ_k": "expected level: the average of the levels weighted by their probabilities (2.6 = between 2 and 3, "
           "nearer 3)",
    "s̃_k": "the expected level as a share of the scale, 0..1: (ĉ_k − lowest level) / (highest − lowest level)",
    "μ_post": "the concept estimate the grade is computed from: s̃_k corrected by LCEC, which pulls a noisy "
              "concept towards what the other concepts suggest (equal to s̃_k without LCEC)",
    "contribution": "how much the concept pushes the score of a grade up (+) or down (−); with the bias they add "
                    "up to that grade's score (logit), and the grade with the highest score wins",
    "difference": "contribution toward the predicted grade minus toward the compared grade (the teacher's grade "
                  "when the table has it and it differs, else the runner-up): the concepts with the largest positive "
                  "differences are why the predicted grade won",
}


@dataclass
class ConceptRow:
    key: str
    name: str
    level: int  # predicted level on the rubric scale
    level_prob: float  # p̂_{k, level}
    expected: float  # ĉ_k on the rubric scale
    s_tilde: float  # ĉ_k / M (0..1, before LCEC)
    mu_post: float  # μ_post,k (s̃_k without LCEC)
    contribution: float  # to the logit of the predicted grade
    gold: int | None = None  # adjudicated level, when known
    top_tokens: list[tuple[str, float]] = field(default_factory=list)  # most-attended response tokens, α
    set_to: int | None = None  # the override's level
    contribution_after: float | None = None  # to the logit of the grade after the override
    contribution_other: float | None = None  # to the logit of the compared grade (ItemTrace.other_grade)

    @property
    def difference(self) -> float | None:
        """Contribution toward the predicted grade minus toward the compared one (why the prediction won)."""
        return None if self.contribution_other is None else self.contribution - self.contribution_other


@dataclass
class ItemTrace:
    """One response's decision trace (grades on the rubric's grade scale)."""

    id: str
    question: str
    response: str
    grade: int
    grade_prob: float
    logit: float
    bias: float
    runner_up: int
    runner_up_prob: float
    concepts: list[ConceptRow]
    tokens: list[str]
    spans: list[tuple[int, int]]
    alpha: list[list[float]] | None  # (K, T_r) attention on the response tokens; None without RACE
    gold_grade: int | None = None
    overrides: dict[str, int] = field(default_factory=dict)
    grade_after: int | None = None
    grade_after_prob: float | None = None
    prob_of_grade_after: float | None = None  # probability of the ORIGINAL grade after the override
    logit_after: float | None = None
    bias_after: float | None = None
    grade_probs: list[float] = field(default_factory=list)  # p(grade) for each grade of the scale
    grade_probs_after: list[float] = field(default_factory=list)
    reference: str = ""  # the reference answer, when the table has one
    other_grade: int | None = None  # the grade compared with the prediction: the gold one if known and
    other_kind: str = ""  # different ("gold"), else the runner-up ("runner-up")
    other_logit: float | None = None
    other_bias: float | None = None

    @property
    def correct(self) -> bool | None:
        return None if self.gold_grade is None else self.gold_grade == self.grade

    def contributions_sum(self) -> float:
        return float(sum(c.contribution for c in self.concepts) + self.bias)

    def why(self) -> str:
        """One sentence: which concepts made the predicted grade beat the compared one ('' without one)."""
        if self.other_grade is None or self.other_logit is None:
            return ""
        diffs = sorted(((c.difference or 0.0, c.key) for c in self.concepts), reverse=True)
        pro = [f"{k} ({d:+.2f})" for d, k in diffs if d > 0][:3]
        con = [f"{k} ({d:+.2f})" for d, k in reversed(diffs) if d < 0][:2]
        gap = self.logit - self.other_logit
        s = (f"grade {self.grade} beat the {self.other_kind} grade {self.other_grade} by {gap:+.2f} in logit"
             + (f", mostly through {', '.join(pro)}" if pro else ""))
        return s + (f"; {', '.join(con)} argued for {self.other_grade}" if con else "")


def override_arrays(run: Run, n: int, overrides: dict[str, int]) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """(levels 0..M, replace mask), both (n, K), for {KEY: level on the rubric scale}."""
    K = len(run.keys)
    levels = np.zeros((n, K), dtype=np.int64)
    replace = np.zeros((n, K), dtype=bool)
    for key, level in overrides.items():
        k = run.keys.index(key)
        levels[:, k], replace[:, k] = level - run.scale_min, True
    return levels, replace


def _trace(run: Run, att: AttendedItems, preds_after: reccbm.Predictions | None, items: pd.DataFrame,
           overrides: dict[str, int]) -> list[ItemTrace]:
    preds = att.preds
    assert preds.p_hat is not None and preds.c_hat is not None and preds.mu_post is not None
    assert preds.grade_logits is not None
    tr = reccbm.decision_trace(run.model, preds)
    other = _other_grades(run, preds, items)  # (N,) 0..S: gold when known and different, else runner-up
    other_contrib, other_bias = reccbm.contributions_toward(run.model, preds, other)  # (N, K), (N,)
    M = run.model.config.M
    out: list[ItemTrace] = []
    after_contrib = after_bias = None
    if preds_after is not None:
        after_contrib, after_bias = reccbm.contributions_toward(run.model, preds_after, preds_after.grades)
    for i, row in items.reset_index(drop=True).iterrows():
        i = int(i)  # type: ignore[call-overload]
        probs = preds.grade_probs[i]
        order = np.argsort(-probs, kind="stable")
        y = int(order[0])
        alpha = att.alpha[i]
        concepts = []
        for k, key in enumerate(run.keys):
            lv = int(tr.levels[i, k])
            top: list[tuple[str, float]] = []
            if alpha is not None and alpha.shape[1]:
                top = top_words(str(row["response"]), att.spans[i], alpha[k])
            gold = int(row[f"_c_{key}"]) + run.scale_min if f"_c_{key}" in row and pd.notna(row[f"_c_{key}"]) else None
            concepts.append(ConceptRow(
                key, run.names[k], lv + run.scale_min, float(preds.p_hat[i, k, lv]),
                float(tr.expected[i, k]) + run.scale_min, float(preds.c_hat[i, k]) / M, float(tr.mu_post[i, k]),
                float(tr.contributions[i, k]), gold, top, overrides.get(key),
                float(after_contrib[i, k]) if after_contrib is not None else None,
                float(other_contrib[i, k]),
            ))
        gold_grade = int(row["_y"]) + run.grade_min if "_y" in row and pd.notna(row["_y"]) else None
        t = ItemTrace(
            str(row["id"]), str(row.get("question", "")), str(row["response"]), y + run.grade_min, float(probs[y]),
            float(preds.grade_logits[i, y]), float(tr.bias[i]), int(order[1]) + run.grade_min, float(probs[order[1]]),
            concepts, att.tokens[i], att.spans[i], alpha.tolist() if alpha is not None else None, gold_grade,
            dict(overrides), grade_probs=[float(p) for p in probs],
            reference=str(row.get("reference", "") if pd.notna(row.get("reference", "")) else ""),
            other_grade=int(other[i]) + run.grade_min,
            other_kind="gold" if gold_grade is not None and gold_grade != y + run.grade_min else "runner-up",
            other_logit=float(preds.grade_logits[i, int(other[i])]), other_bias=float(other_bias[i]),
        )
        if preds_after is not None and after_bias is not None:
            assert preds_after.grade_logits is not None
            pa = preds_after.grade_probs[i]
            ya = int(pa.argmax())
            t.grade_after, t.grade_after_prob = ya + run.grade_min, float(pa[ya])
            t.prob_of_grade_after = float(pa[y])
            t.logit_after, t.bias_after = float(preds_after.grade_logits[i, ya]), float(after_bias[i])
            t.grade_probs_after = [float(p) for p in pa]
        out.append(t)
    return out


def whole_words(text: str, spans: list[tuple[int, int]], weights: Any) -> list[tuple[str, float]]:
    """The response's words with the attention of their subword pieces added up: pieces that touch (one ends where
    the next starts, letters or digits on both sides) make one word ("res" + "piration" = "respiration")."""
    w = np.asarray(weights, dtype=float)  # (T,) one weight per piece
    words: list[tuple[int, int, float]] = []
    for (a, b), v in zip(spans, w):
        if words and a == words[-1][1] and a > 0 and text[a - 1].isalnum() and a < len(text) and text[a].isalnum():
            s0, _, acc = words[-1]
            words[-1] = (s0, b, acc + float(v))
        else:
            words.append((a, b, float(v)))
    return [(text[a:b], v) for a, b, v in words]


def top_words(text: str, spans: list[tuple[int, int]], weights: Any, n: int = TOP_TOKENS) -> list[tuple[str, float]]:
    """The ``n`` most-attended whole words of a response (:func:`whole_words`), each word once (its highest weight),
    punctuation left out."""
    best: dict[str, tuple[str, float]] = {}
    for word, v in whole_words(text, spans, weights):
        key = word.lower()
        if any(ch.isalnum() for ch in word) and (key not in best or v > best[key][1]):
            best[key] = (word, v)
    return sorted(best.values(), key=lambda t: -t[1])[:n]


def _other_grades(run: Run, preds: reccbm.Predictions, items: pd.DataFrame) -> np.ndarray[Any, Any]:
    """Per item the grade (0..S) to compare the prediction with: the gold grade when known and different
    from the prediction, else the runner-up (second most probable grade)."""
    runner_up = np.argsort(-preds.grade_probs, axis=1, kind="stable")[:, 1]  # (N,)
    if "_y" not in items.columns:
        return runner_up
    gold = pd.to_numeric(items["_y"], errors="coerce").to_numpy(dtype=float)  # (N,) 0..S or NaN
    use_gold = ~np.isnan(gold) & (np.nan_to_num(gold, nan=-1) != preds.grades)
    return np.where(use_gold, np.nan_to_num(gold, nan=0).astype(np.int64), runner_up)


def explain_items(run: Run, items: pd.DataFrame, overrides: dict[str, int] | None = None) -> list[ItemTrace]:
    """Decision traces of the given items (ItemTable rows; ``_y``/``_c_<key>`` add the gold labels)."""
    if run.plm:
        raise DataError("this is a PLM run: it grades without concepts, so there is no decision trace to show "
                        "(train a REC-CBM or vanilla run to explain grades)")
    if len(items) == 0:
        raise DataError("no items to explain")
    att = predict_with_attention(run, items)
    after = None
    if overrides:
        levels, replace = override_arrays(run, len(items), overrides)
        after = reccbm.override(run.model, att.preds, levels, replace)
    return _trace(run, att, after, items, overrides or {})


def traces_frame(traces: list[ItemTrace]) -> pd.DataFrame:
    """One row per (item, concept): the numbers of the traces, for CSV export."""
    rows: list[dict[str, Any]] = []
    for t in traces:
        for c in t.concepts:
            rows.append({"id": t.id, "grade": t.grade, "grade_prob": t.grade_prob, "logit": t.logit, "bias": t.bias,
                         "concept": c.key, "level": c.level, "level_prob": c.level_prob, "expected": c.expected,
                         "s_tilde": c.s_tilde, "mu_post": c.mu_post, "contribution": c.contribution, "gold": c.gold,
                         "set_to": c.set_to, "grade_after": t.grade_after, "other_grade": t.other_grade,
                         "other_kind": t.other_kind, "contribution_other": c.contribution_other,
                         "difference": c.difference})
    return pd.DataFrame(rows)
