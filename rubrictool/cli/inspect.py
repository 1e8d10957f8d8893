"""``rubrictool explain | intervene | report | ablate`` and ``rubric diagnose``: inspecting a trained run.

Registered onto the app by :func:`register` (called from :mod:`rubrictool.cli`); each body calls the
library functions of :mod:`rubrictool.report` and prints what they return.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from rubrictool.cli._common import (
    BackboneOpt,
    DataDirOpt,
    DeviceOpt,
    EpochsOpt,
    JobsOpt,
    LrOpt,
    MaxLenOpt,
    OldDataOpt,
    OptionalRunOpt,
    PresetOpt,
    ProgressView,
    RunOpt,
    RunTableOpt,
    TableRubricOpt,
    VerifyOpt,
    at_least,
    console,
    err_console,
    folds_or_none,
    handle_errors,
    print_warnings,
    renamed,
)
from rubrictool.cli._sanitize import shown

if TYPE_CHECKING:
    from rubrictool.report import Diagnosis, ItemTrace

__all__ = ["register"]

REPORT_FILES = ["report.html", "report.md", "report.json"]  # what marks a folder as an earlier report



def _bar(v: float, scale: float, width: int = 6) -> str:
    n = round(width * abs(v) / scale) if scale > 0 else 0
    return ("[blue]" + "█" * n + "[/]") if v >= 0 else ("[dark_orange]" + "█" * n + "[/]")


def _print_trace(t: ItemTrace) -> None:
    from rich.table import Table

    verdict = "" if t.correct is None else (" [green](correct)[/]" if t.correct else f" [red](gold {t.gold_grade})[/]")
    console.print(f"\n[bold]{shown(t.id, one_line=True)}[/]: grade [bold]{t.grade}[/] (p = {t.grade_prob:.3f}), "
                  f"runner-up {t.runner_up} (p = {t.runner_up_prob:.3f}){verdict}", soft_wrap=True, highlight=False)
    if t.question:
        console.print(f"[bold]question:[/] {shown(t.question)}", soft_wrap=True, highlight=False)
    if t.reference:
        console.print(f"[bold]reference answer:[/] {shown(t.reference)}", soft_wrap=True, highlight=False)
    console.print(f"[bold]response:[/] [dim]{shown(t.response)}[/]", soft_wrap=True, highlight=False)
    other = t.other_grade is not None
    table = Table(box=None, pad_edge=False, header_style="bold")  # narrow: fits 80 columns
    cols = ["concept", "level (p)", "ĉ", "s̃", "μ_post", f"→ {t.grade}"]
    cols += [f"→ {t.other_grade} ({'gold' if t.other_kind == 'gold' else '2nd'})", "diff."] if other else []
    for col in (*cols, ""):
        table.add_column(col, justify="left" if col in ("concept", "") else "right", no_wrap=True)
    scale = max([abs(c.contribution) for c in t.concepts] + [abs(c.difference or 0.0) for c in t.concepts] + [1e-9])
    for c in t.concepts:
        level = f"{c.level} ({c.level_prob:.2f})" + (f" → [bold]{c.set_to}[/]" if c.set_to is not None else "")
        diff = [f"{c.contribution_other or 0.0:+.3f}", f"{c.difference or 0.0:+.3f}"] if other else []
        table.add_row(shown(c.key, one_line=True), level, f"{c.expected:.2f}", f"{c.s_tilde:.2f}", f"{c.mu_post:.3f}",
                      f"{c.contribution:+.3f}", *diff, _bar((c.difference or 0.0) if other else c.contribution, scale))
    console.print(table)
    attends = [f"{shown(c.key, one_line=True)}: "
               "" + " ".join(shown(tok.strip(), one_line=True) for tok, _ in c.top_tokens[:3])
               for c in t.concepts if c.top_tokens]
    if attends:
        console.print("attends to — " + " · ".join(attends), soft_wrap=True, highlight=False)
    console.print(f"grade {t.grade}: Σ contributions {t.contributions_sum() - t.bias:+.3f} + bias {t.bias:+.3f} "
                  f"= logit {t.logit:+.3f}", highlight=False)
    if other and t.other_logit is not None and t.other_bias is not None:
        s_other = sum(c.contribution_other or 0.0 for c in t.concepts)
        console.print(f"grade {t.other_grade}: Σ contributions {s_other:+.3f} + bias {t.other_bias:+.3f} "
                      f"= logit {t.other_logit:+.3f}", highlight=False)
        console.print(f"why: {shown(t.why(), one_line=True)}", soft_wrap=True, highlight=False)
    if t.grade_after is not None:
        sets = ", ".join(f"{shown(k, one_line=True)}={v}" for k, v in t.overrides.items())
        console.print(f"with {sets}: grade [bold]{t.grade}[/] → [bold]{t.grade_after}[/] (p = "
                      f"{t.grade_after_prob:.3f}); "
                      f"p(grade {t.grade}) {t.grade_prob:.3f} → {t.prob_of_grade_after:.3f}", soft_wrap=True,
                      highlight=False)


def _print_legend() -> None:
    from rubrictool.report.explain import SYMBOLS

    console.print("\n[bold]legend[/] (→ g: toward grade g; 2nd: the runner-up grade; the bars show diff. when a "
                  "second grade is compared, else the contribution; blue pushes toward the predicted grade)",
                  soft_wrap=True, highlight=False)
    names = {"ĉ_k": "ĉ", "s̃_k": "s̃", "contribution": "→ g", "difference": "diff."}
    for sym, words in SYMBOLS.items():
        console.print(f"  [bold]{names.get(sym, sym)}[/]: {words}", soft_wrap=True, highlight=False)


def _before_work(out: Path, inputs: list[Any], verify: bool, writes: list[str]) -> None:
    """``--verify`` for every run this command opens; the output rule (rubrictool.outputs: ``writes``, the
    files that mark an earlier output of the command) and a write probe of ``out``, before the run is loaded.
    """
    from rubrictool.outputs import check_output, writable_parent
    from rubrictool.train.runs import require_run_dir, verify_runs_fully

    if verify:
        verify_runs_fully()
    require_run_dir(inputs[0])  # a mistyped --run is one line, and nothing is created for it
    check_output(out, inputs, "folder", writes=writes, in_run=True, required=inputs[1:])
    writable_parent(out, folder=True)


def explain_cmd(
    model: RunOpt,
    item_ids: Annotated[list[str] | None, typer.Argument(help="Ids of the answers to explain.")] = None,
    ids: Annotated[list[str] | None, typer.Option(
        "--id", help="Answer id (repeatable; same as the arguments).",
    )] = None,
    items: Annotated[Path | None, typer.Option(
        "--items", help="The answers to explain, e.g. new ones (default: the run's own copy of its training table).",
    )] = None,
    set_: Annotated[list[str] | None, typer.Option(
        "--set", help="Override concepts, e.g. FC=3,CC=1 (or --set FC=3 --set CC=1): how do the grade and its "
                      "probability move?",
    )] = None,
    out: Annotated[Path | None, typer.Option(
        "--out", "-o", help="Folder for explain.html, explain.csv and the PNGs (default RUN/explain).",
    )] = None,
    data_dir: DataDirOpt = None,
    verify: VerifyOpt = False,
    old_data: OldDataOpt = None,
) -> None:
    """Why this grade? The decision trace of answers: concept levels, attention, contributions to the logit.

    Writes explain.html (one self-contained page), explain.csv and one trace-<id>-<hash>.png per answer into --out.

    Example: rubrictool explain --run runs/mohler-reccbm 1.1.3 4.2.10 --set FC=3,CC=1
    """
    from rubrictool.report import explain_items, open_run, parse_overrides, table_rows
    from rubrictool.report.page import write_explain

    data = renamed("--items", items, "--data", old_data)
    wanted = [*(item_ids or []), *(ids or [])]
    if not wanted:
        raise typer.BadParameter("name the answers to explain: ITEM_ID… or --id ID")
    _before_work(out or model / "explain", [model, data], verify, ["explain.html", "explain.csv"])
    with err_console.status("loading the run and tracing ..."):
        run = open_run(model, data=data, data_dir=data_dir)
        overrides = parse_overrides(",".join(set_ or []), run.keys, (run.scale_min, int(run.meta["scale"][1])))
        traces = explain_items(run, table_rows(run, wanted, "answer id(s)"), overrides)
    print_warnings(run.warnings)
    for t in traces:
        _print_trace(t)
    _print_legend()
    paths = write_explain(traces, out or model / "explain", str(model))
    console.print(f"wrote {paths['explain.html']}, {paths['explain.csv']} and {len(paths) - 2} PNG(s)",
                  soft_wrap=True)


def intervene_cmd(
    model: RunOpt,
    table: RunTableOpt = None,
    out: Annotated[Path | None, typer.Option(
        "--out", "-o", help="Folder for intervention.csv/.png (default RUN/intervene).",
    )] = None,
    repeats: Annotated[int, typer.Option(
        "--repeats", callback=at_least(1), help="Random draws averaged for the random strategy.",
    )] = 5,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the random strategy.")] = 0,
    data_dir: DataDirOpt = None,
    verify: VerifyOpt = False,
    old_data: OldDataOpt = None,
) -> None:
    """Simulate educator interventions on the test split: T-Acc and QWK as k concepts are replaced.

    The k most uncertain (and separately the k most confident) concept predictions of each answer are
    set to the adjudicated level (oracle), the most damaging wrong level (wrong) or a random level.
    Writes intervention.csv, intervention.png (T-Acc) and intervention_qwk.png into --out.

    Example: rubrictool intervene --run runs/mohler-reccbm
    """
    from rich.progress import Progress
    from rich.table import Table

    from rubrictool.report import intervention_curves, open_run, split_rows
    from rubrictool.report.intervene import write_interventions
    from rubrictool.report.run import predict_with_attention

    data = renamed("--table", table, "--data", old_data)
    _before_work(out or model / "intervene", [model, data], verify, ["intervention.csv", "intervention.png"])
    with err_console.status("predicting the test split ..."):
        run = open_run(model, data=data, data_dir=data_dir)
        if run.plm:
            from rubrictool.errors import DataError

            raise DataError("this is a PLM run: it has no concepts to intervene on")
        test = split_rows(run)
        preds = predict_with_attention(run, test).preds
    keys = [f"_c_{k}" for k in run.keys]
    if not all(k in test for k in keys):
        from rubrictool.errors import DataError

        raise DataError("the table has no adjudicated concept labels for the test answers: nothing to intervene with")
    assert preds.p_hat is not None
    with Progress(console=err_console, transient=True) as bar:
        task = bar.add_task("intervening", total=None)
        curves = intervention_curves(run, preds.p_hat, test[keys].to_numpy(), test["_y"].to_numpy(),
                                     random_repeats=repeats, seed=seed,
                                     on_step=lambda i, n: bar.update(task, completed=i, total=n))
    print_warnings(run.warnings)
    paths = write_interventions(curves, out or model / "intervene")
    for order in dict.fromkeys(curves["order"]):
        t = Table(title=f"T-Acc / QWK with the k most {order} concepts replaced ({len(test)} test answers)")
        t.add_column("k", justify="right")
        part = curves[curves["order"] == order]
        strategies = list(dict.fromkeys(part["strategy"]))
        for s in strategies:
            t.add_column(s, justify="right")
        for k in sorted(set(part["k"])):
            cells = [part[(part["k"] == k) & (part["strategy"] == s)].iloc[0] for s in strategies]
            t.add_row(str(k), *(f"{c['t_acc']:.3f} / {c['qwk']:.3f}" for c in cells))
        console.print(t)
    console.print(f"wrote {', '.join(str(p) for p in paths.values())}", soft_wrap=True)


def report_cmd(
    model: RunOpt,
    table: RunTableOpt = None,
    out: Annotated[Path | None, typer.Option(
        "--out", "-o", help="Folder for report.html/.md, PNGs and CSVs (default RUN/report).",
    )] = None,
    reviews: Annotated[list[str] | None, typer.Option(
        "--reviews", help="Review files for the rubric diagnostics' level confusions (repeatable; default: the "
                          "benchmark's passes).",
    )] = None,
    repeats: Annotated[int, typer.Option(
        "--repeats", callback=at_least(1), help="Random draws of the random intervention.",
    )] = 5,
    curve: Annotated[Path | None, typer.Option(
        "--curve", exists=True, dir_okay=False, help="A learning curve's curve.csv (`rubrictool learning-curve`): show "
                                                     "where the run's number of labelled answers sits on it.",
    )] = None,
    data_dir: DataDirOpt = None,
    verify: VerifyOpt = False,
    old_data: OldDataOpt = None,
) -> None:
    """One self-contained HTML page (and Markdown) about a trained run, to show a department or paste into a paper.

    Grade metrics with a confusion matrix, machine–human beside human–human agreement, concept metrics
    and reliability, LCEC correlations, intervention curves, two decision traces, rubric diagnostics
    and provenance.

    Example: rubrictool report --run runs/mohler-reccbm --out report/

    Example: rubrictool report --run runs/course --curve curves/course/curve.csv

    A k-fold run (train --folds k) gets one page over the pooled predictions of all its folds: every metric with its
    95 % CI beside the majority class and the points grader, one row per fold (constant folds marked), the verdict.

    Example: rubrictool report --run runs/course-5fold --curve curves/course/curve.csv
    """
    from rubrictool.train.kfold import is_kfold_run

    data = renamed("--table", table, "--data", old_data)
    if is_kfold_run(model):  # train --folds k: one page over the pooled predictions of every fold
        _report_folds(model, out, curve)
        return
    from rubrictool.report import build_report, open_run, write_report

    _before_work(out or model / "report", [model, data, curve, *(reviews or [])], verify, REPORT_FILES)
    rev = None
    if reviews:
        from rubrictool.adjudicate import read_reviews

        rev = read_reviews(reviews)
    with err_console.status("building the report ...") as status:
        run = open_run(model, data=data, data_dir=data_dir)
        rep = build_report(run, reviews=rev, random_repeats=repeats, curve=curve,
                           on_progress=lambda msg: status.update(f"{msg} ..."))
        paths = write_report(rep, out or model / "report")
    print_warnings(run.warnings)
    m = rep.metrics
    console.print(f"{shown(rep.variant)} on {rep.n_test} test answers: T-Acc {m['t_acc']:.3f}, QWK {m['qwk']:.3f}, "
                  f"Pearson r {m['pearson']:.3f}, SMD {m['smd']:+.3f}", soft_wrap=True, highlight=False)
    for u in rep.unavailable:
        console.print(f"[yellow]not shown:[/] {shown(u)}", soft_wrap=True, highlight=False)
    if rep.diagnosis is not None:
        _print_suggestions(rep.diagnosis)
    console.print(f"wrote {paths['report.html']} (and {len(paths) - 1} more files in {paths['report.html'].parent})",
                  soft_wrap=True)


def _report_folds(run: Path, out: Path | None, curve: Path | None) -> None:
    from rubrictool.outputs import check_output
    from rubrictool.report.folds_page import build_folds_report, write_folds_report

    check_output(out or run / "report", [run, curve], "folder", writes=REPORT_FILES, in_run=True)
    with err_console.status("building the pooled report of the folds ..."):
        rep = build_folds_report(run, curve=curve)
        paths = write_folds_report(rep, out or run / "report")
    row = {t["metric"]: t for t in rep.table}
    q, a = row["qwk"]["model"], row["t_acc"]["model"]
    console.print(f"{rep.folds} folds, {rep.n} answers pooled: T-Acc {a['value']:.3f} [{a['lo']:.3f}, {a['hi']:.3f}], "
                  f"QWK {q['value']:.3f} [{q['lo']:.3f}, {q['hi']:.3f}] (95 % bootstrap CIs)", soft_wrap=True,
                  highlight=False)
    for v in rep.verdict:
        console.print(f"• {shown(v)}", soft_wrap=True, highlight=False)
    for u in rep.unavailable:
        console.print(f"[yellow]not shown:[/] {shown(u)}", soft_wrap=True, highlight=False)
    console.print(f"wrote {paths['report.html']} (and {len(paths) - 1} more files in {paths['report.html'].parent})",
                  soft_wrap=True)


def _print_suggestions(diag: Diagnosis) -> None:
    for s in diag.suggestions:
        console.print(f"• {shown(s)}", soft_wrap=True, highlight=False)


def diagnose_cmd(
    adjudicated: Annotated[Path | None, typer.Option(
        "--adjudicated", "-a", help="The --out folder of `rubrictool adjudicate` (adjudicated.csv, agreement.json, "
                                    "discussion_queue.csv).",
    )] = None,
    rubric: Annotated[str | None, typer.Option(
        "--rubric", "-r", help="Rubric name or YAML (default: the one agreement.json names).",
    )] = None,
    reviews: Annotated[list[str] | None, typer.Option(
        "--reviews", help="Review files (repeatable) for the level confusions; default: the discussion queue.",
    )] = None,
    model: OptionalRunOpt = None,
    table: Annotated[Path | None, typer.Option(
        "--table", help="With --run alone: the adjudicated table to diagnose instead of the run's copy of its training "
                        "table.",
    )] = None,
    out: Annotated[Path | None, typer.Option("--out", "-o", help="Write rubric_diagnosis.csv and .md here.")] = None,
    n_pairs: Annotated[int, typer.Option(
        "--pairs", callback=at_least(1), help="Contrasting pairs shown per grade boundary the concepts cannot "
                                              "separate.",
    )] = 3,
    suggest: Annotated[str | None, typer.Option("--suggest", help=(
        "LLM (litellm model string) that proposes a new concept or sharper anchors from the pairs, as a rubric YAML "
        "diff that validates (rubric_suggestion.diff in --out, else here)."))] = None,
    api_base: Annotated[str | None, typer.Option(
        "--api-base", help="OpenAI-compatible server for --suggest, e.g. http://127.0.0.1:8080/v1.",
    )] = None,
    api_key_env: Annotated[str | None, typer.Option(
        "--api-key-env", help="Environment variable holding the --suggest API key.",
    )] = None,
    cache: Annotated[Path | None, typer.Option(
        "--cache", help="Reply cache (SQLite) for --suggest: the same question is paid once.",
    )] = Path(".rubrictool-cache/suggest.sqlite"),
    old_data: OldDataOpt = None,
) -> None:
    """Diagnose a rubric from adjudicated labels, before any training: α, level confusions, drop-one coverage, redundancy,
    and what the rubric cannot see.

    With grades in the table it also fits a head on the adjudicated concept levels (5-fold cross-validated): the
    ceiling per grade, the grade boundaries the levels cannot separate (binary balanced accuracy below 0.75) and,
    for each, answers with the same concept profile and different grades side by side. --suggest MODEL asks an LLM
    to propose the missing criterion as a diff of the rubric file; a proposal that does not validate is reported,
    not written. Ends with concrete suggestions (merge two concepts, sharpen two level anchors, ...).

    Example: rubrictool rubric diagnose --adjudicated runs/mohler/adjudicated

    Example: rubrictool rubric diagnose --adjudicated adj/ --out diag/ --suggest openai/gpt-4o-mini

    With --run, the run's learned partial correlations are added. After training, --run alone is enough: the run keeps a copy of its rubric and of its training table (the level
    confusions need the reviewers' own labels: --reviews, or --adjudicated).

    Example: rubrictool rubric diagnose --run runs/course --out diag/
    """  # noqa: E501 - the command's help text, kept as users see it
    from rubrictool.report import diagnose_dir, diagnose_run
    from rubrictool.report.diagnose import write_diagnosis

    data = renamed("--table", table, "--data", old_data)
    if adjudicated is None and model is None:
        raise typer.BadParameter("pass --adjudicated DIR (the folder `rubrictool adjudicate` wrote) or --run RUN "
                                 "(a trained run)")
    if data is not None and (adjudicated is not None or model is None):
        raise typer.BadParameter("--table goes with --run alone (with --adjudicated the table is the folder's)")
    if adjudicated is None and rubric is not None:
        raise typer.BadParameter("--rubric goes with --adjudicated: a run diagnoses the copy of the rubric it "
                                 "trained on")
    if out is not None:  # the output rule (rubrictool.outputs), before the work
        from rubrictool.outputs import check_output

        check_output(out, [adjudicated, model, data, rubric, *(reviews or [])], "folder", in_run=True,
                     writes=["rubric_diagnosis.csv", "rubric_diagnosis.md", "rubric_suggestion.diff"])
    with err_console.status("diagnosing ..."):
        if adjudicated is None:
            assert model is not None
            diag = diagnose_run(model, reviews, data, pairs_per_boundary=n_pairs)
        else:
            diag = diagnose_dir(adjudicated, rubric, reviews, model, pairs_per_boundary=n_pairs)
    print_warnings(diag.warnings)
    _print_concepts(diag)
    _print_reviewer_pairs(diag)
    if diag.ceiling is not None:
        _print_ceiling(diag)
    _print_suggestions(diag)
    for n in diag.notes:
        console.print(f"[yellow]note:[/] {shown(n)}", soft_wrap=True, highlight=False)
    if out is not None:
        paths = write_diagnosis(diag, out)
        console.print(f"wrote {', '.join(str(p) for p in paths.values())}", soft_wrap=True)
    if suggest is not None:
        _suggest(diag, rubric, suggest, api_base, api_key_env, cache, out)


def _print_concepts(diag: Diagnosis) -> None:
    """The diagnosis table: per concept α, confused levels, drop-one accuracy, redundancy and correlations."""
    import pandas as pd
    from rich.table import Table

    h = diag.ceiling.honest if diag.ceiling is not None else None
    maj = f"; majority class {h['majority']['t_acc']:.3f}" if h else ""
    t = Table(title=f"rubric diagnosis (grade accuracy from all concepts, 5-fold: {diag.coverage_acc:.3f}{maj})")
    for col in ("concept", "α", "confused levels", "accuracy without it", "closest", "same level", "label r",
                "partial r"):
        t.add_column(col, justify="left" if col in ("concept", "closest", "confused levels") else "right",
                     no_wrap=col == "accuracy without it")

    def f(x: Any, spec: str = ".3f") -> str:
        return "—" if x is None or pd.isna(x) else format(x, spec)

    for r in diag.concepts.to_dict("records"):
        conf = f"{r['confused_levels']} ({f(r['confused_share'], '.0%')} of {r['n_disagreements']})" if r[
            "n_disagreements"] else "—"
        t.add_row(shown(r["concept"]), f(r["alpha"]), shown(conf), _drop_words(r["drop_one_loss"]), shown(r["closest"]),
                  f(r["same_level"], ".0%"), f(r["label_corr"]), f(r["partial_corr"]))
    console.print(t)


def _print_reviewer_pairs(diag: Diagnosis) -> None:
    """The reviewer-by-reviewer disagreements per concept, when there are any."""
    from rich.table import Table

    from rubrictool.report.diagnose import reviewer_confusion

    pairs = reviewer_confusion(diag.confusions, list(diag.concepts["concept"]))
    if len(pairs.columns):
        p = Table(title="reviewer-by-reviewer disagreements (total: level pairs)")
        p.add_column("concept")
        for col in pairs.columns:
            p.add_column(shown(col))
        for key, row in pairs.iterrows():
            p.add_row(shown(key), *(shown(v) for v in row))
        console.print(p)


def _drop_words(loss: Any) -> str:
    """A drop-one change in words: what the grade's cross-validated accuracy does without the concept."""
    if loss is None or math.isnan(float(loss)):
        return "—"
    if abs(loss) < 5e-4:
        return "no change"
    return f"{'loses' if loss > 0 else 'gains'} {100 * abs(loss):.1f} pts"


