"""A full disk (Errno 28, a small tmpfs filled up) and a read-only folder (Errno 30 / EPERM, ``chattr +i`` as root)
under ``grade``, ``report``, ``data import`` and ``learning-curve``: one line, nothing half-written, and — when the
folder cannot be written at all — before the work, not after it.

The full disk is a tmpfs mounted for the test (root only; skipped where mounting is not allowed), filled with a file
so that a chosen number of bytes is left: none (the write probe fails) or a few KiB (the probe passes, the output
does not fit).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rubrictool.cli import app
from tests.support.courses import write_chemlab_tables
from tests.support.faults import read_only
from tests.support.tiny_models import build_backbone

pytestmark = [pytest.mark.faults, pytest.mark.usefixtures("one_thread")]
runner = CliRunner()
N = 40


@contextlib.contextmanager
def small_disk(where: Path, kib: int = 256) -> Iterator[Path]:
    """A tmpfs of ``kib`` KiB mounted on ``where`` for the block (skips the test where mounting is not allowed)."""
    where.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0 or not shutil.which("mount"):
        pytest.skip("mounting a small file system needs root")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={kib}k", "tmpfs", str(where)], capture_output=True,
                          check=False)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode(errors='replace').strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], capture_output=True, check=False)


def fill(disk: Path, leave: int) -> None:
    """Fill ``disk`` until about ``leave`` bytes are free."""
    st = os.statvfs(disk)
    free = st.f_bavail * st.f_frsize
    with open(disk / "filler", "wb") as fh, contextlib.suppress(OSError):
        fh.write(b"\0" * max(0, free - leave))


def _one_line(output: str) -> str:
    flat = " ".join(output.split())
    assert "Traceback" not in output and "error:" in flat, output[-2000:]
    return flat


def _left(disk: Path) -> list[str]:
    """What a failed command left on the disk (beside the filler)."""
    return sorted(p.relative_to(disk).as_posix() for p in disk.rglob("*") if p.name != "filler")


@pytest.fixture(scope="module")
def course(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("course")
    course = write_chemlab_tables(d, N)
    backbone = build_backbone(d, "bert")
    res = runner.invoke(app, ["train", "--table", str(d / "adjudicated.csv"), "--rubric", str(d / "chemlab.yaml"),
                              "--backbone", backbone, "--epochs", "1", "--max-len", "32", "--out", str(d / "run"),
                              "--device", "cpu", "--lr", "3e-3", "--cfg", "joint.epochs=1"])
    assert res.exit_code == 0, res.output
    return course | {"run": d / "run"}


def _grade(course: dict[str, Path], out: Path) -> list[str]:
    return ["grade", "--run", str(course["run"]), "--items", str(course["items"]), "--out", str(out)]


def test_grade_on_a_full_disk_stops_before_grading(course: dict[str, Path], tmp_path: Path) -> None:
    with small_disk(tmp_path / "disk") as disk:
        fill(disk, 0)
        res = runner.invoke(app, _grade(course, disk / "graded.csv"))
        flat = _one_line(res.output)
        assert res.exit_code == 1 and "No space left on device" in flat and "nothing was written" in flat, flat
        assert "graded" not in res.stdout and _left(disk) == []


def test_grade_when_the_disk_fills_while_writing_leaves_nothing(course: dict[str, Path], tmp_path: Path) -> None:
    with small_disk(tmp_path / "disk") as disk:
        fill(disk, 8 * 1024)  # the write probe fits, the graded table does not
        res = runner.invoke(app, _grade(course, disk / "graded.csv"))
        flat = _one_line(res.output)
        assert res.exit_code == 1 and "cannot write the graded table" in flat and "nothing was written" in flat, flat
        assert _left(disk) == []


def test_grade_into_a_read_only_folder_stops_before_grading(course: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "ro"
    out.mkdir()
    with read_only(out):
        res = runner.invoke(app, _grade(course, out / "graded.csv"))
    flat = _one_line(res.output)
    assert res.exit_code == 1 and f"into {out}" in flat and "nothing was written" in flat, flat
    assert "graded" not in res.stdout and list(out.iterdir()) == []


def test_report_on_a_full_disk_leaves_every_file_whole(course: dict[str, Path], tmp_path: Path) -> None:
    with small_disk(tmp_path / "disk", kib=512) as disk:
        fill(disk, 48 * 1024)  # some files fit, the rest do not
        res = runner.invoke(app, ["report", "--run", str(course["run"]), "--out", str(disk / "report")])
        flat = _one_line(res.output)
        assert res.exit_code == 1 and "cannot write it (No space left on device)" in flat, flat
        left = [disk / p for p in _left(disk) if (disk / p).is_file()]
        assert not any(p.name.endswith(".tmp") for p in left), left
        for p in left:  # whole or absent: never a 0-byte or cut PNG
            data = p.read_bytes()
            assert data, p
            if p.suffix == ".png":
                assert data.startswith(b"\x89PNG") and data.endswith(b"IEND\xaeB`\x82"), p


def test_report_into_a_read_only_folder_stops_before_the_report(course: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "ro"
    out.mkdir()
    with read_only(out):
        res = runner.invoke(app, ["report", "--run", str(course["run"]), "--out", str(out)])
    assert res.exit_code == 1 and "nothing was written" in _one_line(res.output)
    assert list(out.iterdir()) == []


def test_data_import_on_a_full_disk_and_into_a_read_only_folder(tmp_path: Path) -> None:
    src = tmp_path / "answers.csv"
    src.write_text("id,question,response,grade\n" + "".join(f"{i},Q1,answer number {i},1\n" for i in range(400)))
    with small_disk(tmp_path / "disk") as disk:
        fill(disk, 0)
        res = runner.invoke(app, ["data", "import", str(src), "--out", str(disk / "items.csv")])
        assert res.exit_code == 1 and "No space left on device" in _one_line(res.output)
        assert _left(disk) == []
        os.unlink(disk / "filler")
        fill(disk, 6 * 1024)  # the probe fits, the table (about 10 KB) does not
        res = runner.invoke(app, ["data", "import", str(src), "--out", str(disk / "items.csv")])
        flat = _one_line(res.output)
        assert res.exit_code == 1 and "cannot write the item table" in flat and "nothing was written" in flat, flat
        assert _left(disk) == []
    out = tmp_path / "ro"
    out.mkdir()
    with read_only(out):
        res = runner.invoke(app, ["data", "import", str(src), "--out", str(out / "items.csv")])
    assert res.exit_code == 1 and "nothing was written" in _one_line(res.output)


def test_learning_curve_on_a_full_disk_is_one_line(course: dict[str, Path], tmp_path: Path) -> None:
    with small_disk(tmp_path / "disk") as disk:
        fill(disk, 0)
        res = runner.invoke(app, ["learning-curve", "--table", str(course["table"]), "--rubric", str(course["rubric"]),
                                  "--variants", "points", "--sizes", "10,20", "--out", str(disk / "curve")])
        assert res.exit_code == 1 and "No space left on device" in _one_line(res.output), res.output
