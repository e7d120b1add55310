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
from ctxwindow.server.openapi import ROUTES

from .support.chat_upstream import FakeUpstream
from .support.stores import async_stores

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


def peak_rss(pid: int) -> int:
    """The process's peak resident memory so far, in bytes (Linux)."""
    status = Path(f"/proc/{pid}/status").read_text()
    kilobytes = next(line.split()[1] for line in status.splitlines() if line.startswith("VmHWM"))
    return int(kilobytes) * 1024


def chunked_attack(port: int, total: int) -> bytes:
    """POST ``total`` bytes as a chunked body; the first line of the answer (read while
    sending: a server may answer and close before the body ends)."""
    import socket
    import threading

    answer = bytearray()
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        reader = threading.Thread(target=lambda: answer.extend(sock.recv(200)), daemon=True)
        reader.start()
        head = b"POST /v1/sessions/big/messages HTTP/1.1\r\nHost: x\r\n"
        sock.sendall(head + b"Transfer-Encoding: chunked\r\nContent-Type: application/json\r\n\r\n")
        chunk = b"x" * (64 * 1024)
        try:
            for _ in range(total // len(chunk)):
                sock.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            sock.sendall(b"0\r\n\r\n")
        except OSError:  # the server answered and closed: the rest is not read
            pass
        reader.join(timeout=30)
    return bytes(answer.split(b"\r\n", 1)[0])


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads /proc (Linux)")
def test_a_chunked_attack_on_a_real_server_costs_under_20_mb(tmp_path: Path) -> None:
    """The issue's attack, on a served process: 200 MB chunked, no Content-Length."""
    from .support.server_process import free_port, server

    port = free_port()
    with server(port, "memory://", "http://127.0.0.1:9/v1", tmp_path) as process:
        assert chunked_attack(port, 2 * MB).startswith(b"HTTP/1.1 413")  # warm up
        before = peak_rss(process.pid)
        assert chunked_attack(port, 200 * MB).startswith(b"HTTP/1.1 413")
        grown = peak_rss(process.pid) - before
    assert grown < 20 * MB, f"the attack cost {grown / MB:.1f} MB"


# -- point 4: input is a 4xx naming what is wrong, never a 5xx --------------------------------


def nested(depth: int) -> Any:
    value: Any = "bottom"
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize("depth", [65, 1_000, 100_000])
@pytest.mark.parametrize("route", [CHAT, "/v1/sessions/deep/messages"])
def test_json_nested_too_deep_is_400(http: TestClient, route: str, depth: int) -> None:
    raw_body = b'{"model": "gpt-4o", "x": ' + b"[" * depth + b"]" * depth + b', "messages": []}'
    response = http.post(route, content=raw_body, headers={"X-Session-Id": "deep"})
    assert response.status_code == 400
    assert "deeper than 64 levels" in response.json()["error"]["message"]


def test_json_nested_within_the_limit_is_taken(http: TestClient, upstream: FakeUpstream) -> None:
    response = http.post(CHAT, json=body(x=nested(60)))
    assert response.status_code == 200
    assert upstream.requests[-1]["x"] == nested(60)


@pytest.mark.parametrize(
    ("raw_body", "param"),
    [
        (b'{"model": "gpt-4o", "messages": [{"role": "user", "content": "a\\ud800b"}]}',
         "messages.0.content"),
        (b'{"model": "gpt-4o", "messages": [{"role": "user", "content": [{"type": "text", '
         b'"text": "\\udfff"}]}]}', "messages.0.content.0.text"),
        (b'{"model": "gpt-4o", "messages": [{"role": "user", "content": "a\\u0000b"}]}',
         "messages.0.content"),
        (b'{"model": "gpt-4o", "messages": [{"role": "user", "content": "ok", "\\ud83d": 1}]}',
         "messages.0.\\ud83d"),
        (b'{"model": "gpt-4o\\ud800", "messages": [{"role": "user", "content": "ok"}]}', "model"),
        (b'{"model": "gpt-4o", "temperature": 1e400, "messages": [{"role": "user", '
         b'"content": "ok"}]}', "temperature"),
    ],
)  # fmt: skip
def test_text_no_store_can_keep_is_one_400_on_every_store(
    on_every_store: TestClient, raw_body: bytes, param: str
) -> None:
    """A lone surrogate (not Unicode), NUL (PostgreSQL cannot store it), a number out of
    range: the same 400 naming the field on every store, and nothing stored."""
    for route in (CHAT, "/v1/sessions/text/messages"):
        response = on_every_store.post(route, content=raw_body, headers={"X-Session-Id": "text"})
        assert response.status_code == 400, (route, response.text)
        assert response.json()["error"]["param"] == param
    assert on_every_store.get("/v1/sessions/text/messages").status_code == 404


def test_nan_is_not_json(http: TestClient) -> None:
    raw_body = b'{"model": "gpt-4o", "temperature": NaN, "messages": []}'
    response = http.post(CHAT, content=raw_body)
    assert (response.status_code, response.json()["error"]["code"]) == (400, "invalid_json")
    assert "NaN is not a JSON number" in response.json()["error"]["message"]


def test_a_surrogate_pair_is_one_character_and_taken(on_every_store: TestClient) -> None:
    escaped = '{"messages": [{"role": "user", "content": "\\ud83d\\ude00 包裹"}]}'
    raw_body = escaped.encode()  # the emoji as an escaped surrogate pair, the rest UTF-8
    response = on_every_store.post("/v1/sessions/pair/messages", content=raw_body)
    assert response.status_code == 200
    stored = on_every_store.get("/v1/sessions/pair/messages").json()["data"]
    assert stored[0]["message"]["content"] == "😀 包裹"


@pytest.mark.parametrize("value", [2**63, -1])
@pytest.mark.parametrize("name", ["limit", "after"])
def test_paging_past_a_64_bit_integer_is_400_on_every_store(
    on_every_store: TestClient, name: str, value: int
) -> None:
    on_every_store.post("/v1/sessions/pages/messages", json={"messages": body()["messages"]})
    response = on_every_store.get("/v1/sessions/pages/messages", params={name: value})
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["param"] == name
    assert error["message"].startswith(f"{name}: ")
    largest = on_every_store.get("/v1/sessions/pages/messages", params={name: 2**63 - 1})
    assert largest.status_code == 200


def test_a_context_query_no_store_can_keep_is_400(http: TestClient) -> None:
    http.post("/v1/sessions/q/messages", json={"messages": body()["messages"]})
    response = http.get("/v1/sessions/q/context", params={"query": "parcel\x00"})
    assert (response.status_code, response.json()["error"]["param"]) == (400, "query")


@pytest.fixture
def long_tenant(upstream: FakeUpstream) -> Iterator[TestClient]:
    """The tenant of key ``k`` has a name of 100 characters."""
    app = make_app(upstream, api_keys={"k": "t" * 100})
    with TestClient(app, raise_server_exceptions=False) as client:
        client.headers["Authorization"] = "Bearer k"
        yield client


def test_a_session_id_too_long_with_its_tenant_is_400_naming_the_limit(
    long_tenant: TestClient,
) -> None:
    """The store keeps 256 characters: 100 of tenant, a colon, so 155 for the client."""
    response = long_tenant.post(CHAT, json=body(), headers={"X-Session-Id": "s" * 160})
    assert response.status_code == 400
    error = response.json()["error"]
    assert (error["param"], error["code"]) == ("X-Session-Id", "invalid_session_id")
    assert "1 to 155 characters" in error["message"]
    assert "256" in error["message"]
    path = f"/v1/sessions/{'s' * 160}/messages"
    response = long_tenant.post(path, json={"messages": body()["messages"]})
    assert (response.status_code, response.json()["error"]["param"]) == (400, "session_id")
    assert (
        long_tenant.post(CHAT, json=body(), headers={"X-Session-Id": "s" * 155}).status_code == 200
    )


@pytest.mark.parametrize("bad", ["a%00b", "tab%09", "%7F"])
def test_a_session_id_with_control_characters_is_400(http: TestClient, bad: str) -> None:
    response = http.post(f"/v1/sessions/{bad}/messages", json={"messages": body()["messages"]})
    assert (response.status_code, response.json()["error"]["param"]) == (400, "session_id")
    assert http.get(f"/v1/sessions/{bad}/messages").status_code == 400


def request_with(*headers: tuple[bytes, bytes]) -> Any:
    from starlette.requests import Request

    return Request({"type": "http", "method": "POST", "path": "/", "headers": list(headers)})


@pytest.mark.parametrize(
    "value",
    [b"\xb2", "²".encode(), "١٢".encode(), b"-5", b"0", b"000", b"+5", b" 5", b"5.0", b"1e3",
     b"0x10", b"", "9" * 30 + "²"],
)  # fmt: skip
def test_context_max_tokens_takes_only_ascii_digits_from_1(value: bytes | str) -> None:
    from ctxwindow.server.errors import APIError
    from ctxwindow.server.inputs import context_max_tokens

    with pytest.raises(APIError) as raised:
        raw_value = value if isinstance(value, bytes) else value.encode()
        context_max_tokens(request_with((b"x-context-max-tokens", raw_value)))
    assert raised.value.status == 400
    assert raised.value.param == "X-Context-Max-Tokens"


def test_context_max_tokens_reads_a_number() -> None:
    from ctxwindow.server.inputs import context_max_tokens

    assert context_max_tokens(request_with()) is None
    assert context_max_tokens(request_with((b"x-context-max-tokens", b"0050"))) == 50
    largest = request_with((b"x-context-max-tokens", b"0009223372036854775807"))
    assert context_max_tokens(largest) == 2**63 - 1
    for huge in (b"9223372036854775808", b"9" * 19, b"9" * 5000):  # past any budget: capped
        assert context_max_tokens(request_with((b"x-context-max-tokens", huge))) == 2**63 - 1


@pytest.mark.parametrize(("value", "status"), [(b"\xb2", 400), (b"9" * 5000, 200)])
def test_a_context_max_tokens_the_int_parser_refuses_is_400_or_capped(
    http: TestClient, value: bytes, status: int
) -> None:
    """``"²".isdigit()`` is true and ``int("²")`` fails, as ``int()`` of 5,000 digits: 500s
    before. ``²`` is not a number (400); 5,000 nines narrow nothing (200)."""
    answer = raw(http).request(
        "POST", CHAT, headers=[(b"x-session-id", b"h"), (b"x-context-max-tokens", value)],
        chunks=[json.dumps(body()).encode()],
    )  # fmt: skip
    assert answer.status == status
    if status == 400:
        assert answer.error["param"] == "X-Context-Max-Tokens"


BAD_TOOLS: list[Any] = [
    "get_weather",
    {"type": "function"},
    [1, 2],
    [{"type": "function", "function": "get_weather"}],
    [{"type": "function", "function": {"name": 42}}],
    [{"type": "function", "function": {"name": "f", "description": ["x"]}}],
    [{"type": "function", "function": {"name": "f", "parameters": "none"}}],
    [{"type": "function", "function": {"name": "f", "parameters": {"properties": [1]}}}],
    [{"function": {"name": "f", "parameters": {"properties": {"city": "a string"}}}}],
    [{"function": {"name": "f", "parameters": {"properties": {"city": {"enum": 5}}}}}],
    [{"function": {"name": "f", "parameters": {"properties": {"city": {"type": 5}}}}}],
    [{"name": "legacy", "description": {"a": 1}}],
]


@pytest.mark.parametrize("tools", BAD_TOOLS)
def test_tools_that_are_not_tool_objects_are_400_naming_them(tools: Any) -> None:
    from ctxwindow.server.errors import APIError
    from ctxwindow.server.inputs import check_tools

    with pytest.raises(APIError) as raised:
        check_tools(tools)
    assert raised.value.status == 400
    assert str(raised.value.param).startswith("tools")


def test_tools_the_check_takes_can_be_counted() -> None:
    """Every ``tools`` value ``check_tools`` takes is counted without an error."""
    from hypothesis import given
    from hypothesis import strategies as st

    from ctxwindow import count_tokens
    from ctxwindow.server.errors import APIError
    from ctxwindow.server.inputs import check_tools

    keys = st.sampled_from(
        ["type", "function", "name", "description", "parameters", "properties", "enum", "city"]
    )
    json_values = st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=5),
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(keys, inner, max_size=4),
        max_leaves=12,
    )

    @given(json_values)
    def counted(tools: Any) -> None:
        try:
            check_tools(tools)
        except APIError:
            return
        count_tokens([{"role": "user", "content": "hi"}], "gpt-4o", tools)

    counted()


