"""The test set-up itself: a missing server or data set skips on a workstation and fails in CI."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import mohler_data_dir, require_or_skip


@pytest.fixture
def workstation(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RUBRICTOOL_REQUIRE_SERVERS", raising=False)
    monkeypatch.delenv("CI", raising=False)


@pytest.mark.usefixtures("workstation")
@pytest.mark.parametrize(
    ("env", "value", "fails"),
    [(None, None, False), ("RUBRICTOOL_REQUIRE_SERVERS", "1", True), ("CI", "true", True), ("CI", "1", True),
     ("CI", "false", False), ("RUBRICTOOL_REQUIRE_SERVERS", "0", False)],
)
def test_require_or_skip_fails_only_in_ci(monkeypatch: pytest.MonkeyPatch, env: str | None, value: str | None,
                                          fails: bool) -> None:
    if env and value:
        monkeypatch.setenv(env, value)
    require_or_skip(True, "present")  # nothing missing: neither skips nor fails
    with pytest.raises(pytest.fail.Exception if fails else pytest.skip.Exception, match="no widget server"):
        require_or_skip(False, "no widget server")


@pytest.mark.usefixtures("workstation")
def test_missing_mohler_data_skips_here_and_fails_in_ci(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RUBRICTOOL_DATA", str(tmp_path))
    with pytest.raises(pytest.skip.Exception, match=f"no Mohler data under {tmp_path}"):
        mohler_data_dir()
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="set RUBRICTOOL_DATA"):
        mohler_data_dir()
    marker = tmp_path / "mohler" / "data" / "docs" / "files"  # what the Mohler loader needs first
    marker.parent.mkdir(parents=True)
    marker.write_text("")
    assert mohler_data_dir() == tmp_path
