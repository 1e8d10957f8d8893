"""Flags for a human: graded responses that look like gaming or that the model should not be trusted on.

``rubrictool grade`` adds a ``flags`` column: the reasons, joined by ``;`` (empty: nothing to review).
Each flag is defined once here; docs/integrity.md gives the definitions and what they were measured on.

- ``copies_reference``: the response holds a near-copy of a reference of ``COPY_MIN_WORDS`` words or more: a word-for-
  word alignment of the two (difflib's matching blocks, in order) covers at least ``COPY_COVER`` of the reference's
  words, so a pasted reference with a word or two changed still counts. A shorter reference is what a short right
  answer says in the reference's own words: reproducing it is no sign of a copy, and the flag does not fire.
- ``copies_question``: at least ``COPY_SHARE`` of the question's word trigrams (word bigrams for a text of three
  words or fewer, single words for one word) occur in the response.
- ``concepts_disagree_with_grade`` (runs with a bottleneck): the grade is further from the grade the
  concept levels imply than the training data allows. The implied grade is a least-squares line of
  the gold grade on the mean gold concept level (rescaled to 0..1) over the run's training split; the
  allowance is the ``CONSISTENCY_QUANTILE`` quantile of that line's absolute residuals there (at least
  one grade point). At grading time the line is applied to the model's expected concept scores.
- ``out_of_distribution``: the response is unlike every training response. Either more than the
  ``OOD_QUANTILE`` quantile of the training responses' leave-one-out share of unseen words (word types
  no other training response uses) of its own word types are unseen in the training responses (with
  at least ``OOD_MIN_WORDS`` word types), or it has more than ``OOD_LENGTH_FACTOR`` times the longest
  training response's words.
- ``empty``: the response is empty, whitespace only or null, or holds nothing but the student's name or id
  written as a signature ("Maria Rossi, student 61400:", :func:`reccbm.normalise.without_signature`).
  ``rubrictool grade`` gives such an answer no model grade (its grade and every model column are empty) instead
  of grading nothing as an answer.
- ``truncated``: the model read only part of the input: the response or the question/reference/context
  was cut to the run's ``max_len`` tokens (``reccbm.encode_inputs``'s ``truncated``).
- ``repeats_text``: padding by repetition: a sentence of ``REPEAT_MIN_WORDS`` words or more occurs twice (any
  sentence three times), or a run of words follows itself three times in a row ("a stack a stack a stack").
- ``keyword_list``: padding by keywords: ``KEYWORD_RUN`` or more content words in a row (no stop word between
  them) that are all words of the reference or the question (as many as the reference has when it has fewer, at
  least ``KEYWORD_RUN_MIN``; for a reference of two content words, both side by side): a list, not an answer.

The training-side numbers form a :class:`Profile`, saved by ``rubrictool train`` as ``profile.json``.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from difflib import SequenceMatcher
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from rubrictool.atomic import atomic_write_text
from rubrictool.errors import DataError

__all__ = [
    "CONSISTENCY_QUANTILE",
    "COPY_COVER",
    "COPY_MIN_WORDS",
    "COPY_SHARE",
    "EMPTY_FLAG",
    "FLAGS",
    "KEYWORD_RUN",
    "KEYWORD_RUN_MIN",
    "OOD_LENGTH_FACTOR",
    "OOD_MIN_WORDS",
    "OOD_QUANTILE",
    "PROFILE_FILE",
    "REPEAT_MIN_WORDS",
    "STOP_WORDS",
    "Profile",
    "build_profile",
    "copies_reference",
    "copy_cover",
    "copy_share",
    "flag_frame",
    "gaming_flags",
    "keyword_list",
    "keyword_run",
    "keywords",
    "load_profile",
    "profile_from_table",
    "repeats_text",
    "save_profile",
    "words",
]

FLAGS = ("copies_reference", "copies_question", "concepts_disagree_with_grade", "out_of_distribution", "truncated",
         "empty", "repeats_text", "keyword_list")
EMPTY_FLAG = "empty"  # no response to grade (grade.empty_responses)
COPY_SHARE = 0.8  # share of the question's n-grams found in the response (copies_question)
COPY_COVER = 0.8  # share of the reference's words a word-for-word alignment with the response covers
COPY_MIN_WORDS = 10  # a shorter reference is what a short right answer says: reproducing it is not a copy
CONSISTENCY_QUANTILE = 0.95  # of |gold grade - implied grade| over the training split
OOD_QUANTILE = 0.99  # of the training responses' leave-one-out unseen-word share
OOD_MIN_WORDS = 3  # fewer word types: too short to call unseen words unusual
OOD_LENGTH_FACTOR = 2.0  # times the longest training response, in words
PROFILE_FILE = "profile.json"
REPEAT_MIN_WORDS = 3  # a sentence this long that occurs twice is repeated text (a shorter one: three times)
KEYWORD_RUN = 5  # content words of the reference/question in a row that make a keyword list
KEYWORD_RUN_MIN = 3  # ... at least this many when the reference and question have fewer content words
_STOP_TEXT = (
    "a an the and or but if of to in on at by for with from as is are was were be been being it its this that "
    "these those there their they them he she we you i not no yes do does did done can could will would should "
    "may might must so such than then also only into over under about which who whom what when where why how "
    "all any each both more most other some own same very just"
)
STOP_WORDS = frozenset(_STOP_TEXT.split(" "))
_KEYWORD = re.compile(r"[A-Za-z][A-Za-z0-9_+#-]*")
_SENTENCE_END = re.compile(r"(?<=[.!?;])\s+|\n+")

_WORD = re.compile(r"\w+", re.UNICODE)


def words(text: str) -> list[str]:
    """Lower-cased word tokens (any script; a run of CJK characters is one token)."""
    return _WORD.findall(str(text).lower())


def _ngrams(tokens: Sequence[str], n: int) -> set[tuple[str, ...]]:
    return {tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)}


def copy_share(source: str, response: str) -> float:
    """Share of ``source``'s word n-grams (trigrams; bigrams for <= 3 words, words for 1) found in ``response``."""
    src, rsp = words(source), words(response)
    if not src:
        return 0.0
    n = 3 if len(src) > 3 else (2 if len(src) > 1 else 1)
    grams = _ngrams(src, n)
    return len(grams & _ngrams(rsp, n)) / len(grams)


