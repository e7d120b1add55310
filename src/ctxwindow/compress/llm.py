"""Summaries by a model, through an injected async completion function.

``LLMSummarizer`` never loses the original and never blocks a conversation:
when the model fails, times out, or replies with nothing or too much, the
``fallback`` compressor's result is used; the sync ``__call__`` does not wait
for the network at all (it returns a cached summary, or the fallback's result
and starts the summary in the background for the next call).

What a summary looks like: one entry replaces one entry with the same role
(only the text content changes, tool calls and ``tool_call_id`` stay); several
entries become one ``user`` entry of kind ``"summary"`` headed
``Summary of earlier conversation:`` (see :mod:`ctxwindow.compress.prompt`),
placed at the first entry's ``seq``, with ``metadata["summarized_ids"]``.
Pass whole tool-call units: a merge drops the calls and their results together.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import weakref
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from ctxwindow.compress import prompt
from ctxwindow.compress.background import Background
from ctxwindow.compress.base import Compressor, compressed, framing_tokens, has_text, total_tokens
from ctxwindow.compress.cache import SummaryCache
from ctxwindow.compress.extractive import Extractive
from ctxwindow.errors import CompressionError
from ctxwindow.messages import Entry, Message
from ctxwindow.tokens.chat import ChatTokenizer

logger = logging.getLogger("ctxwindow.compress")

Complete = Callable[[list[Message]], Awaitable[str]]


@dataclass(frozen=True)
class _Request:
    key: str
    messages: list[Message]
    heading: str | None  # None: a single entry keeps its role


class LLMSummarizer:
    """Summarize entries with a model; fall back to ``fallback`` whenever that fails.

    ``complete(messages) -> str`` is any async chat completion (see
    ``openai_completion``). At most ``max_concurrency`` calls are in flight per
    event loop; each may take ``timeout`` seconds. Summaries are cached by a
    blake2b hash of the request (at most ``cache_size``, least recently used
    out). A target that leaves the summary fewer than ``min_summary_tokens``
    goes straight to the fallback.
    """

    name = "llm"

    def __init__(
        self,
        complete: Complete,
        tokenizer: ChatTokenizer,
        *,
        timeout: float = 20.0,
        max_concurrency: int = 4,
        cache_size: int = 256,
        fallback: Compressor | None = None,
        min_summary_tokens: int = 16,
    ) -> None:
        if max_concurrency < 1 or timeout <= 0 or cache_size < 0:
            raise CompressionError("max_concurrency >= 1, timeout > 0 and cache_size >= 0")
        self.complete = complete
        self.tokenizer = tokenizer
        self.timeout = timeout
        self.max_concurrency = max_concurrency
        self.fallback: Compressor = fallback if fallback is not None else Extractive(tokenizer)
        self.min_summary_tokens = min_summary_tokens
        self.cache = SummaryCache(cache_size)
        self._background = Background()
        self._lock = threading.Lock()
        self._in_flight: set[str] = set()
        self._semaphores: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore]
        self._semaphores = weakref.WeakKeyDictionary()

    def __call__(self, entries: Sequence[Entry], target_tokens: int) -> list[Entry]:
        """The cached summary, else the fallback's result now and the summary later."""
        if total_tokens(entries) <= target_tokens:
            return list(entries)
        request = self._request(entries, target_tokens)
        if request is None:
            return self.fallback(entries, target_tokens)
        text = self.cache.get(request.key)
        if text is not None:
            return self._build(entries, request, text)
        self._start(entries, target_tokens, request)
        return self.fallback(entries, target_tokens)

    async def summarize(self, entries: Sequence[Entry], target_tokens: int) -> list[Entry]:
        """The model's summary (awaited, within ``timeout``), else the fallback's result."""
        if total_tokens(entries) <= target_tokens:
            return list(entries)
        request = self._request(entries, target_tokens)
        if request is None:
            return self.fallback(entries, target_tokens)
        text = self.cache.get(request.key)
        if text is None:
            text = await self._fetch(entries, target_tokens, request)
        if text is None:
            return self.fallback(entries, target_tokens)
        return self._build(entries, request, text)

    async def drain(self) -> None:
        """Wait until the summaries started in the background are done."""
        await self._background.drain()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the background thread's summaries are done (False on timeout).

        Summaries started on a running event loop are its tasks: ``await drain()`` there.
        """
        return self._background.wait(timeout)

    def close(self) -> None:
        """Cancel unfinished background summaries and stop the background thread."""
        self._background.close()

    def __enter__(self) -> LLMSummarizer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- the request -------------------------------------------------------------

    def _request(self, entries: Sequence[Entry], target_tokens: int) -> _Request | None:
        """What to ask the model, or None when a summary cannot help."""
        if len(entries) == 1:
            if not has_text(entries[0]):
                return None
            text, heading = entries[0].message["content"], None
            room = target_tokens - framing_tokens(self.tokenizer, entries[0].message)
        else:
            text = prompt.transcript(entries)
            heading = prompt.heading_for(text)
            room = target_tokens - self.tokenizer.message_tokens(
                prompt.summary_message(heading, "")
            )
        if room < self.min_summary_tokens:
            return None
        messages = prompt.prompt_messages(text, room)
        return _Request(prompt.digest(messages, target_tokens), messages, heading)

    async def _fetch(
        self, entries: Sequence[Entry], target_tokens: int, request: _Request
    ) -> str | None:
        """The model's summary text if it is usable (and then cached), else None."""
        try:
            async with self._semaphore():
                reply = await asyncio.wait_for(self.complete(request.messages), self.timeout)
        except Exception as exc:  # an injected function may raise anything: fall back
            logger.warning("LLM summary failed (%r); using %s", exc, self.fallback.name)
            return None
        text = reply.strip() if isinstance(reply, str) else ""
        if not text or total_tokens(self._build(entries, request, text)) > target_tokens:
            logger.warning("LLM summary empty or over %d tokens; unused", target_tokens)
            return None
        self.cache.put(request.key, text)
        return text

    def _semaphore(self) -> asyncio.Semaphore:
        loop = asyncio.get_running_loop()
        with self._lock:
            semaphore = self._semaphores.get(loop)
            if semaphore is None:
                semaphore = self._semaphores[loop] = asyncio.Semaphore(self.max_concurrency)
            return semaphore

    def _start(self, entries: Sequence[Entry], target_tokens: int, request: _Request) -> None:
        """Start fetching the summary in the background, once per request."""
        with self._lock:
            if request.key in self._in_flight:
                return
            self._in_flight.add(request.key)
        snapshot = list(entries)

        async def work() -> None:
            try:
                await self._fetch(snapshot, target_tokens, request)
            finally:
                with self._lock:
                    self._in_flight.discard(request.key)

        if not self._background.submit(work):
            with self._lock:
                self._in_flight.discard(request.key)

    # -- the result --------------------------------------------------------------

    def _build(self, entries: Sequence[Entry], request: _Request, text: str) -> list[Entry]:
        if request.heading is None:
            message = dict(entries[0].message, content=text)
            return [compressed(entries[0], message, self.tokenizer, self.name)]
        message = prompt.summary_message(request.heading, text)
        return [merged_entry(entries, message, self.tokenizer, self.name)]


def merged_entry(
    entries: Sequence[Entry],
    message: Message,
    tokenizer: ChatTokenizer,
    by: str,
    entry_id: str | None = None,
    tokens: int | None = None,
) -> Entry:
    """One ``summary`` entry standing for ``entries``, at the first one's place.

    Its id is ``entry_id``, else derived from the ids it stands for; ``tokens``
    are the message's, counted here unless the caller has counted them.
    """
    tokens = tokenizer.message_tokens(message) if tokens is None else tokens
    ids = prompt.summarized_ids(entries)
    record = {"by": by, "from_tokens": total_tokens(entries), "to_tokens": tokens}
    return Entry(
        message=message,
        tokens=tokens,
        seq=entries[0].seq,
        id=entry_id or f"summary-{prompt.digest(list(ids))}",
        pinned=any(entry.pinned for entry in entries),
        priority=max(entry.priority for entry in entries),
        kind="summary",
        created_at=max(entry.created_at for entry in entries),
        metadata={"compressed": record, "summarized_ids": ids},
    )
