"""Deterministic train/dev/test splits and k folds of an item table, their JSON files, and nested subsamples
stratified by grade (a learning curve's draws)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from numpy.typing import NDArray

from rubrictool.atomic import atomic_write_json
from rubrictool.errors import DataError

__all__ = ["Subsample", "group_kfold_splits", "group_split_items", "kfold_splits", "load_split", "nested_subsample",
           "save_split", "split_items", "stratified_order"]


def _strata(items: pd.DataFrame, stratify: str | None, source: str) -> list[tuple[object, pd.DataFrame]]:
    """The groups of ``items`` by the ``stratify`` column in numeric order (one group when the column is absent
    or has a missing value); a value that is not a number is a one-line error naming the row and column."""
    if not (stratify and stratify in items.columns and items[stratify].notna().all()):
        return [("all", items)]
    values = pd.to_numeric(items[stratify], errors="coerce")
    if values.isna().any():
        pos = int(np.flatnonzero(values.isna().to_numpy())[0])
        ident = f" (id {items['id'].iloc[pos]})" if "id" in items.columns else ""
        raise DataError(f"{source}: row {pos + 1}{ident}: column {stratify!r} = {items[stratify].iloc[pos]!r} is not a "
                        "number", hint=f"write the {stratify} as a number of the rubric's scale")
    return [(key, g) for key, g in items.groupby(values.to_numpy(), sort=True)]


def split_items(
    items: pd.DataFrame,
    seed: int = 0,
    ratios: tuple[float, float, float] = (0.7, 0.2, 0.1),
    stratify: str | None = "grade",
    source: str = "the item table",
) -> dict[str, list[str]]:
    """A deterministic train/dev/test split of item ids, stratified by ``stratify`` (the grade).

    Within each stratum the ids are sorted, shuffled with ``seed`` and cut at the ratios (rounded;
    strata too small for a dev/test share go to train), so the same table and seed always give the
    same split, whatever the row order. ``source`` names the table in errors (its file).
    """
    if abs(sum(ratios) - 1.0) > 1e-6 or any(r < 0 for r in ratios):
        raise DataError(f"split ratios {ratios} must be non-negative and sum to 1")
    if len(items) == 0:
        raise DataError("cannot split an empty item table")
    rng = np.random.default_rng(seed)
    out: dict[str, list[str]] = {"train": [], "dev": [], "test": []}
    for _, g in _strata(items, stratify, source):
        ids = sorted(g["id"].astype(str))
        perm = [ids[i] for i in rng.permutation(len(ids))]
        n = len(perm)
        n_test = round(n * ratios[2])
        n_dev = round(n * ratios[1])
        if n_test + n_dev >= n:  # tiny stratum: keep at least one training example
            n_test, n_dev = (min(n_test, max(n - 1, 0)), 0) if n > 1 else (0, 0)
        out["test"] += perm[:n_test]
        out["dev"] += perm[n_test : n_test + n_dev]
        out["train"] += perm[n_test + n_dev :]
    return {k: sorted(v) for k, v in out.items()}


def deal_strata(strata: list[list[Any]], k: int, rng: np.random.Generator) -> list[list[Any]]:
    """k stratified parts: each stratum, in the order given, is shuffled with ``rng`` and dealt to the parts in
    turn, the dealing continuing across strata, so that part sizes differ by at most one."""
    parts: list[list[Any]] = [[] for _ in range(k)]
    turn = 0
    for members in strata:
        for i in rng.permutation(len(members)):
            parts[turn % k].append(members[i])
            turn += 1
    return parts


def kfold_splits(
    items: pd.DataFrame,
    k: int = 5,
    seed: int = 0,
    dev_share: float = 0.125,
    stratify: str | None = "grade",
    by: str | None = None,
) -> list[dict[str, list[str]]]:
    """k train/dev/test splits in which every item is tested exactly once, stratified by ``stratify``.

    Within each stratum the ids are sorted, shuffled with ``seed`` and dealt to the folds in turn, the
    dealing continuing across strata so that fold sizes differ by at most one. Fold i tests on its own
    items; dev is a stratified ``dev_share`` of the other folds' items (seed + i), the rest is train.
    ``by`` (e.g. ``"question"``) groups the items instead: see :func:`group_kfold_splits`.
    """
    if by is not None:
        return group_kfold_splits(items, by=by, k=k, seed=seed, dev_share=dev_share, stratify=stratify)
    if k < 2:
        raise DataError(f"k-fold evaluation needs at least 2 folds, got {k}")
    if len(items) < k:
        raise DataError(f"cannot make {k} folds of {len(items)} items")
    if not 0 < dev_share < 1:
        raise DataError(f"the dev share must be between 0 and 1, got {dev_share}")
    rng = np.random.default_rng(seed)
    groups = _strata(items, stratify, "the item table")
    fold_of = {i: f for f, part in enumerate(deal_strata([sorted(g["id"].astype(str)) for _, g in groups], k, rng))
               for i in part}
    out = []
    for f in range(k):
        test = sorted(i for i, fi in fold_of.items() if fi == f)
        rest = items[items["id"].astype(str).map(fold_of) != f]
        inner = split_items(rest, seed=seed + 1 + f, ratios=(1 - dev_share, dev_share, 0.0), stratify=stratify)
        out.append({"train": inner["train"], "dev": inner["dev"], "test": test})
    return out


# ---------------------------------------------------------------------------- grouped splits
def _groups(items: pd.DataFrame, by: str, stratify: str | None) -> tuple[list[list[str]], NDArray[np.float64]]:
    """The items' groups (ids sorted within a group, groups in order of their first sorted id) and each
    group's histogram over the strata (G, S): one column of counts per grade, or one column of sizes."""
    if by not in items.columns:
        raise DataError(f"cannot group the items by {by!r}: the table has no {by!r} column "
                        f"(columns: {', '.join(map(str, items.columns))})")
    if items[by].isna().any():
        n = int(items[by].isna().sum())
        raise DataError(f"{n} item(s) have no {by!r}: every item needs one to be grouped by it")
    if len(items) == 0:
        raise DataError("cannot split an empty item table")
    df = items.assign(_id=items["id"].astype(str), _g=items[by].astype(str))
    if stratify and stratify in df.columns and df[stratify].notna().all():
        strata = pd.Series(pd.factorize(df[stratify].astype(str), sort=True)[0], index=df.index)
    else:
        strata = pd.Series(0, index=df.index)
    groups, hists = [], []
    n_strata = int(strata.max()) + 1
    for _, g in sorted(df.groupby("_g"), key=lambda kv: min(kv[1]["_id"])):
        groups.append(sorted(g["_id"]))
        hists.append(np.bincount(strata.loc[g.index].to_numpy(), minlength=n_strata))
    return groups, np.asarray(hists, dtype=np.float64)