def copy_cover(source: str, response: str) -> float:
    """Share of ``source``'s words matched, in order, by words of ``response`` (difflib's alignment of the two word
    sequences): 1.0 for a pasted source, still high with a word or two changed."""
    src, rsp = words(source), words(response)
    if not src or not rsp:
        return 0.0
    blocks = SequenceMatcher(None, src, rsp, autojunk=False).get_matching_blocks()
    return sum(b.size for b in blocks) / len(src)


def copies_reference(reference: str, response: str) -> bool:
    """``copies_reference``: a reference of COPY_MIN_WORDS words or more, covered at COPY_COVER or more by the response
    (:func:`copy_cover`)."""
    return len(words(reference)) >= COPY_MIN_WORDS and copy_cover(reference, response) >= COPY_COVER


def keywords(text: str, limit: int | None = 10) -> list[str]:
    """The content words of ``text`` in order of first use (no stop words, 3+ letters), at most ``limit``."""
    out: list[str] = []
    for w in _KEYWORD.findall(text):
        lw = w.lower()
        if len(lw) >= 3 and lw not in STOP_WORDS and lw not in out:
            out.append(lw)
    return out if limit is None else out[:limit]


def repeats_text(response: str) -> bool:
    """Padding by repetition (``repeats_text``): a sentence of REPEAT_MIN_WORDS+ words twice, any sentence three
    times, or a run of words three times in a row."""
    sentences = Counter(tuple(words(s)) for s in _SENTENCE_END.split(str(response)) if words(s))
    if any(c >= 3 or (c >= 2 and len(s) >= REPEAT_MIN_WORDS) for s, c in sentences.items()):
        return True
    toks = words(response)[:2000]
    n = len(toks)
    for k in range(1, n // 3 + 1):
        for i in range(n - 3 * k + 1):
            if toks[i : i + k] == toks[i + k : i + 2 * k] == toks[i + 2 * k : i + 3 * k]:
                return True
    return False


def keyword_run(response: str, source: str) -> int:
    """The longest run of consecutive words of ``response`` that are all content words of ``source`` (a stop word,
    a word of 1-2 letters or any other word ends a run; punctuation between words does not)."""
    vocab = set(keywords(source, None))
    best = run = 0
    for w in _KEYWORD.findall(str(response)):
        lw = w.lower()
        run = run + 1 if lw in vocab else 0
        best = max(best, run)
    return best


def keyword_list(response: str, reference: str, question: str = "") -> bool:
    """Padding by keywords (``keyword_list``): KEYWORD_RUN content words of the reference or question in a row
    (as many as the reference has when it has fewer, at least KEYWORD_RUN_MIN); for a reference of two content
    words, both of them side by side."""
    ref = keywords(reference, None)
    need = max(KEYWORD_RUN_MIN, min(KEYWORD_RUN, len(ref)))
    if keyword_run(response, f"{reference} {question}") >= need:
        return True
    if 2 <= len(ref) < KEYWORD_RUN_MIN:
        toks = [w.lower() for w in _KEYWORD.findall(str(response))]
        return any(set(toks[i : i + len(ref)]) == set(ref) for i in range(len(toks) - len(ref) + 1))
    return False


@dataclass
class Profile:
    """What the flags need from the training data (``profile.json``)."""

    vocabulary: dict[str, int]  # word -> training responses that contain it
    n_train: int
    unseen_threshold: float  # OOD_QUANTILE quantile of the leave-one-out unseen-word share
    max_words: int  # words of the longest training response
    consistency: dict[str, float] | None = None  # intercept, slope, allowance; None without concepts
    scale: tuple[int, int] | None = None  # rubric concept scale (min, max) the line was fitted on

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> Profile:
        scale = doc.get("scale")
        return cls({str(k): int(v) for k, v in doc["vocabulary"].items()}, int(doc["n_train"]),
                   float(doc["unseen_threshold"]), int(doc["max_words"]), doc.get("consistency"),
                   (int(scale[0]), int(scale[1])) if scale else None)


def build_profile(
    responses: Sequence[str],
    grades: Sequence[float] | np.ndarray[Any, Any] | None = None,
    levels: np.ndarray[Any, Any] | None = None,
    scale: tuple[int, int] | None = None,
) -> Profile:
    """The profile of a training split: its responses, and (for the consistency line) their gold grades
    and gold concept levels (N, K) on the rubric scale ``scale``."""
    toks = [set(words(r)) for r in responses]
    df: Counter[str] = Counter()
    for t in toks:
        df.update(t)
    loo = [sum(df[w] == 1 for w in t) / len(t) for t in toks if len(t) >= OOD_MIN_WORDS]
    threshold = float(np.quantile(loo, OOD_QUANTILE)) if loo else 1.0
    longest = max((len(words(r)) for r in responses), default=0)
    consistency = None
    if grades is not None and levels is not None and scale is not None and len(grades) >= 3:
        x = (np.asarray(levels, dtype=float).mean(axis=1) - scale[0]) / max(1, scale[1] - scale[0])
        y = np.asarray(grades, dtype=float)
        slope, intercept = np.polyfit(x, y, 1) if np.ptp(x) > 0 else (0.0, float(y.mean()))
        resid = np.abs(y - (intercept + slope * x))
        allowance = max(1.0, float(np.quantile(resid, CONSISTENCY_QUANTILE)))
        consistency = {"intercept": float(intercept), "slope": float(slope), "allowance": allowance}
    return Profile(dict(df), len(responses), threshold, longest, consistency, scale)


def save_profile(profile: Profile, run_dir: str | Path) -> Path:
    text = json.dumps(profile.to_json(), ensure_ascii=False, sort_keys=True)
    return atomic_write_text(Path(run_dir) / PROFILE_FILE, text)


def load_profile(run_dir: str | Path) -> Profile:
    """The run's ``profile.json`` (every run has one; :func:`rubrictool.train.runs.open_run` checks it with the run's
    other files)."""
    path = Path(run_dir) / PROFILE_FILE
    try:
        return Profile.from_json(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise DataError(f"{path}: unreadable flag profile ({e.__class__.__name__})",
                        hint=f"train the run again (`rubrictool train … --out {Path(run_dir)}`)") from None


def profile_from_table(table: pd.DataFrame, train_ids: list[str], keys: list[str], scale: tuple[int, int]) -> Profile:
    """:func:`build_profile` of the rows of ``table`` whose id is in ``train_ids``."""
    df = table.assign(id=table["id"].astype(str))
    df = df[df["id"].isin(set(train_ids))]
    has_c = bool(keys) and all(k in df.columns for k in keys) and "grade" in df.columns
    grades = pd.to_numeric(df["grade"]).to_numpy() if has_c else None
    levels = df[keys].apply(pd.to_numeric).to_numpy() if has_c else None
    return build_profile(df["response"].fillna("").astype(str).tolist(), grades, levels, scale if has_c else None)


def gaming_flags(response: str, reference: str, question: str) -> list[str]:
    """The flags one answer's own text raises against its reference and question, in :data:`FLAGS`' order — what a
    student could add to game the grader (``copies_reference``, ``copies_question``, ``repeats_text``,
    ``keyword_list``); the product holds an answer that raises one for a teacher (no mark)."""
    reasons = []
    if copies_reference(reference, response):
        reasons.append("copies_reference")
    if question.strip() and copy_share(question, response) >= COPY_SHARE:
        reasons.append("copies_question")
    if repeats_text(response):
        reasons.append("repeats_text")
    if (reference.strip() or question.strip()) and keyword_list(response, reference, question):
        reasons.append("keyword_list")
    return reasons


def flag_frame(
    items: pd.DataFrame,
    graded: pd.DataFrame,
    keys: list[str],
    profile: Profile | None,
    truncated: Sequence[bool] | None = None,
) -> pd.Series:
    """The ``flags`` column for graded items (same order): reasons joined by ``;``, empty when none.

    ``truncated``: per item, whether the encoder cut its input. Without a profile the two flags that
    need training data are not checked. ``items``' responses are judged as given: :func:`rubrictool.grade.grade_loaded`
    passes them as the model read them (``reccbm.responses_as_read``)."""
    n = len(items)
    col = {c: items[c].fillna("").astype(str).tolist() if c in items.columns else [""] * n
           for c in ("response", "reference", "question")}
    expected = [f"{k}_expected" for k in keys]
    has_concepts = all(c in graded.columns for c in expected)
    out = []
    for i in range(n):
        resp = col["response"][i]
        if not resp.strip():
            out.append(EMPTY_FLAG)  # nothing was read: no other reason applies
            continue
        text = gaming_flags(resp, col["reference"][i], col["question"][i])
        reasons = [f for f in text if f in ("copies_reference", "copies_question")]
        if profile is not None and profile.consistency and profile.scale and has_concepts:
            lo, hi = profile.scale
            x = (float(np.mean([graded[c].iloc[i] for c in expected])) - lo) / max(1, hi - lo)
            c = profile.consistency
            if abs(float(graded["grade"].iloc[i]) - (c["intercept"] + c["slope"] * x)) > c["allowance"]:
                reasons.append("concepts_disagree_with_grade")
        if profile is not None:
            types = set(words(resp))
            unseen = sum(w not in profile.vocabulary for w in types) / len(types) if types else 0.0
            too_long = len(words(resp)) > OOD_LENGTH_FACTOR * max(1, profile.max_words)
            if (len(types) >= OOD_MIN_WORDS and unseen > profile.unseen_threshold) or too_long:
                reasons.append("out_of_distribution")
        if truncated is not None and truncated[i]:
            reasons.append("truncated")
        reasons += [f for f in text if f in ("repeats_text", "keyword_list")]
        out.append(";".join(reasons))
    return pd.Series(out, index=graded.index, name="flags", dtype=object)
