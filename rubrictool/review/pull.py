"""Reading reviews back: the status of a project and the tidy ReviewTable it exports."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from rubrictool.agreement import LabelCube, krippendorff_alpha
from rubrictool.errors import ReviewError
from rubrictool.io import write_table
from rubrictool.progress import ProgressFn
from rubrictool.review.client import Connection, resolve_connection
from rubrictool.review.interface import check_interface, parse_label_config
from rubrictool.review.push import attach_predictions, list_tasks, require_project
from rubrictool.rubric import Rubric, load_rubric

__all__ = ["PullResult", "ReviewStatus", "anchoring_table", "pull", "reviews_from_tasks", "status"]


def _users(conn: Connection) -> dict[int, str]:
    body = conn.get("/api/users", "listing users", page_size=1000)
    rows = body.get("results", []) if isinstance(body, dict) else list(body or [])
    return {int(u["id"]): str(u.get("email") or u.get("username") or u["id"]) for u in rows}


def _choices(
    result: Sequence[dict[str, Any]], schema: dict[str, list[int]], where: str, strict: bool = True
) -> dict[str, int]:
    """``{concept: level}`` from an annotation or prediction result (choices stored as the level alias).

    A value that is not one level of the interface is an error (``strict``), or left out (predictions:
    a malformed pre-annotation only loses its ``differs_<model>`` flag).
    """
    out: dict[str, int] = {}
    for r in result or []:
        name = r.get("from_name")
        if r.get("type") != "choices" or name not in schema:
            continue
        picked = (r.get("value") or {}).get("choices") or []
        text = str(picked[0]).strip() if len(picked) == 1 else ""
        if not re.fullmatch(r"-?\d+", text) or int(text) not in schema[name]:
            if strict:
                raise ReviewError(f"{where}: concept {name} holds {picked!r}, not one level of {schema[name]}; "
                                  "fix it in Label Studio (or delete that annotation) and pull again")
            continue
        out[str(name)] = int(text)
    return out


def reviews_from_tasks(
    tasks: Sequence[dict[str, Any]], users: dict[int, str], schema: dict[str, list[int]]
) -> tuple[pd.DataFrame, dict[str, int]]:
    """The tidy ReviewTable from tasks read with ``fields=all``, and counts of what was left out.

    One row per (item, reviewer, concept) with ``level``, ``source`` = ``human``, the annotation's
    ``lead_time`` (seconds), its id, and per model ``differs_<model>`` (True/False, missing when that
    model had no label for the concept). Cancelled (skipped) annotations are left out, and so are drafts
    (they are never annotations). When one reviewer submitted several annotations for a task, the
    latest one counts.
    """
    rows: list[dict[str, Any]] = []
    counts: Counter[str] = Counter()
    models: set[str] = set()
    for t in tasks:
        item = str((t.get("data") or {}).get("item_id", t.get("id")))
        preds: dict[str, dict[str, int]] = {}
        for p in t.get("predictions") or []:
            model = str(p.get("model_version") or "model")
            preds[model] = _choices(p.get("result") or [], schema, "", strict=False)
            models.add(model)
        latest: dict[int, dict[str, Any]] = {}
        for a in sorted(t.get("annotations") or [], key=lambda a: int(a.get("id", 0))):
            if "result" not in a or "completed_by" not in a:
                raise ReviewError(f"task {t.get('id')}: the server sent annotation {a.get('id')} without its result "
                                  "and reviewer; is this Label Studio 1.23.x (the version rubrictool is tested with)?")
            if a.get("was_cancelled"):
                counts["cancelled"] += 1
                continue
            who = int(a.get("completed_by") or 0)
            if who in latest:
                counts["superseded"] += 1
            latest[who] = a
        if "drafts" in t:  # (not requested by pull: drafts never are annotations)
            counts["drafts"] += len(t["drafts"] or [])
        for who, a in latest.items():
            labels = _choices(a.get("result") or [], schema, f"task {t.get('id')} annotation {a.get('id')}")
            if not labels:
                counts["empty"] += 1
                continue
            counts["annotations"] += 1
            for concept, level in labels.items():
                row: dict[str, Any] = {
                    "item": item, "reviewer": users.get(who, f"user-{who}"), "concept": concept, "level": level,
                    "source": "human", "lead_time": a.get("lead_time"), "annotation": int(a["id"]),
                }
                for m, pl in preds.items():
                    row[f"differs_{m}"] = (pl[concept] != level) if concept in pl else None
                rows.append(row)
    cols = ["item", "reviewer", "concept", "level", "source", "lead_time", "annotation"]
    cols += [f"differs_{m}" for m in sorted(models)]
    df = pd.DataFrame(rows, columns=cols)
    for m in sorted(models):
        df[f"differs_{m}"] = df[f"differs_{m}"].astype("boolean")
    df["level"] = df["level"].astype("int64")
    df["lead_time"] = pd.to_numeric(df["lead_time"], errors="coerce")
    order = {k: i for i, k in enumerate(schema)}
    df = df.assign(_o=df["concept"].map(order)).sort_values(["item", "reviewer", "_o"], kind="stable")
    return df.drop(columns="_o").reset_index(drop=True), dict(counts)


def _project_reviews(
    conn: Connection, project: str | int, rubric: Rubric | None, progress: ProgressFn | None = None
) -> tuple[dict[str, Any], list[dict[str, Any]], pd.DataFrame, dict[str, int]]:
    proj = require_project(conn, project)
    label = f"{proj.get('title')!r} (id {proj['id']})"
    xml = str(proj.get("label_config", ""))
    if rubric is not None:
        check_interface(rubric, xml, label)
    schema = parse_label_config(xml)
    if not schema:
        raise ReviewError(f"project {label} has no concept controls (<Choices> with integer levels); "
                          "was it made with `rubrictool review push`?")
    tasks = list_tasks(conn, int(proj["id"]), True, progress)
    attach_predictions(conn, int(proj["id"]), tasks)
    reviews, counts = reviews_from_tasks(tasks, _users(conn), schema)
    return proj, tasks, reviews, counts


@dataclass
class ReviewStatus:
    """Review progress of one project."""

    project_id: int
    title: str
    tasks: int
    reviews_per_task: dict[int, int]
    per_reviewer: pd.DataFrame  # reviewer, reviews, skipped
    changed: pd.DataFrame  # model, reviews, reviews_changed, labels, labels_changed
    max_annotations: int
    anchoring: pd.DataFrame = field(default_factory=pd.DataFrame)
    """Per concept: reviews so far, α so far (ordinal, items with ≥ 2 reviews), and per pre-annotation model
    the share of reviews that kept its level (``kept_<model>``)."""
    settings: dict[str, Any] = field(default_factory=dict)
    """The project's blind-review settings as the server reports them."""

    def lines(self) -> list[str]:
        """A plain-text report (the CLI prints it)."""
        head = f"project {self.title!r} (id {self.project_id}): {self.tasks} task(s), at most "
        out = [head + f"{self.max_annotations} review(s) each"]
        hist = ", ".join(f"{n} review(s): {c}" for n, c in sorted(self.reviews_per_task.items()))
        out.append(f"tasks by number of reviews — {hist}")
        for r in self.per_reviewer.itertuples(index=False):
            out.append(f"  {r.reviewer}: {r.reviews} review(s), {r.skipped} skipped")
        for c in self.changed.itertuples(index=False):
            out.append(
                f"  vs {c.model}: {c.reviews_changed} of {c.reviews} review(s) changed at least one label; "
                f"{c.labels_changed} of {c.labels} concept label(s) changed"
            )
        if len(self.anchoring):
            kept = [c for c in self.anchoring.columns if c.startswith("kept_")]
            out.append("anchoring check — per concept: α of the reviews so far, and the share of reviews that kept "
                       "each pre-annotation's level (near 100% with a low α: pre-annotation may be steering the "
                       "reviewers)")
            for rec in self.anchoring.to_dict(orient="records"):
                row: dict[str, Any] = {str(k): v for k, v in rec.items()}
                a = "—" if pd.isna(row["alpha"]) else f"{row['alpha']:.3f}"
                shares = "; ".join(
                    f"kept {c.removeprefix('kept_')} {100 * row[c]:.0f}%" for c in kept if not pd.isna(row[c])
                )
                out.append(f"  {row['concept']}: {row['reviews']} review(s), α {a} ({row['pairable']} item(s) with ≥ 2 "
                           "reviews)"
                           + (f"; {shares}" if shares else ""))
        if self.settings:
            hist = "shown" if self.settings.get("show_annotation_history") else "hidden"
            if self.settings.get("show_collab_predictions", True):
                mode = ("anchored review: reviewers see the levels of "
                        f"{self.settings.get('model_version') or 'a model'} "
                        "pre-selected (marked as pre-filled by it)")
            else:
                mode = "blind review: reviewers see no model's levels"
            out.append(f"{mode}; annotation history {hist}; the label stream shows each reviewer only their own "
                       "annotation (the Data Manager's quick view shows everyone's: Label Studio's community edition "
                       "has no reviewer role to hide it)")
        return out


