"""reccbm.fit, the recipe in one place: stages in order, the dev metrics seeds are chosen on, the step count."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import reccbm
from reccbm import JointConfig, ModelConfig, Recipe, StageIIConfig, load_tokenizer
from reccbm.fit import dev_metrics
from tests.support.tiny_models import FAST1, encoded, mohler_like_table, toy_table

pytestmark = pytest.mark.usefixtures("one_thread")


def _recipe(backbone: str, joint_epochs: int) -> Recipe:
    model = ModelConfig(num_concepts=3, num_levels=3, num_grades=4, backbone=backbone, max_len=32, head="level")
    return Recipe(model, FAST1, JointConfig(epochs=joint_epochs, lr=3e-3, select="last", intervention_p=0.25),
                  StageIIConfig(lr=0.05, epochs=3, batch_size=8))


def test_fit_reports_the_returned_models_dev_metrics_and_counts_every_stage(backbone: str) -> None:
    tok = load_tokenizer(backbone)
    train, dev = encoded(tok, toy_table(48, seed=0)), encoded(tok, toy_table(24, seed=1))
    fitted = reccbm.fit(train, dev, _recipe(backbone, joint_epochs=2), tok)
    assert fitted.joint is not None and fitted.stage2 is not None and fitted.joint.steps > 0
    # the dev metrics are those of the model fit returns (after the joint stage), not of the head fitted before it
    assert fitted.dev == dev_metrics(fitted.model, dev, tok.pad_token_id)
    parts = [fitted.stage1, fitted.head_init, fitted.joint, fitted.lcec, fitted.stage2]
    assert fitted.steps == sum(r.steps for r in parts if r is not None)


def test_fit_without_a_joint_stage_is_the_papers_two_stages(backbone: str) -> None:
    tok = load_tokenizer(backbone)
    train, dev = encoded(tok, toy_table(48, seed=0)), encoded(tok, toy_table(24, seed=1))
    fitted = reccbm.fit(train, dev, _recipe(backbone, joint_epochs=0), tok)
    assert fitted.joint is None and fitted.stage2 is not None
    assert fitted.steps == fitted.stage1.steps + fitted.stage2.steps


def test_several_seeds_keep_the_seed_whose_final_model_is_best_on_dev(tmp_path: Path, backbone: str) -> None:
    from rubrictool.data import split_items
    from rubrictool.train import TrainOptions, train_model

    df = mohler_like_table(60)
    overrides: dict[str, dict[str, Any]] = {"model": {"max_len": 32, "backbone": backbone},
                                            "stage1": {"epochs": 1, "lr": 3e-3, "device": "cpu"},
                 "joint": {"epochs": 1}, "stage2": {"epochs": 3}}
    res = train_model("mohler", df, split_items(df, seed=0), tmp_path / "run",
                      options=TrainOptions(seeds=2, overrides=overrides))
    seeds = res.metrics["seeds"]
    best = max(seeds, key=lambda s: s["dev_selection"]["t_f1"])
    assert res.metrics["selected_seed"] == best["seed"]
    for s in seeds:  # the dev metrics seeds are chosen on describe the model after the joint stage
        assert s["joint"] is not None and set(s["dev_selection"]) >= {"t_f1", "t_acc", "c_acc"}
        shaped = ("stage1", "head_init", "joint", "lcec", "stage2")  # every stage that shaped the returned model
        assert s["head_init"] is not None and s["lcec"] is not None  # the default: a head, the joint stage, LCEC on dev
        assert s["steps"] == sum(s[k]["steps"] for k in shaped if s.get(k))
    _, _, meta = reccbm.load_checkpoint(tmp_path / "run")
    assert meta["seed"] == best["seed"]


def test_seeds_are_chosen_on_the_final_model_not_on_the_head_before_the_joint_stage(
        tmp_path: Path, backbone: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """On a course that is not Mohler (three concepts on 0..2, grade 0..2): two seeds whose final models and whose
    Stage II heads before the joint stage rank the other way round. The run keeps the seed whose final model is
    better on dev, and its checkpoint counts the joint stage's steps. The rule this replaced (the head's dev score
    before the joint stage, a step count of Stage I + Stage II) keeps the other seed and a smaller step count."""
    from rubrictool.data import split_items
    from rubrictool.train import TrainOptions, train_model
    from tests.support.stats_course import stats_rubric, stats_table

    real_fit = reccbm.fit
    final_t_f1, head_t_f1 = {0: 0.2, 1: 0.8}, {0: 0.9, 1: 0.1}  # seed -> dev T-F1: final model, head before joint

    def fit(train: reccbm.EncodedItems, dev: reccbm.EncodedItems, recipe: Recipe, tok: Any, **kw: Any) -> reccbm.Fitted:
        fitted = real_fit(train, dev, recipe, tok, **kw)
        seed = recipe.stage1.seed
        fitted.dev["t_f1"] = final_t_f1[seed]
        assert fitted.head_init is not None  # the default preset: a head, the joint stage, then the LCEC refit
        fitted.head_init.best["t_f1"] = head_t_f1[seed]
        return fitted

    monkeypatch.setattr("reccbm.estimator.fit", fit)  # the recipe as the Grader runs it
    df = stats_table(60, seed=3)
    overrides: dict[str, dict[str, Any]] = {"model": {"max_len": 24, "backbone": backbone},
                                            "stage1": {"epochs": 1, "lr": 3e-3, "device": "cpu"},
                 "joint": {"epochs": 1}, "stage2": {"epochs": 2}}
    res = train_model(stats_rubric(tmp_path), df, split_items(df, seed=0), tmp_path / "run",
                      options=TrainOptions(seeds=2, overrides=overrides))
    assert res.metrics["selected_seed"] == 1
    kept = res.metrics["seeds"][1]
    assert kept["dev_selection"]["t_f1"] == 0.8 and kept["head_init"]["best"]["t_f1"] == 0.1
    meta = reccbm.read_meta(tmp_path / "run")
    assert meta["seed"] == 1
    assert kept["joint"]["steps"] > 0
    assert meta["step"] == kept["steps"] > kept["stage1"]["steps"] + kept["stage2"]["steps"]

def test_min_steps_gives_a_small_table_as_many_updates_as_asked(backbone: str) -> None:
    from dataclasses import replace

    tok = load_tokenizer(backbone)
    train, dev = encoded(tok, toy_table(24, seed=0)), encoded(tok, toy_table(12, seed=1))  # 3 batches of 8 a pass
    plain = _recipe(backbone, joint_epochs=2)
    stage1 = replace(plain.stage1, epochs=2, patience=5, max_steps_per_epoch=0)
    base = replace(plain, stage1=stage1)
    fitted = reccbm.fit(train, dev, base, tok)
    assert fitted.stage1.steps == 2 * 3 and fitted.joint is not None and fitted.joint.steps == 2 * 3
    assert plain.joint is not None
    more = replace(base, stage1=replace(stage1, min_steps=20), joint=replace(plain.joint, min_steps=9))
    fitted = reccbm.fit(train, dev, more, tok)
    # each epoch runs ceil(min_steps / epochs) steps, drawing the 24 answers again once they are used up
    assert fitted.stage1.steps == 2 * 10 and fitted.joint is not None and fitted.joint.steps == 2 * 5
    assert len(fitted.stage1.history) == 2  # still two epochs: dev selection and patience count epochs as before
    # a table whose epochs already take that many steps is unaffected
    enough = replace(base, stage1=replace(stage1, min_steps=4))
    assert reccbm.fit(train, dev, enough, tok).stage1.steps == 2 * 3
