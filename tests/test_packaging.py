"""The wheel carries every module and data file: a package missing from pyproject's list imports in the
editable install the tests use and breaks in a real `pip install .`."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _setuptools() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]


def test_every_code_and_data_folder_is_a_listed_package() -> None:
    listed = set(_setuptools()["packages"])
    on_disk = set()
    for top in ("rubrictool", "reccbm"):
        for d in [ROOT / top, *(p for p in (ROOT / top).rglob("*") if p.is_dir())]:
            if d.name == "__pycache__" or not any(f.is_file() for f in d.iterdir()):
                continue
            on_disk.add(".".join(d.relative_to(ROOT).parts))
    assert on_disk - listed == set(), "add these to [tool.setuptools] packages in pyproject.toml"
    assert listed - on_disk == set(), "pyproject.toml lists packages that do not exist"


def test_package_data_patterns_match_files() -> None:
    for package, patterns in _setuptools()["package-data"].items():
        folder = ROOT.joinpath(*package.split("."))
        for pattern in patterns:
            assert list(folder.glob(pattern)), f"{package}: {pattern!r} matches no file"
    data = _setuptools()["package-data"]
    assert "*.yaml" in data["rubrictool.rubrics"] and "*" in data["rubrictool.templates"]
