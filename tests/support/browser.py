"""Headless Chromium for the browser tests (Debian's chromium + chromedriver; nothing is downloaded)."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

__all__ = ["CHROMEDRIVER", "CHROMIUM", "artifact_path", "chromium", "have_chromium"]

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run"]


def have_chromium() -> bool:
    return Path(CHROMIUM).is_file() and Path(CHROMEDRIVER).is_file()


@contextmanager
def chromium(width: int = 1300, height: int = 2400, console_log: bool = False) -> Iterator[Any]:
    """A headless Chromium WebDriver with a throw-away profile (``console_log``: keep the page's console
    messages for ``driver.get_log("browser")``)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    for f in FLAGS:
        opts.add_argument(f)
    profile = tempfile.mkdtemp(prefix="rubrictool-chromium-")
    opts.add_argument(f"--user-data-dir={profile}")
    opts.binary_location = CHROMIUM
    if console_log:
        opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)
    driver.set_window_size(width, height)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def artifact_path(name: str) -> Path:
    """Where a test keeps an artefact for people to look at: ``$RUBRICTOOL_TEST_ARTIFACTS/<name>`` (CI sets
    it to a folder it uploads), else ``<temp dir>/rubrictool-test-artifacts/<name>``."""
    root = Path(os.environ.get("RUBRICTOOL_TEST_ARTIFACTS")
                or Path(tempfile.gettempdir()) / "rubrictool-test-artifacts")
    root.mkdir(parents=True, exist_ok=True)
    return root / name
