"""A retried request never gets another turn's answer (issue: retries after the session moved on).

Turn A fails after its question is stored (the upstream answers 500); turn B
of the same session is then answered; the client retries A with A's
``Idempotency-Key``. The retry must not build on B's reply, nor store an
answer to A after it (two assistant turns in a row, an answer far from its
question): it is refused with a 409 ``idempotency_turn_superseded`` that asks
not to be retried, nothing is stored or sent upstream, and B's retry is still
replayed. A retry while A's turn still ends the session is answered as before.

Every protocol, streamed and not, on SQLite, Redis and PostgreSQL (the real
servers), against the failing upstream over real HTTP.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient

from ctxwindow.server import Settings, create_app
from tests.support.faults.protocol_requests import send
from tests.support.faults.upstream import FaultyUpstream
from tests.support.stores import async_store

PROTOCOLS = ["chat", "responses", "messages"]


def ask(
    http: TestClient, protocol: str, sid: str, text: str, key: str, stream: bool
) -> httpx.Response:
    """One question of session ``sid`` in ``protocol``, with ``key``."""
    turn = [{"role": "user", "content": text}]
    return send(http, protocol, sid, turn, stream, **{"Idempotency-Key": key})


def history(http: TestClient, sid: str) -> list[tuple[str, str]]:
    """The session's stored (role, text) pairs, in order."""
    response = http.get(f"/v1/sessions/{sid}/messages")
    assert response.status_code == 200, response.text[:400]
    out = []
    for entry in response.json()["data"]:
        content = entry["message"].get("content")
        if isinstance(content, list):
            content = "".join(part.get("text", "") for part in content)
        out.append((entry["message"]["role"], content or ""))
    return out


@pytest.fixture(params=["sqlite", "redis", "postgresql"])
def http(
    request: pytest.FixtureRequest, tmp_path: Path, upstream: FaultyUpstream
) -> Iterator[TestClient]:
    with async_store(request.param, tmp_path) as store:
        settings = Settings(store="memory://", upstream=upstream.base_url, archive="off")
        app = create_app(settings, store=store)
        with TestClient(app, raise_server_exceptions=False) as client:
            yield client


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_retry_after_the_session_moved_on_is_refused_and_stores_nothing(
    http: TestClient, upstream: FaultyUpstream, protocol: str, stream: bool
) -> None:
    sid = f"retry-{uuid.uuid4().hex[:8]}"
    upstream.mode = "500"
    failed = ask(http, protocol, sid, "A: where is parcel 第4号? 📦", "key-a", stream)
    assert failed.status_code >= 500, failed.text[:400]
    upstream.mode = "ok"
    assert ask(http, protocol, sid, "B: and the invoice?", "key-b", stream).status_code == 200
    before, calls = history(http, sid), len(upstream.requests)

    retried = ask(http, protocol, sid, "A: where is parcel 第4号? 📦", "key-a", stream)

    assert retried.status_code == 409, retried.text[:400]
    assert "idempotency_turn_superseded" in retried.text
    assert retried.headers["x-should-retry"] == "false"
    assert len(upstream.requests) == calls, "the refused retry was sent upstream"
    after = history(http, sid)
    assert after == before, "the refused retry changed the history"
    assert [role for role, _ in after] == ["user", "user", "assistant"]
    replayed = ask(http, protocol, sid, "B: and the invoice?", "key-b", stream)
    assert replayed.status_code == 200 and replayed.headers["X-Context-Replayed"] == "true"
    assert len(upstream.requests) == calls


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_retry_of_the_newest_turn_is_answered_once(
    http: TestClient, upstream: FaultyUpstream, protocol: str, stream: bool
) -> None:
    sid = f"retry-{uuid.uuid4().hex[:8]}"
    upstream.mode = "500"
    assert ask(http, protocol, sid, "A: where is it?", "key-a", stream).status_code >= 500
    upstream.mode = "ok"
    answered = ask(http, protocol, sid, "A: where is it?", "key-a", stream)
    assert answered.status_code == 200, answered.text[:400]
    again = ask(http, protocol, sid, "A: where is it?", "key-a", stream)
    assert again.status_code == 200 and again.headers["X-Context-Replayed"] == "true"
    assert [role for role, _ in history(http, sid)] == ["user", "assistant"]
