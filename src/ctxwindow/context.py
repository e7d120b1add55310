"""``ContextManager``: one object that keeps sessions and builds their contexts.

Per session it appends to a store (durably, before anything else), keeps a
window in memory (hydrated once from the store with the stored token counts),
archives what the window evicts, and builds the context for a model and a
budget: the window's messages, plus archived units recalled for the query,
placed at their original position, with a report of every decision.

``AsyncContextManager`` is the same over an ``AsyncStore`` for servers.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager, contextmanager
from contextvars import ContextVar
from dataclasses import replace
from typing import Any, Literal, Protocol

from ctxwindow.errors import (
    BudgetError,
    InvalidMessageError,
    OrphanToolResultError,
    SessionFullError,
)
from ctxwindow.messages import SYSTEM_ROLES, Entry, Message, Unit, make_message
from ctxwindow.policies import Context, PriorityWindow, Window
from ctxwindow.policies.explain import Decision, Decisions, Report
from ctxwindow.policies.rules import text_of
from ctxwindow.recall import Recall, RecallPolicy, is_whole, rank_units
from ctxwindow.redact.redactor import RedactFn
from ctxwindow.stores.base import AsyncStore, Store
from ctxwindow.tokens.chat import ChatTokenizer, chat_tokenizer
from ctxwindow.tokens.models import model_info

Policy = Callable[[int, ChatTokenizer], Window]
# Told of work as it happens (for metrics): ("compressed", entries),
# ("summary_updated", 1), ("recall_seconds", seconds of one archive search).
EventHook = Callable[[str, float], None]

RedactAt = Literal["storage", "context"]
REDACT_AT = ("storage", "context")

# The sessions the current thread or task holds a turn of: (id of the store, session id).
_HELD: ContextVar[frozenset[tuple[int, str]]] = ContextVar("ctxwindow_held", default=frozenset())


class ArchiveLike(Protocol):
    """What the manager needs of an archive (see ``ctxwindow.archive``)."""

    def index(self, session_id: str, entries: Sequence[Entry]) -> object: ...

    def search(self, session_id: str, query: str, *, k: int = 5) -> Sequence[Any]: ...

    def at(self, session_id: str, seqs: Sequence[int]) -> Sequence[Entry]: ...

    def forget(self, session_id: str) -> object: ...


def default_budget(model: str, budget: int | float, reserve_output: int) -> int:
    """An int budget as given; a ratio of the model's context window minus the reply reserve."""
    if isinstance(budget, int) and not isinstance(budget, bool):
        if budget < 1:
            raise ValueError(f"budget must be positive, got {budget}")
        return budget
    if not 0 < budget <= 1:
        raise ValueError(f"a budget ratio must be in (0, 1], got {budget}")
    return max(1, int(model_info(model).context_window * budget) - reserve_output)


COMPRESSORS = ("chain", "structured", "extractive", "truncate", "off")


