"""Upstream faults: the client gets an error, no partial reply is stored, a retry is fresh.

The upstream is real HTTP on loopback (``tests/faults/upstream.py``): a 500, a
read timeout, a TCP reset, a clean end without ``[DONE]`` (or a cut body),
lines that are not SSE JSON, and a close or a reset before any byte, each
streamed and not. A non-streamed failure is
a 502 (504 for a timeout); a streamed one is a 502/504 before the first byte
or an SSE error event (``data: {"error": ...}``) after it, and never
``[DONE]``. The session then holds the question but no answer, and a retry
with the same ``Idempotency-Key`` asks upstream again and stores one whole
answer (it does not replay a cut one). A slow stream that keeps within the
timeout is no fault: it is relayed and stored whole.

The app runs in-process on a SQLite store. Budget: ~15 s on 2 cores (the two
timeouts wait 1.5 s each).
"""

from __future__ import annotations

import asyncio
import json
import socket
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from ctxwindow.server import Settings, create_app
from ctxwindow.server.metrics import Metrics
from ctxwindow.server.upstream import Upstream
from tests.support.faults.upstream import FaultyUpstream

FAULTS = ["500", "timeout", "reset", "eof", "garbage", "hangup", "rst"]
UPSTREAM_TIMEOUT = 1.5  # the fake stalls for 3 s in "timeout"


@pytest.fixture
def http(tmp_path: Path, upstream: FaultyUpstream) -> Iterator[TestClient]:
    settings = Settings(
        store=f"sqlite:///{tmp_path / 'sessions.db'}", upstream=upstream.base_url,
        data_dir=tmp_path, upstream_timeout=UPSTREAM_TIMEOUT,
    )  # fmt: skip
    with TestClient(create_app(settings), raise_server_exceptions=False) as client:
        yield client


def ask(http: TestClient, sid: str, text: str, key: str, stream: bool) -> httpx.Response:
    body = {"model": "gpt-4o", "messages": [{"role": "user", "content": text}], "stream": stream}
    return http.post(
        "/v1/chat/completions", json=body, headers={"X-Session-Id": sid, "Idempotency-Key": key}
    )


def events(response: httpx.Response) -> list[Any]:
    """The ``data:`` payloads of an SSE body (JSON decoded, ``[DONE]`` as the string)."""
    out: list[Any] = []
    for line in response.content.split(b"\n"):
        if line.startswith(b"data:"):
            payload = line[5:].strip()
            out.append("[DONE]" if payload == b"[DONE]" else json.loads(payload))
    return out


def answer_of(response: httpx.Response, stream: bool) -> str:
    if not stream:
        content: str = response.json()["choices"][0]["message"]["content"]
        return content
    return "".join(
        e["choices"][0]["delta"].get("content") or "" for e in events(response) if e != "[DONE]"
    )


def assert_upstream_error(response: httpx.Response, stream: bool, mode: str) -> None:
    """A 502 (504 for a timeout) before any byte, or an SSE error event and no ``[DONE]``."""
    expected = 504 if mode == "timeout" else 502
    if response.status_code != 200 or not stream:
        assert response.status_code == expected, response.text[:400]
        assert "error" in response.json()
        return
    assert response.headers["content-type"].startswith("text/event-stream")
    sent = events(response)
    assert "[DONE]" not in sent, f"a failed stream ended as complete: {sent}"
    errors = [e for e in sent if isinstance(e, dict) and "error" in e]
    assert errors, f"no error event in a failed stream: {response.content[-300:]!r}"


def stored(http: TestClient, sid: str) -> list[tuple[str, str]]:
    response = http.get(f"/v1/sessions/{sid}/messages")
    assert response.status_code == 200, response.text
    return [(e["message"]["role"], e["message"]["content"]) for e in response.json()["data"]]


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize("mode", FAULTS)
def test_a_failed_upstream_stores_no_reply_and_a_retry_asks_again(
    http: TestClient, upstream: FaultyUpstream, mode: str, stream: bool
) -> None:
    sid, key = f"{mode}-{stream}-{uuid.uuid4().hex[:6]}", f"key-{mode}"
    question = f"Where is parcel 7 — 東京 ({mode})? 🚚"
    upstream.mode = mode
    assert_upstream_error(ask(http, sid, question, key, stream), stream, mode)
    assert stored(http, sid) == [("user", question)], "a partial reply was stored"
    upstream.mode = "ok"
    retry = ask(http, sid, question, key, stream)
    assert retry.status_code == 200, retry.text[:400]
    assert "x-context-replayed" not in retry.headers, "a failed answer was replayed"
    answer = f"answer to: {question}"
    assert answer_of(retry, stream) == answer
    assert stored(http, sid) == [("user", question), ("assistant", answer)]
    assert len(upstream.requests) == 2


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_a_slow_upstream_within_the_timeout_is_answered_whole(
    http: TestClient, upstream: FaultyUpstream, stream: bool
) -> None:
    """Pieces 0.2 s apart (each well within the 1.5 s timeout): relayed and stored whole."""
    sid, question = f"slow-{stream}", "Which depot ships to 大阪 and Zürich? 📦"
    upstream.mode = "slow"
    response = ask(http, sid, question, "slow", stream)
    assert response.status_code == 200, response.text[:400]
    answer = f"answer to: {question}"
    assert answer_of(response, stream) == answer
    if stream:
        assert events(response)[-1] == "[DONE]"
    assert stored(http, sid) == [("user", question), ("assistant", answer)]


