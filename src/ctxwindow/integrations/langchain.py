"""LangChain adapters (the ``langchain`` extra; docs/integrations.md).

- ``CtxWindowChatMessageHistory``: a ``BaseChatMessageHistory`` over any store,
  whose ``messages`` is the budgeted context (``RunnableWithMessageHistory``
  sends at most ``max_tokens``) and ``all_messages`` the whole history;
- ``trim_messages``: a drop-in for ``langchain_core.messages.trim_messages``
  (``strategy="last"``) with exact counts and tool units kept whole, O(1) a
  turn when called turn after turn on one growing history;
- ``CtxWindowMiddleware``: an ``AgentMiddleware`` for ``create_agent`` that
  stores each turn and hands the model ctxwindow's context instead of the
  whole conversation;
- ``to_openai`` / ``from_openai``: LangChain messages to chat wire format and
  back (roles, content parts, names, tool calls and their ids).

The history and the middleware hold up to two managers over one store: a
``ContextManager`` for their sync methods and an ``AsyncContextManager`` for
their async ones, each made on first use (see ``Managers``).
"""

from __future__ import annotations

import asyncio
import inspect
import json
import threading
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Union, cast, overload

from ctxwindow.context import AsyncContextManager, ContextManager
from ctxwindow.errors import BudgetError, InvalidMessageError, PinnedOverBudgetError
from ctxwindow.integrations._common import DEFAULT_STORE, async_manager, require, sync_manager
from ctxwindow.messages import Entry, Message
from ctxwindow.policies import Context
from ctxwindow.stores.base import AsyncStore, Store
from ctxwindow.stores.memory import AsyncMemoryStore, MemoryStore
from ctxwindow.tokens.chat import ChatTokenizer
from ctxwindow.tokens.defaults import chat_tokenizer

require("langchain_core", "langchain")
require("langchain.agents.middleware", "langchain")

from langchain.agents.middleware import (  # noqa: E402
    AgentMiddleware,
    AgentState,
    ModelRequest,
    ModelResponse,
)
from langchain_core.chat_history import BaseChatMessageHistory  # noqa: E402
from langchain_core.messages import (  # noqa: E402
    AIMessage,
    BaseMessage,
    FunctionMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
    convert_to_messages,
    convert_to_openai_messages,
)
from langchain_core.messages.tool import invalid_tool_call, tool_call  # noqa: E402
from langchain_core.prompt_values import PromptValue  # noqa: E402
from langchain_core.runnables import Runnable, RunnableLambda  # noqa: E402
from langchain_core.utils.function_calling import convert_to_openai_tool  # noqa: E402

__all__ = [
    "CtxWindowChatMessageHistory",
    "CtxWindowMiddleware",
    "Managers",
    "from_openai",
    "to_openai",
    "trim_messages",
]

AnyStore = Union[str, Store, AsyncStore]  # noqa: UP007 (an alias, evaluated on 3.10)
MessageTypes = Union[str, type[BaseMessage], Sequence[Union[str, type[BaseMessage]]]]  # noqa: UP007

# -- messages: LangChain <-> chat wire format ---------------------------------------------

_PARTS = ("text", "image_url", "refusal")
# Parts with nothing a chat-completions model can be sent again: provider-private reasoning,
# and tool calls that ``tool_calls`` already carries.
_UNSENDABLE_PARTS = ("reasoning", "thinking", "redacted_thinking", "tool_use", "function_call")


def to_openai(message: BaseMessage) -> Message:
    """The chat wire-format dict of a LangChain message (``from_openai`` reverses it).

    String content stays a string and a list of parts stays a list (text and
    image parts; Anthropic, Bedrock and standard image blocks become
    ``image_url`` parts); ``tool_calls`` get JSON string arguments, invalid
    tool calls keep their raw arguments; ``name``, ``tool_call_id`` and a
    ``developer`` role are kept. Reasoning blocks are left out (no other model
    can read them back); other parts the wire format lacks (audio, files)
    raise ``InvalidMessageError``. Ids, ``response_metadata`` and a tool
    result's ``artifact`` and ``status`` are not part of the wire format.
    """
    converted: Message = convert_to_openai_messages(message, text_format="block")
    content = message.content
    if isinstance(content, str):
        converted["content"] = content
    else:
        converted["content"] = _sendable_parts(converted["content"])
    if isinstance(message, AIMessage) and message.invalid_tool_calls:
        converted["tool_calls"] = [*converted.get("tool_calls", ()), *_raw_calls(message)]
    return converted


