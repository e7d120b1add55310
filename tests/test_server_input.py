"""The service's edges: what a request carries is refused with a 4xx naming it, never a 5xx.

Some requests here cannot be sent through an HTTP client as they are (a
chunked body generated as it is read, header values in raw bytes), so
``Raw`` drives the ASGI app itself, on the event loop of a ``TestClient``.
"""

from __future__ import annotations

import json
import tracemalloc
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from starlette.types import Message

from ctxwindow.server import Settings, create_app

from .conftest import async_stores
from .test_server import FakeUpstream

MB = 1 << 20


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes
    consumed: int  # body bytes the app read

    def json(self) -> Any:
        return json.loads(self.body)

    @property
    def error(self) -> dict[str, Any]:
        error: dict[str, Any] = self.json()["error"]
        return error


@dataclass
class Raw:
    """Requests as ASGI messages: raw header bytes, a body read only as the app asks."""

    client: TestClient
    app: FastAPI

    def request(
        self,
        method: str,
        path: str,
        *,
        headers: Iterable[tuple[bytes, bytes]] = (),
        chunks: Iterable[bytes] = (),
    ) -> Answer:
        portal = self.client.portal
        assert portal is not None
        return portal.call(self._call, method, path, list(headers), iter(chunks))

    async def _call(
        self, method: str, path: str, headers: list[tuple[bytes, bytes]], chunks: Iterator[bytes]
    ) -> Answer:
        consumed = 0
        sent: list[Message] = []

        async def receive() -> Message:
            nonlocal consumed
            chunk = next(chunks, None)
            if chunk is None:
                return {"type": "http.request", "body": b"", "more_body": False}
            consumed += len(chunk)
            return {"type": "http.request", "body": chunk, "more_body": True}

        async def send(message: Message) -> None:
            sent.append(message)

        path, _, query = path.partition("?")
        scope = {
            "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
            "method": method, "scheme": "http", "path": path, "raw_path": path.encode(),
            "query_string": query.encode(), "root_path": "", "client": ("127.0.0.1", 5000),
            "server": ("testserver", 80),
            "headers": [(b"host", b"testserver"), (b"content-type", b"application/json"),
                        *headers],
        }  # fmt: skip
        await self.app(scope, receive, send)
        start = next(m for m in sent if m["type"] == "http.response.start")
        body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
        answer_headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in start["headers"]}
        return Answer(start["status"], answer_headers, body, consumed)


def make_app(upstream: FakeUpstream, store: Any = None, **settings: Any) -> FastAPI:
    settings.setdefault("store", "memory://")
    settings.setdefault("upstream", "http://upstream.test/v1")
    return create_app(Settings(**settings), upstream_transport=upstream.transport(), store=store)


@pytest.fixture
def upstream() -> FakeUpstream:
    return FakeUpstream()


@pytest.fixture
def http(upstream: FakeUpstream) -> Iterator[TestClient]:
    with TestClient(make_app(upstream)) as client:
        yield client


@pytest.fixture(params=["memory", "sqlite", "redis", "postgresql"])
def on_every_store(
    request: pytest.FixtureRequest, upstream: FakeUpstream, tmp_path: Path
) -> Iterator[TestClient]:
    """A client of an app whose sessions live in each kind of store in turn."""
    with (
        async_stores(request.param, tmp_path) as open_store,
        TestClient(make_app(upstream, open_store()), raise_server_exceptions=False) as client,
    ):
        yield client


def raw(client: TestClient) -> Raw:
    assert isinstance(client.app, FastAPI)
    return Raw(client, client.app)


CHAT = "/v1/chat/completions"


def body(content: str = "Where is parcel A-1?", **fields: Any) -> dict[str, Any]:
    return {"model": "gpt-4o", "messages": [{"role": "user", "content": content}], **fields}


# -- point 1: a body is read only up to the limit ------------------------------------------


def endless(chunk: int = 64 * 1024, total: int = 64 * MB) -> Iterator[bytes]:
    """``total`` bytes of a JSON string, made one chunk at a time as they are read."""
    yield b'{"model": "gpt-4o", "messages": [{"role": "user", "content": "'
    for _ in range(total // chunk):
        yield b"x" * chunk


@pytest.mark.parametrize("route", [CHAT, "/v1/sessions/big/messages"])
@pytest.mark.parametrize(
    "declared",
    [[(b"transfer-encoding", b"chunked")], [(b"content-length", b"100")]],
    ids=["chunked", "lying-length"],
)
def test_a_body_over_the_limit_is_refused_without_reading_it_all(
    http: TestClient, route: str, declared: list[tuple[bytes, bytes]]
) -> None:
    """64 MB offered, no more than the 1 MB limit and a chunk read, little memory used."""
    tracemalloc.start()
    try:
        answer = raw(http).request("POST", route, headers=declared, chunks=endless())
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert (answer.status, answer.error["code"]) == (413, "request_too_large")
    assert answer.consumed <= 1_000_000 + 2 * 64 * 1024
    assert peak < 8 * MB
