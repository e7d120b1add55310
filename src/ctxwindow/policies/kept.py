"""What a window keeps: its units and their messages, in order, with running totals.

Every window stores alike. Kept units sit in a dict by seq (insertion order is
chronological). Their messages sit in a list, in order, beside a list of their
entry seqs, read from a head index: the oldest unit leaves by moving the head
(the lists are cut now and then), any other by a bisection and a cut. A list
is what copies fastest when the window is read, on every turn. Two pinned
units are held apart: the system prompt (always first) and a rolling summary
(after any leading system messages). The totals change as units come and go,
so nothing is counted twice. Which unit leaves, and when, is the window's.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Callable, Collection, Iterable, Iterator
from itertools import islice

from ctxwindow.messages import SYSTEM_ROLES, Entry, Message, Unit


def unit_tokens(unit: Unit) -> int:
    """Prompt tokens of a unit's messages."""
    entries = unit.entries
    return entries[0].tokens if len(entries) == 1 else sum(e.tokens for e in entries)


class Kept:
    """The units a window keeps, their messages, and what they add up to.

    ``used`` and ``pinned_used`` are in the window's budget unit (``Unit.size``),
    ``tokens`` and ``pinned_tokens`` in prompt tokens; all four start at the
    window's fixed overhead. ``count`` is the number of kept messages, the
    system prompt excluded (a rolling summary counts).
    """

    def __init__(self, overhead: int, overhead_tokens: int) -> None:
        self.units: dict[int, Unit] = {}  # pinned or not, by seq; not the system prompt or summary
        # Every message of ``units`` in order, and its entry seq, from ``_head`` on.
        self._messages: list[Message] = []
        self._seqs: list[int] = []
        self._head = 0
        self.system: Unit | None = None
        self.summary: Unit | None = None
        self._overhead = (overhead, overhead_tokens)
        self.used = self.pinned_used = overhead
        self.tokens = self.pinned_tokens = overhead_tokens
        self.count = 0

    # -- changing ------------------------------------------------------------------

    def add(self, unit: Unit) -> None:
        """Keep a new unit of one message, the newest (tool results join it by ``grow``)."""
        entry = unit.entries[0]
        self.units[entry.seq] = unit
        self._messages.append(entry.message)
        self._seqs.append(entry.seq)
        self.used += unit.size
        self.tokens += entry.tokens
        self.count += 1
        if entry.pinned:
            self.pinned_used += unit.size
            self.pinned_tokens += entry.tokens

    def grow(self, unit: Unit, entry: Entry, size: int) -> None:
        """Add a message of ``size`` to the newest kept unit (a tool result to its call)."""
        unit.entries.append(entry)
        unit.size += size
        self._messages.append(entry.message)
        self._seqs.append(entry.seq)
        self.used += size
        self.tokens += entry.tokens
        self.count += 1
        if unit.pinned:
            self.pinned_used += size
            self.pinned_tokens += entry.tokens

    def remove(self, unit: Unit) -> None:
        """Forget a kept unit, wherever it is in the order."""
        entries = unit.entries
        first, n = entries[0], len(entries)
        del self.units[first.seq]
        at = self._head
        if self._seqs[at] != first.seq:  # not the oldest: found by bisection, cut out
            at = bisect_left(self._seqs, first.seq, at)
            del self._messages[at : at + n], self._seqs[at : at + n]
        elif at + n > 32 and 2 * (at + n) > len(self._seqs):  # the oldest: cut now and then
            del self._messages[: at + n], self._seqs[: at + n]
            self._head = 0
        else:
            self._head = at + n
        tokens = first.tokens if n == 1 else sum(e.tokens for e in entries)
        self.used -= unit.size
        self.tokens -= tokens
        self.count -= n
        if first.pinned:
            self.pinned_used -= unit.size
            self.pinned_tokens -= tokens

    def replace(self, unit: Unit, entries: list[Entry], size: int) -> None:
        """Put new entries (a smaller form, the same seqs) in place of a unit's."""
        at = bisect_left(self._seqs, unit.seq, self._head)
        end = at + len(unit.entries)
        self._messages[at:end] = [entry.message for entry in entries]
        self._seqs[at:end] = [entry.seq for entry in entries]
        self.used += size - unit.size
        self.tokens += sum(e.tokens for e in entries) - sum(e.tokens for e in unit.entries)
        unit.entries, unit.size = entries, size

    def set_system(self, unit: Unit) -> None:
        """Put a (pinned) system prompt in place of the old one."""
        old, self.system = self.system, unit
        if old is not None:
            self._add_totals(old, -1, counted=False)
        self._add_totals(unit, +1, counted=False)

    def set_summary(self, unit: Unit) -> None:
        """Put a (pinned) rolling summary in place of the old one."""
        old, self.summary = self.summary, unit
        if old is not None:
            self._add_totals(old, -1)
        self._add_totals(unit, +1)

    def clear(self) -> None:
        """Forget every unit but the system prompt."""
        self.units.clear()
        self._messages.clear()
        self._seqs.clear()
        self._head = 0
        self.summary = None
        size, tokens = self._overhead
        if self.system is not None:
            size, tokens = size + self.system.size, tokens + unit_tokens(self.system)
        self.used = self.pinned_used = size
        self.tokens = self.pinned_tokens = tokens
        self.count = 0

    def _add_totals(self, unit: Unit, sign: int, *, counted: bool = True) -> None:
        tokens = unit_tokens(unit)
        self.used += sign * unit.size
        self.tokens += sign * tokens
        if counted:
            self.count += sign * len(unit.entries)
        if unit.pinned:
            self.pinned_used += sign * unit.size
            self.pinned_tokens += sign * tokens

    # -- reading -------------------------------------------------------------------

    def messages(self) -> list[Message]:
        """The system prompt, then every kept message in order, the summary in its place."""
        head, system = self._head, self.system
        if system is None:
            body = self._messages[head:]
        elif head:  # one copy: the slot before the head (a message gone) takes the prompt
            body = self._messages[head - 1 :]
            body[0] = system.entries[0].message
        else:
            body = [system.entries[0].message, *self._messages]
        return self._with_summary(body)

    def messages_without(self, units: Iterable[Unit], added: Iterable[Unit] = ()) -> list[Message]:
        """``messages()`` less the messages of kept ``units``, plus those of ``added``
        (units the window does not keep, say recalled ones), each placed by its seq, or
        before the entry of seq ``unit.at`` if set.

        Each unit is found by a bisection; the rest is copied in slices, so
        the cost is a copy of the messages, however many the window keeps.
        """
        seqs, messages, head = self._seqs, self._messages, self._head
        cuts: list[tuple[int, int, int, Unit | None]] = []  # (start, end, seq, unit to put in)
        for unit in units:
            start = bisect_left(seqs, unit.seq, head)
            cuts.append((start, start + len(unit.entries), unit.seq, None))
        for unit in added:
            start = bisect_left(seqs, unit.seq if unit.at is None else unit.at, head)
            cuts.append((start, start, unit.seq, unit))
        cuts.sort()  # no two cuts share their first three fields: never compared by the unit
        body = [] if self.system is None else [self.system.entries[0].message]
        at = head
        for start, end, _, put in cuts:
            body += messages[at:start]
            if put is not None:
                body += [entry.message for entry in put.entries]
            at = max(at, end)
        body += messages[at:]
        return self._with_summary(body)

    def _with_summary(self, body: list[Message]) -> list[Message]:
        """``body`` with the summary after its leading system messages."""
        if self.summary is not None:
            at = 0
            while at < len(body) and body[at]["role"] in SYSTEM_ROLES:
                at += 1
            body.insert(at, self.summary.entries[0].message)
        return body

    def holds(self, seq: int) -> bool:
        """Whether a kept message (whole or compressed) has this entry seq."""
        at = bisect_left(self._seqs, seq, self._head)
        return at < len(self._seqs) and self._seqs[at] == seq

    def holding(self, seqs: Iterable[int]) -> set[int]:
        """The seqs of ``seqs`` that a kept message has: one set operation over the kept
        seqs between the least and the greatest of ``seqs`` (``holds`` for each of a
        thousand recall candidates was ~1.5 ms; every kept seq, whatever was asked, cost
        a build without candidates a pass over a window of thousands of messages)."""
        wanted = set(seqs)
        if not wanted:
            return wanted
        start = bisect_left(self._seqs, min(wanted), self._head)
        end = bisect_right(self._seqs, max(wanted), start)
        return wanted.intersection(islice(self._seqs, start, end))

    def in_order(self) -> Iterator[Unit]:
        """The summary, then every kept unit in chronological order (a snapshot)."""
        head = [self.summary] if self.summary is not None else []
        return iter([*head, *self.units.values()])


