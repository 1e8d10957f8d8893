"""The labelling interface generated from a rubric, and the check that a project still matches it."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path

import jinja2

from rubrictool.errors import ReviewError
from rubrictool.review.settings import TEMPLATE
from rubrictool.rubric import Rubric

__all__ = ["check_interface", "parse_label_config", "render_label_config"]


def render_label_config(rubric: Rubric, template: str | Path | None = None) -> str:
    """The Label Studio XML for a rubric (question / reference / context shown when the rubric has them)."""
    reserved = {"item_id", "question", "reference", "context", "response"}
    clash = [k for k in rubric.keys if k in reserved or k.startswith("definition_")]
    if clash:
        raise ReviewError(
            f"rubric {rubric.name}: concept key(s) {', '.join(clash)} clash with the interface's own names "
            f"({', '.join(sorted(reserved))}, definition_*); rename them in the rubric YAML"
        )
    path = Path(template) if template else TEMPLATE
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(path.parent)),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
    )
    env.filters["static"] = lambda s: str(s).replace("$", "＄")  # "$x" would be read as task data
    try:
        xml = env.get_template(path.name).render(rubric=rubric, show=_shown_fields(rubric))
    except jinja2.TemplateError as e:
        line = getattr(e, "lineno", None)
        raise ReviewError(f"{path}{f':{line}' if line else ''}: template error: {e}") from None
    parse_label_config(xml)  # our own output must satisfy the contract
    return xml


def _shown_fields(rubric: Rubric) -> list[str]:
    return [f for f in ("question", "reference", "context") if f in rubric.fields]


def parse_label_config(xml: str) -> dict[str, list[int]]:
    """The concept controls of an interface: ``{concept key: [levels]}`` from each ``<Choices>`` whose
    choices all store an integer level (via ``alias``, else ``value``)."""
    try:
        root = ET.fromstring(xml)
    except ET.ParseError as e:
        raise ReviewError(f"the labelling interface is not valid XML ({e})") from None
    out: dict[str, list[int]] = {}
    for el in root.iter("Choices"):
        name = el.get("name") or ""
        levels: list[int] = []
        for ch in el.iter("Choice"):
            stored = ch.get("alias") or ch.get("value") or ""
            if not re.fullmatch(r"-?\d+", stored.strip()):
                break
            levels.append(int(stored))
        else:
            if name and levels:
                out[name] = levels
    return out


def check_interface(rubric: Rubric, xml: str, project: str) -> None:
    """Raise if the project's interface no longer matches the rubric (concept keys and levels)."""
    have = parse_label_config(xml)
    want = {c.key: c.values for c in rubric.concepts}
    if have == want:
        return
    missing = [k for k in want if k not in have]
    extra = [k for k in have if k not in want]
    changed = [k for k in want if k in have and have[k] != want[k]]
    parts = []
    if missing:
        parts.append(f"concepts not in the project: {', '.join(missing)}")
    if extra:
        parts.append(f"concepts not in the rubric: {', '.join(extra)}")
    if changed:
        parts.append("different levels for " + ", ".join(f"{k} ({have[k]} vs {want[k]})" for k in changed))
    raise ReviewError(
        f"project {project} does not match rubric {rubric.name} ({'; '.join(parts)})",
        hint="push this rubric to a new project with --project NEW-TITLE, or pass the rubric the project was made with",
    )
