"""``CtxWindowMiddleware``: an ``AgentMiddleware`` that keeps an agent's conversation in a
ctxwindow session and hands the model the session's context."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, cast

from langchain.agents.middleware import AgentMiddleware, AgentState, ModelRequest, ModelResponse
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.utils.function_calling import convert_to_openai_tool

from ctxwindow.context import AsyncContextManager, ContextManager
from ctxwindow.errors import BudgetError
from ctxwindow.integrations._common import DEFAULT_STORE, AnyStore, Managers
from ctxwindow.integrations.langchain.convert import from_context, to_openai
from ctxwindow.messages import Entry
from ctxwindow.tokens.defaults import chat_tokenizer

_LAST_ID = "langchain_last_id"  # entry metadata: the LangChain id of its batch's last message


class CtxWindowMiddleware(AgentMiddleware[AgentState[Any], Any, Any]):
    """Keeps an agent's conversation in a ctxwindow session, and gives the model the
    session's context, within ``max_tokens``, instead of the whole conversation.

    Before each model call the messages the session has not got yet are stored
    (a tool call with its results in one batch), then the model is asked with
    the agent's system prompt, its tools and the context built in what they
    leave of ``max_tokens`` (tokens, or a ratio of the model's window): the
    request, counted exactly, never exceeds it. The agent's last answer is
    stored when the run ends. Give each run only the new messages (the session
    has the rest), or a checkpointer's thread: messages are told apart by
    their LangChain ids. ``session_id=None`` uses the run's ``thread_id``.
    """

    def __init__(
        self,
        session_id: str | None = None,
        store: AnyStore = DEFAULT_STORE,
        model: str = "gpt-4o",
        max_tokens: int | float = 0.75,
        **options: Any,
    ) -> None:
        super().__init__()
        self.session_id = session_id
        self.managers = Managers(store, model, max_tokens, options)
        self.tokenizer = chat_tokenizer(model)
        self._last_ids: dict[str, str | None] = {}  # session -> id of the last message stored
        self._tools: tuple[tuple[int, ...], int] = ((), 0)

    def wrap_model_call(
        self, request: ModelRequest[Any], handler: Callable[[ModelRequest[Any]], ModelResponse[Any]]
    ) -> ModelResponse[Any]:
        return handler(self._prepare(request))

    async def awrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]],
    ) -> ModelResponse[Any]:
        manager = self.managers.asynchronous
        if manager is None:
            return await handler(await asyncio.to_thread(self._prepare, request))
        session = self._session(request.runtime)
        async with manager.turn(session):
            await self._asave(manager, session, request.messages)
            room = self._room(request, manager.budget)
            context = await manager.build(session, max_tokens=room)
        return await handler(request.override(messages=cast(Any, from_context(context))))

    def after_agent(self, state: AgentState[Any], runtime: Any) -> dict[str, Any] | None:
        manager, session = self.managers.sync, self._session(runtime)
        with manager.turn(session):
            self._save(manager, session, state["messages"])
        return None

    async def aafter_agent(self, state: AgentState[Any], runtime: Any) -> dict[str, Any] | None:
        manager = self.managers.asynchronous
        if manager is None:
            return await asyncio.to_thread(self.after_agent, state, runtime)
        session = self._session(runtime)
        async with manager.turn(session):
            await self._asave(manager, session, state["messages"])
        return None

    def close(self) -> None:
        self.managers.close()

    async def aclose(self) -> None:
        await self.managers.aclose()

    def _prepare(self, request: ModelRequest[Any]) -> ModelRequest[Any]:
        """Store what is new, then the request with the session's context as its messages."""
        manager, session = self.managers.sync, self._session(request.runtime)
        with manager.turn(session):
            self._save(manager, session, request.messages)
            context = manager.build(session, max_tokens=self._room(request, manager.budget))
        return request.override(messages=cast(Any, from_context(context)))

    def _save(self, manager: ContextManager, session: str, messages: Sequence[Any]) -> None:
        if session in self._last_ids:
            last = self._last_ids[session]
        else:
            last = _last_id(manager.history(session))
        new = _complete(_after(messages, last))
        if new:
            manager.extend(session, [to_openai(m) for m in new], metadata=_mark(new))
        self._last_ids[session] = _last_of(new, last)

    async def _asave(
        self, manager: AsyncContextManager, session: str, messages: Sequence[Any]
    ) -> None:
        if session in self._last_ids:
            last = self._last_ids[session]
        else:
            last = _last_id(await manager.history(session))
        new = _complete(_after(messages, last))
        if new:
            await manager.extend(session, [to_openai(m) for m in new], metadata=_mark(new))
        self._last_ids[session] = _last_of(new, last)

    def _session(self, runtime: Any) -> str:
        if self.session_id is not None:
            return self.session_id
        thread = getattr(getattr(runtime, "execution_info", None), "thread_id", None)
        if not thread:
            raise ValueError(
                "CtxWindowMiddleware needs a session_id, or a run with a thread_id"
                ' (config={"configurable": {"thread_id": ...}})'
            )
        return str(thread)

    def _room(self, request: ModelRequest[Any], budget: int) -> int:
        """The budget less what the request adds to the context: system prompt and tools."""
        taken = self._tools_tokens(request.tools)
        if request.system_message is not None:
            taken += self.tokenizer.message_tokens(to_openai(request.system_message))
        if taken >= budget:
            raise BudgetError(
                f"the system prompt and tools take {taken} tokens of the {budget} budget"
            )
        return budget - taken

    def _tools_tokens(self, tools: Sequence[Any]) -> int:
        key = tuple(map(id, tools))
        if self._tools[0] != key:
            schemas = [convert_to_openai_tool(tool) for tool in tools]
            self._tools = (key, self.tokenizer.tools_tokens(schemas))
        return self._tools[1]


def _mark(batch: Sequence[BaseMessage]) -> dict[str, Any]:
    return {_LAST_ID: batch[-1].id}


def _last_of(new: Sequence[BaseMessage], last: str | None) -> str | None:
    return (new[-1].id if new else None) or last


def _last_id(entries: Sequence[Entry]) -> str | None:
    """The LangChain id of the last message the session got from a middleware."""
    return entries[-1].metadata.get(_LAST_ID) if entries else None


def _after(messages: Sequence[BaseMessage], last_id: str | None) -> list[BaseMessage]:
    """The messages after the one whose id is ``last_id``; all of them if it is not there."""
    if last_id is not None:
        for i in range(len(messages) - 1, -1, -1):
            if messages[i].id == last_id:
                return list(messages[i + 1 :])
    return list(messages)


def _complete(messages: list[BaseMessage]) -> list[BaseMessage]:
    """``messages`` without a tool call at the end still waiting for its results."""
    answered: set[str] = set()
    for i in range(len(messages) - 1, -1, -1):
        message = messages[i]
        if isinstance(message, ToolMessage):
            answered.add(message.tool_call_id)
            continue
        if isinstance(message, AIMessage) and message.tool_calls:
            calls = {call["id"] for call in message.tool_calls}
            return messages if calls <= answered else messages[:i]
        return messages
    return messages
