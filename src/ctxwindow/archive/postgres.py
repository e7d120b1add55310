"""``PostgresArchive``: the server-tier archive, on PostgreSQL.

``{table}`` holds each entry whole (JSON text), a ``tsvector`` of its
segmented text (``text.index_text``) under the ``english`` configuration
(Snowball stemming, stop words; CJK unigrams and bigrams pass through
unchanged), and its vector as ``real[]``. As in ``SQLiteArchive``, the
archive keeps its own inverted index per session, so that a search reads a
bounded number of postings whatever the table's size (``ranking``):
``{table}_postings (sid, lexeme, id) -> tf, length, seq`` (the last row of
each range, id ``COUNT_ID``, holds the lexeme's document frequency in the
session), ``{table}_sessions (sid, session_id, rows, length)`` and
``{table}_users (user_id, sid)``. They are written from the ``tsvector`` in
SQL, in the transaction that writes the entries.

Ranking is Okapi BM25 with FTS5's constants (``ranking``) over the searched
scope's statistics (the session, plus the user's sessions with ``user_id``):
other sessions never change a session's ranking. A lexeme's frequency in a
row is its number of positions in the ``tsvector`` (PostgreSQL keeps at most
256 per lexeme); a row's length is its number of distinct lexemes
(``length(tsv)``). ``{table}_watermark`` holds each session's watermark
(``Archive.indexed_through``).

Dense search is brute force in Python over the scope's vectors (pgvector is
not required; ``real[]`` casts to its ``vector`` type when you move to it).
psycopg 3 is imported only here: the ``postgres`` extra.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from ctxwindow.archive import ranking
from ctxwindow.archive.base import Archive, Document, Ranked, Scope, check_table_name
from ctxwindow.archive.embedders import Embedder
from ctxwindow.archive.vectors import StoredVector
from ctxwindow.errors import StoreError, StoreUnavailableError
from ctxwindow.extras import install_hint

INSTALL_HINT = install_hint("postgres")
CONFIG = "english"
COUNT_ID = 2**63 - 1
"""The id of the last posting of each (session, lexeme): its ``tf`` is the lexeme's row count."""

_UNITS = (
    f"trunc(q.weight * p.tf * {ranking.K1 + 1!r}::float8 / (p.tf + {ranking.K1!r}::float8"
    f" * ({1 - ranking.B!r}::float8 + {ranking.B!r}::float8 * p.length / %(average)s::float8))"
    f" * {ranking.UNITS!r}::float8)::bigint"
)  # ranking.units: the same float8 operations in the same order as Python's

SCOPE = f"""
WITH sids AS (
    SELECT sid FROM {{s}} WHERE session_id = %(session_id)s
    UNION SELECT sid FROM {{u}} WHERE user_id = %(user_id)s
), query AS (
    SELECT lexeme, count(*) AS n
    FROM unnest(%(terms)s::text[]) AS term,
        unnest(tsvector_to_array(to_tsvector('{CONFIG}', term))) AS lexeme
    GROUP BY lexeme
), scope AS (
    SELECT coalesce(array_agg(sid ORDER BY sid), '{{{{}}}}') AS sids FROM sids
)
SELECT
    scope.sids,
    (SELECT coalesce(sum(rows), 0) FROM {{s}} WHERE sid = ANY(scope.sids)),
    (SELECT coalesce(sum(length), 0) FROM {{s}} WHERE sid = ANY(scope.sids)),
    (SELECT coalesce(json_object_agg(lexeme, n), '{{{{}}}}') FROM query),
    (SELECT coalesce(json_object_agg(lexeme, df), '{{{{}}}}') FROM (
        SELECT query.lexeme, sum(p.tf) AS df FROM unnest(scope.sids) AS s (sid), query,
            LATERAL (SELECT tf FROM {{p}} AS p WHERE p.sid = s.sid AND p.lexeme = query.lexeme
                AND p.id = {COUNT_ID} OFFSET 0) AS p
        GROUP BY query.lexeme
    ) AS frequencies)
FROM scope
"""
"""The searched sessions, their rows and total length, the query's lexemes (made by the same
``to_tsvector`` as the rows', so stemming agrees) and each one's row count in the scope."""