@pytest.mark.parametrize("tools", BAD_TOOLS[:4])
def test_stateless_tools_that_are_not_tool_objects_are_400(http: TestClient, tools: Any) -> None:
    response = http.post(CHAT, json=body(tools=tools))
    assert response.status_code == 400
    assert response.json()["error"]["param"].startswith("tools")


# -- point 8: one session id, however it is sent ----------------------------------------------

IDS = ["会话-42", "セッション・七", "🙂🚚", "Ångström-ß"]
COMPOSED, DECOMPOSED = "\u00c5sa", "A\u030asa"  # "Åsa" both ways


def messages_of(client: TestClient, session: str) -> list[str]:
    response = client.get(f"/v1/sessions/{session}/messages")
    assert response.status_code == 200, response.text
    return [e["message"]["content"] for e in response.json()["data"]]


@pytest.mark.parametrize("session", IDS)
def test_a_unicode_id_in_the_path_is_one_session_on_every_store(
    on_every_store: TestClient, session: str
) -> None:
    appended = on_every_store.post(
        f"/v1/sessions/{session}/messages", json={"messages": body("包裹在哪里？")["messages"]}
    )
    assert appended.status_code == 200
    assert messages_of(on_every_store, session) == ["包裹在哪里？"]


def test_composed_and_decomposed_ids_are_one_session(on_every_store: TestClient) -> None:
    """NFC wherever an id comes in: the path, and ``metadata.session_id``."""
    client = on_every_store
    client.post(f"/v1/sessions/{DECOMPOSED}/messages", json={"messages": body("one")["messages"]})
    client.post(CHAT, json=body("two", metadata={"session_id": DECOMPOSED}))
    client.post(CHAT, json=body("three", metadata={"session_id": COMPOSED}))
    reply = FakeUpstream().reply
    assert messages_of(client, COMPOSED) == ["one", "two", reply, "three", reply]
    assert messages_of(client, DECOMPOSED) == messages_of(client, COMPOSED)


