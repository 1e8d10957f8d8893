"""Item tables, benchmark loaders, the Mohler concept-label passes and train/dev/test splits.

The ItemTable is one row per student response with the columns
``id, question, response, reference, context, grade`` (the last three optional). Every stage reads
and writes it through :func:`read_table` / :func:`write_table`, which keep one format rule for CSV,
JSONL and Parquet, and write atomically.
"""

from __future__ import annotations

import json
import os
import shutil
import tarfile
import tempfile
import zipfile
from collections.abc import Iterable
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path
from typing import Any
from urllib.parse import urlparse
from urllib.request import url2pathname

import httpx
import numpy as np
import pandas as pd

from rubrictool.errors import DataError
from rubrictool.progress import Progress, ProgressFn
from rubrictool.tables import read_items, read_wide_labels, validate_items

__all__ = [
    "BENCHMARKS",
    "DATA_ENV",
    "MOHLER_URL",
    "concept_passes_dir",
    "describe_benchmark",
    "describe_items",
    "fetch_benchmark",
    "fetch_mohler",
    "kfold_splits",
    "load_benchmark",
    "load_concept_passes",
    "load_mohler",
    "load_split",
    "resolve_data_dir",
    "round_half_up",
    "save_split",
    "split_items",
    "split_to_file",
]

DATA_ENV = "RUBRICTOOL_DATA"
BENCHMARKS = ("mohler",)


# -- data directory ----------------------------------------------------------------------------------------


def resolve_data_dir(data_dir: str | Path | None = None) -> Path:
    """The folder that holds benchmark data: the option, else $RUBRICTOOL_DATA, else ./data."""
    if data_dir is not None:
        return Path(data_dir)
    env = os.environ.get(DATA_ENV)
    return Path(env) if env else Path("data")


def round_half_up(x: float) -> int:
    """Round .5 up (Python's round() rounds half to even: 2.5 -> 2)."""
    return int(Decimal(str(x)).quantize(Decimal(1), rounding=ROUND_HALF_UP))


# -- Mohler (UNT short-answer data set, v2.0) --------------------------------------------------------------


def _mohler_root(data_dir: str | Path | None) -> Path:
    base = resolve_data_dir(data_dir)
    for cand in (base / "mohler", base):
        if (cand / "data" / "docs" / "files").is_file():
            return cand
    raise DataError(
        f"{base}: no Mohler data (expected {base / 'mohler' / 'data' / 'docs' / 'files'})",
        hint=f"run `rubrictool data fetch mohler` or point --data-dir / ${DATA_ENV} at a folder holding mohler/",
    )


def _read_prefixed(path: Path) -> dict[str, str]:
    """``data/raw/questions`` and ``answers``: one line ``<q> <text>`` per question."""
    out: dict[str, str] = {}
    for lineno, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
        if not line.strip():
            continue
        qid, _, text = line.strip().partition(" ")
        out[qid] = _clean(text)
    return out


def _clean(text: str) -> str:
    return " ".join(text.replace("<br>", " ").replace("<br/>", " ").replace("<br />", " ").split())


def _read_scores(path: Path) -> list[float]:
    try:
        return [float(x) for x in path.read_text(encoding="utf-8").split()]
    except (OSError, ValueError) as e:
        raise DataError(f"{path}: cannot read scores ({e}); the file must hold one number per line") from None


