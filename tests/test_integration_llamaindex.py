"""The LlamaIndex adapter, against the real ``llama-index-core`` and a fake model.

The fake model records every request it is sent (as OpenAI dicts, counted with
ctxwindow's exact counter) and calls a tool every third turn, alternating the two
ways LlamaIndex writes tool calls (``ToolCallBlock`` blocks, OpenAI-style
``additional_kwargs["tool_calls"]``), so the memory holds tool units of both kinds.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import re
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from llama_index.core.agent.workflow import FunctionAgent
from llama_index.core.base.llms.types import (
    CachePoint,
    ChatMessage,
    ChatResponse,
    ImageBlock,
    TextBlock,
    ToolCallBlock,
)
from llama_index.core.bridge.pydantic import Field
from llama_index.core.chat_engine import SimpleChatEngine
from llama_index.core.llms.mock import MockFunctionCallingLLM
from llama_index.core.memory import Memory
from llama_index.core.storage.chat_store.sql import SQLAlchemyChatStore
from llama_index.core.tools import FunctionTool, ToolSelection
from sqlalchemy.ext.asyncio import create_async_engine

from ctxwindow.archive import SQLiteArchive
from ctxwindow.extras import install_hint
from ctxwindow.integrations.llamaindex import (
    TOOL_CALL_BLOCKS,
    CtxWindowMemory,
    CtxWindowRecallBlock,
    from_openai_message,
    to_openai_message,
)
from ctxwindow.messages import validate_message
from ctxwindow.stores.sqlite import SQLiteStore
from ctxwindow.tokens import chat_tokenizer
from tests.support.docs_examples import examples

BUDGET = 2000
AGENT_ROOM = 400  # what a FunctionAgent sends after the memory: this run's call and result
SYSTEM = "You are the order desk of Acme. Answer in one sentence; 用中文或英文回答。"
TOKENIZER = chat_tokenizer("gpt-4o")
ROOT = Path(__file__).resolve().parents[1]


def dicts(messages: Sequence[ChatMessage]) -> list[dict[str, Any]]:
    return [to_openai_message(m) for m in messages]


def orphans(messages: Sequence[dict[str, Any]]) -> list[str]:
    """Tool results without their call before them, and calls without all their results."""
    called: set[str] = set()
    answered: set[str] = set()
    bad = []
    for message in messages:
        for call in message.get("tool_calls") or ():
            called.add(call["id"])
        if message["role"] == "tool":
            if message["tool_call_id"] not in called:
                bad.append(f"result {message['tool_call_id']} without its call")
            answered.add(message["tool_call_id"])
    return bad + [f"call {c} without its result" for c in sorted(called - answered)]


class FakeLLM(MockFunctionCallingLLM):
    """Records each request; on every third user turn calls ``lookup_order`` first (as a
    ``ToolCallBlock`` or OpenAI-style, by turns)."""

    requests: list[list[dict[str, Any]]] = Field(default_factory=list)
    responses: list[ChatMessage] = Field(default_factory=list)

    def __init__(self) -> None:
        super().__init__(response_generator=self._respond)

    def _respond(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatMessage:
        self.requests.append(dicts(messages))
        n = len(self.requests)
        asked = sum(r[-1]["role"] == "user" for r in self.requests)  # user turns so far
        if messages[-1].role == "user" and kwargs.get("tools") and asked % 3 == 0:
            response = _tool_call(n, f"A-{n}")
        else:
            words = " ".join(["shipped"] * (n % 40))
            response = ChatMessage(role="assistant", content=f"Answer {n}: 订单已发货 🚚 {words}.")
        self.responses.append(response)
        return response

    def get_tool_calls_from_response(
        self, response: ChatResponse, error_on_no_tool_call: bool = False, **kwargs: Any
    ) -> list[ToolSelection]:
        calls = [
            (c["id"], c["function"]["name"], c["function"]["arguments"])
            for c in response.message.additional_kwargs.get("tool_calls") or ()
        ] + [
            (b.tool_call_id, b.tool_name, json.dumps(b.tool_kwargs))
            for b in response.message.blocks
            if isinstance(b, ToolCallBlock)
        ]
        return [
            ToolSelection(tool_id=i, tool_name=n, tool_kwargs=json.loads(a)) for i, n, a in calls
        ]


def _tool_call(n: int, order: str) -> ChatMessage:
    """A call of ``lookup_order``: as a block on odd turns, OpenAI-style on even ones."""
    if n % 2:
        block = ToolCallBlock(
            tool_call_id=f"call_{n}", tool_name="lookup_order", tool_kwargs={"order": order}
        )
        return ChatMessage(role="assistant", blocks=[block])
    call = {
        "id": f"call_{n}",
        "type": "function",
        "function": {"name": "lookup_order", "arguments": json.dumps({"order": order})},
    }
    return ChatMessage(role="assistant", content=None, additional_kwargs={"tool_calls": [call]})


def lookup_order(order: str) -> str:
    """Where an order is."""
    return f"Order {order}: shipped from Rotterdam, 3 parcels, ETA Friday. " * 8


def check_request(request: list[dict[str, Any]]) -> None:
    assert TOKENIZER.count(request) <= BUDGET
    assert request[0] == {"role": "system", "content": SYSTEM}
    assert orphans(request) == []


# -- the done-when test --------------------------------------------------------------------


# llama-index's workflows read ``__fields__`` and ``model_computed_fields`` on the agent
# instance (Pydantic deprecations) when it is made.
@pytest.mark.filterwarnings("ignore::pydantic.warnings.PydanticDeprecationWarning")
def test_an_agent_holds_300_turns_with_tools_inside_the_budget(tmp_path: Path) -> None:
    """A FunctionAgent with a tool holds a 300-turn conversation through the memory: no
    request over 2,000 tokens (exact count of what the model received), no orphan tool
    result, the system prompt in every request, and the whole history in SQLite."""
    url = f"sqlite:///{tmp_path / 'chat.db'}"
    llm = FakeLLM()
    agent = FunctionAgent(tools=[FunctionTool.from_defaults(lookup_order)], llm=llm)
    memory = CtxWindowMemory(session_id="user-42", store=url, max_tokens=BUDGET - AGENT_ROOM)
    expected = [ChatMessage(role="system", content=SYSTEM)]

    async def converse() -> None:
        await memory.aput(expected[0])
        for turn in range(300):
            seen = len(llm.responses)
            question = f"Turn {turn}: where is my order A-{turn}? 我的订单在哪里？"
            await agent.run(user_msg=question, memory=memory)
            expected.append(ChatMessage(role="user", content=question))
            for response in llm.responses[seen:]:
                expected.append(response)
                for call in FakeLLM.get_tool_calls_from_response(
                    llm, ChatResponse(message=response)
                ):
                    result = lookup_order(**call.tool_kwargs)
                    expected.append(
                        ChatMessage(
                            role="tool",
                            content=result,
                            additional_kwargs={"tool_call_id": call.tool_id},
                        )
                    )
        await memory.aclose()

    started = time.perf_counter()
    asyncio.run(converse())
    elapsed = time.perf_counter() - started

    assert len(llm.requests) == 300 + 100  # a tool turn asks the model twice
    for request in llm.requests:
        check_request(request)
    assert max(TOKENIZER.count(r) for r in llm.requests) > BUDGET - AGENT_ROOM - 200  # it was full
    reopened = CtxWindowMemory(session_id="user-42", store=url)
    assert reopened.get_all() == expected
    assert len(expected) == 1 + 300 * 2 + 100 * 2
    reopened.close()
    assert elapsed < 60


def test_a_chat_engine_with_the_memory_stays_within_the_budget(tmp_path: Path) -> None:
    """SimpleChatEngine (sync, then async) sends what the memory's get returns."""
    llm = FakeLLM()
    memory = CtxWindowMemory.from_defaults(
        session_id="s",
        store=f"sqlite:///{tmp_path / 'chat.db'}",
        max_tokens=BUDGET,
        chat_history=[ChatMessage(role="system", content=SYSTEM)],
    )
    engine = SimpleChatEngine.from_defaults(llm=llm, memory=memory)
    for turn in range(60):
        engine.chat(f"Turn {turn}: tell me about order A-{turn}. " * 4)

    async def more() -> None:
        for turn in range(60, 80):
            await engine.achat(f"Turn {turn}: and order A-{turn}? " * 4)
        await memory.aclose()

    asyncio.run(more())
    assert len(llm.requests) == 80
    for request in llm.requests:
        check_request(request)
    assert len(memory.get_all()) == 1 + 80 * 2
    memory.close()


