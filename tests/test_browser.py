"""The report and explain pages in a real headless Chromium (Debian's chromium + chromedriver).

Each page is opened from file:// with networking off: it must load with no console error, display every
image, and show the numbers of metrics.json. Screenshots are kept in the pytest temp folder (the path is
printed) so a person can look at them. Skipped only where chromium is absent, never in CI
(RUBRICTOOL_REQUIRE_SERVERS=1 turns the skip into a failure).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import require_or_skip
from typer.testing import CliRunner

from rubrictool.cli import app
from tests.support.browser import chromium, have_chromium
from tests.support.inspect_runs import inspect_run, png_ok

runner = CliRunner()
pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    require_or_skip(have_chromium(),
                    "no chromium/chromedriver: apt-get install -y chromium chromium-driver (setup.sh --all does)")
    with chromium(1200, 900, console_log=True) as driver:
        yield driver


@pytest.fixture(scope="module")
def pages(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("browser")
    run, table = inspect_run(tmp, n=80)
    res = runner.invoke(app, ["report", "--run", str(run), "--table", str(table), "--out", str(tmp / "report"),
                              "--repeats", "2"])
    assert res.exit_code == 0, res.output
    ids = json.loads((run / "split.json").read_text())["test"][:2]
    res = runner.invoke(app, ["explain", "--run", str(run), "--items", str(table), *ids, "--set", "FC=3",
                              "--out", str(tmp / "explain")])
    assert res.exit_code == 0, res.output
    return {"run": run, "report": tmp / "report" / "report.html", "explain": tmp / "explain" / "explain.html",
            "shots": tmp}


def _open(driver: Any, page: Path, shot: Path) -> list[dict[str, Any]]:
    """Load a page, screenshot all of it, return the console's errors and warnings."""
    driver.get_log("browser")  # drop what earlier pages logged
    driver.get(page.as_uri())
    assert driver.execute_script("return document.readyState") == "complete"
    height = int(driver.execute_script("return document.body.scrollHeight"))
    driver.set_window_size(1200, min(height + 40, 16000))
    driver.save_screenshot(str(shot))
    print(f"screenshot: {shot}")
    return [e for e in driver.get_log("browser") if e["level"] in ("SEVERE", "WARNING")]


def _images(driver: Any) -> list[dict[str, Any]]:
    imgs: list[dict[str, Any]] = driver.execute_script(
        "return Array.from(document.images).map(i => ({src: i.src.slice(0, 22), w: i.naturalWidth,"
        " h: i.naturalHeight, shown: i.complete && i.getBoundingClientRect().width > 0}))")
    return imgs


def test_report_page_loads_offline_shows_every_image_and_the_run_numbers(browser: Any, pages: dict[str, Path]) -> None:
    from selenium.webdriver.common.by import By

    errors = _open(browser, pages["report"], pages["shots"] / "report.png")
    assert errors == []
    imgs = _images(browser)
    assert len(imgs) >= 5  # confusion, LCEC heatmaps, interventions, two traces
    for img in imgs:
        assert img["src"].startswith("data:image/png;base64") and img["w"] > 0 and img["h"] > 0 and img["shown"], img
    m = json.loads((pages["run"] / "metrics.json").read_text())
    saved = next(s["test"] for s in m["seeds"] if s["seed"] == m["selected_seed"])
    for key in ("t_acc", "t_f1", "qwk", "rmse", "adjacent", "c_acc", "c_f1"):
        cell = browser.find_element(By.ID, f"metric-{key}")
        assert cell.text == f"{saved[key]:.3f}" and float(cell.get_attribute("data-value")) == saved[key], key
        assert cell.is_displayed()
    per = next(s["per_concept"] for s in m["seeds"] if s["seed"] == m["selected_seed"])
    assert browser.find_element(By.ID, "c-acc-FC").text == f"{per['acc'][0]:.3f}"
    assert browser.find_element(By.ID,
        "n-test").text == str(len(json.loads((pages["run"] / "split.json").read_text())["test"]))
    assert len(browser.find_elements(By.CSS_SELECTOR, "section.trace")) == 2
    assert png_ok(pages["shots"] / "report.png")[1] > 2000  # the whole long page


def test_explain_page_loads_offline_with_its_traces(browser: Any, pages: dict[str, Path]) -> None:
    from selenium.webdriver.common.by import By

    errors = _open(browser, pages["explain"], pages["shots"] / "explain.png")
    assert errors == []
    imgs = _images(browser)
    assert len(imgs) == 2 and all(i["w"] > 0 and i["shown"] for i in imgs)
    traces = browser.find_elements(By.CSS_SELECTOR, "section.trace")
    assert len(traces) == 2
    csv = (pages["explain"].parent / "explain.csv").read_text().splitlines()[1].split(",")
    assert browser.find_element(By.ID, "trace-1-grade").text == csv[1]
    assert browser.find_element(By.ID, "trace-1-grade-after").is_displayed()
    assert len(browser.find_elements(By.CSS_SELECTOR, "span.tok")) > 0  # the attention shading is there
