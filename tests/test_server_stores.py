"""The service over every durable store: SQLite, Redis and PostgreSQL (real servers)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from fastapi.testclient import TestClient

from ctxwindow.server import Settings, create_app
from ctxwindow.stores.base import AsyncStore
from tests.support.chat_upstream import SlowUpstream, assert_turns_never_interleave

from .support.chat_upstream import FakeUpstream
from .support.stores import async_store, require_server


@pytest.fixture(params=["sqlite", "redis", "postgresql"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[AsyncStore]:
    with async_store(request.param, tmp_path) as opened:
        yield opened


def test_a_conversation_through_the_service_is_kept_in_the_store(store: AsyncStore) -> None:
    """Turns, replies, a failed upstream and its idempotent retry, over each store."""
    upstream = FakeUpstream()
    settings = Settings(store="memory://", upstream="http://upstream.test/v1")
    app = create_app(settings, upstream_transport=upstream.transport(), store=store)
    with TestClient(app) as http:
        client = openai.OpenAI(
            base_url="http://testserver/v1", api_key="none", http_client=http, max_retries=0,
            default_headers={"X-Session-Id": "s1"},
        )  # fmt: skip
        client.chat.completions.create(
            model="gpt-4o",
            messages=[
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": "我的订单号是 A-1042。"},
            ],
        )
        stream = client.chat.completions.create(
            model="gpt-4o", messages=[{"role": "user", "content": "Where is it?"}], stream=True
        )
        streamed = "".join(chunk.choices[0].delta.content or "" for chunk in stream)
        upstream.fail = "500"
        retry: dict[str, Any] = {"Idempotency-Key": "turn-3"}
        with pytest.raises(openai.APIStatusError) as failed:
            client.chat.completions.create(
                model="gpt-4o",
                messages=[{"role": "user", "content": "And the tracking id?"}],
                extra_headers=retry,
            )
        assert failed.value.status_code == 502
        upstream.fail = None
        client.chat.completions.create(
            model="gpt-4o",
            messages=[{"role": "user", "content": "And the tracking id?"}],
            extra_headers=retry,
        )
        history = http.get("/v1/sessions/s1/messages").json()["data"]
    roles = [item["message"]["role"] for item in history]
    texts = [item["message"].get("content") for item in history]
    assert roles == ["system", "user", "assistant", "user", "assistant", "user", "assistant"]
    assert texts.count("And the tracking id?") == 1  # the retry stored nothing twice
    assert streamed == upstream.reply == texts[4]
    assert upstream.last[0] == {"role": "system", "content": "Be brief."}
    assert upstream.last[-1] == {"role": "user", "content": "And the tracking id?"}


def test_a_request_in_a_warm_session_stores_its_turn_and_reply_in_two_store_calls(
    store: AsyncStore,
) -> None:
    """A chat request, streamed or not, keyed or not, on a session the service has loaded:
    the turn's append checks that the window is current (``append_after``), the reply is
    a plain append, and nothing else touches the session (no read of its newest entry,
    no replay lookup). A store without an ``append_after`` of its own would read the
    newest entry first, inside the base's default."""
    calls: list[str] = []
    names = ("_append", "_append_after", "_load", "_tail", "_replayed", "_get",
             "_load_from_checkpoint", "_earlier", "_save_checkpoint", "_checkpoint")  # fmt: skip
    for name in names:
        method = getattr(store, name)

        async def spy(session_id: str, *args: Any, _name: str = name, _m: Any = method) -> Any:
            if session_id.endswith("warm"):
                calls.append(_name)
            return await _m(session_id, *args)

        setattr(store, name, spy)
    settings = Settings(store="memory://", upstream="http://upstream.test/v1", archive="off")
    app = create_app(settings, upstream_transport=FakeUpstream().transport(), store=store)
    with TestClient(app) as http:
        ask = {"X-Session-Id": "warm"}

        def say(text: str, **extra: Any) -> None:
            body = {"model": "gpt-4o", "messages": [{"role": "user", "content": text}]}
            response = http.post("/v1/chat/completions", json={**body, **extra}, headers=ask)
            assert response.status_code == 200
            response.read()

        say("订单 A-1 在哪里？")  # loads the session
        calls.clear()
        say("and A-2? 🚚")
        say("and A-3? 🚚", stream=True)
        ask["Idempotency-Key"] = "turn-4"
        say("and A-4? 発送")
    native = "_append_after" in type(store).__dict__
    turn = ["_append_after"] if native else ["_append_after", "_tail", "_append"]
    keyed = ["_append_after"] if native else ["_append_after", "_replayed", "_tail", "_append"]
    assert calls == [*turn, "_append", *turn, "_append", *keyed, "_append"]


