"""What ``PriorityWindow`` did and why, told as a ``Report`` when one is asked for.

Evictions, compressions and folds are logged as they happen, cheaply (the
entry, the action and the parts of the reason), and become ``Decision``
objects only when a report's decisions are read. A decision about a kept
entry is made once and reused while the entry stays as it is, so a report
costs O(window) however long the log.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from typing import Any

from ctxwindow.messages import Entry, Unit
from ctxwindow.policies.explain import Decision, Decisions, Report, Totals
from ctxwindow.policies.rules import Priority


class Journal:
    """The last ``size`` things that left or changed, and what a report says about them."""

    def __init__(self, size: int) -> None:
        self._log: deque[_Logged] = deque(maxlen=size)
        self._logged = 0  # how many were ever logged (the log keeps the last ``size``)
        # Decisions about kept entries, by seq, reused while an entry stays as it is.
        self._decided: dict[int, tuple[Entry, tuple[object, ...], Decision]] = {}
        self.evicted_entries = 0
        self.evicted_tokens = 0

    def evicted(self, units: Sequence[Unit], cause: str) -> None:
        self.evicted_entries += sum(len(unit.entries) for unit in units)
        self.evicted_tokens += sum(unit.size for unit in units)
        for unit in units:
            reason = (cause, unit.priority, unit.size)
            for entry in unit.entries:
                self._note(_Logged("evicted", entry, reason))

    def compressed(self, old: Entry, new: Entry, cause: str) -> None:
        by = str(new.metadata.get("compressed", {}).get("by", "compressor"))
        extra = {"from_tokens": old.tokens, "compressor": by}
        self._note(_Logged("compressed", new, cause, extra))

    def summarized(self, entries: Sequence[Entry]) -> None:
        for entry in entries:
            self._note(_Logged("summarized", entry, "folded into the rolling summary"))

    def _note(self, item: _Logged) -> None:
        self._log.append(item)
        self._logged += 1

    def _logged_until(self, count: int) -> list[_Logged]:
        """The log as it was when ``count`` had been logged (less what fell off since)."""
        later = self._logged - count
        items = list(self._log)
        return items[: max(len(items) - later, 0)] if later else items

    def forget(self, unit: Unit) -> None:
        """A unit left the window: its kept decisions are no longer needed."""
        for entry in unit.entries:
            self._decided.pop(entry.seq, None)

    def clear(self) -> None:
        """Start counting again (the log of what happened stays)."""
        self._decided.clear()
        self.evicted_entries = self.evicted_tokens = 0

    def report(
        self,
        budget: int,
        tokens: int,
        reserve_output: int,
        categories: Mapping[str, int],
        system: Unit | None,
        units: list[Unit],
        left: Sequence[Unit],
        *,
        estimated: bool = False,
    ) -> Report:
        """The report on ``units`` (and ``system``) with the units ``left`` out.

        Its running totals cost O(``left``); the totals by priority and the
        decisions, O(window), are made when first read.
        """
        return Report(
            budget=budget,
            used=tokens + reserve_output,
            reserve_output=reserve_output,
            tokens_by_category={c: t for c, t in sorted(categories.items()) if t},
            tokens_by_priority=Totals(lambda: _by_priority(system, units, _seqs(left))),
            decisions=self._decisions(system, units, left),
            evicted_entries=self.evicted_entries + sum(len(u.entries) for u in left),
            evicted_tokens=self.evicted_tokens + sum(u.size for u in left),
            estimated=estimated,
        )

    def _decisions(self, system: Unit | None, units: list[Unit], left: Sequence[Unit]) -> Decisions:
        count = self._logged

        def decisions() -> list[Decision]:
            # Built when first read: a build costs nothing however long the log.
            out = [item.decision() for item in self._logged_until(count)]
            if system is not None:
                out.append(Decision.of(system.entries[0], "pinned", "system prompt"))
            left_out = _seqs(left)
            for unit in units:
                action = "evicted" if unit.seq in left_out else "pinned" if unit.pinned else "kept"
                reason = "narrower budget for this call" if action == "evicted" else ""
                out.extend(self._said(entry, action, reason) for entry in unit.entries)
            return out

        return Decisions(decisions)

    def _said(self, entry: Entry, action: str, reason: str) -> Decision:
        """The decision about a kept entry, made once while it stays as it is."""
        state = (action, reason, entry.priority, entry.tokens, entry.kind)
        known = self._decided.get(entry.seq)
        if known is None or known[0] is not entry or known[1] != state:
            known = self._decided[entry.seq] = (entry, state, Decision.of(entry, action, reason))
        return known[2]


def _seqs(units: Sequence[Unit]) -> set[int]:
    return {unit.seq for unit in units}


def _by_priority(system: Unit | None, units: list[Unit], left_out: set[int]) -> dict[str, int]:
    by_priority: dict[str, int] = {p.name: 0 for p in reversed(Priority)}
    if system is not None:
        by_priority["CRITICAL"] += system.size
    for unit in units:
        if unit.seq not in left_out:
            by_priority[Priority(unit.priority).name] += unit.size
    return by_priority


class _Logged:
    """An entry that left or changed, made into a ``Decision`` once, when first reported."""

    __slots__ = ("_decision", "action", "entry", "extra", "reason")

    def __init__(
        self,
        action: str,
        entry: Entry,
        reason: str | tuple[str, int, int],
        extra: dict[str, Any] | None = None,
    ) -> None:
        self.action, self.entry, self.reason, self.extra = action, entry, reason, extra
        self._decision: Decision | None = None

    def decision(self) -> Decision:
        if self._decision is None:
            reason = self.reason
            if isinstance(reason, tuple):
                cause, priority, size = reason
                reason = f"{cause}; {Priority(priority).name} priority, {size} tokens"
            self._decision = Decision.of(self.entry, self.action, reason, **(self.extra or {}))
        return self._decision
