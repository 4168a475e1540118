"""A fake OpenAI-compatible endpoint: a real HTTP server on 127.0.0.1, on a free port, in a
thread (stdlib ``http.server``). It answers ``POST /v1/chat/completions``, counts the calls
and records each one's ``Authorization`` header, model and body.

What it does on each call is scripted: ``script`` is consumed one behaviour per call
(``"answer"``, ``"error"`` (HTTP ``status``), ``"hang"``: never answers until the test ends,
so a client timeout is certain, not a race; ``"hold"``: answers once the test sets ``gate``),
then ``default`` for the rest. Use it as a
context manager; leaving it releases every hanging request and stops the server.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

ENDPOINT_PATH = "/v1/chat/completions"


@dataclass(frozen=True)
class Call:
    path: str
    authorization: str | None
    model: str | None
    body: dict[str, Any]

    @property
    def prompt(self) -> str:
        return str(self.body["messages"][-1]["content"])


@dataclass
class FakeLLM:
    reply: str = "summary from the fake model"
    default: str = "answer"
    script: list[str] = field(default_factory=list)
    status: int = 500
    calls: list[Call] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    gate: threading.Event = field(default_factory=threading.Event)
    _release: threading.Event = field(default_factory=threading.Event)
    _server: ThreadingHTTPServer | None = None
    _thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        assert self._server is not None, "the server is not running"
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    @property
    def call_count(self) -> int:
        with self._lock:
            return len(self.calls)

    def _next(self) -> str:
        return self.script.pop(0) if self.script else self.default

    def __enter__(self) -> FakeLLM:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:  # quiet
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                try:
                    body = json.loads(raw)
                except ValueError:
                    body = {}
                with fake._lock:
                    fake.calls.append(
                        Call(
                            path=self.path,
                            authorization=self.headers.get("Authorization"),
                            model=body.get("model") if isinstance(body, dict) else None,
                            body=body if isinstance(body, dict) else {},
                        )
                    )
                    behaviour = fake._next()
                    number = len(fake.calls)
                if self.path != ENDPOINT_PATH:
                    self._send(404, {"error": {"message": f"no route {self.path}"}})
                elif behaviour == "hang":
                    fake._release.wait(60)
                    self._send(200, {"choices": [{"message": {"content": "too late"}}]})
                elif behaviour == "hold":
                    fake.gate.wait(60)
                    text = fake.reply.format(n=number)
                    self._send(200, {"choices": [{"message": {"content": text}}]})
                elif behaviour == "error":
                    self._send(fake.status, {"error": {"message": "upstream exploded"}})
                else:
                    text = fake.reply.format(n=number)
                    self._send(200, {"choices": [{"message": {"content": text}}]})

            def _send(self, status: int, payload: dict[str, Any]) -> None:
                data = json.dumps(payload).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except OSError:  # the client gave up (timed out) already
                    pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        # shutdown() waits for the serving loop to look at its flag, once a poll interval:
        # the default 0.5 s was half a second added to every test that used the server.
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._release.set()
        self.gate.set()
        assert self._server is not None and self._thread is not None
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(10)


def running(**options: Any) -> Iterator[FakeLLM]:
    """For a fixture: ``yield from running(reply=...)``."""
    with FakeLLM(**options) as fake:
        yield fake
