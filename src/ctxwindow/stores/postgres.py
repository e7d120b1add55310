"""PostgreSQL session stores: ``PostgresStore`` and ``AsyncPostgresStore`` (psycopg 3).

Tables (in ``schema`` when given, else the connection's search path)::

    ctxwindow_entries      (session_id, seq, id, doc jsonb, tokens, created_at)
                           primary key (session_id, seq), unique (session_id, id)
    ctxwindow_idempotency  (session_id, key, first_seq, last_seq)
    ctxwindow_sessions     (session_id, last_seq, updated_at)   -- since version 2
    ctxwindow_schema_version (version, applied_at)

The store creates and upgrades its tables when it opens: ``MIGRATIONS`` are
applied in order, in one transaction that holds an advisory lock, so openers
racing on a fresh database wait for each other instead of failing. A
database newer than this code is refused rather than guessed at.

An append is one transaction: it takes ``pg_advisory_xact_lock`` on the
session, numbers the entries from ``max(seq) + 1``, inserts them and the
idempotency key, and commits before returning, so an acknowledged append is
on disk (with the server's default ``synchronous_commit = on``).

Session locks. ``lock(session_id)`` also holds the session against every
other process using the database: a session-level advisory lock
(``pg_try_advisory_lock``, polled until the timeout) on a connection each
store object keeps for its locks, released with ``pg_advisory_unlock``. The
server releases it when that connection ends, so a holder that dies
(``kill -9``) frees its sessions as soon as the server notices the closed
connection. The key is a 64-bit hash of the schema and the session id, kept
outside the 32-bit range of the per-append ``hashtext`` locks. Session-level
locks need a real server connection: behind a pooler in transaction mode
(PgBouncer) they do not hold.
"""

from __future__ import annotations

import asyncio
import logging
import select
import threading
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from ctxwindow.errors import StoreError, StoreUnavailableError
from ctxwindow.messages import Entry
from ctxwindow.stores.base import (
    AsyncStore,
    Store,
    check_count,
    check_entries,
    check_idempotency_key,
    check_replay_key,
    check_session_id,
    encode_entry,
    entry_from_json,
    redact_url,
    scrub,
)
from ctxwindow.stores.locks import async_poll, poll, session_hash

if TYPE_CHECKING:
    import psycopg
    from psycopg import sql

logger = logging.getLogger("ctxwindow.stores")

INSTALL_HINT = "pip install 'ctxwindow[postgres]'"

# version -> statements; {s} is the schema qualifier ("" or "name.")
MIGRATIONS: dict[int, tuple[str, ...]] = {
    1: (
        """CREATE TABLE {s}ctxwindow_entries (
            session_id text NOT NULL,
            seq bigint NOT NULL,
            id text NOT NULL,
            doc jsonb NOT NULL,
            tokens integer NOT NULL,
            created_at double precision NOT NULL,
            PRIMARY KEY (session_id, seq),
            UNIQUE (session_id, id))""",
        """CREATE TABLE {s}ctxwindow_idempotency (
            session_id text NOT NULL,
            key text NOT NULL,
            first_seq bigint NOT NULL,
            last_seq bigint NOT NULL,
            PRIMARY KEY (session_id, key))""",
    ),
    # Listing sessions from the entries table reads its whole index.
    2: (
        """CREATE TABLE {s}ctxwindow_sessions (
            session_id text PRIMARY KEY,
            last_seq bigint NOT NULL,
            updated_at double precision NOT NULL)""",
        """INSERT INTO {s}ctxwindow_sessions (session_id, last_seq, updated_at)
            SELECT session_id, max(seq), max(created_at) FROM {s}ctxwindow_entries
            GROUP BY session_id""",
    ),
}
SCHEMA_VERSION = max(MIGRATIONS)

_MIGRATION_LOCK = 0x63747877  # "ctxw": the first key of the two-key advisory lock

