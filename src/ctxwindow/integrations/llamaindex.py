"""LlamaIndex memory on ctxwindow: ``CtxWindowMemory`` and ``CtxWindowRecallBlock``.

    from llama_index.core.chat_engine import SimpleChatEngine
    from ctxwindow.integrations.llamaindex import CtxWindowMemory

    memory = CtxWindowMemory(session_id="user-42", store="sqlite:///chat.db",
                             model="gpt-4o", max_tokens=2000)
    engine = SimpleChatEngine.from_defaults(llm=llm, memory=memory)

``CtxWindowMemory`` is a ``BaseMemory``: ``get(input)`` returns the
**budgeted context** (what ctxwindow builds within ``max_tokens``: the system
prompt, tool calls with all their results, the newest turns, compressed ones,
the rolling summary, and with an ``archive=`` the old turns that match
``input``); ``get_all()`` the whole stored history; ``put`` and
``put_messages`` append (a list is stored atomically); ``set`` replaces the
history; ``reset`` deletes it. The ``a``-prefixed twins run on an
``AsyncContextManager``: awaited, never a sync call in a thread.

``max_tokens`` bounds what ``get`` returns, counted as the provider bills
it. Give the system prompt to the memory (``put`` a system message) rather
than to the engine, so that it is pinned and counted. An agent
(``FunctionAgent``) sends the steps of its current run — its tool calls and
their results — after the memory's messages: leave room for them.

Messages are stored as OpenAI chat messages, as ``llama-index-llms-openai``
writes them (``to_openai_message``, ``from_openai_message``):

- the role; the content as a string (one text block), a list of ``text`` and
  ``image_url`` parts (several blocks, or images: a URL, or a data URL for
  image bytes and files), or none (an assistant turn that only calls tools);
- ``additional_kwargs`` become fields of the message (``tool_calls``,
  ``tool_call_id``, ``name``...), the way LlamaIndex's OpenAI integration does;
- ``ToolCallBlock`` blocks become ``tool_calls``, and the key
  ``"llamaindex_tool_call_blocks"`` says they were blocks, so that they come
  back as blocks (after the message's other blocks; arguments that are a JSON
  object come back as a dict);
- ``CachePoint`` and ``ThinkingBlock`` blocks are not stored (neither is sent
  back in the OpenAI chat format); audio, video and document blocks raise
  ``ValueError``. The roles ``chatbot`` and ``model`` are stored as
  ``assistant``.

``CtxWindowRecallBlock`` is a memory block for LlamaIndex's own ``Memory``:
the turns ``Memory`` flushes from its short-term queue go to a ctxwindow
session with an archive, and each ``get`` brings back, for the newest user
message, what ctxwindow builds from them within the block's ``max_tokens``:
the archived turns that match it, at their place, with the newest flushed turns.
"""

from __future__ import annotations

import copy
import json
import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, cast

from ctxwindow.context import AsyncContextManager, ContextManager
from ctxwindow.integrations._common import DEFAULT_STORE, Managers, require
from ctxwindow.messages import SYSTEM_ROLES, Message
from ctxwindow.stores.base import AsyncStore, Store
from ctxwindow.tokens import chat_tokenizer

require("llama_index.core", "llamaindex")

from llama_index.core.base.llms.types import (  # noqa: E402
    CachePoint,
    ChatMessage,
    ImageBlock,
    MessageRole,
    TextBlock,
    ThinkingBlock,
    ToolCallBlock,
)
from llama_index.core.bridge.pydantic import (  # noqa: E402
    ConfigDict,
    Field,
    PrivateAttr,
    field_serializer,
)
from llama_index.core.llms.llm import LLM  # noqa: E402
from llama_index.core.memory import BaseMemory  # noqa: E402
from llama_index.core.memory.memory import BaseMemoryBlock  # noqa: E402

__all__ = [
    "TOOL_CALL_BLOCKS",
    "CtxWindowMemory",
    "CtxWindowRecallBlock",
    "from_openai_message",
    "to_openai_message",
]

TOOL_CALL_BLOCKS = "llamaindex_tool_call_blocks"
"""The message key saying its ``tool_calls`` were ``ToolCallBlock`` blocks: ``"blocks"``, or
``"both"`` when ``additional_kwargs["tool_calls"]`` held them too."""

_AS_ASSISTANT = ("chatbot", "model")  # other providers' names for the assistant
_SKIPPED = (CachePoint, ThinkingBlock)  # hints and reasoning, not sent back as chat content
_RESERVED = ("role", "content", TOOL_CALL_BLOCKS)


# -- ChatMessage <-> OpenAI chat message -------------------------------------------------


def to_openai_message(message: ChatMessage) -> Message:
    """The OpenAI chat message for ``message`` (see the module docstring); ``ValueError`` for
    blocks that format cannot hold."""
    role = message.role.value
    role = "assistant" if role in _AS_ASSISTANT else role
    extra = _plain_kwargs(message)
    parts: list[dict[str, Any]] = []
    calls: list[dict[str, Any]] = []
    for block in message.blocks:
        if isinstance(block, ToolCallBlock):
            calls.append(_call_of(block))
        elif isinstance(block, TextBlock):
            parts.append({"type": "text", "text": block.text})
        elif isinstance(block, ImageBlock):
            parts.append(_image_part(block))
        elif not isinstance(block, _SKIPPED):
            raise ValueError(
                f"a {type(block).__name__} cannot be stored: ctxwindow keeps OpenAI chat "
                "messages, whose content is text and image_url parts"
            )
    out: Message = {**extra, "role": role, "content": _content(role, parts)}
    if calls:
        out[TOOL_CALL_BLOCKS] = "both" if "tool_calls" in extra else "blocks"
        out.setdefault("tool_calls", calls)
    return out


