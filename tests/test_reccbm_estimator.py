"""reccbm.Grader, the estimator on raw text: the script in docs/training.md runs, labels are checked at fit, the
recipes live in reccbm, and the PLM baseline is its own class that checkpoints round-trip."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import torch

import reccbm
from reccbm import Concept, Grader, ReccbmError, Rubric
from tests.conftest import ROOT
from tests.support.tiny_models import encoded, tiny_plm, toy_table

pytestmark = pytest.mark.usefixtures("one_thread")

RUBRIC = Rubric((Concept("EV", "Evidence.", ("none", "some", "strong")), Concept("MC", "Mechanism.")),
                levels=(0, 2), grades=(0, 3))


def _answers(n: int = 50, seed: int = 3) -> pd.DataFrame:
    """Toy answers on RUBRIC's scales (levels 0..2 carried by the words of the response, grades 0..3)."""
    t = toy_table(n, K=2, seed=seed)
    df = pd.DataFrame({"question": t["q"], "reference": t["a"], "response": t["r"], "grade": t["y"]})
    df[["EV", "MC"]] = t["c"]
    return df


def _doc_script() -> str:
    text = (ROOT / "docs" / "training.md").read_text()
    section = text.split("## reccbm on its own: `reccbm.Grader`", 1)[1]
    blocks = re.findall(r"```python\n(.*?)```", section, flags=re.DOTALL)
    assert blocks, "no python block under the reccbm.Grader heading of docs/training.md"
    return blocks[0]


def test_the_training_guides_grader_script_trains_predicts_saves_and_loads(
        backbone: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    script = _doc_script()
    assert len([line for line in script.splitlines() if line.strip()]) <= 12, "the script is meant to stay short"
    _answers().to_csv(tmp_path / "answers.csv", index=False)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("reccbm.estimator.default_backbone", lambda: backbone)  # the tiny model, not MiniLM
    ns: dict[str, Any] = {}
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(script, "docs/training.md", "exec"), ns)  # noqa: S102 - the documented script itself
    grader, new = ns["grader"], ns["new"]
    assert grader.recipe_.model.backbone == backbone and grader.model_.encoder.hidden_size == 32  # the tiny one
    texts = (new.question, new.reference, new.response)
    grades, levels = grader.predict(*texts), grader.concepts(*texts)
    assert grades.shape == (10,) and set(grades) <= {0, 1, 2, 3}
    assert levels.shape == (10, 2) and levels.min() >= 0 and levels.max() <= 2
    loaded = Grader.load(tmp_path / "my-grader")
    np.testing.assert_allclose(loaded.predict_proba(*texts), grader.predict_proba(*texts), atol=1e-6)
    assert loaded.rubric == grader.rubric and loaded.recipe == "default"
    assert grader.recipe_.model.head == "level" and grader.recipe_.joint.epochs > 0  # the recommended recipe
    assert grader.recipe_.stage1.contrast > 0 and grader.recipe_.stage1.contrast_top == (0,)  # EV's mark
    assert loaded.recipe_.joint == grader.recipe_.joint and loaded.history_["steps"] == grader.history_["steps"]
    assert out.getvalue().count("\n") >= 3  # it printed the grades, the levels and the loaded probabilities


@pytest.mark.parametrize(("field", "value", "message"), [
    ("grade", 4, r"row 7: grade is 4, outside the allowed 0\.\.3"),
    ("grade", -1, r"row 7: grade is -1, outside the allowed 0\.\.3"),
    ("grade", 1.5, r"row 7: grade is 1\.5, outside the allowed 0\.\.3"),
    ("MC", 3, r"row 7: concept 'MC' is 3, outside the allowed 0\.\.2"),
    ("EV", float("nan"), r"row 7: concept 'EV' is nan, outside the allowed 0\.\.2"),
    ("EV", "high", r"row 7: concept 'EV' is 'high', outside the allowed 0\.\.2"),
])
def test_fit_refuses_a_label_outside_its_scale_naming_row_field_and_range(field: str, value: Any, message: str) -> None:
    df = _answers(12).astype(object)
    df.loc[7, field] = value
    with pytest.raises(ReccbmError, match=message):  # before any model or tokenizer is loaded
        Grader(RUBRIC, backbone="/no/such/backbone").fit(df.question, df.reference, df.response, df[RUBRIC.keys],
                                                         df.grade)


