"""experiments/configs: every screened configuration is either a `--config` file the current code accepts (its
header says how to run it) or says in its header which retired field keeps it to the revision that measured it."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from rubrictool.errors import TrainError
from rubrictool.train import load_train_config

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = sorted((ROOT / "experiments" / "configs").glob("*.yaml"))
RUNS_NOW = "# Run on the current code: python benchmarks/folds.py --config experiments/configs/"
RETIRED = "# Not a --config file for the current code: "


def test_there_are_configs() -> None:
    assert len(CONFIGS) >= 10


@pytest.mark.parametrize("path", CONFIGS, ids=[p.name for p in CONFIGS])
def test_a_config_runs_on_the_current_code_or_says_why_not(path: Path) -> None:
    header = "".join(line for line in path.read_text(encoding="utf-8").splitlines(keepends=True) if line.startswith("#"))
    assert "git checkout " in header, f"{path.name}: no revision it was measured at"
    if RUNS_NOW in header:
        assert f"{RUNS_NOW}{path.name}" in header, f"{path.name}: the command names another file"
        load_train_config(path)  # accepted as it is
        return
    assert RETIRED in header, f"{path.name}: says neither how to run it now nor why it cannot"
    with pytest.raises(TrainError, match="unknown") as refused:
        load_train_config(path)
    fields = re.findall(r"unknown (\w+) field\(s\) \[([^\]]+)\]", str(refused.value))
    named = [f"{sec}.{name.strip(chr(39))}" for sec, names in fields for name in names.split(", ")]
    assert named and all(n in header for n in named), f"{path.name}: the header does not name {named}"


def _curve_reach(argv: list[str]) -> int:
    return int(_script("curve_reach").main(argv))


def test_curve_reach_reads_the_all_cell_from_a_kept_benchmark_fold_and_refuses_another_split(tmp_path: Path,
                                                                                             capsys: Any) -> None:
    """experiments/curve_reach.py: the 90 % point of a curve whose full-data cell is fold 0 of kept pooled
    predictions, and one line (no output written) when the kept folds are not the curve's."""
    import json

    import pandas as pd

    grades = [5] * 6 + [4] * 3 + [2]  # fold 0's test answers: the majority grade (5) on 6 of 10
    pooled = pd.DataFrame({"id": [str(i) for i in range(30)], "fold": [0] * 10 + [1] * 20,
                           "grade_true": grades + [5] * 14 + [3] * 6, "grade": [5] * 30})
    kept = tmp_path / "kept"
    kept.mkdir()
    pooled.to_csv(kept / "pooled_predictions.csv", index=False)
    meta = {"folds": 2, "by": "question", "fold_seed": 0, "n_items": 30,
            "per_fold": [{"t_acc": 0.8, "qwk": 0.7, "t_f1": 0.5}, {"t_acc": 0.9, "qwk": 0.8, "t_f1": 0.6}]}
    (kept / "folds.json").write_text(json.dumps(meta))
    curve = tmp_path / "curve"
    curve.mkdir()
    cols = {"fold": 0, "repeat": 0, "variant": "reccbm", "n_dev": 1, "t_f1": 0.3, "majority_t_acc": 0.6,
            "majority_qwk": 0.0, "majority_t_f1": 0.1, "encoder_epochs": 0, "train_seconds": 1.0, "encoder": "frozen"}
    pd.DataFrame([{**cols, "size": "5", "n_train": 5, "t_acc": 0.55, "qwk": 0.2},
                  {**cols, "size": "10", "n_train": 10, "t_acc": 0.7, "qwk": 0.66}]).to_csv(curve / "curve.csv", index=False)
    (curve / "curve.json").write_text(json.dumps({"settings": {"folds": 2, "by": "question", "fold_seed": 0}}))

    assert _curve_reach([str(curve), "--all-from", str(kept), "--out", str(tmp_path / "out")]) == 0
    reading = json.loads((tmp_path / "out" / "curve.json").read_text())["reading"]
    assert reading["full"] == {"n_train": 20.0, "qwk": 0.7, "t_acc": 0.8, "majority_t_acc": 0.6}
    assert reading["reach"]["size"] == "10" and reading["reach"]["target"] == pytest.approx(0.63)
    assert 5 < reading["reach"]["n_estimate"] <= 10 and (tmp_path / "out" / "curve.png").stat().st_size > 0

    assert _curve_reach([str(curve), "--all-from", str(kept), "--out", str(curve)]) == 2  # over its own input
    assert "all" not in set(pd.read_csv(curve / "curve.csv", dtype={"size": str})["size"])
    capsys.readouterr()
    assert _curve_reach([str(curve), "--all-from", str(kept), "--out", str(tmp_path / "out")]) == 0  # its own output again

    pooled.assign(grade_true=[5] * 10 + [5] * 14 + [3] * 6).to_csv(kept / "pooled_predictions.csv", index=False)
    assert _curve_reach([str(curve), "--all-from", str(kept), "--out", str(tmp_path / "other")]) == 2
    assert "not the curve's" in capsys.readouterr().err and not (tmp_path / "other").exists()