def from_openai_message(message: Mapping[str, Any]) -> ChatMessage:
    """The ``ChatMessage`` for an OpenAI chat message (the inverse of ``to_openai_message``)."""
    extra = {k: copy.deepcopy(v) for k, v in message.items() if k not in _RESERVED}
    blocks: list[Any] = _blocks(message.get("content"))
    form = message.get(TOOL_CALL_BLOCKS)
    if form:
        blocks += [_block_of(call) for call in message.get("tool_calls") or ()]
        if form == "blocks":
            extra.pop("tool_calls", None)
    return ChatMessage(role=MessageRole(message["role"]), blocks=blocks, additional_kwargs=extra)


def _plain_kwargs(message: ChatMessage) -> dict[str, Any]:
    """``additional_kwargs`` as JSON values (SDK objects such as OpenAI's tool calls dumped)."""
    if not message.additional_kwargs:
        return {}
    dumped = message.model_dump(mode="json", include={"additional_kwargs"})
    kwargs = cast(dict[str, Any], dumped["additional_kwargs"])
    clash = [key for key in _RESERVED if key in kwargs]
    if clash:
        raise ValueError(f"additional_kwargs may not hold {clash}: they are message fields")
    return kwargs


def _content(role: str, parts: list[dict[str, Any]]) -> str | list[dict[str, Any]] | None:
    if len(parts) == 1 and parts[0]["type"] == "text":
        return cast(str, parts[0]["text"])
    if not parts and role == "assistant":
        return None  # a turn that only calls tools
    return parts


def _image_part(block: ImageBlock) -> dict[str, Any]:
    url = str(block.url) if block.url is not None else block.inline_url()
    image: dict[str, Any] = {"url": url}
    if block.detail is not None:
        image["detail"] = block.detail
    return {"type": "image_url", "image_url": image}


def _call_of(block: ToolCallBlock) -> dict[str, Any]:
    arguments = block.tool_kwargs
    if not isinstance(arguments, str):
        arguments = json.dumps(arguments, ensure_ascii=False, default=str)
    function = {"name": block.tool_name, "arguments": arguments}
    return {"id": block.tool_call_id or "", "type": "function", "function": function}


def _blocks(content: Any) -> list[Any]:
    if content is None:
        return []
    if isinstance(content, str):
        return [TextBlock(text=content)]
    return [_block_of_part(part) for part in content]


def _block_of_part(part: Mapping[str, Any]) -> TextBlock | ImageBlock:
    kind = part["type"]
    if kind in ("text", "refusal"):
        return TextBlock(text=part[kind])
    image = part["image_url"]
    url, detail = image["url"], image.get("detail")
    if url.startswith("data:") and ";base64," in url:
        mimetype, _, data = url[len("data:") :].partition(";base64,")
        return ImageBlock(image=data.encode(), image_mimetype=mimetype or None, detail=detail)
    return ImageBlock(url=url, detail=detail)


def _block_of(call: Mapping[str, Any]) -> ToolCallBlock:
    function = call.get("function") or {}
    arguments = function.get("arguments", "")
    try:
        parsed = json.loads(arguments)
    except (TypeError, ValueError):
        parsed = None
    return ToolCallBlock(
        tool_call_id=call.get("id") or None,
        tool_name=function.get("name", ""),
        tool_kwargs=parsed if isinstance(parsed, dict) else arguments,
    )


def _messages(context_messages: Iterable[Mapping[str, Any]]) -> list[ChatMessage]:
    return [from_openai_message(m) for m in context_messages]


def _query(value: str | ChatMessage | None) -> str | None:
    if isinstance(value, ChatMessage):
        return value.content
    return value


# -- the memory ---------------------------------------------------------------------------


class CtxWindowMemory(BaseMemory):
    """A LlamaIndex memory whose ``get`` is ctxwindow's context within ``max_tokens``.

    ``store`` is a store URL (``sqlite:///chat.db``, ``memory://``...) or a
    store object (a ``Store`` for the sync methods, an ``AsyncStore`` for the
    async ones); ``manager`` a ``ContextManager`` or ``AsyncContextManager``
    to share among the memories of many sessions (then ``store``,
    ``model``, ``max_tokens`` and ``options`` are its own). ``options`` go to
    the managers (``archive=``, ``recall=``, ``policy=``, ``redactor=``...).
    See the module docstring.
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
        return _messages(context.messages)

    def get_all(self) -> list[ChatMessage]:
        """Every stored message of the session, in order."""
        return _messages(e.message for e in self._pair().sync.history(self.session_id))

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
        return _messages(context.messages)

    async def aget_all(self) -> list[ChatMessage]:
        """``get_all``, awaited."""
        return _messages(
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


# -- recall as a memory block ---------------------------------------------------------------


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
        return _messages(m for m in context.messages if m["role"] not in SYSTEM_ROLES)

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
