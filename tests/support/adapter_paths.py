"""The framework adapters as paths (see tests/support/paths.py): what each hands its framework.

Each replays a conversation through the adapter as the framework would drive it, with the
real package, and converts what the adapter returns back to chat messages with the
adapter's own converter (LangChain's ``to_openai``, LlamaIndex's ``to_openai_message``);
the Agents session's items are checked as the Responses input they are.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

from langchain.agents.middleware import ModelRequest
from langchain_core.language_models.fake_chat_models import FakeListChatModel
from langchain_core.messages import SystemMessage

from ctxwindow.errors import BudgetError
from ctxwindow.integrations.langchain import (
    CtxWindowChatMessageHistory,
    CtxWindowMiddleware,
    from_openai,
    to_openai,
    trim_messages,
)
from ctxwindow.integrations.llamaindex import CtxWindowMemory
from ctxwindow.integrations.llamaindex.convert import from_openai_message, to_openai_message
from ctxwindow.integrations.openai_agents import CtxWindowSession, to_items
from tests.support.conversations import Conversation, Message
from tests.support.paths import SESSION, Path, Sent

UPSTREAM = FakeListChatModel(responses=["ok"])  # the model of a request; never called


def heads(conversation: Conversation) -> list[Message]:
    """The system prompt as a message, if the conversation has one."""
    return conversation.messages()[:1] if conversation.system is not None else []


def langchain_trim(**options: Any) -> Path:
    """``trim_messages`` on the growing history (the same list, as an app keeps it)."""

    def run(conversation: Conversation, budget: int) -> Iterator[Sent]:
        history = [from_openai(m) for m in heads(conversation)]
        for step in conversation.steps():
            history += [from_openai(m) for m in step.messages]
            if step.builds:
                kept = trim_messages(history, max_tokens=budget, include_system=True, **options)
                yield Sent(step, budget, [to_openai(m) for m in kept])

    return Path(run, holds_pending=not options)


def langchain_history(conversation: Conversation, budget: int) -> Iterator[Sent]:
    """``CtxWindowChatMessageHistory.messages``: the budget less ``reserve_input``."""
    history = CtxWindowChatMessageHistory(SESSION, store="memory://", max_tokens=budget)
    room = budget - min(256, budget // 4)
    try:
        history.add_messages([from_openai(m) for m in heads(conversation)])
        for step in conversation.steps():
            history.add_messages([from_openai(m) for m in step.messages])
            if step.builds:
                try:
                    got = history.messages
                except BudgetError as exc:
                    yield Sent(step, room, refused=str(exc))
                    continue
                yield Sent(step, room, [to_openai(m) for m in got])
    finally:
        history.close()


def langchain_middleware(conversation: Conversation, budget: int) -> Iterator[Sent]:
    """``CtxWindowMiddleware.wrap_model_call`` at each model call of an agent: after a user
    turn or a tool unit's results, with the agent's messages so far (LangChain ids and all);
    the handler stands for the model and hands back the request it gets."""
    middleware = CtxWindowMiddleware(SESSION, store="memory://", max_tokens=budget)
    system = [from_openai(m) for m in heads(conversation)]
    seen: list[Any] = []  # LangChain messages, as the agent's state holds them
    try:
        for step in conversation.steps():
            seen += [from_openai(m, id=f"lc-{len(seen) + i}") for i, m in enumerate(step.messages)]
            if not step.asks:
                continue
            prompt = system[0] if system else None
            assert prompt is None or isinstance(prompt, SystemMessage)
            request = ModelRequest(model=UPSTREAM, messages=list(seen), system_message=prompt)
            try:
                asked: Any = middleware.wrap_model_call(request, handed_back)
            except BudgetError as exc:
                yield Sent(step, budget, refused=str(exc))
                continue
            yield Sent(step, budget, [to_openai(m) for m in [*system, *asked.messages]])
    finally:
        middleware.close()


def handed_back(request: ModelRequest[Any]) -> Any:
    """The model's part in ``wrap_model_call``: the request it gets, handed back."""
    return request


def llamaindex_memory(conversation: Conversation, budget: int) -> Iterator[Sent]:
    """``CtxWindowMemory.get()`` after each step, the messages stored by ``put_messages``."""
    memory = CtxWindowMemory.from_defaults(SESSION, store="memory://", max_tokens=budget)
    try:
        memory.put_messages([from_openai_message(m) for m in heads(conversation)])
        for step in conversation.steps():
            memory.put_messages([from_openai_message(m) for m in step.messages])
            if step.builds:
                try:
                    got = memory.get()
                except BudgetError as exc:
                    yield Sent(step, budget, refused=str(exc))
                    continue
                yield Sent(step, budget, [to_openai_message(m) for m in got])
    finally:
        memory.close()


def agents_session(conversation: Conversation, budget: int) -> Iterator[Sent]:
    """``CtxWindowSession.get_items()`` after each step, the items (``to_items`` of each
    message) stored by ``add_items`` one step at a time, as the Runner does."""
    return iter(asyncio.run(_agents_session(conversation, budget)))


async def _agents_session(conversation: Conversation, budget: int) -> list[Sent]:
    session = CtxWindowSession(SESSION, store="memory://", max_tokens=budget)
    sent: list[Sent] = []
    try:
        for message in heads(conversation):
            await session.add_items(to_items(message))
        for step in conversation.steps():
            await session.add_items([item for m in step.messages for item in to_items(m)])
            if step.builds:
                try:
                    items = await session.get_items()
                except BudgetError as exc:
                    sent.append(Sent(step, budget, refused=str(exc)))
                    continue
                sent.append(Sent(step, budget, items=items))
    finally:
        await session.manager.close()
    return sent


ADAPTER_PATHS: dict[str, Path] = {
    "langchain/trim": langchain_trim(),
    "langchain/trim/start_on": langchain_trim(start_on="human"),
    "langchain/history": Path(langchain_history),
    "langchain/middleware": Path(langchain_middleware),
    "llamaindex/memory": Path(llamaindex_memory),
    "agents/session": Path(agents_session, ("responses",)),
}