def _assign_groups(hists: NDArray[np.float64], shares: list[float], rng: np.random.Generator) -> list[int]:
    """Whole groups to parts: largest first (ties in a seeded order), each to the part whose grade histogram
    falls furthest short of its share of the total, i.e. the one with the least ``h · (H_p − share_p · H)``
    (the greedy step that most reduces Σ_p ‖H_p − share_p · H‖²). Returns each group's part."""
    G = len(hists)
    total = hists.sum(axis=0)  # (S,)
    target = np.asarray(shares)[:, None] * total[None, :]  # (P, S)
    have = np.zeros_like(target)  # (P, S)
    u = rng.random(G)
    order = sorted(range(G), key=lambda g: (-hists[g].sum(), float(u[g])))
    part = [0] * G
    for g in order:
        cost = (have - target) @ hists[g]  # (P,)
        cost = np.where(np.asarray(shares) > 0, cost, np.inf)
        best = np.flatnonzero(cost <= cost.min() + 1e-9)
        p = int(best[rng.integers(len(best))]) if len(best) > 1 else int(best[0])
        part[g] = p
        have[p] += hists[g]
    for p in range(len(shares)):  # a part with a share but no group yet takes the smallest group of the fullest part
        if shares[p] > 0 and p not in part:
            donor = max(range(len(shares)), key=lambda q: part.count(q))
            if part.count(donor) > 1:
                g = min((g for g in range(G) if part[g] == donor), key=lambda g: (hists[g].sum(), g))
                part[g] = p
    return part


def group_split_items(
    items: pd.DataFrame,
    by: str = "question",
    seed: int = 0,
    ratios: tuple[float, float, float] = (0.7, 0.2, 0.1),
    stratify: str | None = "grade",
) -> dict[str, list[str]]:
    """A train/dev/test split of item ids in which every value of ``by`` (every question) falls in one part
    only, the parts' sizes and grade histograms as close to ``ratios`` as whole groups allow.

    Groups are assigned largest first to the part furthest below its share (:func:`_assign_groups`), ties
    broken with ``seed``: the same table and seed always give the same split, whatever the row order.
    """
    if abs(sum(ratios) - 1.0) > 1e-6 or any(r < 0 for r in ratios):
        raise DataError(f"split ratios {ratios} must be non-negative and sum to 1")
    groups, hists = _groups(items, by, stratify)
    needed = sum(r > 0 for r in ratios)
    if len(groups) < needed:
        raise DataError(f"cannot split {len(groups)} distinct {by!r} value(s) into {needed} parts: every part "
                        f"needs at least one whole {by}; add {by}s or drop the dev/test share")
    part = _assign_groups(hists, list(ratios), np.random.default_rng(seed))
    out: dict[str, list[str]] = {"train": [], "dev": [], "test": []}
    for g, p in zip(groups, part):
        out[("train", "dev", "test")[p]] += g
    return {k: sorted(v) for k, v in out.items()}


