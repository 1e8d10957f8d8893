"""Holistic LLM grading: the LLM panel asked for the mark directly, the baseline a teacher would otherwise use.

The annotation stage asks a model for one level per rubric concept; here the same models are asked for the mark
itself (``templates/holistic.prompt.j2``: the rubric's concepts with their level anchors and the grade scale, the item's
fields as quoted data) and reply ``mark=<integer>``. Everything else is the annotation stage's: litellm calls with
retries and the early stop (:class:`rubrictool.annotate.runner.Runner`), one repair round for an unusable reply, the
SQLite reply cache (a second run sends nothing), the budget, and prices from litellm's bundled map.

:func:`grade_holistic` returns the marks (``item, model, mark, raw_ok`` + usage); :func:`holistic_dry_run` prices a run
without sending anything; :func:`compare_holistic` reports the marks beside a k-fold run's trained grader and the
points route on the same answers (QWK and T-Acc with 95 % bootstrap CIs, failing answers passed, cost).
"""

from __future__ import annotations

import contextlib
import math
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from rubrictool.annotate.cache import NoCache, ReplyCache
from rubrictool.annotate.config import AnnotateConfig
from rubrictool.annotate.dryrun import DryRunReport, model_estimate
from rubrictool.annotate.llm import count_tokens, request_price
from rubrictool.annotate.prompt import (
    ItemPrompt,
    load_template,
    new_boundary,
    quote_block,
    rubric_definitions,
)
from rubrictool.annotate.run import check_ready
from rubrictool.annotate.runner import (
    AnnotateResult,
    CallFailed,
    Reply,
    Runner,
    check_keys,
    chosen_items,
    run_with_progress,
)
from rubrictool.atomic import atomic_write_json, atomic_write_text
from rubrictool.errors import AnnotateError, DataError
from rubrictool.io import write_table
from rubrictool.locks import writer_lock
from rubrictool.progress import ProgressFn
from rubrictool.rubric import Rubric
from rubrictool.textsafe import md_inline

__all__ = [
    "HOLISTIC_TEMPLATE",
    "MARK_COLUMNS",
    "HolisticResult",
    "MarkResult",
    "compare_holistic",
    "comparison_markdown",
    "default_pass_mark",
    "grade_holistic",
    "holistic_dry_run",
    "holistic_paths",
    "parse_mark",
    "render_holistic_prompt",
    "run_holistic",
]

HOLISTIC_TEMPLATE = Path(__file__).resolve().parent.parent / "templates" / "holistic.prompt.j2"
MARK_COLUMNS = ["item", "model", "mark", "raw_ok", "repaired", "cached", "prompt_tokens", "completion_tokens",
                "cost_usd", "priced_usd", "error"]
EST_REPLY = "mark=5"  # what a reply is expected to hold (the dry run's output-token estimate)


# -- the prompt -----------------------------------------------------------------------------------------------------


def _text(v: Any) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return ""
    return str(v)


def render_holistic_prompt(item: dict[str, Any], rubric: Rubric, template: Any = None, benchmark: str | None = None,
                           boundary: str | None = None) -> ItemPrompt:
    """The holistic prompt for one item (a row of an ItemTable), its fields quoted between a random boundary
    (``boundary``: a fixed one, for tests; it must occur in no field)."""
    import jinja2

    tpl = template if template is not None else load_template(HOLISTIC_TEMPLATE)
    fields = {f: _text(item.get(f)) for f in ("question", "response", "reference", "context")}
    if boundary is None:
        boundary = new_boundary()
        while any(boundary in v for v in fields.values()):
            boundary = new_boundary()
    elif not re.fullmatch(r"[0-9A-Za-z_-]{8,}", boundary) or any(boundary in v for v in fields.values()):
        raise AnnotateError(f"boundary {boundary!r} is unusable: it must be 8+ letters/digits and occur in no field")
    b = boundary
    g = rubric.grade
    ctx = {
        "benchmark": benchmark or rubric.name, **fields, "boundary": b, "quote": lambda t: quote_block(_text(t), b),
        "fields": dict(rubric.fields), "concept_list": ", ".join(f"{c.key} ({c.name})" for c in rubric.concepts),
        "rubric_definitions": rubric_definitions(rubric), "grade_min": g.min, "grade_max": g.max,
        "grade_labels": sorted((g.labels or {}).items()),
    }
    try:
        text = str(tpl.render(**ctx)).strip() + "\n"
    except jinja2.UndefinedError as e:
        raise AnnotateError(f"{getattr(tpl, 'filename', 'template')}: {e.message}; the template may use: "
                            f"{', '.join(sorted(ctx))}") from None
    except jinja2.TemplateError as e:
        raise AnnotateError(f"{getattr(tpl, 'filename', 'template')}: cannot render: {e}") from None
    return ItemPrompt(text, b, tuple(v for v in fields.values() if v.strip()))