READ = f"""
WITH q (lexeme, weight) AS (SELECT * FROM unnest(%(lexemes)s::text[], %(weights)s::float8[]))
SELECT s.id, s.seq, s.units FROM (
    SELECT p.id, max(p.seq) AS seq, sum({_UNITS}) AS units
    FROM q, unnest(%(sids)s::bigint[]) AS scope (sid), LATERAL (
        SELECT id, seq, tf, length FROM {{p}} AS p
        WHERE p.sid = scope.sid AND p.lexeme = q.lexeme AND p.id < {COUNT_ID} OFFSET 0
    ) AS p
    GROUP BY p.id
) AS s {{users}}
ORDER BY s.units DESC, s.seq, s.id LIMIT %(limit)s
"""

FILL = f"""
SELECT s.id, s.seq, s.units FROM (
    SELECT p.id, p.seq, {_UNITS.replace("q.weight", "%(weight)s::float8")} AS units FROM {{p}} AS p
    WHERE p.sid = %(sid)s AND p.lexeme = %(lexeme)s AND p.id < {COUNT_ID}
    ORDER BY p.id DESC LIMIT %(limit)s
) AS s {{users}}
"""

POSTINGS = """
SELECT p.id, p.lexeme, p.tf, p.length
FROM unnest(%s::text[]) AS q (lexeme), unnest(%s::bigint[]) AS s (sid),
    unnest(%s::bigint[]) AS k (id), LATERAL (
        SELECT id, lexeme, tf, length FROM {p} AS p
        WHERE p.sid = s.sid AND p.lexeme = q.lexeme AND p.id = k.id OFFSET 0
    ) AS p
"""
"""The postings of these lexemes in these rows, one primary-key lookup each."""

USERS = (
    "WHERE EXISTS (SELECT 1 FROM {t} AS e WHERE e.id = s.id"
    " AND (e.session_id = %(session_id)s OR e.user_id = %(user_id)s))"
)
"""A user's sessions may hold rows of other users: only the user's, and the session's."""

SESSION = """
WITH lock AS MATERIALIZED (
    SELECT pg_advisory_xact_lock(hashtext(%(table)s), hashtext(%(session_id)s))
), made AS (
    INSERT INTO {s} (session_id, rows, length) SELECT %(session_id)s, 0, 0 FROM lock
    ON CONFLICT (session_id) DO NOTHING RETURNING sid
)
SELECT sid FROM made UNION ALL SELECT sid FROM {s} WHERE session_id = %(session_id)s
"""
"""The session's ``sid``, made if new, under a lock held until the write commits: one writer
per session at a time, so the rows a write replaces are not replaced under it."""

UNINDEX = f"""
WITH old AS (
    SELECT id, tsv FROM {{t}} WHERE session_id = %(session_id)s AND entry_id = ANY(%(entry_ids)s)
), words AS (
    SELECT old.id, w.lexeme FROM old, unnest(old.tsv) AS w
), counts AS (
    SELECT lexeme, count(*) AS n FROM words GROUP BY lexeme
), postings AS (
    DELETE FROM {{p}} AS p USING words
    WHERE p.sid = %(sid)s AND p.lexeme = words.lexeme AND p.id = words.id
), fewer AS (
    UPDATE {{p}} AS p SET tf = p.tf - counts.n FROM counts
    WHERE p.sid = %(sid)s AND p.lexeme = counts.lexeme AND p.id = {COUNT_ID} AND p.tf > counts.n
), gone AS (
    DELETE FROM {{p}} AS p USING counts
    WHERE p.sid = %(sid)s AND p.lexeme = counts.lexeme AND p.id = {COUNT_ID} AND p.tf <= counts.n
)
UPDATE {{s}} SET rows = rows - (SELECT count(*) FROM old),
    length = length - (SELECT coalesce(sum(length(tsv)), 0) FROM old)
WHERE sid = %(sid)s
"""
"""The rows about to be replaced leave the index (postings, row counts, the session's totals)."""

