"""Throughput of `rubrictool annotate` against a local server that answers after a fixed delay.

A scripted OpenAI-compatible server (tests/support/llm_server.py) answers every request with a valid Mohler
annotation after DELAY seconds. The annotation runs through litellm's real HTTP path with the cache
off, at concurrency 1, 8 and 32, with 1 and 2 client processes and annotate's automatic choice
(`--workers`, auto: one process per 8 requests in flight against a local server); requests/s is compared
with the ideal concurrency / DELAY, both over the whole `annotate` call (client start-up included)
and over the server's window (first request arrived -> last reply sent).

    .venv/bin/python benchmarks/annotate_throughput.py            # delay 0.2 s, 48 waves per level (~2 min)
    .venv/bin/python benchmarks/annotate_throughput.py --delay 0.2 --waves 32 --levels 1,8,32
    .venv/bin/python benchmarks/annotate_throughput.py --levels 32 --workers auto   # the c=32 target only
    .venv/bin/python benchmarks/annotate_throughput.py --smoke    # 2 waves at 1 and 4 in flight, one worker, no CLI row

The highest level is also run through the command line (`rubrictool annotate` in a fresh process, imports,
progress bar and output files included; `--no-cli` skips it).

Prints a table and writes benchmarks/out/annotate_throughput.json. Target: >= 80 % of ideal.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
ROOT = Path(__file__).resolve().parent.parent

import pandas as pd

from rubrictool.annotate import AnnotateConfig, annotate, auto_workers
from rubrictool.rubric import load_rubric


class _Counter:
    """Requests the server answered, read from its /stats endpoint."""

    def __init__(self, url: str) -> None:
        self.url = url

    def count(self) -> int:
        with urllib.request.urlopen(self.url + "/stats", timeout=5) as r:
            return int(json.loads(r.read())["requests"])

    def span(self, since: int) -> tuple[float, float]:
        """First arrival and last reply (the server's time.monotonic(), the same clock as this process's)
        of the requests after the ``since``-th."""
        with urllib.request.urlopen(f"{self.url}/stats?since={since}", timeout=5) as r:
            first, last = json.loads(r.read())["window"]
        return float(first), float(last)

    def window(self, since: int) -> float:
        """Seconds from the first arrival to the last reply of the requests after the ``since``-th."""
        first, last = self.span(since)
        return last - first


def _cpu_seconds() -> float:
    """CPU time of this process plus its finished children (the worker processes, once joined)."""
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def _proc_cpu_seconds(pid: int) -> float:
    """utime + stime of another process (the server), from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _level(rubric: Any, srv: _Counter, conc: int, workers: int | None, n: int, delay: float, server_pid: int,
           model: str = "openai/bench") -> dict[str, Any]:
    items = pd.DataFrame(
        {
            "id": [f"c{conc}-w{workers}-{i}" for i in range(n)],
            "response": [f"answer {i} at concurrency {conc} with {workers} workers" for i in range(n)],
            "question": "What is a prototype?",
            "reference": "A simulation of the final product.",
        }
    )
    cfg = AnnotateConfig(models=(model,), api_base=srv.url, cache=None, concurrency=conc, workers=workers)
    before = srv.count()
    t0, c0, s0 = time.perf_counter(), _cpu_seconds(), _proc_cpu_seconds(server_pid)
    res = annotate(items, rubric, cfg, progress=None)
    dt, cpu, scpu = time.perf_counter() - t0, _cpu_seconds() - c0, _proc_cpu_seconds(server_pid) - s0
    sent = srv.count() - before
    ok = int(res.summary[model].ok)
    auto = workers is None
    label = f"{res.workers} worker(s)" + (" (auto)" if auto else "")
    rps, ideal = sent / dt, conc / delay
    served = sent / srv.window(before)  # the server's view: no client start-up (imports, worker processes)
    print(f"{model}: concurrency {conc:>3}, {label}: {sent} requests in {dt:.2f} s = {rps:.1f} req/s "
          f"(ideal {ideal:.1f}; {rps / ideal:.0%}; server window {served:.1f} req/s = {served / ideal:.0%}), {ok}/{n} "
          f"items ok, client CPU {1000 * cpu / max(1, sent):.1f} ms/request, server CPU "
          f"{1000 * scpu / max(1, sent):.1f} ms/request",
          flush=True)
    return {"model": model, "concurrency": conc, "workers": res.workers, "auto": auto, "items": n, "requests": sent,
            "ok": ok, "seconds": round(dt, 3),
            "req_per_s": round(rps, 2), "ideal_req_per_s": round(ideal, 2), "share_of_ideal": round(rps / ideal, 3),
            "served_req_per_s": round(served, 2), "served_share_of_ideal": round(served / ideal, 3),
            "client_cpu_ms_per_request": round(1000 * cpu / max(1, sent), 1),
            "server_cpu_ms_per_request": round(1000 * scpu / max(1, sent), 1)}


