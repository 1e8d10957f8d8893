"""``rubric diagnose --suggest MODEL``: an LLM proposes the criterion the rubric is missing, as a YAML diff.

The prompt shows the rubric file, the grade boundary its concept levels cannot separate and the contrasting
pairs (same concept profile, different grades). The model answers with one YAML block holding
``add_concept:`` (a new concept with one anchor per level) and/or ``sharpen:`` (new anchors for existing
levels). The proposal is written into the rubric's own text (:mod:`rubrictool.rubric.patch`), loaded with the
rubric loader, and returned as a unified diff only when it validates; otherwise the reason is returned and
nothing is written. The call goes through the annotate stage's litellm client, reply cache and prices.
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from rubrictool.errors import AnnotateError, RubricError
from rubrictool.report.ceiling import ContrastPair
from rubrictool.report.diagnose import Diagnosis
from rubrictool.rubric import Rubric, parse_rubric, resolve_rubric_path
from rubrictool.rubric.patch import add_concept, set_anchor, unified_diff

__all__ = ["RubricProposal", "apply_proposal", "propose_for_diagnosis", "propose_rubric_change", "suggestion_prompt"]

MAX_RESPONSE_CHARS = 600  # each response quoted in the prompt is cut to this length


@dataclass
class RubricProposal:
    """What the LLM proposed: the diff when it validates, else ``error``; tokens and cost of the call."""

    model: str
    reply: str
    diff: str = ""
    text: str = ""  # the patched rubric file (valid) or ""
    error: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    price_known: bool = True
    cached: bool = False

    @property
    def valid(self) -> bool:
        return self.error is None and bool(self.diff)


def _clip(text: str) -> str:
    t = " ".join(str(text).split())
    return t if len(t) <= MAX_RESPONSE_CHARS else t[:MAX_RESPONSE_CHARS] + " …"


def suggestion_prompt(rubric_text: str, rubric: Rubric, boundaries: list[tuple[int, int, float]],
                      pairs: list[ContrastPair]) -> str:
    """The prompt: the rubric file, the boundaries (lower, upper, balanced accuracy) and the pairs."""
    lines = [
        ("You are helping a teacher improve an analytic grading rubric. Each answer below was labelled with the "
        "rubric's concepts by reviewers and graded holistically by the teacher."),
        ("The concept levels cannot tell some adjacent grades apart (grade scale "
         f"{rubric.grade.min}..{rubric.grade.max}):"),
        *(f"- grade {lo} vs grade {hi}: balanced accuracy {acc:.2f} (0.5 is chance)" for lo, hi, acc in boundaries),
        "", "Pairs of answers with the SAME concept levels but DIFFERENT grades:",
    ]
    for i, p in enumerate(pairs, 1):
        prof = ", ".join(f"{k}={v}" for k, v in p.profile.items())
        lines += [f"Pair {i} (levels {prof}):",
                  f"  Question: {_clip(p.a['question'])}" + ("" if p.same_question else f" / {_clip(p.b['question'])}"),
                  f"  Grade {p.a['grade']} answer: {_clip(p.a['response'])}",
                  f"  Grade {p.b['grade']} answer: {_clip(p.b['response'])}"]
    lines += [
        "", "The rubric file:", "```yaml", rubric_text.rstrip(), "```", "",
        ("What criterion does the teacher apply that the rubric does not capture? Propose ONE change. Reply with a "
        "single ```yaml block and nothing else, holding either"),
        "add_concept: {key: NEW_KEY, name: ..., definition: ..., levels: [{value: V, anchor: ...}, ...]}",
        f"(one level for each value {rubric.scale.min}..{rubric.scale.max}, a key not yet used), and/or",
        "sharpen: [{concept: KEY, level: V, anchor: new anchor text}, ...]",
        "(new anchors for existing levels that separate the grades above).",
    ]
    return "\n".join(lines) + "\n"


_BLOCK = re.compile(r"```(?:yaml|yml)?\s*\n(.*?)```", re.DOTALL)


def apply_proposal(rubric_text: str, rubric: Rubric, reply: str, file: str = "rubric.yaml") -> tuple[str, str]:
    """(patched text, unified diff) of an LLM reply applied to the rubric file; RubricError when the reply is not
    a usable proposal or the patched rubric does not validate (the loader's message names the line)."""
    m = _BLOCK.search(reply)
    body = m.group(1) if m else reply
    try:
        prop = yaml.safe_load(body)
    except yaml.YAMLError as e:
        raise RubricError(f"the proposal is not YAML ({e.__class__.__name__}): "
                          f"{' '.join(body.split())[:200]}") from None
    if not isinstance(prop, dict) or not ({"add_concept", "sharpen"} & set(prop)):
        raise RubricError("the proposal has neither add_concept: nor sharpen:")
    unknown = set(prop) - {"add_concept", "sharpen"}
    if unknown:
        raise RubricError(f"the proposal has unknown part(s) {', '.join(sorted(map(str, unknown)))}")
    text = rubric_text
    for change in prop.get("sharpen") or []:
        if not isinstance(change, dict) or not {"concept", "level", "anchor"} <= set(change):
            raise RubricError(f"a sharpen entry needs concept, level and anchor: {change!r}")
        key, level = str(change["concept"]), change["level"]
        if key not in rubric.keys:
            raise RubricError(f"sharpen names concept {key!r}, which the rubric does not have")
        values = rubric.concept(key).values
        if level not in values:
            raise RubricError(f"sharpen gives concept {key} level {level!r}; its levels are {values}")
        text = set_anchor(text, rubric.keys.index(key), values.index(level), str(change["anchor"]))
    new = prop.get("add_concept")
    if new is not None:
        if not isinstance(new, dict):
            raise RubricError("add_concept must be a mapping (key, name, definition, levels)")
        order = ["key", "name", "group", "definition", "levels"]
        text = add_concept(text, {k: new[k] for k in order if k in new}
                           | {k: v for k, v in new.items() if k not in order})
    parse_rubric(text, f"{file} (as proposed)")
    return text, unified_diff(rubric_text, text, file)


def _call(model: str, prompt: str, api_base: str | None, api_key_env: str | None, cache_path: Path | None,
          timeout: float) -> tuple[str, int, int, float, bool, bool]:
    """(reply, prompt tokens, completion tokens, cost, price known, cached) of one chat call, through the
    annotate stage's litellm client and reply cache."""
    from rubrictool.annotate.cache import CachedReply, ReplyCache, cache_key
    from rubrictool.annotate.llm import load_litellm, model_rates, request_price, short_error

    messages = [{"role": "user", "content": prompt}]
    params = {"temperature": 0.0, "max_tokens": 800}
    key = cache_key(model, messages, params)
    cache = ReplyCache(cache_path) if cache_path is not None else None
    try:
        hit = cache.get(key) if cache is not None else None
        if hit is not None:
            return hit.text, hit.prompt_tokens, hit.completion_tokens, 0.0, True, True
        api_key = os.environ.get(api_key_env) if api_key_env else None
        kw: dict[str, Any] = {"model": model, "messages": messages, "timeout": timeout, "drop_params": True, **params}
        if api_base:
            kw["api_base"] = api_base
            kw["api_key"] = api_key or "sk-no-key"  # a local server needs none; the OpenAI client wants one
        elif api_key:
            kw["api_key"] = api_key
        litellm = load_litellm()
        t0 = time.monotonic()
        try:
            resp = litellm.completion(**kw)
        except Exception as e:  # noqa: BLE001 - every provider error becomes one line, secrets masked
            raise AnnotateError(f"the suggestion call to {model} failed: {short_error(e, [api_key or ''])}") from None
        text = str(resp.choices[0].message.content or "")
        usage = getattr(resp, "usage", None)
        pt, ct = int(getattr(usage, "prompt_tokens", 0) or 0), int(getattr(usage, "completion_tokens", 0) or 0)
        known = model_rates(model) is not None
        cost = request_price(model, pt, ct) or 0.0
        if cache is not None:
            cache.put(key, model, CachedReply(text, pt, ct, cost), time.monotonic() - t0)
        return text, pt, ct, cost, known, False
    finally:
        if cache is not None:
            cache.close()


def propose_rubric_change(
    rubric: str | Path, boundaries: list[tuple[int, int, float]], pairs: list[ContrastPair], model: str,
    api_base: str | None = None, api_key_env: str | None = None, cache: str | Path | None = None,
    timeout: float = 120.0,
) -> RubricProposal:
    """Ask ``model`` for a new concept or sharper anchors that separate ``boundaries`` (lower, upper, balanced
    accuracy), shown ``pairs``; the proposal as a validated diff of the rubric file, or the reason it is not one."""
    if not pairs:
        raise RubricError("no contrasting pairs to show the model: every grade boundary is separated by the concepts")
    path = resolve_rubric_path(rubric)
    old = path.read_text(encoding="utf-8")
    rb = parse_rubric(old, str(path))
    prompt = suggestion_prompt(old, rb, boundaries, pairs)
    reply, pt, ct, cost, known, cached = _call(model, prompt, api_base, api_key_env,
                                               Path(cache) if cache is not None else None, timeout)
    out = RubricProposal(model, reply, prompt_tokens=pt, completion_tokens=ct, cost_usd=cost, price_known=known,
                         cached=cached)
    try:
        out.text, out.diff = apply_proposal(old, rb, reply, path.name)
    except RubricError as e:
        out.error = str(e)
    return out


def propose_for_diagnosis(diag: Diagnosis, model: str, rubric: str | Path | None = None,
                          **kwargs: Any) -> RubricProposal:
    """:func:`propose_rubric_change` for the boundaries a diagnosis named and its contrasting pairs."""
    ref = rubric if rubric is not None else diag.rubric
    if ref is None:
        raise RubricError("no rubric file to propose a change to: pass --rubric NAME|FILE")
    if diag.ceiling is None:
        raise RubricError("the diagnosis has no grade ceiling (no grades in the table): nothing to suggest from")
    rows = diag.ceiling.boundaries.to_dict("records")
    named = [(int(b["lower"]), int(b["upper"]), float(b["balanced_acc"])) for b in rows if b["named"]]
    return propose_rubric_change(ref, named, diag.pairs, model, **kwargs)
