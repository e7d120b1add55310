"""``CtxWindowMemory``: a LlamaIndex ``BaseMemory`` whose ``get`` is ctxwindow's context.

The sync methods run on a ``ContextManager``, the ``a``-prefixed ones on an
``AsyncContextManager`` (``Managers``, each made on first use); see the
package docstring for what each method does.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from llama_index.core.base.llms.types import ChatMessage
from llama_index.core.bridge.pydantic import ConfigDict, Field, PrivateAttr, field_serializer
from llama_index.core.llms.llm import LLM
from llama_index.core.memory import BaseMemory

from ctxwindow.context import AsyncContextManager, ContextManager
from ctxwindow.integrations._common import DEFAULT_STORE, Managers
from ctxwindow.integrations.llamaindex.convert import from_openai_messages, to_openai_message
from ctxwindow.stores.base import AsyncStore, Store


def _query(value: str | ChatMessage | None) -> str | None:
    if isinstance(value, ChatMessage):
        return value.content
    return value


class CtxWindowMemory(BaseMemory):
    """A LlamaIndex memory whose ``get`` is ctxwindow's context within ``max_tokens``.

    ``store`` is a store URL (``sqlite:///chat.db``, ``memory://``...) or a
    store object (a ``Store`` for the sync methods, an ``AsyncStore`` for the
    async ones); ``manager`` a ``ContextManager`` or ``AsyncContextManager``
    to share among the memories of many sessions (then ``store``,
    ``model``, ``max_tokens`` and ``options`` are its own). ``options`` go to
    the managers (``archive=``, ``recall=``, ``policy=``, ``redactor=``...).
    See the docstring of ``ctxwindow.integrations.llamaindex``.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    session_id: str = Field(description="The ctxwindow session that holds the conversation.")
    store: Any = Field(default=DEFAULT_STORE, description="A store URL, or a store object.")
    model: str = Field(default="gpt-4o", description="The model whose tokens are counted.")
    max_tokens: int | float = Field(
        default=0.75, description="The budget of get(): tokens, or a share of the model's window."
    )
    manager: ContextManager | AsyncContextManager | None = Field(default=None, exclude=True)
    options: dict[str, Any] = Field(default_factory=dict, exclude=True)

    _managers: Managers | None = PrivateAttr(default=None)

    @classmethod
    def class_name(cls) -> str:
        return "CtxWindowMemory"

    @field_serializer("store")
    def _store_url(self, store: Any) -> str | None:
        """A store object is serialised as its URL (``memory://``, ``sqlite:///…``)."""
        return store if isinstance(store, str) else getattr(store, "url", None)

    @classmethod
    def from_defaults(
        cls,
        session_id: str | None = None,
        store: str | Store | AsyncStore = DEFAULT_STORE,
        model: str = "gpt-4o",
        max_tokens: int | float | None = None,
        chat_history: Sequence[ChatMessage] | None = None,
        llm: LLM | None = None,
        **options: Any,
    ) -> CtxWindowMemory:
        """A memory on ``store``; a new session id if none is given.

        Without ``max_tokens``, three quarters of ``llm``'s context window if
        given, else of ``model``'s. ``chat_history`` replaces the session's history.
        """
        if max_tokens is None:
            max_tokens = int(llm.metadata.context_window * 0.75) if llm is not None else 0.75
        memory = cls(
            session_id=session_id or uuid.uuid4().hex,
            store=store,
            model=model,
            max_tokens=max_tokens,
            options=options,
        )
        if chat_history is not None:
            memory.set(list(chat_history))
        return memory

    # sync, on a ContextManager

    def get(
        self, input: str | ChatMessage | None = None, initial_token_count: int = 0, **kwargs: Any
    ) -> list[ChatMessage]:
        """The context to send now, within ``max_tokens`` less ``initial_token_count`` (what
        the caller sends before it); ``input`` is the query for recall (with an archive)."""
        manager = self._pair().sync
        room = _room(manager.budget, initial_token_count)
        context = manager.build(self.session_id, query=_query(input), max_tokens=room)
        return from_openai_messages(context.messages)

    def get_all(self) -> list[ChatMessage]:
        """Every stored message of the session, in order."""
        return from_openai_messages(e.message for e in self._pair().sync.history(self.session_id))

    def put(self, message: ChatMessage) -> None:
        """Store a message (durably, first) and add it to the window."""
        self._pair().sync.add(self.session_id, to_openai_message(message))

    def put_messages(self, messages: list[ChatMessage]) -> None:
        """Store the messages in order, all or none."""
        if messages:
            self._pair().sync.extend(self.session_id, [to_openai_message(m) for m in messages])

    def set(self, messages: list[ChatMessage]) -> None:
        """Replace the session's history with ``messages`` (nobody adds to it meanwhile)."""
        manager = self._pair().sync
        converted = [to_openai_message(m) for m in messages]
        with manager.turn(self.session_id):
            manager.delete(self.session_id)
            if converted:
                manager.extend(self.session_id, converted)

    def reset(self) -> None:
        """Delete the session: its history, window and archived turns."""
        self._pair().sync.delete(self.session_id)

    def close(self) -> None:
        """Close the manager this memory opened for the sync methods (not one it was given)."""
        self._pair().close()

    # async, on an AsyncContextManager

    async def aget(
        self, input: str | ChatMessage | None = None, initial_token_count: int = 0, **kwargs: Any
    ) -> list[ChatMessage]:
        """``get``, awaited."""
        manager = self._pair().strict_async
        room = _room(manager.budget, initial_token_count)
        context = await manager.build(self.session_id, query=_query(input), max_tokens=room)
        return from_openai_messages(context.messages)

    async def aget_all(self) -> list[ChatMessage]:
        """``get_all``, awaited."""
        return from_openai_messages(
            e.message for e in await self._pair().strict_async.history(self.session_id)
        )

    async def aput(self, message: ChatMessage) -> None:
        """``put``, awaited."""
        await self._pair().strict_async.add(self.session_id, to_openai_message(message))

    async def aput_messages(self, messages: list[ChatMessage]) -> None:
        """``put_messages``, awaited."""
        if messages:
            converted = [to_openai_message(m) for m in messages]
            await self._pair().strict_async.extend(self.session_id, converted)

    async def aset(self, messages: list[ChatMessage]) -> None:
        """``set``, awaited."""
        manager = self._pair().strict_async
        converted = [to_openai_message(m) for m in messages]
        async with manager.turn(self.session_id):
            await manager.delete(self.session_id)
            if converted:
                await manager.extend(self.session_id, converted)

    async def areset(self) -> None:
        """``reset``, awaited."""
        await self._pair().strict_async.delete(self.session_id)

    async def aclose(self) -> None:
        """Close the manager this memory opened for the async methods (not one it was given)."""
        await self._pair().aclose(sync=False)

    def _pair(self) -> Managers:
        """The managers behind the memory (``manager`` if given), each made on first use."""
        if self._managers is None:
            self._managers = Managers(
                self.store, self.model, self.max_tokens, self.options, manager=self.manager
            )
        return self._managers


def _room(budget: int, initial_token_count: int) -> int | None:
    """The budget left after what the caller sends first (None: the whole budget)."""
    if not initial_token_count:
        return None
    if initial_token_count >= budget:
        raise ValueError(
            f"initial_token_count ({initial_token_count}) leaves nothing of the budget ({budget})"
        )
    return budget - initial_token_count
