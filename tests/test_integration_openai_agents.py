"""The OpenAI Agents SDK adapter, against the real ``openai-agents`` package and a fake model.

The fake model records every request the Runner makes (instructions, input items, tools)
and answers with a function call every third turn, so the session holds tool units.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from agents import Agent, Runner, function_tool, set_tracing_disabled
from agents.items import ModelResponse
from agents.models.interface import Model
from agents.usage import Usage
from hypothesis import given, settings
from hypothesis import strategies as st
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)

from ctxwindow.integrations.openai_agents import CtxWindowSession, to_items, to_messages
from ctxwindow.messages import validate_message
from ctxwindow.tokens import chat_tokenizer
from tests.support.docs_examples import examples

BUDGET = 2000
set_tracing_disabled(True)  # traces would be sent to OpenAI: no network in tests
TOKENIZER = chat_tokenizer("gpt-4o")


class FakeModel(Model):
    """Answers every request; every third request that is not a tool output calls the
    agent's first tool first."""

    def __init__(self) -> None:
        self.requests: list[tuple[str | None, list[dict[str, Any]], list[Any]]] = []

    async def get_response(  # type: ignore[override]
        self, system_instructions: str | None, input: Any, model_settings: Any, tools: Any,
        output_schema: Any, handoffs: Any, tracing: Any, **_: Any,
    ) -> ModelResponse:  # fmt: skip
        items = [input] if isinstance(input, str) else [_plain(i) for i in input]
        self.requests.append((system_instructions, items, list(tools)))
        n = len(self.requests)
        last = items[-1] if items else {}
        if tools and last.get("type") != "function_call_output" and n % 3 == 0:
            call = ResponseFunctionToolCall(
                type="function_call", call_id=f"call_{n}", name=tools[0].name,
                arguments=json.dumps({"order": f"A-{n}"}), id=f"fc_{n}", status="completed",
            )  # fmt: skip
            return ModelResponse(output=[call], usage=Usage(), response_id=None)
        text = ResponseOutputText(type="output_text", text=f"Answer {n}: 订单已发货 🚚.",
                                  annotations=[])  # fmt: skip
        message = ResponseOutputMessage(
            id=f"msg_{n}", type="message", role="assistant", status="completed", content=[text]
        )
        return ModelResponse(output=[message], usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        raise NotImplementedError


def _plain(item: Any) -> dict[str, Any]:
    if isinstance(item, dict):
        return item
    return dict(item.model_dump(exclude_unset=True))


@function_tool
def lookup(order: str) -> str:
    """Look up where an order is."""
    return f"Order {order} left the Leeds depot on Tuesday."


def request_tokens(instructions: str | None, items: list[Any], tools: list[Any]) -> int:
    """What a request costs, counted exactly as ctxwindow counts chat requests."""
    messages = [{"role": "system", "content": instructions}] if instructions else []
    if items and isinstance(items[0], str):
        messages.append({"role": "user", "content": items[0]})
    else:
        messages += [m for m, _ in to_messages(items)]
    definitions = [
        {"type": "function", "function": {"name": t.name, "description": t.description,
                                          "parameters": t.params_json_schema}}
        for t in tools
    ]  # fmt: skip
    return TOKENIZER.count(messages, definitions)


def _orphans(items: list[dict[str, Any]]) -> list[str]:
    calls: set[str] = set()
    orphans = []
    for item in items:
        if item.get("type") == "function_call":
            calls.add(item["call_id"])
        elif item.get("type") == "function_call_output" and item["call_id"] not in calls:
            orphans.append(item["call_id"])
    return orphans


def test_a_runner_holds_300_turns_with_tool_calls_within_the_budget(tmp_path: Path) -> None:
    """No request over 2,000 tokens, no orphan tool output, instructions every time, and
    the whole history in SQLite."""
    model = FakeModel()
    agent = Agent(name="support", instructions="You answer about orders. Be brief.",
                  model=model, tools=[lookup])  # fmt: skip
    store = f"sqlite:///{tmp_path / 'agents.db'}"

    async def talk() -> CtxWindowSession:
        session = CtxWindowSession("user-42", store=store, max_tokens=1500)
        for turn in range(300):
            question = f"Turn {turn}: where is order A-{turn}? 我的订单在哪里？"
            await Runner.run(agent, question, session=session)
        return session

    asyncio.run(talk())
    assert len(model.requests) > 300  # tool calls add requests
    for instructions, items, tools in model.requests:
        assert instructions == "You answer about orders. Be brief."
        assert request_tokens(instructions, items, tools) <= BUDGET
        assert not _orphans(items)

    async def stored() -> list[Any]:
        again = CtxWindowSession("user-42", store=store, max_tokens=1500)
        return await again.get_all_items()

    history = asyncio.run(stored())
    questions = [i["content"] for i in history if i.get("role") == "user"]
    assert questions == [f"Turn {t}: where is order A-{t}? 我的订单在哪里？" for t in range(300)]
    assert (
        sum(1 for i in history if i.get("type") == "function_call")
        == sum(1 for i in history if i.get("type") == "function_call_output")
        > 50
    )


def test_items_come_back_as_they_were_stored(tmp_path: Path) -> None:
    session = CtxWindowSession("s", store=f"sqlite:///{tmp_path / 'a.db'}", max_tokens=4000)
    items: list[dict[str, Any]] = [
        {
            "role": "user",
            "content": [
                {"type": "input_text", "text": "Wo ist A-1042? 🚚"},
                {"type": "input_image", "image_url": "https://x/y.png", "detail": "low"},
            ],
        },
        {"type": "reasoning", "id": "rs_1", "summary": []},
        {
            "type": "message",
            "role": "assistant",
            "id": "msg_1",
            "status": "completed",
            "content": [{"type": "output_text", "text": "Let me look.", "annotations": []}],
        },
        {
            "type": "function_call",
            "call_id": "c1",
            "name": "lookup",
            "arguments": "{}",
            "id": "fc_1",
            "status": "completed",
        },
        {"type": "function_call", "call_id": "c2", "name": "lookup", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "in Leeds"},
        {"type": "function_call_output", "call_id": "c2", "output": "in York"},
    ]

    async def run() -> tuple[list[Any], list[Any], Any, list[Any]]:
        await session.add_items(items)
        got = await session.get_items()
        last_two = await session.get_items(limit=2)
        popped = await session.pop_item()
        after = await session.get_items()
        return got, last_two, popped, after

    got, last_two, popped, after = asyncio.run(run())
    assert got == items
    assert last_two == items[-2:]
    assert popped == items[-1]
    assert after == items[:-1]


def test_pop_item_takes_one_item_of_a_merged_entry(tmp_path: Path) -> None:
    session = CtxWindowSession("s", store=f"sqlite:///{tmp_path / 'a.db'}", max_tokens=4000)
    calls = [
        {"type": "function_call", "call_id": "c1", "name": "a", "arguments": "{}"},
        {"type": "function_call", "call_id": "c2", "name": "b", "arguments": "{}"},
    ]

    async def run() -> tuple[Any, list[Any], Any, Any, Any]:
        await session.add_items([{"role": "user", "content": "go"}, *calls])
        popped = await session.pop_item()
        left = await session.get_all_items()
        second = await session.pop_item()
        third = await session.pop_item()
        return popped, left, second, third, await session.pop_item()

    popped, left, second, third, nothing = asyncio.run(run())
    assert popped == calls[1] and left == [{"role": "user", "content": "go"}, calls[0]]
    assert second == calls[0] and third == {"role": "user", "content": "go"}
    assert nothing is None


def test_clear_session_empties_it(tmp_path: Path) -> None:
    session = CtxWindowSession("s", store=f"sqlite:///{tmp_path / 'a.db'}", max_tokens=4000)

    async def run() -> list[Any]:
        await session.add_items([{"role": "user", "content": "hello"}])
        await session.clear_session()
        return await session.get_items()

    assert asyncio.run(run()) == []


def test_the_session_is_a_session_of_the_sdk(tmp_path: Path) -> None:
    from agents.memory.session import Session

    assert isinstance(CtxWindowSession("s", store=f"sqlite:///{tmp_path / 'a.db'}"), Session)


text = st.text(
    st.characters(codec="utf-8", exclude_categories=("Cs",), exclude_characters="\x00"), max_size=30
)  # stores refuse NUL
user_items = st.builds(lambda t: {"role": "user", "content": t}, text)
answers = st.builds(
    lambda t: {"type": "message", "role": "assistant", "status": "completed", "id": "m",
               "content": [{"type": "output_text", "text": t, "annotations": []}]}, text,
)  # fmt: skip


@st.composite
def tool_turns(draw: st.DrawFn) -> list[dict[str, Any]]:
    n = draw(st.integers(1, 3))
    ids = [f"call_{draw(st.uuids()).hex[:8]}" for _ in range(n)]
    calls = [{"type": "function_call", "call_id": i, "name": "f", "arguments": "{}"} for i in ids]
    outputs = [{"type": "function_call_output", "call_id": i, "output": draw(text)} for i in ids]
    return calls + outputs


turns = st.lists(st.one_of(user_items.map(lambda i: [i]), answers.map(lambda i: [i]),
                           tool_turns()), min_size=1, max_size=40)  # fmt: skip


@settings(max_examples=40, deadline=None)
@given(turns, st.integers(120, 600))
def test_get_items_is_within_budget_and_never_orphans(
    tmp_path_factory: pytest.TempPathFactory, turns: list[list[dict[str, Any]]], budget: int
) -> None:
    """Through the adapter: the context fits the budget (counted exactly), every output
    follows its call, and the stored items round-trip as chat messages."""
    path = tmp_path_factory.mktemp("agents") / "s.db"
    session = CtxWindowSession("s", store=f"sqlite:///{path}", max_tokens=budget)

    async def run() -> list[Any]:
        for items in turns:
            await session.add_items(items)
        return await session.get_items()

    got = asyncio.run(run())
    messages = [m for m, _ in to_messages(got)]
    for i, message in enumerate(messages):
        validate_message(message, where=f"messages[{i}]")
    assert TOKENIZER.count(messages) <= budget
    assert not _orphans(got)
    for message, _ in to_messages([i for t in turns for i in t]):
        assert [m for m, _ in to_messages(to_items(message))] == [message]


def test_the_documented_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/integrations.md's example, executed with the fake model in place of "gpt-4o"."""
    code = examples("OpenAI Agents SDK")[0]
    monkeypatch.chdir(tmp_path)
    model = FakeModel()
    exec(compile(code, "docs/integrations.md", "exec"), {"model": model, "__name__": "doc"})
    assert len(model.requests) >= 3 and (tmp_path / "sessions.db").exists()