_VERSION_TABLE = """CREATE TABLE IF NOT EXISTS {s}ctxwindow_schema_version (
    version integer PRIMARY KEY, applied_at double precision NOT NULL)"""
_CURRENT_VERSION = "SELECT coalesce(max(version), 0) FROM {s}ctxwindow_schema_version"
_HEALTH = """SELECT (SELECT coalesce(max(version), 0) FROM {s}ctxwindow_schema_version),
    current_setting('fsync'), current_setting('synchronous_commit')"""
_RECORD_VERSION = "INSERT INTO {s}ctxwindow_schema_version (version, applied_at) VALUES (%s, %s)"

_LOCK_SESSION = "SELECT pg_advisory_xact_lock(hashtext(%s))"
# Read after the session lock, in a statement of its own: a statement's snapshot is
# taken when it starts, so one that waited for the lock itself would miss rows
# the previous holder committed.
_STATE = """SELECT
    (SELECT coalesce(max(seq), 0) FROM {s}ctxwindow_entries WHERE session_id = %(session)s),
    k.first_seq, k.last_seq
    FROM (SELECT 1) AS one LEFT JOIN {s}ctxwindow_idempotency AS k
    ON k.session_id = %(session)s AND k.key = %(key)s"""
_RANGE = """SELECT doc::text FROM {s}ctxwindow_entries
    WHERE session_id = %s AND seq BETWEEN %s AND %s ORDER BY seq"""
# Binary parameters (%b) spare the client from quoting every JSON document into an array literal.
_WRITE = """WITH entries AS (
    INSERT INTO {s}ctxwindow_entries (session_id, seq, id, doc, tokens, created_at)
    SELECT %(session)s, t.seq, t.id, t.doc::jsonb, t.tokens, t.created_at
    FROM unnest(%(seqs)b::bigint[], %(ids)b::text[], %(docs)b::text[], %(tokens)b::integer[],
        %(created)b::float8[]) AS t(seq, id, doc, tokens, created_at)
), idempotency AS (
    INSERT INTO {s}ctxwindow_idempotency (session_id, key, first_seq, last_seq)
    SELECT %(session)s, %(key)s, %(first)s, %(last)s WHERE %(key)s::text IS NOT NULL
)
INSERT INTO {s}ctxwindow_sessions (session_id, last_seq, updated_at)
    VALUES (%(session)s, %(last)s, %(now)s) ON CONFLICT (session_id)
    DO UPDATE SET last_seq = excluded.last_seq, updated_at = excluded.updated_at"""
_LOAD = """SELECT doc::text FROM {s}ctxwindow_entries
    WHERE session_id = %s AND seq > %s ORDER BY seq LIMIT %s"""
_TAIL = """SELECT doc FROM (SELECT doc::text, seq FROM {s}ctxwindow_entries
    WHERE session_id = %s ORDER BY seq DESC LIMIT %s) AS t ORDER BY seq"""
_GET = "SELECT doc::text FROM {s}ctxwindow_entries WHERE session_id = %s AND id = %s"
_DELETE = (
    "DELETE FROM {s}ctxwindow_entries WHERE session_id = %s",
    "DELETE FROM {s}ctxwindow_idempotency WHERE session_id = %s",
    "DELETE FROM {s}ctxwindow_sessions WHERE session_id = %s",
)
_SESSIONS = "SELECT session_id FROM {s}ctxwindow_sessions WHERE starts_with(session_id, %s)"
_REPLAYED = """SELECT e.doc::text FROM {s}ctxwindow_idempotency AS k
    JOIN {s}ctxwindow_entries AS e
    ON e.session_id = k.session_id AND e.seq BETWEEN k.first_seq AND k.last_seq
    WHERE k.session_id = %s AND k.key = %s ORDER BY e.seq"""
_TRY_LOCK = "SELECT pg_try_advisory_lock(%s)"
_UNLOCK = "SELECT pg_advisory_unlock(%s)"


