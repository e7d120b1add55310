"""Which facts a rolling summary keeps, and how they are written.

A ``Fact`` is one piece of one turn (see :mod:`ctxwindow.compress.turns`) with
its speaker and date. ``candidates`` weighs the facts worth keeping
(:mod:`ctxwindow.compress.facts`; small talk weighs nothing and is left
out, a repeated piece of one speaker kept once); ``select`` keeps the best
that fit a number of tokens; ``render`` writes them one line per turn, in
the order of the conversation, the date in front where it changes, and
``" … "`` between two pieces of one turn that were not next to each other.

The best is the most weight per token, where a term already kept counts
``REPEAT`` (so the summary covers more ground rather than say one thing
twice), and the oldest candidate weighs ``AGE`` less than the newest (so,
at equal density, the oldest goes first).
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from ctxwindow.compress.facts import weigh
from ctxwindow.compress.sentences import script_counts
from ctxwindow.compress.turns import Turn

REPEAT = 0.25  # a term already kept counts this much again
AGE = 0.05  # the oldest candidate weighs this much less than the newest
OMISSION = " … "
_WIDE = (("\u2e80", "\u9fff"), ("\uac00", "\ud7af"), ("\uff00", "\uffef"))


@dataclass(frozen=True)
class Fact:
    """One piece of one turn: ``(seq, line)`` is the turn, ``index`` the place in it."""

    seq: int
    line: int
    index: int
    speaker: str
    date: str | None
    text: str

    @property
    def turn(self) -> tuple[int, int]:
        return self.seq, self.line

    def row(self) -> list[Any]:
        """The fact as a JSON-ready list (``Fact.of(row)`` reads it back)."""
        return [self.seq, self.line, self.index, self.speaker, self.date, self.text]

    @classmethod
    def of(cls, row: Any) -> Fact:
        """The fact of a ``row()``; ``ValueError`` if it is not one."""
        try:
            seq, line, index, speaker, date, text = row
            if not all(isinstance(v, str) for v in (speaker, text)):
                raise TypeError(row)
            return cls(
                int(seq), int(line), int(index), speaker, None if date is None else str(date), text
            )
        except (TypeError, ValueError) as exc:
            raise ValueError(f"not a summary fact: {row!r}") from exc


@dataclass
class Candidate:
    """A fact worth keeping, weighed and priced."""

    fact: Fact
    weights: tuple[tuple[str, float], ...]
    tokens: int
    weight: float = 0.0  # of all its terms
    speaker_tokens: int = 0  # "Speaker: " and the newline, paid once per turn kept
    date_tokens: int = 0  # "[date] ", paid once per date kept
    cost: float = 0.0  # tokens plus its share of the turn's prefix
    age: float = 1.0  # 1 - AGE for the oldest, 1 for the newest

    def gain(self, kept: set[str]) -> float:
        """The weight of the terms not kept yet, and a quarter of the others'."""
        if not kept:
            return self.weight
        return sum(w * REPEAT if term in kept else w for term, w in self.weights)


def candidates(facts: Iterable[Fact], tokens: Callable[[str], int]) -> list[Candidate]:
    """The facts worth keeping, in conversation order, with weights, cost and age.

    ``tokens`` counts a text. A piece a speaker repeats is kept once, first time.
    """
    seen: set[tuple[str, str]] = set()
    found: list[Candidate] = []
    for fact in sorted(facts, key=lambda f: (f.seq, f.line, f.index)):
        weights = weigh(fact.text)
        if weights and (fact.speaker, fact.text) not in seen:
            seen.add((fact.speaker, fact.text))
            weight = sum(w for _, w in weights)
            found.append(Candidate(fact, weights, tokens(fact.text), weight))
    per_turn = {turn: len(list(group)) for turn, group in itertools.groupby(found, key=_turn)}
    last = max(len(found) - 1, 1)
    for rank, c in enumerate(found):
        c.speaker_tokens = tokens(_prefix(c.fact, with_date=False)) + 1
        c.date_tokens = tokens(f"[{c.fact.date}] ") if c.fact.date else 0
        prefix = c.speaker_tokens + c.date_tokens
        c.cost = c.tokens + 1 + prefix / per_turn[_turn(c)]
        c.age = 1.0 - AGE * (1 - rank / last)
    return found


