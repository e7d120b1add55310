"""The HTTP service, in-process: the real ``openai`` SDK against the app, a fake upstream.

The upstream is an ``httpx.MockTransport`` that records every body it receives,
so each test asserts the exact context the model was sent.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from pydantic import SecretStr, ValidationError

from ctxwindow import count_tokens
from ctxwindow.server import Settings, create_app
from tests.support.chat_upstream import FakeUpstream, _completion, _sse, chat

from .support.stores import async_stores


@pytest.fixture
def upstream() -> FakeUpstream:
    return FakeUpstream()


@pytest.fixture(autouse=True, params=["memory", "sqlite", "redis", "postgresql"])
def store_kind(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """Every app built by ``make_app`` keeps its sessions in each kind of store in turn."""
    with async_stores(request.param, tmp_path) as open_store:
        _STORES[:] = [open_store]
        yield request.param
        _STORES.clear()


_STORES: list[Any] = []  # opens a store on the running test's data


def make_app(upstream: FakeUpstream, **settings: Any) -> FastAPI:
    settings.setdefault("store", "memory://")
    settings.setdefault("upstream", "http://upstream.test/v1")
    return create_app(Settings(**settings), upstream_transport=upstream.transport(), store=_store())


def _store() -> Any:
    """A store on the test's data: every app of a test shares it, as processes would."""
    return _STORES[0]() if _STORES else None


@pytest.fixture
def http(upstream: FakeUpstream) -> Iterator[TestClient]:
    with TestClient(make_app(upstream)) as client:
        yield client


def sdk(http: TestClient, **headers: str) -> openai.OpenAI:
    return openai.OpenAI(
        base_url="http://testserver/v1", api_key="none", http_client=http, max_retries=0,
        default_headers=headers,
    )  # fmt: skip


def test_sync_sdk_builds_the_context_from_the_stored_session(
    http: TestClient, upstream: FakeUpstream
) -> None:
    """Each request sends only new turns; upstream gets system + whole history."""
    client = sdk(http, **{"X-Session-Id": "s1"})
    client.chat.completions.create(
        model="gpt-4o",
        messages=[
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Where is my parcel to Lyon?"},
        ],
    )
    upstream.reply = "second"
    reply = client.chat.completions.create(
        model="gpt-4o", messages=[{"role": "user", "content": "我的订单是 A-1042 🙂"}]
    )
    assert reply.choices[0].message.content == "second"
    assert upstream.last == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Where is my parcel to Lyon?"},
        {"role": "assistant", "content": "It left the depot this morning."},
        {"role": "user", "content": "我的订单是 A-1042 🙂"},
    ]


def test_response_headers_report_the_context(http: TestClient, upstream: FakeUpstream) -> None:
    """X-Context-Tokens is the exact prompt token count of what upstream received."""
    response = http.post(
        "/v1/chat/completions",
        headers={"X-Session-Id": "h"},
        json={"model": "gpt-4o", "messages": [{"role": "user", "content": "Track order A-7"}]},
    )
    assert response.status_code == 200
    assert response.json() == _completion(upstream.reply, "gpt-4o")
    assert int(response.headers["X-Context-Tokens"]) == count_tokens(upstream.last, "gpt-4o")
    assert response.headers["X-Context-Evicted"] == "0"
    assert response.headers["X-Context-Recalled"] == "0"


def test_the_budget_is_kept_and_the_system_prompt_stays(
    http: TestClient, upstream: FakeUpstream
) -> None:
    """With X-Context-Max-Tokens the context fits; old turns go, the system prompt stays."""
    client = sdk(http, **{"X-Session-Id": "long", "X-Context-Max-Tokens": "300"})
    client.chat.completions.create(
        model="gpt-4o",
        messages=[
            {"role": "system", "content": "You are a courier assistant."},
            {"role": "user", "content": "Order A-1 is a blue lamp for Lyon."},
        ],
    )
    for i in range(40):
        upstream.reply = f"Noted item {i}: parcel number {1000 + i} goes to depot {i % 7}."
        client.chat.completions.create(
            model="gpt-4o",
            messages=[{"role": "user", "content": f"Add item {i}: a crate of {i} tiles, fragile."}],
        )
    response = chat(http, "Which order goes to Lyon?", "long", **{"X-Context-Max-Tokens": "300"})
    assert int(response.headers["X-Context-Evicted"]) > 0
    sent = upstream.last
    assert count_tokens(sent, "gpt-4o") <= 300
    assert int(response.headers["X-Context-Tokens"]) == count_tokens(sent, "gpt-4o")
    assert sent[0] == {"role": "system", "content": "You are a courier assistant."}
    assert sent[-1]["content"] == "Which order goes to Lyon?"
    assert len(sent) < 82


def test_max_tokens_narrows_the_budget(upstream: FakeUpstream) -> None:
    """The budget is the ratio of the window minus the request's max_tokens."""
    with TestClient(make_app(upstream, budget_ratio=0.001)) as http:  # gpt-4o: 128 tokens
        ok = {"model": "gpt-4o", "messages": [{"role": "user", "content": "Parcel A-1 status"}]}
        assert http.post("/v1/chat/completions", json=ok).status_code == 200
        too_much = {**ok, "max_tokens": 200}
        response = http.post("/v1/chat/completions", json=too_much)
        assert response.status_code == 400
        assert response.json()["error"]["code"] == "context_length_exceeded"


def test_stateless_requests_pass_through_budget_checked(
    http: TestClient, upstream: FakeUpstream
) -> None:
    """Without a session id the messages go upstream as sent; over budget is a 400."""
    messages = [{"role": "user", "content": "Bonjour, où est mon colis ?"}]
    reply = sdk(http).chat.completions.create(model="gpt-4o", messages=messages)  # type: ignore[arg-type]
    assert reply.choices[0].message.content == upstream.reply
    assert upstream.last == messages
    big = [{"role": "user", "content": "word " * 2000}]
    response = http.post(
        "/v1/chat/completions",
        headers={"X-Context-Max-Tokens": "100"},
        json={"model": "gpt-4o", "messages": big},
    )
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "context_length_exceeded"
    assert len(upstream.requests) == 1


