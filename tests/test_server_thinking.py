"""Extended thinking with tools through ``POST /v1/messages``.

While a tool loop lasts, Anthropic requires the assistant turn that called the
tool to come back with its thinking blocks first and unchanged (signature and
all), else it answers 400 "Expected `thinking` or `redacted_thinking`, but
found `tool_use`". A session sends only the new turn (the tool result), so the
service must keep the thinking of the reply it stored: from a body and from an
event stream. The fake upstream thinks when the request enables thinking.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from ctxwindow.server import Settings, create_app
from ctxwindow.validate import anthropic_messages, chat_completions
from tests.support.chat_upstream import FakeUpstream
from tests.support.protocol_upstreams import FakeMessages, protocol_app
from tests.support.sdk_clients import anthropic_client as sdk
from tests.support.sdk_clients import stored

MODEL = "claude-sonnet-4-5"
TOOLS: Any = [
    {"name": "where_is", "description": "Where an order is",
     "input_schema": {"type": "object", "properties": {"order": {"type": "string"}}}}
]  # fmt: skip
THINKING = {"type": "enabled", "budget_tokens": 1024}


@pytest.fixture
def upstream() -> FakeMessages:
    return FakeMessages()


@pytest.fixture
def http(upstream: FakeMessages) -> Iterator[TestClient]:
    with TestClient(protocol_app(upstream, upstream_api_key="sk-ant-upstream")) as client:
        yield client


def ask(http: TestClient, session: str, messages: list[Any], stream: bool) -> Any:
    body = {"model": MODEL, "max_tokens": 2048, "thinking": THINKING, "tools": TOOLS,
            "messages": messages, "stream": stream}  # fmt: skip
    return http.post("/v1/messages", json=body, headers={"X-Session-Id": session})


@pytest.mark.parametrize("stream", [False, True], ids=["body", "stream"])
def test_the_tool_loop_sends_the_calls_thinking_back_unchanged(
    http: TestClient, upstream: FakeMessages, stream: bool
) -> None:
    first = ask(http, "t1", [{"role": "user", "content": "Where is order D-4? 🚚"}], stream)
    assert first.status_code == 200, first.text
    answered = upstream.answer(upstream.requests[0])["content"]
    thought = answered[0]
    assert thought["type"] == "thinking"
    call_id = answered[-1]["id"]
    result = {"type": "tool_result", "tool_use_id": call_id, "content": "京都の倉庫"}
    second = ask(http, "t1", [{"role": "user", "content": [result]}], stream)
    assert second.status_code == 200, second.text
    sent = upstream.requests[-1]
    assistant = sent["messages"][1]
    assert assistant["role"] == "assistant"
    assert assistant["content"][0] == thought  # first, text and signature as they came
    assert [b["type"] for b in assistant["content"]] == ["thinking", "text", "tool_use"]
    assert anthropic_messages(sent) == []


def test_a_client_sending_its_own_thinking_is_accepted_and_kept(
    http: TestClient, upstream: FakeMessages
) -> None:
    """A client that sends the whole tool loop (thinking included) in one request."""
    thinking = {"type": "thinking", "thinking": "Look it up.", "signature": "c2lnbmVk"}
    redacted = {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix"}
    call = {"type": "tool_use", "id": "toolu_9", "name": "where_is", "input": {"order": "D-4"}}
    messages = [
        {"role": "user", "content": "Where is D-4?"},
        {"role": "assistant", "content": [thinking, redacted, call]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_9", "content": "Leeds"}]},
    ]  # fmt: skip
    response = ask(http, "t2", messages, stream=False)
    assert response.status_code == 200, response.text
    sent = upstream.requests[-1]
    assert sent["messages"][1]["content"][:2] == [thinking, redacted]
    assert anthropic_messages(sent) == []
    kept = stored(http, "t2")
    assert kept[1]["thinking"] == [thinking, redacted]


def test_thinking_in_a_user_message_is_refused_naming_the_block(http: TestClient) -> None:
    block = {"type": "thinking", "thinking": "x", "signature": "s"}
    response = ask(http, "t3", [{"role": "user", "content": [block]}], stream=False)
    assert response.status_code == 400
    assert "messages.0.content.0.type" in response.text
    assert "assistant" in response.text


def test_an_unsigned_thinking_block_is_refused(http: TestClient) -> None:
    messages = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": [{"type": "thinking", "thinking": "no signature"},
                                          {"type": "text", "text": "hello"}]},
        {"role": "user", "content": "and?"},
    ]  # fmt: skip
    response = ask(http, "t4", messages, stream=False)
    assert response.status_code == 400
    assert "messages.1.content.0.signature" in response.text


def test_the_sdk_streams_thinking_and_the_session_keeps_it(
    http: TestClient, upstream: FakeMessages
) -> None:
    client = sdk(http, **{"X-Session-Id": "t5"})
    with client.messages.stream(
        model=MODEL, max_tokens=2048, thinking=THINKING, tools=TOOLS,
        messages=[{"role": "user", "content": "Where is D-4?"}],
    ) as events:  # fmt: skip
        final = events.get_final_message()
    assert [block.type for block in final.content] == ["thinking", "text", "tool_use"]
    kept = stored(http, "t5")[-1]
    assert kept["thinking"][0]["signature"] == final.content[0].signature  # type: ignore[union-attr]


def test_chat_completions_on_the_same_session_gets_no_anthropic_fields() -> None:
    """A session fed by the Messages route, continued through Chat Completions: the body
    has no ``thinking`` or ``is_error`` (Chat Completions has no such fields)."""
    chat, anthropic = FakeUpstream(), FakeMessages()

    def either(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/messages"):
            return anthropic.handle(request)
        return chat.handle(request)

    settings = Settings(store="memory://", upstream="http://upstream.test/v1", archive="off")
    app = create_app(settings, upstream_transport=httpx.MockTransport(either))
    call = {"type": "tool_use", "id": "toolu_1", "name": "where_is", "input": {}}
    thinking = {"type": "thinking", "thinking": "t", "signature": "s"}
    failed = {"type": "tool_result", "tool_use_id": "toolu_1", "content": "no", "is_error": True}
    messages = [
        {"role": "user", "content": "Where?"},
        {"role": "assistant", "content": [thinking, call]},
        {"role": "user", "content": [failed, {"type": "text", "text": "Try again"}]},
    ]
    with TestClient(app) as http:
        assert ask(http, "t6", messages, stream=False).status_code == 200
        body = {"model": "gpt-4o", "messages": [{"role": "user", "content": "Summarise"}]}
        response = http.post("/v1/chat/completions", json=body, headers={"X-Session-Id": "t6"})
        assert response.status_code == 200, response.text
    sent = chat.requests[-1]
    assert len(sent["messages"]) == 6
    assert all("thinking" not in m and "is_error" not in m for m in sent["messages"])
    assert chat_completions(sent) == []
