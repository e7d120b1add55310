"""The dates of folded turns: their own, or passed on from the turn just before.

A turn has its own date when it carries a session header or a timestamp (see
:mod:`ctxwindow.compress.turns`). A turn without one takes the date of the
turn right before it (``seq - 1``) once that one is folded and dated, in
whatever order eviction folds them; a date is never guessed across a turn
that has not been folded. What the calendar keeps between folds is small:
the dated turns whose next turn is not folded yet, and the undated turns
still waiting for their predecessor (at most ``MAX_WAITING``, newest kept).

>>> calendar = Calendar()
>>> calendar.add([(5, None), (6, None)])
>>> calendar.add([(4, "8 May 2023")])
>>> calendar.date(6), calendar.date(3)
('8 May 2023', None)
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Mapping
from typing import Any

MAX_WAITING = 512


class Calendar:
    def __init__(self, dated: Mapping[int, str] | None = None, waiting: Iterable[int] = ()) -> None:
        self._dated = dict(dated or {})
        self._waiting = set(waiting)

    @classmethod
    def from_state(cls, state: Any) -> Calendar:
        """The calendar saved by ``state()`` (anything else gives an empty calendar)."""
        if not isinstance(state, Mapping):
            return cls()
        try:
            dated = {int(seq): str(date) for seq, date in state.get("dated") or []}
            return cls(dated, [int(seq) for seq in state.get("waiting") or []])
        except (TypeError, ValueError):
            return cls()  # not a calendar's state: start afresh rather than fail a fold

    def add(self, turns: Iterable[tuple[int, str | None]]) -> None:
        """Fold in ``(seq, own date or None)`` pairs; dates pass on to waiting turns."""
        starts: list[int] = []
        for seq, date in turns:
            if seq < 0:
                continue
            if date is not None:
                self._dated[seq] = date
                self._waiting.discard(seq)
                starts.append(seq)
            elif seq not in self._dated:
                self._waiting.add(seq)
                if seq - 1 in self._dated:
                    starts.append(seq - 1)
        for seq in starts:  # only from what is new: a fold does not walk the whole calendar
            date = self._dated[seq]
            while seq + 1 in self._waiting:
                seq += 1
                self._waiting.discard(seq)
                self._dated[seq] = date

    def date(self, seq: int) -> str | None:
        return self._dated.get(seq)

    def state(self) -> dict[str, list[Any]]:
        """What the next fold needs: dated turns whose successor is not folded, waiting turns."""
        ends = sorted((s, d) for s, d in self._dated.items() if s + 1 not in self._dated)
        waiting = self._waiting
        if len(waiting) > MAX_WAITING:
            waiting = set(heapq.nlargest(MAX_WAITING, waiting))
        return {"dated": [[s, d] for s, d in ends], "waiting": sorted(waiting)}
