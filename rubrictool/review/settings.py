"""Where the review stage keeps things: environment variables, the local server's folder and files, the template."""

from __future__ import annotations

import re
from pathlib import Path

__all__ = ["ADMIN_EMAIL", "DEFAULT_DIR", "ENV_KEY", "ENV_URL", "TEMPLATE"]


ENV_URL = "LABEL_STUDIO_URL"
ENV_KEY = "LABEL_STUDIO_API_KEY"
DEFAULT_DIR = Path(".rubrictool") / "label-studio"
"""Where ``review serve`` keeps the server's data, token and log (relative to the working folder)."""
ADMIN_EMAIL = "admin@example.com"
TEMPLATE = Path(__file__).resolve().parent.parent / "templates" / "label_studio.xml.j2"
STATE_NAME = ".rubrictool-review.json"
"""The push state file, next to the item table: server URL → project title → project id."""

_TOKEN_FILE = "admin-token"
_PASSWORD_FILE = "admin-password"
_SERVER_FILE = "server.json"
_LOG_FILE = "server.log"
_STARTED = re.compile(r"Starting development server at (http://\S+?)/?\s*$", re.MULTILINE)
_PAGE = 500