def _sendable_parts(parts: list[Any]) -> list[Any]:
    kept = []
    for part in parts:
        kind = part.get("type")
        if kind in _PARTS:
            kept.append(part)
        elif kind not in _UNSENDABLE_PARTS:
            raise InvalidMessageError(
                f"a content part of type {kind!r} has no chat wire format (known: {_PARTS})"
            )
    return kept


def _raw_calls(message: AIMessage) -> list[Message]:
    return [
        {
            "type": "function",
            "id": call.get("id") or "",
            "function": {"name": call.get("name") or "", "arguments": call.get("args") or ""},
        }
        for call in message.invalid_tool_calls
    ]


def from_openai(message: Mapping[str, Any], *, id: str | None = None) -> BaseMessage:
    """The LangChain message of a chat wire-format dict (``to_openai`` reverses it).

    ``id`` becomes the message's id (the history gives each its entry id).
    """
    role = message["role"]
    content = _content_of(message.get("content"))
    common: dict[str, Any] = {"content": content, "id": id}
    if isinstance(message.get("name"), str):
        common["name"] = message["name"]
    if role in ("system", "developer"):
        extra = {"__openai_role__": "developer"} if role == "developer" else {}
        return SystemMessage(**common, additional_kwargs=extra)
    if role == "user":
        return HumanMessage(**common)
    if role == "assistant":
        return _ai_message(message, common)
    if role == "tool":
        return ToolMessage(**common, tool_call_id=message["tool_call_id"])
    if role == "function":
        return FunctionMessage(**{"name": "", **common})
    raise InvalidMessageError(f"unknown role {role!r}")


def _content_of(content: Any) -> Any:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return [json.loads(json.dumps(part)) for part in content]  # a copy, not the store's


def _ai_message(message: Mapping[str, Any], common: dict[str, Any]) -> AIMessage:
    calls, invalid = [], []
    for call in message.get("tool_calls") or ():
        name, arguments = call["function"]["name"], call["function"].get("arguments") or ""
        args = _arguments(arguments)
        if args is None:
            invalid.append(invalid_tool_call(name=name, args=arguments, id=call["id"], error=None))
        else:
            calls.append(tool_call(name=name, args=args, id=call["id"]))
    extra = {"refusal": message["refusal"]} if message.get("refusal") else {}
    return AIMessage(
        **common, tool_calls=calls, invalid_tool_calls=invalid, additional_kwargs=extra
    )


def _arguments(arguments: str) -> dict[str, Any] | None:
    """A tool call's arguments as LangChain holds them (a dict), or None if they are not."""
    try:
        args = json.loads(arguments) if arguments else {}
    except ValueError:
        return None
    return args if isinstance(args, dict) else None


# -- the managers behind an adapter ----------------------------------------------------------


