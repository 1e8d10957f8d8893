"""Rubric YAML edits on the layout `rubric new` writes: every text in a folded block scalar (``>-``), levels as block
mappings. The YAML scanner ends such a node at the next token, past the line break and the next line's indentation;
an edit placed there landed on the next line and broke the file (`rubric fit-points` on a scaffolded rubric:
"cannot edit the rubric: it is not valid YAML")."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from typer.testing import CliRunner

from rubrictool.cli import app
from rubrictool.rubric import load_rubric, parse_rubric
from rubrictool.rubric.patch import add_concept, set_anchor, set_grading, set_level_points
from rubrictool.rubric.scaffold import scaffold_rubric

KEYS = ["SAFE", "METH", "UNIT"]


def _scaffold() -> str:
    """A `rubric new` rubric (3 concepts, levels 1..3, grade 0..10) with its TODOs filled in."""
    text = scaffold_rubric("chemlab", KEYS, levels=3, grade_min=0, grade_max=10, title="Chemistry lab")
    return text.replace("TODO: ", "").replace("TODO", "filled")


def test_points_grading_anchor_and_concept_edits_keep_block_scalars_valid() -> None:
    text = _scaffold()
    points = [[0.0, 1.0, 2.0], [0.0, 2.0, 4.0], [0.0, 1.5, 3.0]]
    edited = set_grading(set_level_points(text, points), {"points": "sum", "map": "direct"})
    rb = parse_rubric(edited, "chemlab-points.yaml")
    assert [[lv.points for lv in c.levels] for c in rb.concepts] == points
    assert rb.grading is not None and rb.grading.map == "direct"
    # the anchors kept their text (the edit went after the block scalar, not into the next line)
    assert rb.concepts[1].levels[2].anchor == parse_rubric(text, "x.yaml").concepts[1].levels[2].anchor
    # points already there are replaced in place
    again = parse_rubric(set_level_points(edited, [[1.0, 2.0, 3.0]] * 3), "again.yaml")
    assert [lv.points for lv in again.concepts[2].levels] == [1.0, 2.0, 3.0]

    sharper = parse_rubric(set_anchor(text, 1, 0, "Steps missing: nothing could be repeated"), "a.yaml")
    assert sharper.concepts[1].levels[0].anchor == "Steps missing: nothing could be repeated"
    assert sharper.concepts[1].levels[1].value == 2  # the next level is still its own mapping

    more = parse_rubric(add_concept(text, {"key": "CONC", "name": "Conclusion", "definition": "Draws a conclusion.",
                                           "levels": [{"value": v, "anchor": f"level {v}"} for v in (1, 2, 3)]}),
                        "c.yaml")
    assert [c.key for c in more.concepts] == [*KEYS, "CONC"]
    assert more.concepts[2].examples and more.concepts[2].examples[0].level == 3  # UNIT's examples kept


def test_cli_fit_points_on_a_scaffolded_rubric(tmp_path: Path) -> None:
    rubric = tmp_path / "chemlab.yaml"
    rubric.write_text(_scaffold())
    rng = np.random.default_rng(0)
    levels = rng.integers(1, 4, size=(80, 3))
    data = tmp_path / "adjudicated.csv"
    pd.DataFrame({"id": [f"a{i}" for i in range(80)], **{k: levels[:, j] for j, k in enumerate(KEYS)},
                  "grade": np.clip(levels.sum(1) - 2, 0, 10)}).to_csv(data, index=False)
    out = tmp_path / "chemlab-points.yaml"
    res = CliRunner().invoke(app, ["rubric", "fit-points", "--rubric", str(rubric), "--table", str(data), "--out",
                                   str(out)])
    assert res.exit_code == 0, res.output
    rb = load_rubric(out)
    assert rb.has_points and all(lv.points is not None for c in rb.concepts for lv in c.levels)
    assert "# Rubric inventory" in out.read_text()  # the author's comments kept
