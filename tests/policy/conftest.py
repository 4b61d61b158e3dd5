"""Fixtures for policy tests: a small tiny policy and a fake OpenAI-compatible HTTP server."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from coral.policy.tiny import tiny_policy


@pytest.fixture
def tiny():
    """A fresh 2-layer, d_model 64 tiny policy (byte-level tokenizer)."""
    return tiny_policy(seed=0, d_model=64, n_layers=2, n_heads=4, max_len=256)


class FakeServer:
    """An OpenAI-compatible server on 127.0.0.1 that echoes the last message word by word.

    Knobs: `fail_first` requests answer `fail_status` (with a Retry-After header when `retry_after` is set);
    every request sleeps `delay_s`; `complete`, when set, is a function of the prompt whose text replaces the
    echo; `key`, when set, is the only API key accepted (HTTP 401 otherwise); `models` listed on /models.
    Records: total `requests`, `max_active` simultaneous requests, `bodies`, `paths` and `auth` headers received."""

    def __init__(self) -> None:
        self.fail_first = 0
        self.fail_status = 500
        self.delay_s = 0.0
        self.requests = 0
        self.active = 0
        self.max_active = 0
        self.bodies: list[dict[str, Any]] = []
        self.paths: list[str] = []
        self.complete: Any = None
        self.key: str | None = None
        self.models = ["fake-model"]
        self.retry_after: str | None = None
        self.auth: list[str | None] = []
        self.lock = threading.Lock()
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def answer(self, path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        with self.lock:
            self.requests += 1
            self.bodies.append(body)
            self.paths.append(path)
            failing = self.requests <= self.fail_first
            self.active += 1
            self.max_active = max(self.max_active, self.active)
        try:
            time.sleep(self.delay_s)
            if failing:
                return self.fail_status, {"error": {"message": "injected failure", "type": "server_error"}}
            return 200, _reply(path, body, self.complete)
        finally:
            with self.lock:
                self.active -= 1


def _reply(path: str, body: dict[str, Any], complete: Any = None) -> dict[str, Any]:
    prompt = body["messages"][-1]["content"] if path.endswith("chat/completions") else body["prompt"]
    words = ("echo " + prompt).split()
    finish = "length" if len(words) > body.get("max_tokens", 16) else "stop"
    words = words[: body.get("max_tokens", 16)]
    text = " ".join(words) if complete is None else complete(prompt)
    for stop in body.get("stop") or []:
        if stop in text:
            text, finish = text[: text.index(stop)], "stop"
    usage = {"prompt_tokens": len(prompt.split()), "completion_tokens": len(words)}
    usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
    logprobs = [-0.1 * (i + 1) for i in range(len(words))]
    choice: dict[str, Any] = {"index": 0, "finish_reason": finish, "logprobs": None}
    if path.endswith("chat/completions"):
        choice["message"] = {"role": "assistant", "content": text}
        if body.get("logprobs"):
            content = [
                {"token": w, "logprob": lp, "bytes": None, "top_logprobs": []}
                for w, lp in zip(words, logprobs, strict=True)
            ]
            choice["logprobs"] = {"content": content}
        kind = "chat.completion"
    else:
        choice["text"] = text
        if body.get("logprobs"):
            choice["logprobs"] = {
                "tokens": words,
                "token_logprobs": logprobs,
                "text_offset": [],
                "top_logprobs": [],
            }
        kind = "text_completion"
    return {
        "id": "x",
        "object": kind,
        "created": 0,
        "model": body["model"],
        "choices": [choice],
        "usage": usage,
    }


def _handler(server: FakeServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:  # keep pytest output clean
            pass

        def _send(self, status: int, payload: dict[str, Any]) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            if status in (429, 503) and server.retry_after is not None:
                self.send_header("Retry-After", server.retry_after)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _refused(self) -> bool:
            server.auth.append(self.headers.get("Authorization"))
            if server.key is not None and self.headers.get("Authorization") != f"Bearer {server.key}":
                self._send(401, {"error": {"message": "Incorrect API key provided", "type": "invalid_request_error"}})
                return True
            return False

        def do_GET(self) -> None:
            if self._refused():
                return
            if self.path.endswith("/models"):
                self._send(
                    200,
                    {
                        "object": "list",
                        "data": [{"id": m, "object": "model", "created": 0, "owned_by": "t"} for m in server.models],
                    },
                )
            else:
                self._send(404, {"error": {"message": "not found"}})

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            if self._refused():
                return
            if not self.path.endswith(("/chat/completions", "/completions")):
                self._send(404, {"error": {"message": "not found"}})
                return
            try:
                self._send(*server.answer(self.path, body))
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (timeout tests)

    return Handler


@pytest.fixture
def server() -> Iterator[FakeServer]:
    fake = FakeServer()
    thread = threading.Thread(target=fake.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    yield fake
    fake.httpd.shutdown()
    fake.httpd.server_close()
