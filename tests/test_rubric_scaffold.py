"""`rubric new` writes a scaffold that stays valid YAML when a teacher types into it: every text to replace
is a `>-` block, so commas, colons, quotes and braces in the new words cannot break the file."""

from __future__ import annotations

import re
from pathlib import Path

from typer.testing import CliRunner

from rubrictool.cli import app
from rubrictool.rubric import load_rubric, parse_rubric
from rubrictool.rubric.lint import lint_rubric

runner = CliRunner()

# what a teacher writes: the text that broke the old `{text: ..., note: TODO why}` flow mapping, and worse
HOSTILE = 'names the mechanism, not how it tells: {light} [water] "CO2" \'sun\' # a note & *star, 50% - ok'


def fill_todos(text: str) -> str:
    """Replace every TODO placeholder (the rest of its line) with a teacher's own words."""
    return re.sub(r"TODO[^\n]*", lambda m: HOSTILE, text)


def test_scaffold_survives_the_teachers_edits_and_lint_flags_only_the_placeholders(tmp_path: Path) -> None:
    out = tmp_path / "science.yaml"
    res = runner.invoke(app, ["rubric", "new", "--name", "science", "--concepts", "EV,CL", "--levels", "3",
                              "--grade-min", "0", "--grade-max", "2", "--title", "Science, year 8: plants", "--out",
                              str(out)])
    assert res.exit_code == 0, res.output
    draft = load_rubric(str(out))
    assert draft.grade.min == 0 and draft.grade.max == 2
    assert draft.title == "Science, year 8: plants"
    assert {w.code for w in lint_rubric(draft)} >= {"placeholder"}
    assert "{text:" not in out.read_text()  # no flow mapping left to break

    edited = fill_todos(out.read_text())
    assert "TODO" not in edited
    out.write_text(edited)
    rubric = load_rubric(str(out))
    ev = rubric.concept("EV")
    assert ev.name == HOSTILE
    assert ev.anchor(2) == HOSTILE
    assert ev.examples[0].text == HOSTILE and ev.examples[0].note == HOSTILE and ev.examples[0].level == 3
    assert rubric.description == HOSTILE
    assert "placeholder" not in {w.code for w in lint_rubric(rubric)}
    res = runner.invoke(app, ["rubric", "validate", str(out)])
    assert res.exit_code == 0, res.output


def test_scaffold_title_with_quotes_and_newlines_stays_one_line() -> None:
    from rubrictool.rubric.scaffold import scaffold_rubric

    r = parse_rubric(scaffold_rubric("bio", ["A"], title='Bio "101"\n# not a comment: x'))
    assert r.title == 'Bio "101" # not a comment: x'
