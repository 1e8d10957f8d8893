"""Grade quality on Mohler over k folds: REC-CBM (default and paper presets), vanilla CBM and the PLM.

Every configuration is trained with :func:`rubrictool.train.train_folds` (what ``rubrictool train --folds``
runs) on the same stratified folds (fold seed 0, or `--fold-seed N`; dev = 1/8 of each fold's training part), MiniLM on
CPU. A configuration is a variant, a preset and optionally a ``--config`` YAML file in the format of ``rubrictool train
--config`` (sections model / stage1 / joint / stage2). The four product configurations are named in ``RUNS``; any other
is given as ``--config FILE`` (its name is the file's stem), e.g. the research configurations in ``lab/configs/``.

A fold's run is a complete run directory ``<out>/<name>/fold-<i>/``; a finished fold is never retrained,
so the benchmark can be stopped and started again (``--fold 0`` runs one fold of each configuration, to
screen settings). Once every fold of a configuration is done, ``folds.json``, ``folds.md`` and
``pooled_predictions.csv`` are written; the summary (``<out>/summary.md``) pools every finished
configuration with paired bootstrap 95 % CIs against the PLM and vanilla CBM.

    python benchmarks/folds.py --runs default,paper,vanilla,plm   # the README table (a day on 2 cores)
    python benchmarks/folds.py --by question --out benchmarks/out/folds-by-question   # unseen questions
    python benchmarks/folds.py --runs default,plm --fold 0        # one fold each
    python benchmarks/folds.py --config lab/configs/s1x4.yaml --fold 0
    python benchmarks/folds.py --summary                          # tables from what is done
    python benchmarks/folds.py --smoke --backbone PATH            # 2 folds of a 40-item table, one step per epoch
    python benchmarks/folds.py --runs default --jobs 2            # two folds at a time, in worker processes

Concept labels: majority vote over three independent LLM annotation passes, NOT validated by experts.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

# name -> (variant, preset): the product's configurations, as `rubrictool train --variant --preset` sets them.
# "vanilla" and "plm" follow the paper's recipe (6 encoder epochs); "vanilla-default" and "plm-default" get the
# default preset's encoder budget and dev selection (Stage I + joint epochs: the PLM trains them in one stage), the
# fair baselines for "default". Every table says what each row was trained with.
RUNS: dict[str, tuple[str, str]] = {
    "default": ("reccbm", "default"),
    "plain": ("reccbm", "plain"),  # the default before its concept reader (to 2026-11-26)
    "paper": ("reccbm", "paper"),
    "vanilla": ("vanilla", "paper"),
    "plm": ("plm", "paper"),
    "vanilla-default": ("vanilla", "default"),
    "plm-default": ("plm", "default"),
}
REFERENCES = ("plm", "plm-default", "vanilla", "vanilla-default")  # the baselines every other row is compared with

# The smoke run: one optimiser step per epoch, every stage present, tiny inputs.
SMOKE_CONFIG: dict[str, dict[str, Any]] = {
    "model": {"max_len": 16},
    "stage1": {"epochs": 1, "max_steps_per_epoch": 1, "device": "cpu", "eval_batch_size": 16},
    "joint": {"epochs": 1},
    "stage2": {"epochs": 1},
}


def _log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def configurations(names: list[str], config_files: list[Path], variant: str | None, preset: str | None,
                   flags: dict[str, bool | None]) -> dict[str, dict[str, Any]]:
    """name -> train_folds keyword arguments (variant, preset, overrides, component switches)."""
    from rubrictool.train import load_train_config

    out: dict[str, dict[str, Any]] = {}
    for name in names:
        if name not in RUNS:
            sys.exit(f"unknown run {name!r}; known: {', '.join(RUNS)} (or give --config FILE)")
        v, p = RUNS[name]
        out[name] = {"variant": v, "preset": p}
    for path in config_files:
        kw: dict[str, Any] = {"variant": variant or "reccbm", "preset": preset or "default",
                              "overrides": load_train_config(path)}
        kw |= {k: v for k, v in flags.items() if v is not None}
        out[path.stem] = kw
    return out


def run(out: Path, configs: dict[str, dict[str, Any]], folds: int, only: list[int] | None, table: Any,
        rubric: Any, agreement: dict[str, Any] | None, notes: list[str], extra: dict[str, dict[str, Any]],
        by: str | None = None, jobs: int = 1, fold_seed: int = 0) -> None:
    from rubrictool.data import kfold_splits
    from rubrictool.train import DataRecord, TrainOptions, train_folds, train_model
    from rubrictool.train.parallel import run_in_workers

    for name, kw in configs.items():
        kw = dict(kw)
        over = {sec: dict(v) for sec, v in (kw.pop("overrides", None) or {}).items()}
        for sec, values in extra.items():
            over.setdefault(sec, {}).update(values)
        options, record = TrainOptions(overrides=over, **kw), DataRecord(agreement=agreement, notes=notes)
        root = out / name
        if only is None:
            _log(f"{name}: {folds} folds")

            def report(ev: Any, n: str = name) -> None:
                _log(f"{n}: {ev.info}")

            train_folds(rubric, table, root, folds=folds, fold_seed=fold_seed, options=options, record=record,
                        progress=report, by=by, jobs=jobs)
            continue
        splits = kfold_splits(table, k=folds, seed=fold_seed, by=by)
        if jobs > 1:  # the listed folds not done yet, in worker processes; the loop below finds them done
            run_in_workers(train_model, [(f"{name} fold {i}", {"rubric": rubric, "table": table, "split": splits[i],
                                                               "run_dir": root / f"fold-{i}",
                                                               "options": options, "record": record})
                                         for i in only if not (root / f"fold-{i}" / "metrics.json").is_file()], jobs)
        for i in only:
            fold_dir = root / f"fold-{i}"
            if (fold_dir / "metrics.json").is_file():
                _log(f"{name} fold {i}: done")
                continue
            _log(f"{name} fold {i}: train")
            train_model(rubric, table, splits[i], fold_dir, options=options, record=record)


def _fold_rows(out: Path) -> list[dict[str, Any]]:
    rows = []
    for cfg_dir in sorted(p for p in out.iterdir() if p.is_dir()):
        for fold in sorted(cfg_dir.glob("fold-*/metrics.json")):
            m = json.loads(fold.read_text())
            seed = m["seeds"][0]
            rows.append({"config": cfg_dir.name, "fold": fold.parent.name, **seed["test"],
                         "minutes": seed.get("train_seconds", 0.0) / 60})
    return rows


def _trained_with(root: Path) -> str:
    """What a configuration's folds were trained with (the first fold's config.yaml)."""
    import yaml

    from rubrictool.train.runs import trained_with

    cfg = next(iter(sorted(root.glob("fold-*/config.yaml"))), None)
    return trained_with(yaml.safe_load(cfg.read_text()) or {}) if cfg else "—"


def summary(out: Path) -> str:
    """Pooled table of every finished configuration, paired CIs against plm and vanilla, per-fold rows."""
    from rubrictool.evaluate import compare_runs

    nan = float("nan")
    lines = [f"# Mohler k-fold comparison ({time.strftime('%Y-%m-%d')})", "",
             "Concept labels: majority vote over three independent LLM annotation passes, not expert-validated.", ""]
    cols = ("t_acc", "t_f1", "qwk", "pearson", "rmse", "adjacent", "c_acc", "c_f1", "oracle_t_acc")
    pooled = {p.parent.name: json.loads(p.read_text()) for p in sorted(out.glob("*/folds.json"))}
    if pooled:
        lines += ["## Pooled over folds", "", "| model | " + " | ".join(cols) + " | trained with |",
                  "|---" * (len(cols) + 2) + "|"]
        for name, s in pooled.items():
            lines.append(f"| {name} | " + " | ".join(f"{s['pooled'].get(c, nan):.3f}" for c in cols)
                         + f" | {_trained_with(out / name)} |")
        first = next(iter(pooled.values()))
        for b, m in first.get("baselines", {}).items():
            lines.append(f"| {b} baseline | " + " | ".join(f"{m.get(c, nan):.3f}" for c in cols) + " | — |")
        lines.append("")
        for ref in REFERENCES:
            if ref not in pooled:
                continue
            for name in pooled:
                if name == ref:
                    continue
                c = compare_runs(out / ref, out / name)
                cells = ", ".join(f"{m} {r['diff']:+.3f} [{r['lo']:+.3f}, {r['hi']:+.3f}]"
                                  for m, r in c["metrics"].items())
                lines.append(f"- {name} − {ref} (paired bootstrap, {c['n_items']} items): {cells}")
        lines.append("")
    rows = _fold_rows(out)
    if rows:
        lines += ["## Per fold", "", "| config | fold | " + " | ".join(cols) + " | minutes |",
                  "|---" * (len(cols) + 3) + "|"]
        for r in rows:
            lines.append(f"| {r['config']} | {r['fold']} | " + " | ".join(f"{r.get(c, nan):.3f}" for c in cols)
                         + f" | {r['minutes']:.1f} |")
    text = "\n".join(lines) + "\n"
    (out / "summary.md").write_text(text)
    return text


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=None, help="default benchmarks/out/folds (smoke: a temporary folder)")
    ap.add_argument("--runs", default=None, help=f"comma list of {', '.join(RUNS)} (default: all, none with --config)")
    ap.add_argument("--config", type=Path, action="append", default=[], help="a `rubrictool train --config` YAML file")
    ap.add_argument("--variant", default=None,
                    help="variant of the --config runs (reccbm, vanilla, plm; default reccbm)")
    ap.add_argument("--preset", default=None, help="preset of the --config runs (default, paper; default default)")
    for comp in ("race", "opcc", "lcec"):
        ap.add_argument(f"--{comp}", dest=comp, action=argparse.BooleanOptionalAction, default=None,
                        help=f"switch {comp.upper()} on/off in the --config runs")
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--by", default=None, help="grouped folds, e.g. question: no question in both train and test")
    ap.add_argument("--fold", default=None, help="comma list of fold numbers to run (default: all, then pool)")
    ap.add_argument("--fold-seed", type=int, default=0,
                    help="seed of the folds (default 0, the kept folds'; another seed: other question splits)")
    ap.add_argument("--first-seed", type=int, default=0,
                    help="the training seed (default 0, the kept folds'; another: a second training of the same folds)")
    ap.add_argument("--jobs", type=int, default=1, help="folds trained at once, in worker processes (default 1)")
    ap.add_argument("--data-dir", default=os.environ.get("RUBRICTOOL_DATA", "../shared/datasets"))
    ap.add_argument("--backbone", default=None, help="HF name or path of the encoder (default: the preset's MiniLM)")
    ap.add_argument("--summary", action="store_true", help="only print the tables of what is done")
    ap.add_argument("--smoke", action="store_true", help="default and plm, 2 folds of a 40-item synthetic table, "
                    "one step per epoch (needs --backbone, e.g. a tiny local model)")
    a = ap.parse_args(argv)

    from rubrictool.tables import LLM_PASSES_NOTE

    extra: dict[str, dict[str, Any]] = {"model": {"backbone": a.backbone}} if a.backbone else {}
    if a.smoke:
        if not a.backbone:
            sys.exit("--smoke needs --backbone (a small local encoder; MiniLM is too slow for a smoke run)")
        out = a.out or Path(tempfile.mkdtemp(prefix="folds-smoke-"))
        for sec, values in SMOKE_CONFIG.items():
            extra.setdefault(sec, {}).update(values)
        configs = configurations(a.runs.split(",") if a.runs else ["default", "plm"], a.config, a.variant, a.preset,
                                 {"race": a.race, "opcc": a.opcc, "lcec": a.lcec})
        from rubrictool.data import synthetic_mohler_table
        from rubrictool.rubric import load_rubric

        run(out, configs, 2, None, synthetic_mohler_table(questions=5), load_rubric("mohler"), None,
            ["synthetic smoke table"], extra, by=a.by, jobs=a.jobs, fold_seed=a.fold_seed)
        print(summary(out))
        return
    out = a.out or Path("benchmarks/out/folds")
    out.mkdir(parents=True, exist_ok=True)
    if not a.summary:
        names = a.runs.split(",") if a.runs else ([] if a.config else list(RUNS))
        configs = configurations([n for n in names if n], a.config, a.variant, a.preset,
                                 {"race": a.race, "opcc": a.opcc, "lcec": a.lcec})
        if a.first_seed:
            configs = {name: kw | {"first_seed": a.first_seed} for name, kw in configs.items()}
        from rubrictool.pipeline import benchmark_table

        rubric, table, agreement = benchmark_table("mohler", a.data_dir)  # with the passes' levels (soft targets)
        only = [int(x) for x in a.fold.split(",")] if a.fold else None
        run(out, configs, a.folds, only, table, rubric, agreement, [LLM_PASSES_NOTE], extra, by=a.by, jobs=a.jobs,
            fold_seed=a.fold_seed)
    print(summary(out))


if __name__ == "__main__":
    main()
