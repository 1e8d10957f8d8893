"""A course (the statistics quiz, not Mohler) whose every concept level a teacher set through `adjudicate
--resolutions` over a disagreeing LLM panel: run.json, folds.md, the pooled page, a fold's page and `rubric
diagnose` say so, with the shares, and none of them names the panel as the source of the levels. The same k-fold run
shows the low marks, the reliability table with what σ² measures, and the route its own figures support."""

from __future__ import annotations

import html
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from rubrictool.adjudicate import AdjudicationOptions, adjudicate
from rubrictool.adjudicate.provenance import describe_level_sources, level_source_counts
from rubrictool.adjudicate.run import write_outputs
from rubrictool.cli import app
from rubrictool.evaluate.reliability import SIGMA2_MEANING
from rubrictool.report.diagnose import diagnose_dir
from rubrictool.rubric import load_rubric
from tests.support.stats_course import STATS_KEYS, stats_rubric, stats_table
from tests.support.tiny_models import build_backbone

pytestmark = pytest.mark.usefixtures("one_thread")

runner = CliRunner()
N = 48
TEACHER = f"{3 * N} of {3 * N} levels set by a teacher's resolution"


def _panel_and_teacher(tmp: Path) -> tuple[Path, Path]:
    """(adjudicate's output folder, rubric): three LLM reviewers who label at random (α about 0) and a teacher who
    resolves every level to the answer's own."""
    rubric = stats_rubric(tmp)
    rb = load_rubric(rubric)
    table = stats_table(N)
    rng = np.random.default_rng(3)
    reviews = pd.DataFrame([{"item": r.id, "reviewer": f"llm-{j}", "concept": k, "level": int(rng.integers(0, 3)),
                             "source": "llm"} for r in table.itertuples() for j in range(3) for k in STATS_KEYS])
    resolutions = pd.DataFrame([{"item": r["id"], "concept": k, "level": int(r[k]), "note": "", "decided_by": "teacher"}
                                for r in table.to_dict("records") for k in STATS_KEYS])
    items = table[["id", "question", "response", "reference", "grade", "grade_ta", "grade_prof"]]
    result = adjudicate(reviews, rb, items, resolutions=resolutions,
                        options=AdjudicationOptions(n_boot=50, coverage=False))
    out = tmp / "adjudicated"
    write_outputs(result, out)
    return out, rubric