@pytest.mark.parametrize("session", [*IDS, DECOMPOSED])
def test_a_utf8_session_header_is_the_session_of_the_same_id_in_the_path(
    http: TestClient, session: str
) -> None:
    answer = raw(http).request(
        "POST", CHAT, headers=[(b"x-session-id", session.encode())],
        chunks=[json.dumps(body("Où est mon colis ?")).encode()],
    )  # fmt: skip
    assert answer.status == 200
    assert messages_of(http, session)[0] == "Où est mon colis ?"
    assert messages_of(http, COMPOSED if session == DECOMPOSED else session)


def test_a_session_header_that_is_not_utf8_is_400(http: TestClient) -> None:
    answer = raw(http).request(
        "POST", CHAT, headers=[(b"x-session-id", b"\xff\xfe")],
        chunks=[json.dumps(body()).encode()],
    )  # fmt: skip
    assert (answer.status, answer.error["param"]) == (400, "X-Session-Id")


def test_the_session_id_helper_reads_utf8_headers_and_the_body() -> None:
    from ctxwindow.server.errors import APIError
    from ctxwindow.server.inputs import session_id

    for session in IDS:
        assert session_id(request_with((b"x-session-id", session.encode())), {}) == session
    assert session_id(request_with(), {"metadata": {"session_id": "会话"}}) == "会话"
    assert session_id(request_with(), {}) is None
    with pytest.raises(APIError) as raised:
        session_id(request_with((b"x-session-id", b"caf\xe9")), {})  # Latin-1, not UTF-8
    assert (raised.value.status, raised.value.param) == (400, "X-Session-Id")


