"""`rubrictool train`: a tiny backbone on a toy Mohler-shaped table, checked through the library."""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import torch
import yaml
from typer.testing import CliRunner

import reccbm
from rubrictool.cli import app
from rubrictool.rubric import load_rubric
from tests.support.tiny_models import KEYS, mohler_like_table, train_with_cli

pytestmark = pytest.mark.usefixtures("one_thread")

runner = CliRunner()




def test_train_writes_a_complete_run_directory(tmp_path: Path, backbone: str) -> None:
    agreement = {"concepts": {k: {"alpha": 0.5 + 0.05 * i, "alpha_ci": [0.4, 0.9]} for i, k in enumerate(KEYS)}}
    (tmp_path / "agreement.json").write_text(json.dumps(agreement))
    code, output, run = train_with_cli(tmp_path, backbone, mohler_like_table(60), "--seeds", "2")
    assert code == 0, output
    assert "T-Acc" in output and "QWK" in output and "reliability" in output and "Spearman" in output
    assert "2 seeds, mean ± std" in output and " ± " in output and " min" in output
    assert "σ² and A_kk are fitted on the outputs for the training answers themselves" not in output  # default: on dev
    for name in ("config.yaml", "split.json", "metrics.json", "reliability.csv", "reliability.md", "train.log",
                 "model.safetensors", "model.json", "test_predictions.csv"):
        assert (run / name).is_file(), name
    from rubrictool.provenance import git_revision

    rev = git_revision()
    if (Path(__file__).resolve().parents[1] / ".git").exists():
        assert rev is not None  # a checkout: every run records the revision that trained it
    assert json.loads((run / "model.json").read_text())["git_revision"] == rev
    assert json.loads((run / "metrics.json").read_text())["git_revision"] == rev
    cfg = yaml.safe_load((run / "config.yaml").read_text())
    assert cfg["model"]["num_concepts"] == 8 and cfg["stage1"]["epochs"] == 2 and cfg["stage2"]["lambda_d"] == 0.1
    metrics = json.loads((run / "metrics.json").read_text())
    assert len(metrics["seeds"]) == 2 and set(metrics["summary"]["t_acc"]) == {"mean", "std"}
    rel = pd.read_csv(run / "reliability.csv")
    assert list(rel["concept"]) == KEYS and rel["alpha"].tolist() == pytest.approx([a["alpha"] for a in
                                                                                     agreement["concepts"].values()])
    assert (rel["sigma2"] > 0).all() and rel["A_kk"].between(0, 1.5).all()
    assert rel["test_reliability"].between(0, 1).all()  # the concept score's signal share on the test answers
    assert "ρ(1 − test reliability, 1 − α)" in output and "test reliability" in (run / "reliability.md").read_text()
    assert {"rho", "lo", "hi", "n"} <= set(json.loads((run / "metrics.json").read_text())["spearman_noise_share"])
    assert metrics["spearman_sigma2_vs_1_minus_alpha"] is not None
    split = json.loads((run / "split.json").read_text())
    assert len(split["train"]) + len(split["dev"]) + len(split["test"]) == 60
    model, _, meta = reccbm.load_checkpoint(run)
    assert meta["concept_keys"] == KEYS and meta["grade"] == [0, 5] and meta["scale"] == [1, 3]
    assert model.config.num_grades == 6 and model.lcec is not None


@pytest.mark.parametrize(
    ("args", "variant"),
    [(["--variant", "vanilla"], "vanilla"), (["--no-lcec", "--no-opcc"], "race"), (["--variant", "plm"], "plm")],
)
def test_train_variants_from_the_command_line(tmp_path: Path, backbone: str, args: list[str], variant: str) -> None:
    code, output, run = train_with_cli(tmp_path, backbone, mohler_like_table(40), *args)
    assert code == 0, output
    retired = [a for a in args if a.startswith("--no-")]  # they still work, one note each (`rubrictool ablate`)
    notes = [line for line in output.splitlines() if "will be removed in the next release" in line]
    assert sorted(n.split()[1] for n in notes) == sorted(retired)
    assert "(1 seed)" in output and " ± " not in output  # one seed has no spread to show
    meta = reccbm.read_meta(run)
    assert meta["variant"] == variant
    cfg = yaml.safe_load((run / "config.yaml").read_text())
    assert cfg["stage1"]["lambda_r"] == 0.0  # OPCC is off in all three
    assert (run / "reliability.csv").is_file() == (variant != "plm")


