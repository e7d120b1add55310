"""The conversation's integrity in the service: the question is always sent, a reply that
did not arrive whole is never stored, and an ``Idempotency-Key`` answers one request only.

The upstream is a real HTTP server on 127.0.0.1 (a raw socket, so it can stop
a stream cleanly, cut it, reset it or stall it, as a failing upstream or a
proxy does), driven through the real ``openai`` SDK against the app in-process.
"""

from __future__ import annotations

import contextlib
import json
import socket
import struct
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from fastapi.testclient import TestClient

from ctxwindow import count_tokens
from ctxwindow.server import Settings, create_app

from .support.stores import async_stores

REPLY = "Your parcel left the depot in 東京 this morning 🚚 and reaches Osaka tomorrow."
# The service gives up on a stalled upstream after TIMEOUT (the stall lasts longer). Every
# other test gives it PATIENCE: on a loaded machine an answer can take seconds, and a
# timeout there would be another fault than the one the test sets up.
TIMEOUT, STALL, PATIENCE = 2.0, 3.0, 60.0


def events(text: str) -> list[bytes]:
    """``text`` as chat.completion.chunk events, a few characters each."""
    out = []
    for i in range(0, len(text), 9):
        choice = {"index": 0, "delta": {"content": text[i : i + 9]}, "finish_reason": None}
        event = {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "gpt-4o"}
        out.append(b"data: " + json.dumps({**event, "choices": [choice]}).encode() + b"\n\n")
    return out


def completion(text: Any) -> bytes:
    message = {"role": "assistant", "content": text}
    choice = {"index": 0, "message": message, "finish_reason": "stop"}
    body = {"id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": "gpt-4o"}
    return json.dumps({**body, "choices": [choice]}).encode()


