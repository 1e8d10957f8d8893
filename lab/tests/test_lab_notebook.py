"""The lab's smoke test, run from its own folder (``python -m pytest lab``): the lab reaches the packages through
their public API only, every import it makes still resolves, every screened configuration either loads or says why
not, the index names every script, the kept tables reproduce from the kept predictions, and a few studies run on
small synthetic tables. Nothing here trains a model or reads the Mohler data."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from reccbm.metrics import concept_metrics, grade_metrics
from rubrictool.errors import TrainError
from rubrictool.train import load_train_config

LAB = Path(__file__).resolve().parent.parent
ROOT = LAB.parent
SCRIPTS = sorted(p for p in LAB.glob("*.py") if p.name != "conftest.py")
LAB_CODE = [*SCRIPTS, *sorted((LAB / "tests").glob("*.py"))]
CONFIGS = sorted((LAB / "configs").glob("*.yaml"))
RUNS_NOW = "# Run on the current code: python benchmarks/folds.py --config lab/configs/"
RETIRED = "# Not a --config file for the current code: "


def _imports(path: Path) -> list[tuple[int, str, list[str]]]:
    """(line, module, names) of every import in a file, top level or inside a function."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module != "__future__":
            out.append((node.lineno, "." * node.level + (node.module or ""), [a.name for a in node.names]))
        elif isinstance(node, ast.Import):
            out.extend((node.lineno, a.name, []) for a in node.names)
    return out


@pytest.mark.parametrize("path", LAB_CODE, ids=[p.name for p in LAB_CODE])
def test_the_lab_uses_the_public_api_only(path: Path) -> None:
    """No private name from rubrictool or reccbm (nor from another lab script), no tests.support, no sys.path edits."""
    for line, mod, names in _imports(path):
        where = f"{path.relative_to(ROOT)}:{line}"
        assert not mod.startswith(("tests", "benchmarks", ".")), f"{where} imports {mod}"
        assert not any(part.startswith("_") for part in mod.split(".")), f"{where} imports {mod}"
        assert not [n for n in names if n.startswith("_")], f"{where} imports private {names} from {mod}"
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Attribute) and ast.unparse(node.value) == "sys.path":
            pytest.fail(f"{path.relative_to(ROOT)}:{node.lineno} edits sys.path")


@pytest.mark.parametrize("path", SCRIPTS, ids=[p.name for p in SCRIPTS])
def test_every_import_of_a_lab_script_resolves(path: Path) -> None:
    """What each script imports from the packages (or from a sibling script) still exists: a renamed function or module
    breaks this test, not a study run months later."""
    for line, mod, names in _imports(path):
        root = mod.split(".")[0]
        if (LAB / f"{root}.py").is_file():  # a sibling script: the names it defines at top level
            tree = ast.parse((LAB / f"{root}.py").read_text(encoding="utf-8"))
            defined = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
            defined |= {t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets
                        if isinstance(t, ast.Name)}
            assert set(names) <= defined, f"{path.name}:{line}: {sorted(set(names) - defined)} not in {root}.py"
        elif root in ("rubrictool", "reccbm"):
            module = importlib.import_module(mod)
            missing = [n for n in names if not hasattr(module, n) and importlib.util.find_spec(f"{mod}.{n}") is None]
            assert not missing, f"{path.name}:{line}: {missing} not in {mod}"
        else:  # the standard library or an installed package, never a folder of this checkout
            assert importlib.util.find_spec(root) is not None, f"{path.name}:{line}: no module {root}"
            assert not (ROOT / root).is_dir(), f"{path.name}:{line}: imports the checkout's {root}/"


def test_the_lab_index_names_every_study_script() -> None:
    """lab/README.md is where a reader finds a study: every script has its row there."""
    text = (LAB / "README.md").read_text(encoding="utf-8")
    assert len(SCRIPTS) > 10
    missing = sorted(p.name for p in SCRIPTS if f"| `{p.name}` |" not in text)
    assert not missing, "not in lab/README.md's table: " + ", ".join(missing)


def test_there_are_configs() -> None:
    assert len(CONFIGS) >= 10


@pytest.mark.parametrize("path", CONFIGS, ids=[p.name for p in CONFIGS])
def test_a_config_runs_on_the_current_code_or_says_why_not(path: Path) -> None:
    """Every screened configuration is a `--config` file the current code accepts (its header says how to run it) or
    says in its header which retired field keeps it to the revision that measured it."""
    header = "".join(line for line in path.read_text(encoding="utf-8").splitlines(keepends=True)
                     if line.startswith("#"))
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


