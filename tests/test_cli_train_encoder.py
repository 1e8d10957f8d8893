"""`rubrictool train --encoder train|frozen|auto` on a course that is not Mohler (chemistry lab: SAFE, METH, UNIT on
levels 0..2, grades 0..10), with a tiny BERT that knows the course's words: what the run records and what the saved
model's encoder is."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import torch
import yaml
from typer.testing import CliRunner

import reccbm
from rubrictool.cli import app
from tests.support.courses import CHEMLAB_KEYS, COURSE_RUBRIC, chemlab_levels_of, chemlab_marks, chemlab_words
from tests.support.tiny_models import build_backbone

pytestmark = pytest.mark.usefixtures("one_thread")

runner = CliRunner()


def chemlab_table(students: int = 10) -> pd.DataFrame:
    """The chemistry-lab marks as an adjudicated table: levels 0..2 from the answers' wording, the tutor's 0..10
    mark."""
    marks = chemlab_marks(students)
    levels = pd.DataFrame([chemlab_levels_of(a) for a in marks["Answer"]]) - 1  # 1..3 -> the rubric's 0..2
    return pd.DataFrame({"id": [f"{s}-q{i % 4}" for i, s in enumerate(marks["Student ID"])],
                         "question": marks["Lab question"], "response": marks["Answer"],
                         "reference": marks["Model answer"], "grade": marks["Mark (0-10)"]}).join(levels[CHEMLAB_KEYS])


@pytest.fixture(scope="module")
def course(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("chemlab")
    (d / "chemlab.yaml").write_text(COURSE_RUBRIC, encoding="utf-8")
    chemlab_table().to_csv(d / "adjudicated.csv", index=False)
    return {"rubric": d / "chemlab.yaml", "table": d / "adjudicated.csv",
            "backbone": Path(build_backbone(d, "bert", words=chemlab_words()))}


def _train(course: dict[str, Path], out: Path, *extra: str) -> Any:
    return runner.invoke(app, ["train", "--table", str(course["table"]), "--rubric", str(course["rubric"]),
                               "--backbone", str(course["backbone"]), "--epochs", "1", "--max-len", "96",
                               "--out", str(out), "--device", "cpu", "--cfg", "joint.epochs=1",
                               "--cfg", "stage2.epochs=3", *extra])


def _encoder_changed(course: dict[str, Path], run: Path) -> bool:
    model, _, _ = reccbm.load_checkpoint(run)
    pretrained = reccbm.TextEncoder.from_pretrained(str(course["backbone"])).state_dict()
    return any(not torch.equal(v, model.encoder.state_dict()[k]) for k, v in pretrained.items())


def test_frozen_keeps_the_pretrained_encoder_and_says_so_in_the_run(tmp_path: Path, course: dict[str, Path]) -> None:
    res = _train(course, tmp_path / "frozen", "--encoder", "frozen")
    assert res.exit_code == 0, res.output
    assert "reccbm (encoder frozen): test metrics" in res.output
    run = tmp_path / "frozen"
    config = yaml.safe_load((run / "config.yaml").read_text())
    assert config["stage1"]["encoder"] == "frozen"
    split = json.loads((run / "split.json").read_text())
    assert config["encoder"] == {"asked": "frozen", "used": "frozen", "frozen_below": 300,
                                 "labelled_answers": len(split["train"]) + len(split["dev"])}
    assert not _encoder_changed(course, run)
    assert reccbm.read_meta(run)["variant"] == "reccbm"
    res = _train(course, tmp_path / "trained", "--encoder", "train")
    assert res.exit_code == 0, res.output
    assert _encoder_changed(course, tmp_path / "trained")


@pytest.mark.parametrize("threshold,used", [(1000, "frozen"), (20, "train")])
def test_auto_freezes_below_the_threshold_set_by_cfg(tmp_path: Path, course: dict[str, Path], threshold: int,
                                                     used: str) -> None:
    out = tmp_path / "auto"
    res = _train(course, out, "--cfg", "stage1.encoder=auto", "--cfg", f"stage1.frozen_below={threshold}",
                 "--variant", "plm")
    assert res.exit_code == 0, res.output
    config = yaml.safe_load((out / "config.yaml").read_text())
    assert config["encoder"]["asked"] == "auto" and config["encoder"]["used"] == used
    assert config["encoder"]["frozen_below"] == threshold and config["stage1"]["encoder"] == used
    assert _encoder_changed(course, out) == (used == "train")
    assert f"note: encoder {used}: --encoder auto" in " ".join(res.output.split())


def test_a_small_courses_folds_keep_one_encoder_under_the_default(tmp_path: Path, course: dict[str, Path]) -> None:
    """`train --folds 5` on a small course, nothing but the defaults: below 300 labelled answers the default preset
    freezes the encoder, so the five folds keep one encoder file between them, not one each (`--preset plain`
    fine-tunes it: one file per fold)."""
    out = tmp_path / "folds"
    res = _train(course, out, "--folds", "5")
    assert res.exit_code == 0, res.output
    assert len(list((out / "shared").glob("encoder-*.safetensors"))) == 1
    assert json.loads((out / "folds.json").read_text())["encoder"] == ["frozen"] * 5
    weights = sum(f.stat().st_size for f in out.rglob("*.safetensors"))
    encoder = next((out / "shared").glob("encoder-*.safetensors")).stat().st_size
    assert weights < 1.5 * encoder  # the five folds' own weights (heads, LCEC) are small beside the one encoder
    res = _train(course, tmp_path / "plain", "--folds", "5", "--preset", "plain")
    assert res.exit_code == 0, res.output
    assert len(list((tmp_path / "plain" / "shared").glob("encoder-*.safetensors"))) == 5


def test_an_unknown_encoder_is_a_one_line_error(tmp_path: Path, course: dict[str, Path]) -> None:
    res = _train(course, tmp_path / "bad", "--encoder", "fixed")
    assert res.exit_code == 1
    assert "unknown encoder 'fixed'; use train or frozen or auto" in res.output
    assert "Traceback" not in res.output and not (tmp_path / "bad").exists()


def test_the_weights_average_on_a_course_that_is_not_mohler(tmp_path: Path, course: dict[str, Path]) -> None:
    """`--cfg stage1.ema=…` on the chemistry lab (its encoder trained, and frozen as a small course's default would
    have it): the run trains, records the decay, and keeps other weights than the same run without it; a decay of 1
    is refused in one line."""
    kept = {}
    for ema in ("0", "0.9"):
        for encoder in ("train", "frozen"):
            out = tmp_path / f"{encoder}-{ema}"
            res = _train(course, out, "--encoder", encoder, "--cfg", f"stage1.ema={ema}")
            assert res.exit_code == 0, res.output
            assert yaml.safe_load((out / "config.yaml").read_text())["stage1"]["ema"] == float(ema)
            kept[encoder, ema] = reccbm.load_checkpoint(out)[0].state_dict()
    for encoder in ("train", "frozen"):
        a, b = kept[encoder, "0"], kept[encoder, "0.9"]
        assert any(not torch.equal(a[k], b[k]) for k in a), encoder
    res = _train(course, tmp_path / "bad", "--cfg", "stage1.ema=1")
    assert res.exit_code != 0 and "ema" in res.output and "Traceback" not in res.output


def test_padded_answers_held_down_on_a_course_that_is_not_mohler(tmp_path: Path, course: dict[str, Path]) -> None:
    """`--cfg stage1.padding=…` on the chemistry lab (lab questions beside each other in a batch, so both kinds of
    padded answer are built): the run trains, records the weight, and keeps other weights than the same run without
    it; a negative weight is refused in one line that names the field, with nothing written."""
    kept = {}
    for padding in ("0", "2"):
        out = tmp_path / f"padding-{padding}"
        res = _train(course, out, "--encoder", "train", "--cfg", f"stage1.padding={padding}",
                     "--cfg", "stage1.padding_per_batch=2")
        assert res.exit_code == 0, res.output
        assert yaml.safe_load((out / "config.yaml").read_text())["stage1"]["padding"] == float(padding)
        kept[padding] = reccbm.load_checkpoint(out)[0].state_dict()
    a, b = kept["0"], kept["2"]
    assert any(not torch.equal(a[k], b[k]) for k in a)
    res = _train(course, tmp_path / "bad", "--cfg", "stage1.padding=-1")
    assert res.exit_code != 0 and "padding is >= 0" in " ".join(res.output.split()) and "Traceback" not in res.output
    assert not (tmp_path / "bad").exists()


def _grades_in_the_rubrics_range(out: Path) -> None:
    """The chemistry lab run's test answers graded with levels 0..2 and marks 0..10."""
    graded = pd.read_csv(out / "test_predictions.csv")
    levels = graded[[f"{k}_level" for k in CHEMLAB_KEYS]].to_numpy()
    assert ((levels >= 0) & (levels <= 2)).all() and graded["grade"].between(0, 10).all()


