"""Adjudication: reviews in, one consensus level per item and concept out, with every figure of
agreement, a discussion queue of the contested cases and the training table the trainer reads.

Input is a tidy ReviewTable ``item, reviewer, concept, level`` (optional ``source`` = human|llm|model and
``model``; other columns are ignored) read from long CSV/JSONL/Parquet files, from one wide file
per reviewer (``id, FC, CC, ...``; reviewer = file stem unless given as ``NAME=PATH``), from prediction
tables (a panel: each model a reviewer, failed replies skipped and counted), or any mix.

Routed review: with pre-annotations, the items (and concepts) no reviewer labelled take the majority
vote of the pre-annotations; those labels are marked and never enter an agreement figure.

Consensus is :class:`MajorityVote` (the ordinal tie rule of
:func:`rubrictool.agreement.ordinal_vote`) or :class:`DawidSkeneVote` (crowd-kit's Dawid–Skene, one
model per concept). Expert decisions from a resolutions file override either, and are recorded.

When a review table holds both human reviews and LLM/model rows (``source`` = llm or model), the
consensus is built from the human reviews only and the other rows are compared with it like ``--predictions``.
"""

from __future__ import annotations

from rubrictool.adjudicate.aggregators import (
    FORMATS,
    METHODS,
    DawidSkeneVote,
    DecisionGrid,
    MajorityVote,
    apply_resolutions,
)
from rubrictool.adjudicate.inputs import (
    ReviewInputs,
    llm_labels,
    pre_annotation_labels,
    read_resolutions,
    read_review_files,
    read_reviews,
)
from rubrictool.adjudicate.outputs import discussion_queue, fill_unreviewed, queue_markdown, training_table
from rubrictool.adjudicate.run import (
    AdjudicationOptions,
    AdjudicationResult,
    adjudicate,
    adjudicate_benchmark_labels,
    run_adjudicate,
    write_outputs,
)

__all__ = [
    "FORMATS",
    "METHODS",
    "AdjudicationOptions",
    "AdjudicationResult",
    "DawidSkeneVote",
    "DecisionGrid",
    "MajorityVote",
    "ReviewInputs",
    "adjudicate",
    "adjudicate_benchmark_labels",
    "apply_resolutions",
    "discussion_queue",
    "fill_unreviewed",
    "llm_labels",
    "pre_annotation_labels",
    "queue_markdown",
    "read_resolutions",
    "read_review_files",
    "read_reviews",
    "run_adjudicate",
    "training_table",
    "write_outputs",
]
