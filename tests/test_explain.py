"""Decision traces, overrides, interventions and partial correlations (reccbm.explain + rubrictool explain)."""

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
from rubrictool.report import explain_items, intervention_curves, open_run, split_rows, table_rows
from rubrictool.report.page import trace_file
from tests.support.inspect_runs import inspect_run, png_ok

runner = CliRunner()
pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return inspect_run(tmp_path_factory.mktemp("explain"))


@pytest.fixture(scope="module")
def tiny_scalar(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The paper's scalar head W μ_post (no level weights U), with LCEC."""
    return inspect_run(tmp_path_factory.mktemp("scalar"), "--cfg", "model.head=scalar")


# ------------------------------------------------------------------ maths
def test_partial_correlations_of_a_known_precision() -> None:
    # a chain 0 - 1 - 2: 0 and 2 are independent given 1, so their partial correlation is exactly 0
    omega = np.array([[2.0, -1.0, 0.0], [-1.0, 2.0, -1.0], [0.0, -1.0, 2.0]])
    r = reccbm.partial_correlations(omega)
    assert r[0, 1] == pytest.approx(0.5) and r[1, 2] == pytest.approx(0.5) and r[0, 2] == pytest.approx(0.0)
    assert np.allclose(np.diag(r), 1.0) and np.allclose(r, r.T)
    # the same numbers as the correlation of regression residuals under the covariance Ω⁻¹
    rng = np.random.default_rng(0)
    B = rng.normal(size=(4, 4))
    omega = B @ B.T + 4 * np.eye(4)
    x = rng.multivariate_normal(np.zeros(4), np.linalg.inv(omega), size=200_000)
    rest = x[:, 2:]
    res = [x[:, i] - rest @ np.linalg.lstsq(rest, x[:, i], rcond=None)[0] for i in (0, 1)]
    assert reccbm.partial_correlations(omega)[0, 1] == pytest.approx(np.corrcoef(res)[0, 1], abs=0.01)


def test_concept_order_ranks_by_uncertainty() -> None:
    p = np.array([[[0.9, 0.1], [0.5, 0.5], [0.7, 0.3]]])  # (1, 3, 2): concept 1 most uncertain, 0 most confident
    assert reccbm.concept_order(p, "uncertain").tolist() == [[1, 2, 0]]
    assert reccbm.concept_order(p, "confident").tolist() == [[0, 2, 1]]


@pytest.mark.parametrize("which", ["tiny", "tiny_scalar"])
def test_contributions_plus_bias_equal_the_logit(which: str, request: pytest.FixtureRequest) -> None:
    run_dir, table = request.getfixturevalue(which)
    run = open_run(run_dir, data=table)
    traces = explain_items(run, split_rows(run, "train"))
    assert len(traces) > 10
    for t in traces:
        assert t.contributions_sum() == pytest.approx(t.logit, abs=1e-4)
        assert t.grade_prob >= t.runner_up_prob and t.grade != t.runner_up
        assert sum(t.grade_probs) == pytest.approx(1.0, abs=1e-5)


def test_an_override_moves_the_grade_the_way_the_weights_say(tiny_scalar: tuple[Path, Path]) -> None:
    run = open_run(tiny_scalar[0], data=tiny_scalar[1])
    items = split_rows(run, "train")
    model = run.model
    assert model.U is None and model.lcec is not None
    before = explain_items(run, items)
    after = explain_items(run, items, {"FC": 3})
    assert all(t.overrides == {"FC": 3} and t.concepts[0].set_to == 3 for t in after)
    # Eq. 22: Δ logits = W Δμ_post. The default conditions LCEC on the expert's FC (its s̃ = 1, known exactly; the other
    # concepts move through Ω: reccbm/lcec.py); the paper's Eq. 20 would give Δμ_post = A Δs̃ instead
    assert model.config.condition
    W = model.W.weight.detach().double().numpy()  # (S+1, K)
    moves = []
    for b, a in zip(before, after):
        s_b = torch.tensor([[c.s_tilde for c in b.concepts]], dtype=torch.float64)  # (1, K)
        s_a = s_b.clone()
        s_a[0, 0] = 1.0
        observed = torch.zeros_like(s_a, dtype=torch.bool)
        observed[0, 0] = True
        with torch.no_grad():
            dmu = (model.lcec(s_a, observed) - model.lcec(s_b)).numpy()[0]  # (K,)
            assert abs(float(model.lcec(s_a, observed)[0, 0]) - 1.0) < 1e-9  # the expert's level, exactly
        moves.append(dmu)
        expected = W @ dmu  # (S+1,)
        logits_b = np.log(np.asarray(b.grade_probs))
        logits_a = np.log(np.asarray(a.grade_probs_after))
        moved = logits_a - logits_b  # equal to Δ logits up to one constant (the softmax's normaliser)
        assert np.allclose(moved - moved.mean(), expected - expected.mean(), atol=1e-4)
    # and the direction: raising FC raises the expected grade iff the weights favour higher grades for FC
    slope = np.polyfit(np.arange(W.shape[0]), W @ np.mean(moves, axis=0), 1)[0]
    exp_b = np.mean([np.dot(np.arange(6), t.grade_probs) for t in before])
    exp_a = np.mean([np.dot(np.arange(6), t.grade_probs_after) for t in after])
    assert np.sign(exp_a - exp_b) == np.sign(slope)


def test_oracle_interventions_keep_accuracy_and_damaging_ones_lower_it(tiny: tuple[Path, Path]) -> None:
    run = open_run(tiny[0], data=tiny[1])
    items = split_rows(run, "train")  # more answers than the tiny test split: less noise
    preds = reccbm.predict(run.model, reccbm.EncodedItems(reccbm.encode_inputs(
        run.tokenizer, list(items["question"]), list(items["response"]), list(items["reference"]), 32)),
        run.tokenizer.pad_token_id)
    assert preds.p_hat is not None
    gold_c = items[[f"_c_{k}" for k in run.keys]].to_numpy()
    y = items["_y"].to_numpy()
    curves = intervention_curves(run, preds.p_hat, gold_c, y, random_repeats=3)
    K = len(run.keys)
    assert set(curves["k"]) == set(range(K + 1)) and set(curves["strategy"]) == {"oracle", "wrong", "random"}
    for order in ("uncertain", "confident"):
        c = curves[curves["order"] == order].set_index(["strategy", "k"])["t_acc"]
        base = c[("oracle", 0)]
        assert c[("wrong", 0)] == base == c[("random", 0)]  # k = 0 is no intervention at all
        noise = 2 / np.sqrt(len(items))
        assert min(c[("oracle", k)] for k in range(K + 1)) >= base - noise
        assert c[("wrong", K)] < base  # the most damaging levels flip correct grades
        assert c[("wrong", K)] <= c[("oracle", K)] - 0.2


def test_intervention_levels_wrong_never_picks_the_gold_level(tiny: tuple[Path, Path]) -> None:
    run = open_run(tiny[0], data=tiny[1])
    rng = np.random.default_rng(0)
    p = torch.softmax(torch.randn(7, len(run.keys), 3), -1).numpy()
    gold = rng.integers(0, 3, (7, len(run.keys)))
    wrong = reccbm.intervention_levels(run.model, p, gold, rng.integers(0, 6, 7), "wrong")
    assert wrong.shape == gold.shape and (wrong != gold).all()


# ------------------------------------------------------------------ the command
def test_explain_prints_the_trace_and_writes_page_csv_and_pngs(tiny: tuple[Path, Path], tmp_path: Path) -> None:
    run_dir, table = tiny
    ids = json.loads((run_dir / "split.json").read_text())["test"][:2]
    out = tmp_path / "explain"
    res = runner.invoke(app, ["explain", "--run", str(run_dir), "--items", str(table), *ids, "--set", "FC=3,CC=1",
                              "--out", str(out)])
    assert res.exit_code == 0, res.output
    text = " ".join(res.output.split())
    assert "runner-up" in text and "= logit" in text and "with FC=3, CC=1: grade" in text
    df = pd.read_csv(out / "explain.csv", dtype={"id": str})
    assert sorted(set(df["id"])) == sorted(ids) and len(df) == 2 * 8
    for i in ids:
        part = df[df["id"] == i]
        assert part["contribution"].sum() + part["bias"].iloc[0] == pytest.approx(part["logit"].iloc[0], abs=1e-4)
    assert set(df.loc[df["concept"] == "FC", "set_to"]) == {3}
    for i in ids:
        w, h = png_ok(out / trace_file(i))
        assert w > 100 and h > 100
    page = (out / "explain.html").read_text()
    assert "data:image/png;base64," in page and "http" not in page.replace("http-equiv", "")


def test_explain_errors_are_one_clear_line(tiny: tuple[Path, Path]) -> None:
    run_dir, table = tiny
    res = runner.invoke(app, ["explain", "--run", str(run_dir), "--items", str(table), "nope"])
    assert res.exit_code == 1 and "not in the table, e.g. 'nope'" in " ".join(res.output.split())
    ids = json.loads((run_dir / "split.json").read_text())["test"][:1]
    res = runner.invoke(app, ["explain", "--run", str(run_dir), "--items", str(table), *ids, "--set", "FC=9"])
    assert res.exit_code == 1 and "outside the rubric scale 1..3" in " ".join(res.output.split())
    res = runner.invoke(app, ["explain", "--run", str(run_dir), "--items", str(table), *ids, "--set", "XX=1"])
    assert res.exit_code == 1 and "concept key of the rubric" in " ".join(res.output.split())
    assert "Traceback" not in res.output


def test_grade_set_overrides_a_concept_for_every_response(tiny: tuple[Path, Path], tmp_path: Path) -> None:
    run_dir, table = tiny
    outs = {}
    for name, extra in (("plain", []), ("set", ["--set", "FC=1,TU=3"])):
        outs[name] = tmp_path / f"{name}.csv"
        res = runner.invoke(app, ["grade", "--run", str(run_dir), "--items", str(table), "--out", str(outs[name]),
                                  *extra])
        assert res.exit_code == 0, res.output
    plain, sets = (pd.read_csv(outs[n]) for n in ("plain", "set"))
    assert (sets["FC_level"] == 1).all() and (sets["TU_level"] == 3).all()
    assert (sets["FC_expected"] == 1).all() and (sets["CC_level"] == plain["CC_level"]).all()
    assert not np.allclose(sets["grade_logit"], plain["grade_logit"])
    contrib = sets[[c for c in sets.columns if c.endswith("_contribution")]].sum(axis=1) + sets["grade_bias"]
    assert np.allclose(contrib, sets["grade_logit"], atol=1e-4)
    # the library gives the same numbers as explain's override
    run = open_run(run_dir, data=table)
    t = explain_items(run, table_rows(run, [str(sets["id"].iloc[0])]), {"FC": 1, "TU": 3})[0]
    assert t.grade_after == sets["model_grade"].iloc[0]
    assert t.grade_after_prob == pytest.approx(sets["grade_prob"].iloc[0], abs=1e-5)


def test_a_plm_run_has_nothing_to_explain(tmp_path: Path) -> None:
    run_dir, table = inspect_run(tmp_path, "--variant", "plm", n=30)
    ids = json.loads((run_dir / "split.json").read_text())["test"][:1]
    res = runner.invoke(app, ["explain", "--run", str(run_dir), "--items", str(table), *ids])
    assert res.exit_code == 1 and "PLM run" in res.output and "no decision trace" in " ".join(res.output.split())
    res = runner.invoke(app, ["intervene", "--run", str(run_dir), "--table", str(table)])
    assert res.exit_code == 1 and "no concepts to intervene on" in res.output


def test_a_vanilla_run_is_explained_without_attention(tmp_path: Path) -> None:
    run_dir, table = inspect_run(tmp_path, "--variant", "vanilla", n=30)
    ids = json.loads((run_dir / "split.json").read_text())["test"][:1]
    res = runner.invoke(app, ["explain", "--run", str(run_dir), "--items", str(table), *ids, "--out",
                              str(tmp_path / "x")])
    assert res.exit_code == 0, res.output
    page = (tmp_path / "x" / "explain.html").read_text()
    assert "No RACE attention in this run" in page and 'class="tok"' not in page
    run = open_run(run_dir, data=table)
    t = explain_items(run, table_rows(run, ids))[0]
    assert t.alpha is None and all(c.top_tokens == [] for c in t.concepts)
    assert t.contributions_sum() == pytest.approx(t.logit, abs=1e-4)


def test_explain_new_answers_without_labels(tiny: tuple[Path, Path], tmp_path: Path) -> None:
    from tests.support.tiny_models import KEYS, mohler_like_table

    new = mohler_like_table(5, seed=9).drop(columns=[*KEYS, "grade"]).assign(id=lambda d: "new-" + d["id"])
    new.to_csv(tmp_path / "new.csv", index=False)
    res = runner.invoke(app, ["explain", "--run", str(tiny[0]), "--items", str(tmp_path / "new.csv"), "--id",
                              "new-q.3", "--out", str(tmp_path / "x")])
    assert res.exit_code == 0, res.output
    df = pd.read_csv(tmp_path / "x" / "explain.csv")
    assert set(df["id"]) == {"new-q.3"} and df["gold"].isna().all() and len(df) == len(KEYS)
    assert "(correct" not in res.output
    assert "gold" not in (tmp_path / "x" / "explain.html").read_text().split("<body>")[1]


def test_explain_names_whole_words_not_subword_pieces() -> None:
    from rubrictool.report.explain import top_words, whole_words

    text = "Cellular respiration, energy and energy."
    # WordPiece pieces: "Cell" "##ular" "res" "##piration" "," "energy" "and" "energy" "."
    spans = [(0, 4), (4, 8), (9, 12), (12, 20), (20, 21), (22, 28), (29, 32), (33, 39), (39, 40)]
    weights = [0.05, 0.05, 0.10, 0.30, 0.01, 0.20, 0.02, 0.25, 0.02]
    words = whole_words(text, spans, weights)
    assert [w for w, _ in words] == ["Cellular", "respiration", ",", "energy", "and", "energy", "."]
    assert dict(words)["respiration"] == pytest.approx(0.40)
    top = top_words(text, spans, weights, n=3)
    assert [w for w, _ in top] == ["respiration", "energy", "Cellular"]  # each word once, no punctuation
