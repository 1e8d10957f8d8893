"""reccbm.normalise: whitespace, final punctuation and one-letter slips undone before the grader reads an answer."""

from __future__ import annotations

import reccbm
from reccbm.normalise import Normaliser, normaliser_for, one_edit, vocabulary_words

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
