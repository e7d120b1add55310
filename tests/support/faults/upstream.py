"""An OpenAI-compatible upstream on 127.0.0.1 that fails on demand, over real HTTP.

``POST /v1/chat/completions`` records every body and answers according to
``mode``; ``GET /v1/models`` always answers (the service's readiness probe).
``POST /v1/responses`` and ``POST /v1/messages`` answer as the fakes of
``tests/support/protocol_upstreams.py`` do (mode "500" fails them too; the other
faults are chat completions' only).
Real sockets make the faults real: a reset is a TCP RST, a timeout is a
server that stops talking, a truncated body is a connection closed early.

==========  ======================================  ===========================================
mode        non-streamed answer                     streamed answer (chunked SSE)
==========  ======================================  ===========================================
ok          the completion                          the deltas, then ``data: [DONE]``
500         HTTP 500 with an error body             HTTP 500 with an error body
timeout     nothing for ``stall`` seconds           two deltas, then nothing for ``stall`` s
reset       half the body, then a TCP RST           two deltas, then a TCP RST
eof         half the body, then a clean close       two deltas, then a clean end, no ``[DONE]``
garbage     200 with a body that is not JSON        a delta, lines that are not SSE JSON, [DONE]
slow        the completion after ``gap`` seconds    the deltas ``gap`` seconds apart, [DONE]
late        the completion                          every event, [DONE], then a close before
                                                    the body's last chunk (all three protocols)
hangup      a clean close before any byte           a clean close before any byte
rst         a TCP RST before any byte               a TCP RST before any byte
silent      nothing for ``stall`` seconds           nothing for ``stall`` seconds
==========  ======================================  ===========================================

``gate``, when set, holds every completion until it is opened (bounded), so a
test can keep requests in flight while it breaks something else.
"""

from __future__ import annotations

import json
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.support.protocol_upstreams import FakeMessages, FakeResponses, ProtocolFake

MODES = ("ok", "500", "timeout", "reset", "eof", "garbage", "slow", "late", "hangup", "rst",
         "silent")  # fmt: skip
GATE_LIMIT = 60.0  # seconds a gated request waits at most: a forgotten gate cannot hang a test


def echo(body: dict[str, Any]) -> str:
    """The reply to a request: its last message, answered (tells which turn it answers)."""
    return f"answer to: {body['messages'][-1].get('content')}"


class FaultyUpstream:
    def __init__(self, reply: Callable[[dict[str, Any]], str] = echo) -> None:
        self.reply = reply
        self.mode = "ok"
        self.stall = 3.0  # seconds of silence in "timeout": longer than the service waits
        self.gap = 0.2  # seconds between the pieces of a "slow" answer
        self.requests: list[dict[str, Any]] = []
        self.gate: threading.Event | None = None
        self.arrived = threading.Semaphore(0)  # released once per request received
        self.base_url = ""
        self.protocols: dict[str, ProtocolFake] = {"responses": FakeResponses(),
                                                   "messages": FakeMessages()}  # fmt: skip

    def completion(self, body: dict[str, Any]) -> bytes:
        message = {"role": "assistant", "content": self.reply(body)}
        data = {
            "id": f"chatcmpl-{len(self.requests)}", "object": "chat.completion", "created": 0,
            "model": body.get("model", "gpt-4o"),
            "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
        }  # fmt: skip
        return json.dumps(data, ensure_ascii=False).encode()

    def events(self, body: dict[str, Any]) -> list[bytes]:
        """The SSE events of the reply, in pieces of four characters (no ``[DONE]``)."""
        text = self.reply(body)
        pieces = [text[i : i + 4] for i in range(0, len(text), 4)]
        return [
            b"data: "
            + json.dumps(
                {"id": "c", "object": "chat.completion.chunk", "created": 0,
                 "model": body.get("model", "gpt-4o"),
                 "choices": [{"index": 0, "delta": {"content": piece}, "finish_reason": None}]},
                ensure_ascii=False,
            ).encode()
            + b"\n\n"
            for piece in pieces
        ]  # fmt: skip

    def wait_for_requests(self, n: int, timeout: float = 30.0) -> None:
        """Block until ``n`` more requests have arrived (a bound, not a measurement)."""
        for _ in range(n):
            if not self.arrived.acquire(timeout=timeout):
                raise TimeoutError(f"the upstream did not receive {n} requests in {timeout} s")


