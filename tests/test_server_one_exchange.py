"""Every protocol crosses the one exchange, and a new protocol is one ``Adapter`` class.

The exchange's send (``exchange._send``) is wrapped to record which adapter
each request went through: chat completions, Responses and Anthropic Messages
requests, streamed or not, with a session or without, all reach it, and only
once. A toy fourth protocol, written here as one small class and mounted with
one call, gets sessions, budgets, idempotent retries and stored replies from
the exchange without a line of its own for them.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from fastapi import APIRouter, Request, Response
from fastapi.testclient import TestClient

from ctxwindow.messages import Entry, Message
from ctxwindow.server import Settings, create_app, exchange
from ctxwindow.server.errors import APIError
from ctxwindow.server.openapi import object_body
from ctxwindow.server.protocols.base import Adapter
from ctxwindow.server.protocols.chat import StreamedReply
from ctxwindow.server.routes import add_route
from ctxwindow.server.service import Service

from .support.chat_upstream import FakeUpstream
from .support.protocol_upstreams import FakeMessages, FakeResponses


class Upstreams:
    """The three fake upstreams behind one transport, by path."""

    def __init__(self) -> None:
        self.chat, self.responses, self.messages = FakeUpstream(), FakeResponses(), FakeMessages()

    def handle(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if path.endswith("/responses"):
            return self.responses.handle(request)
        if path.endswith("/messages"):
            return self.messages.handle(request)
        return self.chat.handle(request)


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, bool]]:
    """(adapter class, streamed) of every request that reached the exchange's send."""
    calls: list[tuple[str, bool]] = []
    original = exchange._send

    async def recorded(service: Service, adapter: Adapter, *args: Any) -> Response:
        calls.append((type(adapter).__name__, adapter.stream))
        return await original(service, adapter, *args)

    monkeypatch.setattr(exchange, "_send", recorded)
    return calls


@pytest.fixture
def upstreams() -> Upstreams:
    return Upstreams()


@pytest.fixture
def http(upstreams: Upstreams) -> Iterator[TestClient]:
    settings = Settings(store="memory://", upstream="http://upstream.test/v1", archive="off")
    app = create_app(settings, upstream_transport=httpx.MockTransport(upstreams.handle))
    with TestClient(app) as client:
        yield client


REQUESTS: dict[str, tuple[str, dict[str, Any]]] = {
    "ChatCompletions": (
        "/v1/chat/completions",
        {"model": "gpt-4o", "messages": [{"role": "user", "content": "Where is parcel A-1?"}]},
    ),
    "Responses": ("/v1/responses", {"model": "gpt-4o", "input": "Where is parcel A-1?"}),
    "AnthropicMessages": (
        "/v1/messages",
        {
            "model": "claude-sonnet-4-5",
            "max_tokens": 100,
            "messages": [{"role": "user", "content": "Where is parcel A-1? 🚚"}],
        },
    ),
}


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("adapter", sorted(REQUESTS))
def test_every_protocol_crosses_the_same_exchange(
    http: TestClient, sent: list[tuple[str, bool]], adapter: str, stream: bool
) -> None:
    path, body = REQUESTS[adapter]
    stateless = {**body, "stream": stream, **({"store": False} if adapter == "Responses" else {})}
    assert http.post(path, json=stateless).status_code == 200
    answered = http.post(path, json={**body, "stream": stream}, headers={"X-Session-Id": "s"})
    assert answered.status_code == 200
    assert sent == [(adapter, stream), (adapter, stream)]
    stored = http.get("/v1/sessions/s/messages").json()["data"]
    assert [e["message"]["role"] for e in stored] == ["user", "assistant"]


@pytest.mark.parametrize("adapter", sorted(REQUESTS))
def test_a_retry_is_answered_by_the_exchange_without_sending(
    http: TestClient, sent: list[tuple[str, bool]], adapter: str
) -> None:
    path, body = REQUESTS[adapter]
    headers = {"X-Session-Id": "s", "Idempotency-Key": "k1"}
    first = http.post(path, json=body, headers=headers)
    again = http.post(path, json={**body, "stream": True}, headers=headers)
    assert first.status_code == again.status_code == 200
    assert again.headers["x-context-replayed"] == "true"
    assert sent == [(adapter, False)]  # the retry never reached the upstream


# -- a fourth protocol: one class ------------------------------------------------------------


class PlainText(Adapter):
    """A toy protocol: ``{"model": ..., "text": ...}`` in, ``{"text": ...}`` out."""

    path = "/v1/plain"
    upstream_path = "chat/completions"  # it speaks chat completions upstream
    schema = object_body(["model", "text"], {"text": {"type": "string"}})
    param = "text"

    def __init__(self, service: Service, request: Request, body: dict[str, Any]) -> None:
        if not isinstance(body.get("text"), str) or not isinstance(body.get("model"), str):
            raise APIError(400, "'model' and 'text' must be strings", param="text")
        super().__init__(service, request, body)
        self.turns = [{"role": "user", "content": body["text"]}]

    def forward(self, context: list[Message], stable: int) -> dict[str, Any]:
        return {"model": self.model, "messages": context}

    def reply(self, data: Any) -> Message | None:
        message: Message = data["choices"][0]["message"]
        return message

    def usage(self, data: Any) -> dict[str, Any] | None:
        return None

    def collector(self) -> StreamedReply:
        return StreamedReply()

    def answer(self, data: Any, raw: bytes) -> bytes:
        return json.dumps({"text": data["choices"][0]["message"]["content"]}).encode()

    def replay(self, entry: Entry) -> Response:
        body = json.dumps({"text": entry.message["content"]})
        return Response(body, headers={"X-Context-Replayed": "true"})


def test_a_fourth_protocol_is_one_class(
    http: TestClient, upstreams: Upstreams, sent: list[tuple[str, bool]]
) -> None:
    api = APIRouter()
    service = http.app.state.service  # type: ignore[attr-defined]
    add_route(api, service, PlainText, lambda: "default", name="plain", tag="plain")
    http.app.include_router(api)  # type: ignore[attr-defined]
    upstreams.chat.reply = "東京, this morning 🚚"
    headers = {"X-Session-Id": "p"}
    first = http.post("/v1/plain", json={"model": "gpt-4o", "text": "Where?"}, headers=headers)
    assert first.status_code == 200 and first.json() == {"text": "東京, this morning 🚚"}
    second = http.post("/v1/plain", json={"model": "gpt-4o", "text": "And A-2?"}, headers=headers)
    assert second.status_code == 200
    # The session's context was built by the exchange: the first turn and its stored reply.
    assert [m["content"] for m in upstreams.chat.last] == [
        "Where?", "東京, this morning 🚚", "And A-2?"
    ]  # fmt: skip
    assert sent == [("PlainText", False), ("PlainText", False)]
    assert int(second.headers["x-context-tokens"]) > int(first.headers["x-context-tokens"])
    # ... and its retries: the same key is answered from the store, through its replay.
    keyed = {"X-Session-Id": "q", "Idempotency-Key": "k1"}
    once = http.post("/v1/plain", json={"model": "gpt-4o", "text": "Hi"}, headers=keyed)
    again = http.post("/v1/plain", json={"model": "gpt-4o", "text": "Hi"}, headers=keyed)
    assert once.json() == again.json() == {"text": "東京, this morning 🚚"}
    assert again.headers["x-context-replayed"] == "true" and len(sent) == 3