def _mutate(df: pd.DataFrame, col: str, row: int, value: object) -> pd.DataFrame:
    df = df.copy()
    values = df[col].astype(object).tolist()
    values[row] = value
    df[col] = pd.Series(values, dtype=object)
    return df


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda df: df.rename(columns={"FC": "FX"}),
         "no column for concept(s) FC of rubric 'mohler'; unknown column(s): FX"),
        (lambda df: _mutate(df, "CC", 4, 7), "row 5 (id q.4): concept CC = 7 is not a level of the rubric (1..3)"),
        (lambda df: _mutate(df, "grade", 2, 9), "row 3 (id q.2): grade 9 is outside the rubric's grade scale 0..5"),
        (lambda df: _mutate(df, "R", 0, None), "row 1 (id q.0): concept R = missing is not a level"),
    ],
)
def test_bad_tables_end_in_a_clear_message(tmp_path: Path, backbone: str, make, message: str) -> None:  # type: ignore[no-untyped-def]
    code, output, _ = train_with_cli(tmp_path, backbone, make(mohler_like_table(20)))
    assert code == 1
    assert message in " ".join(output.split()) and "Traceback" not in output


def test_empty_split_and_bad_options_end_in_a_clear_message(tmp_path: Path, backbone: str) -> None:
    df = mohler_like_table(20)
    split = tmp_path / "split.json"
    split.write_text(json.dumps({"train": list(df["id"][:15]), "dev": [], "test": list(df["id"][15:])}))
    code, output, _ = train_with_cli(tmp_path, backbone, df, "--split", str(split))
    assert code == 1 and "the dev split is empty" in output
    code, output, _ = train_with_cli(tmp_path, backbone, df, "--variant", "nope")
    assert code == 1 and "unknown variant 'nope'" in output
    res = runner.invoke(app, ["train", "--rubric", "mohler"])
    assert res.exit_code == 1 and "give either --benchmark NAME or --table FILE" in res.output
    code, output, _ = train_with_cli(tmp_path, backbone, df, "--split", str(split), "--folds", "2")
    assert code == 1 and "exclude each other" in output and "drop --split or --folds" in output
    code, output, _ = train_with_cli(tmp_path, backbone, df, "--seeds", "0")
    assert code == 1 and "at least one seed" in output and "Traceback" not in output
    (tmp_path / "sel").mkdir()
    code, output, run = train_with_cli(tmp_path / "sel", backbone, df, "--cfg", "joint.select=best")
    assert code == 1 and "unknown joint selection 'best'; use t_f1 or last" in output and "Traceback" not in output
    assert not (run / "train.log").exists()  # refused before any training


@pytest.mark.parametrize(("key", "what", "options"), [
    ("model.head", "grade head", "scalar or level"),
    ("model.query_init", "query init", "orthogonal or rubric"),
    ("stage1.concept_loss", "concept loss", "sum or mean"),
    ("joint.select", "joint selection", "t_f1 or last"),
    ("stage2.select", "Stage II selection", "t_f1 or nll"),
    ("stage2.lcec_fit", "LCEC fit", "train or dev"),
])
def test_an_unknown_choice_is_refused_before_training(tmp_path: Path, backbone: str, key: str, what: str,
                                                      options: str) -> None:
    """A misspelt choice used to train silently with another one (e.g. stage2.select NLL ran t_f1)."""
    code, output, run = train_with_cli(tmp_path, backbone, mohler_like_table(20), "--cfg", f"{key}=bogus")
    assert code == 1 and f"unknown {what} 'bogus'; use {options}" in output and "Traceback" not in output
    assert not run.exists()  # refused before anything is written


