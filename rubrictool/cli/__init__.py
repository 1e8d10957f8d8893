"""The ``rubrictool`` command line: thin Typer commands over the library, and all of its output.

One module per command group (:mod:`.rubric`, :mod:`.data`, :mod:`.annotate`, :mod:`.review`,
:mod:`.adjudicate`, :mod:`.train`, :mod:`.grade`, :mod:`.audit`, :mod:`.curve` (``learning-curve``),
:mod:`.inspect` with explain, intervene, report, ablate and ``rubric diagnose``). Each command parses options,
calls one library function and prints what it returns; every Rich table, progress bar and message lives here.
Library errors (:class:`rubrictool.errors.RubrictoolError`, and ``reccbm``'s ``ReccbmError``) become a
one-line message and exit code 1 here, and only here.

Imports are lazy: every command module is imported to build the app, so at module top a command
module imports only typer, rich, the standard library, :mod:`rubrictool.errors`,
:mod:`rubrictool.progress` and the :mod:`rubrictool.rubric` package. Heavy libraries (pandas, numpy,
scipy, torch, transformers, accelerate, litellm, scikit-learn, crowd-kit, matplotlib,
label_studio_sdk) and every library module that pulls them in (``rubrictool.data``, ``tables``,
``io``, ``annotate``, ``review``, ``adjudicate``, ``train``, ``grade``, ``report`` ...) are imported
inside the command that needs them; types for annotations under ``if TYPE_CHECKING:``.
tests/test_cli_startup.py enforces it; docs/design.md ("Why the CLI imports lazily") says why.
"""

from __future__ import annotations

import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # never reach for the network on import

import typer

from rubrictool.cli import adjudicate, annotate, audit, curve, data, grade, inspect, review, rubric, train
from rubrictool.cli._common import handle_errors, run_script

__all__ = ["app", "main", "run_script"]

app = typer.Typer(
    name="rubrictool",
    help="Rubric curation, LLM pre-annotation, three-expert review and REC-CBM training.\n\n"
    "Example: rubrictool train --benchmark mohler",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.add_typer(rubric.app, name="rubric")
app.add_typer(data.app, name="data")
app.command("annotate")(handle_errors(annotate.annotate_cmd))
app.add_typer(review.app, name="review")
app.command("adjudicate")(handle_errors(adjudicate.adjudicate_cmd))
app.command("train")(handle_errors(train.train_cmd))
app.command("compare")(handle_errors(train.compare_cmd))
app.command("grade")(handle_errors(grade.grade_cmd))
app.command("audit")(handle_errors(audit.audit_cmd))
app.command("learning-curve")(handle_errors(curve.learning_curve_cmd))
inspect.register(app, rubric.app)  # explain, intervene, report, ablate, rubric diagnose


def main() -> None:
    app()


if __name__ == "__main__":
    main()
