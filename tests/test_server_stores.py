"""The service over every durable store: SQLite, Redis and PostgreSQL (real servers)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from fastapi.testclient import TestClient

from ctxwindow.server import Settings, create_app
from ctxwindow.stores.base import AsyncStore

from .test_server import FakeUpstream
from .test_store_contract import require_server


@pytest.fixture(params=["sqlite", "redis", "postgresql"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[AsyncStore]:
    kind = request.param
    name = f"ctxwindow_test_{uuid.uuid4().hex[:12]}"
    if kind == "sqlite":
        from ctxwindow.stores.sqlite import AsyncSQLiteStore

        yield AsyncSQLiteStore(tmp_path / "sessions.db")
        return
    url = require_server(kind)
    if kind == "redis":
        import redis

        from ctxwindow.stores.redis import AsyncRedisStore

        yield AsyncRedisStore(url, prefix=name)
        with redis.Redis.from_url(url) as client:
            keys = list(client.scan_iter(match=f"{name}:*", count=1000))
            if keys:
                client.delete(*keys)
        return
    import psycopg

    from ctxwindow.stores.postgres import AsyncPostgresStore

    yield AsyncPostgresStore(url, schema=name)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')


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
