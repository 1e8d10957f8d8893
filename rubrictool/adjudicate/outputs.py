"""What adjudication writes: the AdjudicatedTable (training table) and the discussion queue."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
import pandas as pd

from rubrictool.adjudicate.aggregators import BoolArray, DecisionGrid
from rubrictool.errors import AdjudicateError, DataError
from rubrictool.rubric import Rubric
from rubrictool.tables import (
    ADJUDICATED_PROVENANCE,
    ITEM_COLUMNS,
)
from rubrictool.textsafe import md_inline, md_quote

__all__ = [
    "DEFAULT_QUEUE",
    "QUEUE_RULES",
    "discussion_queue",
    "fill_unreviewed",
    "keep_unlabelled",
    "parse_queue_rule",
    "queue_markdown",
    "queue_mask",
    "trainable_rows",
    "training_table",
]

QUEUE_RULES = {
    "all": "every label that is not unanimous (2-to-1 majorities included)",
    "ties": "ties (no single most frequent level)",
    "gap2": "gaps of two levels or more between the reviewers",
}
"""What ``adjudicate --queue`` can send to the discussion queue (combine with commas)."""

DEFAULT_QUEUE = "ties,gap2"
"""The default queue: ties and gaps of two levels or more. A 2-to-1 majority one level apart is decided by the
vote and stays out of the queue (it is still flagged in the table and the decisions)."""


def _joined_keys(mask: BoolArray, keys: Sequence[str]) -> npt.NDArray[np.object_]:
    """Per row of an (N, K) boolean mask, the comma-joined keys where it holds ("" when none)."""
    out: npt.NDArray[np.object_] = np.full(mask.shape[0], "", dtype=object)
    for k, key in enumerate(keys):
        out = np.asarray(np.where(mask[:, k], out + (key + ","), out), dtype=object)
    return np.asarray(pd.Series(out, dtype=object).str.rstrip(",").to_numpy(dtype=object))


def training_table(
    grid: DecisionGrid,
    rubric: Rubric,
    method: str,
    items: pd.DataFrame | None = None,
    label_source: str = "human",
) -> pd.DataFrame:
    """The AdjudicatedTable: ItemTable columns, one integer column per concept, grade, provenance.

    Provenance per item: ``n_reviewers`` (distinct reviewers of the item), ``unanimous`` (every
    concept unanimous), ``n_flagged`` / ``flagged_concepts``, ``n_resolved`` / ``resolved_concepts``,
    ``method``, ``label_source`` (human, llm, model or mixed) and ``unreviewed_concepts`` (empty here;
    :func:`fill_unreviewed` sets it). Items without any review are left out;
    a concept nobody reviewed for an item is missing (<NA>).
    """
    cube = grid.cube
    keys = cube.concepts
    has = grid.n > 0
    body = pd.DataFrame({"id": cube.items.to_numpy(dtype=object).astype(str)})
    for k, key in enumerate(keys):
        body[key] = pd.array(np.where(has[:, k], grid.level[:, k], 0), dtype="Int64")
        if not has[:, k].all():
            body.loc[~has[:, k], key] = pd.NA
    body["n_reviewers"] = (~np.isnan(cube.levels)).any(axis=1).sum(axis=1).astype(np.int64)
    body["unanimous"] = np.asarray((grid.unanimous | ~has).all(axis=1))
    body["n_flagged"] = grid.flagged.sum(axis=1).astype(np.int64)
    body["flagged_concepts"] = _joined_keys(grid.flagged, keys)
    body["n_resolved"] = grid.resolved.sum(axis=1).astype(np.int64)
    body["resolved_concepts"] = _joined_keys(grid.resolved, keys)
    body["method"] = method
    body["label_source"] = label_source
    body["unreviewed_concepts"] = ""
    body = body.loc[np.asarray(has.any(axis=1))].reset_index(drop=True)
    prov = ADJUDICATED_PROVENANCE
    if items is None:
        for col in reversed(ITEM_COLUMNS[1:]):
            body.insert(1, col, None)
        return body
    it = items.copy()
    it["id"] = it["id"].astype(str)
    for col in ITEM_COLUMNS:
        if col not in it.columns:
            it[col] = None
    extra = [c for c in it.columns if c not in ITEM_COLUMNS and c not in body.columns]
    merged = it[ITEM_COLUMNS + extra].merge(body, on="id", how="inner")
    return merged[ITEM_COLUMNS + list(keys) + prov + extra].reset_index(drop=True)


def fill_unreviewed(
    table: pd.DataFrame, pre: DecisionGrid, rubric: Rubric, source: str, items: pd.DataFrame | None = None
) -> pd.DataFrame:
    """The AdjudicatedTable with the labels no reviewer gave taken from ``pre`` (the consensus of the
    pre-annotations, one decision per item and concept the reviews left empty).

    A concept missing from a reviewed item is filled in place; an item nobody reviewed gets a row with
    ``n_reviewers`` 0, ``method`` ``pre-annotation``, ``label_source`` = ``source`` (llm, model or mixed)
    and no flags. ``unreviewed_concepts`` lists, per item, the concepts that came from the pre-annotations.
    """
    keys = list(rubric.keys)
    cube = pre.cube
    has = pre.n > 0  # (N, K)
    pre_ids = cube.items.to_numpy(dtype=object).astype(str)
    filled = pd.DataFrame({"id": pre_ids})
    for k, key in enumerate(cube.concepts):
        filled[key] = pd.array(np.where(has[:, k], pre.level[:, k], 0), dtype="Int64")
        filled.loc[~has[:, k], key] = pd.NA
    filled["unreviewed_concepts"] = _joined_keys(has, cube.concepts)
    filled = filled.loc[np.asarray(has.any(axis=1))]
    out = table.copy()
    out["id"] = out["id"].astype(str)
    known = filled["id"].isin(out["id"])
    # 1) concepts missing from reviewed items
    if known.any():
        part = filled.loc[known].set_index("id")
        pos = out.set_index("id").index.get_indexer(part.index)
        for key in keys:
            col = out[key].astype("Float64").to_numpy(dtype=float, na_value=np.nan)  # (N,)
            vals = part[key].astype("Float64").to_numpy(dtype=float, na_value=np.nan)  # (M,)
            take = ~np.isnan(vals) & np.isnan(col[pos])
            col[pos[take]] = vals[take]
            out[key] = pd.array(col, dtype="Float64").astype("Int64")
        extra = part["unreviewed_concepts"].to_numpy(dtype=object)
        out.loc[out.index[pos], "unreviewed_concepts"] = extra
    # 2) items nobody reviewed
    new = filled.loc[~known].reset_index(drop=True)
    if len(new):
        new["n_reviewers"] = 0
        new["unanimous"] = False
        new["n_flagged"] = 0
        new["flagged_concepts"] = ""
        new["n_resolved"] = 0
        new["resolved_concepts"] = ""
        new["method"] = "pre-annotation"
        new["label_source"] = source
        if items is not None:
            it = items.assign(id=items["id"].astype(str))
            extra_cols = [c for c in out.columns if c not in new.columns]
            new = it[["id"] + [c for c in extra_cols if c in it.columns]].merge(new, on="id", how="inner")
        out = pd.concat([out, new.reindex(columns=out.columns)], ignore_index=True)
        if items is not None:
            order = pd.Index(items["id"].astype(str)).get_indexer(pd.Index(out["id"]))
            out = out.iloc[np.argsort(order, kind="stable")].reset_index(drop=True)
    for key in keys:
        out[key] = out[key].astype("Int64")
    return out


def parse_queue_rule(rule: str) -> tuple[str, ...]:
    """``"ties,gap2"`` -> ("ties", "gap2"); an unknown part is an error listing the rules."""
    parts = tuple(dict.fromkeys(p.strip().lower() for p in rule.split(",") if p.strip()))
    bad = [p for p in parts if p not in QUEUE_RULES]
    if bad or not parts:
        raise AdjudicateError(
            f"--queue {rule!r}: unknown rule {bad[0] if bad else '(empty)'!r}; use "
            + ", ".join(f"{k} ({v})" for k, v in QUEUE_RULES.items())
            + "; combine with commas, e.g. ties,gap2 (the default)"
        )
    return parts


def queue_mask(grid: DecisionGrid, rule: str = DEFAULT_QUEUE) -> BoolArray:
    """``(N, K)``: the decisions ``rule`` sends to the discussion queue (:data:`QUEUE_RULES`, comma-joined),
    plus every resolved one (its decision is on record there)."""
    parts = parse_queue_rule(rule)
    levels = grid.cube.levels  # (N, K, R), NaN = no review
    seen = ~np.isnan(levels)
    hi = np.where(seen, levels, -np.inf).max(axis=-1)  # (N, K)
    lo = np.where(seen, levels, np.inf).min(axis=-1)  # (N, K)
    has = grid.n >= 2
    picked = np.zeros(grid.n.shape, dtype=bool)
    if "all" in parts:
        picked |= grid.flagged
    if "ties" in parts:
        picked |= grid.tied & has
    if "gap2" in parts:
        picked |= has & (hi - lo >= 2)
    return np.asarray(picked | grid.resolved)


UNLABELLED = "unlabelled"
"""``method`` of an AdjudicatedTable row whose item no reviewer and no model labelled (every reply failed)."""


def keep_unlabelled(table: pd.DataFrame, items: pd.DataFrame, rubric: Rubric) -> tuple[pd.DataFrame, list[str]]:
    """The AdjudicatedTable with a row for every item of ``items`` that has no label at all (e.g. every
    model's reply failed): concept columns empty, ``n_reviewers`` 0, ``method`` ``unlabelled``,
    ``label_source`` ``none``; rows in the items' order. Returns (table, the ids of those items).
    Nothing in ``items`` is dropped silently; ``train`` skips these rows and says how many."""
    ids = items["id"].astype(str)
    missing = ~ids.isin(set(table["id"].astype(str)))
    if not missing.any():
        return table, []
    new = items.loc[missing.to_numpy()].assign(id=ids[missing.to_numpy()]).reindex(columns=table.columns)
    for key in rubric.keys:
        new[key] = pd.NA
    new = new.assign(
        n_reviewers=0, unanimous=False, n_flagged=0, flagged_concepts="", n_resolved=0, resolved_concepts="",
        method=UNLABELLED, label_source="none", unreviewed_concepts="",
    )
    out = pd.concat([table, new], ignore_index=True)
    order = pd.Index(ids).get_indexer(pd.Index(out["id"].astype(str)))
    out = out.iloc[np.argsort(order, kind="stable")].reset_index(drop=True)
    for key in rubric.keys:
        out[key] = out[key].astype("Int64")
    return out, new["id"].tolist()


def trainable_rows(table: pd.DataFrame, rubric: Rubric, source: str) -> tuple[pd.DataFrame, list[str]]:
    """The rows of an AdjudicatedTable a grader can learn from, and the ids of the unlabelled rows left out
    (every concept empty: items that no reviewer or model labelled).

    A table adjudicated without ``--items`` has no responses or grades: that is an error naming
    ``source`` and the fix (re-run adjudicate with ``--items``), not a "grade missing" on row 1.
    """
    def empty(col: str) -> bool:
        if col not in table.columns:
            return True
        v = table[col]
        return bool((v.isna() | v.astype(str).str.strip().isin(["", "nan", "None"])).all())

    if "id" not in table.columns:
        raise DataError(f"{source}: no id column (columns: {', '.join(map(str, table.columns))})",
                        hint="give every answer an id: `rubrictool data import FILE` makes stable ones from the "
                        "question and student columns, or add an id column yourself")
    lacking = [c for c in ("response", "grade") if empty(c)]
    if lacking == ["grade"]:  # the answers came along: the item table had no grades to bring
        raise DataError(
            f"{source}: the grade column is empty — the item table given to adjudicate had no grades, so there is "
            "nothing to train on",
            hint="import the course's file again with its grade column (`rubrictool data import FILE --columns "
            "grade=HEADER`), then re-run `rubrictool adjudicate ... --items ITEMS` with it",
        )
    if lacking:
        raise DataError(
            f"{source}: the {' and '.join(lacking)} column(s) are empty — this table was adjudicated without the "
            "item table, so it holds concept labels but no answers or grades to train on",
            hint="re-run `rubrictool adjudicate ... --items ITEMS` with the item file (e.g. from `rubrictool data "
            "import`, with a grade column) and train on the new adjudicated table",
        )
    keys = [k for k in rubric.keys if k in table.columns]
    if not keys:
        return table, []
    none = table[keys].isna().all(axis=1).to_numpy()
    skipped = table.loc[none, "id"].astype(str).tolist()
    return table.loc[~none].reset_index(drop=True), skipped


def discussion_queue(
    grid: DecisionGrid, rubric: Rubric, items: pd.DataFrame | None = None, rule: str = DEFAULT_QUEUE
) -> pd.DataFrame:
    """The (item, concept) cases ``rule`` queues (:func:`queue_mask`; default ties and gaps of two levels or
    more), one row each, with every reviewer's level and the anchors.

    Columns: item, concept, concept_name, status (open/resolved), level (decided), vote, rule,
    n_reviewers, one column per reviewer, anchors (of the levels given), question/response/reference
    when the items are known, and empty ``resolution`` plus ``note, decided_by`` for experts to fill
    in — the filled file is accepted by ``--resolutions``.
    """
    cube = grid.cube
    ii, kk = np.nonzero(queue_mask(grid, rule))
    given = cube.levels[ii, kk, :]  # (F, R)
    names = {c.key: c.name for c in rubric.concepts}
    concept = np.asarray(cube.concepts, dtype=object)[kk]
    q = pd.DataFrame(
        {
            "item": cube.items.to_numpy(dtype=object)[ii],
            "concept": concept,
            "concept_name": pd.Series(concept, dtype=object).map(names).to_numpy(),
            "status": np.where(grid.resolved[ii, kk], "resolved", "open"),
            "level": grid.level[ii, kk],
            "vote": grid.vote[ii, kk],
            "rule": grid.rule[ii, kk],
            "n_reviewers": grid.n[ii, kk],
        }
    )
    for r, name in enumerate(cube.reviewers):
        q[name] = pd.array(given[:, r], dtype="Float64").astype("Int64")
    # anchors of the levels given: look up (concept, set of levels given as a bit mask)
    dom = cube.domain
    V = len(dom)
    present = (given[:, :, None] == dom[None, None, :]).any(axis=1)  # (F, V)
    mask = present.astype(np.int64) @ (1 << np.arange(V, dtype=np.int64))  # (F,)
    lookup = np.empty(len(cube.concepts) << V, dtype=object)
    for k, key in enumerate(cube.concepts):
        c = rubric.concept(key)
        for m in range(1 << V):
            lookup[(k << V) + m] = " | ".join(
                f"{int(v)}: {c.anchor(int(v))}" for j, v in enumerate(dom) if m >> j & 1
            )
    q["anchors"] = lookup[(kk << V) + mask]
    if items is not None:
        text = items.assign(id=items["id"].astype(str)).set_index("id")
        for col in ("question", "response", "reference"):
            q[col] = text[col].reindex(q["item"]).to_numpy() if col in text.columns else None
    q["resolution"] = None
    q["note"] = grid.note[ii, kk]
    q["decided_by"] = grid.decided_by[ii, kk]
    return q


def queue_markdown(
    queue: pd.DataFrame, reviewers: Sequence[str], rubric: Rubric, note: str | None = None, rule: str = DEFAULT_QUEUE
) -> str:
    """A readable Markdown report of the discussion queue, one section per item (in queue order). Text from the
    data (ids, answers, names, anchors) is escaped (:mod:`rubrictool.textsafe`): no HTML, no table breaks."""
    n_open = int((queue["status"] == "open").sum()) if len(queue) else 0
    what = " or ".join(QUEUE_RULES[p] for p in parse_queue_rule(rule))
    lines = [
        f"# Discussion queue — rubric {md_inline(rubric.name)}",
        "",
        (
            f"{len(queue)} item × concept case(s) over {queue['item'].nunique() if len(queue) else 0} "
            f"item(s): {n_open} open, {len(queue) - n_open} resolved. Queued (`--queue {rule}`): {what}."
        ),
        (
            "Resolve a case by writing its level into the `resolution` column of `discussion_queue.csv` "
            "(or a file `item, concept, level, note, decided_by`) and re-running with `--resolutions FILE`."
        ),
        "",
    ]
    if note:
        lines += [md_quote(note), ""]
    if len(queue) == 0:
        return "\n".join(lines + [f"Nothing to discuss under `--queue {rule}`."]) + "\n"

    def col(name: str) -> npt.NDArray[np.object_]:
        c = queue[name]
        if pd.api.types.is_integer_dtype(c.dtype) and not c.isna().any():
            return np.asarray(c.to_numpy(dtype=np.int64).astype(str), dtype=object)
        return np.asarray(c.astype(object).where(c.notna(), "").to_numpy(dtype=object))

    given = []
    for name in reviewers:
        lv = queue[name].to_numpy(dtype=float, na_value=np.nan)
        given.append(np.where(np.isnan(lv), "·", np.nan_to_num(lv).astype(np.int64).astype(str)))
    cells = [" | ".join(t) for t in zip(*given, strict=True)] if given else [""] * len(queue)
    anchors = [md_inline(str(a).replace("|", "/")) for a in col("anchors")]
    rows = [
        f"| {md_inline(c)} ({md_inline(cn)}) | {g} | {lv} | {ru} | {st} | {an} |"
        for c, cn, g, lv, ru, st, an in zip(
            col("concept"),
            col("concept_name"),
            cells,
            col("level"),
            col("rule"),
            col("status"),
            anchors,
            strict=True,
        )
    ]  # text rendering: one formatted line per flagged case
    texts = [
        col(name) if name in queue.columns else np.full(len(queue), "", dtype=object)
        for name in ("question", "reference", "response")
    ]
    header = (
        "| concept | "
        + " | ".join(md_inline(r) for r in reviewers)
        + " | decided | rule | status | anchors in question |\n|"
        + "---|" * (len(reviewers) + 5)
    )
    items = queue["item"].to_numpy(dtype=object)
    first = np.ones(len(items), dtype=bool)
    first[1:] = items[1:] != items[:-1]
    body: list[str] = []
    starts = np.flatnonzero(first)
    ends = np.append(starts[1:], len(items))
    for a, b in zip(starts.tolist(), ends.tolist(), strict=True):
        head = [f"\n## Item {md_inline(items[a])}\n"]
        head += [
            f"**{lab}:** {md_inline(t[a])}  "
            for lab, t in zip(("Question", "Reference", "Response"), texts, strict=True)
            if t[a]
        ]
        body.append("\n".join(head) + "\n\n" + header + "\n" + "\n".join(rows[a:b]))
    return "\n".join(lines) + "\n".join(body) + "\n"
