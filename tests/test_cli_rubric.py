"""`rubrictool rubric ...`: run each command with CliRunner, then check what it wrote or printed
through the library."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from rubrictool.cli import app
from rubrictool.rubric import Rubric, lint_rubric, load_rubric, parse_rubric
from tests.support.files import edited, line_of, mohler_text

runner = CliRunner()


def test_rubric_list_shows_bundled_and_folder(tmp_path: Path) -> None:
    r = runner.invoke(app, ["rubric", "new", "--name", "cs101", "--concepts", "A,B", "--out",
                            str(tmp_path / "cs101.yaml")])
    assert r.exit_code == 0, r.output
    (tmp_path / "broken.yaml").write_text("name: [\n")
    res = runner.invoke(app, ["rubric", "list", "--folder", str(tmp_path)], env={"COLUMNS": "250"})
    assert res.exit_code == 0, res.output
    for name in ("asap2", "mocha", "mohler", "cs101", "broken"):
        assert name in res.output
    assert "(bundled)" in res.output and "YAML syntax error" in res.output


def test_rubric_show_prints_every_concept_and_anchor() -> None:
    res = runner.invoke(app, ["rubric", "show", "--rubric", "asap2"], env={"COLUMNS": "400"})
    assert res.exit_code == 0, res.output
    r = load_rubric("asap2")
    for c in r.concepts:
        assert c.name in res.output
        for lv in c.levels:
            assert lv.anchor in res.output


def test_rubric_show_says_what_holds_on_every_question() -> None:
    res = runner.invoke(app, ["rubric", "show", "--rubric", "mohler"], env={"COLUMNS": "400"})
    assert res.exit_code == 0, res.output
    assert res.output.count("reference: top") == 4 and res.output.count("off-topic: bottom") == 3  # FC CC TU R; FC CC R
    plain = runner.invoke(app, ["rubric", "show", "--rubric", "asap2"], env={"COLUMNS": "400"}).output
    assert "reference: top" not in plain and "off-topic" not in plain  # essays: nothing marked


def test_rubric_show_unknown_is_one_line_error() -> None:
    res = runner.invoke(app, ["rubric", "show", "--rubric", "nope"])
    assert res.exit_code == 1
    assert "error: unknown rubric 'nope'" in res.output and "Traceback" not in res.output


def test_rubric_validate_good_and_bad(tmp_path: Path) -> None:
    good = tmp_path / "good.yaml"
    good.write_text(mohler_text())
    bad = tmp_path / "bad.yaml"
    text = edited("{value: 2, anchor: Basic usage}", "{value: 2}")
    text = edited("- key: CC", "- key: FC", text)
    bad.write_text(text)
    res = runner.invoke(app, ["rubric", "validate", str(good)])
    assert res.exit_code == 0 and f"ok: {good}" in res.output
    res = runner.invoke(app, ["rubric", "validate", str(good), str(bad)])
    assert res.exit_code == 1
    lines = [ln for ln in res.output.splitlines() if ln.startswith(str(bad))]
    assert lines == [
        (f"{bad}:{line_of(text, 'key: FC', 1)}: concepts.1.key: duplicate concept key 'FC' (concept #0 has it "
         "too); every concept needs its own key"),
        f"{bad}:{line_of(text, '{value: 2}')}: concepts.2.levels.1.anchor: required field 'anchor' is missing",
    ]
    assert f"ok: {good}" in res.output and "1 of 2 rubric file(s) have errors" in res.output


def test_rubric_validate_bundled_files() -> None:
    paths = [str(Path("rubrics") / f"{n}.yaml") for n in ("mohler", "asap2", "mocha")]
    res = runner.invoke(app, ["rubric", "validate", *paths])
    assert res.exit_code == 0, res.output
    assert res.output.count("ok: ") == 3


def test_rubric_new_writes_a_rubric_that_loads(tmp_path: Path) -> None:
    out = tmp_path / "course" / "cs101.yaml"
    res = runner.invoke(app, ["rubric", "new", "--name", "cs101", "--concepts", "FC, CC,TU", "--levels", "4",
                              "--grade-min", "1", "--grade-max", "10", "--title", "CS 101", "--out", str(out)])
    assert res.exit_code == 0, res.output
    r = load_rubric(out)
    assert (r.name, r.title, r.keys, r.scale.max, r.grade.min, r.grade.max) == (
        "cs101", "CS 101", ["FC", "CC", "TU"], 4, 1, 10)
    assert runner.invoke(app, ["rubric", "validate", str(out)]).exit_code == 0
    again = runner.invoke(app, ["rubric", "new", "--name", "cs101", "--concepts", "X", "--out", str(out)])
    assert again.exit_code == 1 and "already exists" in again.output
    assert load_rubric(out).keys == ["FC", "CC", "TU"]  # untouched
    forced = runner.invoke(app, ["rubric", "new", "--name", "cs101", "--concepts", "X", "--out", str(out), "--force"])
    assert forced.exit_code == 0 and load_rubric(out).keys == ["X"]
    bad = runner.invoke(app, ["rubric", "new", "--name", "cs101", "--concepts", "1X", "--out",
                              str(tmp_path / "b.yaml")])
    assert bad.exit_code == 1 and "starts with a letter" in bad.output and not (tmp_path / "b.yaml").exists()


def test_rubric_new_default_path(tmp_path: Path, monkeypatch: object) -> None:
    import os

    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        res = runner.invoke(app, ["rubric", "new", "--name", "bio2", "--concepts", "A"])
        assert res.exit_code == 0, res.output
        assert load_rubric(tmp_path / "bio2.yaml").name == "bio2"
    finally:
        os.chdir(cwd)


def test_rubric_lint_exit_codes(tmp_path: Path) -> None:
    res = runner.invoke(app, ["rubric", "lint", "--rubric", "mohler"])
    expected = lint_rubric(load_rubric("mohler"))
    assert res.exit_code == 0
    assert [ln for ln in res.output.splitlines() if ln.startswith("warning: ")] == [f"warning: {w}" for w in expected]
    assert f"{len(expected)} warning(s) in mohler" in res.output
    assert runner.invoke(app, ["rubric", "lint", "--rubric", "mohler", "--strict"]).exit_code == 1
    dup = tmp_path / "dup.yaml"
    dup.write_text(edited("{value: 2, anchor: Partially correct}", "{value: 2, anchor: Correct}"))
    out = runner.invoke(app, ["rubric", "lint", "--rubric", str(dup)]).output
    assert "repeated-anchor" in out and "concepts.FC.levels.3" in out
    clean = tmp_path / "clean.yaml"
    r = load_rubric("mocha")
    full = r.model_copy(update={"concepts": [
        c.model_copy(update={"examples": [e.model_copy(update={"level": v}) for v in c.values for e in c.examples[:1]]})
        for c in r.concepts
    ]})
    clean.write_text(json.dumps(full.model_dump(mode="json", exclude_none=True)))  # JSON is YAML
    res = runner.invoke(app, ["rubric", "lint", "--rubric", str(clean), "--strict"])
    assert res.exit_code == 0 and "0 warning(s)" in res.output


def test_rubric_export_markdown_and_json(tmp_path: Path) -> None:
    res = runner.invoke(app, ["rubric", "export", "--rubric", "mohler", "--out-format", "markdown"])
    assert res.exit_code == 0
    assert "| Concept | Definition | Example | Score scale |" in res.output
    assert "| Depth of Understanding (DU) |" in res.output
    out = tmp_path / "mocha.json"
    res = runner.invoke(app, ["rubric", "export", "--rubric", "mocha", "--out-format", "json", "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert Rubric.model_validate(json.loads(out.read_text())) == load_rubric("mocha")
    assert parse_rubric(out.read_text()) == load_rubric("mocha")  # the JSON also loads as a rubric file
    res = runner.invoke(app, ["rubric", "export", "--rubric", "mohler", "--out-format", "html"])
    assert res.exit_code == 1 and "unknown export format 'html'" in res.output