def _psycopg() -> Any:
    try:
        import psycopg
    except ImportError as exc:
        raise ImportError(f"the PostgreSQL stores need 'psycopg': {INSTALL_HINT}") from exc
    return psycopg


def _check_url(url: str) -> None:
    scheme = urlsplit(url).scheme if isinstance(url, str) else ""
    if scheme not in ("postgresql", "postgres"):
        raise ValueError(
            f"not a PostgreSQL URL: {redact_url(str(url))!r} (expected postgresql://…)"
        )


class _Queries:
    """SQL bound to a schema, argument building and error mapping (sync and async share it)."""

    def __init__(self, url: str, schema: str | None, timeout: float) -> None:
        _check_url(url)
        self.raw_url = url
        self.url = redact_url(url)
        self.schema = schema
        self.timeout = timeout
        self._cache: dict[str, sql.Composed] = {}

    def __call__(self, text: str) -> sql.Composed:
        """``text`` with ``{s}`` bound to the schema qualifier (composed once)."""
        query = self._cache.get(text)
        if query is None:
            from psycopg import sql

            qualifier = (
                sql.SQL("") if self.schema is None else sql.Identifier(self.schema) + sql.SQL(".")
            )
            query = self._cache[text] = sql.SQL(text).format(s=qualifier)
        return query

    def connect_options(self) -> dict[str, Any]:
        # libpq takes whole seconds, and at least 2
        return {"autocommit": True, "connect_timeout": max(2, round(self.timeout))}

    def migrations(self, current: int) -> list[tuple[int, list[sql.Composed]]]:
        if current > SCHEMA_VERSION:
            raise StoreError(
                f"PostgreSQL at {self.url} has ctxwindow schema version {current}, newer than "
                f"this ctxwindow knows ({SCHEMA_VERSION}): upgrade ctxwindow"
            )
        return [
            (version, [self(statement) for statement in statements])
            for version, statements in sorted(MIGRATIONS.items())
            if version > current
        ]

    def create_schema(self) -> sql.Composed | None:
        if self.schema is None:
            return None
        from psycopg import sql

        return sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(self.schema))

    def migration_lock(self) -> tuple[str, tuple[int, str]]:
        return "SELECT pg_advisory_xact_lock(%s, hashtext(%s))", (
            _MIGRATION_LOCK,
            self.schema or "",
        )

    @staticmethod
    def write(
        session_id: str, entries: Sequence[Entry], key: str | None, first: int
    ) -> tuple[list[Entry], dict[str, Any]]:
        """The stored copies (numbered from ``first``) and the parameters of ``_WRITE``."""
        docs = [encode_entry(entry, seq) for seq, entry in enumerate(entries, first)]
        stored = [entry_from_json(doc) for doc in docs]  # copies, exactly as a load returns them
        params = {
            "session": session_id,
            "key": key,
            "first": first,
            "last": stored[-1].seq,
            "now": time.time(),
            "seqs": [entry.seq for entry in stored],
            "ids": [entry.id for entry in stored],
            "docs": docs,
            "tokens": [entry.tokens for entry in stored],
            "created": [float(entry.created_at) for entry in stored],
        }
        return stored, params

    @contextmanager
    def errors(self, action: str) -> Iterator[None]:
        """Map psycopg errors to ``StoreError``/``StoreUnavailableError``."""
        psycopg = _psycopg()
        try:
            yield
        except psycopg.errors.UniqueViolation as exc:
            raise StoreError(
                f"PostgreSQL at {self.url}: {action} failed: an entry id is already in the "
                f"session (entry ids are unique per session): {self._text(exc)}"
            ) from exc
        except psycopg.errors.UntranslatableCharacter as exc:
            raise StoreError(  # psycopg's text would quote the message: keep it out of logs
                f"PostgreSQL at {self.url}: {action} failed: jsonb cannot hold the NUL "
                "character (U+0000); remove it from the message"
            ) from exc
        except psycopg.OperationalError as exc:
            raise StoreUnavailableError(
                f"PostgreSQL at {self.url} is unavailable ({action}): {self._text(exc)}"
            ) from exc
        except psycopg.Error as exc:
            raise StoreError(
                f"PostgreSQL at {self.url}: {action} failed: {self._text(exc)}"
            ) from exc

    def _text(self, exc: BaseException) -> str:
        lines = [line for line in str(exc).strip().splitlines() if not line.startswith("CONTEXT:")]
        return scrub("\n".join(lines) or type(exc).__name__, self.raw_url)

    def check_open(self, closed: bool) -> None:
        if closed:
            raise StoreError(f"PostgreSQL store {self.url} is closed")

    def health(self, started: float, row: tuple[Any, ...], server: int) -> dict[str, Any]:
        version, fsync, synchronous_commit = row
        return {
            "ok": True,
            "store": "postgresql",
            # "local" and "remote_write" still flush the WAL on this server
            "durable": fsync == "on" and synchronous_commit != "off",
            "detail": f"fsync={fsync}, synchronous_commit={synchronous_commit}",
            "url": self.url,
            "schema": self.schema,
            "schema_version": version,
            "server_version": server,
            "latency_ms": round((time.perf_counter() - started) * 1000, 3),
        }

    def unhealthy(self, exc: StoreError) -> dict[str, Any]:
        report = {"ok": False, "store": "postgresql", "durable": True, "url": self.url}
        return {**report, "error": str(exc)}