def test_an_idempotency_key_is_read_as_utf8(http: TestClient) -> None:
    def append(key: bytes) -> Answer:
        return raw(http).request(
            "POST", "/v1/sessions/keys/messages", headers=[(b"idempotency-key", key)],
            chunks=[json.dumps({"messages": body()["messages"]}).encode()],
        )  # fmt: skip

    assert append("重试-1".encode()).status == 200
    assert append("重试-1".encode()).status == 200  # the same key: nothing stored twice
    assert len(messages_of(http, "keys")) == 1
    refused = append(b"\xff")
    assert (refused.status, refused.error["param"]) == (400, "Idempotency-Key")
    assert append(b"k" * 256).status == 400


# -- point 10: the OpenAPI document says what the service reads and answers --------------------


def openapi_of(upstream: FakeUpstream, **settings: Any) -> dict[str, Any]:
    with TestClient(make_app(upstream, **settings)) as client:
        document: dict[str, Any] = client.get("/openapi.json").json()
    return document


def header_names(operation: dict[str, Any]) -> set[str]:
    return {p["name"] for p in operation.get("parameters", []) if p["in"] == "header"}


def test_openapi_lists_the_headers_each_route_reads(upstream: FakeUpstream) -> None:
    paths = openapi_of(upstream)["paths"]
    chat = paths[CHAT]["post"]
    assert header_names(chat) == {"X-Session-Id", "Idempotency-Key", "X-Context-Max-Tokens"}
    assert header_names(paths["/v1/sessions/{session_id}/messages"]["post"]) == {"Idempotency-Key"}
    assert set(chat["responses"]["200"]["headers"]) >= {"X-Context-Tokens", "X-Context-Evicted"}
    for path, operations in paths.items():
        for method, operation in operations.items():
            assert "authorization" not in {n.lower() for n in header_names(operation)}, path
            assert (method, path) in ROUTES  # so every route is described


