"""``rubrictool train`` and ``compare``: REC-CBM runs and comparing them (``grade``: :mod:`rubrictool.cli.grade`).

``rubrictool.train`` and ``rubrictool.evaluate`` load torch (seconds), so they
are imported inside these commands: ``rubrictool --help`` and every other command start without torch.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from rubrictool.cli._common import (
    AgreementOpt,
    BackboneOpt,
    BenchmarkOpt,
    ConfigOpt,
    DataDirOpt,
    DeviceOpt,
    EpochsOpt,
    JobsOpt,
    LrOpt,
    MaxLenOpt,
    OldDataOpt,
    PresetOpt,
    ProgressView,
    TableOpt,
    TableRubricOpt,
    TrainBatchSizeOpt,
    at_least,
    console,
    err_console,
    folds_or_none,
    renamed,
    retired,
)
from rubrictool.cli._sanitize import shown

if TYPE_CHECKING:
    from rubrictool.train import TrainResult

__all__ = ["compare_cmd", "correlation_lines", "honest_caption", "low_marks_table", "result_tables", "train_cmd",
           "warning_lines"]


def result_tables(result: TrainResult) -> list[Table]:
    """The test metrics (mean ± std when there are several seeds) and the reliability table."""
    s = result.metrics["summary"]
    folds = result.metrics.get("folds")
    n = len(result.metrics["seeds"])
    if folds:
        what = f"{folds['folds']} folds pooled, {folds['n_items']} answers"
    else:
        what = f"{n} seeds, mean ± std" if n > 1 else "1 seed"
    frozen = (result.metrics.get("encoder") or {}).get("used") == "frozen"
    title = f"{result.variant}{' (encoder frozen)' if frozen else ''}: test metrics ({what})"
    t = Table(title=title, min_width=len(title))  # the title on one line, not wrapped to the columns' width
    for col in ("T-Acc", "T-F1", "QWK", "C-Acc", "C-F1", "training"):
        t.add_column(col, justify="right")

    def cell(k: str) -> str:
        if k not in s:
            return "—"
        return f"{s[k]['mean']:.3f} ± {s[k]['std']:.3f}" if n > 1 and not folds else f"{s[k]['mean']:.3f}"

    # training time of one run (of one fold); runs written before train_seconds was recorded add up their stages
    seconds = float(s.get("train_seconds")
                    or sum(float(s.get(f"{x}_seconds", 0.0)) for x in ("stage1", "joint", "stage2")))
    t.add_row(*(cell(k) for k in ("t_acc", "t_f1", "qwk", "c_acc", "c_f1")),
              f"{seconds / 60:.1f} min" + (" per fold" if folds else ""))
    out: list[Table] = [t]
    if len(result.reliability):
        r = Table(title="reliability: inter-rater α, noise σ², shrinkage A_kk, implied and measured noise")
        cols = (("alpha", "α"), ("sigma2", "σ²"), ("A_kk", "A_kk"), ("sigma2_implied", "σ²(implied)"),
                ("score_sigma2", "σ̂² (test)"), ("test_c_acc", "test C-Acc"), ("test_c_f1", "test C-F1"),
                ("test_reliability", "test reliability"))
        r.add_column("concept", justify="left")
        for _, name in cols:
            r.add_column(name, justify="right")
        for row in result.reliability.to_dict("records"):
            vals = [float(row.get(c, math.nan)) for c, _ in cols]
            r.add_row(str(row["concept"]), *("—" if math.isnan(v) else f"{v:.3f}" for v in vals))
        out.append(r)
    return out


def correlation_lines(result: TrainResult) -> list[str]:
    """Spearman ρ across concepts, each with its bootstrap CI and "inconclusive" when the CI spans 0."""
    if not len(result.reliability):
        return []
    rho = result.spearman
    sci = result.metrics.get("spearman_ci")
    lines = [f"Spearman ρ(σ², 1 − α) = {_rho_text(sci)}" if sci else
             f"Spearman ρ(σ², 1 − α) = {rho:.3f}" if rho is not None else "Spearman ρ(σ², 1 − α): —"]
    implied = result.metrics.get("implied_noise") or {}
    for key, what in (("implied_vs_measured", "ρ(σ²(implied), σ̂²)"),
                      ("implied_vs_1_minus_alpha", "ρ(σ²(implied), 1 − α)")):
        lines.append(f"Spearman {what} = {_rho_text(implied.get(key))}")
    share = result.metrics.get("spearman_noise_share")
    if share:
        lines.append(f"Spearman ρ(1 − test reliability, 1 − α) = {_rho_text(share)}")
    return lines


def _rho_text(ci: dict[str, float] | None) -> str:
    if not ci:
        return "—"
    from rubrictool.evaluate import FEW_CONCEPTS, why_inconclusive

    why = why_inconclusive(ci)
    if ci.get("n", FEW_CONCEPTS + 1) <= FEW_CONCEPTS:
        return f"{ci['rho']:.3f}, inconclusive: {why}"
    return f"{ci['rho']:.3f} [{ci['lo']:.2f}, {ci['hi']:.2f}]" + (" inconclusive" if why else "")


def honest_caption(metrics: dict[str, Any]) -> str:
    """Test size, bootstrap CIs, the majority class and calibration in one line ('' for runs without them)."""
    ci, maj, cal = metrics.get("ci"), metrics.get("majority"), metrics.get("calibration") or {}
    if not ci or not maj:
        return ""

    def iv(m: str) -> str:
        lo, hi = ci[m]["lo"], ci[m]["hi"]
        return "—" if math.isnan(lo) else f"[{lo:.3f}, {hi:.3f}]"

    nll = cal.get("nll")
    folds = metrics.get("folds")
    what = f"answers pooled over {folds['folds']} folds" if folds else "test answers"
    return (f"n = {int(metrics.get('n_test', 0))} {what}; 95 % bootstrap CI T-Acc {iv('t_acc')}, QWK {iv('qwk')}; "
            f"majority class (grade {maj['grade']}) T-Acc {maj['t_acc']:.3f}"
            + (f"; ECE {cal['ece']:.3f}" if "ece" in cal else "") + (f", NLL {nll:.3f}" if nll is not None else "")
            + _points_text(metrics.get("points")))


def _points_text(points: dict[str, Any] | None) -> str:
    """The points grader beside the majority class (metrics.json "points")."""
    if not points:
        return ""
    parts = [f"{what} T-Acc {points[key]['t_acc']:.3f}, QWK {points[key]['qwk']:.3f}"
             for key, what in (("gold_levels", "gold levels"), ("predicted_levels", "predicted levels"))
             if key in points]
    fitted = "fitted " if "fitted" in str(points.get("source", "")) else ""
    return f"; {fitted}points grader: " + "; ".join(parts) if parts else ""


def points_note(metrics: dict[str, Any]) -> str | None:
    """The points route recommended when the run's points grader on the adjudicated levels beats its QWK by the margin
    (rubrictool.points.points_ahead)."""
    from rubrictool.points import points_ahead

    qwk = (metrics.get("summary") or {}).get("qwk") or {}
    return points_ahead(metrics.get("points"), qwk.get("mean") if isinstance(qwk, dict) else None)


def low_marks_table(metrics: dict[str, Any]) -> tuple[Table, str] | None:
    """Per true mark the test answers' mean predicted mark and error (metrics.json ``low_marks``) and the failing
    answers' sentence; None for runs written before it."""
    from rubrictool.evaluate import low_marks_lines

    lm = metrics.get("low_marks")
    if not lm:
        return None
    head, rows, text = low_marks_lines(lm)
    t = Table(title=f"low marks: per true mark (pass mark {lm['pass_mark']})")
    for i, h in enumerate(head):
        t.add_column(h, justify="left" if i == 0 else "right")
    for row in rows:
        t.add_row(*row)
    return t, text


