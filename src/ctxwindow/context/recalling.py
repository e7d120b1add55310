"""Recalling: which archived turns come back for a query, and where they go.

``Recalling`` is the part of the managers' ``Core`` (``context/core.py``)
that works on what an archive search found, without I/O: the query (the
newest user turn by default), the hits before the session's question, the
neighbours worth reading, the whole units cached per session, their ranking,
and what comes back in the room the budget leaves, with ``prompt_cache`` kept
in place from turn to turn (``recalled``). The manager's ``Archiver``
(``context/archiver/``) does the searching and reading between these steps.
"""

from __future__ import annotations

import heapq
import itertools
import math
import time
from collections.abc import Generator, Mapping, Sequence
from dataclasses import dataclass, field, replace

from ctxwindow.archive.base import Archive
from ctxwindow.compress.base import has_text
from ctxwindow.context.contracts import ArchiveLike, CoreSettings, EventHook
from ctxwindow.context.policy import LOW_WATER
from ctxwindow.context.session import CACHED_UNITS, Session
from ctxwindow.messages import SYSTEM_ROLES, Entry, Unit
from ctxwindow.policies import Window
from ctxwindow.policies.folding import shrink_alone
from ctxwindow.policies.rules import text_of
from ctxwindow.recall import Recall, RecallPolicy, is_whole, water_level

CARRIED_SHARE = 0.5
"""With the prompt cache, turns recalled for earlier questions that the new one does not
score stay in place only while they take at most this share of the budget."""
CALM = 4
"""With the prompt cache, the turns after a step that add what fits of what they earn rather
than step again (unless what is sent no longer fits): stepping whenever a question earned
more than fits stepped on nearly every turn of a chat, 1.3-1.6x cheaper a turn than a
sliding window instead of 2.2-2.5x."""
HEADROOM_FROM = 4096
"""With the prompt cache, the least budget (the window's) at which a step leaves room empty
for the next turns (``headroom``). A step that filled the budget left them none: the next
turn gave recalled turns up or stepped again. On LoCoMo's dev conversations, leaving the
room took the cache mode from 1.24x / 1.45x to 1.66x / 1.91x cheaper a turn than a sliding
window at 4,096 / 8,192 tokens, with the same evidence recall (``bench_cache.py``). Below,
a cache serves little (prefixes from 1,024 tokens) and the room is worth more to recall:
at 2,048 tokens it took 1.10x to 1.21x for 0.9 points."""


READ_AHEAD = 2
"""Recall reads candidates, best score first, until those read hold this many times the budget
in units that nothing unread can outrank (``Recalling.reading``)."""
FIRST_READ = 64
"""The fewest candidates a read asks for: the first, and each after it, which asks for as many
as should hold what is still wanted at the mean size of the units seen."""

SQUEEZED_LEAST = 32
"""The fewest tokens a newest message is compressed to for a context (``Recalling.recent``):
below it, fewer of the newest messages are kept, whole."""
SQUEEZED_KEPT = 32
"""The compressed copies of the newest messages a session keeps for its next builds."""