def test_session_id_from_metadata_is_not_forwarded(
    http: TestClient, upstream: FakeUpstream
) -> None:
    body = {
        "model": "gpt-4o",
        "messages": [{"role": "user", "content": "Parcel B-2 please"}],
        "metadata": {"session_id": "m1"},
    }
    assert http.post("/v1/chat/completions", json=body).status_code == 200
    assert "metadata" not in upstream.requests[-1]
    stored = http.get("/v1/sessions/m1/messages").json()["data"]
    assert [e["message"]["role"] for e in stored] == ["user", "assistant"]


def test_streaming_passes_chunks_and_stores_the_reply(
    http: TestClient, upstream: FakeUpstream
) -> None:
    client = sdk(http, **{"X-Session-Id": "st"})
    upstream.reply = "Your parcel is in Lyon — 到了 🚚"
    stream = client.chat.completions.create(
        model="gpt-4o", messages=[{"role": "user", "content": "Where is parcel C-3?"}], stream=True
    )
    text = "".join(chunk.choices[0].delta.content or "" for chunk in stream)
    assert text == upstream.reply
    stored = http.get("/v1/sessions/st/messages").json()["data"]
    assert stored[-1]["message"] == {"role": "assistant", "content": upstream.reply}
    assert upstream.requests[-1]["stream"] is True


def test_async_sdk_through_asgi_transport(upstream: FakeUpstream) -> None:
    """The async SDK over httpx.ASGITransport, streaming and not."""
    asyncio.run(_async_conversation(upstream))


async def _async_conversation(upstream: FakeUpstream) -> None:
    app = make_app(upstream)
    transport = httpx.ASGITransport(app=app)
    async with (  # the lifespan closes the store (else its connections leak)
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=transport, base_url="http://testserver") as http,
    ):
        client = openai.AsyncOpenAI(
            # this openai release is typed against httpx2; a plain httpx client works too
            base_url="http://testserver/v1", api_key="none", http_client=http,  # type: ignore[arg-type]
            max_retries=0,
            default_headers={"X-Session-Id": "a1"},
        )  # fmt: skip
        reply = await client.chat.completions.create(
            model="gpt-4o", messages=[{"role": "user", "content": "Parcel D-4 to Kyoto"}]
        )
        assert reply.choices[0].message.content == upstream.reply
        upstream.reply = "京都に着きました"
        stream = await client.chat.completions.create(
            model="gpt-4o", messages=[{"role": "user", "content": "And now?"}], stream=True
        )
        text = "".join([c.choices[0].delta.content or "" async for c in stream])
        assert text == "京都に着きました"
        assert [m["role"] for m in upstream.last] == ["user", "assistant", "user"]
        history = (await http.get("/v1/sessions/a1/messages")).json()["data"]
        assert history[-1]["message"]["content"] == "京都に着きました"


@pytest.mark.parametrize(
    ("fail", "status"),
    [("connect", 502), ("500", 502), ("malformed", 502), ("no-choices", 502), ("timeout", 504)],
)
def test_upstream_failures_keep_the_turn_unanswered(
    http: TestClient, upstream: FakeUpstream, fail: str, status: int
) -> None:
    """A failed upstream is a 502/504 with an OpenAI error; the user turn stays stored."""
    upstream.fail = fail
    response = chat(http, "Where is parcel E-5?")
    assert response.status_code == status
    assert set(response.json()["error"]) == {"message", "type", "param", "code"}
    stored = http.get("/v1/sessions/s/messages").json()["data"]
    assert [e["message"]["content"] for e in stored] == ["Where is parcel E-5?"]
    assert stored[0]["metadata"]["unanswered"] is True


def test_sdk_sees_upstream_failure_as_api_error(http: TestClient, upstream: FakeUpstream) -> None:
    upstream.fail = "500"
    with pytest.raises(openai.InternalServerError) as caught:
        sdk(http, **{"X-Session-Id": "x"}).chat.completions.create(
            model="gpt-4o", messages=[{"role": "user", "content": "Parcel F-6?"}]
        )
    assert caught.value.status_code == 502


def test_retry_with_the_same_idempotency_key_duplicates_nothing(
    http: TestClient, upstream: FakeUpstream
) -> None:
    """After an upstream failure, a retry with the same key stores each turn once."""
    upstream.fail = "connect"
    assert chat(http, "Parcel G-7 to Osaka?", **{"Idempotency-Key": "k1"}).status_code == 502
    upstream.fail = None
    first = chat(http, "Parcel G-7 to Osaka?", **{"Idempotency-Key": "k1"})
    again = chat(http, "Parcel G-7 to Osaka?", **{"Idempotency-Key": "k1"})
    assert first.status_code == again.status_code == 200
    assert again.json()["choices"][0]["message"] == first.json()["choices"][0]["message"]
    stored = http.get("/v1/sessions/s/messages").json()["data"]
    assert [e["message"]["role"] for e in stored] == ["user", "assistant"]
    assert "unanswered" not in stored[0]["metadata"]
    assert len(upstream.requests) == 2  # the third is answered from the store
    assert upstream.last == [{"role": "user", "content": "Parcel G-7 to Osaka?"}]


@pytest.fixture
def tenants(upstream: FakeUpstream) -> Iterator[TestClient]:
    app = make_app(upstream, api_keys={"key-a": "alice", "key-b": "bob"})
    with TestClient(app) as client:
        yield client


def test_api_keys_are_required_when_configured(tenants: TestClient) -> None:
    response = chat(tenants, "Parcel H-8?")
    assert response.status_code == 401
    assert response.json()["error"]["type"] == "authentication_error"
    assert chat(tenants, "Parcel H-8?", Authorization="Bearer wrong").status_code == 401
    assert chat(tenants, "Parcel H-8?", Authorization="Bearer key-a").status_code == 200