def warning_lines(metrics: dict[str, Any]) -> list[str]:
    """The run's warnings (metrics.json "warnings": [{code, message}]) as lines to print."""
    return [str(w.get("message", w)) for w in metrics.get("warnings") or []
            if isinstance(w, dict) and w.get("code") != "truncated"]  # said once already, while the folds trained


def _retired_switches(variant: str, race: bool | None, opcc: bool | None, lcec: bool | None,
                      crossfit: int | None) -> None:
    """One note per ablation switch still given to train (they work for one release): the --cfg that does
    the same, else the ablate command that trains the same combination."""
    from reccbm.config import variant_flags, variant_name

    try:
        plm, *flags = variant_flags(variant)
    except KeyError:
        return  # an unknown variant: the run refuses it, naming the ones there are
    race_, opcc_, lcec_ = (d if v is None else v for v, d in zip((race, opcc, lcec), flags))
    combo = variant_name(plm, race_, opcc_, lcec_)
    for name, value in (("race", race), ("opcc", opcc), ("lcec", lcec)):
        if value is not None:
            flag = f"--{name}" if value else f"--no-{name}"
            same = "--cfg stage1.lambda_r=0 (the same training), or " if flag == "--no-opcc" else ""
            retired(flag, "train", f"{same}rubrictool ablate --variants {combo} (the same combination)")
    if crossfit is not None:
        retired("--crossfit", "train", f"--cfg stage2.crossfit={crossfit}")


