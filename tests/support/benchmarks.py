"""Small ASAP 2.0 and MOCHA releases in their published layouts, built in tmp dirs (never downloaded).

ASAP 2.0 corpus release: ``ASAP_2_Final_github_train.zip`` holding ``ASAP_2_Final_github_train.csv``
(essay_id, score, full_text, assignment, prompt_name, the writers' demographic fields, grade_level,
essay_word_count). The Kaggle competition: a zip with ``train.csv`` (essay_id, full_text, score),
``test.csv`` and ``sample_submission.csv``. MOCHA: ``mocha.tar.gz`` holding ``mocha/train.json``,
``dev.json``, ``test_no_labels.json`` and ``minimal_pairs.json``, each ``{dataset: {id: instance}}``.
The texts use the tiny test tokenizer's vocabulary (tests/support/tiny_models.WORDS) so that tiny
models see real tokens; the essays of higher scores are longer than 32 tokens.
"""

from __future__ import annotations

import csv
import io
import json
import tarfile
import zipfile
from pathlib import Path
from typing import Any

from tests.support.tiny_models import WORDS

__all__ = [
    "ASAP2_COLUMNS",
    "DEMOGRAPHICS",
    "asap2_csv_text",
    "asap2_kaggle_zip",
    "asap2_release_zip",
    "asap2_rows",
    "mocha_docs",
    "mocha_tar",
]

ASAP2_COLUMNS = ["essay_id", "score", "full_text", "assignment", "prompt_name", "economically_disadvantaged",
                 "student_disability_status", "ell_status", "race_ethnicity", "gender", "grade_level",
                 "essay_word_count"]
DEMOGRAPHICS = ["economically_disadvantaged", "student_disability_status", "ell_status", "race_ethnicity",
                "gender", "grade_level"]
PROMPTS = {
    "Driverless cars": "Write an explanatory essay to inform fellow citizens about the advantages of driverless cars.",
    "Exploring "
    "Venus": "In \"The Challenge of Exploring Venus,\" the author suggests studying Venus is worthy. Evaluate.",
}


def _text(i: int, n_words: int) -> str:
    words = [WORDS[(i * 7 + j * 3) % len(WORDS)] for j in range(n_words)]
    sentences = [" ".join(words[k : k + 8]) + "." for k in range(0, len(words), 8)]
    return "\n\n".join(" ".join(sentences[k : k + 3]) for k in range(0, len(sentences), 3))


def asap2_rows(n: int = 36) -> list[dict[str, Any]]:
    """``n`` essays over two prompts, scores cycling 1..6, essay length growing with the score."""
    rows = []
    names = list(PROMPTS)
    for i in range(n):
        score = i % 6 + 1
        text = _text(i, 6 + 9 * score)
        name = names[i % 2]
        rows.append({
            "essay_id": f"{0xA0D118 + i:07x}", "score": score, "full_text": text,
            "assignment": PROMPTS[name], "prompt_name": name,
            "economically_disadvantaged": ["Economically disadvantaged", "Not economically disadvantaged"][i % 2],
            "student_disability_status": ["Not identified as having disability",
                                          "Identified as having disability"][i % 3 == 0],
            "ell_status": ["No", "Yes"][i % 4 == 0],
            "race_ethnicity": ["White", "Hispanic/Latino", "Black/African American", "Asian/Pacific Islander"][i % 4],
            "gender": "FM"[i % 2], "grade_level": [6, 8, 9, 10][i % 4], "essay_word_count": len(text.split()),
        })
    rows[5]["ell_status"] = ""  # the release leaves some demographic fields empty
    return rows


def asap2_csv_text(rows: list[dict[str, Any]], columns: list[str] = ASAP2_COLUMNS) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=columns, extrasaction="ignore", lineterminator="\n")
    w.writeheader()
    w.writerows(rows)
    return buf.getvalue()


def asap2_release_zip(out: Path, rows: list[dict[str, Any]] | None = None, csv_text: str | None = None) -> Path:
    """``ASAP_2_Final_github_train.zip`` as the corpus release ships it."""
    out.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("ASAP_2_Final_github_train.csv", csv_text if csv_text is not None
                    else asap2_csv_text(rows or asap2_rows()))
        zf.writestr("__MACOSX/._ASAP_2_Final_github_train.csv", b"resource fork")
    return out


def asap2_kaggle_zip(out: Path, rows: list[dict[str, Any]] | None = None) -> Path:
    """The competition's download-all zip: train.csv (essay_id, full_text, score), test.csv, sample_submission.csv."""
    rows = rows or asap2_rows()
    out.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("train.csv", asap2_csv_text(rows, ["essay_id", "full_text", "score"]))
        zf.writestr("test.csv", asap2_csv_text(rows[:3], ["essay_id", "full_text"]))
        zf.writestr("sample_submission.csv", "essay_id,score\n" + "".join(f"{r['essay_id']},3\n" for r in rows[:3]))
    return out


def _instance(i: int, dataset: str, scores: list[int] | None) -> dict[str, Any]:
    inst: dict[str, Any] = {
        "context": _text(i + 100, 20 + (i % 4) * 10),
        "question": f"what is the {WORDS[i % len(WORDS)]} of the data structure ?",
        "reference": f"it stores the {WORDS[(i + 3) % len(WORDS)]} first",
        "candidate": f"the {WORDS[(i + 5) % len(WORDS)]} {WORDS[(i + 9) % len(WORDS)]} value",
        "metadata": {"scores": scores or [], "source": ["gpt2", "backtranslation", "mhpg"][i % 3]},
    }
    if scores is not None:
        inst["score"] = sum(scores) / len(scores)
    return inst


def mocha_docs() -> dict[str, dict[str, dict[str, Any]]]:
    """train: 30 answers over narrativeqa, cosmosqa, mcscript (one judgement each, 1..5); dev: 6 answers with
    three judgements each (means like 3.5 and 2.333); test_no_labels: 4 without scores; minimal_pairs: 2."""
    datasets = ["narrativeqa", "cosmosqa", "mcscript"]
    train: dict[str, dict[str, Any]] = {d: {} for d in datasets}
    for i in range(30):
        train[datasets[i % 3]][f"{0x5F3A00 + i:08x}"] = _instance(i, datasets[i % 3], [i % 5 + 1])
    dev_scores = [[3, 4, 4], [4, 3, 3], [1, 2, 2], [5, 5, 4], [2, 2, 3], [3, 4, 3]]
    dev = {"narrativeqa": {f"d{i:07x}": _instance(50 + i, "narrativeqa", s) for i, s in enumerate(dev_scores)}}
    test = {"cosmosqa": {f"t{i:07x}": _instance(80 + i, "cosmosqa", None) for i in range(4)}}
    pairs = {"cosmosqa": {f"p{i}": {"context": "c", "question": "q", "reference": "r", "candidate1": "a",
                                    "candidate2": "b", "score1": 1, "score2": 5} for i in range(2)}}
    return {"train.json": train, "dev.json": dev, "test_no_labels.json": test, "minimal_pairs.json": pairs}


def mocha_tar(out: Path, docs: dict[str, Any] | None = None, raw: dict[str, bytes] | None = None,
              prefix: str = "mocha") -> Path:
    """``mocha.tar.gz`` with ``<prefix>/<file>`` members; ``raw`` replaces or adds files byte for byte."""
    files = {name: json.dumps(doc, indent=1).encode() for name, doc in (docs or mocha_docs()).items()}
    files |= raw or {}
    out.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(out, "w:gz") as tf:
        for name, data in files.items():
            info = tarfile.TarInfo(f"{prefix}/{name}" if prefix else name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return out
