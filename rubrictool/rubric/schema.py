"""The rubric schema (pydantic): levels, anchored examples, concepts, the grade scale and the rubric."""

from __future__ import annotations

import itertools
import json
from typing import TYPE_CHECKING, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationInfo,
    field_validator,
    model_validator,
)

from rubrictool.errors import RubricError

if TYPE_CHECKING:
    import reccbm

__all__ = [
    "KEY_PATTERN",
    "Concept",
    "Costs",
    "Example",
    "GradeScale",
    "Grading",
    "Level",
    "Rubric",
    "Scale",
]


"""Folder of the rubrics shipped with rubrictool (``rubrics/`` at the top of the repository)."""

KEY_PATTERN = r"^[A-Za-z][A-Za-z0-9_]*$"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Level(_Strict):
    """One ordinal level of a concept and the anchor descriptor a rater applies."""

    value: int
    anchor: str = Field(min_length=1)
    points: float | None = None  # what an analytic rubric awards for this level (optional; all levels or none)

    @field_validator("anchor")
    @classmethod
    def _anchor_not_blank(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("anchor is empty: describe what a response at this level looks like")
        return v.strip()


class Example(_Strict):
    """An illustrative excerpt with the level it was assigned (for reviewers; not used in training)."""

    text: str = Field(min_length=1)
    level: int
    note: str | None = None
    question: str | None = None
    reference: str | None = None


class Concept(_Strict):
    """One rubric dimension (a bottleneck unit in REC-CBM)."""

    key: str = Field(pattern=KEY_PATTERN)
    name: str = Field(min_length=1)
    definition: str = Field(min_length=1)
    group: str | None = None
    levels: list[Level] = Field(min_length=2)
    examples: list[Example] = Field(default_factory=list)
    # What holds of this concept on every question (the trainer's examples across questions, stage1.contrast):
    # the reference answer is at its top level; an answer written for another question is at its bottom level.
    reference_is_top: bool = False
    off_topic_is_bottom: bool = False

    @model_validator(mode="after")
    def _levels_contiguous(self) -> Concept:
        values = [lv.value for lv in self.levels]
        expected = list(range(min(values), min(values) + len(values)))
        if sorted(values) != expected or len(set(values)) != len(values):
            raise ValueError(
                f"levels of concept {self.key} are {values}; they must be contiguous integers "
                f"in ascending order, e.g. {expected}"
            )
        if values != sorted(values):
            raise ValueError(f"levels of concept {self.key} must be listed in ascending order")
        lo, hi = values[0], values[-1]
        for i, ex in enumerate(self.examples):
            if not lo <= ex.level <= hi:
                raise ValueError(
                    f"example {i} of concept {self.key} has level {ex.level}, outside {lo}..{hi}"
                )
        return self

    @property
    def values(self) -> list[int]:
        return [lv.value for lv in self.levels]

    def anchor(self, value: int) -> str:
        for lv in self.levels:
            if lv.value == value:
                return lv.anchor
        raise KeyError(value)


class Scale(_Strict):
    """An inclusive integer range, e.g. concept levels 1..3 or grades 0..5."""

    min: int
    max: int
    labels: dict[int, str] | None = None

    @model_validator(mode="after")
    def _ordered(self) -> Scale:
        if self.max <= self.min:
            raise ValueError(f"max ({self.max}) must be greater than min ({self.min})")
        return self

    @property
    def values(self) -> list[int]:
        return list(range(self.min, self.max + 1))

    @property
    def n(self) -> int:
        return self.max - self.min + 1


class Costs(_Strict):
    """What each kind of wrong pass/fail decision costs the course (relative numbers, both above 0): a failing answer
    given a pass mark (``fail_passed``) and a passing answer given a failing mark (``pass_failed``)."""

    fail_passed: float = Field(default=1.0, gt=0)
    pass_failed: float = Field(default=1.0, gt=0)


class GradeScale(Scale):
    """The holistic grade scale, with the course's pass mark (the least passing mark; default: the scale's midpoint,
    rounded up, so failing is below the midpoint) and the cost of each kind of pass/fail error."""

    pass_mark: int | None = None
    costs: Costs | None = None

    @field_validator("pass_mark")
    @classmethod
    def _pass_mark_inside(cls, v: int | None, info: ValidationInfo) -> int | None:
        lo, hi = info.data.get("min"), info.data.get("max")
        if v is not None and isinstance(lo, int) and isinstance(hi, int) and not lo < v <= hi:
            raise ValueError(f"pass_mark {v} is outside the grades {lo + 1}..{hi} that can pass (a pass mark of {lo} "
                             "would pass every answer); set it to the least mark that passes, e.g. "
                             f"{-(-(lo + hi) // 2)}")
        return v

    @property
    def passing(self) -> int:
        """The least passing mark: ``pass_mark``, else the midpoint of the scale rounded up."""
        return self.pass_mark if self.pass_mark is not None else -(-(self.min + self.max) // 2)

    @property
    def error_costs(self) -> Costs:
        """The stated costs, else 1 and 1 (both errors alike)."""
        return self.costs or Costs()


class Grading(_Strict):
    """How the levels' points make the grade (only with ``points:`` on every level).

    ``points: sum`` adds one level's points per concept. ``map`` turns the total into a grade:
    ``direct`` — the total is the grade (rounded half up, clipped to the grade scale); ``linear`` — the
    lowest to highest total a response can earn is stretched onto the grade scale, then rounded;
    ``thresholds`` — ``thresholds[i]`` is the least total that earns grade ``grade.min + i + 1``
    (one per grade above the lowest, strictly increasing, inside the totals a response can earn).
    """

    points: Literal["sum"] = "sum"
    map: Literal["direct", "linear", "thresholds"] = "linear"
    thresholds: list[float] | None = None


def _points_problems(concepts: list[Concept], grade: Scale, grading: Grading | None) -> list[str]:
    """The points checks of a rubric, one message each (the loader locates them at the exact key)."""
    with_points = [(c, lv) for c in concepts for lv in c.levels if lv.points is not None]
    if not with_points:
        none = "grading: is set but no level has points: give every level `points:`, or drop grading"
        return [none] if grading else []
    out = []
    for c in concepts:
        for lv in c.levels:
            if lv.points is None:
                out.append(f"level {lv.value} of concept {c.key} has no points: when any level has points, "
                           "every level needs them")
        pts = [lv.points for lv in c.levels]
        for a, b, lo, hi in zip(c.levels, c.levels[1:], pts, pts[1:]):
            if lo is not None and hi is not None and hi < lo:
                out.append(f"points of concept {c.key} fall from {lo:g} at level {a.value} to {hi:g} at level "
                           f"{b.value}: "
                           "a higher level must not earn fewer points")
    if out:
        return out
    lo_total = sum(min(lv.points or 0.0 for lv in c.levels) for c in concepts)
    hi_total = sum(max(lv.points or 0.0 for lv in c.levels) for c in concepts)
    g = grading or Grading()
    if g.map == "linear" and hi_total <= lo_total:
        out.append(f"grading map linear needs a range of totals, but every response earns {lo_total:g} points")
    if g.map == "thresholds":
        th = g.thresholds
        if th is None:
            out.append(f"grading map thresholds needs thresholds: one least total per grade above {grade.min} "
                       f"({grade.n - 1} numbers)")
        elif len(th) != grade.n - 1:
            out.append(f"thresholds has {len(th)} number(s) but grades {grade.min}..{grade.max} need {grade.n - 1}: "
                       f"the least total for each of grades {grade.min + 1}..{grade.max}")
        else:
            for i, (t0, t1) in enumerate(itertools.pairwise(th)):
                if t1 <= t0:
                    out.append(f"thresholds must rise: threshold {i + 1} ({t1:g}) is not above threshold {i} ({t0:g})")
            for i, t in enumerate(th):
                if not lo_total < t <= hi_total:
                    out.append(f"threshold {i} ({t:g}) is outside the totals a response can earn "
                               f"({lo_total:g}..{hi_total:g}]: grade {grade.min + i + 1} could never (or always) "
                               "be given")
    elif g.thresholds is not None:
        out.append(f"thresholds are only read with map: thresholds (map is {g.map}); drop them or set map: thresholds")
    return out


class Rubric(_Strict):
    """A rubric inventory as stored in ``rubrics/<name>.yaml``."""

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    title: str
    version: str
    description: str
    source: str | None = None
    fields: dict[str, str] = Field(
        description="The benchmark's input fields (question/response/reference/context) and what each holds"
    )
    scale: Scale = Field(description="ordinal concept levels shared by every concept")
    grade: GradeScale = Field(description="the holistic grade scale, its pass mark and the costs of pass/fail errors")
    concepts: list[Concept] = Field(min_length=1)
    grading: Grading | None = Field(default=None, description="how levels' points make the grade (analytic rubrics)")
    _source_file: str | None = PrivateAttr(default=None)
    _source_text: str | None = PrivateAttr(default=None)

    def __eq__(self, other: object) -> bool:
        """Two rubrics are equal when their content is: where one was read from (and its text) is provenance."""
        if not isinstance(other, Rubric):
            return NotImplemented
        return type(self) is type(other) and self.__dict__ == other.__dict__

    def __hash__(self) -> int:
        return hash(json.dumps(self.model_dump(mode="json"), sort_keys=True))

    @property
    def source_file(self) -> str | None:
        """The file the rubric was read from (None when built in memory)."""
        return self._source_file

    @property
    def source_text(self) -> str | None:
        """The YAML text it was parsed from, as written (a run keeps a copy)."""
        return self._source_text

    @field_validator("version", mode="before")
    @classmethod
    def _version_str(cls, v: Any) -> Any:
        return str(v) if isinstance(v, (int, float)) else v

    @field_validator("fields")
    @classmethod
    def _known_fields(cls, v: dict[str, str]) -> dict[str, str]:
        allowed = {"question", "response", "reference", "context"}
        unknown = set(v) - allowed
        if unknown:
            raise ValueError(f"unknown input field(s) {sorted(unknown)}; allowed: {sorted(allowed)}")
        if "response" not in v:
            raise ValueError("fields must describe 'response' (the student's answer)")
        return v

    @model_validator(mode="after")
    def _consistent(self) -> Rubric:
        seen: set[str] = set()
        for c in self.concepts:
            if c.key in seen:
                raise ValueError(f"duplicate concept key {c.key!r}: every concept needs its own key")
            seen.add(c.key)
            if c.values != self.scale.values:
                raise ValueError(
                    f"concept {c.key} has levels {c.values} but the rubric scale is "
                    f"{self.scale.min}..{self.scale.max}: every concept must use the same levels"
                )
        problems = _points_problems(self.concepts, self.grade, self.grading)
        if problems:
            raise ValueError(problems[0])
        return self

    @property
    def has_points(self) -> bool:
        """Whether the rubric declares points per level (then every level has them)."""
        return all(lv.points is not None for c in self.concepts for lv in c.levels)

    # -- conveniences used by every stage ------------------------------------------------------------
    @property
    def keys(self) -> list[str]:
        return [c.key for c in self.concepts]

    @property
    def K(self) -> int:
        """Number of concepts."""
        return len(self.concepts)

    @property
    def M(self) -> int:
        """Maximum ordinal concept level after shifting levels to 0..M (the paper's M)."""
        return self.scale.max - self.scale.min

    @property
    def pass_mark(self) -> int:
        """The least passing grade (``grade.pass_mark``; default the grade scale's midpoint rounded up)."""
        return self.grade.passing

    @property
    def costs(self) -> Costs:
        """The cost of a failing answer passed and of a passing answer failed (``grade.costs``; default 1 and 1)."""
        return self.grade.error_costs

    @property
    def S(self) -> int:
        """Maximum grade after shifting grades to 0..S (the paper's S)."""
        return self.grade.max - self.grade.min

    def to_reccbm(self) -> reccbm.Rubric:
        """The rubric as :class:`reccbm.Grader` reads it: each concept's key, definition, level anchors (lowest
        first), name and marks, and the two scales. Its concept texts are the ones training initialises the queries
        with."""
        import reccbm

        return reccbm.Rubric(tuple(reccbm.Concept(c.key, c.definition, tuple(lv.anchor for lv in c.levels), c.name,
                                                  c.reference_is_top, c.off_topic_is_bottom) for c in self.concepts),
                             levels=(self.scale.min, self.scale.max), grades=(self.grade.min, self.grade.max))

    def concept(self, key: str) -> Concept:
        for c in self.concepts:
            if c.key == key:
                return c
        raise RubricError(f"rubric {self.name} has no concept {key!r}; its concepts are {', '.join(self.keys)}")
