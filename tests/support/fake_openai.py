"""A scriptable OpenAI-compatible endpoint on 127.0.0.1 for the compression tests.

Real HTTP, in-process: ``POST /v1/chat/completions`` records the body and the
headers (names lowercased) of every request and answers with ``reply(body)`` — or with the
error ``status`` when it is set, or with ``raw`` (a content type and a body) when that is.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class FakeOpenAI:
    def __init__(self, reply: Callable[[dict[str, Any]], str]) -> None:
        self.reply = reply
        self.status = 200
        self.raw: tuple[str, bytes] | None = None
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.base_url = ""

    def answer(self, body: dict[str, Any]) -> dict[str, Any]:
        if self.status != 200:
            return {"error": {"message": "boom", "type": "server_error", "code": None}}
        return {
            "id": f"chatcmpl-{len(self.requests)}",
            "object": "chat.completion",
            "created": 0,
            "model": body["model"],
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": self.reply(body)},
                    "finish_reason": "stop",
                }
            ],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
        }


def _handler(fake: FakeOpenAI) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            fake.requests.append(body)
            fake.headers.append({k.lower(): v for k, v in self.headers.items()})
            kind, data = fake.raw or ("application/json", json.dumps(fake.answer(body)).encode())
            self.send_response(fake.status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler


@contextmanager
def fake_openai(reply: Callable[[dict[str, Any]], str]) -> Iterator[FakeOpenAI]:
    fake = FakeOpenAI(reply)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(fake))
    fake.base_url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield fake
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
