"""``rubrictool audit``: how far standard gaming moves a trained grader (docs/integrity.md).

Automatic short-answer graders are fooled by answers padded with the reference's words, the question
pasted back or a few adversarial words (Filighera et al., "Fooling Automatic Short Answer Grading
Systems", AIED 2020). :func:`audit_run` applies such transformations to every answer of a run's test
split, grades the original and each transformed answer with the run's model (:func:`rubrictool.grade.grade_loaded`)
and reports per transformation the mean grade shift, the share of answers whose grade rises or falls,
the mean shift of every concept's predicted level, and how many transformed answers the grade flags
catch (against the share of the original, honest answers they flag). Deterministic for a seed.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from rubrictool.atomic import atomic_write, atomic_write_text
from rubrictool.behaviour import (
    FILLER,
    BehaviourResult,
    failing_sentences,
    filler_for,
    first_sentence,
    read_pairs,
    suite_on_run,
    summary_markdown,
)
from rubrictool.errors import DataError
from rubrictool.flags import FLAGS, Profile, keywords, load_profile, profile_from_table
from rubrictool.grade import grade_loaded, load_grader
from rubrictool.io import writable_dir, write_table
from rubrictool.progress import Progress, ProgressFn
from rubrictool.report.audit_section import model_fingerprint
from rubrictool.report.run import Run, open_run, split_rows
from rubrictool.textsafe import md_inline

__all__ = ["FILLER", "TRANSFORMATIONS", "AuditResult", "audit_run", "keywords", "transform",
           "write_audit"]

_Transform = Callable[[dict[str, str], np.random.Generator], str]
TRANSFORMATIONS: dict[str, _Transform] = {
    # the reference answer pasted after the response
    "append_reference": lambda it, rng: f"{it['response']} {it['reference']}".strip(),
    # the reference's content words (up to 10) after the response
    "append_keywords": lambda it, rng: f"{it['response']} {' '.join(keywords(it['reference']))}".strip(),
    # the question pasted after the response
    "append_question": lambda it, rng: f"{it['response']} {it['question']}".strip(),
    # two sentences that say nothing about this question after the response: from the course's own training answers
    # to other questions (or --filler FILE), chosen with the seed per answer (``filler``); else two generic ones
    "append_filler": lambda it, rng: " ".join([it["response"], it.get("filler") or " ".join(
        rng.choice(FILLER, size=2, replace=False))]).strip(),
    # the response's first sentence, three more times
    "repeat_sentence": lambda it, rng: " ".join([it["response"]] + [first_sentence(it["response"])] * 3).strip(),
    # the words of a correct answer to the same question (best-graded training answer, else the reference), shuffled
    "shuffled_correct": lambda it, rng: " ".join(rng.permutation(it["correct"].split()).tolist()),
}


def transform(name: str, item: dict[str, str], rng: np.random.Generator) -> str:
    """One transformation of one item (``response``, ``reference``, ``question``, ``correct``)."""
    if name not in TRANSFORMATIONS:
        raise DataError(f"unknown transformation {name!r}; use {', '.join(TRANSFORMATIONS)}")
    return TRANSFORMATIONS[name](item, rng)


@dataclass
class AuditResult:
    """Per transformation one row of ``summary``; ``items`` one row per (transformation, answer)."""

    run: Path
    summary: pd.DataFrame
    items: pd.DataFrame
    keys: list[str]
    seed: int
    n: int
    honest_flagged: float  # share of the original test answers with any flag
    honest_flag_shares: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    constant_grade: int | None = None  # the one grade the model gave every answer, original and transformed
    constant: str = ""  # why the shifts say nothing about robustness, in words ("" for a model that grades)
    warnings: list[str] = field(default_factory=list)  # the run's own, e.g. its training table changed since training
    behaviour: BehaviourResult | None = None  # the behavioural tests on the same answers (rubrictool.behaviour)

    @property
    def is_constant(self) -> bool:
        return bool(self.constant)


def _correct_answers(run: Run, test: pd.DataFrame) -> list[str]:
    """Per test answer, the best-graded training answer to the same question (the reference if none)."""
    table = run.table
    assert table is not None
    train_ids = {str(i) for i in run.split.get("train", [])}
    tr = table.assign(id=table["id"].astype(str))
    tr = tr[tr["id"].isin(train_ids)]
    best: dict[str, str] = {}
    if "grade" in tr.columns and "question" in tr.columns:
        tr = (tr.assign(_g=pd.to_numeric(tr["grade"], errors="coerce"))
              .sort_values(["_g", "id"], ascending=[False, True]))
        for q, r in zip(tr["question"].astype(str), tr["response"].astype(str)):
            best.setdefault(q, r)
    return [best.get(q) or ref or resp for q, ref, resp in zip(test["question"], test["reference"], test["response"])]


def _filler_lines(filler_file: str | Path | None) -> list[str] | None:
    """The sentences of ``--filler FILE`` (one per line; at least two), or None without one."""
    if filler_file is None:
        return None
    try:
        lines = [ln.strip() for ln in Path(filler_file).read_text(encoding="utf-8").splitlines() if ln.strip()]
    except (OSError, UnicodeDecodeError) as exc:
        raise DataError(f"--filler {filler_file}: cannot read it ({exc.__class__.__name__})") from None
    if len(lines) < 2:
        raise DataError(f"--filler {filler_file}: needs at least two sentences, one per line")
    return lines


def _filler(run: Run, test: pd.DataFrame, lines: list[str] | None, seed: int) -> list[str]:
    """Per test answer, two filler sentences: from ``lines`` (--filler), else first sentences of the course's own
    training answers to other questions (:func:`rubrictool.behaviour.filler_for`); "" (the generic FILLER) when fewer
    than two are at hand."""
    return filler_for(run.table, [str(i) for i in run.split.get("train", [])], list(test["question"].astype(str)),
                      seed, lines)


def _check_names(transformations: list[str] | None) -> list[str]:
    """The transformations to apply (default: all), each checked against :data:`TRANSFORMATIONS`."""
    names = transformations or list(TRANSFORMATIONS)
    for name in names:
        if name not in TRANSFORMATIONS:
            raise DataError(f"unknown transformation {name!r}; use {', '.join(TRANSFORMATIONS)}")
    return names


def _run_profile(run: Run, data: str | Path | None, keys: list[str]) -> Profile | None:
    """The run's training profile for the grade flags: saved with the run, else built from its open training table."""
    profile: Profile | None = load_profile(run.path) if data is None else None
    if profile is None and run.table is not None:  # the table the run trained on is open: build it
        profile = profile_from_table(run.table, [str(i) for i in run.split.get("train", [])], keys,
                                     (run.scale_min, int(run.meta["scale"][1])))
    return profile