async def _ask(http: httpx.AsyncClient, text: str, **headers: str) -> httpx.Response:
    body = {"model": "gpt-4o", "messages": [{"role": "user", "content": text}]}
    if headers.pop("stream", None):
        body["stream"] = True
    return await http.post(
        "/v1/chat/completions", json=body, headers={"X-Session-Id": "busy", **headers}
    )


def test_concurrent_requests_to_one_session_never_interleave(store: AsyncStore) -> None:
    """Twelve requests at once (streamed and not) on one session: served one after another."""
    upstream = SlowUpstream()

    async def run() -> list[dict[str, Any]]:
        settings = Settings(store="memory://", upstream="http://upstream.test/v1")
        transport = httpx.MockTransport(upstream.handle)
        app = create_app(settings, upstream_transport=transport, store=store)
        async with (
            app.router.lifespan_context(app),
            httpx.AsyncClient(
                transport=httpx.ASGITransport(app=app), base_url="http://testserver"
            ) as http,
        ):
            asks = [
                _ask(http, f"问题 {n}: parcel {n} 🙂", **({"stream": "1"} if n % 3 == 0 else {}))
                for n in range(12)
            ]
            responses = await asyncio.gather(*asks)
            assert [r.status_code for r in responses] == [200] * 12
            data: list[dict[str, Any]] = (await http.get("/v1/sessions/busy/messages")).json()[
                "data"
            ]
            return data

    history = asyncio.run(run())
    assert len(history) == 24
    assert_turns_never_interleave(history, upstream.requests)


def test_recall_from_a_postgresql_archive_shared_by_every_process(tmp_path: Path) -> None:
    """CTXWINDOW_ARCHIVE=postgresql://…: evicted turns recalled from PostgreSQL."""
    url = require_server("postgresql")
    upstream = FakeUpstream()
    session = f"pg-recall-{uuid.uuid4().hex[:12]}"
    settings = Settings(
        data_dir=tmp_path, upstream="http://u.test/v1", budget_ratio=0.004, archive=url
    )
    with TestClient(create_app(settings, upstream_transport=upstream.transport())) as http:
        ask = {"X-Session-Id": session}
        body = {"model": "gpt-4o"}

        def say(text: str) -> httpx.Response:
            messages = [{"role": "user", "content": text}]
            return http.post(
                "/v1/chat/completions", json={**body, "messages": messages}, headers=ask
            )

        say("The gate code for the warehouse in Tromsø is 4471.")
        for i in range(30):
            upstream.reply = f"Logged shipment {i} of ceramic tiles to depot {i % 5}."
            say(f"Log shipment {i}: {i} pallets of ceramic tiles, fragile.")
        response = say("What is the gate code for the Tromsø warehouse?")
        http.delete(f"/v1/sessions/{session}")
    assert int(response.headers["X-Context-Recalled"]) > 0
    assert any("4471" in str(m["content"]) for m in upstream.last)
    assert not (tmp_path / "archive.db").exists()


def test_the_rate_limit_is_shared_by_processes_through_redis() -> None:
    """Two service instances (as two processes would) count one tenant's requests together."""
    url = require_server("redis")
    tenant = f"t{uuid.uuid4().hex[:10]}"
    settings = Settings(
        store="memory://", upstream="http://u.test/v1", rate_limit_per_minute=3,
        rate_limit_url=url, api_keys={"key": tenant},
    )  # fmt: skip
    key = {"Authorization": "Bearer key", "X-Session-Id": "s"}
    body = {"model": "gpt-4o", "messages": [{"role": "user", "content": "限速テスト 🙂"}]}
    upstream = FakeUpstream()
    apps = [create_app(settings, upstream_transport=upstream.transport()) for _ in range(2)]
    with TestClient(apps[0]) as first, TestClient(apps[1]) as second:
        statuses = [
            http.post("/v1/chat/completions", json=body, headers=key).status_code
            for http in (first, second, first, second)
        ]
    assert statuses == [200, 200, 200, 429]


def test_the_redis_limiter_slides_and_fails_open() -> None:
    from ctxwindow.server.tenants import RedisLimiter

    url = require_server("redis")
    tenant = f"t{uuid.uuid4().hex[:10]}"

    async def run() -> list[bool]:
        limiter = RedisLimiter(url, 2, window=0.5)
        seen = [await limiter.admit(tenant) for _ in range(3)]
        await asyncio.sleep(0.6)
        seen.append(await limiter.admit(tenant))
        await limiter.aclose()
        down = RedisLimiter("redis://127.0.0.1:1/0", 1)
        seen += [await down.admit(tenant), await down.admit(tenant)]  # unreachable: admitted
        await down.aclose()
        return seen

    assert asyncio.run(run()) == [True, True, False, True, True, True]
