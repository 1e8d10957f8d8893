"""A behavioural test suite for a trained grader: does a mark move for the right reasons?

CheckList-style tests (Ribeiro et al., "Beyond Accuracy: Behavioral Testing of NLP Models with CheckList",
ACL 2020) on a run's test answers, each answer edited and graded again with the run's own grading path
(:func:`rubrictool.grade.grade_loaded`):

* **invariance**: edits that must not move a mark (a final full stop added or removed, case, spaces, a one-letter
  typo in an ordinary word, the sentences reordered, a synonym for an ordinary word, the student's name and id);
* **directional**: edits with an expected direction: the claim negated and the key term swapped for its opposite
  (or the other option of a two-option question) must lower the mark; a bare keyword list, the reference pasted after
  a wrong answer, the question restated, filler and a wrong answer made longer must not raise it;
* **minimum functionality**: minimal pairs, a right and a wrong answer to one question that differ by one word: the
  right one must be graded above the wrong one.

Key words are the content words of the question, the reference and the rubric's level anchors; an edit that must not
change the meaning (typo, synonym) touches only the other words. Every edit is deterministic for a seed.
:func:`run_suite` returns the graded pairs (one row per test and answer); :func:`summarise` turns them (one run's, or
the pooled rows of a k-fold run's folds) into one row per test with the share of marks moved, the mean shift with a
95 % bootstrap CI, the share moved by two marks or more, the expected direction, and the test's verdict in words.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from rubrictool.errors import DataError
from rubrictool.flags import keywords
from rubrictool.progress import Progress, ProgressFn

__all__ = ["FILLER", "TARGETS", "TESTS", "BehaviourResult", "BehaviourTest", "check_tests", "edit", "failing_sentences",
           "filler_for", "first_sentence", "key_words", "pair_questions", "read_pairs", "run_suite", "suite_on_run", "summarise",
           "summary_markdown"]

# Generic sentences that say nothing about any particular question: the filler when the course has too few answers of
# its own to draw from. Written for no subject in particular (a course of any field may fall back on them).
FILLER = (
    "This is a very important idea and it comes up in many different situations.",
    "In general, it is always a good idea to think carefully about the question before answering it.",
    "It depends on the situation, but usually this way of looking at it makes things clearer and easier to follow.",
    "There are many advantages and some disadvantages, which are discussed in the textbook.",
)

# The targets a test is judged by: invariance edits move at most 2 % of marks and none by 2 marks; an edit
# that must lower the mark lowers it by a mark or more on at least 70 % of the answers graded in the top two marks;
# a gaming edit gains at most 0.25 mark on average; a minimal pair's right answer is above the wrong one in 85 %.
TARGETS = {"invariance_changed": 0.02, "falls_top": 0.70, "gaming_gain": 0.25, "pairs_right_above": 0.85}

# ---------------------------------------------------------------------------- word lists
# General English words, not any course's: a synonym keeps the meaning, an opposite turns it round.
SYNONYMS = {  # words whose swap keeps the sentence grammatical wherever they stand (not "make sure", "by means of")
    "use": "employ", "uses": "employs", "used": "employed", "using": "employing", "because": "since",
    "big": "large", "large": "big", "many": "numerous", "quickly": "rapidly", "easily": "readily",
    "shows": "displays", "show": "display", "gets": "obtains", "important": "essential", "allows": "permits",
    "allow": "permit", "often": "frequently", "usually": "typically", "example": "instance", "also": "additionally",
    "therefore": "thus", "thus": "therefore", "whole": "entire", "entire": "whole", "find": "locate",
    "finds": "locates", "gives": "provides", "called": "named", "different": "distinct", "several": "multiple",
    "things": "items", "thing": "item", "basically": "essentially", "mostly": "largely", "very": "highly",
    "just": "simply", "simply": "just", "really": "truly", "whether": "if", "problem": "issue", "problems": "issues",
}
_OPPOSITE_PAIRS = (
    ("true", "false"), ("correct", "incorrect"), ("valid", "invalid"), ("before", "after"), ("first", "last"),
    ("maximum", "minimum"), ("max", "min"), ("faster", "slower"), ("fast", "slow"), ("increase", "decrease"),
    ("increases", "decreases"), ("increasing", "decreasing"), ("increased", "decreased"), ("larger", "smaller"),
    ("largest", "smallest"), ("higher", "lower"), ("highest", "lowest"), ("greater", "smaller"), ("top", "bottom"),
    ("left", "right"), ("static", "dynamic"), ("statically", "dynamically"), ("public", "private"),
    ("input", "output"), ("inputs", "outputs"), ("local", "global"), ("positive", "negative"), ("always", "never"),
    ("include", "exclude"), ("includes", "excludes"), ("inside", "outside"), ("internal", "external"),
    ("beginning", "end"), ("start", "end"), ("open", "closed"), ("acid", "base"), ("acidic", "basic"),
    ("heated", "cooled"), ("add", "remove"), ("added", "removed"), ("sorted", "unsorted"),
    ("ascending", "descending"), ("recursive", "iterative"), ("recursion", "iteration"), ("finite", "infinite"),
    ("lifo", "fifo"), ("push", "pop"), ("head", "tail"), ("parent", "child"), ("root", "leaf"),
    ("compile-time", "run-time"), ("compile", "run"), ("declaration", "definition"), ("stack", "queue"),
    ("same", "different"), ("more", "less"), ("allowed", "forbidden"), ("possible", "impossible"),
    ("efficient", "inefficient"), ("safe", "unsafe"), ("upper", "lower"), ("front", "back"),
)
OPPOSITES = {a: b for a, b in _OPPOSITE_PAIRS} | {b: a for a, b in _OPPOSITE_PAIRS}
NAMES = ("Jordan Lee", "Sam Patel", "Alex Moreau", "Maria Rossi", "Kim Nguyen", "Chris Okafor")

_WORD = re.compile(r"[A-Za-z][A-Za-z'-]*")
_SENT = re.compile(r"(?<=[.!?])\s+")
_NEGATE = re.compile(r"\b(is|are|does|can|will|has|have)\b(?!\s+not\b)", re.IGNORECASE)
_TWO_OPTIONS = re.compile(r"\b([A-Za-z][\w-]*)\s*,?\s+or\s+([A-Za-z][\w-]*)\s*\?")


def first_sentence(text: str) -> str:
    parts = [p.strip() for p in re.split(r"(?<=[.!?])\s+", text.strip()) if p.strip()]
    return parts[0] if parts else text.strip()


def key_words(question: str, reference: str, anchors: str = "") -> set[str]:
    """The key words of an item: the content words (3+ letters, no stop words) of its question and its reference,
    lower-cased; the rubric's level ``anchors``' where the item has neither."""
    return set(keywords(f"{question} {reference}", limit=None) or keywords(anchors, limit=None))


def _cased(like: str, word: str) -> str:
    """``word`` written with the case of ``like`` (Upper, UPPER or lower)."""
    if like.isupper() and len(like) > 1:
        return word.upper()
    return word[:1].upper() + word[1:] if like[:1].isupper() else word


def _non_key(text: str, keys: set[str]) -> list[re.Match[str]]:
    return [m for m in _WORD.finditer(text) if m.group().lower() not in keys]


# ---------------------------------------------------------------------------- the edits
# Each edit takes the item (response, question, reference, keys, filler, wrong) and the seed's generator and returns
# the edited response, or None where it does not apply (no word to change, not a wrong answer, nothing to negate).
_Item = dict[str, Any]


def _punctuation(it: _Item, rng: np.random.Generator) -> str | None:
    a = str(it["response"]).rstrip()
    return a[:-1].rstrip() if a[-1:] in ".!?" else a + "."


def _case(it: _Item, rng: np.random.Generator) -> str | None:
    a = it["response"]
    low = a.lower()
    return low if low != a else (a[:1].upper() + a[1:] if a[:1].upper() != a[:1] else None)


def _whitespace(it: _Item, rng: np.random.Generator) -> str | None:
    return "  ".join(it["response"].split()) + " "


def _typo(it: _Item, rng: np.random.Generator) -> str | None:
    a = str(it["response"])
    words = [m for m in _non_key(a, it["keys"]) if len(m.group()) >= 5 and m.group().isalpha()]
    words = [m for m in words if any(m.group()[i] != m.group()[i + 1] for i in range(1, len(m.group()) - 1))]
    if not words:
        return None
    m = words[int(rng.integers(len(words)))]
    w = m.group()
    spots = [i for i in range(1, len(w) - 1) if w[i] != w[i + 1]]  # the first letter stays
    i = spots[int(rng.integers(len(spots)))]
    return a[:m.start()] + w[:i] + w[i + 1] + w[i] + w[i + 2:] + a[m.end():]


def _sentence_order(it: _Item, rng: np.random.Generator) -> str | None:
    parts = [p for p in _SENT.split(it["response"].strip()) if p]
    return " ".join(parts[1:] + parts[:1]) if len(parts) >= 2 else None


def _synonym(it: _Item, rng: np.random.Generator) -> str | None:
    a = str(it["response"])
    found = [m for m in _non_key(a, it["keys"]) if m.group().lower() in SYNONYMS]
    if not found:
        return None
    m = found[int(rng.integers(len(found)))]
    return a[:m.start()] + _cased(m.group(), SYNONYMS[m.group().lower()]) + a[m.end():]


def _student_name(it: _Item, rng: np.random.Generator) -> str | None:
    name = NAMES[int(rng.integers(len(NAMES)))]
    return f"{name}, student {int(rng.integers(10000, 99999))}: {it['response']}"


def _negation(it: _Item, rng: np.random.Generator) -> str | None:
    a = it["response"]
    m = _NEGATE.search(a)
    return a[:m.end()] + " not" + a[m.end():] if m else None


def _key_swap(it: _Item, rng: np.random.Generator) -> str | None:
    """The first key word of the answer that has an opposite, swapped for it; else, on a two-option question ("A or
    B?"), the option the answer names swapped for the other. None where the answer names both sides."""
    a = str(it["response"])
    said = {m.group().lower() for m in _WORD.finditer(a)}
    for m in _WORD.finditer(a):
        w = m.group().lower()
        if w in it["keys"] and w in OPPOSITES and OPPOSITES[w] not in said:  # "both A and B" has nothing to swap
            return a[:m.start()] + _cased(m.group(), OPPOSITES[w]) + a[m.end():]
    opt = _TWO_OPTIONS.search(it["question"])
    if opt:
        x, y = opt.group(1), opt.group(2)
        has = {o: re.search(rf"\b{re.escape(o)}\b", a, re.IGNORECASE) for o in (x, y)}
        if bool(has[x]) != bool(has[y]):
            src, dst = (x, y) if has[x] else (y, x)
            return re.sub(rf"\b{re.escape(src)}\b", lambda mm: _cased(mm.group(), dst.lower()), a, flags=re.IGNORECASE)
    return None


def _reference_list(it: _Item, rng: np.random.Generator) -> str | None:
    words = keywords(it["reference"], limit=None)
    return ", ".join(words) if words else None


def _reference_after_wrong(it: _Item, rng: np.random.Generator) -> str | None:
    return f"{it['response']} {it['reference']}".strip() if it["wrong"] and it["reference"].strip() else None


def _question_restated(it: _Item, rng: np.random.Generator) -> str | None:
    return f"{it['question'].strip()} {it['response']}" if it["question"].strip() else None


def _filler(it: _Item, rng: np.random.Generator) -> str | None:
    return f"{it['response']} {it['filler'] or ' '.join(rng.choice(FILLER, size=2, replace=False))}"


def _wrong_longer(it: _Item, rng: np.random.Generator) -> str | None:
    a = it["response"].strip()
    return f"{a} In other words, {a[:1].lower()}{a[1:]}" if it["wrong"] else None


@dataclass(frozen=True)
class BehaviourTest:
    """One test: its edit, its kind and what it expects of the mark (``same``, ``falls`` or ``not_up``)."""

    name: str
    kind: str  # invariance | directional
    expect: str  # same: the mark stays; falls: the mark falls; not_up: the mark does not rise (gaming)
    words: str  # the edit in a teacher's words ("a one-letter typo")
    edit: Callable[[_Item, np.random.Generator], str | None]


TESTS = (
    BehaviourTest("punctuation", "invariance", "same", "adding or removing a final full stop", _punctuation),
    BehaviourTest("case", "invariance", "same", "changing upper and lower case", _case),
    BehaviourTest("whitespace", "invariance", "same", "adding extra spaces", _whitespace),
    BehaviourTest("typo", "invariance", "same", "a one-letter typo", _typo),
    BehaviourTest("sentence_order", "invariance", "same", "putting the sentences in another order", _sentence_order),
    BehaviourTest("synonym", "invariance", "same", "a synonym for an ordinary word", _synonym),
    BehaviourTest("student_name", "invariance", "same", "adding the student's name and id", _student_name),
    BehaviourTest("negation", "directional", "falls", 'negating the answer ("not")', _negation),
    BehaviourTest("key_swap", "directional", "falls", "swapping the key term for its opposite or the other option",
                  _key_swap),
    BehaviourTest("reference_list", "directional", "not_up", "answering with the reference's key words as a bare list",
                  _reference_list),
    BehaviourTest("reference_after_wrong", "directional", "not_up", "pasting the reference after a wrong answer",
                  _reference_after_wrong),
    BehaviourTest("question_restated", "directional", "not_up", "restating the question before the answer",
                  _question_restated),
    BehaviourTest("filler", "directional", "not_up", "adding two sentences of filler", _filler),
    BehaviourTest("wrong_longer", "directional", "not_up", "making a wrong answer longer", _wrong_longer),
)
_BY_NAME = {t.name: t for t in TESTS}


def edit(name: str, item: _Item, rng: np.random.Generator) -> str | None:
    """One test's edit of one item (``response``, ``question``, ``reference``; optional ``keys`` — default
    :func:`key_words` of the question and reference —, ``filler``, ``wrong``); None where the edit does not apply."""
    if name not in _BY_NAME:
        raise DataError(f"unknown behavioural test {name!r}; use {', '.join(_BY_NAME)}")
    it = {"filler": "", "wrong": False, **item}
    it.setdefault("keys", key_words(str(it["question"]), str(it["reference"])))
    if not str(it["response"]).strip():
        return None
    out = _BY_NAME[name].edit(it, rng)
    return None if out is None or out == it["response"] else out


def filler_for(table: pd.DataFrame | None, train_ids: list[str], questions: list[str], seed: int,
               lines: list[str] | None = None) -> list[str]:
    """Per answer (its question in ``questions``), two filler sentences: from ``lines`` when given, else first
    sentences of the course's own training answers to *other* questions (the course's words and domain, not about
    this question); "" (the generic :data:`FILLER`) when fewer than two are at hand."""
    rng = np.random.default_rng([seed, 99])
    if lines is not None:
        return [" ".join(rng.choice(lines, size=2, replace=False)) for _ in questions]
    if table is None or "question" not in table.columns:
        return [""] * len(questions)
    train = {str(i) for i in train_ids}
    tr = table[table["id"].astype(str).isin(train)]
    pool = [(str(q), first_sentence(str(r))) for q, r in zip(tr["question"], tr["response"].fillna(""))
            if len(str(r).split()) >= 4]
    out = []
    for q in questions:
        other = [sent for qq, sent in pool if qq != str(q)]
        out.append(" ".join(rng.choice(other, size=2, replace=False)) if len(other) >= 2 else "")
    return out


# ---------------------------------------------------------------------------- minimal pairs

PAIR_FIELDS = ("question_id", "right", "wrong", "changed", "note", "provenance")


def read_pairs(path: str | Path) -> pd.DataFrame:
    """Minimal pairs from a JSONL file, one object a line with ``question_id``, ``right``, ``wrong``, ``changed``,
    ``note`` and ``provenance``; a bad line is one error naming the file, the line and the field."""
    rows = []
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise DataError(f"{path}: cannot read the minimal pairs ({exc.__class__.__name__})") from None
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DataError(f"{path}: line {n} is not JSON ({exc.msg}); write one object a line") from None
        if not isinstance(obj, dict):
            raise DataError(f"{path}: line {n} is not a JSON object; write one object a line")
        for f in PAIR_FIELDS:
            if not isinstance(obj.get(f), str) or (f in ("question_id", "right", "wrong") and not obj[f].strip()):
                raise DataError(f"{path}: line {n}: field {f!r} is missing or not text; every pair needs "
                                f"{', '.join(PAIR_FIELDS)}")
        rows.append({f: obj[f] for f in PAIR_FIELDS} | {"line": n})
    if not rows:
        raise DataError(f"{path}: no minimal pairs in it")
    return pd.DataFrame(rows)


def pair_questions(pairs: pd.DataFrame, table: pd.DataFrame) -> pd.DataFrame:
    """The pairs whose question the table holds, with its question text and reference. A pair's ``question_id`` is
    found as the table's ``question_id`` text, else as the prefix of its answers' ids (``11.10`` of ``11.10.3``: a
    table read back may hold ``11.10`` as the number 11.1), else as the question text itself."""
    t = table.assign(id=table["id"].astype(str), question=table["question"].fillna("").astype(str),
                     reference=table["reference"].fillna("").astype(str) if "reference" in table else "")
    text_ids = "question_id" in t.columns and not pd.api.types.is_numeric_dtype(t["question_id"])
    found: dict[str, tuple[str, str]] = {}
    for q in dict.fromkeys(pairs["question_id"].astype(str)):
        rows = t[t["question_id"].astype(str) == q] if text_ids else t.iloc[:0]
        for match in (t["id"].str.startswith(q + "."), t["question"] == q):
            rows = rows if len(rows) else t[match]
        if len(rows):
            found[q] = (str(rows["question"].iloc[0]), str(rows["reference"].iloc[0]))
    known = pairs[pairs["question_id"].astype(str).isin(found)].copy()
    known["question"] = [found[str(q)][0] for q in known["question_id"]]
    known["reference"] = [found[str(q)][1] for q in known["question_id"]]
    return known.reset_index(drop=True)


# ---------------------------------------------------------------------------- running the suite


@dataclass
class BehaviourResult:
    """``items``: one row per test and edited answer (grades and levels before/after, the texts); ``pairs``: one row
    per minimal pair (the grades of the right and the wrong answer); ``summary``: :func:`summarise` of both."""

    run: str
    seed: int
    n: int  # test answers
    grade_range: tuple[int, int]
    items: pd.DataFrame
    pairs: pd.DataFrame
    summary: pd.DataFrame
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"run": self.run, "seed": self.seed, "n": self.n, "grade_range": list(self.grade_range),
                "targets": TARGETS, "notes": self.notes, "failing": failing_sentences(self.summary),
                "tests": json.loads(self.summary.to_json(orient="records"))}