def status(conn: Connection, project: str | int, rubric: Rubric | None = None) -> ReviewStatus:
    """Tasks with 0/1/2/3… reviews, reviews and skips per reviewer, and reviews that changed LLM labels."""
    proj, tasks, reviews, _ = _project_reviews(conn, project, rubric)
    users = _users(conn)
    n_done = reviews.drop_duplicates("annotation").groupby("item").size() if len(reviews) else pd.Series(dtype=int)
    per_task: Counter[int] = Counter(int(n_done.get(str((t.get("data") or {}).get("item_id")), 0)) for t in tasks)
    top = max([int(proj.get("maximum_annotations") or 3), *per_task])
    hist = {n: per_task.get(n, 0) for n in range(top + 1)}
    skipped: Counter[str] = Counter()
    for t in tasks:
        for a in t.get("annotations") or []:
            if a.get("was_cancelled"):
                who = int(a.get("completed_by") or 0)
                skipped[users.get(who, f"user-{who}")] += 1
    n_rev = reviews.drop_duplicates("annotation").groupby("reviewer").size() if len(reviews) else pd.Series(dtype=int)
    names = sorted(set(n_rev.index) | set(skipped))
    per_reviewer = pd.DataFrame(
        {"reviewer": names, "reviews": [int(n_rev.get(n, 0)) for n in names], "skipped": [skipped[n] for n in names]}
    )
    rows = []
    for col in [c for c in reviews.columns if c.startswith("differs_")]:
        d = reviews[reviews[col].notna()]
        by_ann = d.groupby("annotation")[col].any() if len(d) else pd.Series(dtype=bool)
        rows.append({"model": col.removeprefix("differs_"), "reviews": len(by_ann),
                     "reviews_changed": int(by_ann.sum()), "labels": len(d), "labels_changed": int(d[col].sum())})
    changed = pd.DataFrame(rows, columns=["model", "reviews", "reviews_changed", "labels", "labels_changed"])
    settings: dict[str, Any] = {k: proj.get(k) for k in ("show_collab_predictions", "show_annotation_history",
                                                         "model_version")
                               if k in proj}
    return ReviewStatus(int(proj["id"]), str(proj.get("title")), len(tasks), hist, per_reviewer, changed,
                        int(proj.get("maximum_annotations") or 0), anchoring_table(reviews, list(parse_label_config(
                            str(proj.get("label_config", ""))))), settings)


