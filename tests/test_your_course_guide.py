"""docs/your-course.md, executed: its commands, in order, on a synthetic CHEM 110 course (not Mohler).

The course (tests/data/chem110/, made by tests/support/courses.py; PROVENANCE.md there): a tutor's XLSX workbook
``chem110-marks.xlsx`` (sheet 'Marks' after a 'Read me' sheet; headers 'Student ID', 'Lab question', 'Answer', 'Model
answer', 'Mark (0-10)', 'Tutor comment'; 40 students × 4 lab questions = 160 answers, marks 0..10) and next term's
unmarked ``chem110-spring.xlsx`` (30 answers: 6 students × the 4 questions and a new fifth one).
Both are copied into an empty course folder, the test's working directory, before the first command.

How the guide is read:

- Every line of a ```bash block is a command, run in the order of the page: ``export NAME=VALUE`` sets an environment
  variable (``$PWD`` is the course folder); ``rubrictool ...`` runs through typer's CliRunner (the leading word
  dropped, the rest split like a shell would: quotes, ``#`` comments, ``\\`` continuations). Anything else fails
  the test, so the page cannot show a step this test does not run.
- ``<!-- guide-test: write PATH -->`` before a fenced block writes the block's text to PATH (the reader's own edit,
  e.g. the filled-in rubric); ``<!-- guide-test: skip: REASON -->`` before a ```bash block shows it without running
  it (none is skipped today).
- Every command must exit 0, and :data:`CHECKS` checks what it wrote through the library.

What the test changes in the commands (:data:`SUBSTITUTIONS`, each must be used, so the table stays current):

- ``annotate`` (not ``--dry-run``): the three paid models become three scripted models on a local OpenAI-compatible
  server (``--model openai/panel-{a,b,c} --api-base URL``; tests/support/llm_server.py, replies from
  courses.chemlab_panel_reply), and ``--budget 5`` is dropped (a local model has no price, so no budget can be
  enforced). The dry run keeps the real model names: it sends nothing and prices them from litellm's local map.
- ``train`` and ``learning-curve``: a tiny BERT whose vocabulary is the course's words instead of MiniLM, one epoch,
  ``--max-len 96``, CPU; ``--folds 5`` becomes ``--folds 2``; the curve runs sizes 24 and all, one repeat, REC-CBM
  only, on 2 folds, with train's recipe (so that ``--all-from`` reads its 'all' cells from step 7's folds).

None of these adds an input file, a rubric or a table: before the first ``grade`` (step 9), the test hides ``rubrics/``
and ``adjudicated/`` and unsets RUBRICTOOL_RUBRICS, so grade, explain, report and audit must work from ``--run``
alone, as the guide says.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from rubrictool.cli import app
from rubrictool.rubric import load_rubric
from rubrictool.tables import read_items, read_predictions
from rubrictool.train.runs import open_run
from tests.support.courses import CHEMLAB_KEYS, chemlab_marks, chemlab_panel_reply, chemlab_words
from tests.support.llm_server import Reply, ScriptedLLMServer, Seen
from tests.support.tiny_models import build_backbone

pytestmark = pytest.mark.usefixtures("one_thread")

GUIDE = Path(__file__).resolve().parent.parent / "docs" / "your-course.md"
COURSE = Path(__file__).resolve().parent / "data" / "chem110"  # the course's two workbooks (PROVENANCE.md there)
PAID_MODELS = "--model gpt-4o --model gemini/gemini-2.5-pro --model anthropic/claude-sonnet-4-5"
PANEL = ["panel-a", "panel-b", "panel-c"]
TINY = "--backbone {backbone} --epochs 1 --max-len 96 --device cpu"


@dataclass(frozen=True)
class Sub:
    """In commands starting with ``command`` (and, if ``unless`` is set, not containing it): replace ``old`` by
    ``new``; ``old=""`` appends ``new``. ``{url}`` and ``{backbone}`` are filled in."""

    command: str
    old: str
    new: str
    unless: str | None = None


SUBSTITUTIONS = [
    Sub("annotate", PAID_MODELS, " ".join(f"--model openai/{m}" for m in PANEL) + " --api-base {url}", "--dry-run"),
    Sub("annotate", "--budget 5", "", "--dry-run"),
    Sub("train", "--folds 5", "--folds 2"),
    Sub("train", "", TINY + " --cfg joint.epochs=1"),
    Sub("learning-curve", "--sizes 20,40,all", "--sizes 24,all"),
    Sub("learning-curve", "--variants reccbm,plm", "--variants reccbm"),
    Sub("learning-curve", "--repeats 3", "--repeats 1"),
    Sub("learning-curve", "", TINY + " --folds 2 --joint-epochs 1"),  # train's recipe: its folds stand in for 'all'
]

# The steps the guide must walk, in this order: a new course's path from its data to an audited grader.
STEPS = ["data import", "rubric new", "rubric lint", "annotate", "adjudicate", "rubric diagnose",
         "train --folds --final",
         "grade --gradebook --review-budget", "explain", "report runs/chemlab-5fold/fold-0", "audit",
         "report runs/chemlab-5fold"]


@dataclass
class Step:
    kind: str  # "run" | "env" | "write"
    text: str  # the command as the guide shows it, the VALUE of an export, or the file text
    target: str = ""  # the variable of an export, the PATH of a write
    line: int = 0


def guide_steps(text: str) -> list[Step]:
    """The guide's steps in page order (see the module docstring for the conventions)."""
    steps: list[Step] = []
    directive: tuple[str, str] | None = None
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        m = re.match(r"<!--\s*guide-test:\s*(write|skip)\s*:?\s*(.*?)\s*-->", line.strip())
        if m:
            directive = (m.group(1), m.group(2))
            i += 1
            continue
        fence = re.match(r"```(\w*)\s*$", line.strip())
        if not fence:
            i += 1
            continue
        lang, start = fence.group(1), i + 1
        i += 1
        while not lines[i].strip().startswith("```"):
            i += 1
        body = lines[start:i]
        i += 1
        if directive and directive[0] == "write":
            steps.append(Step("write", "\n".join(body) + "\n", directive[1], start))
        elif lang == "bash" and not directive:
            logical: list[tuple[int, str]] = []
            for n, raw in enumerate(body, start + 1):
                if logical and logical[-1][1].endswith("\\"):
                    logical[-1] = (logical[-1][0], logical[-1][1][:-1] + " " + raw.strip())
                else:
                    logical.append((n, raw.strip()))
            for n, cmd in logical:
                words = shlex.split(cmd, comments=True)
                if not words:
                    continue
                if words[0] == "export" and len(words) == 2 and "=" in words[1]:
                    name, value = words[1].split("=", 1)
                    steps.append(Step("env", value, name, n))
                elif words[0] == "rubrictool":
                    steps.append(Step("run", cmd, line=n))
                else:
                    raise AssertionError(f"your-course.md:{n}: `{cmd}` is neither `rubrictool ...` nor `export`")
        directive = None
    return steps