def _print_ceiling(diag: Diagnosis) -> None:
    from rich.markup import escape
    from rich.table import Table

    c = diag.ceiling
    assert c is not None
    h = c.honest
    beside = ""
    if h:
        ci, maj = h["ci"], h["majority"]
        beside = (f"; 95 % CIs T-Acc [{ci['t_acc']['lo']:.3f}, {ci['t_acc']['hi']:.3f}], QWK [{ci['qwk']['lo']:.3f}, "
                  f"{ci['qwk']['hi']:.3f}]; majority class (always grade {maj['grade']}): T-Acc {maj['t_acc']:.3f}, "
                  f"QWK {maj['qwk']:.3f}")
    t = Table(title=f"what the concept levels can tell apart: a head on the adjudicated levels, {c.folds}-fold "
                    f"(T-Acc {c.t_acc:.3f}, T-F1 {c.t_f1:.3f}, QWK {c.qwk:.3f}{beside})")
    for col in ("grade", "answers", "precision", "recall", "F1"):
        t.add_column(col, justify="right")
    for r in c.per_grade.to_dict("records"):
        t.add_row(str(r["grade"]), str(r["n"]), f"{r['precision']:.2f}", f"{r['recall']:.2f}", f"{r['f1']:.2f}")
    console.print(t)
    b = Table(title="grade boundaries (binary head on the two grades' answers; 0.5 is chance)")
    for col in ("boundary", "answers", "lo→up", "up→lo", "bal. acc.", "shared profile", ""):
        b.add_column(col, justify="left" if col in ("boundary", "") else "right", no_wrap=col in ("", "boundary"))
    for r in c.boundaries.to_dict("records"):
        b.add_row(f"{r['lower']}/{r['upper']}", f"{r['n_lower']} + {r['n_upper']}", str(r["lower_as_upper"]),
                  str(r["upper_as_lower"]), f"{r['balanced_acc']:.2f}", f"{100 * r['shared_profiles']:.0f} %",
                  "[red]cannot separate[/]" if r["named"] else "[green]separated[/]")
    console.print(b)
    for p in diag.pairs:
        prof = " ".join(f"{k}={v}" for k, v in p.profile.items())
        q = "same question" if p.same_question else "different questions"
        t = Table(title=f"grade {p.lower} vs {p.upper}: {prof} ({q}; profile seen {p.n_lower}× at {p.lower}, "
                        f"{p.n_upper}× at {p.upper})", show_lines=True)
        t.add_column("", style="dim")
        t.add_column(f"grade {p.lower} ({escape(p.a['id'])})", ratio=1)
        t.add_column(f"grade {p.upper} ({escape(p.b['id'])})", ratio=1)
        t.add_row("question", escape(p.a["question"]), escape(p.b["question"]))
        t.add_row("response", escape(p.a["response"]), escape(p.b["response"]))
        console.print(t)


