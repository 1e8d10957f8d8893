"""The behavioural tests' edits of an answer: the word lists, each edit, the tests (:data:`TESTS`) and the filler
sentences a gaming edit adds. Every edit is deterministic for a seed."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from rubrictool.errors import DataError
from rubrictool.flags import keywords

__all__ = ["FILLER", "NAMES", "OPPOSITES", "SYNONYMS", "TESTS", "BehaviourTest", "check_tests", "edit",
           "filler_for", "first_sentence", "key_words"]

# Generic sentences that say nothing about any particular question: the filler when the course has too few answers of
# its own to draw from. Written for no subject in particular (a course of any field may fall back on them).
FILLER = (
    "This is a very important idea and it comes up in many different situations.",
    "In general, it is always a good idea to think carefully about the question before answering it.",
    "It depends on the situation, but usually this way of looking at it makes things clearer and easier to follow.",
    "There are many advantages and some disadvantages, which are discussed in the textbook.",
)

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


def _name_unlabelled(it: _Item, rng: np.random.Generator) -> str | None:
    # no label and no id: a form reccbm.normalise.without_signature leaves alone, so this reads the grader itself
    return f"{NAMES[int(rng.integers(len(NAMES)))]}\n{it['response']}"


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
    BehaviourTest("name_unlabelled", "invariance", "same", "writing the student's name on a line above it",
                  _name_unlabelled),
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


def check_tests(tests: list[str] | None) -> list[str]:
    """The tests to run (default all), each checked against :data:`TESTS`."""
    names = tests or [t.name for t in TESTS]
    for n in names:
        if n not in _BY_NAME:
            raise DataError(f"unknown behavioural test {n!r}; use {', '.join(_BY_NAME)}")
    return names
