"""Where the review stage keeps things: environment variables, the local server's folder and files, the template."""

from __future__ import annotations

import re
from pathlib import Path

__all__ = [
    "ADMIN_EMAIL",
    "DEFAULT_DIR",
    "ENV_KEY",
    "ENV_URL",
    "LOG_FILE",
    "PAGE",
    "PASSWORD_FILE",
    "SERVER_FILE",
    "STARTED",
    "TEMPLATE",
    "TOKEN_FILE",
]


ENV_URL = "LABEL_STUDIO_URL"
ENV_KEY = "LABEL_STUDIO_API_KEY"
DEFAULT_DIR = Path(".rubrictool") / "label-studio"
"""Where ``review serve`` keeps the server's data, token and log (relative to the working folder)."""
ADMIN_EMAIL = "admin@example.com"
TEMPLATE = Path(__file__).resolve().parent.parent / "templates" / "label_studio.xml.j2"
STATE_NAME = ".rubrictool-review.json"
"""The push state file, next to the item table: server URL → project title → project id."""

TOKEN_FILE = "admin-token"
PASSWORD_FILE = "admin-password"
SERVER_FILE = "server.json"
LOG_FILE = "server.log"
STARTED = re.compile(r"Starting development server at (http://\S+?)/?\s*$", re.MULTILINE)
PAGE = 500
