"""Fuzz the reply parser: no input may crash it, and whatever it accepts is valid for the rubric."""

from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rubrictool.annotate import ParseResult, parse_reply
from rubrictool.rubric import load_rubric

RUBRIC = load_rubric("mohler")
NAMES = RUBRIC.keys + [c.name for c in RUBRIC.concepts] + ["", "Originality", "R (Relevance)", "fc"]
FRAGMENTS = ["concept", "label", "level", "evidence", "=", ":", ";", "|", "\n", "```", "```json", "{", "}", "[", "]",
             '"', "**", "- ", "1.", " ", "2.5", "-1", "1e309", "NaN", "null", "true", "Level 3", "Correct"]
SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def check(res: ParseResult) -> None:
    assert isinstance(res, ParseResult)
    for key, lab in res.labels.items():
        assert key in RUBRIC.keys and lab.concept == key
        assert lab.level in RUBRIC.scale.values and isinstance(lab.evidence, str)
    if res.ok:
        assert set(res.labels) == set(RUBRIC.keys)
    else:
        assert res.errors


@SETTINGS
@given(st.text(max_size=2000))
def test_any_text(text: str) -> None:
    check(parse_reply(text, RUBRIC))


@SETTINGS
@given(st.lists(st.one_of(st.sampled_from(FRAGMENTS + NAMES), st.text(max_size=8)), max_size=80).map("".join))
def test_near_misses_of_the_format(text: str) -> None:
    check(parse_reply(text, RUBRIC))


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20) | st.sampled_from(NAMES),
    lambda children: st.lists(children, max_size=6)
    | st.dictionaries(st.sampled_from(NAMES + ["label", "concept", "evidence", "annotations", "score"])
                      | st.text(max_size=6), children, max_size=6),
    max_leaves=40,
)


@SETTINGS
@given(json_values, st.sampled_from(["", "```json\n", "Here: "]))
def test_any_json(value: object, prefix: str) -> None:
    check(parse_reply(prefix + json.dumps(value), RUBRIC))


@SETTINGS
@given(st.dictionaries(st.sampled_from(RUBRIC.keys), st.integers(-5, 8), min_size=1),
       st.sampled_from(["line", "json"]), st.booleans())
def test_generated_annotations_round_trip(levels: dict[str, int], fmt: str, fenced: bool) -> None:
    if fmt == "json":
        text = json.dumps({k: {"label": v, "evidence": "e"} for k, v in levels.items()})
    else:
        text = "\n".join(f"concept={k}; label={v}; evidence=e" for k, v in levels.items())
    if fenced:
        text = f"```{fmt}\n{text}\n```"
    res = parse_reply(text, RUBRIC)
    check(res)
    valid = {k: v for k, v in levels.items() if 1 <= v <= 3}
    assert {k: lab.level for k, lab in res.labels.items()} == valid
    assert res.ok == (len(valid) == len(levels) == RUBRIC.K)


def test_pathological_inputs() -> None:
    for text in ["[" * 5000 + "]" * 5000, "{" * 3000, "concept=" * 2000, "9" * 5000, "\x00\ufeff```",
                 "label=" + "9" * 400]:
        check(parse_reply(text, RUBRIC))
    check(parse_reply(None, RUBRIC))
    check(parse_reply(12, RUBRIC))