def test_fit_names_a_dataframe_row_by_its_index_and_a_missing_concept_column() -> None:
    df = _answers(12).set_index(pd.Index([f"a{i}" for i in range(12)]))
    df.loc["a5", "grade"] = 9
    with pytest.raises(ReccbmError, match=r"row a5: grade is 9"):
        Grader(RUBRIC).fit(df.question, df.reference, df.response, df, df.grade)
    with pytest.raises(ReccbmError, match=r"no column for concept\(s\) \['MC'\]"):
        Grader(RUBRIC).fit(df.question, df.reference, df.response, df[["EV"]], df.grade)
    with pytest.raises(ReccbmError, match=r"expected \(N=12, K=2\)"):
        Grader(RUBRIC).fit(df.question, df.reference, df.response, np.zeros((12, 3)), df.grade)


def test_reccbm_fit_refuses_an_out_of_range_label_before_any_stage(backbone: str) -> None:
    tok = reccbm.load_tokenizer(backbone)
    train, dev = encoded(tok, toy_table(12, seed=1)), encoded(tok, toy_table(6, seed=2))
    r = reccbm.recipe("paper", 3, 3, 4)
    assert dev.grades is not None and train.concepts is not None
    dev.grades[4] = 4
    with pytest.raises(ReccbmError, match=r"dev row 4: grade is 4, outside the allowed 0\.\.3"):
        reccbm.fit(train, dev, r, tok)
    dev.grades[4] = 0
    train.concepts[2, 1] = 3
    with pytest.raises(ReccbmError, match=r"train row 2: concept 1 is 3, outside the allowed 0\.\.2"):
        reccbm.fit(train, dev, r, tok)


def test_the_recipes_are_reccbms_and_rubrictool_reads_the_same_presets() -> None:
    from rubrictool.train import PRESETS as rubrictool_presets
    from rubrictool.train import preset_config

    assert rubrictool_presets is reccbm.PRESETS
    default, paper = reccbm.recipe("default", 3, 3, 4), reccbm.recipe("paper", 3, 3, 4)
    assert Grader(RUBRIC).recipe == "default"
    for section, values in reccbm.PRESETS["default"].items():
        for name, value in values.items():
            assert getattr(getattr(default, section), name) == value == preset_config("default")[section][name]
    assert paper.model.head == "scalar" and paper.joint.epochs == 0 and paper.stage2.lcec_fit == "train"
    assert reccbm.recipe("paper", 3, 3, 4, {"stage1": {"epochs": 9}}).stage1.epochs == 9
    with pytest.raises(ReccbmError, match="unknown recipe 'fast'"):
        reccbm.recipe("fast", 3, 3, 4)
    with pytest.raises(ReccbmError, match=r"unknown stage1 field\(s\) \['epoch'\]"):
        reccbm.recipe("paper", 3, 3, 4, {"stage1": {"epoch": 9}})


def test_the_plm_baseline_is_its_own_class_and_its_checkpoint_loads_as_one(backbone: str, tmp_path: Path) -> None:
    plm, tok = tiny_plm(backbone)
    assert not hasattr(plm, "bottleneck") and plm.stage2_parameters() == []
    with pytest.raises(ReccbmError, match="reccbm.PLM"):
        reccbm.RecCBM(plm.config, reccbm.TextEncoder.from_pretrained(backbone))
    items = encoded(tok, toy_table(8, seed=4))
    before = reccbm.predict(plm, items, tok.pad_token_id)
    # the checkpoint a PLM run has always written: model_config with plm, weights encoder.* and plm_head.*
    reccbm.save_checkpoint(plm, tok, tmp_path / "run", stage="plm", step=3)
    loaded, tok2, meta = reccbm.load_checkpoint(tmp_path / "run")
    assert isinstance(loaded, reccbm.PLM) and meta["model_config"]["plm"] is True
    after = reccbm.predict(loaded, items, tok2.pad_token_id)
    assert before.p_hat is None and after.p_hat is None
    np.testing.assert_allclose(after.grade_probs, before.grade_probs, atol=1e-6)
    with pytest.raises(ValueError, match="no concept bottleneck"):
        reccbm.decision_trace(loaded, after)
    assert torch.equal(loaded.plm_head.weight, plm.plm_head.weight)


