"""``rubrictool annotate``: LLM pre-annotation of every response on every rubric concept."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from rubrictool.cli._common import (
    BenchmarkOpt,
    DataDirOpt,
    OldDataOpt,
    OptionalRunOpt,
    OutOpt,
    ProgressView,
    at_least,
    console,
    err_console,
    renamed,
)
from rubrictool.cli._sanitize import shown
from rubrictool.errors import AnnotateError

if TYPE_CHECKING:  # the annotate package pulls in pandas: imported inside the command, not at CLI start
    import pandas as pd

    from rubrictool.annotate import AnnotateConfig, AnnotateResult, DryRunReport
    from rubrictool.rubric import Rubric

__all__ = ["annotate_cmd", "print_comparison", "print_dry_run", "print_summary"]


_SHOWN_PROMPT_CHARS = 4000  # a dry run shows a prompt's head and tail up to this many characters


def _shortened(prompt: str, limit: int = _SHOWN_PROMPT_CHARS) -> str:
    """A prompt as the dry run shows it: whole when short, else its head and tail with how much was left out."""
    if len(prompt) <= limit:
        return prompt
    half = limit // 2
    cut = len(prompt) - 2 * half
    return f"{prompt[:half]}\n[… {cut:,} characters of this prompt not shown …]\n{prompt[-half:]}"


def print_dry_run(report: DryRunReport, con: Console) -> None:
    for item_id, prompt in report.prompts:
        con.rule(f"prompt of item {item_id}")
        con.print(_shortened(prompt), markup=False, highlight=False)
    table = Table(title=f"dry run: {report.items} items, nothing sent")
    for col in ("model", "requests", "cached", "prompt tokens", "first prompts", "est. output tokens", "est. cost USD"):
        table.add_column(col, justify="left" if col == "model" else "right")
    for m in report.models:
        cost = "unknown (no price)" if m.est_cost_usd is None else f"{m.est_cost_usd:.4f}"
        table.add_row(
            m.model, str(m.requests), str(m.cached), f"{m.prompt_tokens:,}",
            ", ".join(str(n) for n in m.first_prompt_tokens), f"{m.est_completion_tokens:,}", cost,
        )
    con.print(table)
    from rubrictool.annotate.llm import too_long_message

    for m in report.models:
        if m.too_long and m.context_tokens:
            con.print("[bold red]warning:[/] "
                      f"{escape(too_long_message(m.model, m.too_long, report.items, m.context_tokens))}",
                      soft_wrap=True, highlight=False)
    total, unpriced = report.est_cost_usd, report.unpriced
    if total is None:
        cost = f"unknown (no price known for {', '.join(unpriced)})"
    elif unpriced:
        cost = f"${total:.4f} for the priced models, plus an unknown amount for {', '.join(unpriced)} (no price known)"
    else:
        cost = f"${total:.4f}"
    con.print(
        f"estimated cost of the whole run: {cost} (repair rounds and reasoning tokens not "
        "included; the budget reserves prompt + --max-tokens per request)", markup=False, highlight=False,
    )


SUMMARY_WIDE = 120  # terminal columns the summary table needs; below it, one block per model


def print_summary(result: AnnotateResult, paths: tuple[Path, Path, Path] | None, con: Console) -> None:
    """Per model: done, ok, failures, repaired, cached, requests, retries, tokens, cost and seconds; a table on a wide
    terminal, one block per model on a narrow one (80 columns)."""
    procs = f", {result.workers} client processes" if result.workers > 1 else ""
    title = f"annotation summary ({result.total_items} items per model{procs})"
    cols = ("done", "ok", "failures", "repaired", "cached", "requests", "retries", "tokens", "cost USD", "seconds")
    rows = []
    for s in result.summary.values():
        cost = f"{s.cost_usd:.4f}" if s.price_known else f"{s.cost_usd:.4f} (no price)"
        rows.append((shown(s.model), str(s.items), str(s.ok), str(s.failures), str(s.repaired), str(s.cached_items),
                     str(s.requests), str(s.retries), f"{s.prompt_tokens + s.completion_tokens:,}", cost,
                     f"{s.seconds:.1f}"))
    if con.width >= SUMMARY_WIDE:
        table = Table(title=title)
        for col in ("model", *cols):
            table.add_column(col, justify="left" if col == "model" else "right")
        for row in rows:
            table.add_row(*row)
        con.print(table)
    else:  # a narrow terminal: one block per model, every figure named, nothing cut off
        con.print(title, markup=False, highlight=False)
        for model, *vals in rows:
            con.print(f"  {model}", markup=False, highlight=False, style="bold")
            con.print("    " + ", ".join(f"{c} {v}" for c, v in zip(cols, vals)), markup=False, highlight=False)
    if paths:
        con.print(f"wrote {paths[0]} ({len(result.predictions)} rows), {paths[1]} ({len(result.failures)} failures), "
                  f"{paths[2]}")
    retried = sum(s.retried for s in result.summary.values())
    if retried:
        con.print(f"--retry-failed: sent again {retried} item(s) whose cached replies had failed")
    if result.stopped_by_budget:
        con.print(
            f"[yellow]stopped before exceeding the budget[/]: ${result.cost_usd:.4f} spent; the items done are "
            "cached — re-run with a higher --budget to finish (nothing is paid twice)"
        )


def _show_dry_run(items: pd.DataFrame, rub: Rubric, config: AnnotateConfig) -> None:
    """Print the dry run's prompts and estimates, and a note when a real run would refuse the draft rubric."""
    from rubrictool.annotate import draft_problems, dry_run

    print_dry_run(dry_run(items, rub, config), console)
    drafts = draft_problems(rub)
    if drafts and not config.allow_draft:
        console.print(f"[yellow]note:[/] a real run refuses this rubric, a draft ({escape(drafts[0])}"
                      f"{f' and {len(drafts) - 1} more' if len(drafts) > 1 else ''}), unless --allow-draft",
                      soft_wrap=True, highlight=False)


