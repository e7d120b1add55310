"""``PostgresArchive``: the server-tier archive, on PostgreSQL full-text search.

One table holds each entry whole (JSON text), a ``tsvector`` of its segmented
text (``text.index_text``) under the ``english`` configuration (Snowball
stemming, stop words; CJK unigrams and bigrams pass through unchanged) with a
GIN index, and its vector as ``real[]``.

Ranking is Okapi BM25 (k1 = 1.2, b = 0.75, the IDF of FTS5's ``bm25()``),
which PostgreSQL lacks, so it is written in SQL (``BM25``), one statement per
search: the GIN index finds the scope's matching rows, their tsvectors give
each query lexeme's frequency, and N, document frequencies and the average
length are those of the search's scope (the session, plus the user's
sessions with ``user_id``): other sessions never change a session's ranking.
A row's length is its number of distinct lexemes (``length(tsv)``).

``{table}_watermark`` holds each session's watermark (``Archive.indexed_through``).

Dense search is brute force in Python over the scope's vectors (pgvector is
not required; ``real[]`` casts to its ``vector`` type when you move to it).
psycopg 3 is imported only here: ``pip install 'ctxwindow[postgres]'``.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from ctxwindow.archive.base import Archive, Document, Ranked, Scope, check_table_name
from ctxwindow.archive.embedders import Embedder
from ctxwindow.archive.vectors import StoredVector
from ctxwindow.errors import StoreError, StoreUnavailableError

INSTALL_HINT = "pip install 'ctxwindow[postgres]'"
CONFIG = "english"
K1 = 1.2
"""BM25's term-frequency saturation (FTS5's default)."""
B = 0.75
"""BM25's length normalization (FTS5's default)."""

BM25 = f"""
WITH terms AS (
    SELECT lexeme, count(*) AS qtf
    FROM unnest(%(terms)s::text[]) AS term,
        unnest(tsvector_to_array(to_tsvector('{CONFIG}', term))) AS lexeme
    GROUP BY lexeme
), scope AS (
    SELECT count(*)::float8 AS n, avg(length(tsv))::float8 AS avgdl
    FROM {{t}} WHERE session_id = %(session_id)s OR user_id = %(user_id)s
), matches AS (
    SELECT id, seq, length(tsv)::float8 AS dl, w.lexeme, cardinality(w.positions)::float8 AS tf
    FROM {{t}}, to_tsquery('{CONFIG}', %(query)s) AS q, unnest(ts_filter(
        setweight(tsv, 'A', (SELECT array_agg(lexeme) FROM terms)), ARRAY['a'::"char"]
    )) AS w
    WHERE tsv @@ q AND (session_id = %(session_id)s OR user_id = %(user_id)s)
), df AS (
    SELECT lexeme, count(*)::float8 AS df FROM matches GROUP BY lexeme
)
SELECT m.id, m.seq, sum(
    t.qtf * greatest(ln((s.n - df.df + 0.5) / (df.df + 0.5)), 1e-6)
    * m.tf * {K1 + 1} / (m.tf + {K1} * (1 - {B} + {B} * m.dl / s.avgdl))
    ORDER BY m.lexeme
) AS score
FROM matches AS m JOIN df USING (lexeme) JOIN terms AS t USING (lexeme) CROSS JOIN scope AS s
GROUP BY m.id, m.seq
ORDER BY score DESC, m.seq, m.id
LIMIT %(depth)s
"""
"""Okapi BM25 over the search's scope, best first (ties: seq, id).

