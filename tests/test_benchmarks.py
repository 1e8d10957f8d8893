"""Every product benchmark in benchmarks/ runs: each script's --smoke mode on a tiny input, run as ``__main__``
(in this process, so that torch and the rest are imported once), checked by what it printed and wrote. The
measured figures are in docs/results.md."""

from __future__ import annotations

import ast
import json
import runpy
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tests.support.tiny_models import build_backbone

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "benchmarks"
SCRIPTS = sorted(BENCH.glob("*.py"))


def _run(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], script: str, *args: str) -> str:
    """Run ``benchmarks/<script>`` as ``python benchmarks/<script> ARGS`` would, from the repository root; its
    stdout."""
    monkeypatch.chdir(ROOT)
    for var, value in (("HF_HUB_OFFLINE", "1"), ("TOKENIZERS_PARALLELISM", "false"),
                       ("LITELLM_LOCAL_MODEL_COST_MAP", "True")):
        monkeypatch.setenv(var, value)  # what the scripts set for themselves, restored after the test
    monkeypatch.setattr(sys, "argv", [script, *args])
    try:
        runpy.run_path(str(ROOT / script), run_name="__main__")
    except SystemExit as exc:
        assert not exc.code, f"{script} exited with {exc.code}"
    return capsys.readouterr().out


