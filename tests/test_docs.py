"""The CLI documents itself: every command (sub-apps included) has help text with an example and an
entry in docs/cli.md, and docs/cli.md is exactly what scripts/gen_cli_docs.py generates.

After adding or changing a command, regenerate the reference with one command:
    .venv/bin/python scripts/gen_cli_docs.py
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import typer

from rubrictool.cli import app

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "cli.md"
sys.path.insert(0, str(ROOT / "scripts"))
from gen_cli_docs import iter_commands, render

COMMANDS: list[tuple[str, Any]] = list(iter_commands(typer.main.get_command(app)))
LEAVES = [(n, c) for n, c in COMMANDS if not isinstance(getattr(c, "commands", None), dict)]


EVERY_COMMAND = [
    "rubric", "rubric list", "rubric show", "rubric validate", "rubric new", "rubric lint", "rubric export",
    "rubric points", "rubric fit-points",
    "data", "data show", "data fetch", "data export", "data split", "data import",
    "annotate",
    "review", "review serve", "review push", "review status", "review pull",
    "adjudicate", "train", "compare", "grade", "audit", "learning-curve",
    "explain", "intervene", "report", "ablate", "rubric diagnose",
]


def test_the_app_has_every_pipeline_command() -> None:
    """The documented command set, exactly: a new command is added here, to docs/cli.md and to a test."""
    names = sorted(n for n, _ in COMMANDS[1:])
    assert names == sorted(f"rubrictool {c}" for c in EVERY_COMMAND)


def test_readme_names_every_top_level_command() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for cmd in EVERY_COMMAND:
        if " " not in cmd:
            assert f"rubrictool {cmd}" in readme, f"README.md does not mention `rubrictool {cmd}`"


@pytest.mark.parametrize(("name", "cmd"), COMMANDS, ids=[n for n, _ in COMMANDS])
def test_command_has_help_with_an_example(name: str, cmd: Any) -> None:
    text = (cmd.help or "").strip()
    assert text, f"{name} has no help text"
    assert "Example: rubrictool " in text, f"{name}: add an 'Example: rubrictool ...' line to its help"


@pytest.mark.parametrize(("name", "cmd"), LEAVES, ids=[n for n, _ in LEAVES])
def test_command_is_documented(name: str, cmd: Any) -> None:
    doc = DOC.read_text(encoding="utf-8")
    assert f"\n## {name}\n" in doc, f"{name} missing from docs/cli.md; run .venv/bin/python scripts/gen_cli_docs.py"
    section = doc.split(f"\n## {name}\n", 1)[1].split("\n## ", 1)[0]
    for p in cmd.params:
        if p.param_type_name == "option" and not p.hidden:  # the hidden ones: old spellings (below)
            assert f"`{p.opts[0]}`" in section, f"{name}: option {p.opts[0]} not documented"


# The only hidden options: old spellings, accepted for one release and listed in docs/cli.md's "Renamed options".
OLD_SPELLINGS = {"--data", "-n", "-l", "--race", "--opcc", "--lcec", "--crossfit"}


def test_each_shared_option_means_one_thing() -> None:
    """No hidden aliases but the old spellings, each listed as renamed; --run is always a run directory and -m
    always an LLM; the training options that train, learning-curve and ablate share are one declaration each (the
    same help everywhere)."""
    params = [(n, p) for n, c in LEAVES for p in c.params if p.param_type_name == "option"]
    assert {p.opts[0] for n, p in params if p.hidden} == OLD_SPELLINGS
    renamed = DOC.read_text(encoding="utf-8").split("\n## Renamed options\n", 1)[1].split("\n## ", 1)[0]
    for old in OLD_SPELLINGS:
        assert f"`{old}" in renamed, f"{old} is hidden but not listed under Renamed options in docs/cli.md"
    assert {tuple(p.opts) for _, p in params if "--run" in p.opts} == {("--run",)}
    assert {n for n, p in params if "-m" in p.opts} == {"rubrictool annotate"}
    for flag in ("--backbone", "--epochs", "--lr", "--max-len", "--device", "--preset", "--config"):
        users = {n: p.help for n, p in params if flag in p.opts}
        assert {"rubrictool train", "rubrictool learning-curve"} <= set(users), flag
        assert len(set(users.values())) == 1, f"{flag} is declared more than once: {users}"


def test_every_command_help_runs() -> None:
    from typer.testing import CliRunner

    runner = CliRunner()
    for name, _ in COMMANDS:
        res = runner.invoke(app, [*name.split()[1:], "--help"])
        assert res.exit_code == 0, f"{name} --help failed: {res.output}"
        assert "Example" in res.output


def test_cli_reference_is_up_to_date() -> None:
    res = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gen_cli_docs.py"), "--check"],
        check=False, capture_output=True, text=True, cwd=ROOT, timeout=120,
    )
    assert res.returncode == 0, res.stdout + res.stderr


def test_check_mode_detects_a_stale_reference(tmp_path: Path) -> None:
    stale = tmp_path / "cli.md"
    stale.write_text(render(app).replace("## rubrictool data show\n", "## rubrictool data shw\n"))
    script = str(ROOT / "scripts" / "gen_cli_docs.py")
    res = subprocess.run([sys.executable, script, "--check", "--out", str(stale)], check=False, capture_output=True,
                         text=True,
                         cwd=ROOT, timeout=120)
    assert res.returncode == 1 and "out of date" in res.stderr and "data shw" in res.stdout
    res = subprocess.run([sys.executable, script, "--out", str(stale)], check=False, capture_output=True, text=True,
                         cwd=ROOT,
                         timeout=120)
    assert res.returncode == 0 and stale.read_text(encoding="utf-8") == render(app)


def _doc_value(cell: str) -> Any:
    text = cell.strip().strip("`")
    if text in ("on", "off"):
        return text == "on"
    if text in ('""', "{}", "()"):  # an empty string, an empty mapping, an empty tuple
        return {'""': "", "{}": {}, "()": ()}[text]
    try:
        return float(text)
    except ValueError:
        return text


def test_training_guide_states_both_presets_as_the_code_sets_them() -> None:
    """docs/training.md's preset table: every value is what `--preset paper/default` sets, and every field the
    two presets set differently has a row (a changed default cannot leave the guide behind)."""
    import re

    from rubrictool.train import preset_config

    paper, default = preset_config("paper"), preset_config("default")
    text = (ROOT / "docs" / "training.md").read_text()
    documented: set[tuple[str, str]] = set()
    for line in text.splitlines():
        if not re.match(r"\| `(--|model\.|stage1\.|joint\.|stage2\.)", line):
            continue
        cells = line.split("|")[1:-1]
        keys = re.findall(r"`(model|stage1|joint|stage2)\.(\w+)`", cells[0])
        assert keys, line
        for sec, name in keys:
            documented.add((sec, name))
            for preset, cfg, cell in (("paper", paper, cells[1]), ("default", default, cells[2])):
                want, got = cfg[sec][name], _doc_value(cell)
                assert (float(want) if isinstance(want, (int, float)) and not isinstance(want, bool)
                        else want) == got, \
                    f"docs/training.md says {sec}.{name} = {cell.strip()} under {preset}; the code sets {want!r}"
    differing = {(sec, k) for sec in paper for k in paper[sec] if paper[sec][k] != default[sec][k]}
    assert differing <= documented, f"no row in docs/training.md for {sorted(differing - documented)}"


def test_training_guide_documents_every_config_field_once() -> None:
    """docs/training.md has one table row for every field a --config file or --cfg can set (its values are checked
    above), and names each field the run decides itself (refused in a config)."""
    import re
    from collections import Counter
    from dataclasses import fields

    from rubrictool.train import DECIDED_BY_THE_RUN, SECTIONS

    text = (ROOT / "docs" / "training.md").read_text()
    rows = Counter(f"{sec}.{name}" for line in text.splitlines() if re.match(r"\| `(model|stage1|joint|stage2)\.", line)
                   for sec, name in re.findall(r"`(model|stage1|joint|stage2)\.(\w+)`", line.split("|")[1]))
    every = {f"{sec}.{f.name}" for sec, cls in SECTIONS.items() for f in fields(cls)}
    decided = {f"{sec}.{name}" for sec, name in DECIDED_BY_THE_RUN}
    assert decided <= every
    assert {k for k in every - decided if rows[k] == 0} == set(), "fields without a row in docs/training.md"
    assert {k for k, n in rows.items() if n > 1} == set(), "fields with more than one row in docs/training.md"
    assert set(rows) <= every - decided, "rows for fields a config cannot set"
    assert all(f"`{k}`" in text for k in decided), "a field the run decides is not named in docs/training.md"


def test_train_option_help_states_both_presets_as_the_code_sets_them() -> None:
    """An option whose help says "(preset default X, paper Y)" is held to what the presets set."""
    import re

    from rubrictool.train import FLAT_OPTIONS, preset_config

    presets = {"default": preset_config("default"), "paper": preset_config("paper")}
    train = dict(COMMANDS)["rubrictool train"]
    checked = 0
    for param in train.params:
        m = re.search(r"\(.*preset default ([^,]+), paper ([^)]+)\)", param.help or "")
        if not m:
            continue
        sec, name = FLAT_OPTIONS[param.name][0]
        for preset, said in (("default", m.group(1)), ("paper", m.group(2))):
            want = presets[preset][sec].get(name, 0)
            assert float(want) == _doc_value(said), (f"--{param.name}: help says {said} under {preset}; "
                                                     f"the code sets {want!r}")
        checked += 1
    assert checked >= 1


def _slug(heading: str) -> str:
    """GitHub's anchor for a Markdown heading: lower case, punctuation dropped, spaces to hyphens."""
    import re

    text = re.sub(r"[^\w\- ]", "", heading.strip().lower().replace("`", ""))
    return text.replace(" ", "-")


