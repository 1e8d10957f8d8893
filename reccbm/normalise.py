"""What a student's answer is read as: the edits that never change what an answer says, undone before the grader
reads it (``ModelConfig.normalise``; :func:`reccbm.data.encode_inputs` applies it, so training, grading, the
report and :class:`reccbm.Grader` read answers alike).

* whitespace: runs of spaces, tabs and line breaks are one space; none at either end;
* the answer's final punctuation: trailing ``.``, ``!``, ``;``, ``,`` and ``:`` go (a question mark stays: it can
  make an answer a question);
* a one-letter slip in a word of five or more letters: a word the encoder's vocabulary does not hold, one edit
  (two neighbouring letters swapped, one letter dropped, added or replaced) away from exactly one word of the
  question, the reference answer or the vocabulary, becomes that word — the question's and the reference's words
  first. A word the vocabulary holds is never changed, so a real word a student chose ("except" for "accept") stays.
  With a course lexicon (``ModelConfig.course_words``: the words the course's own training answers use, most used
  first; :func:`course_lexicon`) its words are never changed either, and where several words are one edit away the
  one the course's answers use most is read (Norvig's choice by the word's frequency, from the course rather than
  from general English: "nodse" is "nodes" in a data-structures course, not "noise"); a slip one edit from a
  lexicon word the vocabulary lacks ("pointre", "pointer") is read back too. A known word with a regular ending
  ("computes", "scoped", "constructors") is a real word the vocabulary splits into pieces and is never changed.

* the student's own name or id written into the answer where it says so: a labelled id ("student 61400", "ID 4821",
  "#20417"), with or without a name before it ("Maria Rossi, student 61400:"), or a "Name:" field, at the answer's
  start or at its end after a sentence, a line break or a dash ("the user id 1001" keeps its id); and a name with no
  label where its shape leaves no doubt — "(Silva, Ana)" before the answer, "- A. Silva" after a sentence — when none
  of its words is a word of the question, the reference or the course lexicon (so "- Big O" at the end of an answer
  about Big O stays). An answer that is nothing but such a signature is read as empty.

Each of these is an edit a teacher would not mark; none can add what the answer did not say. Case is left alone
(the default encoder is uncased; a cased one reads case as the student wrote it).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from functools import lru_cache

__all__ = ["Normaliser", "course_lexicon", "normaliser_for", "one_edit", "vocabulary_words", "without_signature"]

_SPACE = re.compile(r"\s+")
_TRAILING = re.compile(r"[.!;,:\s]+$")
_WORD = re.compile(r"[A-Za-z]{5,}")
_LETTERS = "abcdefghijklmnopqrstuvwxyz"
_ENDINGS = ("s", "es", "ies", "d", "ed", "ied", "ing", "er", "ers", "ly")  # regular inflections (_inflected)

# A student's signature (without_signature). A person's name: one to three capitalised words or initials ("Ana
# Silva", "A. Silva", "Ana M. Silva"); an id: a number of three or more digits with its label.
_CAP = r"[A-Z][a-z'\u2019-]+"
_PERSON = rf"(?:[A-Z]\.\s?)?{_CAP}(?:\s+(?:[A-Z]\.|{_CAP})){{0,2}}"
_ID = r"(?i:(?:student|matric(?:ulation)?)(?:\s*(?:id|no\.?|number|#))?|id|\#)\s*[:#]?\s*\d{3,}"
_NAME_FIELD = rf"(?i:(?:student(?:'s)?\s+)?name)\s*:\s*(?P<field>{_PERSON})"
_STOP = r"\s*(?:\n|[:.;,|\u2013\u2014-]\s*|$)"  # where a signature ends: a line break or a mark, never a bare space
_LABELLED = (  # a signature with a label or an id: no doubt whose it is
    rf"{_NAME_FIELD}(?:\s*[,;(]?\s*{_ID}\)?)?",
    rf"{_PERSON}\s*,?\s*\(?\s*{_ID}\s*\)?",
    rf"{_PERSON}\s*\(\s*\d{{3,}}\s*\)",
    _ID,
)
_LEADING = re.compile(rf"^\s*(?:{'|'.join(_LABELLED)}){_STOP}")
# at the end, standing apart: after a sentence's end, a line break or a dash ("the user id 1001" keeps its id)
_TRAILING_ID = re.compile(rf"(?:(?<=[.!?])\s+|\s*\n\s*|\s*[\u2013\u2014~-]+\s*)(?:{'|'.join(_LABELLED)})\s*[.]?\s*$")
_BARE_LEADING = re.compile(rf"^\s*\(\s*(?P<field>{_CAP}\s*,\s*{_PERSON})\s*\)\s*[:.\u2013\u2014-]?\s*")
# after a sentence's end or a line break only: "It was called - Alan Turing" keeps its answer
_BARE_TRAILING = re.compile(rf"(?:(?<=[.!?)])\s*|\s*\n\s*)[\u2013\u2014~-]+\s*(?P<field>{_PERSON})\s*$")


def one_edit(word: str) -> set[str]:
    """Every string one edit from ``word`` (lower case): a swap of neighbours, a deletion, an insertion, a replacement
    (Norvig's candidates)."""
    splits = [(word[:i], word[i:]) for i in range(len(word) + 1)]
    swaps = {a + b[1] + b[0] + b[2:] for a, b in splits if len(b) > 1}
    deletes = {a + b[1:] for a, b in splits if b}
    replaces = {a + c + b[1:] for a, b in splits if b for c in _LETTERS}
    inserts = {a + c + b for a, b in splits for c in _LETTERS}
    return (swaps | deletes | replaces | inserts) - {word}


def vocabulary_words(tokenizer: object) -> frozenset[str]:
    """The whole words (letters only, 5+) of a WordPiece/BPE tokenizer's vocabulary, lower case; empty when it has none
    readable (then only the question's and the reference's words correct a slip)."""
    get = getattr(tokenizer, "get_vocab", None)
    if get is None:
        return frozenset()
    words = set()
    for piece in get():
        w = piece[1:] if piece.startswith(("Ġ", "▁")) else piece  # BPE / SentencePiece word starts
        if len(w) >= 5 and w.isalpha() and w.isascii():
            words.add(w.lower())
    return frozenset(words)


class Normaliser:
    """Normalises answers against a vocabulary (:func:`vocabulary_words`), an optional course lexicon (its words most
    used first, :func:`course_lexicon`) and each answer's own question and reference."""

    def __init__(self, vocabulary: Iterable[str] = (), lexicon: Iterable[str] = ()) -> None:
        self.vocabulary = frozenset(w.lower() for w in vocabulary)
        self.rank: dict[str, int] = {}  # lexicon word -> its rank (0: the most used)
        for w in lexicon:
            self.rank.setdefault(w.lower(), len(self.rank))
        self.known = self.vocabulary | frozenset(self.rank)
        self._fix = lru_cache(maxsize=65536)(self._fix_uncached)

    def __call__(self, response: str, question: str = "", reference: str = "") -> str:
        near = frozenset(w.lower() for w in _WORD.findall(f"{question} {reference}"))
        own = frozenset(w.lower() for w in re.findall(r"[A-Za-z]{2,}", f"{question} {reference}"))
        signed = without_signature(response, own | frozenset(self.rank))
        text = _TRAILING.sub("", _SPACE.sub(" ", signed).strip())
        if not text:
            return signed.strip()
        return _WORD.sub(lambda m: self._word(m.group(0), near), text)

    def _word(self, word: str, near: frozenset[str]) -> str:
        low = word.lower()
        if low in self.known or low in near or (self.rank and self._inflected(low, near)):
            return word
        fixed = self._fix(low, near)
        if fixed is None:
            return word
        return fixed.capitalize() if word[0].isupper() and not word.isupper() else fixed

    def _inflected(self, low: str, near: frozenset[str]) -> bool:
        """A known word with a regular ending ("computes", "scoped", "headers", "stopped", "copies"): a real word the
        vocabulary splits into pieces, not a slip, so never read as another word (with a lexicon only: a run without one
        reads answers as it was trained to)."""
        for end in _ENDINGS:
            stem = low[: -len(end)]
            if not low.endswith(end) or len(stem) < 3:
                continue
            stems = {stem, stem + "e", stem[:-1] if len(stem) > 3 and stem[-1] == stem[-2] else stem}
            if end in ("ies", "ied"):
                stems.add(stem + "y")
            if any(t in self.known or t in near for t in stems):
                return True
        return False

    def _pick(self, hits: set[str]) -> str | None:
        """One word of several one edit away: the lexicon's most used, if any is in it; else none (the slip cannot
        be read back)."""
        if len(hits) == 1:
            return next(iter(hits))
        ranked = sorted((self.rank[w], w) for w in hits if w in self.rank)
        return ranked[0][1] if ranked else None

    def _fix_uncached(self, low: str, near: frozenset[str]) -> str | None:
        edits = one_edit(low)
        for pool in (near, self.known):
            hits = edits & pool
            if hits:
                return self._pick(hits)
        return None


def without_signature(response: str, course_words: Iterable[str] = ()) -> str:
    """``response`` without the student's name or id where it is written as a signature at its start or end (the forms
    of this module's docstring). A name with no label is taken only when none of its words (lower case) is in
    ``course_words`` (the question's, the reference's and the course lexicon's words): a course's own term is never
    read as a name. An answer that is only a signature comes back empty."""
    words = frozenset(course_words)

    def names_nothing(m: re.Match[str]) -> bool:
        return not any(w.lower() in words for w in re.findall(r"[A-Za-z]{2,}", m.group("field")))

    text = response
    for _ in range(2):  # a signature at each end; at most one each
        before = text
        text = _LEADING.sub("", text, count=1)
        m = _BARE_LEADING.match(text)
        if m and names_nothing(m):
            text = text[m.end():]
        text = _TRAILING_ID.sub("", text, count=1)
        m = _BARE_TRAILING.search(text)
        if m and names_nothing(m):
            text = text[:m.start()]
        if text == before:
            break
    return text


def course_lexicon(responses: Sequence[str], questions: Sequence[str], references: Sequence[str],
                   vocabulary: Iterable[str] = (), min_answers: int = 2) -> tuple[str, ...]:
    """The course's own words: the words of five or more letters (lower case) that at least ``min_answers`` of the
    ``responses`` use, most used first (ties in alphabetical order). Each response is read as a :class:`Normaliser`
    without a lexicon reads it (against the ``vocabulary`` and its own question and reference), so a slip already
    read back counts for its word. A word fewer answers use — a student's name, one student's own slip — is left
    out."""
    read = Normaliser(vocabulary)
    counts: dict[str, int] = {}
    for r, q, c in zip(responses, questions, references, strict=True):
        for w in {w.lower() for w in _WORD.findall(read(str(r), str(q), str(c)))}:
            counts[w] = counts.get(w, 0) + 1
    kept = [(-n, w) for w, n in counts.items() if n >= min_answers]
    return tuple(w for _, w in sorted(kept))


_BY_TOKENIZER: dict[tuple[int, int], tuple[object, Normaliser]] = {}


def normaliser_for(tokenizer: object, lexicon: tuple[str, ...] = ()) -> Normaliser:
    """The :class:`Normaliser` of a tokenizer's vocabulary and a course lexicon, built once per pair."""
    key = (id(tokenizer), hash(lexicon))
    held = _BY_TOKENIZER.get(key)
    if held is None or held[0] is not tokenizer:
        held = (tokenizer, Normaliser(vocabulary_words(tokenizer), lexicon))
        _BY_TOKENIZER[key] = held
    return held[1]