def _load_args(session_id: str, after: int, limit: int | None) -> tuple[str, int, int | None]:
    check_session_id(session_id)
    check_count("after", after)
    check_count("limit", limit)
    return session_id, after, limit


def _tail_args(session_id: str, n: int) -> tuple[str, int]:
    check_session_id(session_id)
    check_count("n", n)
    return session_id, n


def _check_prefix(prefix: str | None) -> str:
    if prefix is not None and not isinstance(prefix, str):
        raise StoreError("a session prefix must be a string")
    return prefix or ""


def _replay_args(session_id: str, key: str) -> tuple[str, str]:
    check_session_id(session_id)
    check_replay_key(key)
    return session_id, key


def _replayed(rows: Sequence[tuple[Any, ...]]) -> list[Entry] | None:
    return _entries(rows) if rows else None  # a recorded key always covers some entries


def advisory_key(schema: str | None, session_id: str) -> int:
    """The advisory-lock key of a session: a signed 64-bit hash of the schema and the id.

    Appends lock ``hashtext(session_id)``, a 32-bit value in the same key
    space; keeping these keys out of that range means a held session never
    stalls an append of another (or its own).
    """
    key = session_hash(f"{schema or ''}\0{session_id}")  # no schema name holds a NUL
    return key ^ (1 << 62) if -(2**31) <= key < 2**31 else key


def _unlock_failed(session_id: str, exc: StoreError) -> None:
    logger.warning(
        "could not unlock session %r (it is released when the lock connection ends): %s",
        session_id,
        exc,
    )


def _lock_lost(session_id: str, url: str) -> None:
    logger.warning(
        "the lock of session %r at %s was lost while held (its connection ended)", session_id, url
    )


def _alive(conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any]) -> bool:
    """False for an idle connection the server has closed (restart, idle timeout, kill).

    An idle connection has nothing to read unless the server said goodbye, so
    a zero-timeout poll catches a dead one without a round trip.
    """
    if conn.closed:
        return False
    try:
        readable, _, _ = select.select([conn.fileno()], [], [], 0)
    except (OSError, ValueError):
        return False
    return not readable


def _row(row: tuple[Any, ...] | None) -> tuple[Any, ...]:
    if row is None:  # the statements given to it always return one row
        raise StoreError("PostgreSQL returned no row where one was expected")
    return row


def _entries(rows: Sequence[tuple[Any, ...]]) -> list[Entry]:
    return [entry_from_json(row[0]) for row in rows]