KEPT = sorted(p.parent for p in (ROOT / "benchmarks" / "results").glob("folds*/*/pooled_predictions.csv"))


@pytest.mark.parametrize("kept", KEPT, ids=[f"{p.parent.name}/{p.name}" for p in KEPT])
def test_a_kept_table_reproduces_from_its_kept_predictions(kept: Path) -> None:
    """Each kept k-fold benchmark's pooled figures (folds.json, which docs/results.md and the README quote) are what its
    kept per-answer predictions give: T-Acc, T-F1, QWK and, where it reads concepts, C-Acc and the oracle's QWK."""
    pooled = pd.read_csv(kept / "pooled_predictions.csv", dtype={"id": str})
    said = json.loads((kept / "folds.json").read_text(encoding="utf-8"))["pooled"]
    assert len(pooled) == pooled["id"].nunique() == 2273
    got = grade_metrics(pooled["grade_true"].to_numpy(), pooled["grade"].to_numpy())
    keys = [c[: -len("_true")] for c in pooled.columns if c.endswith("_true") and c != "grade_true"]
    if keys and "c_acc" in said:
        got |= concept_metrics(pooled[[f"{k}_true" for k in keys]].to_numpy(),
                               pooled[[f"{k}_level" for k in keys]].to_numpy())
    if "grade_oracle" in pooled and "oracle_qwk" in said:
        got["oracle_qwk"] = grade_metrics(pooled["grade_true"].to_numpy(), pooled["grade_oracle"].to_numpy())["qwk"]
    for metric in ("t_acc", "t_f1", "qwk", "c_acc", "oracle_qwk"):
        if metric in said and metric in got:
            assert got[metric] == pytest.approx(said[metric], abs=1e-9), f"{kept.name}: {metric}"


def _curve_reach(argv: list[str]) -> int:
    return int(importlib.import_module("curve_reach").main(argv))


def test_curve_reach_reads_the_all_cell_from_a_kept_benchmark_fold_and_refuses_another_split(tmp_path: Path,
                                                                                             capsys: Any) -> None:
    """lab/curve_reach.py: the 90 % point of a curve whose full-data cell is fold 0 of kept pooled
    predictions, and one line (no output written) when the kept folds are not the curve's."""
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
                  {**cols, "size": "10", "n_train": 10, "t_acc": 0.7, "qwk": 0.66}]
                 ).to_csv(curve / "curve.csv", index=False)
    (curve / "curve.json").write_text(json.dumps({"settings": {"folds": 2, "by": "question", "fold_seed": 0}}))

    assert _curve_reach([str(curve), "--all-from", str(kept), "--out", str(tmp_path / "out")]) == 0
    reading = json.loads((tmp_path / "out" / "curve.json").read_text())["reading"]
    full = reading["full"]
    assert {k: full[k] for k in ("n_train", "qwk", "t_acc", "majority_t_acc")} == {"n_train": 20.0, "qwk": 0.7,
                                                                                  "t_acc": 0.8, "majority_t_acc": 0.6}
    assert reading["reach"]["size"] == "10" and reading["reach"]["target"] == pytest.approx(0.63)
    assert 5 < reading["reach"]["n_estimate"] <= 10 and (tmp_path / "out" / "curve.png").stat().st_size > 0

    assert _curve_reach([str(curve), "--all-from", str(kept), "--out", str(curve)]) == 2  # over its own input
    assert "all" not in set(pd.read_csv(curve / "curve.csv", dtype={"size": str})["size"])
    capsys.readouterr()
    # its own output again
    assert _curve_reach([str(curve), "--all-from", str(kept), "--out", str(tmp_path / "out")]) == 0

    pooled.assign(grade_true=[5] * 10 + [5] * 14 + [3] * 6).to_csv(kept / "pooled_predictions.csv", index=False)
    assert _curve_reach([str(curve), "--all-from", str(kept), "--out", str(tmp_path / "other")]) == 2
    assert "not the curve's" in capsys.readouterr().err and not (tmp_path / "other").exists()


