"""Grading new responses with a trained run (``rubrictool grade``): torch, ONNX Runtime or int8.

:func:`load_grader` reads a run directory written by :mod:`rubrictool.train` (model.safetensors +
model.json); :func:`grade_loaded` encodes the items and returns, per item, the grade, its probability
and each concept's level, expected score, μ_post and contribution — the decision trace of REC-CBM.
"""

from __future__ import annotations

import hashlib
import logging
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd
import torch

import reccbm
from reccbm import Predictions, ReccbmError
from reccbm.normalise import without_signature
from reccbm.onnx_encoder import OnnxExportError, require_onnx, use_onnx_encoder
from rubrictool.errors import DataError, TrainError
from rubrictool.flags import EMPTY_FLAG, Profile, flag_frame
from rubrictool.io import read_table
from rubrictool.progress import Progress, ProgressFn, truncation_message, warn
from rubrictool.review_queue import level_entropy, uncertainty_score
from rubrictool.tables import check_ids
from rubrictool.train.predictions import predictions_frame

__all__ = ["ENGINES", "check_finite", "check_unique_ids", "empty_responses", "grade_items", "grade_loaded",
           "grader_predictions", "grading_device", "load_grader", "onnx_cache_dirs", "parse_overrides"]

log = logging.getLogger("rubrictool.grade")


def check_finite(preds: Predictions, ids: list[str]) -> None:
    """Refuse predictions whose probabilities are not numbers (NaN, inf): damaged weights or a diverged training give
    them, and the argmax of NaN reads as grade 0 or level 0. One line naming how many answers and the first."""
    bad = ~np.isfinite(preds.grade_probs).all(axis=1)
    if preds.p_hat is not None:
        bad |= ~np.isfinite(preds.p_hat.reshape(len(preds.p_hat), -1)).all(axis=1)
    if bad.any():
        first = ids[int(np.flatnonzero(bad)[0])] if ids else "?"
        raise TrainError(f"the model gives probabilities that are not numbers (NaN) for {int(bad.sum())} of {len(bad)} "
                         f"answers (first: {first}): its weights are damaged, or its training diverged; no grade is "
                         "given",
                         hint="check the run with --verify, or train it again")


def grade_items(
    run_dir: str | Path,
    items: pd.DataFrame,
    batch_size: int = 64,
    progress: ProgressFn | None = None,
    int8: bool = False,
    engine: str = "torch",
    device: str = "auto",
) -> pd.DataFrame:
    """Grade new responses with a trained run: per item the predicted grade and its probability,
    each concept's level and expected score (rubric scale), μ_post and contribution W_{ŷ,k}·μ_post,k.
    int8: quantise the encoder's Linear layers for faster CPU inference (slightly different numbers).
    engine: ``torch`` or ``onnx`` (the encoder runs in ONNX Runtime; see :func:`load_grader`). device: where the
    torch model computes (:func:`grading_device`)."""
    return grade_loaded(load_grader(run_dir, int8, engine), items, batch_size, progress,
                        device=grading_device(device, int8, engine))


def grading_device(device: str, int8: bool = False, engine: str = "torch") -> str:
    """Where grading computes: ``device`` (auto: CUDA when present; cpu) for the torch engine in float32; the CPU for
    int8 and the ONNX engine, which run there only."""
    return "cpu" if int8 or engine == "onnx" else device


ENGINES = ("torch", "onnx")


def onnx_cache_dirs(run_dir: str | Path) -> list[Path]:
    """Where ``--engine onnx`` keeps the exported encoder: ``RUN/onnx``, else (read-only run directory)
    ``~/.cache/rubrictool/onnx/<key>`` ($XDG_CACHE_HOME is honoured), else the temp folder; <key>
    names the run's absolute path."""
    run = Path(run_dir)
    key = hashlib.sha256(str(run.resolve()).encode()).hexdigest()[:16]
    home = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return [run / "onnx", home / "rubrictool" / "onnx" / key, Path(tempfile.gettempdir()) / "rubrictool-onnx" / key]