def test_sessions_are_isolated_per_tenant(tenants: TestClient, upstream: FakeUpstream) -> None:
    """Bob cannot read, build or delete Alice's session: 404; his own 's' is separate."""
    alice = {"Authorization": "Bearer key-a"}
    bob = {"Authorization": "Bearer key-b"}
    assert chat(tenants, "Alice's secret parcel", **alice).status_code == 200
    for method, path in [
        ("GET", "/v1/sessions/s/messages"),
        ("GET", "/v1/sessions/s/context"),
        ("DELETE", "/v1/sessions/s"),
    ]:
        response = tenants.request(method, path, headers=bob)
        assert response.status_code == 404, path
        assert response.json()["error"]["code"] == "session_not_found"
    assert chat(tenants, "Bob's parcel", **bob).status_code == 200
    assert upstream.last == [{"role": "user", "content": "Bob's parcel"}]
    data = tenants.get("/v1/sessions/s/messages", headers=alice).json()["data"]
    assert data[0]["message"]["content"] == "Alice's secret parcel"


def test_request_size_limits(upstream: FakeUpstream) -> None:
    app = make_app(
        upstream, max_request_bytes=2000, max_message_chars=100, max_messages_per_session=2
    )
    with TestClient(app) as http:
        response = chat(http, "x" * 3000)
        assert (response.status_code, response.json()["error"]["code"]) == (
            413, "request_too_large",
        )  # fmt: skip
        response = chat(http, "y" * 101)
        assert (response.status_code, response.json()["error"]["code"]) == (
            413, "message_too_large",
        )  # fmt: skip
        assert chat(http, "Parcel I-9?").status_code == 200  # 2 messages stored
        response = chat(http, "Parcel J-10?")
        assert (response.status_code, response.json()["error"]["code"]) == (413, "session_full")


def test_rate_limit_per_tenant(upstream: FakeUpstream) -> None:
    now = [0.0]
    settings = Settings(
        store="memory://", upstream="http://u.test/v1", rate_limit_per_minute=2,
        api_keys={"ka": "a", "kb": "b"},
    )  # fmt: skip
    app = create_app(settings, upstream_transport=upstream.transport(), clock=lambda: now[0])
    with TestClient(app) as http:
        a = {"Authorization": "Bearer ka"}
        assert chat(http, "one", **a).status_code == 200
        assert chat(http, "two", **a).status_code == 200
        response = chat(http, "three", **a)
        assert response.status_code == 429
        assert response.json()["error"]["type"] == "rate_limit_error"
        assert chat(http, "other tenant", Authorization="Bearer kb").status_code == 200
        now[0] = 61.0
        assert chat(http, "later", **a).status_code == 200


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"model": "gpt-4o", "messages": []}, "messages"),
        ({"model": "gpt-4o"}, "messages"),
        ({"messages": [{"role": "user", "content": "hi"}]}, "model"),
        ({"model": "no-such-model", "messages": [{"role": "user", "content": "hi"}]}, "model"),
        ({"model": "gpt-4o", "messages": [{"role": "wizard", "content": "hi"}]}, "messages"),
    ],
)
def test_invalid_requests_are_400(http: TestClient, body: dict[str, Any], param: str) -> None:
    response = http.post("/v1/chat/completions", headers={"X-Session-Id": "v"}, json=body)
    assert response.status_code == 400
    assert response.json()["error"]["param"] == param


def test_invalid_json_is_400(http: TestClient) -> None:
    response = http.post("/v1/chat/completions", content=b"{not json")
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_json"


def test_sessions_api(http: TestClient, upstream: FakeUpstream) -> None:
    """Append without the model, page through, inspect the context, delete."""
    turns = [
        {"role": "system", "content": "You are a courier assistant."},
        {"role": "user", "content": "Parcel K-11 goes to Berlin."},
        {"role": "assistant", "content": "Noted: K-11 to Berlin."},
    ]
    response = http.post("/v1/sessions/api/messages", json={"messages": turns})
    assert response.status_code == 200
    assert [e["seq"] for e in response.json()["data"]] == [1, 2, 3]
    assert not upstream.requests
    page = http.get("/v1/sessions/api/messages", params={"after": 1, "limit": 1}).json()
    assert [e["message"] for e in page["data"]] == [turns[1]]
    context = http.get("/v1/sessions/api/context", params={"max_tokens": 500}).json()
    assert context["messages"] == turns
    assert context["report"]["budget"] == 500
    assert context["total_tokens"] == count_tokens(turns, "gpt-4o")
    assert [row["seq"] for row in context["report"]["decisions"]] == [1, 2, 3]
    assert context["has_more"] is False
    paged = http.get("/v1/sessions/api/context", params={"after": 1, "limit": 1}).json()
    assert [row["seq"] for row in paged["report"]["decisions"]] == [2]
    assert paged["has_more"] is True and paged["messages"] == turns
    assert paged["report"]["evicted_entries"] == context["report"]["evicted_entries"]
    assert http.delete("/v1/sessions/api").json()["deleted"] is True
    assert http.get("/v1/sessions/api/messages").status_code == 404
    assert http.delete("/v1/sessions/api").status_code == 404


def test_health_readiness_metrics_and_openapi(http: TestClient, upstream: FakeUpstream) -> None:
    assert http.get("/healthz").json() == {"status": "ok"}
    assert http.get("/readyz").json() == {"ready": True, "store": True, "upstream": True}
    assert chat(http, "Parcel L-12 to Rome").status_code == 200
    upstream.fail = "timeout"
    chat(http, "Parcel L-12 again")
    text = http.get("/metrics").text
    assert "ctxwindow_prompt_tokens_count 2.0" in text
    assert 'ctxwindow_upstream_errors_total{kind="timeout"} 1.0' in text
    assert "ctxwindow_upstream_latency_seconds_count 1.0" in text
    paths = set(http.get("/openapi.json").json()["paths"])
    assert paths >= {
        "/v1/chat/completions", "/v1/sessions/{session_id}/messages",
        "/v1/sessions/{session_id}/context", "/v1/sessions/{session_id}", "/healthz",
        "/readyz", "/metrics",
    }  # fmt: skip


