"""One word, one meaning on the command line: --items are the answers, --table an adjudicated table, the
rubric is --rubric/-r, and a short flag stands for one long option everywhere. The old spellings still work
for one release, hidden from help, each with exactly one note on stderr; old and new spelling together is a
one-line error."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import typer
import yaml
from typer.testing import CliRunner, Result

from rubrictool.cli import app
from tests.support.tiny_models import KEYS, build_backbone, mohler_like_table

runner = CliRunner()

# command -> the word its old --data now is, and the arguments it needs besides (nothing here exists: every
# run below stops at its first check, after the spelling is read)
OLD_DATA: dict[str, tuple[str, list[str]]] = {
    "annotate": ("--items", ["--rubric", "mohler"]),
    "grade": ("--items", ["--run", "no-run"]),
    "review push": ("--items", ["--rubric", "mohler"]),
    "explain": ("--items", ["--run", "no-run", "q.1"]),
    "train": ("--table", ["--rubric", "mohler"]),
    "learning-curve": ("--table", ["--rubric", "mohler", "--out", "curve"]),
    "ablate": ("--table", ["--rubric", "mohler", "--out", "abl"]),
    "audit": ("--table", ["--run", "no-run"]),
    "intervene": ("--table", ["--run", "no-run"]),
    "report": ("--table", ["--run", "no-run"]),
    "rubric fit-points": ("--table", ["--rubric", "mohler", "--out", "points.yaml"]),
    "rubric diagnose": ("--table", ["--run", "no-run"]),
}
RUBRIC_COMMANDS = (
    "show",
    "lint",
    "export",
    "points",
    "fit-points",
)  # the rubric was their positional argument
GOES = "will be removed in the next release"


def _commands(group: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """(name, command) for every command of the app, sub-groups walked."""
    for name, cmd in group.commands.items():
        full = f"{prefix} {name}".strip()
        if isinstance(getattr(cmd, "commands", None), dict):
            yield from _commands(cmd, full)
        else:
            yield full, cmd


COMMANDS = dict(_commands(typer.main.get_command(app)))


def _notes(res: Result) -> list[str]:
    return [line for line in res.stderr.splitlines() if line.startswith("note:") and GOES in line]


def test_each_short_flag_has_one_long_meaning_and_no_visible_data_option() -> None:
    meanings: dict[str, set[str]] = defaultdict(set)
    for name, cmd in COMMANDS.items():
        for p in cmd.params:
            if p.param_type_name != "option" or p.hidden:
                continue
            names = [*p.opts, *p.secondary_opts]
            assert "--data" not in names, f"`{name}` shows --data in its help"
            longs = ",".join(sorted(o for o in names if o.startswith("--")))
            for short in (o for o in names if not o.startswith("--")):
                meanings[short].add(longs)
    two = {s: m for s, m in meanings.items() if len(m) > 1}
    assert not two, f"short flags with two meanings: {two}"
    assert meanings["-n"] == {"--limit"} and meanings["-l"] == {"--labels"} and meanings["-r"] == {"--rubric"}


def test_the_old_data_is_hidden_where_it_was_and_the_new_word_is_shown() -> None:
    had = {name for name, cmd in COMMANDS.items() if any("--data" in p.opts for p in cmd.params)}
    assert had == set(OLD_DATA)
    for name, (new, _) in OLD_DATA.items():
        params = COMMANDS[name].params
        assert all(p.hidden for p in params if "--data" in p.opts)
        assert any(new in p.opts and not p.hidden for p in params), f"`{name}` has no {new}"


def test_the_rubric_is_an_option_in_every_rubric_command() -> None:
    for sub in RUBRIC_COMMANDS:
        params = COMMANDS[f"rubric {sub}"].params
        assert any("--rubric" in p.opts and "-r" in p.opts and not p.hidden for p in params), sub
        assert all(p.hidden for p in params if p.param_type_name == "argument"), sub
    assert not COMMANDS["rubric validate"].params[0].hidden  # validate checks files: they stay its arguments


@pytest.mark.parametrize("command", sorted(OLD_DATA))
def test_old_and_new_spelling_together_is_one_line(
    command: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    new, rest = OLD_DATA[command]
    res = runner.invoke(app, [*command.split(), *rest, "--data", "a.csv", new, "b.csv"])
    assert res.exit_code == 2
    assert res.stderr.splitlines() == [f"error: --data is the old spelling of {new}: give {new} only"]
    assert list(tmp_path.iterdir()) == []  # refused before any work


@pytest.mark.parametrize("command", sorted(OLD_DATA))
def test_the_old_data_is_read_as_the_new_word_with_one_note(
    command: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    new, rest = OLD_DATA[command]
    res = runner.invoke(app, [*command.split(), *rest, "--data", "missing.csv"])
    assert _notes(res) == [f"note: --data is renamed {new} here; --data {GOES}"]
    assert (
        res.exit_code != 0 and "Traceback" not in res.output
    )  # nothing here exists: the first check stops it
    assert res.stderr.count("note:") == 1


# ---------------------------------------------------------------- the old spellings at work, on a tiny run
@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Result]:
    """A tiny run trained with the old `train --data` (the run, its table, what train printed)."""
    tmp = tmp_path_factory.mktemp("words")
    table = tmp / "adjudicated.csv"
    mohler_like_table(40).to_csv(table, index=False)
    run = tmp / "run"
    res = runner.invoke(
        app,
        [
            "train",
            "--data",
            str(table),
            "--rubric",
            "mohler",
            "--backbone",
            build_backbone(tmp, "bert"),
            "--epochs",
            "1",
            "--max-len",
            "32",
            "--out",
            str(run),
            "--device",
            "cpu",
            "--lr",
            "3e-3",
        ],
    )
    assert res.exit_code == 0, res.output
    return run, table, res


def test_train_reads_the_old_data_as_its_table(trained: tuple[Path, Path, Result]) -> None:
    run, _, res = trained
    assert _notes(res) == [f"note: --data is renamed --table here; --data {GOES}"]
    assert (run / "metrics.json").is_file() and (run / "test_predictions.csv").is_file()


def test_grade_reads_the_old_data_as_its_items(trained: tuple[Path, Path, Result], tmp_path: Path) -> None:
    run, _, _ = trained
    new = mohler_like_table(12, seed=3).drop(columns=[*KEYS, "grade"])
    new.to_csv(tmp_path / "new.csv", index=False)
    res = runner.invoke(
        app,
        [
            "grade",
            "--run",
            str(run),
            "--data",
            str(tmp_path / "new.csv"),
            "--out",
            str(tmp_path / "graded.csv"),
        ],
    )
    assert res.exit_code == 0, res.output
    assert _notes(res) == [f"note: --data is renamed --items here; --data {GOES}"]
    assert list(pd.read_csv(tmp_path / "graded.csv")["id"]) == list(new["id"])


def test_explain_and_intervene_read_the_old_data(trained: tuple[Path, Path, Result], tmp_path: Path) -> None:
    run, table, _ = trained
    first = str(pd.read_csv(table)["id"].iloc[0])
    res = runner.invoke(
        app, ["explain", "--run", str(run), "--data", str(table), first, "--out", str(tmp_path / "x")]
    )
    assert res.exit_code == 0, res.output
    assert _notes(res) == [f"note: --data is renamed --items here; --data {GOES}"]
    assert set(pd.read_csv(tmp_path / "x" / "explain.csv")["id"].astype(str)) == {first}
    res = runner.invoke(
        app,
        [
            "intervene",
            "--run",
            str(run),
            "--data",
            str(table),
            "--out",
            str(tmp_path / "i"),
            "--repeats",
            "1",
        ],
    )
    assert res.exit_code == 0, res.output
    assert _notes(res) == [f"note: --data is renamed --table here; --data {GOES}"]
    assert (tmp_path / "i" / "intervention.csv").is_file()


def test_fit_points_reads_the_old_data_and_the_old_rubric_argument(
    trained: tuple[Path, Path, Result], tmp_path: Path
) -> None:
    _, table, _ = trained
    res = runner.invoke(
        app,
        [
            "rubric",
            "fit-points",
            "mohler",
            "--data",
            str(table),
            "--out",
            str(tmp_path / "p.yaml"),
            "--folds",
            "0",
        ],
    )
    assert res.exit_code == 0, res.output
    assert len(_notes(res)) == 2  # one for the argument, one for --data
    doc = yaml.safe_load((tmp_path / "p.yaml").read_text())
    assert all("points" in lv for c in doc["concepts"] for lv in c["levels"])


def test_learning_curve_reads_the_old_data_as_its_table(
    trained: tuple[Path, Path, Result], tmp_path: Path
) -> None:
    _, table, _ = trained
    res = runner.invoke(
        app,
        [
            "learning-curve",
            "--data",
            str(table),
            "--rubric",
            "mohler",
            "--variants",
            "points",
            "--sizes",
            "10,all",
            "--folds",
            "2",
            "--repeats",
            "1",
            "--out",
            str(tmp_path / "c"),
        ],
    )
    assert res.exit_code == 0, res.output
    assert _notes(res) == [f"note: --data is renamed --table here; --data {GOES}"]
    assert set(pd.read_csv(tmp_path / "c" / "curve.csv")["variant"]) == {"points"}


# ---------------------------------------------------------------- the rubric, rubric new, train's switches
@pytest.mark.parametrize("sub", ["show", "lint", "export"])
def test_the_rubric_argument_still_works_with_one_note(sub: str) -> None:
    wide = {"COLUMNS": "300"}
    new = runner.invoke(app, ["rubric", sub, "--rubric", "mohler"], env=wide)
    old = runner.invoke(app, ["rubric", sub, "mohler"], env=wide)
    assert new.exit_code == old.exit_code == 0, old.output
    assert old.stdout == new.stdout and _notes(new) == []
    assert _notes(old) == [
        f"note: the rubric as an argument is renamed --rubric/-r here; the argument {GOES}"
    ]


@pytest.mark.parametrize("sub", RUBRIC_COMMANDS)
def test_the_rubric_given_twice_or_not_at_all_is_one_line(
    sub: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    rest = {"points": ["--labels", "l.csv"], "fit-points": ["--out", "p.yaml"]}.get(sub, [])
    both = runner.invoke(app, ["rubric", sub, "mohler", "-r", "mohler", *rest])
    assert both.exit_code == 2
    assert both.stderr.splitlines() == [
        "error: the RUBRIC argument is the old spelling of --rubric: give --rubric only"
    ]
    neither = runner.invoke(app, ["rubric", sub, *rest])
    assert neither.exit_code == 2 and len(neither.stderr.splitlines()) == 1
    assert neither.stderr.startswith("error: --rubric is missing: give --rubric NAME")
    assert list(tmp_path.iterdir()) == []


def test_rubric_new_takes_its_old_short_flags_for_one_release(tmp_path: Path) -> None:
    out = tmp_path / "cs1.yaml"
    res = runner.invoke(app, ["rubric", "new", "-n", "cs1", "-c", "A,B", "-l", "4", "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert _notes(res) == [
        f"note: -n is renamed --name here; -n {GOES}",
        f"note: -l is renamed --levels here; -l {GOES}",
    ]
    doc = yaml.safe_load(out.read_text())
    assert doc["name"] == "cs1" and [len(c["levels"]) for c in doc["concepts"]] == [4, 4]
    res = runner.invoke(app, ["rubric", "new", "-c", "A,B", "--out", str(tmp_path / "x.yaml")])
    assert res.exit_code == 2 and res.stderr.splitlines() == [
        "error: --name is missing: give --name ID, e.g. --name cs101"
    ]
    res = runner.invoke(
        app, ["rubric", "new", "-n", "a", "--name", "b", "-c", "A", "--out", str(tmp_path / "y.yaml")]
    )
    assert res.exit_code == 2 and res.stderr.splitlines() == [
        "error: -n is the old spelling of --name: give --name only"
    ]
    assert not (tmp_path / "x.yaml").exists() and not (tmp_path / "y.yaml").exists()


def test_train_help_shows_no_ablation_switch() -> None:
    shown = {o for p in COMMANDS["train"].params if not p.hidden for o in [*p.opts, *p.secondary_opts]}
    assert not shown & {
        "--race",
        "--no-race",
        "--opcc",
        "--no-opcc",
        "--lcec",
        "--no-lcec",
        "--crossfit",
        "--data",
    }
    assert {"--table", "--cfg", "--variant"} <= shown


@pytest.mark.parametrize(
    ("switch", "instead"),
    [
        (["--no-race"], "rubrictool ablate --variants opcc+lcec (the same combination)"),
        (
            ["--no-opcc"],
            "--cfg stage1.lambda_r=0 (the same training), or rubrictool ablate --variants race+lcec",
        ),
        (["--crossfit", "3"], "--cfg stage2.crossfit=3"),
    ],
)
def test_a_retired_train_switch_names_what_replaces_it(
    switch: list[str], instead: str, tmp_path: Path
) -> None:
    table = tmp_path / "t.csv"
    mohler_like_table(20).to_csv(table, index=False)
    res = runner.invoke(
        app,
        [
            "train",
            "--table",
            str(table),
            "--rubric",
            "mohler",
            *switch,
            "--seeds",
            "0",
            "--out",
            str(tmp_path / "run"),
        ],
    )
    assert (
        res.exit_code == 1 and "at least one seed" in res.stderr
    )  # refused before training: the switch was read
    (note,) = _notes(res)
    assert note.startswith(f"note: {switch[0]} {GOES} from `train`; instead: ") and instead in note
