"""reccbm.orders and ModelConfig.sentence_orders: an answer read over the orders of its sentences."""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np
import pytest

import reccbm
from reccbm.orders import average_readings, expand_orders, sentence_orders, sentences
from tests.support.tiny_models import tiny_model

THREE = "A stack is LIFO. It pushes on top! Does it pop from the top? Yes."


def test_the_orders_read_depend_on_the_set_of_sentences_not_on_the_order_written() -> None:
    parts = sentences(THREE)
    assert parts == ["A stack is LIFO.", "It pushes on top!", "Does it pop from the top?", "Yes."]
    for n in (2, 6):
        read = sentence_orders(THREE, n)
        assert len(read) == n and len(set(read)) == n
        for order in itertools.permutations(parts):
            assert sentence_orders(" ".join(order), n) == read  # any order of the same sentences: the same texts
        assert all(sorted(sentences(t)) == sorted(parts) for t in read)  # every text holds every sentence once
    two = sentence_orders("It is LIFO. It pushes on top.", 6)
    assert two == ["It is LIFO. It pushes on top.", "It pushes on top. It is LIFO."]  # every order of two
    assert len(sentence_orders("One. Two. Three.", 6)) == 6  # every order of three
    assert sentence_orders("It is LIFO", 6) == ["It is LIFO"]  # one sentence: read once, as written
    assert sentence_orders("e.g. a stack", 6) == ["e.g. a stack"]  # an abbreviation ends no sentence
    assert sentences("A pile, e.g. of plates. It pops.") == ["A pile, e.g. of plates.", "It pops."]
    assert sentence_orders(THREE, 0) == [THREE]
    assert len(sentence_orders(THREE, 100)) == 24  # no more orders than four sentences have
    lower = sentence_orders(THREE.lower(), 6)  # a change of case changes the text read, not which orders
    assert [t.lower() for t in lower] == [t.lower() for t in sentence_orders(THREE, 6)]


def test_each_answer_is_the_mean_of_its_readings() -> None:
    flat, owner = expand_orders(["It is LIFO", "One. Two.", ""], 6)
    assert flat == ["It is LIFO", "One. Two.", "Two. One.", ""] and owner.tolist() == [0, 1, 1, 2]
    values = np.array([[1.0, 0.0], [0.2, 0.8], [0.6, 0.4], [0.5, 0.5]], dtype=np.float32)
    mean = average_readings(values, owner, 3)
    np.testing.assert_allclose(mean, [[1.0, 0.0], [0.4, 0.6], [0.5, 0.5]], rtol=1e-6)
    assert mean.dtype == np.float32


def test_predict_texts_reads_an_answer_in_its_orders_and_a_rotation_reads_the_same(backbone: str) -> None:
    """With sentence_orders the outputs are the mean of the readings of each order, the same for a rotated answer, and
    progress counts answers; without it they are predict's of the text as written."""
    questions, contexts = ["What is a stack?"] * 3, ["A stack is last in, first out."] * 3
    answers = ["It is LIFO. It pushes on top. It pops the top.", "It is a queue.", "Top first. Then the rest."]
    model, tok = tiny_model(backbone, sentence_orders=6)
    model.eval()
    counted: list[int] = []
    pred = reccbm.predict_texts(model, tok, questions, answers, contexts, on_batch=counted.append)
    assert sum(counted) == 3 and pred.grade_probs.shape == (3, 4) and pred.p_hat is not None
    rotated = [" ".join(sentences(a)[1:] + sentences(a)[:1]) for a in answers]
    again = reccbm.predict_texts(model, tok, questions, rotated, contexts)
    np.testing.assert_allclose(again.grade_probs, pred.grade_probs, rtol=1e-5, atol=1e-6)
    model.config = dataclasses.replace(model.config, sentence_orders=0)  # the same model, reading each text once
    for i, answer in enumerate(answers):
        texts = sentence_orders(answer, 6)
        one = reccbm.predict_texts(model, tok, [questions[i]] * len(texts), texts, [contexts[i]] * len(texts))
        np.testing.assert_allclose(pred.grade_probs[i], one.grade_probs.mean(0), rtol=1e-5, atol=1e-6)
        assert pred.p_hat is not None and one.p_hat is not None
        np.testing.assert_allclose(pred.p_hat[i], one.p_hat.mean(0), rtol=1e-5, atol=1e-6)
    plain = reccbm.predict_texts(model, tok, questions, answers, contexts)
    assert not np.allclose(plain.grade_probs[0], pred.grade_probs[0])  # read once: the order written is read


def test_sentence_orders_of_one_is_refused() -> None:
    with pytest.raises(ValueError, match="sentence_orders is 0"):
        reccbm.ModelConfig(num_concepts=1, num_levels=3, num_grades=4, sentence_orders=1)


def test_a_normalising_model_reads_the_orders_of_the_answer_it_reads(backbone: str) -> None:
    """With model.normalise the answer is normalised before its sentences move: a signature at its start, a final full
    stop and a rotation leave the reading as it was."""
    model, tok = tiny_model(backbone, sentence_orders=6, normalise=True)
    model.eval()
    written = ["It is LIFO. It pushes on top.", "Sam Patel, student 12345: It is LIFO. It pushes on top",
               "It pushes on top. It is LIFO"]
    pred = reccbm.predict_texts(model, tok, ["What is a stack?"] * 3, written, ["Last in, first out."] * 3)
    np.testing.assert_allclose(pred.grade_probs, np.repeat(pred.grade_probs[:1], 3, 0), rtol=1e-5, atol=1e-6)
    assert sentence_orders("One. Two", 6) == sentence_orders("Two. One.", 6)  # the last sentence's full stop