def load_grader(run_dir: str | Path, int8: bool = False, engine: str = "torch") -> reccbm.Grader:
    """A run's :class:`reccbm.Grader` (:meth:`reccbm.Grader.load`), ready for :func:`grade_loaded`.

    engine="onnx" runs the encoder in ONNX Runtime (the concept bottleneck, LCEC and grade head stay
    in torch): exported on first use and cached (see :func:`onnx_cache_dirs`), rebuilt when
    model.safetensors changes; with int8, a dynamically quantised copy of that export."""
    if engine not in ENGINES:
        raise TrainError(f"unknown engine {engine!r}; use {' or '.join(ENGINES)}")
    if engine == "onnx":
        try:
            require_onnx()  # an optional extra: said before the run is loaded
        except ReccbmError as exc:
            raise TrainError(str(exc), hint="or use --engine torch") from None
    from rubrictool.train.runs import open_run

    open_run(run_dir)  # refuses a k-fold parent, a half-written or mixed run directory
    try:
        grader = reccbm.Grader.load(run_dir)
    except ReccbmError as exc:
        raise TrainError(str(exc)) from None
    model = grader.model_
    if engine == "onnx":
        try:
            use_onnx_encoder(model, run_dir, int8, onnx_cache_dirs(run_dir))
        except OnnxExportError as exc:
            log.info("ONNX export failed: %s", exc)
            raise TrainError(f"the ONNX engine does not support {exc.model_type}", hint="use --engine torch") from None
        except ReccbmError as exc:
            raise TrainError(str(exc), hint="pass --engine torch") from None
        except OSError as exc:  # e.g. the temp folder is full: name the file, not the engine
            raise TrainError(f"the ONNX engine could not write {exc.filename or 'its files'}: "
                             f"{exc.strerror or exc} (OSError errno {exc.errno})",
                             hint="free space or pass --engine torch") from None
    elif int8:
        reccbm.quantize_encoder(model)
    return grader


TEXT_COLUMNS = reccbm.TEXT_COLUMNS  # the text columns of an item table (reccbm.encode_table reads them)


def model_inputs(
    tokenizer: Any, df: pd.DataFrame, max_len: int, truncated: list[int] | None = None, *, question: bool = True,
    normalise: bool = False, lexicon: tuple[str, ...] = (),
) -> list[dict[str, list[int]]]:
    """Token features of x = (q, r, a) for every row of an item table (:func:`reccbm.encode_table`): the question,
    the reference answer and the context joined as r, and the response. The one input rule that training, grading
    and the report share; a missing column or an empty cell is empty text. ``truncated`` receives the positions
    of the inputs cut to ``max_len`` tokens; ``question`` is the model's ``question_input`` (False: the question left
    out); ``normalise`` and ``lexicon`` the model's (:mod:`reccbm.normalise`)."""
    return reccbm.encode_table(tokenizer, df, max_len, truncated, question=question, normalise=normalise,
                               lexicon=lexicon)


def inputs_for(
    model: reccbm.Model, tokenizer: Any, df: pd.DataFrame, truncated: list[int] | None = None
) -> list[dict[str, list[int]]]:
    """:func:`model_inputs` as a trained model reads them: its ``max_len``, ``question_input``, ``normalise`` and
    ``lexicon``."""
    c = model.config
    return model_inputs(tokenizer, df, c.max_len, truncated, question=c.question_input, normalise=c.normalise,
                        lexicon=c.lexicon)