def _grade_texts(grader: Any, frame: pd.DataFrame, batch_size: int, progress: ProgressFn | None) -> pd.DataFrame:
    """Grade every distinct (question, reference, context, response) of ``frame`` once, shortest first (fewer pad
    tokens per batch), through :func:`rubrictool.grade.grade_loaded`; the grade and the levels per row of ``frame``."""
    from rubrictool.grade import grade_loaded

    cols = ["question", "reference", "context", "response"]
    uniq = frame[cols].drop_duplicates().reset_index(drop=True)
    uniq = uniq.iloc[np.argsort(uniq["response"].str.len().to_numpy() + uniq["question"].str.len().to_numpy(),
                                kind="stable")].reset_index(drop=True)
    uniq["id"] = [f"b{i}" for i in range(len(uniq))]

    def report(p: Progress) -> None:
        if progress is not None and p.kind == "progress":
            progress(Progress("behaviour", p.done, p.total))

    graded = grade_loaded(grader, uniq, batch_size, report, flags=False)
    level_cols = [c for c in graded.columns if c.endswith("_level")]
    keep = pd.concat([uniq[cols], graded[["grade", *level_cols]]], axis=1)
    return frame[cols].merge(keep, on=cols, how="left")


def _suite_items(test: pd.DataFrame, names: list[str], seed: int) -> pd.DataFrame:
    """One row per (test, answer) the test's edit applies to: the original and the edited response."""
    rows = []
    records = test.to_dict(orient="records")
    for name in names:
        rng = np.random.default_rng([seed, [t.name for t in TESTS].index(name)])  # one stream per test
        for r in records:
            after = edit(name, {str(k): v for k, v in r.items()}, rng)
            if after is not None:
                rows.append({"test": name, "id": r["id"], "question": r["question"], "reference": r["reference"],
                             "context": r["context"], "before": r["response"], "after": after, "gold": r["gold"]})
    return pd.DataFrame(rows, columns=["test", "id", "question", "reference", "context", "before", "after", "gold"])