def _fail_on_failures(result: AnnotateResult, paths: tuple[Path, Path, Path], max_failures: float) -> None:
    """Raise for a model stopped by a fatal error; exit 3 when more than ``max_failures`` of the annotations failed."""
    if result.fatal:
        early = any("stopped early" in why for why in result.fatal.values())
        raise AnnotateError(
            "; ".join(result.fatal.values()) + f" (what was done is in {paths[0]}, the raw replies in {paths[1]})",
            hint="every reply received is in the cache: re-run when the endpoint answers, or with --retry-failed "
            "once the cause of the failed replies is fixed" if early else None,
        )
    if result.failure_share > max_failures:
        failed = sum(s.failures for s in result.summary.values())
        done = sum(s.items for s in result.summary.values())
        err_console.print(
            f"[bold red]error:[/] {failed} of {done} item × model annotations failed ({result.failure_share:.1%}, "
            f"more than --max-failures {max_failures:.1%}); they are in {paths[1]}: fix the cause and "
            "re-run with --retry-failed", highlight=False, soft_wrap=True,
        )
        raise typer.Exit(3)


def print_comparison(cmp: dict[str, Any], con: Console) -> None:
    """compare_holistic's report: one row per grader on the same answers (one block per grader below 120 columns)."""
    title = (f"beside the trained grader: the same {cmp['answers']} answers, a mark of {cmp['pass_mark']} or more "
             "passes")
    cols = ("n", "QWK [95 % CI]", "T-Acc [95 % CI]", "failing passed", "cost")
    rows = []
    for r in cmp["rows"]:
        cost = ("no API cost" if r["cost_usd"] is None and r["cost_known"] else
                "no price (local)" if not r["cost_known"] else f"${r['cost_usd']:.4f}")
        ci = [f"{r[m]['value']:.3f} [{r[m]['lo']:.3f}, {r[m]['hi']:.3f}]" for m in ("qwk", "t_acc")]
        rows.append((shown(r["grader"]), str(r["n"]), *ci, f"{r['failing_passed']} of {r['failing']}", cost))
    if con.width >= SUMMARY_WIDE:
        table = Table(title=title)
        for col in ("grader", *cols):
            table.add_column(col, justify="left" if col == "grader" else "right")
        for row in rows:
            table.add_row(*row)
        con.print(table)
        return
    con.print(title, markup=False, highlight=False)
    for grader, *vals in rows:
        con.print(f"  {grader}", markup=False, highlight=False, style="bold")
        con.print("    " + ", ".join(f"{c} {v}" for c, v in zip(cols, vals)), markup=False, highlight=False)


