"""Learning curves: how grading quality grows with the number of hand-graded answers.

:func:`learning_curve` is the library function behind ``rubrictool learning-curve``. The table is cut into k
folds once (:func:`rubrictool.data.kfold_splits`); each fold's test part stays the same for every size and
variant. From the rest of the fold (its training part, train ∪ dev of the k-fold split) a subsample of n
answers stratified by grade is drawn for each repeat, the sizes of one (fold, repeat) nested (the 100 contain
the 50); n is every labelled answer the model sees: a stratified ``dev_share`` of the n is its dev part
(early stopping and selection) and the rest trains it. Each (fold, size, repeat, variant) is one *cell*:
one :func:`rubrictool.train.train_model` run, whose test metrics and the majority-class baseline of the
same n labels go to ``DIR/cells/<cell>.json``, written atomically once the cell is done. A cell file that
exists is read back, not retrained, so a killed run resumes where it stopped and a curve can be extended
with more sizes, repeats or folds later. The cell's run directory is built in ``DIR/work/`` and deleted
afterwards (``keep_runs`` keeps it in ``DIR/runs/``).

Written, over every cell in ``DIR/cells`` (this call's and earlier calls'): ``curve.csv`` (one row per cell),
``curve.json`` (settings, the summary per variant and size, the size that reaches 90 % of the full-data QWK) and
``curve.png`` (reading and drawing a curve: :mod:`rubrictool.curve.figure`).

A variant is ``reccbm``, ``plm`` or ``vanilla``, optionally with the encoder choice after a dash
(:func:`parse_variant`): ``reccbm-frozen`` trains REC-CBM with the pretrained encoder frozen (``stage1.encoder``; only
the heads train), ``plm-auto`` lets ``stage1.frozen_below`` decide per cell. Each is its own variant in curve.csv, so a
curve directory gains frozen variants later without retraining the cells it has. ``points`` trains no model: a points
table fitted to the n answers' concept levels and grades (:func:`rubrictool.points.fit_points`) grades the test answers
from their concept levels — what a course whose every answer an LLM panel labelled (annotate, adjudicate) gets from n
hand-graded answers, in seconds.
"""

from __future__ import annotations

import copy
import os
import shutil
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from numpy.typing import NDArray

from reccbm import grade_metrics
from rubrictool.curve.cells import (
    cell_from_run,
    cell_name,
    read_cell,
    settings_digest,
    table_digest,
    write_json,
)
from rubrictool.curve.figure import (
    ALL,
    CURVE_COLUMNS,
    CURVE_FAILING,
    METRICS,
    POINTS,
    curve_title,
    plot_curve,
    position_on_curve,
    reach_fraction,
    size_order,
    summarize_curve,
)
from rubrictool.curve.reading import default_sizes, read_curve
from rubrictool.data.splits import kfold_splits, nested_subsample, stratified_order
from rubrictool.errors import DataError, TrainError
from rubrictool.evaluate import majority_baseline
from rubrictool.io import read_table, write_table
from rubrictool.locks import writer_lock
from rubrictool.progress import Progress, ProgressFn, warn, warn_once
from rubrictool.provenance import git_revision
from rubrictool.rubric import Rubric, load_rubric
from rubrictool.tables import validate_adjudicated
from rubrictool.train import (
    ENCODERS,
    FLAT_OPTIONS,
    DataRecord,
    TrainOptions,
    encoder_epochs,
    fair_plm_overrides,
    resolve_training,
    train_model,
)

__all__ = ["CURVE_COLUMNS", "CURVE_FAILING", "CURVE_OPTIONS", "MIN_SIZE", "VARIANTS", "Cell", "CurveOptions",
           "CurvePlan", "CurveResult", "learning_curve",
           "parse_folds", "parse_sizes", "parse_variant", "plot_curve", "position_on_curve", "reach_fraction",
           "run_learning_curve", "summarize_curve"]

VARIANTS = ("reccbm", "plm", "vanilla")
MIN_SIZE = 10  # below this a stratified dev part of 1-2 answers and a handful of training answers say nothing