def _anchors(run: Any) -> str:
    """The rubric's level anchors in one text ("" for a run without its rubric copy)."""
    try:
        rb = run.rubric
    except (OSError, KeyError, DataError):
        return ""
    return " ".join(str(lv.anchor) for c in rb.concepts for lv in c.levels)


def run_suite(
    run_dir: str | Path,
    data: str | Path | None = None,
    data_dir: str | Path | None = None,
    seed: int = 0,
    batch_size: int = 64,
    tests: list[str] | None = None,
    pairs: str | Path | pd.DataFrame | None = None,
    filler: list[str] | None = None,
    progress: ProgressFn | None = None,
) -> BehaviourResult:
    """Run the behavioural tests (default all of :data:`TESTS`) on the run's test split, and the minimal ``pairs``
    (a JSONL file, :func:`read_pairs`) whose questions the run's table holds; ``filler``: the filler sentences to draw
    from (default: the course's own answers to other questions)."""
    from rubrictool.report.run import open_run

    check_tests(tests)
    pair_table = read_pairs(pairs) if isinstance(pairs, (str, Path)) else pairs
    return suite_on_run(open_run(run_dir, data, data_dir), seed, batch_size, tests, pair_table, filler, progress)


def check_tests(tests: list[str] | None) -> list[str]:
    """The tests to run (default all), each checked against :data:`TESTS`."""
    names = tests or [t.name for t in TESTS]
    for n in names:
        if n not in _BY_NAME:
            raise DataError(f"unknown behavioural test {n!r}; use {', '.join(_BY_NAME)}")
    return names