def _transformed(name: str, base: pd.DataFrame, seed: int) -> pd.DataFrame:
    """``base`` with every response changed by transformation ``name``."""
    # one stream per transformation, keyed by its place in TRANSFORMATIONS: auditing a subset gives the same texts
    rng = np.random.default_rng([seed, list(TRANSFORMATIONS).index(name)])
    records = base.to_dict(orient="records")
    changed = base.copy()
    changed["response"] = [transform(name, {str(k): str(v) for k, v in r.items()}, rng) for r in records]
    return changed


def _summary_row(
    name: str, base: pd.DataFrame, original: pd.DataFrame, graded: pd.DataFrame, keys: list[str]
) -> dict[str, Any]:
    """One transformation's row of the summary: grade shifts, flag shares, concept shifts."""
    shift = graded["grade"].to_numpy() - original["grade"].to_numpy()
    flagged = graded["flags"].astype(str) != ""
    row: dict[str, Any] = {
        "transformation": name,
        "n": len(base),
        "mean_grade_shift": float(shift.mean()),
        "share_raised": float((shift > 0).mean()),
        "share_lowered": float((shift < 0).mean()),
        "mean_grade_before": float(original["grade"].mean()),
        "share_flagged": float(flagged.mean()),
        # of the answers whose grade rose, the share a teacher would be sent
        "share_raised_flagged": float(flagged[shift > 0].mean()) if (shift > 0).any() else float("nan"),
    }
    for f in FLAGS:
        row[f"flag_{f}"] = float(graded["flags"].astype(str).str.split(";").apply(lambda fs, f=f: f in fs).mean())
    for k in keys:
        row[f"shift_{k}"] = float((graded[f"{k}_level"] - original[f"{k}_level"]).mean())
    return row


