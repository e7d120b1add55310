"""``POST /v1/messages`` in-process: the real ``anthropic`` SDK against the app, a fake
Anthropic upstream that records what it receives and fails on demand.

The Anthropic SDK runs on ``httpx2``, not ``httpx``: ``Bridge`` hands its requests to
Starlette's ``TestClient``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import anthropic
import pytest
from fastapi.testclient import TestClient

from ctxwindow.tokens.defaults import chat_tokenizer
from tests.support.docs_examples import examples
from tests.support.protocol_upstreams import FakeMessages, protocol_app
from tests.support.sdk_clients import anthropic_client as sdk
from tests.support.sdk_clients import stored

MODEL = "claude-sonnet-4-5"
TOOLS: Any = [
    {"name": "where_is", "description": "Where an order is",
     "input_schema": {"type": "object", "properties": {"order": {"type": "string"}}}}
]  # fmt: skip


@pytest.fixture
def upstream() -> FakeMessages:
    return FakeMessages()


@pytest.fixture
def http(upstream: FakeMessages) -> Iterator[TestClient]:
    with TestClient(protocol_app(upstream, upstream_api_key="sk-ant-upstream")) as client:
        yield client


def test_the_sdk_continues_the_session(http: TestClient, upstream: FakeMessages) -> None:
    """Each request sends its new turns; upstream gets system first, then the history."""
    client = sdk(http, **{"X-Session-Id": "s1", "anthropic-beta": "tools-2024"})
    first = client.messages.create(
        model=MODEL, max_tokens=256, system="Answer briefly.",
        messages=[{"role": "user", "content": "Where is parcel D-4?"}],
    )  # fmt: skip
    assert first.content[0].text == upstream.reply  # type: ignore[union-attr]
    upstream.reply = "京都に着きました 🚚"
    client.messages.create(
        model=MODEL, max_tokens=256, system=[{"type": "text", "text": "Answer briefly."}],
        messages=[{"role": "user", "content": [{"type": "text", "text": "¿Y ahora?"}]}],
    )  # fmt: skip
    sent = upstream.requests[-1]
    assert sent["system"] == [{"type": "text", "text": "Answer briefly."}]
    assert [(m["role"], m["content"][0]["text"]) for m in sent["messages"]] == [
        ("user", "Where is parcel D-4?"),
        ("assistant", "It left the Leeds depot this morning."),
        ("user", "¿Y ahora?"),
    ]
    headers = upstream.headers[-1]
    assert upstream.paths[-1] == "/v1/messages" and headers["x-api-key"] == "sk-ant-upstream"
    assert "authorization" not in headers and headers["anthropic-beta"] == "tools-2024"
    assert headers["anthropic-version"] == client.default_headers["anthropic-version"]
    http.post("/v1/messages", json={"model": MODEL, "max_tokens": 9, "messages": [
        {"role": "user", "content": "x"}]})  # fmt: skip
    assert upstream.headers[-1]["anthropic-version"] == "2023-06-01"  # when the client sends none
    history = stored(http, "s1")
    assert [m["role"] for m in history] == ["user", "assistant"] * 2  # system not stored
    assert history[-1] == {"role": "assistant", "content": "京都に着きました 🚚"}


def test_tool_use_and_tool_result_stay_one_unit(http: TestClient, upstream: FakeMessages) -> None:
    client = sdk(http, **{"X-Session-Id": "t"})
    reply = client.messages.create(
        model=MODEL, max_tokens=256, tools=TOOLS,
        messages=[{"role": "user", "content": "Where is D-4?"}],
    )  # fmt: skip
    use = reply.content[1]
    assert use.type == "tool_use"
    client.messages.create(
        model=MODEL, max_tokens=256, tools=TOOLS,
        messages=[{"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": use.id, "content": "In Leeds",
             "is_error": False},
            {"type": "text", "text": "Thanks!"},
        ]}],
    )  # fmt: skip
    assert [m["role"] for m in upstream.last] == ["user", "assistant", "user"]
    assert [b["type"] for b in upstream.last[1]["content"]] == ["text", "tool_use"]
    assert upstream.last[1]["content"][1]["input"] == {"order": "D-4"}
    assert [b["type"] for b in upstream.last[2]["content"]] == ["tool_result", "text"]
    history = stored(http, "t")
    assert history[1]["tool_calls"][0]["id"] == use.id
    assert history[2] == {"role": "tool", "tool_call_id": use.id, "content": "In Leeds"}
    assert history[3] == {"role": "user", "content": [{"type": "text", "text": "Thanks!"}]}
    long = "The parcel went through many depots on its way north. " * 40
    for turn in range(5):
        step = client.messages.create(
            model=MODEL, max_tokens=256, tools=TOOLS,
            messages=[{"role": "user", "content": f"{turn}: {long}"}],
        )  # fmt: skip
        client.messages.create(
            model=MODEL, max_tokens=256, tools=TOOLS, system="Be brief.",
            messages=[{"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": step.content[1].id, "content": long,  # type: ignore[union-attr]
                 "is_error": True}]}],
            extra_headers={"X-Context-Max-Tokens": "2000"},
        )  # fmt: skip
        blocks = [b for m in upstream.last for b in m["content"] if isinstance(m["content"], list)]
        uses = {b["id"] for b in blocks if b["type"] == "tool_use"}
        results = {b["tool_use_id"] for b in blocks if b["type"] == "tool_result"}
        assert uses == results and uses
        assert upstream.last[0]["role"] == "user"  # a placeholder if the window starts later
        system = upstream.requests[-1]["system"][0]
        assert {k: system[k] for k in ("type", "text")} == {"type": "text", "text": "Be brief."}
        # one breakpoint, at the end of the stable prefix (the system prompt when narrowed)
        assert json.dumps(upstream.requests[-1]).count('"cache_control"') == 1
        assert blocks[-1].get("is_error") is True
        chat = [{"role": "user", "content": json.dumps(m["content"])} for m in upstream.last]
        assert chat_tokenizer("gpt-4o").count(chat) < 2000 * 1.5  # a rough bound, other tokens


def test_streaming_stores_the_reply_before_message_stop(
    http: TestClient, upstream: FakeMessages
) -> None:
    client = sdk(http, **{"X-Session-Id": "st"})
    with client.messages.stream(
        model=MODEL, max_tokens=256, messages=[{"role": "user", "content": "Where?"}]
    ) as stream:
        assert "".join(stream.text_stream) == upstream.reply
    assert stored(http, "st")[-1] == {"role": "assistant", "content": upstream.reply}
    events = list(
        client.messages.create(
            model=MODEL,
            max_tokens=256,
            tools=TOOLS,
            stream=True,
            messages=[{"role": "user", "content": "And D-5?"}],
        )
    )
    assert events[-1].type == "message_stop"
    call = stored(http, "st")[-1]["tool_calls"][0]
    assert json.loads(call["function"]["arguments"]) == {"order": "D-4"}
    assert stored(http, "st")[-1]["content"] == "Let me look."


@pytest.mark.parametrize("fail", ["cut", "error"])
def test_a_broken_stream_ends_with_an_error_event_and_stores_no_reply(
    http: TestClient, upstream: FakeMessages, fail: str
) -> None:
    upstream.fail = fail
    client = sdk(http, **{"X-Session-Id": "b"})
    with (
        pytest.raises(anthropic.APIError),
        client.messages.stream(
            model=MODEL, max_tokens=256, messages=[{"role": "user", "content": "Where?"}]
        ) as stream,
    ):
        stream.get_final_message()
    assert stored(http, "b") == [{"role": "user", "content": "Where?"}]


@pytest.mark.parametrize("fail", ["500", "malformed"])
def test_upstream_failures_are_502(http: TestClient, upstream: FakeMessages, fail: str) -> None:
    upstream.fail = fail
    with pytest.raises(anthropic.APIStatusError) as failed:
        sdk(http).messages.create(
            model=MODEL, max_tokens=64, messages=[{"role": "user", "content": "x"}]
        )
    assert failed.value.status_code == 502


def test_without_a_session_the_request_passes_through(
    http: TestClient, upstream: FakeMessages
) -> None:
    messages: Any = [{"role": "user", "content": [
        {"type": "text", "text": "Hi", "cache_control": {"type": "ephemeral"}}]}]  # fmt: skip
    sdk(http).messages.create(model=MODEL, max_tokens=64, messages=messages)
    assert upstream.last == messages  # as the client wrote it
    with pytest.raises(anthropic.BadRequestError):
        sdk(http, **{"X-Context-Max-Tokens": "50"}).messages.create(
            model=MODEL, max_tokens=64, messages=[{"role": "user", "content": "word " * 500}]
        )
    assert len(upstream.requests) == 1


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"messages": [{"role": "user", "content": "x"}]}, "max_tokens"),
        ({"max_tokens": 0, "messages": [{"role": "user", "content": "x"}]}, "max_tokens"),
        ({"max_tokens": 9, "messages": [{"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_9", "content": "x"}]}]}, "messages"),
        ({"max_tokens": 9, "messages": [{"role": "user", "content": [
            {"type": "document", "source": {}}]}]}, "messages.0.content.0.type"),
        ({"max_tokens": 9, "messages": [{"role": "user", "content": [
            {"type": "text", "text": "x"},
            {"type": "tool_result", "tool_use_id": "t", "content": "x"}]}]},
         "messages.0.content.1"),
        ({"max_tokens": 9, "messages": [{"role": "system", "content": "x"}]}, "messages.0.role"),
        ({"max_tokens": 9, "system": 5, "messages": [{"role": "user", "content": "x"}]},
         "system"),
        ({"max_tokens": 9, "messages": [{"role": "user", "content": "x"}],
          "tools": [{"name": "f", "input_schema": {"properties": []}}]},
         "tools.0.input_schema.properties"),
    ],
)  # fmt: skip
def test_bad_input_is_a_400_naming_the_field(
    http: TestClient, body: dict[str, Any], param: str
) -> None:
    answer = http.post("/v1/messages", headers={"X-Session-Id": "bad"},
                       json={"model": MODEL, **body})  # fmt: skip
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"]["param"] == param
    assert http.get("/v1/sessions/bad/messages").status_code == 404  # nothing stored


def test_the_sdk_authenticates_with_its_x_api_key(upstream: FakeMessages) -> None:
    with TestClient(protocol_app(upstream, api_keys={"key-a": "acme"})) as http:
        sdk(http, "key-a", **{"X-Session-Id": "s"}).messages.create(
            model=MODEL, max_tokens=64, messages=[{"role": "user", "content": "x"}]
        )
        with pytest.raises(anthropic.AuthenticationError):
            sdk(http, "key-b").messages.create(
                model=MODEL, max_tokens=64, messages=[{"role": "user", "content": "x"}]
            )
        listed = http.get("/v1/sessions/s/messages", headers={"Authorization": "Bearer key-a"})
        assert listed.status_code == 200 and len(listed.json()["data"]) == 2


def test_a_retry_with_the_same_idempotency_key_is_replayed(
    http: TestClient, upstream: FakeMessages
) -> None:
    client = sdk(http, **{"X-Session-Id": "idem", "Idempotency-Key": "k1"})
    ask: Any = {"model": MODEL, "max_tokens": 64, "tools": TOOLS,
                "messages": [{"role": "user", "content": "Once"}]}  # fmt: skip
    first = client.messages.create(**ask)
    again = client.messages.create(**ask)
    with client.messages.stream(**ask) as stream:
        streamed = stream.get_final_message()
    assert len(upstream.requests) == 1
    assert [b.type for b in again.content] == [b.type for b in first.content]
    assert streamed.content[1].input == {"order": "D-4"}  # type: ignore[union-attr]
    assert len(stored(http, "idem")) == 2


def test_the_documented_example_runs(
    upstream: FakeMessages, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/integrations.md's Messages example, against the app and a fake upstream."""
    code = examples("The service: Anthropic Messages")[0]
    with TestClient(protocol_app(upstream)) as http:
        real = sdk(http, **{"X-Session-Id": "user-42"})

        def client(**kwargs: Any) -> anthropic.Anthropic:
            assert kwargs["base_url"] == "http://127.0.0.1:8000"
            return real

        monkeypatch.setattr(anthropic, "Anthropic", client)
        exec(compile(code, "docs/integrations.md", "exec"), {"__name__": "doc"})
        assert [m["role"] for m in stored(http, "user-42")] == ["user", "assistant", "tool",
                                                                "assistant"]  # fmt: skip