def test_a_rubrictool_run_loads_as_a_grader_that_predicts_what_rubrictool_grade_does(tmp_path: Path) -> None:
    from rubrictool.grade import grade_items
    from tests.support.tiny_models import KEYS, mohler_like_table, tiny_bert_run

    run = tiny_bert_run(tmp_path, "--preset", "paper")  # the shorter recipe: the load path is what is tested
    grader = Grader.load(run)
    assert grader.rubric.keys == KEYS and grader.rubric.levels == (1, 3) and grader.rubric.grades == (0, 5)
    df = mohler_like_table(12, seed=5)
    graded = grade_items(run, df)
    texts = (df.question, df.reference, df.response)
    np.testing.assert_array_equal(grader.predict(*texts), graded["grade"].to_numpy())
    np.testing.assert_array_equal(grader.concepts(*texts), graded[[f"{k}_level" for k in KEYS]].to_numpy())


def test_a_grader_with_the_plm_override_is_the_plm_baseline_and_predicts_no_concepts(
        backbone: str, tmp_path: Path) -> None:
    df = _answers(30)
    texts = (df.question, df.reference, df.response)
    plm = Grader(RUBRIC, backbone=backbone, overrides={"model": {"plm": True, "race": False, "lcec": False}})
    plm.fit(*texts, df[RUBRIC.keys], df.grade)
    assert isinstance(plm.model_, reccbm.PLM) and plm.history_["stage2"] is None
    assert plm.predict_proba(*texts).shape == (30, 4)
    with pytest.raises(ReccbmError, match="predicts no concepts"):
        plm.concepts(*texts)
    loaded = Grader.load(plm.save(tmp_path / "plm"))
    assert isinstance(loaded.model_, reccbm.PLM)
    np.testing.assert_array_equal(loaded.predict(*texts), plm.predict(*texts))


def test_a_rubrictool_rubric_converts_to_the_graders_with_its_concept_texts() -> None:
    from rubrictool.rubric import load_rubric
    from rubrictool.train import concept_texts

    rb = load_rubric("mohler")
    out = rb.to_reccbm()
    assert out.keys == rb.keys and out.levels == (rb.scale.min, rb.scale.max)
    assert out.grades == (rb.grade.min, rb.grade.max)
    first = rb.concepts[0]
    assert out.concepts[0].anchors == tuple(lv.anchor for lv in first.levels)
    assert [(c.reference_is_top, c.off_topic_is_bottom) for c in out.concepts] == [
        (c.reference_is_top, c.off_topic_is_bottom) for c in rb.concepts]
    anchors = " ".join(f"{lv.anchor}." for lv in first.levels)
    assert concept_texts(rb)[0] == f"{first.name}. {first.definition} {anchors}"


def test_a_grader_without_the_question_in_its_input_reads_every_question_alike(backbone: str, tmp_path: Path) -> None:
    """model.question_input False: the question is left out of training and grading inputs, so answers graded under
    another question's text get the same probabilities (the default's do not), and a saved grader keeps the choice."""
    from rubrictool.grade import model_inputs
    from tests.support.tiny_models import load_tokenizer

    df = _answers(40)
    other = ["What is the capital of a country whose name nobody knows?"] * 10
    new = _answers(10, seed=9)
    import reccbm.estimator as est

    asked: list[bool] = []
    real = est.encode_inputs

    def spy(*args: Any, question: bool = True, **kw: Any) -> Any:
        asked.append(question)
        return real(*args, question=question, **kw)

    noq = Grader(RUBRIC, backbone=backbone, overrides={"model": {"question_input": False}}, seed=0)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(est, "encode_inputs", spy)
        noq.fit(df.question, df.reference, df.response, df[RUBRIC.keys], df.grade)
    assert asked == [False]  # fit's inputs leave the question out too
    assert noq.model_.config.question_input is False
    np.testing.assert_array_equal(noq.predict_proba(new.question, new.reference, new.response),
                                  noq.predict_proba(other, new.reference, new.response))
    noq.save(tmp_path / "g")
    loaded = Grader.load(tmp_path / "g")
    assert loaded.model_.config.question_input is False
    np.testing.assert_allclose(loaded.predict_proba(other, new.reference, new.response),
                               noq.predict_proba(new.question, new.reference, new.response), atol=1e-6)
    withq = Grader(RUBRIC, backbone=backbone, seed=0).fit(df.question, df.reference, df.response, df[RUBRIC.keys],
                                                          df.grade)
    assert not np.allclose(withq.predict_proba(new.question, new.reference, new.response),
                           withq.predict_proba(other, new.reference, new.response))
    tok = load_tokenizer(backbone)  # the CLI's one input rule: [CLS] [SEP] r [SEP] a [SEP] without the question
    rows = new.assign(context=None)
    assert model_inputs(tok, rows, 32, question=False) == model_inputs(tok, rows.assign(question=""), 32)
    assert model_inputs(tok, rows, 32, question=False) != model_inputs(tok, rows, 32)