def facts_of(turns: Iterable[Turn]) -> list[Fact]:
    """The facts of ``turns``, one per piece."""
    return [
        Fact(turn.seq, turn.line, piece.index, turn.speaker, turn.date, piece.text)
        for turn in turns
        for piece in turn.pieces
    ]


def select(pool: list[Candidate], room: int) -> list[Candidate]:
    """The best candidates that fit ``room`` tokens, in the order they were chosen.

    Lazy greedy: a candidate's gain only falls as terms get kept, so its last
    computed ratio bounds its ratio now; it is chosen once that ratio still
    leads. Each turn's prefix (speaker, a new date) is paid once.
    """
    heap = [(-c.weight * c.age / c.cost, i) for i, c in enumerate(pool)]
    heapq.heapify(heap)
    kept: list[Candidate] = []
    terms: set[str] = set()
    turns: set[tuple[int, int]] = set()
    dates: set[str] = set()
    used = 0
    while heap:
        _, i = heapq.heappop(heap)
        c = pool[i]
        cost = c.tokens + 1  # summed apart, the tokens of a text: the caller counts it whole
        if c.fact.turn not in turns:
            cost += c.speaker_tokens
        if c.fact.date is not None and c.fact.date not in dates:
            cost += c.date_tokens
        if used + cost > room:
            continue  # it will not fit later either: what is used only grows
        ratio = c.gain(terms) * c.age / c.cost
        if heap and ratio < -heap[0][0]:
            heapq.heappush(heap, (-ratio, i))
            continue
        used += cost
        kept.append(c)
        terms.update(term for term, _ in c.weights)
        turns.add(c.fact.turn)
        if c.fact.date is not None:
            dates.add(c.fact.date)
    return kept


def render(kept: Sequence[Candidate]) -> tuple[str, tuple[int, int, bool]]:
    """The lines of ``kept`` (in conversation order), and the ``script_counts`` of what
    was said in them (speakers and dates left out), summed from its cached parts."""
    lines: list[str] = []
    shown: str | None = None
    for _, group in itertools.groupby(kept, key=_turn):
        facts = [c.fact for c in group]
        with_date = facts[0].date is not None and facts[0].date != shown
        shown = facts[0].date if facts[0].date is not None else shown
        line = [_prefix(facts[0], with_date), facts[0].text]
        for before, fact in itertools.pairwise(facts):
            next_to = fact.index == before.index + 1
            line += [_join(before.text, fact.text) if next_to else OMISSION, fact.text]
        lines.append("".join(line))
    counts = [script_counts(c.fact.text) for c in kept]
    letters, cjk = sum(c[0] for c in counts), sum(c[1] for c in counts)
    return "\n".join(lines), (letters, cjk, any(c[2] for c in counts))


def _prefix(fact: Fact, with_date: bool) -> str:
    date = f"[{fact.date}] " if with_date and fact.date is not None else ""
    return date + (f"{fact.speaker}: " if fact.speaker else "")


def _join(before: str, after: str) -> str:
    """No space between CJK text or full-width punctuation, one space otherwise."""
    return "" if _wide(before[-1]) or _wide(after[0]) else " "


def _wide(char: str) -> bool:
    """CJK scripts and punctuation, Hangul, full-width forms."""
    return any(low <= char <= high for low, high in _WIDE)


def _turn(c: Candidate) -> tuple[int, int]:
    return c.fact.turn


def order(c: Candidate) -> tuple[int, int, int]:
    return c.fact.seq, c.fact.line, c.fact.index