# -- the memory's methods ----------------------------------------------------------------


def test_put_get_set_and_reset_sync_and_async_on_one_store(tmp_path: Path) -> None:
    memory = CtxWindowMemory(session_id="s", store=f"sqlite:///{tmp_path / 'm.db'}", max_tokens=500)
    hello = ChatMessage(role="user", content="你好 👋")
    memory.put(ChatMessage(role="system", content=SYSTEM))
    memory.put(hello)
    assert memory.get() == [ChatMessage(role="system", content=SYSTEM), hello]

    async def run() -> None:
        assert await memory.aget_all() == memory.get_all()
        await memory.aput_messages([ChatMessage(role="assistant", content="Hi!")])
        assert len(memory.get_all()) == 3  # the sync side sees what the async side stored
        await memory.aset([hello])
        assert await memory.aget() == [hello]
        await memory.areset()
        assert await memory.aget_all() == []
        await memory.aclose()

    asyncio.run(run())
    memory.set([hello, ChatMessage(role="assistant", content="hey")])
    assert [m.content for m in memory.get_all()] == ["你好 👋", "hey"]
    memory.reset()
    assert memory.get_all() == [] and memory.get() == []
    memory.close()


def test_memory_store_url_is_shared_by_sync_and_async_methods() -> None:
    memory = CtxWindowMemory(session_id="s", store="memory://", max_tokens=500)
    memory.put(ChatMessage(role="user", content="one"))
    assert [m.content for m in asyncio.run(memory.aget_all())] == ["one"]