def test_readyz_fails_when_upstream_is_unreachable(upstream: FakeUpstream) -> None:
    def down(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    app = create_app(
        Settings(store="memory://", upstream="http://u.test/v1"),
        upstream_transport=httpx.MockTransport(down),
    )
    with TestClient(app) as http:
        response = http.get("/readyz")
    assert response.status_code == 503
    assert response.json()["upstream"] is False


def test_redactions_are_exported_from_the_redactor_counts(upstream: FakeUpstream) -> None:
    """Any callable works; its ``counts`` (if any) becomes a labelled counter."""
    from collections import Counter

    class Masker:
        def __init__(self) -> None:
            self.counts: Counter[str] = Counter()

        def __call__(self, message: dict[str, Any]) -> dict[str, Any]:
            if "sk-" in str(message.get("content")):
                self.counts["api_key"] += 1
                return {**message, "content": "[REDACTED:api_key]"}
            return message

    app = create_app(
        Settings(store="memory://", upstream="http://u.test/v1"),
        upstream_transport=upstream.transport(), redactor=Masker(),
    )  # fmt: skip
    with TestClient(app) as http:
        chat(http, "my key is sk-abc123")
        assert upstream.last == [{"role": "user", "content": "[REDACTED:api_key]"}]
        assert 'ctxwindow_redactions_total{type="api_key"} 1.0' in http.get("/metrics").text


def test_upstream_key_is_sent_and_never_shown(upstream: FakeUpstream) -> None:
    settings = Settings(
        store="memory://", upstream="http://u.test/v1", upstream_api_key=SecretStr("sk-secret")
    )
    assert "sk-secret" not in repr(settings) and "sk-secret" not in str(settings)
    with TestClient(create_app(settings, upstream_transport=upstream.transport())) as http:
        chat(http, "Parcel M-13?")
    assert upstream.headers[-1]["authorization"] == "Bearer sk-secret"


def test_context_of_an_unknown_model_is_400(http: TestClient) -> None:
    http.post("/v1/sessions/u/messages", json={"messages": [{"role": "user", "content": "A-1"}]})
    response = http.get("/v1/sessions/u/context", params={"model": "no-such-model"})
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "model_not_found"


def test_tool_calls_round_trip_through_the_session(
    http: TestClient, upstream: FakeUpstream
) -> None:
    """A reply with tool_calls is stored whole; the next request brings the tool result."""
    call = {"id": "call_1", "type": "function",
            "function": {"name": "track", "arguments": '{"parcel": "N-14"}'}}  # fmt: skip

    def with_tool_call(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        upstream.requests.append(body)
        completion = _completion("", body["model"])
        completion["choices"][0]["message"] = {
            "role": "assistant", "content": None, "tool_calls": [call],
        }  # fmt: skip
        completion["choices"][0]["finish_reason"] = "tool_calls"
        return httpx.Response(200, json=completion)

    app = create_app(
        Settings(store="memory://", upstream="http://u.test/v1"),
        upstream_transport=httpx.MockTransport(with_tool_call),
    )
    with TestClient(app) as client:
        reply = sdk(client, **{"X-Session-Id": "t"}).chat.completions.create(
            model="gpt-4o", messages=[{"role": "user", "content": "Track parcel N-14"}]
        )
        assert reply.choices[0].message.tool_calls is not None
        result = {"role": "tool", "tool_call_id": "call_1", "content": '{"at": "Oslo"}'}
        response = client.post(
            "/v1/chat/completions", headers={"X-Session-Id": "t"},
            json={"model": "gpt-4o", "messages": [result]},
        )  # fmt: skip
        assert response.status_code == 200
    assert upstream.last == [
        {"role": "user", "content": "Track parcel N-14"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        result,
    ]


def test_an_orphan_tool_result_is_400(http: TestClient) -> None:
    response = http.post(
        "/v1/chat/completions", headers={"X-Session-Id": "o"},
        json={"model": "gpt-4o",
              "messages": [{"role": "tool", "tool_call_id": "nope", "content": "x"}]},
    )  # fmt: skip
    assert response.status_code == 400


def test_stateless_streaming_passes_through(http: TestClient, upstream: FakeUpstream) -> None:
    stream = sdk(http).chat.completions.create(
        model="gpt-4o", messages=[{"role": "user", "content": "Parcel P-16?"}], stream=True
    )
    assert "".join(c.choices[0].delta.content or "" for c in stream) == upstream.reply
    assert upstream.last == [{"role": "user", "content": "Parcel P-16?"}]


@pytest.mark.parametrize("value", ["0", "-5", "many"])
def test_a_bad_context_max_tokens_header_is_400(http: TestClient, value: str) -> None:
    response = chat(http, "Parcel Q-17?", **{"X-Context-Max-Tokens": value})
    assert response.status_code == 400


def test_an_idempotent_stream_retry_replays_the_stored_reply(
    http: TestClient, upstream: FakeUpstream
) -> None:
    client = sdk(http, **{"X-Session-Id": "rs", "Idempotency-Key": "k9"})
    for _ in range(2):
        stream = client.chat.completions.create(
            model="gpt-4o", messages=[{"role": "user", "content": "Parcel R-18?"}], stream=True
        )
        assert "".join(c.choices[0].delta.content or "" for c in stream) == upstream.reply
    assert len(upstream.requests) == 1
    stored = http.get("/v1/sessions/rs/messages").json()["data"]
    assert [e["message"]["role"] for e in stored] == ["user", "assistant"]


def test_a_session_can_change_model_without_a_stale_window(
    http: TestClient, upstream: FakeUpstream
) -> None:
    """gpt-4o, then gpt-4, then gpt-4o again: each context has every turn so far."""
    for model, text in [("gpt-4o", "Parcel S-19?"), ("gpt-4", "And S-20?"), ("gpt-4o", "S-21?")]:
        response = http.post(
            "/v1/chat/completions", headers={"X-Session-Id": "models"},
            json={"model": model, "messages": [{"role": "user", "content": text}]},
        )  # fmt: skip
        assert response.status_code == 200
    assert [m["content"] for m in upstream.last if m["role"] == "user"] == [
        "Parcel S-19?", "And S-20?", "S-21?",
    ]  # fmt: skip


def test_evicted_turns_are_recalled_from_an_injected_archive(upstream: FakeUpstream) -> None:
    """A turn evicted long ago comes back when the new question matches it."""
    from ctxwindow.archive.sqlite import SQLiteArchive

    archive = SQLiteArchive()
    app = create_app(
        Settings(store="memory://", upstream="http://u.test/v1", budget_ratio=0.004),
        upstream_transport=upstream.transport(), archive=archive,
    )  # fmt: skip
    with TestClient(app) as http:  # gpt-4o: a window of 512 tokens
        chat(http, "The gate code for the warehouse in Tromsø is 4471.", "r")
        for i in range(30):
            upstream.reply = f"Logged shipment {i} of ceramic tiles to depot {i % 5}."
            chat(http, f"Log shipment {i}: {i} pallets of ceramic tiles, fragile.", "r")
        response = chat(http, "What is the gate code for the Tromsø warehouse?", "r")
    archive.close()
    assert int(response.headers["X-Context-Recalled"]) > 0
    assert any("4471" in str(m["content"]) for m in upstream.last)
    assert count_tokens(upstream.last, "gpt-4o") <= 512


def test_a_store_that_is_down_is_503(upstream: FakeUpstream) -> None:
    from ctxwindow.errors import StoreUnavailableError
    from ctxwindow.stores.memory import AsyncMemoryStore

    class DownStore(AsyncMemoryStore):
        """Every read and write fails, as a store that is down does."""

        async def _down(self, *args: Any, **kwargs: Any) -> Any:
            raise StoreUnavailableError("store at memory:// is down")

        tail = load = load_from_checkpoint = append = _down

    app = create_app(
        Settings(store="memory://", upstream="http://u.test/v1"),
        upstream_transport=upstream.transport(), store=DownStore(),
    )  # fmt: skip
    with TestClient(app) as http:
        response = chat(http, "Parcel T-22?")
    assert response.status_code == 503
    assert response.json()["error"]["code"] == "store_unavailable"
    assert response.headers["retry-after"] == "1"


@pytest.mark.parametrize(
    "error, status, code",
    [("StoreInputError", 400, "invalid_request"), ("StoreError", 500, "store_error"),
     ("IdempotencyConflictError", 422, "idempotency_key_reused")],
)  # fmt: skip
def test_store_errors_are_answered_by_cause(
    upstream: FakeUpstream, error: str, status: int, code: str
) -> None:
    """Input the store refuses is the client's to fix; only a store that is down is 503."""
    from ctxwindow import errors
    from ctxwindow.stores.memory import AsyncMemoryStore

    class FailingStore(AsyncMemoryStore):
        async def _refuse(self, *args: Any, **kwargs: Any) -> Any:
            raise getattr(errors, error)("the store says no (test)")

        tail = load_from_checkpoint = _refuse  # a session's first read

    app = create_app(
        Settings(store="memory://", upstream="http://u.test/v1"),
        upstream_transport=upstream.transport(), store=FailingStore(),
    )  # fmt: skip
    with TestClient(app, raise_server_exceptions=False) as http:
        response = chat(http, "Parcel T-22?")
    assert response.status_code == status
    assert response.json()["error"]["code"] == code
    assert "retry-after" not in response.headers


@pytest.mark.parametrize("stream", [False, True])
def test_an_upstream_4xx_is_passed_on_unchanged(
    http: TestClient, upstream: FakeUpstream, stream: bool
) -> None:
    upstream.fail = "400"
    response = http.post(
        "/v1/chat/completions", headers={"X-Session-Id": "e4"},
        json={"model": "gpt-4o", "stream": stream,
              "messages": [{"role": "user", "content": "Parcel U-23?"}]},
    )  # fmt: skip
    assert response.status_code == 400
    assert response.json() == {"error": {"message": "bad temperature"}}


SECRETS = "My email is ann@example.com, 密码：hunter22, card 4111 1111 1111 1111."


def masked(text: str) -> bool:
    hidden = "ann@example.com" not in text and "hunter22" not in text
    return hidden and "[EMAIL]" in text and "密码：[PASSWORD]" in text and "[BANK_CARD]" in text


@pytest.mark.parametrize(
    ("redact", "stored_masked"), [(True, True), ("storage", True), ("upstream", False)]
)
def test_redaction_masks_what_goes_upstream_and_what_is_stored_as_configured(
    upstream: FakeUpstream, redact: Any, stored_masked: bool
) -> None:
    """ "storage": placeholders everywhere; "upstream": the store keeps what the user sent."""
    with TestClient(make_app(upstream, redact=redact)) as client:
        assert chat(client, SECRETS, session="s1").status_code == 200
        assert chat(client, "And my parcel?", session="s1").status_code == 200
        stored = client.get("/v1/sessions/s1/messages").json()["data"][0]["message"]["content"]
        context = client.get("/v1/sessions/s1/context").json()
        metrics = client.get("/metrics").text
    assert masked(upstream.requests[0]["messages"][-1]["content"])
    assert masked(upstream.last[0]["content"])  # the second request's context too
    assert masked(context["messages"][0]["content"])
    assert context["total_tokens"] == count_tokens(context["messages"])
    assert masked(stored) is stored_masked and (stored == SECRETS) is not stored_masked
    assert 'ctxwindow_redactions_total{type="EMAIL"} 1.0' in metrics  # each message once
    assert 'ctxwindow_redactions_total{type="PASSWORD"} 1.0' in metrics


def test_stateless_requests_are_redacted_too(upstream: FakeUpstream) -> None:
    with TestClient(make_app(upstream, redact="upstream")) as client:
        response = client.post(
            "/v1/chat/completions",
            json={"model": "gpt-4o", "messages": [{"role": "user", "content": SECRETS}]},
        )
    assert response.status_code == 200
    assert masked(upstream.last[0]["content"])
    assert response.headers["X-Context-Tokens"] == str(count_tokens(upstream.last))


def test_recall_works_out_of_the_box_with_the_default_archive(
    upstream: FakeUpstream, tmp_path: Any
) -> None:
    """No archive injected: the service keeps one beside the store and recalls from it."""
    settings = Settings(data_dir=tmp_path, upstream="http://u.test/v1", budget_ratio=0.004)
    app = create_app(settings, upstream_transport=upstream.transport())
    with TestClient(app) as http:
        chat(http, "The gate code for the warehouse in Tromsø is 4471.", "r")
        for i in range(30):
            upstream.reply = f"Logged shipment {i} of ceramic tiles to depot {i % 5}."
            chat(http, f"Log shipment {i}: {i} pallets of ceramic tiles, fragile.", "r")
        response = chat(http, "What is the gate code for the Tromsø warehouse?", "r")
    assert int(response.headers["X-Context-Recalled"]) > 0
    assert any("4471" in str(m["content"]) for m in upstream.last)
    assert (tmp_path / "archive.db").exists() and (tmp_path / "sessions.db").exists()
    off = Settings(data_dir=tmp_path, upstream="http://u.test/v1", archive="off")
    assert off.archive_path() is None


@pytest.mark.parametrize("embedder", ["default", "off"])
def test_the_default_archive_recalls_by_meaning_unless_told_not_to(
    upstream: FakeUpstream, tmp_path: Any, embedder: str
) -> None:
    """With the dense extra installed (the server extra brings it), a question that shares no
    word with the turn that answers it still recalls that turn; embedder="off" cannot."""
    settings = Settings(
        data_dir=tmp_path, upstream="http://u.test/v1", budget_ratio=0.004, embedder=embedder,
        summary="off",  # else the summary would carry the sentence
    )  # fmt: skip
    app = create_app(settings, upstream_transport=upstream.transport())
    with TestClient(app) as http:
        chat(http, "Our wedding took place in Kyoto last June, under the maple trees.", "r")
        for i in range(30):  # the wedding leaves the window, for the archive
            upstream.reply = f"Logged shipment {i} of ceramic tiles to depot {i % 5}."
            chat(http, f"Log shipment {i}: {i} pallets of ceramic tiles, fragile.", "r")
        chat(http, "When did I get married?", "r")
    said = "Our wedding took place in Kyoto last June, under the maple trees."
    recalled = any(m["role"] == "user" and m["content"] == said for m in upstream.last)
    assert recalled == (embedder == "default")


@pytest.mark.parametrize("threads", [1, 2])
def test_the_archive_embeds_with_the_threads_set(
    upstream: FakeUpstream, tmp_path: Any, threads: int
) -> None:
    """``embedder_threads``: the cores one embedding call may use."""
    from ctxwindow.archive.embedders import default_embedder

    shared = default_embedder()
    before = getattr(shared, "threads", None)
    settings = Settings(data_dir=tmp_path, upstream="http://u.test/v1", embedder_threads=threads)
    app = create_app(settings, upstream_transport=upstream.transport())
    try:
        with TestClient(app):
            assert getattr(default_embedder(), "threads", "missing") == threads
    finally:
        if hasattr(shared, "threads"):
            shared.threads = before  # the process's one embedder, shared with other tests
    with pytest.raises(ValidationError, match="embedder_threads"):
        Settings(data_dir=tmp_path, upstream="http://u.test/v1", embedder_threads=-1)


def test_threads_0_shares_the_cores_out_among_the_workers_for_embedding(tmp_path: Any) -> None:
    cores = len(os.sched_getaffinity(0))
    for workers in (1, 2, cores, 2 * cores + 1):
        settings = Settings(
            data_dir=tmp_path, upstream="http://u.test/v1", workers=workers, embedder_threads=0
        )
        assert settings.embedding_threads() == max(1, cores // workers)
    one = Settings(data_dir=tmp_path, upstream="http://u.test/v1", workers=3, embedder_threads=1)
    assert one.embedding_threads() == 1
    assert Settings(data_dir=tmp_path, upstream="http://u.test/v1").embedding_threads() == 1


def test_a_streamed_tool_call_is_stored_whole() -> None:
    """Tool-call deltas are assembled by index into the stored assistant message."""

    def tool_stream(request: httpx.Request) -> httpx.Response:
        pieces = [
            {"tool_calls": [{"index": 0, "id": "call_1", "type": "function",
                             "function": {"name": "track", "arguments": ""}}]},
            {"tool_calls": [{"index": 0, "function": {"arguments": '{"order": '}}]},
            {"tool_calls": [{"index": 0, "function": {"arguments": '"A-1042"}'}}]},
            {"tool_calls": [{"index": 1, "id": "call_2", "type": "function",
                             "function": {"name": "eta", "arguments": "{}"}}]},
        ]  # fmt: skip
        events = [
            {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "gpt-4o",
             "choices": [{"index": 0, "delta": delta, "finish_reason": None}]}
            for delta in pieces
        ]  # fmt: skip
        body = "".join(f"data: {json.dumps(e)}\n\n" for e in events) + "data: [DONE]\n\n"
        return httpx.Response(
            200, content=body.encode(), headers={"content-type": "text/event-stream"}
        )

    settings = Settings(store="memory://", upstream="http://u.test/v1")
    with TestClient(
        create_app(settings, upstream_transport=httpx.MockTransport(tool_stream))
    ) as http:
        client = sdk(http, **{"X-Session-Id": "t"})
        stream = client.chat.completions.create(
            model="gpt-4o", messages=[{"role": "user", "content": "Track A-1042"}], stream=True
        )
        assert sum(1 for _ in stream) == 4
        stored = http.get("/v1/sessions/t/messages").json()["data"][-1]["message"]
    assert stored["role"] == "assistant" and stored["content"] is None
    assert stored["tool_calls"] == [
        {"id": "call_1", "type": "function",
         "function": {"name": "track", "arguments": '{"order": "A-1042"}'}},
        {"id": "call_2", "type": "function", "function": {"name": "eta", "arguments": "{}"}},
    ]  # fmt: skip


def _slow_app(delay: float, **settings: Any) -> tuple[FastAPI, Any]:
    from .support.chat_upstream import SlowUpstream

    upstream = SlowUpstream(delay)
    settings = {"store": "memory://", "upstream": "http://upstream.test/v1", **settings}
    app = create_app(
        Settings(**settings), upstream_transport=httpx.MockTransport(upstream.handle),
        store=_store(),
    )  # fmt: skip
    return app, upstream


async def _both(
    app: FastAPI, first: dict[str, str], second: dict[str, str]
) -> tuple[httpx.Response, httpx.Response, list[dict[str, Any]]]:
    """Two requests on session "s", the second sent while the first waits for upstream;
    then the session's history."""
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://testserver"
        ) as http,
    ):

        async def ask(headers: dict[str, str], text: str, wait: float) -> httpx.Response:
            await asyncio.sleep(wait)
            return await http.post(
                "/v1/chat/completions",
                headers={"X-Session-Id": "s", **headers},
                json={"model": "gpt-4o", "messages": [{"role": "user", "content": text}]},
            )

        one, two = await asyncio.gather(
            ask(first, "Parcel R-1 to Nara?", 0), ask(second, "Parcel R-1 to Nara?", 0.05)
        )
        history = (await http.get("/v1/sessions/s/messages")).json()["data"]
        return one, two, history


def test_a_retry_while_the_first_request_is_answered_waits_and_replays() -> None:
    app, upstream = _slow_app(0.3)
    key = {"Idempotency-Key": "same"}
    first, retry, stored = asyncio.run(_both(app, key, key))
    assert first.status_code == retry.status_code == 200
    assert retry.headers["X-Context-Replayed"] == "true"
    assert retry.json()["choices"][0]["message"] == first.json()["choices"][0]["message"]
    assert len(upstream.requests) == 1
    assert [e["message"]["role"] for e in stored] == ["user", "assistant"]


def test_a_session_busy_longer_than_the_lock_timeout_is_409() -> None:
    app, upstream = _slow_app(0.5, lock_timeout=0.1)
    first, second, stored = asyncio.run(_both(app, {}, {}))
    assert first.status_code == 200
    assert second.status_code == 409
    assert second.json()["error"]["code"] == "session_busy"
    assert len(stored) == 2 and len(upstream.requests) == 1  # the refused turn stored nothing


def test_a_retry_of_a_completed_request_is_replayed_even_at_the_session_limit(
    upstream: FakeUpstream,
) -> None:
    with TestClient(make_app(upstream, max_messages_per_session=2)) as http:
        key = {"Idempotency-Key": "full"}
        assert chat(http, "Parcel S-2?", **key).status_code == 200
        retry = chat(http, "Parcel S-2?", **key)
        assert retry.status_code == 200 and retry.headers["X-Context-Replayed"] == "true"
        assert chat(http, "Another one?").status_code == 413


def _metric(text: str, name: str) -> float:
    """The value of an unlabelled sample in Prometheus text."""
    for line in text.splitlines():
        if line.startswith(f"{name} "):
            return float(line.split()[1])
    raise AssertionError(f"no sample {name}")


def test_compressions_summary_updates_and_recall_latency_are_exported(
    upstream: FakeUpstream,
) -> None:
    """A 512-token window: a long document is compressed, old turns folded, recall timed."""
    with TestClient(make_app(upstream, budget_ratio=0.004)) as http:
        manual = " ".join(
            f"Step {i}: tighten bolt {i} of the 配電盤 to {i + 10} Nm, then check the seal."
            for i in range(40)
        )
        assert chat(http, f"Here is the manual. {manual}", "m").status_code == 200
        for i in range(25):
            answered = chat(http, f"Shipment {i}: {i} pallets of tiles to depot {i % 4}.", "m")
            assert answered.status_code == 200
        text = http.get("/metrics").text
        deadline = time.monotonic() + 10  # the turns wait for the archive's worker, briefly
        while _metric(http.get("/metrics").text, "ctxwindow_archive_queued") > 0:
            assert time.monotonic() < deadline, "the archive's backlog never emptied"
            time.sleep(0.01)
    assert _metric(text, "ctxwindow_archive_queued") >= 0
    assert _metric(text, "ctxwindow_compressions_total") >= 1
    assert _metric(text, "ctxwindow_summary_updates_total") >= 1
    # a request searches once something has left the window (before, recall can add nothing)
    assert 1 <= _metric(text, "ctxwindow_recall_latency_seconds_count") <= 26


def _long_session(http: TestClient, session: str) -> list[str]:
    """A manual then 25 short turns; the texts the session stored, in order."""
    manual = " ".join(
        f"Step {i}: tighten bolt {i} to {i + 10} Nm, check the seal." for i in range(40)
    )
    chat(http, f"Here is the manual. {manual}", session)
    for i in range(25):
        chat(http, f"Shipment {i}: {i} pallets of tiles to depot {i % 4}.", session)
    stored = http.get(f"/v1/sessions/{session}/messages").json()["data"]
    return [item["message"]["content"] for item in stored]


def test_the_token_window_policy_sends_the_newest_turns_that_fit(upstream: FakeUpstream) -> None:
    app = make_app(upstream, policy="token_window", budget_ratio=0.004, archive="off")
    with TestClient(app) as http:
        texts = _long_session(http, "t")
        metrics = http.get("/metrics").text
    sent = [m["content"] for m in upstream.last]
    assert count_tokens(upstream.last) <= 512
    assert sent == texts[len(texts) - 1 - len(sent) : -1]  # a suffix: the newest that fit
    assert _metric(metrics, "ctxwindow_compressions_total") == 0
    assert "ctxwindow_archive_queued" not in metrics  # no archive, no backlog


def test_compression_and_summary_can_be_switched_off(upstream: FakeUpstream) -> None:
    app = make_app(upstream, compressor="off", summary="off", budget_ratio=0.004)
    with TestClient(app) as http:
        _long_session(http, "o")
        metrics = http.get("/metrics").text
    assert _metric(metrics, "ctxwindow_compressions_total") == 0
    assert _metric(metrics, "ctxwindow_summary_updates_total") == 0
    assert count_tokens(upstream.last) <= 512


def test_a_per_model_budget_caps_the_context(upstream: FakeUpstream) -> None:
    with TestClient(make_app(upstream, budgets={"gpt-4o": 300})) as http:
        _long_session(http, "b")
        context = http.get("/v1/sessions/b/context").json()
    assert count_tokens(upstream.last) <= 300
    assert context["report"]["budget"] == 300


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        (b'{"model": "gpt-4o", "messages": [{"role": "user", "content": "\xff\xfe"}]}', "utf-8"),
        (b'{"model": "gpt-4o", "messages": {"role": "user"}}', "'messages' must be"),
        (b'{"model": "gpt-4o", "messages": [{"role": "user", "content": 42}]}', "content"),
        (b'{"model": 4, "messages": [{"role": "user", "content": "hi"}]}', "'model' must be"),
        (b"[1, 2]", "JSON object"),
    ],
)
def test_bad_bodies_are_400_and_store_nothing(http: TestClient, raw: bytes, says: str) -> None:
    for route in ("/v1/chat/completions", "/v1/sessions/bad/messages"):
        response = http.post(route, content=raw, headers={"X-Session-Id": "bad"})
        assert response.status_code == 400, route
        assert says in response.json()["error"]["message"]
    assert http.get("/v1/sessions/bad/messages").status_code == 404  # nothing was stored