def _refused(course: dict[str, Path], out: Path, message: str, *args: str) -> None:
    """`train` with ``args`` fails in one line holding ``message``, without a traceback, and writes nothing at
    ``out``."""
    res = _train(course, out, *args)
    assert res.exit_code != 0 and message in " ".join(res.output.split())
    assert "Traceback" not in res.output and not out.exists()


def test_ordinal_concept_classifiers_on_a_course_that_is_not_mohler(tmp_path: Path, course: dict[str, Path]) -> None:
    """`--cfg model.concept_head=ordinal` on the chemistry lab (levels 0..2, marks 0..10): the run trains, records the
    head, keeps one direction per concept, and grades its answers with levels in the rubric's range; an unknown head is
    refused in one line that names the field, with nothing written."""
    out = tmp_path / "ordinal"
    res = _train(course, out, "--encoder", "train", "--cfg", "model.concept_head=ordinal")
    assert res.exit_code == 0, res.output
    assert yaml.safe_load((out / "config.yaml").read_text())["model"]["concept_head"] == "ordinal"
    model, _, _ = reccbm.load_checkpoint(out)
    assert isinstance(model, reccbm.RecCBM) and tuple(model.bottleneck.V.shape)[:2] == (3, 1)
    _grades_in_the_rubrics_range(out)
    _refused(course, tmp_path / "bad", "unknown concept head 'cumulative'", "--cfg", "model.concept_head=cumulative")