def _markdown_files() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")), ROOT / "benchmarks" / "README.md",
            *sorted((ROOT / "lab").rglob("*.md"))]


def _links(path: Path) -> list[tuple[int, str]]:
    """(line, target) of every relative Markdown link outside fenced code blocks."""
    import re

    out, fenced = [], False
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if fenced:
            continue
        for target in re.findall(r"\]\(([^)\s]+)\)", line):
            if not re.match(r"[a-z]+:", target):
                out.append((n, target))
    return out


def test_every_relative_link_and_anchor_in_the_docs_resolves() -> None:
    """README.md, docs/ and the benchmark READMEs: every relative link names a file that exists and every #anchor
    a heading of that file (a renamed heading cannot leave a link behind)."""
    import re

    broken = []
    for md in _markdown_files():
        for n, target in _links(md):
            file_part, _, anchor = target.partition("#")
            dest = (md.parent / file_part).resolve() if file_part else md
            where = f"{md.relative_to(ROOT)}:{n}: {target}"
            if not dest.exists():
                broken.append(f"{where} (no such file)")
                continue
            if anchor and dest.suffix == ".md":
                text = dest.read_text(encoding="utf-8")
                slugs = {_slug(h) for h in re.findall(r"^#+ (.+)$", text, flags=re.MULTILINE)}
                if anchor not in slugs:
                    broken.append(f"{where} (no heading with that anchor)")
    assert not broken, "\n".join(broken)