@pytest.mark.parametrize(("section", "field", "value", "message"), [
    ("model", "align", "maybe", r"align is true or false, got 'maybe'"),
    ("stage1", "epochs", "three", r"epochs is a number, got 'three'"),
    ("stage2", "lr", True, r"lr is a number, got True"),
])
def test_a_config_field_of_the_wrong_kind_is_refused_naming_it(section: str, field: str, value: Any,
                                                               message: str) -> None:
    """A YAML word where true/false or a number belongs is refused when the recipe is built (it would otherwise
    train with a truthy string), naming the field."""
    with pytest.raises(ReccbmError, match=message):
        reccbm.recipe("default", 2, 3, 4, {section: {field: value}})


# ---------------------------------------------------------------------------- one way into the model
FAST = {"stage1": {"epochs": 1}, "joint": {"epochs": 1}, "stage2": {"epochs": 3}}


def _with_votes(df: pd.DataFrame, keys: list[str], lo: int, hi: int, seed: int = 0) -> pd.DataFrame:
    """``df`` with a votes_<KEY> column per concept: three reviewers' levels around the adjudicated one."""
    rng = np.random.default_rng(seed)
    out = df.copy()
    for k in keys:
        out[f"votes_{k}"] = [" ".join(str(int(np.clip(v + d, lo, hi))) for d in rng.integers(-1, 2, 3)) for v in df[k]]
    return out


def test_clone_copies_the_parameters_and_set_params_checks_them() -> None:
    from sklearn.base import clone

    g = Grader(RUBRIC, "paper", overrides={"stage1": {"epochs": 2}}, seed=4)
    twin = clone(g)
    assert twin is not g and twin.get_params() == g.get_params() and not hasattr(twin, "model_")
    assert set(g.get_params()) == {"rubric", "recipe", "backbone", "overrides", "dev_size", "seed", "batch_size"}
    assert clone(Grader(RUBRIC)).recipe == "default"
    assert twin.set_params(seed=9, dev_size=0.3) is twin and (twin.seed, twin.dev_size, g.seed) == (9, 0.3, 4)
    with pytest.raises(ReccbmError, match=r"unknown Grader parameter\(s\) \['epochs'\]"):
        twin.set_params(epochs=3)
    with pytest.raises(ReccbmError, match="unknown recipe 'fast'"):
        twin.set_params(recipe="fast")
    whole = reccbm.recipe("paper", 2, 3, 4)
    assert clone(Grader(RUBRIC, whole)).recipe == whole
    with pytest.raises(ReccbmError, match="overrides go on a named recipe"):
        Grader(RUBRIC, whole, overrides={"stage1": {"epochs": 1}})
    with pytest.raises(ReccbmError, match="the rubric 2, 3 and 4"):
        Grader(RUBRIC, reccbm.recipe("paper", 3, 3, 4)).fit(_answers(12))


