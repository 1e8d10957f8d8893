"""The learning curve: how a grader's quality grows with the number of labelled answers.

* :mod:`~rubrictool.curve.measure`: :func:`learning_curve` trains the cells (variant × size × fold × repeat),
  resumably, and writes curve.csv, curve.json and curve.png; :func:`run_learning_curve` is what the command runs;
* :mod:`~rubrictool.curve.cells`: a cell's files, the digests that tie a cell to its settings and table, and an
  "all" cell read from a finished fold run;
* :mod:`~rubrictool.curve.reading`: what a curve says, one reading per variant (the 90 % point, "flat", ...);
* :mod:`~rubrictool.curve.figure`: curve.csv's layout, where a run sits on a curve, and the figure.

The names below are imported on first use: reading a curve (the report page does) does not load torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rubrictool.lazy import lazy_names

if TYPE_CHECKING:
    from rubrictool.curve.figure import (
        CURVE_COLUMNS,
        CURVE_FAILING,
        plot_curve,
        position_on_curve,
        reach_fraction,
    )
    from rubrictool.curve.measure import (
        CURVE_OPTIONS,
        MIN_SIZE,
        VARIANTS,
        Cell,
        CurveOptions,
        CurvePlan,
        CurveResult,
        learning_curve,
        parse_folds,
        parse_sizes,
        parse_variant,
        run_learning_curve,
    )
    from rubrictool.curve.reading import read_curve, summarize_curve

_HOME: dict[str, str] = {
    "CURVE_COLUMNS": "rubrictool.curve.figure",
    "CURVE_FAILING": "rubrictool.curve.figure",
    "CURVE_OPTIONS": "rubrictool.curve.measure",
    "Cell": "rubrictool.curve.measure",
    "CurveOptions": "rubrictool.curve.measure",
    "CurvePlan": "rubrictool.curve.measure",
    "CurveResult": "rubrictool.curve.measure",
    "MIN_SIZE": "rubrictool.curve.measure",
    "VARIANTS": "rubrictool.curve.measure",
    "learning_curve": "rubrictool.curve.measure",
    "parse_folds": "rubrictool.curve.measure",
    "parse_sizes": "rubrictool.curve.measure",
    "parse_variant": "rubrictool.curve.measure",
    "plot_curve": "rubrictool.curve.figure",
    "position_on_curve": "rubrictool.curve.figure",
    "reach_fraction": "rubrictool.curve.figure",
    "read_curve": "rubrictool.curve.reading",
    "run_learning_curve": "rubrictool.curve.measure",
    "summarize_curve": "rubrictool.curve.reading",
}

__all__ = [
    "CURVE_COLUMNS",
    "CURVE_FAILING",
    "CURVE_OPTIONS",
    "MIN_SIZE",
    "VARIANTS",
    "Cell",
    "CurveOptions",
    "CurvePlan",
    "CurveResult",
    "learning_curve",
    "parse_folds",
    "parse_sizes",
    "parse_variant",
    "plot_curve",
    "position_on_curve",
    "reach_fraction",
    "read_curve",
    "run_learning_curve",
    "summarize_curve",
]


__getattr__ = lazy_names(__name__, _HOME)