# -- the reply --------------------------------------------------------------------------------------------------------


@dataclass
class MarkResult:
    """A reply read as a mark: ``mark`` when usable, else the ``errors`` that say why not."""

    mark: int | None = None
    errors: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.mark is not None and not self.errors


_MARK_RE = re.compile(r"\b(?:mark|grade|score)\b[\s*]*(?:=|:|\bis\b)?[\s*]*(-?\d+(?:\.\d+)?)", re.IGNORECASE)
_JSON_RE = re.compile(r"\{[^{}]*\}", re.DOTALL)
_BARE_RE = re.compile(r"\s*\**(-?\d+(?:\.\d+)?)\**\.?\s*")


def _unquoted(text: str, quoted: tuple[str, ...]) -> str:
    """``text`` without what it repeats of the item's quoted fields: a whole field, or a line of one that names a mark
    (a response's planted ``mark=10`` is the student's text, not the model's mark)."""
    for q in sorted(quoted, key=len, reverse=True):
        q = q.strip()
        if len(q) >= 4:
            text = text.replace(q, " ")
        for line in q.splitlines():
            line = line.strip()
            if len(line) >= 4 and _MARK_RE.search(line):
                text = text.replace(line, " ")
    return text


def parse_mark(text: str, lo: int, hi: int, quoted: tuple[str, ...] = ()) -> MarkResult:
    """The mark in a reply: ``mark=3`` (also ``Mark: 3``, ``grade = 3``, ``**mark:** 3/5``, a JSON object with a
    ``mark``, ``grade`` or ``score``, or a bare number), checked to be one integer in ``lo..hi``. What the reply
    repeats of ``quoted`` (the item's fields, :attr:`ItemPrompt.quoted`) is not read as its mark."""
    import json

    text = _unquoted(text, quoted)
    found: list[str] = []
    for m in _JSON_RE.finditer(text):
        try:
            obj = json.loads(m.group(0))
        except ValueError:
            continue
        if isinstance(obj, dict):
            found += [str(obj[k]) for k in ("mark", "grade", "score") if k in obj and not isinstance(obj[k], bool)]
    if not found:
        found = [m.group(1) for m in _MARK_RE.finditer(text)]
    if not found and (bare := _BARE_RE.fullmatch(text)):
        found = [bare.group(1)]
    if not found:
        return MarkResult(errors=["no mark=<integer> line in the reply"])
    values = sorted({float(v) for v in found if re.fullmatch(r"-?\d+(?:\.\d+)?", v.strip())})
    if not values:
        return MarkResult(errors=[f"the mark {found[0]!r} is not a number"])
    if len(values) > 1:
        return MarkResult(errors=[f"contradictory marks {', '.join(f'{v:g}' for v in values)}; give one"])
    v = values[0]
    if not v.is_integer():
        return MarkResult(errors=[f"the mark {v:g} is not an integer"])
    if not lo <= v <= hi:
        return MarkResult(errors=[f"the mark {v:g} is outside the grade scale {lo}..{hi}"])
    return MarkResult(mark=int(v))


def repair_mark_message(result: MarkResult, rubric: Rubric) -> str:
    """The repair round's follow-up turn: what was wrong and the one line to reply."""
    problems = "; ".join(result.errors) or "the reply could not be read"
    return (f"Your reply could not be used: {problems}. Reply again with exactly one line and nothing else: "
            f"mark=<integer from {rubric.grade.min} to {rubric.grade.max}>")


# -- the run ---------------------------------------------------------------------------------------------------------


