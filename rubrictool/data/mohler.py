"""Mohler: the UNT short-answer grading data set v2.0 in its original layout, and the three Mohler
concept-label passes (LLM annotation passes standing in for three reviewers' exports)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from rubrictool.data.base import benchmark_dir, resolve_data_dir, round_half_up
from rubrictool.data.fetch import ArchiveSpec, fetch_archive
from rubrictool.errors import DataError
from rubrictool.progress import ProgressFn
from rubrictool.tables import read_wide_labels, validate_items

__all__ = ["CONCEPT_PASSES", "MOHLER", "MOHLER_URL", "PASSES", "concept_passes_dir", "fetch_mohler",
           "load_concept_passes", "load_mohler", "synthetic_mohler_table"]

MOHLER_URL = "http://web.eecs.umich.edu/~mihalcea/downloads/ShortAnswerGrading_v2.0.zip"
"""The UNT short-answer grading data set v2.0 (Mohler, Bunescu & Mihalcea 2011), as its authors host it.

Plain http on purpose: the host's TLS certificate has failed verification for others. The archive
is checked (it must hold ``data/docs/files``) and the extracted copy must load before it is kept.
"""


def _mohler_root(data_dir: str | Path | None) -> Path:
    return benchmark_dir("mohler", data_dir, ("data/docs/files",), "Mohler data")


def _read_prefixed(path: Path) -> dict[str, str]:
    """``data/raw/questions`` and ``answers``: one line ``<q> <text>`` per question."""
    out: dict[str, str] = {}
    for lineno, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
        if not line.strip():
            continue
        qid, _, text = line.strip().partition(" ")
        out[qid] = _clean(text)
    return out


def _clean(text: str) -> str:
    return " ".join(text.replace("<br>", " ").replace("<br/>", " ").replace("<br />", " ").split())


def _read_scores(path: Path) -> list[float]:
    try:
        return [float(x) for x in path.read_text(encoding="utf-8").split()]
    except (OSError, ValueError) as e:
        raise DataError(f"{path}: cannot read scores ({e}); the file must hold one number per line") from None


def load_mohler(data_dir: str | Path | None = None) -> pd.DataFrame:
    """Load the ORIGINAL UNT layout into an ItemTable (2,273 answers over 81 questions).

    Questions marked ``#`` in ``data/docs/files`` are excluded, as in all published work. ``grade`` is
    the ``ave`` score rounded half up to 0..5; ``score_ave`` keeps it unrounded and ``grade_me`` /
    ``grade_other`` keep the two graders' scores, normalised to 0..5 (assignments 11 and 12, the
    exams, were graded 0..10).
    """
    root = _mohler_root(data_dir)
    d = root / "data"
    qids = [ln.strip() for ln in (d / "docs" / "files").read_text().splitlines() if ln.strip()]
    qids = [q for q in qids if not q.startswith("#")]
    questions = _read_prefixed(d / "raw" / "questions")
    answers = _read_prefixed(d / "raw" / "answers")
    rows = []
    for q in qids:
        raw = d / "raw" / q
        if not raw.is_file():
            raise DataError(f"{raw}: missing answers file for question {q}; is the download complete?")
        lines = [ln for ln in raw.read_text(encoding="utf-8", errors="replace").splitlines() if ln.strip()]
        ave = _read_scores(d / "scores" / q / "ave")
        me = _read_scores(d / "scores" / q / "me")
        other = _read_scores(d / "scores" / q / "other")
        if not (len(lines) == len(ave) == len(me) == len(other)):
            raise DataError(
                f"{raw}: {len(lines)} answers but {len(ave)}/{len(me)}/{len(other)} scores (ave/me/other); "
                "the data set is corrupt — fetch it again"
            )
        factor = 0.5 if q.split(".")[0] in {"11", "12"} else 1.0
        for i, line in enumerate(lines):
            text = line.strip()
            if text.startswith(q + " "):
                text = text[len(q) + 1 :]
            rows.append(
                {
                    "id": f"{q}.{i}",
                    "question": questions.get(q, ""),
                    "response": _clean(text),
                    "reference": answers.get(q, ""),
                    "context": None,
                    "grade": round_half_up(ave[i]),
                    "question_id": q,
                    "score_ave": ave[i],
                    "grade_me": me[i] * factor,
                    "grade_other": other[i] * factor,
                }
            )
    return validate_items(pd.DataFrame(rows), str(root))  # an empty answer is reported, never dropped


# -- concept labels as reviewer exports ----------------------------------------------------------------------


CONCEPT_PASSES = "mohler-concepts"
PASSES = ("A", "B", "C")


def concept_passes_dir(data_dir: str | Path | None = None) -> Path:
    """``<data dir>/mohler-concepts``: the three Mohler concept-label passes (ids and levels only)."""
    return resolve_data_dir(data_dir) / CONCEPT_PASSES


def load_concept_passes(data_dir: str | Path | None = None) -> pd.DataFrame:
    """The Mohler concept labels from three independent LLM annotation passes A, B and C, tidy.

    Read from ``<data dir>/mohler-concepts/{A,B,C}.jsonl`` (the same data directory as ``mohler/``).
    They stand in for three reviewers' exports. They are real and independently made, but made by
    LLM annotators, NOT validated by experts: say so wherever results built on them are reported.
    """
    d = concept_passes_dir(data_dir)
    missing = [d / f"{r}.jsonl" for r in PASSES if not (d / f"{r}.jsonl").is_file()]
    if missing:
        raise DataError(
            f"{missing[0]}: missing; put the three Mohler concept-label passes A.jsonl, B.jsonl, C.jsonl "
            f"(one line per answer: id + one level per concept) in {d}"
        )
    frames = [read_wide_labels(d / f"{r}.jsonl", reviewer=r, source="llm") for r in PASSES]
    out = pd.concat(frames, ignore_index=True)
    out["level"] = out["level"].astype(int)
    return out


MOHLER = ArchiveSpec(
    name="mohler",
    what="the UNT ShortAnswerGrading_v2.0 archive",
    url=MOHLER_URL,
    markers=("data/docs/files",),
    load=load_mohler,
    manual="or unpack ShortAnswerGrading_v2.0.zip by hand so that <data dir>/mohler/data/docs/files exists",
)


def fetch_mohler(
    dest: str | Path | None = None,
    url: str | None = None,
    force: bool = False,
    progress: ProgressFn | None = None,
) -> tuple[Path, bool]:
    """Download and unpack the UNT data set into ``<dest>/mohler``; returns (folder, fetched now?).

    ``url`` may be http(s)://, file:// or a local zip/tar path (default :data:`MOHLER_URL`).
    Idempotent: an existing ``<dest>/mohler`` is kept unless ``force``. The download goes to a
    temporary file, the archive is checked, extracted next to the target and verified to load
    (2,273 answers) before it is moved into place in one rename.
    """
    return fetch_archive(MOHLER, dest, url, force, progress)


def synthetic_mohler_table(n: int = 40, questions: int = 5, seed: int = 0) -> pd.DataFrame:
    """A table on the Mohler rubric (8 concepts, levels 1-3, grades 0-5) of ``n`` short synthetic answers to
    ``questions`` questions, for smoke runs: no data directory needed, the grade follows the levels."""
    import numpy as np

    from rubrictool.rubric import load_rubric

    keys = [c.key for c in load_rubric("mohler").concepts]
    rng = np.random.default_rng(seed)
    words = ["a", "stack", "queue", "stores", "elements", "last", "in", "first", "out", "pointer", "node"]
    levels = rng.integers(1, 4, size=(n, len(keys)))  # (n, K)
    df = pd.DataFrame({"id": [f"s.{i}" for i in range(n)],
                       "question": [f"what is a stack ({i % questions})" for i in range(n)],
                       "response": [" ".join(rng.choice(words, size=6)) for _ in range(n)],
                       "reference": "a stack stores elements last in first out"})
    for k, key in enumerate(keys):
        df[key] = levels[:, k]
    df["grade"] = np.rint((levels.sum(1) - len(keys)) * 5 / (2 * len(keys))).astype(int)  # 0..5
    return df