def _cli(srv: _Counter, model: str, conc: int, n: int, delay: float, tmp: Path) -> dict[str, Any]:
    """The same level through the command line, as a user runs it: a fresh process (imports included),
    progress bar, output files. Start-up and writing are timed apart from the server's window."""
    data = tmp / f"items-{model.replace('/', '_')}-{conc}.csv"
    pd.DataFrame({"id": [f"cli{i}" for i in range(n)], "response": [f"cli answer {i} {model}" for i in range(n)],
                  "question": "What is a prototype?", "reference": "A simulation of the final product."}).to_csv(data,
                      index=False)
    exe = ROOT / ".venv" / "bin" / "rubrictool"
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "rubrictool.cli"]
    cmd += ["annotate", "--rubric", "mohler", "--items", str(data), "--model", model, "--api-base", srv.url,
            "--concurrency", str(conc), "--no-cache", "--out", str(tmp / "out")]
    before = srv.count()
    t0 = time.monotonic()
    done = subprocess.run(cmd, capture_output=True, text=True, check=False, env={**os.environ, "COLUMNS": "200"})
    t1 = time.monotonic()
    if done.returncode != 0:
        raise SystemExit(f"rubrictool annotate failed: {done.stdout[-400:]} {done.stderr[-400:]}")
    sent = srv.count() - before
    first, last = srv.span(before)
    ideal = conc / delay
    served = sent / (last - first)
    workers = auto_workers(AnnotateConfig(models=(model,), api_base=srv.url, concurrency=conc), n)
    print(f"{model}: CLI, concurrency {conc:>3}, {workers} worker(s) (auto): {sent} requests; start-up "
          f"{first - t0:.1f} s, server window {last - first:.2f} s = {served:.1f} req/s = {served / ideal:.0%} of "
          f"ideal, writing and exit {t1 - last:.1f} s; whole command {t1 - t0:.1f} s = {sent / (t1 - t0) / ideal:.0%}",
          flush=True)
    return {"model": model, "concurrency": conc, "workers": workers, "auto": True, "cli": True, "items": n,
            "requests": sent, "startup_s": round(first - t0, 2), "window_s": round(last - first, 3),
            "served_req_per_s": round(served, 2), "served_share_of_ideal": round(served / ideal, 3),
            "tail_s": round(t1 - last, 2), "seconds": round(t1 - t0, 2),
            "share_of_ideal": round(sent / (t1 - t0) / ideal, 3)}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--delay", type=float, default=0.2)
    ap.add_argument("--waves", type=int, default=48,
                    help="requests per level = waves x concurrency: a sustained rate, not the start-up transient")
    ap.add_argument("--levels", default="1,8,32")
    ap.add_argument("--workers", default="1,2,auto",
                    help="client processes to try per level (at most the concurrency); auto: annotate's own choice "
                         "(one per 8 requests in flight for a local server), skipped where it equals a number already "
                         "run")
    ap.add_argument("--models", default="hosted_vllm/bench,openai/bench",
                    help="litellm model names to compare, e.g. openai/bench,hosted_vllm/bench (provider prefixes "
                         "for an OpenAI-compatible server: openai/ goes through the OpenAI SDK, hosted_vllm/ through "
                         "litellm's own HTTP handler)")
    ap.add_argument("--cli", action=argparse.BooleanOptionalAction, default=True,
                    help="also run the highest level through `rubrictool annotate` in a fresh process")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "out" / "annotate_throughput.json")
    ap.add_argument("--smoke", action="store_true",
                    help="a tiny run: delay 0.02 s, 2 waves at concurrency 1 and 4, one worker, one model, no CLI row")
    args = ap.parse_args(argv)
    if args.smoke:
        args.delay, args.waves, args.levels, args.workers = 0.02, 2, "1,4", "1"
        args.models, args.cli = "hosted_vllm/bench", False
        if args.out == ap.get_default("out"):
            args.out = Path(tempfile.mkdtemp(prefix="throughput-smoke-")) / "annotate_throughput.json"
    rubric = load_rubric("mohler")

    # the server runs in its own process so that it does not compete with the client for the GIL
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "tests" / "support" / "llm_server.py"), "--delay", str(args.delay)],
        stdout=subprocess.PIPE, text=True,
    )
    assert proc.stdout is not None
    url = proc.stdout.readline().strip()
    srv = _Counter(url)
    rows = []
    try:
        # warm-up: litellm import, client creation, tokenizer (not part of the measurement)
        warm = pd.DataFrame({"id": ["w"], "response": ["warm up"], "question": ["q"], "reference": ["r"]})
        for model in args.models.split(","):
            annotate(warm, rubric, AnnotateConfig(models=(model,), api_base=srv.url, cache=None), progress=None)
        for model in args.models.split(","):
            for conc in [int(x) for x in args.levels.split(",")]:
                n = args.waves * conc
                done: set[int] = set()
                for w in args.workers.split(","):
                    workers = None if w.strip() == "auto" else min(int(w), conc)
                    k = auto_workers(AnnotateConfig(models=(model,), api_base=srv.url, concurrency=conc,
                                                    workers=workers), n)
                    if k in done:
                        continue
                    done.add(k)
                    rows.append(_level(rubric, srv, conc, workers, n, args.delay, proc.pid, model))
        if args.cli:
            top = max(int(x) for x in args.levels.split(","))
            with tempfile.TemporaryDirectory() as tmp:
                for model in args.models.split(","):
                    rows.append(_cli(srv, model, top, args.waves * top, args.delay, Path(tmp)))
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
