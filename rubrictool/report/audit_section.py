"""The report's audit section: what ``rubrictool audit`` found on this run, read from the audit's files.

``rubrictool audit --run RUN`` writes ``RUN/audit/`` (the gaming figures in ``audit.json``, the behavioural tests in
``behaviour.json``, :mod:`rubrictool.behaviour`). :func:`load_audit` reads them for the report page;
:func:`audit_verdict` is the verdict's sentence naming the failing tests in a teacher's words ("a one-letter typo moves
11 % of marks"); :func:`audit_markdown` and :func:`audit_html` lay the section out. An audit made of another model
than the run's (trained again since) is named as such, not shown as this model's.
"""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

__all__ = ["audit_html", "audit_markdown", "audit_verdict", "load_audit", "model_fingerprint"]


def model_fingerprint(run_dir: str | Path) -> str | None:
    """A quick fingerprint of the run's weights (:func:`rubrictool.train.runs.sample_sha256` of model.safetensors), or
    None."""
    from rubrictool.train.runs import sample_sha256

    path = Path(run_dir) / "model.safetensors"
    return sample_sha256(path) if path.is_file() else None


def load_audit(run_dir: str | Path, audit_dir: str | Path | None = None) -> dict[str, Any]:
    """The audit of the run found in ``audit_dir`` (default ``RUN/audit``): ``{"dir", "gaming", "behaviour",
    "stale"}``; ``{}`` when none was written. ``stale``: the audit was made of other weights than the run's now."""
    d = Path(audit_dir) if audit_dir is not None else Path(run_dir) / "audit"
    out: dict[str, Any] = {}
    for key, name in (("gaming", "audit.json"), ("behaviour", "behaviour.json")):
        try:
            out[key] = json.loads((d / name).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
    if not out:
        return {}
    made_of = (out.get("behaviour") or {}).get("model_sha256")
    out["dir"] = str(d)
    out["stale"] = bool(made_of) and made_of != model_fingerprint(run_dir)
    return out


def audit_verdict(audit: dict[str, Any]) -> list[str]:
    """The verdict's sentence on the behavioural tests: the failing ones in words, or that every one meets its
    target; nothing without an audit, or with one of other weights (the section says so)."""
    b = audit.get("behaviour")
    if not b or audit.get("stale"):
        return []
    fails = [str(f) for f in b.get("failing") or []]
    if not fails:
        return [(f"On rubrictool audit's behavioural tests every mark moved for the right reasons ({len(b['tests'])} "
                "tests meet their targets).")]
    return [f"Marks move for the wrong reasons (rubrictool audit's behavioural tests, {b['n']} test answers): "
            + "; ".join(fails) + "."]


def _rows(b: dict[str, Any]) -> list[tuple[str, str, str, str, str]]:
    """(test, answers, marks changed or right above wrong, mean shift, meets target) per test."""
    out = []
    for t in b.get("tests") or []:
        share = t.get("share_expected") if t["kind"] == "minimum functionality" else t.get("share_changed")
        ok = t.get("passes")
        out.append((str(t["words"]), str(t["n"]), "—" if share is None else f"{100 * float(share):.1f} %",
                    "—" if t.get("mean_shift") is None else f"{float(t['mean_shift']):+.2f}",
                    "—" if ok is None else ("yes" if ok else "no")))
    return out


def _intro(audit: dict[str, Any]) -> str:
    if audit.get("stale"):
        return (f"The audit in {audit['dir']} was made of other weights than this run's (it was trained again since): "
                "run `rubrictool audit --run RUN` again to see this model's.")
    b = audit.get("behaviour")
    if not b:
        return (f"{audit['dir']} has the gaming figures only: run `rubrictool audit --run RUN` again for the "
                "behavioural tests.")
    return (f"{b['n']} test answers edited in ways that must not move the mark (invariance), must lower it or must not "
            "raise it (directional), and minimal pairs; a test's row says the share of marks that moved (for minimal "
            "pairs: the right answer graded above the wrong one) and the mean shift.")


def audit_markdown(audit: dict[str, Any]) -> list[str]:
    """The audit section in Markdown (``## Audit``); a line saying how to make one when there is none."""
    from rubrictool.textsafe import md_inline

    L = ["", "## Audit", ""]
    if not audit:
        return L + [("No audit of this run yet: `rubrictool audit --run RUN` grades its test answers gamed and edited "
                    "(typos, a \"not\", a pasted reference) and this section shows what moved.")]
    L += [md_inline(_intro(audit)), ""]
    g = audit.get("gaming") or {}
    if g.get("transformations") and not audit.get("stale"):
        L += ["| gaming | mean grade shift | grade rises |", "|---|---:|---:|"]
        L += [f"| {md_inline(t['transformation'])} | {float(t['mean_grade_shift']):+.3f} | "
              f"{100 * float(t['share_raised']):.1f} % |" for t in g["transformations"]] + [""]
    if audit.get("behaviour") and not audit.get("stale"):
        L += ["| behavioural test | answers | marks changed (pairs: right above wrong) | mean shift | meets target |",
              "|---|---:|---:|---:|---|"]
        L += [f"| {md_inline(a)} | {n} | {s} | {m} | {ok} |" for a, n, s, m, ok in _rows(audit["behaviour"])]
    return L


def audit_html(audit: dict[str, Any]) -> str:
    """The audit section as HTML (``<h2>Audit</h2>`` and its tables)."""
    e = html.escape
    if not audit:
        return ("<h2>Audit</h2><p class=\"note missing\" id=\"audit-none\">No audit of this run yet: "
                "<code>rubrictool audit --run RUN</code> grades its test answers gamed and edited and this section "
                "shows what moved.</p>")
    parts = ["<h2>Audit</h2>", f"<p id=\"audit-intro\">{e(_intro(audit))}</p>"]
    g = audit.get("gaming") or {}
    if g.get("transformations") and not audit.get("stale"):
        parts.append("<table id=\"audit-gaming\"><tr><th class=\"l\">gaming</th><th>mean grade shift</th>"
                     "<th>grade rises</th></tr>" + "".join(
                         f"<tr><td class=\"l\">{e(str(t['transformation']))}</td>"
                         f"<td>{float(t['mean_grade_shift']):+.3f}</td><td>{100 * float(t['share_raised']):.1f} "
                         "%</td></tr>"
                         for t in g["transformations"]) + "</table>")
    if audit.get("behaviour") and not audit.get("stale"):
        parts.append("<table id=\"audit-behaviour\"><tr><th class=\"l\">behavioural test</th><th>answers</th>"
                     "<th>marks changed (pairs: right above wrong)</th><th>mean shift</th><th>meets target</th></tr>"
                     + "".join(f"<tr><td class=\"l\">{e(a)}</td><td>{n}</td><td>{s}</td><td>{m}</td><td>{ok}</td></tr>"
                               for a, n, s, m, ok in _rows(audit["behaviour"])) + "</table>")
    return "\n".join(parts)
