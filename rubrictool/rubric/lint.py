"""Lint: near-duplicate definitions, repeated anchors, missing examples, TODOs."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict

from rubrictool.rubric.schema import Rubric

if TYPE_CHECKING:
    import numpy as np

__all__ = ["LintWarning", "lint_rubric"]


class LintWarning(BaseModel):
    """Something a rubric designer should look at; not an error (the rubric still loads)."""

    model_config = ConfigDict(frozen=True)

    code: str
    where: str
    message: str

    def __str__(self) -> str:
        return f"{self.where}: {self.code}: {self.message}"


def _norm(text: str) -> str:
    return " ".join(text.lower().replace("/", " ").split()).strip(" .")


_STOP_WORDS = frozenset(
    ["a", "about", "above", "after", "again", "all", "also", "an", "and", "any", "are", "as", "at", "be", "been",
     "being", "below", "between", "both", "but", "by", "can", "could", "did", "do", "does", "doing", "during", "each",
     "either", "few", "for", "from", "further", "had", "has", "have", "having", "how", "i", "if", "in", "into", "is",
     "it", "its", "itself", "just", "may", "might", "more", "most", "much", "must", "no", "nor", "not", "of", "off",
     "on", "once", "only", "or", "other", "our", "out", "over", "own", "same", "should", "so", "some", "such", "than",
     "that", "the", "their", "them", "then", "there", "these", "they", "this", "those", "through", "to", "too", "under",
     "until", "up", "very", "was", "we", "were", "what", "when", "where", "whether", "which", "while", "who", "whom",
     "why", "will", "with", "within", "without", "would", "you", "your"]
)


def _definition_similarity(texts: list[str]) -> np.ndarray[Any, np.dtype[np.float64]] | None:
    """Pairwise TF-IDF cosine similarity (smooth idf, l2 rows, English stop words removed).

    A few lines of numpy rather than scikit-learn: the same numbers for short texts, and
    ``rubric lint`` starts in well under a second. numpy is imported here, not at module top: the
    rubric package is loaded by every CLI command (docs/design.md, "Why the CLI imports lazily").
    """
    import numpy as np

    docs = [[w for w in re.findall(r"[a-z0-9]+", t.lower()) if w not in _STOP_WORDS and len(w) > 1] for t in texts]
    vocab = sorted({w for d in docs for w in d})
    if not vocab:
        return None
    index = {w: i for i, w in enumerate(vocab)}
    tf = np.zeros((len(docs), len(vocab)))
    for r, d in enumerate(docs):
        for w in d:
            tf[r, index[w]] += 1
    df = (tf > 0).sum(axis=0)
    idf = np.log((1 + len(docs)) / (1 + df)) + 1
    x = tf * idf
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    x = np.divide(x, norms, out=np.zeros_like(x), where=norms > 0)
    return np.asarray(x @ x.T)


def lint_rubric(rubric: Rubric, similarity: float = 0.5) -> list[LintWarning]:
    """Warnings a rubric designer wants before annotators see the rubric.

    * ``near-duplicate-definition``: two definitions whose TF-IDF cosine similarity (stop words
      removed, idf from this rubric's definitions) is at least ``similarity`` — the paper's
      non-redundancy criterion; the bundled rubrics peak at 0.37.
    * ``repeated-anchor``: the same anchor text on two levels of one concept (raters cannot tell
      the levels apart), or on two concepts (check they really mean the same thing).
    * ``no-examples`` / ``level-without-example``: reviewers anchor on examples.
    * ``placeholder``: TODO text left from ``rubrictool rubric new``.
    * ``no-cross-question-marks``: the items have a reference answer, but no concept says what holds of it on every
      question (``reference_is_top`` / ``off_topic_is_bottom``), so the trainer's examples across questions are off.
    """
    warns: list[LintWarning] = []
    concepts = rubric.concepts
    sim = _definition_similarity([c.definition for c in concepts]) if len(concepts) > 1 else None
    for i in range(len(concepts)):
        for j in range(i + 1, len(concepts)):
            a, b = concepts[i], concepts[j]
            score = float(sim[i, j]) if sim is not None else 0.0
            if score >= similarity or _norm(a.definition) == _norm(b.definition):
                warns.append(LintWarning(
                    code="near-duplicate-definition", where=f"concepts.{a.key}+{b.key}",
                    message=f"definitions of {a.key} and {b.key} are {score:.2f} similar (threshold "
                    f"{similarity}); make each concept measure something distinct, or merge them",
                ))
    seen_anchor: dict[str, str] = {}
    for c in concepts:
        within: dict[str, int] = {}
        for lv in c.levels:
            n = _norm(lv.anchor)
            if n in within:
                warns.append(LintWarning(
                    code="repeated-anchor", where=f"concepts.{c.key}.levels.{lv.value}",
                    message=f"level {lv.value} of {c.key} has the same anchor as level {within[n]} "
                    f"({lv.anchor!r}); every level needs its own descriptor",
                ))
            else:
                within[n] = lv.value
            owner = seen_anchor.get(n)
            if owner is not None and not owner.startswith(f"{c.key}."):
                warns.append(LintWarning(
                    code="repeated-anchor", where=f"concepts.{c.key}.levels.{lv.value}",
                    message=f"anchor {lv.anchor!r} is also used by {owner}; say what is specific to {c.name}",
                ))
            seen_anchor.setdefault(n, f"{c.key}.{lv.value}")
        if not c.examples:
            warns.append(LintWarning(
                code="no-examples", where=f"concepts.{c.key}.examples",
                message=f"{c.key} has no examples; add at least one excerpt per level for reviewers",
            ))
        else:
            covered = {ex.level for ex in c.examples}
            missing = [v for v in c.values if v not in covered]
            if missing:
                warns.append(LintWarning(
                    code="level-without-example", where=f"concepts.{c.key}.examples",
                    message=f"{c.key} has no example for level(s) {', '.join(map(str, missing))}",
                ))
        texts = [c.name, c.definition, *(lv.anchor for lv in c.levels), *(ex.text for ex in c.examples)]
        if any("TODO" in t for t in texts):
            warns.append(LintWarning(
                code="placeholder", where=f"concepts.{c.key}",
                message=f"{c.key} still holds TODO placeholder text from `rubrictool rubric new`",
            ))
    if "reference" in rubric.fields and not any(c.reference_is_top or c.off_topic_is_bottom for c in concepts):
        warns.append(LintWarning(
            code="no-cross-question-marks", where="concepts",
            message="no concept is marked reference_is_top or off_topic_is_bottom; mark those where the reference "
            "answer is always at the top level (or another question's answer at the bottom), so that training learns "
            "from them (docs/your-course.md#what-holds-on-every-question)",
        ))
    for attr in ("title", "description"):
        if "TODO" in getattr(rubric, attr):
            warns.append(LintWarning(code="placeholder", where=attr, message=f"{attr} still holds TODO text"))
    return warns
