"""The field's bug reports, replayed against ctxwindow: one test per thread (issue 28, item 3).

Each test is named after a public thread where a context manager broke a request
(a provider's 400 after a trim, a summary or a compaction), lost history, or
leaked its housekeeping; its docstring says which thread, what went wrong there
and what ctxwindow does. Each builds the thread's situation on ctxwindow's
matching path (the LangChain trim and middleware, the LlamaIndex memory, the
Agents SDK session, a session manager, the service's routes), with the real
framework packages, and checks the request ctxwindow would send with
``ctxwindow.validate``: no broken rule of the provider's. The models are
stand-ins that record what they are sent (no network); counts are exact for
gpt-4o. docs/field-scenarios.md lists the threads and the results.
"""

from __future__ import annotations

import asyncio
import base64
import json
import re
import struct
import zlib
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest
from agents import Agent, Runner, function_tool, set_tracing_disabled
from agents.testing import ModelCall, ModelStep, ScriptedModel, assistant_message
from agents.testing import function_call as sdk_function_call
from fastapi.testclient import TestClient
from langchain.agents import create_agent
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool
from langchain_core.utils.function_calling import convert_to_openai_tool
from llama_index.core.base.llms.types import ChatMessage, ThinkingBlock, ToolCallBlock
from prometheus_client.parser import text_string_to_metric_families
from pydantic import Field

from ctxwindow import (
    ContextManager,
    InvalidMessageError,
    PinnedOverBudgetError,
    PriorityWindow,
    count_tokens,
)
from ctxwindow.compress import Extractive, LLMSummarizer, RollingSummary, openai_completion
from ctxwindow.compress.prompt import HEADINGS, SYSTEM_PROMPT
from ctxwindow.context.policy import LOW_WATER
from ctxwindow.integrations.langchain import (
    CtxWindowMiddleware,
    from_openai,
    to_openai,
    trim_messages,
)
from ctxwindow.integrations.llamaindex import TOOL_CALL_BLOCKS, CtxWindowMemory, to_openai_message
from ctxwindow.integrations.openai_agents import CtxWindowSession
from ctxwindow.messages import Message
from ctxwindow.policies import Folding
from ctxwindow.server import Settings, create_app
from ctxwindow.server.protocols.blocks import to_anthropic
from ctxwindow.server.protocols.items import to_responses
from ctxwindow.tokens import chat_tokenizer, get_encoding
from ctxwindow.validate import check, ensure
from tests.support.compress import FakeModel
from tests.support.fake_openai import fake_openai
from tests.support.guide import GUIDE_TOOL_MESSAGES, GUIDE_TOOLS
from tests.support.protocol_upstreams import FakeMessages, protocol_app

TOKENIZER = chat_tokenizer("gpt-4o")
PRIMING = TOKENIZER.framing.reply_priming
SUMMARY_HEADINGS = tuple(HEADINGS.values())
set_tracing_disabled(True)  # traces would go to OpenAI: no network in tests
CODE = re.compile(r"\b(?:K\d+(?:x\d+)?|A-\d+)\b")  # the codes and order ids turns carry


def broken(protocol: str, request: Any) -> list[str]:
    """The provider's rules ``request`` breaks, one line each (empty: the provider takes it)."""
    return [f"{v.rule} at {v.where}: {v.message}" for v in check(protocol, request)]


def wire(messages: Sequence[BaseMessage]) -> list[Message]:
    return [to_openai(m) for m in messages]


def summaries(messages: Sequence[Message]) -> list[str]:
    """The texts of the rolling summaries among ``messages``."""
    texts = [m.get("content") for m in messages if m["role"] == "user"]
    return [t for t in texts if isinstance(t, str) and t.startswith(SUMMARY_HEADINGS)]


# -- LangChain: the trim -----------------------------------------------------------------------

WEATHER_CALL = {"name": "get_weather", "args": {"location": "Florida"}, "id": "abc123"}
WEATHER_USE = {"type": "tool_use", "id": "abc123", "name": "get_weather",
               "input": {"location": "Florida"}}  # fmt: skip


def _weather_call(text: str) -> AIMessage:
    """The report's AIMessage: Anthropic content blocks (text, tool_use) and its tool_calls."""
    return AIMessage([{"type": "text", "text": text}, WEATHER_USE], tool_calls=[WEATHER_CALL])


def test_field_langchain_33245_leading_orphan() -> None:
    """langchain-ai/langchain#33245, "`trim_messages` returning invalid messages history".

    There: ``trim_messages(strategy="last", token_counter=len, max_tokens=5)`` over the
    report's seven messages returns the ToolMessage whose AIMessage it cut away as the
    first message: OpenAI answers 400 ("messages with role 'tool' must be a response to
    a preceding message with 'tool_calls'"). Here: ctxwindow's drop-in, on the same
    messages with the report's call and with exact counts at every budget, keeps the
    call and its result together: no result is ever kept without its call, and every
    trimmed history is one the Chat Completions rules accept.
    """
    messages = [
        HumanMessage("What's the weather in Florida?"),
        _weather_call("Let's check the weather in Florida"),
        ToolMessage("It's sunny.", tool_call_id="abc123"),
        HumanMessage("I see, thanks!"),
        AIMessage("No problem!"),
        HumanMessage("And in 東京? 🌧"),
        AIMessage("It's rainy in Tokyo. 東京は雨です。"),
    ]
    reported = trim_messages(messages, strategy="last", token_counter=len, max_tokens=5)
    assert [m.type for m in reported] == ["human", "ai", "human", "ai"]
    assert broken("chat_completions", wire(reported)) == []
    whole = TOKENIZER.count(wire(messages))
    for budget in range(PRIMING + 1, whole + 1):
        kept = trim_messages(messages, max_tokens=budget, token_counter="gpt-4o")
        assert not kept or not isinstance(kept[0], ToolMessage), budget
        assert not kept or broken("chat_completions", wire(kept)) == [], budget
        assert TOKENIZER.count(wire(kept)) <= budget
    assert kept == messages  # the whole history fits the whole budget


ANTHROPIC_TOOLS = [{"name": "get_weather", "description": "Get the weather.",
                    "input_schema": {"type": "object", "properties": {
                        "location": {"type": "string"}}}}]  # fmt: skip
OPENAI_TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Get the weather.",
    "parameters": ANTHROPIC_TOOLS[0]["input_schema"]}}]  # fmt: skip