class _HolisticRunner(Runner):
    """The annotation runner with a mark per item instead of a level per concept."""

    async def annotate_item(self, model: str, item_id: str, prompt: ItemPrompt) -> None:
        replies, result, error = await self._ask_mark(model, prompt)
        if (result is None or not result.ok or error) and self.config.retry_failed and replies \
                and all(r.cached for r in replies):
            self.summary[model].retried += 1
            replies, result, error = await self._ask_mark(model, prompt, fresh=True)
        failed = result is None or not result.ok or bool(error)
        self.count_sent(model, replies, failed, error or "; ".join(result.errors if result else []))
        self._record_mark(model, item_id, replies, result, error)

    async def _ask_mark(self, model: str, prompt: ItemPrompt, fresh: bool = False
                        ) -> tuple[list[Reply], MarkResult | None, str]:
        g = self.rubric.grade
        messages: list[dict[str, Any]] = [{"role": "user", "content": prompt.text}]
        replies: list[Reply] = []
        result: MarkResult | None = None
        error = ""
        try:
            first = await self.call(model, messages, prompt.boundary, fresh)
            replies.append(first)
            result = parse_mark(first.text, g.min, g.max, prompt.quoted)
            if not result.ok:
                fix = messages + [{"role": "assistant", "content": first.text},
                                  {"role": "user", "content": repair_mark_message(result, self.rubric)}]
                second = await self.call(model, fix, prompt.boundary, fresh)
                replies.append(second)
                result = parse_mark(second.text, g.min, g.max, prompt.quoted)
                if not result.ok:
                    error = "; ".join(result.errors)
        except CallFailed as e:
            error = str(e)
            if e.fatal:
                self.fatal.setdefault(model, str(e) if str(e).startswith(f"model {model}: ") else f"model {model}: {e}")
        return replies, result, error

    def _record_mark(self, model: str, item_id: str, replies: list[Reply], result: MarkResult | None,
                     error: str) -> None:
        s = self.summary[model]
        s.items += 1
        ok = result is not None and result.ok and not error
        repaired = len(replies) == 2 and ok
        s.ok += ok
        s.failures += not ok
        s.repaired += repaired
        cached = bool(replies) and all(r.cached for r in replies)
        s.cached_items += cached
        pt = sum(r.prompt_tokens for r in replies)
        ct = sum(r.completion_tokens for r in replies)
        self.rows.append({
            "item": item_id, "model": model, "mark": result.mark if ok and result else None, "raw_ok": ok,
            "repaired": repaired, "cached": cached, "prompt_tokens": pt, "completion_tokens": ct,
            "cost_usd": sum(r.cost_usd for r in replies),  # paid in this run (0 for a cache hit)
            "priced_usd": request_price(model, pt, ct) if replies else 0.0,  # what these marks cost, paid now or before
            "error": None if ok else error,
        })
        if not ok:
            self.failures.append({"item": item_id, "model": model, "error": error
                                  or "; ".join(result.errors if result else []),
                                  "reply": replies[0].text if replies else None,
                                  "repair_reply": replies[1].text if len(replies) > 1 else None})
        if model in self.started:
            s.seconds = time.monotonic() - self.started[model]


@dataclass
class HolisticResult(AnnotateResult):
    """:class:`AnnotateResult` with ``predictions`` holding one mark per item and model (:data:`MARK_COLUMNS`)."""

    comparison: dict[str, Any] | None = None  # compare_holistic's report, when a run was given


def _check(config: AnnotateConfig) -> AnnotateConfig:
    config.check()
    if config.format != "line":
        raise AnnotateError("holistic grading reads one mark=<integer> line; it has no JSON reply format",
                            hint="drop --reply-format json")
    if config.examples is not None:
        raise AnnotateError("holistic grading takes no in-context examples (they hold concept levels, not marks)",
                            hint="drop --examples")
    return config


def prepare_holistic(items: pd.DataFrame, rubric: Rubric, config: AnnotateConfig) -> list[tuple[str, ItemPrompt]]:
    """(item id, prompt) per item, the items chosen as the annotation stage chooses them (--limit, --per-question)."""
    _check(config)
    rows = chosen_items(items, config)
    template = load_template(config.template or HOLISTIC_TEMPLATE)
    return [(str(r["id"]), render_holistic_prompt({str(k): v for k, v in r.items()}, rubric, template,
                                                  config.benchmark))
            for r in rows.to_dict(orient="records")]