def grade_loaded(
    grader: reccbm.Grader,
    items: pd.DataFrame,
    batch_size: int = 64,
    progress: ProgressFn | None = None,
    overrides: str | dict[str, int] | None = None,
    profile: Profile | None = None,
    flags: bool = True,
    device: str | None = None,
    precision: str = "no",
    review: Review | None = None,
) -> pd.DataFrame:
    """:func:`grade_items` with a model already loaded by :func:`load_grader` (``device``: where the model computes,
    see :func:`grading_device`; None: where it is, the CPU as loaded; ``precision`` "bf16": autocast on a GPU, off by
    default: not measured yet); ``progress`` counts the
    items graded (task ``grading``); ``overrides`` ("FC=3,CC=1" or {key: level}) sets those concepts for
    every response before the frozen grade path runs. ``flags``: add the ``flags`` column
    (:mod:`rubrictool.flags`; the two flags that need the training data only with a ``profile``). ``review``
    (:func:`read_review`): each answer's question shifted by its reviewed answers, the reviewed answers' levels set;
    adds the columns ``grade_shift`` (the question's shift on the grade's logit: contributions + grade_bias +
    grade_shift = grade_logit) and ``review``."""
    model, meta = grader.model_, grader.rubric.as_meta()
    if "response" not in items.columns:
        raise DataError("the items to grade have no 'response' column")
    if len(items) == 0:
        raise DataError("no items to grade: the table is empty")
    df = items.reset_index(drop=True).copy()
    df["id"] = df["id"].astype(str) if "id" in df.columns else [str(i) for i in range(len(df))]
    for col in TEXT_COLUMNS:
        df[col] = df[col].fillna("").astype(str) if col in df.columns else ""
    check_unique_ids(df)
    empty = empty_responses(df)
    if empty.any():
        return _grade_nonempty(grader, df, empty, batch_size, progress, overrides, profile, flags, device, precision,
                               review)
    cut: list[int] = []
    on_batch = None
    if progress is not None:
        report, done = progress, [0]

        def on_batch(n: int) -> None:
            done[0] += n
            report(Progress("grading", done[0], len(df)))

    preds = grader.predictions(df, batch_size=batch_size, on_batch=on_batch, device=device, precision=precision,
                               truncated=cut)
    if cut:
        warn(progress, truncation_message(len(cut), len(df), model.config.max_len))
    if overrides:
        preds = _override(model, meta, preds, overrides)
    shift, review_notes = None, None
    if review is not None:
        preds, shift, review_notes = _apply_review(model, preds, df, review)
    check_finite(preds, list(df["id"]))
    out = predictions_frame(model, meta, preds, list(df["id"]))
    if shift is not None:
        out["grade_shift"], out["review"] = shift, review_notes
    if flags:
        truncated = np.zeros(len(df), dtype=bool)
        truncated[cut] = True
        # the flags judge the text the model read: with model.normalise a slip it corrected is no unseen word
        read = df.assign(response=reccbm.responses_as_read(grader.tokenizer_, df, model.config.normalise,
                                                           model.config.lexicon))
        out.insert(3, "flags", flag_frame(read, out, list(meta["concept_keys"]), profile, truncated.tolist()))
    return out


def grader_predictions(
    run_dir: str | Path, items: pd.DataFrame, name: str | None = None, batch_size: int = 64,
    progress: ProgressFn | None = None,
) -> pd.DataFrame:
    """A trained run's concept levels as a PredictionTable (``model`` = the run's folder name unless
    ``name``; ``source`` = model): one row per item and concept with ``level``, ``p_level`` (its
    probability), ``entropy`` (that concept's normalised level entropy) and per item ``uncertainty``
    (:func:`uncertainty_score`, σ_k²-weighted when the run has LCEC) and ``sigma2_weighted``."""
    grader = load_grader(run_dir)
    model, meta = grader.model_, grader.rubric.as_meta()
    if model.config.plm:
        raise TrainError(f"{run_dir} is a PLM run: it predicts grades only, no concept levels to pre-annotate with")
    graded = grade_loaded(grader, items, batch_size, progress)
    keys, smin = list(meta["concept_keys"]), int(meta["scale"][0])
    L = int(model.config.num_levels)
    # (N, K, L)
    probs = np.stack([graded[[f"{k}_p{smin + j}" for j in range(L)]].to_numpy(float) for k in keys], axis=1)
    sigma2 = reccbm.reliability(model)["sigma2"] if isinstance(model,
                                                               reccbm.RecCBM) and model.lcec is not None else None
    unc = uncertainty_score(probs, sigma2)  # (N,)
    ent = level_entropy(probs)  # (N, K)
    levels = probs.argmax(axis=2) + smin  # (N, K)
    N, K = levels.shape
    return pd.DataFrame({
        "item": np.repeat(graded["id"].astype(str).to_numpy(), K),
        "model": name or Path(run_dir).resolve().name,
        "concept": np.tile(np.asarray(keys, dtype=object), N),
        "level": levels.reshape(-1),
        "evidence": "",
        "raw_ok": True,
        "source": "model",
        "p_level": probs.max(axis=2).reshape(-1),
        "entropy": ent.reshape(-1),
        "uncertainty": np.repeat(unc, K),
        "sigma2_weighted": sigma2 is not None,
    })