def train_cmd(
    benchmark: BenchmarkOpt = None,
    table: TableOpt = None,
    rubric: TableRubricOpt = None,
    split: Annotated[Path | None, typer.Option("--split", help="split.json (default: a 7:2:1 split).")] = None,
    split_seed: Annotated[int, typer.Option(
        "--split-seed", help="Seed of the default split, or of the folds with --folds (another seed: other question "
                             "splits with --by question).",
    )] = 0,
    out: Annotated[Path | None, typer.Option(
        "--out", "-o", help="Run dir (default runs/<table>-<variant>).")] = None,
    config: ConfigOpt = None,
    variant: Annotated[str, typer.Option(
        "--variant", help="reccbm, or a baseline: vanilla (CBM) or plm (no bottleneck); switching single "
        "components off is `rubrictool ablate`.")] = "reccbm",
    seeds: Annotated[int, typer.Option("--seeds", help="Repeat with N seeds, from --first-seed on; mean ± std.")] = 1,
    first_seed: Annotated[int, typer.Option(
        "--first-seed", help="The first seed (another: a second training of the same "
                             "recipe on the same split or folds).",
    )] = 0,
    agreement: AgreementOpt = None,
    backbone: BackboneOpt = None,
    epochs: EpochsOpt = None,
    max_len: MaxLenOpt = None,
    batch_size: TrainBatchSizeOpt = None,
    lr: LrOpt = None,
    device: DeviceOpt = None,
    jobs: JobsOpt = 1,
    data_dir: DataDirOpt = None,
    preset: PresetOpt = "default",
    folds: Annotated[int, typer.Option(
        "--folds", callback=folds_or_none, help="k-fold evaluation: k runs, every item tested once (0 = one split).",
    )] = 0,
    by: Annotated[str | None, typer.Option(
        "--by", help="Keep every value of this column in one part, e.g. question: "
                     "test on questions never seen in training (folds and the default split).",
    )] = None,
    encoder: Annotated[str | None, typer.Option(
        "--encoder", help="The pretrained encoder: train (fine-tune it; the default), frozen (never updated: only the "
        "concept queries, classifiers, LCEC and grade head train, on token states computed once; fast), or auto "
        "(frozen below stage1.frozen_below labelled answers, train + dev). Same as --cfg stage1.encoder=..., e.g. "
        "--encoder auto --cfg stage1.frozen_below=300.")] = None,
    cfg: Annotated[list[str] | None, typer.Option(
        "--cfg", help="Any config field, SECTION.FIELD=VALUE (repeatable), e.g. --cfg stage2.lambda_d=1 --cfg "
        "model.head=scalar; sections model, stage1, joint, stage2 (docs/training.md lists every field).")] = None,
    final: Annotated[bool, typer.Option("--final", help="With --folds: also train the final model on every labelled "
                                        "answer (RUN/final); `grade --run RUN` grades with it, the folds' pooled "
                                        "figures as its quality card.")] = False,
    # ablation switches, hidden: they work for one release, each with a note (_retired_switches)
    race: Annotated[bool | None, typer.Option("--race/--no-race", hidden=True)] = None,
    opcc: Annotated[bool | None, typer.Option("--opcc/--no-opcc", hidden=True)] = None,
    lcec: Annotated[bool | None, typer.Option("--lcec/--no-lcec", hidden=True)] = None,
    crossfit: Annotated[int | None, typer.Option("--crossfit", hidden=True)] = None,
    old_data: OldDataOpt = None,
) -> None:
    """Train REC-CBM (or a baseline) and write a run dir; print metrics and the reliability table.

    Options cover what a user chooses; every other field of the recipe is a --config YAML entry or a
    --cfg SECTION.FIELD=VALUE (docs/training.md).

    Example: rubrictool train --benchmark mohler --folds 5 --out runs/mohler-5fold

    Example (a small course, encoder frozen): rubrictool train --table adjudicated.csv --rubric course.yaml --encoder frozen

    Example (the grader to use, with its quality card): rubrictool train --table adjudicated.csv --rubric course.yaml --folds 5 --final --out runs/course
    """  # noqa: E501 - the command's help text, kept as users see it
    from rubrictool.pipeline import SplitPlan, run_train
    from rubrictool.train import TrainOptions, training_overrides

    data = renamed("--table", table, "--data", old_data)
    _retired_switches(variant, race, opcc, lcec, crossfit)

    flat = {"backbone": backbone, "epochs": epochs, "max_len": max_len, "batch_size": batch_size, "lr": lr,
            "device": device, "crossfit": crossfit, "encoder": encoder}
    if lr is not None and (encoder == "frozen"
                           or any(c.replace(" ", "") == "stage1.encoder=frozen" for c in cfg or [])):
        err_console.print("[yellow]note:[/] --lr is the encoder's learning rate, and --encoder frozen never updates "
                          "the encoder: --lr is not used", soft_wrap=True, highlight=False)
    options = TrainOptions(preset=preset, overrides=training_overrides(config, cfg or [], flat), variant=variant,
                           race=race, opcc=opcc, lcec=lcec, seeds=seeds,
                           first_seed=first_seed)
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
               TextColumn("{task.fields[info]}"))
    with ProgressView(console, *columns) as view:
        result = run_train(benchmark=benchmark, data=data, rubric=rubric, agreement=agreement, data_dir=data_dir,
                           out=out, options=options, plan=SplitPlan(split, split_seed, folds, by, jobs, final),
                           progress=view)
    for shown_table in result_tables(result):
        console.print(shown_table)
    for line in correlation_lines(result):
        console.print(line, soft_wrap=True, highlight=False)
    if honest_caption(result.metrics):
        console.print(honest_caption(result.metrics), soft_wrap=True, highlight=False)
    for line in warning_lines(result.metrics):
        console.print(f"[bold red]warning:[/] {line}", soft_wrap=True, highlight=False)
    low = low_marks_table(result.metrics)
    if low is not None:
        console.print(low[0])
        console.print(low[1], soft_wrap=True, highlight=False)
    for line in (result.metrics.get("route") or {}).get("lines") or []:
        console.print(f"[bold]verdict:[/] {line}", soft_wrap=True, highlight=False)
    ahead = points_note(result.metrics)
    from rubrictool.route import ALPHA_MIN

    alpha = result.reliability["alpha"].astype(float) if "alpha" in result.reliability else None
    if ahead and alpha is not None and bool((alpha < ALPHA_MIN).any()):  # unreliable levels are never the route
        ahead = None
    if ahead:
        console.print(f"[yellow]note:[/] {ahead}", soft_wrap=True, highlight=False)
    for note in result.notes:
        console.print(f"[yellow]note:[/] {shown(note)}", soft_wrap=True)
    console.print(f"run written to {result.run_dir}", soft_wrap=True)
    fin = (result.metrics.get("folds") or {}).get("final")
    if fin:
        console.print(f"final model: {result.run_dir / fin['dir']}, trained on all {fin['answers']} labelled answers; "
                      f"grade with `rubrictool grade --run {result.run_dir}` (the pooled figures above are its quality "
                      "card)", soft_wrap=True, highlight=False)


