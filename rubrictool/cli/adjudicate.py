"""``rubrictool adjudicate``: agreement (Krippendorff's α and friends) and adjudication of the reviews."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from rubrictool.cli._common import BenchmarkOpt, DataDirOpt, OutOpt, at_least, console, err_console
from rubrictool.cli._sanitize import shown

__all__ = ["adjudicate_cmd", "summary_lines", "summary_rows", "summary_table"]


def summary_rows(agreement: dict[str, Any]) -> list[dict[str, str]]:
    """One row of display strings per concept: α [CI], exact, % unanimous, flagged, queued, best/worst."""

    def f(x: Any, spec: str = ".3f") -> str:
        return "—" if x is None else format(x, spec)

    rows = []
    for key, c in agreement["concepts"].items():
        lo, hi = c["alpha_ci"]
        rows.append(
            {
                "concept": key,
                "alpha": f"{f(c['alpha'])} [{f(lo)}, {f(hi)}]",
                "exact": f(c["exact"]),
                "unanimous": "—" if c["unanimous"] is None else f"{100 * c['unanimous']:.1f}%",
                "flagged": str(c["flagged"]),
                "queued": str(c.get("queued", "—")),
                "best": c["best_reviewer"] or "—",
                "worst": c["worst_reviewer"] or "—",
            }
        )
    return rows


def summary_table(agreement: dict[str, Any]) -> Table:
    """The per-concept table of :func:`summary_rows`."""
    table = Table(
        title=f"agreement and adjudication — rubric {agreement['rubric']} ({agreement['level_of_measurement']} α)"
    )
    for name, justify in [
        ("concept", "left"),
        ("α [95% CI]", "right"),
        ("exact", "right"),
        ("unanimous", "right"),
        ("flagged", "right"),
        ("queued", "right"),
        ("best", "left"),
        ("worst", "left"),
    ]:
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    for r in summary_rows(agreement):
        table.add_row(
            r["concept"], r["alpha"], r["exact"], r["unanimous"], r["flagged"], r["queued"], r["best"], r["worst"]
        )
    return table


def summary_lines(agreement: dict[str, Any]) -> list[str]:
    """The lines printed under the table: decisions, coverage, grade agreement, LLM agreement, notes."""
    a = agreement["adjudication"]
    lines = [
        f"{agreement['n_items']} items, reviewers {', '.join(agreement['reviewers'])}: {a['n_decisions']} decisions "
        f"by {a['method']}, {a['unanimous']} unanimous, {a['flagged']} flagged ({a['tied']} ties), "
        f"{a['resolved']} resolved"
        + (
            f"; Dawid-Skene differs from majority vote on {a['dawid_skene_changed']}"
            if a["dawid_skene_changed"] is not None
            else ""
        )
    ]
    q = a.get("queue")
    if q:
        lines.append(
            f"discussion queue (--queue {q['rule']}): {q['n_cases']} case(s) over {q['n_items']} item(s) — {q['means']}"
            + (f"; {a['flagged'] - q['n_cases']} other non-unanimous label(s) decided by the vote "
               "(--queue all lists them)"
               if "all" not in q["rule"].split(",") and a["flagged"] > q["n_cases"] else "")
        )
    under = agreement["under_reviewed"]["n_items"]
    if under:
        lines.append(
            f"{under} item(s) have fewer than {agreement['expected_reviewers']} reviewers "
            "(agreement.json lists the first 100 under under_reviewed)"
        )
    cov = agreement["coverage"]
    if cov.get("available"):
        lines.append(
            f"coverage (grade from concept levels, {cov['folds']}-fold CV): one-hot acc "
            f"{cov['levels_one_hot']['accuracy']:.3f} "
            f"macro-F1 {cov['levels_one_hot']['macro_f1']:.3f}; numeric acc {cov['levels_as_numbers']['accuracy']:.3f} "
            f"macro-F1 {cov['levels_as_numbers']['macro_f1']:.3f}; majority class acc "
            f"{cov['majority_class']['accuracy']:.3f}"
        )
    g = agreement["grade"]
    if g.get("available") and g.get("alpha") is not None:
        lines.append(
            f"grade agreement ({' vs '.join(g['graders'])}): interval α {g['alpha']:.3f}, exact {g['exact']:.3f}"
        )
    for model, s in (agreement.get("skipped_predictions") or {}).items():
        if s["labels"]:
            lines.append(f"{model}: {s['labels']} failed or unparsed label(s) on {s['items']} item(s) skipped")
    un = agreement.get("unreviewed") or {}
    if un.get("n_labels"):
        lines.append(
            f"{un['n_labels']} label(s) no reviewer saw ({un['n_items']} item(s) without any review) come from the "
            f"pre-annotations ({', '.join(un['models'])}; source {un['source']}); they are in no α"
        )
    unl = agreement.get("unlabelled") or {}
    if unl.get("n_items"):
        ids = unl["items"]
        lines.append(
            f"{unl['n_items']} item(s) have no valid label from any reviewer or model ({', '.join(ids[:10])}"
            + (" ..." if unl["n_items"] > 10 else "")
            + "): kept in the adjudicated table unlabelled (agreement.json lists them under unlabelled); "
              "train skips them"
        )
    if agreement.get("items_given") is False:
        lines.append(
            "no --items: the adjudicated table holds the concept labels only, with empty question, response and "
            "grade columns; to train on it, re-run with --items ITEMS (e.g. the file `rubrictool data import` wrote)"
        )
    for model, per in agreement["llm_vs_consensus"].items():
        alphas = [v["alpha"] for v in per.values() if v["alpha"] is not None]
        if alphas:
            lines.append(
                f"LLM {model} vs consensus: mean α {sum(alphas) / len(alphas):.3f} over {len(alphas)} concepts"
            )
    if agreement.get("note"):
        lines.append(f"note: {agreement['note']}")
    return lines


def adjudicate_cmd(
    rubric: Annotated[str | None, typer.Option(
        "--rubric", "-r", help="Rubric name or YAML path (default: the benchmark's).",
    )] = None,
    reviews: Annotated[list[str] | None, typer.Option(
        "--reviews", help="Review file, repeatable: long (item, reviewer, concept, level), one reviewer's wide file "
                          "(id, FC, ...; reviewer = file stem, or NAME=PATH), or a prediction table (each model a "
                          "reviewer; failed replies skipped and counted).",
    )] = None,
    benchmark: BenchmarkOpt = None,
    items: Annotated[Path | None, typer.Option(
        "--items", help="Item table (CSV/JSONL/Parquet) for texts, grades and the id check.",
    )] = None,
    data_dir: DataDirOpt = None,
    predictions: Annotated[Path | None, typer.Option(
        "--predictions", help="LLM prediction table (item, model, concept, level, raw_ok) to compare with the "
                              "consensus.",
    )] = None,
    method: Annotated[str, typer.Option(
        "--method", help="majority (ordinal tie rule) or dawid-skene (crowd-kit).",
    )] = "majority",
    level_of_measurement: Annotated[str, typer.Option(
        "--level-of-measurement", help="Krippendorff's α metric: ordinal, nominal, interval or ratio.",
    )] = "ordinal",
    resolutions: Annotated[Path | None, typer.Option(
        "--resolutions", help="Expert decisions (item, concept, level[, note, decided_by]) or a filled-in "
                              "discussion_queue.csv.",
    )] = None,
    out: OutOpt = Path("adjudicated"),
    out_format: Annotated[str, typer.Option("--out-format", help="Table format: csv, jsonl or parquet.")] = "csv",
    bootstrap: Annotated[int, typer.Option(
        "--bootstrap", callback=at_least(0), help="Bootstrap replicates for the α CIs (0 = none).",
    )] = 1000,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the bootstrap and the coverage folds.")] = 0,
    expected_reviewers: Annotated[int | None, typer.Option(
        "--expected-reviewers", callback=at_least(1),
        help="Report items with fewer reviewers (default: all reviewers seen).",
    )] = None,
    pre_annotations: Annotated[list[Path] | None, typer.Option(
        "--pre-annotations", help="Prediction table(s) (LLM annotations, `review push --run` grader predictions): "
                                  "their majority vote labels every item and concept no reviewer labelled (routed "
                                  "review); those labels are marked and in no α.",
    )] = None,
    queue: Annotated[str, typer.Option(
        "--queue", help="What goes to the discussion queue: all (every non-unanimous label), ties, gap2 (reviewers two "
                        "or more levels apart); combine with commas. Default: ties,gap2.",
    )] = "ties,gap2",
    from_label_studio: Annotated[str | None, typer.Option(
        "--from-label-studio", help="First pull the reviews of this Label Studio project (title or id; connection from "
                                    "$LABEL_STUDIO_URL/$LABEL_STUDIO_API_KEY or `review serve`) into "
                                    "--out/reviews_label_studio.csv.",
    )] = None,
) -> None:
    """Agreement (Krippendorff's α per concept, pairwise, per reviewer, LLM vs consensus, coverage) and adjudication.

    Writes adjudicated.<format> (the training table), decisions.<format>, discussion_queue.csv/.md (the
    cases --queue selects), disagreements.csv (every non-unanimous case) and agreement.json into --out.
    Give --items (the item file) so the table has the answers and grades that train needs.

    Example: rubrictool adjudicate --benchmark mohler --out runs/mohler/adjudicated

    Example: rubrictool adjudicate --rubric science.yaml --reviews predictions.jsonl --items items.csv --queue all --out llm-panel/
    """  # noqa: E501 - the command's help text, kept as users see it
    from rubrictool.adjudicate import AdjudicationOptions, run_adjudicate
    from rubrictool.outputs import check_output
    from rubrictool.review import pull_for_adjudicate

    fmt = out_format
    check_output(out, [*(reviews or []), items, predictions, resolutions, *(pre_annotations or []), rubric], "folder",
                 writes=[f"adjudicated.{fmt}", f"decisions.{fmt}", "discussion_queue.csv", "disagreements.csv",
                         "rubric.yaml", "discussion_queue.md", "agreement.json", "reviews_label_studio.csv"],
                 what="an adjudication output")
    if from_label_studio:  # review pull, then adjudicate what it wrote
        reviews = [*(reviews or []), str(pull_for_adjudicate(from_label_studio, rubric or benchmark, out))]

    with err_console.status("computing agreement and adjudicating ..."):
        result = run_adjudicate(
            rubric=rubric, reviews=reviews or [], benchmark=benchmark, items=items, data_dir=data_dir,
            predictions=predictions, resolutions=resolutions, out=out, fmt=out_format,
            pre_annotations=pre_annotations or [],
            options=AdjudicationOptions(method=method, measurement=level_of_measurement, n_boot=bootstrap,
                                        seed=seed, expected_reviewers=expected_reviewers, queue=queue),
        )
    console.print(summary_table(result.agreement))
    for line in summary_lines(result.agreement):
        console.print(shown(line), soft_wrap=True, highlight=False)
    console.print(f"wrote {', '.join(str(p) for p in result.paths.values())}", soft_wrap=True, highlight=False)