class Recalling:
    """The managers' recall, without I/O (a part of ``Core``, which sets these fields)."""

    settings: CoreSettings
    archive: ArchiveLike | None
    recall: RecallPolicy
    on_event: EventHook | None

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

    def search(
        self, session: Session, query: str, depth: int
    ) -> tuple[dict[int, float], list[Entry]]:
        """The archive's ``depth`` best hits for ``query`` among the turns said before the
        session's question (archived as it is asked, the question matches itself best and
        would set the scale every other hit is measured on, and take a candidate's place):
        ``seq -> score``, and the entries the search read (none from an ``Archive``, which
        ranks without reading: ``scored`` says which entries to read)."""
        archive = self.archive
        assert archive is not None
        before = None if session.question is None else session.question[0].seq
        if isinstance(archive, Archive):  # leaves them out before ranking and fusion
            return dict(archive.scores(session.id, query, k=depth, before=before)), []
        hits = [
            hit
            for hit in archive.search(session.id, query, k=depth)
            if before is None or hit.entry.seq < before
        ]
        return {hit.entry.seq: hit.score for hit in hits}, [hit.entry for hit in hits]

    def reading(
        self, session: Session, own: Mapping[int, float], budget: int
    ) -> Generator[list[int], None, list[tuple[float, Unit]]]:
        """What the hits ``own`` (``seq -> own score``) bring back in a ``budget``, read lazily:
        yields the seqs to read next (the reader caches their units, ``cache``, before it asks
        again) and returns the cached units of the hits and their neighbours, ``(worth, unit)``
        best first (``RecallPolicy.rank``).

        A unit scores as its best entry, and nothing below ``RecallPolicy.floor``
        comes back; its worth is at most its score. So the candidates are read
        in the order of their scores, the session's cached units taken as they
        come, and reading stops once the units read that are worth at least the
        best score left unread hold ``READ_AHEAD`` times the budget: recall's
        room is at most the budget, and what is left could only fill a gap
        (``RecallPolicy.choose`` passes over units that do not fit). A query
        that matches much of a long session reads a few times what it sends,
        not every candidate (at 10,000 messages and 4,096 tokens, a median of 55 turns read
        and 128 units ranked of ~1,000).
        """
        scores, floor = self.recall.scores(own), self.recall.floor(own)
        above = [seq for seq, score in scores.items() if score >= floor]  # in seq order
        order = sorted(above, key=scores.__getitem__, reverse=True)  # stable: ties by seq
        cached, units = session.units, dict[int, Unit]()
        waiting: list[tuple[float, int]] = []  # (-worth, size) of units not yet counted
        enough, counted, at, seen = READ_AHEAD * budget, 0, 0, 0
        worth, push, used = self.recall.worth, heapq.heappush, cached.move_to_end
        while at < len(order) and counted < enough:
            # as many as should hold what is still wanted, at the mean size seen so far
            step = max(FIRST_READ, math.ceil((enough - counted) * at / seen) if seen else 0)
            chunk = order[at : at + step]
            at += len(chunk)
            if missing := [seq for seq in chunk if seq not in cached]:
                yield missing
            for seq in chunk:
                unit = cached.get(seq)
                if unit is None or id(unit) in units:
                    continue  # not archived (forgotten), not whole yet, or counted
                used(seq)  # used again: the last to go (``cache``)
                units[id(unit)] = unit
                size = unit.size
                seen += size
                push(waiting, (-worth(scores[seq], size), size))
            bar = scores[order[at]] if at < len(order) else -math.inf
            while waiting and -waiting[0][0] >= bar:
                counted += heapq.heappop(waiting)[1]
        return self.recall.rank(scores, units.values())

    def uncached(self, session: Session, read: Sequence[Entry]) -> list[Entry]:
        """The entries read whose unit the session has not cached yet."""
        return [entry for entry in read if entry.seq not in session.units]

    def cache(self, session: Session, unit: Unit) -> None:
        """Keep a whole archived unit for later queries (entries are never rewritten); past
        ``CACHED_UNITS`` the entries used longest ago go (never this query's: it reads
        fewer, ``RecallPolicy.max_depth``)."""
        if not is_whole(unit):  # a call still waiting for results is read again later
            return
        cached = session.units
        for entry in unit.entries:
            cached[entry.seq] = unit
            cached.move_to_end(entry.seq)
        while len(cached) > CACHED_UNITS:
            cached.popitem(last=False)

    def recent(
        self, session: Session, budget: int, question: int | None, cap: int | None = None
    ) -> Recent:
        """The window's units holding its newest ``recent_messages`` messages before the
        question (the seq ``question``; None: a preview, whose question is not in the
        window): every context keeps them, in ``recent_share`` of ``budget`` (or ``cap``
        tokens: ``refit``). Whole when they fit there together; else the longest are
        compressed for the context, each to the same size (``squeezed``), when the window
        has a compressor and that size is at least ``SQUEEZED_LEAST`` tokens; else as many
        as fit whole, newest first (the newest always)."""
        wanted, seen, asked = self.recall.recent_messages, 0, 0
        cap = int(budget * self.recall.recent_share) if cap is None else cap
        units: list[Unit] = []
        for unit in session.window.newest_units():
            if seen >= wanted:
                break
            if question is not None and unit.entries[0].seq == question:
                asked = unit.size  # every context sends it too
            before = sum(1 for e in unit.entries if e.seq != question)
            if unit.pinned or not before:
                continue  # counted as pinned, or the question itself
            seen += before
            units.append(unit)
        if sum(unit.size for unit in units) > cap:
            squeezed = self.squeezed(session, units, cap)
            if squeezed is not None:
                return replace(squeezed, asked=asked)
        ids: set[str] = set()
        tokens = 0
        for unit in units:
            if tokens and tokens + unit.size > cap:
                break
            ids.update(e.id for e in unit.entries)
            tokens += unit.size
        return Recent(frozenset(ids), tokens, asked=asked)

    def squeezed(self, session: Session, units: list[Unit], cap: int) -> Recent | None:
        """``units`` (the newest first) within ``cap`` tokens, the longest single messages
        compressed for this context to the same size (a water level): None when the window
        cannot compress, or the level or a compression falls short. Compressed copies are
        kept per session (``keep_squeezed``)."""
        window = session.window
        compressor = getattr(window, "compressor", None)
        if compressor is None or not window.budget_in_tokens:
            return None
        can = [u for u in units if squeezable(u)]
        fixed = sum(unit.size for unit in units) - sum(unit.size for unit in can)
        level = water_level([unit.size for unit in can], cap - fixed)
        if level < SQUEEZED_LEAST:
            return None
        kept: dict[tuple[int, int], Unit | None] = {}
        ids: set[str] = set()
        out: list[Unit] = []
        tokens = 0
        for unit in units:
            if unit.size <= level or unit not in can:
                ids.update(e.id for e in unit.entries)
                tokens += unit.size
                continue
            key = (unit.seq, level)
            if key in session.squeezed:
                less = session.squeezed[key]
            else:
                entry = shrink_alone(compressor, unit.entries[0], level)
                less = None if entry is None else Unit([entry], entry.tokens)
            kept[key] = less
            if less is None:
                break
            out.append(less)
            tokens += less.size
        keep_squeezed(session, kept)
        return None if None in kept.values() else Recent(frozenset(ids), tokens, out)

    def holds_all(self, session: Session, budget: int) -> bool:
        """The window holds every message and fits ``budget``: recall could change nothing."""
        return session.whole and session.window.total_tokens <= budget

    def recalled(
        self,
        session: Session,
        budget: int,
        ranked: list[tuple[float, Unit]],
        question: int | None = None,
        *,
        preview: bool = False,
        narrow: bool = False,
    ) -> Recall:
        """The candidates ``ranked`` that come back, in the room the budget leaves them.

        The room is the budget less the window's pinned part and its newest
        messages (``recent``), which every context keeps; the candidates the
        window holds are kept there, the others recalled. With
        ``prompt_cache``, the units earlier turns recalled stay where they
        were put, and new ones go before the user turn ``question`` (a seq;
        None: a build that continues a turn, say with tool results, or a
        ``preview``, which keeps nothing for later): see ``in_place``. Without
        a question they go before the newest user turn the window holds
        (``opened``), so that the context still ends with the turn it
        continues, or, in a ``preview``, at the end, before the message previewed.
        ``narrow``: a build narrower than the window (``max_tokens``), which leaves its
        oldest turns out in steps of its own and no room empty for the next turns.
        """
        window = session.window  # its entries have their store seqs (see ``restore``)
        recent = self.recent(session, budget, question)
        every = recent.every
        ranked = [  # (a unit whose first entry is not recent is not: most are rejected so)
            (s, u)
            for s, u in ranked
            if u.entries[0].id not in every or not every.issuperset(e.id for e in u.entries)
        ]
        if not self.settings.prompt_cache:
            room = self.recall.room(budget, window.pinned_tokens, recent.tokens + recent.asked)
            found = self.recall.choose(ranked, held(window, ranked), room, floor=0.0)
            recent = self.refit(session, budget, question, recent, found, ranked)
            return recent.with_units(found.units, found.keep)
        spare = 0 if narrow else headroom(window, budget)  # what a step leaves empty
        sticky, earned, carried = self.in_place(session, budget, ranked, question, recent, spare)
        if question is not None:
            at = question
        elif preview:
            at = session.last_seq + 1
        else:
            at = opened(window, session.last_seq + 1)
        for unit in earned.units:
            unit.at = at
        if question is not None:
            session.sticky = [*sticky, *earned.units]
        ids = frozenset(e.id for unit in carried for e in unit.entries)
        found = Recall([*sticky, *earned.units], earned.keep, spare=earned.spare)
        recent = self.refit(session, budget, question, recent, found, ranked)
        return recent.with_units(found.units, found.keep, ids, found.spare)

    def refit(
        self,
        session: Session,
        budget: int,
        question: int | None,
        recent: Recent,
        found: Recall,
        ranked: list[tuple[float, Unit]],
    ) -> Recent:
        """The newest messages compressed only as much as what recall ``found`` needs: in the
        budget less the pinned part, the question, the recalled units and the candidates the
        window keeps for them (nothing is compressed for a query that recalls nothing). The
        first fit stays when the wider one would not fit that room or would keep fewer of
        them (it falls back to whole messages when its water level is too low)."""
        if not recent.squeezed:
            return recent
        every = recent.every
        kept = sum(  # (sized as the archive has them: never less than the window's)
            unit.size
            for _, unit in ranked
            if unit.entries[0].id in found.keep and unit.entries[0].id not in every
        )
        spare = budget - session.window.pinned_tokens - recent.asked - found.tokens - kept
        spare -= found.spare
        if spare <= recent.tokens:
            return recent
        wider = self.recent(session, budget, question, cap=spare)
        return wider if wider.tokens <= spare and wider.every >= recent.every else recent

    def in_place(
        self,
        session: Session,
        budget: int,
        ranked: list[tuple[float, Unit]],
        question: int | None,
        recent: Recent,
        spare: int = 0,
    ) -> tuple[list[Unit], Recall, list[Unit]]:
        """With ``prompt_cache``: the units earlier turns recalled that stay, what the query
        adds, and those staying that it does not score (``recent``: the window's newest
        messages, which every context keeps).

        Between steps the context only grows, taking what fits of what the
        query earns. When what is sent no longer fits beside the new turns, the
        turns recalled last that the query does not score leave first, if that
        makes room for the new turns and the best new match (``trim``:
        the prefix changes near its end). When what the
        query earns does not fit beside what is sent (and the last step is more
        than ``CALM`` turns back), when what is sent still does not fit, or when
        the turns recalled before that the query does not score take over
        ``CARRIED_SHARE`` of the budget, the prefix changes once (``stepped``). Recall
        leaves ``spare`` tokens of the budget empty (``headroom``), and a step makes room
        for them too, so that the next turns add to the context without changing it.
        """
        window, sticky = session.window, session.sticky
        kept, sent = held(window, ranked), {e.id for unit in sticky for e in unit.entries}
        room = self.recall.room(budget, window.pinned_tokens, recent.tokens + recent.asked)
        # weighed, not sent: what comes back is chosen again below, as copies
        earned = self.recall.choose(ranked, kept | sent, room, floor=0.0, copies=False)
        free = budget - window.total_tokens - sum(unit.size for unit in sticky)
        if free < 0:  # the new turns took the room: the turns recalled last leave, if enough
            best = earned.units[0].size if earned.units else 0  # the query's best new match
            sticky = self.trim(session, earned.keep, best - free, question)
            free = budget - window.total_tokens - sum(unit.size for unit in sticky)
            sent = {e.id for unit in sticky for e in unit.entries}
        carried = [unit for unit in sticky if unit.entries[0].id not in earned.keep]
        fresh = [(score, unit) for score, unit in ranked if unit.entries[0].id not in sent]
        calm = question is not None and session.calm > 0
        if question is not None:
            session.calm = max(0, session.calm - 1)
        stale = sum(unit.size for unit in carried) > budget * CARRIED_SHARE
        if free >= 0 and (calm or earned.tokens <= free) and not stale:
            # no step: what fits beside the window and the turns recalled before
            outside = [(score, unit) for score, unit in fresh if unit.entries[0].id not in kept]
            beside = self.recall.choose(outside, (), max(0, free - spare), floor=0.0)
            return sticky, Recall(beside.units, earned.keep), carried
        stay = self.stepped(session, earned, question, recent.tokens, spare)
        used = sum(unit.size for unit in stay)
        # the room again: the step folded what it evicted into the summary, which may grow
        room = self.recall.room(budget, window.pinned_tokens, recent.tokens + recent.asked)
        earned = self.recall.choose(
            fresh, held(window, ranked), max(0, room - used - spare), floor=0.0
        )
        if question is not None:  # what the step evicted may come back: it is out of the window
            self.step_for(session, earned.tokens + used + spare, question, recent.tokens)
        return stay, replace(earned, spare=spare), []

    def trim(
        self, session: Session, scored: frozenset[str], excess: int, question: int | None
    ) -> list[Unit]:
        """The turns recalled before, less those placed last that the query does not score,
        as few as free ``excess`` tokens (``trimmed``; room for the new turns and for the
        best match the query earns): the prefix changes from the first one given up, not
        at the front, as a step would. The report's last step says so."""
        sticky = trimmed(session.sticky, scored, excess)
        if question is not None and len(sticky) < len(session.sticky):
            gone = len(session.sticky) - len(sticky)
            session.window.last_step = (
                f"room for new turns: {gone} recalled turn(s) given up before seq {question}"
            )
        return sticky

    def stepped(
        self, session: Session, earned: Recall, question: int | None, recent: int, spare: int
    ) -> list[Unit]:
        """A step: the turns recalled before that the query does not score leave (the others,
        returned, stay), and the window steps down as far as what the query earns and the
        ``spare`` room for the next turns need (``Window.make_room``; a preview leaves the
        window's units out instead)."""
        window, sticky = session.window, session.sticky
        stay = [unit for unit in sticky if unit.entries[0].id in earned.keep]
        if question is None:
            return stay
        if len(stay) < len(sticky):
            gone = len(sticky) - len(stay)
            window.last_step = f"recalled turns given up: {gone} before seq {question}"
        session.calm = CALM
        size = earned.tokens + sum(unit.size for unit in stay) + spare
        self.step_for(session, size, question, recent)
        return stay

    def step_for(self, session: Session, size: int, question: int, recent: int) -> None:
        """Step the window down so that ``size`` tokens are free beside it, never below what
        it keeps in every context (its pinned part, its newest messages and the question)."""
        window = session.window
        asked = next((unit.size for unit in window.newest_units() if unit.seq == question), 0)
        floor = window.pinned_tokens + math.ceil((recent + asked) / LOW_WATER)
        window.make_room(min(size, max(0, window.budget - floor)), keep=question)