def test_the_layer_mix_on_a_course_that_is_not_mohler(tmp_path: Path, course: dict[str, Path]) -> None:
    """`--cfg model.layer_mix=true` on the chemistry lab: the run trains and records the mix, its checkpoint holds one
    weight per layer state (the embeddings' and each layer's), and it grades in the rubric's range; beside
    stage1.train_top_layers it is refused in one line, with nothing written."""
    out = tmp_path / "mix"
    res = _train(course, out, "--encoder", "train", "--cfg", "model.layer_mix=true")
    assert res.exit_code == 0, res.output
    assert yaml.safe_load((out / "config.yaml").read_text())["model"]["layer_mix"] is True
    model, _, _ = reccbm.load_checkpoint(out)
    assert isinstance(model, reccbm.RecCBM) and isinstance(model.encoder, reccbm.TextEncoder)
    assert model.encoder.mix is not None and model.encoder.mix.w.numel() == model.encoder.n_layers() + 1
    _grades_in_the_rubrics_range(out)
    _refused(course, tmp_path / "bad", "model.layer_mix reads every layer", "--encoder", "train", "--cfg",
             "model.layer_mix=true", "--cfg", "stage1.train_top_layers=1")


def test_two_readings_a_step_on_a_course_that_is_not_mohler(tmp_path: Path, course: dict[str, Path]) -> None:
    """`--cfg stage1.rdrop=1.0 --cfg stage1.rdrop_share=0.5` on the chemistry lab: the run trains with half of each
    Stage I batch read twice, records both fields and grades in the rubric's range; a negative weight and a share above
    1 are refused in one line that names the field, nothing written."""
    out = tmp_path / "rdrop"
    res = _train(course, out, "--encoder", "train", "--cfg", "stage1.rdrop=1.0", "--cfg", "stage1.rdrop_share=0.5")
    assert res.exit_code == 0, res.output
    stage1 = yaml.safe_load((out / "config.yaml").read_text())["stage1"]
    assert (stage1["rdrop"], stage1["rdrop_share"]) == (1.0, 0.5)
    _grades_in_the_rubrics_range(out)
    _refused(course, tmp_path / "bad", "rdrop is a weight >= 0", "--cfg", "stage1.rdrop=-1")
    _refused(course, tmp_path / "bad2", "rdrop_share is the share of a batch read twice", "--cfg",
             "stage1.rdrop_share=2")


