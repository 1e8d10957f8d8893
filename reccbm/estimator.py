"""REC-CBM as an estimator on raw text: :class:`Grader` with ``fit``, ``predict``, ``predict_proba``, ``concepts``,
``save`` and ``load``.

The building blocks below it take token ids and 0-based labels (:func:`reccbm.fit`); a :class:`Grader` owns its
tokenizer and recipe, takes texts and labels on the rubric's own scales, and checks the labels before training::

    rubric = reccbm.Rubric([reccbm.Concept("correct", "States the right idea.", ("no", "partly", "yes"))],
                           levels=(0, 2), grades=(0, 3))
    grader = reccbm.Grader(rubric).fit(questions, references, responses, concept_levels, grades)
    grader.predict(questions, references, new_responses)  # grades on the rubric's grade scale
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from reccbm.checkpoint import load_checkpoint, save_checkpoint
from reccbm.config import JointConfig, StageIConfig, StageIIConfig, config_from_dict
from reccbm.data import EncodedItems, check_labels, encode_inputs, load_tokenizer
from reccbm.errors import ReccbmError
from reccbm.fit import Recipe, fit
from reccbm.inference import Predictions, predict
from reccbm.model import Model, default_backbone
from reccbm.recipes import PRESETS, contrast_concepts, recipe
from reccbm.stages import Event

__all__ = ["Concept", "Grader", "Rubric"]


@dataclass(frozen=True)
class Concept:
    """One rubric concept: what the grader reads from a rubric beyond the labels."""

    key: str  # its column in fit's concept table (a DataFrame's column name)
    definition: str = ""  # what the concept asks of an answer; with the anchors, it initialises the concept's query
    anchors: tuple[str, ...] = ()  # what each level means, lowest first: none, or one per level
    name: str = ""  # a readable name; "" = key
    reference_is_top: bool = False  # the reference answer is at its top level (examples across questions, Stage I)
    off_topic_is_bottom: bool = False  # an answer to another question is at its bottom level (the same)

    def __post_init__(self) -> None:
        object.__setattr__(self, "anchors", tuple(self.anchors))

    def text(self) -> str:
        """The text the "rubric" query initialisation embeds: name, definition and the level anchors."""
        return f"{self.name or self.key}. {self.definition} " + " ".join(f"{a}." for a in self.anchors)


@dataclass(frozen=True)
class Rubric:
    """The concepts and the two ordinal scales: concept levels ``levels[0]..levels[1]`` (shared by every concept)
    and grades ``grades[0]..grades[1]``. Labels and predictions are on these scales."""

    concepts: tuple[Concept, ...]
    levels: tuple[int, int] = (0, 2)  # lowest and highest concept level
    grades: tuple[int, int] = (0, 5)  # lowest and highest grade

    def __post_init__(self) -> None:
        object.__setattr__(self, "concepts", tuple(self.concepts))
        object.__setattr__(self, "levels", (int(self.levels[0]), int(self.levels[1])))
        object.__setattr__(self, "grades", (int(self.grades[0]), int(self.grades[1])))
        if not self.concepts:
            raise ReccbmError("a rubric needs at least one concept")
        if len(set(self.keys)) != len(self.keys):
            raise ReccbmError(f"concept keys repeat: {self.keys}")
        for what, (lo, hi) in (("levels", self.levels), ("grades", self.grades)):
            if hi <= lo:
                raise ReccbmError(f"rubric {what} {lo}..{hi}: the highest must be above the lowest")
        n = self.levels[1] - self.levels[0] + 1
        for c in self.concepts:
            if c.anchors and len(c.anchors) != n:
                raise ReccbmError(f"concept {c.key!r} has {len(c.anchors)} anchors for {n} levels")

    @property
    def keys(self) -> list[str]:
        return [c.key for c in self.concepts]

    def as_meta(self) -> dict[str, Any]:
        """What a saved :class:`Grader` stores of its rubric (the keys rubrictool's runs use, plus the concepts)."""
        return {"concept_keys": self.keys, "concept_names": [c.name or c.key for c in self.concepts],
                "scale": list(self.levels), "grade": list(self.grades),
                "concepts": [asdict(c) | {"anchors": list(c.anchors)} for c in self.concepts]}

    @classmethod
    def from_meta(cls, meta: dict[str, Any]) -> Rubric:
        """The rubric of a saved model.json: a :class:`Grader`'s, or a rubrictool run's (keys and names only)."""
        try:
            if "concepts" in meta:
                concepts = [Concept(**c) for c in meta["concepts"]]
            else:
                concepts = [Concept(k, name=n) for k, n in zip(meta["concept_keys"], meta["concept_names"])]
            scale, grade = meta["scale"], meta["grade"]
            return cls(tuple(concepts), (int(scale[0]), int(scale[1])), (int(grade[0]), int(grade[1])))
        except (KeyError, TypeError, ValueError) as exc:
            raise ReccbmError(f"model.json does not describe a rubric ({exc!r})") from None


def _texts(values: Iterable[Any] | None, what: str, n: int | None) -> list[str]:
    """Texts as a list of str: a missing value (None, NaN) is empty text; the length must be ``n`` when given."""
    out = [] if values is None else ["" if v is None or (isinstance(v, float) and math.isnan(v)) else str(v)
                                     for v in values]
    if values is None and n is not None:
        out = [""] * n
    if n is not None and len(out) != n:
        raise ReccbmError(f"{what}: {len(out)} texts for {n} answers")
    return out


@dataclass
class Grader:
    """REC-CBM on raw text (encoder -> concept bottleneck -> LCEC -> grade head), trained by a named recipe.

    ``recipe`` "default" is the recommended recipe, "plain" the one before its concept reader, "paper" the paper's
    (Algorithm 1: Stage I, then Stage II); :data:`reccbm.recipes.PRESETS` says what each sets. ``overrides``
    ({section: {field: value}}, sections model, stage1, joint, stage2) go on top, e.g. ``{"stage1": {"epochs": 10}}`` or ``{"model": {"plm": True}}`` for the
    PLM baseline. ``fit`` holds out ``dev_size`` of the answers (stratified by grade) to select epochs on.
    """

    rubric: Rubric
    recipe: str = "default"  # a key of reccbm.recipes.PRESETS
    backbone: str = ""  # Hugging Face name or local path; "" = the offline all-MiniLM-L6-v2
    overrides: dict[str, dict[str, Any]] = field(default_factory=dict)  # recipe fields set on top of the recipe
    dev_size: float = 0.2  # share of fit's answers held out to select epochs on (stratified by grade)
    seed: int = 0  # seeds the dev split and every stage
    batch_size: int = 64  # answers per batch when predicting

    model_: Model = field(init=False, repr=False)
    """The fitted network: :class:`reccbm.RecCBM`, or :class:`reccbm.PLM` for the baseline."""
    tokenizer_: Any = field(init=False, repr=False)
    """The backbone's tokenizer, saved and loaded with the model."""
    recipe_: Recipe = field(init=False, repr=False)
    """Every stage's configuration as fitted (the model's sizes come from the rubric)."""
    history_: dict[str, Any] = field(init=False, repr=False)
    """What each stage did (:meth:`reccbm.Fitted.as_dict`): dev metrics, epochs, steps, seconds."""

    def __post_init__(self) -> None:
        if self.recipe not in PRESETS:
            raise ReccbmError(f"unknown recipe {self.recipe!r}; use {' or '.join(PRESETS)}")
        if not 0 < self.dev_size < 1:
            raise ReccbmError(f"dev_size is a share of the answers between 0 and 1, got {self.dev_size}")

    # ------------------------------------------------------------------------ fit
    def fit(self, questions: Iterable[Any], references: Iterable[Any] | None, responses: Iterable[Any],
            concepts: Any, grades: Iterable[Any], *, callback: Callable[[Event], None] | None = None) -> Grader:
        """Train on N answers: their question, reference answer (None: none) and response texts, concept levels
        (N, K) in the rubric's concept order (a DataFrame: the columns named by the concept keys are selected) and
        grades (N,), both on the rubric's scales. A label outside its scale raises a ReccbmError naming its row,
        field and the allowed range. Returns self."""
        resp = _texts(responses, "responses", None)
        n = len(resp)
        q, ref = _texts(questions, "questions", n), _texts(references, "references", n)
        lo, hi = self.rubric.levels
        glo, ghi = self.rubric.grades
        c_raw, rows = self._concept_table(concepts, n)
        y_raw = np.asarray(list(grades), dtype=object)
        if y_raw.shape != (n,):
            raise ReccbmError(f"grades: {y_raw.shape[0] if y_raw.ndim else 0} values for {n} answers")
        c = check_labels(c_raw, lo, hi, [f"concept {k!r}" for k in self.rubric.keys], rows) - lo  # (N, K) 0..M
        y = check_labels(y_raw, glo, ghi, ["grade"], rows) - glo  # (N,) 0..S
        sizes = (len(self.rubric.concepts), hi - lo + 1, ghi - glo + 1)
        r = recipe(self.recipe, *sizes, self._overrides())
        backbone = r.model.backbone or self.backbone or default_backbone()  # the tokenizer's and the encoder's
        r = replace(r, model=replace(r.model, backbone=backbone)).seeded(self.seed)
        tokenizer = load_tokenizer(backbone)
        items = EncodedItems(encode_inputs(tokenizer, q, resp, ref, r.model.max_len,
                                           question=r.model.question_input, normalise=r.model.normalise), c, y)
        train, dev = self._split(y)
        fitted = fit(items.subset(train), items.subset(dev), r, tokenizer,
                     concept_texts=[k.text() for k in self.rubric.concepts], callback=callback)
        self.model_, self.tokenizer_, self.recipe_, self.history_ = fitted.model, tokenizer, r, fitted.as_dict()
        return self

    def _concept_table(self, concepts: Any, n: int) -> tuple[NDArray[Any], list[Any] | None]:
        """The (N, K) concept levels in the rubric's order and the row labels of a DataFrame (None otherwise)."""
        keys = self.rubric.keys
        if hasattr(concepts, "columns"):  # a DataFrame: select the concepts' columns by key, rows by their index
            missing = [k for k in keys if k not in concepts.columns]
            if missing:
                raise ReccbmError(f"concepts: no column for concept(s) {missing}; columns: {list(concepts.columns)}")
            table, rows = concepts[keys].to_numpy(dtype=object), list(concepts.index)
        else:
            table, rows = np.asarray(concepts, dtype=object), None
        if table.ndim != 2 or table.shape != (n, len(keys)):
            raise ReccbmError(f"concepts: expected (N={n}, K={len(keys)}) levels, got shape {table.shape}")
        return table, rows

    def _overrides(self) -> dict[str, dict[str, Any]]:
        """``overrides`` with the concepts of the examples across questions as positions (:func:`contrast_concepts`:
        as named there, or the rubric's marks)."""
        given = dict(self.overrides or {})
        cs = self.rubric.concepts
        stage1 = contrast_concepts(PRESETS[self.recipe].get("stage1", {}) | given.get("stage1", {}), self.rubric.keys,
                                   [c.reference_is_top for c in cs], [c.off_topic_is_bottom for c in cs])
        named = {k: stage1[k] for k in ("contrast_top", "contrast_bottom") if k in stage1}
        return given | {"stage1": given.get("stage1", {}) | named} if named else given

    def _split(self, y: NDArray[Any]) -> tuple[list[int], list[int]]:
        """(train, dev) positions: ``dev_size`` of each grade's answers to dev (at least one answer in all)."""
        rng = np.random.default_rng([self.seed, 7])
        dev: list[int] = []
        for g in np.unique(y):
            members = rng.permutation(np.flatnonzero(y == g))
            dev += members[: round(self.dev_size * len(members))].tolist()
        if not dev:
            dev = [int(rng.integers(len(y)))]
        train = sorted(set(range(len(y))) - set(dev))
        if not train:
            raise ReccbmError(f"{len(y)} answers leave none to train on after the dev split; give more answers")
        return train, sorted(dev)

    # ------------------------------------------------------------------------ predict
    def _predictions(self, questions: Iterable[Any], references: Iterable[Any] | None,
                     responses: Iterable[Any]) -> Predictions:
        if not hasattr(self, "model_"):
            raise ReccbmError("this Grader is not fitted yet: call fit, or Grader.load a saved one")
        resp = _texts(responses, "responses", None)
        q, ref = _texts(questions, "questions", len(resp)), _texts(references, "references", len(resp))
        items = EncodedItems(encode_inputs(self.tokenizer_, q, resp, ref, self.model_.config.max_len,
                                           question=self.model_.config.question_input,
                                           normalise=self.model_.config.normalise))
        return predict(self.model_, items, self.tokenizer_.pad_token_id, self.batch_size)

    def predict_proba(self, questions: Iterable[Any], references: Iterable[Any] | None,
                      responses: Iterable[Any]) -> NDArray[Any]:
        """(N, S+1): the probability of each grade, lowest grade first."""
        return self._predictions(questions, references, responses).grade_probs

    def predict(self, questions: Iterable[Any], references: Iterable[Any] | None,
                responses: Iterable[Any]) -> NDArray[Any]:
        """(N,): each answer's grade on the rubric's grade scale, by the model's decision rule (``stage2.decision``)."""
        out: NDArray[Any] = self._predictions(questions, references, responses).grades + self.rubric.grades[0]
        return out

    def concepts(self, questions: Iterable[Any], references: Iterable[Any] | None,
                 responses: Iterable[Any]) -> NDArray[Any]:
        """(N, K): the most probable level of each concept (rubric order), on the rubric's level scale."""
        p = self._predictions(questions, references, responses)
        if p.p_hat is None:
            raise ReccbmError("the PLM baseline predicts no concepts")
        out: NDArray[Any] = p.levels + self.rubric.levels[0]
        return out

    # ------------------------------------------------------------------------ save / load
    def save(self, path: str | Path) -> Path:
        """Write the fitted grader into the folder ``path`` (a checkpoint: reccbm.save_checkpoint) and return it."""
        if not hasattr(self, "model_"):
            raise ReccbmError("this Grader is not fitted yet: nothing to save")
        r = self.recipe_
        meta = self.rubric.as_meta() | {
            "estimator": "reccbm.Grader", "recipe_name": self.recipe, "overrides": self.overrides,
            "dev_size": self.dev_size, "seed": self.seed,
            "recipe": {"stage1": asdict(r.stage1), "joint": asdict(r.joint), "stage2": asdict(r.stage2)},
            "history": self.history_}
        stage = "plm" if r.model.plm else "stage2"
        save_checkpoint(self.model_, self.tokenizer_, path, stage, int(self.history_.get("steps", 0)), meta)
        return Path(path)

    @classmethod
    def load(cls, path: str | Path) -> Grader:
        """A fitted grader from a folder :meth:`save` wrote (or a rubrictool run: its rubric's keys and scales)."""
        model, tokenizer, meta = load_checkpoint(path)
        name = meta.get("recipe_name", "default")
        grader = cls(Rubric.from_meta(meta), name if name in PRESETS else "default", model.config.backbone,
                     dict(meta.get("overrides") or {}), float(meta.get("dev_size", 0.2)), int(meta.get("seed", 0)))
        cfg, rb = model.config, grader.rubric
        if (len(rb.concepts), rb.levels[1] - rb.levels[0] + 1, rb.grades[1] - rb.grades[0] + 1) != (
                cfg.num_concepts if not cfg.plm else len(rb.concepts), cfg.num_levels, cfg.num_grades):
            raise ReccbmError(f"{path}: the rubric in model.json does not match the model's sizes")
        sections = meta.get("recipe") or {}
        grader.model_, grader.tokenizer_ = model, tokenizer
        grader.recipe_ = Recipe(model.config, *(config_from_dict(cls_, sections.get(s, {})) for s, cls_ in
                                                (("stage1", StageIConfig), ("joint", JointConfig),
                                                 ("stage2", StageIIConfig))))
        grader.history_ = dict(meta.get("history") or {})
        return grader