def test_a_store_object_serves_its_own_flavour(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "s.db")
    memory = CtxWindowMemory(session_id="s", store=store, max_tokens=500)
    memory.put(ChatMessage(role="user", content="one"))
    with pytest.raises(TypeError, match="AsyncStore"):
        asyncio.run(memory.aget())
    memory.close()


def test_get_leaves_room_for_initial_token_count() -> None:
    memory = CtxWindowMemory(session_id="s", store="memory://", max_tokens=400)
    for i in range(40):
        memory.put(
            ChatMessage(role="user" if i % 2 == 0 else "assistant", content=f"turn {i} " * 5)
        )
    assert TOKENIZER.count(dicts(memory.get(initial_token_count=150))) <= 250
    with pytest.raises(ValueError, match="initial_token_count"):
        memory.get(initial_token_count=400)


def test_from_defaults_takes_the_budget_from_the_llm() -> None:
    memory = CtxWindowMemory.from_defaults(store="memory://", llm=FakeLLM())
    assert memory.max_tokens == int(FakeLLM().metadata.context_window * 0.75)
    assert len(memory.session_id) == 32
    assert memory.to_dict() == {
        "session_id": memory.session_id, "store": "memory://", "model": "gpt-4o",
        "max_tokens": memory.max_tokens, "class_name": "CtxWindowMemory",
    }  # fmt: skip