def anchoring_table(reviews: pd.DataFrame, concepts: list[str]) -> pd.DataFrame:
    """Per concept: ``reviews`` (labels so far), ``alpha`` (ordinal Krippendorff α over the items with two
    or more reviews; NaN before there are any), ``pairable`` and, per pre-annotation model, ``kept_<model>``:
    the share of reviews whose level equals that model's (``differs_<model>`` false)."""
    models = [c.removeprefix("differs_") for c in reviews.columns if c.startswith("differs_")]
    cols = ["concept", "reviews", "alpha", "pairable"] + [f"kept_{m}" for m in models]
    if len(reviews) == 0:
        return pd.DataFrame(columns=cols)
    levels = sorted({int(v) for v in reviews["level"]})
    domain = list(range(min(levels), max(levels) + 1))
    cube = LabelCube.from_reviews(reviews, concepts, domain)
    counts = cube.counts()  # (N, K, V)
    rows = []
    for k, key in enumerate(concepts):
        ck = counts[:, k, :]
        pairable = int((ck.sum(axis=1) >= 2).sum())
        row: dict[str, Any] = {"concept": key, "reviews": int(ck.sum()), "pairable": pairable,
                               "alpha": krippendorff_alpha(ck, domain, "ordinal") if pairable else float("nan")}
        part = reviews[reviews["concept"] == key]
        for m in models:
            d = part[f"differs_{m}"].dropna()
            row[f"kept_{m}"] = float((~d.astype(bool)).mean()) if len(d) else float("nan")
        rows.append(row)
    return pd.DataFrame(rows, columns=cols)