def _script(name: str) -> Any:
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, ROOT / "experiments" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_question_offsets_finds_a_reader_that_reads_each_question_too_high_or_too_low(tmp_path: Path) -> None:
    """A reader whose expected levels are the truth plus an offset per question (and a little noise): the offsets are
    most of its squared error, removing them as the labels give them reads nearly every level, and a few labelled
    answers per question recover much of that; a reader without offsets gains nothing."""
    import numpy as np
    import pandas as pd

    mod = _script("question_offsets")
    rng = np.random.default_rng(0)
    rows = []
    for qi in range(30):
        off = rng.choice([-0.8, 0.0, 0.8])
        for a in range(12):
            t = int(rng.integers(1, 4))
            for_k = {}
            for k, scale in (("A", 1.0), ("B", 0.0)):
                e = float(np.clip(t + scale * off + rng.normal(0, 0.1), 1, 3))
                for_k |= {f"{k}_true": t, f"{k}_expected": e, f"{k}_level": int(np.clip(np.rint(e), 1, 3))}
            rows.append({"id": f"{qi}.{a}", "fold": qi % 5} | for_k)
    d = pd.DataFrame(rows)
    out = mod.study(d, ns=(3,), draws=3)
    A, B = out["concepts"]["A"], out["concepts"]["B"]
    assert A["offset_share_of_squared_error"] > 0.5 and A["c_acc_oracle_offset"] > A["c_acc"] + 0.2
    assert B["c_acc"] > 0.95 and B["c_acc_oracle_offset"] >= B["c_acc"] - 0.01
    assert out["labelled_answers_per_question"]["3"]["gain"] > 0.05
    path = tmp_path / "pooled.csv"
    d.to_csv(path, index=False)
    assert mod.main([str(path), "--n", "3", "--draws", "2", "--json", str(tmp_path / "o.json")]) == 0
    assert json.loads((tmp_path / "o.json").read_text())["questions"] == 30
    (tmp_path / "bad.csv").write_text("id,grade\n1.1,5\n")
    assert mod.main([str(tmp_path / "bad.csv")]) == 2


def test_question_offsets_says_how_far_the_concepts_share_one_offset_per_question() -> None:
    """Three concepts read with one offset per question shared by all: the first component holds nearly all of the
    offsets' variance and they correlate near 1; with an offset of its own per concept, neither."""
    import numpy as np
    import pandas as pd

    mod = _script("question_offsets")
    rng = np.random.default_rng(1)
    for shared in (True, False):
        rows = []
        for qi in range(60):
            offs = np.full(3, rng.normal(0, 0.5)) if shared else rng.normal(0, 0.5, 3)
            for a in range(10):
                t = rng.integers(1, 4, 3)
                e = np.clip(t + offs + rng.normal(0, 0.1, 3), 1, 3)
                rows.append({"id": f"{qi}.{a}", "fold": qi % 5} | {
                    f"{k}_{c}": v for j, k in enumerate("ABC")
                    for c, v in (("true", int(t[j])), ("expected", float(e[j])), ("level", int(np.rint(e[j]))))})
        out = mod.study(pd.DataFrame(rows), ns=(1,), draws=1)["shared_offsets"]
        if shared:
            assert out["first_component_share"] > 0.9 and out["mean_pairwise_correlation"] > 0.8
        else:
            assert out["first_component_share"] < 0.6 and abs(out["mean_pairwise_correlation"]) < 0.3


def test_question_offsets_prior_em_reads_a_question_whose_levels_are_not_the_training_shares(tmp_path: Path) -> None:
    """prior_em: each question's answers mostly at one level, p̂ calibrated to the training shares (equal) and weakly
    informative: re-estimating the question's shares raises C-Acc, more with α 0 than with a strong pull to the
    training shares; ``--prior-em`` puts it in the JSON."""
    import numpy as np
    import pandas as pd

    mod = _script("question_offsets")
    rng = np.random.default_rng(2)
    rows = []
    for qi in range(30):
        mode = int(rng.integers(1, 4))
        for a in range(20):
            t = mode if rng.random() < 0.8 else int(rng.integers(1, 4))
            like = np.full(3, 0.25)
            like[t - 1] = 0.5  # the reader sees the true level with a likelihood ratio of 2 only
            like[rng.integers(0, 3)] += 0.3  # and a distractor
            pr = like / like.sum()
            row = {"id": f"{qi}.{a}", "fold": qi % 5, "A_true": t, "A_level": int(pr.argmax()) + 1,
                   "A_expected": float(pr @ [1, 2, 3])} | {f"A_p{lv}": float(pr[lv - 1]) for lv in (1, 2, 3)}
            rows.append(row)
    d = pd.DataFrame(rows)
    out = mod.prior_em(d, (0.0, 1000.0))
    assert out["alpha"]["0"]["c_acc"] > out["c_acc"] + 0.15
    assert abs(out["alpha"]["1000"]["c_acc"] - out["c_acc"]) < out["alpha"]["0"]["c_acc"] - out["c_acc"]
    d.to_csv(tmp_path / "pooled.csv", index=False)
    assert mod.main([str(tmp_path / "pooled.csv"), "--n", "3", "--draws", "1", "--prior-em", "0,5",
                     "--json", str(tmp_path / "o.json")]) == 0
    assert set(json.loads((tmp_path / "o.json").read_text())["prior_em"]["alpha"]) == {"0", "5"}
    assert mod.main([str(tmp_path / "pooled.csv"), "--n", "3", "--draws", "1", "--prior-em", "0,x"]) == 2
    assert mod.main([str(tmp_path / "pooled.csv"), "--n", "3", "--draws", "1", "--prior-em", "-1"]) == 2


