"""The one error type of reccbm: bad input, reported as a clear one-line message."""

from __future__ import annotations

__all__ = ["ReccbmError"]


class ReccbmError(ValueError):
    """Invalid input to reccbm (shapes, labels, configs, checkpoints); the message is one line."""