@dataclass
class PullResult:
    """The ReviewTable of one project and what was left out of it."""

    project_id: int
    title: str
    table: pd.DataFrame
    path: Path | None
    counts: dict[str, int]

    def summary(self) -> str:
        c = self.counts
        where = f" to {self.path}" if self.path else ""
        reviewers = self.table["reviewer"].nunique() if len(self.table) else 0
        return (
            f"project {self.title!r} (id {self.project_id}): {c.get('annotations', 0)} review(s) by {reviewers} "
            f"reviewer(s) → {len(self.table)} row(s){where}; left out: {c.get('cancelled', 0)} skipped, "
            f"{c.get('superseded', 0)} superseded by the same reviewer's later review, {c.get('empty', 0)} empty "
            "(drafts are never reviews)"
        )


def pull(
    conn: Connection,
    project: str | int,
    out: str | Path | None = None,
    rubric: Rubric | None = None,
    progress: ProgressFn | None = None,
) -> PullResult:
    """Export every submitted review of a project as the tidy ReviewTable (written with ``write_table``)."""
    proj, _, reviews, counts = _project_reviews(conn, project, rubric, progress)
    path = write_table(reviews, out, for_people=True) if out is not None else None
    return PullResult(int(proj["id"]), str(proj.get("title")), reviews, path, counts)




def project_and_rubric(project: str | None, rubric: str | Path | None) -> tuple[Rubric | None, str]:
    """The rubric (when named) and the project title: ``project``, else ``<rubric>-review``."""
    rb = load_rubric(rubric) if rubric is not None else None
    if project is not None:
        return rb, project
    if rb is None:
        raise ReviewError("which project? no project and no rubric given",
                          hint="pass --project TITLE|ID (or --rubric R for the default title R-review)")
    return rb, f"{rb.name}-review"


def pull_for_adjudicate(project: str, rubric: str | Path | None, out: str | Path) -> Path:
    """``adjudicate --from-label-studio PROJECT``: pull the project's reviews (connection from
    ``$LABEL_STUDIO_URL`` / ``$LABEL_STUDIO_API_KEY`` or the local ``review serve``) into
    ``<out>/reviews_label_studio.csv`` and return that path, for adjudicate to read like any review file."""
    rb = load_rubric(rubric) if rubric is not None else None
    path = Path(out) / "reviews_label_studio.csv"
    result = pull(resolve_connection(), project, path, rb)
    if result.counts.get("annotations", 0) == 0:
        raise ReviewError(f"project {result.title!r} (id {result.project_id}) has no submitted reviews yet; "
                          "check `rubrictool review status` first")
    return path