def test_a_table_with_the_reviewers_votes_fits_as_arrays_with_their_shares(backbone: str) -> None:
    """fit on a tidy table reads the texts, levels, grades and votes_<KEY> columns; the same answers as arrays with
    the same shares fit the same grader, and without the votes the concept heads learn other targets."""
    df = _with_votes(_answers(30), RUBRIC.keys, 0, 2)
    new = _answers(10, seed=9)
    table = Grader(RUBRIC, backbone=backbone, overrides=FAST).fit(df)
    shares = reccbm.estimator.vote_shares(df, RUBRIC, df[RUBRIC.keys].to_numpy())
    assert shares is not None and shares.shape == (30, 2, 3) and np.allclose(shares.sum(-1), 1)
    arrays = Grader(RUBRIC, backbone=backbone, overrides=FAST).fit(df.question, df.reference, df.response,
                                                                   df[RUBRIC.keys], df.grade, votes=shares)
    np.testing.assert_array_equal(table.predict_proba(new), arrays.predict_proba(new.question, new.reference,
                                                                                 new.response))
    plain = Grader(RUBRIC, backbone=backbone, overrides=FAST).fit(df.drop(columns=["votes_EV", "votes_MC"]))
    assert not np.array_equal(plain.predict_proba(new), table.predict_proba(new))


def test_a_votes_cell_that_is_not_levels_is_refused_naming_column_and_row() -> None:
    df = _with_votes(_answers(12), RUBRIC.keys, 0, 2)
    df.loc[5, "votes_MC"] = "2 x"
    with pytest.raises(ReccbmError, match=r"votes_MC, row 5: '2 x' is not space-separated levels"):
        Grader(RUBRIC, backbone="/no/such/backbone").fit(df)
    df.loc[5, "votes_MC"] = "2 7"
    with pytest.raises(ReccbmError, match=r"votes_MC, row 5: '2 7' has a level outside the rubric's scale 0\.\.2"):
        Grader(RUBRIC, backbone="/no/such/backbone").fit(df)


def test_the_cli_and_the_library_fit_the_same_grader_on_one_tiny_table(backbone: str, tmp_path: Path) -> None:
    """`rubrictool train` (the default preset, reviewers' votes kept) and a reccbm.Grader with the run's recipe and
    split give the same test predictions to the last bit; the saved run loads as that grader."""
    import json

    import yaml

    from rubrictool.rubric import load_rubric
    from tests.support.tiny_models import KEYS, mohler_like_table, train_with_cli

    table = _with_votes(mohler_like_table(40), KEYS, 1, 3)
    code, output, run = train_with_cli(tmp_path, backbone, table)
    assert code == 0, output
    split, cfg = json.loads((run / "split.json").read_text()), yaml.safe_load((run / "config.yaml").read_text())
    rubric = load_rubric("mohler").to_reccbm()
    recipe = reccbm.recipe("default", 8, 3, 6, {s: cfg[s] for s in ("model", "stage1", "joint", "stage2")})
    by_id = table.set_index("id")
    rows, test = by_id.loc[split["train"] + split["dev"]], by_id.loc[split["test"]]
    grader = Grader(rubric, recipe).fit(rows, dev=range(len(split["train"]), len(rows)))
    cli = pd.read_csv(run / "test_predictions.csv")
    probs = grader.predict_proba(test)
    np.testing.assert_array_equal(probs.argmax(1), cli["grade"])
    np.testing.assert_array_equal(probs[np.arange(len(test)), cli["grade"]].astype(np.float32),
                                  cli["grade_prob"].to_numpy(np.float32))  # the CSV keeps float32's shortest digits
    np.testing.assert_array_equal(grader.concepts(test), cli[[f"{k}_level" for k in KEYS]])
    np.testing.assert_array_equal(Grader.load(run).predict_proba(test), probs)
    assert grader.history_["steps"] == json.loads((run / "model.json").read_text())["step"]


def test_importing_reccbm_writes_no_environment_variable() -> None:
    import subprocess
    import sys

    code = ("import os; os.environ.pop('OMP_WAIT_POLICY', None); before = dict(os.environ); import reccbm; "
            "print(sorted(set(os.environ.items()) ^ set(before.items())))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "[]", out.stdout


def test_reccbms_public_surface_is_short_and_the_building_blocks_still_import() -> None:
    assert "Grader" in reccbm.__all__ and len(reccbm.__all__) <= 15
    assert all(hasattr(reccbm, name) for name in reccbm.__all__)
    for name in ("train_concepts", "train_grader", "RecCBM", "grade_metrics", "decision_trace", "encode_table"):
        assert hasattr(reccbm, name) and name not in reccbm.__all__  # importable as before, not the surface
