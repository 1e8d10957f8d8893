"""Grading integrity: how far gaming moves the LLM annotator and the trained grader.

Two parts, each resumable, results in benchmarks/results/integrity/ (committed):

    .venv/bin/python lab/integrity.py annotator --api-base http://127.0.0.1:8080/v1 [--n-base 2]
    .venv/bin/python lab/integrity.py grader --run default=RUN_DIR --run plm=RUN_DIR
    .venv/bin/python lab/integrity.py compare NEW OLD       # two kept audits: the paired shift differences

annotator: every attack of rubrictool/annotate/injections.yaml applied to a few weak Mohler answers
(grade <= 2, distinct questions, seed 0), annotated by a real local model -- Qwen2.5-Coder-1.5B-Instruct
Q4_K_M behind llama.cpp's OpenAI-compatible server, started beforehand and named by --api-base
-- once with the old, unquoted prompt (lab/integrity/annotate.unquoted.prompt.j2, parsed without
knowing what was quoted) and once with the current prompt and parser. Each request is sent once
through litellm at temperature 0 without a repair round; replies are kept in
lab/out/integrity-replies.json, so a re-run only asks what is missing. Per attack: the share of
concept labels that moved / rose against the same answer without the attack (same prompt), the
share at the top level, and the replies that could not be read.

grader: `rubrictool audit` (rubrictool.audit.audit_run) on each run's test split: per transformation
the mean grade shift, the share of answers whose grade rises, the mean concept-level shift, and how
many transformed answers the grade flags catch against how many honest answers they flag; each run's
audit in grader-NAME/, the runs side by side (and paired where they share test answers) in
grader-NAME+NAME.md.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from datetime import date
from pathlib import Path
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "lab" / "out"
RESULTS = ROOT / "benchmarks" / "results" / "integrity"

import numpy as np
import pandas as pd

from rubrictool.annotate import load_template, parse_reply, render_item_prompt
from rubrictool.annotate.injections import attack_response, load_injections
from rubrictool.annotate.llm import load_litellm
from rubrictool.data import load_mohler
from rubrictool.rubric import Rubric, load_rubric

OLD_TEMPLATE = ROOT / "lab" / "integrity" / "annotate.unquoted.prompt.j2"
REPLIES = OUT / "integrity-replies.json"


# == annotator ======================================================================================


def base_answers(n: int) -> pd.DataFrame:
    items = load_mohler(os.environ.get("RUBRICTOOL_DATA", ROOT.parent / "shared" / "datasets"))
    weak = items[items["grade"] <= 2].sample(frac=1.0, random_state=0)
    return weak.drop_duplicates("question").head(n).reset_index(drop=True)


def annotator_jobs(rubric: Rubric, n_base: int) -> list[dict[str, Any]]:
    """(version, base, attack) -> the prompt to send and what the parser is told."""
    old_tpl, new_tpl = load_template(OLD_TEMPLATE), load_template()
    jobs = []
    for _, row in base_answers(n_base).iterrows():
        item = {k: str(row[k]) for k in ("question", "reference", "response")}
        variants = [("clean", item["response"])] + [(a.id, attack_response(a, item, rubric)) for a in load_injections()]
        for version, tpl in (("before", old_tpl), ("after", new_tpl)):
            for attack, response in variants:
                p = render_item_prompt({**item, "response": response}, rubric, tpl)
                jobs.append({"version": version, "base": str(row["id"]), "attack": attack, "prompt": p.text,
                             "quoted": list(p.quoted) if version == "after" else [],
                             "boundary": p.boundary if version == "after" else None})
    return jobs


def run_annotator(args: argparse.Namespace) -> None:
    rubric = load_rubric("mohler")
    jobs = annotator_jobs(rubric, args.n_base)
    done: dict[str, dict[str, Any]] = json.loads(REPLIES.read_text()) if REPLIES.exists() else {}
    todo = [j for j in jobs if f"{j['version']}|{j['base']}|{j['attack']}" not in done]
    print(f"{len(jobs)} requests, {len(todo)} to ask", flush=True)
    if todo:
        if not args.api_base:
            sys.exit("annotator: give --api-base URL of a running OpenAI-compatible server (llama.cpp's, serving the "
                     "model as --model)")
        litellm = load_litellm()
        for i, j in enumerate(todo, 1):
            t0 = time.perf_counter()
            r = litellm.completion(model=f"openai/{args.model}", api_base=args.api_base, api_key="sk-no-key",
                                   messages=[{"role": "user", "content": j["prompt"]}],
                                   temperature=0.0, max_tokens=args.max_tokens, timeout=1800, max_retries=0)
            text = r.choices[0].message.content or ""
            done[f"{j['version']}|{j['base']}|{j['attack']}"] = {"reply": text, "seconds": time.perf_counter() - t0}
            OUT.mkdir(parents=True, exist_ok=True)
            tmp = REPLIES.with_suffix(".tmp")
            tmp.write_text(json.dumps(done, ensure_ascii=False, indent=1))
            os.replace(tmp, REPLIES)
            print(f"{i}/{len(todo)} {j['version']} {j['attack']} {time.perf_counter() - t0:.0f} s", flush=True)
    report_annotator(rubric, jobs, done, args)


def report_annotator(rubric: Rubric, jobs: list[dict[str, Any]], done: dict[str, dict[str, Any]],
                     args: argparse.Namespace) -> None:
    labels: dict[tuple[str, str, str], dict[str, int] | None] = {}
    rejected: dict[tuple[str, str, str], bool] = {}  # unreadable only because its entries were echoes
    for j in jobs:
        rep = done.get(f"{j['version']}|{j['base']}|{j['attack']}")
        if rep is None:
            continue
        res = parse_reply(rep["reply"], rubric, j["quoted"], j["boundary"])
        key = (j["version"], j["base"], j["attack"])
        labels[key] = {k: lab.level for k, lab in res.labels.items()} if res.ok else None
        rejected[key] = not res.ok and res.echoes > 0 and parse_reply(rep["reply"], rubric).ok
    bases = sorted({j["base"] for j in jobs})
    attacks = [a.id for a in load_injections()]
    kinds = {a.id: a.kind for a in load_injections()}
    rows = []
    for version in ("before", "after"):
        for attack in attacks:
            moved = raised = top = compared = unusable = echo_rejected = n = 0
            for b in bases:
                if (version, b, attack) not in labels or (version, b, "clean") not in labels:
                    continue
                n += 1
                got, clean = labels[(version, b, attack)], labels[(version, b, "clean")]
                if got is None:
                    unusable += 1
                    echo_rejected += rejected[(version, b, attack)]
                    continue
                if clean is None:
                    continue
                for k in rubric.keys:
                    compared += 1
                    moved += got[k] != clean[k]
                    raised += got[k] > clean[k]
                    top += got[k] == rubric.scale.max
            rows.append({"prompt": version, "attack": attack, "kind": kinds[attack], "answers": n,
                         "labels": compared, "moved": moved / compared if compared else float("nan"),
                         "raised": raised / compared if compared else float("nan"),
                         "at_top": top / compared if compared else float("nan"), "unusable": unusable,
                         "echo_rejected": echo_rejected})
    df = pd.DataFrame(rows)
    clean_ok = {v: sum(labels.get((v, b, "clean")) is not None for b in bases) for v in ("before", "after")}
    seconds = [d["seconds"] for d in done.values()]
    meta = {"date": date.today().isoformat(), "command": "python lab/integrity.py annotator "
            f"--n-base {args.n_base} --max-tokens {args.max_tokens}",
            "model": f"{args.model} ({f'the server at {args.api_base}' if args.api_base else 'the kept replies'}, "
                     "temperature 0)",
            "base_answers": bases, "clean_replies_usable": clean_ok,
            "seconds_per_request": sum(seconds) / len(seconds) if seconds else None,
            "requests": len(done)}
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "annotator.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1, ensure_ascii=False))
    wide = df.pivot_table(index=["attack", "kind"], columns="prompt",
                          values=["moved", "raised", "unusable", "echo_rejected"],
                          aggfunc="first")
    lines = [f"# Annotator injection ({meta['date']})", "",
             (f"`{meta['command']}` -- {meta['model']}; {len(bases)} weak Mohler answers ({', '.join(bases)}); "
              f"usable clean replies before/after: {clean_ok['before']}/{clean_ok['after']}."), "",
             "Moved/raised: share of the concept labels that differ from / are above the same answer's labels without",
             "the attack, same prompt (replies that could not be read are left out). Unreadable: replies without a",
             "usable annotation (in brackets: because every entry repeated the response's planted labels).", "",
             ("| attack | kind | moved before | moved after | raised before | raised after | unreadable before | "
              "unreadable after |"),
             "|---|---|---:|---:|---:|---:|---:|---:|"]
    for (attack, kind), r in wide.reindex([(a, kinds[a]) for a in attacks]).iterrows():
        def pct(v: Any) -> str:
            return "—" if pd.isna(v) else f"{100 * v:.0f} %"
        lines.append(f"| {attack} | {kind} | {pct(r[('moved', 'before')])} | {pct(r[('moved', 'after')])} | "
                     f"{pct(r[('raised', 'before')])} | {pct(r[('raised', 'after')])} | "
                     f"{int(r[('unusable', 'before')])} | {int(r[('unusable', 'after')])} "
                     f"({int(r[('echo_rejected', 'after')])}) |")
    (RESULTS / "annotator.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


# == grader =========================================================================================


def run_grader(args: argparse.Namespace) -> None:
    from rubrictool.audit import audit_run, write_audit

    RESULTS.mkdir(parents=True, exist_ok=True)
    summary: dict[str, Any] = {}
    for spec in args.run:
        name, _, path = spec.partition("=")
        out = RESULTS / f"grader-{name}"
        if (out / "audit.json").exists() and not args.force:
            print(f"{name}: done ({out}); --force to redo", flush=True)
            summary[name] = json.loads((out / "audit.json").read_text())
            continue
        t0 = time.perf_counter()
        data_dir = os.environ.get("RUBRICTOOL_DATA", ROOT.parent / "shared" / "datasets")
        result = audit_run(path, data_dir=data_dir, seed=args.seed, batch_size=args.batch_size, progress=None)
        write_audit(result, out, title=f"{name} ({path})")
        print(f"{name}: {time.perf_counter() - t0:.0f} s -> {out}", flush=True)
        summary[name] = json.loads((out / "audit.json").read_text())
    rows = []
    for name, doc in summary.items():
        for t in doc["transformations"]:
            rows.append({"run": name, **{k: t[k] for k in ("transformation", "mean_grade_shift", "share_raised",
                                                           "share_flagged")}})
    if rows:
        df = pd.DataFrame(rows)
        wide = df.pivot_table(index="transformation", columns="run",
                              values=["mean_grade_shift", "share_raised", "share_flagged"],
                              aggfunc="first", sort=False)
        runs = list(summary)
        head = "| transformation | " + " | ".join(f"{r}: shift | {r}: rises | {r}: flagged" for r in runs) + " |"
        lines = [f"# Grader gaming ({date.today().isoformat()})", "",
                 "`python lab/integrity.py grader " + " ".join(f"--run {s}" for s in args.run) + "`", "", head,
                 "|---|" + "---:|" * (3 * len(runs))]
        for t, r in wide.iterrows():
            cells = []
            for run in runs:
                cells += [f"{r[('mean_grade_shift', run)]:+.2f}", f"{100 * r[('share_raised', run)]:.0f} %",
                          f"{100 * r[('share_flagged', run)]:.0f} %"]
            lines.append(f"| {t} | " + " | ".join(cells) + " |")
        lines += paired_shift_ci(runs)
        from rubrictool.atomic import atomic_write_text

        # named after its runs, so that one audit's summary never replaces another's
        atomic_write_text(summary_path(runs), "\n".join(lines) + "\n")
        print("\n".join(lines))


def summary_path(runs: list[str]) -> Path:
    """The side-by-side summary of the audits of ``runs``: grader-<run>+<run>….md beside their folders."""
    return RESULTS / f"grader-{'+'.join(runs)}.md"


def paired_shift_ci(runs: list[str], resamples: int = 2000) -> list[str]:
    """First run minus second: the difference of the mean grade shift per transformation over the same
    test answers, with a 95 % bootstrap CI over answers (seed 0); needs both audit_items.csv."""
    if len(runs) < 2:
        return []
    paths = [RESULTS / f"grader-{r}" / "audit_items.csv" for r in runs[:2]]
    if not all(p.exists() for p in paths):
        return []
    a, b = (pd.read_csv(p, keep_default_na=False) for p in paths)
    if set(a["id"]) != set(b["id"]):  # e.g. a random and a question-grouped fold: nothing to pair
        return ["", f"{runs[0]} and {runs[1]} audited different test answers: no paired difference."]
    rng = np.random.default_rng(0)
    head = (f"Paired difference of the mean grade shift, {runs[0]} − {runs[1]} (95 % bootstrap CI over answers, "
            f"{resamples} resamples):")
    out = ["", head, "", "| transformation | difference | 95 % CI |", "|---|---:|---|"]
    for t in a["transformation"].unique():
        x = a[a["transformation"] == t].set_index("id")
        y = b[b["transformation"] == t].set_index("id").loc[x.index]
        d = (x["grade_after"] - x["grade_before"]).to_numpy() - (y["grade_after"] - y["grade_before"]).to_numpy()
        boot = [d[rng.integers(0, len(d), len(d))].mean() for _ in range(resamples)]
        lo, hi = np.percentile(boot, [2.5, 97.5])
        out.append(f"| {t} | {d.mean():+.3f} | [{lo:+.3f}, {hi:+.3f}] |")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="part", required=True)
    a = sub.add_parser("annotator", help="attacks on the LLM annotator, old prompt vs new, a real local model")
    a.add_argument("--n-base", type=int, default=2, help="weak Mohler answers to attack")
    a.add_argument("--api-base", help="a running OpenAI-compatible server, e.g. http://127.0.0.1:8080/v1 (llama.cpp)")
    a.add_argument("--model", default="qwen2.5-coder-1.5b", help="the model name that server answers to")
    a.add_argument("--max-tokens", type=int, default=300)
    g = sub.add_parser("grader", help="rubrictool audit on trained runs")
    g.add_argument("--run", action="append", required=True, help="NAME=RUN_DIR (repeat)")
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--batch-size", type=int, default=32)
    g.add_argument("--force", action="store_true")
    c = sub.add_parser("compare", help="two kept audits (grader-NAME folders) on the same answers: NEW − OLD, paired")
    c.add_argument("runs", nargs=2, metavar="NAME")
    args = ap.parse_args()
    if args.part == "compare":
        missing = [r for r in args.runs if not (RESULTS / f"grader-{r}" / "audit_items.csv").exists()]
        if missing:
            sys.exit(f"no {RESULTS}/grader-{missing[0]}/audit_items.csv; keep the audit there first")
        print("\n".join(paired_shift_ci(args.runs)))
        return
    run_annotator(args) if args.part == "annotator" else run_grader(args)


if __name__ == "__main__":
    main()
