"""Time `review push | status | pull` on a real local Label Studio with every Mohler item.

    .venv/bin/python experiments/review_push.py                 # 2,273 items, 2 models x 8 concepts
    .venv/bin/python experiments/review_push.py --n 40 --reviewers      # + 3 reviewers, status, pull

Starts Label Studio (``.venv-ls``) from ``--folder`` (default /tmp/rubrictool-bench-ls; the first run
migrates the database), pushes the items with predictions from two "models" (the bundled concept
passes A and B — LLM annotation passes, not expert-validated), pushes again (must import nothing),
then runs status and pull. With ``--reviewers``, three reviewer accounts sign up and review every
item with the labels of passes A, B and C first (their own tokens), so status and pull have work to
count. Prints the status report and one JSON object of timings and counts (also written to
experiments/out/review_push.json).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

from rubrictool import review
from rubrictool.data import load_concept_passes, load_mohler
from rubrictool.io import write_table
from rubrictool.rubric import load_rubric

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--folder", type=Path, default=Path(tempfile.gettempdir()) / "rubrictool-bench-ls")
    ap.add_argument("--n", type=int, default=None, help="number of items (default: all)")
    ap.add_argument("--batch-size", type=int, default=200)
    ap.add_argument("--reviewers", action="store_true", help="three reviewers review every item first")
    args = ap.parse_args()

    rubric = load_rubric("mohler")
    items = load_mohler(ROOT.parent / "shared" / "datasets")
    items = items.head(args.n) if args.n else items
    passes = load_concept_passes()
    preds = passes[passes["reviewer"].isin(["A", "B"]) & passes["item"].isin(items["id"])].copy()
    preds["model"] = preds["reviewer"].map({"A": "pass-A-model", "B": "pass-B-model"})
    preds["evidence"], preds["raw_ok"] = "", True
    work = Path(tempfile.mkdtemp(prefix="bench-review-"))
    write_table(items[["id", "question", "response", "reference", "grade"]], work / "items.jsonl")
    write_table(preds[["item", "model", "concept", "level", "evidence", "raw_ok"]], work / "predictions.csv")

    out: dict[str, object] = {"items": len(items), "prediction_rows": len(preds), "batch_size": args.batch_size}
    t = time.perf_counter()
    server = review.start_server(args.folder, port=review.free_port(), bin=ROOT / ".venv-ls" / "bin" / "label-studio")
    out["server_start_s"] = round(time.perf_counter() - t, 1)
    try:
        conn = server.connection()
        title = f"bench-{int(time.time())}"
        t = time.perf_counter()
        first = review.push(conn, rubric, work / "items.jsonl", work / "predictions.csv", project=title,
                            batch_size=args.batch_size)
        out["push_s"] = round(time.perf_counter() - t, 1)
        out["imported"], out["predictions"] = first.imported, first.predictions
        t = time.perf_counter()
        again = review.push(conn, rubric, work / "items.jsonl", work / "predictions.csv", project=title)
        out["repush_s"], out["repush_imported"] = round(time.perf_counter() - t, 1), again.imported
        if args.reviewers:
            t = time.perf_counter()
            out["reviews"] = _review(server.url, conn, title, passes)
            out["review_s"] = round(time.perf_counter() - t, 1)
        t = time.perf_counter()
        st = review.status(conn, title, rubric)
        out["status_s"], out["status_tasks"] = round(time.perf_counter() - t, 1), st.tasks
        t = time.perf_counter()
        pulled = review.pull(conn, title, work / "reviews.csv", rubric)
        out["pull_s"], out["pull_rows"] = round(time.perf_counter() - t, 1), len(pulled.table)
    finally:
        server.stop()
    print("\n".join(st.lines()))
    text = json.dumps(out, indent=1)
    print(text)
    (ROOT / "experiments" / "out").mkdir(parents=True, exist_ok=True)
    (ROOT / "experiments" / "out" / "review_push.json").write_text(text + "\n")


def _review(url: str, conn: review.Connection, title: str, passes: pd.DataFrame) -> int:
    """Reviewers A, B, C sign up and submit the pass labels for every task with their own tokens."""
    sys.path.insert(0, str(ROOT))
    from label_studio_sdk import LabelStudio

    from tests.support.labelstudio import signup

    proj = review.find_project(conn, title)
    assert proj is not None
    tasks = review.list_tasks(conn, int(proj["id"]), False)
    n = 0
    for r in ("A", "B", "C"):
        email = f"{r.lower()}-{title}@example.com"
        ls = LabelStudio(base_url=url, api_key=signup(url, email, f"pw-{r}-{title}"))  # type: ignore[no-untyped-call]
        mine = passes[passes["reviewer"] == r].set_index("item")
        for t in tasks:
            labels = mine.loc[[t["data"]["item_id"]]]
            result = [{"from_name": c, "to_name": "response", "type": "choices", "value": {"choices": [str(lv)]}}
                      for c, lv in zip(labels["concept"], labels["level"])]
            ls.annotations.create(id=t["id"], result=result, lead_time=5.0)
            n += 1
    return n


if __name__ == "__main__":
    main()