def parse_overrides(spec: str | None, keys: list[str], scale: tuple[int, int]) -> dict[str, int]:
    """``"FC=3,CC=1"`` → {"FC": 3, "CC": 1} on the rubric scale; a clear error for an unknown key or level."""
    out: dict[str, int] = {}
    for part in (spec or "").replace(";", ",").split(","):
        if not part.strip():
            continue
        key, eq, value = part.partition("=")
        key = key.strip()
        if not eq or key not in keys:
            raise DataError(f"--set {part.strip()!r}: use KEY=LEVEL with a concept key of the rubric "
                            f"({', '.join(keys)})")
        try:
            level = int(value)
        except ValueError:
            raise DataError(f"--set {part.strip()!r}: the level must be an integer {scale[0]}..{scale[1]}") from None
        if not scale[0] <= level <= scale[1]:
            raise DataError(f"--set {part.strip()!r}: level {level} is outside the rubric scale {scale[0]}..{scale[1]}")
        if key in out and out[key] != level:
            raise DataError(f"--set {key}: set twice, to {out[key]} and {level}; give each concept one level")
        out[key] = level
    return out


def _override(model: reccbm.Model, meta: dict[str, Any], preds: Predictions, spec: str | dict[str, int]) -> Predictions:
    keys, (lo, hi) = list(meta["concept_keys"]), meta["scale"]
    if model.config.plm:
        raise DataError("--set needs concepts: this is a PLM run")
    sets = parse_overrides(spec, keys, (lo, hi)) if isinstance(spec, str) else spec
    levels = np.zeros((len(preds.grade_probs), len(keys)), dtype=np.int64)
    replace = np.zeros_like(levels, dtype=bool)
    for key, level in sets.items():
        levels[:, keys.index(key)], replace[:, keys.index(key)] = level - lo, True
    return reccbm.override(model, preds, levels, replace)


# ---------------------------------------------------------------------------- a few reviewed answers per new question
# On questions it never trained on, the reader reads a question as a whole too high or too low (docs/results.md,
# "A few reviewed answers of a new question"). Given some of the question's answers with their levels (an expert's
# review, or the LLM panel run on a few answers), the question's level shift δ_k per concept and, where they have
# grades, its grade shift are fitted on them and applied to the question's other answers.

REVIEW_STRENGTH = 2.0
"""Prior strength of a question's level shift (``reccbm.fit_level_tilt``): fewer reviewed answers move it less."""
REVIEW_GRADE_STRENGTH = 1.0
"""Prior strength of a question's grade shift, fitted after the level shift on the reviewed answers' grades."""


@dataclass
class Review:
    """What ``grade --reviewed`` applies, per question text (stripped) of the reviewed answers: the level shift δ (K,)
    and the grade shift ε (added to the logit of grade g as ε·g) for questions the run did not train on; the reviewed
    answers' own levels by id (K,; 0-based, −1 where not given); the questions left as read because the run trained
    on them."""

    shifts: dict[str, npt.NDArray[np.float64]]
    grade_shifts: dict[str, float]
    counts: dict[str, int]
    levels: dict[str, npt.NDArray[np.int64]]
    trained: list[str]