def substituted(cmd: str, used: set[int], **values: str) -> list[str]:
    words = shlex.split(cmd, comments=True)[1:]
    text = shlex.join(words)
    for n, sub in enumerate(SUBSTITUTIONS):
        if not text.startswith(sub.command) or (sub.unless and sub.unless in text):
            continue
        new = sub.new.format(**values)
        if not sub.old:
            text = f"{text} {new}"
        elif sub.old in text:
            text = text.replace(sub.old, new)
        else:
            continue
        used.add(n)
    return shlex.split(text)


# ---------------------------------------------------------------- what each command writes, read through the library
@dataclass
class Course:
    root: Path
    server: ScriptedLLMServer
    marks: pd.DataFrame
    spring: pd.DataFrame


def _import(c: Course, argv: list[str]) -> None:
    out = c.root / argv[argv.index("--out") + 1]
    items = read_items(out)
    src = c.spring if "chem110-spring.xlsx" in argv else c.marks
    assert len(items) == len(src) and items["id"].is_unique
    assert items["question"].nunique() == src["Lab question"].nunique() and set(items["response"]) == set(src["Answer"])
    assert list(items["student"]) == list(src["Student ID"])  # the student ids kept
    assert all(i.endswith(f"/{s}") for i, s in zip(items["id"], items["student"]))  # ids: <question>/<student>
    if "grade" in items.columns and items["grade"].notna().any():
        assert sorted(items["grade"]) == sorted(src["Mark (0-10)"])
    else:  # next term's answers: none of their ids is an id of this term's table
        assert not set(items["id"]) & set(read_items(c.root / "items.csv")["id"])


def _rubric_new(c: Course, argv: list[str]) -> None:
    assert "TODO" in (c.root / "rubrics" / "chemlab.yaml").read_text()
    assert load_rubric("chemlab").keys == CHEMLAB_KEYS  # found by name through RUBRICTOOL_RUBRICS