def test_get_recalls_archived_turns_for_the_input() -> None:
    """With an archive, get(input) brings back the old turn that matches it."""
    memory = CtxWindowMemory(
        session_id="s", store="memory://", max_tokens=300, options={"archive": SQLiteArchive()}
    )
    memory.put(ChatMessage(role="user", content="My cat is called Miso."))
    memory.put(ChatMessage(role="assistant", content="Noted."))
    for i in range(40):
        memory.put(ChatMessage(role="user", content=f"Fact {i} about lava flows in Iceland?"))
        memory.put(ChatMessage(role="assistant", content=f"Lava fact {i}: basalt plains."))
    memory.put(ChatMessage(role="user", content="What is my cat called?"))
    got = memory.get("What is my cat called?")
    assert "My cat is called Miso." in [m.content for m in got]
    assert TOKENIZER.count(dicts(got)) <= 300
    memory.close()


# -- conversion ---------------------------------------------------------------------------


def test_conversion_follows_the_openai_conventions() -> None:
    call = ToolCallBlock(tool_call_id="c1", tool_name="f", tool_kwargs={"q": "東京"})
    image = ImageBlock(url="https://example.com/cat.png", detail="low")
    message = ChatMessage(role="assistant", blocks=[TextBlock(text="Looking"), call])
    assert to_openai_message(message) == {
        "role": "assistant",
        "content": "Looking",
        TOOL_CALL_BLOCKS: "blocks",
        "tool_calls": [
            {
                "id": "c1",
                "type": "function",
                "function": {"name": "f", "arguments": '{"q": "東京"}'},
            }
        ],
    }
    user = ChatMessage(
        role="user", blocks=[TextBlock(text="Look"), image, CachePoint.model_construct()]
    )
    assert to_openai_message(user)["content"] == [
        {"type": "text", "text": "Look"},
        {"type": "image_url", "image_url": {"url": "https://example.com/cat.png", "detail": "low"}},
    ]
    result = ChatMessage(role="tool", content="sunny", additional_kwargs={"tool_call_id": "c1"})
    assert to_openai_message(result) == {"role": "tool", "content": "sunny", "tool_call_id": "c1"}


def test_image_bytes_travel_as_a_data_url() -> None:
    png = b"\x89PNG\r\n\x1a\n" + bytes(range(40))
    message = ChatMessage(role="user", blocks=[ImageBlock(image=png)])
    converted = to_openai_message(message)
    assert converted["content"][0]["image_url"]["url"].startswith("data:image/png;base64,")
    assert from_openai_message(converted) == message


def test_sdk_tool_call_objects_are_stored_as_dicts() -> None:
    from openai.types.chat import ChatCompletionMessageToolCall
    from openai.types.chat.chat_completion_message_function_tool_call import Function

    call = ChatCompletionMessageToolCall(
        id="c1", type="function", function=Function(name="f", arguments="{}")
    )
    message = ChatMessage(role="assistant", content=None, additional_kwargs={"tool_calls": [call]})
    converted = to_openai_message(message)
    validate_message(converted)
    assert converted["tool_calls"] == [
        {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    ]


def test_blocks_the_format_cannot_hold_are_refused() -> None:
    from llama_index.core.base.llms.types import AudioBlock

    with pytest.raises(ValueError, match="AudioBlock"):
        to_openai_message(
            ChatMessage(role="user", blocks=[AudioBlock(audio=b"RIFF", format="wav")])
        )


texts = st.text(
    st.characters(codec="utf-8", exclude_categories=["Cs"], exclude_characters="\x00"), max_size=30
) | st.sampled_from(["订单已发货", "注文は発送済み", "🚚📦", "mixed 中文 and English"])
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-1000, 1000) | texts,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(texts, inner, max_size=3),
    max_leaves=6,
)
extras = st.dictionaries(
    st.sampled_from(["name", "session_id", "x_trace", "metadata"]), json_values, max_size=2
).map(lambda d: {k: (v if k != "name" else "bob") for k, v in d.items()})
images = st.builds(
    ImageBlock,
    url=st.sampled_from(["https://example.com/a.png", "https://cdn.example.org/x/y.jpg?s=1"]),
    detail=st.sampled_from([None, "low", "high", "auto"]),
)
content_blocks = st.lists(st.builds(TextBlock, text=texts) | images, max_size=3)
ids = st.text("abcdefghijklmnopqrstuvwxyz0123456789_", min_size=1, max_size=12)
tool_kwargs = st.dictionaries(texts, json_values, max_size=3) | st.sampled_from(['{"a": 1', "x"])
call_blocks = st.lists(
    st.builds(ToolCallBlock, tool_call_id=ids | st.none(), tool_name=ids, tool_kwargs=tool_kwargs),
    min_size=1,
    max_size=3,
)
openai_calls = st.lists(
    st.builds(
        lambda i, n, a: {"id": i, "type": "function", "function": {"name": n, "arguments": a}},
        ids,
        ids,
        texts,
    ),
    min_size=1,
    max_size=3,
)