def grade_holistic(items: pd.DataFrame, rubric: Rubric, config: AnnotateConfig,
                   progress: ProgressFn | None = None) -> HolisticResult:
    """Ask every model for every item's mark; returns the marks (:data:`MARK_COLUMNS`), failure records with the raw
    replies and a summary per model. One client process (``config.workers`` is not used); the reply cache is
    locked against a second writer for the run. Raises :class:`AnnotateError` for bad settings before anything is
    sent, and when every model refuses every request (a wrong key or model)."""
    jobs = prepare_holistic(items, rubric, config)
    if not config.allow_draft:
        check_ready(rubric)
    check_keys(config)
    if config.budget is not None:
        unpriced = [m for m in config.models if request_price(m, 1000, 1000) is None]
        if unpriced:
            raise AnnotateError(f"no price for {', '.join(unpriced)} in litellm's cost map, so a budget cannot be "
                                "enforced", hint="drop --budget for local models, or use a priced model string")
    t0 = time.monotonic()
    with contextlib.ExitStack() as stack:
        if config.cache is not None:
            stack.enter_context(writer_lock(config.cache, f"the reply cache {config.cache}",
                                            "wait for it to finish, or pass another --cache"))
        cache: ReplyCache | NoCache = ReplyCache(config.cache) if config.cache is not None else NoCache()
        runner = _HolisticRunner(rubric, config, cache)
        try:
            run_with_progress(runner, jobs, progress)
        finally:
            cache.close()
    if runner.cache_error:
        raise AnnotateError(runner.cache_error, hint="free space or fix the folder's permissions, then re-run")
    early = any("stopped early" in why for why in runner.fatal.values())
    if runner.fatal and not early and not any(s.ok for s in runner.summary.values()):
        raise AnnotateError("; ".join(runner.fatal.values()))
    marks = pd.DataFrame(runner.rows, columns=MARK_COLUMNS)
    if len(marks):
        order = {m: i for i, m in enumerate(config.models)}
        ids = {j[0]: i for i, j in enumerate(jobs)}
        marks = marks.sort_values(by=["model", "item"], key=lambda c: c.map(order if c.name == "model" else ids),
                                  kind="stable").reset_index(drop=True)
    marks["mark"] = marks["mark"].astype("Int64")
    for s in runner.summary.values():
        s.seconds = round(s.seconds or (time.monotonic() - t0 if s.items else 0.0), 3)
    return HolisticResult(predictions=marks, failures=runner.failures, summary=runner.summary,
                          stopped_by_budget=runner.stopped_by_budget, total_items=len(jobs), fatal=dict(runner.fatal))


def holistic_dry_run(items: pd.DataFrame, rubric: Rubric, config: AnnotateConfig, show: int = 2) -> DryRunReport:
    """Render the holistic prompts, count tokens and estimate the run's cost (a one-line reply per item); sends
    nothing."""
    jobs = prepare_holistic(items, rubric, config)
    cache = ReplyCache(config.cache) if config.cache is not None and Path(config.cache).exists() else NoCache()
    models = []
    try:
        for m in config.models:
            out_tok = count_tokens(m, text=EST_REPLY)
            models.append(model_estimate(m, jobs, cache, config.sampling, out_tok, show))
    finally:
        cache.close()
    return DryRunReport(prompts=[(i, p.text) for i, p in jobs[:show]], models=models, items=len(jobs),
                        response_formats=dict.fromkeys(config.models))


# -- beside the trained grader and the points route -----------------------------------------------------------------


def default_pass_mark(rubric: Rubric) -> int:
    """The least passing mark when none is given: the upper half of the grade scale (3 on 0..5, 5 on 0..10)."""
    g = rubric.grade
    return g.min + math.ceil((g.max - g.min) / 2)