INDEX = f"""
WITH new AS (
    SELECT id, seq, tsv FROM {{t}}
    WHERE session_id = %(session_id)s AND entry_id = ANY(%(entry_ids)s)
), words AS (
    SELECT new.id, new.seq, length(new.tsv) AS length, w.lexeme,
        coalesce(cardinality(w.positions), 1) AS tf
    FROM new, unnest(new.tsv) AS w
), postings AS (
    INSERT INTO {{p}} (sid, lexeme, id, tf, length, seq)
    SELECT %(sid)s, lexeme, id, tf, length, seq FROM words
), counts AS (
    INSERT INTO {{p}} (sid, lexeme, id, tf, length, seq)
    SELECT %(sid)s, lexeme, {COUNT_ID}, count(*), 0, 0 FROM words GROUP BY lexeme
    ON CONFLICT (sid, lexeme, id) DO UPDATE SET tf = {{p}}.tf + excluded.tf
)
UPDATE {{s}} SET rows = rows + (SELECT count(*) FROM new),
    length = length + (SELECT coalesce(sum(length(tsv)), 0) FROM new)
WHERE sid = %(sid)s
"""
"""The rows just written join the index."""

BACKFILL = (
    "INSERT INTO {s} (session_id, rows, length)"
    " SELECT session_id, count(*), sum(length(tsv)) FROM {t} GROUP BY session_id",
    "INSERT INTO {u} (user_id, sid) SELECT DISTINCT e.user_id, s.sid"
    " FROM {t} AS e JOIN {s} AS s USING (session_id) WHERE e.user_id IS NOT NULL",
    "INSERT INTO {p} (sid, lexeme, id, tf, length, seq)"
    " SELECT s.sid, w.lexeme, e.id, coalesce(cardinality(w.positions), 1), length(e.tsv), e.seq"
    " FROM {t} AS e JOIN {s} AS s USING (session_id), unnest(e.tsv) AS w",
    "INSERT INTO {p} (sid, lexeme, id, tf, length, seq)"
    f" SELECT s.sid, w.lexeme, {COUNT_ID}, count(*), 0, 0"
    " FROM {t} AS e JOIN {s} AS s USING (session_id), unnest(e.tsv) AS w"
    " GROUP BY s.sid, w.lexeme",
)
"""The index of a table written by an earlier version (without postings), in four statements."""


