"""REC-CBM as an estimator on raw text: :class:`Grader` with ``fit``, ``predict``, ``predict_proba``, ``concepts``,
``predictions``, ``save`` and ``load``, and scikit-learn's ``get_params`` / ``set_params`` (``sklearn.base.clone``).

The building blocks below it take token ids and 0-based labels (:func:`reccbm.fit`); a :class:`Grader` owns its
tokenizer and recipe, takes texts and labels on the rubric's own scales, and checks the labels before training. It
fits on a tidy table, one row per answer (``question``, ``reference``, ``context``, ``response``, one column per
concept key, ``grade``, and the reviewers' levels ``votes_<KEY>`` where kept), or on parallel arrays::

    rubric = reccbm.Rubric([reccbm.Concept("correct", "States the right idea.", ("no", "partly", "yes"))],
                           levels=(0, 2), grades=(0, 3))
    grader = reccbm.Grader(rubric).fit(table)          # or .fit(questions, references, responses, levels, grades)
    grader.predict(new_table)                          # grades on the rubric's grade scale

rubrictool's ``train`` and ``grade`` train, save, load and predict through it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from reccbm.checkpoint import load_checkpoint, save_checkpoint
from reccbm.config import JointConfig, StageIConfig, StageIIConfig, config_from_dict
from reccbm.data import (
    EncodedItems,
    check_labels,
    encode_inputs,
    encode_table,
    load_tokenizer,
    table_lexicon,
    table_texts,
)
from reccbm.errors import ReccbmError
from reccbm.fit import Recipe, fit
from reccbm.inference import Predictions, predict_texts
from reccbm.model import Model, default_backbone
from reccbm.normalise import course_lexicon, vocabulary_words
from reccbm.recipes import PRESETS, contrast_concepts, recipe
from reccbm.stages import Event
from reccbm.views import answer_views, encode_views

__all__ = ["VOTES_PREFIX", "Concept", "Grader", "Rubric", "vote_shares"]

VOTES_PREFIX = "votes_"  # a table's column of every reviewer's level of one concept, space-separated: "2 3 3"


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


def _is_table(x: Any) -> bool:
    return hasattr(x, "columns") and hasattr(x, "index")


def vote_shares(table: Any, rubric: Rubric, levels: NDArray[Any] | None = None) -> NDArray[Any] | None:
    """(N, K, M+1) float32: per answer and concept the share of reviewers who gave each level (0-based), from the
    table's ``votes_<KEY>`` columns (levels on the rubric's scale, space-separated); None when the table lacks one of
    them. An empty cell counts as the adjudicated level alone (``levels``: (N, K) 0-based; else the cell must hold
    levels). A cell that is not levels, or a level off the scale, raises a ReccbmError naming its column and row."""
    cols = [f"{VOTES_PREFIX}{k}" for k in rubric.keys]
    if not all(c in table.columns for c in cols):
        return None
    lo, n_levels = rubric.levels[0], rubric.levels[1] - rubric.levels[0] + 1
    out = np.zeros((len(table), len(cols), n_levels), dtype=np.float32)  # (N, K, M+1)
    rows = list(table.index)
    for k, col in enumerate(cols):
        for i, cell in enumerate(table[col].fillna("").astype(str).tolist()):
            try:
                given = [int(float(v)) - lo for v in cell.split()]
            except ValueError:
                raise ReccbmError(f"{col}, row {rows[i]}: {cell!r} is not space-separated levels, "
                                  "e.g. '2 3 3'") from None
            if any(not 0 <= v < n_levels for v in given):
                raise ReccbmError(f"{col}, row {rows[i]}: {cell!r} has a level outside the rubric's scale "
                                  f"{rubric.levels[0]}..{rubric.levels[1]}")
            if not given and levels is None:
                raise ReccbmError(f"{col}, row {rows[i]}: no levels and no adjudicated level to count instead")
            for v in given or [int(levels[i, k])]:  # type: ignore[index]
                out[i, k, v] += 1
            out[i, k] /= out[i, k].sum()
    return out


@dataclass
class Grader:
    """REC-CBM on raw text (encoder -> concept bottleneck -> LCEC -> grade head), trained by a recipe.

    ``recipe`` "default" is the recommended recipe, "plain" the one before its concept reader, "paper" the paper's
    (Algorithm 1: Stage I, then Stage II); :data:`reccbm.recipes.PRESETS` says what each sets. ``overrides``
    ({section: {field: value}}, sections model, stage1, joint, stage2) go on top, e.g. ``{"stage1": {"epochs": 10}}``
    or ``{"model": {"plm": True}}`` for the PLM baseline. ``recipe`` may instead be a whole :class:`reccbm.Recipe`
    (what rubrictool resolves from its preset, CPU budgets and ``--cfg``), used as it is: its sizes must be the
    rubric's, and ``overrides`` must be empty. ``fit`` holds out ``dev_size`` of the answers (stratified by grade) to
    select epochs on, unless it is given the dev rows.

    The constructor's arguments are its parameters (``get_params`` / ``set_params``: ``sklearn.base.clone`` works);
    what ``fit`` learns ends in ``_``.
    """

    rubric: Rubric
    recipe: str | Recipe = "default"  # a key of reccbm.recipes.PRESETS, or a whole Recipe
    backbone: str = ""  # Hugging Face name or local path; "" = the recipe's, else the offline all-MiniLM-L6-v2
    overrides: dict[str, dict[str, Any]] = field(default_factory=dict)  # recipe fields set on top of a named recipe
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
        if isinstance(self.recipe, Recipe):
            if self.overrides:
                raise ReccbmError("overrides go on a named recipe; a whole Recipe is used as it is (set its fields)")
        elif self.recipe not in PRESETS:
            raise ReccbmError(f"unknown recipe {self.recipe!r}; use {' or '.join(PRESETS)}, or a reccbm.Recipe")
        if not 0 < self.dev_size < 1:
            raise ReccbmError(f"dev_size is a share of the answers between 0 and 1, got {self.dev_size}")

    # ------------------------------------------------------------------------ parameters (scikit-learn)
    @classmethod
    def _param_names(cls) -> list[str]:
        return [f.name for f in fields(cls) if f.init]

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        """The constructor's arguments by name, as scikit-learn's estimators give them (``deep`` has no effect:
        no parameter is an estimator)."""
        return {name: getattr(self, name) for name in self._param_names()}

    def set_params(self, **params: Any) -> Grader:
        """Set constructor arguments by name (checked as the constructor checks them); returns self."""
        unknown = sorted(set(params) - set(self._param_names()))
        if unknown:
            raise ReccbmError(f"unknown Grader parameter(s) {unknown}; known: {self._param_names()}")
        for name, value in params.items():
            setattr(self, name, value)
        self.__post_init__()
        return self

    # ------------------------------------------------------------------------ fit
    def fit(self, X: Any, references: Iterable[Any] | None = None, responses: Iterable[Any] | None = None,
            concepts: Any = None, grades: Iterable[Any] | None = None, *, votes: NDArray[Any] | None = None,
            dev: Sequence[int] | None = None, callback: Callable[[Event], None] | None = None) -> Grader:
        """Train on N answers, given as one tidy table ``X`` (a DataFrame: one row per answer with ``response``,
        ``question``, ``reference`` and ``context`` where present, a column per concept key, ``grade`` and, where
        kept, the reviewers' levels ``votes_<KEY>``) or as parallel arrays: ``X`` the questions, then the reference
        answers (None: none), the responses, the concept levels (N, K) in the rubric's concept order (a DataFrame:
        the columns named by the concept keys are selected) and the grades (N,). Labels are on the rubric's scales;
        one outside its scale raises a ReccbmError naming its row, field and the allowed range. The PLM baseline
        (``{"model": {"plm": True}}``) reads no concept levels: a table without them will do.

        ``votes``: (N, K, M+1) each concept's share of reviewers per level (0-based), the soft concept targets of
        ``stage1.soft_targets``; a table's ``votes_<KEY>`` columns give them when this is None
        (:func:`vote_shares`). Without either, the adjudicated levels alone are the targets. ``dev``: positions of
        the answers held out to select epochs on (default: ``dev_size`` of each grade's answers). Progress goes to
        ``callback`` as :class:`reccbm.Event`. Returns self."""
        r = self._recipe()
        items, from_table = self._items(X, references, responses, concepts, grades, votes, r)
        train, held = self._split(np.asarray(items.grades), dev)
        backbone = r.model.backbone or default_backbone()  # the tokenizer's and the encoder's
        tokenizer = load_tokenizer(backbone)
        r = self._with_lexicon(r, tokenizer, X, references, responses, from_table)
        m = r.model
        items.features = (encode_table(tokenizer, X, m.max_len, question=m.question_input, normalise=m.normalise,
                                       lexicon=m.lexicon)
                          if from_table else
                          encode_inputs(tokenizer, *self._text_arrays(X, references, responses), m.max_len,
                                        question=m.question_input, normalise=m.normalise, lexicon=m.lexicon))
        if r.stage1.rdrop_views and not m.plm:  # each answer's copy that must read the same (reccbm/views.py)
            edits, seed = r.stage1.rdrop_views, r.stage1.seed
            if from_table:
                items.views = encode_views(tokenizer, X, m.max_len, edits, seed, question=m.question_input,
                                           normalise=m.normalise, lexicon=m.lexicon)
            else:
                q, resp, ctx = self._text_arrays(X, references, responses)
                items.views = encode_inputs(tokenizer, q, answer_views(q, ctx, resp, edits, seed), ctx, m.max_len,
                                            question=m.question_input, normalise=m.normalise, lexicon=m.lexicon)
        fitted = fit(self._part(items, train), self._part(items, held), r, tokenizer,
                     concept_texts=[k.text() for k in self.rubric.concepts], callback=callback)
        self.model_, self.tokenizer_, self.recipe_, self.history_ = fitted.model, tokenizer, r, fitted.as_dict()
        return self

    def _with_lexicon(self, r: Recipe, tokenizer: Any, X: Any, references: Iterable[Any] | None,
                      responses: Iterable[Any] | None, from_table: bool) -> Recipe:
        """The recipe with the course lexicon of the answers it learns from (``model.course_words``, with
        ``model.normalise``), kept in the checkpoint; unchanged otherwise."""
        m = r.model
        if not (m.normalise and m.course_words > 0) or m.lexicon:
            return r
        if from_table:
            words = table_lexicon(tokenizer, X, m.course_words)
        else:
            q, resp, ref = self._text_arrays(X, references, responses)
            words = course_lexicon(resp, q, ref, vocabulary_words(tokenizer), m.course_words)
        return replace(r, model=replace(m, lexicon=words))

    @staticmethod
    def _part(items: EncodedItems, idx: Sequence[int]) -> EncodedItems:
        """``items.subset(idx)`` with the concept labels column-major, as a table's columns give them (pandas'
        ``to_numpy``): the layout rubrictool's runs have always trained on, in which LCEC's label covariance sums
        (its last bit depends on the order of the sum)."""
        part = items.subset(idx)
        if part.concepts is not None:
            part.concepts = np.asfortranarray(part.concepts)
        return part

    def _recipe(self) -> Recipe:
        """The recipe ``fit`` runs, seeded: the named one with ``overrides`` (and the backbone), or the one given."""
        sizes = (len(self.rubric.concepts), self.rubric.levels[1] - self.rubric.levels[0] + 1,
                 self.rubric.grades[1] - self.rubric.grades[0] + 1)
        if isinstance(self.recipe, Recipe):
            r, m = self.recipe, self.recipe.model
            if (m.num_levels, m.num_grades) != sizes[1:] or (m.num_concepts != sizes[0] and not m.plm):
                raise ReccbmError(f"the recipe's model has {m.num_concepts} concepts, {m.num_levels} levels and "
                                  f"{m.num_grades} grades; the rubric {sizes[0]}, {sizes[1]} and {sizes[2]}")
            if self.backbone and not m.backbone:
                r = replace(r, model=replace(m, backbone=self.backbone))
        else:
            r = recipe(self.recipe, *sizes, self._overrides())
            r = replace(r, model=replace(r.model, backbone=r.model.backbone or self.backbone or default_backbone()))
        return r.seeded(self.seed)

    def _items(self, X: Any, references: Iterable[Any] | None, responses: Iterable[Any] | None, concepts: Any,
               grades: Iterable[Any] | None, votes: NDArray[Any] | None,
               r: Recipe) -> tuple[EncodedItems, bool]:
        """The checked 0-based labels and shares (the features still empty), and whether ``X`` is a table."""
        table = _is_table(X) and references is None and responses is None and concepts is None and grades is None
        if table:
            missing = [c for c in ("response", "grade") if c not in X.columns]
            if missing:
                raise ReccbmError(f"the table has no column {' or '.join(missing)}; columns: {list(X.columns)}")
            n, grades = len(X), X["grade"]
            concepts = X
        else:
            if grades is None or responses is None:
                raise ReccbmError("fit takes a table, or questions, references, responses, concepts and grades")
            n = len(_texts(responses, "responses", None))
        lo, hi = self.rubric.levels
        glo, ghi = self.rubric.grades
        y_raw = np.asarray(list(grades), dtype=object)
        if y_raw.shape != (n,):
            raise ReccbmError(f"grades: {y_raw.shape[0] if y_raw.ndim else 0} values for {n} answers")
        c = None
        if not r.model.plm:  # the PLM baseline reads no concept levels
            c_raw, rows = self._concept_table(concepts, n)
            c = check_labels(c_raw, lo, hi, [f"concept {k!r}" for k in self.rubric.keys], rows) - lo  # (N, K) 0..M
        y = check_labels(y_raw, glo, ghi, ["grade"], list(X.index) if table else
                         list(concepts.index) if _is_table(concepts) else None) - glo  # (N,) 0..S
        if votes is None and table and c is not None:
            votes = vote_shares(X, self.rubric, c)
        if votes is not None:
            votes = np.asarray(votes, dtype=np.float32)
            if votes.shape != (n, len(self.rubric.keys), hi - lo + 1):
                raise ReccbmError(f"votes: expected (N={n}, K={len(self.rubric.keys)}, M+1={hi - lo + 1}) shares, "
                                  f"got shape {votes.shape}")
        return EncodedItems([{}] * n, c, y, votes if c is not None else None), table

    @staticmethod
    def _text_arrays(questions: Any, references: Iterable[Any] | None,
                     responses: Iterable[Any] | None) -> tuple[list[str], list[str], list[str]]:
        """(questions, responses, references) as texts, for :func:`reccbm.encode_inputs`."""
        resp = _texts(responses, "responses", None)
        return _texts(questions, "questions", len(resp)), resp, _texts(references, "references", len(resp))

    def _concept_table(self, concepts: Any, n: int) -> tuple[NDArray[Any], list[Any] | None]:
        """The (N, K) concept levels in the rubric's order and the row labels of a DataFrame (None otherwise)."""
        keys = self.rubric.keys
        if _is_table(concepts):  # a DataFrame: select the concepts' columns by key, rows by their index
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
        preset = PRESETS[str(self.recipe)]
        stage1 = contrast_concepts(preset.get("stage1", {}) | given.get("stage1", {}), self.rubric.keys,
                                   [c.reference_is_top for c in cs], [c.off_topic_is_bottom for c in cs])
        named = {k: stage1[k] for k in ("contrast_top", "contrast_bottom") if k in stage1}
        return given | {"stage1": given.get("stage1", {}) | named} if named else given

    def _split(self, y: NDArray[Any], dev: Sequence[int] | None) -> tuple[list[int], list[int]]:
        """(train, dev) positions: ``dev`` as given (the rest trains, in order), else ``dev_size`` of each grade's
        answers to dev (at least one answer in all)."""
        if dev is not None:
            held = [int(i) for i in dev]
            if not held or any(not 0 <= i < len(y) for i in held) or len(set(held)) != len(held):
                raise ReccbmError(f"dev: {len(held)} positions; give distinct positions among the {len(y)} answers")
            train = [i for i in range(len(y)) if i not in set(held)]
            if not train:
                raise ReccbmError("dev holds every answer; leave some to train on")
            return train, held
        rng = np.random.default_rng([self.seed, 7])
        picked: list[int] = []
        for g in np.unique(y):
            members = rng.permutation(np.flatnonzero(y == g))
            picked += members[: round(self.dev_size * len(members))].tolist()
        if not picked:
            picked = [int(rng.integers(len(y)))]
        train = sorted(set(range(len(y))) - set(picked))
        if not train:
            raise ReccbmError(f"{len(y)} answers leave none to train on after the dev split; give more answers")
        return train, sorted(picked)

    # ------------------------------------------------------------------------ predict
    def predictions(self, X: Any, references: Iterable[Any] | None = None, responses: Iterable[Any] | None = None,
                    *, batch_size: int | None = None, on_batch: Callable[[int], None] | None = None,
                    device: str | None = None, precision: str = "no",
                    truncated: list[int] | None = None) -> Predictions:
        """Everything the model says of N answers (a table, or questions, references and responses): grade and
        concept probabilities, levels, scores (:class:`reccbm.Predictions`). ``batch_size`` (None: the Grader's),
        ``on_batch``, ``device`` and ``precision`` as :func:`reccbm.predict` takes them; ``truncated`` receives the
        positions of the inputs cut at the model's max_len."""
        if not hasattr(self, "model_"):
            raise ReccbmError("this Grader is not fitted yet: call fit, or Grader.load a saved one")
        if _is_table(X) and references is None and responses is None:
            q, ref, resp = table_texts(X)
        else:
            q, resp, ref = self._text_arrays(X, references, responses)
        return predict_texts(self.model_, self.tokenizer_, q, resp, ref, batch_size or self.batch_size, on_batch,
                             device=device, precision=precision, truncated=truncated)

    def predict_proba(self, X: Any, references: Iterable[Any] | None = None,
                      responses: Iterable[Any] | None = None) -> NDArray[Any]:
        """(N, S+1): the probability of each grade, lowest grade first."""
        return self.predictions(X, references, responses).grade_probs

    def predict(self, X: Any, references: Iterable[Any] | None = None,
                responses: Iterable[Any] | None = None) -> NDArray[Any]:
        """(N,): each answer's grade on the rubric's grade scale, by the model's decision rule (``stage2.decision``)."""
        out: NDArray[Any] = self.predictions(X, references, responses).grades + self.rubric.grades[0]
        return out

    def concepts(self, X: Any, references: Iterable[Any] | None = None,
                 responses: Iterable[Any] | None = None) -> NDArray[Any]:
        """(N, K): the most probable level of each concept (rubric order), on the rubric's level scale."""
        p = self.predictions(X, references, responses)
        if p.p_hat is None:
            raise ReccbmError("the PLM baseline predicts no concepts")
        out: NDArray[Any] = p.levels + self.rubric.levels[0]
        return out

    # ------------------------------------------------------------------------ save / load
    def save(self, path: str | Path, *, meta: dict[str, Any] | None = None,
             shared_dir: str | Path | None = None) -> Path:
        """Write the fitted grader into the folder ``path`` (a checkpoint: reccbm.save_checkpoint) and return it.
        ``meta``: more keys for model.json (a rubrictool run's); ``shared_dir``: save_checkpoint's folder of encoder
        weights kept once per content."""
        if not hasattr(self, "model_"):
            raise ReccbmError("this Grader is not fitted yet: nothing to save")
        r = self.recipe_
        own = self.rubric.as_meta() | {
            "estimator": "reccbm.Grader", "recipe_name": self.recipe if isinstance(self.recipe, str) else None,
            "overrides": self.overrides, "dev_size": self.dev_size, "seed": self.seed,
            "recipe": {"stage1": asdict(r.stage1), "joint": asdict(r.joint), "stage2": asdict(r.stage2)},
            "history": self.history_}
        stage = "plm" if r.model.plm else "stage2"
        save_checkpoint(self.model_, self.tokenizer_, path, stage, int(self.history_.get("steps", 0)),
                        own | (meta or {}), shared_dir=shared_dir)
        return Path(path)

    @classmethod
    def load(cls, path: str | Path) -> Grader:
        """A fitted grader from a folder :meth:`save` wrote (or a rubrictool run: its rubric's keys and scales)."""
        model, tokenizer, meta = load_checkpoint(path)
        rb = Rubric.from_meta(meta)
        cfg = model.config
        if (len(rb.concepts), rb.levels[1] - rb.levels[0] + 1, rb.grades[1] - rb.grades[0] + 1) != (
                cfg.num_concepts if not cfg.plm else len(rb.concepts), cfg.num_levels, cfg.num_grades):
            raise ReccbmError(f"{path}: the rubric in model.json does not match the model's sizes")
        sections = meta.get("recipe") or {}
        fitted = Recipe(cfg, *(config_from_dict(cls_, sections.get(s, {})) for s, cls_ in
                               (("stage1", StageIConfig), ("joint", JointConfig), ("stage2", StageIIConfig))))
        name = meta.get("recipe_name", "default")
        named = name in PRESETS
        grader = cls(rb, name if named else fitted, cfg.backbone, dict(meta.get("overrides") or {}) if named else {},
                     float(meta.get("dev_size", 0.2)), int(meta.get("seed", 0)))
        grader.model_, grader.tokenizer_, grader.recipe_ = model, tokenizer, fitted
        grader.history_ = dict(meta.get("history") or {})
        return grader