@pytest.mark.parametrize("mode", FAULTS)
def test_a_failed_stateless_stream_ends_with_an_error(
    http: TestClient, upstream: FaultyUpstream, mode: str
) -> None:
    """Without a session nothing is stored, but the client still learns the stream failed."""
    upstream.mode = mode
    body = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    assert_upstream_error(http.post("/v1/chat/completions", json=body), True, mode)


# What the client is told of an upstream that fails before its first byte: status, code,
# message, and the kind the error metric counts. httpx's own transport names them so; the
# service's (httpx on aiohttp) must too.
BEFORE_ANY_BYTE = {
    "refused": (502, "bad_gateway", "upstream unreachable: ConnectError", "connect"),
    "hangup": (502, "bad_gateway", "upstream unreachable: RemoteProtocolError", "connect"),
    "rst": (502, "bad_gateway", "upstream unreachable: ReadError", "connect"),
    "silent": (504, "upstream_timeout", "upstream timed out", "timeout"),
}


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port  # nothing listens on it now: a connection is refused


@pytest.mark.parametrize("transport", ["service", "httpx"])
@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize("mode", list(BEFORE_ANY_BYTE))
def test_a_failure_before_the_answer_is_named_as_httpx_names_it(
    tmp_path: Path, upstream: FaultyUpstream, mode: str, stream: bool, transport: str
) -> None:
    """The service's transport for bodies read whole (httpx-aiohttp, which calls every
    connection error a ``ConnectTimeout``) tells a refused, closed or reset connection apart
    from a timeout, exactly as httpx's own transport does (the service's for streams)."""
    url = f"http://127.0.0.1:{closed_port()}/v1" if mode == "refused" else upstream.base_url
    upstream.mode = mode
    settings = Settings(
        store=f"sqlite:///{tmp_path / 'sessions.db'}", upstream=url, data_dir=tmp_path,
        upstream_timeout=UPSTREAM_TIMEOUT,
    )  # fmt: skip
    chosen = httpx.AsyncHTTPTransport() if transport == "httpx" else None
    status, code, message, kind = BEFORE_ANY_BYTE[mode]
    with TestClient(create_app(settings, upstream_transport=chosen)) as http:
        response = ask(http, f"early-{mode}", "Which depot ships to 大阪? 📦", mode, stream)
        assert response.status_code == status, response.text[:400]
        error = response.json()["error"]
        assert (error["code"], error["message"]) == (code, message)
        assert stored(http, f"early-{mode}") == [("user", "Which depot ships to 大阪? 📦")]
        counted = http.get("/metrics").text
        assert f'ctxwindow_upstream_errors_total{{kind="{kind}"}} 1.0' in counted, counted


def test_a_stream_relays_every_byte_that_came_before_its_connection_broke() -> None:
    """The upstream sends its last event and closes without ending the chunked body, the
    close arriving before the relay reads: the events come first, then the error (aiohttp's
    reader raises the error and drops the bytes it buffered, so a stream whose
    ``[DONE]`` came with a bad close lost its reply)."""
    delta = '{"choices": [{"delta": {"content": "大阪 🚚"}}]}'
    events = f"data: {delta}\n\ndata: [DONE]\n\n".encode()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
        await reader.readexactly(length)
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
            b"transfer-encoding: chunked\r\n\r\n" + b"%x\r\n%s\r\n" % (len(events), events)
        )  # and no last chunk
        await writer.drain()
        writer.close()

    async def run() -> tuple[bytes, BaseException | None]:
        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        settings = Settings(store="memory://", upstream=f"http://127.0.0.1:{port}/v1")
        upstream = Upstream(settings, Metrics(None, None, settings.model_registry))
        body = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}], "stream": True}
        got, error = b"", None
        try:
            response = await upstream.open("chat/completions", body)
            await asyncio.sleep(0.2)  # the close is in before the first read
            try:
                async for chunk in response.aiter_bytes():
                    got += chunk
            except httpx.HTTPError as exc:
                error = exc
            finally:
                await response.aclose()
        finally:
            await upstream.aclose()
            server.close()
            await server.wait_closed()
        return got, error

    got, error = asyncio.run(run())
    assert got == events
    assert isinstance(error, httpx.RemoteProtocolError), error