@pytest.mark.parametrize(("item", "message"), [
    ("stage2.lambda=1", "unknown stage2 field 'lambda'"),
    ("stage3.epochs=2", "unknown section 'stage3'"),
    ("epochs=2", "use SECTION.FIELD=VALUE"),
    ("model.head", "use SECTION.FIELD=VALUE"),
])
def test_a_bad_cfg_entry_is_one_line_naming_what_is_known(tmp_path: Path, backbone: str, item: str,
                                                          message: str) -> None:
    code, output, run = train_with_cli(tmp_path, backbone, mohler_like_table(20), "--cfg", item)
    assert code == 1 and message in " ".join(output.split()) and "Traceback" not in output
    assert not run.exists()


def test_mohler_rubric_matches_the_toy_table() -> None:
    rb = load_rubric("mohler")
    assert rb.keys == KEYS and (rb.scale.min, rb.scale.max, rb.grade.min, rb.grade.max) == (1, 3, 0, 5)


def test_cross_fitted_stage2_sees_each_training_answer_only_through_a_model_that_never_trained_on_it(
    tmp_path: Path, backbone: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    trained: list[tuple[int, frozenset[int]]] = []  # (model, the answers its Stage I saw)
    joint: list[tuple[int, frozenset[int]]] = []
    cached: list[tuple[int, list[int], Any]] = []  # (model, answers, p̂)
    graders: list[Any] = []  # train_p_hat of every Stage II fit
    alive: list[Any] = []  # every model trained
    real = {n: getattr(reccbm, n) for n in ("train_concepts", "train_joint", "cache_concepts", "train_grader")}

    def ids(items: Any) -> list[int]:
        return [id(f) for f in items.features]

    def train_concepts(model: Any, items: Any, *a: Any, **kw: Any) -> Any:
        alive.append(model)  # held, so that no later model takes a freed one's id
        trained.append((id(model), frozenset(ids(items))))
        return real["train_concepts"](model, items, *a, **kw)

    def train_joint(model: Any, items: Any, *a: Any, **kw: Any) -> Any:
        joint.append((id(model), frozenset(ids(items))))
        return real["train_joint"](model, items, *a, **kw)

    def cache_concepts(model: Any, items: Any, *a: Any, **kw: Any) -> Any:
        out = real["cache_concepts"](model, items, *a, **kw)
        cached.append((id(model), ids(items), out))
        return out

    def train_grader(model: Any, p_hat: Any, *a: Any, **kw: Any) -> Any:
        graders.append(p_hat.clone())
        return real["train_grader"](model, p_hat, *a, **kw)

    recipe = importlib.import_module("reccbm.fit")  # the stages as the recipe calls them
    for name, fn in (("train_concepts", train_concepts), ("train_joint", train_joint),
                     ("cache_concepts", cache_concepts), ("train_grader", train_grader)):
        monkeypatch.setattr(recipe, name, fn)
    code, output, run = train_with_cli(tmp_path, backbone, mohler_like_table(60), "--cfg", "stage2.crossfit=2", "--cfg",
                                       "joint.epochs=1")
    assert code == 0, output
    # two cross-fit models, then the run's
    assert len(trained) == 3 and [m for m, _ in joint] == [m for m, _ in trained]
    assert [s for _, s in joint] == [s for _, s in trained]  # each joint stage on its own Stage I's answers
    (m1, s1), (m2, s2), (main, everything) = trained
    assert len({m1, m2, main}) == 3 and s1 | s2 == everything and s1 != s2
    seen = {m1: s1, m2: s2}
    # each cross-fit model caches its own answers once (the head its joint stage starts from), then the others
    out_of_fold = [(m, a, p) for m, a, p in cached if m in seen and set(a) <= everything and not set(a) & seen[m]]
    assert [m for m, _, _ in out_of_fold] == [m1, m2]
    assert set(out_of_fold[0][1]) | set(out_of_fold[1][1]) == everything
    metrics = json.loads((run / "metrics.json").read_text())
    parts = metrics["seeds"][0]["crossfit_parts"]
    assert sorted(parts[0] + parts[1]) == list(range(len(everything)))
    final = graders[-1]  # the run's Stage II: fitted on the out-of-fold outputs, each at its own position
    for part, (_, _, p) in zip(parts, out_of_fold):
        assert torch.equal(final[part], p)
    assert metrics["mean_A_kk"] > 0
    assert "σ² and A_kk are fitted on the outputs for the training answers" not in output
    assert yaml.safe_load((run / "config.yaml").read_text())["stage2"]["crossfit"] == 2


@pytest.mark.parametrize(("args", "message"), [
    (["--cfg", "stage2.crossfit=1"], "crossfit is 0 (off) or a number of parts >= 2, got 1"),
    (["--cfg", "stage2.crossfit=-2"], "crossfit is 0 (off) or a number of parts >= 2, got -2"),
])
def test_a_bad_crossfit_is_refused_before_training(tmp_path: Path, backbone: str, args: list[str],
                                                   message: str) -> None:
    code, output, run = train_with_cli(tmp_path, backbone, mohler_like_table(20), *args)
    assert code == 1 and message in " ".join(output.split()) and "Traceback" not in output
    assert not (run / "metrics.json").exists()


def test_every_switch_is_saved_in_the_run_and_grade_applies_it(tmp_path: Path, backbone: str) -> None:
    cfg_args = [x for kv in ("model.head=level", "model.query_init=rubric", "model.tau=0.5", "model.center=false",
                             "stage1.concept_loss=sum", "joint.epochs=1", "joint.select=last", "stage2.select=nll",
                             "stage1.query_lr_multiplier=3") for x in ("--cfg", kv)]
    code, output, run = train_with_cli(tmp_path, backbone, mohler_like_table(40), *cfg_args)
    assert code == 0, output
    cfg = yaml.safe_load((run / "config.yaml").read_text())
    assert {k: cfg["model"][k] for k in ("head", "query_init", "tau", "center")} == {
        "head": "level", "query_init": "rubric", "tau": 0.5, "center": False}
    assert cfg["stage1"]["concept_loss"] == "sum" and cfg["stage1"]["query_lr_multiplier"] == 3.0
    assert cfg["stage2"]["select"] == "nll" and cfg["joint"]["epochs"] == 1 and cfg["joint"]["select"] == "last"
    log = (run / "train.log").read_text()
    assert "joint epoch 1:" in log and "joint: early stop" not in log
    model, _, meta = reccbm.load_checkpoint(run)
    assert model.U is not None and meta["model_config"]["head"] == "level"
    (tmp_path / "p").mkdir()
    paper = train_with_cli(tmp_path / "p", backbone, mohler_like_table(40), "--preset", "paper")
    assert paper[0] == 0, paper[1]
    cfg = yaml.safe_load((paper[2] / "config.yaml").read_text())
    assert cfg["preset"] == "paper" and cfg["model"]["head"] == "scalar" and cfg["joint"]["epochs"] == 0
    assert cfg["stage2"]["lcec_fit"] == "train" and not cfg["model"]["condition"]
    assert cfg["model"]["query_init"] == "orthogonal"
    res = runner.invoke(app, ["train", "--table", str(tmp_path / "adjudicated.csv"), "--rubric", "mohler",
                              "--preset", "fast"])
    assert res.exit_code == 1 and "unknown preset 'fast'" in res.output


def test_kfold_training_pools_every_item_once_and_resumes(tmp_path: Path, backbone: str) -> None:
    df = mohler_like_table(50)
    code, output, run = train_with_cli(tmp_path, backbone, df, "--folds", "2", "--cfg", "joint.epochs=0")
    assert code == 0, output
    assert "folds" in output and "all folds done: pooled" in output
    assert "2 folds pooled, 50 answers" in output and "per fold" in output and " ± " not in output
    pooled = pd.read_csv(run / "pooled_predictions.csv", dtype={"id": str})
    assert sorted(pooled["id"]) == sorted(df["id"]) and set(pooled["fold"]) == {0, 1}
    truth = df.set_index("id").loc[pooled["id"], "grade"].to_numpy()
    assert (pooled["grade_true"].to_numpy() == truth).all()
    summary = json.loads((run / "folds.json").read_text())
    from reccbm.metrics import grade_metrics

    expect = grade_metrics(pooled["grade_true"], pooled["grade"])
    assert summary["pooled"]["t_acc"] == pytest.approx(expect["t_acc"])
    assert summary["pooled"]["qwk"] == pytest.approx(expect["qwk"], nan_ok=True)
    assert {"majority", "oracle_concepts"} <= set(summary["baselines"]) and len(summary["per_fold"]) == 2
    assert "oracle_t_acc" in summary["pooled"] and (run / "folds.md").is_file()
    from reccbm.metrics import concept_score_reliability

    expected = concept_score_reliability(pooled[[f"{k}_expected" for k in KEYS]].to_numpy() - 1,
                                         pooled[[f"{k}_true" for k in KEYS]].to_numpy() - 1, 2)
    assert summary["score_reliability"]["reliability"] == pytest.approx(expected["reliability"], nan_ok=True)
    assert summary["score_reliability"]["concepts"] == KEYS
    stamp = (run / "fold-0" / "model.safetensors").stat().st_mtime_ns
    code, output, _ = train_with_cli(tmp_path, backbone, df, "--folds", "2", "--cfg", "joint.epochs=0")
    assert code == 0 and "all folds done" in output
    from rubrictool.progress import Progress
    from rubrictool.train import TrainOptions, train_folds

    events: list[Progress] = []
    same: dict[str, dict[str, Any]] = {"model": {"backbone": backbone, "max_len": 32},
                                       "stage1": {"epochs": 2, "lr": 3e-3, "device": "cpu"},
            "joint": {"epochs": 0}}  # what train_with_cli trained: the folds are read back only for the same recipe
    train_folds(load_rubric("mohler"), df, run, folds=2, progress=events.append,
        options=TrainOptions(overrides=same))
    assert [e.info for e in events if e.task == "folds"] == [
        "fold 1: finished earlier, read back", "fold 2: finished earlier, read back", "all folds done: pooled"]
    assert (run / "fold-0" / "model.safetensors").stat().st_mtime_ns == stamp  # not retrained
    # compare: a run against itself differs by exactly 0
    res = runner.invoke(app, ["compare", str(run), str(run), "--n-boot", "50"])
    assert res.exit_code == 0, res.output
    assert "+0.000" in res.output and "[+0.000, +0.000]" in res.output
    res = runner.invoke(app, ["compare", str(run), str(tmp_path)])
    assert res.exit_code == 1 and "not a finished k-fold run" in res.output


def test_kfold_plm_pools_with_the_oracle_concept_baseline(tmp_path: Path, backbone: str) -> None:
    """The PLM predicts no concepts: its pooled table has grade metrics only, and the oracle-concept baseline
    when the table carries concept labels (the k-fold comparison puts both side by side)."""
    df = mohler_like_table(40)
    code, output, run = train_with_cli(tmp_path, backbone, df, "--folds", "2", "--variant", "plm")
    assert code == 0, output
    summary = json.loads((run / "folds.json").read_text())
    assert "c_acc" not in summary["pooled"] and summary["variant"] == "plm"
    assert {"majority", "oracle_concepts"} <= set(summary["baselines"])
    pooled = pd.read_csv(run / "pooled_predictions.csv", dtype={"id": str})
    truth = df.set_index("id").loc[pooled["id"], "FC"].to_numpy()
    assert (pooled["FC_true"].to_numpy() == truth).all()


def test_training_events_of_a_cross_fit_model_are_labelled_as_such() -> None:
    from rubrictool.progress import from_training_event

    plain = from_training_event(reccbm.Event("stage1", "step", 2, 5, 10, 3, loss=0.5))
    assert plain is not None and plain.task == "Stage I epoch 2/3"
    part = from_training_event(reccbm.Event("stage1", "step", 2, 5, 10, 3, loss=0.5, part="cross-fit 1/2"))
    assert part is not None and part.task == "cross-fit 1/2: Stage I epoch 2/3" and part.done == 5
    s2 = from_training_event(reccbm.Event("stage2", "epoch", 4, 1, 1, 30, metrics={"t_f1": 0.25}, part="cross-fit 2/2"))
    assert s2 is not None and s2.task == "cross-fit 2/2: Stage II (≤30 epochs)" and s2.info == "dev T-F1 0.250"


def test_the_plm_baseline_gets_the_encoder_budget_of_the_model_it_is_compared_with(
        tmp_path: Path, backbone: str) -> None:
    """Under a preset with a joint stage, REC-CBM's encoder trains Stage I + joint epochs; the PLM gets the same count
    (an explicit epoch count wins)."""
    from rubrictool.data import split_items
    from rubrictool.train import TrainOptions, preset_config, train_model

    df = mohler_like_table(40)
    base: dict[str, dict[str, Any]] = {"model": {"max_len": 32, "backbone": backbone},
                                       "stage1": {"lr": 3e-3, "device": "cpu", "max_steps_per_epoch": 1},
                                       "joint": {"epochs": 2}}
    train_model("mohler", df, split_items(df), tmp_path / "plm",
                options=TrainOptions(variant="plm", overrides=base))
    cfg = yaml.safe_load((tmp_path / "plm" / "config.yaml").read_text())
    assert cfg["stage1"]["epochs"] == preset_config("default")["stage1"]["epochs"] + 2 and cfg["joint"]["epochs"] == 0
    # on a small table, the steps too: the PLM's Stage I takes the fewest steps of REC-CBM's Stage I and joint stage
    steps = base | {"stage1": base["stage1"] | {"min_steps": 30}, "joint": {"epochs": 2, "min_steps": 12}}
    train_model("mohler", df, split_items(df), tmp_path / "plm-steps",
                options=TrainOptions(variant="plm", overrides=steps))
    assert yaml.safe_load((tmp_path / "plm-steps" / "config.yaml").read_text())["stage1"]["min_steps"] == 42
    given = base | {"stage1": base["stage1"] | {"epochs": 1}}
    train_model("mohler", df, split_items(df), tmp_path / "plm1",
                options=TrainOptions(variant="plm", overrides=given))
    assert yaml.safe_load((tmp_path / "plm1" / "config.yaml").read_text())["stage1"]["epochs"] == 1
    given = steps | {"stage1": steps["stage1"] | {"epochs": 1}}  # an epoch count given: the steps still add up
    train_model("mohler", df, split_items(df), tmp_path / "plm1-steps",
                options=TrainOptions(variant="plm", overrides=given))
    cfg = yaml.safe_load((tmp_path / "plm1-steps" / "config.yaml").read_text())
    assert cfg["stage1"]["epochs"] == 1 and cfg["stage1"]["min_steps"] == 42


@pytest.mark.parametrize(("field", "value", "by"), [
    ("model.race", "false", "--variant, or ablate --variants"),
    ("model.num_grades", "4", "the rubric's grade range"),
    ("stage1.seed", "3", "--seeds"),
])
@pytest.mark.parametrize("how", ["--cfg", "--config"])
def test_a_field_the_run_decides_is_refused_not_silently_replaced(tmp_path: Path, backbone: str, field: str, value: str,
                                                                  by: str, how: str) -> None:
    """On a course that is not Mohler (stats101: levels 0..2, grade 0..2): a config that sets what the variant, the
    rubric or --seeds decide used to train with another value than it said; now it is one line naming what sets it."""
    from tests.support.stats_course import stats_table, train_stats

    section, name = field.split(".")
    if how == "--cfg":
        args, where = ["--cfg", f"{field}={value}"], f"--cfg '{field}={value}'"
    else:
        path = tmp_path / "mine.yaml"
        path.write_text(f"stage2:\n  epochs: 2\n{section}:\n  {name}: {value}\n")
        args, where = ["--config", str(path)], str(path)
    code, output, run = train_stats(tmp_path, backbone, stats_table(30), *args)
    text = " ".join(output.split())
    assert code == 1 and "Traceback" not in output, output
    assert f"{where}: {field} is not set by a config: it comes from {by}" in text and f"remove {field}" in text
    assert not run.exists()


def test_the_library_refuses_a_field_the_run_decides(tmp_path: Path) -> None:
    from rubrictool.data import split_items
    from rubrictool.errors import TrainError
    from rubrictool.train import TrainOptions, train_model
    from tests.support.stats_course import stats_rubric, stats_table

    df = stats_table(30)
    with pytest.raises(TrainError, match="model.plm is not set by a config: it comes from --variant plm"):
        train_model(stats_rubric(tmp_path), df, split_items(df, seed=0), tmp_path / "run",
                    options=TrainOptions(overrides={"model": {"plm": True}}))
    assert not (tmp_path / "run").exists()


def test_first_seed_trains_the_same_recipe_again_from_another_seed(tmp_path: Path, backbone: str) -> None:
    """On a course that is not Mohler (stats101): `--first-seed 1` trains what the second seed of `--seeds 2` trains
    (the same test predictions), and k folds trained from it each record seed 1 and pool as usual."""
    from tests.support.stats_course import stats_table, train_stats

    df = stats_table(30)
    for name in ("two", "one", "folds"):
        (tmp_path / name).mkdir()
    code, output, two = train_stats(tmp_path / "two", backbone, df, "--seeds", "2", "--cfg", "stage2.epochs=2")
    assert code == 0, output
    code, output, one = train_stats(tmp_path / "one", backbone, df, "--first-seed", "1", "--cfg", "stage2.epochs=2")
    assert code == 0, output
    both = json.loads((two / "metrics.json").read_text())["seeds"]
    again = json.loads((one / "metrics.json").read_text())
    assert [s["seed"] for s in both] == [0, 1] and again["selected_seed"] == 1 and len(again["seeds"]) == 1
    assert again["seeds"][0]["test"] == next(s["test"] for s in both if s["seed"] == 1)
    assert again["seeds"][0]["test"] != both[0]["test"]  # another seed trains another model
    code, output, folds = train_stats(tmp_path / "folds", backbone, df, "--first-seed", "1", "--folds", "2",
                                      "--cfg", "stage2.epochs=2")
    assert code == 0, output
    for i in range(2):
        assert json.loads((folds / f"fold-{i}" / "metrics.json").read_text())["selected_seed"] == 1
    assert (folds / "pooled_predictions.csv").is_file()
    (tmp_path / "neg").mkdir()
    code, output, neg = train_stats(tmp_path / "neg", backbone, df, "--first-seed", "-1")
    text = " ".join(output.split())
    assert code == 1 and "the first seed is a whole number >= 0, got -1" in text and "Traceback" not in output
    assert not neg.exists()


def test_batches_by_question_and_the_encoders_dropout_train_a_course_that_is_not_mohler(tmp_path: Path,
                                                                                         backbone: str) -> None:
    """On stats101: `--cfg stage1.answers_per_question=2 --cfg stage1.encoder_dropout=0.05` train, the run's config
    keeps both, and its model is another than the default recipe's on the same table; a dropout of 1 or more is refused
    in one line that names the field, with nothing written."""
    import yaml

    from tests.support.stats_course import stats_table, train_stats

    df = stats_table(30)
    for name in ("plain", "levers", "bad"):
        (tmp_path / name).mkdir()
    code, output, plain = train_stats(tmp_path / "plain", backbone, df, "--cfg", "stage2.epochs=2")
    assert code == 0, output
    code, output, run = train_stats(tmp_path / "levers", backbone, df, "--cfg", "stage2.epochs=2",
                                    "--cfg", "stage1.answers_per_question=2", "--cfg", "stage1.encoder_dropout=0.05")
    assert code == 0, output
    cfg = yaml.safe_load((run / "config.yaml").read_text())
    assert cfg["stage1"]["answers_per_question"] == 2 and cfg["stage1"]["encoder_dropout"] == 0.05
    assert (run / "test_predictions.csv").read_text() != (plain / "test_predictions.csv").read_text()
    code, output, bad = train_stats(tmp_path / "bad", backbone, df, "--cfg", "stage1.encoder_dropout=1.5")
    text = " ".join(output.split())
    assert code == 1 and "encoder_dropout is a probability below 1" in text and "Traceback" not in output
    assert not bad.exists()
