"""reccbm.normalise: whitespace, final punctuation and one-letter slips undone before the grader reads an answer."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
from typer.testing import CliRunner

import reccbm
from reccbm.normalise import Normaliser, course_lexicon, normaliser_for, one_edit, vocabulary_words, without_signature
from rubrictool.cli import app
from tests.support.tiny_models import build_backbone, mohler_like_table, train_with_cli

VOCAB = {"stack", "memory", "structure", "values", "stores", "compiler", "translates", "details", "except", "accept"}


def test_final_punctuation_and_whitespace_go_a_question_mark_stays() -> None:
    n = Normaliser(VOCAB)
    assert n("  A stack   is\tLIFO.  ") == "A stack is LIFO"
    assert n("It is LIFO!;") == "It is LIFO"
    assert n("is it run-time?") == "is it run-time?"
    assert n("...") == "..."  # nothing but punctuation: left as written


def test_a_one_letter_slip_becomes_the_one_word_it_can_be_and_real_words_stay() -> None:
    n = Normaliser(VOCAB)
    assert n("It stroes values in memroy") == "It stores values in memory"  # swaps
    assert n("The compiler trnslates it") == "The compiler translates it"  # a dropped letter
    assert n("Detials matter") == "Details matter"  # the capital kept
    assert n("everything except this") == "everything except this"  # a real word is never changed
    assert n("a fruitcake") == "a fruitcake"  # no word one edit away: left as written


def test_the_question_and_reference_words_come_first_and_two_candidates_change_nothing() -> None:
    n = Normaliser({"later", "layer"})
    assert n("the lyaer") == "the layer"  # one candidate
    assert n("the laler") == "the laler"  # later and layer are both one edit away: unreadable, kept
    assert n("the laler", reference="call it later") == "the later"  # the reference's word decides


def test_one_edit_holds_swaps_deletions_insertions_and_replacements() -> None:
    e = one_edit("stack")
    assert {"tsack", "stak", "stacks", "stick"} <= e and "stack" not in e


def test_the_encoder_vocabulary_corrects_a_slip_and_encode_inputs_reads_the_normalised_answer(backbone: str) -> None:
    tok = reccbm.load_tokenizer(backbone)
    words = vocabulary_words(tok)
    assert normaliser_for(tok) is normaliser_for(tok)
    q, r = ["What is a stack?"], ["A structure of elements, last in first out."]
    plain = reccbm.encode_inputs(tok, q, ["A stack is a structure"], r, 64)
    slipped = reccbm.encode_inputs(tok, q, ["A  stack is a strucutre."], r, 64, normalise=True)  # the reference's word
    assert plain == slipped
    assert reccbm.encode_inputs(tok, q, ["A stack is a strucutre"], r, 64) != plain  # off: read as written
    assert len(words) == 0 or all(len(w) >= 5 for w in words)


def test_a_course_lexicon_reads_back_the_slip_its_answers_make_likely() -> None:
    """Several words one edit away: without a lexicon the slip stays; with one, the word the course's answers use most
    is read. A lexicon word the vocabulary lacks is read back and never changed itself."""
    vocab = {"value", "vault", "nodes", "noise"}
    assert Normaliser(vocab)("the vaule of the nodse") == "the vaule of the nodse"  # two candidates each: kept
    n = Normaliser(vocab, lexicon=("nodes", "value", "pointer", "noise"))  # most used first; "vault" unused
    assert n("the vaule of the nodse") == "the value of the nodes"
    assert n("a pointre to it") == "a pointer to it"  # not in the vocabulary: the lexicon's word
    assert Normaliser(vocab | {"pointe"}, ("pointer",))("a pointer") == "a pointer"  # a lexicon word stays
    assert Normaliser(vocab, lexicon=("noise", "nodes"))("the nodse") == "the noise"  # the course decides
    near = Normaliser(vocab, lexicon=("nodes",))
    assert near("the nodse", reference="noise and vault") == "the noise"  # the question's and reference's words first



def test_with_a_lexicon_a_known_word_with_a_regular_ending_is_a_word_not_a_slip() -> None:
    """The vocabulary holds "compute" but not "computes": without a lexicon (runs trained before it) the student's
    "computes" is read as the one word one edit away; with one, an inflected known word stays as written."""
    vocab = {"compute", "scope", "header", "simulate", "copy"}
    text = "it computes the scoped headers, simulates and copies"
    assert Normaliser(vocab)(text) == "it compute the scope header, simulate and copies"  # the old reading, kept
    assert Normaliser(vocab, lexicon=("values",))(text) == text
    assert Normaliser(vocab, lexicon=("values",))("the valuse") == "the values"  # a slip is still read back

def test_the_course_lexicon_counts_answers_leaves_one_answers_words_out_and_reads_slips_first() -> None:
    answers = ["Nodes hold values, nodes link", "the nodes and the values", "Jordan says pointers", "pointers valeus"]
    q, ref = [""] * 4, [""] * 4
    words = course_lexicon(answers, q, ref, vocabulary={"values", "nodes"}, min_answers=2)
    assert words == ("values", "nodes", "pointers")  # values 3 (the slip read back counts), nodes 2, pointers 2
    assert "jordan" not in words  # a name one answer uses
    assert course_lexicon(answers, q, ref, {"values", "nodes"}, min_answers=3) == ("values",)
    assert normaliser_for(object(), words) is not normaliser_for(object(), ())


def test_a_run_with_course_words_keeps_its_training_answers_lexicon_and_grades_a_slip_as_its_word(
        tmp_path: Path) -> None:
    """``model.course_words`` on a run trained through the CLI: model.json keeps the lexicon of the train and dev
    answers (never the test answers'), and ``grade`` reads a slip one edit from two words of the vocabulary ("valuse":
    "values", "value") as the one the training answers use — the grade and probability of the word itself."""
    table = mohler_like_table(40)
    table["response"] = [f"{r} values" if i % 4 else str(r) for i, r in enumerate(table["response"])]
    table.loc[table.index[-1], "response"] = "maybe maybe yes zigzagged"  # a word at most one answer uses
    backbone = build_backbone(tmp_path, "bert")
    code, output, run = train_with_cli(tmp_path, backbone, table, "--cfg", "model.course_words=2")
    assert code == 0, output
    lexicon = tuple(json.loads((run / "model.json").read_text())["model_config"]["lexicon"])
    split = json.loads((run / "split.json").read_text())
    learnt = table[table["id"].isin(split["train"] + split["dev"])]
    tok = reccbm.load_tokenizer(backbone)
    assert lexicon and lexicon == reccbm.table_lexicon(tok, learnt, 2) and "values" in lexicon
    assert "zigzagged" not in lexicon
    row = learnt[learnt["response"].str.endswith("values")].iloc[0]
    items = pd.DataFrame([{"id": i, "question": row["question"], "reference": row["reference"], "response": r}
                          for i, r in (("as written", row["response"]),
                                       ("slip", str(row["response"])[:-len("values")] + "valuse"))])
    assert reccbm.responses_as_read(tok, items, True, lexicon) == [row["response"]] * 2
    data, out = tmp_path / "new.csv", tmp_path / "graded.csv"
    items.to_csv(data, index=False)
    res = CliRunner().invoke(app, ["grade", "--run", str(run), "--items", str(data), "--out", str(out)])
    assert res.exit_code == 0, res.output
    graded = pd.read_csv(out, keep_default_na=False).set_index("id")
    assert graded.loc["slip", "flags"] == graded.loc["as written", "flags"]  # the tiny model's own flags, alike
    assert graded.loc["slip", "model_grade"] == graded.loc["as written", "model_grade"] != ""
    assert graded.loc["slip", "grade_prob"] == graded.loc["as written", "grade_prob"]


def test_a_library_grader_with_course_words_fits_its_answers_lexicon_and_keeps_it(backbone: str,
                                                                                 tmp_path: Path) -> None:
    """``reccbm.Grader`` fitted on arrays with ``model.course_words``: the lexicon is its answers' (read against their
    questions and references), kept by save and load; without the option there is none."""
    from reccbm import Concept, Grader, Rubric

    rubric = Rubric((Concept("EV", "Evidence.", ("none", "some", "strong")), Concept("MC", "Mechanism.")),
                    grades=(0, 3), levels=(0, 2))
    t = mohler_like_table(30)
    responses = [f"{r} values" for r in t["response"]]
    levels = t[["FC", "CC"]].to_numpy() - 1
    grades = t["grade"].clip(0, 3)
    over = {"model": {"normalise": True, "course_words": 2}, "stage1": {"epochs": 1}, "stage2": {"epochs": 2}}
    g = Grader(rubric, backbone=backbone, overrides=over, seed=0).fit(t["question"], t["reference"].fillna(""),
                                                                       responses, levels, grades)
    tok = reccbm.load_tokenizer(backbone)
    want = course_lexicon(responses, list(t["question"]), list(t["reference"].fillna("")), vocabulary_words(tok), 2)
    assert g.model_.config.lexicon == want and "values" in want
    g.save(tmp_path / "g")
    assert Grader.load(tmp_path / "g").model_.config.lexicon == want
    plain = Grader(rubric, backbone=backbone, overrides={**over, "model": {"normalise": True}}, seed=0)
    assert plain.fit(t["question"], t["reference"].fillna(""), responses, levels, grades).model_.config.lexicon == ()


def test_a_students_signature_goes_and_an_answers_own_words_stay() -> None:
    """``without_signature``: a labelled name or id at either end goes (forms a gradebook export or a student writes);
    a name with no label goes only where its shape leaves no doubt and none of its words is the course's; text that
    only looks like one stays; an answer that is only a signature is empty."""
    gone = {
        "Maria Rossi, student 61400: not answered": "not answered",
        "Name: Ana Silva\nA stack is LIFO.": "A stack is LIFO.",
        "Student ID: 20417\nIt is a tree.": "It is a tree.",
        "ID 4821. A stack is LIFO.": "A stack is LIFO.",
        "Jordan Lee (55321): it is a tree": "it is a tree",
        "(Silva, Ana) A stack is LIFO.": "A stack is LIFO.",
        "A stack is LIFO. - A. Silva": "A stack is LIFO.",
        "A stack is LIFO.\n\u2014 Kim Nguyen, student no. 77310": "A stack is LIFO.",
    }
    for written, read in gone.items():
        assert without_signature(written) == read, written
    kept = ["Name: a label for a memory cell", "Stack: a LIFO structure", "It runs in O(n) time",
            "The first one is called - Alan Turing",  # no sentence before the dash: the name may be the answer
            "The id is a key. Binary Search - Heap", "version 2.0 - Windows", "#20417 it is a tree",
            "It is stored under the user id 1001", "See page #123"]
    for written in kept:
        assert without_signature(written) == written, written
    assert without_signature("It was Turing. - Alan Turing", {"alan", "turing"}) == "It was Turing. - Alan Turing"
    assert without_signature("It was Turing. - Alan Turing") == "It was Turing."
    assert without_signature("Maria Rossi, student 61400:") == ""
    assert without_signature("ID 4821. A tree. - A. Silva") == "A tree."  # one at each end
    assert without_signature("It is a tree. Student ID 12345") == "It is a tree."
    assert without_signature("It is a tree - Jordan Lee, student 55321") == "It is a tree"


def test_the_normaliser_reads_a_signed_answer_as_the_answer_and_the_question_guards_a_bare_name() -> None:
    n = Normaliser(VOCAB)
    signed = n("Sam Patel, student 12345: A stack stroes values.")
    assert signed == n("A stack stores values") == "A stack stores values"
    assert n("A stack stores values. - A. Silva") == "A stack stores values"
    question = "Who proved the halting problem undecidable? Give his full name."
    assert n("It was him. - Alan Turing", question, "Alan Turing") == "It was him. - Alan Turing"
    assert n("Maria Rossi, student 61400:") == ""


def test_grade_reads_a_signed_answer_as_the_answer_and_holds_a_signature_alone_as_empty(tmp_path: Path) -> None:
    """Through the CLI on a gradebook export: an answer with the student's name and id written into it
    gets the grade and probability of the answer without them; an answer that is only the signature gets no model grade
    and the ``empty`` flag, as an empty answer does."""
    from tests.support.tiny_models import tiny_bert_run

    run = tiny_bert_run(tmp_path)
    assert json.loads((run / "model.json").read_text())["model_config"]["normalise"] is True
    table = mohler_like_table(40)
    row = table.iloc[3]
    answers = {"plain": str(row["response"]), "signed": f"Kim Nguyen, student 77310: {row['response']}",
               "field": f"Name: Kim Nguyen\n{row['response']}", "signature": "Kim Nguyen, student 77310:", "blank": ""}
    items = pd.DataFrame([{"id": i, "question": row["question"], "reference": row["reference"], "response": r}
                          for i, r in answers.items()])
    data, out = tmp_path / "export.csv", tmp_path / "graded.csv"
    items.to_csv(data, index=False)
    res = CliRunner().invoke(app, ["grade", "--run", str(run), "--items", str(data), "--out", str(out)])
    assert res.exit_code == 0, res.output
    graded = pd.read_csv(out, keep_default_na=False, dtype=str).set_index("id")
    for signed in ("signed", "field"):
        assert graded.loc[signed, "model_grade"] == graded.loc["plain", "model_grade"] != ""
        assert graded.loc[signed, "grade_prob"] == graded.loc["plain", "grade_prob"]
    for nothing in ("signature", "blank"):
        assert graded.loc[nothing, "flags"] == "empty"
        assert graded.loc[nothing, "model_grade"] == ""
