"""Benchmark: fetching, loading and tokenising ASAP 2.0 and MOCHA at their published sizes.

No real file is reachable offline, so the files are synthetic, in the published layouts
(the ones tests/support/benchmarks.py builds for the loader tests) and at the published sizes: an ASAP 2.0 file of
17,307 essays (the Kaggle competition's train.csv count) of 150-650 words over 7 prompts with the release's columns, and
a MOCHA train.json of 31,069 answers over six constituent datasets with 60-300-word passages. Timed (wall seconds, after
imports):

- ``fetch``: `rubrictool data fetch` from a local archive (extract + load + rename);
- ``load``: :func:`rubrictool.data.load_benchmark` on the fetched copy;
- ``describe``: :func:`rubrictool.data.describe_benchmark` (`data show --json`);
- ``tokenise``: ``reccbm.encode_inputs`` with the MiniLM tokenizer at max_len 128 and 512, and how
  many inputs it cut (a property of the synthetic lengths, not of the real essays).

Run: .venv/bin/python benchmarks/data_load.py [--out benchmarks/results/data_load.json] [--backbone NAME|PATH]
     .venv/bin/python benchmarks/data_load.py --smoke --backbone PATH    # 40 essays and 60 answers, to a temporary file
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import sys
import tarfile
import tempfile
import time
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

WORDS = ["what", "is", "a", "stack", "queue", "list", "array", "pointer", "the", "of", "and", "to", "it", "in", "that",
         "data", "structure", "first", "last", "out", "element", "value", "stores", "memory", "node", "linked", "order",
         "returns", "function", "variable", "program", "loop", "computer", "answer", "question", "reference"]
ASAP2_COLUMNS = ["essay_id", "score", "full_text", "assignment", "prompt_name", "economically_disadvantaged",
                 "student_disability_status", "ell_status", "race_ethnicity", "gender", "grade_level",
                 "essay_word_count"]

PROMPTS = ["Car-free cities", "Does the electoral college work?", "Exploring Venus", "The Face on Mars",
           "Facial action coding system", "A Cowboy Who Rode the Waves", "Driverless cars"]


def _words(rng: np.random.Generator, n: int) -> str:
    w = rng.choice(WORDS, size=n)
    return " ".join(" ".join(w[i : i + 12]) + "." for i in range(0, n, 12))


def asap2_file(path: Path, n: int, seed: int = 0) -> Path:
    rng = np.random.default_rng(seed)
    rows = [{"essay_id": f"{i:07x}", "score": int(rng.integers(1, 7)),
             "full_text": _words(rng, int(rng.integers(150, 651))),
             "assignment": f"Write about {PROMPTS[i % 7]}.", "prompt_name": PROMPTS[i % 7],
             "economically_disadvantaged": "Economically disadvantaged",
             "student_disability_status": "Not identified as having disability",
             "ell_status": "No", "race_ethnicity": "White", "gender": "F", "grade_level": 10, "essay_word_count": 0}
            for i in range(n)]
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=ASAP2_COLUMNS, lineterminator="\n")
    w.writeheader()
    w.writerows(rows)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("ASAP_2_Final_github_train.csv", buf.getvalue())
    return path


def mocha_file(path: Path, n: int, seed: int = 0) -> Path:
    rng = np.random.default_rng(seed)
    datasets = ["cosmosqa", "drop", "mcscript", "narrativeqa", "quoref", "socialiqa"]
    train: dict[str, dict[str, Any]] = {d: {} for d in datasets}
    for i in range(n):
        score = int(rng.integers(1, 6))
        train[datasets[i % 6]][f"{i:032x}"] = {
            "context": _words(rng, int(rng.integers(60, 301))), "question": _words(rng, 10),
                                               "reference": _words(rng, 6),
            "candidate": _words(rng, int(rng.integers(1, 12))), "score": score,
            "metadata": {"scores": [score], "source": "gpt2"}}
    docs = {"train.json": train, "dev.json": {}, "test_no_labels.json": {}, "minimal_pairs.json": {}}
    with tarfile.open(path, "w:gz") as tf:  # mocha.tar.gz as published: mocha/<file>
        for name, doc in docs.items():
            data = json.dumps(doc, indent=1).encode()
            info = tarfile.TarInfo(f"mocha/{name}")
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return path


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="benchmarks/results/data_load.json")
    ap.add_argument("--asap2", type=int, default=17307)
    ap.add_argument("--mocha", type=int, default=31069)
    ap.add_argument("--backbone", default=None, help="tokenizer to time (default: the trainer's MiniLM)")
    ap.add_argument("--smoke", action="store_true", help="40 essays and 60 answers, results to a temporary file")
    args = ap.parse_args(argv)
    if args.smoke:
        args.asap2, args.mocha = 40, 60
        if args.out == ap.get_default("out"):
            args.out = str(Path(tempfile.mkdtemp(prefix="data-load-smoke-")) / "data_load.json")
    import reccbm
    from rubrictool.data import describe_benchmark, fetch_benchmark, load_benchmark

    tok = reccbm.load_tokenizer(args.backbone or reccbm.default_backbone())
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        t = Path(tmp)
        archives = {"asap2": asap2_file(t / "ASAP_2_Final_github_train.zip", args.asap2),
                    "mocha": mocha_file(t / "mocha.tar.gz", args.mocha)}
        for name, archive in archives.items():
            r: dict[str, Any] = {"archive_mb": round(archive.stat().st_size / 1e6, 1)}
            t0 = time.perf_counter()
            fetch_benchmark(name, t / "data", str(archive))
            r["fetch_s"] = round(time.perf_counter() - t0, 2)
            t0 = time.perf_counter()
            items = load_benchmark(name, t / "data")
            r["load_s"] = round(time.perf_counter() - t0, 2)
            r["n_items"] = len(items)
            t0 = time.perf_counter()
            describe_benchmark(name, t / "data")
            r["describe_s"] = round(time.perf_counter() - t0, 2)
            df = items.fillna("")
            aux = [" \n ".join(p for p in (a, c) if p.strip()) for a, c in zip(df["reference"], df["context"])]
            for max_len in (128, 512):
                cut: list[int] = []
                t0 = time.perf_counter()
                reccbm.encode_inputs(tok, list(df["question"]), list(df["response"]), aux, max_len, cut)
                r[f"tokenise_{max_len}_s"] = round(time.perf_counter() - t0, 2)
                r[f"truncated_{max_len}"] = len(cut)
            results[name] = r
            print(name, r, flush=True)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"date": time.strftime("%Y-%m-%d"), "command": " ".join(sys.argv), **results}, indent=1)
                   + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
