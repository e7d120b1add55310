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
SQL, in the transaction that writes the entries. The statements are in
``postgres_sql``; this module runs them, on one connection, and maps errors.

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
from ctxwindow.archive.postgres_sql import (
    BACKFILL,
    CONFIG,
    FILL,
    INDEX,
    POSTINGS,
    READ,
    SCOPE,
    SESSION,
    TABLES,
    UNINDEX,
    USERS,
)
from ctxwindow.archive.postgres_sql import COUNT_ID as COUNT_ID  # its former home
from ctxwindow.archive.vectors import StoredVector
from ctxwindow.errors import StoreError, StoreUnavailableError
from ctxwindow.extras import install_hint

INSTALL_HINT = install_hint("postgres")


class PostgresArchive(Archive):
    """An archive in PostgreSQL tables (created if missing), with its own per-session index.

    ``url`` is a libpq URL (``postgresql://user@host:5432/db``; with
    ``?pooler=transaction`` behind PgBouncer in transaction mode). One
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
        from ctxwindow.stores.postgres.common import url_options

        self.url = url
        # Behind PgBouncer in transaction mode (``?pooler=transaction``, as for the store):
        # no statement prepared on the server (a pooler before 1.21 mixes them up). The
        # archive holds no session-level state: its locks are transaction-level.
        self._libpq_url, pooler, _, _ = url_options(url, None, None)
        self._prepare: dict[str, Any] = {"prepare_threshold": None} if pooler else {}
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
            for statement in (*TABLES, *(BACKFILL if new else ())):
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

            best = ranking.best(plan, depth, read, fill, ranking.rescored(postings))
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

    def _vector_mark(self, session_id: str) -> tuple[int, int] | None:
        with self._cursor("read the archive") as cur:
            cur.execute(
                self._sql(
                    "SELECT (SELECT rows FROM {s} WHERE session_id = %s),"
                    " (SELECT coalesce(max(id), 0) FROM {t})"
                ),
                (session_id,),
            )
            rows, newest = cur.fetchone()
        return (0 if rows is None else int(rows)), int(newest)

    def _vectors_after(
        self, session_id: str, key: int
    ) -> list[tuple[int, int, StoredVector | None]]:
        # Keys come from one sequence: a write that took a key below the mark may commit
        # after it; the session's row count then differs and the matrix is read whole.
        where = "session_id = %s" if key == 0 else "id > %s AND session_id = %s"
        with self._cursor("read the archive's vectors") as cur:
            cur.execute(
                self._sql(f"SELECT id, seq, vector FROM {{t}} WHERE {where} ORDER BY id"),
                (session_id,) if key == 0 else (key, session_id),
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
                        self._libpq_url,
                        autocommit=True,
                        connect_timeout=self._connect_timeout,
                        **self._prepare,
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
