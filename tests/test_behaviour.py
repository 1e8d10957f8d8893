"""The behavioural test suite (rubrictool.behaviour): each edit does what it says, only to the words it may touch;
the suite grades through the run's own grading path on a course that is not Mohler (the chemistry lab), the minimal
pairs included; its summary counts what the graded rows say; it is deterministic for a seed."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from reccbm.normalise import without_signature
from rubrictool.behaviour import (
    FILLER,
    OPPOSITES,
    TESTS,
    edit,
    failing_sentences,
    key_words,
    pair_questions,
    read_pairs,
    run_suite,
    summarise,
    summary_markdown,
)
from rubrictool.behaviour.edits import NAMES
from rubrictool.cli import app
from rubrictool.errors import DataError
from rubrictool.flags import gaming_flags
from rubrictool.grade import grade_items
from tests.support.courses import CHEMLAB_KEYS, COURSE_RUBRIC, chemlab_levels_of, chemlab_marks, chemlab_words
from tests.support.tiny_models import build_backbone

pytestmark = pytest.mark.usefixtures("one_thread")

LAB_Q = "How do you find the concentration of the hydrochloric acid?"
ITEM = {"question": "Is a stack LIFO or FIFO, and what does it store?",
        "reference": "A stack stores elements, last in first out.",
        "response": "It is LIFO. Elements are usually placed on the top because pushing happens there."}


def rng() -> np.random.Generator:
    return np.random.default_rng(0)


def test_invariance_edits_change_the_form_not_the_key_words() -> None:
    keys = key_words(ITEM["question"], ITEM["reference"])
    assert {"stack", "lifo", "fifo", "stores", "elements"} <= keys and "usually" not in keys
    assert edit("punctuation", ITEM, rng()) == ITEM["response"][:-1]
    assert edit("punctuation", {**ITEM, "response": "It is LIFO"}, rng()) == "It is LIFO."
    assert edit("case", ITEM, rng()) == ITEM["response"].lower()
    assert edit("whitespace", ITEM, rng()).split() == ITEM["response"].split()
    assert edit("sentence_order", ITEM,
                rng()) == "Elements are usually placed on the top because pushing happens there. It is LIFO."
    assert edit("sentence_order", {**ITEM, "response": "One sentence only"}, rng()) is None
    for seed in range(20):  # a neighbour swap inside one non-key word of 5+ letters, never in a key word
        typo = edit("typo", ITEM, np.random.default_rng(seed))
        assert typo is not None
        changed = [(a, b) for a, b in zip(ITEM["response"].split(), typo.split()) if a != b]
        assert len(changed) == 1 and len(typo) == len(ITEM["response"])
        a, b = changed[0]
        assert sorted(a) == sorted(b) and a[0] == b[0] and len(a.strip(".")) >= 5
        assert a.strip(".").lower() not in keys
        diff = [i for i in range(len(a)) if a[i] != b[i]]
        assert len(diff) == 2 and diff[1] == diff[0] + 1
    syn = edit("synonym", ITEM, rng())  # "usually" or "because", the non-key words with a synonym
    swapped = [(a, b) for a, b in zip(ITEM["response"].split(), syn.split()) if a != b]
    assert swapped in ([("usually", "typically")], [("because", "since")])
    named = edit("student_name", ITEM, rng())
    assert named.endswith(ITEM["response"]) and any(ch.isdigit() for ch in named)
    assert without_signature(named) == ITEM["response"]  # the normaliser reads the labelled form as the answer
    bare = edit("name_unlabelled", ITEM, rng())
    assert bare.endswith("\n" + ITEM["response"]) and bare.split("\n")[0] in NAMES
    assert without_signature(bare) == bare  # no label: left to the reader
    assert edit("typo", {**ITEM, "response": "a stack stores elements"}, rng()) is None  # only key words


def test_directional_edits() -> None:
    assert edit("negation", ITEM,
                rng()) == "It is not LIFO. Elements are usually placed on the top because pushing happens there."
    assert edit("negation", {**ITEM, "response": "It is not LIFO"}, rng()) is None  # already negated
    assert edit("negation", {**ITEM, "response": "Last in, first out"}, rng()) is None
    # the key term's opposite (LIFO is a key word with one), else the other option of a two-option question
    assert edit("key_swap", ITEM, rng()) == ITEM["response"].replace("LIFO", "FIFO")
    two = {"question": "Is overloading resolved at compile-time or run-time?", "reference": "",
           "response": "At compile-time, by the compiler."}
    assert edit("key_swap", two, rng()) == "At run-time, by the compiler."
    assert edit("key_swap", {**two, "response": "Both compile-time and run-time"}, rng()) is None
    assert edit("key_swap", {**ITEM, "question": "What is a stack?", "response": "It holds plates."}, rng()) is None
    assert OPPOSITES["lifo"] == "fifo" and OPPOSITES["fifo"] == "lifo"
    assert edit("reference_list", ITEM, rng()) == "stack, stores, elements, last, first, out"
    assert edit("reference_after_wrong", ITEM, rng()) is None  # not a wrong answer
    wrong = {**ITEM, "wrong": True}
    assert edit("reference_after_wrong", wrong, rng()) == f"{ITEM['response']} {ITEM['reference']}"
    assert edit("wrong_longer", wrong, rng()).startswith(ITEM["response"] + " In other words, it is LIFO.")
    assert edit("question_restated", ITEM, rng()) == f"{ITEM['question']} {ITEM['response']}"
    filled = edit("filler", ITEM, rng())
    assert filled.startswith(ITEM["response"]) and sum(f in filled for f in FILLER) == 2
    assert edit("filler", {**ITEM, "filler": "Own words."}, rng()) == ITEM["response"] + " Own words."
    assert all(edit(t.name, {**ITEM, "response": "  "}, rng()) is None for t in TESTS)
    with pytest.raises(DataError, match="unknown behavioural test"):
        edit("nope", ITEM, rng())


def test_summary_counts_what_the_rows_say() -> None:
    items = pd.DataFrame({
        "test": ["typo"] * 4 + ["negation"] * 4 + ["filler"] * 2,
        "id": [str(i) for i in range(10)], "before": "b", "after": "a",
        "grade_before": [5, 4, 3, 2, 5, 5, 4, 1, 1, 2], "grade_after": [5, 2, 3, 2, 4, 5, 4, 1, 3, 3],
        "levels_changed": [False, True, True, False, True, False, False, False, True, True],
    })
    pairs = pd.DataFrame({"question_id": ["q1", "q2", "q3"], "right": "r", "wrong": "w", "changed": "x",
                          "grade_right": [5, 3, 2], "grade_wrong": [3, 3, 4]})
    s = summarise(items, pairs, (0, 5)).set_index("test")
    typo, neg, fill, mp = s.loc["typo"], s.loc["negation"], s.loc["filler"], s.loc["minimal_pairs"]
    assert typo["n"] == 4 and typo["share_changed"] == 0.25 and typo["share_levels_changed"] == 0.5
    assert typo["mean_shift"] == -0.5 and typo["share_moved_2"] == 0.25 and typo["ci_lo"] <= -0.5 <= typo["ci_hi"]
    assert not typo["passes"] and typo["largest"][0]["grade_after"] == 2
    assert neg["share_expected"] == 0.25 and neg["n_top"] == 3 and neg["share_top_fell"] == pytest.approx(1 / 3)
    assert not neg["passes"]
    assert fill["mean_shift"] == 1.5 and fill["share_expected"] == 0.0 and not fill["passes"]
    assert mp["n"] == 3 and mp["share_expected"] == pytest.approx(1 / 3) and mp["share_tied"] == pytest.approx(1 / 3)
    said = failing_sentences(s.reset_index())
    assert said[0] == ("a one-letter typo moves 25 % of marks, 25.0 % by 2 marks or more "
                       "(target: at most 2 %, none by 2)")
    assert any("adding two sentences of filler gains +1.50 marks" in x for x in said)
    assert any("lowers only 33 % of the 3 answers graded 4–5 by a mark or more" in x for x in said)
    assert any("minimal pair" in x and "33 %" in x for x in said)
    ok = summarise(items.assign(grade_after=items["grade_before"]), pairs.iloc[:0], (0, 5)).set_index("test")
    assert ok.loc["typo", "passes"] and ok.loc["filler", "passes"] and not ok.loc["negation", "passes"]



def test_a_gaming_edit_held_by_the_flags_gains_nothing_as_marks_are_given() -> None:
    """The product holds an answer whose own text raises a gaming flag (no mark from the grader): the summary keeps the
    model's reading (the verdict) and says beside it how many edited answers were held and the shift as marks are
    given, a held answer counting 0."""
    items = pd.DataFrame({"test": "reference_after_wrong", "id": ["0", "1", "2", "3"], "before": "b", "after": "a",
                          "grade_before": [1, 1, 2, 0], "grade_after": [4, 3, 2, 2], "levels_changed": True,
                          "held_before": False, "held_after": [True, True, False, False]})
    row = summarise(items, items.iloc[:0], (0, 5)).set_index("test").loc["reference_after_wrong"]
    assert row["mean_shift"] == 1.75 and not row["passes"]
    assert row["share_held"] == 0.5 and row["mean_shift_given"] == 0.5  # (0 + 0 + 0 + 2) / 4
    assert row["given_lo"] <= 0.5 <= row["given_hi"]
    assert "50 % held for a teacher by the flags, +0.50 as marks are given" in row["sentence"]
    assert "| held by a flag |" in summary_markdown(summarise(items, items.iloc[:0], (0, 5)))
    legacy = summarise(items.drop(columns=["held_before", "held_after"]), items.iloc[:0], (0, 5)).iloc[0]
    assert legacy["share_held"] == 0 and legacy["mean_shift_given"] == 1.75  # rows kept before the column


def test_gaming_flags_read_one_answer_against_its_reference_and_question() -> None:
    ref = "a stack stores its elements so that the last one pushed is the first one popped"
    assert gaming_flags("wrong. " + ref, ref, "What is a stack?") == ["copies_reference"]
    assert gaming_flags("stack stores elements last pushed first popped", ref, "What is a stack?") == ["keyword_list"]
    assert gaming_flags("It keeps the newest item on top.", ref, "What is a stack?") == []
    assert gaming_flags("It is LIFO. It is LIFO. It is LIFO.", ref, "") == ["repeats_text"]

def test_pairs_file_is_read_and_a_bad_line_is_named(tmp_path: Path) -> None:
    good = {"question_id": "q", "right": "a", "wrong": "b", "changed": "a -> b", "note": "", "provenance": "me"}
    path = tmp_path / "pairs.jsonl"
    path.write_text(json.dumps(good) + "\n\n" + json.dumps(good) + "\n")
    assert len(read_pairs(path)) == 2
    path.write_text(json.dumps(good) + "\n" + json.dumps({**good, "wrong": ""}) + "\n")
    with pytest.raises(DataError, match=r"pairs.jsonl: line 2: field 'wrong'"):
        read_pairs(path)
    path.write_text("{not json\n")
    with pytest.raises(DataError, match=":1: invalid JSON"):
        read_pairs(path)


def test_a_pairs_question_is_found_by_its_id_even_when_the_table_reads_it_as_a_number(tmp_path: Path) -> None:
    """A table read back from CSV holds question ids 11.1 and 11.10 as the numbers 11.1 and 11.1: the answers' ids
    (11.10.0) still tell them apart; a table without ids is matched by the question text."""
    table = pd.DataFrame({"id": ["11.1.0", "11.1.1", "11.10.0"], "question_id": [11.1, 11.1, 11.1],
                          "question": ["What is a class?", "What is a class?", "What is a template?"],
                          "reference": ["a blueprint", "a blueprint", "generic code"]})
    pairs = pd.DataFrame({"question_id": ["11.10", "11.1", "9.9", "What is a class?"], "right": "r", "wrong": "w",
                          "changed": "", "note": "", "provenance": ""})
    got = pair_questions(pairs, table)
    assert got["question_id"].tolist() == ["11.10", "11.1", "What is a class?"]
    assert got["question"].tolist() == ["What is a template?", "What is a class?", "What is a class?"]
    assert got["reference"].tolist() == ["generic code", "a blueprint", "a blueprint"]
    as_text = pair_questions(pairs, table.assign(question_id=["c1", "c1", "c2"]).iloc[[2, 0]])
    assert as_text["question"].tolist() == ["What is a template?", "What is a class?", "What is a class?"]


# ---------------------------------------------------------------------------- a course that is not Mohler

# Minimal pairs on the chemistry lab's first question: right and wrong by one word.
LAB_PAIRS = [
    ("The acid is corrosive so wear goggles and gloves.", "The acid is harmless so wear goggles and gloves.",
     "corrosive -> harmless"),
    ("Add 25 mL of acid to the flask then titrate with 0.1 M base.",
     "Add 25 mL of acid to the flask then titrate with 0.1 M acid.", "base -> acid"),
    ("The concentration is 0.105 mol/L.", "The concentration is 0.105 grams.", "mol/L -> grams"),
]


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A tiny BERT trained through the CLI on the chemistry lab's marks (levels 0..2, marks 0..10), with minimal
    pairs."""
    d = tmp_path_factory.mktemp("lab")
    (d / "chemlab.yaml").write_text(COURSE_RUBRIC, encoding="utf-8")
    marks = chemlab_marks(20)
    levels = pd.DataFrame([chemlab_levels_of(a) for a in marks["Answer"]]) - 1
    table = pd.DataFrame({"id": [f"{s}-q{i % 4}" for i, s in enumerate(marks["Student ID"])],
                          "question": marks["Lab question"], "response": marks["Answer"],
                          "reference": marks["Model answer"], "grade": marks["Mark (0-10)"]}).join(levels[CHEMLAB_KEYS])
    table.to_csv(d / "adjudicated.csv", index=False)
    backbone = build_backbone(d, "bert", words=chemlab_words() + ["harmless", "grams", "not"])
    res = CliRunner().invoke(app, ["train", "--table", str(d / "adjudicated.csv"), "--rubric", str(d / "chemlab.yaml"),
                                   "--backbone", backbone, "--epochs", "1", "--max-len", "96", "--out", str(d / "run"),
                                   "--device", "cpu", "--cfg", "joint.epochs=1", "--cfg", "stage2.epochs=2"])
    assert res.exit_code == 0, res.output
    pairs = d / "pairs.jsonl"
    pairs.write_text("".join(json.dumps({"question_id": q, "right": r, "wrong": w, "changed": c, "note": "",
                                         "provenance": "tests/test_behaviour.py"}) + "\n"
                             for q in (LAB_Q, "a question the course never asked") for r, w, c in LAB_PAIRS))
    return {"run": d / "run", "table": d / "adjudicated.csv", "pairs": pairs}