def _holistic(items: pd.DataFrame, rub: Rubric, config: AnnotateConfig, dry: bool, out: Path,
              inputs: list[Path | str | None], rubric_file: Path | str | None, run: Path | None,
              pass_mark: int | None) -> None:
    """``annotate --holistic``: the mark asked for directly, then (with --run) beside the trained grader."""
    from rubrictool.annotate import holistic_dry_run, run_holistic
    from rubrictool.annotate.holistic import holistic_paths
    from rubrictool.outputs import check_output

    if dry:
        print_dry_run(holistic_dry_run(items, rub, config), console)
        return
    check_output(out, [*inputs, run], "folder", writes=[p.name for p in holistic_paths(out)], what="the marks")
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[info]}"),
               TimeElapsedColumn())
    with ProgressView(err_console, *columns) as view:
        result, written = run_holistic(items, rub, config, out, progress=view, rubric_file=rubric_file, run=run,
                                       pass_mark=pass_mark)
    paths = (written[0], written[1], written[2])
    print_summary(result, paths, console)
    if result.comparison is not None:
        print_comparison(result.comparison, console)
        console.print(f"wrote {written[3]} and {written[4]}")
    _fail_on_failures(result, paths, config.max_failures)


def annotate_cmd(
    benchmark: BenchmarkOpt = None,
    rubric: Annotated[str | None, typer.Option(
        "--rubric", "-r", help="Rubric name or YAML path (default: the benchmark's).",
    )] = None,
    items_file: Annotated[Path | None, typer.Option(
        "--items", help="The answers to annotate: an item table (CSV/JSONL/Parquet: id, response, question?, "
                        "reference?).",
    )] = None,
    data_dir: DataDirOpt = None,
    model: Annotated[list[str] | None, typer.Option(
        "--model", "-m", help="litellm model string; repeatable (default: gpt-4o and gemini/gemini-2.5-pro).",
    )] = None,
    api_base: Annotated[str | None, typer.Option(
        "--api-base", help="OpenAI-compatible server, e.g. http://127.0.0.1:8080/v1 (model hosted_vllm/<alias> or "
                           "openai/<alias>).",
    )] = None,
    api_key_env: Annotated[str | None, typer.Option(
        "--api-key-env", help="Read the API key from this environment variable (default: the provider's, e.g. "
                              "OPENAI_API_KEY).",
    )] = None,
    concurrency: Annotated[int, typer.Option("--concurrency", "-j", help="Requests in flight per model.")] = 8,
    workers: Annotated[int | None, typer.Option(
        "--workers", help="Client processes sharing the items, concurrency and budget (default: auto, i.e. 1, or one "
                          "per 8 requests in flight for --api-base runs of 64+ items).",
    )] = None,
    timeout: Annotated[float, typer.Option("--timeout", help="Seconds per request (> 0).")] = 120.0,
    max_retries: Annotated[int, typer.Option(
        "--max-retries", help="Retries on 429, timeouts, 5xx and connection errors (0 or more).",
    )] = 4,
    backoff: Annotated[float, typer.Option(
        "--backoff", help="First back-off in seconds, 0 or more (doubles per retry, with jitter).",
    )] = 1.0,
    reply_format: Annotated[str, typer.Option(
        "--reply-format", help="Reply format: line (the paper's concept=..; label=..; evidence=..) or json (with a "
                               "JSON schema).",
    )] = "line",
    template: Annotated[Path | None, typer.Option(
        "--template", help="Your own jinja2 prompt template (default: templates/annotate.prompt.j2).",
    )] = None,
    examples: Annotated[Path | None, typer.Option(
        "--examples", help="In-context examples: a table with response, question, reference and one level column per "
                           "concept.",
    )] = None,
    cache: Annotated[Path, typer.Option(
        "--cache", help="SQLite reply cache (resume, never pay twice).",
    )] = Path(".rubrictool/cache.sqlite"),
    no_cache: Annotated[bool, typer.Option("--no-cache", help="Do not read or write the reply cache.")] = False,
    budget: Annotated[float | None, typer.Option(
        "--budget", help="Stop cleanly before this many USD would be exceeded.",
    )] = None,
    limit: Annotated[int | None, typer.Option(
        "--limit", "-n", help="Annotate only the first N items (a trial run).",
    )] = None,
    per_question: Annotated[int | None, typer.Option(
        "--per-question", callback=at_least(1), help="Annotate only the first N answers of each question (a new "
                                                     "question's few, for grade --reviewed).",
    )] = None,
    max_tokens: Annotated[int, typer.Option(
        "--max-tokens", help="Reply length cap (also the budget's worst case).",
    )] = 1024,
    temperature: Annotated[float, typer.Option("--temperature", help="Sampling temperature, 0..2.")] = 0.0,
    dry: Annotated[bool, typer.Option(
        "--dry-run", help="Print the first prompts, token counts and the estimated cost; send nothing.",
    )] = False,
    retry_failed: Annotated[bool, typer.Option(
        "--retry-failed", help="Send again the items whose cached replies failed (successful cached replies are never "
                               "re-sent). Example: rubrictool annotate --rubric r.yaml --items items.csv "
                               "--retry-failed",
    )] = False,
    max_failures: Annotated[float, typer.Option(
        "--max-failures", help="Exit 3 when more than this share of the item × model annotations failed (0..1; the "
                               "outputs are written). Example: --max-failures 0.1",
    )] = 0.05,
    allow_draft: Annotated[bool, typer.Option(
        "--allow-draft", help="Send a rubric that still has TODO placeholders or two levels with one anchor (refused "
                              "by default). Example: rubrictool annotate --rubric draft.yaml --items items.csv --limit "
                              "5 --allow-draft",
    )] = False,
    holistic: Annotated[bool, typer.Option(
        "--holistic", help="Ask each model for every answer's mark directly (the rubric and the grade scale in the "
                           "prompt, a reply mark=<n>) instead of concept levels: the baseline a teacher would "
                           "otherwise use. Writes marks.jsonl, failures.jsonl and summary.json into the --out folder. "
                           "Example: rubrictool annotate --holistic --rubric r.yaml --items items.csv --model gpt-4o "
                           "--run runs/k5 --out holistic/",
    )] = False,
    run: OptionalRunOpt = None,
    pass_mark: Annotated[int | None, typer.Option(
        "--pass-mark", help="With --holistic --run: the least mark that passes, for 'failing answers passed' (default: "
                            "the upper half of the grade scale, 3 on 0..5).",
    )] = None,
    out: OutOpt = Path("annotations"),
    old_data: OldDataOpt = None,
) -> None:
    """Pre-annotate every response on every rubric concept with LLMs (litellm), as the paper's annotation stage.

    Writes the tidy prediction table (item, model, concept, level, evidence, raw_ok + usage), failure
    records with the raw replies and a per-model summary. Keys come from the environment only.

    Exit codes: 0 done; 1 an error (bad settings, a draft rubric, the cache or output locked by another
    run, a model stopped early because its endpoint is unreachable or almost every reply fails, a full
    disk); 2 a usage error; 3 done and written, but more than --max-failures of the annotations failed.

    With --holistic, each model gives every answer one mark instead (holistic grading), cached and priced the same
    way; with --run (a k-fold run of the same answers) the marks are reported beside the trained grader and the
    points route: QWK, T-Acc, failing answers passed and cost (comparison.md).

    Example: rubrictool annotate --benchmark mohler --model gpt-4o --limit 20 --budget 1 --out annotations/
    """
    from rubrictool.annotate import (
        DEFAULT_MODELS,
        AnnotateConfig,
        load_inputs,
        run_annotation,
    )
    from rubrictool.annotate.outputs import check_annotate_output
    from rubrictool.rubric.load import resolve_rubric_path

    config = AnnotateConfig(
        models=tuple(model or DEFAULT_MODELS), format=reply_format, template=template, examples=examples,
        api_base=api_base, api_key_env=api_key_env, concurrency=concurrency, timeout=timeout,
        max_retries=max_retries, backoff=backoff, temperature=temperature, max_tokens=max_tokens, budget=budget,
        limit=limit, per_question=per_question, cache=None if no_cache else cache,
        workers=workers, retry_failed=retry_failed, allow_draft=allow_draft, max_failures=max_failures,
    )
    data = renamed("--items", items_file, "--data", old_data)
    config.check()  # one line for an option out of range, before any data is read
    items, rub = load_inputs(benchmark, rubric, data, data_dir)
    if config.benchmark is None and benchmark:
        config = dataclasses.replace(config, benchmark=benchmark)
    if holistic or run is not None or pass_mark is not None:
        if not holistic:
            raise AnnotateError("--run and --pass-mark belong to --holistic", hint="add --holistic, or drop them")
        _holistic(items, rub, config, dry, out, [data, rubric, template, None if no_cache else cache],
                  resolve_rubric_path(rubric or benchmark or ""), run, pass_mark)
        return
    if dry:
        _show_dry_run(items, rub, config)
        return
    check_annotate_output(out, [data, rubric, template, examples, None if no_cache else cache])
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[info]}"),
               TimeElapsedColumn())
    # the bar starts with the first report: worker processes are forked before that, from a process
    # that still runs a single thread (Rich's refresh thread would force the slower fork server)
    rubric_file = resolve_rubric_path(rubric or benchmark or "")
    with ProgressView(err_console, *columns, start_on_first=True) as view:
        result, paths = run_annotation(items, rub, config, out, progress=view, rubric_file=rubric_file)
    print_summary(result, paths, console)
    _fail_on_failures(result, paths, config.max_failures)
