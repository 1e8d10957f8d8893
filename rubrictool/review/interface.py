"""The labelling interface generated from a rubric, and the check that a project still matches it."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path

import jinja2

from rubrictool.errors import ReviewError
from rubrictool.review.settings import TEMPLATE
from rubrictool.rubric import Rubric

__all__ = [
    "check_interface",
    "parse_label_config",
    "prefilled_by",
    "render_label_config",
    "shown_fields",
]


_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")
"""Characters XML 1.0 cannot carry at all (escaping does not help): dropped from rubric text."""


def _static(text: object) -> str:
    """Rubric text as a literal in the interface: no XML-forbidden characters, and "$" shown as "＄" (Label
    Studio would read "$x" as the task's data field x). XML escaping itself is the template's autoescape."""
    return _NOT_XML.sub("", str(text)).replace("$", "＄")


def render_label_config(
    rubric: Rubric, template: str | Path | None = None, prefilled_by: str | None = None
) -> str:
    """The Label Studio XML for a rubric (question / reference / context shown when the rubric has them).

    Each concept shows its definition, its worked examples (the rubric's ``examples``: level, anchor,
    text, note) and one choice per level with its anchor. ``prefilled_by`` None (blind review) puts a
    "Blind review" line on top; a model name (the project's ``model_version``, whose levels Label Studio
    pre-selects) puts a "Pre-filled by <model>" banner on top and names the model on every concept.
    """
    reserved = {"item_id", "question", "reference", "context", "response"}
    clash = [k for k in rubric.keys if k in reserved or k.startswith(("definition_", "example_"))]
    if clash:
        raise ReviewError(
            f"rubric {rubric.name}: concept key(s) {', '.join(clash)} clash with the interface's own names "
            f"({', '.join(sorted(reserved))}, definition_*, example_*); rename them in the rubric YAML"
        )
    if prefilled_by is not None and not _static(prefilled_by).strip():
        raise ReviewError("the pre-filling model has an empty name", hint="name it with --prefill-model")
    path = Path(template) if template else TEMPLATE
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(path.parent)),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
    )
    env.filters["static"] = _static
    try:
        xml = env.get_template(path.name).render(rubric=rubric, show=shown_fields(rubric), prefilled_by=prefilled_by)
    except jinja2.TemplateError as e:
        line = getattr(e, "lineno", None)
        raise ReviewError(f"{path}{f':{line}' if line else ''}: template error: {e}") from None
    parse_label_config(xml)  # our own output must satisfy the contract
    return xml


def shown_fields(rubric: Rubric) -> list[str]:
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


def prefilled_by(xml: str) -> str | None:
    """The model a project's interface says pre-fills the levels (None: a blind-review interface, or one
    made before the banner existed)."""
    try:
        root = ET.fromstring(xml)
    except ET.ParseError:
        return None
    for el in root.iter("Header"):
        m = re.fullmatch(r"Pre-filled by (.+) \(a model, not a reviewer\)", el.get("value") or "")
        if m:
            return m.group(1)
    return None
