"""What a window did and why, told as a ``Report`` (one row per message) when asked.

Evictions, compressions and folds are logged as they happen, cheaply (the
entry, the action and the parts of the reason), and become ``Decision`` rows
only when a report's rows are read: each message's *final* state (an entry
compressed, then evicted, then folded into the summary is one row,
``summarized``). A message folded into the summary is ``summarized`` only
while the summary the report goes with still draws on it (its
``metadata["draws_on"]``, recorded by each fold: see
``ctxwindow.compress.rolling``), else ``evicted``: nothing of it is left for
the model to see. A row about a kept entry is made once and reused while the
entry stays as it is, so a report costs O(window + log) however long the
history. The log keeps the last ``size`` events; messages left out before it
begins are counted (``Report.earlier_entries``), not itemised.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from typing import Any

from ctxwindow.messages import Entry, Unit, stored_tokens
from ctxwindow.policies.explain import Decision, Decisions, Report, in_order
from ctxwindow.policies.rules import Priority

SYSTEM_PROMPT = "system prompt"
SUMMARY = "rolling summary: it carries something of {drawn:,} of the {folded:,} messages folded"
FOLDED = "folded into the rolling summary"
FOLDED_AWAY = "folded into the rolling summary; nothing of it is left there"
NOT_FOLDED = "evicted; not folded into the rolling summary: {why}"
DRAWS_ON = "draws_on"  # the summary's metadata: ids of the messages it still carries
NARROWED = "left out: narrower budget for this call"
TOO_LARGE = (
    "dropped: too large; with its next tool result the unit needs {size:,} tokens, "
    "more than the {room:,} the budget leaves (oversize='drop')"
)


class Journal:
    """The last ``size`` things that left or changed, and the rows a report shows.

    ``ranked``: the window applies priorities (``PriorityWindow``); the rows
    then carry the units' priorities and budget categories, else no priority
    and the stored kind as category.
    """

    def __init__(self, size: int, *, ranked: bool = False) -> None:
        self._log = _Log(size)
        self._ranked = ranked
        # Rows about kept entries, by seq, reused while an entry stays as it is.
        self._decided: dict[int, tuple[Entry, tuple[object, ...], Decision]] = {}
        # What the current summary draws on, read once per summary (not once per report).
        self._drawn: tuple[Entry | None, frozenset[str]] = (None, frozenset())
        self.evicted_entries = 0
        self.evicted_tokens = 0

    def evicted(self, units: Sequence[Unit], cause: str) -> None:
        for unit in units:  # on every eviction: kept to a few appends
            self._left(unit, (cause, unit.priority, unit.size) if self._ranked else cause)

    def dropped(self, unit: Unit, reason: str) -> None:
        """A unit dropped whole, too large (``oversize="drop"``, a tool result that does
        not fit): its messages were added, so each has an evicted row, for ``reason``."""
        self._left(unit, reason)

    def _left(self, unit: Unit, reason: str | tuple[str, int, int]) -> None:
        log = self._log
        for entry in unit.entries:
            self.evicted_entries += 1
            self.evicted_tokens += stored_tokens(entry)
            log.items.append(_Logged("evicted", entry, reason, unit))
        log.logged += len(unit.entries)

    def compressed(self, old: Entry, new: Entry, cause: str) -> None:
        reason = cause + fell_back(new)
        self._note(_Logged("compressed", new, reason, stored_as=stored_tokens(old)))

    def summarized(self, entries: Sequence[Entry]) -> None:
        for entry in entries:
            self._note(_Logged("summarized", entry, FOLDED))

    def not_folded(self, entries: Sequence[Entry], why: str) -> None:
        """Evicted ``entries`` the rolling summary could not take, and ``why``."""
        reason = NOT_FOLDED.format(why=why)
        for entry in entries:
            self._note(_Logged("evicted", entry, reason))

    def _note(self, item: _Logged) -> None:
        self._log.items.append(item)
        self._log.logged += 1

    def forget(self, unit: Unit) -> None:
        """A unit left the window: its kept rows are no longer needed."""
        for entry in unit.entries:
            self._decided.pop(entry.seq, None)

    def clear(self) -> None:
        """Start again: the window forgot its messages (reports made before keep theirs)."""
        self._log = _Log(self._log.items.maxlen or 0)
        self._decided.clear()
        self._drawn = (None, frozenset())
        self.evicted_entries = self.evicted_tokens = 0

    def report(
        self,
        budget: int,
        tokens: int,
        *,
        framing: int,
        system: Unit | None,
        summary: Unit | None,
        units: list[Unit],
        left: Sequence[Unit] = (),
        reserve_output: int = 0,
        estimated: bool = False,
    ) -> Report:
        """The report on ``units`` (with ``system`` and ``summary``), the units ``left``
        out for this call, and what the log says of the rest.

        ``framing``: the context's tokens in no message. The running totals
        cost O(``left``); the rows, O(window + log), are made when first read.
        """
        return Report(
            budget=budget,
            used=tokens + reserve_output,
            reserve_output=reserve_output,
            decisions=self._rows(system, summary, units, left),
            framing=framing,
            evicted_entries=self.evicted_entries + sum(len(u.entries) for u in left),
            evicted_tokens=self.evicted_tokens + sum(_stored(u) for u in left),
            estimated=estimated,
        )

    def _rows(
        self, system: Unit | None, summary: Unit | None, units: list[Unit], left: Sequence[Unit]
    ) -> Decisions:
        log, count = self._log, self._log.logged
        drawn = self.drawn_on(summary)

        def rows() -> list[Decision]:
            # Made when first read: a build costs nothing however long the log.
            final: dict[int, _Logged] = {}
            for item in log.until(count):
                final[item.entry.seq] = item.after(final.get(item.entry.seq))
            out = []
            if system is not None:
                out.append(self._said(system, system.entries[0], "pinned", SYSTEM_PROMPT))
            if summary is not None:
                out.append(self._summary(summary))
            left_out = {unit.seq for unit in left}
            for unit in units:
                for entry in unit.entries:
                    logged = final.pop(entry.seq, None)
                    out.append(self._row(unit, entry, unit.seq in left_out, logged))
            out.extend(
                item.decision(self, drawn) for item in final.values() if item.action != "compressed"
            )
            return in_order(out)

        return Decisions(rows)

    def _row(self, unit: Unit, entry: Entry, left: bool, logged: _Logged | None) -> Decision:
        """The row of an entry the window holds (``left`` out of this call, or not)."""
        if left:
            return self._said(unit, entry, "evicted", NARROWED)
        if unit.pinned:
            return self._said(unit, entry, "pinned", "pinned")
        if "compressed" in entry.metadata:
            if logged is None:
                return self._said(unit, entry, "compressed", "compressed")
            extra = None if logged.stored_as is None else {"stored_as": logged.stored_as}
            return self._said(unit, entry, "compressed", str(logged.reason), extra)
        return self._said(unit, entry, "kept", "")

    def _summary(self, summary: Unit) -> Decision:
        entry = summary.entries[0]
        folded = entry.metadata.get("summarized_ids")
        reason = SUMMARY.format(
            drawn=len(self.drawn_on(summary)),
            folded=len(folded) if isinstance(folded, Sequence) else 0,
        ) + fell_back(entry)
        return Decision.of(entry, "pinned", reason, stored=False, **self.applied(summary, entry))

    def drawn_on(self, summary: Unit | None) -> frozenset[str]:
        """The ids of the messages ``summary``'s text still carries something of."""
        entry = summary.entries[0] if summary is not None else None
        if self._drawn[0] is not entry:
            ids = entry.metadata.get(DRAWS_ON) if entry is not None else None
            self._drawn = (entry, frozenset(ids if isinstance(ids, list) else ()))
        return self._drawn[1]

    def _said(
        self,
        unit: Unit,
        entry: Entry,
        state: str,
        reason: str,
        extra: dict[str, Any] | None = None,
    ) -> Decision:
        """The row about a kept entry, made once while it stays as it is."""
        applied = {**self.applied(unit, entry), **(extra or {})}
        key = (state, reason, entry.tokens, *applied.values())
        known = self._decided.get(entry.seq)
        if known is None or known[0] is not entry or known[1] != key:
            row = Decision.of(entry, state, reason, **applied)
            known = self._decided[entry.seq] = (entry, key, row)
        return known[2]

    def applied(self, unit: Unit, entry: Entry) -> dict[str, Any]:
        """The category and priority the window applied to ``entry`` (of ``unit``)."""
        if not self._ranked:
            return {"category": "system" if entry.message["role"] == "system" else entry.kind}
        return {"category": unit.category, "priority": unit.priority}


