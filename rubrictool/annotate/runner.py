"""One process's run: asyncio requests per model, retries, repair rounds, budget, accounting."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import random
import re
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from rubrictool.annotate.cache import CachedReply, NoCache, ReplyCache, cache_key
from rubrictool.annotate.config import AnnotateConfig
from rubrictool.annotate.llm import (
    connection_error,
    count_tokens,
    is_fatal,
    load_litellm,
    model_rates,
    request_price,
    retry_after,
    retryable,
    short_error,
)
from rubrictool.annotate.parse import ParseResult
from rubrictool.annotate.prompt import (
    ItemPrompt,
    load_examples,
    load_template,
    render_item_prompt,
    repair_message,
    response_format_for,
)
from rubrictool.annotate.replies import canonical, reply_text, response_cost, restore, safe_parse, usage
from rubrictool.annotate.stops import EARLY_STOP, Breaker, Budget, BudgetStop
from rubrictool.errors import AnnotateError
from rubrictool.progress import Progress, ProgressFn
from rubrictool.rubric import Rubric

__all__ = [
    "AnnotateResult",
    "CallFailed",
    "ModelSummary",
    "Reply",
    "Runner",
    "check_keys",
    "chosen_items",
    "open_cache",
    "prepare",
    "run_with_progress",
]


@dataclass
class ModelSummary:
    """Per model: what was done, what failed, what it cost (this run) and how long it took."""

    model: str
    items: int = 0  # items finished (ok + failed)
    ok: int = 0
    failures: int = 0
    repaired: int = 0
    cached_items: int = 0  # items answered entirely from the cache
    retried: int = 0  # items whose cached failed replies --retry-failed sent again
    requests: int = 0  # HTTP requests sent (incl. retries)
    retries: int = 0
    prompt_tokens: int = 0  # tokens of the replies received in this run (cache hits excluded)
    completion_tokens: int = 0
    cost_usd: float = 0.0
    price_known: bool = True
    seconds: float = 0.0  # wall time from the model's first request to its last reply
    stopped_by_budget: bool = False


@dataclass
class AnnotateResult:
    predictions: pd.DataFrame
    failures: list[dict[str, Any]]
    summary: dict[str, ModelSummary]
    stopped_by_budget: bool = False
    total_items: int = 0
    fatal: dict[str, str] = field(default_factory=dict)  # model -> why it was stopped (wrong key, unknown model)
    workers: int = 1  # client processes the run used

    @property
    def cost_usd(self) -> float:
        return sum(s.cost_usd for s in self.summary.values())

    @property
    def failure_share(self) -> float:
        """Failed (item, model) pairs over the pairs finished (0 when none finished)."""
        done = sum(s.items for s in self.summary.values())
        return sum(s.failures for s in self.summary.values()) / done if done else 0.0


class _CallFailed(Exception):
    def __init__(self, message: str, fatal: bool = False) -> None:
        super().__init__(message)
        self.fatal = fatal


@dataclass
class _Reply:
    text: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0  # paid in this run (0 for a cache hit)
    cached: bool = False


class Runner:
    def __init__(self, rubric: Rubric, config: AnnotateConfig, cache: ReplyCache | NoCache) -> None:
        self.rubric = rubric
        self.config = config
        self.cache = cache
        self.budget = Budget(config.budget)
        self.summary = {m: ModelSummary(model=m) for m in config.models}
        self.failures: list[dict[str, Any]] = []
        self.rows: list[dict[str, Any]] = []
        self.inflight: dict[str, asyncio.Future[_Reply]] = {}
        self.fatal: dict[str, str] = {}
        self.api_key = os.environ.get(config.api_key_env) if config.api_key_env else None
        # values that must never reach a message: the key in use and every key-like env variable
        self.secrets = [self.api_key or ""] + [
            v for k, v in os.environ.items() if re.search(r"(KEY|TOKEN|SECRET)$", k) and len(v) >= 8
        ]
        self.response_formats = {
            m: response_format_for(m, rubric, config.format, config.api_base) for m in config.models
        }
        self.started: dict[str, float] = {}
        self.on_progress: Any = None
        self._kwargs: dict[str, dict[str, Any]] = {}
        self.breakers = {m: Breaker() for m in config.models}
        # worker processes: one shared flag per model (mp.Value), set by whichever process stops it
        self.stop_flags: dict[str, Any] = {}
        self.cache_error = ""  # the first failure to read or write the cache: the run stops
        self.refreshed: set[str] = set()  # cache keys fetched in this run (never re-sent by --retry-failed)

    def stopped(self, model: str) -> str | None:
        """Why ``model`` takes no more items (None: it goes on)."""
        if self.cache_error:
            return self.cache_error
        if model in self.fatal:
            return self.fatal[model]
        flag = self.stop_flags.get(model)
        if flag is not None and flag.value:
            return f"model {model}: stopped by another worker process (see its reason)"
        return None

    def _trip(self, model: str) -> None:
        """Stop ``model`` when an early-stop rule says so (in every worker process)."""
        why = self.breakers[model].verdict()
        if why is not None and model not in self.fatal:
            self.fatal[model] = f"model {model}: {EARLY_STOP}, {why}"
            flag = self.stop_flags.get(model)
            if flag is not None:
                flag.value = 1

    def _cache_failed(self, e: sqlite3.Error, doing: str) -> None:
        if not self.cache_error:
            path = getattr(self.cache, "path", "the reply cache")
            try:
                n = f"the {len(self.cache)} replies" if isinstance(self.cache, ReplyCache) else "the replies"
            except sqlite3.Error:
                n = "the replies"
            self.cache_error = (f"{path}: cannot {doing} the reply cache ({e}); the run stopped and {n} stored "
                                "before are kept in it (a re-run with the same --cache sends none of them again)")
            for flag in self.stop_flags.values():
                flag.value = 1

    def _call_kwargs(self, model: str) -> dict[str, Any]:
        """What every litellm call for ``model`` carries besides messages and sampling (worked out once:
        the provider-key lookup is not free, and a fast local server makes every millisecond count)."""
        if model not in self._kwargs:
            cfg = self.config
            kw: dict[str, Any] = {"model": model, "timeout": cfg.timeout, "max_retries": 0, "drop_params": True}
            if cfg.api_base:
                kw["api_base"] = cfg.api_base
            if self.api_key is not None:
                kw["api_key"] = self.api_key
            elif cfg.api_base and not _has_provider_key(model):
                kw["api_key"] = "sk-no-key"  # local servers need none, but the OpenAI client wants one
            self._kwargs[model] = kw
        return self._kwargs[model]

    @property
    def stopped_by_budget(self) -> bool:
        return self.budget.stopped

    def _params(self, model: str) -> dict[str, Any]:
        p = dict(self.config.sampling)
        rf = self.response_formats[model]
        if rf is not None:
            p["response_format"] = rf
        return p

    async def call(
        self, model: str, messages: list[dict[str, Any]], boundary: str | None = None, fresh: bool = False
    ) -> _Reply:
        """The reply to ``messages``: from the cache, from an identical request in flight, or sent.
        ``fresh``: skip the cache (--retry-failed), unless this run already fetched the same request."""
        params = self._params(model)
        key = cache_key(model, messages, params, boundary)
        # a reply that repeats the boundary is kept with the constant in its place and given back with the
        # boundary of the prompt that asks, so a repair turn quoting it keys the same in every run
        try:
            hit = None if fresh and key not in self.refreshed else self.cache.get(key)
        except sqlite3.Error as e:
            self._cache_failed(e, "read")
            raise _CallFailed(self.cache_error) from None
        if hit is not None:
            return _Reply(restore(hit.text, boundary), hit.prompt_tokens, hit.completion_tokens, 0.0, cached=True)
        if key in self.inflight:  # the same prompt is already being asked: pay once
            r = await asyncio.shield(self.inflight[key])
            return _Reply(restore(r.text, boundary), r.prompt_tokens, r.completion_tokens, 0.0, cached=True)
        fut: asyncio.Future[_Reply] = asyncio.get_running_loop().create_future()
        self.inflight[key] = fut
        try:
            reply = await self._fetch(model, messages, params, key, boundary)
            fut.set_result(dataclasses.replace(reply, text=canonical(reply.text, boundary)))
            return reply
        except BaseException as e:
            if isinstance(e, asyncio.CancelledError):
                fut.cancel()
            else:
                fut.set_exception(e)
                fut.exception()  # mark retrieved: waiting duplicates re-raise it, nobody else must
            raise
        finally:
            del self.inflight[key]

    async def _fetch(
        self, model: str, messages: list[dict[str, Any]], params: dict[str, Any], key: str, boundary: str | None = None
    ) -> _Reply:
        litellm = load_litellm()
        cfg = self.config
        s = self.summary[model]
        worst = 0.0
        if cfg.budget is not None:
            p = request_price(model, int(count_tokens(model, messages) * 1.1) + 16, cfg.max_tokens)
            worst = p or 0.0
        kwargs: dict[str, Any] = dict(self._call_kwargs(model), messages=messages, **params)
        last: str = ""
        b = self.breakers[model]
        for attempt in range(cfg.max_retries + 1):
            why = self.stopped(model)
            if why is not None:
                raise _CallFailed(why, fatal=model in self.fatal)
            self.budget.reserve(worst)
            self.started.setdefault(model, time.monotonic())
            s.requests += 1
            s.retries += attempt > 0
            t0 = time.monotonic()
            timed_out = False
            try:
                resp = await asyncio.wait_for(litellm.acompletion(**kwargs), timeout=cfg.timeout + 10)
            except BaseException as e:
                timed_out = isinstance(e, (asyncio.TimeoutError, TimeoutError, litellm.Timeout))
                # a timed-out request may still be billed: keep its worst case as spent
                self.budget.settle(worst, worst if timed_out else 0.0)
                if isinstance(e, (asyncio.CancelledError, KeyboardInterrupt)):
                    raise
                last = short_error(e, self.secrets)
                if connection_error(e):
                    b.no_reply(attempt, last)
                    if attempt == cfg.max_retries:
                        b.gave_up = True
                    self._trip(model)
                else:
                    b.reply()
                if is_fatal(e):
                    raise _CallFailed(last, fatal=True) from None
                if not retryable(e):
                    raise _CallFailed(last) from None
                if attempt == cfg.max_retries:
                    break
                delay = retry_after(e) or random.uniform(0, min(60.0, cfg.backoff * 2**attempt))
                await asyncio.sleep(delay)
                continue
            b.reply()
            text = reply_text(resp)
            pt, ct = usage(resp)
            price = response_cost(resp) if model_rates(model) is not None else None
            if price is None:
                price = request_price(model, pt, ct)
            if price is None:
                s.price_known = False  # a local alias: counted as free, reported as "no price"
            cost = price or 0.0
            self.budget.settle(worst, cost)
            reply = _Reply(text, pt, ct, cost)
            self.refreshed.add(key)
            try:
                self.cache.put(key, model, CachedReply(canonical(text, boundary), pt, ct, cost), time.monotonic() - t0)
            except sqlite3.Error as e:  # disk full, read-only folder: stop, keep what is stored
                self._cache_failed(e, "write")
            s.prompt_tokens += pt
            s.completion_tokens += ct
            s.cost_usd += cost
            return reply
        raise _CallFailed(f"gave up after {cfg.max_retries + 1} attempts: {last}")

    async def annotate_item(self, model: str, item_id: str, prompt: ItemPrompt) -> None:
        s = self.summary[model]
        replies, result, error = await self._ask(model, prompt)
        failed = result is None or not result.ok or bool(error)
        if failed and self.config.retry_failed and replies and all(r.cached for r in replies):
            # --retry-failed: this failure was read from the cache; ask again (the new replies replace the
            # cached ones). Replies paid for in this run are never asked again, nor successful cached ones.
            s.retried += 1
            replies, result, error = await self._ask(model, prompt, fresh=True)
        self.count_sent(model, replies, result is None or not result.ok or bool(error),
                        error or "; ".join(result.errors if result else []))
        self._record(model, item_id, replies, result, error)

    def count_sent(self, model: str, replies: list[_Reply], failed: bool, error: str) -> None:
        """Count an item that sent a request in this run (not one answered from the cache) for the early stop."""
        if replies and all(r.cached for r in replies):
            return
        b = self.breakers[model]
        b.sent += 1
        if failed:
            b.sent_failed += 1
            b.last_error = error[:200]
        self._trip(model)

    async def _ask(
        self, model: str, prompt: ItemPrompt, fresh: bool = False
    ) -> tuple[list[_Reply], ParseResult | None, str]:
        """The item's reply, parsed, with at most one repair round: (replies, parse result, error)."""
        messages: list[dict[str, Any]] = [{"role": "user", "content": prompt.text}]
        replies: list[_Reply] = []
        error = ""
        result: ParseResult | None = None
        try:
            first = await self.call(model, messages, prompt.boundary, fresh)
            replies.append(first)
            result = first_result = safe_parse(first.text, self.rubric, prompt)
            if not result.ok:
                fix = messages + [
                    {"role": "assistant", "content": first.text},
                    {"role": "user", "content": repair_message(result, self.rubric, self.config.format)},
                ]
                second = await self.call(model, fix, prompt.boundary, fresh)
                replies.append(second)
                again = safe_parse(second.text, self.rubric, prompt)
                merged = {**result.labels, **again.labels}
                only_missing = all(e.startswith("missing concept") for e in again.errors)
                if again.ok:
                    result = again
                elif only_missing and all(k in merged for k in self.rubric.keys):
                    result = ParseResult(labels=merged, found=again.found)  # the repair gave what was missing
                else:
                    result = again if len(again.labels) >= len(result.labels) else result
                    error = "; ".join(again.errors or result.errors)
                if result is not first_result:  # the labels (some or all) are the repair reply's, ok or not
                    result.from_repair = True
        except _CallFailed as e:
            error = str(e)
            if e.fatal:
                self.fatal.setdefault(model, str(e) if str(e).startswith(f"model {model}: ") else f"model {model}: {e}")
        return replies, result, error

    def _record(
        self, model: str, item_id: str, replies: list[_Reply], result: ParseResult | None, error: str
    ) -> None:
        s = self.summary[model]
        s.items += 1
        ok = result is not None and result.ok and not error
        # a row's labels that came from the repair reply say so, also when the item still failed: the first reply
        # (the one the cache keeps under the item's prompt) does not hold them
        repaired = len(replies) == 2 and result is not None and result.from_repair
        s.ok += ok
        s.failures += not ok
        s.repaired += repaired and ok
        all_cached = bool(replies) and all(r.cached for r in replies)
        s.cached_items += all_cached
        pt = sum(r.prompt_tokens for r in replies)
        ct = sum(r.completion_tokens for r in replies)
        cost = sum(r.cost_usd for r in replies)
        labels = result.labels if result is not None else {}
        for key in self.rubric.keys:
            lab = labels.get(key)
            self.rows.append(
                {
                    "item": item_id,
                    "model": model,
                    "concept": key,
                    "level": lab.level if lab else None,
                    "evidence": lab.evidence if lab else None,
                    "raw_ok": ok,
                    "repaired": repaired,
                    "cached": all_cached,
                    "prompt_tokens": pt,
                    "completion_tokens": ct,
                    "cost_usd": cost,
                    "error": None if ok else error,
                }
            )
        if not ok:
            self.failures.append(
                {
                    "item": item_id,
                    "model": model,
                    "error": error,
                    "reply": replies[0].text if replies else None,
                    "repair_reply": replies[1].text if len(replies) > 1 else None,
                }
            )
        if model in self.started:
            s.seconds = time.monotonic() - self.started[model]

    async def run_model(self, model: str, jobs: list[tuple[str, ItemPrompt]],
                        take: Callable[[], int] | None = None) -> None:
        """Annotate ``jobs`` with ``model`` at the configured concurrency.

        ``take`` hands out the index of the next job (-1: none left). Worker processes share one counter
        per model, so whoever has a free slot takes the next item and no process idles while another
        still has a backlog; without it, this process takes every job in order.
        """
        if take is None:
            nxt = iter(range(len(jobs)))

            def take() -> int:
                return next(nxt, -1)

        async def worker() -> None:
            while not self.budget.stopped and self.stopped(model) is None:
                i = take()
                if i < 0:
                    return
                item_id, prompt = jobs[i]
                try:
                    await self.annotate_item(model, item_id, prompt)
                except BudgetStop:
                    self.summary[model].stopped_by_budget = True
                    return
                if self.on_progress is not None:
                    self.on_progress(model)

        await asyncio.gather(*(worker() for _ in range(min(self.config.concurrency, max(1, len(jobs))))))