def group_kfold_splits(
    items: pd.DataFrame,
    by: str = "question",
    k: int = 5,
    seed: int = 0,
    dev_share: float = 0.125,
    stratify: str | None = "grade",
) -> list[dict[str, list[str]]]:
    """k train/dev/test splits grouped by ``by`` (e.g. the question): every item is tested exactly once, and
    no group is in more than one part of a fold (a question tested is never trained or selected on).

    Whole groups go to the folds, largest first, each to the fold furthest below its share of the items
    and of each grade (seeded ties); dev is a grouped ``dev_share`` of the other folds' groups (seed + 1 + i).
    """
    if k < 2:
        raise DataError(f"k-fold evaluation needs at least 2 folds, got {k}")
    if not 0 < dev_share < 1:
        raise DataError(f"the dev share must be between 0 and 1, got {dev_share}")
    groups, hists = _groups(items, by, stratify)
    if len(groups) < k + 1:
        raise DataError(f"cannot make {k} folds grouped by {by!r} from {len(groups)} distinct {by}(s): each fold "
                        f"tests at least one whole {by} and keeps one for dev; use --folds {max(len(groups) - 1, 1)} "
                        "or fewer, or split without --by")
    fold = _assign_groups(hists, [1.0 / k] * k, np.random.default_rng(seed))
    out = []
    for f in range(k):
        test = sorted(i for g, fi in zip(groups, fold) if fi == f for i in g)
        rest = [gi for gi, fi in enumerate(fold) if fi != f]
        inner = _assign_groups(hists[rest], [1 - dev_share, dev_share], np.random.default_rng(seed + 1 + f))
        train = sorted(i for gi, p in zip(rest, inner) if p == 0 for i in groups[gi])
        dev = sorted(i for gi, p in zip(rest, inner) if p == 1 for i in groups[gi])
        if not dev:
            raise DataError(f"fold {f} leaves a single {by} outside its test part: none is left for dev; "
                            f"use fewer folds or more {by}s")
        out.append({"train": train, "dev": dev, "test": test})
    return out


def save_split(
    split: dict[str, list[str]], path: str | Path, seed: int | None = None, meta: dict[str, Any] | None = None
) -> Path:
    """Write a split as JSON (atomically), with the seed that made it and optional metadata."""
    payload = {"seed": seed, **(meta or {}), **{k: split[k] for k in ("train", "dev", "test")}}
    return atomic_write_json(path, payload)


def load_split(path: str | Path) -> dict[str, list[str]]:
    p = Path(path)
    try:
        data = json.loads(p.read_text())
        return {k: [str(x) for x in data[k]] for k in ("train", "dev", "test")}
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise DataError(
            f"{p}: not a split file ({e.__class__.__name__}); expected JSON with train/dev/test id lists"
        ) from None


# ---------------------------------------------------------------------------- nested stratified subsamples
def stratified_order(grades: NDArray[Any], rng: np.random.Generator) -> NDArray[np.intp]:
    """A seeded order of positions whose every prefix is stratified by grade: each grade's members, shuffled, get
    evenly spaced keys (j + u) / n_g in [0, 1) and the order sorts by key, so a prefix of n holds n · share_g ± 1
    of grade g. Prefixes are nested: the first 100 contain the first 50."""
    key = np.empty(len(grades))
    for g in np.unique(grades):
        members = rng.permutation(np.flatnonzero(grades == g))
        key[members] = (np.arange(len(members)) + rng.random()) / len(members)
    return np.asarray(np.lexsort((rng.random(len(grades)), key)), dtype=np.intp)


@dataclass(frozen=True)
class Subsample:
    """A subsample's training part (``fit``) and its dev part."""

    fit: list[str]
    dev: list[str]

    @property
    def ids(self) -> list[str]:
        return sorted(self.fit + self.dev)


def nested_subsample(
    pool: pd.DataFrame, order: NDArray[np.intp], n: int, dev_share: float, seed: list[int]
) -> Subsample:
    """The first n of ``order`` over ``pool`` (columns id, _y), split into a stratified dev part and the rest."""
    sub = pool.iloc[order[:n]]
    grades = sub["_y"].to_numpy()
    n_dev = min(max(1, round(dev_share * n)), n - 1)
    dev_pos = set(stratified_order(grades, np.random.default_rng(seed))[:n_dev].tolist())
    ids = sub["id"].tolist()
    return Subsample(fit=sorted(i for p, i in enumerate(ids) if p not in dev_pos),
                   dev=sorted(i for p, i in enumerate(ids) if p in dev_pos))