# the command's flat options -> the config fields they set (rubrictool.train.training_overrides): train's own
# (FLAT_OPTIONS) without cross-fitting and the encoder choice, which a curve makes per variant (reccbm-frozen), and the
# stage budgets a tiny test model needs
CURVE_OPTIONS: dict[str, list[tuple[str, str]]] = {
    k: v for k, v in FLAT_OPTIONS.items() if k not in ("crossfit", "encoder")} | {
    "joint_epochs": [("joint", "epochs")],
    "stage2_epochs": [("stage2", "epochs")],
}


# ---------------------------------------------------------------------------- options
def parse_sizes(text: str) -> list[int | str]:
    """``"50,100,200,all"`` -> [50, 100, 200, "all"]: positive whole numbers (at least MIN_SIZE), ascending, and
    optionally ``all`` (the fold's whole training part), always last."""
    out: list[int | str] = []
    for tok in (t.strip().lower() for t in text.split(",")):
        if tok == ALL:
            out.append(ALL)
            continue
        try:
            n = int(tok)
        except ValueError:
            raise DataError(f"--sizes {text}: {tok!r} is not a number of answers",
                            hint="give whole numbers and optionally 'all', e.g. --sizes 50,100,200,all") from None
        if n < MIN_SIZE:
            raise DataError(f"--sizes {text}: {n} answers is too few (at least {MIN_SIZE}: a dev part and a training "
                            "part are both drawn from them)", hint="drop it or give a larger size")
        out.append(n)
    nums = sorted({s for s in out if isinstance(s, int)})
    return [*nums, *([ALL] if ALL in out else [])]


def parse_folds(text: str | None, k: int) -> list[int]:
    """``"0,2"`` -> [0, 2]: which of the k folds to run (None: all of them)."""
    if k < 2:
        raise DataError(f"--folds {k}: a learning curve needs at least 2 folds")
    if text is None or not text.strip():
        return list(range(k))
    out = []
    for tok in (t.strip() for t in text.split(",")):
        if not tok.isdigit() or int(tok) >= k:
            raise DataError(f"--fold {text}: {tok!r} is not a fold of 0..{k - 1}",
                            hint=f"give fold numbers below --folds {k}")
        out.append(int(tok))
    return sorted(set(out))


@dataclass(frozen=True)
class CurveOptions:
    """Which cells a learning curve has, how each is drawn and what is kept: a command's curve options, built
    once (:meth:`from_command` reads the command's comma lists)."""

    sizes: Sequence[int | str] | None = None  # answers (train + dev) per cell, and "all"; None: by table size
    variants: Sequence[str] = VARIANTS  # the models trained per cell ("points": fitted points, no training)
    repeats: int = 3  # subsamples (and seeds) per fold and size
    folds: int = 5  # k folds; a fold's test part is the same for every size
    fold_ids: Sequence[int] | None = None  # only these folds (None: all of them)
    fold_seed: int = 0  # the folds' seed
    by: str | None = None  # grouped folds (e.g. question), passed to kfold_splits only when given
    dev_share: float = 0.125  # the share of each subsample that is its dev part
    match_budget: bool = True  # the PLM's encoder: the concept models' Stage I + joint epochs
    keep_runs: bool = False  # each cell's run directory kept in runs/ (else deleted once its cell is written)
    full_from: Mapping[str, str | Path] | None = None  # variant -> a `train --folds` folder: its "all" cells
    plot: bool = True  # curve.png

    @classmethod
    def from_command(cls, sizes: str | None, variants: str, folds: int, fold: str | None, repeats: int,
                     fold_seed: int, by: str | None, dev_share: float, match_budget: bool, keep_runs: bool,
                     full_from: Mapping[str, str | Path] | None) -> CurveOptions:
        """The options from ``learning-curve``'s: sizes, variants and folds as comma lists
        (:func:`parse_sizes`, :func:`parse_folds`); no sizes: from the table's size
        (:func:`~rubrictool.curve.reading.default_sizes`)."""
        size_list = None if sizes is None else parse_sizes(sizes)
        variant_list = [v.strip() for v in variants.split(",") if v.strip()]
        return cls(size_list, variant_list, repeats, folds, parse_folds(fold, folds), fold_seed, by,
                   dev_share, match_budget, keep_runs, dict(full_from or {}))


