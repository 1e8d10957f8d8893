"""`rubrictool grade`: grade new responses with a trained run; CSV and JSONL out."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

import reccbm
from rubrictool.cli import app
from rubrictool.grade import grade_items
from tests.support.tiny_models import KEYS, mohler_like_table, tiny_bert_run

pytestmark = pytest.mark.usefixtures("one_thread")

runner = CliRunner()


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_bert_run(tmp_path_factory.mktemp("graderun"))


def test_grade_writes_the_decision_trace_per_item(tmp_path: Path, run: Path) -> None:
    new = mohler_like_table(30, seed=7).drop(columns=KEYS + ["grade"])
    new.to_csv(tmp_path / "new.csv", index=False)
    out = tmp_path / "graded.csv"
    res = runner.invoke(app, ["grade", "--run", str(run), "--items", str(tmp_path / "new.csv"), "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert "graded 30 responses" in res.output
    g = pd.read_csv(out)
    assert list(g["id"]) == list(new["id"]) and g["model_grade"].between(0, 5).all()
    held = g["needs_review"].notna()  # a flagged answer gets no mark; the others keep the model's
    assert (g["flags"].notna() == held).all() and g.loc[held, "grade"].isna().all()
    assert (g.loc[~held, "grade"] == g.loc[~held, "model_grade"]).all()
    assert g["grade_prob"].between(0, 1).all()
    for key in KEYS:
        assert g[f"{key}_level"].between(1, 3).all() and g[f"{key}_expected"].between(1, 3).all()
        assert {f"{key}_mu_post", f"{key}_contribution"} <= set(g.columns)
    model, tok, _ = reccbm.load_checkpoint(run)
    contrib = g[[f"{k}_contribution" for k in KEYS]].to_numpy()
    # the contributions and the bias add up to the logit of the predicted grade ...
    np.testing.assert_allclose(contrib.sum(1) + g["grade_bias"], g["grade_logit"], rtol=1e-4, atol=1e-5)
    # ... which is the model's own logit for that grade
    feats = reccbm.encode_inputs(tok, list(new["question"]), list(new["response"]), list(new["reference"].fillna("")),
                                 model.config.max_len)
    preds = reccbm.predict(model, reccbm.EncodedItems(feats), tok.pad_token_id)
    assert preds.grade_logits is not None
    np.testing.assert_allclose(preds.grade_logits[np.arange(30), g["model_grade"]], g["grade_logit"], rtol=1e-4,
                               atol=1e-5)
    if model.U is None:  # the paper's head: contribution_k = W_{ŷ,k} μ_post,k
        mu = g[[f"{k}_mu_post" for k in KEYS]].to_numpy()
        np.testing.assert_allclose(contrib, model.W.weight.detach().numpy()[g["model_grade"].to_numpy()] * mu,
                                   rtol=1e-4, atol=1e-5)
    # the library function gives the same table
    lib = grade_items(run, new)
    np.testing.assert_allclose(lib["grade_prob"].to_numpy(), g["grade_prob"].to_numpy(), rtol=1e-5)


def test_grade_jsonl_out(tmp_path: Path, run: Path) -> None:
    new = mohler_like_table(5, seed=8)[["id", "question", "response"]]
    new.to_json(tmp_path / "new.jsonl", orient="records", lines=True)
    out = tmp_path / "graded.jsonl"
    res = runner.invoke(app, ["grade", "--run", str(run), "--items", str(tmp_path / "new.jsonl"), "-o", str(out)])
    assert res.exit_code == 0, res.output
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert len(rows) == 5 and "FC_contribution" in rows[0]


def test_grade_bad_inputs_end_in_a_clear_message(tmp_path: Path, run: Path) -> None:
    pd.DataFrame({"id": ["a"], "answer": ["x"]}).to_csv(tmp_path / "bad.csv", index=False)
    res = runner.invoke(app, ["grade", "--run", str(run), "--items", str(tmp_path / "bad.csv")])
    assert res.exit_code == 1 and "no 'response' column" in res.output
    res = runner.invoke(app, ["grade", "--run", str(tmp_path), "--items", str(tmp_path / "bad.csv")])
    assert res.exit_code == 1 and "is not a trained run" in res.output
    res = runner.invoke(app, ["grade", "--items", str(tmp_path / "bad.csv")])
    assert res.exit_code == 2 and "--run" in res.output
    res = runner.invoke(app, ["grade", "-m", str(run), "--items", str(tmp_path / "bad.csv")])  # a run is --run only
    assert res.exit_code == 2 and "No such option" in res.output
    edited = tmp_path / "edited-run"
    shutil.copytree(run, edited)
    meta = json.loads((edited / "model.json").read_text())
    meta["model_config"]["head"] = "levels"
    (edited / "model.json").write_text(json.dumps(meta))
    new = mohler_like_table(3, seed=9)[["id", "question", "response"]]
    new.to_csv(tmp_path / "new.csv", index=False)
    res = runner.invoke(app, ["grade", "--run", str(edited), "--items", str(tmp_path / "new.csv")])
    assert res.exit_code == 1 and "incomplete or was changed after training: model.json" in " ".join(res.output.split())
    (edited / "run.json").unlink()  # without its completion record a run cannot be checked: refused
    res = runner.invoke(app, ["grade", "--run", str(edited), "--items", str(tmp_path / "new.csv")])
    assert res.exit_code == 1 and "has no completion record (run.json)" in " ".join(res.output.split())
    assert "Traceback" not in res.output


def test_grade_int8_mostly_agrees_with_float(tmp_path: Path, run: Path) -> None:
    new = mohler_like_table(30, seed=9)[["id", "question", "response", "reference"]]
    new.to_csv(tmp_path / "new.csv", index=False)
    res = runner.invoke(app, ["grade", "--run", str(run), "--items", str(tmp_path / "new.csv"), "-o",
                              str(tmp_path / "q.csv"), "--int8"])
    assert res.exit_code == 0, res.output
    q, f = pd.read_csv(tmp_path / "q.csv"), grade_items(run, new)
    assert (q["model_grade"] == f["grade"]).mean() >= 0.8


def test_model_inputs_is_the_one_input_rule(backbone: str) -> None:
    """x = (question, reference ⊕ context, response); a missing column or an empty cell is empty text."""
    from rubrictool.grade import model_inputs

    tok = reccbm.load_tokenizer(backbone)
    full = pd.DataFrame({"question": ["What is a stack?"], "reference": ["LIFO list"], "context": [None],
                         "response": ["last in, first out"]})
    no_context = full.drop(columns=["context"])
    with_context = full.assign(context=["week 3"])
    direct = reccbm.encode_inputs(tok, ["What is a stack?"], ["last in, first out"], ["LIFO list \n week 3"], 64)
    assert model_inputs(tok, full, 64) == model_inputs(tok, no_context, 64)
    assert model_inputs(tok, with_context, 64) == direct != model_inputs(tok, full, 64)
    cut: list[int] = []
    model_inputs(tok, with_context.assign(response=["word " * 200]), 32, cut)
    assert cut == [0]


def test_a_run_trained_without_the_question_trains_and_grades_without_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """--cfg model.question_input=false: every training input leaves the question out, the run keeps the choice, and
    `grade` reads every question alike (the same answers under another question get the same grades); a value that is
    not a boolean is one line naming the field."""
    import reccbm.data as reccbm_data

    asked: list[bool] = []
    real = reccbm_data.encode_inputs  # every input a run encodes (its splits, and the Grader it fits) comes here

    def spy(*args: object, question: bool = True, **kw: object) -> object:
        asked.append(question)
        return real(*args, question=question, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(reccbm_data, "encode_inputs", spy)
    run = tiny_bert_run(tmp_path / "t", "--cfg", "model.question_input=false")
    assert asked and not any(asked)
    model, _, _ = reccbm.load_checkpoint(run)
    assert model.config.question_input is False
    new = mohler_like_table(20, seed=5).drop(columns=KEYS + ["grade"])
    other = new.assign(question="Which colour is a question nobody asked?")
    a, b = grade_items(run, new), grade_items(run, other)
    np.testing.assert_array_equal(a["grade_prob"].to_numpy(), b["grade_prob"].to_numpy())
    for key in KEYS:
        np.testing.assert_array_equal(a[f"{key}_expected"].to_numpy(), b[f"{key}_expected"].to_numpy())
    res = runner.invoke(app, ["train", "--table", str(tmp_path / "t" / "adjudicated.csv"), "--rubric", "mohler",
                              "--cfg", "model.question_input=maybe", "--out", str(tmp_path / "bad")])
    assert res.exit_code != 0 and "question_input" in res.output and "Traceback" not in res.output
    assert len(res.output.strip().splitlines()) <= 2, res.output


@pytest.mark.slow  # three trainings; the guide test runs --final in the fast suite
def test_a_kfold_run_gains_its_final_model_and_grades_with_it(tmp_path: Path, backbone: str) -> None:
    """train --folds without --final: grade refuses the k-fold run; the same command with --final reads the folds
    back, trains only the final model on every answer, and grade uses it with the folds' pooled figures as its card."""
    table = mohler_like_table(40)
    table.to_csv(tmp_path / "adjudicated.csv", index=False)
    kfold = tmp_path / "kfold"
    args = ["train", "--table", str(tmp_path / "adjudicated.csv"), "--rubric", "mohler", "--backbone", backbone,
            "--epochs", "1", "--max-len", "32", "--device", "cpu", "--lr", "3e-3", "--cfg", "joint.epochs=1",
            "--folds", "2", "--out", str(kfold)]
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    new = mohler_like_table(6, seed=3).drop(columns=KEYS + ["grade"])
    new.to_csv(tmp_path / "new.csv", index=False)
    grade = ["grade", "--run", str(kfold), "--items", str(tmp_path / "new.csv"), "--out", str(tmp_path / "g.csv")]
    res = runner.invoke(app, grade)
    assert res.exit_code == 1 and "without a final model" in " ".join(res.output.split())
    folds_before = {p: p.stat().st_mtime_ns for p in kfold.glob("fold-*/model.safetensors")}
    res = runner.invoke(app, [*args, "--final"])
    assert res.exit_code == 0, res.output
    assert "final model:" in res.output and "trained on all 40 labelled answers" in " ".join(res.output.split())
    assert {p: p.stat().st_mtime_ns for p in kfold.glob("fold-*/model.safetensors")} == folds_before  # read back
    split = json.loads((kfold / "final" / "split.json").read_text())
    assert sorted(split["train"]) == sorted(table["id"].astype(str))
    folds = json.loads((kfold / "folds.json").read_text())
    assert folds["final"] == {"dir": "final", "answers": 40}
    res = runner.invoke(app, grade)
    assert res.exit_code == 0, res.output
    card = json.loads((tmp_path / "g.card.json").read_text())["quality card"]
    assert card["model"] == "kfold/final" and card["folds"] == 2 and card["n_answers"] == 40
    assert card["qwk"] == {k: pytest.approx(v) for k, v in folds["ci"]["qwk"].items() if k in ("value", "lo", "hi")}
    assert "pooled over the 2 folds of kfold" in " ".join(res.output.split())
    # the final model grades: the same grades as grading its own folder
    direct = grade_items(kfold / "final", new)
    np.testing.assert_allclose(pd.read_csv(tmp_path / "g.csv")["grade_prob"], direct["grade_prob"], rtol=1e-5)
