"""Ranking by words: Okapi BM25 over a bounded number of postings per search.

A search must not cost more as the archive grows. BM25 over every row that
shares a word with the query does: common words match most of a session, and
every match is scored before the best few are kept. So a search reads the
postings (term, row, term frequency, row length) of its terms *rarest first*,
whole, as long as the postings read stay within its budget (``reads_per_hit``
× the number of hits asked for). The terms left over, too common to fit, are
not read; their BM25 terms are added to the best rows found
(``Plan.rescore``), so those rows are ranked by their whole score. Only rows
that hold none of the terms read can be missed: rows that share nothing but
common words with the query, which rank last anyway. When the terms read
find fewer rows than asked for (a query of common words only finds none),
the rest of the budget reads the newest postings of the next term
(``Plan.fill``). When every term fits, nothing is left over and the ranking
is plain BM25 over the whole scope.

Scores are FTS5's ``bm25()``: k1 = 1.2, b = 0.75, IDF
``ln((N - df + 0.5) / (df + 0.5))`` floored at 1e-6, over the statistics of
the searched scope (``Statistics``: its rows, their total length, and each
term's document frequency), so other sessions never change a session's
ranking. A term the query holds twice (``ships shipping``) counts twice.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

K1 = 1.2
"""BM25's term-frequency saturation (FTS5's default)."""
B = 0.75
"""BM25's length normalization (FTS5's default)."""
UNITS = 1e12
"""Scores are summed in integer units of 1e-12: integer sums do not depend on the order of
the terms, so equal rows score alike to the bit and their sequence numbers decide."""


@dataclass(frozen=True, slots=True)
class Statistics:
    """What a scope holds: rows, their total length, and each term's row count (df)."""

    rows: int
    length: int
    frequencies: Mapping[str, int]
    """Term -> how many of the scope's rows hold it; terms it lacks may be left out."""


@dataclass(frozen=True, slots=True)
class Plan:
    """Which postings a search reads, and the weight (query count × IDF) of each term."""

    read: dict[str, float]
    """The rarest terms, whose postings are read whole, rarest first."""
    rescore: dict[str, float]
    """The other terms, rarest first: added to the scores of the best rows found."""
    fill: int
    """When the terms read find fewer rows than asked for, up to ``fill`` of the newest
    postings of the first term of ``rescore`` are read too (the rest of the budget)."""
    average_length: float


def idf(rows: int, frequency: int) -> float:
    """FTS5's IDF, floored at 1e-6: a term in half the rows or more counts next to nothing."""
    value = math.log((rows - frequency + 0.5) / (frequency + 0.5))
    return value if value > 0 else 1e-6


def score(weight: float, tf: int, length: int, average_length: float) -> float:
    """One term's BM25 score in a row (the same expression, in the same order, as in SQL)."""
    return weight * tf * (K1 + 1) / (tf + K1 * ((1 - B) + B * length / average_length))


def plan(query: Mapping[str, int], stats: Statistics, budget: int) -> Plan | None:
    """The terms to read, rarest first, within ``budget`` postings; None if no term is found.

    ``query`` maps each term to how many times the query holds it.

    >>> stats = Statistics(rows=100, length=1000, frequencies={"rare": 2, "some": 30, "most": 90})
    >>> p = plan({"rare": 1, "some": 1, "most": 1}, stats, budget=40)
    >>> list(p.read), list(p.rescore), p.fill
    (['rare', 'some'], ['most'], 8)
    """
    frequency = stats.frequencies
    found = [term for term in query if frequency.get(term, 0) > 0]
    found.sort(key=lambda term: (frequency[term], term))
    if not found:
        return None
    weights = {term: query[term] * idf(stats.rows, frequency[term]) for term in found}
    read = total = 0
    while read < len(found) and total + frequency[found[read]] <= budget:
        total += frequency[found[read]]
        read += 1
    return Plan(
        read={term: weights[term] for term in found[:read]},
        rescore={term: weights[term] for term in found[read:]},
        fill=budget - total if read < len(found) else 0,
        average_length=stats.length / stats.rows,
    )


Found = dict[int, tuple[int, int]]
"""Rows found: ``key -> (seq, score in units)``."""


Rescore = Callable[[Plan, list[int], set[int]], Mapping[int, int]]
"""``rescore(plan, keys, filled)``: the units to add to each of these rows for the terms of
``plan.rescore`` (the first one's only for rows not ``filled``); see ``rescored``."""


def best(
    plan: Plan,
    depth: int,
    read: Callable[[Plan, int], Found],
    fill: Callable[[Plan, Found], set[int]],
    rescore: Rescore,
) -> list[tuple[int, int, float]]:
    """``(key, seq, score)`` of the best ``depth`` rows, best first (ties: seq, key).

    A backend supplies three steps: ``read(plan, depth)``, the best ``depth`` rows holding
    the terms of ``plan.read``, scored by them; ``fill(plan, found)``, which adds to
    ``found`` the rows of the newest ``plan.fill`` postings of the first term of
    ``plan.rescore``, with that term's score, and returns their keys; and ``rescore``,
    the units the other terms add to the best rows (``rescored`` makes one of a read of
    their postings).
    """
    found = read(plan, depth) if plan.read else {}
    filled = fill(plan, found) if len(found) < depth and plan.fill else set()
    rows = _best([(key, seq, units) for key, (seq, units) in found.items()], depth)
    if plan.rescore and rows:
        added = rescore(plan, [key for key, _, _ in rows], filled)
        rows = _best([(key, seq, total + added.get(key, 0)) for key, seq, total in rows], depth)
    return [(key, seq, total / UNITS) for key, seq, total in rows]


def rescored(
    postings: Callable[[list[str], list[int]], Iterable[tuple[int, str, int, int]]],
) -> Rescore:
    """The ``rescore`` step of a backend that reads ``postings(terms, keys)``: the
    ``(key, term, tf, length)`` of those rows' postings of those terms."""

    def rescore(plan: Plan, keys: list[int], filled: set[int]) -> Counter[int]:
        return _rescored(plan, postings(list(plan.rescore), keys), filled)

    return rescore


def _rescored(
    plan: Plan, postings: Iterable[tuple[int, str, int, int]], filled: set[int]
) -> Counter[int]:
    """Units to add to each row for the terms left over (the first one's only where the
    fill did not count it already)."""
    first = next(iter(plan.rescore))
    added: Counter[int] = Counter()
    for key, term, tf, length in postings:
        if term != first or key not in filled:
            added[key] += units(plan.rescore[term], tf, length, plan.average_length)
    return added


def units(weight: float, tf: int, length: int, average_length: float) -> int:
    """``score`` in integer units, as the backends sum it in SQL."""
    return int(score(weight, tf, length, average_length) * UNITS)


def _best(rows: list[tuple[int, int, int]], depth: int) -> list[tuple[int, int, int]]:
    rows.sort(key=lambda row: (-row[2], row[1], row[0]))
    return rows[:depth]