def test_question_offsets_finds_a_reader_that_reads_each_question_too_high_or_too_low(tmp_path: Path) -> None:
    """A reader whose expected levels are the truth plus an offset per question (and a little noise): the offsets are
    most of its squared error, removing them as the labels give them reads nearly every level, and a few labelled
    answers per question recover much of that; a reader without offsets gains nothing."""
    mod = importlib.import_module("question_offsets")
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
    mod = importlib.import_module("question_offsets")
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
    mod = importlib.import_module("question_offsets")
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
    mod = importlib.import_module("question_offsets")
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
    mod = importlib.import_module("question_offsets")
    rng = np.random.default_rng(2)
    rows, texts = [], []
    for qi in range(40):
        n_ref = int(rng.choice([4, 30]))
        off_a = 0.8 if n_ref == 30 else -0.8
        reference = " ".join(f"w{j}" for j in range(n_ref))
        for a in range(10):
            t = int(rng.integers(1, 4))
            row = {"id": f"{qi}.{a}", "fold": qi % 5}
            for k, e in (("A", float(np.clip(t + off_a + rng.normal(0, 0.1), 0.5, 3.5))),
                         ("B", 2.0 + rng.normal(0, 0.05))):
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


def test_question_offsets_refuses_a_folder_that_is_not_a_kfold_run(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    pooled = tmp_path / "pooled.csv"
    pd.DataFrame({"id": ["1.1", "1.2", "2.1", "2.2"], "fold": [0, 0, 1, 1], "A_true": [1, 2, 3, 2],
                  "A_expected": [1.2, 2.1, 2.8, 2.0], "A_level": [1, 2, 3, 2]}).to_csv(pooled, index=False)
    assert importlib.import_module("question_offsets").main([str(pooled), "--n", "1", "--draws", "1", "--fold-runs",
                                                             str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "--fold-runs" in err and "no fold-*/" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_perturbed_copies_reverse_a_claim_both_ways_and_add_a_harmless_not() -> None:
    import random

    mod = importlib.import_module("perturbed_copies")
    assert mod.negate("A stack is last in, first out.") == "A stack is not last in, first out."
    assert mod.affirm("A local variable cannot be seen outside.") == "A local variable can be seen outside."
    assert mod.affirm("It doesn't copy the data, so it is fast.") == "It does copy the data, so it is fast."
    assert mod.affirm("Can't return a value.") == "Can return a value." and mod.affirm("Won't stop") == "Will stop"
    assert mod.affirm("It is not void") == "It is void" and mod.affirm("A stack is LIFO") is None
    added = mod.harmless("A stack is LIFO", random.Random(0))
    assert added.startswith("A stack is LIFO. ") and added.split(". ", 1)[1] in mod.HARMLESS
    assert mod.NEGATED.search(added.split(". ", 1)[1]) or "not" in added.split(". ", 1)[1].lower()


def test_teacher_split_reads_each_teacher_and_the_answers_both_fail_apart_from_those_they_split_on() -> None:
    mod = importlib.import_module("teacher_split")
    # four failing answers (mean below 2.5): two both teachers fail, two one teacher passes (a 3, or a 2.5 rounded up)
    table = pd.DataFrame({"id": ["a", "b", "c", "d", "e"], "grade_me": [0, 1, 1, 1.5, 5],
                          "grade_other": [1, 2, 3, 2.5, 5]})
    table["grade"] = mod.half_up((table["grade_me"] + table["grade_other"]) / 2)
    assert table["grade"].tolist() == [1, 2, 2, 2, 5]
    me, other = mod.teacher_figures(table, 3)
    assert me["failing"]["passed"] == 0 and other["failing"]["passed"] == 0.5
    assert other["failing"]["mean_error"] == pytest.approx((0 + 0 + 1 + 1) / 4)
    pooled = pd.DataFrame({"id": ["a", "b", "c", "d", "e"], "grade_true": table["grade"], "grade": [3, 1, 4, 4, 5]})
    s = mod.split_figures(pooled, table, 3)
    assert (s["all"]["n"], s["both"]["n"], s["split"]["n"]) == (4, 2, 2)
    assert s["both"]["passed"] == 0.5 and s["split"]["passed"] == 1.0 and s["all"]["passed"] == 0.75
    with pytest.raises(SystemExit):
        mod.split_figures(pooled.assign(grade_true=[0, 2, 2, 2, 5]), table, 3)


def test_perturbed_copies_sign_an_answer_unlike_the_suite_and_reorder_its_sentences() -> None:
    import random

    from rubrictool.behaviour.edits import NAMES

    mod = importlib.import_module("perturbed_copies")
    rng = random.Random(0)
    signed = [mod.signed("A stack is LIFO.", rng) for _ in range(40)]
    assert all("A stack is LIFO." in s and s != "A stack is LIFO." for s in signed)
    assert not any(n in s or ", student " in s for s in signed for n in NAMES)  # not the suite's names or form
    assert len({s.replace("A stack is LIFO.", "")[:3] for s in signed}) >= 3  # more than one form
    assert mod.reordered("One sentence only.", rng) is None
    for _ in range(10):
        out = mod.reordered("First. Second! Third?", rng)
        assert out != "First. Second! Third?" and sorted(out.split()) == sorted(["First.", "Second!", "Third?"])


def test_polarity_finds_a_clause_that_reverses_its_match_and_not_one_that_agrees() -> None:
    mod = importlib.import_module("polarity")
    assert mod.clauses("A stack is LIFO, but a queue is FIFO. It grows; x") == ["A stack is LIFO", "a queue is FIFO.",
                                                                               "It grows;"]
    assert mod.negated("it doesn't copy") and mod.negated("it cannot") and not mod.negated("it is known")
    assert mod.stripped("It cannot be seen and doesn't copy, not ever") == "It can be seen and does copy, ever"

    vocab = ["a", "stack", "queue", "is", "lifo", "fifo", "x"]

    def encode(texts: list[str]) -> np.ndarray[Any, Any]:  # a bag of words: the same words read the same
        v = np.array([[t.lower().split().count(w) for w in vocab] for t in texts], dtype=float)
        return v / np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-9)

    ref = "A stack is LIFO"
    assert mod.contradiction("A stack is not LIFO", ref, encode) == pytest.approx(1.0)
    assert mod.contradiction("A stack is LIFO", ref, encode) == 0.0
    assert mod.contradiction("A queue is not LIFO", ref, encode) == pytest.approx(0.75)  # its closest clause
    assert mod.contradiction("A stack is not LIFO", "a queue", encode) < min(mod.TAUS)  # no clause it reverses
    assert mod.contradiction("A stack is not LIFO", "x", encode, peers=[ref]) == pytest.approx(1.0)


def test_stable_marks_splits_the_moved_marks_by_how_sure_the_grader_was() -> None:
    mod = importlib.import_module("stable_marks")
    edits = pd.DataFrame({"id": ["a", "b", "c", "d", "a", "b"], "test": ["typo"] * 4 + ["synonym"] * 2,
                          "grade_before": [5, 4, 3, 5, 5, 4], "grade_after": [5, 3, 4, 5, 4, 4]})
    p = pd.Series({"a": 0.95, "b": 0.55, "c": 0.5, "d": 0.85})
    t = mod.by_sureness(edits, p, fifth=0.52).set_index("test")
    assert t.loc["typo", "moved"] == 0.5 and t.loc["typo", "moved_if_sure"] == 0.0
    assert t.loc["typo", "moved_if_unsure"] == 1.0 and t.loc["typo", "moved_in_least_sure_fifth"] == 0.5
    assert t.loc["synonym", "moved_if_sure"] == 1.0 and t.loc["synonym", "moved_in_least_sure_fifth"] == 0.0


def test_order_average_figures_and_the_paired_interval() -> None:
    mod = importlib.import_module("order_average")
    truth = np.array([0, 1, 2, 3, 4, 5, 5, 5])
    grades = np.array([2, 1, 2, 3, 4, 5, 5, 4])
    levels, true_levels = np.array([[1, 2], [3, 3]]), np.array([[1.0, np.nan], [3.0, 2.0]])
    f = mod.figures(grades, levels, truth, true_levels, top=5)
    assert f["t_acc"] == 0.75 and f["failing_passed"] == 0.0 and f["c_acc"] == pytest.approx(2 / 3)
    assert mod.figures(np.array([3, 1, 2, 3, 4, 5, 5, 4]), levels, truth, true_levels, 5)["failing_passed"] == 1 / 3
    same = mod.paired_ci(grades, grades, truth, reps=50)
    assert same["t_acc"] == [0.0, 0.0, 0.0] and same["qwk"] == [0.0, 0.0, 0.0]
    better = mod.paired_ci(grades, truth, truth, reps=200)
    assert better["t_acc"][0] == 0.25 and better["t_acc"][1] >= 0.0