def _annotate(c: Course, argv: list[str]) -> None:
    pred_file = c.root / "annotations" / "predictions.jsonl"
    if "--dry-run" in argv:
        assert c.server.count() == 0 and not pred_file.exists()  # nothing sent, nothing written
        return
    if "--per-question" in argv:  # the spring term's first three answers of each question, for grade --reviewed
        out = c.root / argv[argv.index("--out") + 1] / "predictions.jsonl"
        preds = read_predictions(out, load_rubric(c.root / "runs" / "chemlab-5fold" / "final" / "rubric.yaml"),
                                 valid_only=True)
        firsts = read_items(c.root / "new-answers.csv").groupby("question", sort=False).head(3)
        assert set(preds["item"].astype(str)) == set(firsts["id"]) and len(preds) == 5 * 3 * 3 * len(PANEL)
        return
    preds = read_predictions(pred_file, load_rubric("chemlab"), valid_only=True)
    assert sorted(preds["model"].unique()) == sorted(f"openai/{m}" for m in PANEL)
    assert len(preds) == len(c.marks) * 3 * len(PANEL)  # every answer × concept × model
    assert c.server.count() > 0 and not c.server.errors


def _adjudicate(c: Course, argv: list[str]) -> None:
    if "--items" not in argv:  # the panel's levels of the spring term's few answers: ids and levels, for --reviewed
        adj = pd.read_csv(c.root / argv[argv.index("--out") + 1] / "adjudicated.csv")
        assert len(adj) == 15 and adj[CHEMLAB_KEYS].isin([1, 2, 3]).all().all()
        return
    adj = pd.read_csv(c.root / "adjudicated" / "adjudicated.csv")
    items = read_items(c.root / "items.csv")
    assert len(adj) == len(c.marks) >= 150 and adj[CHEMLAB_KEYS].isin([1, 2, 3]).all().all()
    assert dict(zip(adj["id"], adj["grade"])) == dict(zip(items["id"], items["grade"]))
    agreement = json.loads((c.root / "adjudicated" / "agreement.json").read_text())
    assert agreement["label_source"] == "llm"
    assert (c.root / "adjudicated" / "discussion_queue.csv").is_file()


def _diagnose(c: Course, argv: list[str]) -> None:
    md = (c.root / "diagnosis" / "rubric_diagnosis.md").read_text()
    assert all(k in md for k in CHEMLAB_KEYS)
    assert (c.root / "diagnosis" / "contrast_pairs.csv").is_file()


def _fit_points(c: Course, argv: list[str]) -> None:
    rb = load_rubric(c.root / "chemlab-points.yaml")
    assert rb.has_points and rb.keys == CHEMLAB_KEYS
    assert "Safety reasoning" in (c.root / "chemlab-points.yaml").read_text()  # the author's text kept


def _points(c: Course, argv: list[str]) -> None:
    graded = pd.read_csv(c.root / "points-graded.csv")
    assert len(graded) == len(c.marks) and graded["points_grade"].between(0, 10).all()


def _curve(c: Course, argv: list[str]) -> None:
    curve = pd.read_csv(c.root / "curves" / "chemlab" / "curve.csv")
    assert set(curve["variant"]) == {"reccbm"} and len(curve) == 2 * 2  # 2 sizes × 2 folds × 1 repeat
    # --all-from: the 'all' cells are step 7's fold runs, not trained again
    doc = json.loads((c.root / "curves" / "chemlab" / "curve.json").read_text())
    assert sorted(doc["from_fold_runs"]) == ["fold0-nall-r0-reccbm", "fold1-nall-r0-reccbm"]
    assert all(src.endswith(f"chemlab-5fold/fold-{i}") for i, src in enumerate(doc["from_fold_runs"].values()))


def _train(c: Course, argv: list[str]) -> None:
    out = c.root / argv[argv.index("--out") + 1]
    n = len(c.marks)
    folds = json.loads((out / "folds.json").read_text())
    assert folds and len(pd.read_csv(out / "pooled_predictions.csv")) == n
    md = (out / "folds.md").read_text()
    assert "majority baseline" in md and "Labels: an LLM panel" in md and "not expert-validated" in md
    assert folds["labels"]["source"] == "llm"
    # --final: one more model, trained on every labelled answer; the folds' pooled figures are its quality card
    assert folds["final"] == {"dir": "final", "answers": n} and f"trained on all {n} labelled answers" in md
    run = open_run(out / "final")
    assert run.record["rubric"]["name"] == "chemlab" and run.record["rubric"]["version"] == "1.0"
    assert run.record["table"]["copy"] == "table.csv" and run.record["table"]["rows"] == n
    assert run.labels["source"] == "llm" and run.labels["expert_validated"] is False
    assert len(run.split["train"]) == n  # every labelled answer


