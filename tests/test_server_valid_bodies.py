"""The service sends its upstream only bodies the provider takes (issue 28, item 2).

Hypothesis draws session programs in each protocol's own format
(tests/support/service_programs.py): user turns in Chinese, Japanese, emoji, long texts
and images, tool loops of parallel calls answered by the client's results (some errors),
a history the client writes itself, a system prompt, extended thinking or reasoning,
budgets from tiny to large, streamed and not. They run through the app with the fake
upstream of their protocol (tests/support/service_runs.py) under the hybrid policy (the
default settings, recall on; and in a small window, where recall brings turns back) and
the token window. Every body the upstream receives must break no rule of
``ctxwindow.validate``; a request the service refuses must leave nothing behind, and may
only be a budget's refusal: the programs are valid for their provider, so any other
refusal is the service's fault. ``benchmarks/bench_valid_service.py`` runs the same at
scale.

The other tests pin what the properties found, each with its smallest example.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ctxwindow.server.protocols.blocks import closed, to_anthropic
from tests.support.service_programs import (
    PROTOCOLS,
    SCHEMA,
    Program,
    Request,
    Said,
    programs,
)
from tests.support.service_runs import (
    PATHS,
    SETTINGS,
    VALIDATORS,
    ScriptedChat,
    ScriptedMessages,
    Service,
    Tally,
    serving,
)


@pytest.fixture(scope="module", params=[(p, s) for p in PROTOCOLS for s in SETTINGS], ids="-".join)
def served(request: pytest.FixtureRequest) -> Iterator[Service]:
    """The app of one protocol and one policy, with its scripted upstream: one for every
    program of the module (each program a session of its own)."""
    with serving(*request.param) as made:
        yield made


def shown(tally: Tally) -> str:
    """The first problem a tally holds, readable in a failure."""
    if tally.invalid:
        _, body, violations = tally.invalid[0]
        return f"{[str(v) for v in violations]} in {str(body)[:2_000]}"
    for kind, found in (("refused, yet not clean", tally.leaked), ("refused", tally.unexpected)):
        if found:
            return f"{kind}: {found[0][1]} {found[0][2][:500]}"
    return ""


@given(data=st.data())
def test_every_body_sent_upstream_is_valid(served: Service, data: st.DataObject) -> None:
    """Every upstream body of a drawn program passes its protocol's validator; the service
    refuses nothing but budgets, and a refusal forwards and stores nothing (``Run.send``)."""
    tally = Tally()
    served.run(data.draw(programs(served.protocol)), tally)
    assert tally.requests > 0
    assert tally.clean, shown(tally)


# -- what the properties found ---------------------------------------------------------------

CALL = {"id": "call_1", "type": "function",
        "function": {"name": "where_is", "arguments": '{"order": "D-4"}'}}  # fmt: skip
RESULT = "In Leeds, 住所: 東京都 🚚 " * 3
ANSWERED: dict[str, dict[str, Any]] = {  # a question, a call, its result: in one request
    "chat_completions": {"model": "gpt-4o", "messages": [
        {"role": "user", "content": "Where is D-4?"},
        {"role": "assistant", "content": None, "tool_calls": [CALL]},
        {"role": "tool", "tool_call_id": "call_1", "content": RESULT}]},
    "responses": {"model": "gpt-4o", "truncation": "auto", "input": [
        {"role": "user", "content": "Where is D-4?"},
        {"type": "function_call", "call_id": "call_1", "name": "where_is",
         "arguments": '{"order": "D-4"}'},
        {"type": "function_call_output", "call_id": "call_1", "output": RESULT}]},
    "anthropic_messages": {"model": "claude-sonnet-4-5", "max_tokens": 256, "messages": [
        {"role": "user", "content": "Where is D-4?"},
        {"role": "assistant", "content": [
            {"type": "tool_use", "id": "call_1", "name": "where_is", "input": {"order": "D-4"}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "call_1", "content": RESULT}]}]},
}  # fmt: skip


def stored(served: Service, session: str) -> list[Any]:
    answer = served.http.get(f"/v1/sessions/{session}/messages")
    return [] if answer.status_code == 404 else answer.json()["data"]


@pytest.mark.parametrize("budget", ["2", "40"])
@pytest.mark.parametrize("policy", ["hybrid", "token_window"])
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_results_too_large_for_the_budget_are_refused_not_dropped(
    protocol: str, policy: str, budget: str
) -> None:
    """A call's result that the budget cannot hold whole (the call and its result take
    about 50 tokens) reaches the model (compressed) or is refused before it is stored, as
    a question too large is. Not stored and then left out, leaving an empty context
    (``{"messages": []}``, which every provider refuses: 40 tokens), nor stored and then
    refused (2 tokens: the retry is refused too, its call no longer waits)."""
    with serving(protocol, policy) as served:
        headers = {"X-Session-Id": "s", "X-Context-Max-Tokens": budget}
        answer = served.http.post(PATHS[protocol], json=ANSWERED[protocol], headers=headers)
        sent = served.fake.requests
        if answer.status_code == 400:
            assert not sent and stored(served, "s") == []
        else:  # sent: valid, and with the call and its result (the validator pairs them)
            assert VALIDATORS[protocol](sent[-1]) == [] and '"call_1"' in json.dumps(sent[-1])


def test_a_refused_first_request_with_a_system_prompt_stores_nothing() -> None:
    """A system prompt and a question in a budget below what the system prompt takes: a
    400, and nothing stored (not the system prompt and an unanswered question, which a
    retry with a larger budget would store a second time)."""
    with serving("chat_completions", "hybrid") as served:
        messages = [{"role": "system", "content": "日本語で答えてください。"},
                    {"role": "user", "content": "Where is D-4?"}]  # fmt: skip
        answer = served.http.post(
            PATHS["chat_completions"], json={"model": "gpt-4o", "messages": messages},
            headers={"X-Session-Id": "s", "X-Context-Max-Tokens": "10"},
        )  # fmt: skip
        assert answer.status_code == 400 and not served.fake.requests
        assert stored(served, "s") == []


@pytest.mark.parametrize("policy", ["hybrid", "token_window"])
def test_thinking_opens_its_turn_when_the_question_before_it_is_left_out(policy: str) -> None:
    """A question answered in text, then a long question answered with thinking and a call;
    its result in a budget that leaves the long question out. The two assistant turns
    meet: the thinking one gets a turn of its own after ``(earlier turns left out)``, not
    merged after the other's text (``anthropic.thinking_first``: found by the property)."""
    with serving("anthropic_messages", policy) as served:
        assert isinstance(served.fake, ScriptedMessages)
        body = {**ANSWERED["anthropic_messages"], "max_tokens": 1024,
                "thinking": {"type": "enabled", "budget_tokens": 512},
                "tools": [{"name": "where_is", "input_schema": SCHEMA}]}  # fmt: skip
        long = "日本語の文。 The code is K7. " * 150
        for text, calls in (("Where is D-4?", 0), (long, 1)):
            served.fake.calls = calls
            asked = {**body, "messages": [{"role": "user", "content": text}]}
            assert served.http.post(PATHS["anthropic_messages"], json=asked,
                                    headers={"X-Session-Id": "s"}).is_success  # fmt: skip
        result = {"type": "tool_result", "tool_use_id": served.fake.answered[0], "content": "東京"}
        served.fake.calls = 0
        answered = {**body, "messages": [{"role": "user", "content": [result]}]}
        headers = {"X-Session-Id": "s", "X-Context-Max-Tokens": "300"}
        assert served.http.post(PATHS["anthropic_messages"], json=answered,
                                headers=headers).is_success  # fmt: skip
        sent = served.fake.requests[-1]
        assert long not in json.dumps(sent, ensure_ascii=False)  # the case: it was left out
        assert VALIDATORS["anthropic_messages"](sent) == []
        assert [b["type"] for b in sent["messages"][-2]["content"]] == ["thinking", "tool_use"]