def load_mohler(data_dir: str | Path | None = None) -> pd.DataFrame:
    """Load the ORIGINAL UNT layout into an ItemTable (2,273 answers over 81 questions).

    Questions marked ``#`` in ``data/docs/files`` are excluded, as in all published work. ``grade`` is
    the ``ave`` score rounded half up to 0..5; ``score_ave`` keeps it unrounded and ``grade_me`` /
    ``grade_other`` keep the two graders' scores, normalised to 0..5 (assignments 11 and 12, the
    exams, were graded 0..10).
    """
    root = _mohler_root(data_dir)
    d = root / "data"
    qids = [ln.strip() for ln in (d / "docs" / "files").read_text().splitlines() if ln.strip()]
    qids = [q for q in qids if not q.startswith("#")]
    questions = _read_prefixed(d / "raw" / "questions")
    answers = _read_prefixed(d / "raw" / "answers")
    rows = []
    for q in qids:
        raw = d / "raw" / q
        if not raw.is_file():
            raise DataError(f"{raw}: missing answers file for question {q}; is the download complete?")
        lines = [ln for ln in raw.read_text(encoding="utf-8", errors="replace").splitlines() if ln.strip()]
        ave = _read_scores(d / "scores" / q / "ave")
        me = _read_scores(d / "scores" / q / "me")
        other = _read_scores(d / "scores" / q / "other")
        if not (len(lines) == len(ave) == len(me) == len(other)):
            raise DataError(
                f"{raw}: {len(lines)} answers but {len(ave)}/{len(me)}/{len(other)} scores (ave/me/other); "
                "the data set is corrupt — fetch it again"
            )
        factor = 0.5 if q.split(".")[0] in {"11", "12"} else 1.0
        for i, line in enumerate(lines):
            text = line.strip()
            if text.startswith(q + " "):
                text = text[len(q) + 1 :]
            rows.append(
                {
                    "id": f"{q}.{i}",
                    "question": questions.get(q, ""),
                    "response": _clean(text),
                    "reference": answers.get(q, ""),
                    "context": None,
                    "grade": round_half_up(ave[i]),
                    "question_id": q,
                    "score_ave": ave[i],
                    "grade_me": me[i] * factor,
                    "grade_other": other[i] * factor,
                }
            )
    return validate_items(pd.DataFrame(rows), str(root))  # an empty answer is reported, never dropped


def load_benchmark(name: str, data_dir: str | Path | None = None) -> pd.DataFrame:
    """Load a benchmark's ItemTable by name from the data directory."""
    if name == "mohler":
        return load_mohler(data_dir)
    raise DataError(
        f"no loader for benchmark {name!r}; available: {', '.join(BENCHMARKS)}",
        hint="for other data pass --data FILE with an item table",
    )


# -- concept labels as reviewer exports ----------------------------------------------------------------------


CONCEPT_PASSES = "mohler-concepts"
PASSES = ("A", "B", "C")


def concept_passes_dir(data_dir: str | Path | None = None) -> Path:
    """``<data dir>/mohler-concepts``: the three Mohler concept-label passes (ids and levels only)."""
    return resolve_data_dir(data_dir) / CONCEPT_PASSES


def load_concept_passes(data_dir: str | Path | None = None) -> pd.DataFrame:
    """The Mohler concept labels from three independent LLM annotation passes A, B and C, tidy.

    Read from ``<data dir>/mohler-concepts/{A,B,C}.jsonl`` (the same data directory as ``mohler/``).
    They stand in for three reviewers' exports. They are real and independently made, but made by
    LLM annotators, NOT validated by experts: say so wherever results built on them are reported.
    """
    d = concept_passes_dir(data_dir)
    missing = [d / f"{r}.jsonl" for r in PASSES if not (d / f"{r}.jsonl").is_file()]
    if missing:
        raise DataError(
            f"{missing[0]}: missing; put the three Mohler concept-label passes A.jsonl, B.jsonl, C.jsonl "
            f"(one line per answer: id + one level per concept) in {d}"
        )
    frames = [read_wide_labels(d / f"{r}.jsonl", reviewer=r, source="llm") for r in PASSES]
    out = pd.concat(frames, ignore_index=True)
    out["level"] = out["level"].astype(int)
    return out


# -- splits --------------------------------------------------------------------------------------------------