def parse_variant(name: str) -> tuple[str, str | None]:
    """``"reccbm-frozen"`` -> ("reccbm", "frozen"): a curve variant's model (VARIANTS) and encoder choice (ENCODERS;
    None: the configuration's, the preset's unless a config sets it). Raises TrainError for any other name."""
    if name == POINTS:
        return POINTS, None
    base, _, encoder = name.partition("-")
    if base not in VARIANTS or (encoder and encoder not in ENCODERS):
        forms = ", ".join([*VARIANTS, *(f"{v}-{e}" for v in VARIANTS for e in ENCODERS), POINTS])
        raise TrainError(f"unknown variant {name!r}; use {forms}", hint="e.g. --variants reccbm,reccbm-frozen,plm")
    return base, encoder or None


def _variant_overrides(variant: str, preset: str, overrides: dict[str, dict[str, Any]],
                       match_budget: bool) -> tuple[dict[str, dict[str, Any]], int]:
    """(overrides, encoder epochs) of one variant (:func:`parse_variant`). With ``match_budget`` the PLM trains its
    encoder (or, frozen, its head) on the concept models' budget (:func:`rubrictool.train.fair_plm_overrides`: a fair
    baseline). A "-frozen"/"-train"/"-auto" suffix sets stage1.encoder."""
    variant, encoder = parse_variant(variant)
    if variant == POINTS:
        return {}, 0  # no encoder
    ov = copy.deepcopy(overrides)
    if encoder is not None:
        ov.setdefault("stage1", {})["encoder"] = encoder
    if variant == "plm":
        if match_budget:
            return fair_plm_overrides(preset, ov), encoder_epochs(preset, overrides)
        return ov, encoder_epochs(preset, {**ov, "joint": {"epochs": 0}})  # the PLM has no joint stage
    return ov, encoder_epochs(preset, overrides)


@dataclass(frozen=True)
class Cell:
    """One (fold, size, repeat, variant) of a curve: a model trained on a subsample of the fold's training part (or,
    for "all", the whole part), tested on the fold's test part; the repeat is its subsample's draw and its seed."""

    fold: int
    size: int | str  # labelled answers (train + dev), or ALL
    repeat: int
    variant: str  # a curve variant (parse_variant)

    @property
    def name(self) -> str:
        return cell_name(self.fold, self.size, self.repeat, self.variant)


@dataclass(frozen=True)
class CurvePlan:
    """Everything the cells of one :func:`learning_curve` call need, decided and checked before anything trains."""

    rubric: Rubric
    table: pd.DataFrame  # the table as given (each cell's train_model validates it again)
    df: pd.DataFrame  # the validated table (0-based _y and _c_<key>)
    by_id: pd.DataFrame  # the same, indexed by id
    splits: list[dict[str, list[str]]]  # the k folds; a fold's test part is every cell's test part
    pools: dict[int, list[str]]  # fold -> its training part (train ∪ dev of the k-fold split), the cells' draws
    cells: list[Cell]  # this call's cells, in training order
    per_variant: dict[str, tuple[dict[str, dict[str, Any]], int]]  # variant -> (training overrides, encoder epochs)
    settings_doc: dict[str, Any]  # what a cell file must have been made with to be read back (curve.json "settings")
    settings: str  # its digest, stored in every cell file
    preset: str
    fold_seed: int
    dev_share: float
    agreement: dict[str, Any] | str | Path | None
    notes: list[str]
    keep_runs: bool
    full_dirs: dict[str, Path]  # variant -> the fold runs standing in for its "all" cells (full_from)
    by: str | None
    plot: bool


@dataclass
class CurveResult:
    """What :func:`learning_curve` produced; everything here is also written to ``out``."""

    out: Path
    cells: pd.DataFrame  # curve.csv: one row per cell in out/cells (CURVE_COLUMNS), this call's and earlier ones'
    summary: pd.DataFrame  # one row per (variant, size): means and spreads over folds × repeats
    reach90: dict[str, dict[str, Any] | None]  # per variant: the answers that reach 90 % of the full-data QWK
    png: Path | None
    trained: int  # cells trained by this call
    read_back: int  # cells of this call's plan finished earlier and read back
    notes: list[str] = field(default_factory=list)
    from_runs: int = 0  # "all" cells this call read from fold runs (full_from) instead of training them