class Managers:
    """The managers behind one adapter object, each made on first use and then kept.

    Sync methods use a ``ContextManager``, async ones an ``AsyncContextManager``;
    both work on the same data: a URL opens a sync and an async store on it
    (``memory://`` one ``MemoryStore`` shared by both), a ``MemoryStore`` is
    shared with an ``AsyncMemoryStore``. With another sync ``Store`` object the
    async methods call the sync manager in a worker thread (never on the event
    loop); with an ``AsyncStore`` object only the async methods work.
    """

    def __init__(
        self, store: AnyStore, model: str, max_tokens: int | float, options: Mapping[str, Any]
    ) -> None:
        self.model = model
        self._store = store
        self._settings: dict[str, Any] = {"model": model, "max_tokens": max_tokens, **options}
        self._sync: ContextManager | None = None
        self._async: AsyncContextManager | None = None
        self._lock = threading.Lock()
        if store == "memory://":
            self._store = MemoryStore()

    @property
    def sync(self) -> ContextManager:
        with self._lock:
            if self._sync is None:
                self._sync = sync_manager(self._sync_store(), **self._settings)
            return self._sync

    @property
    def asynchronous(self) -> AsyncContextManager | None:
        """The async manager; None if the store is a sync one other than ``MemoryStore``."""
        with self._lock:
            if self._async is None and (store := self._async_store()) is not None:
                self._async = async_manager(store, **self._settings)
            return self._async

    def _sync_store(self) -> str | Store:
        if isinstance(self._store, AsyncStore):
            raise TypeError(
                f"this adapter was given an {type(self._store).__name__}: use its async methods,"
                " or give it a store URL to use both"
            )
        return self._store

    def _async_store(self) -> str | AsyncStore | None:
        store = self._store
        if isinstance(store, MemoryStore):
            return AsyncMemoryStore(store)
        return None if isinstance(store, Store) else store

    @property
    def budget(self) -> int:
        """The budget in tokens: ``max_tokens``, a ratio resolved against the model's window."""
        manager = self.asynchronous
        return manager.budget if manager is not None else self.sync.budget

    async def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """``method`` of the async manager, else of the sync one in a worker thread."""
        manager = self.asynchronous
        if manager is not None:
            return await getattr(manager, method)(*args, **kwargs)
        return await asyncio.to_thread(getattr(self.sync, method), *args, **kwargs)

    def close(self) -> None:
        """Close the sync manager (and its store); ``aclose`` closes both."""
        if self._sync is not None:
            self._sync.close()

    async def aclose(self) -> None:
        if self._async is not None:
            await self._async.close()
        if self._sync is not None:
            await asyncio.to_thread(self._sync.close)


# -- the chat message history ----------------------------------------------------------------


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
        return _from_context(manager.build(self.session_id, max_tokens=room))

    @property
    def all_messages(self) -> list[BaseMessage]:
        """Every stored message of the session, in order, each with its entry's id."""
        return _from_entries(self.managers.sync.history(self.session_id))

    def add_messages(self, messages: Sequence[BaseMessage]) -> None:
        """Store the messages in order, as one atomic batch (all or none)."""
        self.managers.sync.extend(self.session_id, [to_openai(m) for m in messages])

    def clear(self) -> None:
        self.managers.sync.delete(self.session_id)

    def context(self, query: str | None = None) -> list[BaseMessage]:
        """The messages to send now, within ``max_tokens`` (``ContextManager.build``)."""
        return _from_context(self.managers.sync.build(self.session_id, query))

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
        return _from_context(await self.managers.call("build", self.session_id, None, room))

    async def aget_all_messages(self) -> list[BaseMessage]:
        return _from_entries(await self.managers.call("history", self.session_id))

    async def aadd_messages(self, messages: Sequence[BaseMessage]) -> None:
        await self.managers.call("extend", self.session_id, [to_openai(m) for m in messages])

    async def aclear(self) -> None:
        await self.managers.call("delete", self.session_id)

    async def acontext(self, query: str | None = None) -> list[BaseMessage]:
        return _from_context(await self.managers.call("build", self.session_id, query))

    def close(self) -> None:
        """Close the store (the sync manager's; ``aclose`` closes both)."""
        self.managers.close()

    async def aclose(self) -> None:
        await self.managers.aclose()


def _checked_reserve(reserve: int | None) -> int | None:
    if reserve is not None and (type(reserve) is not int or reserve < 0):
        raise ValueError(f"reserve_input must be None or an int >= 0, got {reserve!r}")
    return reserve


def _from_entries(entries: Iterable[Entry]) -> list[BaseMessage]:
    return [from_openai(entry.message, id=entry.id) for entry in entries]


def _from_context(context: Context) -> list[BaseMessage]:
    return [from_openai(message) for message in context.messages]


# -- trim_messages -------------------------------------------------------------------------


@dataclass(eq=False)
class _Span:
    """What is kept or dropped whole: a message, or a tool call with its results."""

    messages: list[BaseMessage]
    tokens: int


def _spans(messages: Iterable[BaseMessage], size: Callable[[BaseMessage], int]) -> list[_Span]:
    spans: list[_Span] = []
    for message in messages:
        _place(spans, message, size(message))
    return spans