def suite_on_run(run: Any, seed: int = 0, batch_size: int = 64, tests: list[str] | None = None,
                 pairs: pd.DataFrame | None = None, filler: list[str] | None = None,
                 progress: ProgressFn | None = None) -> BehaviourResult:
    """:func:`run_suite` on a run opened with its table (:func:`rubrictool.report.run.open_run`)."""
    from rubrictool.grade import load_grader
    from rubrictool.report.run import split_rows

    names = check_tests(tests)
    test = split_rows(run, "test")
    gmin = run.grade_min
    gmax = gmin + run.model.config.num_grades - 1
    grader = load_grader(run.path)
    grader.model_, grader.tokenizer_ = run.model, run.tokenizer  # the run's model as the caller holds it (and set it)
    base = test[["id", "question", "reference", "context", "response"]].copy()
    base["gold"] = test["_y"].to_numpy() + gmin if "_y" in test.columns else np.nan
    mark = base["gold"]
    if mark.isna().any():  # no teacher's mark for some answers: the model's own grade says which are wrong
        mark = mark.where(mark.notna(), _grade_texts(grader, base, batch_size, None)["grade"].astype(float))
    base["wrong"] = (mark < (gmin + gmax) / 2).to_numpy()  # a wrong answer: below the middle of the grade scale
    anchors = _anchors(run)
    base["keys"] = pd.Series([key_words(q, r, anchors) for q, r in zip(base["question"], base["reference"])],
                             index=base.index, dtype=object)
    base["filler"] = filler_for(run.table, [str(i) for i in run.split.get("train", [])], list(base["question"]), seed,
                                filler)
    items = _suite_items(base, names, seed)
    pp = pair_questions(pairs, run.table) if pairs is not None and run.table is not None else None
    cols = ["question", "reference", "context", "response"]
    frame = pd.concat([
        base[cols], items.rename(columns={"after": "response"})[cols],
        *([pp.assign(context="", response=pp[c])[cols] for c in ("right", "wrong")] if pp is not None else []),
    ], ignore_index=True)
    graded = _grade_texts(grader, frame.fillna(""), batch_size, progress)
    result = _assemble(run, base, items, pp, graded, seed, (gmin, gmax))
    if pairs is not None and (pp is None or not len(pp)):
        result.notes.append("none of the minimal pairs' questions is in the run's table: no minimal-pair test")
    return result