def _say_if_constant(result: AuditResult, seen: set[Any], run: Run) -> None:
    """Say, in ``result.constant``, when the model's grade cannot move (one grade for all, or the run warns so)."""
    run_warns = {str(w.get("code")) for w in run.metrics.get("warnings") or [] if isinstance(w, dict)}
    if len(seen) == 1:
        result.constant_grade = int(next(iter(seen)))
        result.constant = (f"the model gives grade {result.constant_grade} to every answer, original and transformed: "
                           "its grade cannot move, so a shift of +0.000 says nothing about robustness to gaming. "
                           "Train a model that grades (more answers, --folds 5) before auditing it")
    elif "constant_predictions" in run_warns:
        result.constant = ("the run's own metrics warn that the model gives (almost) every test answer one grade: "
                           "small shifts here say little about robustness to gaming")


def _add_notes(result: AuditResult, base: pd.DataFrame, names: list[str], profile: Profile | None, run: Run) -> None:
    """The notes on what the audit could not do as asked: generic filler, no profile, no concepts."""
    n_generic = int((base["filler"] == "").sum())
    if n_generic and "append_filler" in names:
        result.notes.append(f"append_filler: {n_generic} of {len(base)} answers got generic filler sentences (the "
                            "course has fewer than two training answers to other questions); pass --filler FILE with "
                            "sentences in your course's own words, one per line")
    if profile is None:
        result.notes.append("no training profile: out_of_distribution and concepts_disagree_with_grade not checked")
    if run.plm:
        result.notes.append("a PLM run: no concepts, so no concept shifts and no concepts_disagree_with_grade flag")


def audit_run(
    run_dir: str | Path,
    data: str | Path | None = None,
    data_dir: str | Path | None = None,
    seed: int = 0,
    batch_size: int = 32,
    transformations: list[str] | None = None,
    progress: ProgressFn | None = None,
    filler: str | Path | None = None,
    behaviour: bool = True,
    pairs: str | Path | None = None,
) -> AuditResult:
    """Apply the gaming transformations to the run's test split and grade every version with the run. ``filler``: a
    text file of filler sentences (one per line); default: sentences of the course's own answers to other questions.
    ``behaviour``: also run the behavioural tests (:mod:`rubrictool.behaviour`) on the same answers, with the minimal
    ``pairs`` (JSONL) whose questions the run's table holds."""
    names = _check_names(transformations)
    lines = _filler_lines(filler)
    pair_table = read_pairs(pairs) if pairs is not None else None
    run = open_run(run_dir, data, data_dir)
    test = split_rows(run, "test")
    keys = [] if run.plm else run.keys
    profile = _run_profile(run, data, keys)
    grader = load_grader(run.path)  # the run as a reccbm.Grader
    base = test[["id", "question", "reference", "context", "response"]].copy()
    base["correct"] = _correct_answers(run, test)
    base["filler"] = _filler(run, test, lines, seed)
    total = len(base) * (len(names) + 1)
    done = 0

    def grade(items: pd.DataFrame) -> pd.DataFrame:
        nonlocal done
        out = grade_loaded(grader, items.drop(columns=["correct", "filler"]), batch_size, None, profile=profile)
        done += len(items)
        if progress is not None:
            progress(Progress("audit", done, total))
        return out

    if progress is not None:
        progress(Progress("audit", 0, total))
    original = grade(base)
    seen = set(original["grade"].tolist())  # every grade the model gives, original and transformed
    rows, item_rows = [], []
    for name in names:
        changed = _transformed(name, base, seed)
        graded = grade(changed)
        seen |= set(graded["grade"].tolist())
        rows.append(_summary_row(name, base, original, graded, keys))
        item_rows.append(pd.DataFrame({
            "transformation": name, "id": base["id"], "grade_before": original["grade"], "grade_after": graded["grade"],
            "flags_before": original["flags"], "flags_after": graded["flags"], "response_after": changed["response"],
        }))
    honest = original["flags"].astype(str)
    result = AuditResult(
        run=run.path, summary=pd.DataFrame(rows), items=pd.concat(item_rows, ignore_index=True), keys=keys, seed=seed,
        n=len(base), honest_flagged=float((honest != "").mean()),
        honest_flag_shares={f: float(honest.str.split(";").apply(lambda fs, f=f: f in fs).mean()) for f in FLAGS},
    )
    result.warnings = list(run.warnings)
    if behaviour:
        result.behaviour = suite_on_run(run, seed, batch_size, pairs=pair_table, filler=lines, progress=progress)
    _say_if_constant(result, seen, run)
    _add_notes(result, base, names, profile, run)
    return result