def _grade(c: Course, argv: list[str]) -> None:
    if "--reviewed" in argv:
        _grade_reviewed(c, argv)
        return
    graded = pd.read_csv(c.root / "graded.csv", keep_default_na=False, na_values=[""])
    assert len(graded) == len(c.spring) and graded["model_grade"].between(0, 10).all()
    assert "flags" in graded.columns and all(f"{k}_level" in graded.columns for k in CHEMLAB_KEYS)
    assert list(graded.columns[:4]) == ["id", "question", "student", "response"]  # grades join back
    assert list(graded["response"]) == list(c.spring["Answer"])
    assert list(graded["student"]) == list(c.spring["Student ID"])
    held = graded["flags"].fillna("") != ""
    assert (graded["grade"].isna() == held).all() and (graded["needs_review"].fillna("") != "").eq(held).all()
    assert (graded.loc[~held, "grade"] == graded.loc[~held, "model_grade"]).all()
    # the review queue: the held answers first, then the least sure marks, as many as the budget
    queue = pd.read_csv(c.root / "graded.review.csv")
    budget = int(argv[argv.index("--review-budget") + 1])
    assert len(queue) == min(budget, len(graded)) and queue["risk"].is_monotonic_decreasing
    assert set(queue["id"].head(min(budget, int(held.sum())))) <= set(graded.loc[held, "id"])
    # the quality card: the k-fold run's pooled figures, carried by its final model
    card = json.loads((c.root / "graded.card.json").read_text())["quality card"]
    folds = json.loads((c.root / "runs" / "chemlab-5fold" / "folds.json").read_text())
    assert card["n_answers"] == len(c.marks) and card["trained_on"] == len(c.marks) and card["folds"] == 2
    assert card["qwk"]["value"] == pytest.approx(folds["ci"]["qwk"]["value"])
    _gradebook(c, graded)


def _gradebook(c: Course, graded: pd.DataFrame) -> None:
    """The tutor's workbook back: its sheets, headers and rows as they were, the marks and comments after them."""
    import openpyxl

    book = openpyxl.load_workbook(c.root / "chem110-spring-graded.xlsx")
    assert book.sheetnames == ["Read me", "Marks", "Summary (rubrictool)"]
    rows = list(book["Marks"].values)
    header, body = list(rows[0]), rows[1:]
    own = list(c.spring.columns)
    assert header[: len(own)] == own and header[len(own):len(own) + 2] == ["Mark (rubrictool)", "Needs review"]
    assert header[len(own) + 2:] == ["Safety reasoning: comment", "Method: comment", "Units and precision: comment"]
    assert [list(r[: len(own)]) for r in body] == c.spring.astype(object).values.tolist()  # the tutor's rows, in order
    marks = [r[len(own)] for r in body]
    assert marks == [None if pd.isna(g) else int(g) for g in graded["grade"]]
    comment = [r[len(own) + 2] for r in body]
    for text, g, level in zip(comment, graded["grade"], graded["SAFE_level"]):
        assert (text is None) == pd.isna(g) and (text is None or text.startswith(f"{int(level)} of 3: "))
    head, *rest = list(book["Summary (rubrictool)"].values)
    summary = pd.DataFrame(rest, columns=head)
    assert summary["answers"].sum() == len(graded) and summary["held for review"].sum() == graded["grade"].isna().sum()