def hybrid_policy(
    summarizer: Any = None, *, summary: bool = True, compressor: str = "chain"
) -> Policy:
    """The default policy: a PriorityWindow with compressors and a rolling summary.

    Units above a quarter of the budget (at most 2,000 tokens) are compressed
    before eviction by ``compressor``: ``"chain"`` (structured JSON, then
    extractive, then head/tail), one of those alone, or ``"off"``. The rolling
    summary (``summarizer``, extractive by default; none without ``summary``)
    gets an eighth of the budget (at most 800). A message larger than the
    whole budget is compressed, or dropped if even that does not fit.
    """
    if compressor not in COMPRESSORS:
        raise ValueError(f"compressor must be one of {COMPRESSORS}, got {compressor!r}")

    def make(budget: int, tokenizer: ChatTokenizer) -> Window:
        from ctxwindow.compress import Extractive, RollingSummary

        rolling = RollingSummary(summarizer or Extractive(tokenizer), tokenizer)
        return PriorityWindow(
            budget,
            tokenizer.model,
            tokenizer=tokenizer,
            oversize="drop",
            compressor=_compressor(compressor, tokenizer),
            compress_threshold=min(2000, budget // 4),
            summarizer=rolling.fold if summary else None,
            summary_tokens=min(800, budget // 8),
        )

    return make


def _compressor(name: str, tokenizer: ChatTokenizer) -> Any:
    from ctxwindow.compress import Chain, Extractive, Structured, Truncate

    one = {"structured": Structured, "extractive": Extractive, "truncate": Truncate}
    if name == "chain":
        return Chain(Structured(tokenizer), Extractive(tokenizer), Truncate(tokenizer))
    return one[name](tokenizer) if name in one else None


class _Session:
    """A session's window and what the manager knows about it."""

    def __init__(self, session_id: str, window: Window) -> None:
        self.id = session_id
        self.window = window
        self.last_seq = 0  # the highest store seq the window has seen
        self.last_id = ""  # the id of that entry (a session deleted and rebuilt differs)
        # The candidates found for a query, (score, unit) best first (prefetched or reused).
        self.recall: tuple[str, list[tuple[float, Unit]]] | None = None
        self.units: dict[int, Unit] = {}  # whole archived units read for recall, by store seq
        self.unarchived: list[Entry] = []  # seen by the window, not yet in the archive
        self.whole = True  # nothing has left the window yet (told by its on_evict)
        window.on_evict = self.evicted
        # With redact="context": message id -> (message, redacted copy, token change),
        # for the messages of the last context (each message is redacted once).
        self.redacted: dict[int, tuple[Message, Message, int]] = {}

    def evicted(self, units: list[Unit]) -> None:
        self.whole = False


class _Core:
    """What the sync and async managers share: windows, recall, merging, reports."""

    def __init__(
        self,
        model: str,
        policy: Policy | None,
        archive: ArchiveLike | None,
        summarizer: Any,
        redactor: RedactFn | None,
        budget: int | float,
        reserve_output: int | None,
        recall: RecallPolicy,
        hot_sessions: int,
        redact: RedactAt = "storage",
        on_event: EventHook | None = None,
    ) -> None:
        if redact not in REDACT_AT:
            raise ValueError(f"redact must be one of {REDACT_AT}, got {redact!r}")
        self.model = model
        self.tokenizer = chat_tokenizer(model)
        info = model_info(model)
        self.reserve_output = (
            min(4096, info.max_output) if reserve_output is None else reserve_output
        )
        self.budget = default_budget(model, budget, self.reserve_output)
        self.policy = policy or hybrid_policy(summarizer)
        self.archive = archive
        self.redactor = redactor
        self.redact_context = redactor is not None and redact == "context"
        self.recall = recall
        self.on_event = on_event
        self.hot_sessions = hot_sessions
        self._sessions: OrderedDict[str, _Session] = OrderedDict()

    # -- sessions in the hot tier ---------------------------------------------------

    def cached(self, session_id: str) -> _Session | None:
        session = self._sessions.get(session_id)
        if session is not None:
            self._sessions.move_to_end(session_id)
        return session

    def new_session(self, session_id: str, stored: Sequence[Entry]) -> _Session:
        window = self.policy(self.budget, self.tokenizer)
        session = _Session(session_id, window)
        window.on_event = self.on_event
        self.restore(session, stored)
        self._sessions[session_id] = session
        while len(self._sessions) > self.hot_sessions:
            self._sessions.popitem(last=False)
        return session

    def forget(self, session_id: str) -> None:
        self._sessions.pop(session_id, None)

    def stale(self, session: _Session, last: Sequence[Entry]) -> int | None:
        """Where to read what others stored since the window last saw the store.

        ``last`` is the store's last entry (or nothing). None: the window is
        current. Otherwise the ``after`` to load from: it includes the window's
        own last entry, so ``catch_up`` can check the session was not rebuilt.
        """
        if last and last[0].seq == session.last_seq and last[0].id == session.last_id:
            return None
        if not last and session.last_seq == 0:
            return None
        return max(session.last_seq - 1, 0)

    def catch_up(self, session_id: str, session: _Session, newer: Sequence[Entry]) -> None:
        """Add what others stored to the window; forget a window that no longer matches."""
        if session.last_seq == 0:
            self.restore(session, newer)
        elif newer and newer[0].seq == session.last_seq and newer[0].id == session.last_id:
            self.restore(session, newer[1:])
        else:
            self.forget(session_id)  # deleted or rebuilt meanwhile: reloaded on next use

    def restore(self, session: _Session, stored: Sequence[Entry]) -> None:
        """Add stored entries the window has not seen, with their stored tokens.

        Each is also queued for the archive, as stored (see ``unarchived``).
        """
        window = session.window
        if self.archive is not None:
            session.unarchived.extend(
                e for e in stored if e.seq > session.last_seq and e.message["role"] != "system"
            )
        for entry in stored:
            if entry.seq <= session.last_seq:
                continue  # an idempotent retry returned what the window already has
            if entry.message["role"] == "tool" and entry.message.get("tool_call_id") not in (
                window.pending_tool_calls
            ):
                session.last_seq, session.last_id = entry.seq, entry.id
                continue  # its call is older than what was loaded: never an orphan
            metadata = {**entry.metadata, "seq": entry.seq}
            if entry.message["role"] == "system":
                window.set_system(entry.message["content"])  # sets or replaces the prompt
            else:
                kind = entry.kind if entry.kind not in ("chat", "summary") else None
                window.add(
                    entry.message, pin=entry.pinned, metadata=metadata, kind=kind,
                    tokens=entry.tokens, entry_id=entry.id,
                )  # fmt: skip
            session.last_seq, session.last_id = entry.seq, entry.id

    # -- adding ----------------------------------------------------------------------

    def prepare(
        self,
        session: _Session,
        message: Mapping[str, Any],
        pin: bool,
        metadata: Mapping[str, Any] | None,
        kind: str | None,
    ) -> Entry:
        """Validate, redact and tokenize a new message: the entry to store."""
        clean = make_message(message)  # validated before a redactor sees it
        if self.redactor is not None and not self.redact_context:
            clean = make_message(self.redactor(dict(clean)))
        pending = session.window.pending_tool_calls
        if clean["role"] == "tool" and clean["tool_call_id"] not in pending:
            raise OrphanToolResultError(
                f"tool result for call {clean['tool_call_id']!r} does not answer a waiting call"
            )
        if clean["role"] != "tool" and pending:
            raise InvalidMessageError(
                f"tool calls {sorted(pending)} have no results yet; add their tool messages first"
            )
        entry = Entry(clean, self.tokenizer.message_tokens(clean), 0)
        entry.pinned = pin or clean["role"] in SYSTEM_ROLES
        entry.metadata = dict(metadata or {})
        if kind is not None:
            entry.kind = kind
        return entry

    @staticmethod
    def batch(
        messages: Sequence[Mapping[str, Any]], idempotency_key: str | None
    ) -> list[tuple[Message, str | None]]:
        """The messages of a batch, all validated first, each with its own key (``KEY:i``)."""
        checked = [make_message(message) for message in messages]
        keys = [f"{idempotency_key}:{i}" if idempotency_key else None for i in range(len(checked))]
        return list(zip(checked, keys, strict=True))

    @staticmethod
    def check_room(stored: int, new: int, max_messages: int | None) -> None:
        if max_messages is not None and new and stored + new > max_messages:
            raise SessionFullError(f"the session would have over {max_messages} messages")

    def previewed(self, message: Mapping[str, Any]) -> tuple[Message, int]:
        """A message to preview, validated (and redacted as ``add`` would), and its tokens."""
        clean = make_message(message)
        if clean["role"] == "tool" or clean["role"] in SYSTEM_ROLES:
            raise InvalidMessageError("preview takes a new user or assistant turn")
        if self.redactor is not None:
            clean = make_message(self.redactor(dict(clean)))
        tokens = self.tokenizer.message_tokens(clean)
        if tokens >= self.budget:
            raise BudgetError(
                f"the message takes {tokens} tokens, the whole budget of {self.budget}"
            )
        return clean, tokens

    # -- recall ----------------------------------------------------------------------

    def searched(self, started: float) -> None:
        if self.on_event is not None:
            self.on_event("recall_seconds", time.perf_counter() - started)

    def query_of(self, session: _Session, query: str | None) -> str:
        if query:
            return query
        for entry in reversed(session.window.entries()):
            if entry.message["role"] == "user":
                return text_of(entry.message)
        return ""

    def unarchived(self, session: _Session) -> list[Entry]:
        """The turns to archive before the next search, taken off the queue.

        Every turn is archived when the window first sees it, so recall ranks
        the window's turns and the evicted ones alike; the queue is archived in
        one batch when a search needs it. A queue lost with its process is
        archived again when the session is next loaded (archiving is idempotent).
        """
        queued, session.unarchived = session.unarchived, []
        return queued

    def scored(self, session: _Session, hits: Sequence[Any]) -> tuple[dict[int, float], list[int]]:
        """Each hit's and neighbour's score by seq, and the seqs to read from the archive."""
        scores = self.recall.scores({hit.entry.seq: hit.score for hit in hits})
        found = {hit.entry.seq for hit in hits}
        return scores, [seq for seq in scores if seq not in found and seq not in session.units]

    def uncached(
        self, session: _Session, hits: Sequence[Any], around: Sequence[Entry]
    ) -> list[Entry]:
        """The entries found whose unit the session has not cached yet."""
        return [e for e in (*(hit.entry for hit in hits), *around) if e.seq not in session.units]

    def cache(self, session: _Session, unit: Unit) -> None:
        """Keep a whole archived unit for later queries (entries are never rewritten)."""
        if len(session.units) >= _CACHED_UNITS:
            session.units.clear()
        if is_whole(unit):  # a call still waiting for results is read again later
            session.units.update((entry.seq, unit) for entry in unit.entries)

    def ranked(self, session: _Session, scores: Mapping[int, float]) -> list[tuple[float, Unit]]:
        """The cached units of the scored seqs, ``(score, unit)`` best first, each once."""
        units = {id(u): u for seq in scores if (u := session.units.get(seq)) is not None}
        return rank_units(scores, units.values())

    def holds_all(self, session: _Session, budget: int) -> bool:
        """The window holds every message and fits ``budget``: recall could change nothing."""
        return session.whole and session.window.total_tokens <= budget

    def recalled(self, session: _Session, budget: int, ranked: list[tuple[float, Unit]]) -> Recall:
        """The candidates ``ranked`` that come back, in the room the budget leaves them."""
        window = session.window
        kept = {e.id for e in window.entries()}
        return self.recall.choose(ranked, kept, self.recall.room(budget, window.pinned_tokens))

    def merge(
        self, session: _Session, context: Context, recalled: list[Unit], budget: int
    ) -> Context:
        """Recalled units placed at their original position; tokens recounted exactly.

        (The window was built in ``budget`` less the recalled units' room.)
        """
        if not recalled:
            return context
        position = {
            id(e.message): float(e.metadata.get("seq", 0)) for e in session.window.entries()
        }
        keyed = [(position.get(id(m), -1.0), i, m) for i, m in enumerate(context.messages)]
        for unit in recalled:
            for j, entry in enumerate(unit.entries):
                keyed.append((float(entry.seq) + j * 1e-6, len(keyed), entry.message))
        messages = [m for _, _, m in sorted(keyed, key=lambda k: (k[0], k[1]))]
        tokens = context.total_tokens + sum(u.size for u in recalled)  # stored counts, exact
        earlier = context.report.decisions

        def decisions() -> list[Decision]:
            found = [
                Decision.of(e, "recalled", "matched the query") for u in recalled for e in u.entries
            ]
            return [*earlier, *found]

        report = Report(
            budget=budget,
            used=tokens + context.report.reserve_output,
            reserve_output=context.report.reserve_output,
            tokens_by_category={
                **context.report.tokens_by_category,
                "recalled": sum(u.size for u in recalled),
            },
            tokens_by_priority=context.report.tokens_by_priority,
            decisions=Decisions(decisions),
            evicted_entries=context.report.evicted_entries,
            evicted_tokens=context.report.evicted_tokens,
            recalled_entries=sum(len(u.entries) for u in recalled),
        )
        return Context(messages, tokens, report)

    def context(self, session: _Session, budget: int, recalled: Recall) -> Context:
        """The context to send; with ``redact="context"``, redacted and still within budget.

        A placeholder can take more tokens than the secret it replaces: then
        the context is built with less room, the largest room that fits.
        """
        built = self.build_window(session, budget, recalled)
        if not self.redact_context:
            return built
        fitted = self.redacted(session, built, budget)
        if fitted.total_tokens > budget:
            overshoot = fitted.total_tokens - budget
            fitted = self.fit_redacted(session, budget, recalled, budget - overshoot)
        sent = {id(message) for message in fitted.messages}
        session.redacted = {k: hit for k, hit in session.redacted.items() if id(hit[1]) in sent}
        return fitted

    def fit_redacted(self, session: _Session, budget: int, recalled: Recall, room: int) -> Context:
        """The redacted context of the largest room up to ``room`` that fits in ``budget``.

        ``room`` (the budget less the overshoot) is tried first and usually
        fits; bisection then finds the largest room below the budget that does.
        """
        best, low, high = None, 0, budget - 1
        mid = min(max(room, 0), high)
        while low <= high:
            try:
                built = self.build_window(session, mid, recalled)
            except BudgetError:  # too little room for what must be kept: try more
                low = mid + 1
            else:
                attempt = self.redacted(session, built, budget)
                if attempt.total_tokens > budget:
                    high = mid - 1
                else:
                    best, low = attempt, mid + 1
            mid = (low + high) // 2
        if best is None:
            raise BudgetError(f"the redacted context does not fit in {budget} tokens")
        return best

    def redacted(self, session: _Session, built: Context, budget: int) -> Context:
        """``built`` with its messages redacted and its tokens corrected (maybe over budget)."""
        hits = [self.redact_one(session, m) for m in built.messages]
        extra = sum(change for _, _, change in hits)
        report = replace(built.report, budget=budget, used=built.report.used + extra)
        return Context([clean for _, clean, _ in hits], built.total_tokens + extra, report)

    def redact_one(self, session: _Session, message: Message) -> tuple[Message, Message, int]:
        """(message, its redacted copy, the tokens that adds), redacting each message once."""
        assert self.redactor is not None
        hit = session.redacted.get(id(message))
        if hit is None or hit[0] is not message:
            clean = self.redactor(dict(message))
            change = 0
            if clean != message:
                change = self.tokenizer.message_tokens(clean) - self.tokenizer.message_tokens(
                    message
                )
            hit = session.redacted[id(message)] = (message, clean, change)
        return hit

    def build_window(self, session: _Session, budget: int, recalled: Recall) -> Context:
        room = budget - recalled.tokens
        context = session.window.build(max_tokens=room, keep=recalled.keep)
        return self.merge(session, context, recalled.units, budget)


class ContextManager:
    """Sessions kept in a store, contexts built within a model's budget.

    >>> from ctxwindow.stores.memory import MemoryStore
    >>> cm = ContextManager(MemoryStore(), model="gpt-4o", budget=2000)
    >>> _ = cm.add("s1", {"role": "user", "content": "My order is A-1042."})
    >>> cm.build("s1").messages[-1]["content"]
    'My order is A-1042.'

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
    the budget they get (``ctxwindow.recall.RecallPolicy``).
    """

    def __init__(
        self,
        store: Store | str = "sqlite:///ctxwindow.db",
        model: str = "gpt-4o",
        policy: Policy | None = None,
        archive: ArchiveLike | None = None,
        summarizer: Any = None,
        redactor: RedactFn | None = None,
        *,
        budget: int | float = 0.75,
        reserve_output: int | None = None,
        recall: RecallPolicy | None = None,
        prefetch: bool = True,
        hot_sessions: int = 256,
        lock_timeout: float | None = None,
        redact: RedactAt = "storage",
        on_event: EventHook | None = None,
    ) -> None:
        if isinstance(store, str):
            from ctxwindow.stores.url import open_store

            store = open_store(store)
        self.store: Store = store
        self.prefetch = prefetch
        self.lock_timeout = lock_timeout
        self._core = _Core(
            model, policy, archive, summarizer, redactor, budget, reserve_output,
            recall or RecallPolicy(), hot_sessions, redact, on_event,
        )  # fmt: skip

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
        """Store a message (durably, first), then add it to the session's window."""
        with self.turn(session_id):
            session = self._session(session_id)
            entry = self._core.prepare(session, message, pin, metadata, kind)
            stored = self.store.append(session_id, [entry], idempotency_key=idempotency_key)
            self._core.restore(session, stored)
            if self.prefetch and entry.message["role"] == "user":
                self._candidates(session_id, session, text_of(entry.message), self.budget)
            return stored[0]

    def extend(
        self,
        session_id: str,
        messages: Sequence[Mapping[str, Any]],
        *,
        metadata: Mapping[str, Any] | None = None,
        idempotency_key: str | None = None,
        max_messages: int | None = None,
    ) -> list[Entry]:
        """Store several messages in order, in one turn, as one idempotent batch.

        Every message is validated before any is stored. With
        ``idempotency_key`` message ``i`` is keyed ``KEY:i``: a retry stores
        what the first attempt did not and returns what it stored.
        ``max_messages`` refuses (``SessionFullError``, nothing stored) a batch
        whose new messages would take the session over that many.
        """
        batch = self._core.batch(messages, idempotency_key)
        with self.turn(session_id):
            if max_messages is not None:
                new = sum(k is None or self.store.replayed(session_id, k) is None for _, k in batch)
                last = self.store.tail(session_id, 1)
                self._core.check_room(last[0].seq if last else 0, new, max_messages)
            return [
                self.add(session_id, message, metadata=metadata, idempotency_key=key)
                for message, key in batch
            ]

    def build(
        self, session_id: str, query: str | None = None, max_tokens: int | None = None
    ) -> Context:
        """The context to send now: window + recalled units, within the budget, with a report."""
        with self.turn(session_id):
            session = self._session(session_id)
            budget = min(max_tokens or self.budget, self.budget)
            found = self._candidates(
                session_id, session, self._core.query_of(session, query), budget
            )
            return self._core.context(session, budget, self._core.recalled(session, budget, found))

    def preview(
        self, session_id: str, message: Mapping[str, Any], max_tokens: int | None = None
    ) -> Context:
        """The context ``build`` would give if ``message`` were added now; nothing is stored.

        The message's text is the recall query and its tokens are kept free
        for it; it ends the returned context. Use it to check what the model
        would see, or to evaluate many questions on one state of a session.
        """
        with self.turn(session_id):
            session = self._session(session_id)
            clean, tokens = self._core.previewed(message)
            budget = min(max_tokens or self.budget, self.budget) - tokens
            found = self._candidates(session_id, session, text_of(clean), budget)
            built = self._core.context(session, budget, self._core.recalled(session, budget, found))
            return built.plus(clean, tokens, budget=budget + tokens)

    def history(self, session_id: str) -> list[Entry]:
        """Every stored entry of the session, in order."""
        return self.store.load(session_id)

    def delete(self, session_id: str) -> bool:
        """Delete the session everywhere: store, window, archive."""
        with self.turn(session_id):
            self._core.forget(session_id)
            if self._core.archive is not None:
                self._core.archive.forget(session_id)
            return self.store.delete(session_id)

    @contextmanager
    def turn(self, session_id: str, *, timeout: float | None = None) -> Iterator[None]:
        """Hold the session for several calls: nobody else adds to it meanwhile.

        Other threads, and other processes sharing the store, wait (up to
        ``timeout``, default ``lock_timeout``; then ``SessionBusyError``). The
        window first catches up with what they stored. ``add``, ``build`` and
        ``delete`` hold a turn of their own unless the caller holds one.
        """
        held = _HELD.get()
        inside = _holding(held, self.store, session_id)
        if inside is None:  # held by this thread already
            yield
            return
        wait = self.lock_timeout if timeout is None else timeout
        with self.store.lock(session_id, timeout=wait):
            _HELD.set(inside)
            try:
                self._catch_up(session_id)
                yield
            finally:
                _HELD.set(held)

    def close(self) -> None:
        self.store.close()

    def __enter__(self) -> ContextManager:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _session(self, session_id: str) -> _Session:
        return self._core.cached(session_id) or self._core.new_session(
            session_id, self.store.load(session_id)
        )

    def _catch_up(self, session_id: str) -> None:
        session = self._core.cached(session_id)
        if session is None:
            return  # loaded whole on first use
        after = self._core.stale(session, self.store.tail(session_id, 1))
        if after is not None:
            self._core.catch_up(session_id, session, self.store.load(session_id, after=after))

    def _candidates(
        self, session_id: str, session: _Session, query: str, budget: int
    ) -> list[tuple[float, Unit]]:
        """Archived units that match ``query``, ``(score, unit)`` best first (cached per query).

        None when the window holds the whole session within ``budget``.
        """
        core, archive = self._core, self._core.archive
        if archive is None or not query or core.holds_all(session, budget):
            return []
        key = f"{session.last_seq}:{query}"
        if session.recall is not None and session.recall[0] == key:
            return session.recall[1]
        queued = core.unarchived(session)
        if queued:
            archive.index(session_id, queued)
        started = time.perf_counter()
        hits = archive.search(session_id, query, k=core.recall.depth)
        scores, missing = core.scored(session, hits)
        around = archive.at(session_id, missing)
        core.searched(started)
        for entry in core.uncached(session, hits, around):
            core.cache(session, self._whole_unit(session_id, entry))
        session.recall = (key, core.ranked(session, scores))
        return session.recall[1]

    def _whole_unit(self, session_id: str, entry: Entry) -> Unit:
        """The entry with the rest of its tool unit (call and results), from the store."""
        around = None
        if _in_tool_unit(entry):
            around = self.store.load(session_id, after=_after(entry), limit=_AROUND)
        return _unit_of(entry, around)


class AsyncContextManager:
    """``ContextManager`` over an ``AsyncStore``, for servers (same behaviour, awaited).

    Archive work (indexing, search, reading neighbours) runs in a worker
    thread, never on the event loop. ``async with`` closes the store.
    """

    def __init__(
        self,
        store: AsyncStore | str = "sqlite:///ctxwindow.db",
        model: str = "gpt-4o",
        policy: Policy | None = None,
        archive: ArchiveLike | None = None,
        summarizer: Any = None,
        redactor: RedactFn | None = None,
        *,
        budget: int | float = 0.75,
        reserve_output: int | None = None,
        recall: RecallPolicy | None = None,
        prefetch: bool = True,
        hot_sessions: int = 256,
        lock_timeout: float | None = None,
        redact: RedactAt = "storage",
        on_event: EventHook | None = None,
    ) -> None:
        if isinstance(store, str):
            from ctxwindow.stores.url import open_async_store

            store = open_async_store(store)
        self.store: AsyncStore = store
        self.prefetch = prefetch
        self.lock_timeout = lock_timeout
        self._core = _Core(
            model, policy, archive, summarizer, redactor, budget, reserve_output,
            recall or RecallPolicy(), hot_sessions, redact, on_event,
        )  # fmt: skip

    @property
    def budget(self) -> int:
        """The default context budget in tokens."""
        return self._core.budget

    async def add(
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
        async with self.turn(session_id):
            session = await self._session(session_id)
            entry = self._core.prepare(session, message, pin, metadata, kind)
            stored = await self.store.append(session_id, [entry], idempotency_key=idempotency_key)
            self._core.restore(session, stored)
            if self.prefetch and entry.message["role"] == "user":
                await self._candidates(session_id, session, text_of(entry.message), self.budget)
            return stored[0]

    async def extend(
        self,
        session_id: str,
        messages: Sequence[Mapping[str, Any]],
        *,
        metadata: Mapping[str, Any] | None = None,
        idempotency_key: str | None = None,
        max_messages: int | None = None,
    ) -> list[Entry]:
        """Store several messages as one idempotent batch (see ``ContextManager.extend``)."""
        batch = self._core.batch(messages, idempotency_key)
        async with self.turn(session_id):
            if max_messages is not None:
                new = [
                    k is None or await self.store.replayed(session_id, k) is None for _, k in batch
                ]
                last = await self.store.tail(session_id, 1)
                self._core.check_room(last[0].seq if last else 0, sum(new), max_messages)
            return [
                await self.add(session_id, message, metadata=metadata, idempotency_key=key)
                for message, key in batch
            ]

    async def build(
        self, session_id: str, query: str | None = None, max_tokens: int | None = None
    ) -> Context:
        """The context to send now: window + recalled units, within the budget, with a report."""
        async with self.turn(session_id):
            session = await self._session(session_id)
            budget = min(max_tokens or self.budget, self.budget)
            query = self._core.query_of(session, query)
            found = await self._candidates(session_id, session, query, budget)
            return self._core.context(session, budget, self._core.recalled(session, budget, found))

    async def preview(
        self, session_id: str, message: Mapping[str, Any], max_tokens: int | None = None
    ) -> Context:
        """The context ``build`` would give if ``message`` were added now; nothing is stored."""
        async with self.turn(session_id):
            session = await self._session(session_id)
            clean, tokens = self._core.previewed(message)
            budget = min(max_tokens or self.budget, self.budget) - tokens
            found = await self._candidates(session_id, session, text_of(clean), budget)
            built = self._core.context(session, budget, self._core.recalled(session, budget, found))
            return built.plus(clean, tokens, budget=budget + tokens)

    async def history(self, session_id: str) -> list[Entry]:
        """Every stored entry of the session, in order."""
        return await self.store.load(session_id)

    async def delete(self, session_id: str) -> bool:
        """Delete the session everywhere: store, window, archive."""
        async with self.turn(session_id):
            self._core.forget(session_id)
            if self._core.archive is not None:
                await asyncio.to_thread(self._core.archive.forget, session_id)
            return await self.store.delete(session_id)

    @asynccontextmanager
    async def turn(self, session_id: str, *, timeout: float | None = None) -> AsyncIterator[None]:
        """Hold the session for several calls (see ``ContextManager.turn``).

        Tasks started inside the block act within the turn (they inherit it).
        The block may also end in another task than it began, as a streamed
        reply does: the handler calls ``hand_over`` and returns, and the code
        that finishes the turn runs in ``carry_on`` until it ends the block.
        """
        held = _HELD.get()
        inside = _holding(held, self.store, session_id)
        if inside is None:  # held by this task (or the task that started it) already
            yield
            return
        wait = self.lock_timeout if timeout is None else timeout
        async with self.store.lock(session_id, timeout=wait):
            _HELD.set(inside)
            try:
                await self._catch_up(session_id)
                yield
            finally:
                _HELD.set(held)

    def hand_over(self, session_id: str) -> None:
        """This task no longer acts within its turn of the session (whose end it handed
        to other code): its later calls take the session like anybody else's."""
        _HELD.set(_HELD.get() - {(id(self.store), session_id)})

    @contextmanager
    def carry_on(self, session_id: str) -> Iterator[None]:
        """Act within a turn of the session handed over by another task (see ``turn``)."""
        token = _HELD.set(_HELD.get() | {(id(self.store), session_id)})
        try:
            yield
        finally:
            _HELD.reset(token)

    async def close(self) -> None:
        await self.store.close()

    async def __aenter__(self) -> AsyncContextManager:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _session(self, session_id: str) -> _Session:
        cached = self._core.cached(session_id)
        if cached is not None:
            return cached
        return self._core.new_session(session_id, await self.store.load(session_id))

    async def _catch_up(self, session_id: str) -> None:
        session = self._core.cached(session_id)
        if session is None:
            return  # loaded whole on first use
        after = self._core.stale(session, await self.store.tail(session_id, 1))
        if after is not None:
            newer = await self.store.load(session_id, after=after)
            self._core.catch_up(session_id, session, newer)

    async def _candidates(
        self, session_id: str, session: _Session, query: str, budget: int
    ) -> list[tuple[float, Unit]]:
        """Archived units that match ``query`` (see ``ContextManager._candidates``)."""
        core, archive = self._core, self._core.archive
        if archive is None or not query or core.holds_all(session, budget):
            return []
        key = f"{session.last_seq}:{query}"
        if session.recall is not None and session.recall[0] == key:
            return session.recall[1]
        queued = core.unarchived(session)
        if queued:
            await asyncio.to_thread(archive.index, session_id, queued)
        started = time.perf_counter()
        hits = await asyncio.to_thread(archive.search, session_id, query, k=core.recall.depth)
        scores, missing = core.scored(session, hits)
        around = await asyncio.to_thread(archive.at, session_id, missing)
        core.searched(started)
        for entry in core.uncached(session, hits, around):
            near = None
            if _in_tool_unit(entry):
                near = await self.store.load(session_id, after=_after(entry), limit=_AROUND)
            core.cache(session, _unit_of(entry, near))
        session.recall = (key, core.ranked(session, scores))
        return session.recall[1]


def _holding(
    held: frozenset[tuple[int, str]], store: object, session_id: str
) -> frozenset[tuple[int, str]] | None:
    """The sessions held inside a new turn of ``session_id``; None if it is held already."""
    key = (id(store), session_id)
    return None if key in held else held | {key}


_AROUND = 32  # stored entries read around a recalled tool message to find its unit
_CACHED_UNITS = 4096  # archived units a session keeps decoded for its next queries


def _in_tool_unit(entry: Entry) -> bool:
    return entry.message["role"] == "tool" or bool(entry.message.get("tool_calls"))


def _after(entry: Entry) -> int:
    return max(entry.seq - _AROUND // 2, 0)


def _unit_of(entry: Entry, around: Sequence[Entry] | None) -> Unit:
    """A recalled entry as a whole unit: with its call and results when ``around`` is given."""
    entries = [entry] if around is None else _unit_around(around, entry)
    return Unit(entries, sum(e.tokens for e in entries))


def _unit_around(entries: Sequence[Entry], hit: Entry) -> list[Entry]:
    """The tool unit (assistant call + its results) that contains ``hit``."""
    index = next(i for i, e in enumerate(entries) if e.id == hit.id)
    start = index
    while start > 0 and entries[start].message["role"] == "tool":
        start -= 1
    end = start + 1
    while end < len(entries) and entries[end].message["role"] == "tool":
        end += 1
    return list(entries[start:end])
