"""Writing a report page's files: report.html, report.md, report.json, every PNG and CSV
(:func:`write_report`). Apart from :mod:`rubrictool.report.page`, which gathers the page, and
:mod:`rubrictool.report.markdown`, which renders it from the page, so that neither imports the other back."""

from __future__ import annotations

import json
from pathlib import Path

from rubrictool.atomic import atomic_write_bytes
from rubrictool.errors import DataError
from rubrictool.io import people_csv, writable_dir
from rubrictool.report.ceiling import pairs_frame
from rubrictool.report.markdown import render_markdown
from rubrictool.report.page import Report, render_html

__all__ = ["write_report"]


def write_report(r: Report, out: str | Path) -> dict[str, Path]:
    """report.html, report.md, every PNG and CSV into `out`, each atomically; returns their paths. A full disk is one
    :class:`DataError` naming the file, with every file written whole or left as it was (never a 0-byte PNG)."""
    d = writable_dir(out)
    paths: dict[str, Path] = {}
    files: list[tuple[str, bytes]] = [(name, png) for name, png in r.images.items()]
    files += [(name, people_csv(df, index=name.endswith("correlations.csv"))) for name, df in r.tables.items()]
    if r.diagnosis is not None:  # every CSV here is opened in spreadsheets: formula cells neutralised
        files += [("rubric_diagnosis.csv", people_csv(r.diagnosis.concepts)),
                  ("level_confusions.csv", people_csv(r.diagnosis.confusions))]
        if r.diagnosis.ceiling is not None:
            files += [(name, people_csv(df)) for name, df in (
                ("grade_ceiling.csv", r.diagnosis.ceiling.per_grade),
                                                              ("grade_boundaries.csv", r.diagnosis.ceiling.boundaries),
                ("contrast_pairs.csv", pairs_frame(r.diagnosis.pairs)))]
    report_json = json.dumps({"metrics": r.metrics, "agreement": r.agreement.to_dict("records"),
                              "unavailable": r.unavailable, "verdict": r.verdict,
                              "warnings": r.warnings, "calibration": r.calibration,
                              "honest": {k: v for k, v in r.honest.items() if k != "warnings"},
                              "implied_noise": r.implied, "lcec": {k: v for k, v in r.lcec.items() if k != "links"},
                              "learning_curve": r.curve or None, "low_marks": r.low_marks,
                              "pass_mark": r.pass_mark,
                              "audit": {"dir": r.audit.get("dir"), "stale": r.audit.get("stale"),
                                        "failing": (r.audit.get("behaviour") or {}).get("failing")} if r.audit
                              else None},
                             indent=1, default=float) + "\n"
    files += [("report.html", render_html(r).encode("utf-8")), ("report.md", render_markdown(r).encode("utf-8")),
              ("report.json", report_json.encode("utf-8"))]
    for name, data in files:
        try:
            atomic_write_bytes(d / name, data)
        except OSError as exc:
            done = ", ".join(paths) or "nothing"
            raise DataError(f"{d / name}: cannot write it ({exc.strerror or exc}); written before it: {done} (the rest "
                            "is as it was)",
                            hint="free space or pass --out a folder you can write, then run it again") from None
        paths[name] = d / name
    return paths