def learning_curve(
    rubric: Rubric | str | Path,
    table: pd.DataFrame,
    out: str | Path,
    options: CurveOptions = CurveOptions(),
    *,
    training: TrainOptions = TrainOptions(),
    agreement: dict[str, Any] | str | Path | None = None,
    notes: list[str] | None = None,
    progress: ProgressFn | None = None,
    jobs: int = 1,
) -> CurveResult:
    """Train every (fold, size, repeat, variant) cell not trained yet in ``out``, then write curve.csv, curve.json
    and curve.png over every cell in ``out`` (earlier calls may have added other folds, sizes or repeats) (see the
    module docstring for what a cell is and how it is drawn).

    options (:class:`CurveOptions`) sizes: numbers of labelled answers (train + dev) and optionally "all" (the
    fold's whole training part; needed for :func:`reach_fraction`); None: from the table's size
    (:func:`rubrictool.curve.reading.default_sizes`). by: grouped folds (e.g. "question"), passed to
    kfold_splits only when given. match_budget: the PLM's encoder trains as many epochs as the concept models'
    Stage I + joint stage.
    training: the preset and overrides every cell trains with (the variant and seed are each cell's).
    full_from: {variant: folder of ``train --folds``}: a variant's "all" cells of the first repeat are read from that
    folder's finished fold runs when they were trained on the same folds, table and configuration (they are exactly
    those cells, up to the dev part the k-fold split drew), instead of trained again; a fold not finished there is
    trained. The cell records the run it came from (``source``).
    progress gets one task, "cells", and each cell's training (train_model's progress).
    jobs > 1: the cells to train train in that many worker processes first (:mod:`rubrictool.train.parallel`; each cell
    as the serial run trains it), then are written in order.
    """
    rb = rubric if isinstance(rubric, Rubric) else load_rubric(rubric)
    o, preset, match_budget = options, training.preset, options.match_budget
    sizes, variants, folds, fold_seed, by = o.sizes, o.variants, o.folds, o.fold_seed, o.by
    dev_share = o.dev_share
    _check_settings(variants, o.repeats, dev_share, sizes)
    df = validate_adjudicated(table, rb, need_concepts=any(parse_variant(v)[0] != "plm" for v in variants))
    splits = _fold_splits(df, folds, fold_seed, by)
    run_folds = list(range(folds)) if o.fold_ids is None else list(o.fold_ids)
    if any(f not in range(folds) for f in run_folds):
        raise DataError(f"--fold {run_folds}: folds are 0..{folds - 1}")
    pools = {f: sorted(splits[f]["train"] + splits[f]["dev"]) for f in run_folds}
    smallest = min(len(p) for p in pools.values())
    sizes = default_sizes(smallest) if sizes is None else sizes  # none given: from the table's size
    too_big = [s for s in sizes if isinstance(s, int) and s > smallest]
    if too_big:
        raise DataError(f"--sizes: {too_big[0]} answers is more than a fold's training part ({smallest} answers of "
                        f"{len(df)}, {folds} folds)", hint=f"give sizes up to {smallest}, or 'all' for the whole part")
    overrides = training.overrides or {}
    per_variant = {v: _variant_overrides(v, preset, overrides, match_budget) for v in variants}
    full_dirs = _full_dirs(o.full_from, variants, sizes)
    settings_doc = {"rubric": rb.name, "table": table_digest(df, rb.keys), "folds": folds, "fold_seed": fold_seed,
                    "by": by, "dev_share": dev_share, "preset": preset, "overrides": overrides,
                    "match_budget": match_budget}
    cells = [Cell(f, s, r, v) for r in range(o.repeats) for f in run_folds for s in sizes for v in variants]
    plan = CurvePlan(rb, table, df, df.set_index("id"), splits, pools, cells, per_variant, settings_doc,
                     settings_digest(settings_doc), preset, fold_seed, dev_share, agreement,
                     list(notes or []), o.keep_runs, full_dirs, by, o.plot)
    root = Path(out)
    # one writer per curve folder: a second call on the same --out would delete the cell the first one is training
    # (work/ is cleared at the end) and write curve.csv from a half-finished set; it stops at once instead
    with writer_lock(root, f"the learning curve {root}", hint="wait for it to finish, or give another --out",
                     by="rubrictool learning-curve", kept=f"nothing was trained, and {root} is as it was"):
        (root / "cells").mkdir(parents=True, exist_ok=True)
        trained, read_back, imported = _run_cells(plan, root, progress, jobs)
        return _write_outputs(plan, root, trained, read_back, imported)