Reply = _Reply  # what Runner.call returns, for runners of other item kinds (rubrictool.annotate.holistic)
CallFailed = _CallFailed  # what Runner.call raises when a request cannot be answered


def _has_provider_key(model: str) -> bool:
    litellm = load_litellm()
    try:
        return bool(litellm.validate_environment(model=model).get("keys_in_environment"))
    except Exception:  # noqa: BLE001 - an unknown provider: assume no key
        return False


def check_keys(config: AnnotateConfig) -> None:
    if config.api_key_env:
        if not os.environ.get(config.api_key_env):
            raise AnnotateError(f"environment variable {config.api_key_env} (the API key) is not set or empty",
                                hint="set it, or pass another --api-key-env")
        return
    if config.api_base:
        return
    litellm = load_litellm()
    for m in config.models:
        try:
            env = litellm.validate_environment(model=m)
        except Exception:  # noqa: BLE001,S112 - unknown provider: litellm will report a missing key itself
            continue
        if not env.get("keys_in_environment"):
            missing = ", ".join(env.get("missing_keys") or []) or "its API key"
            raise AnnotateError(
                f"model {m} needs {missing} in the environment (keys are read from the environment only)",
                hint="or pass --api-base for a local OpenAI-compatible server",
            )


def chosen_items(items: pd.DataFrame, config: AnnotateConfig) -> pd.DataFrame:
    """The items a run annotates: each question's first ``config.per_question`` answers, then the first
    ``config.limit`` (both 0: all); refused without the columns they need."""
    if "id" not in items.columns or "response" not in items.columns:
        raise AnnotateError("the item table needs 'id' and 'response' columns")
    rows = items
    if config.per_question:
        if "question" not in items.columns:
            raise AnnotateError("per_question needs a 'question' column in the item table",
                                hint="add the question of each answer, or pass --limit instead of --per-question")
        rows = rows.groupby(rows["question"].fillna("").astype(str).str.strip(), sort=False).head(config.per_question)
    rows = rows.head(config.limit) if config.limit else rows
    return rows