class PostgresArchive(Archive):
    """An archive in PostgreSQL tables (created if missing), with its own per-session index.

    ``url`` is a libpq URL (``postgresql://user@host:5432/db``). One
    connection serves every thread, one call at a time, and is reopened after
    the server drops it. ``embedder`` adds dense search fused with the
    lexical ranking (see ``Archive``). A search reads at most about
    ``reads_per_hit`` postings per hit asked for (``archive.ranking``).
    """

    def __init__(
        self,
        url: str,
        *,
        embedder: Embedder | None = None,
        table: str = "ctxwindow_archive",
        min_similarity: float = 0.2,
        dense_weight: float = 0.4,
        depth: int = 50,
        reads_per_hit: int = 40,
        connect_timeout: float = 5.0,
    ) -> None:
        super().__init__(
            embedder=embedder,
            min_similarity=min_similarity,
            dense_weight=dense_weight,
            depth=depth,
            reads_per_hit=reads_per_hit,
        )
        self.url = url
        self._table = check_table_name(table)
        self._connect_timeout = connect_timeout
        self._psycopg = _import_psycopg()
        self._lock = threading.Lock()
        self._conn: Any = None
        self._closed = False
        try:
            with self._cursor("create the archive tables") as cur:
                self._create_tables(cur)
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
        with self._cursor("drop the archive tables") as cur:
            cur.execute(self._sql("DROP TABLE IF EXISTS {t}, {w}, {s}, {u}, {p}"))

    def _create_tables(self, cur: Any) -> None:
        with cur.connection.transaction():
            # Concurrent CREATE ... IF NOT EXISTS can still collide: serialize them.
            cur.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (self._table,))
            cur.execute("SELECT to_regclass(%s) IS NULL", (f"{self._table}_sessions",))
            (new,) = cur.fetchone()
            for statement in (
                "CREATE TABLE IF NOT EXISTS {t} ("
                " id bigserial PRIMARY KEY, session_id text NOT NULL, entry_id text NOT NULL,"
                " user_id text, seq bigint NOT NULL, entry text NOT NULL,"
                " tsv tsvector NOT NULL, vector real[], UNIQUE (session_id, entry_id))",
                "DROP INDEX IF EXISTS {i_tsv}",  # searched through the postings now
                "CREATE INDEX IF NOT EXISTS {i_user} ON {t} (user_id)",
                "CREATE INDEX IF NOT EXISTS {i_seq} ON {t} (session_id, seq)",
                "CREATE TABLE IF NOT EXISTS {w} (session_id text PRIMARY KEY,"
                " through bigint NOT NULL)",
                "CREATE TABLE IF NOT EXISTS {s} (sid bigserial PRIMARY KEY,"
                " session_id text NOT NULL UNIQUE, rows bigint NOT NULL, length bigint NOT NULL)",
                "CREATE TABLE IF NOT EXISTS {u} (user_id text NOT NULL, sid bigint NOT NULL,"
                " PRIMARY KEY (user_id, sid))",
                "CREATE INDEX IF NOT EXISTS {i_users_sid} ON {u} (sid)",
                "CREATE TABLE IF NOT EXISTS {p} (sid bigint NOT NULL, lexeme text NOT NULL,"
                " id bigint NOT NULL, tf integer NOT NULL, length integer NOT NULL,"
                " seq bigint NOT NULL, PRIMARY KEY (sid, lexeme, id))",
                *(BACKFILL if new else ()),
            ):
                cur.execute(self._sql(statement))

    # Writing.

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
        with self._cursor("write to the archive") as cur, cur.connection.transaction():
            if documents:
                self._replace(cur, session_id, user_id, documents)
            if through is not None:
                cur.execute(
                    self._sql(
                        "INSERT INTO {w} (session_id, through) VALUES (%s, %s)"
                        " ON CONFLICT (session_id) DO UPDATE"
                        " SET through = GREATEST({w}.through, EXCLUDED.through)"
                    ),
                    (session_id, through),
                )

    def _replace(
        self, cur: Any, session_id: str, user_id: str | None, documents: list[Document]
    ) -> None:
        """Insert the documents, or update the rows they replace, with their postings."""
        cur.execute(self._sql(SESSION), {"table": self._table, "session_id": session_id})
        (sid,) = cur.fetchone()
        if user_id is not None:
            cur.execute(
                self._sql("INSERT INTO {u} (user_id, sid) VALUES (%s, %s) ON CONFLICT DO NOTHING"),
                (user_id, sid),
            )
        rows = {"sid": sid, "session_id": session_id, "entry_ids": [d.entry_id for d in documents]}
        if any(d.replaces for d in documents):
            # Another process may have written one of the others since ``index`` looked: then
            # the postings below collide with its own, the batch fails and is tried again.
            cur.execute(
                self._sql(UNINDEX),
                {**rows, "entry_ids": [d.entry_id for d in documents if d.replaces]},
            )
        cur.executemany(
            self._sql(
                "INSERT INTO {t} (session_id, entry_id, user_id, seq, entry, tsv, vector)"
                f" VALUES (%s, %s, %s, %s, %s, to_tsvector('{CONFIG}', %s), %s)"
                " ON CONFLICT (session_id, entry_id) DO UPDATE SET user_id = EXCLUDED.user_id,"
                " seq = EXCLUDED.seq, entry = EXCLUDED.entry, tsv = EXCLUDED.tsv,"
                " vector = EXCLUDED.vector"
            ),
            [(session_id, d.entry_id, user_id, d.seq, d.json, d.body, d.vector) for d in documents],
        )
        cur.execute(self._sql(INDEX), rows)

    def _indexed_through(self, session_id: str) -> int:
        with self._cursor("read the archive's watermark") as cur:
            cur.execute(self._sql("SELECT through FROM {w} WHERE session_id = %s"), (session_id,))
            row = cur.fetchone()
        return 0 if row is None else int(row[0])

    # Searching.

    def _lexical(self, scope: Scope, terms: list[str], depth: int, budget: int) -> list[Ranked]:
        scoped = {"session_id": scope.session_id, "user_id": scope.user_id}
        with self._cursor("search the archive") as cur:
            cur.execute(self._sql(SCOPE), {**scoped, "terms": terms})
            sids, rows, length, query, frequencies = cur.fetchone()
            stats = ranking.Statistics(int(rows), int(length), frequencies)
            plan = ranking.plan(query, stats, budget) if sids else None
            if plan is None:
                return []
            users = USERS if scope.user_id is not None else ""
            params = {**scoped, "sids": sids, "average": plan.average_length}

            def read(plan: ranking.Plan, limit: int) -> ranking.Found:
                weights = {"lexemes": list(plan.read), "weights": list(plan.read.values())}
                cur.execute(
                    self._sql(READ.replace("{users}", users)), params | weights | {"limit": limit}
                )
                return {key: (seq, int(units)) for key, seq, units in cur.fetchall()}

            def fill(plan: ranking.Plan, found: ranking.Found) -> set[int]:
                lexeme, weight = next(iter(plan.rescore.items()))
                filled: set[int] = set()
                for sid in sids:
                    cur.execute(
                        self._sql(FILL.replace("{users}", users)),
                        params
                        | {"sid": sid, "lexeme": lexeme, "weight": weight, "limit": plan.fill},
                    )
                    for key, seq, units in cur.fetchall():
                        found[key] = (seq, found.get(key, (seq, 0))[1] + units)
                        filled.add(key)
                return filled

            def postings(lexemes: list[str], keys: list[int]) -> list[tuple[int, str, int, int]]:
                cur.execute(self._sql(POSTINGS), (lexemes, sids, keys))
                return list(cur.fetchall())

            best = ranking.best(plan, depth, read, fill, postings)
        return [Ranked(key, seq, score) for key, seq, score in best]

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
            cur.execute(
                "SELECT pg_advisory_xact_lock(hashtext(%s), hashtext(%s))",
                (self._table, session_id),
            )
            cur.execute(self._sql("SELECT sid FROM {s} WHERE session_id = %s"), (session_id,))
            row = cur.fetchone()
            if row is not None:
                for table in ("{p}", "{u}", "{s}"):
                    cur.execute(self._sql(f"DELETE FROM {table} WHERE sid = %s"), row)
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
            s=sql.Identifier(f"{t}_sessions"),
            u=sql.Identifier(f"{t}_users"),
            p=sql.Identifier(f"{t}_postings"),
            i_tsv=sql.Identifier(f"{t}_tsv"),
            i_user=sql.Identifier(f"{t}_user"),
            i_seq=sql.Identifier(f"{t}_seq"),
            i_users_sid=sql.Identifier(f"{t}_users_sid"),
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


def _redacted(url: str) -> str:
    """The URL without its password."""
    scheme, sep, rest = url.partition("://")
    credentials, at, host = rest.rpartition("@")
    if not sep or not at or ":" not in credentials:
        return url
    return f"{scheme}://{credentials.split(':', 1)[0]}:***@{host}"
