"""Where a result came from: the code revision that made it."""

from __future__ import annotations

import subprocess
from pathlib import Path

__all__ = ["git_revision"]


def git_revision(path: Path | None = None) -> str | None:
    """The checkout's commit (short) and a '+dirty' mark; None outside git."""
    cwd = path or Path(__file__).resolve().parent
    try:
        rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=cwd, capture_output=True, text=True,
                             timeout=5, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], check=False, cwd=cwd,
                               capture_output=True, text=True, timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return rev + ("+dirty" if dirty else "")
