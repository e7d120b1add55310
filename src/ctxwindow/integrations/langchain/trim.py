"""``trim_messages``: LangChain's ``trim_messages(strategy="last")`` with exact counts.

Tool calls are kept or left out with their results, and a history trimmed
turn after turn costs only its new messages (``_Trim``, cached by
``_TrimCache``).
"""

from __future__ import annotations

import inspect
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Union, cast, overload

from langchain_core.messages import BaseMessage, SystemMessage, ToolMessage, convert_to_messages
from langchain_core.prompt_values import PromptValue
from langchain_core.runnables import Runnable, RunnableLambda

from ctxwindow.errors import PinnedOverBudgetError
from ctxwindow.integrations.langchain.convert import to_openai
from ctxwindow.tokens.chat import ChatTokenizer
from ctxwindow.tokens.defaults import chat_tokenizer

MessageTypes = Union[str, type[BaseMessage], Sequence[Union[str, type[BaseMessage]]]]  # noqa: UP007


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
        return _runnable(max_tokens, token_counter, include_system, start_on)
    return _trim(messages, max_tokens, token_counter, include_system, start_on)


def _runnable(
    max_tokens: int, counter: Any, include_system: bool, start_on: Any
) -> Runnable[Any, list[BaseMessage]]:
    """``trim_messages`` with these settings as a ``Runnable`` (what LangChain's returns
    when given no messages)."""

    def trim(given: Sequence[Any] | PromptValue) -> list[BaseMessage]:
        return _trim(given, max_tokens, counter, include_system, start_on)

    return RunnableLambda(trim, name="trim_messages")


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
