"""The explanation a window gives with every context it builds, and ``Context``.

For every entry: kept, pinned, compressed (from -> to tokens, by which
compressor) or evicted (why); tokens by category and by priority; the budget
and the headroom. ``report.to_dict()`` is JSON-serialisable and ``str(report)``
reads as a table, so "why did the bot forget X?" takes one look.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any, overload

from ctxwindow.messages import Entry, Message
from ctxwindow.policies.rules import Priority, text_of

_PRIORITY_NAMES = {int(p): p.name for p in Priority}


@dataclass(frozen=True)
class Decision:
    """What happened to one entry."""

    id: str
    seq: int
    role: str
    kind: str
    priority: str
    action: str  # kept | pinned | compressed | evicted | summarized | dropped
    tokens: int
    reason: str = ""
    from_tokens: int | None = None
    compressor: str | None = None
    preview: str = ""

    @classmethod
    def of(cls, entry: Entry, action: str, reason: str = "", **extra: Any) -> Decision:
        text = " ".join(text_of(entry.message)[:200].split())
        return cls(
            id=entry.id,
            seq=entry.seq,
            role=entry.message["role"],
            kind=entry.kind,
            priority=_PRIORITY_NAMES.get(entry.priority) or Priority(entry.priority).name,
            action=action,
            tokens=entry.tokens,
            reason=reason,
            preview=text[:60] + ("…" if len(text) > 60 else ""),
            **extra,
        )


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
    """Why the context looks the way it does."""

    budget: int
    used: int
    reserve_output: int
    tokens_by_category: Mapping[str, int]
    tokens_by_priority: Mapping[str, int]
    decisions: Sequence[Decision] = field(default_factory=list)
    # Running totals, cheap to read (unlike ``decisions``, built on first use):
    evicted_entries: int = 0  # entries of the history left out of this context
    evicted_tokens: int = 0  # their tokens: what sending the full history would add
    recalled_entries: int = 0  # archived entries brought back into this context
    estimated: bool = False  # counts are the estimator's, not what the provider bills
    # The leading messages the next turn sends again unchanged unless the window steps
    # (what a provider's prompt cache can serve; docs/caching.md), and why the window
    # last evicted ("over budget at seq 41", ...; None: it has not).
    stable_messages: int = 0
    last_step: str | None = None

    @property
    def headroom(self) -> int:
        return self.budget - self.used

    def to_dict(self) -> dict[str, Any]:
        return {
            "budget": self.budget,
            "used": self.used,
            "headroom": self.headroom,
            "reserve_output": self.reserve_output,
            "tokens_by_category": dict(self.tokens_by_category),
            "tokens_by_priority": dict(self.tokens_by_priority),
            "evicted_entries": self.evicted_entries,
            "evicted_tokens": self.evicted_tokens,
            "recalled_entries": self.recalled_entries,
            "estimated": self.estimated,
            "stable_messages": self.stable_messages,
            "last_step": self.last_step,
            "decisions": [asdict(d) for d in self.decisions],
        }

    def __str__(self) -> str:
        lines = [
            f"budget {self.budget:,} tokens: {self.used:,} used "
            f"(reply reserve {self.reserve_output:,}), headroom {self.headroom:,}"
            + (" (estimated counts)" if self.estimated else ""),
            "by category: " + _pairs(self.tokens_by_category),
            "by priority: " + _pairs(self.tokens_by_priority),
            f"stable prefix: the first {self.stable_messages} message(s); last eviction: "
            + (self.last_step or "none"),
            f"{'seq':>5}  {'action':<10} {'priority':<8} {'kind':<8} {'tokens':>7}  why / what",
        ]
        for d in sorted(self.decisions, key=lambda d: (d.seq, d.action)):
            tokens = f"{d.from_tokens}->{d.tokens}" if d.from_tokens is not None else str(d.tokens)
            why = d.reason or d.preview
            if d.compressor:
                why = f"by {d.compressor}: {why}"
            lines.append(
                f"{d.seq:>5}  {d.action:<10} {d.priority:<8} {d.kind:<8} {tokens:>7}  {why}"
            )
        return "\n".join(lines)


def _pairs(counts: Mapping[str, int]) -> str:
    return ", ".join(f"{k} {v:,}" for k, v in counts.items() if v) or "none"


@dataclass(frozen=True)
class Context:
    """What a window's ``build`` or ``preview`` returns: messages ready to send, and why."""

    messages: list[Message]
    total_tokens: int
    report: Report

    def plus(self, message: Message, tokens: int, *, budget: int | None = None) -> Context:
        """This context with ``message`` (``tokens`` prompt tokens) appended, within ``budget``."""
        budget = self.report.budget if budget is None else budget
        report = replace(self.report, budget=budget, used=self.report.used + tokens)
        return Context([*self.messages, message], self.total_tokens + tokens, report)

    def with_stable(self, stable: int, last_step: str | None) -> Context:
        """This context, its report saying how much of it is stable and the last step."""
        report = replace(self.report, stable_messages=stable, last_step=last_step)
        return Context(self.messages, self.total_tokens, report)