def _row(name: str, truth: np.ndarray[Any, Any], pred: np.ndarray[Any, Any], pass_mark: int, cost: float | None,
         cost_known: bool, n_boot: int, seed: int) -> dict[str, Any]:
    from rubrictool.evaluate import bootstrap_ci  # imports the trainer's metrics: only when comparing

    failing = truth < pass_mark
    return {
        "grader": name, "n": len(truth),
        "qwk": bootstrap_ci(truth, pred, "qwk", n_boot, seed),
            "t_acc": bootstrap_ci(truth, pred, "t_acc", n_boot, seed),
        "failing": int(failing.sum()), "failing_passed": int((pred[failing] >= pass_mark).sum()),
        "cost_usd": cost, "cost_known": cost_known,
    }


def compare_holistic(marks: pd.DataFrame, run: str | Path, rubric: Rubric, pass_mark: int | None = None,
                     n_boot: int = 1000, seed: int = 0) -> dict[str, Any]:
    """The holistic marks beside a k-fold run's trained grader (its pooled out-of-fold grades) and the points route
    (:func:`rubrictool.points.points_column`: points from each answer's adjudicated levels, fitted on the other folds
    when the rubric has none) on the same answers: those every holistic model marked and the run tested.

    Per grader: n, QWK and T-Acc with 95 % bootstrap CIs, the answers whose true mark fails (below ``pass_mark``,
    default :func:`default_pass_mark`) and how many of them it passed, and the cost of its marks (``None`` for the
    trained grader and the points route, which call no API; for a local model with no price, ``cost_known`` False).
    """
    from rubrictool.points import points_column

    path = Path(run) / "pooled_predictions.csv"
    if not path.is_file():
        raise DataError(f"{path}: missing; compare with a k-fold run (rubrictool train --folds 5 … --out RUN), "
                        "whose pooled out-of-fold grades it reads")
    pooled = pd.read_csv(path, dtype={"id": str})
    for col in ("id", "grade", "grade_true", "fold"):
        if col not in pooled.columns:
            raise DataError(f"{path}: no {col!r} column; is it a k-fold run's pooled_predictions.csv?")
    pm = default_pass_mark(rubric) if pass_mark is None else int(pass_mark)
    if not rubric.grade.min < pm <= rubric.grade.max:
        raise AnnotateError(f"pass mark {pm} is outside {rubric.grade.min + 1}..{rubric.grade.max}",
                            hint="set --pass-mark to the least mark that passes")
    ok = marks[marks["raw_ok"].astype(bool) & marks["mark"].notna()]
    models = list(dict.fromkeys(marks["model"]))
    per_model = {m: set(ok.loc[ok["model"] == m, "item"].astype(str)) for m in models}
    common = set(pooled["id"]).intersection(*per_model.values()) if per_model else set()
    if not common:
        raise DataError(f"no answer was both marked by every model and tested in {run}; grade the run's answers "
                        "(the same item table and ids) first")
    pooled["points"] = points_column(pooled, rubric)
    sel = pooled[pooled["id"].isin(common)].sort_values("id")
    truth = sel["grade_true"].to_numpy(np.int64)
    rows = [_row(f"trained grader ({Path(run).name}, out-of-fold)", truth, sel["grade"].to_numpy(np.int64), pm, None,
                 True, n_boot, seed)]
    if sel["points"].notna().all():
        rows.append(_row("points route (adjudicated levels)", truth, sel["points"].to_numpy(np.int64), pm, None, True,
                         n_boot, seed))
    for m in models:
        mm = ok[ok["model"] == m].drop_duplicates("item").set_index("item")
        priced = pd.to_numeric(marks.loc[marks["model"] == m, "priced_usd"], errors="coerce")
        rows.append(_row(f"holistic LLM ({m})", truth, mm.loc[sel["id"], "mark"].to_numpy(np.int64), pm,
                         float(priced.sum()) if priced.notna().all() else None, bool(priced.notna().all()), n_boot,
                         seed))
    n_all = {m: int((marks["model"] == m).sum()) for m in models}
    return {"run": str(run), "pass_mark": pm, "answers": len(sel), "grade": [rubric.grade.min, rubric.grade.max],
            "marked": {m: len(per_model[m]) for m in models}, "asked": n_all, "rows": rows}