# An issue is where a change was asked for, not a reason: outside lab/history/, the repository states the decision.
ISSUE_REFERENCE = r"\bissues? #\d|\bissue's\b|\bthe issue\b|\b(before|after|in|of|since|from|see) #\d+\b"
# Their rewrite (the train package and the learning curve's plan of cells) replaces the comments that still cite one.
ISSUE_REFERENCE_PENDING: set[str] = set()


def test_the_repository_speaks_of_dates_and_revisions_not_rounds_of_work() -> None:
    """Docs, code, tests, CI, benchmarks and the lab name what changed and when (a date, a git revision, a config
    name), never a session or a round of work; outside lab/history/ they state decisions, never an issue number or
    "the issue's" targets."""
    import re

    pattern = re.compile(r"session[ -]?[0-9]|this session|previous session|same session|session-[0-9]|\bround[ "
                         r"-]?[0-9]",
                         re.IGNORECASE)
    issue = re.compile(ISSUE_REFERENCE, re.IGNORECASE)
    roots = [ROOT / "README.md", ROOT / "docs", ROOT / "rubrictool", ROOT / "reccbm", ROOT / "benchmarks",
             ROOT / "lab", ROOT / "scripts", ROOT / "tests", ROOT / "templates", ROOT / ".ci" / "run",
             ROOT / "setup.sh", ROOT / "pyproject.toml"]
    hits = []
    for root in roots:
        files = [root] if root.is_file() else [p for p in root.rglob("*") if p.suffix in (".md", ".py", ".yaml", ".j2")]
        for f in files:
            if f == Path(__file__).resolve():  # this test spells the pattern out
                continue
            rel = f.relative_to(ROOT).as_posix()
            history = rel.startswith("lab/history/") or rel in ISSUE_REFERENCE_PENDING
            for n, line in enumerate(f.read_text(encoding="utf-8").splitlines(), 1):
                if pattern.search(line) or (not history and issue.search(line)):
                    hits.append(f"{rel}:{n}: {line.strip()[:100]}")
    assert not hits, "\n".join(hits)


def test_the_issue_reference_check_finds_one() -> None:
    import re

    issue = re.compile(ISSUE_REFERENCE, re.IGNORECASE)
    for text in ("cites issue #12", "Issues #24 and #26", "the issue's 15 minutes", "as the issue asks",
                 "the prompt before #17"):
        assert issue.search(text), text
    for text in ("concept #0 has it too", "label-studio issues [#5172](https://github.com)", "color: #222"):
        assert not issue.search(text), text