def fallback_of(entry: Entry) -> str | None:
    """Why ``entry`` is a fallback's form: its compression record says why the summary
    asked for was not used (``LLMSummarizer``); None when it is not one."""
    record = entry.metadata.get("compressed")
    why = record.get("fallback") if isinstance(record, Mapping) else None
    return why if isinstance(why, str) else None


def fell_back(entry: Entry) -> str:
    """``"; why"`` to add to a row's reason when ``entry`` is a fallback's form, else ``""``."""
    why = fallback_of(entry)
    return "" if why is None else f"; {why}"


def _stored(unit: Unit) -> int:
    return sum(stored_tokens(entry) for entry in unit.entries)


class _Log:
    """The last ``size`` events, and how many were ever logged."""

    def __init__(self, size: int) -> None:
        self.items: deque[_Logged] = deque(maxlen=size)
        self.logged = 0

    def until(self, count: int) -> list[_Logged]:
        """The log as it was when ``count`` had been logged (less what fell off since)."""
        later = self.logged - count
        items = list(self.items)
        return items[: max(len(items) - later, 0)] if later else items


class _Logged:
    """An entry that left or changed (of ``unit``, when it left), made into a ``Decision``
    once, when first reported."""

    __slots__ = ("_decision", "action", "entry", "reason", "stored_as", "unit")

    def __init__(
        self,
        action: str,
        entry: Entry,
        reason: str | tuple[str, int, int],
        unit: Unit | None = None,
        *,
        stored_as: int | None = None,
    ) -> None:
        self.action, self.entry, self.reason, self.unit = action, entry, reason, unit
        self.stored_as = stored_as
        self._decision: Decision | None = None

    def after(self, earlier: _Logged | None) -> _Logged:
        """This event, the last word on its entry, knowing the ``earlier`` one: a row
        folded into the summary keeps the priority applied at its eviction; a compressed
        one, the stored size from its first compression."""
        if earlier is not None:
            self.unit = self.unit or earlier.unit
            if earlier.stored_as is not None:
                self.stored_as = earlier.stored_as
        return self

    def decision(self, journal: Journal, drawn: frozenset[str]) -> Decision:
        """The row: a message folded into the summary is evicted once nothing of it is
        in the summary (``drawn``: the ids the summary draws on)."""
        action, reason = self.action, self.reason
        if action == "summarized" and self.entry.id not in drawn:
            action, reason = "evicted", FOLDED_AWAY
        if self._decision is None or self._decision.state != action:
            if isinstance(reason, tuple):
                cause, priority, size = reason
                reason = f"{cause}; {Priority(priority).name} priority, {size} tokens"
            applied = {} if self.unit is None else journal.applied(self.unit, self.entry)
            if self.stored_as is not None:
                applied["stored_as"] = self.stored_as
            self._decision = Decision.of(self.entry, action, reason, **applied)
        return self._decision