def test_suite_grades_through_the_runs_own_path(lab: dict[str, Path]) -> None:
    res = run_suite(lab["run"], data=lab["table"], seed=2, pairs=lab["pairs"])
    split = json.loads((lab["run"] / "split.json").read_text())
    table = pd.read_csv(lab["table"]).set_index("id").loc[split["test"]].reset_index()
    assert res.n == len(split["test"]) and res.grade_range == (0, 10)
    before = dict(zip(table["id"], grade_items(lab["run"], table)["grade"]))
    for name in ("typo", "negation", "filler"):
        part = res.items[res.items["test"] == name]
        assert len(part) > 0
        assert part["grade_before"].tolist() == [before[i] for i in part["id"]]
        src = table.set_index("id").loc[part["id"]].reset_index()
        regraded = grade_items(lab["run"], src.assign(response=part["after"].to_numpy()))
        assert part["grade_after"].tolist() == regraded["grade"].tolist()
        levels = regraded[[f"{k}_level" for k in CHEMLAB_KEYS]].to_numpy()
        orig = grade_items(lab["run"], src)[[f"{k}_level" for k in CHEMLAB_KEYS]].to_numpy()
        assert part["levels_changed"].tolist() == (levels != orig).any(axis=1).tolist()
    # the pairs of the course's question are graded, those of a question it never asked are left out
    assert len(res.pairs) == len(LAB_PAIRS)
    ref = table[table["question"] == LAB_Q]["reference"].iloc[0]
    items = pd.DataFrame({"question": LAB_Q, "reference": ref, "response": [r for r, _, _ in LAB_PAIRS]})
    assert res.pairs["grade_right"].tolist() == grade_items(lab["run"], items)["grade"].tolist()
    s = res.summary.set_index("test")
    assert s.loc["minimal_pairs", "n"] == len(LAB_PAIRS)
    wrong = table["grade"] < 5  # a wrong answer: below the middle of the 0..10 scale
    assert set(res.items[res.items["test"] == "reference_after_wrong"]["id"]) == set(table["id"][wrong])
    doc = res.to_json()
    assert doc["n"] == res.n and len(doc["tests"]) == len(res.summary)


def test_suite_is_deterministic_for_a_seed(lab: dict[str, Path]) -> None:
    a = run_suite(lab["run"], data=lab["table"], seed=5, tests=["typo", "student_name"])
    b = run_suite(lab["run"], data=lab["table"], seed=5, tests=["typo", "student_name"])
    c = run_suite(lab["run"], data=lab["table"], seed=6, tests=["typo", "student_name"])
    pd.testing.assert_frame_equal(a.items, b.items)
    assert a.items["after"].tolist() != c.items["after"].tolist()
    alone = run_suite(lab["run"], data=lab["table"], seed=5, tests=["student_name"])  # one stream per test
    assert alone.items["after"].tolist() == a.items[a.items["test"] == "student_name"]["after"].tolist()
    with pytest.raises(DataError, match="unknown behavioural test"):
        run_suite(lab["run"], data=lab["table"], tests=["nope"])