def test_a_tool_unit_placed_before_the_question_is_not_the_turn_continued() -> None:
    """With thinking on, a tool unit without thinking (recalled from earlier turns, or
    written by the client without thinking) right before the question: converted, its
    results share the question's message, and Anthropic takes the request as continuing
    that turn, which has no thinking (``anthropic.thinking_continued``: found by the
    property in a clean clone, on a program of the hybrid's small window). Its results
    keep a message of their own, ``(noted)`` answers them, then the question."""
    call = {"id": "toolu_0", "type": "function",
            "function": {"name": "where_is", "arguments": '{"order": "D-4"}'}}  # fmt: skip
    context = [
        {"role": "user", "content": "Where is D-4? 包裹"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "toolu_0", "content": "東京 🚚"},
        {"role": "user", "content": "And the code? 日本語で"},
    ]
    _, turns = to_anthropic(context)
    body = {**ANSWERED["anthropic_messages"], "thinking": {"type": "enabled", "budget_tokens": 512},
            "tools": [{"name": "where_is", "input_schema": SCHEMA}]}  # fmt: skip
    assert VALIDATORS["anthropic_messages"]({**body, "messages": turns})  # the case
    fixed = closed(turns)
    assert VALIDATORS["anthropic_messages"]({**body, "messages": fixed}) == []
    assert [turn["role"] for turn in fixed] == ["user", "assistant", "user", "assistant", "user"]
    assert {b["type"] for b in fixed[2]["content"]} == {"tool_result"}
    assert fixed[3]["content"] == [{"type": "text", "text": "(noted)"}]
    assert fixed[4]["content"] == [{"type": "text", "text": "And the code? 日本語で"}]


