"""Who made a run's training labels: the record a run keeps (run.json ``labels``, :func:`label_source`) and the one
line its reports say about it (:func:`describe_labels`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["describe_labels", "label_source"]


def label_source(table: pd.DataFrame | None = None, agreement: dict[str, Any] | None = None,
                 given: dict[str, Any] | None = None, rubric_keys: list[str] | None = None) -> dict[str, Any]:
    """Who made the training labels: ``given`` (a benchmark's passes), else agreement.json's ``label_source`` and its
    reviewer counts, else the AdjudicatedTable's ``label_source`` column (counts per source). With ``rubric_keys``,
    who set each level decides (``levels``: levels per source, :mod:`rubrictool.adjudicate.provenance`): a table
    whose every level a teacher resolved is ``resolution``, whatever the reviewers were."""
    if given:
        return dict(given)
    out: dict[str, Any] = {"source": "unknown", "expert_validated": None}
    if table is not None and "label_source" in table.columns:
        counts = {str(k): int(v) for k, v in table["label_source"].dropna().astype(str).value_counts().items()}
        if counts:
            out["counts"] = counts
            out["source"] = next(iter(counts)) if len(counts) == 1 else "mixed"
    if agreement:
        if agreement.get("label_source"):
            out["source"] = str(agreement["label_source"])
        for key in ("n_reviewers", "reviewers", "method", "note"):
            if agreement.get(key) is not None:
                out[key] = agreement[key]
    if table is not None and rubric_keys:  # who set each level: the table's provenance columns, over agreement.json's
        from rubrictool.adjudicate.provenance import level_source_counts, levels_by_people

        levels = level_source_counts(table, rubric_keys)
        if levels:
            out["levels"] = levels
            out["source"] = next(iter(levels)) if len(levels) == 1 else "mixed"
            out["expert_validated"] = levels_by_people(levels)
            return out
    if out["source"] in ("llm", "model"):
        out["expert_validated"] = False
    elif out["source"] == "human":
        out["expert_validated"] = True
    return out


def describe_labels(labels: dict[str, Any]) -> str | None:
    """One line on who made a run's training labels (run.json ``labels``), for its report; None when unknown."""
    source = str(labels.get("source") or "unknown")
    if source == "unknown":
        return None
    who = {"llm": "an LLM panel", "human": "human reviewers", "model": "a trained grader",
           "mixed": "a mix of sources", "resolution": "a teacher",
           "pre-annotation": "pre-annotations"}.get(source, source)
    levels = labels.get("levels")
    if isinstance(levels, dict) and levels:  # who set each level, from the table itself
        from rubrictool.adjudicate.provenance import describe_level_sources

        text = f"{who} ({describe_level_sources({str(k): int(v) for k, v in levels.items()})})"
        if labels.get("expert_validated") is False:
            text += ": not expert-validated"
        elif labels.get("expert_validated") is True:
            text += ": set by people"
        return text
    parts = []
    reviewers = labels.get("reviewers")
    if isinstance(reviewers, list) and reviewers:
        parts.append(", ".join(str(r) for r in reviewers))
    elif labels.get("passes"):
        parts.append("passes " + ", ".join(str(p) for p in labels["passes"]))
    elif labels.get("n_reviewers"):
        parts.append(f"{labels['n_reviewers']} reviewers")
    if labels.get("method"):
        parts.append(f"{labels['method']} vote" if labels["method"] == "majority" else str(labels["method"]))
    counts = labels.get("counts")
    if isinstance(counts, dict) and len(counts) > 1:
        parts.append(", ".join(f"{k} {v} answers" for k, v in counts.items()))
    text = who + (f" ({'; '.join(parts)})" if parts else "")
    if labels.get("expert_validated") is False:
        text += ": not expert-validated"
    elif labels.get("expert_validated") is True:
        text += ": reviewed by people"
    return text
