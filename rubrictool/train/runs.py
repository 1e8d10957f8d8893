"""A run directory: built aside and renamed into place when complete, then opened once by every reader.

``rubrictool train`` writes a run (and each fold of a k-fold run) into a staging folder beside its destination
(``.<name>.building-<pid>-…``) and renames it into place only when every file is written; a retrain replaces the
old run whole, so a reader sees the old run, the new one, or none, never a mix. The last file written is the
completion record ``run.json``::

    {"format_version": 2, "run_id": "…", "created": "…", "git_revision": "…",
     "rubric": {"name", "version", "sha256", "file": "rubric.yaml"},        a copy of the rubric YAML it trained on
     "table":  {"path", "sha256", "rows", "copy": "table.csv" | null, "benchmark": "mohler" | null},
     "labels": {"source": "llm" | "human" | "mixed" | "model" | "unknown", "expert_validated", "detail", …},
     "files":  {"metrics.json": {"bytes", "sha256"},                           every other file, checked when opened
                "model.safetensors": {"bytes", "sha256", "sample_sha256"}, …}}   (files over 16 MB: a sampled hash too)

:func:`open_run` refuses a directory without a record, or whose files do not match it (half-written, mixed, edited,
other weights of the same size, a few numbers changed anywhere in the weights), with one line saying to retrain: every
file's size and the sha256 of every file, the weights whole (hashed once per process: a command that opens a run twice
pays once; docs/results.md measures the cost). ``--verify`` (:func:`full_check`) asks for the same check.

A retrain that was killed between its two renames leaves the old run aside as ``.R.old-…`` (beside ``R``, or inside
a folder at ``R`` where a ``mv`` put it): every reader names it and the one command that puts it back
(:func:`restore_command`).
:func:`migrate` is the one place that knows older formats: it brings a record up to ``FORMAT_VERSION`` when it is
read, so no reader branches on a run's age. :class:`Run` gives grade, explain, intervene, report and audit the config,
split, metrics, rubric, label source and training table, and loads the model only when asked.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import shlex
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from rubrictool.atomic import atomic_write_json, new_dir_mode
from rubrictool.errors import DataError, TrainError
from rubrictool.provenance import git_revision

if TYPE_CHECKING:
    import pandas as pd

    import reccbm
    from rubrictool.rubric import Rubric

__all__ = [
    "FORMAT_VERSION",
    "NUMERIC_PACKAGES",
    "RECORD",
    "TABLE_COPY_MAX_BYTES",
    "Run",
    "building",
    "check_record",
    "forget_hashes",
    "full_check",
    "kept_old_run",
    "migrate",
    "open_run",
    "package_versions",
    "require_run_dir",
    "restore_command",
    "run_is_complete",
    "sample_sha256",
    "sha256_file",
    "trained_with",
    "verify_runs_fully",
    "write_record",
]

RECORD = "run.json"
FORMAT_VERSION = 2  # run.json's format; migrate() brings an older record up to it
TABLE_COPY_MAX_BYTES = 50 * 2**20  # training tables up to this size are copied into the run (table.csv)
_HASH_ON_OPEN_MAX_BYTES = 16 * 2**20  # larger files (model weights) are checked by size when a run is opened
_ASIDE = re.compile(r"^\.(.+)\.(?:building|old)-\d+-")  # folders building() makes beside a run: never a run


_SAMPLE_BLOCKS = 64  # blocks of a large file hashed by the fast check: its size, head, tail and evenly spaced blocks
_SAMPLE_BLOCK_BYTES = 64 * 2**10
_full_check: ContextVar[bool] = ContextVar("rubrictool_full_run_check", default=False)


@contextmanager
def full_check(on: bool = True) -> Iterator[None]:
    """Within the block, every run opened is checked by the full sha256 of every file (``--verify``), not by the fast
    check (every file's size; sha256 of the files up to 16 MB; a sampled hash of larger ones, the weights)."""
    token = _full_check.set(on)
    try:
        yield
    finally:
        _full_check.reset(token)


def verify_runs_fully() -> None:
    """From now on in this context, :func:`full_check` for every run opened (a command's ``--verify``; the CLI runs
    each command in a context of its own, so it ends with the command)."""
    _full_check.set(True)


def sample_sha256(path: str | Path) -> str:
    """sha256 of a file's size and of 64 blocks of 64 KiB spread evenly over it (the first and the last included):
    reads about 4 MiB whatever the size; another file of the same size (other weights) differs in it."""
    p = Path(path)
    size = p.stat().st_size
    h = hashlib.sha256(str(size).encode())
    with open(p, "rb") as f:
        if size <= _SAMPLE_BLOCKS * _SAMPLE_BLOCK_BYTES:
            h.update(f.read())
        else:
            last = size - _SAMPLE_BLOCK_BYTES
            for i in range(_SAMPLE_BLOCKS):
                f.seek(last * i // (_SAMPLE_BLOCKS - 1))
                h.update(f.read(_SAMPLE_BLOCK_BYTES))
    return h.hexdigest()


_hashed: dict[tuple[str, int, int, int, int], str] = {}  # (path, inode, size, mtime_ns, ctime_ns) -> sha256


def _sha256_once(path: Path) -> str:
    """:func:`sha256_file`, remembered for the process while the file's inode, size and times stay the same."""
    st = path.stat()
    key = (str(path.resolve()), st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    got = _hashed.get(key)
    if got is None:
        got = _hashed[key] = sha256_file(path)
    return got


def forget_hashes() -> None:
    """Forget the hashes remembered for this process (the next open hashes every file again)."""
    _hashed.clear()


def sha256_file(path: str | Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _remove_stale_builds(target: Path, kind: str = "building") -> None:
    """Staging folders (``kind`` "building"), or replaced runs ("old"), of this destination left by a build that was
    killed (its process is gone)."""
    for p in target.parent.glob(f".{target.name}.{kind}-*"):
        try:
            pid = int(p.name.rsplit(f".{kind}-", 1)[1].split("-")[0])
        except (IndexError, ValueError):
            continue
        if pid != os.getpid() and not _pid_alive(pid):
            shutil.rmtree(p, ignore_errors=True)


@contextmanager
def building(target: str | Path) -> Iterator[Path]:
    """A fresh staging folder beside ``target``; when the block ends normally it replaces ``target`` whole (an old run
    there is removed), otherwise it is deleted and ``target`` is left as it was."""
    target = Path(target)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        _remove_stale_builds(target)
        stage = Path(tempfile.mkdtemp(prefix=f".{target.name}.building-{os.getpid()}-", dir=target.parent))
    except OSError as exc:  # e.g. --out under a regular file, a read-only folder
        kept = f"{target} is as it was" if target.exists() else f"nothing was written to {target}"
        raise TrainError(f"cannot write the run into {target.parent} ({exc.strerror or exc}); {kept}",
                         hint="pass --out a path in a folder you can write") from None
    os.chmod(stage, new_dir_mode())  # mkdtemp makes 0700; a run is as readable as any other output
    try:
        yield stage
    except OSError as exc:  # a full disk, a file-size limit: one line naming the run, and what was kept
        shutil.rmtree(stage, ignore_errors=True)
        what = Path(exc.filename).name if exc.filename else "a file"
        kept = f"{target} is as it was" if target.exists() else f"nothing was written to {target}"
        hint = ("its folder was removed while it was written: another process is cleaning or writing the same place; "
                "train again when it is done" if exc.errno == errno.ENOENT
                else "free space (or raise the file-size limit), then train again")
        raise TrainError(f"cannot write {what} of the run {target} ({exc.strerror or exc}); {kept}",
                         hint=hint) from None
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise
    if target.exists():
        old = target.parent / f".{target.name}.old-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        os.rename(target, old)
        os.rename(stage, target)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.rename(stage, target)
    _remove_stale_builds(target, "old")  # a run replaced by a build killed between its two renames


def trained_with(config: dict[str, Any]) -> str:
    """What a run (its config.yaml) was trained with, for every table that compares runs: the preset and the epochs
    its encoder trained, e.g. "default preset, encoder 3 + 4 epochs (Stage I + joint)" or "paper preset, encoder 6
    epochs" (a PLM trains its encoder in one stage), or "default preset, frozen encoder, heads 3 + 4 epochs"."""
    model, s1, joint = (config.get(k) or {} for k in ("model", "stage1", "joint"))
    e1, ej = int(s1.get("epochs") or 0), 0 if model.get("plm") else int(joint.get("epochs") or 0)
    encoder = f"encoder {e1} + {ej} epochs (Stage I + joint)" if ej else f"encoder {e1} epochs"
    if s1.get("encoder") == "frozen":  # the pretrained encoder is never updated: only the heads train
        encoder = f"frozen encoder, heads {e1} + {ej} epochs" if ej else f"frozen encoder, heads {e1} epochs"
    return f"{config.get('preset') or 'custom'} preset, {encoder}"


def write_record(stage: Path, *, rubric: Rubric, table: dict[str, Any], labels: dict[str, Any],
                 device: dict[str, Any] | None = None) -> dict[str, Any]:
    """Copy the rubric YAML into the staging folder, then write ``run.json`` over every file in it (the last write);
    ``device``: what the run computed on (:func:`reccbm.device.describe_device`)."""
    # the file as written (comments kept); a rubric built in memory: its validated form
    rubric_text = rubric.source_text
    if rubric_text is None:
        rubric_text = yaml.safe_dump(rubric.model_dump(mode="json", exclude_none=True), sort_keys=False,
                                     allow_unicode=True)
    (stage / "rubric.yaml").write_text(rubric_text, encoding="utf-8")
    files: dict[str, dict[str, Any]] = {}
    for p in sorted(stage.rglob("*")):
        if p.is_file() and p.name != RECORD:
            entry: dict[str, Any] = {"bytes": p.stat().st_size, "sha256": sha256_file(p)}
            # what the fast check compares for files it does not hash whole
            if entry["bytes"] > _HASH_ON_OPEN_MAX_BYTES:
                entry["sample_sha256"] = sample_sha256(p)
            files[p.relative_to(stage).as_posix()] = entry
    record = {
        "format_version": FORMAT_VERSION, "run_id": uuid.uuid4().hex,
              "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "git_revision": git_revision(),
        "rubric": {"name": rubric.name, "version": str(rubric.version), "sha256": files["rubric.yaml"]["sha256"],
                   "file": "rubric.yaml", "path": rubric.source_file},
        "table": table, "labels": labels, "files": files,
    }
    if device is not None:
        record["device"] = device
    record["packages"] = package_versions()
    atomic_write_json(stage / RECORD, record, default=str)
    return record


# The packages whose versions can move a run's numbers (arithmetic, tokenisation, model code, data handling).
NUMERIC_PACKAGES = ("torch", "transformers", "tokenizers", "accelerate", "safetensors", "numpy", "scipy",
                    "scikit-learn",
                    "pandas")


def package_versions() -> dict[str, str | None]:
    """The installed version of each of :data:`NUMERIC_PACKAGES` (None where one is missing), for run.json: two runs
    of one revision that disagree can be told apart by what pip installed."""
    from importlib.metadata import PackageNotFoundError, version

    out: dict[str, str | None] = {}
    for name in NUMERIC_PACKAGES:
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = None
    return out


def migrate(record: dict[str, Any], path: str | Path = RECORD) -> dict[str, Any]:
    """A run's record (run.json) in the current format, ``FORMAT_VERSION``, whichever rubrictool wrote it.

    Every reader gets a record in this one shape, so what older formats lack is handled here, once:

    - 0, no run.json (runs written before 2026-11-25): nothing says which files belong to the run, who made its
      labels or which rubric and table it trained on, so it cannot be read like a run: refused, train it again.
    - 1 (``"format": 1``): the same fields; the version is named ``format_version`` since version 2.

    A version newer than this build reads is refused (upgrade rubrictool)."""
    where = Path(path)
    if not record:
        raise TrainError(f"{where.parent} has no completion record ({RECORD}): it is a run whose writing did not "
                         "finish, a copy of a staging folder, or a run written before runs had a completion record "
                         f"({RECORD}); "
                         "it cannot be checked or read as a run",
                         hint=f"train it again (`rubrictool train … --out {where.parent}`)")
    version = record.get("format_version", record.get("format"))
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise TrainError(f"{where}: unknown run format {version!r}", hint="train the run again")
    if version > FORMAT_VERSION:
        raise TrainError(f"{where}: run format {version} is newer than this rubrictool reads ({FORMAT_VERSION})",
                         hint="upgrade rubrictool")
    out = dict(record)
    if version == 1:
        del out["format"]
        version = 2
    out["format_version"] = version
    return out


def check_record(path: Path, record: dict[str, Any], full: bool | None = None) -> str | None:
    """Why the run directory does not match its record, or None: every file's size, then its whole sha256 (``full`` is
    kept for callers; every check is whole)."""
    for name, want in (record.get("files") or {}).items():
        p = path / name
        if not p.is_file():
            return f"{name} is missing"
        size = p.stat().st_size
        if size != want.get("bytes"):
            return f"{name} has {size} bytes, the run wrote {want.get('bytes')}"
        if _sha256_once(p) != want.get("sha256"):
            return f"{name} changed after the run was written (its sha256 differs)"
    return None


def run_is_complete(path: str | Path) -> bool:
    """A run directory with a completion record that its files match (k-fold resume reads such a fold back)."""
    p = Path(path)
    try:
        record = json.loads((p / RECORD).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(record, dict) and check_record(p, record) is None


def _read(path: Path, kind: str) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        doc = json.loads(path.read_text()) if kind == "json" else yaml.safe_load(path.read_text())
    except (OSError, ValueError, yaml.YAMLError) as exc:
        raise TrainError(f"cannot read {path}: {str(exc).splitlines()[0]}") from None
    return doc if isinstance(doc, dict) else {}


@dataclass
class Run:
    """A run directory, checked against its record; the model loads on first use of ``model`` / ``tokenizer``."""

    path: Path
    record: dict[str, Any]  # run.json, in the current format (migrate)
    meta: dict[str, Any]  # model.json
    metrics: dict[str, Any]  # metrics.json ({} when absent)
    config: dict[str, Any]  # config.yaml ({} when absent)
    split: dict[str, list[str]]  # split.json ({} when absent)
    table: pd.DataFrame | None = None  # the training table, once :meth:`load_table` ran (report, explain, audit)
    source: str = "unknown"  # where ``table`` came from, for the provenance section
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # e.g. the recorded table changed since training
    data_dir: str | Path | None = None  # benchmark data directory (None: $RUBRICTOOL_DATA, else ./data)

    @cached_property
    def _loaded(self) -> tuple[reccbm.Model, Any]:
        import reccbm
        from reccbm import ReccbmError

        try:
            model, tokenizer, _ = reccbm.load_checkpoint(self.path)
        except ReccbmError as exc:
            raise TrainError(str(exc)) from None
        return model, tokenizer

    @property
    def model(self) -> reccbm.Model:
        return self._loaded[0]

    @property
    def tokenizer(self) -> Any:
        return self._loaded[1]

    @property
    def keys(self) -> list[str]:
        return list(self.meta["concept_keys"])

    @property
    def names(self) -> list[str]:
        return list(self.meta.get("concept_names") or self.keys)

    @property
    def scale_min(self) -> int:
        return int(self.meta["scale"][0])

    @property
    def grade_min(self) -> int:
        return int(self.meta["grade"][0])

    @property
    def plm(self) -> bool:
        return str(self.meta.get("variant", "")) == "plm" or bool(self.model.config.plm)

    @property
    def has_lcec(self) -> bool:
        from reccbm import RecCBM

        return isinstance(self.model, RecCBM) and self.model.lcec is not None

    @property
    def has_race(self) -> bool:
        from reccbm import RecCBM

        return isinstance(self.model, RecCBM) and self.model.bottleneck.Q is not None

    @property
    def labels(self) -> dict[str, Any]:
        """Who made the training labels (run.json ``labels``)."""
        return dict(self.record.get("labels") or {"source": "unknown", "expert_validated": None})

    @property
    def bundled_labels(self) -> bool:
        """Trained on a benchmark's bundled concept-label passes (Mohler's three LLM passes)?"""
        return bool(self.labels.get("benchmark")) or bool((self.record.get("table") or {}).get("benchmark"))

    @cached_property
    def rubric(self) -> Rubric:
        """The rubric the run trained on: its copy in the run (rubric.yaml, checked against run.json)."""
        from rubrictool.rubric import parse_rubric

        copy = self.path / str(self.record["rubric"].get("file") or "rubric.yaml")
        return parse_rubric(copy.read_text(encoding="utf-8"), str(copy))

    def rubric_version(self) -> str | None:
        v = self.record["rubric"].get("version")
        return None if v is None else str(v)

    def load_table(self, data: str | Path | None = None) -> pd.DataFrame:
        """The training table: ``data`` if given, else the run's copy, else the recorded path, else the benchmark's
        bundled labels; a table that changed since training is used with a warning (``warnings``)."""
        from rubrictool.io import read_table

        rec = self.record.get("table") or {}
        if data is not None:
            self.table, self.source = read_table(data), str(data)
            trained = {str(i) for part in self.split.values() if isinstance(part, list) for i in part}
            shares = "id" in self.table.columns and bool(trained & set(self.table["id"].astype(str)))
            if shares and rec.get("sha256") and Path(data).is_file() and sha256_file(data) != rec["sha256"]:
                # a table of the run's own answers that differs from the one it trained on; new answers are not warned
                # of
                self.warnings.append(f"{data} is not the table this run was trained on (its content differs)")
            return self.table
        copy = self.path / str(rec.get("copy") or "table.csv")
        if rec.get("copy") and copy.is_file():
            self.table, self.source = read_table(copy), f"the run's copy of {rec.get('path') or 'its training table'}"
            src = rec.get("path")
            if src and Path(src).is_file() and sha256_file(src) != rec.get("sha256"):
                self.warnings.append(f"{src} changed since this run was trained; the run's copy of the table is used")
            return self.table
        if rec.get("path") and Path(rec["path"]).is_file():
            self.table, self.source = read_table(rec["path"]), str(rec["path"])
            if rec.get("sha256") and sha256_file(rec["path"]) != rec["sha256"]:
                self.warnings.append(f"{rec['path']} changed since this run was trained: the ids may not match")
            return self.table
        if self.bundled_labels and str(self.meta.get("rubric")) == "mohler":
            from rubrictool.adjudicate import adjudicate_benchmark_labels

            self.table = adjudicate_benchmark_labels("mohler", data_dir=self.data_dir)
            self.source = "Mohler benchmark (UNT short answers) with the bundled concept labels"
            return self.table
        where = f" (it was {rec['path']})" if rec.get("path") else ""
        raise DataError(f"{self.path}: the table this run was trained on is not available{where}; "
                        "pass --table FILE (the adjudicated table)")


def kept_old_run(path: Path) -> Path | None:
    """The run a retrain killed between its two renames left aside (``.R.old-…`` with a run.json), beside ``path`` or
    moved inside a folder at ``path``; the newest when there are several; None when there is none."""
    found = [*path.parent.glob(f".{path.name}.old-*")]
    if path.is_dir():
        found += [*path.glob(f".{path.name}.old-*")]
    found = [p for p in found if p.is_dir() and (p / RECORD).is_file()]
    return max(found, key=lambda p: p.stat().st_mtime) if found else None


def restore_command(path: Path, old: Path) -> str:
    """The one shell command that puts the kept old run ``old`` back at ``path``: a plain ``mv`` when nothing is at
    ``path``; else what is there is first moved aside to ``<path>.not-a-run`` (kept, never deleted)."""
    q = shlex.quote
    if not path.exists() and not path.is_symlink():
        return f"mv {q(str(old))} {q(str(path))}"
    aside = path.with_name(path.name + ".not-a-run")
    n = 2
    while aside.exists():
        aside, n = path.with_name(f"{path.name}.not-a-run-{n}"), n + 1
    moved = aside / old.name if old.parent == path else old
    return f"mv {q(str(path))} {q(str(aside))} && mv {q(str(moved))} {q(str(path))}"


def require_run_dir(run_dir: str | Path) -> Path:
    """``run_dir`` when it looks like a finished run or k-fold run (model.json, run.json, folds.json), else the one-line
    error :func:`open_run` gives, before a command creates anything (its files are checked when it is opened)."""
    path = Path(run_dir)
    if (path / "model.json").is_file() or (path / "folds.json").is_file() or (path / "fold-0").is_dir():
        return path
    _not_a_run(path)
    return path


def _not_a_run(path: Path) -> None:
    """Raise the one-line error for ``path``, which holds no model.json."""
    aside = _ASIDE.match(path.name)
    if aside:  # a staging folder (its run.json may not be written yet) or a replaced run on its way out
        raise TrainError(f"{path} is a run being built or replaced (or left by a killed build), not a finished run",
                         hint=f"pass the run itself: {path.parent / aside.group(1)}")
    if (path / "fold-0").is_dir():
        raise TrainError(f"{path} is a k-fold run: pass one of its folds, e.g. --run {path / 'fold-0'}")
    old = kept_old_run(path)
    if old is not None:
        there = "is missing" if not path.exists() else "is not a run"
        raise TrainError(f"{path} {there}, but {old} holds the run it was replacing (a retrain killed between its two "
                         "renames left it aside; it is kept until a new run is written whole)",
                         hint=f"put it back with `{restore_command(path, old)}` (or train again)")
    if not path.exists():
        raise TrainError(f"{path}: no such run (train one with `rubrictool train`)", hint="check the --run path")
    raise TrainError(f"{path} is not a trained run: model.json is missing (train one with `rubrictool train`)")


def open_run(run_dir: str | Path, data_dir: str | Path | None = None) -> Run:
    """Open a run directory written by ``rubrictool train``; refuses a k-fold parent, an incomplete or mixed run, and
    names a run a killed retrain left aside."""
    path = Path(run_dir)
    if _ASIDE.match(path.name) or not (path / "model.json").is_file():
        _not_a_run(path)
    record = migrate(_read(path / RECORD, "json"), path / RECORD)
    why = check_record(path, record)
    if why:
        raise TrainError(f"{path} is incomplete or was changed after training: {why}",
                         hint=f"train it again (`rubrictool train … --out {path}`)")
    meta = _read(path / "model.json", "json")
    run = Run(path, record, meta, _read(path / "metrics.json", "json"), _read(path / "config.yaml", "yaml"),
              _read(path / "split.json", "json"), data_dir=data_dir)
    run.notes = [str(n) for n in meta.get("notes") or run.metrics.get("notes") or []]
    return run
