"""``CtxWindowRecallBlock``: a block for LlamaIndex's ``Memory`` that recalls flushed turns.

The turns ``Memory`` flushes from its short-term queue go to a ctxwindow
session with an archive, and each ``get`` brings back, for the newest user
message, what ctxwindow builds from them within the block's ``max_tokens``:
the archived turns that match it, at their place, with the newest flushed turns.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from llama_index.core.base.llms.types import ChatMessage, MessageRole
from llama_index.core.bridge.pydantic import Field, PrivateAttr
from llama_index.core.memory.memory import BaseMemoryBlock

from ctxwindow.context import AsyncContextManager
from ctxwindow.integrations._common import Managers
from ctxwindow.integrations.llamaindex.convert import from_openai_messages, to_openai_message
from ctxwindow.messages import SYSTEM_ROLES, Message
from ctxwindow.tokens import chat_tokenizer


class CtxWindowRecallBlock(BaseMemoryBlock[list[ChatMessage]]):
    """A block for LlamaIndex's ``Memory``: the turns it flushes, recalled for the question.

    What ``Memory`` flushes from its short-term queue is stored in a ctxwindow
    session (``session_id``, by default the ``Memory``'s) on ``store`` and
    archived in ``archive`` (``ctxwindow.archive.SQLiteArchive`` for one)
    — system messages excepted: they are the ``Memory``'s. ``aget`` takes the
    newest user message as the query and returns what ctxwindow builds from
    those turns within ``max_tokens``: the archived turns that match it, each
    at its place and whole (a tool call with its results), with the newest
    flushed turns. ``Memory`` puts them before its short-term messages.
    ``manager`` (an ``AsyncContextManager`` with an archive) replaces
    ``store``, ``archive``, ``model`` and ``options``.

    >>> from ctxwindow.archive import SQLiteArchive
    >>> block = CtxWindowRecallBlock(archive=SQLiteArchive(), max_tokens=800)
    >>> block.name
    'ctxwindow_recall'
    """

    name: str = Field(default="ctxwindow_recall", description="The name of the memory block.")
    archive: Any = Field(default=None, exclude=True, description="Where flushed turns are found.")
    store: Any = Field(default="memory://", exclude=True, description="A URL or an AsyncStore.")
    model: str = Field(default="gpt-4o", description="The model whose tokens are counted.")
    max_tokens: int = Field(default=1000, gt=0, description="The most the block returns.")
    session_id: str | None = Field(default=None, description="Default: the Memory's session.")
    manager: AsyncContextManager | None = Field(default=None, exclude=True)
    options: dict[str, Any] = Field(default_factory=dict, exclude=True)

    _managers: Managers | None = PrivateAttr(default=None)

    async def _aget(
        self,
        messages: list[ChatMessage] | None = None,
        session_id: str | None = None,
        **block_kwargs: Any,
    ) -> list[ChatMessage]:
        asked = [m for m in messages or () if m.role == MessageRole.USER and m.content]
        session = self.session_id or session_id
        if not asked or session is None:
            return []
        manager = self._manager()
        context = await manager.build(session, query=asked[-1].content, max_tokens=self.max_tokens)
        return from_openai_messages(m for m in context.messages if m["role"] not in SYSTEM_ROLES)

    async def _aput(self, messages: list[ChatMessage]) -> None:
        by_session: dict[str, list[Message]] = {}
        for message in messages:
            if message.role.value in SYSTEM_ROLES:
                continue
            converted = to_openai_message(message)
            session = converted.pop("session_id", None)  # set by BaseMemoryBlock.aput
            session = self.session_id or session
            if not isinstance(session, str):
                raise ValueError("no session for the flushed turns: give the block session_id=")
            by_session.setdefault(session, []).append(converted)
        for session, converted_messages in by_session.items():
            await self._manager().extend(session, converted_messages)

    async def atruncate(
        self, content: list[ChatMessage], tokens_to_truncate: int
    ) -> list[ChatMessage] | None:
        """The content less its oldest units (a tool call goes with its results) until about
        ``tokens_to_truncate`` tokens are saved; None if nothing is left."""
        counter = chat_tokenizer(self.model)
        units = _units(content)
        while units and tokens_to_truncate > 0:
            dropped = units.pop(0)
            tokens_to_truncate -= sum(counter.message_tokens(to_openai_message(m)) for m in dropped)
        return [m for unit in units for m in unit] or None

    async def aclose(self) -> None:
        """Close the manager this block opened (archiving what is queued), not one it was given."""
        if self._managers is not None:
            await self._managers.aclose()
        self._managers = None

    def _manager(self) -> AsyncContextManager:
        if self._managers is None:
            if self.archive is None and self.manager is None:
                raise ValueError("CtxWindowRecallBlock needs archive= (or manager=)")
            options = {"archive": self.archive, **self.options}
            self._managers = Managers(
                self.store, self.model, self.max_tokens, options, manager=self.manager
            )
        return self._managers.strict_async


def _units(messages: Sequence[ChatMessage]) -> list[list[ChatMessage]]:
    """The messages grouped as eviction groups them: tool results join the call before them."""
    units: list[list[ChatMessage]] = []
    for message in messages:
        if message.role == MessageRole.TOOL and units:
            units[-1].append(message)
        else:
            units.append([message])
    return units
