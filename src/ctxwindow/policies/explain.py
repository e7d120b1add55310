"""The explanation a window gives with every context it builds, and ``Context``.

For every entry: kept, pinned, compressed (from -> to tokens, by which
compressor) or evicted (why); tokens by category and by priority; the budget
and the headroom. ``report.to_dict()`` is JSON-serialisable and ``str(report)``
reads as a table, so "why did the bot forget X?" takes one look.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from functools import cached_property
from typing import Any, overload

from ctxwindow.messages import Entry, Message, stored_tokens
from ctxwindow.policies.rules import Priority, text_of

_PRIORITY_NAMES = {int(p): p.name for p in Priority}

# What became of a message in a context: in it (whole, as the window keeps it, made
# smaller, or brought back from the archive) or not (folded into the rolling summary,
# which still carries something of it, or left out: a message folded in of which
# nothing is left in the summary is left out too, "evicted").
IN_CONTEXT = ("pinned", "kept", "compressed", "recalled")
STATES = (*IN_CONTEXT, "summarized", "evicted")
EARLIER = "left out before the window's record of evictions begins"


@dataclass(frozen=True)
class Decision:
    """One message and its state in this context: a row of the report.

    ``tokens`` is what the message takes in this context (0 when it is not in
    it), ``stored_tokens`` what it takes as stored; ``priority`` and
    ``category`` are the ones the window applied (``priority`` is None for a
    window that does not rank, such as ``TokenWindow``). ``seq`` is the
    stored sequence number; None for a message that is not stored (the
    rolling summary).
    """

    id: str
    seq: int | None
    role: str
    category: str
    priority: str | None
    state: str  # one of STATES
    tokens: int
    stored_tokens: int
    reason: str = ""
    compressor: str | None = None
    preview: str = ""

    @property
    def in_context(self) -> bool:
        return self.state in IN_CONTEXT

    @classmethod
    def of(
        cls,
        entry: Entry,
        state: str,
        reason: str = "",
        *,
        category: str | None = None,
        priority: int | None = None,
        stored: bool = True,
        stored_as: int | None = None,
    ) -> Decision:
        """The row of ``entry`` (as it is in the context, if it is) in ``state``; ``stored``
        False for a message made by the window (the summary: no seq, its own tokens);
        ``stored_as``: the stored tokens, if the entry's compression record lacks them."""
        text = " ".join(text_of(entry.message)[:200].split())
        record = entry.metadata.get("compressed")
        by = record.get("by") if state == "compressed" and isinstance(record, Mapping) else None
        return cls(
            id=entry.id,
            seq=entry.seq if stored else None,
            role=entry.message["role"],
            category=category or entry.kind,
            priority=None if priority is None else _PRIORITY_NAMES[priority],
            state=state,
            tokens=entry.tokens if state in IN_CONTEXT else 0,
            stored_tokens=(entry.tokens if not stored else stored_as or stored_tokens(entry)),
            reason=reason,
            compressor=None if by is None else str(by),
            preview=text[:60] + ("…" if len(text) > 60 else ""),
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class Decisions(Sequence[Decision]):
    """The decisions of a report, made when first read (a build need not pay for them)."""

    def __init__(self, make: Callable[[], list[Decision]]) -> None:
        self._make: Callable[[], list[Decision]] | None = make
        self._items: list[Decision] = []

    def _all(self) -> list[Decision]:
        if self._make is not None:
            self._items, self._make = self._make(), None
        return self._items

    @overload
    def __getitem__(self, index: int) -> Decision: ...

    @overload
    def __getitem__(self, index: slice) -> list[Decision]: ...

    def __getitem__(self, index: int | slice) -> Decision | list[Decision]:
        return self._all()[index]

    def __len__(self) -> int:
        return len(self._all())

    def __iter__(self) -> Iterator[Decision]:
        return iter(self._all())

    def __eq__(self, other: object) -> bool:
        return list(self) == list(other) if isinstance(other, Sequence) else NotImplemented

    def __repr__(self) -> str:
        return repr(self._all())


class Totals(Mapping[str, int]):
    """Tokens by name (say, by priority), added up when first read (a build need not pay)."""

    def __init__(self, make: Callable[[], dict[str, int]]) -> None:
        self._make: Callable[[], dict[str, int]] | None = make
        self._items: dict[str, int] = {}

    def _all(self) -> dict[str, int]:
        if self._make is not None:
            self._items, self._make = self._make(), None
        return self._items

    def __getitem__(self, key: str) -> int:
        return self._all()[key]

    def __len__(self) -> int:
        return len(self._all())

    def __iter__(self) -> Iterator[str]:
        return iter(self._all())

    def __repr__(self) -> str:
        return repr(self._all())


@dataclass(frozen=True)
class Report:
    """Why the context looks the way it does: one row per message, and totals.

    ``decisions`` has one row per message the window knows of (see
    ``Decision``), in seq order, the summary first. The totals add up to the
    rows: the tokens by category, priority and state are the sums of the rows
    in the context; ``used`` is those plus ``framing`` (tokens in no message:
    the chat format's priming, tool definitions, placeholders) plus
    ``reserve_output``; the evicted ones are the rows left out plus
    ``earlier_entries`` (left out before the window's record begins: it keeps
    the last ``log_size`` evictions, see ``PriorityWindow``). The rows and
    the totals drawn from them are made when first read (a build need not pay).
    """

    budget: int
    used: int
    reserve_output: int
    decisions: Sequence[Decision] = field(default_factory=list)
    framing: int = 0
    # Running totals, cheap to read (unlike ``decisions``, built on first use):
    evicted_entries: int = 0  # messages of the history left out of this context (or summarized)
    evicted_tokens: int = 0  # their stored tokens: what sending the full history would add
    recalled_entries: int = 0  # archived entries brought back into this context
    estimated: bool = False  # counts are the estimator's, not what the provider bills
    # The leading messages the next turn sends again unchanged unless the window steps
    # (what a provider's prompt cache can serve; docs/caching.md), and why the window
    # last evicted ("over budget at seq 41", ...; None: it has not).
    stable_messages: int = 0
    last_step: str | None = None
    # What keeps the window's housekeeping from doing its work now (a rolling summary that
    # failed, waits or could not be made; over budget with nothing it may evict), or None.
    compaction: str | None = None

    @property
    def headroom(self) -> int:
        return self.budget - self.used

    @cached_property
    def tokens_by_category(self) -> Mapping[str, int]:
        """Tokens in this context by the category the window applied (rows in the context)."""
        return Totals(lambda: _sums(self.decisions, lambda d: d.category))

    @cached_property
    def tokens_by_priority(self) -> Mapping[str, int]:
        """Tokens in this context by priority, highest first (empty: a window that does
        not rank)."""
        return Totals(lambda: _by_priority(self.decisions))

    @cached_property
    def tokens_by_state(self) -> Mapping[str, int]:
        """Tokens in this context by state (``summarized`` and ``evicted``: 0)."""
        return Totals(lambda: _sums(self.decisions, lambda d: d.state))

    @cached_property
    def messages_by_state(self) -> Mapping[str, int]:
        """How many rows are in each state."""
        return Totals(lambda: _counts(self.decisions))

    @property
    def earlier_entries(self) -> int:
        """Messages left out before the first evicted row (not itemised)."""
        return self.evicted_entries - sum(not d.in_context for d in self.decisions)

    @property
    def earlier_tokens(self) -> int:
        return self.evicted_tokens - sum(
            d.stored_tokens for d in self.decisions if not d.in_context
        )

    def amended(self, rows: Callable[[], Sequence[Decision]], **changes: Any) -> Report:
        """This report with the rows ``rows()`` makes (when first read) in place of those
        of the same ids, the others added in seq order; ``changes`` to its other fields."""
        earlier = self.decisions

        def decisions() -> list[Decision]:
            new = list(rows())
            ids = {d.id for d in new}
            return in_order([*(d for d in earlier if d.id not in ids), *new])

        return replace(self, decisions=Decisions(decisions), **changes)

    def covering(
        self, history: Sequence[Entry], row: Callable[[Entry], Decision] | None = None
    ) -> Report:
        """This report with a row for every entry of ``history`` (the session as stored):
        an entry it has no row for was left out before the window's record begins (its
        row: ``row(entry)``, by default ``evicted``), so nothing is counted as earlier.
        Reads the rows: O(history)."""
        make = row or (lambda entry: Decision.of(entry, "evicted", EARLIER))
        known = {d.id for d in self.decisions}
        rows = in_order([*self.decisions, *(make(e) for e in history if e.id not in known)])
        out = [d for d in rows if not d.in_context]
        return replace(
            self,
            decisions=rows,
            evicted_entries=len(out),
            evicted_tokens=sum(d.stored_tokens for d in out),
        )

    def page(
        self,
        entries: Sequence[Entry],
        after: int,
        row: Callable[[Entry], Decision] | None = None,
        *,
        state: str | None = None,
    ) -> Report:
        """This report with the rows of one page of the history only: ``entries`` (the
        stored entries with ``seq > after``, in order; their rows, ``row(entry)`` for
        those it has none for, as ``covering``) but for the rows the context sends
        first (the system prompt, the summary), which lead the first page (``after``
        0), as in ``covering``'s order; ``state``: only the rows in that state. The
        totals stay the whole session's: the messages left out before the window's
        record begins are counted as evicted rows (of other pages), not as ``earlier``.
        O(page + window)."""
        make = row or (lambda entry: Decision.of(entry, "evicted", EARLIER))
        through = entries[-1].seq if entries else after
        mine = [
            d for d in self.decisions
            if (not after and _leading(d)) or (not _leading(d) and after < (d.seq or 0) <= through)
        ]  # fmt: skip
        known = {d.id for d in self.decisions}
        rows = in_order([*mine, *(make(e) for e in entries if e.id not in known)])
        return self._paged([d for d in rows if state is None or d.state == state])

    def in_state(self, state: str, after: int, limit: int | None) -> tuple[Report, bool]:
        """This report with the rows in ``state`` after seq ``after`` only, at most ``limit``
        of them (None: all), and on the first page the leading ones (the system prompt,
        the summary); and whether more follow; its totals the whole session's. Every row in
        a state but ``evicted`` is one the window itemises, so no history is read:
        O(window). Evicted rows are the history's: ``page(entries, after, state=...)``
        with the page's evicted entries."""
        if state == "evicted":
            raise ValueError("evicted rows are the history's: use page(..., state='evicted')")
        rows = [d for d in self.decisions if d.state == state]
        lead = [d for d in rows if _leading(d)] if not after else []
        rest = [d for d in rows if not _leading(d) and (d.seq or 0) > after]
        more = limit is not None and len(rest) > limit
        return self._paged(in_order([*lead, *rest[:limit]])), more

    def _paged(self, rows: list[Decision]) -> Report:
        """This report with ``rows`` (a page of them); its totals the whole session's."""
        counts = dict(self.messages_by_state)
        counts["evicted"] = counts.get("evicted", 0) + self.earlier_entries
        paged = replace(self, decisions=rows)
        # The totals drawn from rows, the whole report's (cached properties, set ahead).
        paged.__dict__.update(
            tokens_by_category=self.tokens_by_category,
            tokens_by_priority=self.tokens_by_priority,
            tokens_by_state=self.tokens_by_state,
            messages_by_state=counts,
        )
        return paged

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (its schema: docs/context.md, "The report")."""
        return {
            "budget": self.budget,
            "used": self.used,
            "headroom": self.headroom,
            "reserve_output": self.reserve_output,
            "framing": self.framing,
            "estimated": self.estimated,
            "stable_messages": self.stable_messages,
            "last_step": self.last_step,
            "compaction": self.compaction,
            "tokens_by_category": dict(self.tokens_by_category),
            "tokens_by_priority": dict(self.tokens_by_priority),
            "tokens_by_state": dict(self.tokens_by_state),
            "messages_by_state": dict(self.messages_by_state),
            "evicted_entries": self.evicted_entries,
            "evicted_tokens": self.evicted_tokens,
            "recalled_entries": self.recalled_entries,
            "earlier": {"entries": self.earlier_entries, "tokens": self.earlier_tokens},
            "decisions": [d.to_dict() for d in self.decisions],
        }

    def __str__(self) -> str:
        lines = [
            f"budget {self.budget:,} tokens: {self.used:,} used "
            f"(framing {self.framing:,}, reply reserve {self.reserve_output:,}), "
            f"headroom {self.headroom:,}" + (" (estimated counts)" if self.estimated else ""),
            "by category: " + _pairs(self.tokens_by_category),
            "by priority: " + _pairs(self.tokens_by_priority),
            "messages: " + _pairs(self.messages_by_state),
            f"stable prefix: the first {self.stable_messages} message(s); last eviction: "
            + (self.last_step or "none"),
        ]
        if self.compaction:
            lines.append(f"compaction: {self.compaction}")
        if self.earlier_entries:
            lines.append(
                f"earlier: {self.earlier_entries:,} message(s), {self.earlier_tokens:,} tokens "
                "left out (not itemised)"
            )
        lines.append(
            f"{'seq':>5}  {'state':<10} {'priority':<8} {'category':<9} {'tokens':>9}  why / what"
        )
        for d in self.decisions:
            tokens = f"({d.stored_tokens})" if not d.in_context else str(d.tokens)
            if d.in_context and d.tokens != d.stored_tokens:
                tokens = f"{d.stored_tokens}->{d.tokens}"
            why = d.reason or d.preview
            if d.compressor:
                why = f"by {d.compressor}: {why}"
            seq = "-" if d.seq is None else str(d.seq)
            priority = d.priority or "-"
            lines.append(
                f"{seq:>5}  {d.state:<10} {priority:<8} {d.category:<9} {tokens:>9}  {why}"
            )
        return "\n".join(lines)


def in_order(rows: Iterable[Decision]) -> list[Decision]:
    """Rows as the context sends them: the system prompt, the rolling summary (no seq),
    then by seq."""

    def place(row: Decision) -> tuple[int, int]:
        if row.category == "system" and row.state == "pinned":
            return (0, row.seq or 0)
        return (1, -1) if row.seq is None else (2, row.seq)

    return sorted(rows, key=place)


def _leading(row: Decision) -> bool:
    """Whether ``row`` comes before the rows in seq order (``in_order``): the system
    prompt, the rolling summary."""
    return row.seq is None or (row.category == "system" and row.state == "pinned")


def _sums(rows: Iterable[Decision], key: Callable[[Decision], str]) -> dict[str, int]:
    sums: dict[str, int] = {}
    for row in rows:
        if row.in_context:
            sums[key(row)] = sums.get(key(row), 0) + row.tokens
    return dict(sorted(sums.items()))


def _by_priority(rows: Iterable[Decision]) -> dict[str, int]:
    sums = _sums((r for r in rows if r.priority is not None), lambda d: d.priority or "")
    if not sums:
        return {}
    return {p.name: sums.get(p.name, 0) for p in reversed(Priority)}


def _counts(rows: Iterable[Decision]) -> dict[str, int]:
    counts = dict.fromkeys(STATES, 0)
    for row in rows:
        counts[row.state] += 1
    return counts


def _pairs(counts: Mapping[str, int]) -> str:
    return ", ".join(f"{k} {v:,}" for k, v in counts.items() if v) or "none"


@dataclass(frozen=True)
class Context:
    """What a window's ``build`` or ``preview`` returns: messages ready to send, and why."""

    messages: list[Message]
    total_tokens: int
    report: Report

    def plus(self, row: Decision, message: Message, *, budget: int | None = None) -> Context:
        """This context with ``message`` appended (its ``row`` says how and its tokens),
        within ``budget``."""
        budget = self.report.budget if budget is None else budget
        used = self.report.used + row.tokens
        report = self.report.amended(lambda: [row], budget=budget, used=used)
        return Context([*self.messages, message], self.total_tokens + row.tokens, report)

    def with_stable(self, stable: int, last_step: str | None) -> Context:
        """This context, its report saying how much of it is stable and the last step."""
        report = replace(self.report, stable_messages=stable, last_step=last_step)
        return Context(self.messages, self.total_tokens, report)
