"""The cost of one archive search as the archive grows, and the cost of archiving a turn.

A session of N rows (N = 100, 1,000, 10,000, 100,000) is archived in a SQLite
file, alone and then with 10 other sessions of N rows each archived in
between (as a service archives many conversations at once). Each search is
what ``ContextManager`` asks for a request, ``search(session, query, k=50)``,
with a new message as the query; the median and p99 of 200 searches are
printed, and each median divided by the 100-row median (flat is the goal).
Three rankings are searched on the same rows:

- ``former FTS5``: the former search, kept here as a yardstick: an FTS5
  table of every session's rows, the session as a scope token, ``bm25()``
  over every row that shares a word with the query;
- ``every term``: ``SQLiteArchive(reads_per_hit=10**9)``: the archive's own
  per-session postings, every posting of every query term read;
- ``bounded``: ``SQLiteArchive()``, at most ``reads_per_hit`` (40) postings
  read per hit asked for, rarest terms first (``ctxwindow.archive.ranking``).

Then the cost of archiving: rows per second in batches of 200 (a cold
session), and one turn (2 rows, one transaction, as the worker archives a
request) on the 10,000-row session alone, median and p90.

With ``--postgres URL`` the same is measured on ``PostgresArchive`` (sizes
from ``--postgres-sizes``, 100 to 10,000 rows by default), its former search
(BM25 in one SQL statement over the scope's rows, found through a GIN index)
as the yardstick.

The text is generated from a seed (no file, no network): messages of 8–60
words, about 45 % English stop words, the rest drawn from 60,000 made-up
words with a Zipf-like law fitted to LoCoMo's conversations (the most common
content word in a third of the messages, the 10th in 16 %, the 100th in 2 %);
queries are new messages of 5–40 words. Nothing here asserts a time.

    .venv/bin/python benchmarks/bench_archive.py            # about 15 minutes
    .venv/bin/python benchmarks/bench_archive.py --quick    # 100 to 10,000 rows
    .venv/bin/python benchmarks/bench_archive.py --quick --postgres postgresql://127.0.0.1/test
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import random
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from ctxwindow.archive import Archive, PostgresArchive, SQLiteArchive
from ctxwindow.archive.base import Document, Ranked, Scope
from ctxwindow.archive.text import STOP_WORDS
from ctxwindow.messages import Entry

SIZES = (100, 1_000, 10_000, 100_000)
OTHERS = 10
QUERIES = 200
K = 50
BATCH = 200
SYLLABLES = [c + v for c in "bcdfghjklmnprstvwz" for v in "aeiou"]


class Conversation:
    """Seeded chat text: stop words, and made-up content words drawn by rank (Zipf-like)."""

    def __init__(self, seed: int, vocabulary: int = 60_000) -> None:
        self.rng = random.Random(seed)
        words = random.Random(0)  # the same words for every seed
        seen, self.words = set(STOP_WORDS), []
        while len(self.words) < vocabulary:
            word = "".join(words.choice(SYLLABLES) for _ in range(words.randint(2, 4)))
            if word not in seen:
                seen.add(word)
                self.words.append(word)
        self.weights = list(itertools.accumulate((r + 5) ** -1.1 for r in range(vocabulary)))
        self.stops = sorted(STOP_WORDS)
        self.stop_weights = list(itertools.accumulate(1 / r for r in range(1, len(self.stops) + 1)))

    def message(self, shortest: int = 8, longest: int = 60) -> str:
        n = self.rng.randint(shortest, longest)
        stops = sum(self.rng.random() < 0.45 for _ in range(n))
        words = self.rng.choices(self.words, cum_weights=self.weights, k=n - stops)
        words += self.rng.choices(self.stops, cum_weights=self.stop_weights, k=stops)
        self.rng.shuffle(words)
        return " ".join(words)


class FormerSQLiteArchive(SQLiteArchive):
    """The archive with the former search: FTS5 ``bm25()`` over one index of every session."""

    def __init__(self, path: str) -> None:
        super().__init__(path)
        t = self._table
        self._db.execute(
            f"CREATE VIRTUAL TABLE IF NOT EXISTS {t}_former USING fts5(body, scope,"
            " tokenize = 'porter unicode61 remove_diacritics 2')"
        )

    def _write(
        self, session_id: str, user_id: str | None, documents: list[Document], through: int | None
    ) -> None:
        super()._write(session_id, user_id, documents, through)
        scope = _scope_token(session_id)
        with self._errors("write to the former index"), self._transaction():
            keys = self._existing(session_id, [doc.entry_id for doc in documents])
            self._db.executemany(
                f"INSERT INTO {self._table}_former (rowid, body, scope) VALUES (?, ?, ?)",
                [(keys[doc.entry_id][0], doc.body, scope) for doc in documents],
            )

    def _lexical(self, scope: Scope, terms: list[str], depth: int, budget: int) -> list[Ranked]:
        t = self._table
        words = " OR ".join(_quote(term) for term in terms)
        key = (scope.session_id, depth)
        with self._errors("search the former index"):
            rows = self._db.execute(
                f"SELECT e.id, e.seq, -bm25({t}_former, 1.0, 0.0) AS score"
                f" FROM {t}_former JOIN {t} AS e ON e.id = {t}_former.rowid"
                f" WHERE {t}_former MATCH ? AND e.session_id = ?"
                " ORDER BY score DESC, e.seq, e.id LIMIT ?",
                (f'scope : "{_scope_token(scope.session_id)}" AND body : ({words})', *key),
            ).fetchall()
        return [Ranked(key, seq, score) for key, seq, score in rows]


class FormerPostgresArchive(PostgresArchive):
    """The archive with the former search: BM25 in SQL over the scope, through a GIN index."""

    def __init__(self, url: str, *, table: str) -> None:
        super().__init__(url, table=table)
        with self._cursor("create the former index") as cur:
            cur.execute(self._sql("CREATE INDEX IF NOT EXISTS {i_tsv} ON {t} USING gin (tsv)"))

    def _lexical(self, scope: Scope, terms: list[str], depth: int, budget: int) -> list[Ranked]:
        query = " | ".join("'" + t.replace("\\", "\\\\").replace("'", "''") + "'" for t in terms)
        params = {"terms": terms, "query": query, "session_id": scope.session_id, "depth": depth}
        with self._cursor("search the former way") as cur:
            cur.execute(self._sql(FORMER_BM25), params | {"user_id": scope.user_id})
            return [Ranked(key, seq, float(score)) for key, seq, score in cur.fetchall()]


FORMER_BM25 = """
WITH terms AS (
    SELECT lexeme, count(*) AS qtf
    FROM unnest(%(terms)s::text[]) AS term,
        unnest(tsvector_to_array(to_tsvector('english', term))) AS lexeme
    GROUP BY lexeme
), scope AS (
    SELECT count(*)::float8 AS n, avg(length(tsv))::float8 AS avgdl
    FROM {t} WHERE session_id = %(session_id)s OR user_id = %(user_id)s
), matches AS (
    SELECT id, seq, length(tsv)::float8 AS dl, w.lexeme, cardinality(w.positions)::float8 AS tf
    FROM {t}, to_tsquery('english', %(query)s) AS q, unnest(ts_filter(
        setweight(tsv, 'A', (SELECT array_agg(lexeme) FROM terms)), ARRAY['a'::"char"]
    )) AS w
    WHERE tsv @@ q AND (session_id = %(session_id)s OR user_id = %(user_id)s)
), df AS (
    SELECT lexeme, count(*)::float8 AS df FROM matches GROUP BY lexeme
)
SELECT m.id, m.seq, sum(
    t.qtf * greatest(ln((s.n - df.df + 0.5) / (df.df + 0.5)), 1e-6)
    * m.tf * 2.2 / (m.tf + 1.2 * (1 - 0.75 + 0.75 * m.dl / s.avgdl))
    ORDER BY m.lexeme
) AS score
FROM matches AS m JOIN df USING (lexeme) JOIN terms AS t USING (lexeme) CROSS JOIN scope AS s
GROUP BY m.id, m.seq
ORDER BY score DESC, m.seq, m.id
LIMIT %(depth)s
"""
"""The former ``postgres.BM25``: the scope's statistics read from every one of its rows."""


