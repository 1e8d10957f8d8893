"""A few reviewed answers of a new question shift its other answers (reccbm.fit_level_tilt / shift_levels and
`rubrictool grade --reviewed`); held answers, the review queue, the quality card and the gradebook written back."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from typer.testing import CliRunner

import reccbm
from rubrictool.cli import app
from tests.support.tiny_models import KEYS, mohler_like_table, tiny_bert_run

pytestmark = pytest.mark.usefixtures("one_thread")

runner = CliRunner()


def _shares(n: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.rand(n, 2, 3, generator=g, dtype=torch.float64).softmax(-1)  # (n, K=2, M+1=3)


def test_the_tilt_solves_its_equation_and_shrinks_with_few_answers() -> None:
    p = _shares(12)
    c = torch.tensor([[2, 0]] * 12)  # every answer reviewed at the top of concept 0, the bottom of concept 1
    for strength in (0.5, 2.0):
        delta = reccbm.fit_level_tilt(p, c, strength)
        assert delta[0] > 0 > delta[1]
        q = reccbm.tilted(p, delta)
        expected = (q * torch.arange(3.0, dtype=q.dtype)).sum(-1)  # (n, K)
        # the stationary point: Σ_i (E_δ[m] − c_i) + strength · δ = 0, per concept
        np.testing.assert_allclose(((expected - c).sum(0) + strength * delta).numpy(), 0.0, atol=1e-8)
    few = reccbm.fit_level_tilt(p[:2], c[:2], 2.0)
    many = reccbm.fit_level_tilt(p, c, 2.0)
    assert 0 < few[0] < many[0] and many[1] < few[1] < 0  # two answers move a question less than twelve


def test_an_unreviewed_concept_and_a_zero_shift_leave_the_reading_as_it_was() -> None:
    p = _shares(5, seed=1)
    c = torch.tensor([[-1, 1]] * 5)
    delta = reccbm.fit_level_tilt(p, c)
    assert delta[0] == 0 and delta[1] != 0
    np.testing.assert_allclose(reccbm.tilted(p, torch.zeros(2)).numpy(), p.numpy(), atol=1e-12)
    tilted = reccbm.tilted(p, delta)
    np.testing.assert_allclose(tilted[:, 0].numpy(), p[:, 0].numpy(), atol=1e-12)
    np.testing.assert_allclose(tilted.sum(-1).numpy(), 1.0, atol=1e-12)


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_bert_run(tmp_path_factory.mktemp("reviewrun"))


def _items(tmp_path: Path) -> tuple[Path, Path, pd.DataFrame]:
    """24 answers to grade (12 to a question the run never saw, 12 to the one it trained on) and a reviewed table:
    4 answers of each question, every concept at the top level and the top grade; two of them are also graded."""
    new = mohler_like_table(16, seed=11)
    new["question"] = "what is a queue"
    new["reference"] = "a queue stores elements first in first out"
    new["id"] = [f"queue.{i}" for i in range(16)]
    old = mohler_like_table(16, seed=12)
    old["id"] = [f"stack.{i}" for i in range(16)]
    reviewed = pd.concat([new.iloc[:4], old.iloc[:4]], ignore_index=True)
    for key in KEYS:
        reviewed[key] = 3
    reviewed["grade"] = 5
    items = pd.concat([new.iloc[2:], old.iloc[2:]], ignore_index=True).drop(columns=KEYS + ["grade"])
    items.to_csv(tmp_path / "new.csv", index=False)
    reviewed.to_csv(tmp_path / "reviewed.csv", index=False)
    return tmp_path / "new.csv", tmp_path / "reviewed.csv", items


def test_grade_reviewed_shifts_a_new_question_and_leaves_a_trained_one(tmp_path: Path, run: Path) -> None:
    data, reviewed, items = _items(tmp_path)
    plain_out, out = tmp_path / "plain.csv", tmp_path / "graded.csv"
    res = runner.invoke(app, ["grade", "--run", str(run), "--items", str(data), "--out", str(plain_out)])
    assert res.exit_code == 0, res.output
    res = runner.invoke(app, ["grade", "--run", str(run), "--items", str(data), "--out", str(out),
                              "--reviewed", str(reviewed)])
    assert res.exit_code == 0, res.output
    assert "1 question(s) shifted by their 4 reviewed answers" in res.output
    assert "1 question(s) the run trained on are left as read" in res.output
    plain, g = pd.read_csv(plain_out), pd.read_csv(out)
    assert list(g["id"]) == list(items["id"])
    queue = g["id"].str.startswith("queue.").to_numpy()
    reviewed_ids = {"queue.2", "queue.3", "stack.2", "stack.3"}
    rev = g["id"].isin(reviewed_ids).to_numpy()
    other_new = queue & ~rev
    # the new question's other answers read higher on every concept (reviewed at the top), and are told why
    for key in KEYS:
        assert (g.loc[other_new, f"{key}_expected"] > plain.loc[other_new, f"{key}_expected"]).all()
    assert (g.loc[other_new, "review"] == "question shifted by 4 reviewed answers").all()
    # ... and their grades move up with the reviewed answers' top grades (ε > 0: the shift ε·ŷ is ≥ 0, > 0 above 0)
    assert (g.loc[other_new, "grade_shift"] >= 0).all() and (g.loc[other_new, "grade_shift"] > 0).any()
    assert g.loc[other_new, "model_grade"].mean() >= plain.loc[other_new, "model_grade"].mean()
    # the question the run trained on: its unreviewed answers graded exactly as without --reviewed
    trained = ~queue & ~rev
    assert (g.loc[trained, "review"] == "question trained on: not shifted").all()
    np.testing.assert_allclose(g.loc[trained, "grade_prob"], plain.loc[trained, "grade_prob"], rtol=1e-5)
    assert (g.loc[trained, "grade_shift"] == 0).all()
    # the reviewed answers among the items carry their reviewed levels
    assert (g.loc[rev, "review"] == "reviewed: its reviewed levels set").all()
    for key in KEYS:
        assert (g.loc[rev, f"{key}_level"] == 3).all()
    # the decision trace still adds up: contributions + bias + the question's grade shift = the grade's logit
    contrib = g[[f"{k}_contribution" for k in KEYS]].to_numpy().sum(1)
    np.testing.assert_allclose(contrib + g["grade_bias"] + g["grade_shift"], g["grade_logit"], rtol=1e-4, atol=1e-4)


def test_grade_reviewed_refuses_bad_tables_in_one_line(tmp_path: Path, run: Path) -> None:
    data, reviewed, _ = _items(tmp_path)
    table = pd.read_csv(reviewed)

    def invoke(df: pd.DataFrame) -> str:
        path = tmp_path / "bad.csv"
        df.to_csv(path, index=False)
        res = runner.invoke(app, ["grade", "--run", str(run), "--items", str(data), "--out", str(tmp_path / "g.csv"),
                                  "--reviewed", str(path)])
        assert res.exit_code == 1, res.output
        assert "Traceback" not in res.output
        return " ".join(res.output.split())

    assert "bad.csv: no 'id' column" in invoke(table.drop(columns=["id"]))
    msg = invoke(table.drop(columns=["question"]))  # queue.0 is not among the answers to grade: its question is unknown
    assert "bad.csv: row 1 (id queue.0): no question, and its id is not one of --items' answers" in msg
    assert "no concept column; the run's concepts are FC" in invoke(table.drop(columns=KEYS))
    bad = table.copy()
    bad.loc[2, "CC"] = 7
    msg = invoke(bad)
    assert "bad.csv: row 3 (id queue.2): CC = 7 is not a level of the rubric (1..3)" in msg
    bad = table.copy()
    bad["grade"] = bad["grade"].astype(object)
    bad.loc[0, "grade"] = "A"
    assert "row 1 (id queue.0): grade = 'A' is not a grade of the rubric (0..5)" in invoke(bad)
    assert not (tmp_path / "g.csv").exists()
    # --out may not be the reviewed table: it would be lost
    res = runner.invoke(app, ["grade", "--run", str(run), "--items", str(data), "--out", str(reviewed),
                              "--reviewed", str(reviewed)])
    assert res.exit_code == 1 and "reviewed.csv" in res.output
    assert pd.read_csv(reviewed).equals(table)


def test_grade_reviewed_takes_the_texts_of_answers_to_grade_from_data(tmp_path: Path, run: Path) -> None:
    """A tutor marks the levels of a few rows of the file to grade: the reviewed table needs only their ids."""
    data, _, items = _items(tmp_path)
    full = items[items["id"].isin(["queue.2", "queue.3", "queue.4"])].assign(**dict.fromkeys(KEYS, 3))
    full[["id", *KEYS]].to_csv(tmp_path / "ids.csv", index=False)
    out_a, out_b = tmp_path / "a.csv", tmp_path / "b.csv"
    res = runner.invoke(app, ["grade", "--run", str(run), "--items", str(data), "--out", str(out_a),
                              "--reviewed", str(tmp_path / "ids.csv")])
    assert res.exit_code == 0, res.output
    assert "1 question(s) shifted by their 3 reviewed answers" in res.output
    full.to_csv(tmp_path / "t.csv", index=False)
    res = runner.invoke(app, ["grade", "--run", str(run), "--items", str(data), "--out", str(out_b),
                              "--reviewed", str(tmp_path / "t.csv")])
    assert res.exit_code == 0, res.output
    a, b = pd.read_csv(out_a), pd.read_csv(out_b)
    np.testing.assert_allclose(a["grade_prob"], b["grade_prob"], rtol=1e-6)  # the same texts read either way
    assert (a["grade_shift"] == 0).all()  # no grades reviewed: the levels shift, the grades follow through the head
    assert (a.loc[a["id"] == "queue.5", "review"] == "question shifted by 3 reviewed answers").all()


def test_grade_reviewed_skips_rows_nobody_labelled(tmp_path: Path, run: Path) -> None:
    """An adjudicated table lists answers nobody labelled with empty levels: they were not reviewed, and need no
    text."""
    data, reviewed, _ = _items(tmp_path)
    table = pd.read_csv(reviewed)
    blank = pd.DataFrame({"id": ["elsewhere.1", "queue.5"]}).assign(**dict.fromkeys(KEYS, None))
    pd.concat([table, blank], ignore_index=True).to_csv(tmp_path / "with-blank.csv", index=False)
    out = tmp_path / "g.csv"
    res = runner.invoke(app, ["grade", "--run", str(run), "--items", str(data), "--out", str(out),
                              "--reviewed", str(tmp_path / "with-blank.csv")])
    assert res.exit_code == 0, res.output
    assert "1 question(s) shifted by their 4 reviewed answers" in res.output
    g = pd.read_csv(out)
    assert (g.loc[g["id"] == "queue.5", "review"] == "question shifted by 4 reviewed answers").all()
    pd.DataFrame({"id": ["queue.5"]}).assign(**dict.fromkeys(KEYS, None)).to_csv(tmp_path / "none.csv", index=False)
    res = runner.invoke(app, ["grade", "--run", str(run), "--items", str(data), "--out", str(out),
                              "--reviewed", str(tmp_path / "none.csv")])
    assert res.exit_code == 1 and "no concept level is given in any row" in res.output


# ---------------------------------------------------------------------------- held answers, the review queue, the card
QUIZ = Path(__file__).resolve().parent / "data" / "bio-quiz" / "bio-quiz.csv"  # a teacher's CSV (PROVENANCE.md there)


def test_hold_marks_holds_every_flagged_answer_and_says_why() -> None:
    from rubrictool.review_queue import HOLD_REASONS, hold_marks

    graded = pd.DataFrame({"id": ["a", "b", "c", "d"], "grade": pd.array([3, 1, 4, None], dtype="Int64"),
                           "grade_prob": [0.9, 0.4, 0.95, None],
                           "flags": ["", "keyword_list", "copies_reference;out_of_distribution", "empty"]})
    held = hold_marks(graded)
    assert list(held.columns[:4]) == ["id", "grade", "needs_review", "model_grade"]
    assert held["grade"].tolist()[0] == 3 and held["grade"].isna().tolist() == [False, True, True, True]
    assert held["model_grade"].tolist()[:3] == [3, 1, 4]  # the model's reading kept for the reader
    assert held["needs_review"].tolist() == [
        "", "a list of keywords, not an answer (keyword_list)",
        ("pastes the reference answer (copies_reference); unlike every answer the grader trained on "
         "(out_of_distribution)"),
        "no answer (empty)"]
    assert all(HOLD_REASONS[f] for f in ("copies_question", "concepts_disagree_with_grade", "truncated"))


def test_review_queue_ranks_held_answers_first_then_the_least_sure_marks() -> None:
    from rubrictool.review_queue import hold_marks, review_queue

    graded = hold_marks(pd.DataFrame({
        "id": list("abcdef"), "grade": pd.array([3, 1, 4, 2, 5, 0], dtype="Int64"),
        "grade_prob": [0.95, 0.4, 0.9, 0.55, 0.99, 0.6],
        "flags": ["", "", "keyword_list", "", "copies_reference;copies_question", ""]}))
    unc = np.array([0.1, 0.5, 0.2, 0.1, 0.0, 0.9])
    q = review_queue(graded, unc)  # no budget: the held answers
    assert list(q["id"]) == ["e", "c"]  # two flags before one
    q = review_queue(graded, unc, budget=4)
    assert list(q["id"]) == ["e", "c", "f", "b"] and list(q["rank"]) == [1, 2, 3, 4]
    assert q["risk"].iloc[1] > 1 >= q["risk"].iloc[2]  # a held answer always ranks above a marked one
    assert q["risk"].iloc[2] == pytest.approx((1 - 0.6 + 0.9) / 2)
    assert len(review_queue(graded, None, budget=100)) == 6 and len(review_queue(graded, unc, budget=0)) == 0



def test_a_passing_mark_on_a_weak_reading_comes_before_a_sure_one() -> None:
    """weak_pass: for an answer given a pass mark, how little of the rubric its concepts read (1 − the mean expected
    level on [0, 1]); 0 below the pass mark. The queue ranks a pass on a weak reading above an equally sure pass on a
    strong one and above a sure fail: a failing answer passed is the mistake a teacher most needs to catch."""
    from rubrictool.review_queue import hold_marks, review_queue, weak_pass

    graded = hold_marks(pd.DataFrame({
        "id": ["weak pass", "strong pass", "fail", "held"], "grade": pd.array([3, 5, 1, 4], dtype="Int64"),
        "grade_prob": [0.9, 0.9, 0.9, 0.5], "flags": ["", "", "", "keyword_list"],
        "A_expected": [1.2, 2.9, 1.0, 1.0], "B_expected": [1.4, 3.0, 1.0, 1.0]}))
    weak = weak_pass(graded, ["A", "B"], (1, 3), pass_mark=3)
    assert weak is not None
    np.testing.assert_allclose(weak, [1 - 0.15, 1 - 0.975, 0.0, 1.0])  # "held" is marked 4 by the model
    unc = np.full(4, 0.1)
    q = review_queue(graded, unc, budget=4, weak=weak)
    assert list(q["id"]) == ["held", "weak pass", "strong pass", "fail"]
    assert q["risk"].iloc[1] == pytest.approx(((1 - 0.9 + 0.1) / 2 + 0.85) / 2) and q["risk"].iloc[1] <= 1
    assert list(review_queue(graded, unc, budget=4)["id"])[1:] == ["weak pass", "strong pass", "fail"]  # all tied
    assert weak_pass(graded, ["A", "C"], (1, 3), 3) is None  # a concept without its column: a PLM's table

def test_grade_writes_the_queue_and_the_card_of_a_single_run(tmp_path: Path, run: Path) -> None:
    data, _, items = _items(tmp_path)
    copy = items.iloc[0].copy()
    copy["id"], copy["reference"] = "pasted", "a queue stores its elements so the first one in is the first one out"
    copy["response"] = copy["reference"]
    pd.concat([items, copy.to_frame().T], ignore_index=True).to_csv(data, index=False)
    out = tmp_path / "graded.csv"
    res = runner.invoke(app, ["grade", "--run", str(run), "--items", str(data), "--out", str(out),
                              "--review-budget", "5"])
    assert res.exit_code == 0, res.output
    g = pd.read_csv(out).set_index("id")
    assert pd.isna(g.loc["pasted", "grade"]) and "copies_reference" in g.loc["pasted", "needs_review"]
    queue = pd.read_csv(tmp_path / "graded.review.csv")
    assert len(queue) == 5 and queue["risk"].is_monotonic_decreasing and "pasted" in set(queue["id"])
    n_held = int(g["grade"].isna().sum())
    assert set(queue["id"].head(min(5, n_held))) <= set(g.index[g["grade"].isna()])
    card = json.loads((tmp_path / "graded.card.json").read_text())["quality card"]
    metrics = json.loads((run / "metrics.json").read_text())
    assert card["n_answers"] == metrics["n_test"]
    assert card["qwk"]["value"] == pytest.approx(metrics["ci"]["qwk"]["value"])
    assert "quality card (run)" in " ".join(res.output.split()) and "review queue: 5 answers" in res.output
    res = runner.invoke(app, ["grade", "--run", str(run), "--items", str(data), "--out", str(out),
                              "--review-budget", "-1"])
    assert res.exit_code == 1 and "--review-budget -1" in res.output


def test_a_kfold_run_without_its_final_model_is_refused_with_the_fix(tmp_path: Path) -> None:
    kfold = tmp_path / "runs" / "course-5fold"
    (kfold / "fold-0").mkdir(parents=True)
    (kfold / "folds.json").write_text("{}")
    (tmp_path / "new.csv").write_text("id,question,response\n1,q,an answer\n")
    res = runner.invoke(app, ["grade", "--run", str(kfold), "--items", str(tmp_path / "new.csv"), "--out",
                              str(tmp_path / "g.csv")])
    flat = " ".join(res.output.split())
    assert res.exit_code == 1 and "is a k-fold run without a final model" in flat and "--final" in flat, flat
    assert "Traceback" not in res.output and not (tmp_path / "g.csv").exists()
    res = runner.invoke(app, ["train", "--benchmark", "mohler", "--final", "--out", str(tmp_path / "one")])
    assert res.exit_code == 1 and "--final trains a k-fold run's final model" in " ".join(res.output.split())


def test_the_gradebook_comes_back_in_the_teachers_csv_layout(tmp_path: Path, run: Path) -> None:
    """The teacher's CSV (own headers, a blank row, row order) written back: the teacher's cells as they were, then
    the mark, needs review and a comment per criterion from the rubric's anchors; the per-question summary."""
    import csv

    from rubrictool.rubric import load_rubric

    lines = QUIZ.read_text(encoding="utf-8").splitlines()
    book = tmp_path / "quiz.csv"
    book.write_text("\n".join([*lines[:6], ",,,,", *lines[6:]]) + "\n", encoding="utf-8")  # a blank row kept
    out = tmp_path / "graded.csv"
    res = runner.invoke(app, ["grade", "--run", str(run), "--gradebook", str(book), "--out", str(out)])
    assert res.exit_code == 0, res.output
    back = list(csv.reader((tmp_path / "quiz-graded.csv").open(encoding="utf-8")))
    src = list(csv.reader(book.open(encoding="utf-8")))
    rb = load_rubric(run / "rubric.yaml")
    assert back[0] == [*src[0], "Mark (rubrictool)", "Needs review", *[f"{c.name}: comment" for c in rb.concepts]]
    assert [r[:5] for r in back[1:]] == [r[:5] for r in src[1:]]  # the teacher's cells and rows, in order
    assert back[6][5:] == [""] * (len(back[0]) - 5)  # the blank row stays blank
    g = pd.read_csv(out, keep_default_na=False)
    rows = [r for r in back[1:] if any(r[:5])]
    assert len(rows) == len(g) == 160
    for r, (_, row) in zip(rows, g.iterrows()):
        assert r[5] == str(row["grade"]) and r[6] == row["needs_review"]
        first = rb.concepts[0]
        if row["grade"] == "":
            assert r[7] == ""  # a held answer: a teacher reads it first
        else:
            level = int(row[f"{first.key}_level"])
            anchor = next(lv.anchor for lv in first.levels if lv.value == level)
            assert r[7] == f"{level} of {first.levels[-1].value}: {anchor.rstrip('.')}."
    summary = pd.read_csv(tmp_path / "quiz-graded-summary.csv")
    assert len(summary) == 16 and summary["answers"].sum() == 160
    marked = pd.to_numeric(g["grade"], errors="coerce")
    assert summary["marked"].sum() == marked.notna().sum() and summary["held for review"].sum() == marked.isna().sum()
    first_q = g["question"] == g["question"].iloc[0]
    assert summary["mean mark"].iloc[0] == pytest.approx(round(marked[first_q].mean(), 2), nan_ok=True)
    # written again from its own output: the columns are replaced, not added twice; the source is never the target
    res = runner.invoke(app, ["grade", "--run", str(run), "--gradebook", str(tmp_path / "quiz-graded.csv"),
                              "--gradebook-out", str(tmp_path / "again.csv"), "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert next(csv.reader((tmp_path / "again.csv").open(encoding="utf-8"))) == back[0]
    res = runner.invoke(app, ["grade", "--run", str(run), "--gradebook", str(book), "--gradebook-out", str(book),
                              "--out", str(out)])
    assert res.exit_code == 1 and "is the teacher's file itself" in " ".join(res.output.split())
    # a gradebook whose answers are not the ones --items holds: refused before anything is graded
    data, _, _ = _items(tmp_path)
    res = runner.invoke(app, ["grade", "--run", str(run), "--items", str(data), "--gradebook", str(book), "--out",
                              str(tmp_path / "mixed.csv")])
    flat = " ".join(res.output.split())
    assert res.exit_code == 1 and "160 of its answers are not in --items" in flat and "nothing was graded" in flat, flat
    assert not (tmp_path / "mixed.csv").exists()


def test_the_gradebook_never_overwrites_a_file_it_did_not_write(tmp_path: Path, run: Path) -> None:
    """--gradebook-out naming an existing file of the teacher's (not a gradebook this command wrote) is refused in one
    line and the file is kept; the command's own earlier gradebook is replaced."""
    book = tmp_path / "quiz.csv"
    book.write_text(QUIZ.read_text(encoding="utf-8"), encoding="utf-8")
    other = tmp_path / "notes.csv"
    other.write_text("student,note\nS1,keep me\n", encoding="utf-8")
    res = runner.invoke(app, ["grade", "--run", str(run), "--gradebook", str(book), "--gradebook-out", str(other),
                              "--out", str(tmp_path / "graded.csv")])
    assert res.exit_code != 0 and "Traceback" not in res.output
    assert other.read_text(encoding="utf-8") == "student,note\nS1,keep me\n"
    args = ["grade", "--run", str(run), "--gradebook", str(book), "--out", str(tmp_path / "graded.csv")]
    assert runner.invoke(app, args).exit_code == 0
    res = runner.invoke(app, args)  # its own gradebook and graded table, written again
    assert res.exit_code == 0, res.output