def prepare(
    items: pd.DataFrame, rubric: Rubric, config: AnnotateConfig
) -> list[tuple[str, ItemPrompt]]:
    """(item id, prompt) per item; every prompt gets its own random boundary."""
    config.check()
    rows = chosen_items(items, config)
    template = load_template(config.template)
    examples = load_examples(config.examples, rubric) if config.examples else []
    return [
        (str(r["id"]),
         render_item_prompt({str(k): v for k, v in r.items()}, rubric, template, examples, config.format,
                            config.benchmark))
        for r in rows.to_dict(orient="records")
    ]


def open_cache(config: AnnotateConfig) -> ReplyCache | NoCache:
    return ReplyCache(config.cache) if config.cache is not None else NoCache()


def _total_cost(summary: dict[str, Any]) -> str:
    """The running cost of a run's models: dollars for the priced ones, and what has no price said so."""
    priced = [x for x in summary.values() if x.price_known]
    if not priced:
        return "cost unknown (no price)"
    cost = f"${sum(x.cost_usd for x in priced):.4f}"
    return cost if len(priced) == len(summary) else f"{cost} + unpriced models"


def run_with_progress(
    runner: Runner, jobs: list[tuple[str, ItemPrompt]], progress: ProgressFn | None,
    takes: dict[str, Callable[[], int]] | None = None,
) -> None:
    async def main() -> None:
        await asyncio.gather(*(runner.run_model(m, jobs, (takes or {}).get(m)) for m in runner.config.models))

    if progress is not None:
        report = progress
        done = dict.fromkeys(runner.config.models, 0)
        n_total = len(jobs) * len(runner.config.models)

        def update(model: str) -> None:
            s = runner.summary[model]
            tok = s.prompt_tokens + s.completion_tokens
            done[model] += 1
            spent = f"${s.cost_usd:.4f}" if s.price_known else "no price"  # a local alias: not a made-up $0.0000
            report(Progress(model, done[model], len(jobs), f"{spent} {tok:,} tok {s.failures} failed"))
            report(Progress("total", sum(done.values()), n_total, _total_cost(runner.summary)))

        for m in runner.config.models:
            report(Progress(m, 0, len(jobs)))
        report(Progress("total", 0, n_total))
        runner.on_progress = update
    asyncio.run(main())