def _scope_token(session_id: str) -> str:
    """The former index's token for a session (a hash of its id)."""
    return "s" + hashlib.blake2b(session_id.encode(), digest_size=12).hexdigest()


def _quote(term: str) -> str:
    return '"' + term.replace('"', '""') + '"'


Open = Callable[..., Archive]
"""Opens the archive under test: ``open(former=False, reads_per_hit=40)``."""


def sqlite_archives(path: Path) -> tuple[Open, Callable[[], None]]:
    def open_archive(former: bool = False, **options: Any) -> Archive:
        return FormerSQLiteArchive(str(path)) if former else SQLiteArchive(str(path), **options)

    return open_archive, path.unlink


def postgres_archives(url: str, table: str) -> tuple[Open, Callable[[], None]]:
    def open_archive(former: bool = False, **options: Any) -> Archive:
        if former:
            return FormerPostgresArchive(url, table=table)
        return PostgresArchive(url, table=table, **options)

    def drop() -> None:
        with PostgresArchive(url, table=table) as archive:
            archive.drop()

    return open_archive, drop


def build(open_archive: Open, rows: int, others: int, text: Conversation) -> float:
    """Archive the session "own" (and ``others`` sessions) of ``rows`` rows; seconds taken."""
    sessions = ["own", *(f"other-{i}" for i in range(others))]
    started = time.perf_counter()
    with open_archive(former=True) as archive:
        for start in range(0, rows, BATCH):
            for session in sessions:
                batch = [
                    Entry({"role": "user", "content": text.message()}, 10, seq)
                    for seq in range(start + 1, min(start + BATCH, rows) + 1)
                ]
                archive.index(session, batch, through=batch[-1].seq)
    return time.perf_counter() - started