def test_copies_that_must_read_the_same_on_a_course_that_is_not_mohler(tmp_path: Path, course: dict[str, Path],
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """`--cfg stage1.rdrop=1.0 --cfg stage1.rdrop_views=[typo,order,name]` on the chemistry lab: every training answer
    reaches R-Drop with an edited copy beside it; the run trains, records the edits and grades in the rubric's
    range; an unknown edit, and the edits without R-Drop, are refused in one line that names the field, nothing
    written."""
    import reccbm.estimator

    seen: list[Any] = []
    real_fit = reccbm.fit
    monkeypatch.setattr(reccbm.estimator, "fit", lambda train, *a, **k: seen.append(train) or real_fit(train, *a, **k))
    out = tmp_path / "views"
    res = _train(course, out, "--encoder", "train", "--cfg", "stage1.rdrop=1.0", "--cfg",
                 "stage1.rdrop_views=[typo,order,name]")
    assert res.exit_code == 0, res.output
    train = seen[0]
    assert train.views is not None and len(train.views) == len(train)
    assert sum(v != f for v, f in zip(train.views, train.features)) >= len(train) // 2  # most answers edited
    assert yaml.safe_load((out / "config.yaml").read_text())["stage1"]["rdrop_views"] == ["typo", "order", "name"]
    _grades_in_the_rubrics_range(out)
    _refused(course, tmp_path / "bad", "unknown stage1.rdrop_views edit 'synonym'", "--cfg", "stage1.rdrop=1.0",
             "--cfg", "stage1.rdrop_views=[synonym]")
    _refused(course, tmp_path / "bad2", "set stage1.rdrop > 0", "--cfg", "stage1.rdrop_views=[typo]")


def test_sentence_orders_on_a_course_that_is_not_mohler(tmp_path: Path, course: dict[str, Path]) -> None:
    """`--cfg model.sentence_orders=6` on the chemistry lab (answers of three or four sentences, marks 0..10): the
    run keeps the option; `grade` gives an answer and the same answer with its sentences in another order the same
    mark and probability; the report reads the answers as `grade` does; 1 is refused in one line, nothing written."""
    from reccbm.orders import sentences
    from rubrictool.report.run import predict_with_attention
    from rubrictool.train.runs import open_run

    out = tmp_path / "orders"
    res = _train(course, out, "--cfg", "model.sentence_orders=6")
    assert res.exit_code == 0, res.output
    assert json.loads((out / "model.json").read_text())["model_config"]["sentence_orders"] == 6
    _grades_in_the_rubrics_range(out)
    table = pd.read_csv(course["table"]).head(8)
    assert all(len(sentences(r)) >= 3 for r in table["response"])
    turned = table.assign(id=[f"{i}-turned" for i in table["id"]],
                          response=[" ".join(sentences(r)[1:] + sentences(r)[:1]) for r in table["response"]])
    items = pd.concat([table, turned])[["id", "question", "reference", "response"]]
    data, graded_at = tmp_path / "items.csv", tmp_path / "graded.csv"
    items.to_csv(data, index=False)
    res = runner.invoke(app, ["grade", "--run", str(out), "--items", str(data), "--out", str(graded_at)])
    assert res.exit_code == 0, res.output
    graded = pd.read_csv(graded_at).set_index("id")
    for i in table["id"]:
        assert graded.loc[f"{i}-turned", "model_grade"] == graded.loc[i, "model_grade"]
        assert graded.loc[f"{i}-turned", "grade_prob"] == pytest.approx(graded.loc[i, "grade_prob"], abs=1e-5)
    shown = predict_with_attention(open_run(out), items.reset_index(drop=True)).preds
    np.testing.assert_allclose(shown.grade_probs.max(1), graded.loc[items["id"], "grade_prob"], atol=1e-5)
    _refused(course, tmp_path / "bad", "sentence_orders is 0 (read once) or a number of orders >= 2", "--cfg",
             "model.sentence_orders=1")