def _place(spans: list[_Span], message: BaseMessage, tokens: int) -> int | None:
    """Add ``message`` to ``spans``; the index of its span, None if it is left out.

    A tool result never starts a span: it joins the one before it (its call's,
    or — an orphan in the input — whatever precedes it; with nothing before,
    it is left out).
    """
    if isinstance(message, ToolMessage):
        if not spans:
            return None
        spans[-1].messages.append(message)
        spans[-1].tokens += tokens
    else:
        spans.append(_Span([message], tokens))
    return len(spans) - 1


def _is_type(message: BaseMessage, types: MessageTypes) -> bool:
    wanted = [types] if isinstance(types, (str, type)) else types
    names = [t for t in wanted if isinstance(t, str)]
    classes = tuple(t for t in wanted if isinstance(t, type))
    return message.type in names or isinstance(message, classes)


class _Trim:
    """One history's trim state: the spans from the cut on, with running totals.

    Appended messages are tokenized once; the cut (the oldest span kept) and the
    start (the first kept span ``start_on`` accepts) only move forward, so each
    call costs the new messages plus the result it returns.
    """

    def __init__(
        self, tokenizer: ChatTokenizer, max_tokens: int, system: bool, start_on: Any
    ) -> None:
        self.tokenizer, self.max_tokens, self.start_on = tokenizer, max_tokens, start_on
        self.include_system = system
        self.first: Any = None
        self.last: Any = None  # the last input item seen, and how many were seen
        self.seen = 0
        self.system: BaseMessage | None = None
        self.room = max_tokens - tokenizer.framing.reply_priming
        self.spans: list[_Span] = []
        self.cut = self.start = 0
        self.total = 0  # tokens of spans[cut:]

    def continues(self, items: Sequence[Any]) -> bool:
        """Whether ``items`` is the history seen so far, maybe with more at its end."""
        n = self.seen
        return len(items) >= n > 0 and items[n - 1] is self.last and items[0] is self.first

    def extend(self, items: Sequence[Any]) -> None:
        new = convert_to_messages(items[self.seen :])
        if self.seen == 0 and items:
            self.first = items[0]
            if self.include_system and isinstance(new[0], SystemMessage):
                self._set_system(new.pop(0))
        for message in new:
            self._add(message)
        if items:
            self.last, self.seen = items[-1], len(items)

    def _set_system(self, message: BaseMessage) -> None:
        self.system = message
        tokens = self.tokenizer.message_tokens(to_openai(message))
        if tokens > self.room:
            alone = tokens + self.max_tokens - self.room
            raise PinnedOverBudgetError(
                f"the system message alone makes a request of {alone} tokens,"
                f" over max_tokens={self.max_tokens}"
            )
        self.room -= tokens

    def _add(self, message: BaseMessage) -> None:
        tokens = self.tokenizer.message_tokens(to_openai(message))
        at = _place(self.spans, message, tokens)
        if at is not None and at >= self.cut:
            self.total += tokens
        while self.total > self.room and self.cut < len(self.spans):
            self.total -= self.spans[self.cut].tokens
            self.cut += 1
        self._compact()

    def _compact(self) -> None:
        """Forget spans before the cut (amortized O(1)); the newest span stays, for its
        tool results."""
        drop = min(self.cut, len(self.spans) - 1)
        if drop > 64 and drop > len(self.spans) // 2:
            del self.spans[:drop]
            self.cut -= drop
            self.start = max(0, self.start - drop)

    def _starts(self) -> bool:
        """Whether the span at ``start`` begins with a type ``start_on`` accepts."""
        return _is_type(self.spans[self.start].messages[0], self.start_on)

    def result(self) -> list[BaseMessage]:
        self.start = max(self.start, self.cut)
        while self.start_on and self.start < len(self.spans) and not self._starts():
            self.start += 1
        kept = [m for span in self.spans[self.start :] for m in span.messages]
        return [self.system, *kept] if self.system is not None else kept