@st.composite
def chat_messages(draw: st.DrawFn) -> ChatMessage:
    role = draw(st.sampled_from(["system", "developer", "user", "assistant", "tool", "function"]))
    kwargs: dict[str, Any] = draw(extras)
    blocks: list[Any] = draw(content_blocks)
    if role == "tool":
        kwargs["tool_call_id"] = draw(ids)
    if role == "assistant":
        form = draw(st.sampled_from(["none", "blocks", "kwargs", "both"]))
        if form == "kwargs":
            kwargs["tool_calls"] = draw(openai_calls)
        if form in ("blocks", "both"):
            calls = draw(call_blocks)
            blocks += calls
            if form == "both":  # as llama-index-llms-openai writes a response
                kwargs["tool_calls"] = [_call_dict(block) for block in calls]
    return ChatMessage(role=role, blocks=blocks, additional_kwargs=kwargs)


def _call_dict(block: ToolCallBlock) -> Any:
    return to_openai_message(ChatMessage(role="assistant", blocks=[block]))["tool_calls"][0]


@given(chat_messages())
def test_a_chat_message_comes_back_unchanged(message: ChatMessage) -> None:
    converted = to_openai_message(message)
    validate_message(converted)
    assert json.loads(json.dumps(converted)) == converted  # what the store writes
    assert from_openai_message(converted) == message


@given(chat_messages())
def test_an_openai_message_comes_back_unchanged(message: ChatMessage) -> None:
    converted = to_openai_message(message)
    assert to_openai_message(from_openai_message(converted)) == converted


# -- invariants through the adapter ------------------------------------------------------


@st.composite
def conversations(draw: st.DrawFn) -> list[list[ChatMessage]]:
    """Batches to put: a system prompt, then user turns, answers and tool units."""
    words = st.lists(texts, min_size=1, max_size=12).map(" ".join)
    batches = [[ChatMessage(role="system", content=draw(texts))]]
    for n in range(draw(st.integers(1, 25))):
        batches.append([ChatMessage(role="user", content=draw(words))])
        if draw(st.booleans()):
            calls = draw(st.lists(ids, min_size=1, max_size=3, unique=True))
            call = ChatMessage(
                role="assistant",
                blocks=[
                    ToolCallBlock(tool_call_id=f"{n}{c}", tool_name="f", tool_kwargs={"q": c})
                    for c in calls
                ],
            )
            results = [
                ChatMessage(
                    role="tool", content=draw(words), additional_kwargs={"tool_call_id": f"{n}{c}"}
                )
                for c in calls
            ]
            batches.append([call, *results])
        batches.append([ChatMessage(role="assistant", content=draw(words))])
    return batches


@given(conversations(), st.integers(250, 1500))
def test_get_stays_within_max_tokens_keeps_system_and_tool_units(
    batches: list[list[ChatMessage]], max_tokens: int
) -> None:
    memory = CtxWindowMemory(session_id="s", store="memory://", max_tokens=max_tokens)
    for batch in batches:
        if len(batch) == 1:
            memory.put(batch[0])
        else:
            memory.put_messages(batch)
        got = dicts(memory.get())
        assert TOKENIZER.count(got) <= max_tokens
        assert got[0] == to_openai_message(batches[0][0])
        assert orphans(got) == []
    assert memory.get_all() == [m for batch in batches for m in batch]


