"""``rubrictool learning-curve``: grading quality against the number of hand-graded answers.

:mod:`rubrictool.curve` trains models (torch), so it is imported inside the command.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

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
    finite,
    renamed,
)
from rubrictool.errors import DataError

if TYPE_CHECKING:  # rubrictool.curve pulls in torch: imported inside the command, not at CLI start
    from rubrictool.curve import CurveResult

__all__ = ["learning_curve_cmd"]


def learning_curve_cmd(
    out: Annotated[Path, typer.Option(
        "--out", "-o", help="Curve directory: cells/, curve.csv, curve.json, curve.png.",
    )],
    benchmark: BenchmarkOpt = None,
    table: TableOpt = None,
    rubric: TableRubricOpt = None,
    agreement: AgreementOpt = None,
    sizes: Annotated[str | None, typer.Option(
        "--sizes", help="Labelled answers per model (train + dev), comma-separated; 'all' = a fold's whole training "
        "part. Default: from the table's size (up to five of 10, 20, 50, 100, … at most half a fold's training "
        "part, and all: 50,100,200,400,800,all on Mohler, 10,20,all on 48 answers).",
    )] = None,
    variants: Annotated[str, typer.Option(
        "--variants", help="Comma-separated: reccbm, plm, vanilla; each may end in -frozen (the pretrained encoder "
        "frozen, only the heads train) or -auto (frozen below stage1.frozen_below answers), e.g. "
        "reccbm,reccbm-frozen,plm,plm-frozen,vanilla; or points (no model: a points table fitted to the labelled "
        "answers' concept levels grades the test answers' levels, as an LLM panel's labels of new answers would be; "
        "seconds). Variants added to a curve later train only their own cells.",
    )] = "reccbm,plm,vanilla",
    repeats: Annotated[int, typer.Option("--repeats", help="Subsamples (and seeds) per fold and size.")] = 3,
    folds: Annotated[int, typer.Option(
        "--folds", callback=at_least(2), help="k folds; each fold's test part is the same for every size.",
    )] = 5,
    fold: Annotated[str | None, typer.Option("--fold", help="Only these folds, e.g. 0,1 (default: all).")] = None,
    fold_seed: Annotated[int, typer.Option("--fold-seed", help="Seed of the folds.")] = 0,
    by: Annotated[str | None, typer.Option(
        "--by", help="Grouped folds, e.g. question: no group in both train and test.",
    )] = None,
    dev_share: Annotated[float, typer.Option(
        "--dev-share", callback=finite(0, 1, open_lo=True, open_hi=True),
        help="Share of each subsample used as its dev part.",
    )] = 0.125,
    preset: PresetOpt = "default",
    config: ConfigOpt = None,
    match_budget: Annotated[bool, typer.Option(
        "--match-budget/--no-match-budget", help="The PLM trains its encoder as many epochs as Stage I + joint stage.",
    )] = True,
    backbone: BackboneOpt = None,
    epochs: EpochsOpt = None,
    joint_epochs: Annotated[int | None, typer.Option(
        "--joint-epochs", callback=at_least(0), help="Joint stage epochs (preset default 4).",
    )] = None,
    stage2_epochs: Annotated[int | None, typer.Option(
        "--stage2-epochs", callback=at_least(0), help="Stage II epochs (default 30).",
    )] = None,
    max_len: MaxLenOpt = None,
    batch_size: TrainBatchSizeOpt = None,
    lr: LrOpt = None,
    device: DeviceOpt = None,
    jobs: JobsOpt = 1,
    keep_runs: Annotated[bool, typer.Option(
        "--keep-runs", help="Keep each cell's run directory in OUT/runs/ (large).",
    )] = False,
    all_from: Annotated[list[str] | None, typer.Option(
        "--all-from", help="VARIANT=FOLDER (repeatable): read the variant's 'all' cells of the first repeat from the "
        "fold runs `train --folds` wrote there (same folds, table and configuration) instead of training them.",
    )] = None,
    data_dir: DataDirOpt = None,
    old_data: OldDataOpt = None,
) -> None:
    """Learning curve: train each variant on growing stratified subsamples of every fold's training part and test
    on the fold's test part; write curve.csv (one row per cell), curve.png and curve.json. Resumable: finished
    cells are read back, so re-running (or adding sizes, repeats, folds) trains only what is missing.

    Example: rubrictool learning-curve --benchmark mohler --sizes 50,100,200,400,800,all --variants reccbm,plm,vanilla --repeats 3 --out curves/mohler

    Example (add frozen-encoder variants to that curve): rubrictool learning-curve --benchmark mohler --sizes 50,100,200,400,800,all --variants reccbm,reccbm-frozen,plm,plm-frozen,vanilla --repeats 3 --out curves/mohler

    Example (reuse the folds `train --folds 5 --by question --out runs/q` trained, for the 'all' size): rubrictool learning-curve --benchmark mohler --by question --sizes 100,200,400,all --variants reccbm --all-from reccbm=runs/q --out curves/q

    Example (the points route, seconds: a points table fitted to the graded answers grades the panel's levels): rubrictool learning-curve --table adjudicated.csv --rubric course.yaml --sizes 10,20,50,100,all --variants points --out curves/points
    """  # noqa: E501 - the command's help text, kept as users see it
    from rubrictool.curve import CURVE_OPTIONS, CurveOptions, run_learning_curve
    from rubrictool.train import TrainOptions, training_overrides

    data = renamed("--table", table, "--data", old_data)

    flat = {"backbone": backbone, "epochs": epochs, "joint_epochs": joint_epochs, "stage2_epochs": stage2_epochs,
            "max_len": max_len, "batch_size": batch_size, "lr": lr, "device": device}
    options = TrainOptions(preset=preset, overrides=training_overrides(config, flat=flat, table=CURVE_OPTIONS))
    from rubrictool.outputs import check_output, writable_parent

    # before any cell trains; run_learning_curve holds the folder's own lock
    check_output(out, [data, config, agreement], "folder", writes=["curve.json", "curve.csv", "cells"],
                 what="the curve", lock=False)
    writable_parent(out, folder=True)
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
               TextColumn("{task.fields[info]}"))
    with ProgressView(console, *columns, transient=True) as view:
        res = run_learning_curve(
            benchmark=benchmark, data=data, rubric=rubric, agreement=agreement, data_dir=data_dir, out=out,
            options=options,
            curve=CurveOptions.from_command(sizes, variants, folds, fold, repeats, fold_seed, by, dev_share,
                                            match_budget, keep_runs, _all_from(all_from)),
            progress=view, jobs=jobs,
        )
    _print_curve(res)


def _print_curve(res: CurveResult) -> None:
    """The curve's summary table, its reading in sentences, its notes and what was trained, read back and written."""
    t = Table(title="learning curve: mean ± s.d. over folds × repeats")
    for col in ("variant", "size", "answers", "cells", "QWK", "T-Acc", "T-F1", "majority T-Acc"):
        t.add_column(col, justify="left" if col == "variant" else "right")
    for r in res.summary.to_dict(orient="records"):
        t.add_row(str(r["variant"]), str(r["size"]), f"{r['n_train']:.0f}", str(r["cells"]),
                  f"{r['qwk']:.3f} ± {r['qwk_sd']:.3f}", f"{r['t_acc']:.3f} ± {r['t_acc_sd']:.3f}",
                  f"{r['t_f1']:.3f}", f"{r['majority_t_acc']:.3f}")
    console.print(t)
    from rubrictool.curve.reading import read_curve

    for reading in read_curve(res.cells).values():  # the cells curve.csv, curve.json and curve.png are made from
        console.print(reading["sentence"], soft_wrap=True, highlight=False)
    for note in res.notes:
        console.print(f"[yellow]note:[/] {note}", soft_wrap=True)
    from_runs = f", {res.from_runs} read from fold runs" if res.from_runs else ""
    console.print(f"{res.trained} cell(s) trained{from_runs}, {res.read_back} read back; curve written to {res.out}"
                  f" (curve.csv, curve.json{', curve.png' if res.png else ''})", soft_wrap=True, highlight=False)


def _all_from(items: Sequence[str] | None) -> dict[str, Path]:
    """``["reccbm=runs/folds", "plm=runs/plm"]`` -> {variant: folder}: the ``train --folds`` folders whose fold runs
    stand in for a variant's "all" cells (:func:`rubrictool.curve.learning_curve`, ``full_from``)."""
    out: dict[str, Path] = {}
    for item in items or []:
        variant, sep, folder = item.partition("=")
        if not sep or not variant.strip() or not folder.strip():
            raise DataError(f"--all-from {item}: give VARIANT=FOLDER", hint="e.g. --all-from reccbm=runs/folds")
        out[variant.strip()] = Path(folder.strip())
    return out

