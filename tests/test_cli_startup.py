"""The CLI starts without the heavy libraries: importing ``rubrictool.cli`` and running the rubric
commands (and every ``--help``) must not load pandas, numpy, torch, litellm, scikit-learn, crowd-kit ...

Each check runs in a fresh interpreter (this test process has loaded most of them already) and reads
that interpreter's ``sys.modules``. docs/design.md, "Why the CLI imports lazily", says why.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from rubrictool.rubric import BUNDLED_DIR

ROOT = Path(__file__).resolve().parent.parent

# top-level package names, as in sys.modules (scikit-learn is sklearn, crowd-kit is crowdkit)
HEAVY = (
    "pandas", "numpy", "scipy", "torch", "transformers", "accelerate", "litellm", "sklearn", "crowdkit",
    "matplotlib", "label_studio_sdk", "reccbm",
)

# Runs in the fresh interpreter: invoke each command line given in argv[1] (a JSON list; an empty
# list means "import the CLI module only", "--help-all" every command's --help) and print, per
# command, its exit code, output and the heavy packages loaded by then.
PROBE = """
import json, sys
heavy = set(json.loads(sys.argv[2]))
from rubrictool.cli import app
def loaded():
    return sorted({m.split(".")[0] for m in sys.modules} & heavy)
args = json.loads(sys.argv[1])
out = {"import": loaded(), "runs": []}
if args:
    from typer.main import get_command
    from typer.testing import CliRunner
    runner = CliRunner()
    if args == ["--help-all"]:
        def paths(cmd, path):
            yield path
            for name, sub in sorted(getattr(cmd, "commands", {}).items()):
                yield from paths(sub, [*path, name])
        lines = [[*p, "--help"] for p in paths(get_command(app), [])]
    else:
        lines = [args]
    for line in lines:
        r = runner.invoke(app, line, env={"COLUMNS": "200"})
        out["runs"].append({"args": line, "exit": r.exit_code, "output": r.output, "loaded": loaded()})
print(json.dumps(out))
"""


def checkout_env() -> dict[str, str]:
    """This process's environment with this checkout first on PYTHONPATH."""
    paths = [str(ROOT), *(p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p)]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}


def probe(args: list[str]) -> dict[str, Any]:
    """Run PROBE in a fresh interpreter on this checkout's code (not an installed copy)."""
    env = checkout_env()
    res = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(args), json.dumps(HEAVY)],
        capture_output=True, text=True, env=env, cwd=ROOT, timeout=120, check=False,
    )
    assert res.returncode == 0, res.stderr
    out: dict[str, Any] = json.loads(res.stdout.strip().splitlines()[-1])
    return out


def test_importing_the_cli_loads_no_heavy_library() -> None:
    assert probe([])["import"] == []


@pytest.mark.parametrize(
    ("args", "expect"),
    [
        (["rubric", "show", "--rubric", "mohler"], "Mohler short-answer grading"),
        (["rubric", "show", "--rubric", "asap2"], "asap2"),
        (["rubric", "list"], "mocha"),
        (["rubric", "validate", str(BUNDLED_DIR / "mohler.yaml"), str(BUNDLED_DIR / "mocha.yaml")], "ok: "),
        (["--help"], "rubric"),
    ],
)
def test_rubric_commands_load_no_heavy_library(args: list[str], expect: str) -> None:
    (run,) = probe(args)["runs"]
    assert run["exit"] == 0, run["output"]
    assert expect in run["output"]
    assert run["loaded"] == [], f"`rubrictool {' '.join(args)}` loaded {run['loaded']}"


def test_every_help_loads_no_heavy_library() -> None:
    runs = probe(["--help-all"])["runs"]
    assert len(runs) > 20  # the app, its groups and every command
    for run in runs:
        assert run["exit"] == 0, run["output"]
        assert "Usage:" in run["output"]
        assert run["loaded"] == [], f"`rubrictool {' '.join(run['args'])}` loaded {run['loaded']}"


def test_lint_loads_numpy_only_when_it_runs() -> None:
    """``rubric lint`` needs numpy for its TF-IDF similarity, and nothing heavier."""
    (run,) = probe(["rubric", "lint", "--rubric", "mohler"])["runs"]
    assert run["exit"] == 0, run["output"]
    assert "level-without-example" in run["output"]
    assert run["loaded"] == ["numpy"]


def test_startup_benchmark_smoke_run(tmp_path: Path) -> None:
    """benchmarks/cli_startup.py --smoke runs every command once and writes its JSON."""
    out = tmp_path / "cli_startup.json"
    env = checkout_env()
    res = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "cli_startup.py"), "--smoke", "--out", str(out)],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300, check=False,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    report = json.loads(out.read_text())
    names = [r["name"] for r in report["results"]]
    assert "rubrictool rubric show --rubric mohler" in names and 'python -c "import pandas"' in names
    assert len(names) == 7
    assert all(r["exit_codes"] == [0] and r["median_s"] > 0 for r in report["results"])
    assert report["smoke"] is True and report["runs"] == 1 and report["git_revision"]