def test_openapi_lists_the_statuses_each_route_answers_with_the_error_body(
    upstream: FakeUpstream,
) -> None:
    document = openapi_of(upstream, api_keys={"k": "t"}, rate_limit_per_minute=10)
    paths = document["paths"]
    expected = {
        (CHAT, "post"): {"200", "400", "401", "409", "413", "422", "429", "502", "503", "504"},
        ("/v1/sessions/{session_id}/messages", "post"):
            {"200", "400", "401", "409", "413", "422", "429", "503"},
        ("/v1/sessions/{session_id}/messages", "get"): {"200", "400", "401", "404", "429", "503"},
        ("/v1/sessions/{session_id}/context", "get"):
            {"200", "400", "401", "404", "409", "429", "503"},
        ("/v1/sessions/{session_id}", "delete"): {"200", "400", "401", "404", "409", "429", "503"},
        ("/healthz", "get"): {"200"},
        ("/readyz", "get"): {"200", "503"},
        ("/metrics", "get"): {"200", "401"},
    }  # fmt: skip
    for (path, method), statuses in expected.items():
        responses = paths[path][method]["responses"]
        assert set(responses) == statuses, (path, method)
        if path == "/readyz":  # its 503 is the readiness body
            continue
        for status in statuses - {"200"}:
            schema = responses[status]["content"]["application/json"]["schema"]
            assert schema == {"$ref": "#/components/schemas/Error"}
        for status in statuses & {"429", "503"}:
            assert "Retry-After" in responses[status]["headers"]
    assert document["components"]["schemas"]["Error"]["required"] == ["error"]
    assert "HTTPValidationError" not in document["components"]["schemas"]
    assert document["components"]["securitySchemes"]["apiKey"]["scheme"] == "bearer"
    assert paths[CHAT]["post"]["security"] == [{"apiKey": []}]
    assert "security" not in paths["/readyz"]["get"]


def test_openapi_without_keys_or_rate_limit_promises_no_401_or_429(upstream: FakeUpstream) -> None:
    document = openapi_of(upstream)
    for operations in document["paths"].values():
        for operation in operations.values():
            assert not {"401", "429"} & set(operation["responses"])
            assert "security" not in operation
    assert "securitySchemes" not in document["components"]


def test_openapi_bodies_refuse_what_the_service_refuses(upstream: FakeUpstream) -> None:
    paths = openapi_of(upstream)["paths"]
    for path in (CHAT, "/v1/sessions/{session_id}/messages"):
        schema = paths[path]["post"]["requestBody"]["content"]["application/json"]["schema"]
        assert schema["properties"]["model"]["minLength"] == 1
        assert schema["properties"]["messages"]["minItems"] == 1
        assert schema["properties"]["messages"]["items"]["required"] == ["role"]
    limit = paths["/v1/sessions/{session_id}/messages"]["get"]["parameters"]
    bounds = {p["name"]: p["schema"] for p in limit if p["in"] == "query"}
    assert bounds["after"]["maximum"] == 2**63 - 1


def test_the_documented_refusals_are_what_the_service_answers(http: TestClient) -> None:
    for refused in (body(model=""), {"model": "gpt-4o", "messages": []}):
        response = http.post(CHAT, json=refused)
        assert response.status_code == 400


# -- who may read /metrics and /readyz -------------------------------------------------------


@pytest.fixture
def keyed(upstream: FakeUpstream) -> Iterator[TestClient]:
    with TestClient(make_app(upstream, api_keys={"k": "t"})) as client:
        yield client


