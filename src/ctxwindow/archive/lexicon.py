"""``Lexicon``: one session's postings in memory, scored as ``ranking.best`` reads them.

``SQLiteArchive`` keeps its postings in B-tree tables (``sqlite_postings``).
Reading a search's postings from there and scoring them in SQL cost about
7 ms at 10,000 stored messages (200 hits asked for, up to 8,000 postings
read), a third of a turn. With numpy (the ``dense`` extra's one dependency)
the archive keeps each searched session's postings in memory as well: per
term, one int64 array of ``(key, seq, tf, length)`` rows in key order, the
session's rows and total length beside them. A term's postings are read
from the tables the first time a search of the session holds it (a session
of 10,000 messages has ~425,000 postings, 0.6 s to read whole, most of them
of words no question asks for). A search then makes the same
three steps as ``ranking.best`` on these arrays (``Lexicon.best``), with the
same operations in the same order as the SQL (``ranking.units``): it ranks
exactly as the SQL does, at a fraction of the cost.

A lexicon is brought up to date before each search with the rows added
since (``add``); the archive starts it again when rows went or changed
(``sqlite_postings.Postings``).
"""

from __future__ import annotations

from collections.abc import Iterable, KeysView, Sequence
from typing import Any

from ctxwindow.archive import ranking

TermPostings = tuple[str, Sequence[tuple[int, int, int, int]]]
"""A term and its postings ``(key, seq, tf, length)`` in key order, as the postings table
holds them."""


