"""An in-process OpenAI-compatible endpoint for tests: the only fake in the suite.

It speaks ``POST /v1/chat/completions`` over real HTTP on 127.0.0.1, records
every request body, and answers like a model that can only read its context:
asked about "fact N", it replies with the codes ``K...`` of the messages in
the context that state those facts, or "I don't know". Asked to judge (the
system prompt of ``ctxwindow.eval.llm``), it says YES when the candidate
contains the reference answer.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class FakeLLM:
    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.base_url = ""

    def reply(self, body: dict[str, Any]) -> str:
        messages = body["messages"]
        if messages[0]["role"] == "system" and "grade answers" in messages[0]["content"]:
            text = messages[-1]["content"]
            reference = re.search(r"Reference answer: (.*)\n", text)
            candidate = text.split("Candidate answer: ", 1)[1]
            return "YES" if reference and reference.group(1) in candidate else "NO"
        wanted = re.findall(r"\d+", messages[-1]["content"])
        codes = []
        for number in wanted:
            for message in messages[:-1]:
                found = re.search(
                    rf"Fact {number}: the code is (K\d+)", message.get("content") or ""
                )
                if found:
                    codes.append(found.group(1))
        return " ".join(codes) or "I don't know."


def _handler(fake: FakeLLM) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers["Content-Length"])
            body = json.loads(self.rfile.read(length))
            fake.requests.append(body)
            answer = {
                "id": f"chatcmpl-{len(fake.requests)}",
                "object": "chat.completion",
                "created": 0,
                "model": body["model"],
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": fake.reply(body)},
                        "finish_reason": "stop",
                    }
                ],
                "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
            }
            data = json.dumps(answer).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler


@contextmanager
def fake_llm() -> Iterator[FakeLLM]:
    fake = FakeLLM()
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