def test_question_offsets_predicts_an_offset_that_the_references_reading_carries() -> None:
    """offsets_from_readings: where the reference's reading moves with the question's offset the fit on the other folds
    removes it (C-Acc up, r near 1); where the reading is the same for every question it has nothing to go on."""
    import numpy as np
    import pandas as pd

    mod = _script("question_offsets")
    rng = np.random.default_rng(1)
    rows, reads = [], []
    for qi in range(40):
        off = rng.choice([-0.8, 0.0, 0.8])
        reads.append({"question": str(qi), "fold": qi % 5, "A_expected": 2.0 + off, "B_expected": 3.0})
        for a in range(10):
            t = int(rng.integers(1, 4))
            e = float(t + off + rng.normal(0, 0.1))
            row = {"id": f"{qi}.{a}", "fold": qi % 5}
            for k in ("A", "B"):
                row |= {f"{k}_true": t, f"{k}_expected": e, f"{k}_level": int(np.clip(np.rint(e), 1, 3))}
            rows.append(row)
    out = mod.offsets_from_readings(pd.DataFrame(rows), pd.DataFrame(reads))
    A, B = out["concepts"]["A"], out["concepts"]["B"]
    assert A["r_reading_offset"] > 0.95 and A["c_acc_predicted_offset"] > A["c_acc"] + 0.2
    assert np.isnan(B["r_reading_offset"]) and B["mean_reading"] == 3.0


def test_question_offsets_predicts_an_offset_that_the_questions_texts_carry(tmp_path: Path) -> None:
    """offsets_from_features: where a question's offset follows its reference's length the fit on the other folds'
    questions removes it; where the reader reads every answer at the middle level whatever the question, its offset
    follows neither the texts nor the reading, and nothing is gained."""
    import numpy as np
    import pandas as pd

    mod = _script("question_offsets")
    rng = np.random.default_rng(2)
    rows, texts = [], []
    for qi in range(40):
        n_ref = int(rng.choice([4, 30]))
        off_a = 0.8 if n_ref == 30 else -0.8
        reference = " ".join(f"w{j}" for j in range(n_ref))
        for a in range(10):
            t = int(rng.integers(1, 4))
            row = {"id": f"{qi}.{a}", "fold": qi % 5}
            for k, e in (("A", float(np.clip(t + off_a + rng.normal(0, 0.1), 0.5, 3.5))), ("B", 2.0 + rng.normal(0, 0.05))):
                row |= {f"{k}_true": t, f"{k}_expected": e, f"{k}_level": int(np.clip(np.rint(e), 1, 3))}
            rows.append(row)
            texts.append({"id": f"{qi}.{a}", "question": "why?", "response": "w0 w1 x", "reference": reference})
    d = pd.DataFrame(rows)
    feats = mod.question_features(pd.DataFrame(texts))
    assert list(feats.columns) == list(mod.FEATURES) and len(feats) == 40
    out = mod.offsets_from_features(d, feats)
    A, B = out["concepts"]["A"], out["concepts"]["B"]
    assert A["r_predicted_offset"] > 0.9 and A["c_acc_predicted_offset"] > A["c_acc"] + 0.2
    assert B["c_acc_predicted_offset"] < B["c_acc"] + 0.05
    with pytest.raises(ValueError, match="no texts for question"):
        mod.offsets_from_features(d, feats.iloc[1:])