class Upstream:
    """An OpenAI-compatible upstream on a raw socket that fails as ``fail`` says.

    Streams: ``eof`` (ends cleanly without ``[DONE]``), ``cut`` (the connection
    closes mid-body), ``reset`` (a TCP reset mid-stream), ``stall`` (stops
    sending, longer than the service's upstream timeout), ``garbage`` (an HTML
    line mid-stream), ``error`` (an error event mid-stream). Completions:
    ``truncated`` (the JSON cut short), ``short`` (fewer bytes than its
    Content-Length, then closed), ``invalid`` (a reply whose content is no text);
    ``short-400`` answers a stream with an error whose body is cut short.
    """

    def __init__(self) -> None:
        self.fail: str | None = None
        self.requests: list[dict[str, Any]] = []
        self.server = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.server.getsockname()[1]}/v1"
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    @property
    def last(self) -> list[dict[str, Any]]:
        messages: list[dict[str, Any]] = self.requests[-1]["messages"]
        return messages

    def close(self) -> None:
        self.server.close()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn: socket.socket) -> None:
        # The service may hang up first (it stops reading at an upstream error event).
        with conn, contextlib.suppress(ConnectionError):
            body = self._read(conn)
            if body is None:
                return
            if body.get("stream"):
                self._stream(conn)
            else:
                self._complete(conn)

    def _read(self, conn: socket.socket) -> dict[str, Any] | None:
        data = b""
        while b"\r\n\r\n" not in data:
            more = conn.recv(65536)
            if not more:
                return None
            data += more
        head, _, body = data.partition(b"\r\n\r\n")
        length = next(
            int(line.split(b":")[1]) for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        )  # fmt: skip
        while len(body) < length:
            body += conn.recv(65536)
        parsed: dict[str, Any] = json.loads(body)
        self.requests.append(parsed)
        return parsed

    def _complete(self, conn: socket.socket) -> None:
        body = completion(5 if self.fail == "invalid" else REPLY)
        if self.fail == "truncated":
            body = body[: len(body) // 2]
        length = len(body) * 2 if self.fail == "short" else len(body)
        conn.sendall(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
            + f"Content-Length: {length}\r\nConnection: close\r\n\r\n".encode()
            + body
        )

    def _stream(self, conn: socket.socket) -> None:
        if self.fail == "short-400":  # an error answer cut short
            conn.sendall(b'HTTP/1.1 400 Bad Request\r\nContent-Length: 100\r\n\r\n{"error"')
            return
        conn.sendall(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
            b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
        )
        parts = events(REPLY)
        half = len(parts) // 2
        for part in parts[:half]:
            _chunk(conn, part)
        fail = self.fail
        if fail == "garbage":
            _chunk(conn, b"<html><body>502 Bad Gateway</body></html>\n")
        elif fail == "error":
            _chunk(conn, b'data: {"error": {"message": "overloaded", "type": "server_error"}}\n\n')
        elif fail == "cut":
            return  # closed without the chunked body's end
        elif fail == "reset":
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            return
        elif fail == "stall":
            time.sleep(STALL)
            return
        for part in parts[half:]:
            _chunk(conn, part)
        if fail != "eof":
            _chunk(conn, b"data: [DONE]\n\n")
        conn.sendall(b"0\r\n\r\n")


def _chunk(conn: socket.socket, data: bytes) -> None:
    conn.sendall(f"{len(data):x}\r\n".encode() + data + b"\r\n")


@pytest.fixture
def upstream() -> Iterator[Upstream]:
    server = Upstream()
    yield server
    server.close()


@pytest.fixture(params=["memory", "sqlite", "redis", "postgresql"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    with async_stores(request.param, tmp_path) as open_store:
        yield open_store


@pytest.fixture
def http(request: pytest.FixtureRequest, upstream: Upstream, store: Any) -> Iterator[TestClient]:
    callspec = getattr(request.node, "callspec", None)
    stalls = callspec is not None and callspec.params.get("fail") == "stall"
    timeout = TIMEOUT if stalls else PATIENCE
    settings = Settings(store="memory://", upstream=upstream.url, upstream_timeout=timeout)
    with TestClient(create_app(settings, store=store())) as client:
        yield client


def sdk(http: TestClient, **headers: str) -> openai.OpenAI:
    return openai.OpenAI(
        base_url="http://testserver/v1", api_key="none", http_client=http, max_retries=0,
        default_headers=headers,
    )  # fmt: skip


def chat(http: TestClient, content: str, session: str = "s", **headers: str) -> Any:
    return http.post(
        "/v1/chat/completions",
        headers={"X-Session-Id": session, **headers},
        json={"model": "gpt-4o", "messages": [{"role": "user", "content": content}]},
    )


def stored(http: TestClient, session: str = "s") -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = http.get(f"/v1/sessions/{session}/messages").json()["data"]
    return items


# -- point 2: the question is always sent --------------------------------------------------


@pytest.mark.parametrize("store", ["memory"], indirect=True)  # the store plays no part
def test_a_question_over_a_narrow_budget_is_sent_compressed(
    http: TestClient, upstream: Upstream
) -> None:
    """X-Context-Max-Tokens: 50 and a 100-word question: never ``messages: []``."""
    question = "Where is my parcel? " + " ".join(f"detail{i}" for i in range(100))
    response = chat(http, question, **{"X-Context-Max-Tokens": "50"})
    assert response.status_code == 200
    [sent] = upstream.last
    assert sent["role"] == "user" and sent["content"].startswith("Where is my parcel?")
    assert count_tokens(upstream.last) == int(response.headers["x-context-tokens"]) <= 50


@pytest.mark.parametrize("store", ["memory"], indirect=True)  # the store plays no part
def test_a_question_that_cannot_fit_beside_the_system_prompt_is_400(
    http: TestClient, upstream: Upstream
) -> None:
    system = {"role": "system", "content": "Always answer in formal Japanese. " * 4}
    response = http.post(
        "/v1/chat/completions",
        headers={"X-Session-Id": "s", "X-Context-Max-Tokens": "40"},
        json={"model": "gpt-4o", "messages": [system, {"role": "user", "content": "where? " * 60}]},
    )
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "context_length_exceeded"
    assert "the question" in error["message"] and "budget of 40" in error["message"]
    assert upstream.requests == []


# -- point 3: a reply that did not arrive whole is never stored ------------------------------

STREAM_FAULTS = ["eof", "cut", "reset", "stall", "garbage", "error"]


def stream(http: TestClient, content: str, **headers: str) -> str:
    """The streamed reply's text, through the SDK (which raises on an error event)."""
    client = sdk(http, **{"X-Session-Id": "s", **headers})
    chunks = client.chat.completions.create(
        model="gpt-4o", messages=[{"role": "user", "content": content}], stream=True
    )
    return "".join(chunk.choices[0].delta.content or "" for chunk in chunks)


@pytest.mark.parametrize("fail", STREAM_FAULTS)
def test_a_stream_that_does_not_end_properly_is_an_error_event_and_stores_no_reply(
    http: TestClient, upstream: Upstream, fail: str
) -> None:
    upstream.fail = fail
    with pytest.raises(openai.APIError) as raised:
        stream(http, "Where is parcel A-1?", **{"Idempotency-Key": "k1"})
    assert isinstance(raised.value.body, dict)
    assert raised.value.body["code"] == ("upstream_timeout" if fail == "stall" else "bad_gateway")
    assert len(upstream.requests) == 1  # the fault came from the upstream, not before it
    history = stored(http)
    assert [e["message"]["role"] for e in history] == ["user"]
    assert history[0]["metadata"]["unanswered"] is True
    # The retry with the same key asks again (nothing to replay) and gets the whole reply.
    upstream.fail = None
    assert stream(http, "Where is parcel A-1?", **{"Idempotency-Key": "k1"}) == REPLY
    assert len(upstream.requests) == 2
    assert [e["message"]["content"] for e in stored(http)] == ["Where is parcel A-1?", REPLY]
    # ... and the next turn is built on the whole reply, once.
    chat(http, "Thanks. And parcel A-2?")
    assert [m["content"] for m in upstream.last] == [
        "Where is parcel A-1?", REPLY, "Thanks. And parcel A-2?"
    ]  # fmt: skip


@pytest.mark.parametrize("store", ["memory"], indirect=True)
@pytest.mark.parametrize("fail", ["eof", "garbage"])
def test_the_client_sees_status_200_and_an_error_event_as_the_last_event(
    http: TestClient, upstream: Upstream, fail: str
) -> None:
    """Once streaming began the status is 200: the error is the stream's last event."""
    upstream.fail = fail
    response = http.post(
        "/v1/chat/completions",
        headers={"X-Session-Id": "s"},
        json={"model": "gpt-4o", "stream": True,
              "messages": [{"role": "user", "content": "Parcel B-2?"}]},
    )  # fmt: skip
    assert response.status_code == 200
    last = response.content.rstrip(b"\n").rsplit(b"\n", 1)[-1]
    assert json.loads(last.removeprefix(b"data: "))["error"]["code"] == "bad_gateway"
    assert b"data: [DONE]" not in response.content.split(b"\n")
    assert 'ctxwindow_upstream_errors_total{kind="malformed"} 1.0' in http.get("/metrics").text


@pytest.mark.parametrize("store", ["memory"], indirect=True)  # the store plays no part
def test_a_stateless_stream_that_breaks_off_ends_with_an_error_event(
    http: TestClient, upstream: Upstream
) -> None:
    upstream.fail = "reset"
    client = sdk(http)
    with pytest.raises(openai.APIError) as raised:
        chunks = client.chat.completions.create(
            model="gpt-4o", messages=[{"role": "user", "content": "Parcel C-3?"}], stream=True
        )
        list(chunks)
    assert isinstance(raised.value.body, dict) and raised.value.body["code"] == "bad_gateway"


@pytest.mark.parametrize("store", ["memory"], indirect=True)
def test_an_error_answer_cut_short_is_502(http: TestClient, upstream: Upstream) -> None:
    upstream.fail = "short-400"
    client = sdk(http, **{"X-Session-Id": "s"})
    with pytest.raises(openai.APIStatusError) as raised:
        client.chat.completions.create(
            model="gpt-4o", messages=[{"role": "user", "content": "Parcel H-8?"}], stream=True
        )
    assert raised.value.status_code == 502


@pytest.mark.parametrize("fail", ["truncated", "short", "invalid"])
def test_a_truncated_or_invalid_completion_is_502_and_stores_no_reply(
    http: TestClient, upstream: Upstream, fail: str
) -> None:
    upstream.fail = fail
    response = chat(http, "Where is parcel D-4?", **{"Idempotency-Key": "k4"})
    assert response.status_code == 502
    assert response.json()["error"]["code"] == "bad_gateway"
    assert [e["message"]["role"] for e in stored(http)] == ["user"]
    upstream.fail = None
    again = chat(http, "Where is parcel D-4?", **{"Idempotency-Key": "k4"})
    assert again.json()["choices"][0]["message"]["content"] == REPLY
    assert [e["message"]["role"] for e in stored(http)] == ["user", "assistant"]


# -- point 6: an Idempotency-Key answers one request; a batch is stored whole or not at all --


def ask(http: TestClient, key: str, content: str, **extra: Any) -> Any:
    return http.post(
        "/v1/chat/completions",
        headers={"X-Session-Id": "s", "Idempotency-Key": key},
        json={"model": "gpt-4o", "messages": [{"role": "user", "content": content}], **extra},
    )


def reused(response: Any) -> bool:
    error = response.json()["error"]
    return response.status_code == 422 and error["code"] == "idempotency_key_reused"


@pytest.mark.parametrize("answered", [True, False])
def test_a_key_reused_with_another_body_is_422_and_answers_nothing(
    http: TestClient, upstream: Upstream, answered: bool
) -> None:
    """Whether the first request got its reply or not, another body with its key is refused:
    never the answer to the earlier question, nothing stored, nothing sent upstream."""
    upstream.fail = None if answered else "truncated"
    ask(http, "k1", "Where is parcel E-5?")
    before, calls = stored(http), len(upstream.requests)
    assert reused(ask(http, "k1", "Cancel my subscription"))
    assert reused(ask(http, "k1", "Where is parcel E-5?", temperature=0.2))  # not only messages
    assert stored(http) == before and len(upstream.requests) == calls


def test_the_same_body_with_its_key_is_replayed_streamed_or_not(
    http: TestClient, upstream: Upstream
) -> None:
    first = ask(http, "k2", "Where is parcel F-6? 包裹")
    again = ask(http, "k2", "Where is parcel F-6? 包裹")
    assert again.headers["x-context-replayed"] == "true"
    assert again.json()["choices"][0]["message"] == first.json()["choices"][0]["message"]
    streamed = ask(http, "k2", "Where is parcel F-6? 包裹", stream=True)  # how, not what
    assert streamed.headers["x-context-replayed"] == "true"
    assert len(upstream.requests) == 1 and len(stored(http)) == 2


@pytest.mark.parametrize("store", ["memory", "sqlite"], indirect=True)
def test_a_retry_refused_at_the_build_takes_its_first_attempts_turn_out(
    http: TestClient, upstream: Upstream
) -> None:
    """The first attempt stored its turn and failed upstream (502); its retry, under a
    budget its system prompt alone overflows, is refused (400) after the turn was found
    stored: the refused request leaves nothing of itself, and a retry that fits is a new
    request, answered."""
    system = {"role": "system", "content": "Always answer in formal Japanese. 敬語で。 " * 4}
    turn = [system, {"role": "user", "content": "Where is parcel G-7? 🚚"}]

    def retry(**headers: str) -> Any:
        return http.post(
            "/v1/chat/completions",
            headers={"X-Session-Id": "s", "Idempotency-Key": "k3", **headers},
            json={"model": "gpt-4o", "messages": turn},
        )

    upstream.fail = "truncated"
    assert retry().status_code == 502
    assert [m["message"]["role"] for m in stored(http)] == ["system", "user"]
    upstream.fail = None
    refused = retry(**{"X-Context-Max-Tokens": "40"})
    assert refused.status_code == 400
    assert refused.json()["error"]["code"] == "context_length_exceeded"
    assert http.get("/v1/sessions/s/messages").status_code == 404  # nothing stored
    assert retry().status_code == 200
    assert [m["message"]["role"] for m in stored(http)] == ["system", "user", "assistant"]


def test_the_sessions_api_binds_its_key_to_the_messages(http: TestClient) -> None:
    route = "/v1/sessions/s/messages"
    note = {"messages": [{"role": "user", "content": "Deliver to the back door 🚪"}]}
    first = http.post(route, json=note, headers={"Idempotency-Key": "n1"})
    again = http.post(route, json=note, headers={"Idempotency-Key": "n1"})
    assert first.status_code == again.status_code == 200
    assert again.json()["data"] == first.json()["data"]
    other = {"messages": [{"role": "user", "content": "Deliver to the front door"}]}
    assert reused(http.post(route, json=other, headers={"Idempotency-Key": "n1"}))
    assert [e["message"]["content"] for e in stored(http)] == ["Deliver to the back door 🚪"]


CALL = {
    "role": "assistant", "content": None,
    "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
}  # fmt: skip
ASK = {"role": "user", "content": "Parcel G-7?"}
BAD_BATCHES = [
    [ASK, {"role": "tool", "tool_call_id": "x", "content": "{}"}],  # an orphan result
    [ASK, CALL, {"role": "user", "content": "and?"}],  # a call without its result
    [ASK, {"role": "wizard", "content": "abracadabra"}],  # not a message
]


@pytest.mark.parametrize("batch", BAD_BATCHES)
@pytest.mark.parametrize("route", ["/v1/chat/completions", "/v1/sessions/s/messages"])
def test_a_batch_with_a_bad_message_is_400_and_stores_none_of_it(
    http: TestClient, upstream: Upstream, route: str, batch: list[dict[str, Any]]
) -> None:
    response = http.post(
        route, headers={"X-Session-Id": "s"}, json={"model": "gpt-4o", "messages": batch}
    )
    assert response.status_code == 400
    assert http.get("/v1/sessions/s/messages").status_code == 404  # nothing stored
    assert upstream.requests == []