def _ci(c: dict[str, float] | None) -> str:
    return "–" if not c else f"{c['value']:.3f} [{c['lo']:.3f}, {c['hi']:.3f}]"


def comparison_markdown(cmp: dict[str, Any]) -> str:
    """The comparison as a Markdown table with a sentence on what it measures."""
    head = (f"Graded on the same {cmp['answers']} answers (marked by every holistic model and tested out-of-fold in "
            f"`{md_inline(Path(cmp['run']).name)}`); a mark of {cmp['pass_mark']} or more passes.")
    source = ("The points route grades from the concept levels the run was trained on, whatever made them (see the "
              "run's folds.md for their source; on Mohler, three LLM annotation passes, not expert-validated).")
    lines = [head, source, "",
             "| grader | n | QWK [95 % CI] | T-Acc [95 % CI] | failing answers passed | cost of these marks |",
             "|---|---|---|---|---|---|"]
    for r in cmp["rows"]:
        cost = ("no API cost" if r["cost_usd"] is None and r["cost_known"] else
                "no price known (local model)" if not r["cost_known"] else f"${r['cost_usd']:.4f}")
        passed = f"{r['failing_passed']} of {r['failing']}" if r["failing"] else "none fail"
        lines.append(f"| {md_inline(r['grader'])} | {r['n']} | {_ci(r['qwk'])} | {_ci(r['t_acc'])} | {passed} | {cost} "
                     "|")
    unmarked = {m: cmp["asked"][m] - cmp["marked"][m] for m in cmp["marked"] if cmp["asked"][m] > cmp["marked"][m]}
    if unmarked:
        lines += ["", "Answers a model gave no usable mark (failure records, left out above): "
                  + ", ".join(f"{md_inline(m)} {n}" for m, n in unmarked.items()) + "."]
    return "\n".join(lines) + "\n"


def holistic_paths(out: str | Path) -> tuple[Path, Path, Path, Path, Path]:
    """(marks, failures, summary, comparison.json, comparison.md) in the folder ``out``."""
    p = Path(out)
    return (p / "marks.jsonl", p / "failures.jsonl", p / "summary.json", p / "comparison.json", p / "comparison.md")


def run_holistic(items: pd.DataFrame, rubric: Rubric, config: AnnotateConfig, out: str | Path,
                 progress: ProgressFn | None = None, rubric_file: str | Path | None = None,
                 run: str | Path | None = None, pass_mark: int | None = None) -> tuple[HolisticResult, list[Path]]:
    """:func:`grade_holistic`, then (with ``run``) :func:`compare_holistic`, writing every file atomically into the
    folder ``out`` while holding ``<marks>.lock``; returns the result and the paths written."""
    _check(config)
    if not config.allow_draft:
        check_ready(rubric, rubric_file)
    marks_p, fail_p, summ_p, cmp_json, cmp_md = holistic_paths(out)
    with writer_lock(marks_p, f"the output {marks_p}", "wait for it to finish, or pass another --out"):
        result = grade_holistic(items, rubric, config, progress)
        written = [marks_p, fail_p, summ_p]
        try:
            write_table(result.predictions, marks_p)
            write_table(pd.DataFrame(result.failures, columns=["item", "model", "error", "reply", "repair_reply"]),
                        fail_p)
            atomic_write_json(summ_p, {"items": result.total_items, "stopped_by_budget": result.stopped_by_budget,
                                       "failure_share": round(result.failure_share, 6), "stopped": dict(result.fatal),
                                       "cost_usd": round(result.cost_usd, 6),
                                       "models": {m: vars(s) for m, s in result.summary.items()}})
            if run is not None:
                result.comparison = compare_holistic(result.predictions, run, rubric, pass_mark)
                atomic_write_json(cmp_json, result.comparison)
                atomic_write_text(cmp_md, comparison_markdown(result.comparison))
                written += [cmp_json, cmp_md]
        except OSError as e:
            kept = (f"every reply is kept in the cache {config.cache}: a re-run with the same --cache writes the "
                    "outputs without sending anything") if config.cache is not None else "no cache was kept"
            raise AnnotateError(f"{out}: cannot write it ({e.strerror or e}); {kept}",
                                hint="free space or fix the folder's permissions, then re-run") from None
    return result, written
