"""The grade flags (rubrictool/flags.py): each flag on a constructed case and its negative, the profile
a run saves, and the flags column of `rubrictool grade` on a tiny trained run."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from rubrictool.cli import app
from rubrictool.errors import DataError
from rubrictool.flags import (
    COPY_COVER,
    COPY_MIN_WORDS,
    COPY_SHARE,
    FLAGS,
    Profile,
    build_profile,
    copies_reference,
    copy_cover,
    copy_share,
    flag_frame,
    load_profile,
)
from tests.support.tiny_models import KEYS, mohler_like_table, tiny_bert_run

pytestmark = pytest.mark.usefixtures("one_thread")

REF = "To simulate the behaviour of portions of the desired software product."
QUESTION = "What is the role of a prototype program in problem solving?"
TRAIN = [
    "a prototype simulates part of the software product",
    "it lets the customer see the program before it is finished",
    "the prototype is a model of the desired product",
    "to test the behaviour of portions of the program",
    "it shows how the software will work for the user",
] * 4


def flags_of(response: str, graded: dict[str, float] | None = None, profile: Profile | None = None,
             truncated: bool | None = None, keys: list[str] | None = None) -> list[str]:
    items = pd.DataFrame({"response": [response], "reference": [REF], "question": [QUESTION]})
    g = pd.DataFrame([graded or {"grade": 3}])
    col = flag_frame(items, g, keys or [], profile, None if truncated is None else [truncated])
    return [f for f in col.iloc[0].split(";") if f]


def test_copies_reference_and_question() -> None:
    assert copy_cover(REF, f"I think {REF.lower()} and more") == 1.0
    assert flags_of(f"My answer. {REF}") == ["copies_reference"]
    assert flags_of(REF) == ["copies_reference"]
    assert flags_of(f"{QUESTION} It is used to try things out.") == ["copies_question"]
    # a near-verbatim copy: a word or two changed is still a copy
    two_changed = REF.replace("simulate", "show").replace("desired", "wanted")
    assert copy_share(REF, two_changed) < COPY_SHARE  # the trigram share alone would miss it
    assert copy_cover(REF, two_changed) >= COPY_COVER and flags_of(two_changed) == ["copies_reference"]
    # an honest paraphrase shares words but is not aligned with most of the reference
    honest = "A prototype lets you simulate some behaviour of the product before building it."
    assert copy_cover(REF, honest) < COPY_COVER and flags_of(honest) == []
    # a short reference is what a short right answer says in its words: no copy to tell, never flagged
    short = "the mitochondria"
    assert copy_cover(short, "the mitochondria") == 1.0 and not copies_reference(short, "the mitochondria")
    nine = "to carry oxygen around the body in the blood"
    assert len(nine.split()) < COPY_MIN_WORDS and not copies_reference(nine, f"They {nine}.")
    assert copies_reference(nine + " stream", f"They {nine} stream.")  # ten words: pasted, flagged
    # an empty reference never flags
    items = pd.DataFrame({"response": [REF], "reference": [""], "question": [""]})
    assert flag_frame(items, pd.DataFrame([{"grade": 1}]), [], None).iloc[0] == ""


def test_padding_by_repetition_and_by_keywords() -> None:
    """repeats_text and keyword_list on the gaming probe's two padding transformations and their honest negatives
    (the rates on every Mohler answer: lab/padding_flags.py)."""
    answer = "A prototype tests a part of the program early. It saves time later."
    assert flags_of(answer) == []
    assert flags_of(answer + " A prototype tests a part of the program early." * 3) == ["repeats_text"]
    assert flags_of("it saves time it saves time it saves time") == ["repeats_text"]  # no sentence ends
    assert flags_of("Stack. Stack. Stack.") == ["repeats_text"]
    assert flags_of("It is good. It is good.") == ["repeats_text"]  # three words, twice
    assert flags_of("Yes. I think so. Yes.") == []  # a short sentence twice is speech, not padding
    # the reference's content words appended as a list (rubrictool.audit's append_keywords)
    stuffed = answer + " simulate behaviour portions desired software product"
    assert flags_of(stuffed) == ["keyword_list"]
    assert flags_of("It can simulate the behaviour of portions of the software before it is built.") == []
    # a reference of two content words: both side by side, as a list; one of them alone is an answer
    items = pd.DataFrame({"response": ["Classes are reused. abstraction reusability", "reusability of classes"],
                          "reference": ["the abstraction and the reusability"] * 2, "question": [""] * 2})
    assert list(flag_frame(items, pd.DataFrame({"grade": [1, 1]}), [], None)) == ["keyword_list", ""]


def test_concepts_disagree_with_grade() -> None:
    # gold: grade = 5 x mean level on 0..1 exactly, so the allowance is its floor of one grade point
    levels = np.array([[1] * 8, [2] * 8, [3] * 8] * 5)
    grades = (levels.mean(1) - 1) / 2 * 5
    prof = build_profile(TRAIN[:15], grades, levels, (1, 3))
    assert prof.consistency is not None
    assert prof.consistency["slope"] == pytest.approx(5) and prof.consistency["allowance"] == 1.0
    top = {f"{k}_expected": 3.0 for k in KEYS}
    assert "concepts_disagree_with_grade" in flags_of("the prototype is a model", {"grade": 1, **top}, prof, keys=KEYS)
    assert "concepts_disagree_with_grade" not in flags_of("the prototype is a model", {"grade": 5, **top}, prof,
                                                          keys=KEYS)
    assert "concepts_disagree_with_grade" not in flags_of("the prototype is a model", {"grade": 4, **top}, prof,
                                                          keys=KEYS)
    # a PLM run has no expected concept scores: never flagged
    assert "concepts_disagree_with_grade" not in flags_of("the prototype is a model", {"grade": 0}, prof, keys=KEYS)


def test_out_of_distribution() -> None:
    prof = build_profile(TRAIN)
    # every training response shares all its words with another copy: the leave-one-out share is 0
    assert prof.unseen_threshold == 0.0 and prof.max_words == 11
    assert flags_of("the prototype shows the customer the software", profile=prof) == []
    assert flags_of("原型程序用于模拟软件产品的部分行为 以便 客户 查看", profile=prof) == ["out_of_distribution"]
    assert flags_of("the prototype xylophone quantum banana", profile=prof) == ["out_of_distribution"]
    # > 2 x 11
    assert flags_of(" ".join(["the prototype"] * 12), profile=prof) == ["out_of_distribution", "repeats_text"]
    assert "out_of_distribution" not in flags_of(" ".join(["the prototype"] * 11), profile=prof)  # 22: not > 2 x 11
    assert flags_of("zzz qqq", profile=prof) == []  # two word types: too short to judge
    assert flags_of("the prototype xylophone quantum banana") == []  # no profile: not checked
    # leave-one-out: words only one training response uses count as unseen for it
    p2 = build_profile(["a b c d", "a b c e", "a b c f", "a b c d"])
    assert p2.unseen_threshold == pytest.approx(np.quantile([0, 0.25, 0.25, 0], 0.99))


def test_truncated() -> None:
    assert flags_of("the prototype", truncated=True) == ["truncated"]
    assert flags_of("the prototype", truncated=False) == []


def test_profile_round_trip_and_missing(tmp_path: Path) -> None:
    prof = build_profile(TRAIN, [1.0] * 20, np.ones((20, 8)), (1, 3))
    (tmp_path / "profile.json").write_text(json.dumps(prof.to_json()))
    assert load_profile(tmp_path) == prof
    with pytest.raises(DataError, match=r"nothing/profile.json: unreadable flag profile \(FileNotFoundError\)"):
        load_profile(tmp_path / "nothing")  # every run has one (run.json lists it)
    (tmp_path / "profile.json").write_text("{")
    with pytest.raises(DataError, match=r"profile.json: unreadable flag profile \(JSONDecodeError\)") as exc:
        load_profile(tmp_path)
    assert "\n" not in str(exc.value) and exc.value.hint and "train the run again" in exc.value.hint


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_bert_run(tmp_path_factory.mktemp("flags"))


def test_grade_writes_flags_and_training_saves_the_profile(run: Path, tmp_path: Path) -> None:
    prof = load_profile(run)
    assert prof is not None and (run / "profile.json").is_file() and prof.n_train > 0 and prof.consistency is not None
    table = mohler_like_table(40)
    honest = table.iloc[1].copy()  # row 0 has no reference
    honest["reference"] = "a stack stores elements last in first out like plates"  # 10 words: a copy can be told
    items = pd.DataFrame([
        {"id": "honest", "question": honest["question"], "response": honest["response"],
         "reference": honest["reference"]},
        {"id": "copy", "question": honest["question"], "response": "my answer " + str(honest["reference"]),
         "reference": honest["reference"]},
        {"id": "long", "question": honest["question"], "response": " ".join([str(honest["response"])] * 30),
         "reference": honest["reference"]},
        {"id": "foreign", "question": honest["question"], "response": "это совсем другой ответ на другом языке",
         "reference": honest["reference"]},
    ])
    data, out = tmp_path / "new.csv", tmp_path / "graded.csv"
    items.to_csv(data, index=False)
    res = CliRunner().invoke(app, ["grade", "--run", str(run), "--items", str(data), "--out", str(out)])
    assert res.exit_code == 0, res.output
    graded = pd.read_csv(out, keep_default_na=False).set_index("id")
    kept = [c for c in ("question", "student", "response") if c in items.columns]  # grade keeps them beside each grade
    assert list(graded.columns[:len(kept) + 5]) == [*kept, "grade", "needs_review", "model_grade", "grade_prob",
                                                    "flags"]
    flags = {str(i): str(f).split(";") for i, f in graded["flags"].items()}
    assert "copies_reference" in flags["copy"]
    assert "truncated" in flags["long"] and "truncated" not in flags["honest"]
    assert "out_of_distribution" in flags["foreign"]
    assert "copies_reference" not in flags["honest"] and "out_of_distribution" not in flags["honest"]
    assert set(";".join(graded["flags"]).split(";")) - {""} <= set(FLAGS)
    assert "held for a teacher to read, no mark given" in res.output
    held = graded["flags"] != ""  # every flagged answer held: no mark, the reason in needs_review
    assert (graded.loc[held, "grade"] == "").all() and (graded.loc[held, "needs_review"] != "").all()
    assert "pastes the reference answer (copies_reference)" in graded.loc["copy", "needs_review"]
    # a current run missing profile.json is refused as incomplete
    old = tmp_path / "old-run"
    shutil.copytree(run, old)
    (old / "profile.json").unlink()
    res = CliRunner().invoke(app, ["grade", "--run", str(old), "--items", str(data), "--out", str(out)])
    assert res.exit_code == 1 and "profile.json is missing" in res.output
    (old / "run.json").unlink()  # and without its completion record it cannot be checked at all: refused
    res = CliRunner().invoke(app, ["grade", "--run", str(old), "--items", str(data), "--out", str(out)])
    assert res.exit_code == 1 and "has no completion record (run.json)" in " ".join(res.output.split())



def test_the_flags_judge_the_answer_the_model_read(run: Path, tmp_path: Path) -> None:
    """With the default's model.normalise the grader reads a one-letter slip as the word it slipped from; the flags
    judge that same text, so a typo does not make an answer "unlike every answer the grader trained on" and hold it.
    A word no training answer uses still does."""
    assert "normalise: true" in (run / "config.yaml").read_text()  # the default preset's
    row = mohler_like_table(40).iloc[2]  # "maybe maybe yes structure in what": every word seen in training
    slipped = str(row["response"]).replace("structure", "strcuture")
    items = pd.DataFrame([{"id": i, "question": row["question"], "reference": row["reference"], "response": r}
                          for i, r in (("as written", row["response"]), ("slip", slipped),
                                       ("unseen", str(row["response"]).replace("structure", "xylophone")))])
    data, out = tmp_path / "new.csv", tmp_path / "graded.csv"
    items.to_csv(data, index=False)
    res = CliRunner().invoke(app, ["grade", "--run", str(run), "--items", str(data), "--out", str(out)])
    assert res.exit_code == 0, res.output
    graded = pd.read_csv(out, keep_default_na=False).set_index("id")
    assert graded.loc["slip", "flags"] == graded.loc["as written", "flags"] == ""
    assert graded.loc["slip", "grade"] == graded.loc["as written", "grade"] != ""
    assert "out_of_distribution" in graded.loc["unseen", "flags"]