@pytest.fixture(scope="module")
def resolved_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """(k-fold run, adjudicate's folder, rubric): `train --folds 3` on the teacher's levels with a tiny BERT."""
    tmp = tmp_path_factory.mktemp("teacher")
    adj, rubric = _panel_and_teacher(tmp)
    out = tmp / "run"
    res = runner.invoke(app, ["train", "--table", str(adj / "adjudicated.csv"), "--agreement",
                              str(adj / "agreement.json"),
                              "--rubric", str(rubric), "--backbone", build_backbone(tmp, "bert"), "--epochs", "1",
                              "--max-len", "16", "--device", "cpu", "--lr", "3e-3", "--cfg", "joint.epochs=0",
                              "--folds", "3", "--encoder", "frozen", "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert "verdict:" in res.output and "low marks: per true mark" in res.output
    # --max-len 16 cuts the answers: every fold encodes the whole table, and the run says so once, not three times
    assert " ".join(res.output.split()).count("tokens and were truncated") == 1, res.output
    return out, adj, rubric


def test_the_table_carries_who_set_each_level(tmp_path: Path) -> None:
    adj, rubric = _panel_and_teacher(tmp_path)
    table = pd.read_csv(adj / "adjudicated.csv", dtype={"id": str})
    counts = level_source_counts(table, load_rubric(rubric).keys)
    assert counts == {"resolution": 3 * N}
    assert describe_level_sources(counts) == TEACHER
    assert describe_level_sources({"llm": 200, "resolution": 76}) == \
        "200 of 276 levels set by the LLM panel, 76 by a teacher's resolution"


def test_every_page_of_the_run_says_a_teacher_set_the_levels(resolved_run: tuple[Path, Path, Path]) -> None:
    run, _, _ = resolved_run
    for fold in range(3):
        labels = json.loads((run / f"fold-{fold}" / "run.json").read_text())["labels"]
        assert labels["source"] == "resolution" and labels["levels"] == {"resolution": 3 * N}
        assert labels["expert_validated"] is True
    folds_md = (run / "folds.md").read_text()
    assert f"Labels: a teacher ({TEACHER}): set by people." in folds_md
    assert json.loads((run / "folds.json").read_text())["labels"]["source"] == "resolution"
    for target in (run, run / "fold-0"):
        res = runner.invoke(app, ["report", "--run", str(target)])
        assert res.exit_code == 0, res.output
        for name in ("report.md", "report.html"):
            page = html.unescape((target / "report" / name).read_text())
            assert TEACHER in page, (target, name)
            assert "an LLM panel" not in page and "not expert-validated" not in page, (target, name)


def test_diagnose_names_the_teacher_and_the_panel_apart(resolved_run: tuple[Path, Path, Path]) -> None:
    _, adj, rubric = resolved_run
    d = diagnose_dir(adj, str(rubric))
    assert any(TEACHER in n for n in d.notes)
    low = [s for s in d.suggestions if "α =" in s]
    assert low and all("the LLM panel" in s and "teacher's resolution replaced" in s for s in low)
    assert not any("reviewers do not apply it consistently" in s for s in d.suggestions)


def test_the_kfold_pages_show_low_marks_reliability_and_the_route(resolved_run: tuple[Path, Path, Path]) -> None:
    run, _, _ = resolved_run
    folds_md = (run / "folds.md").read_text()
    summary = json.loads((run / "folds.json").read_text())
    assert "## Verdict" in folds_md and "## Low marks" in folds_md and "## Reliability" in folds_md
    assert folds_md.count("were truncated") == 1  # the truncation warning, once
    assert SIGMA2_MEANING in folds_md
    # the panel's α is about 0 on every concept: its levels are never the route
    lines = summary["route"]["lines"]
    assert lines[0].startswith("Route:") and lines[1].startswith("Decided by:")
    assert not lines[0].startswith("Route: points on the LLM panel's levels")
    assert "points_panel" in summary["route"]["figures"]  # measured on the panel's own votes
    lm = summary["low_marks"]
    assert lm["pass_mark"] == 1 and sum(r["n"] for r in lm["per_mark"]) == N
    page = (run / "report" / "report.md").read_text() if (run / "report").is_dir() else ""
    if not page:
        assert runner.invoke(app, ["report", "--run", str(run)]).exit_code == 0
        page = (run / "report" / "report.md").read_text()
    assert "## Low marks" in page and "## Reliability" in page and "σ²(implied)" in page
    assert page.count("were truncated") == 1 and "raise --max-len" in page
    assert lines[0].split(" (")[0] in page and "pass mark 1 (the scale" in page
    fold_page = (run / "fold-0" / "report" / "report.md").read_text() if (run / "fold-0" / "report").is_dir() else ""
    if not fold_page:
        assert runner.invoke(app, ["report", "--run", str(run / "fold-0")]).exit_code == 0
        fold_page = (run / "fold-0" / "report" / "report.md").read_text()
    assert "## Low marks" in fold_page and SIGMA2_MEANING in fold_page


def test_the_pages_show_low_marks_and_reliability_in_a_browser(resolved_run: tuple[Path, Path, Path]) -> None:
    """The pooled page and a fold's page in headless Chromium: the low-marks table, the reliability table with what
    σ² measures, the route and who set the levels are displayed (screenshots kept for a person to look at)."""
    from conftest import require_or_skip

    from tests.support.browser import artifact_path, chromium, have_chromium

    require_or_skip(have_chromium(), "no chromium/chromedriver: setup.sh --all installs them")
    run, _, _ = resolved_run
    for target in (run, run / "fold-0"):
        if not (target / "report" / "report.html").is_file():
            assert runner.invoke(app, ["report", "--run", str(target)]).exit_code == 0
    with chromium(1200, 900) as driver:
        for target, name in ((run, "pooled"), (run / "fold-0", "fold-0")):
            driver.get((target / "report" / "report.html").as_uri())
            text = driver.find_element("tag name", "body").text
            for needle in ("Low marks", "Failing answers (marked below the pass mark, 1)", "σ²(implied)",
                           "What σ² measures", TEACHER):
                assert needle in text, (name, needle)
            if name == "pooled":
                assert "Route:" in driver.find_element("id", "verdict").text
            else:
                assert driver.find_element("id", "low-marks").is_displayed()
            height = int(driver.execute_script("return document.body.scrollHeight"))
            driver.set_window_size(1200, min(height + 40, 16000))
            shot = artifact_path(f"teacher-{name}.png")
            driver.save_screenshot(str(shot))
            print(f"screenshot: {shot}")


def test_an_audit_where_a_pasted_reference_gains_a_mark_says_do_not_auto_grade(
        resolved_run: tuple[Path, Path, Path]) -> None:
    run, _, _ = resolved_run
    audit = run / "fold-0" / "audit"
    audit.mkdir(exist_ok=True)
    rows = [{"transformation": "append_reference", "mean_grade_shift": 1.25},
            {"transformation": "append_keywords", "mean_grade_shift": 2.0}]  # only a pasted reference counts here
    (audit / "audit.json").write_text(json.dumps({"transformations": rows}))
    try:
        res = runner.invoke(app, ["report", "--run", str(run), "--out", str(run / "report-audited")])
        assert res.exit_code == 0, res.output
        page = (run / "report-audited" / "report.md").read_text()
        assert "Route: do not auto-grade" in page and "a pasted reference answer gains +1.25 marks" in page
    finally:
        (audit / "audit.json").unlink()


def test_each_level_is_counted_by_who_set_it_when_sources_mix() -> None:
    from rubrictool.adjudicate.provenance import level_sources
    from rubrictool.train.labels import describe_labels, label_source

    table = pd.DataFrame({"id": ["a", "b", "c", "d"], "MEAN": [1, 2, 0, pd.NA], "SPREAD": [0, 1, 2, pd.NA],
                          "UNITS": [2, 2, 1, pd.NA], "resolved_concepts": ["MEAN", "", "", ""],
                          "unreviewed_concepts": ["", "UNITS", "", ""],
                          "label_source": ["llm", "llm", "human", "none"]})
    lv = level_sources(table, STATS_KEYS).set_index(["id", "concept"])["source"]
    assert lv[("a", "MEAN")] == "resolution" and lv[("b", "UNITS")] == "pre-annotation"
    assert lv[("c", "UNITS")] == "human"
    assert ("d", "MEAN") not in lv.index  # an unlabelled answer has no level to count
    labels = label_source(table, {"label_source": "llm"}, None, STATS_KEYS)
    assert labels["levels"] == {"resolution": 1, "human": 3, "llm": 4, "pre-annotation": 1}
    assert labels["source"] == "mixed" and labels["expert_validated"] is False
    assert describe_labels(labels) == ("a mix of sources (1 of 9 levels set by a teacher's resolution, 3 by human "
                                       "reviewers, 4 by the LLM panel, 1 by the pre-annotations, which no reviewer "
                                       "saw): not expert-validated")
