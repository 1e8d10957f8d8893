"""A package's public names imported on first use (PEP 562): the package lists where each lives, and a module
``__getattr__`` imports that module when the name is first asked for. ``rubrictool.train`` and ``rubrictool.curve``
use it, so that opening a run or reading a curve does not load torch."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_names"]


def lazy_names(package: str, home: Mapping[str, str]) -> Callable[[str], Any]:
    """The module ``__getattr__`` of ``package``: each name of ``home`` (name -> module) imported from its module on
    first use and kept on the package; any other name is an AttributeError."""

    def __getattr__(name: str) -> Any:
        where = home.get(name)
        if where is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(where), name)
        setattr(sys.modules[package], name, value)
        return value

    return __getattr__
