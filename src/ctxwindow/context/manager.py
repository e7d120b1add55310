# Generated from src/ctxwindow/context/aio.py by tools/unasync.py: do not edit.
# Edit the async source, then run `python tools/unasync.py`.
"""``ContextManager``: sessions kept in a store, contexts built within a budget.

The async manager is written once (``context/aio.py``); the sync one
(``context/manager.py``) is generated from it by ``tools/unasync.py``.
The archive's I/O (indexing turns in the background, searching for recall)
is an ``Archiver``'s (``context/archiver/``); blocking work goes through
``ctxwindow.concurrency``: a worker thread for the async manager, a plain
call for the sync one.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from ctxwindow.concurrency.sync import run_blocking
from ctxwindow.context import checkpoints
from ctxwindow.context.archiver.sync import Archiver
from ctxwindow.context.batch import (
    HASH_KEY,
    batch_key,
    check_same_request,
    hash_of_messages,
    validated,
)
from ctxwindow.context.contracts import ArchiveLike, CoreSettings, EventHook, RedactAt
from ctxwindow.context.core import Core
from ctxwindow.context.policy import Policy
from ctxwindow.context.session import HotSessions, Session
from ctxwindow.context.turns import HELD, holding
from ctxwindow.errors import CtxWindowError, StoreError
from ctxwindow.messages import Entry, Unit, stored_tokens
from ctxwindow.policies import Context
from ctxwindow.policies._deprecated import keyword_only
from ctxwindow.policies.rules import text_of
from ctxwindow.recall import RecallPolicy
from ctxwindow.redact.redactor import RedactFn
from ctxwindow.stores.base import Store, check_after, check_session_id
from ctxwindow.tokens.registry import ModelRegistry

logger = logging.getLogger("ctxwindow.context")


class ContextManager:
    """Sessions kept in a store, contexts built within a model's budget.

    ``store`` and ``model`` may come by position, everything else by keyword
    (``policy``, ``archive``, ``summarizer`` and ``redactor`` by position are
    deprecated: they warn).

    ``redactor`` masks secrets. With ``redact="storage"`` (the default) it runs
    before a message is stored, so neither the store nor any context holds
    them; with ``redact="context"`` the store keeps messages as sent and each
    built context is redacted (every message once), still within the budget.
    ``lock_timeout`` bounds how long a call waits for a session that another
    thread or process holds (``turn``); None waits as long as it takes.
    ``on_event(name, value)`` is told of work as it happens, for metrics:
    ``("compressed", 1)`` per compressed message, ``("summary_updated", 1)``
    per fold into the rolling summary, ``("recall_seconds", s)`` per archive
    search. ``recall`` decides which archived turns come back and how much of
    the budget they get (``ctxwindow.recall.RecallPolicy``). ``hot_sessions``
    is how many sessions keep their window in memory, or a ``HotSessions`` shared
    with other managers over the same store (one window a session, whichever
    model asks). ``models`` resolves ``model`` (its window, limits and counter;
    default: the process's registry, ``ctxwindow.tokens.registry``). ``with``
    closes the store (see ``close``). ``prompt_cache`` (the default) keeps the
    context's prefix the same from turn to turn between the window's steps, so
    that a provider's prompt cache serves it: the default policy evicts in
    steps, and recalled turns stay where they were first put (docs/caching.md).
    The example is in ``ctxwindow.context``.

    With an ``archive``, every turn is archived in the background, between
    requests; a search first archives what its session still has queued, so
    recall sees every turn added before it. With ``search_batches`` it does
    so only when what waits fits in so many batches (of up to 256 turns): a
    longer backlog — a long session loaded beside an archive that does not
    hold it yet — is left to the worker, and searches use what is indexed so
    far without waiting (the service uses 1, so that a session's first
    request does not wait seconds).
    The archive is used from a worker thread: it must be safe across threads
    (both built-in ones are).
    """

    @keyword_only("policy", "archive", "summarizer", "redactor")  # in their old positional order
    def __init__(
        self,
        store: Store | str = "sqlite:///ctxwindow.db",
        model: str = "gpt-4o",
        *,
        policy: Policy | None = None,
        archive: ArchiveLike | None = None,
        summarizer: Any = None,
        redactor: RedactFn | None = None,
        budget: int | float = 0.75,
        reserve_output: int | None = None,
        recall: RecallPolicy | None = None,
        prefetch: bool = True,
        hot_sessions: int | HotSessions = 256,
        lock_timeout: float | None = None,
        redact: RedactAt = "storage",
        on_event: EventHook | None = None,
        search_batches: int | None = None,
        models: ModelRegistry | None = None,
        prompt_cache: bool = True,
    ) -> None:
        if isinstance(store, str):
            from ctxwindow.stores.url import open_store

            store = open_store(store)
        self.store: Store = store
        if search_batches is not None and search_batches < 1:
            raise ValueError(f"search_batches must be None or at least 1, got {search_batches}")
        self.prefetch = prefetch
        self.lock_timeout = lock_timeout
        self.search_batches = search_batches
        self._core = Core(
            CoreSettings(
                model=model, policy=policy, archive=archive, summarizer=summarizer,
                redactor=redactor, budget=budget, reserve_output=reserve_output,
                recall=recall or RecallPolicy(), hot_sessions=hot_sessions, redact=redact,
                on_event=on_event, models=models, prompt_cache=prompt_cache,
            )
        )  # fmt: skip
        self._archiver = Archiver(self.store, self._core)
        # Sessions whose window this turn has not checked against the store yet: the
        # turn's first append checks it as it stores (``append_after``), else its first read.
        self._unchecked: set[str] = set()

    @property
    def queued(self) -> int:
        """Turns waiting for the archive, or being indexed now (0 without one): indexed soon,
        in the background."""
        return len(self._archiver.queue) + len(self._archiver.indexing)

    @property
    def budget(self) -> int:
        """The default context budget in tokens."""
        return self._core.budget

    def add(
        self,
        session_id: str,
        message: Mapping[str, Any],
        *,
        pin: bool = False,
        metadata: Mapping[str, Any] | None = None,
        kind: str | None = None,
        idempotency_key: str | None = None,
    ) -> Entry:
        """Store a message (durably, first), then add it to the session's window.

        With ``prefetch`` a user message's recall search runs now, and the
        ``build`` that follows reuses it.
        """
        with self.turn(session_id):

            def prepared(session: Session) -> list[Entry]:
                return [self._core.prepare(session, message, pin, metadata, kind)]

            session, stored, new = self._append(session_id, prepared, idempotency_key)
            entry = stored[0]
            if new:
                self._core.restore(session, stored)
            self._archiver.later(session)
            self._checkpoint(session)
            if self.prefetch and entry.message["role"] == "user":
                self._candidates(session, text_of(entry.message), self.budget)
            return stored[0]

    def extend(
        self,
        session_id: str,
        messages: Sequence[Mapping[str, Any]],
        *,
        metadata: Mapping[str, Any] | None = None,
        idempotency_key: str | None = None,
        max_messages: int | None = None,
        request_hash: str | None = None,
        max_tokens: int | None = None,
    ) -> list[Entry]:
        """Store several messages in order, in one turn, as one atomic, idempotent batch.

        Every message is validated (tool calls and results in order), redacted
        and tokenized before any is stored; then all are stored in one append,
        or none. With ``idempotency_key`` a retry stores nothing and returns
        what the first call stored — if it is the same request: the key is
        bound to ``request_hash`` (default: a hash of the messages), and
        another request with it raises ``IdempotencyConflictError``.
        ``max_messages`` refuses (``SessionFullError``, nothing stored) a
        batch that would take the session over that many messages.
        ``max_tokens``, the budget of the ``build`` that sends the batch next,
        refuses (nothing stored) a batch that build could not send: tool calls
        of the batch without their results (``InvalidMessageError``), or a
        question that cannot fit even compressed (``MessageTooLargeError``).
        """
        checked = validated(messages)
        key = request = None
        if idempotency_key is not None:
            key, request = batch_key(idempotency_key), request_hash or hash_of_messages(checked)
            metadata = {**(metadata or {}), HASH_KEY: request}
        budget = None if max_tokens is None else min(max_tokens, self.budget)

        def prepared(session: Session) -> list[Entry]:
            return self._core.prepare_batch(session, checked, metadata, max_messages, budget)

        with self.turn(session_id):
            session, stored, new = self._append(session_id, prepared, key)
            if not new:  # the key's first batch: the answer, if it is the same request
                assert idempotency_key is not None and request is not None  # only a key replays
                check_same_request(idempotency_key, stored, request)
                return stored
            self._core.restore(session, stored)
            self._archiver.later(session)
            self._checkpoint(session)
            if self.prefetch and (asked := [e for e in stored if e.message["role"] == "user"]):
                # at the budget of the build that sends the batch next: it finds them cached
                room = self.budget if budget is None else budget
                self._candidates(session, text_of(asked[-1].message), room)
            return stored

    def build(
        self,
        session_id: str,
        query: str | None = None,
        max_tokens: int | None = None,
        *,
        sent: bool = True,
    ) -> Context:
        """The context to send now: window + recalled units, within the budget, with a report.

        When the session's newest message is a user turn (the question), the
        context ends with it: whole if it fits, else compressed; if even
        compressed it cannot fit beside the system prompt (and what else is
        pinned), ``MessageTooLargeError`` (a ``BudgetError``) says by how much.
        ``sent=False``: a context that is not sent (say, only counted); what
        it leaves out is then no hint for the window's next step (see
        ``Window.build``), so building it changes nothing.
        """
        with self.turn(session_id):
            session = self._session(session_id)
            budget = min(max_tokens or self.budget, self.budget)
            query = self._core.query_of(session, query)
            found = self._candidates(session, query, budget)
            question = session.question[0].seq if session.question is not None else None
            narrow = budget < self.budget
            recalled = self._core.recalled(session, budget, found, question, narrow=narrow)
            return self._core.context(session, budget, recalled, session.question, sent=sent)

    def preview(
        self, session_id: str, message: Mapping[str, Any], max_tokens: int | None = None
    ) -> Context:
        """The context ``build`` would give if ``message`` were added now; nothing is stored.

        The message's text is the recall query and its tokens are kept free
        for it; it ends the returned context (a user turn compressed, as
        ``build`` would, if it does not fit whole). Use it to check what the
        model would see, or to evaluate many questions on one state of a session.
        """
        with self.turn(session_id):
            session = self._session(session_id)
            budget = min(max_tokens or self.budget, self.budget)
            new = self._core.previewed(session, message, budget)
            room = budget - new.tokens
            found = self._candidates(session, text_of(new.message), room)
            narrow = budget < self.budget
            recalled = self._core.recalled(session, room, found, preview=True, narrow=narrow)
            built = self._core.context(session, room, recalled, None, sent=False)
            row = session.window.previewed_row(new, seq=session.last_seq + 1)
            return built.plus(row, new.message, budget=budget)

    def last_seq(self, session_id: str) -> int:
        """The seq of the session's newest stored entry (0: none), as the store has it now
        (the window catches up first); within a turn, nobody else can change it."""
        with self.turn(session_id):
            return (self._session(session_id)).last_seq

    def history(self, session_id: str) -> list[Entry]:
        """Every stored entry of the session, in order."""
        return self.store.load(session_id)

    def delete(self, session_id: str) -> bool:
        """Delete the session everywhere: store, window, archive."""
        with self.turn(session_id):
            self._core.forget(session_id)
            self._archiver.forget(session_id)
            return self.store.delete(session_id)

    def truncate(self, session_id: str, after: int) -> list[Entry]:
        """Remove the session's entries past seq ``after`` (every one for 0); returns them,
        oldest first (``[]`` if there were none).

        The removal is the store's (``Store.truncate``: atomic, durable,
        sequence numbers contiguous after it). The window is forgotten and
        reloaded from the store on next use, and the archive forgets the
        session, which is then archived again from what remains: recall never
        brings back a removed entry. Holds the session's turn, like ``delete``.
        """
        with self.turn(session_id):
            return self._truncate(session_id, after)

    def pop(self, session_id: str) -> Entry | None:
        """Remove the session's last entry and return it (None if it has none): ``truncate``
        of that one entry (what an agent framework's ``pop_item`` needs)."""
        with self.turn(session_id):
            last = self.store.tail(session_id, 1)
            removed = self._truncate(session_id, last[0].seq - 1) if last else []
            return removed[-1] if removed else None

    @contextmanager
    def turn(self, session_id: str, *, timeout: float | None = None) -> Iterator[None]:
        """Hold the session for several calls: nobody else adds to it meanwhile.

        Other tasks and threads, and other processes sharing the store, wait
        (up to ``timeout``, default ``lock_timeout``; then ``SessionBusyError``).
        The window catches up with what they stored before it is used: the
        turn's first append checks it as it stores (one round trip), else its
        first read of the window reads the store's newest entry. ``add``, ``build``,
        ``delete``, ``truncate`` and ``pop`` hold a turn of their own unless the
        caller holds one.
        Tasks started inside the block act within the turn (they inherit it).
        """
        held = HELD.get()
        inside = holding(held, self.store, session_id)
        if inside is None:  # held by this task or thread (or the task that started it)
            yield
            return
        wait = self.lock_timeout if timeout is None else timeout
        with self.store.lock(session_id, timeout=wait):
            HELD.set(inside)
            self._unchecked.add(session_id)
            try:
                with self._archiver.turns.of(session_id):
                    yield
            finally:
                self._unchecked.discard(session_id)
                HELD.set(held)
                self._archiver.ended(session_id)  # (a failed turn's entries too)

    def drain(self, *, backlogs: bool = True) -> None:
        """Archive every turn still queued now, rather than soon in the background.

        A batch that fails is logged and stays queued; turns left unarchived
        when the process ends are queued again when their session is next
        loaded (the archive's watermark is below them). ``backlogs=False``
        leaves the sessions that still have stored entries to read (what a
        cold load did not replay: a long backlog), for that next load.
        """
        self._archiver.drain(backlogs=backlogs)

    def close(self) -> None:
        """Archive what is still queued (``drain``), but for the stored backlogs of cold
        loads, which the sessions' next loads queue again; then close the store."""
        self._archiver.close()
        self.store.close()

    def __enter__(self) -> ContextManager:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _truncate(self, session_id: str, after: int) -> list[Entry]:
        """``truncate`` within the turn. The archive forgets the session first: should the
        store then fail, nothing was removed and the next load archives it all again."""
        check_session_id(session_id)
        check_after(after)
        last = self.store.tail(session_id, 1)
        if not last or last[0].seq <= after:
            return []
        self._core.forget(session_id)
        self._archiver.forget(session_id)
        return self.store.truncate(session_id, after)

    def _append(
        self, session_id: str, prepare: Callable[[Session], list[Entry]], key: str | None
    ) -> tuple[Session, list[Entry], bool]:
        """Store what ``prepare`` makes of the session's window, within the turn: (the
        window, current; the stored entries; False when they are ``key``'s first batch,
        stored before).

        The turn's first append checks the window as it stores (``append_after``):
        one round trip. When others stored since the window last saw the store, or
        ``prepare`` refuses what a window that may be behind holds, the window
        catches up and the entries are prepared again (a refusal then stands, unless
        ``key`` was used before: its first batch is the answer).
        """
        session = self._window(session_id)
        if session_id in self._unchecked:
            entries = _prepared_or_none(prepare, session)
            if entries is not None:
                last = (session.last_seq, session.last_id)
                stored = self.store.append_after(session_id, last, entries, idempotency_key=key)
                if stored is not None and _new(stored, entries):
                    self._unchecked.discard(session_id)  # the store's newest are the window's
                    return session, stored, True
                if stored is not None:
                    return self._session(session_id), stored, False
            session = self._session(session_id)
        try:
            entries = prepare(session)
        except CtxWindowError:
            if key is not None and (earlier := self.store.replayed(session_id, key)):
                return session, earlier, False
            raise
        stored = self.store.append(session_id, entries, idempotency_key=key)
        return session, stored, _new(stored, entries)

    def _session(self, session_id: str) -> Session:
        """The session's window, current: in memory (caught up with the store once a turn),
        else loaded (see ``_load``)."""
        if session_id in self._unchecked:
            self._unchecked.discard(session_id)
            self._catch_up(session_id)
        return self._window(session_id)

    def _window(self, session_id: str) -> Session:
        """The session's window: in memory (not checked against the store), else loaded."""
        cached = self._core.cached(session_id)
        if cached is not None:
            return cached
        self._unchecked.discard(session_id)  # loaded now: current
        session = self._load(session_id)
        self._core.keep(session)
        if self._core.archive is not None and session.last_seq:
            self._archiver.missed(session)
        self._checkpoint(session)  # a long session replayed whole: next time, less
        return session

    def _load(self, session_id: str) -> Session:
        """The session from its checkpoint and the entries after it, in one round trip
        where the store allows. Without a checkpoint this manager can use, or with too
        many entries after it, from the newest entries that fill the budget (see
        ``context/checkpoints.py``). Rebuilding the window runs off the event loop."""
        core = self._core
        limit = checkpoints.NEWEST
        checkpoint, stored = self.store.load_from_checkpoint(session_id, limit=limit)
        after = checkpoint[0] if checkpoint else 0
        last = stored[-1].seq if stored else after
        if last - after == len(stored):  # every entry after the checkpoint
            session = run_blocking(core.loaded, session_id, checkpoint, stored)
            if session is not None:
                return session
            if last <= limit:  # another window's checkpoint, a short session: replay it whole
                stored = self.store.load(session_id)
                return run_blocking(core.loaded_whole, session_id, stored)
        newest = self._newest(session_id, stored)
        earlier = self.store.earlier(session_id, newest[0].seq if newest else 0)
        return run_blocking(core.loaded_newest, session_id, earlier, newest)

    def _newest(self, session_id: str, stored: list[Entry]) -> list[Entry]:
        """The session's newest entries that fill the budget (``stored``: the newest ones
        read already), read back a page at a time."""
        budget, newest = self._core.budget, stored or self.store.tail(session_id, 1)
        tokens = sum(stored_tokens(entry) for entry in newest)
        while newest and newest[0].seq > 1 and tokens < budget:
            after = max(newest[0].seq - 1 - checkpoints.PAGE, 0)
            page = self.store.load(session_id, after=after, limit=newest[0].seq - 1 - after)
            if not page or page[-1].seq != newest[0].seq - 1:
                break  # truncated meanwhile: what is read is the newest there is
            newest = [*page, *newest]
            tokens += sum(stored_tokens(entry) for entry in page)
        return checkpoints.fill(newest, budget)

    def _checkpoint(self, session: Session) -> None:
        """Save the session's checkpoint if one is due (a failure is logged: it is a shortcut)."""
        if not checkpoints.due(session):
            return
        seq, data = checkpoints.encoded(session)
        try:
            self.store.save_checkpoint(session.id, seq, data)
        except StoreError as exc:
            logger.warning("session %r: could not save its checkpoint (%s)", session.id, exc)

    def _catch_up(self, session_id: str) -> None:
        session = self._core.cached(session_id)
        if session is None:
            return  # loaded whole on first use
        after = self._core.stale(session, self.store.tail(session_id, 1))
        if after is not None:
            newer = self.store.load(session_id, after=after)
            self._core.catch_up(session_id, session, newer)
            if self._core.cached(session_id) is None:  # deleted or rebuilt meanwhile
                self._archiver.queue.discard(session_id)
            else:
                self._archiver.later(session)

    def _candidates(self, session: Session, query: str, budget: int) -> list[tuple[float, Unit]]:
        """Archived units that match ``query``, ``(score, unit)`` best first: see
        ``Archiver.candidates`` (a search archives what its session has queued first only
        if that fits in ``search_batches`` batches)."""
        return self._archiver.candidates(session, query, budget, self.search_batches)


def _prepared_or_none(
    prepare: Callable[[Session], list[Entry]], session: Session
) -> list[Entry] | None:
    """``prepare(session)``, or None when it refuses (``session`` may be behind the store)."""
    try:
        return prepare(session)
    except CtxWindowError:
        return None


def _new(stored: Sequence[Entry], entries: Sequence[Entry]) -> bool:
    """Whether ``stored`` are the copies of ``entries`` (not a key's earlier batch)."""
    return not stored or stored[0].id == entries[0].id
