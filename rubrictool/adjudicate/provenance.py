"""Who set each concept level of an AdjudicatedTable: the reviewers' vote (human reviewers in Label Studio, an LLM panel
or a trained grader, the table's ``label_source``), a teacher's resolution (``adjudicate --resolutions``; the row's
``resolved_concepts``) or the pre-annotations' vote where no reviewer labelled (``unreviewed_concepts``).

The table carries this per level already (those three provenance columns); :func:`level_sources` reads it back as one
source per (item, concept), and :func:`level_source_counts` / :func:`describe_level_sources` give every run, page and
diagnosis the shares ("276 of 276 levels set by a teacher's resolution"), so none of them states a source the table
does not show.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

__all__ = ["LEVEL_SOURCES", "describe_level_sources", "level_source_counts", "level_sources", "levels_by_people"]

LEVEL_SOURCES = {
    "resolution": "a teacher's resolution",
    "human": "human reviewers",
    "llm": "the LLM panel",
    "model": "a trained grader",
    "mixed": "a panel of people and models",
    "pre-annotation": "the pre-annotations, which no reviewer saw",
}
"""Each level source and its words on a page, most authoritative first."""


def _keys(cell: Any) -> set[str]:
    return {k.strip() for k in str(cell).split(",") if k.strip()} if isinstance(cell, str) else set()


def level_sources(table: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """One row per labelled (item, concept) of an AdjudicatedTable: ``id``, ``concept``, ``source`` — ``resolution``
    when the concept is among the row's ``resolved_concepts``, ``pre-annotation`` when among its
    ``unreviewed_concepts``, else the row's ``label_source`` (human, llm, model or mixed). Empty when the table has no
    ``label_source`` column (a table not made by ``adjudicate``)."""
    if "label_source" not in table.columns:
        return pd.DataFrame(columns=["id", "concept", "source"])
    rows = []
    resolved = table["resolved_concepts"] if "resolved_concepts" in table else pd.Series("", index=table.index)
    unrev = table["unreviewed_concepts"] if "unreviewed_concepts" in table else pd.Series("", index=table.index)
    for i, (rid, src, res, pre) in enumerate(zip(table["id"].astype(str), table["label_source"], resolved, unrev)):
        done, filled = _keys(res), _keys(pre)
        for k in keys:
            if k not in table.columns or pd.isna(table[k].iloc[i]):
                continue
            who = "resolution" if k in done else "pre-annotation" if k in filled else str(src)
            rows.append((rid, k, who))
    return pd.DataFrame(rows, columns=["id", "concept", "source"])


def level_source_counts(table: pd.DataFrame, keys: list[str]) -> dict[str, int]:
    """Levels per source (:func:`level_sources`), most authoritative first; {} without provenance columns."""
    counts = level_sources(table, keys)["source"].value_counts()
    order = [s for s in LEVEL_SOURCES if s in counts.index] + sorted(set(counts.index) - set(LEVEL_SOURCES))
    return {str(s): int(counts[s]) for s in order}


def describe_level_sources(counts: dict[str, int]) -> str | None:
    """"276 of 276 levels set by a teacher's resolution", or each source's share when mixed
    ("200 of 276 levels set by the LLM panel, 76 by a teacher's resolution"); None without counts."""
    total = sum(counts.values())
    if not total:
        return None
    (first, n0), *rest = counts.items()
    parts = [f"{n0} of {total} levels set by {LEVEL_SOURCES.get(first, first)}"]
    parts += [f"{n} by {LEVEL_SOURCES.get(s, s)}" for s, n in rest]
    return ", ".join(parts)


def levels_by_people(counts: dict[str, int]) -> bool | None:
    """Whether every level was set by people (reviewers or a teacher's resolution); None without counts."""
    if not counts:
        return None
    return set(counts) <= {"resolution", "human"}