def test_question_offsets_refuses_a_folder_that_is_not_a_kfold_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import pandas as pd

    pooled = tmp_path / "pooled.csv"
    pd.DataFrame({"id": ["1.1", "1.2", "2.1", "2.2"], "fold": [0, 0, 1, 1], "A_true": [1, 2, 3, 2],
                  "A_expected": [1.2, 2.1, 2.8, 2.0], "A_level": [1, 2, 3, 2]}).to_csv(pooled, index=False)
    assert _script("question_offsets").main([str(pooled), "--n", "1", "--draws", "1", "--fold-runs", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "--fold-runs" in err and "no fold-*/" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_question_review_gains_where_each_question_is_read_too_high_or_too_low(backbone: str) -> None:
    """Synthetic folds whose reader reads every answer of a question about two thirds of a level too high or too low
    (level shares a soft bump around the read level): a few reviewed answers per question shift the others back
    (C-Acc up, CI above 0); a reader without offsets loses nothing."""
    import numpy as np

    import reccbm
    from tests.support.tiny_models import tiny_model

    mod = _script("question_review")
    model, _ = tiny_model(backbone, K=2)
    model.eval()
    rng = np.random.default_rng(0)

    def folds(offsets: bool) -> list[dict[str, Any]]:
        out = []
        for f in range(2):
            q = np.repeat([f"{f}:{i}" for i in range(8)], 10)
            c = rng.integers(0, 3, size=(len(q), 2))
            shift = np.repeat(rng.choice([-0.65, 0.65], size=8), 10)[:, None] if offsets else 0.0
            read = c + shift + rng.normal(0, 0.1, size=c.shape)  # (N, K) the level the reader leans to
            p = np.exp(-((np.arange(3) - read[..., None]) ** 2) / (2 * 0.4**2))
            p /= p.sum(-1, keepdims=True)
            base = reccbm.shift_levels(model, reccbm.Predictions(np.zeros((len(q), 1)), p), np.zeros(2))
            out.append({"fold": f, "model": model, "p": p, "c": c, "y": c.sum(1) % 4, "q": q, "base": base})
        return out

    off = mod.study(folds(True), n=5, strength=0.5, draws=2, boots=30, seed=0)
    assert off["c_acc_shifted"] > off["c_acc"] + 0.1 and off["gain"]["c_acc"]["ci95"][0] > 0
    none = mod.study(folds(False), n=5, strength=0.5, draws=2, boots=0, seed=0)
    assert none["c_acc"] > 0.95 and none["c_acc_shifted"] >= none["c_acc"] - 0.02


def test_question_head_learns_the_grade_from_other_folds_readings(backbone: str) -> None:
    """Synthetic folds read by an untrained head: the head refitted on the other folds' readings (their grade = the
    concepts' sum, clipped to 0..3) grades each fold's answers far better (exact grades +0.3) than the untrained head, with the
    question-resampled CI above 0; the median rule is never worse than argmax there by more than chance."""
    import numpy as np

    import reccbm
    from reccbm.config import StageIIConfig
    from tests.support.tiny_models import tiny_model

    mod = _script("question_head")
    model, _ = tiny_model(backbone, K=2)
    model.eval()
    rng = np.random.default_rng(0)
    folds = []
    for f in range(3):
        q = np.repeat([f"{i}" for i in range(8)], 12)
        c = rng.integers(0, 3, size=(len(q), 2))
        p = np.full((len(q), 2, 3), 0.05)
        np.put_along_axis(p, c[..., None], 0.9, axis=-1)
        base = reccbm.shift_levels(model, reccbm.Predictions(np.zeros((len(q), 1)), p), np.zeros(2))
        folds.append({"fold": f, "model": model, "p": p, "c": c, "y": np.clip(c.sum(1), 0, 3), "q": q, "base": base})
    cfg = StageIIConfig(epochs=30, patience=30, lr=0.05, lcec_fit="moments")
    rows: dict[str, list[Any]] = {k: [] for k in ("q", "y", "g0", "g1")}
    for fd in folds:
        probs = mod.refit(fd, [o for o in folds if o is not fd], cfg, "head", 0.25, fd["fold"])
        assert probs.shape == (96, 4) and np.allclose(probs.sum(1), 1, atol=1e-5)
        rows["q"].append(np.char.add(f"{fd['fold']}:", fd["q"]))
        rows["y"].append(fd["y"])
        rows["g0"].append(fd["base"].grades)
        rows["g1"].append(mod.decide(probs, "argmax"))
    r = {k: np.concatenate(v) for k, v in rows.items()} | {"top": 3}
    assert np.mean(r["g1"] == r["y"]) > 0.7 and np.mean(r["g1"] == r["y"]) > np.mean(r["g0"] == r["y"]) + 0.3
    gain = mod.paired(r, boots=50, seed=0)
    assert gain["t_acc"]["ci95"][0] > 0.2 and gain["qwk"]["mean"] > 0.3
    assert folds[0]["base"].grades.tolist() == reccbm.shift_levels(  # the fold's own model is left as it was
        model, reccbm.Predictions(np.zeros((96, 1)), folds[0]["p"]), np.zeros(2)).grades.tolist()
    probs = np.array([[0.1, 0.3, 0.2, 0.4], [0.6, 0.1, 0.1, 0.2]])
    assert mod.decide(probs, "argmax").tolist() == [3, 0] and mod.decide(probs, "median").tolist() == [2, 0]


def test_seed_ensemble_averages_the_members_shares_and_grades_them_with_the_first_head(tmp_path: Path,
                                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """experiments/seed_ensemble.py on a tiny trained run copied as a two-fold folder: the first member's head gives
    its own grades back from its own shares; a member equal to it leaves every level and grade as they were; a member
    sure of level 3 everywhere moves each level to the argmax of the two members' mean shares; an answer a member lacks
    is one line; an --out that would overwrite a member's predictions is refused."""
    import shutil

    import numpy as np
    import pandas as pd

    from tests.support.tiny_models import tiny_bert_run

    mod = _script("seed_ensemble")
    run = tiny_bert_run(tmp_path / "t")
    first = tmp_path / "folds"
    for i in range(2):  # the same model twice, its test answers named apart (an answer is in one fold)
        shutil.copytree(run, first / f"fold-{i}")
        preds = pd.read_csv(run / "test_predictions.csv", dtype={"id": str})
        preds.assign(id=preds["id"] + f"/{i}").to_csv(first / f"fold-{i}" / "test_predictions.csv", index=False)
    mine = pd.concat([pd.read_csv(first / f"fold-{i}" / "test_predictions.csv", dtype={"id": str}).assign(fold=i)
                      for i in range(2)], ignore_index=True)
    table, check = mod.ensemble(first, [mine])
    assert check == {"own_grades_reproduced": 1.0, "n": len(mine)}
    assert table["grade"].tolist() == mine["grade"].tolist()
    keys = [c[: -len("_level")] for c in mine.columns if c.endswith("_level")]
    assert all(table[f"{k}_level"].tolist() == mine[f"{k}_level"].tolist() for k in keys)
    sure = mine.copy()
    for k in keys:
        sure[[f"{k}_p1", f"{k}_p2", f"{k}_p3"]] = [0.0, 0.0, 1.0]
    table, _ = mod.ensemble(first, [sure])
    for k in keys:
        mean = (mine[[f"{k}_p1", f"{k}_p2", f"{k}_p3"]].to_numpy() + np.array([0.0, 0.0, 1.0])) / 2
        assert table[f"{k}_level"].tolist() == (mean.argmax(1) + 1).tolist()
    levels = [f"{k}_level" for k in keys]
    assert (table[levels].to_numpy() >= mine[levels].to_numpy()).all()
    assert (table[levels].to_numpy() != mine[levels].to_numpy()).any()  # the second member moved some levels
    with pytest.raises(SystemExit, match="missing from a --with file"):
        mod.ensemble(first, [mine.iloc[1:]])
    member = tmp_path / "pooled_predictions.csv"
    mine.to_csv(member, index=False)
    # --out the first member's folder, or the folder of a --with file: refused, nothing written
    for out in (first, tmp_path):
        monkeypatch.setattr("sys.argv", ["seed_ensemble.py", str(first), "--with", str(member), "--out", str(out)])
        with pytest.raises(SystemExit, match="it would overwrite a member's predictions"):
            mod.main()
    assert not (first / "pooled_predictions.csv").exists() and not (first / "ensemble.json").exists()


def test_seed_ensemble_reads_members_together_for_the_concepts_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """experiments/seed_ensemble.py without a first member's weights: the --with files' level shares averaged per
    answer, whatever order their rows are in; two readers that each miss other answers are right together where
    their mean is; C-Acc per member and of the mean with paired CIs; the pooled file carries what question_offsets.py
    reads; another split or a missing answer is one line; --out onto a member is refused and writes nothing."""
    import numpy as np
    import pandas as pd

    mod = _script("seed_ensemble")
    rng = np.random.default_rng(0)
    n = 60
    true = rng.integers(3, 5, size=(n, 2))  # a scale 2–4 with no answer at 2: the scale is read beside the shares
    ids = [f"{q}.{a}" for q in range(6) for a in range(10)]

    def member(wrong: np.ndarray) -> pd.DataFrame:
        # sure of the gold level (0.6) where right; where wrong, 0.55 on the next level up (or down) and 0.45 on gold
        d = pd.DataFrame({"id": ids, "fold": [i // 20 for i in range(n)]})
        for j, k in enumerate(("A", "B")):
            p = np.zeros((n, 3))
            p[np.arange(n), true[:, j] - 2] = 0.6
            other = np.where(true[:, j] < 4, true[:, j] - 1, true[:, j] - 3)
            p[np.arange(n), other] = 0.4
            w = wrong[:, j]
            p[w] = 0.0
            p[np.where(w)[0], true[w, j] - 2] = 0.45
            p[np.where(w)[0], other[w]] = 0.55
            for m in range(3):
                d[f"{k}_p{m + 1}"] = p[:, m]
            d[f"{k}_level"] = p.argmax(1) + 2
            d[f"{k}_true"] = true[:, j]
        return d

    wrong1 = np.zeros((n, 2), bool)
    wrong1[:20] = True
    wrong2 = np.zeros((n, 2), bool)
    wrong2[20:40] = True
    a, b = member(wrong1), member(wrong2)
    table, summary = mod.concepts_together([a, b.iloc[::-1]], ["a", "b"], n_boot=200)
    assert summary["members"] == {"a": pytest.approx(2 / 3), "b": pytest.approx(2 / 3)}
    # where one is wrong the other is surer of the gold level (0.6 + 0.45 > 0.4 + 0.55): together every level is right
    assert summary["c_acc"] == 1.0 and table["A_level"].tolist() == a["A_true"].tolist()
    assert summary["vs_members_mean"]["diff"] == pytest.approx(1 / 3) and summary["vs_members_mean"]["lo"] > 0
    for k in ("A", "B"):
        mean = (a[[f"{k}_p1", f"{k}_p2", f"{k}_p3"]].to_numpy() + b[[f"{k}_p1", f"{k}_p2", f"{k}_p3"]].to_numpy()) / 2
        assert np.allclose(table[[f"{k}_p1", f"{k}_p2", f"{k}_p3"]].to_numpy(), mean)
        assert np.allclose(table[f"{k}_expected"], mean @ np.array([2.0, 3.0, 4.0]))
    assert _script("question_offsets").concepts_of(table) == ["A", "B"]
    with pytest.raises(SystemExit, match="b: its folds are not a's"):
        mod.concepts_together([a, b.assign(fold=b["fold"][::-1].to_numpy())], ["a", "b"])
    with pytest.raises(SystemExit, match="b: it lacks answers of a"):
        mod.concepts_together([a, b.iloc[1:]], ["a", "b"])
    with pytest.raises(SystemExit, match="two or more"):
        mod.concepts_together([a], ["a"])
    with pytest.raises(SystemExit, match="b: no column B_p3"):
        mod.concepts_together([a, b.drop(columns=["B_p3"])], ["a", "b"])
    (tmp_path / "a").mkdir()
    a.to_csv(tmp_path / "a" / "pooled_predictions.csv", index=False)
    b.to_csv(tmp_path / "b.csv", index=False)
    args = ["seed_ensemble.py", "--with", str(tmp_path / "a" / "pooled_predictions.csv"), "--with", str(tmp_path / "b.csv")]
    before = (tmp_path / "a" / "pooled_predictions.csv").read_bytes()
    monkeypatch.setattr("sys.argv", [*args, "--out", str(tmp_path / "a")])
    with pytest.raises(SystemExit, match="it would overwrite a member's predictions"):
        mod.main()
    assert (tmp_path / "a" / "pooled_predictions.csv").read_bytes() == before
    assert not (tmp_path / "a" / "ensemble.json").exists()
    monkeypatch.setattr("sys.argv", [*args, "--out", str(tmp_path / "together")])
    mod.main()
    assert "the 2 read together: C-Acc 1.000" in capsys.readouterr().out
    kept = json.loads((tmp_path / "together" / "ensemble.json").read_text())
    assert kept["c_acc"] == 1.0 and len(pd.read_csv(tmp_path / "together" / "pooled_predictions.csv")) == n


def test_mc_dropout_reads_with_the_dropout_on_and_grades_the_mean_shares(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """experiments/mc_dropout.py on a tiny trained run copied as a one-fold folder: read once with the dropout off the
    fold gives its kept levels back; read with it on, the shares move with the seed, stay distributions, and the grade
    is the fold's head on their mean; an encoder without dropout, no readings, an --out over the run, or folds without
    their weights are refused in one line."""
    import shutil

    import numpy as np
    import pandas as pd
    import torch

    import reccbm
    from tests.support.tiny_models import tiny_bert_run

    mod = _script("mc_dropout")
    run = tiny_bert_run(tmp_path / "t")
    folds = tmp_path / "folds"
    shutil.copytree(run, folds / "fold-0")
    kept = pd.read_csv(run / "test_predictions.csv", dtype={"id": str})
    table, check = mod.mc_run(folds, passes=3, seed=0)
    assert check["own_levels_reproduced"] == 1.0 and check["levels"] == len(kept) * 8 and check["passes"] == 3
    keys = [c[: -len("_level")] for c in kept.columns if c.endswith("_level")]
    shares = np.stack([table[[f"{k}_p{m}" for m in (1, 2, 3)]].to_numpy() for k in keys], axis=1)  # (N, K, 3)
    assert np.allclose(shares.sum(-1), 1, atol=1e-5)
    assert (table[[f"{k}_level" for k in keys]].to_numpy() == shares.argmax(-1) + 1).all()
    model, _, _ = reccbm.load_checkpoint(folds / "fold-0")
    assert table["grade"].tolist() == (_script("seed_ensemble").graded(model, shares).argmax(-1)).tolist()
    other, _ = mod.mc_run(folds, passes=3, seed=1)
    p = [f"{keys[0]}_p{m}" for m in (1, 2, 3)]
    assert not np.allclose(table[p].to_numpy(), other[p].to_numpy())  # the dropout was on: another seed reads otherwise
    assert not np.allclose(table[p].to_numpy(), kept[p].to_numpy())
    bare = torch.nn.Module()
    bare.encoder = torch.nn.Linear(2, 2)
    with pytest.raises(SystemExit, match="no dropout to keep on"):
        mod.read_shares(bare, [], 0, 2, 0)
    for argv, message in ((["--passes", "0", "--out", str(tmp_path / "o")], "give 1 or more"),
                          (["--out", str(folds)], "overwrite the run's own predictions")):
        monkeypatch.setattr("sys.argv", ["mc_dropout.py", str(folds), *argv])
        with pytest.raises(SystemExit, match=message):
            mod.main()
    assert not (folds / "pooled_predictions.csv").exists()
    bare_run = tmp_path / "no-weights"
    (bare_run / "fold-0").mkdir(parents=True)
    shutil.copy(run / "test_predictions.csv", bare_run / "fold-0" / "test_predictions.csv")
    with pytest.raises(SystemExit, match="give a k-fold run whose folds keep their weights"):
        mod.mc_run(bare_run, passes=2)


def _pooled_run(root: Path, name: str, rows: list[dict[str, object]]) -> Path:
    import pandas as pd

    run = root / name
    run.mkdir(parents=True)
    pd.DataFrame(rows).to_csv(run / "pooled_predictions.csv", index=False)
    return run


def test_reader_compare_pairs_a_candidate_with_one_training_or_the_mean_of_several(tmp_path: Path,
                                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """experiments/reader_compare.py: a candidate right on every answer against a training right on half of them is
    ahead by the difference, with a CI above 0; against two trainings (right on half and on all) A is their mean, so
    the difference halves, and a candidate equal to the better training is level with it alone; runs of other
    answers are refused in one line."""
    import numpy as np

    mod = _script("reader_compare")
    keys = mod.KEYS
    n = 200
    rng = np.random.default_rng(0)
    truth_grade = rng.integers(0, 6, n)
    truth_level = rng.integers(1, 4, (n, len(keys)))

    def rows(right: np.ndarray) -> list[dict[str, object]]:
        out = []
        for i in range(n):
            g = int(truth_grade[i]) if right[i] else int((truth_grade[i] + 3) % 6)
            r: dict[str, object] = {"id": f"q{i % 20}.{i}", "fold": i % 2, "grade": g, "grade_oracle": g,
                                    "grade_true": int(truth_grade[i]), "majority": 5}
            for j, k in enumerate(keys):
                t = int(truth_level[i, j])
                r |= {f"{k}_true": t, f"{k}_level": t if right[i] else 1 + t % 3}
            out.append(r)
        return out

    half = _pooled_run(tmp_path, "half", rows(np.arange(n) % 2 == 0))
    full = _pooled_run(tmp_path, "full", rows(np.ones(n, bool)))
    cand = _pooled_run(tmp_path, "cand", rows(np.ones(n, bool)))
    one = mod.compare(mod.pooled(cand), mod.pooled(half), mod.pooled(half), n_boot=200)
    assert one["n_items"] == n and one["trainings_in_a"] == 1 and one["folds"] == [0, 1]
    assert one["paired"]["c_acc"]["diff"] == pytest.approx(0.5) and one["paired"]["c_acc"]["lo"] > 0.4
    assert one["paired"]["t_acc"]["diff"] == pytest.approx(0.5) and one["a"]["t_acc"] == pytest.approx(0.5)
    two = mod.compare(mod.pooled(cand), [mod.pooled(half), mod.pooled(full)], mod.pooled(half), n_boot=200)
    assert two["trainings_in_a"] == 2 and two["a"]["c_acc"] == pytest.approx(0.75)
    assert two["paired"]["c_acc"]["diff"] == pytest.approx(0.25) and two["per_concept"][keys[0]]["a"] == pytest.approx(0.75)
    assert mod.compare(mod.pooled(cand), [mod.pooled(full)], mod.pooled(full), n_boot=50)["paired"]["qwk"]["diff"] == 0
    out = tmp_path / "o.json"
    mod.main([str(cand), "--against", str(half), "--against", str(full), "--boots", "20", "--json", str(out)])
    assert "their mean" in capsys.readouterr().out
    assert json.loads(out.read_text())["against"] == [str(half), str(full)]
    other = _pooled_run(tmp_path, "other", [r | {"id": f"x{i}"} for i, r in enumerate(rows(np.ones(n, bool)))])
    with pytest.raises(SystemExit, match="the runs share no answer"):
        mod.main([str(cand), "--against", str(other)])


def test_transfer_semantic_features_read_an_answer_against_its_reference(tmp_path: Path) -> None:
    """experiments/transfer.py's semantic probe: an answer that is its reference is matched whole (precision, recall,
    F, cosine and both coverage shares 1), an answer of other words less; the probe and its stack join the table."""
    import numpy as np
    import pandas as pd

    from tests.support.tiny_models import build_backbone

    mod = _script("transfer")
    backbone = build_backbone(tmp_path / "bb", "bert")
    refs = pd.Series(["the stack pops the last element", "a queue is first in first out"] * 2)
    answers = pd.Series(["the stack pops the last element", "a queue is first in first out",
                         "constructors", "by reference"])
    f = mod.semantic_features(answers, refs, backbone)
    assert f.shape == (4, len(mod.SEMANTIC))
    assert np.allclose(f[:2], 1.0, atol=1e-4)
    assert (f[2:, :4] < 1.0 - 1e-3).all() and (f[2:, 4:] <= 1.0).all()
    rng = np.random.default_rng(0)
    n = 60
    items = pd.DataFrame({"id": [f"{i % 6}.{i}" for i in range(n)], "response": ["x y"] * n, "reference": ["x z"] * n})
    pooled = pd.DataFrame({"id": items["id"], "fold": np.arange(n) % 3, "A_true": rng.integers(1, 4, n),
                           "A_level": rng.integers(1, 4, n)})
    for m in (1, 2, 3):
        pooled[f"A_p{m}"] = 1 / 3
    table = mod.concept_transfer(pooled, items, ["A"], semantic=rng.normal(size=(n, len(mod.SEMANTIC))))
    assert {"semantic", "stacked_semantic"} <= set(table.columns)
    assert "semantic" not in mod.concept_transfer(pooled, items, ["A"]).columns


def test_weight_mix_reads_with_the_encoder_between_pretrained_and_fine_tuned(tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """experiments/weight_mix.py on a tiny trained run copied as a one-fold folder: λ = 1 gives the fold's kept levels
    and grades back; λ = 0 reads as the pretrained encoder under the fold's heads; λ = 0.5 reads otherwise than both
    ends; the fold's weights are left as trained; a bad --mix or an --out over the run is refused in one line."""
    import shutil

    import numpy as np
    import pandas as pd
    import torch

    import reccbm
    from reccbm.encoder import TextEncoder
    from tests.support.tiny_models import tiny_bert_run

    mod = _script("weight_mix")
    mc = _script("mc_dropout")
    run = tiny_bert_run(tmp_path / "t", "--encoder", "train")  # 40 answers: trained, not the small table's frozen
    folds = tmp_path / "folds"
    shutil.copytree(run, folds / "fold-0")
    kept = pd.read_csv(run / "test_predictions.csv", dtype={"id": str})
    tables, check = mod.mix_run(folds, [1.0, 0.5, 0.0])
    assert check["own_levels_reproduced"] == 1.0 and check["levels"] == len(kept) * 8
    keys = [c[: -len("_level")] for c in kept.columns if c.endswith("_level")]
    p = [f"{k}_p{m}" for k in keys for m in (1, 2, 3)]
    assert tables[1.0]["grade"].tolist() == kept["grade"].tolist()
    np.testing.assert_allclose(tables[1.0][p].to_numpy(), kept[p].to_numpy(), atol=1e-5)
    model, tok, _ = reccbm.load_checkpoint(folds / "fold-0")
    trained = {k: v.clone() for k, v in model.state_dict().items()}
    model.encoder.load_state_dict(TextEncoder.from_pretrained(model.config.backbone).state_dict())
    from rubrictool.grade import inputs_for

    table = pd.read_csv(folds / "fold-0" / "table.csv", dtype=str).set_index("id")
    items = reccbm.EncodedItems(inputs_for(model, tok, table.loc[kept["id"]].reset_index()))
    pre = mc.read_shares(model, items, tok.pad_token_id, 0, 0)[0]  # (N, K, 3) under the fold's heads
    np.testing.assert_allclose(tables[0.0][p].to_numpy(), pre.reshape(len(kept), -1), atol=1e-5)
    half = tables[0.5][p].to_numpy()
    assert not np.allclose(half, kept[p].to_numpy(), atol=1e-4) and not np.allclose(half, tables[0.0][p].to_numpy(), atol=1e-4)
    again, _, _ = reccbm.load_checkpoint(folds / "fold-0")  # the fold's files are as they were
    assert all(torch.equal(v, trained[k]) for k, v in again.state_dict().items())
    for bad in ("1.5", "x", ""):
        with pytest.raises(SystemExit, match="between 0 and 1"):
            mod.parse_mix(bad)
    monkeypatch.setattr("sys.argv", ["weight_mix.py", str(folds), "--out", str(folds)])
    with pytest.raises(SystemExit, match="it would overwrite the run's own predictions"):
        mod.main()
    out = tmp_path / "mixes"
    monkeypatch.setattr("sys.argv", ["weight_mix.py", str(folds), "--mix", "1,0.5", "--out", str(out)])
    mod.main()
    written = pd.read_csv(out / "mix-1" / "pooled_predictions.csv", dtype={"id": str})
    assert written["grade"].tolist() == kept["grade"].tolist()
    assert json.loads((out / "weight_mix.json").read_text())["mix"] == [1.0, 0.5]
    assert sorted(p.name for p in out.rglob("*") if p.is_file()) == ["pooled_predictions.csv", "pooled_predictions.csv",
                                                                      "weight_mix.json"]  # no temporary file left
