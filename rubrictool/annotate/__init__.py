"""LLM pre-annotation: render the rubric prompt, call models through litellm, parse, cache, account.

The paper's annotation stage asks GPT-4o and Gemini-2.5-pro to label every response on every rubric
concept with the prompt of its Appendix "Annotation Pipeline" (``templates/annotate.prompt.j2``).
This module does that for any litellm model string:

1. :func:`render_prompt` fills the template with the item, the rubric and optional in-context examples;
   every item field enters as quoted data between a random per-request boundary (docs/integrity.md).
2. :func:`annotate` runs every (item, model) pair with asyncio (``concurrency`` requests per model),
   retrying rate limits, timeouts and 5xx with exponential back-off, and asks once more (a *repair*
   round that sends the parse error back) when a reply cannot be used.
3. :func:`parse_reply` reads the paper's line format ``concept=<name>; label=<level>; evidence=<text>``
   or JSON, leniently, and validates each level against the rubric; entries that repeat text quoted
   from the item (a response's fake ``concept=..; label=..`` lines) are not the model's output and are ignored.
4. :class:`ReplyCache` (SQLite, WAL, one commit per reply) keys replies by model + rendered messages +
   sampling parameters (the random boundary replaced by a constant), so a second run makes no call and a killed run
   resumes without paying twice.
5. :func:`run_annotation` holds a lock beside the cache and the output (one writer each), refuses a
   draft rubric, and stops a model early when its endpoint is unreachable or almost every reply fails.
6. Token usage and cost come from litellm; ``budget`` (USD) reserves each request's worst case before
   sending it, so the run stops cleanly before the budget could be exceeded.

:func:`grade_holistic` asks the same models for each answer's mark directly (holistic grading, the baseline beside the
trained grader: :mod:`rubrictool.annotate.holistic`).

The result is the tidy PredictionTable (``item, model, concept, level, evidence, raw_ok`` + usage)
plus failure records with the raw replies and a per-model summary.
"""

from __future__ import annotations

from rubrictool.annotate.cache import CachedReply, ReplyCache, cache_key
from rubrictool.annotate.config import (
    DEFAULT_MODELS,
    DEFAULT_TEMPLATE,
    OUTPUT_FORMATS,
    USAGE_COLUMNS,
    AnnotateConfig,
)
from rubrictool.annotate.dryrun import DryRunModel, DryRunReport, dry_run
from rubrictool.annotate.holistic import (
    HolisticResult,
    compare_holistic,
    grade_holistic,
    holistic_dry_run,
    parse_mark,
    run_holistic,
)
from rubrictool.annotate.outputs import load_inputs, output_paths, write_outputs
from rubrictool.annotate.parse import Label, ParseResult, parse_reply
from rubrictool.annotate.prompt import (
    ContextExample,
    ItemPrompt,
    load_examples,
    load_template,
    new_boundary,
    output_schema,
    render_item_prompt,
    render_prompt,
    repair_message,
    response_format_for,
)
from rubrictool.annotate.run import annotate, check_ready, draft_problems, run_annotation
from rubrictool.annotate.runner import AnnotateResult, ModelSummary
from rubrictool.annotate.workers import auto_workers
from rubrictool.locks import LockHeld, writer_lock

__all__ = [
    "DEFAULT_MODELS",
    "DEFAULT_TEMPLATE",
    "OUTPUT_FORMATS",
    "USAGE_COLUMNS",
    "AnnotateConfig",
    "AnnotateResult",
    "CachedReply",
    "ContextExample",
    "DryRunModel",
    "DryRunReport",
    "HolisticResult",
    "ItemPrompt",
    "Label",
    "LockHeld",
    "ModelSummary",
    "ParseResult",
    "ReplyCache",
    "annotate",
    "auto_workers",
    "cache_key",
    "check_ready",
    "compare_holistic",
    "draft_problems",
    "dry_run",
    "grade_holistic",
    "holistic_dry_run",
    "load_examples",
    "load_inputs",
    "load_template",
    "new_boundary",
    "output_paths",
    "output_schema",
    "parse_mark",
    "parse_reply",
    "render_item_prompt",
    "render_prompt",
    "repair_message",
    "response_format_for",
    "run_annotation",
    "run_holistic",
    "write_outputs",
    "writer_lock",
]