def test_a_client_gone_mid_stream_releases_the_session(upstream: FakeUpstream) -> None:
    """The session is free again (no 409) and the unfinished reply is not stored."""

    async def slow_stream(request: httpx.Request) -> httpx.Response:
        async def chunks() -> AsyncIterator[bytes]:
            for piece in ("Your ", "parcel ", "is ", "in ", "Lyon."):
                await asyncio.sleep(0.02)
                yield _sse(piece, "gpt-4o").split(b"data: [DONE]")[0]
            yield b"data: [DONE]\n\n"

        return httpx.Response(200, content=chunks(), headers={"content-type": "text/event-stream"})

    settings = Settings(store="memory://", upstream="http://u.test/v1", lock_timeout=0.5)
    app = create_app(settings, upstream_transport=httpx.MockTransport(slow_stream), store=_store())
    body = json.dumps(
        {"model": "gpt-4o", "stream": True, "messages": [{"role": "user", "content": "Where?"}]}
    ).encode()
    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
        "scheme": "http", "path": "/v1/chat/completions", "raw_path": b"/v1/chat/completions",
        "query_string": b"", "root_path": "", "client": ("127.0.0.1", 1), "server": ("t", 80),
        "headers": [(b"content-type", b"application/json"), (b"x-session-id", b"gone"),
                    (b"content-length", str(len(body)).encode())],
    }  # fmt: skip
    sent: list[dict[str, Any]] = []

    async def run() -> tuple[int, list[dict[str, Any]]]:
        calls = 0

        async def receive() -> dict[str, Any]:
            nonlocal calls
            calls += 1
            if calls == 1:
                return {"type": "http.request", "body": body, "more_body": False}
            await asyncio.sleep(0.05)  # the client leaves after a chunk or two
            return {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        async with (
            app.router.lifespan_context(app),
            httpx.AsyncClient(
                transport=httpx.ASGITransport(app=app), base_url="http://testserver"
            ) as http,
        ):
            await app(scope, receive, send)
            stored = (await http.get("/v1/sessions/gone/messages")).json()["data"]
            # Taking the session again (waits at most lock_timeout, else 409):
            note = {"messages": [{"role": "user", "content": "Still there?"}]}
            again = await http.post("/v1/sessions/gone/messages", json=note)
            return again.status_code, stored

    status, stored = asyncio.run(run())
    chunks = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    assert b"[DONE]" not in chunks  # the client really left before the end
    assert status == 200  # the session was released
    assert [item["message"]["role"] for item in stored] == ["user"]  # no half reply
    assert stored[0]["metadata"]["unanswered"] is True


@pytest.mark.parametrize("redact", ["storage", "upstream"])
@pytest.mark.parametrize("session", [True, False])
def test_invalid_messages_are_400_with_redaction_on(
    upstream: FakeUpstream, redact: str, session: bool
) -> None:
    """Messages are validated before a redactor sees them: a clear 400, never a 500."""
    bad = {"role": "user", "content": [{"type": "text", "text": 5}]}
    headers = {"X-Session-Id": "r"} if session else {}
    with TestClient(make_app(upstream, redact=redact)) as http:
        response = http.post(
            "/v1/chat/completions",
            json={"model": "gpt-4o", "messages": [bad]},
            headers=headers,
        )
        assert response.status_code == 400
        assert response.json()["error"]["param"] == "messages"
        assert http.get("/v1/sessions/r/messages").status_code == 404
    assert upstream.requests == []


def test_models_asking_for_one_session_share_one_window_cache(upstream: FakeUpstream) -> None:
    """One window a session in memory, whichever model asks; each model sees the whole story."""
    app = make_app(upstream)
    with TestClient(app) as http:
        client = sdk(http, **{"X-Session-Id": "shared"})
        for model, text in [("gpt-4o", "我的订单是 A-1042 🙂"), ("gpt-4", "And the parcel?")]:
            client.chat.completions.create(
                model=model, messages=[{"role": "user", "content": text}]
            )
        service = app.state.service
        assert len(service.managers()) == 2 and len(service._sessions) == 1
        assert upstream.requests[-1]["model"] == "gpt-4"
        sent = [m["content"] for m in upstream.requests[-1]["messages"]]
        assert sent[0] == "我的订单是 A-1042 🙂" and sent[-1] == "And the parcel?"


def test_each_app_waits_only_for_its_own_streams() -> None:
    """Streams still finishing are kept per app (``Service.streams``): closing one app
    waits for its own, and never for another app's in the same process."""
    from ctxwindow.server.streams import Streams

    async def scenario() -> None:
        mine, other = Streams(), Streams()
        storing = asyncio.get_running_loop().create_future()
        mine.track(storing)
        await asyncio.wait_for(other.finished(timeout=60), 5)  # not held by mine's stream
        waiting = asyncio.ensure_future(mine.finished(timeout=60))
        for _ in range(3):
            await asyncio.sleep(0)
        assert not waiting.done()  # held until its stream is stored
        storing.set_result(None)
        await asyncio.wait_for(waiting, 5)

    asyncio.run(scenario())
    app_a, app_b = create_app(Settings(store="memory://")), create_app(Settings(store="memory://"))
    with TestClient(app_a), TestClient(app_b):
        assert app_a.state.service.streams is not app_b.state.service.streams