def _check_settings(variants: Sequence[str], repeats: int, dev_share: float, sizes: Sequence[int | str] | None) -> None:
    if not variants:
        raise TrainError("no variants to train; use " + ", ".join(VARIANTS), hint="e.g. --variants reccbm,plm")
    for v in variants:
        parse_variant(v)
    if repeats < 1:
        raise TrainError(f"--repeats {repeats}: give at least 1")
    if not 0 < dev_share < 0.5:
        raise TrainError(f"--dev-share {dev_share}: give a share between 0 and 0.5")
    if sizes is not None and not sizes:
        raise DataError("no sizes to train", hint="e.g. --sizes 50,100,200,all")


def _fold_splits(df: pd.DataFrame, folds: int, fold_seed: int, by: str | None) -> list[dict[str, list[str]]]:
    """The k folds of the curve (grouped by ``by``, passed to kfold_splits only when given)."""
    grouped: dict[str, Any] = {"by": by} if by is not None else {}
    return kfold_splits(df, k=folds, seed=fold_seed, **grouped)


def _full_dirs(full_from: Mapping[str, str | Path] | None, variants: Sequence[str],
               sizes: Sequence[int | str]) -> dict[str, Path]:
    """full_from checked: each a trained variant of the curve, with an "all" size, and a folder that exists."""
    full_dirs = {v: Path(d) for v, d in (full_from or {}).items()}
    for v, d in full_dirs.items():
        if v not in variants or v == POINTS:
            raise DataError(f"--all-from {v}={d}: {v!r} is not a trained variant of this curve",
                            hint=f"give one of --variants ({', '.join(x for x in variants if x != POINTS)})")
        if ALL not in sizes:
            raise DataError(f"--all-from {v}={d}: fold runs stand in for the 'all' size, which --sizes does not have",
                            hint="add 'all' to --sizes")
        if not d.is_dir():
            raise DataError(f"--all-from {v}={d}: no such folder", hint="give the folder `train --folds --out` wrote")
    return full_dirs


def _stand_ins(plan: CurvePlan, cells_dir: Path) -> dict[tuple[int, str], dict[str, Any] | None]:
    """The fold runs standing in for "all" cells not done yet, checked before anything trains (a mismatch is one
    error, at once): (fold, variant) -> what cell_from_run read, or None when that fold run is not finished."""
    out: dict[tuple[int, str], dict[str, Any] | None] = {}
    for v, d in plan.full_dirs.items():
        expected = resolve_training(plan.rubric, variant=parse_variant(v)[0], overrides=plan.per_variant[v][0],
                                    preset=plan.preset)
        for f in plan.pools:
            if not (cells_dir / f"{cell_name(f, ALL, 0, v)}.json").is_file():
                config = expected.for_answers(len(plan.pools[f])).config
                out[(f, v)] = cell_from_run(d, f, v, config, plan.splits[f], plan.df, plan.rubric,
                                            parse_variant(v)[0] == "plm")  # the black box reads the grades only
    return out


