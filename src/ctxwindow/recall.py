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
The room is decided per query, not as a fixed share: the best candidates,
best first, as long as they score at least ``min_share`` of the best one,
take the budget less what the window always keeps (its pinned messages and
``recent_share`` of the budget for the newest turns). Candidates the window
holds are kept there (it leaves them out last); the others are recalled. A
query that matches old turns strongly gets most of the budget for them; one
that matches the recent turns, or nothing, leaves the window as it is.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from ctxwindow.messages import Unit


@dataclass(frozen=True)
class RecallPolicy:
    """How archived turns are chosen for a query (see the module docstring).

    >>> policy = RecallPolicy(spread=(0.5,))
    >>> policy.scores({10: 4.0, 12: 2.0})
    {9: 2.0, 10: 4.0, 11: 3.0, 12: 2.0, 13: 1.0}
    """

    depth: int = 50
    """How many archive hits a query asks for."""
    spread: tuple[float, ...] = (0.5, 0.25, 0.125)
    """The share of a hit's score given to the turns 1, 2, 3... places away."""
    min_share: float = 0.2
    """Candidates below this share of the best candidate's score are not recalled."""
    recent_share: float = 0.125
    """The share of the budget left to the window's newest turns, whatever recall finds."""

    def __post_init__(self) -> None:
        if self.depth < 1:
            raise ValueError(f"depth must be at least 1, got {self.depth}")
        if any(not 0 <= share <= 1 for share in (*self.spread, self.min_share, self.recent_share)):
            raise ValueError("spread, min_share and recent_share are shares in [0, 1]")

    def scores(self, hits: Mapping[int, float]) -> dict[int, float]:
        """``seq -> score`` for the hits (``seq -> own score``) and their neighbours."""
        out: dict[int, float] = dict.fromkeys(hits, 0.0)
        for seq, score in hits.items():
            out[seq] += score
            for distance, share in enumerate(self.spread, 1):
                for near in (seq - distance, seq + distance):
                    if near >= 0:
                        out[near] = out.get(near, 0.0) + share * score
        return dict(sorted(out.items()))

    def room(self, budget: int, pinned: int) -> int:
        """The most recall may take of ``budget`` when the window's pinned part takes ``pinned``."""
        return max(0, budget - pinned - int(budget * self.recent_share))

    def choose(
        self, ranked: Sequence[tuple[float, Unit]], kept: Iterable[str], room: int
    ) -> Recall:
        """What comes back for the query, best first, within ``room`` tokens.

        ``ranked`` is ``(score, unit)`` best first; ``kept`` the ids of the
        entries the window holds. Units scoring below ``min_share`` of the best
        are left out, and a unit that does not fit is passed over for smaller
        ones after it. A unit the window holds is not recalled but kept: the
        window leaves it out last (``Recall.keep``); the others come back as
        whole units of kind ``"recalled"``.
        """
        if not ranked:
            return Recall()
        floor = ranked[0][0] * self.min_share
        held = set(kept)
        seen: set[str] = set()
        units: list[Unit] = []
        keep: set[str] = set()
        used = 0
        for score, unit in ranked:
            if score < floor:
                break
            ids = [e.id for e in unit.entries]
            if seen.intersection(ids) or used + unit.size > room:
                continue
            if held.issuperset(ids):
                keep.update(ids)
            elif held.intersection(ids) or not is_whole(unit):
                continue  # partly in the window, or not a whole tool unit
            else:
                units.append(Unit([replace(e, kind="recalled") for e in unit.entries], unit.size))
            used += unit.size
            seen.update(ids)
        return Recall(units, frozenset(keep))


@dataclass(frozen=True)
class Recall:
    """What a query brings back: ``units`` from the archive, and window entries to ``keep``."""

    units: list[Unit] = field(default_factory=list)
    keep: frozenset[str] = frozenset()

    @property
    def tokens(self) -> int:
        return sum(unit.size for unit in self.units)


def rank_units(scores: Mapping[int, float], units: Iterable[Unit]) -> list[tuple[float, Unit]]:
    """``(score, unit)`` best first: a unit scores as its best entry; ties go to the older."""
    ranked = [(max(scores.get(e.seq, 0.0) for e in unit.entries), unit) for unit in units]
    ranked.sort(key=lambda pair: (-pair[0], pair[1].entries[0].seq))
    return ranked


def is_whole(unit: Unit) -> bool:
    """The unit does not start with a tool result, and every call it makes has its result."""
    if unit.entries[0].message["role"] == "tool":
        return False
    calls = {c["id"] for e in unit.entries for c in e.message.get("tool_calls") or ()}
    return calls <= {e.message.get("tool_call_id") for e in unit.entries}