def _assemble(run: Any, base: pd.DataFrame, items: pd.DataFrame, pp: pd.DataFrame | None, graded: pd.DataFrame,
              seed: int, grades: tuple[int, int]) -> BehaviourResult:
    """The graded rows of :func:`run_suite` split back into the answers' items and the pairs."""
    levels = [c for c in graded.columns if c.endswith("_level")]
    n0, n1 = len(base), len(base) + len(items)
    orig = graded.iloc[:n0].reset_index(drop=True)
    orig.index = base["id"].astype(str)
    after = graded.iloc[n0:n1].reset_index(drop=True)
    at = orig.reindex(items["id"].astype(str).tolist())  # each edited answer's original, row for row
    out = items.assign(grade_before=at["grade"].to_numpy(), grade_after=after["grade"].to_numpy())
    moved = np.zeros(len(items), dtype=bool)
    for c in levels:
        moved |= at[c].to_numpy() != after[c].to_numpy()
    out["levels_changed"] = moved
    out = out.drop(columns=["question", "reference", "context"])
    pairs = pd.DataFrame(columns=["question_id", "right", "wrong", "changed", "grade_right", "grade_wrong"])
    if pp is not None and len(pp):
        m = len(pp)
        pairs = pp[["question_id", "right", "wrong", "changed", "note", "provenance"]].assign(
            grade_right=graded["grade"].iloc[n1:n1 + m].to_numpy(), grade_wrong=graded["grade"].iloc[n1 + m:].to_numpy())
    return BehaviourResult(str(run.path), seed, len(base), grades, out, pairs, summarise(out, pairs, grades, seed))


