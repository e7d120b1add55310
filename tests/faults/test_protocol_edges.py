"""The protocols' edges, found from outside: each a regression test that failed before its fix.

- An upstream that closes its connection badly after the stream's last event
  (``[DONE]``, ``response.completed``, ``message_stop``): the reply is whole,
  so the client's stream ends as it should and the real SDKs do not raise.
- Headers passed upstream (``anthropic-version``, ``anthropic-beta``) that are
  not printable ASCII: a 400 naming the header, nothing stored, not a 500.
- A request refused for its budget (a tiny ``X-Context-Max-Tokens``, a
  question over the budget) stores nothing: retries leave no orphan turns.
- New turns that end with an assistant's tool call and no result: a 400
  before anything is stored or sent upstream.
- An empty upstream reply is stored neither whole nor streamed.
- Unknown routes and methods answer the error shape of the API, with the
  right ``Allow``.

The app runs in-process on a SQLite store, the upstream is real HTTP
(``tests/faults/upstream.py``); the clients are the real ``openai`` and
``anthropic`` SDKs where the finding was theirs.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import anthropic
import httpx
import openai
import pytest
from fastapi.testclient import TestClient

from ctxwindow.server import Settings, create_app
from tests.support.faults.protocol_requests import CLAUDE, send
from tests.support.faults.service import running_service
from tests.support.faults.upstream import FaultyUpstream, faulty_upstream
from tests.support.protocol_upstreams import REPLY
from tests.support.sdk_clients import Bridge

pytestmark = pytest.mark.servers


@pytest.fixture
def http(tmp_path: Path, upstream: FaultyUpstream) -> Iterator[TestClient]:
    settings = Settings(
        store=f"sqlite:///{tmp_path / 'sessions.db'}", upstream=upstream.base_url,
        data_dir=tmp_path, archive="off",
    )  # fmt: skip
    with TestClient(create_app(settings), raise_server_exceptions=False) as client:
        yield client


def new_sid() -> str:
    return f"edge-{uuid.uuid4().hex[:8]}"


def stored(http: TestClient, sid: str) -> list[dict[str, Any]]:
    response = http.get(f"/v1/sessions/{sid}/messages")
    if response.status_code == 404:
        return []
    assert response.status_code == 200, response.text[:400]
    return [entry["message"] for entry in response.json()["data"]]


def openai_sdk(http: TestClient, sid: str) -> openai.OpenAI:
    return openai.OpenAI(
        base_url="http://testserver/v1", api_key="none", max_retries=0,
        http_client=http,  # type: ignore[arg-type]  # typed against httpx2; httpx works
        default_headers={"X-Session-Id": sid},
    )  # fmt: skip


def anthropic_sdk(http: TestClient, sid: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(
        base_url="http://testserver", api_key="none", max_retries=0,
        http_client=anthropic.DefaultHttpxClient(transport=Bridge(http)),
        default_headers={"X-Session-Id": sid},
    )  # fmt: skip


def errors_after_end(http: TestClient, seconds: float = 5.0) -> float:
    """``ctxwindow_upstream_errors_total{kind="after_end"}`` once counted: the relay sees the
    upstream's bad close after the client has read the last event, so on a busy machine the
    count comes a moment after the stream ended (it failed once when checked at once)."""
    deadline = time.monotonic() + seconds
    while True:
        counted = 0.0
        for line in http.get("/metrics").text.splitlines():
            if line.startswith('ctxwindow_upstream_errors_total{kind="after_end"}'):
                counted = float(line.split()[-1])
        if counted or time.monotonic() > deadline:
            return counted
        time.sleep(0.02)


# -- a stream closed badly after its last event --------------------------------------------


def test_chat_stream_closed_after_done_is_whole(http: TestClient, upstream: FaultyUpstream) -> None:
    sid, question = new_sid(), "Where is parcel 第7号? 📦"
    upstream.mode = "late"
    stream = openai_sdk(http, sid).chat.completions.create(
        model="gpt-4o", messages=[{"role": "user", "content": question}], stream=True
    )
    text = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
    assert text == f"answer to: {question}"
    assert [m["role"] for m in stored(http, sid)] == ["user", "assistant"]
    assert errors_after_end(http) == 1


def test_responses_stream_closed_after_completed_is_whole(
    http: TestClient, upstream: FaultyUpstream
) -> None:
    sid = new_sid()
    upstream.mode = "late"
    client = openai_sdk(http, sid)
    conversation = {"conversation": sid}
    with client.responses.stream(model="gpt-4o", input="Where?", extra_body=conversation) as s:
        final = s.get_final_response()
    assert final.output_text == REPLY
    assert [m["role"] for m in stored(http, sid)] == ["user", "assistant"]
    assert errors_after_end(http) == 1


def test_messages_stream_closed_after_message_stop_is_whole(
    http: TestClient, upstream: FaultyUpstream
) -> None:
    sid = new_sid()
    upstream.mode = "late"
    with anthropic_sdk(http, sid).messages.stream(
        model=CLAUDE, max_tokens=64, messages=[{"role": "user", "content": "Where?"}]
    ) as s:
        final = s.get_final_message()
    assert final.content[0].text == REPLY  # type: ignore[union-attr]
    assert [m["role"] for m in stored(http, sid)] == ["user", "assistant"]
    assert errors_after_end(http) == 1


# -- headers passed upstream ---------------------------------------------------------------


def ask_claude(http: TestClient, sid: str | None, text: str = "Where?", **headers: Any) -> Any:
    body = {"model": CLAUDE, "max_tokens": 64, "messages": [{"role": "user", "content": text}]}
    if sid is not None:
        headers["X-Session-Id"] = sid
    return http.post("/v1/messages", json=body, headers=headers)


@pytest.mark.parametrize("value", ["2023-06-01 ✓", "ümlaut", "日本語", "🙂"])
@pytest.mark.parametrize("name", ["anthropic-version", "anthropic-beta"])
@pytest.mark.parametrize("session", [True, False], ids=["session", "stateless"])
def test_a_header_passed_upstream_that_is_not_ascii_is_a_400_storing_nothing(
    http: TestClient, upstream: FaultyUpstream, name: str, value: str, session: bool
) -> None:
    sid = new_sid() if session else None
    for _ in range(3):  # every retry is refused alike, and leaves nothing
        response = ask_claude(http, sid, **{name: value.encode()})
        assert response.status_code == 400, response.text[:400]
        assert response.json()["error"]["param"] == name
        assert "invalid_header" in response.text
    assert upstream.requests == []
    if sid is not None:
        assert stored(http, sid) == []


# -- requests refused for their budget or a dangling tool call store nothing ---------------


QUESTION = {"role": "user", "content": "Where is order D-4 — 東京 or 大阪? 📦 " * 20}
CALL = {
    "role": "assistant", "content": None,
    "tool_calls": [{"id": "call_1", "type": "function",
                    "function": {"name": "where_is", "arguments": '{"order": "D-4"}'}}],
}  # fmt: skip
PROTOCOLS = ["chat", "responses", "messages"]


@pytest.mark.parametrize("limit", ["1", "5", "12"])
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_request_refused_for_its_budget_stores_nothing(
    http: TestClient, upstream: FaultyUpstream, protocol: str, limit: str
) -> None:
    sid = new_sid()
    for key in ("k-1", "k-1", None):  # retried with its key, then without one
        headers = {"X-Context-Max-Tokens": limit} | ({"Idempotency-Key": key} if key else {})
        response = send(http, protocol, sid, [QUESTION], **headers)
        assert response.status_code == 400, response.text[:400]
        assert "context_length_exceeded" in response.text
    assert stored(http, sid) == [], "a refused request left turns behind"
    assert upstream.requests == []


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_new_turns_ending_with_a_tool_call_without_its_result_are_refused_first(
    http: TestClient, upstream: FaultyUpstream, protocol: str
) -> None:
    sid = new_sid()
    response = send(http, protocol, sid, [{"role": "user", "content": "Where is D-4?"}, CALL])
    assert response.status_code == 400, response.text[:400]
    assert "call_1" in response.json()["error"]["message"]
    assert stored(http, sid) == []
    assert upstream.requests == [], "a request that cannot be valid was sent (and paid for)"


# -- an empty reply ------------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_an_empty_reply_is_passed_on_and_not_stored_streamed_or_not(
    http: TestClient, upstream: FaultyUpstream, protocol: str, stream: bool
) -> None:
    upstream.reply = lambda body: ""
    for fake in upstream.protocols.values():
        fake.reply = ""
    sid = new_sid()
    response = send(
        http, protocol, sid, [{"role": "user", "content": "Anything? 🤔"}], stream=stream
    )
    assert response.status_code == 200, response.text[:400]
    assert b'"error":{' not in response.content.replace(b" ", b""), response.text[:400]
    assert [m["role"] for m in stored(http, sid)] == ["user"]


# -- the router's own refusals -------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "path", "allowed"),
    [
        ("PUT", "/v1/sessions/s-1/messages", "GET, POST"),
        ("DELETE", "/v1/chat/completions", "POST"),
        ("GET", "/v1/messages", "POST"),
        ("PATCH", "/v1/sessions/s-1", "DELETE"),
    ],
)
def test_a_method_a_path_does_not_take_is_a_405_listing_every_method_it_takes(
    http: TestClient, method: str, path: str, allowed: str
) -> None:
    response = http.request(method, path)
    assert response.status_code == 405
    assert response.headers["allow"] == allowed
    error = response.json()["error"]
    assert error["code"] == "method_not_allowed" and allowed in error["message"]


@pytest.mark.parametrize("path", ["/v1/nope", "/v1/sessions/s-1/nope", "/ui/nope.js", "/会话"])
def test_an_unknown_route_is_a_404_in_the_api_error_shape(http: TestClient, path: str) -> None:
    response = http.get(path)
    assert response.status_code == 404
    error = response.json()["error"]
    assert error["code"] == "not_found" and error["type"] == "not_found_error"


# -- session ids that round-trip -----------------------------------------------------------


@pytest.mark.parametrize("sid", ["a/b", "/", "tenant/", ".", ".."])
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_an_id_the_paths_cannot_name_is_refused_at_creation(
    http: TestClient, upstream: FaultyUpstream, protocol: str, sid: str
) -> None:
    response = send(http, protocol, sid, [{"role": "user", "content": "hi"}])
    assert response.status_code == 400, response.text[:400]
    assert response.json()["error"]["code"] == "invalid_session_id"
    assert upstream.requests == []
    assert http.get("/v1/sessions").json()["data"] == []


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The service as a real process (Starlette's test client decodes a path twice, so
    ``%252F`` would reach the app as ``/``), on SQLite, with the failing upstream."""
    data = tmp_path_factory.mktemp("served")
    with (
        faulty_upstream() as fake,
        running_service(f"sqlite:///{data / 'sessions.db'}", fake.base_url, data) as service,
    ):
        yield service.url


@pytest.mark.parametrize(
    "sid", ["a?b#c", "%2F", "a\\b", "...", "会话 🙂", "a%20b", " x ", "%2e%2e"]
)
def test_every_id_accepted_can_be_read_inspected_and_deleted(served: str, sid: str) -> None:
    with httpx.Client(base_url=served, timeout=30) as client:
        asked = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}],
                 "metadata": {"session_id": sid}}  # fmt: skip
        answer = client.post("/v1/chat/completions", json=asked)
        assert answer.status_code == 200, answer.text[:400]
        assert sid in [row["id"] for row in client.get("/v1/sessions").json()["data"]]
        path = f"/v1/sessions/{quote(sid, safe='')}"
        history = client.get(f"{path}/messages").json()["data"]
        assert [entry["message"]["role"] for entry in history] == ["user", "assistant"]
        assert client.get(f"{path}/context").status_code == 200
        assert client.delete(path).status_code in (200, 204)
        assert client.get(f"{path}/messages").status_code == 404