def _markdown(res: AuditResult, title: str) -> str:
    s = res.summary
    lines = [f"# Gaming audit: {md_inline(title)}", ""]
    if res.constant:
        lines += [f"**The model is constant:** {res.constant}.", ""]
    lines += [f"**Warning:** {md_inline(w)}" for w in res.warnings] + ([""] if res.warnings else [])
    lines += [(f"{res.n} test answers, seed {res.seed}. Grade shift = predicted grade of the transformed answer minus "
               "that of the original; flagged = the transformed answer has any `grade` flag "
               f"(honest answers flagged: {100 * res.honest_flagged:.1f} %)."), "",
              "| transformation | mean grade shift | grade rises | grade falls | flagged | rises flagged |",
              "|---|---:|---:|---:|---:|---:|"]
    for r in s.to_dict(orient="records"):
        rf = "—" if np.isnan(r["share_raised_flagged"]) else f"{100 * r['share_raised_flagged']:.0f} %"
        lines.append(f"| {r['transformation']} | {r['mean_grade_shift']:+.3f} | {100 * r['share_raised']:.1f} % | "
                     f"{100 * r['share_lowered']:.1f} % | {100 * r['share_flagged']:.1f} % | {rf} |")
    if res.keys:
        lines += ["", "Mean shift of each concept's predicted level:", "",
                  "| transformation | " + " | ".join(md_inline(k) for k in res.keys) + " |",
                  "|---|" + "---:|" * len(res.keys)]
        for r in s.to_dict(orient="records"):
            lines.append(f"| {r['transformation']} | " + " | ".join(f"{r[f'shift_{k}']:+.2f}" for k in res.keys) + " |")
    lines += ["", "Share of answers with each flag (honest = the original test answers):", "",
              "| | " + " | ".join(FLAGS) + " |", "|---|" + "---:|" * len(FLAGS),
              "| honest | " + " | ".join(f"{100 * res.honest_flag_shares[f]:.1f} %" for f in FLAGS) + " |"]
    for r in s.to_dict(orient="records"):
        lines.append(f"| {r['transformation']} | " + " | ".join(f"{100 * r[f'flag_{f}']:.1f} %" for f in FLAGS) + " |")
    lines += [f"\nNote: {md_inline(n)}" for n in res.notes]
    lines += _behaviour_lines(res.behaviour)
    return "\n".join(lines) + "\n"