def _reviewed_table(df: pd.DataFrame, keys: list[str], scale: tuple[int, int], grades: tuple[int, int],
                    source: str, items: pd.DataFrame | None = None,
                    ) -> tuple[pd.DataFrame, npt.NDArray[np.int64], npt.NDArray[np.int64] | None]:
    """The reviewed answers' table checked: (table, levels (N, K) 0-based with −1 where a cell is empty, grades (N,)
    0-based with −1 where empty, or None without a grade column), rows with no level left out (not reviewed). A row
    whose id is one of ``items`` (the answers to grade) takes its question and texts from there where it has none.
    Errors name the file, the row and the column."""
    if "id" not in df.columns:
        raise DataError(f"{source}: no 'id' column (the reviewed answers need an id, their concept levels and, for an "
                        "answer not in --items, its question and response); found "
                        f"{', '.join(map(str, df.columns)) or 'none'}")
    given = [k for k in keys if k in df.columns]
    if not given:
        raise DataError(f"{source}: no concept column; the run's concepts are {', '.join(keys)} (a column per concept, "
                        "its reviewed level in each row)")
    df = df.reset_index(drop=True).copy()
    df["id"] = df["id"].astype(str)
    dup = df["id"].duplicated()
    if dup.any():
        raise DataError(f"{source}: row {int(np.flatnonzero(dup.to_numpy())[0]) + 1}: duplicate id "
                        f"{df['id'][dup].iloc[0]!r}; give each reviewed answer once")
    for col in TEXT_COLUMNS:
        df[col] = df[col].fillna("").astype(str) if col in df.columns else ""
    if items is not None and "id" in items.columns:
        known = items.assign(id=items["id"].astype(str)).drop_duplicates("id").set_index("id")
        for col in TEXT_COLUMNS:
            if col in known.columns:
                there = df["id"].map(known[col].fillna("").astype(str)).fillna("")
                df[col] = df[col].where(df[col].str.strip() != "", there)

    def ints(col: str, lo: int, hi: int, what: str) -> npt.NDArray[np.int64]:
        raw = df[col]
        v = pd.to_numeric(raw, errors="coerce")
        empty = raw.isna() | raw.astype(str).str.strip().eq("")
        bad = ~empty & (v.isna() | (v != v.round()) | (v < lo) | (v > hi))
        if bad.any():
            pos = int(np.flatnonzero(bad.to_numpy())[0])
            cell = raw.iloc[pos]
            cell = repr(cell) if isinstance(cell, str) else f"{float(cell):g}"
            raise DataError(f"{source}: row {pos + 1} (id {df['id'].iloc[pos]}): {col} = {cell} is not "
                            f"{what} ({lo}..{hi}); leave the cell empty where it was not reviewed")
        return np.where(empty.to_numpy(), -1, v.fillna(lo).to_numpy().astype(np.int64) - lo)

    levels = np.full((len(df), len(keys)), -1, dtype=np.int64)
    for k in given:
        levels[:, keys.index(k)] = ints(k, scale[0], scale[1], "a level of the rubric")
    grade = ints("grade", grades[0], grades[1], "a grade of the rubric") if "grade" in df.columns else None
    labelled = (levels >= 0).any(axis=1)  # a row with no level (an answer nobody labelled) was not reviewed
    for col in ("question", "response"):
        blank = (df[col].str.strip() == "").to_numpy() & labelled
        if blank.any():
            pos = int(np.flatnonzero(blank)[0])
            raise DataError(f"{source}: row {pos + 1} (id {df['id'].iloc[pos]}): no {col}, and its id is not one of "
                            f"--items' answers; give the {col} in the reviewed table, or review an answer of --items")
    df = df.iloc[np.flatnonzero(labelled)].reset_index(drop=True)
    return df, levels[labelled], grade[labelled] if grade is not None else None