def anthropic_count_tokens(messages: list[BaseMessage]) -> int:
    """A stand-in for Anthropic's token-counting endpoint behind
    ``ChatAnthropic.get_num_tokens_from_messages``: it refuses a request that breaks a
    Messages rule (``InvalidRequestError``, the endpoint's 400) and counts the rest,
    tool definitions included."""
    system, turns = to_anthropic(wire(messages))
    ensure("anthropic_messages", {"system": system, "messages": turns, "tools": ANTHROPIC_TOOLS})
    return count_tokens(wire(messages), tools=OPENAI_TOOLS)


def test_field_langchain_29637_anthropic_tools() -> None:
    """langchain-ai/langchain#29637, "`trim_messages` and `ChatAnthropic` token counter
    with tools".

    There: with ``ChatAnthropic`` as the token counter, ``trim_messages`` counts reversed
    and half-cut candidate histories, which Anthropic's counting endpoint refuses
    ("`tool_result` block(s) provided when previous message does not contain any
    `tool_use` blocks"), and the bound tools are not counted. Here: ctxwindow's drop-in
    with a counter that, like that endpoint, refuses any request breaking a Messages
    rule (through ctxwindow's Anthropic conversion) and counts tools: every candidate
    it counts is a valid request, so it never fails, and what it returns fits
    ``max_tokens`` with the tool definitions.
    """
    messages = [
        HumanMessage("hi"),
        AIMessage("hello"),
        HumanMessage("what's the weather in florida?"),
        _weather_call("let's check the weather in florida"),
        ToolMessage("It's sunny in Florida. ☀️", tool_call_id="abc123"),
        AIMessage("It's sunny in Florida."),
        HumanMessage("東京は？"),
    ]
    whole = anthropic_count_tokens(messages)
    for budget in range(anthropic_count_tokens(messages[-1:]), whole + 1):
        kept = trim_messages(messages, max_tokens=budget, token_counter=anthropic_count_tokens)
        assert kept[-1] == messages[-1]
        assert anthropic_count_tokens(kept) <= budget  # a valid request, tools counted
        system, turns = to_anthropic(wire(kept))
        request = {"system": system, "messages": turns, "tools": ANTHROPIC_TOOLS}
        assert broken("anthropic_messages", request) == [], budget


# -- LangChain: the agent middleware and its summary --------------------------------------------

Script = Callable[[int, list[BaseMessage]], AIMessage]


class AgentModel(BaseChatModel):
    """A stand-in agent model: records each request (messages, tool schemas) and answers
    ``script(n, messages)``. With ``waits_for`` (an ``LLMSummarizer``) it first waits for
    the summaries the window started, as a real model call outlasts a summary."""

    script: Any
    waits_for: Any = None
    requests: list[tuple[list[BaseMessage], list[dict[str, Any]]]] = Field(default_factory=list)

    @property
    def _llm_type(self) -> str:
        return "field-agent"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Any:
        return self.bind(tools=[convert_to_openai_tool(t) for t in tools], **kwargs)

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> ChatResult:
        if self.waits_for is not None:
            self.waits_for.wait(30)
        return self._answer(messages, kw.get("tools") or [])

    async def _agenerate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> ChatResult:
        if self.waits_for is not None:
            await self.waits_for.drain()
        return self._answer(messages, kw.get("tools") or [])

    def _answer(self, messages: list[BaseMessage], tools: list[dict[str, Any]]) -> ChatResult:
        self.requests.append((list(messages), tools))
        answer = self.script(len(self.requests), messages)
        return ChatResult(generations=[ChatGeneration(message=answer)])

    def sent(self) -> Iterator[tuple[list[Message], list[dict[str, Any]]]]:
        """Each request as the wire messages and tools a provider would get."""
        for messages, tools in self.requests:
            yield wire(messages), tools


@tool
def read_file(path: str) -> str:
    """Read a file of the repository."""
    code = "K" + "x".join(re.findall(r"\d+", path))
    return f"{path}: order {code} shipped from the 東京 depot. " + "Lorem ipsum dolor. " * 30


def reader(calls: int) -> Script:
    """An agent that, asked a question, reads ``calls`` files at once (parallel tool calls),
    then answers from their contents."""

    def script(n: int, messages: list[BaseMessage]) -> AIMessage:
        if isinstance(messages[-1], ToolMessage):
            return AIMessage(f"Answer {n}: all {calls} files read. 読みました 📄")
        paths = [f"src/module_{n}_{j}.py" for j in range(calls)]
        return AIMessage(
            "", tool_calls=[{"name": "read_file", "args": {"path": p}, "id": f"call_{n}_{j}"}
                            for j, p in enumerate(paths)],
        )  # fmt: skip

    return script


def _question(i: int) -> dict[str, str]:
    return {"role": "user", "content": f"Task {i}: read the modules of step {i}. 请读文件。"}


def test_field_langchain_38352_parallel_calls_cut() -> None:
    """langchain-ai/langchain#38352, "Bug: SummarizationMiddleware._find_safe_cutoff_point
    preserves orphan ToolMessages -> provider 400 on next call".

    There: when the summary's cut falls in a run of tool results (parallel calls), the
    middleware keeps results whose AIMessage it summarized away, and the next model call
    is refused. Here: an agent through ``CtxWindowMiddleware`` makes three parallel
    calls a question, over 40 questions in 1,500 tokens, so the window evicts and folds
    turns into the rolling summary all along: every request the model gets is within the
    budget, carries the summary once it exists, and breaks no Chat Completions rule.
    """
    model = AgentModel(script=reader(3))
    middleware = CtxWindowMiddleware("s", store="memory://", max_tokens=1500)
    agent = create_agent(model, [read_file], system_prompt="Read, then answer.",
                         middleware=[middleware])  # fmt: skip
    for i in range(40):
        agent.invoke({"messages": [_question(i)]})
    middleware.close()
    folded = 0
    for messages, tools in model.sent():
        assert broken("chat_completions", {"messages": messages, "tools": tools}) == []
        assert TOKENIZER.count(messages, tools) <= 1500
        folded += bool(summaries(messages))
    assert folded > len(model.requests) // 2