def _suggest(diag: Diagnosis, rubric: str | None, model: str, api_base: str | None, api_key_env: str | None,
             cache: Path | None, out: Path | None) -> None:
    from rubrictool.io import write_text
    from rubrictool.report.suggest import propose_for_diagnosis

    with err_console.status(f"asking {model} for the missing criterion ..."):
        prop = propose_for_diagnosis(diag, model, rubric, api_base=api_base, api_key_env=api_key_env, cache=cache)
    cost = (f"${prop.cost_usd:.4f}" if prop.price_known else "no price") if not prop.cached else "cached, $0"
    console.print(f"{model}: {prop.prompt_tokens} prompt + {prop.completion_tokens} completion tokens ({cost})",
                  highlight=False)
    if not prop.valid:
        err_console.print(f"[yellow]the proposal does not validate, not written:[/] {prop.error}", soft_wrap=True,
                          highlight=False)
        return
    folder = out if out is not None else Path(".")
    diff = write_text(folder / "rubric_suggestion.diff", prop.diff)
    yml = write_text(folder / "rubric_suggestion.yaml", prop.text)
    typer.echo(prop.diff, nl=False)
    console.print(f"wrote {diff} and {yml} (the rubric with the change; it validates)", soft_wrap=True)


def ablate_cmd(
    out: Annotated[Path, typer.Option("--out", "-o", help="Folder: one run per combination, ablation.csv/.md/.png.")],
    benchmark: Annotated[str | None, typer.Option("--benchmark", "-b", help="Bundled benchmark, e.g. mohler.")] = None,
    table: Annotated[Path | None, typer.Option("--table", help="Adjudicated table (with --rubric).")] = None,
    rubric: TableRubricOpt = None,
    seeds: Annotated[int, typer.Option(
        "--seeds", callback=at_least(1), help="Seeds per combination (mean ± std).",
    )] = 1,
    folds: Annotated[int, typer.Option(
        "--folds", callback=folds_or_none, help="k-fold evaluation per combination (0 = one split).",
    )] = 0,
    split_seed: Annotated[int, typer.Option("--split-seed", help="Seed of the shared split.")] = 0,
    variants: Annotated[str | None, typer.Option(
        "--variants", help="Only these combinations, e.g. vanilla,reccbm,plm; each may end in -frozen (the pretrained "
        "encoder frozen) or -auto, e.g. reccbm,reccbm-frozen,plm,plm-frozen.")] = None,
    backbone: BackboneOpt = None,
    epochs: EpochsOpt = None,
    max_len: MaxLenOpt = None,
    lr: LrOpt = None,
    device: DeviceOpt = None,
    jobs: JobsOpt = 1,
    preset: PresetOpt = "default",
    data_dir: DataDirOpt = None,
    old_data: OldDataOpt = None,
) -> None:
    """Train the eight RACE/OPCC/LCEC combinations and the PLM on the same split(s) and seeds; table and bar chart.

    Resumable: finished combinations (OUT/<variant>/metrics.json) are kept and read back.

    Example: rubrictool ablate --benchmark mohler --seeds 3 --out runs/ablation

    Example (frozen encoder beside trained): rubrictool ablate --benchmark mohler --variants reccbm,reccbm-frozen,plm,plm-frozen --out runs/ablation
    """  # noqa: E501 - the command's help text, kept as users see it
    from rubrictool.outputs import check_output, is_kfold_folder, is_run_folder
    from rubrictool.report.ablate import ablation_markdown, run_ablation
    from rubrictool.train import TrainOptions, training_overrides

    data = renamed("--table", table, "--data", old_data)

    def runs_inside(folder: Path) -> bool:  # an ablation killed before its table: the combinations it trained
        return any(p.is_dir() and (is_run_folder(p) or is_kfold_folder(p)) for p in folder.iterdir())

    check_output(out, [data, rubric], "folder", writes=["ablation.csv", "ablation.md"], own=runs_inside,
                 what="the ablation")

    flat = {"backbone": backbone, "epochs": epochs, "max_len": max_len, "lr": lr, "device": device}
    options = TrainOptions(preset=preset, overrides=training_overrides(flat=flat), seeds=seeds)

    def on_run(i: int, n: int, name: str, state: str) -> None:
        console.print(f"[{i + 1}/{n}] {name}: " + ("finished earlier, read back" if state == "done" else "training"))

    with ProgressView(console) as view:
        combos, paths = run_ablation(
            out, benchmark=benchmark, data=data, rubric=rubric, options=options, data_dir=data_dir,
            variants=[v.strip() for v in variants.split(",") if v.strip()] if variants else None, folds=folds,
            split_seed=split_seed, on_run=on_run, progress=view, jobs=jobs,
        )
    console.print(ablation_markdown(combos), soft_wrap=True, highlight=False)
    console.print(f"wrote {', '.join(str(p) for p in paths.values())}", soft_wrap=True)


def register(app: typer.Typer, rubric_app: typer.Typer) -> None:
    """Add explain, intervene, report, ablate and ``rubric diagnose`` to the app."""
    app.command("explain")(handle_errors(explain_cmd))
    app.command("intervene")(handle_errors(intervene_cmd))
    app.command("report")(handle_errors(report_cmd))
    app.command("ablate")(handle_errors(ablate_cmd))
    rubric_app.command("diagnose")(handle_errors(diagnose_cmd))