def read_review(grader: reccbm.Grader, path: str | Path, trained_questions: set[str],
                batch_size: int = 64, device: str | None = None, strength: float = REVIEW_STRENGTH,
                grade_strength: float = REVIEW_GRADE_STRENGTH, items: pd.DataFrame | None = None) -> Review:
    """Read the reviewed answers in ``path`` (CSV/JSONL/Parquet: id, a column per concept with its reviewed level,
    optionally grade; question, response and reference as in --items, or taken from ``items`` for an id there) with the
    run's reader and fit, per question the run did not train on (``trained_questions``: stripped question texts), the
    shifts :class:`Review` holds."""
    model, meta = grader.model_, grader.rubric.as_meta()
    if model.config.plm:
        raise DataError("--reviewed needs concepts: this is a PLM run")
    keys = list(meta["concept_keys"])
    df, levels, grade = _reviewed_table(read_table(path), keys, tuple(meta["scale"]), tuple(meta["grade"]), str(path),
                                        items)
    if not len(df):
        raise DataError(f"{path}: no concept level is given in any row; fill in the reviewed levels")
    preds = grader.predictions(df, batch_size=batch_size, device=device)
    assert preds.p_hat is not None
    questions = df["question"].str.strip().to_numpy()
    review = Review({}, {}, {}, {i: levels[n] for n, i in enumerate(df["id"])}, [])
    for q in dict.fromkeys(questions):
        rows = np.flatnonzero(questions == q)
        if q in trained_questions:
            review.trained.append(q)
            continue
        delta = reccbm.fit_level_tilt(torch.as_tensor(preds.p_hat[rows]), torch.as_tensor(levels[rows]), strength)
        review.shifts[q], review.counts[q] = delta.numpy().astype(np.float64), len(rows)
        review.grade_shifts[q] = 0.0
        if grade is not None and (grade[rows] >= 0).any():
            moved = reccbm.shift_levels(model, reccbm.Predictions(preds.grade_probs[rows], preds.p_hat[rows]),
                                        np.tile(review.shifts[q], (len(rows), 1)))
            eps = reccbm.fit_level_tilt(torch.as_tensor(moved.grade_probs[:, None]),
                                        torch.as_tensor(grade[rows][:, None]), grade_strength)
            review.grade_shifts[q] = float(eps[0])
    return review


def review_summary(review: Review, items: pd.DataFrame, knows_training: bool) -> str:
    """One line on what --reviewed does to ``items``: questions shifted, answers moved, questions left as read."""
    q = items["question"].fillna("").astype(str).str.strip() if "question" in items.columns else pd.Series("",
        index=items.index)
    moved = int(q.isin(set(review.shifts)).sum())
    n_rev = sum(review.counts.values())
    parts = []
    if review.shifts:
        parts.append(f"{len(review.shifts)} question(s) shifted by their {n_rev} reviewed answers "
                     f"({moved} of the {len(items)} answers to grade are theirs)")
    if review.trained:
        parts.append(f"{len(review.trained)} question(s) the run trained on are left as read (their reviewed answers "
                     "get their levels)")
    line = "--reviewed: " + "; ".join(parts)
    if not knows_training:
        line += "; the run's training table is not at hand, so every reviewed question is shifted"
    return line


def trained_questions(run_dir: str | Path) -> set[str] | None:
    """The stripped question texts of the answers the run trained on (its table's training split), or None when the
    run's table is not at hand."""
    from rubrictool.train.runs import open_run

    run = open_run(run_dir)
    try:
        table = run.load_table()
    except DataError:
        return None
    train = {str(i) for i in run.split.get("train", [])}
    if "question" not in table.columns or not train:
        return None
    rows = table[table["id"].astype(str).isin(train)]
    return set(rows["question"].fillna("").astype(str).str.strip())