def test_with_api_keys_metrics_need_one_and_probes_stay_open(keyed: TestClient) -> None:
    assert keyed.get("/healthz").status_code == 200
    assert keyed.get("/readyz").status_code == 200
    refused = keyed.get("/metrics")
    assert (refused.status_code, refused.json()["error"]["code"]) == (401, "invalid_api_key")
    assert keyed.get("/metrics", headers={"Authorization": "Bearer wrong"}).status_code == 401
    scraped = keyed.get("/metrics", headers={"Authorization": "Bearer k"})
    assert scraped.status_code == 200
    assert scraped.headers["content-type"].startswith("text/plain")


def test_metrics_public_opens_metrics(upstream: FakeUpstream) -> None:
    app = make_app(upstream, api_keys={"k": "t"}, metrics_public=True)
    with TestClient(app) as client:
        assert client.get("/metrics").status_code == 200
        assert client.post(CHAT, json=body()).status_code == 401


def test_scraping_metrics_does_not_count_in_the_rate_limit(upstream: FakeUpstream) -> None:
    app = make_app(upstream, api_keys={"k": "t"}, rate_limit_per_minute=1)
    with TestClient(app) as client:
        key = {"Authorization": "Bearer k"}
        for _ in range(3):
            assert client.get("/metrics", headers=key).status_code == 200
        assert client.post(CHAT, json=body(), headers=key).status_code == 200


def test_a_429_says_when_to_retry(upstream: FakeUpstream) -> None:
    now = [100.0]
    settings = Settings(
        store="memory://", upstream="http://u.test/v1", rate_limit_per_minute=1,
        api_keys={"k": "t"},
    )  # fmt: skip
    app = create_app(settings, upstream_transport=upstream.transport(), clock=lambda: now[0])
    with TestClient(app) as client:
        key = {"Authorization": "Bearer k"}
        assert client.post(CHAT, json=body(), headers=key).status_code == 200
        now[0] = 120.5
        refused = client.post(CHAT, json=body(), headers=key)
        assert refused.status_code == 429
        assert refused.headers["retry-after"] == "40"  # the first request leaves at 160


def test_the_redis_rate_limit_says_when_to_retry() -> None:
    import asyncio
    import uuid

    from ctxwindow.server.tenants import RedisLimiter

    from .support.stores import require_server

    async def run() -> tuple[bool, float]:
        prefix = f"ctxwindow-test-{uuid.uuid4().hex}"  # its key expires with the window
        limiter = RedisLimiter(require_server("redis"), 1, window=30.0, prefix=prefix)
        try:
            await limiter.admit("t")
            return await limiter.admit("t"), await limiter.retry_after("t")
        finally:
            await limiter.aclose()

    admitted, wait = asyncio.run(run())
    assert not admitted
    assert 25 < wait <= 30


@pytest.mark.parametrize(
    ("fields", "param"),
    [({"max_tokens": []}, "max_tokens"), ({"max_tokens": -1}, "max_tokens"),
     ({"max_tokens": True}, "max_tokens"), ({"max_tokens": 1.5}, "max_tokens"),
     ({"max_completion_tokens": 2**63}, "max_completion_tokens"),
     ({"stream": "yes"}, "stream"), ({"stream": 1}, "stream"),
     ({"metadata": ["s1"]}, "metadata"), ({"metadata": "s1"}, "metadata")],
)  # fmt: skip
def test_completion_fields_of_the_wrong_type_are_400(fields: dict[str, Any], param: str) -> None:
    """Not a default taken for them: ``"max_tokens": []`` was read as 0, ``"stream": "yes"``
    as true."""
    from ctxwindow.server.errors import APIError
    from ctxwindow.server.inputs import check_completion

    with pytest.raises(APIError) as raised:
        check_completion(body(**fields))
    assert (raised.value.status, raised.value.param) == (400, param)


def test_completion_fields_of_the_right_type_pass() -> None:
    from ctxwindow.server.inputs import check_completion

    check_completion(body(max_tokens=0, max_completion_tokens=None, stream=False, metadata={}))
    check_completion(body())


@pytest.mark.parametrize("fields", [{"max_tokens": []}, {"stream": "yes"}, {"metadata": "s1"}])
def test_chat_refuses_completion_fields_of_the_wrong_type(
    http: TestClient, fields: dict[str, Any]
) -> None:
    assert http.post(CHAT, json=body(**fields)).status_code == 400