class Lexicon:
    """One session's postings of the terms searched so far: ``term -> rows (key, seq, tf,
    length)`` in key order; the session's row count and total length."""

    def __init__(self, numpy: Any) -> None:
        self._np = numpy
        self._columns: dict[str, Any] = {}  # term -> int64 array (capacity x 4)
        self._used: dict[str, int] = {}  # term -> rows used of its array
        self.rows = 0
        """The session's rows (those without a term too), as its postings count them."""
        self.length = 0
        """The total length of its rows."""
        self.checked = 0
        """The highest key of the archive looked at: rows above it are new to this lexicon
        (their postings of the terms it holds, and their number and length)."""
        self.postings = 0
        """How many postings it holds (32 bytes each in memory, up to twice that with the
        arrays' room to grow)."""
        self.replaced = 0
        """How many times the session's rows had been replaced in place when it was read."""

    def missing(self, terms: Iterable[str]) -> list[str]:
        """Those of ``terms`` whose postings it has not read yet."""
        return [term for term in terms if term not in self._used]

    def add(self, postings: Iterable[TermPostings], terms: Iterable[str] = ()) -> None:
        """Add each term's ``postings`` (rows in key order, above any it holds of the term),
        and hold ``terms`` as read whole from now on (those without a posting too)."""
        np, columns, used = self._np, self._columns, self._used
        for term in terms:
            used.setdefault(term, 0)
        for term, rows in postings:
            if not rows:
                continue
            column, n = columns.get(term), used.get(term, 0)
            if column is None or n + len(rows) > len(column):
                grown = np.zeros((max(4, 2 * (n + len(rows))), 4), dtype=np.int64)
                if column is not None:
                    grown[:n] = column[:n]
                columns[term] = column = grown
            column[n : n + len(rows)] = rows
            used[term] = n + len(rows)
            self.postings += len(rows)

    def statistics(self, terms: Iterable[str]) -> ranking.Statistics:
        """The session's rows, their total length and each term's document frequency."""
        used = self._used
        return ranking.Statistics(
            self.rows, self.length, {term: used[term] for term in terms if used.get(term)}
        )

    @property
    def terms(self) -> KeysView[str]:
        """The terms whose postings it holds whole."""
        return self._used.keys()

    @property
    def state(self) -> tuple[int, int, int]:
        """What it holds of the session: ``(rows, length, replaced)``."""
        return self.rows, self.length, self.replaced

    def _column(self, term: str) -> Any:
        return self._columns[term][: self._used[term]]

    def _units(self, column: Any, weight: float, average: float) -> Any:
        """Each row's BM25 units for the term: ``ranking.units``, on arrays."""
        scores: Any = ranking.score(weight, column[:, 2], column[:, 3], average)  # arrays
        return (scores * ranking.UNITS).astype(self._np.int64)  # truncated, as CAST does

    def best(self, plan: ranking.Plan, depth: int) -> list[tuple[int, int, float]]:
        """``ranking.best`` on these arrays: the best ``depth`` rows, ``(key, seq, score)``
        best first, from the same three steps in the same integer units.

        The rows holding a term of ``plan.read``, scored by those terms; when they are
        fewer than ``depth``, the rows of the newest ``plan.fill`` postings of the first
        term of ``plan.rescore`` with that term's units (a query of common words fills
        with thousands: summed here, not row by row); then the units the terms of
        ``plan.rescore`` add to the best rows (the first term's only to rows the fill
        did not count it for).
        """
        np = self._np
        keys = seqs = summed = filled = np.empty(0, dtype=np.int64)
        if plan.read:
            columns = [self._column(term) for term in plan.read]
            units = [
                self._units(column, weight, plan.average_length)
                for column, weight in zip(columns, plan.read.values(), strict=True)
            ]
            keys, seqs, summed = self._top(*self._summed(columns, units), depth)
        if len(keys) < depth and plan.fill:
            term, weight = next(iter(plan.rescore.items()))
            column = self._column(term)[-plan.fill :]
            found = np.stack((keys, seqs), axis=1)
            units = [summed, self._units(column, weight, plan.average_length)]
            keys, seqs, summed = self._summed([found, column], units)
            filled = column[:, 0]
        keys, seqs, summed = self._top(keys, seqs, summed, depth)
        if plan.rescore and len(keys):
            summed = summed + self._rescored(plan, keys, filled)
            keys, seqs, summed = self._top(keys, seqs, summed, depth)
        return [
            (key, seq, total / ranking.UNITS)
            for key, seq, total in zip(keys.tolist(), seqs.tolist(), summed.tolist(), strict=True)
        ]

    def _summed(self, columns: list[Any], units: list[Any]) -> tuple[Any, Any, Any]:
        """Each row's ``(key, seq)`` once, with its units summed over ``columns`` (rows
        whose first two fields are key and seq) in key order."""
        np = self._np
        rows = np.concatenate([column[:, :2] for column in columns])
        order = np.argsort(rows[:, 0], kind="stable")
        keys, seqs, summed = rows[order, 0], rows[order, 1], np.concatenate(units)[order]
        if not len(keys):
            return keys, seqs, summed
        starts = np.flatnonzero(np.concatenate(([True], keys[1:] != keys[:-1])))
        return keys[starts], seqs[starts], np.add.reduceat(summed, starts)

    def _top(self, keys: Any, seqs: Any, summed: Any, depth: int) -> tuple[Any, Any, Any]:
        """The best ``depth`` rows: most units first, then the lowest seq, then key."""
        best = self._np.lexsort((keys, seqs, -summed))[:depth]
        return keys[best], seqs[best], summed[best]

    def _rescored(self, plan: ranking.Plan, keys: Any, filled: Any) -> Any:
        """The units the terms of ``plan.rescore`` add to the rows ``keys`` (the first
        term's only to rows not ``filled``: the fill counted it), as ``ranking.rescored``
        adds them."""
        np = self._np
        added = np.zeros(len(keys), dtype=np.int64)
        for i, (term, weight) in enumerate(plan.rescore.items()):
            if not self._used.get(term):
                continue
            column = self._column(term)
            at = np.searchsorted(column[:, 0], keys).clip(max=len(column) - 1)
            held = column[at, 0] == keys
            units = self._units(column[at[held]], weight, plan.average_length)
            if i == 0 and len(filled):
                units[np.isin(keys[held], filled)] = 0
            added[held] += units
        return added