def split_items(
    items: pd.DataFrame,
    seed: int = 0,
    ratios: tuple[float, float, float] = (0.7, 0.2, 0.1),
    stratify: str | None = "grade",
) -> dict[str, list[str]]:
    """A deterministic train/dev/test split of item ids, stratified by ``stratify`` (the grade).

    Within each stratum the ids are sorted, shuffled with ``seed`` and cut at the ratios (rounded;
    strata too small for a dev/test share go to train), so the same table and seed always give the
    same split, whatever the row order.
    """
    if abs(sum(ratios) - 1.0) > 1e-6 or any(r < 0 for r in ratios):
        raise DataError(f"split ratios {ratios} must be non-negative and sum to 1")
    if len(items) == 0:
        raise DataError("cannot split an empty item table")
    rng = np.random.default_rng(seed)
    out: dict[str, list[str]] = {"train": [], "dev": [], "test": []}
    if stratify and stratify in items.columns and items[stratify].notna().all():
        groups: Iterable[tuple[object, pd.DataFrame]] = sorted(
            items.groupby(stratify), key=lambda kv: float(kv[0])  # type: ignore[arg-type]
        )
    else:
        groups = [("all", items)]
    for _, g in groups:
        ids = sorted(g["id"].astype(str))
        perm = [ids[i] for i in rng.permutation(len(ids))]
        n = len(perm)
        n_test = round(n * ratios[2])
        n_dev = round(n * ratios[1])
        if n_test + n_dev >= n:  # tiny stratum: keep at least one training example
            n_test, n_dev = (min(n_test, max(n - 1, 0)), 0) if n > 1 else (0, 0)
        out["test"] += perm[:n_test]
        out["dev"] += perm[n_test : n_test + n_dev]
        out["train"] += perm[n_test + n_dev :]
    return {k: sorted(v) for k, v in out.items()}


def kfold_splits(
    items: pd.DataFrame,
    k: int = 5,
    seed: int = 0,
    dev_share: float = 0.125,
    stratify: str | None = "grade",
) -> list[dict[str, list[str]]]:
    """k train/dev/test splits in which every item is tested exactly once, stratified by ``stratify``.

    Within each stratum the ids are sorted, shuffled with ``seed`` and dealt to the folds in turn, the
    dealing continuing across strata so that fold sizes differ by at most one. Fold i tests on its own
    items; dev is a stratified ``dev_share`` of the other folds' items (seed + i), the rest is train.
    """
    if k < 2:
        raise DataError(f"k-fold evaluation needs at least 2 folds, got {k}")
    if len(items) < k:
        raise DataError(f"cannot make {k} folds of {len(items)} items")
    if not 0 < dev_share < 1:
        raise DataError(f"the dev share must be between 0 and 1, got {dev_share}")
    rng = np.random.default_rng(seed)
    if stratify and stratify in items.columns and items[stratify].notna().all():
        groups: list[tuple[object, pd.DataFrame]] = sorted(items.groupby(stratify), key=lambda kv: float(kv[0]))  # type: ignore[arg-type]
    else:
        groups = [("all", items)]
    fold_of: dict[str, int] = {}
    turn = 0
    for _, g in groups:
        ids = sorted(g["id"].astype(str))
        for i in rng.permutation(len(ids)):
            fold_of[ids[i]] = turn % k
            turn += 1
    out = []
    for f in range(k):
        test = sorted(i for i, fi in fold_of.items() if fi == f)
        rest = items[items["id"].astype(str).map(fold_of) != f]
        inner = split_items(rest, seed=seed + 1 + f, ratios=(1 - dev_share, dev_share, 0.0), stratify=stratify)
        out.append({"train": inner["train"], "dev": inner["dev"], "test": test})
    return out


