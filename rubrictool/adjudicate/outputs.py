"""What adjudication writes: the AdjudicatedTable (training table) and the discussion queue."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
import pandas as pd

from rubrictool.adjudicate.aggregators import BoolArray, DecisionGrid
from rubrictool.rubric import Rubric
from rubrictool.tables import (
    ADJUDICATED_PROVENANCE,
    ITEM_COLUMNS,
)
from rubrictool.textsafe import md_inline, md_quote

__all__ = ["discussion_queue", "fill_unreviewed", "queue_markdown", "training_table"]


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


def discussion_queue(grid: DecisionGrid, rubric: Rubric, items: pd.DataFrame | None = None) -> pd.DataFrame:
    """The flagged (item, concept) cases, one row each, with every reviewer's level and the anchors.

    Columns: item, concept, concept_name, status (open/resolved), level (decided), vote, rule,
    n_reviewers, one column per reviewer, anchors (of the levels given), question/response/reference
    when the items are known, and empty ``resolution`` plus ``note, decided_by`` for experts to fill
    in — the filled file is accepted by ``--resolutions``.
    """
    cube = grid.cube
    ii, kk = np.nonzero(grid.flagged | grid.resolved)
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
    queue: pd.DataFrame, reviewers: Sequence[str], rubric: Rubric, note: str | None = None
) -> str:
    """A readable Markdown report of the discussion queue, one section per item (in queue order). Text from the
    data (ids, answers, names, anchors) is escaped (:mod:`rubrictool.textsafe`): no HTML, no table breaks."""
    n_open = int((queue["status"] == "open").sum()) if len(queue) else 0
    lines = [
        f"# Discussion queue — rubric {md_inline(rubric.name)}",
        "",
        (
            f"{len(queue)} flagged item × concept case(s) over {queue['item'].nunique() if len(queue) else 0} "
            f"item(s): {n_open} open, {len(queue) - n_open} resolved."
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
        return "\n".join(lines + ["Nothing to discuss: every label is unanimous."]) + "\n"

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