def compare_cmd(
    run_a: Annotated[Path, typer.Argument(help="k-fold run directory A (the reference).")],
    run_b: Annotated[Path, typer.Argument(help="k-fold run directory B.")],
    n_boot: Annotated[int, typer.Option("--n-boot", callback=at_least(1), help="Bootstrap resamples.")] = 2000,
    seed: Annotated[int, typer.Option("--seed", help="Bootstrap seed.")] = 0,
) -> None:
    """Paired bootstrap of two k-fold runs on the items both tested: B − A with a 95 % CI per metric.

    Example: rubrictool compare runs/mohler-vanilla runs/mohler-reccbm
    """
    from rubrictool.evaluate import compare_runs

    res = compare_runs(run_a, run_b, n_boot=n_boot, seed=seed)
    t = Table(title=f"B − A on {res['n_items']} items ({res['n_boot']} paired bootstrap resamples)")
    for col in ("metric", "A", "B", "B − A", "95 % CI", "P(B not better)"):
        t.add_column(col, justify="left" if col == "metric" else "right")
    for m, r in res["metrics"].items():
        t.add_row(m, f"{r['a']:.3f}", f"{r['b']:.3f}", f"{r['diff']:+.3f}", f"[{r['lo']:+.3f}, {r['hi']:+.3f}]",
                  f"{r['p_not_better']:.3f}")
    console.print(t)
    console.print(f"A = {res['a']}\nB = {res['b']}", soft_wrap=True)
