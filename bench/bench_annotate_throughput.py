"""Throughput of `rubrictool annotate` against a local server that answers after a fixed delay.

A scripted OpenAI-compatible server (tests/_llm_server.py) answers every request with a valid Mohler
annotation after DELAY seconds. The annotation runs through litellm's real HTTP path with the cache
off, at concurrency 1, 8 and 32; requests/s is compared with the ideal concurrency / DELAY.

    .venv/bin/python bench/bench_annotate_throughput.py            # delay 0.2 s, 16 waves per level
    .venv/bin/python bench/bench_annotate_throughput.py --delay 0.2 --waves 32 --levels 1,8,32

Prints a table and writes bench/out/annotate_throughput.json. Target: >= 80 % of ideal.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

import pandas as pd

from rubrictool.annotate import AnnotateConfig, annotate
from rubrictool.rubric import load_rubric


class _Counter:
    """Requests the server answered, read from its /stats endpoint."""

    def __init__(self, url: str) -> None:
        self.url = url

    def count(self) -> int:
        with urllib.request.urlopen(self.url + "/stats", timeout=5) as r:
            return int(json.loads(r.read())["requests"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--delay", type=float, default=0.2)
    ap.add_argument("--waves", type=int, default=16,
                    help="requests per level = waves x concurrency: a sustained rate, not the start-up transient")
    ap.add_argument("--levels", default="1,8,32")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "out" / "annotate_throughput.json")
    args = ap.parse_args()
    rubric = load_rubric("mohler")

    # the server runs in its own process so that it does not compete with the client for the GIL
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "tests" / "_llm_server.py"), "--delay", str(args.delay)],
        stdout=subprocess.PIPE, text=True,
    )
    assert proc.stdout is not None
    url = proc.stdout.readline().strip()
    srv = _Counter(url)
    rows = []
    try:
        # warm-up: litellm import, client creation, tokenizer (not part of the measurement)
        warm = pd.DataFrame({"id": ["w"], "response": ["warm up"], "question": ["q"], "reference": ["r"]})
        annotate(warm, rubric, AnnotateConfig(models=("openai/bench",), api_base=srv.url, cache=None), progress=False)
        for conc in [int(x) for x in args.levels.split(",")]:
            n = args.waves * conc
            items = pd.DataFrame(
                {
                    "id": [f"c{conc}-{i}" for i in range(n)],
                    "response": [f"answer {i} at concurrency {conc}" for i in range(n)],
                    "question": "What is a prototype?",
                    "reference": "A simulation of the final product.",
                }
            )
            cfg = AnnotateConfig(models=("openai/bench",), api_base=srv.url, cache=None, concurrency=conc)
            before = srv.count()
            t0, c0 = time.perf_counter(), time.process_time()
            res = annotate(items, rubric, cfg, progress=False)
            dt, cpu = time.perf_counter() - t0, time.process_time() - c0
            sent = srv.count() - before
            ok = int(res.summary["openai/bench"].ok)
            rps = sent / dt
            ideal = conc / args.delay
            rows.append(
                {"concurrency": conc, "items": n, "requests": sent, "ok": ok, "seconds": round(dt, 3),
                 "req_per_s": round(rps, 2), "ideal_req_per_s": round(ideal, 2), "share_of_ideal": round(rps / ideal, 3),
                 "client_cpu_ms_per_request": round(1000 * cpu / max(1, sent), 1)}
            )
            print(f"concurrency {conc:>3}: {sent} requests in {dt:.2f} s = {rps:.1f} req/s "
                  f"(ideal {ideal:.1f}; {rps / ideal:.0%}), {ok}/{n} items ok, client CPU "
                  f"{1000 * cpu / max(1, sent):.1f} ms/request", flush=True)
    finally:
        proc.terminate()
        proc.wait()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    load = os.getloadavg()[0]
    args.out.write_text(json.dumps({"delay_s": args.delay, "load_avg_1min": load, "cpus": os.cpu_count(),
                                    "results": rows}, indent=1) + "\n")
    print(f"load average during the run: {load:.1f} on {os.cpu_count()} CPUs")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