# ---------------------------------------------------------------------------- summaries


def _ci(values: np.ndarray[Any, Any], seed: int, reps: int = 2000) -> tuple[float, float]:
    """95 % percentile bootstrap CI of the mean (nan, nan for fewer than two values)."""
    if len(values) < 2:
        return float("nan"), float("nan")
    rng = np.random.default_rng(seed)
    means = values[rng.integers(0, len(values), size=(reps, len(values)))].mean(axis=1)
    return float(np.quantile(means, 0.025)), float(np.quantile(means, 0.975))


def _largest(part: pd.DataFrame, shift: np.ndarray[Any, Any], k: int = 3) -> list[dict[str, Any]]:
    order = np.argsort(-np.abs(shift), kind="stable")[:k]
    return [{"id": str(part["id"].iloc[i]), "before": str(part["before"].iloc[i]), "after": str(part["after"].iloc[i]),
             "grade_before": int(part["grade_before"].iloc[i]), "grade_after": int(part["grade_after"].iloc[i])}
            for i in order if shift[i] != 0]


def _test_row(t: BehaviourTest, part: pd.DataFrame, grades: tuple[int, int], seed: int) -> dict[str, Any]:
    shift = (part["grade_after"].to_numpy(float) - part["grade_before"].to_numpy(float))
    lo, hi = _ci(shift, seed)
    top = part["grade_before"].to_numpy() >= grades[1] - 1  # answers the model graded in the top two marks
    row: dict[str, Any] = {
        "test": t.name, "kind": t.kind, "expect": t.expect, "words": t.words, "n": len(part),
        "share_changed": float((shift != 0).mean()) if len(part) else float("nan"),
        "share_levels_changed": float(part["levels_changed"].mean()) if len(part) else float("nan"),
        "mean_shift": float(shift.mean()) if len(part) else float("nan"), "ci_lo": lo, "ci_hi": hi,
        "share_moved_2": float((np.abs(shift) >= 2).mean()) if len(part) else float("nan"),
        "share_expected": float("nan"), "n_top": int(top.sum()), "share_top_fell": float("nan"),
        "top": f"{grades[1] - 1}–{grades[1]}",
        "largest": _largest(part, shift),
    }
    if t.expect == "falls" and len(part):
        row["share_expected"] = float((shift < 0).mean())
        row["share_top_fell"] = float((shift[top] <= -1).mean()) if top.any() else float("nan")
    elif t.expect == "not_up" and len(part):
        row["share_expected"] = float((shift <= 0).mean())
    row["passes"], row["sentence"] = _judge(row)
    return row