def test_field_langchain_34282_no_tool_call_found() -> None:
    """langchain-ai/langchain#34282, "After SummarizationMiddleware is triggered, agent
    can randomly triggers 400 - No tool call found".

    There: a deep agent keeping six messages summarized the AIMessage of a batch of
    parallel tool calls and kept its results; the Responses API refused every next call
    ("No tool call found for function call output with call_id ..."). Here: an agent
    reading ten files at once (results far over a quarter of the budget, so the window
    compresses or evicts them) through ``CtxWindowMiddleware``: every request, as
    Responses input items, has each ``function_call_output`` after its ``function_call``
    and every call answered; as chat messages, it breaks no rule either.
    """
    model = AgentModel(script=reader(10))
    middleware = CtxWindowMiddleware("s", store="memory://", max_tokens=2500)
    agent = create_agent(model, [read_file], system_prompt="Read, then answer.",
                         middleware=[middleware])  # fmt: skip
    for i in range(12):
        agent.invoke({"messages": [_question(i)]})
    middleware.close()
    outputs = folded = 0
    for messages, _ in model.sent():
        system = [m for m in messages if m["role"] == "system"]
        items = to_responses([m for m in messages if m["role"] != "system"])
        assert broken("responses", {"input": items, "instructions": system[0]["content"]}) == []
        assert broken("chat_completions", messages) == []
        outputs += sum(item.get("type") == "function_call_output" for item in items)
        folded += bool(summaries(messages))
    assert outputs >= 10 * 6 and folded  # results were sent, not dropped; turns were folded


def looper(calls: int) -> Script:
    """An agent that, asked once, calls ``read_file`` ``calls`` times in a row (no new user
    message in between), then answers."""

    def script(n: int, messages: list[BaseMessage]) -> AIMessage:
        if n > calls:
            return AIMessage(f"Done after {calls} reads. 完了 ✅")
        call = {"name": "read_file", "args": {"path": f"src/step_{n:02}.py"}, "id": f"call_{n}"}
        return AIMessage("", tool_calls=[call])

    return script


def summarized_agent(summarizer: LLMSummarizer, script: Script, budget: int) -> Any:
    """An agent through ``CtxWindowMiddleware`` whose window's rolling summary is written by
    ``summarizer``; returns the agent, its model and the middleware."""
    model = AgentModel(script=script, waits_for=summarizer)
    middleware = CtxWindowMiddleware("s", store="memory://", max_tokens=budget,
                                     summarizer=summarizer)  # fmt: skip
    agent = create_agent(model, [read_file], system_prompt="Read every step, then report.",
                         middleware=[middleware])  # fmt: skip
    return agent, model, middleware


def test_field_langchain_39261_placeholder_summary() -> None:
    """langchain-ai/langchain#39261, "SummarizationMiddleware replaces history with a
    placeholder — summary model never called — when no HumanMessage falls in the trim
    window".

    There: in a long tool loop after one question, the trim window held no HumanMessage,
    so the middleware never called the summary model and replaced the history with a
    placeholder. Here: one question, then 30 tool calls in a row through
    ``CtxWindowMiddleware`` with a model-written rolling summary in 900 tokens: the
    summary model is asked about the evicted tool turns, and what stands for them in
    every request carries their facts (never a placeholder); once the model's summary
    is ready, the agent's next requests carry it.
    """
    summary_model = FakeModel()  # replies "Key facts: <the ids and codes it was sent>."
    summarizer = LLMSummarizer(summary_model, TOKENIZER)
    agent, model, middleware = summarized_agent(summarizer, looper(30), 900)
    agent.invoke({"messages": [{"role": "user", "content": "Read steps 1 to 30. 全部读完。"}]})
    middleware.close()
    summarizer.close()
    asked = " ".join(str(m[-1]["content"]) for m in summary_model.calls)
    assert "src/step_01.py" in asked and "K01" in asked  # the evicted tool turns
    texts = [text for messages, _ in model.sent() for text in summaries(messages)]
    assert texts and all(CODE.search(text) for text in texts)  # facts, not a placeholder
    for messages, tools in model.sent():
        assert broken("chat_completions", {"messages": messages, "tools": tools}) == []
    by_model = [t for t in texts if t.split("\n", 1)[1].startswith("Key facts:")]
    assert by_model, f"{len(summary_model.calls)} summaries written, none of them sent"


def test_field_langchain_38867_error_text_summary() -> None:
    """langchain-ai/langchain#38867, "SummarizationMiddleware deletes conversation history
    when the summary model call fails, inserting the error text as the summary".

    There: a failed summary call (a 429, a timeout) became the summary "Error generating
    summary: …" and the history it replaced was deleted. Here: the rolling summary's
    endpoint answers 500 to every call; through ``CtxWindowMiddleware``, the stored
    history keeps every message, no request carries the error, the summary the agent
    gets is the extractive one (the evicted turns' facts), and the failures are counted.
    """
    with fake_openai(lambda body: "unused") as endpoint:
        endpoint.status = 500
        complete = openai_completion(endpoint.base_url, "summarizer", max_retries=0)
        summarizer = LLMSummarizer(complete, TOKENIZER)
        agent, model, middleware = summarized_agent(summarizer, reader(2), 900)
        conversation: list[BaseMessage] = []
        for i in range(15):
            conversation += agent.invoke({"messages": [_question(i)]})["messages"]
        stored = middleware.managers.sync.history("s")
        middleware.close()
        summarizer.close()
    assert endpoint.requests  # the summary was asked for, and failed
    assert [e.message for e in stored] == wire(conversation)
    texts = [text for messages, _ in model.sent() for text in summaries(messages)]
    assert texts and all(CODE.search(t) and "boom" not in t for t in texts)
    assert not any("error" in t.casefold() for t in texts)
    assert summarizer.failures["failed"] == len(endpoint.requests)


# -- LangChain: the summary is housekeeping, never streamed ------------------------------------

SUMMARY_MARK = "SUMMARY-7Q"  # what only the summary model writes


class SummaryModel(BaseChatModel):
    """A LangChain chat model writing summaries (``SUMMARY-7Q: …``); counts its calls."""

    calls: list[int] = Field(default_factory=list)

    @property
    def _llm_type(self) -> str:
        return "field-summary"

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> ChatResult:
        self.calls.append(len(messages))
        text = f"{SUMMARY_MARK}: " + " ".join(CODE.findall(str(messages[-1].content)))
        return ChatResult(generations=[ChatGeneration(message=AIMessage(text))])