class _TrimCache:
    """The trim states of recent histories, found by the identity of a history's first
    item; at most ``size`` of them, the least recently used forgotten first."""

    def __init__(self, size: int = 256) -> None:
        self.size = size
        self._states: OrderedDict[tuple[Any, ...], list[_Trim]] = OrderedDict()
        self._count = 0
        self.lock = threading.Lock()

    def find(self, key: tuple[Any, ...], items: Sequence[Any]) -> _Trim | None:
        for state in self._states.get(key, ()):
            if state.continues(items):
                self._states.move_to_end(key)
                return state
        return None

    def put(self, key: tuple[Any, ...], state: _Trim) -> None:
        self._states.setdefault(key, []).insert(0, state)
        self._states.move_to_end(key)
        self._count += 1
        while self._count > self.size:
            oldest = next(iter(self._states))
            states = self._states[oldest]
            states.pop()
            self._count -= 1
            if not states:
                del self._states[oldest]

    def discard(self, key: tuple[Any, ...], state: _Trim) -> None:
        states = self._states.get(key, [])
        if state in states:
            states.remove(state)
            self._count -= 1
            if not states:
                del self._states[key]

    def clear(self) -> None:
        with self.lock:
            self._states.clear()
            self._count = 0


_CACHE = _TrimCache()


@overload
def trim_messages(
    messages: Sequence[Any] | PromptValue,
    *,
    max_tokens: int,
    token_counter: str | Callable[..., int] | Any = None,
    strategy: Literal["last"] = "last",
    include_system: bool = False,
    start_on: MessageTypes | None = None,
    allow_partial: bool = False,
    end_on: MessageTypes | None = None,
    text_splitter: Any = None,
) -> list[BaseMessage]: ...


@overload
def trim_messages(
    messages: None = None,
    *,
    max_tokens: int,
    token_counter: str | Callable[..., int] | Any = None,
    strategy: Literal["last"] = "last",
    include_system: bool = False,
    start_on: MessageTypes | None = None,
    allow_partial: bool = False,
    end_on: MessageTypes | None = None,
    text_splitter: Any = None,
) -> Runnable[Any, list[BaseMessage]]: ...


def trim_messages(
    messages: Sequence[Any] | PromptValue | None = None,
    *,
    max_tokens: int,
    token_counter: str | Callable[..., int] | Any = None,
    strategy: Literal["last"] = "last",
    include_system: bool = False,
    start_on: MessageTypes | None = None,
    allow_partial: bool = False,
    end_on: MessageTypes | None = None,
    text_splitter: Any = None,
) -> list[BaseMessage] | Runnable[Any, list[BaseMessage]]:
    """The newest whole messages whose prompt fits in ``max_tokens``; LangChain's
    ``trim_messages(strategy="last")``, with tool calls kept with their results.

    ``token_counter`` is a model name (exact counts, default ``"gpt-4o"``: the
    result's prompt, framing and reply priming included, as
    ``ctxwindow.count_tokens`` counts it, is at most ``max_tokens``), or what
    LangChain takes: a function of a list of messages or of one message, a
    chat model, or ``"approximate"`` — counted as LangChain would (the whole
    result, system message included), without the cache. An AI message with
    tool calls and its tool results are kept or left out together, so a tool
    result never loses its call; a tool result with no call before it in the
    input is never kept first. ``include_system`` keeps a system message at
    index 0 (``PinnedOverBudgetError`` if it alone is over ``max_tokens``);
    ``start_on`` then leaves out kept messages until one of those types starts
    a unit. Without ``messages`` it returns a ``Runnable``, as LangChain's does.

    Called turn after turn on one growing history (the same message objects,
    new ones appended: a list, or LangGraph state), a model-name count costs
    only the new messages: the state of up to 256 histories is cached, found
    by the identity of the first message and checked by the identity of the
    last one seen and the length. Replacing, removing or editing earlier
    messages in place is not seen: ``trim_messages.cache_clear()`` forgets.

    Not supported (``ValueError``): ``strategy="first"``, ``allow_partial``
    (it would split a message) and ``end_on``.
    """
    _check_supported(strategy, allow_partial, end_on)
    if messages is None:

        def trim(given: Sequence[Any] | PromptValue) -> list[BaseMessage]:
            return _trim(given, max_tokens, token_counter, include_system, start_on)

        return RunnableLambda(trim, name="trim_messages")
    return _trim(messages, max_tokens, token_counter, include_system, start_on)


