"""Three-expert review in Label Studio: interface generation, push, status, pull and a local server.

The flow, one function per command:

1. :func:`render_label_config` turns a rubric into a Label Studio labelling interface (the template
   ``templates/label_studio.xml.j2``): the question, reference answer, context and response, then one
   single-choice control per concept whose choices show every level's anchor and store the bare level.
2. :func:`push` creates (or finds) the project and imports the items as tasks keyed by ``data.item_id``,
   never an item twice (the item ids already on the server are read back before every import). Blind
   review by default: the tasks carry no predictions. With ``show_predictions`` (anchored review) each
   task gets one prediction per model (``model_version`` = the model) and the interface names the model
   whose levels Label Studio pre-selects.
3. :func:`status` counts reviews per task and per reviewer, and reviews that changed an LLM label.
4. :func:`pull` turns every submitted annotation into the tidy ReviewTable
   ``item, reviewer, concept, level, source, lead_time, annotation, differs_<model>...`` that
   ``rubrictool adjudicate`` reads. Skipped (cancelled) annotations and drafts are not reviews.
5. :func:`serve` runs a Label Studio for one researcher on 127.0.0.1 with everything under a folder of
   the working directory (``.rubrictool/label-studio/``) and a generated admin token stored 0600.

The REST API is called with httpx (the same endpoints label-studio-sdk 2.1.2 wraps), so every failure
maps to one :class:`~rubrictool.errors.ReviewError` message. The API key is never printed, logged or
written by this module (``Connection.__repr__`` hides it).
"""

from __future__ import annotations

from rubrictool.review.client import Connection, resolve_connection
from rubrictool.review.interface import check_interface, parse_label_config, prefilled_by, render_label_config
from rubrictool.review.pull import (
    PullResult,
    ReviewStatus,
    project_and_rubric,
    pull,
    pull_for_adjudicate,
    reviews_from_tasks,
    status,
)
from rubrictool.review.push import PushOptions, PushResult, find_project, push
from rubrictool.review.server import (
    LabelStudioServer,
    find_label_studio,
    free_port,
    port_is_free,
    serve,
    start_server,
)
from rubrictool.review.settings import ADMIN_EMAIL, DEFAULT_DIR, ENV_KEY, ENV_URL, STATE_NAME, TEMPLATE
from rubrictool.review.tasks import build_tasks, task_data

__all__ = [
    "ADMIN_EMAIL",
    "DEFAULT_DIR",
    "ENV_KEY",
    "ENV_URL",
    "STATE_NAME",
    "TEMPLATE",
    "Connection",
    "LabelStudioServer",
    "PullResult",
    "PushOptions",
    "PushResult",
    "ReviewStatus",
    "build_tasks",
    "check_interface",
    "find_label_studio",
    "find_project",
    "free_port",
    "parse_label_config",
    "port_is_free",
    "prefilled_by",
    "project_and_rubric",
    "pull",
    "pull_for_adjudicate",
    "push",
    "render_label_config",
    "resolve_connection",
    "reviews_from_tasks",
    "serve",
    "start_server",
    "status",
    "task_data",
]