def _judge(row: dict[str, Any]) -> tuple[bool | None, str]:
    """Whether a test meets its target (None: not judged, too few answers) and, when it fails, a teacher's sentence."""
    words = row["words"]

    def pct(v: float) -> str:
        return f"{100 * v:.0f} %"

    if row["n"] == 0:
        return None, ""
    if row["expect"] == "same":
        ok = row["share_changed"] <= TARGETS["invariance_changed"] and row["share_moved_2"] == 0
        two = f", {100 * row['share_moved_2']:.1f} % by 2 marks or more" if row["share_moved_2"] else ""
        return ok, f"{words} moves {pct(row['share_changed'])} of marks{two} (target: at most 2 %, none by 2)"
    if row["expect"] == "falls":
        if row["n_top"] == 0:
            return None, ""
        ok = row["share_top_fell"] >= TARGETS["falls_top"]
        return ok, (f"{words} lowers only {pct(row['share_top_fell'])} of the {row['n_top']} answer{'s' * (row['n_top'] != 1)} graded {row['top']} by a "
                    "mark or more (target: at least 70 %)")
    if row["expect"] == "not_up":
        ok = row["mean_shift"] <= TARGETS["gaming_gain"]
        return ok, f"{words} gains {row['mean_shift']:+.2f} marks on average (target: at most +0.25)"
    return None, ""


def _pairs_row(pairs: pd.DataFrame, seed: int) -> dict[str, Any]:
    diff = pairs["grade_right"].to_numpy(float) - pairs["grade_wrong"].to_numpy(float)
    lo, hi = _ci(diff, seed)
    order = np.argsort(diff, kind="stable")[:3]
    row: dict[str, Any] = {
        "test": "minimal_pairs", "kind": "minimum functionality", "expect": "right_above",
        "words": "a right answer and a wrong one that differ by one word", "n": len(pairs),
        "share_expected": float((diff > 0).mean()), "share_tied": float((diff == 0).mean()),
        "mean_shift": float(diff.mean()), "ci_lo": lo, "ci_hi": hi,
        "largest": [{"id": str(pairs["question_id"].iloc[i]), "before": str(pairs["right"].iloc[i]),
                     "after": str(pairs["wrong"].iloc[i]), "grade_before": int(pairs["grade_right"].iloc[i]),
                     "grade_after": int(pairs["grade_wrong"].iloc[i])} for i in order if diff[i] <= 0],
    }
    row["passes"] = bool(row["share_expected"] >= TARGETS["pairs_right_above"])
    row["sentence"] = (f"the right answer of a minimal pair is graded above the wrong one in only "
                       f"{100 * row['share_expected']:.0f} % (target: at least 85 %)")
    return row


