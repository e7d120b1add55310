"""Recall: which archived turns come back into a context, and how much room they get.

A turn that answers a question often does not repeat its words: "What did you
paint?" / "A sunset over the lake." So the archive's best matches for the
query are scored again with their neighbours: each hit gives half its score
to the turns next to it, a quarter to the turns two away, an eighth to those
three away (``spread``), and a turn's score is its own plus what it gets.
On LoCoMo's real conversations this finds the evidence of 10-15 points more
questions than ranking the turns alone (docs/eval.md has the figures).

The manager archives every turn its window sees (before the next search),
so the window's own turns are ranked with the evicted ones, on one scale.
The room is decided per query, by the scores, not as a fixed share: the best
candidates, best first, as long as they score at least ``min_share`` of the
best match, take the budget less what every context keeps (the window's
pinned messages and summary, and its newest ``recent_messages`` messages
before the question, in ``recent_share`` of the budget, a quarter: when
they take more, the longest are compressed for the context, as far as what
the query recalls needs (``Recalling.recent``); BEAM's turns average 450
tokens, and four of them whole would leave nothing to recall at 2,048).
Candidates the window holds are kept there (it leaves
them out last); the others are recalled. What the candidates leave goes to
the window's newest turns: a query that matches much of the past gets most
of the budget for it; one that matches little, or nothing, leaves the window
as it is. A query asks the archive for enough hits to fill the room
(``depth_for``): at 8,192 tokens 50 hits ran out of candidates and measured
2.6 points less evidence recall on LoCoMo than 400; never more than
``max_depth`` (256), whose neighbours fill the largest rooms.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ctxwindow.archive.vectors import numpy_or_none
from ctxwindow.messages import Unit, with_kind

RECENT_MESSAGES = 4
"""The newest messages every context keeps (the recall's ``recent_messages``, the hybrid
window's ``Keeping.recent_messages``)."""


@dataclass(frozen=True)
class RecallPolicy:
    """How archived turns are chosen for a query (see the module docstring).

    >>> policy = RecallPolicy(spread=(0.5,))
    >>> policy.scores({10: 4.0, 12: 2.0})
    {9: 2.0, 10: 4.0, 11: 3.0, 12: 2.0, 13: 1.0}
    """

    depth: int = 50
    """The fewest archive hits a query asks for."""
    tokens_per_hit: int = 20
    """A query asks for one hit per this many tokens of room too (``depth_for``)."""
    max_depth: int = 256
    """The most hits a query asks for, whatever the room: a search, and what recall does
    with its hits, cost no more at a budget of 128,000 tokens than at 5,120. A service's
    default budget (3/4 of gpt-4o's window) asked for 4,800, and its session's cache of
    decoded turns (``CACHED_UNITS``) could not hold what one query read: every query read
    and decoded them again. On LoCoMo dev, evidence recall at 512-4,096 tokens is the
    same with 256 as without a bound, and at 8,192 92.9 % (409 hits: 92.7 %)."""
    spread: tuple[float, ...] = (0.5, 0.25, 0.125)
    """The share of a hit's score given to the turns 1, 2, 3... places away."""
    min_share: float = 0.1
    """Candidates below this share of the best hit's own score are not recalled."""
    recent_messages: int = RECENT_MESSAGES
    """The newest messages before the question that every context keeps, whatever recall finds."""
    recent_share: float = 0.25
    """The room those take when recall needs the rest: the longest are compressed for the
    context to fit it (fewer are kept whole when they cannot be compressed so). Measured
    with that compression (2026-12-05): against half, a quarter kept the evidence of 5.3
    more points of BEAM 100K's questions at 2,048 tokens, 3.3 at 4,096 and 1.1 at 8,192,
    and 1.0 more of LoCoMo dev's at 512 (the same from 1,024 up), where the newest four
    were present in 95 % of contexts instead of all (100 % from 1,024 up)."""
    short: int = 128
    """Units up to this many tokens compete by score alone; a longer one by its score per
    square root of its length (``rank``)."""

    def __post_init__(self) -> None:
        if self.depth < 1 or self.tokens_per_hit < 1 or self.short < 1:
            raise ValueError(
                f"depth, tokens_per_hit and short must be at least 1, got {self.depth}, "
                f"{self.tokens_per_hit}, {self.short}"
            )
        if self.max_depth < self.depth:
            raise ValueError(f"max_depth must be at least depth, got {self.max_depth}")
        if self.recent_messages < 0:
            raise ValueError(f"recent_messages must be 0 or more, got {self.recent_messages}")
        if any(not 0 <= share <= 1 for share in (*self.spread, self.min_share, self.recent_share)):
            raise ValueError("spread, min_share and recent_share are shares in [0, 1]")

    def rank(self, scores: Mapping[int, float], units: Iterable[Unit]) -> list[tuple[float, Unit]]:
        """``(worth, unit)`` best first: a unit's best entry score, and for a unit longer than
        ``short`` tokens that score times ``sqrt(short / size)``, its worth per token of room
        (a knapsack's greedy order, softened as BM25's length norm is: on BEAM, where answers
        run to a thousand tokens and the evidence is in the questions, this kept 12-15 points
        more; on LoCoMo's short turns it changes nothing). Ties go to the older.

        >>> from ctxwindow.messages import Entry
        >>> long = Unit([Entry({"role": "assistant", "content": "…"}, 512, 1)], 512)
        >>> RecallPolicy(short=128).rank({1: 1.0}, [long])[0][0]
        0.5
        """
        worth = self.worth
        ranked = [(worth(unit_score(scores, unit), unit.size), unit) for unit in units]
        ranked.sort(key=lambda pair: (-pair[0], pair[1].entries[0].seq))
        return ranked

    def worth(self, score: float, size: int) -> float:
        """A unit's place in ``rank``: its ``score``, times ``sqrt(short / size)`` when it is
        longer than ``short`` tokens; never more than its score."""
        return score if size <= self.short else score * math.sqrt(self.short / size)

    def depth_for(self, room: int) -> int:
        """How many hits a query with ``room`` tokens to fill asks the archive for."""
        return min(self.max_depth, max(self.depth, room // self.tokens_per_hit))

    def floor(self, hits: Mapping[int, float]) -> float:
        """The least score a candidate needs: ``min_share`` of the best hit's own score
        (not of a neighbour-inflated one, which would cut a multi-hop question's second
        piece of evidence)."""
        return max(hits.values(), default=0.0) * self.min_share

    def scores(self, hits: Mapping[int, float]) -> dict[int, float]:
        """``seq -> score`` for the hits (``seq -> own score``) and their neighbours, in seq
        order: each hit, in the order given, adds its score to itself, then ``spread``'s
        shares of it to the turns 1, 2, 3... places before and after it. With numpy the
        same additions are made in the same order on arrays (the same floats, ~4x faster,
        measured: a query at 4,096 tokens spreads ~150 hits over ~900 turns)."""
        places = [(0, 1.0)]  # (offset, share), in the order the shares are added
        places += [(d, share) for at, share in enumerate(self.spread, 1) for d in (-at, at)]
        np = numpy_or_none()
        if np is not None and hits:
            return spread_arrays(np, hits, places)
        out: dict[int, float] = {}
        get = out.get
        for seq, score in hits.items():
            for offset, share in places:
                near = seq + offset
                if near >= 0:
                    out[near] = get(near, 0.0) + share * score
        return dict(sorted(out.items()))

    def room(self, budget: int, pinned: int, recent: int = 0) -> int:
        """The most recall may take of ``budget`` beside the window's pinned part (``pinned``
        tokens) and its newest messages (``recent`` tokens)."""
        return max(0, budget - pinned - recent)

    def choose(
        self,
        ranked: Sequence[tuple[float, Unit]],
        kept: Iterable[str],
        room: int,
        floor: float | None = None,
        *,
        copies: bool = True,
    ) -> Recall:
        """What comes back for the query, best first, within ``room`` tokens.

        ``ranked`` is ``(score, unit)`` best first; ``kept`` the ids of the
        entries the window holds. Units scoring below ``floor`` (default:
        ``min_share`` of the best unit's score) are left out, and a unit that
        does not fit is passed over for smaller ones after it. A unit the
        window holds is not recalled but kept: the window leaves it out last
        (``Recall.keep``); the others come back as whole units of kind
        ``"recalled"`` (``copies=False``: the ranked units themselves, for a caller that
        only weighs what would come back; copying costs ~1 µs an entry, and at a budget of
        96,000 tokens a thousand units come back).
        """
        if not ranked:
            return Recall()
        if floor is None:
            floor = ranked[0][0] * self.min_share
        held = set(kept)
        seen: set[str] = set()
        units: list[Unit] = []
        keep: set[str] = set()
        used = 0
        for score, unit in ranked:
            if score < floor:
                break
            if used + unit.size > room:
                continue
            ids = [e.id for e in unit.entries]
            if not seen.isdisjoint(ids):
                continue
            if held.issuperset(ids):
                keep.update(ids)
            elif not held.isdisjoint(ids) or not is_whole(unit):
                continue  # partly in the window, or not a whole tool unit
            elif copies:
                units.append(Unit([with_kind(e, "recalled") for e in unit.entries], unit.size))
            else:
                units.append(unit)
            used += unit.size
            seen.update(ids)
        return Recall(units, frozenset(keep))


@dataclass(frozen=True)
class Recall:
    """What a query brings back: ``units`` from the archive, and window entries to ``keep``.

    ``carried``: the ids of recalled entries that an earlier turn brought and this
    query does not score, kept in place for the prompt cache. ``squeezed``: the ids of
    entries in ``units`` that are not recalled but the window's newest messages,
    compressed for this context (``Recalling.recent``): the window leaves their whole form out.
    ``spare``: the tokens the context leaves empty for the next turns, after a step with
    the prompt cache (``Recalling.in_place``), so that they add to it without changing it.
    """

    units: list[Unit] = field(default_factory=list)
    keep: frozenset[str] = frozenset()
    carried: frozenset[str] = frozenset()
    squeezed: frozenset[str] = frozenset()
    spare: int = 0

    @property
    def tokens(self) -> int:
        return sum(unit.size for unit in self.units)


def spread_arrays(
    np: Any, hits: Mapping[int, float], places: Sequence[tuple[int, float]]
) -> dict[int, float]:
    """``RecallPolicy.scores`` on arrays: one row of ``places`` a hit, flattened in the
    loop's order, and summed by ``bincount``, which adds its weights one by one in order."""
    seqs = np.fromiter(hits.keys(), dtype=np.int64, count=len(hits))
    own = np.fromiter(hits.values(), dtype=np.float64, count=len(hits))
    offsets = np.array([offset for offset, _ in places], dtype=np.int64)
    shares = np.array([share for _, share in places], dtype=np.float64)
    near = (seqs[:, None] + offsets).ravel()
    added = (own[:, None] * shares).ravel()
    inside = near >= 0
    near, added = near[inside], added[inside]
    low = int(near.min())
    at = near - low
    summed = np.bincount(at, weights=added)
    touched = np.flatnonzero(np.bincount(at))
    return dict(zip((touched + low).tolist(), summed[touched].tolist(), strict=True))


def unit_score(scores: Mapping[int, float], unit: Unit) -> float:
    """A unit's score: its best entry's (most units are one message)."""
    entries = unit.entries
    if len(entries) == 1:
        return scores.get(entries[0].seq, 0.0)
    return max(scores.get(e.seq, 0.0) for e in entries)


def is_whole(unit: Unit) -> bool:
    """The unit does not start with a tool result, and every call it makes has its result."""
    if unit.entries[0].message["role"] == "tool":
        return False
    if len(unit.entries) == 1 and not unit.entries[0].message.get("tool_calls"):
        return True  # most units: one message, no call
    calls = {c["id"] for e in unit.entries for c in e.message.get("tool_calls") or ()}
    return calls <= {e.message.get("tool_call_id") for e in unit.entries}


def water_level(sizes: Sequence[int], room: int) -> int:
    """The largest size ``level`` such that every size cut to at most ``level`` fits ``room``
    together: ``sum(min(size, level)) <= room`` (the sizes' largest when they all fit).

    >>> water_level([40, 300, 900], 600)
    280
    >>> water_level([40, 300], 600)
    300
    >>> water_level([], -5)
    0
    """
    if sum(sizes) <= room:
        return max(sizes, default=0)
    below, count = 0, len(sizes)
    for i, size in enumerate(sorted(sizes)):
        level = (room - below) // (count - i)  # the rest, each cut to the same size
        if level < size:
            return max(0, level)
        below += size
    return 0  # no sizes, and a room below zero
