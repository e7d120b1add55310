"""What the sync and async managers share: sessions, admission, recall, merging, redaction."""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from ctxwindow.archive.base import Archive
from ctxwindow.context import checkpoints
from ctxwindow.context.contracts import CoreSettings
from ctxwindow.context.policy import LOW_WATER, default_budget, hybrid_policy
from ctxwindow.context.question import Question, asked, compressed, sends, with_question
from ctxwindow.context.session import (
    CACHED_UNITS,
    HotSessions,
    Session,
    in_tool_unit,
    waiting_after,
)
from ctxwindow.errors import BudgetError, InvalidMessageError, OrphanToolResultError
from ctxwindow.messages import SYSTEM_ROLES, Entry, Message, Unit, make_message, stored_tokens
from ctxwindow.policies import Context
from ctxwindow.policies.alternate import alternate, is_alternating
from ctxwindow.policies.base import stored_kind
from ctxwindow.policies.explain import Decision, Decisions, Report
from ctxwindow.policies.rules import text_of
from ctxwindow.recall import Recall, is_whole
from ctxwindow.redact.redactor import redacted_preview
from ctxwindow.stores.base import Checkpoint, Earlier
from ctxwindow.tokens.defaults import default_models

RECALLED = "recalled: matched the query"
CARRIED = "recalled for an earlier turn: kept in place for the prompt cache"
CARRIED_SHARE = 0.5
CALM = 4
"""With the prompt cache, the turns after a step that add what fits of what they earn rather
than step again (unless what is sent no longer fits): stepping whenever a question earned
more than fits stepped on nearly every turn of a chat, 1.3-1.6x cheaper a turn than a
sliding window instead of 2.2-2.5x."""
"""With the prompt cache, turns recalled for earlier questions that the new one does not
score stay in place only while they take at most this share of the budget."""