# -- the recall block -----------------------------------------------------------------------


def test_the_recall_block_brings_back_what_memory_flushed() -> None:
    """In LlamaIndex's Memory, the block returns the flushed turn that answers the question."""

    async def run() -> list[ChatMessage]:
        engine = create_async_engine("sqlite+aiosqlite:///:memory:")
        block = CtxWindowRecallBlock(archive=SQLiteArchive(), max_tokens=300)
        memory = Memory.from_defaults(
            session_id="u1",
            token_limit=500,
            chat_history_token_ratio=0.5,
            token_flush_size=100,
            memory_blocks=[block],
            chat_store=SQLAlchemyChatStore(table_name="memory", async_engine=engine),
        )
        await memory.aput(ChatMessage(role="user", content="My cat is called Miso."))
        await memory.aput(ChatMessage(role="assistant", content="Noted."))
        for i in range(30):
            await memory.aput(ChatMessage(role="user", content=f"Fact {i} about lava in Iceland?"))
            await memory.aput(ChatMessage(role="assistant", content=f"Lava fact {i}: basalt."))
        got = await memory.aget(input="What is my cat called?")
        short_term = await memory.sql_store.get_messages("u1")
        assert "Miso" not in json.dumps([m.content for m in short_term][-20:])
        await block.aclose()
        await engine.dispose()
        return got

    got = asyncio.run(run())
    contents = [m.content for m in got]
    assert "My cat is called Miso." in contents
    assert orphans(dicts(got)) == []


def test_the_recall_block_returns_whole_tool_units_within_its_budget() -> None:
    async def run() -> None:
        block = CtxWindowRecallBlock(archive=SQLiteArchive(), max_tokens=250, session_id="b")
        flushed = []
        for i in range(20):
            call = _tool_call(2 * i + 1, f"Z-{i}")
            result = ChatMessage(
                role="tool",
                content=f"order Z-{i} is in Lyon",
                additional_kwargs={"tool_call_id": f"call_{2 * i + 1}"},
            )
            flushed += [
                ChatMessage(role="user", content=f"where is Z-{i}?"),
                call,
                result,
                ChatMessage(role="assistant", content=f"Z-{i} is in Lyon."),
            ]
        await block.aput(flushed, from_short_term_memory=True)
        got = await block.aget([ChatMessage(role="user", content="where is order Z-3?")])
        assert TOKENIZER.count(dicts(got)) <= 250
        assert orphans(dicts(got)) == []
        assert "order Z-3 is in Lyon" in [m.content for m in got]
        assert await block.atruncate(got, 10_000) is None
        shorter = await block.atruncate(got, 1)
        assert shorter is not None and orphans(dicts(shorter)) == []
        assert await block.aget([]) == []
        await block.aclose()

    asyncio.run(run())


def test_the_recall_block_needs_an_archive() -> None:
    block = CtxWindowRecallBlock(session_id="b")
    with pytest.raises(ValueError, match="archive"):
        asyncio.run(block.aput([ChatMessage(role="user", content="hi")]))


# -- packaging and docs -------------------------------------------------------------------


def test_without_llama_index_the_import_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "llama_index.core", None)  # as if not installed
    monkeypatch.delitem(sys.modules, "ctxwindow.integrations.llamaindex")
    with pytest.raises(ImportError, match=re.escape(install_hint("llamaindex"))):
        importlib.import_module("ctxwindow.integrations.llamaindex")


def docs_examples() -> list[str]:
    """The code blocks under '## LlamaIndex' in docs/integrations.md."""
    return examples("LlamaIndex")


def test_the_documented_examples_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    blocks = docs_examples()
    assert len(blocks) >= 2
    for code in blocks:
        exec(compile(code, "docs: LlamaIndex", "exec"), {"__name__": "__docs__"})