def langchain_completion(model: BaseChatModel) -> Callable[[list[Message]], Any]:
    """``LLMSummarizer``'s completion through a LangChain chat model, as a LangChain user
    writes it."""

    async def complete(messages: list[Message]) -> str:
        reply = await model.ainvoke([from_openai(m) for m in messages])
        return str(reply.content)

    return complete


def streamed_agent(summary_model: BaseChatModel) -> tuple[Any, LLMSummarizer, Any]:
    summarizer = LLMSummarizer(langchain_completion(summary_model), TOKENIZER)
    agent, _, middleware = summarized_agent(summarizer, reader(1), 700)
    return agent, summarizer, middleware


def _leaks(chunks: Sequence[Any]) -> list[str]:
    return [str(c) for c in chunks if SUMMARY_MARK in str(getattr(c, "content", c))]


def test_field_langchainjs_9455_summary_streamed() -> None:
    """langchain-ai/langchainjs#9455, "JS Summarization Middleware: internal model.invoke()
    is streamed to UI (cannot be suppressed, unlike tools)".

    There: the summarization middleware's own model call, made inside the agent's run,
    inherited the run's callbacks, and with ``streamMode: "messages"`` the summary was
    streamed to the user as if the assistant said it, even with streaming off on the
    summary model. Here: an agent streamed with ``stream_mode="messages"`` through
    ``CtxWindowMiddleware``, whose rolling summary a LangChain chat model writes
    (streaming disabled): the summary model is called, and nothing it writes is among
    the streamed chunks.
    """
    summary_model = SummaryModel(disable_streaming=True)
    agent, summarizer, middleware = streamed_agent(summary_model)
    chunks = []
    for i in range(12):
        for chunk, _ in agent.stream({"messages": [_question(i)]}, stream_mode="messages"):
            chunks.append(chunk)
    middleware.close()
    summarizer.close()
    assert summary_model.calls  # the window asked for summaries during the runs
    assert _leaks(chunks) == []


def test_field_langchainjs_11238_summary_streamed_again() -> None:
    """langchain-ai/langchainjs#11238, "JS Summarization Middleware: internal model.invoke()
    is streamed to UI - regression".

    There: the fix of #9455 regressed, and the summary model's output again reached the
    user's stream. Here: the async path of the same scenario (``agent.astream``,
    ``CtxWindowMiddleware.awrap_model_call`` on ``AsyncContextManager``), where a
    summary started by the window runs on the agent's own event loop: the summary
    model is called, and nothing it writes is among the streamed chunks.
    """
    summary_model = SummaryModel()
    agent, summarizer, middleware = streamed_agent(summary_model)

    async def run() -> list[Any]:
        chunks = []
        for i in range(12):
            stream = agent.astream({"messages": [_question(i)]}, stream_mode="messages")
            chunks += [chunk async for chunk, _ in stream]
        await middleware.aclose()
        return chunks

    chunks = asyncio.run(run())
    summarizer.close()
    assert summary_model.calls
    assert _leaks(chunks) == []


class SharedModel(AgentModel):
    """The agent's model, also asked by the window for its summaries (one instance)."""

    summaries_written: int = 0

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> ChatResult:
        if _asks_summary(messages):
            return self._summary(messages)
        return super()._generate(messages, stop, run_manager, **kw)

    async def _agenerate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> ChatResult:
        if _asks_summary(messages):  # not waiting for the summaries: this is one
            return self._summary(messages)
        return await super()._agenerate(messages, stop, run_manager, **kw)

    def _summary(self, messages: list[BaseMessage]) -> ChatResult:
        self.summaries_written += 1
        text = f"{SUMMARY_MARK}: " + " ".join(CODE.findall(str(messages[-1].content)))
        return ChatResult(generations=[ChatGeneration(message=AIMessage(text))])


def _asks_summary(messages: list[BaseMessage]) -> bool:
    """Whether ``messages`` is ``LLMSummarizer``'s request (its system prompt first)."""
    opening = SYSTEM_PROMPT.split(".", 1)[0]
    return isinstance(messages[0], SystemMessage) and str(messages[0].content).startswith(opening)


def test_field_deepagentsjs_629_summary_tokens_in_stream() -> None:
    """langchain-ai/deepagentsjs#629, "Bug: SummarizationMiddleware internal model call
    tokens leak into `agent.stream()` output".

    There: the summarization middleware reused the agent's own model instance, whose
    streaming callbacks the run had attached, so the summary's tokens came out of
    ``agent.stream()`` in every stream mode and in ``streamEvents``, indistinguishable
    from the answer. Here: the window's summaries are written by the agent's own model
    instance, the agent streamed with ``astream_events``: the model writes summaries, and
    no chat-model event the user receives carries one.
    """
    model = SharedModel(script=reader(1))
    summarizer = LLMSummarizer(langchain_completion(model), TOKENIZER)
    model.waits_for = summarizer
    middleware = CtxWindowMiddleware("s", store="memory://", max_tokens=700,
                                     summarizer=summarizer)  # fmt: skip
    agent = create_agent(model, [read_file], system_prompt="Read every step, then report.",
                         middleware=[middleware])  # fmt: skip

    async def run() -> list[Any]:
        events = []
        for i in range(12):
            async for event in agent.astream_events({"messages": [_question(i)]}, version="v2"):
                if event["event"].startswith("on_chat_model"):
                    events.append(event["data"].get("chunk") or event["data"].get("output"))
        await middleware.aclose()
        return events

    events = asyncio.run(run())
    summarizer.close()
    assert model.summaries_written
    assert _leaks(events) == []


# -- LlamaIndex: the memory ----------------------------------------------------------------------


def llama_wire(messages: Sequence[ChatMessage]) -> list[Message]:
    """LlamaIndex messages as the OpenAI chat messages its OpenAI LLM sends."""
    sent = [to_openai_message(m) for m in messages]
    return [{k: v for k, v in m.items() if k != TOOL_CALL_BLOCKS} for m in sent]