IDF is FTS5's, ``ln((N - df + 0.5) / (df + 0.5))`` floored at 1e-6: a word
in half the scope's rows or more counts next to nothing. ``terms`` are the
query's lexemes, made by the same ``to_tsvector`` as the rows' so stemming
agrees; a lexeme two query terms share (``ships``, ``shipping``) counts
twice, as two phrases do in FTS5. A matching row's query lexemes are cut out
of its tsvector in C (weight A set on them, then ``ts_filter``) rather than
by unnesting every lexeme. ``tf`` is the lexeme's number of positions
(PostgreSQL keeps at most 256 per lexeme; positions past 16383 merge into
one). A row's length is its distinct lexemes, ``length(tsv)``: counting
positions instead ranked long pasted documents lower and found less evidence
(docs/archive.md), and needs every row's lexemes unnested. The sum runs in
lexeme order so that equal rows get bit-equal scores and ``seq`` decides.
"""


class PostgresArchive(Archive):
    """An archive in a PostgreSQL table (created if missing), searched with full-text search.

    ``url`` is a libpq URL (``postgresql://user@host:5432/db``). One
    connection serves every thread, one call at a time, and is reopened after
    the server drops it. ``embedder`` adds dense search fused with the
    lexical ranking (see ``Archive``).
    """

    def __init__(
        self,
        url: str,
        *,
        embedder: Embedder | None = None,
        table: str = "ctxwindow_archive",
        min_similarity: float = 0.2,
        dense_weight: float = 1.0,
        depth: int = 50,
        connect_timeout: float = 5.0,
    ) -> None:
        super().__init__(
            embedder=embedder, min_similarity=min_similarity, dense_weight=dense_weight, depth=depth
        )
        self.url = url
        self._table = check_table_name(table)
        self._connect_timeout = connect_timeout
        self._psycopg = _import_psycopg()
        self._lock = threading.Lock()
        self._conn: Any = None
        self._closed = False
        try:
            with self._cursor("create the archive table") as cur:
                self._create_table(cur)
        except StoreError:
            self.close()
            raise

    def close(self) -> None:
        with self._lock:
            self._closed = True
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def drop(self) -> None:
        """Drop the archive's tables (tests and teardown)."""
        with self._cursor("drop the archive table") as cur:
            cur.execute(self._sql("DROP TABLE IF EXISTS {t}, {w}"))

    def _create_table(self, cur: Any) -> None:
        with cur.connection.transaction():
            # Concurrent CREATE ... IF NOT EXISTS can still collide: serialize them.
            cur.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (self._table,))
            cur.execute(
                self._sql(
                    "CREATE TABLE IF NOT EXISTS {t} ("
                    " id bigserial PRIMARY KEY, session_id text NOT NULL, entry_id text NOT NULL,"
                    " user_id text, seq bigint NOT NULL, entry text NOT NULL,"
                    " tsv tsvector NOT NULL, vector real[], UNIQUE (session_id, entry_id))"
                )
            )
            cur.execute(self._sql("CREATE INDEX IF NOT EXISTS {i_tsv} ON {t} USING gin (tsv)"))
            cur.execute(self._sql("CREATE INDEX IF NOT EXISTS {i_user} ON {t} (user_id)"))
            cur.execute(self._sql("CREATE INDEX IF NOT EXISTS {i_seq} ON {t} (session_id, seq)"))
            cur.execute(
                self._sql(
                    "CREATE TABLE IF NOT EXISTS {w}"
                    " (session_id text PRIMARY KEY, through bigint NOT NULL)"
                )
            )

    def _stored(self, session_id: str, entry_ids: list[str]) -> dict[str, tuple[str, str | None]]:
        with self._cursor("read the archive") as cur:
            cur.execute(
                self._sql(
                    "SELECT entry_id, entry, user_id FROM {t}"
                    " WHERE session_id = %s AND entry_id = ANY(%s)"
                ),
                (session_id, entry_ids),
            )
            return {entry_id: (entry, user) for entry_id, entry, user in cur.fetchall()}

    def _write(
        self, session_id: str, user_id: str | None, documents: list[Document], through: int | None
    ) -> None:
        query = self._sql(
            "INSERT INTO {t} (session_id, entry_id, user_id, seq, entry, tsv, vector)"
            f" VALUES (%s, %s, %s, %s, %s, to_tsvector('{CONFIG}', %s), %s)"
            " ON CONFLICT (session_id, entry_id) DO UPDATE SET user_id = EXCLUDED.user_id,"
            " seq = EXCLUDED.seq, entry = EXCLUDED.entry, tsv = EXCLUDED.tsv,"
            " vector = EXCLUDED.vector"
        )
        rows = [
            (session_id, d.entry_id, user_id, d.seq, d.json, d.body, d.vector) for d in documents
        ]
        with self._cursor("write to the archive") as cur, cur.connection.transaction():
            if rows:
                cur.executemany(query, rows)
            if through is not None:
                cur.execute(
                    self._sql(
                        "INSERT INTO {w} (session_id, through) VALUES (%s, %s)"
                        " ON CONFLICT (session_id) DO UPDATE"
                        " SET through = GREATEST({w}.through, EXCLUDED.through)"
                    ),
                    (session_id, through),
                )

    def _indexed_through(self, session_id: str) -> int:
        with self._cursor("read the archive's watermark") as cur:
            cur.execute(self._sql("SELECT through FROM {w} WHERE session_id = %s"), (session_id,))
            row = cur.fetchone()
        return 0 if row is None else int(row[0])

    def _lexical(self, scope: Scope, terms: list[str], depth: int, budget: int) -> list[Ranked]:
        params = {
            "terms": terms,
            "query": _tsquery(terms),
            "session_id": scope.session_id,
            "user_id": scope.user_id,
            "depth": depth,
        }
        with self._cursor("search the archive") as cur:
            cur.execute(self._sql(BM25), params)
            return [Ranked(key, seq, float(score)) for key, seq, score in cur.fetchall()]

    def _vectors(self, scope: Scope) -> list[tuple[int, int, StoredVector]]:
        with self._cursor("read the archive's vectors") as cur:
            cur.execute(
                self._sql(
                    "SELECT id, seq, vector FROM {t}"
                    " WHERE (session_id = %s OR user_id = %s) AND vector IS NOT NULL"
                ),
                (scope.session_id, scope.user_id),
            )
            return [(key, seq, vector) for key, seq, vector in cur.fetchall()]

    def _load(self, keys: Sequence[int]) -> dict[int, tuple[str, str]]:
        with self._cursor("read the archive") as cur:
            cur.execute(
                self._sql("SELECT id, session_id, entry FROM {t} WHERE id = ANY(%s)"), (list(keys),)
            )
            return {key: (session_id, entry) for key, session_id, entry in cur.fetchall()}

    def _at(self, session_id: str, seqs: list[int]) -> list[str]:
        with self._cursor("read the archive") as cur:
            cur.execute(
                self._sql("SELECT entry FROM {t} WHERE session_id = %s AND seq = ANY(%s)"),
                (session_id, seqs),
            )
            return [entry for (entry,) in cur.fetchall()]

    def _forget(self, session_id: str) -> int:
        with self._cursor("forget a session") as cur, cur.connection.transaction():
            cur.execute(self._sql("DELETE FROM {t} WHERE session_id = %s"), (session_id,))
            removed = int(cur.rowcount)
            cur.execute(self._sql("DELETE FROM {w} WHERE session_id = %s"), (session_id,))
            return removed

    def _sql(self, text: str) -> Any:
        sql = self._psycopg.sql
        t = self._table
        return sql.SQL(text).format(
            t=sql.Identifier(t),
            w=sql.Identifier(f"{t}_watermark"),
            i_tsv=sql.Identifier(f"{t}_tsv"),
            i_user=sql.Identifier(f"{t}_user"),
            i_seq=sql.Identifier(f"{t}_seq"),
        )

    @contextmanager
    def _cursor(self, doing: str) -> Iterator[Any]:
        """A cursor on the (re)opened connection; psycopg errors become ``StoreError``."""
        psycopg = self._psycopg
        with self._lock:
            if self._closed:
                raise StoreError(f"{self._where()} is closed")
            try:
                if self._conn is None or self._conn.closed:
                    self._conn = psycopg.connect(
                        self.url, autocommit=True, connect_timeout=self._connect_timeout
                    )
                with self._conn.cursor() as cur:
                    yield cur
            except psycopg.OperationalError as exc:
                raise StoreUnavailableError(f"{self._where()} could not {doing}: {exc}") from exc
            except psycopg.Error as exc:
                raise StoreError(f"{self._where()} could not {doing}: {exc}") from exc

    def _where(self) -> str:
        return f"PostgresArchive({_redacted(self.url)}, table={self._table!r})"


def _import_psycopg() -> Any:
    try:
        psycopg = importlib.import_module("psycopg")
        importlib.import_module("psycopg.sql")
    except ImportError as exc:
        raise ImportError(f"PostgresArchive needs psycopg 3: {INSTALL_HINT}") from exc
    return psycopg


def _tsquery(terms: list[str]) -> str:
    """``'t1' | 't2' | ...``: each term a quoted lexeme, so no tsquery syntax survives."""
    return " | ".join("'" + term.replace("\\", "\\\\").replace("'", "''") + "'" for term in terms)


def _redacted(url: str) -> str:
    """The URL without its password."""
    scheme, sep, rest = url.partition("://")
    credentials, at, host = rest.rpartition("@")
    if not sep or not at or ":" not in credentials:
        return url
    return f"{scheme}://{credentials.split(':', 1)[0]}:***@{host}"