def test_recall_for_a_requests_tool_results_goes_before_their_loop() -> None:
    """A request of tool results only (no question) recalls for the question that opened
    their loop; what comes back goes before that question, and the body still ends with
    the call and its result (in the cache mode it went after them: the model saw an old
    turn last). The question's own request, in a tight budget, recalled nothing."""
    fact = "My tracking id is SF1234567890. 追跡番号です 🚚 " + "It ships from Osaka. " * 20
    filler = "天气很好，我们去公园散步吧。猫が窓辺で寝ています。" * 3

    def recalled(body: dict[str, Any]) -> list[int]:
        return [i for i, m in enumerate(body["messages"]) if m.get("content") == fact]

    with serving("chat_completions", "hybrid_recall") as served:
        assert isinstance(served.fake, ScriptedChat)

        def post(message: dict[str, Any], budget: str | None = None) -> dict[str, Any]:
            headers = {"X-Session-Id": "s"} | ({"X-Context-Max-Tokens": budget} if budget else {})
            body = {"model": "gpt-4o", "messages": [message]}
            answer = served.http.post(PATHS["chat_completions"], json=body, headers=headers)
            assert answer.is_success, answer.text
            return served.fake.requests[-1]  # type: ignore[no-any-return]

        post({"role": "user", "content": fact})
        for i in range(80):
            last = post({"role": "user", "content": f"Part {i}: {filler}"})
        assert not recalled(last)  # it left the window
        served.fake.calls = 1
        asked = post({"role": "user", "content": "Look up my tracking id please."}, "300")
        assert not recalled(asked)  # no room for it
        result = {"role": "tool", "tool_call_id": served.fake.answered[0], "content": "東京"}
        served.fake.calls = 0
        sent = post(result)
    assert VALIDATORS["chat_completions"](sent) == []
    turns = sent["messages"]
    assert recalled(sent)  # the case: it came back for the loop's question
    assert turns[-1] == result and turns[-2]["tool_calls"]
    assert turns[-3]["content"] == "Look up my tracking id please."
    assert recalled(sent)[0] < len(turns) - 3


# -- reasoning items are not kept ---------------------------------------------------------


def test_reasoning_items_sent_by_the_client_are_refused() -> None:
    """ctxwindow keeps no reasoning items (a reasoning model's own are dropped from its
    reply, which the programs above cover): a client that sends one back gets a 400 naming
    it, before anything is stored or sent."""
    with serving("responses", "hybrid") as served:
        turns = [{"role": "user", "content": "Where is D-4?"},
                 {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "x=="},
                 {"role": "user", "content": "And now?"}]  # fmt: skip
        body = {**ANSWERED["responses"], "input": turns}
        answer = served.http.post(PATHS["responses"], json=body, headers={"X-Session-Id": "s"})
        assert answer.status_code == 400 and answer.json()["error"]["param"] == "input.1.type"
        assert not served.fake.requests and stored(served, "s") == []


def test_a_question_the_build_refuses_after_storing_it_is_taken_back_out() -> None:
    """A result of several thousand tokens and a question at a 43-token budget: admission
    lets the turn in (it fits compressed), but adding it grows the rolling summary past
    the room, and the build refuses it after it was stored. The turn is taken back out
    (``exchange.withdraw``): the refusal stores nothing, and the client's retry without
    the budget, whose result answers a call that still waits, is answered (it was
    refused as "does not answer a waiting call", the first attempt's result stored)."""
    said = Said("hello")
    result = ("订单 A-1042 已发货。 " * 15 + " ") * 12
    program = Program(
        protocol="responses", system=None, tools=True, prelude=None, naming="header",
        requests=(
            Request(said=said), Request(said=said, calls=1), Request(results=("hello",), calls=1),
            Request(results=("",), calls=2), Request(results=("hello", "hello")),
            Request(said=said, calls=1), Request(results=("hello",), calls=1),
            Request(results=(result,), said=said, budget=43), Request(said=said),
        ),
    )  # fmt: skip
    with serving("responses", "hybrid_recall") as served:
        tally = Tally()
        served.run(program, tally)
    assert tally.clean, shown(tally)
    assert tally.refused == {"context_length_exceeded": 1}  # the budget's, then answered