RESULTS_MAX_BYTES = 3 * 2**20  # results kept in the tree stay small; the per-answer predictions are counted apart


def _cited_result_paths() -> set[str]:
    """Every benchmarks/results/… or lab/results/… path the docs name, {a,b} alternatives expanded."""
    import itertools
    import re

    docs = [*_markdown_files()]
    out: set[str] = set()
    for md in docs:
        for m in re.findall(r"(?:benchmarks|lab)/results/[^\s`)\"'>]*", md.read_text(encoding="utf-8")):
            parts = re.split(r"(\{[^}]*\})", m.rstrip(".,;:"))
            options = [p[1:-1].split(",") if p.startswith("{") else [p] for p in parts]
            out |= {"".join(c).rstrip("/") for c in itertools.product(*options)}
    return out - {"benchmarks/results", "lab/results"}


def test_every_kept_result_is_cited_and_the_results_stay_small() -> None:
    """The result files in the tree are those a current doc cites (the file or its folder, by path), and apart from
    the per-answer predictions that the paired CIs in docs/results.md are computed from (a k-fold run's pooled ones, a
    single run's test ones), they stay under 3 MB."""
    import fnmatch
    import subprocess

    listed = subprocess.run(["git", "ls-files", "benchmarks/results", "lab/results"], cwd=ROOT,
                            capture_output=True, text=True, check=True).stdout.split()
    assert len(listed) > 10
    cited = _cited_result_paths()
    uncited = [f for f in listed if not any(fnmatch.fnmatch(f, c) or f.startswith(c + "/")
                                            or fnmatch.fnmatch(f, c + "/*")
                                             for c in cited)]
    assert not uncited, "result files no doc cites (cite them or remove them): " + ", ".join(uncited)
    predictions = [f for f in listed if f.endswith(("/pooled_predictions.csv", "test_predictions.csv"))]
    results_md = (ROOT / "docs" / "results.md").read_text(encoding="utf-8")
    assert all(f.split("/")[-2] in results_md for f in predictions)
    size = sum((ROOT / f).stat().st_size for f in listed if f not in predictions)
    assert size <= RESULTS_MAX_BYTES, f"{size / 2**20:.1f} MB of results besides the per-answer predictions"


def test_the_code_map_names_every_module_and_package() -> None:
    """A newcomer reads the code map (docs/code-map.md, linked from the README) to find a stage: every rubrictool
    module and package is on it."""
    assert "docs/code-map.md" in (ROOT / "README.md").read_text(encoding="utf-8")
    text = (ROOT / "docs" / "code-map.md").read_text(encoding="utf-8")
    block = text.split("## Code map", 1)[1].split("```", 2)[1]
    named = {tok.rstrip(",") for line in block.splitlines() for tok in line.split()[:2]}
    pkg = ROOT / "rubrictool"
    parts = {p.name for p in pkg.glob("*.py") if p.name != "__init__.py"}
    parts |= {p.name + "/" for p in pkg.iterdir() if p.is_dir() and not p.name.startswith(("_", "."))}
    assert parts - named == set(), "not on the code map (docs/code-map.md)"


def test_the_front_pages_stay_short_and_the_tree_small() -> None:
    """A newcomer reads the README (at most 160 lines) and today's results (at most 400 lines, none over 400
    characters); the lab's record and the superseded results live in lab/ and in git history, so the tracked tree
    stays under 15 MB."""
    import subprocess

    readme = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    results = (ROOT / "docs" / "results.md").read_text(encoding="utf-8").splitlines()
    assert len(readme) <= 160, f"README.md has {len(readme)} lines"
    assert len(results) <= 400, f"docs/results.md has {len(results)} lines"
    long = [n for n, line in enumerate(results, 1) if len(line) > 400]
    assert not long, f"docs/results.md lines over 400 characters: {long}"
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    size = sum((ROOT / f).stat().st_size for f in tracked.split("\0") if f and (ROOT / f).is_file())
    assert size <= 15_000_000, f"the tracked tree is {size / 1e6:.1f} MB"


def test_every_benchmark_script_makes_a_figure_of_todays_results() -> None:
    """benchmarks/ holds the scripts that make today's tables: each one is named by a command in docs/results.md (a
    script that makes none belongs in the lab, or in git history)."""
    results = (ROOT / "docs" / "results.md").read_text(encoding="utf-8")
    scripts = sorted(p.name for p in (ROOT / "benchmarks").iterdir() if p.suffix in (".py", ".sh"))
    assert len(scripts) > 5
    unnamed = [s for s in scripts if f"benchmarks/{s}" not in results]
    assert not unnamed, "benchmark scripts docs/results.md does not name: " + ", ".join(unnamed)
