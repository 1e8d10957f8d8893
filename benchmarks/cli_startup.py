"""Benchmark: how long the installed ``rubrictool`` command takes to answer, next to ``import pandas``.

Times the wall clock of whole subprocesses, the way a researcher editing a rubric meets them:

- ``rubrictool --help``
- ``rubrictool rubric show --rubric mohler``
- ``rubrictool rubric list``
- ``rubrictool rubric validate <bundled mohler.yaml>`` (validate takes files; the bundled path comes
  from :func:`rubrictool.rubric.resolve_rubric_path`)
- ``rubrictool rubric lint --rubric mohler``

and, as yardsticks, ``python -c pass`` (the interpreter alone) and ``python -c "import pandas"``.
Each is run once untimed (to warm the file cache), then ``--runs`` times (default 5); the JSON
written to ``--out`` holds every wall time and CPU time (user + system: what a busy machine inflates
less), their medians, the exit codes, the date, the git revision of the rubrictool that ran and the
load average (the target, under 1 s of wall time, is for an idle machine).

The command run is the ``rubrictool`` script beside this interpreter (else the one on PATH, or
``--cli``). It imports whichever rubrictool the interpreter finds: set PYTHONPATH to a checkout to
time that checkout instead of the installed copy.

Run:   .venv/bin/python benchmarks/cli_startup.py --out cli_startup.json
Smoke: .venv/bin/python benchmarks/cli_startup.py --smoke   (1 run each, CI; --out FILE to keep the JSON)
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rubrictool.rubric import resolve_rubric_path

TARGET_SECONDS = 1.0  # the goal: --help and rubric validate/show/list/lint under 1 s on an idle machine


def find_cli(given: str | None) -> str:
    """The rubrictool executable: --cli, else the script beside this interpreter, else PATH."""
    if given:
        return given
    beside = Path(sys.executable).parent / "rubrictool"
    if beside.is_file():
        return str(beside)
    found = shutil.which("rubrictool")
    if found is None:
        sys.exit("no rubrictool command found: install the package (bash setup.sh) or pass --cli PATH")
    return found


def git_revision() -> str:
    """The git revision (with "-dirty" when files differ) of the rubrictool package the command imports."""
    spec = importlib.util.find_spec("rubrictool")
    if spec is None or spec.origin is None:
        return "unknown"
    where = Path(spec.origin).parent
    try:
        rev = subprocess.run(["git", "-C", str(where), "rev-parse", "--short=12", "HEAD"],
                             capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(where), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return rev + ("-dirty" if dirty else "")


def commands(cli: str) -> dict[str, list[str]]:
    """Name → argv of every timed command."""
    mohler_yaml = str(resolve_rubric_path("mohler"))
    return {
        "python -c pass": [sys.executable, "-c", "pass"],
        'python -c "import pandas"': [sys.executable, "-c", "import pandas"],
        "rubrictool --help": [cli, "--help"],
        "rubrictool rubric show --rubric mohler": [cli, "rubric", "show", "--rubric", "mohler"],
        "rubrictool rubric list": [cli, "rubric", "list"],
        "rubrictool rubric validate mohler": [cli, "rubric", "validate", mohler_yaml],
        "rubrictool rubric lint --rubric mohler": [cli, "rubric", "lint", "--rubric", "mohler"],
    }


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def time_once(argv: list[str]) -> tuple[float, float, int, str]:
    """Wall seconds, CPU seconds (user + system), exit code and stderr of one run."""
    cpu, start = _children_cpu(), time.perf_counter()
    res = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, check=False,
                         env={**os.environ, "COLUMNS": "120"})
    return time.perf_counter() - start, _children_cpu() - cpu, res.returncode, res.stderr


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--out", type=Path, default=None, help="JSON file to write (default: only the table on stdout)")
    ap.add_argument("--runs", type=int, default=5, help="timed runs per command (the median is reported)")
    ap.add_argument("--cli", help="the rubrictool executable (default: beside this python, else PATH)")
    ap.add_argument("--smoke", action="store_true", help="one run per command, no warm-up (CI: it runs and succeeds)")
    args = ap.parse_args(argv)
    runs = 1 if args.smoke else max(1, args.runs)
    cli = find_cli(args.cli)

    results: list[dict[str, Any]] = []
    failed = False
    for name, cmd in commands(cli).items():
        if not args.smoke:
            time_once(cmd)  # warm-up: file cache, .pyc
        times, cpus, codes = [], [], []
        for _ in range(runs):
            seconds, cpu, code, err = time_once(cmd)
            times.append(seconds)
            cpus.append(cpu)
            codes.append(code)
            if code != 0:
                failed = True
                print(f"{name}: exit {code}\n{err.strip()}", file=sys.stderr)
        median, median_cpu = statistics.median(times), statistics.median(cpus)
        results.append({"name": name, "argv": [Path(cmd[0]).name, *cmd[1:]], "median_s": round(median, 3),
                        "median_cpu_s": round(median_cpu, 3), "times_s": [round(t, 3) for t in times],
                        "cpu_s": [round(c, 3) for c in cpus], "exit_codes": codes})
        print(f"{name:<40} {median:6.2f} s wall  {median_cpu:5.2f} s CPU  (median of {runs})", flush=True)

    report = {
        "benchmark": "cli_startup",
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "git_revision": git_revision(),
        "command": " ".join([Path(sys.executable).name, "benchmarks/cli_startup.py",
                             *(argv if argv is not None else sys.argv[1:])]),
        "python": sys.version.split()[0],
        "cli": cli,
        "runs": runs,
        "smoke": args.smoke,
        "load_average_1min": round(os.getloadavg()[0], 2),
        "cpu_count": os.cpu_count(),
        "target_s": TARGET_SECONDS,
        "results": results,
    }
    if args.out is None:
        return 1 if failed else 0
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.out.with_name(args.out.name + ".tmp")
    tmp.write_text(json.dumps(report, indent=2) + "\n")
    tmp.replace(args.out)  # written whole or not at all
    print(f"wrote {args.out} (git {report['git_revision']}, load average {report['load_average_1min']})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