def test_field_llamaindex_23144_system_message_evicted(tmp_path: Path) -> None:
    """run-llama/llama_index#23144, "[Bug]: Memory silently evicts the system message from
    chat history once the token limit is reached".

    There: ``Memory``'s FIFO flush (and the SQL chat store's "archive the n oldest") treated
    the system message, the oldest row, like any old turn: once the token limit was
    reached, the agent silently lost its system prompt. Here: ``CtxWindowMemory`` over a
    SQLite store, the system message put first, 150 turns in 400 tokens: every ``get()``
    starts with the system message, fits, and breaks no Chat Completions rule; the
    store keeps every turn.
    """
    system = "You are the order desk of Acme. 只用中文或英文回答。"
    memory = CtxWindowMemory(session_id="s", store=f"sqlite:///{tmp_path}/chat.db",
                             model="gpt-4o", max_tokens=400)  # fmt: skip
    memory.put(ChatMessage(role="system", content=system))
    for i in range(150):
        memory.put(ChatMessage(role="user", content=f"Where is order A-{i}? 📦 " * (1 + i % 3)))
        memory.put(ChatMessage(role="assistant", content=f"Order A-{i} left Leeds on Tuesday."))
        sent = llama_wire(memory.get())
        assert sent[0] == {"role": "system", "content": system}
        assert broken("chat_completions", sent) == [] and TOKENIZER.count(sent) <= 400
    assert len(sent) < 100 and len(memory.get_all()) == 301
    memory.close()


def test_field_llamaindex_21950_tool_call_tokens() -> None:
    """run-llama/llama_index#21950, "[Bug]: Tool-call tokens not counted by Memory, leading
    to "prompt is too long" (400) errors with AgentWorkflow".

    There: ``Memory`` counted ``ToolCallBlock`` (and thinking) blocks as zero tokens, so it
    did not flush in time and the agent's prompt outgrew the model's window. Here:
    ``CtxWindowMemory`` with tool calls of long arguments (some 160 tokens) as
    ``ToolCallBlock`` blocks after a thinking block, in 600 tokens: every ``get()`` sends
    tool calls, breaks no rule and fits — by
    ctxwindow's count, and by a lower bound made from the real tokenizer alone (the
    o200k tokens of every text and of every call's arguments).
    """
    encoding = get_encoding("o200k_base")
    memory = CtxWindowMemory(session_id="s", store="memory://", model="gpt-4o", max_tokens=600)
    for i in range(30):
        query = " ".join(f"term{i}_{w} 検索" for w in range(20))
        call = ToolCallBlock(tool_call_id=f"call_{i}", tool_name="search",
                             tool_kwargs={"query": query})  # fmt: skip
        memory.put(ChatMessage(role="user", content=f"Search the archive for case {i}."))
        memory.put_messages([
            ChatMessage(role="assistant", blocks=[ThinkingBlock(content="Let me search."), call]),
            ChatMessage(role="tool", content=f"Case {i}: 3 hits.",
                        additional_kwargs={"tool_call_id": f"call_{i}"}),
        ])  # fmt: skip
        sent = llama_wire(memory.get())
        assert broken("chat_completions", sent) == [] and TOKENIZER.count(sent) <= 600
        assert _lower_bound(sent, encoding) <= 600
    assert any(m.get("tool_calls") for m in sent)  # calls are sent, and counted
    assert len(memory.get_all()) == 90
    memory.close()


def _lower_bound(messages: Sequence[Message], encoding: Any) -> int:
    """Tokens no request of ``messages`` can have fewer of: their texts' and their tool
    calls' arguments', by the real tokenizer (framing left out)."""
    texts = [text for m in messages for text in _texts(m)]
    return sum(len(encoding.encode(text)) for text in texts)


def _texts(message: Message) -> Iterator[str]:
    content = message.get("content")
    if isinstance(content, str):
        yield content
    for part in content if isinstance(content, list) else ():
        yield part.get("text", "")
    for call in message.get("tool_calls") or ():
        yield call["function"]["arguments"]


# -- Google ADK: a tool call waiting for its result, and compaction ---------------------------

CONFIRM_CALL = {"name": "adk_request_confirmation", "arguments": '{"action": "drop staging"}'}
CONFIRM = {
    "role": "assistant",
    "content": None,
    "tool_calls": [{"id": "confirm_1", "type": "function", "function": CONFIRM_CALL}],
}


def _chat(manager: ContextManager, turns: range) -> Iterator[Any]:
    """Each turn of ``turns`` stored, and the context built for it (the request sent)."""
    for i in turns:
        manager.add("s", {"role": "user", "content": f"Turn {i}: where is order A-{i}? 🚚 "
                                                     + "Please check. " * (i % 5)})  # fmt: skip
        context = manager.build("s")
        manager.add("s", {"role": "assistant", "content": f"Order A-{i} is in Leeds, K{i}x9."})
        yield context


def test_field_adk_7236_orphan_call_blocks_compaction(tmp_path: Path) -> None:
    """google/adk-python#7236, "Orphaned function_call permanently and silently disables
    context compaction (once triggered)".

    There: a tool call whose response never came (the pod running the tool restarted)
    became the first event of every later compaction window, whose "no open call" cut
    point then never came: compaction stopped for good, with no log and no error, and
    the prompt grew past its threshold. Here: a session that has compacted, then a call
    whose process dies, then a restart over the same SQLite store: the call is kept,
    unevicted; a new question is refused while it waits, naming it (loudly, not
    silently); once the client answers it (the tool's failure as its result), 120 more
    turns compact as before: every request fits 800 tokens and breaks no rule, and the
    late unit itself is evicted in turn.
    """
    url = f"sqlite:///{tmp_path}/sessions.db"
    before = ContextManager(url, "gpt-4o", budget=800)
    before.add("s", {"role": "system", "content": "You are the operations agent."})
    assert any(c.report.evicted_entries for c in _chat(before, range(60)))  # compacted
    before.add("s", {"role": "user", "content": "Drop the staging database."})
    before.add("s", CONFIRM)
    before.close()  # the process dies before the tool answers
    after = ContextManager(url, "gpt-4o", budget=800)  # the restart
    assert after.build("s").messages[-1] == CONFIRM
    with pytest.raises(InvalidMessageError, match="confirm_1"):
        after.add("s", {"role": "user", "content": "Hello? Anyone there?"})
    died = "error: the tool's process restarted"
    after.add("s", {"role": "tool", "tool_call_id": "confirm_1", "content": died, "is_error": True})
    evicted = []
    for context in _chat(after, range(60, 180)):
        assert broken("chat_completions", context.messages) == []
        assert TOKENIZER.count(context.messages) <= 800
        evicted.append(context.report.evicted_entries)
    assert CONFIRM not in context.messages and evicted[-1] > evicted[0]
    after.close()