def _grade_reviewed(c: Course, argv: list[str]) -> None:
    """The spring term's new question is shifted by its reviewed answers; the autumn questions, which the run trained
    on, are graded as without --reviewed (their reviewed answers get their levels, the rest is left as read)."""
    plain = pd.read_csv(c.root / "graded.csv")
    graded = pd.read_csv(c.root / argv[argv.index("--out") + 1])
    reviewed = pd.read_csv(c.root / argv[argv.index("--reviewed") + 1])
    assert list(graded["id"]) == list(plain["id"])
    new = graded["question"].str.contains("magnesium sulfate").to_numpy()
    rev = graded["id"].isin(set(reviewed["id"])).to_numpy()
    assert rev.sum() == len(reviewed) and (new & rev).sum() == 3
    assert (graded.loc[new & ~rev, "review"] == "question shifted by 3 reviewed answers").all()
    assert (graded.loc[rev, "review"] == "reviewed: its reviewed levels set").all()
    levels = reviewed.set_index("id").loc[graded.loc[rev, "id"], CHEMLAB_KEYS].to_numpy()
    assert (graded.loc[rev, [f"{k}_level" for k in CHEMLAB_KEYS]].to_numpy() == levels).all()  # as reviewed
    with_review = graded["question"].isin(set(graded.loc[rev, "question"])).to_numpy()
    rest = ~new & ~rev
    assert (graded.loc[rest & with_review, "review"] == "question trained on: not shifted").all()
    assert graded.loc[rest & ~with_review, "review"].isna().all()  # no reviewed answer: nothing to say
    np.testing.assert_allclose(graded.loc[rest, "grade_prob"], plain.loc[rest, "grade_prob"], rtol=1e-5)
    # the new question's other answers were read otherwise than without the review
    moved = np.abs(graded.loc[new & ~rev, [f"{k}_expected" for k in CHEMLAB_KEYS]].to_numpy()
                   - plain.loc[new & ~rev, [f"{k}_expected" for k in CHEMLAB_KEYS]].to_numpy())
    assert moved.max() > 1e-3


def _explain(c: Course, argv: list[str]) -> None:
    out = c.root / "runs" / "chemlab-5fold" / "final" / "explain"
    assert (out / "explain.html").is_file()
    ids = [a for a in argv[3:] if not a.startswith("-")]
    assert set(pd.read_csv(out / "explain.csv")["id"].astype(str)) == set(ids)


def _report(c: Course, argv: list[str]) -> None:
    if argv[argv.index("--run") + 1].rstrip("/").endswith("chemlab-5fold"):
        _pooled_report(c, argv)
        return
    md = (c.root / "runs" / "chemlab-5fold" / "fold-0" / "report" / "report.md").read_text()
    assert (c.root / "runs" / "chemlab-5fold" / "fold-0" / "report" / "report.html").is_file()
    assert "an LLM panel" in md and "not expert-validated" in md  # who made the labels
    assert "cannot be loaded" not in md and "## Rubric diagnostics" in md  # from the run's copy of the rubric
    assert "## On the learning curve" in md and "This run trained on" in md  # --curve: step 7's curve


def _pooled_report(c: Course, argv: list[str]) -> None:
    """The guide ends at the page of the pooled folds: every number on it has a baseline and an interval beside it."""
    out = c.root / "runs" / "chemlab-5fold" / "report"
    md = (out / "report.md").read_text()
    assert (out / "report.html").is_file() and f"{len(c.marks)} answers pooled" in md
    assert "Labels: an LLM panel" in md and "not expert-validated" in md and "Trained: reccbm" in md
    tables = pd.read_csv(out / "pooled_metrics.csv")
    assert {"model_lo", "majority_value", "majority_lo", "points_value", "points_lo", "model_minus_majority_lo"} \
        <= set(tables.columns)
    for part in ("## Grade metrics", "## Per fold"):
        rows = [line for line in md.split(part, 1)[1].split("\n## ", 1)[0].splitlines() if line.startswith("|")][2:]
        assert rows
        for row in rows:  # every number: [lo, hi] beside it, and the table has the baselines' columns
            cells = [x.strip() for x in row.strip("|").split("|")]
            numbers = [x for x in cells[1:] if re.search(r"\d\.\d{3}", x)]
            assert numbers and all(re.search(r"\d\.\d{3} \\?\[[^\]]+\]", x) for x in numbers), row
    assert "## On the learning curve" in md and "## Verdict" in md and "majority class" in md.split("## Verdict")[1]


def _audit(c: Course, argv: list[str]) -> None:
    audit = json.loads((c.root / "runs" / "chemlab-5fold" / "fold-0" / "audit" / "audit.json").read_text())
    assert audit and (c.root / "runs" / "chemlab-5fold" / "fold-0" / "audit" / "audit.png").is_file()


CHECKS: dict[str, Callable[[Course, list[str]], None]] = {
    "data import": _import, "rubric new": _rubric_new, "annotate": _annotate, "adjudicate": _adjudicate,
    "rubric diagnose": _diagnose, "rubric fit-points": _fit_points, "rubric points": _points,
    "learning-curve": _curve, "train": _train, "grade": _grade, "explain": _explain, "report": _report,
    "audit": _audit,
}


def _check_for(argv: list[str]) -> Callable[[Course, list[str]], None] | None:
    for key in sorted(CHECKS, key=len, reverse=True):
        if argv[: len(key.split())] == key.split():
            return CHECKS[key]
    return None