class Core:
    """What the sync and async managers share: windows, recall, merging, reports.

    Built from the manager's ``CoreSettings``; it derives what they imply: the model's
    counter, the budget in tokens (less the reply's reserve), the default policy."""

    def __init__(self, settings: CoreSettings) -> None:
        self.settings = settings
        models = settings.models or default_models()
        info = models.resolve(settings.model)
        self.tokenizer = models.tokenizer_of(info)
        self.strict_roles = info.strict_roles
        reserve = settings.reserve_output
        reserve = min(4096, info.max_output) if reserve is None else reserve
        self.budget = default_budget(settings.model, settings.budget, reserve, models=models)
        self.policy = settings.policy or hybrid_policy(
            settings.summarizer, cache=settings.prompt_cache
        )
        self.archive = settings.archive
        self.redactor = settings.redactor
        self.redact_context = self.redactor is not None and settings.redact == "context"
        self.recall = settings.recall
        self.on_event = settings.on_event
        hot = settings.hot_sessions
        self.sessions = hot if isinstance(hot, HotSessions) else HotSessions(hot)

    # -- sessions in the hot tier ---------------------------------------------------

    def cached(self, session_id: str) -> Session | None:
        """The session's window, if this manager's is in memory."""
        return self.sessions.get(session_id, self)

    def loaded(
        self, session_id: str, checkpoint: Checkpoint | None, stored: Sequence[Entry]
    ) -> Session | None:
        """The session from its ``checkpoint`` and the entries ``stored`` after it (None if
        the checkpoint cannot be used: see ``context/checkpoints.py``), or from all its
        entries. Not kept in the hot tier yet (``keep``): this may run off the event loop."""
        window = self.policy(self.budget, self.tokenizer)
        session = Session(session_id, window, owner=self)
        window.on_event = self.on_event
        if checkpoint is not None and not checkpoints.resumed(session, *checkpoint):
            return None
        self.restore(session, stored)
        return session

    def loaded_whole(self, session_id: str, stored: Sequence[Entry]) -> Session:
        """The session from all its entries, ``stored``."""
        session = self.loaded(session_id, None, stored)
        assert session is not None  # only a checkpoint can be refused
        return session

    def loaded_newest(self, session_id: str, earlier: Earlier, newest: Sequence[Entry]) -> Session:
        """The session from its ``newest`` entries, after ``earlier.kept`` (what a window
        keeps at any budget among the entries before them); the others are counted as
        left out. See ``context/checkpoints.py``. Off the event loop, like ``loaded``."""
        window = self.policy(self.budget, self.tokenizer)
        session = Session(session_id, window, owner=self)
        window.on_event = self.on_event
        # A kept entry of a tool unit cannot be replayed without the rest of its unit.
        alone = [e for e in earlier.kept if in_tool_unit(e)]
        self.restore(session, [e for e in earlier.kept if not in_tool_unit(e)], archive=False)
        if earlier.entries or alone:
            window.left_out(
                earlier.entries + len(alone), earlier.tokens + sum(e.tokens for e in alone)
            )
            session.whole = False
        self.restore(session, newest)
        session.replayed_after = newest[0].seq - 1 if newest else session.last_seq
        return session

    def keep(self, session: Session) -> None:
        self.sessions.put(session)

    def forget(self, session_id: str) -> None:
        self.sessions.pop(session_id)

    def stale(self, session: Session, last: Sequence[Entry]) -> int | None:
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

    def catch_up(self, session_id: str, session: Session, newer: Sequence[Entry]) -> None:
        """Add what others stored to the window; forget a window that no longer matches."""
        if session.last_seq == 0:
            self.restore(session, newer)
        elif newer and newer[0].seq == session.last_seq and newer[0].id == session.last_id:
            self.restore(session, newer[1:])
        else:
            self.forget(session_id)  # deleted or rebuilt meanwhile: reloaded on next use

    def restore(self, session: Session, stored: Sequence[Entry], *, archive: bool = True) -> None:
        """Add stored entries the window has not seen, with their stored tokens.

        Each is also queued for the archive, as stored (see ``unarchived``), unless
        ``archive`` is False (the manager queues them otherwise).
        """
        window = session.window
        if self.archive is not None and archive:
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
                session.question = None
                continue  # its call is older than what was loaded: never an orphan
            kept = None
            if entry.message["role"] == "system":
                window.set_system(
                    entry.message["content"], entry_id=entry.id, seq=entry.seq, tokens=entry.tokens
                )
            else:
                kept = window.add(
                    entry.message, pin=entry.pinned, metadata=entry.metadata,
                    kind=stored_kind(entry), tokens=entry.tokens, entry_id=entry.id, seq=entry.seq,
                )  # fmt: skip
            session.question = asked(session.question, entry, kept)
            session.last_seq, session.last_id = entry.seq, entry.id

    # -- adding ----------------------------------------------------------------------

    def prepare(
        self,
        session: Session,
        message: Mapping[str, Any],
        pin: bool,
        metadata: Mapping[str, Any] | None,
        kind: str | None,
        pending: frozenset[str] | None = None,
    ) -> Entry:
        """Validate, redact and tokenize a new message: the entry to store.

        ``pending``: the tool calls waiting for results (default: the window's).
        """
        clean = make_message(message)  # validated before a redactor sees it
        if self.redactor is not None and not self.redact_context:
            clean = make_message(self.redactor(dict(clean)))
        pending = session.window.pending_tool_calls if pending is None else pending
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

    def prepare_all(
        self, session: Session, messages: Sequence[Message], metadata: Mapping[str, Any] | None
    ) -> list[Entry]:
        """The entries of a batch, each prepared before any is stored: tool calls and their
        results checked in order, as the window will take them."""
        pending, entries = session.window.pending_tool_calls, []
        for message in messages:
            entries.append(self.prepare(session, message, False, metadata, None, pending))
            pending = waiting_after(pending, entries[-1].message)
        return entries

    def check_sendable(self, session: Session, entries: list[Entry], budget: int) -> None:
        """Refuse a batch (before it is stored) that the build in ``budget`` after it could
        not send: tool calls of the batch left without their results (no provider takes a
        request that ends so: ``InvalidMessageError``), or a question (the batch's last
        user turn) that cannot fit, not even compressed, beside what is always sent
        (``MessageTooLargeError``, as ``build`` would raise it after storing). A batch that
        holds a system message changes what is always sent: ``build`` checks it."""
        pending = session.window.pending_tool_calls
        for entry in entries:
            pending = waiting_after(pending, entry.message)
        if pending and any(entry.message.get("tool_calls") for entry in entries):
            calls = ", ".join(sorted(pending))
            raise InvalidMessageError(
                f"the new turns end with tool calls that have no result ({calls}): send each"
                " call's result after it, in the same request"
            )
        last, window = entries[-1], session.window
        if last.message["role"] != "user" or any(e.pinned for e in entries):
            return
        if last.tokens > budget - window.pinned_tokens:  # else it fits whole: nothing to try
            always = window.build(max_tokens=window.pinned_tokens).total_tokens
            room = budget - always
            if last.tokens > room:
                compressed(window, last, room, budget)

    def previewed(self, session: Session, message: Mapping[str, Any], budget: int) -> Entry:
        """A message to preview, validated (and redacted as ``add`` would), with its tokens.

        A user turn is the question: compressed if with what is always sent it
        does not fit ``budget`` (``MessageTooLargeError`` if it cannot be).
        """
        clean = make_message(message)
        if clean["role"] == "tool" or clean["role"] in SYSTEM_ROLES:
            raise InvalidMessageError("preview takes a new user or assistant turn")
        if self.redactor is not None:
            clean = make_message(self.redactor(dict(clean)))
        entry = Entry(clean, self.tokenizer.message_tokens(clean), -1)
        room = budget - session.window.pinned_tokens
        if entry.tokens > room:
            if clean["role"] != "user":
                raise BudgetError(
                    f"the message takes {entry.tokens} tokens, over the {room} the budget of "
                    f"{budget} leaves after what is always sent"
                )
            entry = compressed(session.window, entry, room, budget, self.on_event)
        return entry

    # -- recall ----------------------------------------------------------------------

    def searched(self, started: float) -> None:
        if self.on_event is not None:
            self.on_event("recall_seconds", time.perf_counter() - started)

    def query_of(self, session: Session, query: str | None) -> str:
        if query:
            return query
        for entry in session.window.newest_first():
            if entry.message["role"] == "user":
                return text_of(entry.message)
        return ""

    def unarchived(self, session: Session, after: int = 0) -> list[Entry]:
        """The turns the window saw since last asked, to archive, less those up to ``after``
        (the archive's watermark, on a cold load): see ``context/archiving.py``."""
        queued, session.unarchived = session.unarchived, []
        return [entry for entry in queued if entry.seq > after] if after else queued

    def search(self, session: Session, query: str, depth: int) -> list[Any]:
        """The archive's ``depth`` best hits for ``query`` among the turns said before the
        session's question: archived as it is asked, the question matches itself best and
        would set the scale every other hit is measured on (and take a candidate's place)."""
        archive = self.archive
        assert archive is not None
        if session.question is None:
            return list(archive.search(session.id, query, k=depth))
        before = session.question[0].seq
        if isinstance(archive, Archive):  # leaves it out before ranking and fusion
            return archive.search(session.id, query, k=depth, before=before)
        hits = archive.search(session.id, query, k=depth)
        return [hit for hit in hits if hit.entry.seq < before]

    def scored(
        self, session: Session, hits: Sequence[Any]
    ) -> tuple[dict[int, float], float, list[int]]:
        """Each hit's and neighbour's score by seq, the least score recalled, and the seqs
        to read from the archive.

        Only neighbours that could come back are read: a unit scores as its best
        entry, and nothing below ``RecallPolicy.floor`` is recalled.
        """
        own = {hit.entry.seq: hit.score for hit in hits}
        scores, floor = self.recall.scores(own), self.recall.floor(own)
        found = set(own)
        return (
            scores,
            floor,
            [
                seq
                for seq, score in scores.items()
                if score >= floor and seq not in found and seq not in session.units
            ],
        )

    def uncached(
        self, session: Session, hits: Sequence[Any], around: Sequence[Entry]
    ) -> list[Entry]:
        """The entries found whose unit the session has not cached yet."""
        return [e for e in (*(hit.entry for hit in hits), *around) if e.seq not in session.units]

    def cache(self, session: Session, unit: Unit) -> None:
        """Keep a whole archived unit for later queries (entries are never rewritten)."""
        if len(session.units) >= CACHED_UNITS:
            session.units.clear()
        if is_whole(unit):  # a call still waiting for results is read again later
            session.units.update((entry.seq, unit) for entry in unit.entries)

    def ranked(
        self, session: Session, scores: Mapping[int, float], floor: float
    ) -> list[tuple[float, Unit]]:
        """The cached units of the scored seqs that could come back, ``(worth, unit)`` best
        first, each once (``RecallPolicy.rank``): none whose best entry scores below ``floor``."""
        cached = session.units
        units = {
            id(u): u
            for seq, score in scores.items()
            if score >= floor and (u := cached.get(seq)) is not None
        }
        return self.recall.rank(scores, units.values())

    def recent(
        self, session: Session, budget: int, question: int | None
    ) -> tuple[frozenset[str], int]:
        """The entry ids and tokens of the window's units holding its newest
        ``recent_messages`` messages before the question (the seq ``question``; None: a
        preview, whose question is not in the window), as many as fit in ``recent_share``
        of ``budget`` (the newest one always): every context keeps them."""
        wanted, seen, tokens = self.recall.recent_messages, 0, 0
        cap = budget * self.recall.recent_share
        ids: set[str] = set()
        for unit in session.window.newest_units():
            if seen >= wanted or (seen and tokens + unit.size > cap):
                break
            before = sum(1 for e in unit.entries if e.seq != question)
            if unit.pinned or not before:
                continue  # counted as pinned, or the question itself
            seen += before
            ids.update(e.id for e in unit.entries)
            tokens += unit.size
        return frozenset(ids), tokens

    def holds_all(self, session: Session, budget: int) -> bool:
        """The window holds every message and fits ``budget``: recall could change nothing."""
        return session.whole and session.window.total_tokens <= budget

    def recalled(
        self,
        session: Session,
        budget: int,
        ranked: list[tuple[float, Unit]],
        question: int | None = None,
    ) -> Recall:
        """The candidates ``ranked`` that come back, in the room the budget leaves them.

        The room is the budget less the window's pinned part and its newest
        messages (``recent``), which every context keeps; the candidates the
        window holds are kept there, the others recalled. With
        ``prompt_cache``, the units earlier turns recalled stay where they
        were put, and new ones go before the user turn ``question`` (a seq;
        None: a preview, which keeps nothing for later): between steps the
        context only grows, taking what fits of what the query earns. When
        what the query earns does not fit beside what is sent (and the last
        step is more than ``CALM`` turns back), when what is sent no longer
        fits, or when the turns recalled before that the query does not score
        take over ``CARRIED_SHARE`` of the budget, the prefix changes once (a
        step): those turns leave, and the window steps down as far as what
        the query earns needs (``Window.make_room``; a preview leaves the
        window's units out instead).
        """
        window = session.window  # its entries have their store seqs (see ``restore``)
        recent, recent_tokens = self.recent(session, budget, question)
        ranked = [(s, u) for s, u in ranked if not recent.issuperset(e.id for e in u.entries)]
        kept = {e.id for _, unit in ranked for e in unit.entries if window.holds(e.seq)}
        room = self.recall.room(budget, window.pinned_tokens, recent_tokens)
        if not self.settings.prompt_cache:
            found = self.recall.choose(ranked, kept, room, floor=0.0)
            return Recall(found.units, found.keep | recent)
        sticky = session.sticky
        sent = {e.id for unit in sticky for e in unit.entries}
        earned = self.recall.choose(ranked, kept | sent, room, floor=0.0)
        used = sum(unit.size for unit in sticky)
        free = budget - window.total_tokens - used
        carried = [unit for unit in sticky if unit.entries[0].id not in earned.keep]
        fresh = [(score, unit) for score, unit in ranked if unit.entries[0].id not in sent]
        outside = [(score, unit) for score, unit in fresh if unit.entries[0].id not in kept]
        beside = self.recall.choose(outside, (), max(0, free), floor=0.0)
        calm = question is not None and session.calm > 0
        if question is not None:
            session.calm = max(0, session.calm - 1)
        stale = sum(unit.size for unit in carried) > budget * CARRIED_SHARE
        if free >= 0 and (calm or earned.tokens <= free) and not stale:
            # no step: what fits beside the window and the turns recalled before
            earned = Recall(beside.units, earned.keep)
        else:  # a step: the turns recalled before that this query does not score leave
            stay = [unit for unit in sticky if unit.entries[0].id in earned.keep]
            if question is not None and len(stay) < len(sticky):
                gone = len(sticky) - len(stay)
                window.last_step = f"recalled turns given up: {gone} before seq {question}"
            sticky, used, carried = stay, sum(unit.size for unit in stay), []
            if question is not None:
                session.calm = CALM
                self.step_for(session, earned.tokens + used, question, recent_tokens)
                kept = {e.id for _, unit in ranked for e in unit.entries if window.holds(e.seq)}
            earned = self.recall.choose(fresh, kept, max(0, room - used), floor=0.0)
        at = question if question is not None else session.last_seq + 1
        for unit in earned.units:
            unit.at = at
        if question is not None:
            session.sticky = [*sticky, *earned.units]
        ids = frozenset(e.id for unit in carried for e in unit.entries)
        return Recall([*sticky, *earned.units], earned.keep | recent, ids)

    def step_for(self, session: Session, size: int, question: int, recent: int) -> None:
        """Step the window down so that ``size`` tokens are free beside it, never below what
        it keeps in every context (its pinned part, its newest messages and the question)."""
        window = session.window
        asked = next((unit.size for unit in window.newest_units() if unit.seq == question), 0)
        floor = window.pinned_tokens + math.ceil((recent + asked) / LOW_WATER)
        window.make_room(min(size, max(0, window.budget - floor)), keep=question)

    @staticmethod
    def merge(
        context: Context, recalled: list[Unit], budget: int, carried: frozenset[str] = frozenset()
    ) -> Context:
        """The window's context, built with the recalled units in place, reported so.

        (The window was built in ``budget`` less the recalled units' room, and
        put each recalled unit at its original position, its seq, or with
        ``prompt_cache`` where it was recalled: ``Unit.at``.)
        """
        if not recalled:
            return context
        report = with_recalled(context.report, recalled, budget, context.total_tokens, carried)
        return replace(context, report=report)

    def context(
        self, session: Session, budget: int, recalled: Recall, question: Question | None
    ) -> Context:
        """The context to send, ``finished`` (redacted, roles alternating) and within budget.

        It ends with the ``question`` (see ``context/question.py``), if any.
        A placeholder or a bridging message can take more tokens than it
        saves: then the context is built with less room, the largest room that fits.
        """
        built = self.build_window(session, budget, recalled, question)
        if not self.redact_context and self.strict_roles is None:
            return built
        fitted = self.finished(session, built, budget)
        if fitted.total_tokens > budget:
            overshoot = fitted.total_tokens - budget
            fitted = self.fit_finished(session, budget, recalled, question, budget - overshoot)
        if self.redact_context:
            sent = {id(message) for message in fitted.messages}
            session.redacted = {k: hit for k, hit in session.redacted.items() if id(hit[1]) in sent}
        return fitted

    def finished(self, session: Session, built: Context, budget: int) -> Context:
        """``built`` as it is sent: redacted (``redact="context"``), then with alternating
        roles (a model whose template wants them: ``ModelInfo.strict_roles``)."""
        if self.redact_context:
            built = self.redacted(session, built, budget)
        if self.strict_roles is not None:
            built = self.alternated(built)
        return built

    def alternated(self, built: Context) -> Context:
        """``built`` with one system message and alternating roles, its tokens recounted.

        Strict templates also take one system message: the system prompt and
        the rolling summary are joined (a blank line between them).
        """
        messages = built.messages
        systems = sum(1 for m in messages[:2] if m["role"] in SYSTEM_ROLES)
        if systems < 2 and is_alternating(messages):
            return built
        assert self.strict_roles is not None
        sent = alternate(_one_system(messages), self.strict_roles)
        count = self.tokenizer.message_tokens
        extra = sum(map(count, sent)) - sum(map(count, messages))
        report = built.report
        report = replace(report, used=report.used + extra, framing=report.framing + extra)
        return Context(sent, built.total_tokens + extra, report)

    def fit_finished(
        self, session: Session, budget: int, recalled: Recall, question: Question | None, room: int
    ) -> Context:
        """The finished context of the largest room up to ``room`` that fits in ``budget``.

        ``room`` (the budget less the overshoot) is tried first and usually
        fits; bisection then finds the largest room below the budget that does.
        """
        best, low, high = None, 0, budget - 1
        mid = min(max(room, 0), high)
        while low <= high:
            try:
                built = self.build_window(session, mid, recalled, question)
            except BudgetError:  # too little room for what must be kept: try more
                low = mid + 1
            else:
                attempt = self.finished(session, built, budget)
                if attempt.total_tokens > budget:
                    high = mid - 1
                else:
                    best, low = attempt, mid + 1
            mid = (low + high) // 2
        if best is None:
            raise BudgetError(f"the finished context does not fit in {budget} tokens")
        return best

    def redacted(self, session: Session, built: Context, budget: int) -> Context:
        """``built`` with its messages redacted and its tokens corrected (maybe over budget)."""
        hits = [self.redact_one(session, m) for m in built.messages]
        extra = sum(change for _, _, change in hits)
        redact, decisions = self.redactor, built.report.decisions
        assert redact is not None

        def previews() -> list[Decision]:  # the report shows no more than the model sees
            return [replace(d, preview=redacted_preview(d.preview, redact)) for d in decisions]

        report = replace(
            built.report, budget=budget, used=built.report.used + extra,
            framing=built.report.framing + extra, decisions=Decisions(previews),
        )  # fmt: skip
        return Context([clean for _, clean, _ in hits], built.total_tokens + extra, report)

    def redact_one(self, session: Session, message: Message) -> tuple[Message, Message, int]:
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

    def build_window(
        self, session: Session, budget: int, recalled: Recall, question: Question | None
    ) -> Context:
        """The window in ``budget`` less the recalled units, and they merged in.

        The ``question`` is left out last; if the window left it out all the
        same, recall goes first, then all but what is always sent (and the
        question is compressed if it must be).
        """
        keep = recalled.keep if question is None else recalled.keep | {question[0].id}
        window, units = session.window, recalled.units
        context = window.build(max_tokens=budget - recalled.tokens, keep=keep, added=units)
        built = self.merge(context, units, budget, recalled.carried)
        if question is None or sends(session.window, built, question):
            return built
        if recalled.units:
            return self.build_window(session, budget, Recall(), question)
        return with_question(session.window, budget, question[0], self.on_event)