def _run_cells(plan: CurvePlan, root: Path, progress: ProgressFn | None, jobs: int = 1) -> tuple[int, int, int]:
    """Each cell of the plan read back (its file exists), imported from a fold run, or trained; (trained, read back,
    imported). jobs > 1: the cells to train are trained in worker processes first, then written in order."""
    cells_dir, work_dir = root / "cells", root / "work"
    stand_ins = _stand_ins(plan, cells_dir)
    trained = read_back = imported = 0
    per_cell, n = warn_once(progress), len(plan.cells)
    pretrained: dict[str, tuple[Any, float]] = {}
    if jobs > 1:
        from rubrictool.train.parallel import run_in_workers

        todo = [c for c in plan.cells if c.variant != POINTS and not (cells_dir / f"{c.name}.json").is_file()
                and not (c.size == ALL and c.repeat == 0 and c.variant in plan.full_dirs
                         and stand_ins.get((c.fold, c.variant)) is not None)]
        for c in todo:
            shutil.rmtree(work_dir / c.name, ignore_errors=True)  # a cell killed half-way left its run directory behind
        pretrained = run_in_workers(train_model, [(c.name, _cell_train_args(plan, c, root)) for c in todo], jobs,
                                    per_cell, "cells in workers")
    for done, cell in enumerate(plan.cells):
        path = cells_dir / f"{cell.name}.json"
        if path.is_file():
            read_cell(path, plan.settings)
            read_back += 1
            if progress:
                progress(Progress("cells", done + 1, n, f"{cell.name}: finished earlier, read back"))
            continue
        if cell.size == ALL and cell.repeat == 0 and cell.variant in plan.full_dirs:
            got = stand_ins[(cell.fold, cell.variant)]
            if got is not None:
                write_json(path, _imported_cell(plan, cell, got))
                imported += 1
                if progress:
                    progress(Progress("cells", done + 1, n, f"{cell.name}: read from {got['source']}"))
                continue
            warn(progress, f"{cell.name}: {plan.full_dirs[cell.variant]}/fold-{cell.fold} is not a finished fold run; "
                           "training the cell")
        if progress:
            progress(Progress("cells", done, n, f"{cell.name}: training"))
        _train_cell(plan, cell, root, per_cell, pretrained.get(cell.name))
        trained += 1
    if progress:
        progress(Progress("cells", n, n, f"{trained} trained, {imported} read from fold runs, {read_back} read back"))
    shutil.rmtree(work_dir, ignore_errors=True)
    return trained, read_back, imported


def _cell_record(plan: CurvePlan, cell: Cell, n_train: int, n_dev: int, test_m: dict[str, Any], labelled: list[str],
                 encoder: str, seconds: float, ids: dict[str, Any], source: str | None = None) -> dict[str, Any]:
    """A cell file: the cell, its test metrics beside the majority class of its ``labelled`` answers, the encoder,
    the settings digest, and the ids it trained and tested on with its test predictions (``ids``)."""
    test = plan.splits[cell.fold]["test"]
    maj = grade_metrics(plan.by_id.loc[test, "_y"].to_numpy(),
                        majority_baseline(plan.by_id.loc[labelled, "_y"].to_numpy(), len(test)))
    epochs = plan.per_variant[cell.variant][1]
    return {"fold": cell.fold, "size": str(cell.size), "repeat": cell.repeat, "variant": cell.variant,
            "n_train": n_train, "n_dev": n_dev, **{m: float(test_m[m]) for m in METRICS},
            **{f"majority_{m}": float(maj[m]) for m in METRICS}, **_failing(plan, ids),
            "encoder_epochs": 0 if encoder in ("frozen", "none") else epochs, "train_seconds": seconds,
            "encoder": encoder, "settings": plan.settings, "seed": cell.repeat,
            **({"source": source} if source is not None else {}), **ids}


def _failing(plan: CurvePlan, ids: dict[str, Any]) -> dict[str, float]:
    """The cell's failing test answers (below the rubric's pass mark): the share given a pass mark
    (``failing_passed``) and their mean error (``failing_error``); NaN when the cell's tests have none."""
    from rubrictool.evaluate import low_marks

    rb = plan.rubric
    true = plan.by_id.loc[[str(i) for i in ids["test_ids"]], "_y"].to_numpy() + rb.grade.min
    f = low_marks(true, np.asarray(ids["test_predicted"]), [], rb.pass_mark, n_boot=1)["failing"]
    return {"failing_passed": float(f["passed"]), "failing_error": float(f["mean_error"])}


def _imported_cell(plan: CurvePlan, cell: Cell, got: dict[str, Any]) -> dict[str, Any]:
    """An "all" cell read from a finished fold run (cell_from_run)."""
    ids = {k: got[k] for k in ("train_ids", "dev_ids", "test_ids", "test_predicted")}
    return _cell_record(plan, cell, len(plan.pools[cell.fold]), got["n_dev"], got["metrics"], plan.pools[cell.fold],
                        got["encoder"], got["train_seconds"], ids, source=got["source"])


