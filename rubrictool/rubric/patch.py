"""Edits of rubric YAML text that keep everything else as written (comments, layout), and their diffs.

A suggestion (fitted points, a new concept, sharper anchors) is made as an edit of the rubric's own file,
validated with the rubric loader, and shown as a unified diff an author can read and apply.
"""

from __future__ import annotations

import difflib
import json
import re
from typing import Any

import yaml

from rubrictool.errors import RubricError

__all__ = ["add_concept", "set_anchor", "set_grading", "set_level_points", "unified_diff"]


_PLAIN = re.compile(r"[A-Za-z][A-Za-z0-9 _.()/'-]*[A-Za-z0-9.)]")


def _root(text: str) -> yaml.MappingNode:
    try:
        node = yaml.compose(text)
    except yaml.YAMLError as e:
        raise RubricError(f"cannot edit the rubric: it is not valid YAML ({e.__class__.__name__})") from None
    if not isinstance(node, yaml.MappingNode):
        raise RubricError("cannot edit the rubric: its top level is not a mapping")
    return node


def _get(node: yaml.Node, key: str) -> tuple[yaml.ScalarNode, yaml.Node] | None:
    if isinstance(node, yaml.MappingNode):
        for k, v in node.value:
            if isinstance(k, yaml.ScalarNode) and k.value == key:
                return k, v
    return None


def _concepts(root: yaml.MappingNode) -> yaml.SequenceNode:
    found = _get(root, "concepts")
    if found is None or not isinstance(found[1], yaml.SequenceNode):
        raise RubricError("cannot edit the rubric: it has no concepts: list")
    return found[1]


def _levels(concept: yaml.Node) -> list[yaml.Node]:
    found = _get(concept, "levels")
    if found is None or not isinstance(found[1], yaml.SequenceNode):
        raise RubricError("cannot edit the rubric: a concept has no levels: list")
    return list(found[1].value)


def _scalar(v: Any) -> str:
    """A YAML scalar for a number or a string (JSON's double-quoted strings are valid YAML)."""
    if isinstance(v, float):
        return f"{v:g}"
    if isinstance(v, int):
        return str(v)
    text = str(v)
    if _PLAIN.fullmatch(text) and yaml.safe_load(text) == text:  # plain when it reads back as the same string
        return text
    return json.dumps(text, ensure_ascii=False)


def _apply(text: str, edits: list[tuple[int, int, str]]) -> str:
    """Replace text[start:end] by each replacement, last first so earlier offsets stay valid."""
    for start, end, new in sorted(edits, key=lambda e: -e[0]):
        text = text[:start] + new + text[end:]
    return text


def _end(text: str, node: yaml.Node) -> int:
    """Where a node's text ends. A block scalar (``>-``, ``|``) or block collection ends, for the YAML scanner, at
    the next token, past the line break and the next line's indentation: an edit there would land on the next
    line. Back up over that whitespace to the node's last character."""
    end = node.end_mark.index
    while end > node.start_mark.index and text[end - 1] in " \t\r\n":
        end -= 1
    return end


def _line_start(text: str, index: int) -> int:
    return text.rfind("\n", 0, index) + 1


def set_level_points(text: str, points: list[list[float]]) -> str:
    """Give every level ``points:`` (``points[k][j]`` for concept k's j-th level), replacing any already there.
    Flow mappings (``{value: 1, anchor: ...}``) get ``, points: x`` before the brace; block mappings a line."""
    root = _root(text)
    edits: list[tuple[int, int, str]] = []
    concepts = _concepts(root).value
    if len(concepts) != len(points):
        raise RubricError(f"{len(points)} concepts' points for a rubric of {len(concepts)} concepts")
    for c, pts in zip(concepts, points):
        levels = _levels(c)
        if len(levels) != len(pts):
            raise RubricError(f"{len(pts)} points for a concept of {len(levels)} levels")
        for lv, p in zip(levels, pts):
            if not isinstance(lv, yaml.MappingNode):
                raise RubricError("cannot edit the rubric: a level is not a mapping")
            have = _get(lv, "points")
            if have is not None:
                edits.append((have[1].start_mark.index, _end(text, have[1]), _scalar(p)))
            elif lv.flow_style:
                close = lv.end_mark.index - 1  # the "}"
                edits.append((close, close, f", points: {_scalar(p)}"))
            else:
                last = lv.value[-1][1]
                first_key = lv.value[0][0]
                indent = " " * first_key.start_mark.column
                end = _end(text, last)
                edits.append((end, end, f"\n{indent}points: {_scalar(p)}"))
    return _apply(text, edits)