class _LockConnection:
    """The connection that holds a ``PostgresStore``'s session locks, one call at a time.

    Opened by the first lock; one found closed (a server restart, a network
    failure: the server then released its locks) is replaced at the next one.
    """

    def __init__(self, q: _Queries, psycopg: Any) -> None:
        self._q, self._psycopg = q, psycopg
        self._conn: psycopg.Connection[tuple[Any, ...]] | None = None
        self._guard = threading.Lock()

    def try_lock(self, key: int) -> bool:
        with self._guard:
            if self._conn is None or not _alive(self._conn):
                self._reconnect()
            assert self._conn is not None
            return bool(_row(self._conn.execute(_TRY_LOCK, (key,)).fetchone())[0])

    def unlock(self, key: int) -> bool:
        """False if the lock was not held any more (its connection ended)."""
        with self._guard:
            if self._conn is None or self._conn.closed:
                return False
            return bool(_row(self._conn.execute(_UNLOCK, (key,)).fetchone())[0])

    def close(self) -> None:
        with self._guard:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def _reconnect(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        self._conn = self._psycopg.connect(self._q.raw_url, **self._q.connect_options())


class _AsyncLockConnection:
    """``_LockConnection`` for ``AsyncPostgresStore``."""

    def __init__(self, q: _Queries, psycopg: Any) -> None:
        self._q, self._psycopg = q, psycopg
        self._conn: psycopg.AsyncConnection[tuple[Any, ...]] | None = None
        self._guard = asyncio.Lock()

    async def try_lock(self, key: int) -> bool:
        async with self._guard:
            if self._conn is None or not _alive(self._conn):
                await self._reconnect()
            assert self._conn is not None
            cursor = await self._conn.execute(_TRY_LOCK, (key,))
            return bool(_row(await cursor.fetchone())[0])

    async def unlock(self, key: int) -> bool:
        async with self._guard:
            if self._conn is None or self._conn.closed:
                return False
            cursor = await self._conn.execute(_UNLOCK, (key,))
            return bool(_row(await cursor.fetchone())[0])

    async def close(self) -> None:
        async with self._guard:
            if self._conn is not None:
                await self._conn.close()
                self._conn = None

    async def _reconnect(self) -> None:
        if self._conn is not None:
            await self._conn.close()
            self._conn = None
        options = self._q.connect_options()
        self._conn = await self._psycopg.AsyncConnection.connect(self._q.raw_url, **options)


class PostgresStore(Store):
    """Sessions in PostgreSQL: durable, shared by every process that opens the database.

    Opening connects and brings the tables up to ``SCHEMA_VERSION``. Idle
    connections (at most ``pool_size``) are kept for reuse; a thread takes
    one per call.

    Example: ``PostgresStore("postgresql://app@db.internal/app")``.
    """

    def __init__(
        self, url: str, *, schema: str | None = None, pool_size: int = 4, timeout: float = 5.0
    ) -> None:
        self._q = _Queries(url, schema, timeout)
        self.url, self.schema = self._q.url, schema
        self._psycopg = _psycopg()
        self._idle: list[psycopg.Connection[tuple[Any, ...]]] = []
        self._pool_size = pool_size
        self._lock = threading.Lock()
        self._closed = False
        self._lock_conn = _LockConnection(self._q, self._psycopg)
        try:
            with self._q.errors("open"), self._connection() as conn:
                self._migrate(conn)
        except BaseException:
            self.close()
            raise

    def append(
        self, session_id: str, entries: Sequence[Entry], *, idempotency_key: str | None = None
    ) -> list[Entry]:
        check_session_id(session_id)
        check_entries(entries)
        check_idempotency_key(idempotency_key)
        if not entries:
            return []
        state = {"session": session_id, "key": idempotency_key}
        with self._q.errors(f"append to session {session_id!r}"), self._transaction() as conn:
            conn.execute(_LOCK_SESSION, (session_id,))
            last, *done = _row(conn.execute(self._q(_STATE), state).fetchone())
            if done[0] is not None:  # a retried idempotency key: the first call's entries
                return _entries(conn.execute(self._q(_RANGE), (session_id, *done)).fetchall())
            stored, params = self._q.write(session_id, entries, idempotency_key, last + 1)
            conn.execute(self._q(_WRITE), params)
        return stored

    def load(self, session_id: str, *, after: int = 0, limit: int | None = None) -> list[Entry]:
        args = _load_args(session_id, after, limit)
        with self._q.errors(f"load session {session_id!r}"), self._connection() as conn:
            return _entries(conn.execute(self._q(_LOAD), args).fetchall())

    def tail(self, session_id: str, n: int) -> list[Entry]:
        args = _tail_args(session_id, n)
        with self._q.errors(f"load session {session_id!r}"), self._connection() as conn:
            return _entries(conn.execute(self._q(_TAIL), args).fetchall())

    def get(self, session_id: str, entry_id: str) -> Entry | None:
        check_session_id(session_id)
        if not isinstance(entry_id, str):
            return None
        with self._q.errors(f"get an entry of session {session_id!r}"), self._connection() as c:
            row = c.execute(self._q(_GET), (session_id, entry_id)).fetchone()
        return None if row is None else entry_from_json(row[0])

    def delete(self, session_id: str) -> bool:
        check_session_id(session_id)
        with self._q.errors(f"delete session {session_id!r}"), self._transaction() as conn:
            conn.execute(_LOCK_SESSION, (session_id,))
            counts = [conn.execute(self._q(s), (session_id,)).rowcount for s in _DELETE]
        return counts[0] > 0 or counts[2] > 0

    def sessions(self, *, prefix: str | None = None) -> list[str]:
        with self._q.errors("list sessions"), self._connection() as conn:
            rows = conn.execute(self._q(_SESSIONS), (_check_prefix(prefix),)).fetchall()
        return sorted(row[0] for row in rows)

    def replayed(self, session_id: str, idempotency_key: str) -> list[Entry] | None:
        args = _replay_args(session_id, idempotency_key)
        with self._q.errors(f"replay a key of session {session_id!r}"), self._connection() as c:
            return _replayed(c.execute(self._q(_REPLAYED), args).fetchall())

    def health(self) -> dict[str, Any]:
        started = time.perf_counter()
        try:
            with self._q.errors("health check"), self._connection() as conn:
                row = _row(conn.execute(self._q(_HEALTH)).fetchone())
                server = conn.info.server_version
        except StoreError as exc:
            return self._q.unhealthy(exc)
        return self._q.health(started, row, server)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()
        self._lock_conn.close()

    @contextmanager
    def _hold(self, session_id: str, deadline: float | None) -> Iterator[None]:
        """A session-level advisory lock on the lock connection, polled until ``deadline``."""
        self._q.check_open(self._closed)
        key = advisory_key(self.schema, session_id)
        with self._q.errors(f"lock session {session_id!r}"):
            poll(lambda: self._lock_conn.try_lock(key), deadline, session_id)
        try:
            yield
        finally:
            self._unlock(key, session_id)

    def _unlock(self, key: int, session_id: str) -> None:
        """Release the lock; a failure is only logged (the connection ending releases it)."""
        try:
            with self._q.errors(f"unlock session {session_id!r}"):
                released = self._lock_conn.unlock(key)
        except StoreError as exc:
            _unlock_failed(session_id, exc)
            return
        if not released:
            _lock_lost(session_id, self.url)

    def _migrate(self, conn: psycopg.Connection[tuple[Any, ...]]) -> None:
        with conn.transaction():
            conn.execute(*self._q.migration_lock())
            create_schema = self._q.create_schema()
            if create_schema is not None:
                conn.execute(create_schema)
            conn.execute(self._q(_VERSION_TABLE))
            row = conn.execute(self._q(_CURRENT_VERSION)).fetchone()
            for version, statements in self._q.migrations(int(row[0] if row else 0)):
                for statement in statements:
                    conn.execute(statement)
                conn.execute(self._q(_RECORD_VERSION), (version, time.time()))

    @contextmanager
    def _transaction(self) -> Iterator[psycopg.Connection[tuple[Any, ...]]]:
        with self._connection() as conn, conn.transaction():
            yield conn

    @contextmanager
    def _connection(self) -> Iterator[psycopg.Connection[tuple[Any, ...]]]:
        conn = self._take_idle()
        if conn is None:
            conn = self._psycopg.connect(self._q.raw_url, **self._q.connect_options())
        try:
            yield conn
        finally:
            self._release(conn)

    def _take_idle(self) -> psycopg.Connection[tuple[Any, ...]] | None:
        while True:
            with self._lock:
                self._q.check_open(self._closed)
                conn = self._idle.pop() if self._idle else None
            if conn is None or _alive(conn):
                return conn
            conn.close()

    def _release(self, conn: psycopg.Connection[tuple[Any, ...]]) -> None:
        idle = conn.info.transaction_status == self._psycopg.pq.TransactionStatus.IDLE
        with self._lock:
            if idle and not conn.closed and not self._closed and len(self._idle) < self._pool_size:
                self._idle.append(conn)
                return
        conn.close()


class AsyncPostgresStore(AsyncStore):
    """``PostgresStore`` for asyncio (``psycopg.AsyncConnection``).

    The tables are created or upgraded on first use (a constructor cannot
    await); an unreachable server is reported by that first call.
    """

    def __init__(
        self, url: str, *, schema: str | None = None, pool_size: int = 4, timeout: float = 5.0
    ) -> None:
        self._q = _Queries(url, schema, timeout)
        self.url, self.schema = self._q.url, schema
        self._psycopg = _psycopg()
        self._idle: list[psycopg.AsyncConnection[tuple[Any, ...]]] = []
        self._pool_size = pool_size
        self._closed = False
        self._migrated = False
        self._lock_conn = _AsyncLockConnection(self._q, self._psycopg)

    async def append(
        self, session_id: str, entries: Sequence[Entry], *, idempotency_key: str | None = None
    ) -> list[Entry]:
        check_session_id(session_id)
        check_entries(entries)
        check_idempotency_key(idempotency_key)
        if not entries:
            return []
        state = {"session": session_id, "key": idempotency_key}
        with self._q.errors(f"append to session {session_id!r}"):
            async with self._transaction() as conn:
                await conn.execute(_LOCK_SESSION, (session_id,))
                cursor = await conn.execute(self._q(_STATE), state)
                last, *done = _row(await cursor.fetchone())
                if done[0] is not None:
                    cursor = await conn.execute(self._q(_RANGE), (session_id, *done))
                    return _entries(await cursor.fetchall())
                stored, params = self._q.write(session_id, entries, idempotency_key, last + 1)
                await conn.execute(self._q(_WRITE), params)
        return stored

    async def load(
        self, session_id: str, *, after: int = 0, limit: int | None = None
    ) -> list[Entry]:
        args = _load_args(session_id, after, limit)
        return _entries(await self._fetch(f"load session {session_id!r}", _LOAD, args))

    async def tail(self, session_id: str, n: int) -> list[Entry]:
        args = _tail_args(session_id, n)
        return _entries(await self._fetch(f"load session {session_id!r}", _TAIL, args))

    async def get(self, session_id: str, entry_id: str) -> Entry | None:
        check_session_id(session_id)
        if not isinstance(entry_id, str):
            return None
        action = f"get an entry of session {session_id!r}"
        rows = await self._fetch(action, _GET, (session_id, entry_id))
        return entry_from_json(rows[0][0]) if rows else None

    async def delete(self, session_id: str) -> bool:
        check_session_id(session_id)
        with self._q.errors(f"delete session {session_id!r}"):
            async with self._transaction() as conn:
                await conn.execute(_LOCK_SESSION, (session_id,))
                counts = [(await conn.execute(self._q(s), (session_id,))).rowcount for s in _DELETE]
        return counts[0] > 0 or counts[2] > 0

    async def sessions(self, *, prefix: str | None = None) -> list[str]:
        rows = await self._fetch("list sessions", _SESSIONS, (_check_prefix(prefix),))
        return sorted(row[0] for row in rows)

    async def replayed(self, session_id: str, idempotency_key: str) -> list[Entry] | None:
        args = _replay_args(session_id, idempotency_key)
        action = f"replay a key of session {session_id!r}"
        return _replayed(await self._fetch(action, _REPLAYED, args))

    async def health(self) -> dict[str, Any]:
        started = time.perf_counter()
        try:
            with self._q.errors("health check"):
                async with self._connection() as conn:
                    row = _row(await (await conn.execute(self._q(_HEALTH))).fetchone())
                    server = conn.info.server_version
        except StoreError as exc:
            return self._q.unhealthy(exc)
        return self._q.health(started, row, server)

    async def close(self) -> None:
        self._closed = True
        idle, self._idle = self._idle, []
        for conn in idle:
            await conn.close()
        await self._lock_conn.close()

    @asynccontextmanager
    async def _hold(self, session_id: str, deadline: float | None) -> AsyncIterator[None]:
        """As ``PostgresStore._hold``, on the store's async lock connection."""
        self._q.check_open(self._closed)
        key = advisory_key(self.schema, session_id)
        with self._q.errors(f"lock session {session_id!r}"):
            await async_poll(lambda: self._lock_conn.try_lock(key), deadline, session_id)
        try:
            yield
        finally:
            await self._unlock(key, session_id)

    async def _unlock(self, key: int, session_id: str) -> None:
        try:
            with self._q.errors(f"unlock session {session_id!r}"):
                released = await self._lock_conn.unlock(key)
        except StoreError as exc:
            _unlock_failed(session_id, exc)
            return
        if not released:
            _lock_lost(session_id, self.url)

    async def _fetch(self, action: str, query: str, args: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        with self._q.errors(action):
            async with self._connection() as conn:
                return await (await conn.execute(self._q(query), args)).fetchall()

    async def _migrate(self, conn: psycopg.AsyncConnection[tuple[Any, ...]]) -> None:
        async with conn.transaction():
            await conn.execute(*self._q.migration_lock())
            create_schema = self._q.create_schema()
            if create_schema is not None:
                await conn.execute(create_schema)
            await conn.execute(self._q(_VERSION_TABLE))
            row = await (await conn.execute(self._q(_CURRENT_VERSION))).fetchone()
            for version, statements in self._q.migrations(int(row[0] if row else 0)):
                for statement in statements:
                    await conn.execute(statement)
                await conn.execute(self._q(_RECORD_VERSION), (version, time.time()))
        self._migrated = True

    @asynccontextmanager
    async def _transaction(self) -> AsyncIterator[psycopg.AsyncConnection[tuple[Any, ...]]]:
        async with self._connection() as conn, conn.transaction():
            yield conn

    @asynccontextmanager
    async def _connection(self) -> AsyncIterator[psycopg.AsyncConnection[tuple[Any, ...]]]:
        self._q.check_open(self._closed)
        conn = self._idle.pop() if self._idle else None
        while conn is not None and not _alive(conn):
            await conn.close()
            conn = self._idle.pop() if self._idle else None
        if conn is None:
            options = self._q.connect_options()
            conn = await self._psycopg.AsyncConnection.connect(self._q.raw_url, **options)
        try:
            if not self._migrated:
                await self._migrate(conn)
            yield conn
        finally:
            await self._release(conn)

    async def _release(self, conn: psycopg.AsyncConnection[tuple[Any, ...]]) -> None:
        idle = conn.info.transaction_status == self._psycopg.pq.TransactionStatus.IDLE
        if idle and not conn.closed and not self._closed and len(self._idle) < self._pool_size:
            self._idle.append(conn)
        else:
            await conn.close()