def _cell_sample(plan: CurvePlan, cell: Cell) -> tuple[Any, int]:
    """The cell's subsample of its fold's training part (nested across sizes) and its number of answers."""
    fold, repeat = cell.fold, cell.repeat
    pool = plan.by_id.loc[plan.pools[fold], ["_y"]].reset_index()
    order = stratified_order(pool["_y"].to_numpy(), np.random.default_rng([plan.fold_seed, fold, repeat, 101]))
    n = len(pool) if cell.size == ALL else int(cell.size)
    return nested_subsample(pool, order, n, plan.dev_share, [plan.fold_seed, fold, repeat, n, 202]), n


def _cell_train_args(plan: CurvePlan, cell: Cell, root: Path) -> dict[str, Any]:
    """train_model's arguments for a trained cell (its run directory in work/)."""
    sample, _ = _cell_sample(plan, cell)
    return {"rubric": plan.rubric, "table": plan.table,
            "split": {"train": sample.fit, "dev": sample.dev, "test": plan.splits[cell.fold]["test"]},
            "run_dir": root / "work" / cell.name,
            "options": TrainOptions(preset=plan.preset, overrides=plan.per_variant[cell.variant][0],
                                    variant=parse_variant(cell.variant)[0], seeds=1, first_seed=cell.repeat),
            "record": DataRecord(agreement=plan.agreement, notes=plan.notes)}


def _train_cell(plan: CurvePlan, cell: Cell, root: Path, progress: ProgressFn | None,
                pretrained: tuple[Any, float] | None = None) -> None:
    """Draw the cell's subsample, train it (or fit the points table; or take the run a worker trained, ``pretrained``:
    its result and seconds) and write its cell file; the cell's run directory is built in work/ and deleted (kept in
    runs/ with keep_runs)."""
    sample, n = _cell_sample(plan, cell)
    test = plan.splits[cell.fold]["test"]
    run_dir = root / "work" / cell.name
    if pretrained is None:
        shutil.rmtree(run_dir, ignore_errors=True)  # a cell killed half-way left its run directory behind
    t0 = time.perf_counter()
    if cell.variant == POINTS:
        pred0 = _points_cell(plan.rubric, plan.by_id, sample.ids, test)
        encoder, test_m = "none", grade_metrics(plan.by_id.loc[test, "_y"].to_numpy(), pred0)
        pred = pd.DataFrame({"id": list(test), "grade": pred0 + plan.rubric.grade.min})
    else:
        if pretrained is not None:  # trained in a worker process: its time is the worker's
            res, worker_seconds = pretrained
            t0 -= worker_seconds
        else:
            call = _cell_train_args(plan, cell, root)
            first = [call.pop(k) for k in ("rubric", "table", "split", "run_dir")]  # positional, as always
            res = train_model(*first, **call, progress=progress)
        encoder = (res.metrics.get("encoder") or {}).get("used", "train")
        test_m = res.metrics["seeds"][0]["test"]
        pred = read_table(run_dir / "test_predictions.csv")  # neutralised cells back as they were
    ids = {"train_ids": sample.fit, "dev_ids": sample.dev, "test_ids": pred["id"].tolist(),
           "test_predicted": pred["grade"].astype(int).tolist()}
    record = _cell_record(plan, cell, n, len(sample.dev), test_m, sample.ids, encoder, time.perf_counter() - t0, ids)
    if plan.keep_runs:
        kept = root / "runs" / cell.name
        shutil.rmtree(kept, ignore_errors=True)
        kept.parent.mkdir(parents=True, exist_ok=True)
        os.replace(run_dir, kept)
    write_json(root / "cells" / f"{cell.name}.json", record)  # the cell is done only once this file exists
    shutil.rmtree(run_dir, ignore_errors=True)