def save_split(
    split: dict[str, list[str]], path: str | Path, seed: int | None = None, meta: dict[str, Any] | None = None
) -> Path:
    """Write a split as JSON (atomically), with the seed that made it and optional metadata."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    payload = {"seed": seed, **(meta or {}), **{k: split[k] for k in ("train", "dev", "test")}}
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", dir=p.parent)
    with os.fdopen(fd, "w") as fh:
        json.dump(payload, fh, indent=1)
    os.replace(tmp, p)
    return p


def load_split(path: str | Path) -> dict[str, list[str]]:
    p = Path(path)
    try:
        data = json.loads(p.read_text())
        return {k: [str(x) for x in data[k]] for k in ("train", "dev", "test")}
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise DataError(f"{p}: not a split file ({e.__class__.__name__}); expected JSON with train/dev/test id lists") from None


# -- summaries ------------------------------------------------------------------------------------------------


def describe_items(items: pd.DataFrame) -> dict[str, Any]:
    """Counts, grade histogram, mean response length and (when present) the two graders' agreement.

    Grader agreement uses ``grade_me`` and ``grade_other`` (both on the benchmark's 0..5 scale):
    the share of answers where both gave exactly the same score, Pearson's r and the mean absolute
    difference.
    """
    qcol = "question_id" if "question_id" in items.columns else "question"
    words = items["response"].astype(str).map(lambda t: len(t.split()))
    out: dict[str, Any] = {
        "n_items": len(items),
        "n_questions": int(items[qcol].nunique()) if qcol in items.columns else None,
        "mean_response_words": round(float(words.mean()), 2) if len(items) else 0.0,
        "median_response_words": float(words.median()) if len(items) else 0.0,
        "grade_histogram": {},
        "graders": None,
    }
    if "grade" in items.columns and items["grade"].notna().any():
        counts = items["grade"].dropna().astype(int).value_counts().sort_index()
        out["grade_histogram"] = {int(k): int(v) for k, v in zip(counts.index.to_list(), counts.to_list())}
        out["mean_grade"] = round(float(items["grade"].mean()), 3)
    if {"grade_me", "grade_other"} <= set(items.columns):
        pair = items[["grade_me", "grade_other"]].dropna().astype(float)
        a, b = pair["grade_me"].to_numpy(), pair["grade_other"].to_numpy()
        r = float(np.corrcoef(a, b)[0, 1]) if len(a) > 1 and a.std() > 0 and b.std() > 0 else None
        out["graders"] = {
            "n": len(a),
            "exact_agreement": round(float(np.mean(a == b)), 4),
            "within_one_point": round(float(np.mean(np.abs(a - b) <= 1.0)), 4),
            "pearson_r": round(r, 4) if r is not None else None,  # undefined when a grader is constant
            "mean_abs_diff": round(float(np.mean(np.abs(a - b))), 4),
        }
    return out


def describe_benchmark(name: str, data_dir: str | Path | None = None) -> dict[str, Any]:
    """:func:`describe_items` of a bundled benchmark, or of an item file when ``name`` is a path
    (``rubrictool data show``)."""
    items = load_benchmark(name, data_dir) if name in BENCHMARKS else read_items(name)
    return {"benchmark": name, **describe_items(items)}


# -- download --------------------------------------------------------------------------------------------------

MOHLER_URL = "http://web.eecs.umich.edu/~mihalcea/downloads/ShortAnswerGrading_v2.0.zip"
"""The UNT short-answer grading data set v2.0 (Mohler, Bunescu & Mihalcea 2011), as its authors host it.

Plain http on purpose: the host's TLS certificate has failed verification for others. The archive
is checked (it must hold ``data/docs/files``) and the extracted copy must load before it is kept.
"""

def _download(url: str, dest_dir: Path, progress: ProgressFn | None) -> Path:
    fd, tmp = tempfile.mkstemp(prefix=".download-", suffix=".part", dir=dest_dir)
    try:
        with os.fdopen(fd, "wb") as fh, httpx.stream("GET", url, follow_redirects=True, timeout=60.0) as resp:
            if resp.status_code != 200:
                raise DataError(
                    f"{url}: HTTP {resp.status_code}",
                    hint="check the URL, or download the archive yourself and pass its path with --url",
                )
            total = int(resp.headers.get("content-length") or 0) or None
            done = 0
            for chunk in resp.iter_bytes(1 << 16):
                fh.write(chunk)
                done += len(chunk)
                if progress:
                    progress(Progress("downloading", done, total))
    except httpx.HTTPError as e:
        os.unlink(tmp)
        raise DataError(
            f"{url}: download failed ({e.__class__.__name__}: {e})",
            hint="check your connection, or download the archive yourself and pass its path with --url",
        ) from None
    except BaseException:
        os.unlink(tmp)
        raise
    return Path(tmp)


def _local_source(url: str) -> Path | None:
    """A local archive path for ``file://`` URLs and plain paths; None for http(s)."""
    if url.startswith(("http://", "https://")):
        return None
    if url.startswith("file://"):

        return Path(url2pathname(urlparse(url).path))
    if "://" in url:
        raise DataError(f"{url}: unsupported URL scheme; use http(s)://, file:// or a local archive path")
    return Path(url)


def _archive_members(archive: Path) -> tuple[str, list[str]]:
    if zipfile.is_zipfile(archive):
        with zipfile.ZipFile(archive) as zf:
            return "zip", zf.namelist()
    if tarfile.is_tarfile(archive):
        with tarfile.open(archive) as tf:
            return "tar", tf.getnames()
    raise DataError(f"{archive}: not a zip or tar archive; expected ShortAnswerGrading_v2.0.zip")


def _extract(archive: Path, into: Path) -> Path:
    """Extract safely (no absolute or ``..`` paths) and return the folder holding ``data/docs/files``."""
    kind, names = _archive_members(archive)
    roots = [n[: -len("data/docs/files")] for n in names if n.rstrip("/").endswith("data/docs/files")]
    if not roots:
        raise DataError(
            f"{archive}: the archive holds no data/docs/files; is it the UNT ShortAnswerGrading_v2.0 archive?"
        )
    for n in names:
        if n.startswith("/") or ".." in Path(n).parts:
            raise DataError(f"{archive}: unsafe member path {n!r}; refusing to extract")
    try:
        if kind == "zip":
            with zipfile.ZipFile(archive) as zf:
                zf.extractall(into)
        else:
            with tarfile.open(archive) as tf:
                tf.extractall(into, filter="data")
    except (zipfile.BadZipFile, tarfile.TarError, OSError, EOFError) as e:
        raise DataError(f"{archive}: cannot extract ({e.__class__.__name__}: {e}); the archive is damaged") from None
    return into / min(roots, key=len)


def fetch_mohler(
    dest: str | Path | None = None,
    url: str | None = None,
    force: bool = False,
    progress: ProgressFn | None = None,
) -> tuple[Path, bool]:
    """Download and unpack the UNT data set into ``<dest>/mohler``; returns (folder, fetched now?).

    ``url`` may be http(s)://, file:// or a local zip/tar path (default :data:`MOHLER_URL`).
    Idempotent: an existing, loadable ``<dest>/mohler`` is kept unless ``force``. The download goes to
    a temporary file, the archive is checked, extracted next to the target and verified to load
    (2,273 answers) before it is moved into place in one rename.
    """
    base = resolve_data_dir(dest)
    target = base / "mohler"
    if (target / "data" / "docs" / "files").is_file() and not force:
        return target, False
    base.mkdir(parents=True, exist_ok=True)
    src = url or MOHLER_URL
    local = _local_source(src)
    if local is not None and not local.is_file():
        raise DataError(f"{local}: no such archive", hint="pass a zip/tar file or an http(s):// URL with --url")
    archive = local if local is not None else _download(src, base, progress)
    work = Path(tempfile.mkdtemp(prefix=".mohler-", dir=base))
    try:
        root = _extract(archive, work / "x")
        items = load_mohler(root)  # the copy must load before it replaces anything
        if len(items) == 0:
            raise DataError(f"{src}: the archive's data set has no answers")
        old = work / "old"
        if target.exists():
            os.replace(target, old)
        try:
            os.replace(root, target)
        except OSError:
            if old.exists():  # put the previous copy back before reporting
                os.replace(old, target)
            raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
        if local is None and archive.exists():
            archive.unlink()
    return target, True


def fetch_benchmark(
    name: str,
    dest: str | Path | None = None,
    url: str | None = None,
    force: bool = False,
    progress: ProgressFn | None = None,
) -> tuple[Path, bool]:
    """Fetch a bundled benchmark's data by name (only ``mohler`` can be downloaded freely)."""
    if name == "mohler":
        return fetch_mohler(dest, url, force, progress)
    raise DataError(f"no download for benchmark {name!r}; available: {', '.join(BENCHMARKS)}")


def split_to_file(
    source: str,
    out: str | Path,
    seed: int = 0,
    ratios: tuple[float, float, float] = (0.7, 0.2, 0.1),
    data_dir: str | Path | None = None,
) -> dict[str, int]:
    """Split a benchmark (by name) or an item file (by path) and write ``split.json``; returns sizes."""
    items = load_benchmark(source, data_dir) if source in BENCHMARKS else read_items(source)
    split = split_items(items, seed=seed, ratios=ratios)
    save_split(split, out, seed=seed, meta={"source": source, "ratios": list(ratios), "stratify": "grade"})
    return {k: len(v) for k, v in split.items()}
