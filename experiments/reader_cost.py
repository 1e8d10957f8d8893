"""What the concept-reader levers cost per Stage I step, paired: the same Mohler batches through the default model and
through the model with the alignment features (``model.align``), interleaved so that both see the same machine load.

One optimiser step = forward, concept loss (soft targets when ``--soft``), backward, AdamW step; MiniLM, batch 8,
one thread. The ratio is what a fold's encoder stages cost more (Stage II and the LCEC fit do not change).

    .venv/bin/python experiments/reader_cost.py --steps 20
    .venv/bin/python experiments/reader_cost.py --steps 20 --contrast   # the default against default-contrast
    .venv/bin/python experiments/reader_cost.py --steps 20 --contrast --per-batch 1   # one example of each kind
    .venv/bin/python experiments/reader_cost.py --steps 20 --stage1 freeze_embeddings=true   # today's default against it
    .venv/bin/python experiments/reader_cost.py --steps 20 --model rubric_input=12           # the rubric in the input
    .venv/bin/python experiments/reader_cost.py --steps 20 --stage1 train_top_layers=4       # the top four layers alone

With ``--contrast`` both models compare answer and reference (the default); the second also adds the examples across
questions of experiments/configs/default-contrast.yaml to its Stage I loss (``stage1.contrast``). With ``--stage1``
both are the default's Stage I (alignment and those examples) and the second has the Stage I fields given; with
``train_top_layers`` its steps read the lower layers' output computed once beforehand (that one-off cost is not in the
step, and is reported apart per answer).

Concept labels: majority vote over three LLM annotation passes, NOT validated by experts.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--contrast", action="store_true", help="the default against the default with stage1.contrast")
    ap.add_argument("--per-batch", type=int, default=2, help="with --contrast: examples of each kind per batch")
    ap.add_argument("--stage1", action="append", default=[], metavar="FIELD=VALUE",
                    help="the default (with the examples across questions) against it with these Stage I fields, e.g. "
                         "freeze_embeddings=true (repeatable; implies --contrast)")
    ap.add_argument("--model", action="append", default=[], metavar="FIELD=VALUE",
                    help="as --stage1, for model fields, e.g. rubric_input=12 (the Mohler rubric's texts)")
    ap.add_argument("--json", help="also write the result here")
    ap.add_argument("--data-dir", default=os.environ.get("RUBRICTOOL_DATA", "../shared/datasets"))
    a = ap.parse_args()
    import yaml

    changes: dict[str, object] = {}
    model_changes: dict[str, object] = {}
    for option, items, into in (("--stage1", a.stage1, changes), ("--model", a.model, model_changes)):
        for item in items:
            field, sep, value = item.partition("=")
            if not sep:
                ap.error(f"{option} {item!r}: write FIELD=VALUE, e.g. freeze_embeddings=true")
            into[field] = yaml.safe_load(value)
    a.contrast = a.contrast or bool(changes) or bool(model_changes)
    from dataclasses import fields

    from reccbm.config import ModelConfig, StageIConfig

    for option, given, cls in (("--stage1", changes, StageIConfig), ("--model", model_changes, ModelConfig)):
        unknown = sorted(set(given) - {f.name for f in fields(cls)})
        if unknown:
            ap.error(f"{option}: unknown field(s) {unknown}; see docs/training.md for the fields")

    import numpy as np
    import torch

    import reccbm
    from reccbm.align import separator_id
    from reccbm.encoder import states_layer
    from reccbm.fit import rubric_tokens
    from reccbm.inference import collate_states, encoder_states
    from reccbm.train import _freeze, _optimizer, _stage1_loss
    from rubrictool.errors import RubrictoolError
    from rubrictool.grade import model_inputs
    from rubrictool.pipeline import benchmark_table
    from rubrictool.train import concept_texts, prepare_table

    torch.set_num_threads(1)
    try:
        rb, table, _ = benchmark_table("mohler", a.data_dir)
    except RubrictoolError as exc:  # no data folder: one line, no traceback
        raise SystemExit(f"error: {exc}") from None
    df = prepare_table(table, rb).sample(n=8 * a.steps, random_state=0)
    tok = reccbm.load_tokenizer(reccbm.default_backbone())
    items = reccbm.EncodedItems(model_inputs(tok, df, 128), df[[f"_c_{k}" for k in rb.keys]].to_numpy(np.int64))
    models = {}
    states: dict[bool, list[torch.Tensor] | None] = {False: None, True: None}  # train_top_layers: the lower layers' output
    states_s = 0.0
    contrast = {"contrast": 0.5, "contrast_top": (0, 1, 2, 4), "contrast_bottom": (0, 1, 4), "contrast_per_batch": a.per_batch}
    for second in (False, True):
        torch.manual_seed(0)
        extra = dict(model_changes) if second else {}
        if int(extra.get("rubric_input", 0) or 0) > 0:  # type: ignore[call-overload]
            ids, spans = rubric_tokens(tok, concept_texts(rb), int(extra["rubric_input"]))  # type: ignore[call-overload]
            extra |= {"rubric_ids": ids, "rubric_spans": spans}
        cfg = ModelConfig(num_concepts=len(rb.keys), num_levels=3, num_grades=6, align=second or a.contrast, **extra)  # type: ignore[arg-type]
        m = reccbm.RecCBM(cfg, reccbm.TextEncoder.from_pretrained(reccbm.default_backbone()))
        if m.align is not None:
            m.align.set_sep(separator_id(tok))
        # --stage1/--model: both with the examples across questions, the second with the changes; --contrast: the
        # second with the examples
        both = bool(changes or model_changes)
        s1 = StageIConfig(concept_loss="mean", **(contrast if both or (second and a.contrast) else {}),
                          **(changes if second else {}))
        m.encoder.states_layer = states_layer(m.encoder, s1.train_top_layers)
        _freeze(m, "stage1", False, s1.freeze_embeddings, m.encoder.states_layer or 0)
        m.encoder.eval_below()
        if m.encoder.states_layer is not None:
            t0 = time.perf_counter()
            states[second] = encoder_states(m.encoder, items, tok.pad_token_id, 32)
            states_s = (time.perf_counter() - t0) / len(items)
        models[second] = (m, _optimizer(m, s1), _stage1_loss(s1))
    seconds: dict[bool, list[float]] = {False: [], True: []}
    for s in range(a.steps):
        for align in ((False, True) if s % 2 == 0 else (True, False)):
            batch = collate_states(items, list(range(8 * s, 8 * s + 8)), tok.pad_token_id, states[align])
            m, opt, loss_fn = models[align]
            t0 = time.perf_counter()
            loss = loss_fn(m, batch)
            loss.backward()  # type: ignore[no-untyped-call]
            opt.step()
            opt.zero_grad(set_to_none=True)
            seconds[align].append(time.perf_counter() - t0)
    name = "changed" if changes or model_changes else "contrast" if a.contrast else "align"
    out: dict[str, object] = {"steps": a.steps, "per_batch": a.per_batch, "changes": {"stage1": changes, "model": model_changes}, "default_s_per_step": float(np.median(seconds[False])),
                                   f"{name}_s_per_step": float(np.median(seconds[True]))}
    out["ratio"] = float(np.median(seconds[True])) / float(np.median(seconds[False]))
    if states_s:
        out["states_s_per_answer"] = states_s
    print(json.dumps(out, indent=1))
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