def set_grading(text: str, grading: dict[str, Any]) -> str:
    """Set the top-level ``grading:`` block (replacing one already there), written just before ``concepts:``."""
    root = _root(text)
    body = "grading: {" + ", ".join(
        f"{k}: [{', '.join(_scalar(x) for x in v)}]" if isinstance(v, list)
                                    else f"{k}: {_scalar(v) if not isinstance(v, str) else v}"
        for k, v in grading.items()) + "}\n"
    have = _get(root, "grading")
    if have is not None:
        start = _line_start(text, have[0].start_mark.index)
        end = _end(text, have[1])
        nl = text.find("\n", end - 1)
        return text[:start] + body + text[(nl + 1 if nl >= 0 else len(text)):]
    found = _get(root, "concepts")
    if found is None:
        raise RubricError("cannot edit the rubric: it has no concepts: list")
    at = _line_start(text, found[0].start_mark.index)
    return text[:at] + body + text[at:]


def set_anchor(text: str, concept: int, level: int, anchor: str) -> str:
    """Replace the anchor of concept #``concept``'s level #``level`` (0-based positions in the file)."""
    root = _root(text)
    concepts = _concepts(root).value
    if not 0 <= concept < len(concepts):
        raise RubricError(f"no concept #{concept}: the rubric has {len(concepts)}")
    levels = _levels(concepts[concept])
    if not 0 <= level < len(levels):
        raise RubricError(f"no level #{level} in concept #{concept}")
    have = _get(levels[level], "anchor")
    if have is None:
        raise RubricError(f"level #{level} of concept #{concept} has no anchor to replace")
    return _apply(text, [(have[1].start_mark.index, _end(text, have[1]), _scalar(anchor))])


def add_concept(text: str, concept: dict[str, Any]) -> str:
    """Append a concept (key, name, definition, levels of value/anchor, ...) at the end of ``concepts:``,
    indented like the concepts already there."""
    root = _root(text)
    seq = _concepts(root)
    if not seq.value:
        raise RubricError("cannot edit the rubric: its concepts: list is empty")
    first = seq.value[0]
    col = first.start_mark.column  # where the first key of a concept item starts ("- key: ..." -> after "- ")
    dash = " " * max(col - 2, 0) + "- "
    pad = " " * col
    lines = []
    for i, (k, v) in enumerate(concept.items()):
        lead = dash if i == 0 else pad
        if k == "levels" and isinstance(v, list):
            lines.append(f"{lead}levels:")
            for lv in v:
                inner = ", ".join(f"{a}: {_scalar(b)}" for a, b in lv.items())
                lines.append(f"{pad}  - {{{inner}}}")
        else:
            lines.append(f"{lead}{k}: {_scalar(v)}")
    last_end = _end(text, seq.value[-1])
    at = text.find("\n", last_end - 1)
    at = len(text) if at < 0 else at + 1
    block = "\n".join(lines) + "\n"
    if at == len(text) and not text.endswith("\n"):
        block = "\n" + block
    return text[:at] + block + text[at:]


def unified_diff(old: str, new: str, path: str) -> str:
    """``diff -u`` of two versions of a file (``a/PATH`` → ``b/PATH``), '' when they are the same."""
    return "".join(difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True),
                                        fromfile=f"a/{path}", tofile=f"b/{path}"))