DONE = b"data: [DONE]\n\n"
GARBAGE = [b'data: {"choices": [{"delta": {"content": "un', b"\xff\xfe not utf-8 \x00", b"data: ]["]


def _handler(fake: FaultyUpstream) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            self._send(200, b'{"object": "list", "data": []}')

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            fake.requests.append(body)
            fake.arrived.release()
            if fake.gate is not None:
                fake.gate.wait(GATE_LIMIT)
            protocol = fake.protocols.get(self.path.rsplit("/", 1)[-1])
            if fake.mode in ("hangup", "rst", "silent"):
                if fake.mode == "silent":
                    time.sleep(fake.stall)
                self._close(reset=fake.mode == "rst")
            elif fake.mode == "500":
                self._send(500, b'{"error": {"message": "boom", "type": "server_error"}}')
            elif protocol is not None:
                self._answer(protocol, body)
            elif body.get("stream"):
                self._stream(body)
            else:
                self._complete(body)

        def _answer(self, protocol: ProtocolFake, body: dict[str, Any]) -> None:
            answer = protocol.answer(body)
            if body.get("stream") and fake.mode == "late":
                self._head(200, "text/event-stream")
                self._chunk(protocol.events(answer))
                self._close()  # no last chunk: the client's read ends incomplete
            elif body.get("stream"):
                self._send(200, protocol.events(answer), "text/event-stream")
            else:
                self._send(200, json.dumps(answer).encode())

        def _complete(self, body: dict[str, Any]) -> None:
            data = fake.completion(body)
            if fake.mode == "timeout":
                time.sleep(fake.stall)
                self._close()
            elif fake.mode in ("reset", "eof"):
                self._head(200, "application/json", length=len(data))
                self.wfile.write(data[: len(data) // 2])
                self.wfile.flush()
                self._close(reset=fake.mode == "reset")
            elif fake.mode == "garbage":
                self._send(200, b"<html>502 Bad Gateway</html>", "application/json")
            else:
                if fake.mode == "slow":
                    time.sleep(fake.gap)
                self._send(200, data)

        def _stream(self, body: dict[str, Any]) -> None:
            events = fake.events(body)
            self._head(200, "text/event-stream")
            if fake.mode in ("timeout", "reset", "eof"):
                for event in events[:2]:
                    self._chunk(event)
                if fake.mode == "timeout":
                    time.sleep(fake.stall)
                    self._close()
                elif fake.mode == "reset":
                    self._close(reset=True)
                else:
                    self._chunk(b"")  # the last chunk: a clean end of the HTTP body
                    self._close()
                return
            if fake.mode == "garbage":
                events = events[:1] + [line + b"\n\n" for line in GARBAGE]
            for event in events:
                if fake.mode == "slow":
                    time.sleep(fake.gap)
                self._chunk(event)
            self._chunk(DONE)
            if fake.mode == "late":
                self._close()  # no last chunk: the client's read ends incomplete
                return
            self._chunk(b"")

        def _head(self, status: int, media: str, length: int | None = None) -> None:
            self.send_response(status)
            self.send_header("Content-Type", media)
            if length is None:
                self.send_header("Transfer-Encoding", "chunked")
            else:
                self.send_header("Content-Length", str(length))
            self.end_headers()
            self.wfile.flush()

        def _send(self, status: int, data: bytes, media: str = "application/json") -> None:
            self._head(status, media, length=len(data))
            self.wfile.write(data)
            self.wfile.flush()

        def _chunk(self, data: bytes) -> None:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()

        def _close(self, *, reset: bool = False) -> None:
            if reset:  # linger 0: close() sends RST instead of FIN
                self.connection.setsockopt(
                    socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)
                )
            self.close_connection = True
            self.connection.close()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # the faults close sockets under the handler on purpose


@contextmanager
def faulty_upstream(reply: Callable[[dict[str, Any]], str] = echo) -> Iterator[FaultyUpstream]:
    fake = FaultyUpstream(reply)
    server = _Server(("127.0.0.1", 0), _handler(fake))
    fake.base_url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield fake
    finally:
        if fake.gate is not None:
            fake.gate.set()
        server.shutdown()
        server.server_close()
        thread.join()