def _write_outputs(plan: CurvePlan, root: Path, trained: int, read_back: int, imported: int) -> CurveResult:
    """curve.csv, curve.json and curve.png over every cell in ``root/cells``: this call's and those earlier calls
    added (other folds, sizes, repeats)."""
    rows = [{"encoder": "train"} | read_cell(p, plan.settings) for p in sorted((root / "cells").glob("*.json"))]
    from_runs = {cell_name(r["fold"], r["size"], r["repeat"], r["variant"]): r["source"] for r in rows
                 if r.get("source")}
    notes = list(plan.notes)
    if from_runs:
        notes.append(f"{len(from_runs)} 'all' cell(s) read from finished fold runs (--all-from; curve.json "
                     "from_fold_runs names them): trained on the same folds, table and configuration, with the "
                     "dev part the k-fold split drew")
    cells = pd.DataFrame(rows).reindex(columns=CURVE_COLUMNS + CURVE_FAILING)  # cells from before them: empty there
    cells = cells.assign(_o=cells["size"].map(size_order)).sort_values(["repeat", "fold", "_o"], kind="stable")
    cells = cells.drop(columns="_o").reset_index(drop=True)
    write_table(cells, root / "curve.csv")
    summary = summarize_curve(cells)
    readings = read_curve(cells)  # the one reading of these cells: curve.json, curve.png and the printed summary
    reach = {v: r["reach"] for v, r in readings.items()}
    folds_run = sorted({int(f) for f in cells["fold"]})
    title = curve_title(plan.rubric.name, len(plan.splits), plan.by, folds_run)
    png = plot_curve(cells, root / "curve.png", reach=reach, title=title) if plan.plot else None
    write_json(root / "curve.json", {
        "rubric": plan.rubric.name, "settings": plan.settings_doc, "settings_digest": plan.settings,
                                     "cells": len(cells),
        "sizes": sorted(set(cells["size"]), key=size_order), "variants": list(dict.fromkeys(cells["variant"])),
        "repeats": sorted({int(r) for r in cells["repeat"]}), "folds_run": folds_run,
        "encoder_epochs": {str(v): int(e) for v, e in cells.groupby("variant")["encoder_epochs"].first().items()},
        "dev": f"a stratified {plan.dev_share:.1%} of each subsample (n counts every labelled answer: train + dev)",
        "git_revision": git_revision(), "notes": notes, "from_fold_runs": from_runs,
        "summary": summary.to_dict(orient="records"), "reach_90": reach,
        "reading": {v: {k: r[k] for k in ("status", "sentence", "sizes_above_majority")} for v, r in readings.items()},
    })
    return CurveResult(root, cells, summary, reach, png, trained, read_back, notes, imported)


def _points_cell(rb: Rubric, by_id: pd.DataFrame, labelled: list[str], test: list[str]) -> NDArray[np.int64]:
    """0-based test grades of the ``points`` variant: a points table fitted to the labelled answers' (train and dev:
    nothing is selected on dev) concept levels and grades, applied to the test answers' concept levels."""
    from rubrictool.points import fit_points, points_baseline

    def levels(ids: list[str]) -> NDArray[np.int64]:  # 0-based: the lowest level of the rubric's scale is 0
        return by_id.loc[ids, rb.keys].to_numpy(dtype=np.int64) - rb.scale.min

    fitted = fit_points(rb, levels(labelled), by_id.loc[labelled, "_y"].to_numpy() + rb.grade.min)
    return points_baseline(rb, levels(test), grade_min=rb.grade.min, points=fitted.points, grading=fitted.grading)


# ---------------------------------------------------------------------------- the command's entry point
def run_learning_curve(
    *,
    benchmark: str | None,
    data: str | Path | None,
    rubric: str | None,
    agreement: str | Path | None,
    data_dir: str | Path | None,
    out: str | Path,
    options: TrainOptions,
    curve: CurveOptions = CurveOptions(),
    progress: ProgressFn | None = None,
    jobs: int = 1,
) -> CurveResult:
    """``rubrictool learning-curve``: the data (:func:`rubrictool.pipeline.resolve_data`: a benchmark, or an adjudicated
    table with its rubric), the ``curve`` the command's options give (:meth:`CurveOptions.from_command`), the
    training ``options`` (preset and overrides; the variant and seed are each cell's); the rest as
    :func:`learning_curve`."""
    from rubrictool.pipeline import resolve_data

    source = resolve_data(benchmark=benchmark, data=data, rubric=rubric, agreement=agreement, data_dir=data_dir,
                          progress=progress)
    return learning_curve(source.rubric, source.table, out, curve, training=options,
                          agreement=source.agreement, notes=source.notes or None, progress=progress,
                          jobs=jobs)
