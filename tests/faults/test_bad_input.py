"""The bad-input corpus: every request here is refused with a 4xx naming what is wrong.

Bad input is never a 5xx: a 500 hides a bug and a 503 makes clients retry
and pages operators. A refusal is 400 naming the field, header or parameter
(``error.param`` or ``error.message``), 413 for size, 422 for an
``Idempotency-Key`` reused with another body, and stores nothing. Cases whose
outcome depends on the store run on each one (memory, SQLite, and the shared
Redis and PostgreSQL servers); the others on SQLite, the default store.

The app runs in-process (one per store and module) over real stores, with
the failing upstream of ``tests/faults/upstream.py`` answering.

Budget: ~25 s on 2 cores (about 150 cases).
"""

from __future__ import annotations

import json
import unicodedata
import urllib.parse
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from ctxwindow.server import Settings, create_app
from tests.support.faults.upstream import faulty_upstream
from tests.support.stores import async_stores

KEYS = {"key-acme": "acme", "key-long": "t" * 100}  # API key -> tenant
CHAT = "/v1/chat/completions"
EVERY_STORE = ["memory", "sqlite", "redis", "postgresql"]


@pytest.fixture(scope="module")
def service(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[TestClient]:
    """The app over a store of kind ``request.param`` (one store for the module)."""
    tmp = tmp_path_factory.mktemp(f"bad-input-{request.param}")
    with faulty_upstream() as upstream, async_stores(request.param, tmp) as open_store:
        settings = Settings(
            store="memory://", upstream=upstream.base_url, api_keys=KEYS, archive="off",
            upstream_timeout=5,
        )  # fmt: skip
        app = create_app(settings, store=open_store())
        with TestClient(
            app, raise_server_exceptions=False, headers={"Authorization": "Bearer key-acme"}
        ) as client:
            yield client


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def chat_body(*messages: Any, **fields: Any) -> dict[str, Any]:
    return {"model": "gpt-4o", "messages": list(messages) or [user("Where is parcel 7?")], **fields}


def session_path(session_id: str, tail: str = "/messages") -> str:
    return f"/v1/sessions/{urllib.parse.quote(session_id, safe='')}{tail}"


def assert_refused(response: httpx.Response, status: int, names: str | None = None) -> None:
    """``status`` with an OpenAI-style error body that names ``names`` (case aside)."""
    assert response.status_code == status, f"{response.status_code}: {response.text[:400]}"
    error = response.json()["error"]
    assert {"message", "type", "param", "code"} <= set(error), error
    if names is not None:
        said = f"{error['param']} {error['message']}".lower()
        assert names.lower() in said, f"the error does not name {names!r}: {error}"


def stored(client: TestClient, session_id: str, **headers: str) -> list[dict[str, Any]]:
    """The session's stored messages; [] for a session that does not exist."""
    response = client.get(session_path(session_id), headers=headers)
    if response.status_code == 404:
        return []
    assert response.status_code == 200, response.text[:400]
    return [item["message"] for item in response.json()["data"]]


# -- the table -------------------------------------------------------------------------------


@dataclass
class Bad:
    """A request and the refusal it must get; ``session`` is checked to stay empty."""

    name: str
    method: str
    path: str
    status: int
    names: str | None
    body: Any = None  # JSON, or bytes sent as they are
    headers: list[tuple[bytes, bytes]] = field(default_factory=list)
    session: str | None = None

    def send(self, client: TestClient) -> httpx.Response:
        content = self.body if isinstance(self.body, bytes) else None
        data = None if isinstance(self.body, bytes) or self.body is None else self.body
        headers = list(self.headers)
        if data is not None or content is not None:
            headers.append((b"Content-Type", b"application/json"))
            content = content if content is not None else json.dumps(data).encode()
        return client.request(self.method, self.path, content=content, headers=headers)


def to_session(sid: str) -> list[tuple[bytes, bytes]]:
    return [(b"X-Session-Id", sid.encode())]


def nested(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


def chat_bad(name: str, names: str | None, status: int = 400, **fields: Any) -> list[Bad]:
    """The same bad body to the chat endpoint (stateless and in a session) and, when it is
    about messages, to the sessions API."""
    body = {**chat_body(), **fields}
    sid = f"bad-{name}"
    cases = [
        Bad(f"{name}-stateless", "POST", CHAT, status, names, body),
        Bad(f"{name}-session", "POST", CHAT, status, names, body, to_session(sid), sid),
    ]
    if "messages" in fields:
        api = {"messages": fields["messages"]}
        cases.append(Bad(f"{name}-sessions-api", "POST", session_path(sid + "-api"), status,
                         names, api, session=sid + "-api"))  # fmt: skip
    return cases


RAW_NESTED = (
    b'{"model": "gpt-4o", "messages": [{"role": "user", "content": ' + nested(5000) + b"}]}"
)
HEADER = "X-Context-Max-Tokens"

# fmt: off
ANY_STORE: list[Bad] = [
    # JSON nested far deeper than the parser's recursion limit
    Bad("nested-json-chat", "POST", CHAT, 400, None, RAW_NESTED, to_session("n1"), "n1"),
    Bad("nested-json-stateless", "POST", CHAT, 400, None, RAW_NESTED),
    Bad("nested-json-sessions-api", "POST", session_path("n2"), 400, None,
        b'{"messages": [' + nested(5000) + b"]}", session="n2"),
    Bad("nested-json-top", "POST", CHAT, 400, None, nested(100_000)),
    # bodies that are not a JSON object (NaN and Infinity are not JSON either)
    *[Bad(f"body-{i}", "POST", CHAT, 400, None, raw)
      for i, raw in enumerate([b"", b"{", b"[]", b'"hi"', b"null", b"5", b"\xff\xfe{}",
                               b'{"model": "gpt-4o", "messages": [], "max_tokens": NaN}',
                               b'{"model": "gpt-4o", "messages": [], "max_tokens": -Infinity}',
                               b'{"model": "gpt-4o", "messages": [{"role": "user", '
                               b'"content": "\xff"}]}'])],
    # `tools` that is not a list of tool objects (a stateless request counts them)
    *[case for i, tools in enumerate(
        ["get_weather", 5, {"type": "function"}, [1], ["x"], [None], [[]],
         [{"type": "function", "function": "x"}],
         [{"type": "function", "function": {"name": 5}}],
         [{"type": "function", "function": {"name": "f", "parameters": "nope"}}]])
      for case in chat_bad(f"tools-{i}", "tools", tools=tools)],
    # X-Context-Max-Tokens that is not a positive whole number (² is isdigit() in Latin-1)
    *[Bad(f"max-tokens-header-{i}", "POST", CHAT, 400, HEADER, chat_body(),
          [(HEADER.encode(), raw), *to_session(f"h{i}")], f"h{i}")
      for i, raw in enumerate([b"\xb2", "²".encode(), b"\xb9\xb2", b"-5", b"0", b"1.5", b"1e3",
                               b"12abc", b"", b" ", b"\xd9\xa3", b"0x10"])],
    # model
    *[case for i, model in enumerate(["", 5, None, [], {}, "gpt-4o\x00", "no-such-model-9"])
      for case in chat_bad(f"model-{i}", "model", model=model)],
    Bad("model-sessions-api", "POST", session_path("m1"), 400, "model",
        {"messages": [user("hi")], "model": ""}, session="m1"),
    # messages: empty, wrong types, messages that are not chat messages
    *[case for i, messages in enumerate(
        [[], {}, "hi", None, [None], [5], ["hi"], [[]], [{}],
         [{"role": "wizard", "content": "hi"}], [{"content": "no role"}],
         [{"role": "user", "content": 5}], [{"role": "user", "content": {"a": 1}}],
         [{"role": "user", "content": [{"type": "text", "text": 5}]}],
         [{"role": "user", "content": [5]}], [{"role": "user", "content": "hi", "name": 5}],
         [{"role": "assistant", "content": None, "tool_calls": "call"}],
         [{"role": 5, "content": "hi"}]])
      for case in chat_bad(f"messages-{i}", "messages", messages=messages)],
    Bad("messages-missing", "POST", CHAT, 400, "messages", {"model": "gpt-4o"}),
    # max_tokens: wrong types and numbers no budget can hold
    *[case for i, raw in enumerate([b"-1", b'"10"', b"1.5", b"1e400", b"1" + b"0" * 400, b"[]"])
      for case in [Bad(f"max-tokens-{i}", "POST", CHAT, 400, "max_tokens",
                       b'{"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}],'
                       b' "max_tokens": ' + raw + b"}")]],
    # other fields of the wrong type
    *chat_bad("stream-string", "stream", stream="yes"),
    *[Bad(f"metadata-{i}", "POST", CHAT, 400, names, chat_body(metadata=metadata))
      for i, (metadata, names) in enumerate(
          [(["s1"], "metadata"), ("s1", "metadata"), ({"session_id": 5}, "session_id"),
           ({"session_id": ""}, "session"), ({"session_id": "s" * 300}, "session")])],
    # session ids: empty, too long, in the header and in the path
    Bad("session-header-empty", "POST", CHAT, 400, "session", chat_body(), to_session("")),
    Bad("session-header-long", "POST", CHAT, 400, "session", chat_body(), to_session("s" * 300)),
    Bad("session-path-long", "POST", session_path("s" * 300), 400, "session",
        {"messages": [user("hi")]}),
    Bad("session-path-long-get", "GET", session_path("s" * 300), 400, "session"),
    # query parameters of the wrong type or range
    *[Bad(f"limit-{v}", "GET", session_path("seeded") + f"?limit={v}", 400, "limit")
      for v in ["0", "-1", "abc", "1.5"]],
    *[Bad(f"after-{v}", "GET", session_path("seeded") + f"?after={v}", 400, "after")
      for v in ["-1", "abc", "1.5"]],
    *[Bad(f"context-max-tokens-{v}", "GET",
          session_path("seeded", "/context") + f"?max_tokens={v}", 400, "max_tokens")
      for v in ["0", "-3", "abc"]],
    Bad("context-model-empty", "GET", session_path("seeded", "/context") + "?model=", 400, "model"),
    # a batch over the session's message limit is 413 and stores nothing
    Bad("too-many-messages", "POST", session_path("full"), 413, None,
        {"messages": [user(str(i)) for i in range(10_001)]}, session="full"),
]
# fmt: on

BIG = [str(2**63), str(2**64), "9" * 30]
SURROGATE = "\ud800"
# fmt: off
ON_EVERY_STORE: list[Bad] = [
    # numbers past SQLite's and PostgreSQL's 64-bit integers
    *[Bad(f"limit-{v[:6]}", "GET", session_path("seeded") + f"?limit={v}", 400, "limit")
      for v in BIG],
    *[Bad(f"after-{v[:6]}", "GET", session_path("seeded") + f"?after={v}", 400, "after")
      for v in BIG],
    # a lone surrogate cannot be stored as UTF-8 (anywhere in a message)
    *chat_bad("surrogate-content", "messages", messages=[user(f"parcel {SURROGATE} lost")]),
    *chat_bad("surrogate-name", "messages",
              messages=[{"role": "user", "content": "hi", "name": SURROGATE}]),
    # [valid, invalid]: refused whole, the valid one not stored either
    *[case for i, bad in enumerate(
        [{"role": "wizard", "content": "x"}, {"role": "user", "content": 5}, "x",
         user(SURROGATE), {"role": "tool", "content": "orphan result"}])
      for case in chat_bad(f"batch-{i}", "messages", messages=[user("valid first"), bad])],
    # a tenant's name plus a session id over the store's 256 characters: 400, not 503
    Bad("tenant-session-chat", "POST", CHAT, 400, "session", chat_body(),
        [(b"Authorization", b"Bearer key-long"), *to_session("s" * 160)]),
    Bad("tenant-session-api", "POST", session_path("s" * 160), 400, "session",
        {"messages": [user("hi")]}, [(b"Authorization", b"Bearer key-long")]),
    Bad("tenant-session-get", "GET", session_path("s" * 160), 400, "session", None,
        [(b"Authorization", b"Bearer key-long")]),
]
# fmt: on


@pytest.mark.parametrize("service", ["sqlite"], indirect=True)
@pytest.mark.parametrize("case", ANY_STORE, ids=lambda c: c.name)
def test_bad_input_is_refused(service: TestClient, case: Bad) -> None:
    """A 4xx that names the culprit, and nothing stored."""
    seeded = service.post(session_path("seeded"), json={"messages": [user("seed")]})
    assert seeded.status_code == 200, seeded.text
    assert_refused(case.send(service), case.status, case.names)
    if case.session is not None:
        assert stored(service, case.session) == []


@pytest.mark.parametrize("service", EVERY_STORE, indirect=True)
@pytest.mark.parametrize("case", ON_EVERY_STORE, ids=lambda c: c.name)
def test_bad_input_is_refused_by_every_store(service: TestClient, case: Bad) -> None:
    """The same refusal whichever store keeps the sessions, and nothing stored."""
    seeded = service.post(session_path("seeded"), json={"messages": [user("seed")]})
    assert seeded.status_code == 200, seeded.text
    assert_refused(case.send(service), case.status, case.names)
    if case.session is not None:
        assert stored(service, case.session) == []


# -- identity: one session, however its id is spelled ----------------------------------------


@pytest.mark.parametrize("service", EVERY_STORE, indirect=True)
@pytest.mark.parametrize("name", ["会話-東京-🚚", "Zürich-Åsa", "parcel 7?#%+=", "ي-مرحبا"])
def test_a_utf8_session_header_names_the_session_of_the_path(
    service: TestClient, name: str
) -> None:
    """``X-Session-Id`` sent as UTF-8 is the session the sessions API has under that name."""
    sid = f"{name}-{uuid.uuid4().hex[:6]}"
    text = f"Parcel for {name} — 第7号 🙂"
    sent = service.post(CHAT, json=chat_body(user(text)), headers=to_session(sid))
    assert sent.status_code == 200, sent.text
    assert [m["content"] for m in stored(service, sid)] == [text, f"answer to: {text}"]


@pytest.mark.parametrize("service", EVERY_STORE, indirect=True)
@pytest.mark.parametrize("via", ["header", "path"])
def test_canonically_equal_ids_are_one_session(service: TestClient, via: str) -> None:
    """``Å`` composed (NFC) and decomposed (NFD) name the same session."""
    base = f"Åsa-Ω-{uuid.uuid4().hex[:6]}"
    composed, decomposed = (unicodedata.normalize(f, base) for f in ("NFC", "NFD"))
    assert composed != decomposed
    if via == "header":
        first = service.post(CHAT, json=chat_body(user("one")), headers=to_session(composed))
        second = service.post(CHAT, json=chat_body(user("two")), headers=to_session(decomposed))
    else:
        first = service.post(session_path(composed), json={"messages": [user("one")]})
        second = service.post(session_path(decomposed), json={"messages": [user("two")]})
    assert (first.status_code, second.status_code) == (200, 200), second.text
    contents = [m["content"] for m in stored(service, composed)]
    assert contents == [m["content"] for m in stored(service, decomposed)]
    assert [c for c in contents if not c.startswith("answer")] == ["one", "two"]


# -- idempotency keys are bound to the body --------------------------------------------------


@pytest.mark.parametrize("service", EVERY_STORE, indirect=True)
@pytest.mark.parametrize("api", ["chat", "sessions"])
def test_an_idempotency_key_reused_with_another_body_is_refused(
    service: TestClient, api: str
) -> None:
    """The same key with the same body replays; with another body it is 422, and the
    session keeps only the first request."""
    sid, key = f"idem-{api}-{uuid.uuid4().hex[:6]}", {"Idempotency-Key": f"k-{api}"}

    def send(text: str) -> httpx.Response:
        if api == "chat":
            return service.post(
                CHAT, json=chat_body(user(text)), headers={**key, "X-Session-Id": sid}
            )
        return service.post(session_path(sid), json={"messages": [user(text)]}, headers=key)

    assert send("Ship parcel 7 to Lyon").status_code == 200
    assert send("Ship parcel 7 to Lyon").status_code == 200  # a retry: replayed
    assert_refused(send("Ship parcel 7 to 大阪 instead"), 422, "Idempotency-Key")
    texts = [m["content"] for m in stored(service, sid)]
    first = ["Ship parcel 7 to Lyon"]
    assert texts == ([*first, "answer to: Ship parcel 7 to Lyon"] if api == "chat" else first)


# -- NUL: one behaviour on every store --------------------------------------------------------


@pytest.mark.servers
def test_nul_in_content_gets_the_same_answer_from_every_store(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """Every store stores ``\\x00`` and gives it back, or every store's service refuses it
    with a 400 naming the messages and stores nothing."""
    text = "line one\x00line two ✈️"
    outcomes = {}
    for kind in EVERY_STORE:
        with faulty_upstream() as upstream, async_stores(kind, tmp_path_factory.mktemp(kind)) as op:
            settings = Settings(store="memory://", upstream=upstream.base_url, archive="off")
            with TestClient(create_app(settings, store=op()), raise_server_exceptions=False) as c:
                response = c.post(session_path("nul"), json={"messages": [user(text)]})
                outcomes[kind] = (response.status_code, stored(c, "nul"), response.text[:200])
    statuses = {kind: outcome[0] for kind, outcome in outcomes.items()}
    assert len(set(statuses.values())) == 1, f"the stores disagree: {outcomes}"
    status, _, body = outcomes["sqlite"]
    if status == 200:
        assert all(outcome[1] == [user(text)] for outcome in outcomes.values()), outcomes
    else:
        assert status == 400 and "messages" in body, body
        assert all(outcome[1] == [] for outcome in outcomes.values()), outcomes


# -- what is fine must stay fine --------------------------------------------------------------


@pytest.mark.parametrize("service", EVERY_STORE, indirect=True)
def test_unicode_everywhere_round_trips(service: TestClient) -> None:
    """Emoji, CJK, RTL and combining marks in ids and content are stored exactly as sent."""
    sid = f"会话-🚚-{uuid.uuid4().hex[:6]}"
    texts = ["我的订单号是 A-1042。", "配達は明日ですか？🙂", "مرحبا 👋🏽", "e\u0301 ﬁ ẞ 𝔘"]
    response = service.post(
        session_path(sid), json={"messages": [user(t) for t in texts], "model": "gpt-4o"}
    )
    assert response.status_code == 200, response.text
    assert [m["content"] for m in stored(service, sid)] == texts
    huge = service.post(
        CHAT, json=chat_body(user("Where?")), headers=[(HEADER.encode(), b"9" * 40)]
    )
    assert huge.status_code == 200, huge.text  # a huge budget is capped, not refused