def test_field_adk_4740_pending_confirmation_compacted() -> None:
    """google/adk-python#4740, "Event compaction breaks adk_request_confirmation by removing
    the pending function call event".

    There: while a human-in-the-loop confirmation call waited for the user, compaction
    summarized it away; the user's eventual answer found no call ("No function call
    event found", a ValueError). Here: a long session in 800 tokens, then a confirmation
    call that waits: built within every budget down to the tightest the session allows,
    the call stays in the context, last; a question in the meantime is refused (the
    call is not compacted to make room for it); a budget too small for the call is an
    error, not a silent drop; and when the answer comes, it follows its call in a
    request that breaks no rule.
    """
    manager = ContextManager("memory://", "gpt-4o", budget=800)
    manager.add("s", {"role": "system", "content": "You are the operations agent."})
    list(_chat(manager, range(60)))
    manager.add("s", {"role": "user", "content": "Drop the staging database."})
    manager.add("s", CONFIRM)
    answer = {"role": "tool", "tool_call_id": "confirm_1", "content": "confirmed by the user"}
    for budget in range(800, 100, -50):
        context = manager.build("s", max_tokens=budget)
        assert context.messages[-1] == CONFIRM
        assert broken("chat_completions", [*context.messages, answer]) == []
    with pytest.raises(PinnedOverBudgetError):
        manager.build("s", max_tokens=60)
    with pytest.raises(InvalidMessageError, match="confirm_1"):
        manager.add("s", {"role": "user", "content": "Meanwhile: what time is it?"})
    manager.add("s", answer)
    context = manager.build("s")
    assert context.messages[-2:] == [CONFIRM, answer]
    assert broken("chat_completions", context.messages) == []
    manager.close()


# -- OpenAI Agents SDK: the session while a run streams -----------------------------------------


@function_tool
def read_log(path: str) -> str:
    """Read a log file."""
    code = "K" + "x".join(re.findall(r"\d+", path))
    return f"{path}: job {code} finished; 東京 region. " + "INFO ok. " * 60


def plain(item: Any) -> dict[str, Any]:
    """An Agents SDK input item as the JSON the Responses API gets."""
    return item if isinstance(item, dict) else dict(item.model_dump(exclude_unset=True))