@pytest.mark.parametrize("script", SCRIPTS, ids=[p.name for p in SCRIPTS])
def test_benchmark_uses_the_public_api_only(script: Path) -> None:
    """No private names imported, no sys.path edits, no benchmark importing another or the tests."""
    tree = ast.parse(script.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            mod = node.module or ""
            if mod == "__future__":
                continue
            assert not mod.startswith(("tests", "benchmarks", "lab")) and node.level == 0, f"{script.name}: {mod}"
            assert not any(part.startswith("_") for part in mod.split(".")), f"{script.name} imports {mod}"
            private = [a.name for a in node.names if a.name.startswith("_")]
            assert not private, f"{script.name} imports private {private} from {mod}"
        if isinstance(node, ast.Attribute) and node.attr in ("insert",
                                                             "append") and ast.unparse(node.value) == "sys.path":
            pytest.fail(f"{script.name} edits sys.path")
    assert "--smoke" in script.read_text(encoding="utf-8"), f"{script.name} has no --smoke mode"


# what each smoke run prints when it worked (a benchmark not listed here must at least exit 0)
EXPECT = {
    "adjudicate": ["300 items x 3 reviewers x 8 concepts", "stages: validate"],
    "annotate_throughput": ["concurrency   4, 1 worker(s): 8 requests", "8/8 items ok", "wrote "],
    "data_load": ["asap2 {'archive_mb'", "'n_items': 40", "'n_items': 60", "wrote "],
    "review_routing": ['"share_needed_for_95"', '"at_40"', "wrote "],
    "grade_speed": ["torch: ", "torch-int8: ", "same grade as torch float32", "wrote "],
    "frozen_speed": ["Stage I, frozen, cached", "reccbm.fit, frozen, uncached", "wrote "],
    "stage2_speed": ["cpu: 10 steps in ", "ms a step"],
    "gpu_smoke": ["device: cpu (CPU)", "main job: test t_acc", "question-grouped fold 0/5: test t_acc", "grade: ",
                  "wrote "],
    "gpu_pack": ["MiB in fp16 (largest weight change restored to float32", "gpu_smoke.py --pack"],
    "main_job_pair": ["A 1 {'wall_s'", "B 6 {'wall_s'", "the same test predictions: True", "wrote "],
    "decision_rule": ["| calibrated bayes, failing passed costs +16 |", "| passing failed |",
                      "kept.csv (400 answers; T-Acc ", "failing passed 100%, passing failed 0%)",
                      "| calibrated bayes on the other folds' test answers, +16 |"],
    "behaviour": ["| invariance test |", "| punctuation |", "| directional test |", "wrote "],
    "review_queue": ["| unsure only (before) | 10 % (20) |", "| unsure + weak pass (today) | 20 % (40) |", "wrote "],
}
NEEDS_BACKBONE = {"data_load", "grade_speed", "frozen_speed", "gpu_smoke", "gpu_pack", "main_job_pair", "behaviour"}
SMOKED = [p for p in SCRIPTS if p.stem != "folds"]  # folds.py: test_folds_smoke_with_a_config_file


@pytest.fixture(scope="module")
def tiny_backbone(tmp_path_factory: pytest.TempPathFactory) -> str:
    return build_backbone(tmp_path_factory.mktemp("backbone"), "bert")


@pytest.mark.parametrize("script", SMOKED, ids=[p.name for p in SMOKED])
def test_benchmark_smoke(script: Path, tiny_backbone: str, monkeypatch: pytest.MonkeyPatch,
                         capsys: pytest.CaptureFixture[str]) -> None:
    args = ["--smoke", *(["--backbone", tiny_backbone] if script.stem in NEEDS_BACKBONE else [])]
    out = _run(monkeypatch, capsys, str(script.relative_to(ROOT)), *args)
    for text in EXPECT.get(script.stem, []):
        assert text in out, f"{script.name} --smoke did not print {text!r}:\n{out[-2000:]}"


def test_folds_smoke_with_a_config_file(tmp_path: Path, tiny_backbone: str, monkeypatch: pytest.MonkeyPatch,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    """Two folds of the PLM and of a --config YAML run (rubrictool train --config format; named by its stem, its
    fields applied) with a tiny backbone: pooled tables and the paired comparison."""
    backbone = tiny_backbone
    cfg = tmp_path / "short-joint.yaml"
    cfg.write_text("joint:\n  intervention_p: 0.0\nstage2:\n  lambda_d: 1.0\n")
    out = tmp_path / "folds"
    _run(monkeypatch, capsys, "benchmarks/folds.py", "--smoke", "--runs", "plm", "--config", str(cfg), "--backbone",
         backbone, "--out", str(out), "--by", "question", "--fold-seed", "3")
    import yaml

    from rubrictool.train.runs import trained_with

    resolved = yaml.safe_load((out / "short-joint" / "fold-0" / "config.yaml").read_text())
    assert resolved["joint"]["intervention_p"] == 0.0 and resolved["stage2"]["lambda_d"] == 1.0
    assert resolved["model"]["backbone"] == backbone and resolved["variant"] == "reccbm"
    for name in ("short-joint", "plm"):
        assert json.loads((out / name / "folds.json").read_text())["pooled"]["t_acc"] >= 0.0
        assert len(list((out / name).glob("fold-*/metrics.json"))) == 2
    summary = (out / "summary.md").read_text()
    assert "| short-joint |" in summary and "short-joint − plm (paired bootstrap, 40 items)" in summary
    # every row says what it was trained with
    for name in ("short-joint", "plm"):
        cfg_doc = yaml.safe_load((out / name / "fold-0" / "config.yaml").read_text())
        row = next(line for line in summary.splitlines() if line.startswith(f"| {name} |"))
        assert row.endswith(f"| {trained_with(cfg_doc)} |"), row
    # --fold-seed: the folds are that seed's (other question splits than the kept folds')
    for name in ("short-joint", "plm"):
        assert json.loads((out / name / "fold-0.split.json").read_text())["seed"] == 3
    # --by question: no question is in both the training and the test part of a fold
    for name in ("short-joint", "plm"):
        for fold in (out / name).glob("fold-*/split.json"):
            sp = json.loads(fold.read_text())
            table = pd.read_csv(fold.parent / "table.csv", dtype={"id": str})
            q = dict(zip(table["id"], table["question"], strict=True))
            assert len(set(q.values())) == 5
            assert not {q[i] for i in sp["test"]} & {q[i] for i in sp["train"] + sp["dev"]}, fold


def test_benchmarks_are_lint_clean() -> None:
    """CI lints the benchmarks like the package (ruff, the project's settings)."""
    res = subprocess.run([sys.executable, "-m", "ruff", "check", "benchmarks"], check=False, capture_output=True,
                         text=True, cwd=ROOT, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr


@pytest.mark.slow
def test_gpu_run_script_on_the_cpu(tmp_path: Path, tiny_backbone: str) -> None:
    """benchmarks/gpu_run.sh's four steps on the CPU with a tiny model (GPU_RUN_SMOKE): each step's small files
    packed into OUT/stepN.tgz as it ends, no weights among them."""
    import os
    import tarfile

    out = tmp_path / "out"
    base = tmp_path / "base"  # the baseline's code (step 1b): here this revision's, copied
    import shutil

    for part in ("reccbm", "rubrictool"):
        shutil.copytree(ROOT / part, base / part, ignore=shutil.ignore_patterns("__pycache__"))
    env = os.environ | {"GPU_RUN_SMOKE": tiny_backbone, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1",
                        "GPU_RUN_BASELINE": str(base),
                        "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    done = subprocess.run(["bash", "benchmarks/gpu_run.sh", ".gpu", str(out), "600"], check=False, cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    names = {}
    for n in (1, 2, 3, 4):
        with tarfile.open(out / f"step{n}.tgz") as tar:
            names[n] = tar.getnames()
    assert "main-fp32/gpu_smoke.json" in names[1] and "main-fp32/main/test_predictions.csv" in names[1]
    with tarfile.open(out / "step1b.tgz") as tar:
        assert "main-baseline/gpu_smoke.json" in tar.getnames()
        log = tar.extractfile("main-baseline.log")
        assert log is not None and f"reccbm from {base / 'reccbm'}" in log.read().decode()
    assert "main-bf16/gpu_smoke.json" in names[2] and "main-bf16/main/test_predictions.csv" in names[2]
    assert "reader-r/default/pooled_predictions.csv" in names[3]
    assert "main-reader/gpu_smoke.json" in names[4]
    assert not [n for ns in names.values() for n in ns if n.endswith((".safetensors", ".bin", "table.csv"))]


def test_gpu_pack_leaves_out_only_embedding_rows_a_run_never_reads(tmp_path: Path, tiny_backbone: str) -> None:
    """benchmarks/gpu_pack.py packs the word embeddings' rows that given texts use (the rest restored as zeros): a
    model restored from it trains on those texts exactly as one restored from every row (AdamW with weight decay,
    fused, and gradient clipping: the trainer's step), in fewer bytes."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    pack = runpy.run_path(str(BENCH / "gpu_pack.py"))
    smoke = runpy.run_path(str(BENCH / "gpu_smoke.py"))
    texts = ["what is a stack", "a stack stores the last element first"]
    keep = pack["used_token_ids"](tiny_backbone, texts)
    vocab = AutoTokenizer.from_pretrained(tiny_backbone).vocab_size
    assert 0 < len(keep) < vocab - 20
    sizes, states = {}, {}
    for name, rows in (("all", None), ("trimmed", keep)):
        sizes[name] = pack["pack_backbone"](tiny_backbone, tmp_path / f"pack-{name}", rows)
        folder = smoke["restore_backbone"](tmp_path / f"pack-{name}", tmp_path / f"model-{name}")
        torch.manual_seed(0)
        model = AutoModel.from_pretrained(folder)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.01, fused=True)
        batch = AutoTokenizer.from_pretrained(folder)(texts, padding=True, return_tensors="pt")
        for _ in range(4):
            loss = (model(**batch).last_hidden_state ** 2).mean()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            opt.zero_grad()
        model.eval()
        with torch.no_grad():
            states[name] = model(**batch).last_hidden_state
        emb = model.get_input_embeddings().weight
        left_out = sorted(set(range(emb.shape[0])) - set(keep))
        assert bool((emb[left_out] == 0).all()) == (name == "trimmed")
    assert torch.equal(states["all"], states["trimmed"])
    assert sizes["trimmed"] < sizes["all"]


def test_the_benchmarks_index_names_every_script() -> None:
    """benchmarks/README.md's table is where a reader finds what a script measures: every script has its row."""
    bench = Path(__file__).resolve().parent.parent / "benchmarks"
    text = (bench / "README.md").read_text(encoding="utf-8")
    scripts = {p.name for p in [*bench.glob("*.py"), *bench.glob("*.sh")] if p.name != "__init__.py"}
    assert len(scripts) > 5
    missing = sorted(n for n in scripts if f"| `{n}` |" not in text)
    assert not missing, "not in benchmarks/README.md's table: " + ", ".join(missing)


@pytest.mark.parametrize("content", [None, "a,b\n1,2\n", "id,grade\n1,3\n"])
def test_decision_rule_refuses_a_kept_table_it_cannot_pair_in_one_line(tmp_path: Path, content: str | None) -> None:
    """--against names a file that is missing or is not a pooled_predictions.csv: one line naming it, no traceback,
    nothing written."""
    kept_marks = runpy.run_path(str(BENCH / "decision_rule.py"))["kept_marks"]
    path = tmp_path / "kept.csv"
    if content is not None:
        path.write_text(content)
    with pytest.raises(SystemExit) as refused:
        kept_marks(path, np.asarray(["1"]), np.asarray([3]))
    message = str(refused.value)
    assert str(path) in message and "pooled_predictions.csv" in message and "\n" not in message
    if content is None:
        done = subprocess.run([sys.executable, "benchmarks/decision_rule.py", "--runs", str(tmp_path), "--out",
                               str(tmp_path / "out"), "--against", str(path)], check=False, capture_output=True,
                              text=True, cwd=ROOT)
        assert done.returncode == 2 and "no such file" in done.stderr and "Traceback" not in done.stderr
        assert not (tmp_path / "out").exists()
