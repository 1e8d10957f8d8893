"""Rubric schema, bundled inventories (checked against the paper's appendix tables), line-accurate
errors for every bad-input case, lint, scaffolding and exports."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rubrictool.errors import RubricError
from rubrictool.rubric import (
    BUNDLED_DIR,
    Rubric,
    export_json,
    export_markdown,
    lint_rubric,
    list_rubrics,
    load_rubric,
    parse_rubric,
    rubric_errors,
    rubric_infos,
    scaffold_rubric,
    validate_rubric_files,
)
from tests.support.files import edited, line_of, mohler_text

F = "bad.yaml"

# -- the bundled inventories -----------------------------------------------------------------------------------

PAPER = {
    # name: (keys in table order, concept levels, grade scale, groups from "Concept groupings")
    "mohler": (
        ["FC", "CC", "TU", "CP", "R", "DU", "EE", "FR"], (1, 3), (0, 5),
        {"FC": "Correctness and coverage", "CC": "Correctness and coverage", "R": "Correctness and coverage",
         "TU": "Expression", "CP": "Expression", "FR": "Expression",
         "DU": "Reasoning depth", "EE": "Reasoning depth"},
    ),
    "asap2": (
        ["TC", "UE", "OC", "GM", "VA", "SV", "CTD", "FR"], (1, 5), (1, 6),
        {"TC": "Content and reasoning", "UE": "Content and reasoning", "CTD": "Content and reasoning",
         "OC": "Structural organization", "SV": "Structural organization",
         "GM": "Surface form", "VA": "Surface form", "FR": "Surface form"},
    ),
    "mocha": (
        ["RQ", "IA", "TG", "CR", "PQ", "C", "CC"], (1, 3), (1, 5),
        {"RQ": "Alignment with the question", "C": "Alignment with the question",
         "TG": "Consistency with the passage", "CR": "Consistency with the passage",
         "IA": "Consistency with the passage",
         "PQ": "Expression of the candidate", "CC": "Expression of the candidate"},
    ),
}


@pytest.mark.parametrize("name", sorted(PAPER))
def test_bundled_rubric_matches_paper_shape(name: str) -> None:
    keys, levels, grade, groups = PAPER[name]
    r = load_rubric(name)
    assert r.name == name and r.keys == keys
    assert (r.scale.min, r.scale.max) == levels and (r.grade.min, r.grade.max) == grade
    assert {c.key: c.group for c in r.concepts} == groups
    assert r.version and r.description and "response" in r.fields
    for c in r.concepts:
        assert c.values == list(range(levels[0], levels[1] + 1))
        assert c.examples, f"{name}.{c.key} has no paper example"
        assert all(levels[0] <= ex.level <= levels[1] for ex in c.examples)


def test_bundled_counts_match_dataset_statistics_table() -> None:
    # Table "Dataset statistics": concepts / concept levels / grade levels
    got = {n: (load_rubric(n).K, load_rubric(n).M + 1, load_rubric(n).S + 1) for n in PAPER}
    assert got == {"mohler": (8, 3, 6), "asap2": (8, 5, 6), "mocha": (7, 3, 5)}


def test_bundled_rubrics_hold_paper_text_verbatim() -> None:
    asap = load_rubric("asap2")
    assert asap.concept("UE").anchor(5) == "Strong, well-developed evidence"
    assert asap.concept("TC").examples[0].text == ("My position on driveless cars are bad because they can cause "
                                                   "accidents.")
    assert asap.concept("TC").examples[0].level == 4
    assert asap.concept("OC").name == "Organization & Coherence"
    mocha = load_rubric("mocha")
    pq = mocha.concept("PQ")
    assert [(e.text, e.level, e.reference) for e in pq.examples] == [
        ("it takes a lot of time and energy.", 3, "Because it requires a lot of time and energy."),
        ("it brought a heavy appetite.", 1, "Because it requires a lot of time and energy."),
    ]
    assert mocha.concept("RQ").examples[0].question == "Why might he be wearing a dressing gown?"
    assert mocha.concept("CR").anchor(2) == "Partially correct / unclear"
    assert set(mocha.fields) == {"context", "question", "reference", "response"}
    mohler = load_rubric("mohler")
    assert mohler.concept("FC").definition.startswith("The extent to which the answer contains accurate domain")
    assert mohler.concept("TU").anchor(1) == "Inaccurate or absent terminology"


def test_unknown_concept_and_unknown_rubric_name() -> None:
    with pytest.raises(RubricError, match="no concept 'XX'.*FC, CC"):
        load_rubric("mohler").concept("XX")
    with pytest.raises(RubricError, match="unknown rubric 'nope'.*mohler"):
        load_rubric("nope")


def test_list_rubrics_bundled_and_folder(tmp_path: Path) -> None:
    (tmp_path / "cs101.yaml").write_text(scaffold_rubric("cs101", ["A", "B"]))
    (tmp_path / "broken.yml").write_text("name: [\n")
    stems = [p.stem for p in list_rubrics(tmp_path)]
    assert stems[:3] == ["asap2", "mocha", "mohler"] and set(stems[3:]) == {"cs101", "broken"}
    infos = {i.name: i for i in rubric_infos(tmp_path)}
    assert infos["mohler"].bundled and infos["mohler"].n_concepts == 8
    assert not infos["cs101"].bundled and infos["cs101"].error is None
    assert infos["broken"].error and "broken.yml:" in infos["broken"].error
    with pytest.raises(RubricError, match="not a folder"):
        list_rubrics(tmp_path / "missing")


# -- one clear error per bad input: file, line, field ------------------------------------------------------------


def _error(text: str) -> str:
    with pytest.raises(RubricError) as e:
        parse_rubric(text, F)
    msg = str(e.value)
    assert "\n" not in msg and "Traceback" not in msg
    return msg


def test_duplicate_concept_key_points_at_the_second_key() -> None:
    text = edited("- key: CC", "- key: FC")
    msg = _error(text)
    assert msg.startswith(f"{F}:{line_of(text, 'key: FC', 1)}: concepts.1.key: duplicate concept key 'FC'")


def test_non_contiguous_levels_point_at_the_offending_level() -> None:
    text = edited("{value: 2, anchor: Partial coverage}", "{value: 4, anchor: Partial coverage}")
    msg = _error(text)
    assert msg.startswith(f"{F}:{line_of(text, 'value: 4, anchor: Partial coverage')}: concepts.1.levels.1.value:")
    assert "contiguous" in msg and "should be 2" in msg


def test_levels_out_of_order_are_reported() -> None:
    text = edited(
        "      - {value: 1, anchor: Irrelevant}\n      - {value: 2, anchor: Partially relevant}",
        "      - {value: 2, anchor: Partially relevant}\n      - {value: 1, anchor: Irrelevant}",
    )
    msg = _error(text)
    assert msg.startswith(f"{F}:{line_of(text, 'value: 2, anchor: Partially relevant')}: concepts.4.levels.0.value:")


def test_level_without_anchor() -> None:
    text = edited("{value: 2, anchor: Basic usage}", "{value: 2}")
    msg = _error(text)
    assert msg.startswith(f"{F}:{line_of(text, '{value: 2}')}: concepts.2.levels.1.anchor: required field 'anchor'")


def test_level_with_blank_anchor() -> None:
    text = edited("{value: 2, anchor: Basic usage}", "{value: 2, anchor: '   '}")
    msg = _error(text)
    assert msg.startswith(f"{F}:{line_of(text, 'value: 2, anchor:', 2)}: concepts.2.levels.1.anchor: anchor is empty")


def test_example_level_out_of_range() -> None:
    text = edited("level: 1, note: lacks domain terms", "level: 7, note: lacks domain terms")
    msg = _error(text)
    assert msg.startswith(f"{F}:{line_of(text, 'lacks domain terms')}: concepts.2.examples.1.level:")
    assert "level 7, outside its levels 1..3" in msg


def test_unknown_field_in_a_concept() -> None:
    text = edited("    name: Terminology Usage\n", "    name: Terminology Usage\n    colour: red\n")
    msg = _error(text)
    assert msg.startswith(f"{F}:{line_of(text, 'colour: red')}: concepts.2.colour: unknown field 'colour'")


def test_unknown_top_level_field() -> None:
    text = mohler_text() + "owner: me\n"
    assert _error(text).startswith(f"{F}:{line_of(text, 'owner: me')}: owner: unknown field 'owner'")


def test_unknown_input_field_name() -> None:
    text = edited("  reference: The instructor's", "  answer_key: The instructor's")
    msg = _error(text)
    assert msg.startswith(f"{F}:{line_of(text, 'fields:')}: fields: unknown input field(s) ['answer_key']")


def test_yaml_syntax_error() -> None:
    text = edited("    name: Terminology Usage\n", "    name: [Terminology Usage\n")
    msg = _error(text)
    bad = line_of(text, "name: [Terminology Usage")
    # the parser notices one line later; the message names both lines
    assert msg.startswith(f"{F}:{bad + 1}: (yaml): YAML syntax error:")
    assert f"started at line {bad}" in msg


def test_yaml_tab_indentation_error_names_its_line() -> None:
    text = edited("    name: Relevance\n", "\tname: Relevance\n")
    assert _error(text).startswith(f"{F}:{line_of(text, chr(9) + 'name: Relevance')}: (yaml): YAML syntax error")


def test_duplicate_yaml_key() -> None:
    text = edited("    name: Terminology Usage\n", "    name: Terminology Usage\n    name: Terms\n")
    msg = _error(text)
    assert msg.startswith(f"{F}:{line_of(text, 'name: Terms')}: concepts.2.name: duplicate key 'name'")
    assert f"first at line {line_of(text, 'name: Terminology Usage')}" in msg


def test_missing_required_field() -> None:
    text = edited('version: "1.0"\n', "")
    assert ": version: required field 'version' is missing" in _error(text)


def test_wrong_type_names_field_and_line() -> None:
    text = edited("{value: 3, anchor: Correct}", "{value: three, anchor: Correct}")
    msg = _error(text)
    assert msg.startswith(f"{F}:{line_of(text, 'value: three')}: concepts.0.levels.2.value:")


def test_scale_disagreeing_with_every_concept_points_at_scale() -> None:
    text = edited("scale: {min: 1, max: 3}", "scale: {min: 1, max: 4}")
    assert _error(text).startswith(f"{F}:{line_of(text, 'scale:')}: scale: scale is 1..4 but every concept has levels "
                                   "1..3")


def test_one_concept_off_the_scale_points_at_its_levels() -> None:
    text = edited("      - {value: 3, anchor: Fluent and readable}\n",
                  "      - {value: 3, anchor: Fluent and readable}\n      - {value: 4, anchor: Poetic}\n")
    msg = _error(text)
    fr_levels = [i + 1 for i, ln in enumerate(text.splitlines()) if ln.strip() == "levels:"][-1]
    assert msg.startswith(f"{F}:{fr_levels}: concepts.7.levels: concept FR has levels 1..4 but the rubric scale is "
                          "1..3")


def test_empty_and_non_mapping_files() -> None:
    assert _error("") == f"{F}:1: (top level): the file is empty; start from `rubrictool rubric new`"
    assert _error("- a\n- b\n").startswith(f"{F}:1: (top level): a rubric must be a YAML mapping")


def test_every_problem_is_listed_one_per_line_in_file_order() -> None:
    text = edited("{value: 2, anchor: Basic usage}", "{value: 2}")
    text = edited("    name: Relevance\n", "    name: Relevance\n    weight: 2\n", text)
    text = edited("- key: CC", "- key: FC", text)
    errors = rubric_errors(text, F)
    assert [e.split(": ")[1] for e in errors] == ["concepts.1.key", "concepts.2.levels.1.anchor", "concepts.4.weight"]
    lines = [int(e.split(":")[1]) for e in errors]
    assert lines == sorted(lines)
    with pytest.raises(RubricError, match=r"\(\+2 more; see `rubrictool rubric validate bad.yaml`\)"):
        parse_rubric(text, F)
    assert rubric_errors(mohler_text(), F) == []


def test_validate_files_reports_per_file(tmp_path: Path) -> None:
    good = tmp_path / "good.yaml"
    good.write_text(mohler_text())
    bad = tmp_path / "bad.yaml"
    bad.write_text(edited("{value: 2, anchor: Basic usage}", "{value: 2}"))
    out = validate_rubric_files([good, bad, tmp_path / "none.yaml"])
    assert out[str(good)] == []
    assert len(out[str(bad)]) == 1 and out[str(bad)][0].startswith(f"{bad}:")
    assert "no such file" in out[str(tmp_path / "none.yaml")][0]


def test_load_rubric_from_path_names_the_file(tmp_path: Path) -> None:
    p = tmp_path / "x.yaml"
    p.write_text(edited("- key: CC", "- key: FC"))
    with pytest.raises(RubricError, match=rf"^{p}:\d+: concepts.1.key"):
        load_rubric(p)
    with pytest.raises(RubricError, match="no such rubric file"):
        load_rubric(tmp_path / "missing.yaml")


# -- lint ------------------------------------------------------------------------------------------------------------


def _codes(r: Rubric) -> list[str]:
    return [w.code for w in lint_rubric(r)]


def test_lint_bundled_rubrics_only_miss_examples_for_some_levels() -> None:
    for name in PAPER:
        codes = set(_codes(load_rubric(name)))
        assert codes == {"level-without-example"}, (name, codes)


def test_lint_near_duplicate_definitions() -> None:
    r = load_rubric("mohler")
    fc_def = r.concept("FC").definition
    text = edited(r.concept("FR").definition, fc_def.replace("accurate", "correct"))
    warns = [w for w in lint_rubric(parse_rubric(text)) if w.code == "near-duplicate-definition"]
    assert len(warns) == 1 and warns[0].where == "concepts.FC+FR"
    assert lint_rubric(parse_rubric(text), similarity=0.999) == [
        w for w in lint_rubric(parse_rubric(text)) if w.code != "near-duplicate-definition"
    ]


def test_lint_repeated_anchors_within_and_across_concepts() -> None:
    text = edited("{value: 2, anchor: Partially correct}", "{value: 2, anchor: Correct}")
    text = edited("{value: 2, anchor: Somewhat clear}", "{value: 2, anchor: Partial coverage}", text)
    warns = [w for w in lint_rubric(parse_rubric(text)) if w.code == "repeated-anchor"]
    where = {w.where for w in warns}
    assert where == {"concepts.FC.levels.3", "concepts.CP.levels.2"}
    assert any("same anchor as level 2" in w.message for w in warns)
    assert any("also used by CC.2" in w.message for w in warns)


def test_lint_missing_examples_and_placeholders() -> None:
    r = parse_rubric(scaffold_rubric("cs101", ["A", "B"], levels=3))
    warns = lint_rubric(r)
    codes = [w.code for w in warns]
    assert codes.count("level-without-example") == 2 and codes.count("placeholder") >= 2
    text = edited(
        '      - {text: "It help find problem in program.", level: 2, note: some errors}\n'
        '      - {text: "It help with thing.", level: 1, note: difficult to read}\n', "      []\n"
    )
    warns = lint_rubric(parse_rubric(text))
    assert [w.where for w in warns if w.code == "no-examples"] == ["concepts.FR.examples"]
    assert str(warns[-1]).startswith("concepts.FR.examples: no-examples:")


# -- scaffolding -------------------------------------------------------------------------------------------------------


def test_scaffold_validates_and_loads_with_the_requested_shape() -> None:
    text = scaffold_rubric("cs101", ["FC", "CC", "TU"], levels=4, grade_min=0, grade_max=10, title="CS 101")
    r = parse_rubric(text, "cs101.yaml")
    assert r.name == "cs101" and r.title == "CS 101" and r.keys == ["FC", "CC", "TU"]
    assert r.scale.values == [1, 2, 3, 4] and (r.grade.min, r.grade.max) == (0, 10)
    assert all(len(c.levels) == 4 and c.examples[0].level == 4 for c in r.concepts)
    assert text.count("\n#") >= 5 and "TODO" in text  # commented, with places to fill in


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"name": "bad name", "keys": ["A"]}, "rubric name"),
        ({"name": "x", "keys": []}, "at least one concept key"),
        ({"name": "x", "keys": ["1A"]}, "starts with a letter"),
        ({"name": "x", "keys": ["A", "A"]}, "given twice"),
        ({"name": "x", "keys": ["A"], "levels": 1}, "at least 2"),
        ({"name": "x", "keys": ["A"], "grade_min": 5, "grade_max": 5}, "max must be greater"),
    ],
)
def test_scaffold_rejects_bad_flags(kwargs: dict[str, object], match: str) -> None:
    with pytest.raises(RubricError, match=match):
        scaffold_rubric(**kwargs)  # type: ignore[arg-type]


# -- exports
# ------------------------------------------------------------------------------------------------------------


def test_markdown_export_reads_like_the_paper_table() -> None:
    md = export_markdown(load_rubric("mohler"))
    lines = md.splitlines()
    header = lines.index("| Concept | Definition | Example | Score scale |")
    rows = [ln for ln in lines[header + 2 :] if ln.startswith("| ")]
    assert len(rows) == 8
    fc = rows[0].split(" | ")
    assert fc[0] == "| Factual Correctness (FC)"
    assert "“A prototype program is used to collect data.” (FC=1, incorrect concept)" in fc[2]
    assert fc[3] == "1 = Incorrect<br>2 = Partially correct<br>3 = Correct |"
    mocha = export_markdown(load_rubric("mocha"))
    assert "*Q:* Why might he be wearing a dressing gown?<br>*Response:* “He is a fan of Vince McMahon.”" in mocha
    assert "*Reference:* “Because it requires a lot of time and energy.”" in mocha


def test_markdown_escapes_pipes() -> None:
    text = edited("name: Clarity / Precision", "name: Clarity | Precision")
    assert "Clarity \\| Precision (CP)" in export_markdown(parse_rubric(text))


def test_json_export_round_trips() -> None:
    for name in PAPER:
        r = load_rubric(name)
        back = Rubric.model_validate(json.loads(export_json(r)))
        assert back == r


def test_bundled_dir_holds_exactly_the_three_rubrics() -> None:
    assert sorted(p.stem for p in BUNDLED_DIR.glob("*.yaml")) == ["asap2", "mocha", "mohler"]


def test_documented_yaml_snippets_are_valid_rubrics() -> None:
    root = Path(__file__).resolve().parent.parent
    guide = (root / "docs" / "rubrics.md").read_text(encoding="utf-8")
    assert re.findall(r"```yaml\n(.*?)```", guide, re.DOTALL), "docs/rubrics.md lost its rubric YAML example"
    for doc in [root / "README.md", *sorted((root / "docs").glob("*.md"))]:
        for block in re.findall(r"```yaml\n(.*?)```", doc.read_text(encoding="utf-8"), re.DOTALL):
            assert parse_rubric(block, doc.name).K >= 1


_NOISE = [":", "-", "{", "}", "[", "]", "'", '"', "#", "\t", " ", "&", "*", "!", "|", ">", "%", "@", ",", "?",
          "  ", "\n", "key", "value", "1", "null", "~"]


@settings(max_examples=60, deadline=None)
@given(edits=st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 200), st.sampled_from(_NOISE),
                                st.integers(0, 3)), min_size=1, max_size=3))
def test_any_mangled_rubric_loads_or_fails_with_one_located_line(edits: list[tuple[int, int, str, int]]) -> None:
    lines = mohler_text().splitlines()
    for i, j, noise, cut in edits:
        k = i % len(lines)
        lines[k] = lines[k][:j] + noise + lines[k][j + cut :]
    text = "\n".join(lines) + "\n"
    try:
        parse_rubric(text, F)
    except RubricError as e:
        msg = str(e)
        assert re.match(rf"^{F}(:\d+)?: \S+", msg) and "\n" not in msg, msg
        assert rubric_errors(text, F)[0] in msg
    else:
        assert rubric_errors(text, F) == []


def test_lint_asks_for_the_cross_question_marks_where_items_have_a_reference() -> None:
    marked = load_rubric("mohler")
    assert "no-cross-question-marks" not in _codes(marked)
    bare = marked.model_copy(update={"concepts": [c.model_copy(update={"reference_is_top": False,
                                                                        "off_topic_is_bottom": False})
                                                  for c in marked.concepts]})
    assert "no-cross-question-marks" in _codes(bare)
    assert "no-cross-question-marks" not in _codes(load_rubric("asap2"))  # essays: no reference answer to mark


def test_the_cross_question_marks_load_and_a_wrong_value_names_the_field() -> None:
    rb = load_rubric("mohler")
    assert [c.key for c in rb.concepts if c.reference_is_top] == ["FC", "CC", "TU", "R"]
    assert [c.key for c in rb.concepts if c.off_topic_is_bottom] == ["FC", "CC", "R"]
    text = mohler_text().replace("reference_is_top: true", "reference_is_top: often", 1)
    with pytest.raises(RubricError, match=r"concepts\.0\.reference_is_top"):
        parse_rubric(text)