def user_item(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def test_field_openai_agents_2317_compaction_while_streaming(tmp_path: Path) -> None:
    """openai/openai-agents-python#2317, "Compaction unusable in Runner.run_streamed:
    responses.compact runs before tool outputs are in chain".

    There: in a streamed run, the compaction session compacted at a point where a
    ``function_call`` had no ``function_call_output`` yet, and the API refused it
    ("No tool output found for function call ..."), failing the run. Here: streamed runs
    (``Runner.run_streamed``) over ``CtxWindowSession`` in 900 tokens, each question
    answered after two parallel tool calls with long outputs, so the window compacts
    during the runs: every run ends, and at every model call both the input the model
    gets and the session's own context (what it would hand a compaction then) are
    Responses input that breaks no rule.
    """
    session = CtxWindowSession("s", store=f"sqlite:///{tmp_path}/agents.db", max_tokens=900)
    seen: list[list[Any]] = []

    async def respond(call: ModelCall) -> list[Any]:
        items = call.input if isinstance(call.input, list) else [user_item(call.input)]
        seen.extend([[plain(i) for i in items], await session.get_items()])
        n = len(seen) // 2
        if plain(items[-1]).get("type") == "function_call_output":
            return [assistant_message(f"Answer {n}: both logs read. 両方読みました。")]
        return [sdk_function_call("read_log", {"path": f"logs/run_{n}_{j}.log"},
                                  call_id=f"call_{n}_{j}") for j in range(2)]  # fmt: skip

    model = ScriptedModel([ModelStep.respond(respond) for _ in range(40)])
    agent = Agent(name="ops", instructions="Read the logs, then answer.", model=model,
                  tools=[read_log])  # fmt: skip

    async def run() -> list[Any]:
        for i in range(20):
            result = Runner.run_streamed(agent, f"Check run {i}. 确认一下。", session=session)
            async for _ in result.stream_events():
                pass
            assert result.final_output.startswith("Answer")
        return await session.get_all_items()

    history = asyncio.run(run())
    for items in seen:
        assert broken("responses", {"input": items}) == []
    assert len(history) > 3 * len(seen[-1])  # the window compacted; the store kept it all


# -- The service: Anthropic Messages through compaction (Claude Code) ---------------------------

CLAUDE = "claude-sonnet-4-5"
GREP_TOOL = [{"name": "grep", "description": "Search the repository.",
              "input_schema": {"type": "object", "properties": {
                  "pattern": {"type": "string"}}}}]  # fmt: skip


class ParallelMessages(FakeMessages):
    """An Anthropic upstream that answers a question with a text block and two parallel
    ``tool_use`` blocks, and their results with text."""

    def answer(self, body: dict[str, Any]) -> dict[str, Any]:
        reply = super().answer(body)
        if reply["stop_reason"] == "tool_use":
            n = len(self.requests)
            reply["content"] = [{"type": "text", "text": "Searching."}] + [
                {"type": "tool_use", "id": f"toolu_{n}_{j}", "name": "grep",
                 "input": {"pattern": f"TODO-{n}-{j}"}} for j in range(2)
            ]  # fmt: skip
        return reply


def test_field_claude_code_8484_compaction_breaks_tool_pairs() -> None:
    """anthropics/claude-code#8484, "[BUG] Conversation Compaction Corrupts Tool Use/Result
    Pairs".

    There: after compaction in a long tool-heavy session, a ``tool_result`` was kept without
    its ``tool_use`` ("unexpected `tool_use_id` found in `tool_result` blocks … Each
    `tool_result` block must have a corresponding `tool_use` block in the previous
    message"), and every later request failed the same way. Here: 60 questions through
    the service's ``/v1/messages``, each answered with two parallel ``tool_use`` blocks
    whose results (long, in CJK and emoji too) come back in the next request, in a
    3,000-token budget, so the session compacts all along: every body the upstream gets
    breaks no Messages rule, and fits the budget.
    """
    upstream, counted = ParallelMessages(), []
    app = protocol_app(upstream, budgets={"claude-*": 3000}, calibrate=False)  # a fake's usage
    with TestClient(app) as http:
        for i in range(60):
            ask = {"role": "user", "content": f"Find the TODOs of module {i}. 查找一下 🔍"}
            reply = _messages(http, [ask], counted)
            uses = [b for b in reply["content"] if b["type"] == "tool_use"]
            results = [{"type": "tool_result", "tool_use_id": b["id"],
                        "content": f"{b['input']['pattern']}: 12 hits in src/ " + "行 " * 80}
                       for b in uses]  # fmt: skip
            _messages(http, [{"role": "user", "content": results}], counted)
    assert len(upstream.requests) == 120
    for body in upstream.requests:
        assert broken("anthropic_messages", body) == []
    assert max(counted) <= 3000
    assert sum(_uses(body) for body in upstream.requests) > 120  # tool pairs were sent


def _messages(http: TestClient, messages: list[dict[str, Any]], counted: list[int]) -> Any:
    """One ``/v1/messages`` call of the session; its prompt tokens go to ``counted``."""
    answer = http.post("/v1/messages", headers={"X-Session-Id": "claude"}, json={
        "model": CLAUDE, "max_tokens": 512, "system": "You are a coding agent.",
        "tools": GREP_TOOL, "messages": messages})  # fmt: skip
    assert answer.status_code == 200, answer.text
    counted.append(int(answer.headers["X-Context-Tokens"]))
    return answer.json()


def _uses(body: dict[str, Any]) -> int:
    return sum(
        block.get("type") == "tool_use"
        for message in body["messages"]
        if isinstance(message["content"], list)
        for block in message["content"]
    )


# -- A summary endpoint that answers nothing (docker-agent) -------------------------------------


def test_field_docker_agent_3469_empty_summary() -> None:
    """docker/docker-agent PR #3469, "fix: compaction data loss on empty summary + honest
    compaction outcome reporting".

    There: when the summary model answered nothing (a rate limit, a token cap, a flaky
    local model), the conversation's own last assistant message was taken as the summary
    and replaced the history, and the UI still said "Session compacted successfully".
    Here: a session whose rolling summary comes from an endpoint that answers an empty
    (then a blank) text: the history stays whole in the store, the summary the model
    gets is never empty nor a stale reply (it carries the evicted turns' facts), the
    failures are counted, and the report says the model's summary was not used.
    """
    nothing = ["", " \n\t "]  # an empty reply, then a blank one, in turn
    with fake_openai(lambda body: nothing[len(endpoint.requests) % 2]) as endpoint:
        complete = openai_completion(endpoint.base_url, "summarizer", max_retries=0)
        summarizer = LLMSummarizer(complete, TOKENIZER)
        manager = ContextManager("memory://", "gpt-4o", budget=700, summarizer=summarizer)
        for context in _chat(manager, range(40)):
            summarizer.wait(30)
            replies = [m["content"] for m in context.messages if m["role"] == "assistant"]
            for text in summaries(context.messages):
                body = text.split("\n", 1)[1].strip()
                assert body and CODE.search(body) and body not in replies
        assert len(manager.history("s")) == 80 and endpoint.requests
        manager.close()
        summarizer.close()
    assert summarizer.failures["empty"] == len(endpoint.requests)
    assert "not used: an empty reply" in str(context.report.compaction)


# -- Letta: estimates against the provider's counts -------------------------------------------


def png_header(width: int, height: int) -> str:
    """A data URL of a PNG's header: all an image's tokens depend on (its size)."""
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    crc = struct.pack(">I", zlib.crc32(b"IHDR" + ihdr))
    data = b"\x89PNG\r\n\x1a\n" + struct.pack(">I", 13) + b"IHDR" + ihdr + crc
    return "data:image/png;base64," + base64.b64encode(data).decode()


# What OpenAI bills for GUIDE_TOOL_MESSAGES with GUIDE_TOOLS on gpt-4o (its token-counting
# guide's measured prompt_tokens), and for a 1024 x 1024 image in high detail (its tiles).
GUIDE_PROMPT_TOKENS, IMAGE_TOKENS = 101, 765


class UsageUpstream:
    """A chat upstream whose ``usage`` is a provider's: ``prompt`` tokens billed for the
    request, and long replies (``completion_tokens`` 3,000), ``total_tokens`` their sum."""

    def __init__(self, prompt: Callable[[dict[str, Any]], int]) -> None:
        self.prompt = prompt

    def transport(self) -> httpx.MockTransport:
        def handle(request: httpx.Request) -> httpx.Response:
            body = json.loads(request.content)
            prompt = self.prompt(body)
            return httpx.Response(200, json={
                "id": "c", "object": "chat.completion", "created": 0, "model": body["model"],
                "choices": [{"index": 0, "finish_reason": "stop", "message": {
                    "role": "assistant", "content": "Sunny, 18 °C. 晴れ ☀️"}}],
                "usage": {"prompt_tokens": prompt, "completion_tokens": 3000,
                          "total_tokens": prompt + 3000}})  # fmt: skip

        return httpx.MockTransport(handle)


def test_field_letta_3242_inflated_estimate_redundant_compaction() -> None:
    """letta-ai/letta#3242, "Post-step compaction uses inflated context_token_estimate
    (total_tokens includes output), causing redundant compaction passes".

    There: the compaction trigger read the provider's ``total_tokens`` (prompt and reply)
    as the context's size, 50-100 % over it, so compaction fired on a context well under
    the threshold, again and again; its own count after a summary came out above the
    count before. Here, through the service: ctxwindow's count of a request with tools
    and an image is the provider's (OpenAI's measured and published numbers), its
    calibration compares it with ``usage.prompt_tokens`` only (the ratio stays 1 while
    replies bill 3,000 tokens), and over 80 turns in 2,000 tokens the window compacts
    only when the prompt is over the budget: each compaction is followed by turns
    without one, and leaves the prompt smaller than it found it.
    """
    image = {"type": "image_url", "image_url": {"url": png_header(1024, 1024), "detail": "high"}}
    system, asked = GUIDE_TOOL_MESSAGES
    first = [
        system,
        {"role": "user", "content": [{"type": "text", "text": asked["content"]}, image]},
    ]
    billed = GUIDE_PROMPT_TOKENS + IMAGE_TOKENS
    assert count_tokens(first, model="gpt-4o", tools=GUIDE_TOOLS) == billed

    def provider(body: dict[str, Any]) -> int:  # the upstream's count (= billed, above)
        return count_tokens(body["messages"], model="gpt-4o", tools=body.get("tools"))

    upstream = UsageUpstream(provider)
    app = create_app(Settings(store="memory://", upstream="http://upstream.test/v1",
                              archive="off", budgets={"gpt-4o": 2000}),
                     upstream_transport=upstream.transport())  # fmt: skip
    with TestClient(app) as http:
        sent = [_chat_turn(http, first)]
        for i in range(80):
            ask = {"role": "user", "content": f"And in city {i}? 东京呢？ " + "Details. " * (i % 6)}
            sent.append(_chat_turn(http, [ask]))
        ratio = _gauge(http.get("/metrics").text, "ctxwindow_count_ratio")
    assert sent[0] == (billed, 0) and ratio == 1.0
    assert max(tokens for tokens, _ in sent) <= 2000
    steps = [i for i in range(1, len(sent)) if sent[i][1] > sent[i - 1][1]]
    assert steps and [i for i in steps if i - 1 in steps] == []  # never two turns running
    assert [i for i in steps if sent[i][0] >= sent[i - 1][0]] == []


def _chat_turn(http: TestClient, messages: list[Message]) -> tuple[int, int]:
    """One chat turn of the session; the prompt tokens sent and the messages evicted."""
    body = {"model": "gpt-4o", "messages": messages, "tools": GUIDE_TOOLS}
    answer = http.post("/v1/chat/completions", headers={"X-Session-Id": "letta"}, json=body)
    assert answer.status_code == 200, answer.text
    return int(answer.headers["X-Context-Tokens"]), int(answer.headers["X-Context-Evicted"])


def _gauge(text: str, name: str) -> float:
    [value] = [s.value for f in text_string_to_metric_families(text) for s in f.samples
               if s.name == name]  # fmt: skip
    return float(value)


class WindowedModel:
    """A summary model with a context window of ``window`` tokens: a longer prompt is
    refused, as a provider's 400 "prompt is too long" does. Records each prompt's size."""

    def __init__(self, window: int) -> None:
        self.window = window
        self.prompts: list[int] = []
        self.refused = 0

    async def __call__(self, messages: list[Message]) -> str:
        self.prompts.append(TOKENIZER.count(messages))
        if self.prompts[-1] > self.window:
            self.refused += 1
            raise RuntimeError(f"prompt is too long: {self.prompts[-1]} > {self.window}")
        return "Orders so far: " + ", ".join(CODE.findall(str(messages[-1]["content"]))[:12])


def test_field_letta_3279_overflow_cannot_be_compacted(tmp_path: Path) -> None:
    """letta-ai/letta#3279, "GLOBAL_MAX_CONTEXT_WINDOW_LIMIT caps summarizer model,
    preventing compaction of overflowed context".

    There: the agent's context had overflowed (to ~78k tokens, its estimate being low), and
    the compaction's summary request, as large as the overflow, did not fit the summary
    model's window: compaction failed and the agent stayed overflowed. Here: a session
    of 300 turns (over 30,000 tokens) stored under a large budget, then opened with a
    3,000-token budget: with a summary model of an 8,000-token window, the first build
    compacts it to the budget and no summary request is over that window; with a model
    that refuses every request (a 300-token window), the build compacts it all the same
    (the extractive summary). Every request is valid.
    """
    store = f"sqlite:///{tmp_path}/sessions.db"
    models = {f"window-{n}": WindowedModel(n) for n in (8000, 300)}  # one session each
    with ContextManager(store, "gpt-4o", budget=100_000) as large:
        for session in models:
            large.add(session, {"role": "system", "content": "You track orders."})
            for i in range(300):
                large.extend(session, [
                    {"role": "user", "content": f"Turn {i}: where is A-{i}? " + "Details. " * 30},
                    {"role": "assistant", "content": f"A-{i} left Leeds, K{i}x7. " * 4},
                ])  # fmt: skip
        assert sum(entry.tokens for entry in large.history(session)) > 30_000
    for session, model in models.items():
        summarizer = LLMSummarizer(model, TOKENIZER)
        small = ContextManager(store, "gpt-4o", budget=3000, summarizer=summarizer)
        context = small.build(session)
        summarizer.wait(60)
        small.close()
        summarizer.close()
        assert TOKENIZER.count(context.messages) <= 3000 and summaries(context.messages)
        assert broken("chat_completions", context.messages) == []
        assert model.prompts  # the evicted turns were sent to be summarized
    assert models["window-8000"].refused == 0
    assert models["window-300"].refused == len(models["window-300"].prompts)


def test_field_letta_3270_sliding_window_wipes_all() -> None:
    """letta-ai/letta#3270, "sliding_window compaction ignores percentage, performs full
    context wipe".

    There: the sliding window's formulas were inverted (asked to keep 30 %, it kept 61 %;
    elsewhere, compaction wiped the whole context). Here: 300 turns in 2,000 tokens, with
    the default window (which steps down to 85 % of its room) and with one set to keep
    30 %: after every compaction step, the turns kept (beside the system prompt and the
    summary, before the new question) are that share of the room, within one turn either
    way (never everything gone, never more than asked), and the newest question is sent.
    """
    for low_water, policy in ((LOW_WATER, None), (0.3, stepping_window(0.3))):
        manager = ContextManager("memory://", "gpt-4o", budget=2000, policy=policy)
        manager.add("s", {"role": "system", "content": "You are the order desk."})
        shares, last_step = [], None
        for context in _chat(manager, range(300)):
            question = manager.history("s")[-2]  # the answer came after the context
            assert context.messages[-1] == question.message
            if context.report.last_step != last_step:
                last_step = context.report.last_step
                pinned = context.report.tokens_by_state["pinned"]
                kept = context.total_tokens - pinned - question.tokens
                shares.append((kept, low_water * (2000 - pinned)))
        turn = 2 * max(entry.tokens for entry in manager.history("s"))  # a question and answer
        manager.close()
        assert len(shares) > 5
        for kept, target in shares[1:]:
            assert target - turn <= kept <= target + turn / 2, (low_water, kept, target)


def stepping_window(low_water: float) -> Callable[[int, Any], PriorityWindow]:
    """A policy: the hybrid's window with its rolling summary, stepping down to
    ``low_water`` of its room when it evicts."""

    def make(budget: int, tokenizer: Any) -> PriorityWindow:
        rolling = RollingSummary(Extractive(tokenizer), tokenizer)
        folding = Folding(summarizer=rolling.fold, summary_tokens=budget // 8)
        return PriorityWindow(budget, tokenizer.model, tokenizer=tokenizer, folding=folding,
                              low_water=low_water)  # fmt: skip

    return make
