"""The dry run's total says "unknown" when no model's price is known (a local server), and a partial total
naming the unpriced models when some are known — never a made-up $0.0000. A science course, not Mohler."""

from __future__ import annotations

import re

import pandas as pd
import pytest
from rich.console import Console

from rubrictool.annotate import AnnotateConfig, DryRunReport, dry_run
from rubrictool.cli.annotate import print_dry_run
from rubrictool.rubric import parse_rubric
from rubrictool.rubric.scaffold import scaffold_rubric

RUBRIC = parse_rubric(
    re.sub(r"TODO[^\n]*", "evidence from the experiment",
           scaffold_rubric("science", ["EV", "CL"], grade_min=0, grade_max=2)),
    "science.yaml",
)
ITEMS = pd.DataFrame({
    "id": ["q1.1", "q1.2", "q2.1"],
    "question": ["What does a plant need for photosynthesis?"] * 2 + ["What causes erosion?"],
    "response": ["light and water", "soil", "water carries the soil away"],
    "reference": ["Light, water and carbon dioxide."] * 2 + ["Flowing water."],
    "grade": [1, 0, 2],
})


def shown(models: tuple[str, ...]) -> tuple[DryRunReport, str]:
    rep = dry_run(ITEMS, RUBRIC, AnnotateConfig(models=models, cache=None))
    con = Console(record=True, width=250)
    print_dry_run(rep, con)
    line = next(x for x in con.export_text().splitlines() if x.startswith("estimated cost of the whole run"))
    return rep, line


def test_no_price_known_says_unknown_not_zero() -> None:
    rep, line = shown(("openai/local-science", "openai/other-local"))
    assert rep.est_cost_usd is None
    assert "$0.0000" not in line
    assert "unknown (no price known for openai/local-science, openai/other-local)" in line


def test_some_prices_known_gives_a_partial_total_and_names_the_rest() -> None:
    rep, line = shown(("gpt-4o", "openai/local-science"))
    gpt = rep.models[0]
    assert rep.est_cost_usd == pytest.approx(gpt.est_cost_usd)
    assert rep.unpriced == ["openai/local-science"]
    assert f"${gpt.est_cost_usd:.4f} for the priced models, plus an unknown amount for openai/local-science" in line


def test_all_prices_known_gives_the_total() -> None:
    rep, line = shown(("gpt-4o",))
    assert rep.unpriced == []
    assert line.startswith(f"estimated cost of the whole run: ${rep.est_cost_usd:.4f} (")