def headroom(window: Window, budget: int) -> int:
    """With the prompt cache, the room a step leaves empty for the next turns, which then add
    to the context without changing its prefix: the size of the window's newest ``CALM``
    turns (``2 * CALM`` units: a question and its answer each), what the turns until recall
    may step again take if they are like those. None when that is more than a step of the
    build's ``budget`` (``1 - LOW_WATER`` of its room beside the pinned part): those turns
    would not fit all the same, and the room is worth more to recall (on BEAM's turns of
    ~1,000 tokens, part of it cost 1-3 points of evidence recall); none in a window of less
    than ``HEADROOM_FROM`` tokens."""
    if window.budget < HEADROOM_FROM:
        return 0
    step = int((budget - min(window.pinned_tokens, budget)) * (1 - LOW_WATER))
    calm = sum(unit.size for unit in itertools.islice(window.newest_units(), 2 * CALM))
    return calm if calm <= step else 0


@dataclass(frozen=True)
class Recent:
    """The window's newest messages that every context keeps: the entry ``ids`` kept whole,
    the ``squeezed`` units (compressed copies, for this context only), ``tokens`` in all;
    and the tokens of the question (``asked``), which every context sends as well."""

    ids: frozenset[str]
    tokens: int
    squeezed: list[Unit] = field(default_factory=list)
    asked: int = 0  # the tokens of the question, when the window holds it

    @property
    def squeezed_ids(self) -> frozenset[str]:
        """The ids of the entries sent compressed."""
        return frozenset(e.id for unit in self.squeezed for e in unit.entries)

    @property
    def every(self) -> frozenset[str]:
        """The ids of every entry kept, whole or squeezed."""
        return self.ids | self.squeezed_ids

    def with_units(
        self,
        units: list[Unit],
        keep: frozenset[str],
        carried: frozenset[str] = frozenset(),
        spare: int = 0,
    ) -> Recall:
        """What comes back: the recalled ``units`` and these messages, squeezed or kept
        (``spare``: see ``Recall``)."""
        sent = [*units, *self.squeezed]
        return Recall(sent, keep | self.ids, carried, self.squeezed_ids, spare)