def _one_system(messages: list[Message]) -> list[Message]:
    """``messages`` with their leading system messages joined into the first one."""
    head = 0
    while head < len(messages) and messages[head]["role"] in SYSTEM_ROLES:
        head += 1
    if head < 2:
        return messages
    texts = [text_of(m) for m in messages[:head]]
    system = {"role": messages[0]["role"], "content": "\n\n".join(t for t in texts if t)}
    return [system, *messages[head:]]


def with_recalled(
    report: Report,
    recalled: list[Unit],
    budget: int,
    tokens: int,
    carried: frozenset[str] = frozenset(),
) -> Report:
    """The window's ``report`` with the recalled units' tokens and rows: a recalled entry
    was evicted, its row is now ``recalled`` (and it is no longer counted out). Recall,
    not the window's ranking, chose them: their rows have no priority."""
    entries = [entry for unit in recalled for entry in unit.entries]

    def rows() -> list[Decision]:
        return [
            Decision.of(
                e, "recalled", CARRIED if e.id in carried else RECALLED, category="recalled"
            )
            for e in entries
        ]

    return report.amended(
        rows,
        budget=budget,
        used=tokens + report.reserve_output,
        evicted_entries=max(0, report.evicted_entries - len(entries)),
        evicted_tokens=max(0, report.evicted_tokens - sum(map(stored_tokens, entries))),
        recalled_entries=len(entries),
    )