# ---------------------------------------------------------------- the test
def test_the_guide_walks_every_step_in_order() -> None:
    runs = [s.text.split(None, 1)[1] for s in guide_steps(GUIDE.read_text()) if s.kind == "run"]
    at = [next((i for i, r in enumerate(runs) if r.startswith(step.split()[0]) and set(step.split()) <= set(r.split())),
               -1) for step in STEPS]
    assert -1 not in at, f"steps missing from the guide: {[s for s, i in zip(STEPS, at) if i < 0]}"
    assert at == sorted(at), f"the guide's steps are out of order: {sorted(zip(at, STEPS))}"
    # one training
    assert [r for r in runs if r.startswith("train")] == [runs[at[STEPS.index("train --folds --final")]]]
    graded = next(i for i, r in enumerate(runs) if r.startswith("grade"))
    for r in runs[graded:]:  # from grading on, a run needs only --run (grade reads the new answers)
        if "--run" in r and not r.startswith("grade"):
            assert "--table" not in r, f"`rubrictool {r}` needs --table after training"


@pytest.fixture
def course(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Course]:
    root = tmp_path / "chem110"
    root.mkdir()
    for name in ("chem110-marks.xlsx", "chem110-spring.xlsx"):
        shutil.copy(COURSE / name, root / name)
    marks = pd.read_excel(root / "chem110-marks.xlsx", sheet_name="Marks")
    spring = pd.read_excel(root / "chem110-spring.xlsx", sheet_name="Marks")
    monkeypatch.chdir(root)
    monkeypatch.delenv("RUBRICTOOL_RUBRICS", raising=False)

    def responder(seen: Seen) -> Reply:
        return Reply(content=chemlab_panel_reply(str(seen.body.get("model", "")), seen.response))

    with ScriptedLLMServer(responder) as server:
        yield Course(root, server, marks, spring)


def test_your_course_guide_runs_as_written(course: Course, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    backbone = build_backbone(tmp_path / "backbone", "bert", words=chemlab_words())
    values = {"url": course.server.url, "backbone": backbone}
    used: set[int] = set()
    runner = CliRunner()
    ran: list[str] = []
    cpu0 = time.process_time()
    for step in guide_steps(GUIDE.read_text()):
        where = f"your-course.md:{step.line}"
        if step.kind == "env":
            monkeypatch.setenv(step.target, step.text.replace("$PWD", str(course.root)))
            continue
        if step.kind == "write":
            path = course.root / step.target
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(step.text)
            continue
        argv = substituted(step.text, used, **values)
        if argv[0] == "grade" and (course.root / "rubrics").exists():
            # from here on the run must be enough: hide the rubric folder and the adjudicated table
            (course.root / "rubrics").rename(course.root / ".rubrics-hidden")
            (course.root / "adjudicated").rename(course.root / ".adjudicated-hidden")
            monkeypatch.delenv("RUBRICTOOL_RUBRICS")
        res = runner.invoke(app, argv)
        assert res.exit_code == 0, f"{where}: `{step.text}` exited {res.exit_code}\n{res.output}"
        check = _check_for(argv)
        if check is not None:
            check(course, argv)
        ran.append(" ".join(argv[:2]))
    assert used == set(range(len(SUBSTITUTIONS))), \
        f"substitutions no command used: {[SUBSTITUTIONS[i] for i in set(range(len(SUBSTITUTIONS))) - used]}"
    assert ran.count("train --rubric") == 1 and ran[-1] == "report --run"  # it ends at the pooled folds' page
    print(f"guide: {len(ran)} commands, {time.process_time() - cpu0:.0f} s CPU")


def test_the_course_fixture_is_what_its_provenance_says() -> None:
    """tests/data/chem110's workbooks hold what PROVENANCE.md says made them: a course of 160 answers, not Mohler."""
    marks = pd.read_excel(COURSE / "chem110-marks.xlsx", sheet_name="Marks")
    spring = pd.read_excel(COURSE / "chem110-spring.xlsx", sheet_name="Marks")
    pd.testing.assert_frame_equal(marks.fillna(""), chemlab_marks(40).fillna(""), check_dtype=False)
    pd.testing.assert_frame_equal(spring, chemlab_marks(6, 1, True).drop(columns=["Mark (0-10)", "Tutor comment"]),
                                  check_dtype=False)
    assert len(marks) >= 150 and marks["Mark (0-10)"].between(0, 10).all() and marks["Mark (0-10)"].nunique() > 5