def trimmed(sticky: list[Unit], scored: frozenset[str], excess: int) -> list[Unit]:
    """``sticky`` less the units placed last that the query does not score, as few as free
    ``excess`` tokens; ``sticky`` itself when those are not enough. The prefix then changes
    only from the first unit given up: the units placed last sit nearest the end."""
    out = list(sticky)
    freed = 0
    for i in range(len(out) - 1, -1, -1):
        if freed >= excess:
            break
        if out[i].entries[0].id not in scored:
            freed += out[i].size
            del out[i]
    return out if freed >= excess else sticky


def keep_squeezed(session: Session, made: dict[tuple[int, int], Unit | None]) -> None:
    """Keep the compressed copies ``made`` (by seq and size) for the session's next builds,
    with those of the same messages made before (a build asks two sizes: the room recall
    is given, then what it left, ``refit``) up to ``SQUEEZED_KEPT``; older ones go."""
    seqs = {seq for seq, _ in made}
    kept = {key: unit for key, unit in session.squeezed.items() if key[0] in seqs}
    kept.update(made)
    session.squeezed = kept if len(kept) <= SQUEEZED_KEPT else made


def squeezable(unit: Unit) -> bool:
    """A unit of one user or assistant message of text, no tool call: one a context may
    send compressed in its place (never a call, whose results must follow it whole)."""
    if len(unit.entries) != 1 or unit.pending or unit.pinned:
        return False
    message = unit.entries[0].message
    plain = message["role"] in ("user", "assistant") and not message.get("tool_calls")
    return plain and has_text(unit.entries[0])


def opened(window: Window, default: int) -> int:
    """Where what comes back goes in a build without a question: before the newest user turn
    ``window`` keeps, which opened the turn the build continues (its assistant's tool calls
    and their results, or its answer), not after the results the model is to work on; when
    the window keeps no user turn, before the oldest message it keeps; ``default`` when it
    keeps none."""
    at = default
    for entry in window.newest_first():
        if entry.message["role"] in SYSTEM_ROLES:
            continue
        at = entry.seq
        if entry.message["role"] == "user":
            break
    return at


def held(window: Window, ranked: list[tuple[float, Unit]]) -> set[str]:
    """The entry ids of the ranked units that ``window`` holds (by their store seqs)."""
    kept = window.holding(e.seq for _, unit in ranked for e in unit.entries)
    return {e.id for _, unit in ranked for e in unit.entries if e.seq in kept}
