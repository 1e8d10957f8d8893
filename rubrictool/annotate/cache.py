"""The SQLite reply cache: replies keyed by model + rendered messages + sampling parameters."""

from __future__ import annotations

import hashlib
import json
import sqlite3
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rubrictool.annotate.config import CACHE_VERSION
from rubrictool.errors import AnnotateError

__all__ = [
    "BOUNDARY_KEY",
    "NoCache",
    "ReplyCache",
    "cache_key",
]


BOUNDARY_KEY = "<boundary>"  # what a prompt's random boundary reads as in the cache key


def cache_key(
    model: str, messages: Sequence[dict[str, Any]], params: dict[str, Any], boundary: str | None = None
) -> str:
    """sha256 of the model string, the rendered messages and the sampling parameters (not key, base, timeout).

    ``boundary``, the random marker of the prompt's quoted data, is replaced by a constant first: it
    changes with every request but not what is asked, so a re-run of the same item hits the cache.
    """
    if boundary:
        messages = [
            {**m, "content": m["content"].replace(boundary, BOUNDARY_KEY)} if isinstance(m.get("content"), str) else m
            for m in messages
        ]
    payload = json.dumps(
        {"v": CACHE_VERSION, "model": model, "messages": list(messages), "params": params},
        sort_keys=True,
        ensure_ascii=False,
        separators=(",", ":"),
    )
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class CachedReply:
    text: str
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float


class ReplyCache:
    """Model replies in SQLite (WAL; each reply committed on arrival, so a killed run loses nothing paid)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.conn = sqlite3.connect(str(self.path), timeout=30, isolation_level=None)
            self.conn.execute("PRAGMA journal_mode=WAL")
            self.conn.execute("PRAGMA synchronous=NORMAL")
            self.conn.execute(
                "CREATE TABLE IF NOT EXISTS replies (key TEXT PRIMARY KEY, model TEXT NOT NULL, reply TEXT NOT NULL,"
                " prompt_tokens INTEGER NOT NULL, completion_tokens INTEGER NOT NULL, cost_usd REAL NOT NULL,"
                " latency_s REAL NOT NULL, created REAL NOT NULL)"
            )
        except sqlite3.Error as e:
            raise AnnotateError(f"{self.path}: cannot open the reply cache ({e})",
                                hint="pass another --cache path") from None

    def get(self, key: str) -> CachedReply | None:
        row = self.conn.execute(
            "SELECT reply, prompt_tokens, completion_tokens, cost_usd FROM replies WHERE key = ?", (key,)
        ).fetchone()
        return CachedReply(row[0], int(row[1]), int(row[2]), float(row[3])) if row else None

    def put(self, key: str, model: str, reply: CachedReply, latency_s: float) -> None:
        with self.conn:  # one atomic transaction per reply
            self.conn.execute(
                "INSERT OR REPLACE INTO replies VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (key, model, reply.text, reply.prompt_tokens, reply.completion_tokens, reply.cost_usd, latency_s,
                 time.time()),
            )

    def __len__(self) -> int:
        return int(self.conn.execute("SELECT COUNT(*) FROM replies").fetchone()[0])

    def close(self) -> None:
        self.conn.close()


class NoCache:
    def get(self, key: str) -> CachedReply | None:
        return None

    def put(self, key: str, model: str, reply: CachedReply, latency_s: float) -> None:
        pass

    def close(self) -> None:
        pass