def _apply_review(model: reccbm.Model, preds: Predictions, df: pd.DataFrame, review: Review
                  ) -> tuple[Predictions, npt.NDArray[np.float64], list[str]]:
    """The predictions with each answer's question shifts applied, then each reviewed answer's reviewed levels set;
    also the grade shift ε·ŷ of each answer (0 where none) and its ``review`` note."""
    K = len(next(iter(review.levels.values()))) if review.levels else 0
    questions = df["question"].astype(str).str.strip().to_numpy()
    ids = df["id"].astype(str).to_numpy()
    delta = np.zeros((len(df), K))
    eps = np.zeros(len(df))
    note = [""] * len(df)
    for i, q in enumerate(questions):
        if q in review.shifts:
            delta[i], eps[i] = review.shifts[q], review.grade_shifts[q]
            note[i] = f"question shifted by {review.counts[q]} reviewed answers"
        elif q in review.trained:
            note[i] = "question trained on: not shifted"
    out = reccbm.shift_levels(model, preds, delta) if delta.any() else preds
    seen = np.array([i in review.levels for i in ids])
    if seen.any():
        lv = np.stack([review.levels.get(i, np.full(K, -1)) for i in ids])
        replace = lv >= 0
        out = reccbm.override(model, out, np.where(replace, lv, 0), replace)
        for i in np.flatnonzero(seen):
            note[i] = "reviewed: its reviewed levels set"
    assert out.grade_logits is not None
    g = np.arange(out.grade_logits.shape[1])
    logits = out.grade_logits + eps[:, None] * g  # ε·g on every grade's logit: the question's grade shift
    probs = np.exp(logits - logits.max(1, keepdims=True))
    out = Predictions(probs / probs.sum(1, keepdims=True), out.p_hat, out.c_hat, out.mu_post, logits, model.decision)
    return out, eps * out.grades, note


# ---------------------------------------------------------------------------- input policy
# What grade refuses or leaves ungraded, before any model runs (docs/integrity.md, "grade's input policy").


def empty_responses(df: pd.DataFrame) -> npt.NDArray[np.bool_]:
    """Per row, whether the response is empty, whitespace only, null or nothing but the student's signature (a name or
    id, :func:`reccbm.normalise.without_signature`): such a row gets no model grade (the model would grade nothing as
    if it were an answer) and the ``empty`` flag."""
    if "response" not in df.columns:
        return np.zeros(len(df), dtype=bool)
    resp = df["response"]
    unsigned = resp.astype(str).map(lambda r: without_signature(r).strip())
    out: npt.NDArray[np.bool_] = (resp.isna() | unsigned.eq("")).to_numpy(dtype=bool)
    return out


def check_unique_ids(items: pd.DataFrame, source: str = "the items to grade") -> None:
    """A table with an empty ``id``, or an ``id`` used twice, is refused, naming the rows (the line a
    spreadsheet shows, the header being line 1) and the ids (a grade must belong to one answer):
    :func:`rubrictool.tables.check_ids`."""
    check_ids(items, source,
              empty_fix="give every answer its own id, or leave the id column out to have ids made")


def _grade_nonempty(
    grader: reccbm.Grader, df: pd.DataFrame, empty: npt.NDArray[np.bool_],
    batch_size: int, progress: ProgressFn | None, overrides: str | dict[str, int] | None,
    profile: Profile | None, flags: bool, device: str | None = None, precision: str = "no",
    review: Review | None = None,
) -> pd.DataFrame:
    """:func:`grade_loaded` of the rows with a response; the empty ones keep their place with no grade
    (every model column empty) and the ``empty`` flag."""
    n_empty = int(empty.sum())
    warn(progress, f"{n_empty} of {len(df)} responses are empty: not graded, flagged 'empty'")
    if n_empty < len(df):
        graded = grade_loaded(grader, df[~empty], batch_size, progress, overrides, profile, flags, device, precision,
                              review)
    else:
        graded = pd.DataFrame({"id": pd.Series(dtype=object), "grade": pd.Series(dtype=float),
                               "grade_prob": pd.Series(dtype=float)})
        if flags:
            graded["flags"] = pd.Series(dtype=object)
    graded.index = np.flatnonzero(~empty)
    ints = [c for c in graded.columns if pd.api.types.is_integer_dtype(graded[c])]
    graded = graded.astype(dict.fromkeys(ints, "Int64"))  # a grade stays 3, not 3.0, beside the empty ones
    blank = pd.DataFrame({"id": df.loc[empty, "id"]}, index=np.flatnonzero(empty))
    if flags:
        blank["flags"] = EMPTY_FLAG
    out = pd.concat([graded, blank]).sort_index().reset_index(drop=True)
    return out[graded.columns]
