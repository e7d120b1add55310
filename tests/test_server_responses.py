"""``POST /v1/responses`` in-process: the real ``openai`` SDK against the app, a fake
Responses upstream that records what it receives and fails on demand."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from fastapi.testclient import TestClient

from ctxwindow.server.protocols.response_ids import response_id, session_of
from ctxwindow.tokens.defaults import chat_tokenizer
from tests.support.docs_examples import examples
from tests.support.protocol_upstreams import FakeResponses, protocol_app
from tests.support.sdk_clients import openai_client as sdk
from tests.support.sdk_clients import stored


@pytest.fixture
def upstream() -> FakeResponses:
    return FakeResponses()


@pytest.fixture
def http(upstream: FakeResponses) -> Iterator[TestClient]:
    with TestClient(protocol_app(upstream, upstream_api_key="sk-upstream")) as client:
        yield client


def test_previous_response_id_continues_the_session(
    http: TestClient, upstream: FakeResponses
) -> None:
    """The first response starts a session; its id continues it, with the whole context sent
    upstream as input (no previous_response_id there), instructions for one request only."""
    client = sdk(http)
    first = client.responses.create(
        model="gpt-4o", input="Where is parcel D-4?", instructions="Answer briefly."
    )
    assert first.id.startswith("resp_") and first.output_text == upstream.reply
    assert upstream.requests[-1]["instructions"] == "Answer briefly."
    assert "previous_response_id" not in upstream.requests[-1]
    assert upstream.paths[-1] == "/v1/responses"
    assert upstream.headers[-1]["authorization"] == "Bearer sk-upstream"
    upstream.reply = "京都に着きました 🚚"
    second = client.responses.create(
        model="gpt-4o", previous_response_id=first.id, input="¿Y ahora?"
    )
    assert second.output_text == "京都に着きました 🚚"
    assert second.previous_response_id == first.id and second.id != first.id
    assert [(i["role"], i["content"]) for i in upstream.last] == [
        ("user", "Where is parcel D-4?"),
        ("assistant", "It left the Leeds depot this morning."),
        ("user", "¿Y ahora?"),
    ]
    assert "instructions" not in upstream.requests[-1]  # not carried over, as OpenAI's
    session = session_of(second.id)
    assert session == session_of(first.id) and session.startswith("resp-")
    assert [m["role"] for m in stored(http, session)] == ["user", "assistant"] * 2


def test_conversation_and_header_name_one_session(http: TestClient) -> None:
    client = sdk(http)
    client.responses.create(model="gpt-4o", input="Hello", conversation="c-42")
    reply = client.responses.create(model="gpt-4o", input="Again", conversation={"id": "c-42"})
    assert reply.conversation is not None and reply.conversation.id == "c-42"
    sdk(http, **{"X-Session-Id": "c-42"}).responses.create(model="gpt-4o", input="Third")
    assert session_of(reply.id) == "c-42"
    unicode = client.responses.create(model="gpt-4o", input="你好", conversation="会话-42 🙂")
    assert session_of(unicode.id) == "会话-42 🙂" and stored(http, "会话-42 🙂")
    assert [m["content"] for m in stored(http, "c-42") if m["role"] == "user"] == [
        "Hello", "Again", "Third",
    ]  # fmt: skip
    conflict = http.post(
        "/v1/responses", headers={"X-Session-Id": "other"},
        json={"model": "gpt-4o", "input": "x", "conversation": "c-42"},
    )  # fmt: skip
    assert conflict.status_code == 400 and conflict.json()["error"]["param"] == "conversation"


def test_streaming_stores_the_reply_before_the_last_event(
    http: TestClient, upstream: FakeResponses
) -> None:
    client = sdk(http)
    events = list(client.responses.create(model="gpt-4o", input="Where?", stream=True))
    assert events[-1].type == "response.completed"
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text == upstream.reply
    rid = events[-1].response.id
    assert events[0].response.id == rid and rid.startswith("resp_")  # ours, in every event
    assert stored(http, session_of(rid))[-1] == {"role": "assistant", "content": upstream.reply}
    with client.responses.stream(model="gpt-4o", input="More?", previous_response_id=rid) as s:
        final = s.get_final_response()
    assert final.output_text == upstream.reply and session_of(final.id) == session_of(rid)
    assert len(stored(http, session_of(rid))) == 4


def test_a_cut_stream_ends_with_an_error_and_stores_no_reply(
    http: TestClient, upstream: FakeResponses
) -> None:
    upstream.fail = "cut"
    client = sdk(http)
    with pytest.raises(openai.APIError):
        list(client.responses.create(model="gpt-4o", input="Where?", stream=True, conversation="k"))
    assert stored(http, "k") == [{"role": "user", "content": "Where?"}]
    upstream.fail = "error"
    with pytest.raises(openai.APIError, match="overloaded"):
        list(client.responses.create(model="gpt-4o", input="Again", stream=True, conversation="k"))
    assert [m["role"] for m in stored(http, "k")] == ["user", "user"]


@pytest.mark.parametrize(("fail", "status"), [("500", 502), ("malformed", 502)])
def test_upstream_failures(
    http: TestClient, upstream: FakeResponses, fail: str, status: int
) -> None:
    upstream.fail = fail
    answer = http.post("/v1/responses", json={"model": "gpt-4o", "input": "x"})
    assert answer.status_code == status and answer.json()["error"]["code"] == "bad_gateway"


def test_function_call_and_output_stay_one_unit(http: TestClient, upstream: FakeResponses) -> None:
    """A function_call reply, its output sent with previous_response_id, then a small budget:
    every function_call upstream receives has its output, and the other way round."""
    client = sdk(http)
    tools: Any = [
        {
            "type": "function",
            "name": "where_is",
            "description": "Find an order",
            "parameters": {"type": "object", "properties": {"order": {"type": "string"}}},
        }
    ]
    reply = client.responses.create(model="gpt-4o", input="Where is D-4?", tools=tools)
    call = reply.output[0]
    assert call.type == "function_call"
    answer = client.responses.create(
        model="gpt-4o", previous_response_id=reply.id, tools=tools,
        input=[{"type": "function_call_output", "call_id": call.call_id,
                "output": "In Leeds, 住所: 東京都"}],
    )  # fmt: skip
    assert answer.output_text == upstream.reply
    kinds = [i.get("type") for i in upstream.last]
    assert kinds == ["message", "function_call", "function_call_output"]
    session = session_of(answer.id)
    history = stored(http, session)
    assert history[1]["tool_calls"][0]["id"] == call.call_id
    assert history[2] == {"role": "tool", "tool_call_id": call.call_id,
                          "content": "In Leeds, 住所: 東京都"}  # fmt: skip
    long = "The parcel went through many depots on its way north. " * 40
    for turn in range(6):
        prev = client.responses.create(
            model="gpt-4o", input=f"{turn}: {long}", previous_response_id=answer.id,
            tools=tools, truncation="auto",
        )  # fmt: skip
        client.responses.create(
            model="gpt-4o", previous_response_id=prev.id, tools=tools, truncation="auto",
            input=[{"type": "function_call_output", "call_id": prev.output[0].call_id,  # type: ignore[union-attr]
                    "output": long}],
            extra_headers={"X-Context-Max-Tokens": "1500"},
        )  # fmt: skip
        calls = {i["call_id"] for i in upstream.last if i.get("type") == "function_call"}
        outputs = {i["call_id"] for i in upstream.last if i.get("type") == "function_call_output"}
        assert calls == outputs and calls
        assert upstream.last[0].get("type") != "function_call_output"


def test_truncation_disabled_refuses_what_auto_windows(
    http: TestClient, upstream: FakeResponses
) -> None:
    client = sdk(http)
    long = "A long account of the parcel's journey through the depots. " * 60
    for i in range(4):
        client.responses.create(model="gpt-4o", input=f"{i} {long}", conversation="t",
                                truncation="auto")  # fmt: skip
    before = stored(http, "t")
    with pytest.raises(openai.BadRequestError) as refused:
        client.responses.create(
            model="gpt-4o", input="And now?", conversation="t",
            extra_headers={"X-Context-Max-Tokens": "1200"},
        )  # fmt: skip
    assert refused.value.code == "context_length_exceeded"
    assert stored(http, "t") == before  # nothing of the refused request was stored
    raw = client.responses.with_raw_response.create(
        model="gpt-4o", input="And now?", conversation="t", truncation="auto",
        extra_headers={"X-Context-Max-Tokens": "1200"},
    )  # fmt: skip
    assert int(raw.headers["X-Context-Evicted"]) > 0
    sent = [{"role": i["role"], "content": i["content"]} for i in upstream.last]
    assert chat_tokenizer("gpt-4o").count(sent) <= 1200
    assert sent[-1] == {"role": "user", "content": "And now?"}


def test_store_false_without_a_session_is_stateless(
    http: TestClient, upstream: FakeResponses
) -> None:
    client = sdk(http)
    reply = client.responses.create(model="gpt-4o", input="Hi", store=False)
    assert reply.output_text == upstream.reply
    assert upstream.requests[-1]["store"] is False and upstream.requests[-1]["input"] == "Hi"
    with pytest.raises(openai.BadRequestError) as gone:  # nothing kept: nothing to continue
        client.responses.create(model="gpt-4o", input="And?", previous_response_id=reply.id)
    assert gone.value.code == "previous_response_not_found"
    with pytest.raises(openai.BadRequestError) as over:
        client.responses.create(model="gpt-4o", input="word " * 2000, store=False,
                                extra_headers={"X-Context-Max-Tokens": "100"})  # fmt: skip
    assert over.value.code == "context_length_exceeded"


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"input": [{"type": "function_call_output", "call_id": "c9", "output": "x"}]}, "input"),
        ({"input": [{"type": "reasoning", "summary": []}]}, "input.0.type"),
        ({"input": [{"role": "user", "content": [{"type": "input_file"}]}]},
         "input.0.content.0.type"),
        ({"input": [{"role": "robot", "content": "x"}]}, "input.0.role"),
        ({"input": []}, "input"),
        ({"input": "x", "truncation": "sometimes"}, "truncation"),
        ({"input": "x", "previous_response_id": "resp_unknown"}, "previous_response_id"),
        ({"input": "x", "conversation": "c", "previous_response_id": response_id("c")},
         "previous_response_id"),
        ({"input": "x", "conversation": "c", "store": False}, "store"),
        ({"input": "x", "max_output_tokens": "many"}, "max_output_tokens"),
        ({"input": "x", "conversation": 7}, "conversation"),
    ],
)  # fmt: skip
def test_bad_input_is_a_400_naming_the_field(
    http: TestClient, body: dict[str, Any], param: str
) -> None:
    answer = http.post("/v1/responses", json={"model": "gpt-4o", **body})
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"]["param"] == param


def test_a_response_id_is_tenant_scoped(upstream: FakeResponses) -> None:
    keys = {"key-a": "acme", "key-b": "globex"}
    with TestClient(protocol_app(upstream, api_keys=keys)) as http:
        first = http.post(
            "/v1/responses", headers={"Authorization": "Bearer key-a"},
            json={"model": "gpt-4o", "input": "secret plans"},
        ).json()  # fmt: skip
        other = http.post(
            "/v1/responses", headers={"Authorization": "Bearer key-b"},
            json={"model": "gpt-4o", "input": "x", "previous_response_id": first["id"]},
        )  # fmt: skip
        assert other.status_code == 400
        assert all("secret" not in json.dumps(r) for r in upstream.requests[1:])


def test_a_response_id_works_in_another_process_after_a_restart(
    tmp_path: Path, upstream: FakeResponses
) -> None:
    store = f"sqlite:///{tmp_path / 'sessions.db'}"
    with TestClient(protocol_app(upstream, store=store)) as http:
        first = sdk(http).responses.create(model="gpt-4o", input="Parcel D-4?")
    with TestClient(protocol_app(upstream, store=store)) as http:
        sdk(http).responses.create(model="gpt-4o", input="And?", previous_response_id=first.id)
    assert [i["content"] for i in upstream.last] == ["Parcel D-4?", upstream.reply, "And?"]


def test_a_retry_with_the_same_idempotency_key_is_replayed(
    http: TestClient, upstream: FakeResponses
) -> None:
    body = {"model": "gpt-4o", "input": "Once", "conversation": "idem"}
    headers = {"Idempotency-Key": "k1"}
    first = http.post("/v1/responses", json=body, headers=headers)
    again = http.post("/v1/responses", json=body, headers=headers)
    streamed = http.post("/v1/responses", json={**body, "stream": True}, headers=headers)
    assert len(upstream.requests) == 1 and again.headers["X-Context-Replayed"] == "true"
    assert again.json()["output"][0]["content"][0]["text"] == first.json()["output"][0][
        "content"][0]["text"]  # fmt: skip
    assert session_of(again.json()["id"]) == "idem"
    assert b"response.completed" in streamed.content
    assert len(stored(http, "idem")) == 2


def test_the_documented_example_runs(
    upstream: FakeResponses, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/integrations.md's Responses example, against the app and a fake upstream."""
    code = examples("The service: the Responses API")[0]
    with TestClient(protocol_app(upstream)) as http:
        real = sdk(http)

        def client(**kwargs: Any) -> openai.OpenAI:
            assert kwargs["base_url"] == "http://127.0.0.1:8000/v1"
            return real

        monkeypatch.setattr(openai, "OpenAI", client)
        exec(compile(code, "docs/integrations.md", "exec"), {"__name__": "doc"})
    assert [i["role"] for i in upstream.last] == ["user", "assistant", "user"]