def summarise(items: pd.DataFrame, pairs: pd.DataFrame, grades: tuple[int, int], seed: int = 0) -> pd.DataFrame:
    """One row per test of the graded ``items`` (one run's, or several folds' pooled) and one for the minimal ``pairs``:
    n, share of marks changed, share with a concept level changed, mean shift [95 % bootstrap CI], share moved by 2
    or more, share in the expected direction, share of top-marked answers that fell (tests that must lower the mark),
    the largest moves, whether it meets its target and, when not, the sentence that says so."""
    rows = [_test_row(t, items[items["test"] == t.name], grades, seed) for t in TESTS if (items["test"] == t.name).any()]
    if len(pairs):
        rows.append(_pairs_row(pairs, seed))
    return pd.DataFrame(rows)


def failing_sentences(summary: pd.DataFrame) -> list[str]:
    """The failing tests in a teacher's words, invariance first."""
    if summary.empty:
        return []
    return [str(r["sentence"]) for r in summary.to_dict(orient="records")
            if isinstance(r.get("passes"), (bool, np.bool_)) and not r["passes"]]


def summary_markdown(summary: pd.DataFrame, largest: bool = True) -> str:
    """The summary as Markdown tables: invariance, directional, minimal pairs; then the largest moves."""
    from rubrictool.textsafe import md_inline

    def pct(v: Any) -> str:
        return "—" if v is None or (isinstance(v, float) and np.isnan(v)) else f"{100 * float(v):.1f} %"

    def ok(v: Any) -> str:
        return "—" if v is None or (isinstance(v, float) and np.isnan(v)) else ("yes" if v else "**no**")

    recs = summary.to_dict(orient="records")
    out = ["| invariance test | answers | marks changed | levels changed | mean shift [95 % CI] | moved ≥ 2 | meets target |",
           "|---|---:|---:|---:|---|---:|---|"]
    out += [f"| {r['test']} | {r['n']} | {pct(r['share_changed'])} | {pct(r['share_levels_changed'])} | "
            f"{r['mean_shift']:+.3f} [{r['ci_lo']:+.3f}, {r['ci_hi']:+.3f}] | {pct(r['share_moved_2'])} | {ok(r['passes'])} |"
            for r in recs if r["kind"] == "invariance"]
    out += ["", ("| directional test | expected | answers | marks changed | mean shift [95 % CI] | in the expected "
            "direction | answers graded in the top two marks falling ≥ 1 | meets target |"), "|---|---|---:|---:|---|---:|---|---|"]
    for r in recs:
        if r["kind"] == "directional":
            top = f"{pct(r['share_top_fell'])} of {int(r['n_top'])}" if r["expect"] == "falls" else "—"
            exp = "falls" if r["expect"] == "falls" else "does not rise"
            out.append(f"| {r['test']} | {exp} | {int(r['n'])} | {pct(r['share_changed'])} | {r['mean_shift']:+.3f} "
                       f"[{r['ci_lo']:+.3f}, {r['ci_hi']:+.3f}] | {pct(r['share_expected'])} | {top} | {ok(r['passes'])} |")
    for r in recs:
        if r["kind"] == "minimum functionality":
            out += ["", "| minimal pairs | pairs | right above wrong | tied | mean difference [95 % CI] | meets target |",
                    "|---|---:|---:|---:|---|---|",
                    (f"| right vs. wrong by one word | {r['n']} | {pct(r['share_expected'])} | {pct(r['share_tied'])} | "
                    f"{r['mean_shift']:+.3f} [{r['ci_lo']:+.3f}, {r['ci_hi']:+.3f}] | {ok(r['passes'])} |")]
    if largest:
        out += ["", "Largest moves (answer before → after, marks):", ""]
        for r in recs:
            for m in (r.get("largest") or [])[:2]:
                out.append(f"- {r['test']}, {md_inline(m['id'])}: {m['grade_before']} → {m['grade_after']}: "
                           f"“{md_inline(m['before'][:160])}” → “{md_inline(m['after'][:160])}”")
    return "\n".join(out) + "\n"