# -- a narrower budget: what leaves, read-only -----------------------------------------


def keep_last(units: Iterable[Unit], keep: Collection[str]) -> Iterator[Unit]:
    """``units`` in the same order, but those with an entry id in ``keep`` at the end.

    Lazy: a caller that stops early (``leave_out``) pays for the units it read.
    """
    held = []
    for unit in units:
        if keep and any(e.id in keep for e in unit.entries):
            held.append(unit)
        else:
            yield unit
    yield from held


def in_steps(excess: int, step: int, most: int | None = None) -> int:
    """``excess`` rounded up to whole ``step``s (a ``step`` of 0: as it is), but not past
    ``most`` (what may go before the newest unit) unless ``excess`` itself is.

    A build narrower than its window leaves out the oldest units; were it to
    leave out just ``excess``, its first message would move at every turn and
    no two requests would share a prefix. Leaving out whole steps (the room a
    window's own step frees at that budget) moves the cut only once a step is
    used up, as the window's own eviction does.

    The newest unit (the question) is never left out for the rounding.

    >>> in_steps(1, 500), in_steps(500, 500), in_steps(501, 500), in_steps(7, 0)
    (500, 500, 1000, 7)
    >>> in_steps(501, 500, most=600), in_steps(700, 500, most=600)
    (600, 700)
    """
    rounded = -(-excess // step) * step if step > 0 and excess > 0 else excess
    return rounded if most is None else max(excess, min(rounded, most))


def leave_out(order: Iterable[Unit], excess: int, measure: Callable[[Unit], int]) -> list[Unit]:
    """The first units of ``order`` that free ``excess`` by ``measure`` (all, if they cannot)."""
    out = []
    for unit in order:
        if excess <= 0:
            break
        excess -= measure(unit)
        out.append(unit)
    return out