def _trim(
    messages: Sequence[Any] | PromptValue,
    max_tokens: int,
    counter: Any,
    include_system: bool,
    start_on: Any,
) -> list[BaseMessage]:
    items = messages.to_messages() if isinstance(messages, PromptValue) else messages
    items = items if isinstance(items, Sequence) else list(items)
    if counter is None or (isinstance(counter, str) and counter != "approximate"):
        return _trim_exact(items, max_tokens, counter or "gpt-4o", include_system, start_on)
    return _trim_counted(items, max_tokens, counter, include_system, start_on)


def _check_supported(strategy: str, allow_partial: bool, end_on: Any) -> None:
    if strategy != "last":
        raise ValueError(
            f"strategy={strategy!r}: this trim_messages keeps the newest messages only"
            " (strategy='last'); use langchain_core.messages.trim_messages for 'first'"
        )
    if allow_partial:
        raise ValueError("allow_partial=True would split a message: ctxwindow never does")
    if end_on is not None:
        raise ValueError("end_on is not supported: use start_on, or LangChain's trim_messages")


def _trim_exact(
    items: Sequence[Any], max_tokens: int, model: str, include_system: bool, start_on: Any
) -> list[BaseMessage]:
    if not isinstance(max_tokens, int) or max_tokens < 1:
        raise ValueError(f"max_tokens must be a positive integer, got {max_tokens!r}")
    if not items:
        return []
    key = (model, max_tokens, include_system, _key_of(start_on), id(items[0]))
    with _CACHE.lock:
        state = _CACHE.find(key, items)
        if state is None:
            state = _Trim(chat_tokenizer(model), max_tokens, include_system, start_on)
            _CACHE.put(key, state)
        try:
            state.extend(items)
        except BaseException:
            _CACHE.discard(key, state)  # half extended: never to be continued
            raise
        return state.result()


def _key_of(start_on: Any) -> Any:
    return tuple(start_on) if isinstance(start_on, (list, tuple)) else start_on


trim_messages.cache_clear = _CACHE.clear  # type: ignore[attr-defined]


def _trim_counted(
    items: Sequence[Any], max_tokens: int, counter: Any, include_system: bool, start_on: Any
) -> list[BaseMessage]:
    """The same choice with a LangChain-style counter: a binary search over whole units."""
    count = _list_counter(counter)
    messages = convert_to_messages(items)
    system = include_system and messages and isinstance(messages[0], SystemMessage)
    head = messages[:1] if system else []
    spans = _spans(messages[len(head) :], lambda _: 0)

    def kept(first: int) -> list[BaseMessage]:
        return [*head, *(m for span in spans[first:] for m in span.messages)]

    low, high = 0, len(spans)  # the oldest span kept: the smallest whose suffix fits
    while low < high:
        mid = (low + high) // 2
        if count(kept(mid)) <= max_tokens:
            high = mid
        else:
            low = mid + 1
    while start_on and low < len(spans) and not _is_type(spans[low].messages[0], start_on):
        low += 1
    return kept(low)


def _list_counter(counter: Any) -> Callable[[list[BaseMessage]], int]:
    """LangChain's reading of ``token_counter``: a model, a per-message function (its first
    parameter annotated ``BaseMessage``, also as a string) or a list function."""
    if counter == "approximate":
        from langchain_core.messages.utils import count_tokens_approximately

        return count_tokens_approximately
    if hasattr(counter, "get_num_tokens_from_messages"):
        return cast(Callable[[list[BaseMessage]], int], counter.get_num_tokens_from_messages)
    if not callable(counter):
        raise ValueError(f"token_counter must be a model name or a callable, got {counter!r}")
    parameters = list(inspect.signature(counter).parameters.values())
    if parameters and parameters[0].annotation in (BaseMessage, "BaseMessage"):
        return lambda messages: sum(counter(m) for m in messages)
    return cast(Callable[[list[BaseMessage]], int], counter)


# -- the agent middleware --------------------------------------------------------------------

_LAST_ID = "langchain_last_id"  # entry metadata: the LangChain id of its batch's last message
_UNKNOWN = object()


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
        return await handler(request.override(messages=cast(Any, _from_context(context))))

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
        return request.override(messages=cast(Any, _from_context(context)))

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