def _behaviour_lines(b: BehaviourResult | None) -> list[str]:
    """The behavioural tests' section of audit.md: the failing tests in words, then the tables."""
    if b is None:
        return []
    fails = failing_sentences(b.summary)
    out = ["", "## Behavioural tests", "",
           (f"The same {b.n} test answers, each edited in ways that must not move its mark (invariance), must lower it "
            "or must not raise it (directional), graded again (docs/integrity.md, \"Behavioural tests\")."), ""]
    out += (["Failing:", ""] + [f"- {md_inline(f)}" for f in fails] + [""] if fails
            else ["Every test meets its target.", ""])
    out += [summary_markdown(b.summary)] + [f"Note: {md_inline(n)}" for n in b.notes]
    return out


def _figure(res: AuditResult, path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    s = res.summary
    ncols = 2 if res.keys else 1
    fig, axes = plt.subplots(1, ncols, figsize=(6.5 * ncols, 0.55 * len(s) + 2.6), squeeze=False)
    ax = axes[0][0]
    y = np.arange(len(s))
    ax.barh(y - 0.2, s["mean_grade_shift"], height=0.4, color="#c0504d", label="mean grade shift (grade points)")
    ax.barh(y + 0.2, s["share_raised"], height=0.4, color="#4f81bd", label="share of answers whose grade rises")
    ax.set_yticks(y, s["transformation"])
    ax.invert_yaxis()
    ax.axvline(0, color="black", lw=0.8)
    ax.set_title("grade")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.06), ncol=2, fontsize=8, frameon=False)
    if res.keys:
        ax2 = axes[0][1]
        m = s[[f"shift_{k}" for k in res.keys]].to_numpy()
        lim = max(0.05, float(np.abs(m).max()))
        im = ax2.imshow(m, cmap="RdBu_r", vmin=-lim, vmax=lim, aspect="auto")
        ax2.set_xticks(np.arange(len(res.keys)), res.keys)
        ax2.set_yticks(y, s["transformation"])
        for i in range(m.shape[0]):
            for j in range(m.shape[1]):
                dark = abs(m[i, j]) > 0.6 * lim  # white on the deep colours, black on the pale ones
                ax2.text(j, i, f"{m[i, j]:+.2f}", ha="center", va="center", fontsize=7,
                         color="white" if dark else "black")
        ax2.set_title("mean shift of each concept's predicted level")
        fig.colorbar(im, ax=ax2, shrink=0.8)
    fig.suptitle(f"Gaming audit: {title} ({res.n} test answers, seed {res.seed})", fontsize=10)
    fig.tight_layout()
    try:
        atomic_write(path, lambda tmp: fig.savefig(tmp, format="png", dpi=110))
    finally:
        plt.close(fig)


def write_audit(res: AuditResult, out_dir: str | Path, title: str | None = None) -> dict[str, Path]:
    """audit.csv / .md / .json, audit.png and audit_items.csv in ``out_dir`` (each written atomically)."""
    out = writable_dir(out_dir)
    title = title or str(res.run)
    paths = {"csv": write_table(res.summary, out / "audit.csv"),
             "items": write_table(res.items, out / "audit_items.csv", for_people=True)}
    md, js = out / "audit.md", out / "audit.json"
    for path, text in ((md, _markdown(res, title)), (js, json.dumps({
        "run": str(res.run), "seed": res.seed, "n": res.n, "keys": res.keys, "honest_flagged": res.honest_flagged,
        "honest_flag_shares": res.honest_flag_shares, "notes": res.notes, "warnings": res.warnings,
        "constant": res.constant or None, "constant_grade": res.constant_grade,
        "transformations": res.summary.to_dict(orient="records")}, indent=1, default=float) + "\n")):
        atomic_write_text(path, text)
    paths |= {"md": md, "json": js, "png": out / "audit.png"}
    if res.behaviour is not None:
        bj = out / "behaviour.json"
        doc = res.behaviour.to_json() | {"model_sha256": model_fingerprint(res.run)}  # the report checks it
        atomic_write_text(bj, json.dumps(doc, indent=1) + "\n")
        paths |= {"behaviour": bj, "behaviour_items": write_table(res.behaviour.items, out / "behaviour_items.csv",
                                                                  for_people=True)}
    _figure(res, out / "audit.png", title)
    return paths
