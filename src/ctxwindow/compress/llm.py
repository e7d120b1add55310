"""Summaries by a model, through an injected async completion function.

``LLMSummarizer`` never loses the original and never blocks a conversation:
when the model fails, times out, or replies with nothing, too much, or text
that is no summary (an error, a refusal, the request echoed: see
:mod:`ctxwindow.compress.replies`), the ``fallback`` compressor's result is
used, each entry it made saying why in its compression record
(``metadata["compressed"]["fallback"]``, which a window's report shows), and
the failure is counted (``failures``); the sync ``__call__`` does not wait
for the network at all (it returns a cached summary, or the fallback's result
and starts the summary in the background for the next call).

The summary is a request of its own, made by the summarizer with its own
prompt, not part of the user's call; ``openai_completion`` asks for it
unstreamed, and a background summary runs in a fresh context (see
:mod:`ctxwindow.compress.background`), so nothing of it reaches the user but
the summary, checked and used. (An awaited ``summarize`` runs in its
caller's context: a ``complete`` of your own must not stream to your user.)

What a summary looks like: one entry replaces one entry with the same role
(only the text content changes, tool calls and ``tool_call_id`` stay); several
entries become one ``user`` entry of kind ``"summary"`` headed
``Summary of earlier conversation:`` (see :mod:`ctxwindow.compress.prompt`),
placed at the first entry's ``seq``, with ``metadata["summarized_ids"]``.
Pass whole tool-call units: a merge drops the calls and their results together.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import threading
import weakref
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from ctxwindow.compress import prompt, replies
from ctxwindow.compress.background import Background
from ctxwindow.compress.base import Compressor, compressed, framing_tokens, has_text, total_tokens
from ctxwindow.compress.cache import SummaryCache
from ctxwindow.compress.extractive import Extractive
from ctxwindow.errors import CompressionError
from ctxwindow.messages import Entry, Message
from ctxwindow.tokens.chat import ChatTokenizer

logger = logging.getLogger("ctxwindow.compress")

Complete = Callable[[list[Message]], Awaitable[str]]
UNUSED = "the model's summary was not used: {why}"
_REMEMBERED = 256  # requests whose last failure is kept, for the sync call's fallback to say


@dataclass(frozen=True)
class _Request:
    key: str
    messages: list[Message]
    heading: str | None  # None: a single entry keeps its role
    text: str  # what the model is asked to summarize


class LLMSummarizer:
    """Summarize entries with a model; fall back to ``fallback`` whenever that fails.

    ``complete(messages) -> str`` is any async chat completion (see
    ``openai_completion``). At most ``max_concurrency`` calls are in flight per
    event loop; each may take ``timeout`` seconds. Summaries are cached by a
    blake2b hash of the request (at most ``cache_size``, least recently used
    out). A target that leaves the summary fewer than ``min_summary_tokens``
    goes straight to the fallback.

    ``failures`` counts the model's summaries not used, by kind: ``"failed"``
    (the call raised), ``"timeout"``, ``"empty"``, ``"not_a_summary"`` (an
    error, a refusal, the request echoed), ``"over_target"``;
    ``last_failure`` says why the last one was not. Read them for metrics.
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
        self.failures: Counter[str] = Counter()
        self.last_failure: str | None = None
        self._why: dict[str, str] = {}  # request key -> why its last summary was not used
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
        why = self._why.get(request.key)  # read first: the summary started may fail at once
        self._start(entries, target_tokens, request)
        return self._fall_back(entries, target_tokens, why)

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
            return self._fall_back(entries, target_tokens, self._why.get(request.key))
        return self._build(entries, request, text)

    def ready(self, entries: Sequence[Entry], target_tokens: int) -> list[Entry] | None:
        """The model's summary of ``entries`` within ``target_tokens`` if it has come (it is
        cached), without asking for it; else None."""
        if total_tokens(entries) <= target_tokens:
            return None
        request = self._request(entries, target_tokens)
        text = None if request is None else self.cache.get(request.key)
        return None if request is None or text is None else self._build(entries, request, text)

    def failure(self, entries: Sequence[Entry], target_tokens: int) -> str | None:
        """Why the model's summary of ``entries`` within ``target_tokens`` was last not
        used; None when it was, is still on its way, or was never asked for."""
        if total_tokens(entries) <= target_tokens:
            return None
        request = self._request(entries, target_tokens)
        return None if request is None else self._why.get(request.key)

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
        return _Request(prompt.digest(messages, target_tokens), messages, heading, text)

    async def _fetch(
        self, entries: Sequence[Entry], target_tokens: int, request: _Request
    ) -> str | None:
        """The model's summary text if it is usable (and then cached), else None (the
        failure counted, and kept as the request's)."""
        try:
            async with self._semaphore():
                reply = await asyncio.wait_for(self.complete(request.messages), self.timeout)
        except asyncio.TimeoutError:
            self._failed(request, "timeout", f"no reply within {self.timeout:g} s")
            return None
        except Exception as exc:  # an injected function may raise anything: fall back
            self._failed(request, "failed", f"the call failed: {_said(exc)}")
            return None
        text = reply.strip() if isinstance(reply, str) else ""
        kind, why = self._judge(entries, target_tokens, request, text)
        if why is not None:
            self._failed(request, kind, why)
            return None
        with self._lock:
            self._why.pop(request.key, None)
        self.cache.put(request.key, text)
        return text

    def _judge(
        self, entries: Sequence[Entry], target_tokens: int, request: _Request, text: str
    ) -> tuple[str, str | None]:
        """Why the reply ``text`` cannot be the summary, and its kind; None when it can."""
        why = replies.unusable(text, request.text, transcript=request.heading is not None)
        if why is not None:
            return ("not_a_summary" if text else "empty"), why
        if total_tokens(self._build(entries, request, text)) > target_tokens:
            return "over_target", f"over {target_tokens:,} tokens"
        return "", None

    def _failed(self, request: _Request, kind: str, why: str) -> None:
        """Count a summary not used, and keep why (for the request's fallback to say)."""
        logger.warning("LLM summary not used (%s); using %s", why, self.fallback.name)
        with self._lock:
            self.failures[kind] += 1
            self.last_failure = self._why[request.key] = why
            while len(self._why) > _REMEMBERED:
                del self._why[next(iter(self._why))]

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

    def _fall_back(self, entries: Sequence[Entry], target: int, why: str | None) -> list[Entry]:
        """The fallback's result; the entries it made say ``why`` the model's summary was
        not used, when it is known (a failure, not a summary still on its way)."""
        result = self.fallback(entries, target)
        if why is None:
            return result
        ours = {id(entry) for entry in entries}
        note = UNUSED.format(why=why)
        return [entry if id(entry) in ours else noted(entry, note) for entry in result]

    def _build(self, entries: Sequence[Entry], request: _Request, text: str) -> list[Entry]:
        if request.heading is None:
            message = dict(entries[0].message, content=text)
            return [compressed(entries[0], message, self.tokenizer, self.name)]
        message = prompt.summary_message(request.heading, text)
        return [merged_entry(entries, message, self.tokenizer, self.name)]


def noted(entry: Entry, note: str) -> Entry:
    """``entry`` (a fallback's form) with ``note``, why it is, in its compression record."""
    record = entry.metadata.get("compressed")
    if not isinstance(record, dict):
        return entry
    metadata = dict(entry.metadata, compressed=dict(record, fallback=note))
    return dataclasses.replace(entry, metadata=metadata)


def fallback_note(entries: Sequence[Entry]) -> str | None:
    """Why ``entries`` are a fallback's form (the first such note), or None."""
    for entry in entries:
        record = entry.metadata.get("compressed")
        note = record.get("fallback") if isinstance(record, dict) else None
        if isinstance(note, str):
            return note
    return None


def _said(exc: BaseException) -> str:
    """An exception in one line of at most 200 characters (an HTML error page is longer)."""
    text = " ".join(f"{type(exc).__name__}: {exc}".split())
    return text if len(text) <= 200 else text[:199] + "…"


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
