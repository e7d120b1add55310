"""``CtxWindowChatMessageHistory``: a LangChain chat history kept in a ctxwindow store."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langchain_core.chat_history import BaseChatMessageHistory
from langchain_core.messages import BaseMessage

from ctxwindow.integrations._common import DEFAULT_STORE, AnyStore, Managers
from ctxwindow.integrations.langchain.convert import from_context, from_entries, to_openai


class CtxWindowChatMessageHistory(BaseChatMessageHistory):
    """A LangChain chat history kept in a ctxwindow store, one session a history.

    ``messages`` (and ``aget_messages``) is what LangChain's runnables read
    before each call, ``RunnableWithMessageHistory`` among them: the budgeted
    context — the system prompt, tool calls with their results, the newest
    turns, compressed ones and the rolling summary — built within
    ``max_tokens`` (tokens, or a ratio of the model's window) less
    ``reserve_input``, the tokens kept free for what the runnable sends after
    the history: the new input, and the prompt's own messages (default: a
    quarter of the budget, at most 256). ``all_messages`` (and
    ``aget_all_messages``) is the whole stored history, with each entry's id:
    ``add_messages`` stores every message, the budget only chooses what is
    sent. ``context()`` (and ``acontext``) is the context within the whole
    ``max_tokens``, for when the question is stored already. ``clear`` deletes
    the session. ``store`` is a URL or a store object; ``options`` go to the
    managers (see ``Managers`` for which methods work with which store).
    """

    def __init__(
        self,
        session_id: str,
        store: AnyStore = DEFAULT_STORE,
        model: str = "gpt-4o",
        max_tokens: int | float = 0.75,
        *,
        reserve_input: int | None = None,
        **options: Any,
    ) -> None:
        self.session_id = session_id
        self.reserve_input = _checked_reserve(reserve_input)
        self.managers = Managers(store, model, max_tokens, options)

    @property
    def messages(self) -> list[BaseMessage]:  # type: ignore[override]
        """The context for a runnable to send before the new input (see the class)."""
        manager = self.managers.sync
        room = self._room(manager.budget)
        return from_context(manager.build(self.session_id, max_tokens=room))

    @property
    def all_messages(self) -> list[BaseMessage]:
        """Every stored message of the session, in order, each with its entry's id."""
        return from_entries(self.managers.sync.history(self.session_id))

    def add_messages(self, messages: Sequence[BaseMessage]) -> None:
        """Store the messages in order, as one atomic batch (all or none)."""
        self.managers.sync.extend(self.session_id, [to_openai(m) for m in messages])

    def clear(self) -> None:
        self.managers.sync.delete(self.session_id)

    def context(self, query: str | None = None) -> list[BaseMessage]:
        """The messages to send now, within ``max_tokens`` (``ContextManager.build``)."""
        return from_context(self.managers.sync.build(self.session_id, query))

    def _room(self, budget: int) -> int:
        """What ``messages`` may take of ``budget``: the budget less ``reserve_input``."""
        reserve = min(256, budget // 4) if self.reserve_input is None else self.reserve_input
        if reserve >= budget:
            raise ValueError(
                f"reserve_input={reserve} leaves nothing of the {budget}-token budget"
                " (max_tokens) for the history"
            )
        return budget - reserve

    async def aget_messages(self) -> list[BaseMessage]:
        room = self._room(self.managers.budget)
        return from_context(await self.managers.call("build", self.session_id, None, room))

    async def aget_all_messages(self) -> list[BaseMessage]:
        return from_entries(await self.managers.call("history", self.session_id))

    async def aadd_messages(self, messages: Sequence[BaseMessage]) -> None:
        await self.managers.call("extend", self.session_id, [to_openai(m) for m in messages])

    async def aclear(self) -> None:
        await self.managers.call("delete", self.session_id)

    async def acontext(self, query: str | None = None) -> list[BaseMessage]:
        return from_context(await self.managers.call("build", self.session_id, query))

    def close(self) -> None:
        """Close the store (the sync manager's; ``aclose`` closes both)."""
        self.managers.close()

    async def aclose(self) -> None:
        await self.managers.aclose()


def _checked_reserve(reserve: int | None) -> int | None:
    if reserve is not None and (type(reserve) is not int or reserve < 0):
        raise ValueError(f"reserve_input must be None or an int >= 0, got {reserve!r}")
    return reserve
