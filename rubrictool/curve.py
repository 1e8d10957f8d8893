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

Written, over every cell in ``DIR/cells`` (this call's and earlier calls'): ``curve.csv`` (one row per cell), ``curve.json`` (settings, the summary per variant and size,
the size that reaches 90 % of the full-data QWK) and ``curve.png`` (:func:`plot_curve`).

A variant is ``reccbm``, ``plm`` or ``vanilla``, optionally with the encoder choice after a dash (:func:`parse_variant`):
``reccbm-frozen`` trains REC-CBM with the pretrained encoder frozen (``stage1.encoder``; only the heads train),
``plm-auto`` lets ``stage1.frozen_below`` decide per cell. Each is its own variant in curve.csv, so a curve
directory gains frozen variants later without retraining the cells it has. ``points`` trains no model: a points
table fitted to the n answers' concept levels and grades (:func:`rubrictool.points.fit_points`) grades the test
answers from their concept levels — what a course whose every answer an LLM panel labelled (annotate, adjudicate)
gets from n hand-graded answers, in seconds.
:func:`position_on_curve` tells a run's report where its training size sits on a curve.
"""

from __future__ import annotations

import copy
import hashlib
import inspect
import json
import math
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from numpy.typing import NDArray

from reccbm import grade_metrics
from rubrictool.atomic import publish
from rubrictool.data import kfold_splits
from rubrictool.errors import DataError, TrainError
from rubrictool.evaluate import majority_baseline
from rubrictool.io import read_table, write_table
from rubrictool.locks import writer_lock
from rubrictool.progress import Progress, ProgressFn, warn
from rubrictool.provenance import git_revision
from rubrictool.rubric import Rubric, load_rubric
from rubrictool.tables import validate_adjudicated
from rubrictool.train import (
    FLAT_OPTIONS,
    SECTIONS,
    encoder_epochs,
    encoder_min_steps,
    load_train_config,
    resolve_training,
    train_model,
)

__all__ = [
    "CURVE_COLUMNS",
    "ENCODERS",
    "MIN_SIZE",
    "VARIANTS",
    "CurveResult",
    "curve_overrides",
    "learning_curve",
    "parse_folds",
    "parse_full_from",
    "parse_sizes",
    "parse_variant",
    "plot_curve",
    "position_on_curve",
    "reach_fraction",
    "run_learning_curve",
    "summarize_curve",
]

VARIANTS = ("reccbm", "plm", "vanilla")
POINTS = "points"  # no model: a points table fitted to the labelled answers' concept levels grades the test answers'
ENCODERS = ("frozen", "auto")  # a variant's suffix: "reccbm-frozen" is reccbm with stage1.encoder = "frozen"
MIN_SIZE = 10  # below this a stratified dev part of 1-2 answers and a handful of training answers say nothing
ALL = "all"  # the size token for the fold's whole training part
CURVE_COLUMNS = ["fold", "size", "repeat", "variant", "n_train", "n_dev", "t_acc", "qwk", "t_f1", "majority_t_acc",
                 "majority_qwk", "majority_t_f1", "encoder_epochs", "train_seconds", "encoder"]
METRICS = ("t_acc", "qwk", "t_f1")

# flat options of the command -> the config fields they set: train's own (FLAT_OPTIONS, without cross-fitting, and without
# the encoder choice, which a curve makes per variant: reccbm-frozen) and the
# stage budgets a tiny test model needs
_FLAT: dict[str, list[tuple[str, str]]] = {k: v for k, v in FLAT_OPTIONS.items() if k not in ("crossfit", "encoder")} | {
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
            raise DataError(f"--fold {text}: {tok!r} is not a fold of 0..{k - 1}", hint=f"give fold numbers below --folds {k}")
        out.append(int(tok))
    return sorted(set(out))


def curve_overrides(config: str | Path | None = None, **flat: Any) -> dict[str, dict[str, Any]]:
    """The training overrides of a curve: a YAML config (:func:`rubrictool.train.load_train_config`) under the flat
    options backbone, max_len, epochs, lr, batch_size, device, joint_epochs, stage2_epochs (None: not set)."""
    unknown = sorted(set(flat) - set(_FLAT))
    if unknown:
        raise TrainError(f"unknown option(s) {unknown}; known: {sorted(_FLAT)}")
    out = load_train_config(config)
    for name, value in flat.items():
        for section, key in _FLAT[name] if value is not None else []:
            out.setdefault(section, {})[key] = value
    return out


def parse_variant(name: str) -> tuple[str, str | None]:
    """``"reccbm-frozen"`` -> ("reccbm", "frozen"): a curve variant's model (VARIANTS) and encoder choice (ENCODERS;
    None: the configuration's, "train" unless a config sets it). Raises TrainError for any other name."""
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
    encoder (or, frozen, its head) as many epochs as the concept models do in Stage I and the joint stage together
    (issue #25 item 6: a fair baseline). A "-frozen"/"-auto" suffix sets stage1.encoder."""
    variant, encoder = parse_variant(variant)
    if variant == POINTS:
        return {}, 0  # no encoder
    ov = copy.deepcopy(overrides)
    if encoder is not None:
        ov.setdefault("stage1", {})["encoder"] = encoder
    budget = encoder_epochs(preset, overrides)
    if variant == "plm":
        if match_budget:
            # the steps of both stages in its one stage (the joint stage's share moved, so it is not counted twice)
            ov.setdefault("stage1", {}).update(epochs=budget, min_steps=encoder_min_steps(preset, overrides))
            ov.setdefault("joint", {})["min_steps"] = 0
            return ov, budget
        return ov, encoder_epochs(preset, {**ov, "joint": {"epochs": 0}})  # the PLM has no joint stage
    return ov, budget


# ---------------------------------------------------------------------------- subsamples
def _stratified_order(grades: NDArray[Any], rng: np.random.Generator) -> NDArray[np.intp]:
    """A seeded order of positions whose every prefix is stratified by grade: each grade's members, shuffled, get
    evenly spaced keys (j + u) / n_g in [0, 1) and the order sorts by key, so a prefix of n holds n · share_g ± 1
    of grade g. Prefixes are nested: the first 100 contain the first 50."""
    key = np.empty(len(grades))
    for g in np.unique(grades):
        members = rng.permutation(np.flatnonzero(grades == g))
        key[members] = (np.arange(len(members)) + rng.random()) / len(members)
    return np.asarray(np.lexsort((rng.random(len(grades)), key)), dtype=np.intp)


@dataclass(frozen=True)
class _Sample:
    fit: list[str]
    dev: list[str]

    @property
    def ids(self) -> list[str]:
        return sorted(self.fit + self.dev)


def _subsample(pool: pd.DataFrame, order: NDArray[np.intp], n: int, dev_share: float, seed: list[int]) -> _Sample:
    """The first n of ``order`` over ``pool`` (columns id, _y), split into a stratified dev part and the rest."""
    sub = pool.iloc[order[:n]]
    grades = sub["_y"].to_numpy()
    n_dev = min(max(1, round(dev_share * n)), n - 1)
    dev_pos = set(_stratified_order(grades, np.random.default_rng(seed))[:n_dev].tolist())
    ids = sub["id"].tolist()
    return _Sample(fit=sorted(i for p, i in enumerate(ids) if p not in dev_pos),
                   dev=sorted(i for p, i in enumerate(ids) if p in dev_pos))


# ---------------------------------------------------------------------------- cells
def _cell_name(fold: int, size: int | str, repeat: int, variant: str) -> str:
    return f"fold{fold}-n{size}-r{repeat}-{variant}"


def _write_json(path: Path, doc: dict[str, Any]) -> Path:
    """Atomically: a reader (or a resumed run) sees the whole file or none of it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as fh:
            json.dump(doc, fh, indent=1, default=float)
            fh.write("\n")
        publish(tmp, path)  # umask-respecting mode, then the rename
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path


def _read_cell(path: Path, settings: str) -> dict[str, Any]:
    try:
        doc = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise DataError(f"{path}: unreadable cell file ({exc.__class__.__name__})", hint="delete it to retrain that cell") from None
    if doc.get("settings") != settings:
        raise DataError(f"{path}: this cell was trained with other settings (table, folds, preset or training options) "
                        "than this run", hint="give a new --out, or delete the directory's cells/ to start over")
    return dict(doc)


def _settings_digest(doc: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(doc, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _table_digest(df: pd.DataFrame, keys: Sequence[str]) -> str:
    cols = ["id", "_y", *[f"_c_{k}" for k in keys if f"_c_{k}" in df.columns]]
    body = df[cols].sort_values("id").to_csv(index=False)
    return hashlib.sha256(body.encode()).hexdigest()[:16]


def parse_full_from(items: Sequence[str] | None) -> dict[str, Path]:
    """``["reccbm=runs/folds", "plm=runs/plm"]`` -> {variant: folder}: the ``train --folds`` folders whose fold runs
    stand in for a variant's "all" cells (:func:`learning_curve`, ``full_from``)."""
    out: dict[str, Path] = {}
    for item in items or []:
        variant, sep, folder = item.partition("=")
        if not sep or not variant.strip() or not folder.strip():
            raise DataError(f"--all-from {item}: give VARIANT=FOLDER", hint="e.g. --all-from reccbm=runs/folds")
        out[variant.strip()] = Path(folder.strip())
    return out


def _differences(theirs: Any, ours: Any, where: str = "") -> list[str]:
    """Fields of a run's config.yaml (``theirs``) that differ from what this curve would train with (``ours``). A
    field the run predates (absent from its file) counts as its dataclass default, which is what this build reads."""
    if isinstance(theirs, dict) and isinstance(ours, dict):
        out: list[str] = []
        for key in sorted(set(theirs) | set(ours), key=str):
            name = f"{where}.{key}" if where else str(key)
            if key == "encoder" and not where and key not in theirs:
                continue  # a run from before the encoder choice was recorded: stage1.encoder says what it did
            if key not in theirs and where in SECTIONS:
                default = {f.name: f.default for f in fields(SECTIONS[where])}.get(key)
                if default == ours[key]:
                    continue
            out += _differences(theirs.get(key), ours.get(key), name)
        return out
    return [] if theirs == ours else [f"{where} {theirs!r} in the run, {ours!r} here"]


def _cell_from_run(src: Path, fold: int, variant: str, expected: dict[str, Any], split: dict[str, list[str]],
                   df: pd.DataFrame, rb: Rubric) -> dict[str, Any] | None:
    """A variant's "all" cell of ``fold``, read from the finished fold run ``src/fold-<fold>`` of ``train --folds``
    (or ``benchmarks/folds.py``) instead of trained again: None when that run is not there or not finished. It must
    have been trained on the same fold (test part and training part), table and configuration, with seed 0 (the
    curve's first repeat), or DataError says what differs. Its dev part is the run's own (a stratified share of the
    same training part, drawn by the k-fold split)."""
    import yaml

    from rubrictool.runs import RECORD, run_is_complete

    run = src / f"fold-{fold}"
    if not all((run / f).is_file() for f in ("metrics.json", "test_predictions.csv", "split.json", "config.yaml", "table.csv")):
        return None
    if (run / RECORD).is_file() and not run_is_complete(run):
        return None
    where = f"--all-from {variant}={src}: {run}"
    plm = parse_variant(variant)[0] == "plm"  # the black box reads the grades only
    try:
        their_split = json.loads((run / "split.json").read_text())
        config = yaml.safe_load((run / "config.yaml").read_text()) or {}
        metrics = json.loads((run / "metrics.json").read_text())
        pred = pd.read_csv(run / "test_predictions.csv", dtype={"id": str}, usecols=["id", "grade"])
        table = validate_adjudicated(read_table(str(run / "table.csv")), rb, need_concepts=not plm)
    except (OSError, ValueError, KeyError, yaml.YAMLError, DataError) as exc:
        raise DataError(f"{where}: unreadable fold run ({exc.__class__.__name__}: {str(exc)[:120]})",
                        hint="give the folder `train --folds` wrote, or drop --all-from to train the cell") from None
    if set(their_split.get("test", [])) != set(split["test"]) or (
            set(their_split.get("train", [])) | set(their_split.get("dev", []))) != set(split["train"]) | set(split["dev"]):
        raise DataError(f"{where}: its fold is not this curve's fold {fold} (other folds, fold seed or --by)",
                        hint="give the folder of `train --folds` with the same --folds, --fold-seed and --by")
    keys = [] if plm else rb.keys
    if _table_digest(table, keys) != _table_digest(df, keys):
        raise DataError(f"{where}: trained on another table (labels or grades differ)",
                        hint="give the fold runs of this table, or drop --all-from to train the cell")
    diff = _differences(config, expected)
    if diff:
        raise DataError(f"{where}: trained with another configuration ({'; '.join(diff[:3])})",
                        hint="give the fold runs of this variant and preset, or drop --all-from to train the cell")
    seeds = metrics.get("seeds") or []
    chosen = [s for s in seeds if s.get("seed") == metrics.get("selected_seed")]
    if len(seeds) != 1 or not chosen or chosen[0].get("seed") != 0:
        raise DataError(f"{where}: trained with seeds {[s.get('seed') for s in seeds]}; the curve's first repeat is seed 0",
                        hint="give fold runs trained with one seed (the default), or drop --all-from")
    test_m = chosen[0]["test"]
    return {"n_dev": len(their_split.get("dev", [])), "metrics": {m: float(test_m[m]) for m in METRICS},
            "encoder": (metrics.get("encoder") or {}).get("used", "train"),
            "train_seconds": float(chosen[0].get("train_seconds") or 0.0), "source": str(run),
            "train_ids": sorted(their_split.get("train", [])), "dev_ids": sorted(their_split.get("dev", [])),
            "test_ids": pred["id"].tolist(), "test_predicted": pred["grade"].astype(int).tolist()}


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
    *,
    sizes: Sequence[int | str],
    variants: Sequence[str] = VARIANTS,
    repeats: int = 3,
    folds: int = 5,
    fold_ids: Sequence[int] | None = None,
    fold_seed: int = 0,
    by: str | None = None,
    dev_share: float = 0.125,
    preset: str = "default",
    overrides: dict[str, dict[str, Any]] | None = None,
    match_budget: bool = True,
    agreement: dict[str, Any] | str | Path | None = None,
    notes: list[str] | None = None,
    keep_runs: bool = False,
    full_from: dict[str, str | Path] | None = None,
    plot: bool = True,
    callback: Callable[[Any], None] | None = None,
    progress: ProgressFn | None = None,
    jobs: int = 1,
) -> CurveResult:
    """Train every (fold, size, repeat, variant) cell not trained yet in ``out``, then write curve.csv, curve.json
    and curve.png over every cell in ``out`` (earlier calls may have added other folds, sizes or repeats) (see the module docstring for what a cell is and how it is drawn).

    sizes: numbers of labelled answers (train + dev) and optionally "all" (the fold's whole training part; needed
    for :func:`reach_fraction`). by: grouped folds (e.g. "question"), passed to kfold_splits only when given.
    match_budget: the PLM's encoder trains as many epochs as the concept models' Stage I + joint stage.
    full_from: {variant: folder of ``train --folds``}: a variant's "all" cells of the first repeat are read from that
    folder's finished fold runs when they were trained on the same folds, table and configuration (they are exactly
    those cells, up to the dev part the k-fold split drew), instead of trained again; a fold not finished there is
    trained. The cell records the run it came from (``source``).
    callback: reccbm training events, passed to train_model. progress gets one task, "cells".
    jobs > 1: the cells to train train in that many worker processes first (:mod:`rubrictool.parallel`; each cell as
    the serial run trains it), then are written in order.
    """
    rb = rubric if isinstance(rubric, Rubric) else load_rubric(rubric)
    if not variants:
        raise TrainError("no variants to train; use " + ", ".join(VARIANTS), hint="e.g. --variants reccbm,plm")
    for v in variants:
        parse_variant(v)
    if repeats < 1:
        raise TrainError(f"--repeats {repeats}: give at least 1")
    if not 0 < dev_share < 0.5:
        raise TrainError(f"--dev-share {dev_share}: give a share between 0 and 0.5")
    if not sizes:
        raise DataError("no sizes to train", hint="e.g. --sizes 50,100,200,all")
    need_concepts = any(parse_variant(v)[0] != "plm" for v in variants)
    df = validate_adjudicated(table, rb, need_concepts=need_concepts)
    split_kw: dict[str, Any] = {}
    if by is not None:
        if "by" not in inspect.signature(kfold_splits).parameters:
            raise DataError(f"--by {by}: grouped folds are not in this build of rubrictool.data.kfold_splits",
                            hint="drop --by for grade-stratified random folds")
        split_kw["by"] = by
    splits = kfold_splits(df, k=folds, seed=fold_seed, **split_kw)
    run_folds = list(range(folds)) if fold_ids is None else list(fold_ids)
    if any(f not in range(folds) for f in run_folds):
        raise DataError(f"--fold {run_folds}: folds are 0..{folds - 1}")
    pools = {f: sorted(splits[f]["train"] + splits[f]["dev"]) for f in run_folds}
    smallest = min(len(p) for p in pools.values())
    too_big = [s for s in sizes if isinstance(s, int) and s > smallest]
    if too_big:
        raise DataError(f"--sizes: {too_big[0]} answers is more than a fold's training part ({smallest} answers of "
                        f"{len(df)}, {folds} folds)", hint=f"give sizes up to {smallest}, or 'all' for the whole part")
    overrides = overrides or {}
    per_variant = {v: _variant_overrides(v, preset, overrides, match_budget) for v in variants}
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
    table_digest = _table_digest(df, rb.keys)
    settings_doc = {"rubric": rb.name, "table": table_digest, "folds": folds, "fold_seed": fold_seed,
                    "by": by, "dev_share": dev_share, "preset": preset, "overrides": overrides,
                    "match_budget": match_budget}
    settings = _settings_digest(settings_doc)
    root = Path(out)
    # one writer per curve folder: a second call on the same --out would delete the cell the first one is training
    # (work/ is cleared at the end) and write curve.csv from a half-finished set; it stops at once instead
    with writer_lock(root, f"the learning curve {root}", hint="wait for it to finish, or give another --out",
                     by="rubrictool learning-curve", kept=f"nothing was trained, and {root} is as it was"):
        cells_dir, work_dir = root / "cells", root / "work"
        cells_dir.mkdir(parents=True, exist_ok=True)
        by_id = df.set_index("id")
        plan = [(r, f, s, v) for r in range(repeats) for f in run_folds for s in sizes for v in variants]
        # fold runs standing in for "all" cells are checked before anything trains: a mismatch is one error, at once
        stand_ins: dict[tuple[int, str], dict[str, Any] | None] = {}
        for v, d in full_dirs.items():
            expected = resolve_training(rb, variant=parse_variant(v)[0], overrides=per_variant[v][0], preset=preset)
            for f in run_folds:
                if not (cells_dir / f"{_cell_name(f, ALL, 0, v)}.json").is_file():
                    config = expected.for_answers(len(pools[f])).config
                    stand_ins[(f, v)] = _cell_from_run(d, f, v, config, splits[f], df, rb)
        trained = read_back = imported = 0
        warned: set[str] = set()

        def once(ev: Progress) -> None:  # a warning (inputs truncated) is shown once, not once per cell
            if progress is None or (ev.kind == "warning" and ev.info in warned):
                return
            warned.add(ev.info)
            progress(ev)

        def cell_run(fold: int, size: int | str, repeat: int, variant: str) -> tuple[_Sample, int, dict[str, Any]]:
            """A cell's subsample, its number of answers and the train_model arguments that train it."""
            pool = by_id.loc[pools[fold], ["_y"]].reset_index()
            order = _stratified_order(pool["_y"].to_numpy(), np.random.default_rng([fold_seed, fold, repeat, 101]))
            n = len(pool) if size == ALL else int(size)
            sample = _subsample(pool, order, n, dev_share, [fold_seed, fold, repeat, n, 202])
            split = {"train": sample.fit, "dev": sample.dev, "test": splits[fold]["test"]}
            return sample, n, {"rubric": rb, "table": table, "split": split,
                               "run_dir": work_dir / _cell_name(fold, size, repeat, variant),
                               "variant": parse_variant(variant)[0], "overrides": per_variant[variant][0],
                               "preset": preset, "seeds": 1, "first_seed": repeat, "agreement": agreement,
                               "notes": notes, "callback": callback, "progress": once}

        pretrained: dict[str, tuple[Any, float]] = {}
        if jobs > 1:  # the cells to train, in worker processes first; the loop below writes them in order
            from rubrictool.parallel import run_in_workers

            todo = [(_cell_name(f, s, r, v), cell_run(f, s, r, v)[2]) for r, f, s, v in plan
                    if v != POINTS and not (cells_dir / f"{_cell_name(f, s, r, v)}.json").is_file()
                    and not (s == ALL and r == 0 and v in full_dirs and stand_ins.get((f, v)) is not None)]
            for name, _ in todo:
                shutil.rmtree(work_dir / name, ignore_errors=True)  # a cell killed half-way left its run directory behind
            pretrained = run_in_workers(train_model, todo, jobs, once, "cells in workers")
        for done, (repeat, fold, size, variant) in enumerate(plan):
            name = _cell_name(fold, size, repeat, variant)
            path = cells_dir / f"{name}.json"
            if path.is_file():
                _read_cell(path, settings)
                read_back += 1
                if progress:
                    progress(Progress("cells", done + 1, len(plan), f"{name}: finished earlier, read back"))
                continue
            if size == ALL and repeat == 0 and variant in full_dirs:
                got = stand_ins[(fold, variant)]
                if got is not None:
                    epochs = per_variant[variant][1]
                    test = splits[fold]["test"]
                    y_test = by_id.loc[test, "_y"].to_numpy()
                    maj = grade_metrics(y_test, majority_baseline(by_id.loc[pools[fold], "_y"].to_numpy(), len(test)))
                    _write_json(path, {
                        "fold": fold, "size": ALL, "repeat": 0, "variant": variant, "n_train": len(pools[fold]),
                        "n_dev": got["n_dev"], **got["metrics"], **{f"majority_{m}": float(maj[m]) for m in METRICS},
                        "encoder_epochs": 0 if got["encoder"] in ("frozen", "none") else epochs,
                        "train_seconds": got["train_seconds"], "encoder": got["encoder"], "settings": settings,
                        "seed": 0, "source": got["source"], "train_ids": got["train_ids"], "dev_ids": got["dev_ids"],
                        "test_ids": got["test_ids"], "test_predicted": got["test_predicted"]})
                    imported += 1
                    if progress:
                        progress(Progress("cells", done + 1, len(plan), f"{name}: read from {got['source']}"))
                    continue
                warn(progress, f"{name}: {full_dirs[variant]}/fold-{fold} is not a finished fold run; training the cell")
            if progress:
                progress(Progress("cells", done, len(plan), f"{name}: training"))
            sample, n, call = cell_run(fold, size, repeat, variant)
            test = splits[fold]["test"]
            epochs = per_variant[variant][1]
            run_dir = work_dir / name
            if name not in pretrained:
                shutil.rmtree(run_dir, ignore_errors=True)  # a cell killed half-way left its run directory behind
            t0 = time.perf_counter()
            y_test = by_id.loc[test, "_y"].to_numpy()
            if variant == POINTS:
                encoder, pred0 = "none", _points_cell(rb, by_id, sample.ids, test)
                test_m = grade_metrics(y_test, pred0)
                pred = pd.DataFrame({"id": list(test), "grade": pred0 + rb.grade.min})
            else:
                if name in pretrained:  # trained in a worker process: its time is the worker's
                    res, worker_seconds = pretrained[name]
                    t0 -= worker_seconds
                else:
                    first = [call.pop(k) for k in ("rubric", "table", "split", "run_dir")]  # positional, as always
                    res = train_model(*first, **call)
                encoder = (res.metrics.get("encoder") or {}).get("used", "train")
                test_m = res.metrics["seeds"][0]["test"]
                pred = pd.read_csv(run_dir / "test_predictions.csv", dtype={"id": str})
            seconds = time.perf_counter() - t0
            maj_pred = majority_baseline(by_id.loc[sample.ids, "_y"].to_numpy(), len(test))
            maj = grade_metrics(y_test, maj_pred)
            cell = {"fold": fold, "size": str(size), "repeat": repeat, "variant": variant, "n_train": n, "n_dev": len(sample.dev),
                    **{m: float(test_m[m]) for m in METRICS}, **{f"majority_{m}": float(maj[m]) for m in METRICS},
                    "encoder_epochs": 0 if encoder in ("frozen", "none") else epochs, "train_seconds": seconds, "encoder": encoder,
                    "settings": settings, "seed": repeat,
                    "train_ids": sample.fit, "dev_ids": sample.dev,
                    "test_ids": pred["id"].tolist(), "test_predicted": pred["grade"].astype(int).tolist()}
            if keep_runs:
                kept = root / "runs" / name
                shutil.rmtree(kept, ignore_errors=True)
                kept.parent.mkdir(parents=True, exist_ok=True)
                os.replace(run_dir, kept)
            _write_json(path, cell)  # the cell is done only once this file exists
            shutil.rmtree(run_dir, ignore_errors=True)
            trained += 1
        if progress:
            progress(Progress("cells", len(plan), len(plan), f"{trained} trained, {imported} read from fold runs, "
                                                              f"{read_back} read back"))
        shutil.rmtree(work_dir, ignore_errors=True)
        # the curve is every cell in the directory: this call's and those earlier calls added (other folds, sizes, repeats)
        rows = [{"encoder": "train"} | _read_cell(p, settings) for p in sorted(cells_dir.glob("*.json"))]  # cells from
        from_runs = {_cell_name(r["fold"], r["size"], r["repeat"], r["variant"]): r["source"] for r in rows if r.get("source")}
        notes = list(notes or [])
        if from_runs:
            notes.append(f"{len(from_runs)} 'all' cell(s) read from finished fold runs (--all-from; curve.json "
                         "from_fold_runs names them): trained on the same folds, table and configuration, with the "
                         "dev part the k-fold split drew")
        cells = pd.DataFrame(rows)[CURVE_COLUMNS]  # before the encoder choice: a trained encoder
        cells = cells.assign(_o=cells["size"].map(_size_order)).sort_values(["repeat", "fold", "_o"], kind="stable")
        cells = cells.drop(columns="_o").reset_index(drop=True)
        write_table(cells, root / "curve.csv")
        summary = summarize_curve(cells)
        reach = {str(v): reach_fraction(cells, str(v)) for v in dict.fromkeys(cells["variant"])}
        folds_run = sorted({int(f) for f in cells["fold"]})
        png = plot_curve(cells, root / "curve.png", reach=reach, title=_title(rb.name, folds, by, folds_run)) if plot else None
        _write_json(root / "curve.json", {
            "rubric": rb.name, "settings": settings_doc, "settings_digest": settings, "cells": len(cells),
            "sizes": sorted(set(cells["size"]), key=_size_order), "variants": list(dict.fromkeys(cells["variant"])),
            "repeats": sorted({int(r) for r in cells["repeat"]}), "folds_run": folds_run,
            "encoder_epochs": {str(v): int(e) for v, e in cells.groupby("variant")["encoder_epochs"].first().items()},
            "dev": f"a stratified {dev_share:.1%} of each subsample (n counts every labelled answer: train + dev)",
            "git_revision": git_revision(), "notes": notes, "from_fold_runs": from_runs,
            "summary": summary.to_dict(orient="records"), "reach_90": reach,
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


def _title(rubric: str, folds: int, by: str | None, run: list[int] | None = None) -> str:
    split = f"{folds} folds grouped by {by}" if by else f"{folds} random folds"
    if run is not None and len(run) < folds:  # say which folds the curve holds when it is not all of them
        split = f"fold{'s' if len(run) > 1 else ''} {', '.join(map(str, run))} of {split}"
    return f"Learning curve: {rubric} ({split}; mean ± 1 s.d. over folds × repeats)"


# ---------------------------------------------------------------------------- reading a curve
def _size_order(size: str) -> float:
    return math.inf if size == ALL else float(size)


def summarize_curve(cells: pd.DataFrame) -> pd.DataFrame:
    """One row per (variant, size), sizes ascending: cells, mean n_train, mean and s.d. of each metric over
    folds × repeats, and the majority baseline's means."""
    rows = []
    for (variant, size), g in cells.assign(size=cells["size"].astype(str)).groupby(["variant", "size"], sort=False):
        row: dict[str, Any] = {"variant": variant, "size": size, "cells": len(g), "n_train": float(g["n_train"].mean())}
        for m in METRICS:
            row[m] = float(g[m].mean())
            row[f"{m}_sd"] = float(g[m].std(ddof=1)) if len(g) > 1 else 0.0
            row[f"majority_{m}"] = float(g[f"majority_{m}"].mean())
        rows.append(row)
    out = pd.DataFrame(rows)
    if out.empty:
        return out
    first = {v: i for i, v in enumerate(dict.fromkeys(cells["variant"]))}  # variants in the order the cells list them
    out["_v"], out["_o"] = out["variant"].map(first), out["size"].map(_size_order)
    return out.sort_values(["_v", "_o"], kind="stable").drop(columns=["_v", "_o"]).reset_index(drop=True)


def _interp_log(n: float, n0: float, v0: float, n1: float, v1: float) -> float:
    if n1 == n0:
        return v0
    t = (math.log(n) - math.log(n0)) / (math.log(n1) - math.log(n0))
    return v0 + t * (v1 - v0)


def reach_fraction(cells: pd.DataFrame, variant: str, fraction: float = 0.9, metric: str = "qwk") -> dict[str, Any] | None:
    """How many labelled answers reach ``fraction`` of the full-data ``metric`` (the "all" size) for ``variant``:
    the first size whose mean reaches it, and the number interpolated (linearly in log n) between that size and the
    one before. None without an "all" size or when the full-data value is not above 0."""
    s = summarize_curve(cells[cells["variant"] == variant])
    if s.empty or ALL not in set(s["size"]):
        return None
    full = float(s.loc[s["size"] == ALL, metric].iloc[0])
    if not full > 0:
        return None
    target = fraction * full
    prev: tuple[float, float] | None = None
    for row in s.to_dict(orient="records"):
        n, v = float(row["n_train"]), float(row[metric])
        if v >= target:
            if prev is None:
                est, where = n, "at or below the smallest size"
            else:
                t = (target - prev[1]) / (v - prev[1])
                est, where = math.exp(math.log(prev[0]) + t * (math.log(n) - math.log(prev[0]))), "between sizes"
            return {"variant": variant, "metric": metric, "fraction": fraction, "full": full, "target": target,
                    "full_n_train": float(s.loc[s["size"] == ALL, "n_train"].iloc[0]), "size": str(row["size"]),
                    "size_n_train": n, "n_estimate": round(est), "where": where}
        prev = (n, v)
    return None  # not reached (cannot happen: the "all" size reaches its own value)


def position_on_curve(curve_csv: str | Path, n_train: float, variant: str) -> dict[str, Any]:
    """Where a run trained on ``n_train`` labelled answers sits on a learning curve (curve.csv) of ``variant``: the
    expected QWK and T-Acc at n_train, interpolated linearly in log n between the neighbouring sizes' means, and
    those neighbours, and the variant's 90 % point (:func:`reach_fraction`). Outside the measured sizes the nearest
    size's values are given and ``within`` is False."""
    p = Path(curve_csv)
    cells = read_table(p)
    missing = sorted(set(CURVE_COLUMNS[:8]) - set(cells.columns))
    if missing:
        raise DataError(f"{p}: not a curve.csv (no column(s) {missing})", hint="give the curve.csv of `rubrictool learning-curve`")
    cells = cells.assign(size=cells["size"].astype(str), variant=cells["variant"].astype(str))
    if variant not in set(cells["variant"]):
        raise DataError(f"{p}: no cells of variant {variant!r}; the curve has {', '.join(sorted(set(cells['variant'])))}")
    if not n_train > 0:
        raise DataError(f"n_train {n_train}: give the number of labelled answers the run trained on (> 0)")
    s = summarize_curve(cells[cells["variant"] == variant]).sort_values("n_train", kind="stable")
    pts = s.to_dict(orient="records")

    def point(r: Any) -> dict[str, Any]:
        return {"size": r["size"], "n_train": r["n_train"], "qwk": r["qwk"], "qwk_sd": r["qwk_sd"], "t_acc": r["t_acc"],
                "t_acc_sd": r["t_acc_sd"], "cells": r["cells"]}

    lower = [r for r in pts if r["n_train"] <= n_train]
    upper = [r for r in pts if r["n_train"] >= n_train]
    lo, hi = (lower[-1] if lower else None), (upper[0] if upper else None)
    if lo is not None and hi is not None:
        qwk = _interp_log(n_train, lo["n_train"], lo["qwk"], hi["n_train"], hi["qwk"])
        t_acc = _interp_log(n_train, lo["n_train"], lo["t_acc"], hi["n_train"], hi["t_acc"])
    else:
        near = lo if lo is not None else hi
        assert near is not None
        qwk, t_acc = near["qwk"], near["t_acc"]
    return {"variant": variant, "n_train": n_train, "qwk": qwk, "t_acc": t_acc, "within": lo is not None and hi is not None,
            "lower": point(lo) if lo else None, "upper": point(hi) if hi else None,
            "full": point(pts[-1]) if pts and pts[-1]["size"] == ALL else None, "curve": str(p),
            "reach_90": reach_fraction(cells, variant)}


# ---------------------------------------------------------------------------- the figure
_COLOURS = {"reccbm": "#1f77b4", "plm": "#ff7f0e", "vanilla": "#2ca02c", POINTS: "#9467bd"}
_ENCODER_STYLE = {"frozen": ("-.", "s"), "auto": ((0, (1, 1)), "^")}  # a variant's suffix -> line style, marker


def _variant_labels(cells: pd.DataFrame) -> dict[str, str]:
    """Legend names: the variant, and which folds its cells come from when the variants do not share the same folds
    (a curve extended with some variants on fold 0 only must not read as if all were measured on every fold)."""
    folds = {str(v): sorted({int(f) for f in g["fold"]}) for v, g in cells.groupby("variant", sort=False)}
    if len({tuple(f) for f in folds.values()}) <= 1:
        return {v: v for v in folds}
    return {v: f"{v} (fold{'s' if len(f) > 1 else ''} {', '.join(map(str, f))})" for v, f in folds.items()}


def _ticks(summary: pd.DataFrame) -> dict[int, str]:
    """x ticks of the figure: each size's answers, and one tick for "all" — whose answers differ a little between
    variants measured on other folds (a mean over five folds beside fold 0 alone), so it is labelled "≈n" then."""
    ticks = {round(float(r["n_train"])): str(int(r["size"])) for r in summary.to_dict(orient="records") if r["size"] != ALL}
    full = sorted({round(float(n)) for n in summary.loc[summary["size"] == ALL, "n_train"]})
    if full:
        n = round(float(np.mean(full)))
        ticks[n] = f"{'' if len(full) == 1 else '≈'}{n}\n(all)"
    return dict(sorted(ticks.items()))


def plot_curve(cells: pd.DataFrame, path: str | Path, *, reach: dict[str, dict[str, Any] | None] | None = None,
               title: str = "Learning curve") -> Path:
    """curve.png: QWK and T-Acc against labelled answers (log scale), one line per variant (mean over folds ×
    repeats, band ± 1 s.d.), the majority-class baseline dashed, and where each variant reaches 90 % of its
    full-data QWK (dotted). Written atomically."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    s = summarize_curve(cells)
    names = _variant_labels(cells)
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.4))
    for ax, metric, label in ((axes[0], "qwk", "QWK"), (axes[1], "t_acc", "T-Acc")):
        for variant, g in s.groupby("variant", sort=False):
            model, _, encoder = str(variant).partition("-")  # reccbm-frozen: reccbm's colour, its own line and marker
            colour = _COLOURS.get(model, "#7f7f7f")
            style, marker = _ENCODER_STYLE.get(encoder, ("-", "o"))
            x, y, sd = g["n_train"].to_numpy(), g[metric].to_numpy(), g[f"{metric}_sd"].to_numpy()
            ax.plot(x, y, marker=marker, ls=style, color=colour, label=names.get(str(variant), str(variant)))
            ax.fill_between(x, y - sd, y + sd, color=colour, alpha=0.15, lw=0)
            r = (reach or {}).get(str(variant))
            if metric == "qwk" and r:
                ax.axhline(r["target"], color=colour, ls=":", lw=0.9)
                ax.plot([r["n_estimate"]], [r["target"]], marker="v", color=colour, ms=8,
                        label=f"{variant}: 90 % of full QWK at ≈{r['n_estimate']}")
        base = s.groupby("size", sort=False).agg(n=("n_train", "mean"), v=(f"majority_{metric}", "mean"))
        base = base.sort_values("n")
        ax.plot(base["n"], base["v"], ls="--", color="#7f7f7f", label="majority class")
        ax.set_xscale("log")
        ticks = _ticks(s)
        ax.set_xticks(list(ticks), list(ticks.values()))
        ax.minorticks_off()
        ax.set_xlabel("labelled answers (train + dev)")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, fontsize=8, loc="lower center", ncol=min(4, len(labels)), frameon=False)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout(rect=(0, 0.06 * math.ceil(len(labels) / 4), 1, 1))
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".png", dir=p.parent)
    os.close(fd)
    try:
        fig.savefig(tmp, format="png", dpi=110)
        publish(tmp, p)  # umask-respecting mode, then the rename
    finally:
        plt.close(fig)
        if os.path.exists(tmp):
            os.unlink(tmp)
    return p


# ---------------------------------------------------------------------------- the command's entry point
def run_learning_curve(
    *,
    benchmark: str | None,
    data: str | Path | None,
    rubric: str | None,
    out: str | Path,
    sizes: str,
    variants: str = ",".join(VARIANTS),
    folds: int = 5,
    fold: str | None = None,
    data_dir: str | Path | None = None,
    agreement: str | Path | None = None,
    config: str | Path | None = None,
    **kwargs: Any,
) -> CurveResult:
    """``rubrictool learning-curve``: a benchmark (Mohler's concept-label passes) or an adjudicated table + rubric;
    sizes, variants and folds as the command gives them (comma lists); flat training options (see
    :func:`curve_overrides`) over a YAML config; the rest goes to :func:`learning_curve`."""
    flat = {k: kwargs.pop(k) for k in list(kwargs) if k in _FLAT}
    overrides = curve_overrides(config, **flat)
    size_list = parse_sizes(sizes)
    variant_list = [v.strip() for v in variants.split(",") if v.strip()]
    fold_ids = parse_folds(fold, folds)
    if (benchmark is None) == (data is None):
        raise TrainError("a learning curve needs one data source: a benchmark or an adjudicated table",
                         hint="give either --benchmark NAME or --data FILE with --rubric")
    if benchmark is not None:
        from rubrictool.pipeline import benchmark_table
        from rubrictool.tables import LLM_PASSES_NOTE

        if agreement is not None:
            raise TrainError("a benchmark builds its agreement from the concept-label passes", hint="--agreement goes with --data")
        rb, table, agr = benchmark_table(benchmark, data_dir)
        return learning_curve(rb, table, out, sizes=size_list, variants=variant_list, folds=folds, fold_ids=fold_ids,
                              overrides=overrides, agreement=agr, notes=[LLM_PASSES_NOTE], **kwargs)
    if rubric is None:
        raise TrainError("an adjudicated table needs the rubric its concept columns follow", hint="add --rubric NAME|FILE")
    from rubrictool.adjudicate.outputs import trainable_rows

    rb = load_rubric(rubric)
    # items no reviewer or model labelled stay in the adjudicated table, unlabelled: left out here, as train does
    table, unlabelled = trainable_rows(read_table(str(data)), rb, str(data))
    notes = None
    if unlabelled:
        notes = [(f"{data}: skipping {len(unlabelled)} unlabelled row(s) (no reviewer or model labelled them: "
                 f"{', '.join(unlabelled[:5])}{' ...' if len(unlabelled) > 5 else ''})")]
        warn(kwargs.get("progress"), notes[0])
    agr_path = Path(agreement) if agreement is not None else Path(str(data)).parent / "agreement.json"
    return learning_curve(rb, table, out, sizes=size_list, variants=variant_list, folds=folds, fold_ids=fold_ids,
                          overrides=overrides, agreement=agr_path if agr_path.is_file() else None, notes=notes,
                          **kwargs)