def timed(search: Callable[[str], object], queries: list[str]) -> tuple[float, float]:
    """Median and p99 of one search per query, in µs (after 10 searches of warm-up)."""
    for query in queries[:10]:
        search(query)
    times = []
    for query in queries:
        started = time.perf_counter()
        search(query)
        times.append(time.perf_counter() - started)
    times.sort()
    return statistics.median(times) * 1e6, times[int(0.99 * (len(times) - 1))] * 1e6


def searches(open_archive: Open, queries: list[str]) -> Iterator[tuple[float, float]]:
    """The three rankings' (median, p99)."""
    with open_archive(former=True) as former:
        yield timed(lambda q: former.search("own", q, k=K), queries)
    for reads_per_hit in (10**9, 40):
        with open_archive(reads_per_hit=reads_per_hit) as archive:
            yield timed(lambda q: archive.search("own", q, k=K), queries)


def one_turn(
    open_archive: Open, text: Conversation, seq: int, turns: int = 100
) -> tuple[float, float]:
    """Median and p90 of archiving one turn (2 rows, one transaction), in µs."""
    times = []
    with open_archive() as archive:
        for turn in range(turns):
            batch = [
                Entry({"role": role, "content": text.message()}, 10, seq + 2 * turn + i)
                for i, role in enumerate(("user", "assistant"))
            ]
            started = time.perf_counter()
            archive.index("own", batch, through=batch[-1].seq)
            times.append(time.perf_counter() - started)
    times.sort()
    return statistics.median(times) * 1e6, times[int(0.9 * (len(times) - 1))] * 1e6


def measure(
    backend: str,
    sizes: list[int],
    queries: list[str],
    archives: Callable[[int, int], tuple[Open, Callable[[], None]]],
) -> None:
    """The search table, then the archiving costs, of one backend."""
    names = ("former", "every term", "bounded")
    print(f"\n{backend}: search(session, query, k={K}): median / p99 µs,", end=" ")
    print("and median ÷ the 100-row median")
    print(f"{'rows':>8} {'others':>9}" + "".join(f"{name:>26}" for name in names))
    first: dict[int, list[float]] = {}
    writes: list[str] = []
    for others in (0, OTHERS):
        for size in sizes:
            open_archive, remove = archives(size, others)
            seconds = build(open_archive, size, others, Conversation(size + others))
            measured = list(searches(open_archive, queries))
            base = first.setdefault(others, [median for median, _ in measured])
            cells = "".join(
                f"{median:>10,.0f}{p99:>9,.0f}{median / b:>6.1f}x"
                for (median, p99), b in zip(measured, base, strict=True)
            )
            print(f"{size:>8,} {size * others:>9,}{cells}")
            rows = size * (1 + others)
            writes.append(
                f"{rows:>9,} rows archived in {seconds:6.1f} s ({rows / seconds:,.0f} rows/s)"
            )
            if others == 0 and size == max(sizes):
                median, p90 = one_turn(open_archive, Conversation(7), size + 1)
                writes.append(
                    f"one turn (2 rows) on the {size:,}-row session: "
                    f"median {median:,.0f} µs, p90 {p90:,.0f} µs"
                )
            remove()
    print(f"{backend}: archiving (each build also writes the former index):")
    for line in writes:
        print(f"  {line}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)), help="rows per session")
    parser.add_argument("--queries", type=int, default=QUERIES)
    parser.add_argument("--quick", action="store_true", help="100 to 10,000 rows")
    parser.add_argument("--postgres", metavar="URL", help="also measure PostgresArchive there")
    parser.add_argument("--postgres-sizes", default="100,1000,10000")
    args = parser.parse_args()
    sizes = [int(size) for size in args.sizes.split(",")]
    if args.quick:
        sizes = [size for size in sizes if size <= 10_000]
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[attr-defined]  # progress as it comes
    queries = [Conversation(99).message(5, 40) for _ in range(args.queries)]
    with tempfile.TemporaryDirectory() as folder:
        measure(
            "SQLite",
            sizes,
            queries,
            lambda size, others: sqlite_archives(Path(folder) / f"archive-{size}-{others}.db"),
        )
    if args.postgres:
        tables = f"bench_archive_{uuid.uuid4().hex[:8]}"
        measure(
            "PostgreSQL",
            [int(size) for size in args.postgres_sizes.split(",")],
            queries,
            lambda size, others: postgres_archives(args.postgres, f"{tables}_{size}_{others}"),
        )


if __name__ == "__main__":
    main()
