"""What both PostgreSQL stores share: the SQL of each operation, ``Queries`` and error mapping.

``Queries`` binds the SQL to a schema, builds the arguments of an append and
turns psycopg errors into ``StoreError`` / ``StoreUnavailableError`` (the
words of every message are here); it also reads the store's own URL
parameters (``pooler``, ``lock_ttl``), which libpq would refuse. The helpers
below it read rows, check a pooled connection, name the advisory lock of a
session and keep the book of lease rows (``LeaseBook``, pooler mode). Nothing
here does I/O: the stores in ``aio`` and ``sync`` run these statements. The tables and
their migrations are in ``schema`` (its statements the stores use are
importable from here too).
"""

from __future__ import annotations

import logging
import select
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar
from urllib.parse import unquote, urlsplit

from ctxwindow.errors import StoreError, StoreUnavailableError
from ctxwindow.extras import install_hint
from ctxwindow.messages import Entry
from ctxwindow.stores.base import (
    Checkpoint,
    Earlier,
    encode_entry,
    entry_from_json,
    redact_url,
    scrub,
)
from ctxwindow.stores.locks import session_hash
from ctxwindow.stores.postgres.schema import CURRENT_VERSION as CURRENT_VERSION
from ctxwindow.stores.postgres.schema import KEPT_ALWAYS
from ctxwindow.stores.postgres.schema import MIGRATIONS as MIGRATIONS
from ctxwindow.stores.postgres.schema import NO_TIMEOUT as NO_TIMEOUT
from ctxwindow.stores.postgres.schema import RECORD_VERSION as RECORD_VERSION
from ctxwindow.stores.postgres.schema import SCHEMA_VERSION as SCHEMA_VERSION
from ctxwindow.stores.postgres.schema import VERSION_TABLE as VERSION_TABLE
from ctxwindow.stores.postgres.watchdog import WATCHDOG

if TYPE_CHECKING:
    import psycopg
    from psycopg import sql

logger = logging.getLogger("ctxwindow.stores")
T = TypeVar("T")

INSTALL_HINT = install_hint("postgres")
SCHEMES = ("postgresql", "postgres")  # the URL schemes libpq takes

POOLERS = ("transaction",)  # the pooler modes a store can run behind (``pooler=``)
URL_OPTIONS = ("pooler", "lock_ttl", "pool_size")  # the store's own: never given to libpq
DEFAULT_LOCK_TTL = 5.0  # seconds: the lease of a session lock in pooler mode
DEFAULT_POOL_SIZE = 4  # idle connections a store keeps for its next calls
MAX_POOL_SIZE = 1000  # PostgreSQL's max_connections is 100 by default
RELEASE_RETRY = 0.5  # seconds between the retries of a lease release the server did not take

_MIGRATION_LOCK = 0x63747877  # "ctxw": the first key of the two-key advisory lock

# Set on each new connection: the server gives up on a statement, or on a transaction whose
# client went quiet (holding its locks), after the store's timeout.
SESSION_TIMEOUTS = """SELECT set_config('statement_timeout', %(ms)s, false),
    set_config('idle_in_transaction_session_timeout', %(ms)s, false)"""
# Set on each new connection of a store opened read-only: the server refuses its writes.
READ_ONLY = "SET default_transaction_read_only = on"
# In pooler mode, the first statement of each transaction the store opens, instead of
# SESSION_TIMEOUTS: set per transaction (SET LOCAL), as the server connection under a
# client changes from one transaction to the next and is shared with other clients.
TRANSACTION_TIMEOUTS = """SELECT set_config('statement_timeout', %(ms)s, true),
    set_config('idle_in_transaction_session_timeout', %(ms)s, true)"""
HEALTH = """SELECT (SELECT coalesce(max(version), 0) FROM {s}ctxwindow_schema_version),
    current_setting('fsync'), current_setting('synchronous_commit')"""

LOCK_SESSION = "SELECT pg_advisory_xact_lock(hashtext(%s))"
# Read after the session lock, in a statement of its own: a statement's snapshot is
# taken when it starts, so one that waited for the lock itself would miss rows
# the previous holder committed. One row: the newest entry's seq and id (0, NULL: none),
# and the seqs the key stored (NULLs: none). The id is what append_after compares; a plain
# append reads it too, at no cost: the backward scan of the primary key that finds the
# last seq lands on its row.
STATE = """SELECT coalesce(e.seq, 0), e.id, k.first_seq, k.last_seq
    FROM (SELECT 1) AS one
    LEFT JOIN LATERAL (SELECT seq, id FROM {s}ctxwindow_entries
        WHERE session_id = %(session)s ORDER BY seq DESC LIMIT 1) AS e ON true
    LEFT JOIN {s}ctxwindow_idempotency AS k ON k.session_id = %(session)s AND k.key = %(key)s"""
RANGE = """SELECT doc::text FROM {s}ctxwindow_entries
    WHERE session_id = %s AND seq BETWEEN %s AND %s ORDER BY seq"""
# Binary parameters (%b) spare the client from quoting every JSON document into an array literal.
WRITE = """WITH entries AS (
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
LOAD = """SELECT doc::text FROM {s}ctxwindow_entries
    WHERE session_id = %s AND seq > %s ORDER BY seq LIMIT %s"""
TAIL = """SELECT doc FROM (SELECT doc::text, seq FROM {s}ctxwindow_entries
    WHERE session_id = %s ORDER BY seq DESC LIMIT %s) AS t ORDER BY seq"""
GET = "SELECT doc::text FROM {s}ctxwindow_entries WHERE session_id = %s AND id = %s"
DELETE = (
    "DELETE FROM {s}ctxwindow_entries WHERE session_id = %s",
    "DELETE FROM {s}ctxwindow_idempotency WHERE session_id = %s",
    "DELETE FROM {s}ctxwindow_sessions WHERE session_id = %s",
    "DELETE FROM {s}ctxwindow_checkpoints WHERE session_id = %s",
)
# After the session lock (as STATE): one statement removes what is past %(after)s — the
# entries, the keys covering any of them, a checkpoint past it — and moves the session's
# last seq back (the row goes when no entry is left); it returns what it removed.
TRUNCATE = """WITH removed AS (
    DELETE FROM {s}ctxwindow_entries
    WHERE session_id = %(session)s AND seq > %(after)s RETURNING seq, doc
), keys AS (
    DELETE FROM {s}ctxwindow_idempotency WHERE session_id = %(session)s AND last_seq > %(after)s
), checkpoint AS (
    DELETE FROM {s}ctxwindow_checkpoints WHERE session_id = %(session)s AND seq > %(after)s
), moved AS (
    UPDATE {s}ctxwindow_sessions SET last_seq = %(after)s
    WHERE session_id = %(session)s AND last_seq > %(after)s AND %(after)s > 0
), gone AS (
    DELETE FROM {s}ctxwindow_sessions WHERE session_id = %(session)s AND %(after)s = 0
)
SELECT doc::text FROM removed ORDER BY seq"""
REPLAYED = """SELECT e.doc::text FROM {s}ctxwindow_idempotency AS k
    JOIN {s}ctxwindow_entries AS e
    ON e.session_id = k.session_id AND e.seq BETWEEN k.first_seq AND k.last_seq
    WHERE k.session_id = %s AND k.key = %s ORDER BY e.seq"""
# After the session lock (as STATE): the session's last seq, and the checkpoint saved
# only if it stays within the entries and does not move backwards.
SAVE_CHECKPOINT = """WITH last AS (
    SELECT coalesce((SELECT last_seq FROM {s}ctxwindow_sessions
        WHERE session_id = %(session)s), 0) AS seq
), saved AS (
    INSERT INTO {s}ctxwindow_checkpoints AS c (session_id, seq, data)
    SELECT %(session)s, %(seq)s, %(data)b FROM last WHERE last.seq >= %(seq)s
    ON CONFLICT (session_id) DO UPDATE SET seq = excluded.seq, data = excluded.data
    WHERE c.seq <= excluded.seq
)
SELECT seq FROM last"""
CHECKPOINT = "SELECT seq, data FROM {s}ctxwindow_checkpoints WHERE session_id = %s"
# One statement, so one snapshot: the checkpoint (ordered first, at 0) and the entries after it.
LOAD_FROM_CHECKPOINT = """WITH c AS (
    SELECT seq, data FROM {s}ctxwindow_checkpoints WHERE session_id = %(session)s
), e AS (
    SELECT seq, doc FROM {s}ctxwindow_entries
    WHERE session_id = %(session)s AND seq > coalesce((SELECT seq FROM c), 0)
    ORDER BY seq DESC LIMIT %(limit)s
)
SELECT 0::bigint AS n, c.seq, c.data, NULL::text FROM c
UNION ALL
SELECT e.seq, NULL, NULL, e.doc::text FROM e
ORDER BY n"""
# What a bounded cold load needs of the entries before %(before)s, in one statement: the
# count and stored tokens of them all (row 0), then those kept at any budget, in order
# (found by the partial index of migration 5: the condition is spelled as there).
EARLIER = (
    """SELECT 0::bigint AS n, count(*)::bigint, coalesce(sum(tokens), 0)::bigint,
    NULL::text FROM {s}ctxwindow_entries WHERE session_id = %(session)s AND seq < %(before)s
UNION ALL
SELECT seq, NULL, NULL, doc::text FROM {s}ctxwindow_entries
    WHERE session_id = %(session)s AND seq < %(before)s AND """
    + KEPT_ALWAYS
    + """
ORDER BY n"""
)
TRY_LOCK = "SELECT pg_try_advisory_lock(%s)"
UNLOCK = "SELECT pg_advisory_unlock(%s)"

# The session locks of pooler mode: a lease row per held session, on the server's clock.
# Taken in one statement: a new row, or the row of a lease that expired; a row only if taken.
# While the lease is live nothing is inserted, so a waiter's polls lock no row (a row lock
# would cost a transaction id and a WAL record each).
TAKE_LEASE = """INSERT INTO {s}ctxwindow_locks AS held (session_id, holder, expires_at)
    SELECT %(session)s, %(holder)s, clock_timestamp() + make_interval(secs => %(ttl)s)
    WHERE NOT EXISTS (SELECT FROM {s}ctxwindow_locks
        WHERE session_id = %(session)s AND expires_at > clock_timestamp())
    ON CONFLICT (session_id) DO UPDATE
    SET holder = excluded.holder, expires_at = excluded.expires_at
    WHERE held.expires_at <= clock_timestamp()
    RETURNING 1"""
# Renewed while the row carries the holder's token, even past its expiry: nobody else
# took the session in between (a take writes its own token, a release deletes the row).
RENEW_LEASE = """UPDATE {s}ctxwindow_locks
    SET expires_at = clock_timestamp() + make_interval(secs => %(ttl)s)
    WHERE session_id = %(session)s AND holder = %(holder)s RETURNING 1"""
DROP_LEASE = """DELETE FROM {s}ctxwindow_locks
    WHERE session_id = %(session)s AND holder = %(holder)s RETURNING 1"""


def sessions_query(inclusive: bool, *, bounded: bool) -> str:
    """One page of session ids, from ``%(start)s`` (included or not) below ``%(end)s`` if
    ``bounded``, at most ``%(limit)s`` (NULL: all): a range of the code-point index, so
    a page reads its own rows only. A range, not LIKE: '%' and '_' in a prefix are text.
    """
    where = f'session_id COLLATE "C" {">=" if inclusive else ">"} %(start)s'
    if bounded:
        where += ' AND session_id COLLATE "C" < %(end)s'
    return (
        f"SELECT session_id FROM {{s}}ctxwindow_sessions WHERE {where}"
        ' ORDER BY session_id COLLATE "C" LIMIT %(limit)s'
    )


def load_psycopg() -> Any:
    """The ``psycopg`` module, imported on first use; ``ImportError`` names the extra."""
    try:
        import psycopg
    except ImportError as exc:
        raise ImportError(f"the PostgreSQL stores need 'psycopg': {INSTALL_HINT}") from exc
    return psycopg


def _check_url(url: str) -> None:
    scheme = urlsplit(url).scheme if isinstance(url, str) else ""
    if scheme not in SCHEMES:
        raise ValueError(
            f"not a PostgreSQL URL: {redact_url(str(url))!r} (expected postgresql://…)"
        )


def split_url(url: str) -> tuple[str, dict[str, str]]:
    """The URL for libpq, without the store's own parameters (libpq refuses parameters it
    does not know), and those parameters. Every other byte of the URL is kept as it is.

    >>> split_url("postgresql://db:6432/app?sslmode=require&pooler=transaction")
    ('postgresql://db:6432/app?sslmode=require', {'pooler': 'transaction'})
    """
    base, _, query = url.partition("?")
    own, kept = {}, []
    for item in query.split("&") if query else []:
        name, _, value = item.partition("=")
        if unquote(name) in URL_OPTIONS:
            own[unquote(name)] = unquote(value)
        elif item:
            kept.append(item)
    return base + ("?" + "&".join(kept) if kept else ""), own


class UrlOptions(NamedTuple):
    """What a store's URL and arguments say together (``url_options``)."""

    libpq_url: str
    pooler: str | None
    lock_ttl: float
    pool_size: int


def url_options(
    url: str, pooler: str | None, lock_ttl: float | None, pool_size: int | None = None
) -> UrlOptions:
    """The URL for libpq, the pooler mode, the lease of a lock and the idle connections
    kept, from the arguments and the URL's own parameters; ``ValueError`` names a bad
    value, or a clash between the two."""
    libpq_url, given = split_url(url)
    where = f" in {redact_url(url)!r}"
    pooler = _either("pooler", given, pooler, _check_pooler, where)
    lock_ttl = _either("lock_ttl", given, lock_ttl, _seconds, where)
    pool_size = _either("pool_size", given, pool_size, _count, where)
    if lock_ttl is not None and pooler is None:
        raise ValueError(
            f"lock_ttl is the lease of a lock in pooler mode only{where}: without a"
            " pooler a session lock is an advisory lock, held as long as its connection"
        )
    return UrlOptions(
        libpq_url,
        pooler,
        DEFAULT_LOCK_TTL if lock_ttl is None else lock_ttl,
        DEFAULT_POOL_SIZE if pool_size is None else pool_size,
    )


def _either(
    name: str,
    given: dict[str, str],
    argument: T | None,
    check: Callable[[object, str], T],
    where: str,
) -> T | None:
    """The option ``name`` from the URL's parameters (``given``) or the argument, each
    ``check``-ed (it raises ``ValueError`` naming a bad value); the two must agree."""
    if name not in given:
        return None if argument is None else check(argument, "")
    from_url = check(given[name], where)
    if argument is not None and check(argument, "") != from_url:
        raise ValueError(f"{name}={argument!r} contradicts {name}={given[name]}{where}")
    return from_url


def _check_pooler(pooler: object, where: str) -> str:
    if pooler not in POOLERS:
        raise ValueError(
            f"pooler must be None or 'transaction', got pooler={pooler!r}{where} (behind a"
            " pooler in session mode, or none, leave it out; statement mode cannot run"
            " the store's transactions)"
        )
    return str(pooler)


def _seconds(value: object, where: str) -> float:
    """``value`` as a positive number of seconds (a URL gives it as text)."""
    try:
        seconds = float(value) if isinstance(value, (str, int, float)) else float("nan")
    except ValueError:
        seconds = float("nan")
    if isinstance(value, bool) or not 0 < seconds < float("inf"):
        raise ValueError(f"lock_ttl must be a positive number of seconds, got {value!r}{where}")
    return seconds


def _count(value: object, where: str) -> int:
    """``value`` as a number of idle connections, 0 to ``MAX_POOL_SIZE`` (text in a URL)."""
    text = str(value).strip() if isinstance(value, (str, int)) else ""  # True: "True"
    if not (text.isascii() and text.isdigit()) or int(text) > MAX_POOL_SIZE:
        raise ValueError(
            f"pool_size must be a whole number of connections from 0 to {MAX_POOL_SIZE},"
            f" got {value!r}{where}"
        )
    return int(text)


class Queries:
    """SQL bound to a schema, argument building and error mapping (both flavours share it)."""

    def __init__(
        self,
        url: str,
        schema: str | None,
        timeout: float,
        read_only: bool = False,
        *,
        pooler: str | None = None,
        lock_ttl: float | None = None,
        pool_size: int | None = None,
    ) -> None:
        _check_url(url)
        self.raw_url, self.pooler, self.lock_ttl, self.pool_size = url_options(
            url, pooler, lock_ttl, pool_size
        )
        self.url = redact_url(url)  # with the store's own parameters: they say how it runs
        self.schema = schema
        self.timeout = timeout
        self.read_only = read_only
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
        options: dict[str, Any] = {
            "autocommit": True,
            "connect_timeout": max(2, round(self.timeout)),
        }
        if self.pooler:
            # A statement prepared on one server connection is unknown on the next one
            # the pooler gives (PgBouncer before 1.21 does not track them).
            options["prepare_threshold"] = None
        return options

    def timeouts(self) -> dict[str, str]:
        """The parameters of ``SESSION_TIMEOUTS`` and ``TRANSACTION_TIMEOUTS``: the store's
        timeout, in milliseconds."""
        return {"ms": str(max(1, round(self.timeout * 1000)))}

    def lease(self, session_id: str, holder: str) -> dict[str, Any]:
        """The parameters of the lease statements (``TAKE_LEASE`` …) of ``holder``."""
        return {"session": session_id, "holder": holder, "ttl": self.lock_ttl}

    def deadline(self) -> float:
        """When a call starting now must have its answer (a ``time.monotonic()`` value)."""
        return time.monotonic() + self.timeout

    @contextmanager
    def watched(self, conn: Any, action: str, deadline: float) -> Iterator[None]:
        """Run the block on ``conn`` until ``deadline`` at most: then the watchdog cuts the
        connection off and the block's psycopg error becomes ``StoreUnavailableError``."""
        psycopg = load_psycopg()
        with WATCHDOG.watch(conn.fileno(), deadline) as watch:
            try:
                yield
            except psycopg.Error as exc:
                if not watch.expired:
                    raise
                raise StoreUnavailableError(
                    f"PostgreSQL at {self.url} is unavailable ({action}): no answer within "
                    f"{self.timeout:g} s (the connection was dropped)"
                ) from exc

    def migrations(self, current: int) -> list[tuple[int, list[sql.Composed]]]:
        """The migrations a database at version ``current`` still needs, in order."""
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

    def check_readable(self, current: int) -> None:
        """A store opened read-only is not migrated: an older schema is read as it is, a newer
        one is refused, and a database without the tables holds no store to read."""
        self.migrations(current)  # refuses a newer version
        if current == 0:
            where = "" if self.schema is None else f" in schema {self.schema!r}"
            raise StoreError(
                f"PostgreSQL at {self.url} holds no ctxwindow tables{where}: no store to read"
            )

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
        """The stored copies (numbered from ``first``) and the parameters of ``WRITE``."""
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
        psycopg = load_psycopg()
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
            **({"pooler": self.pooler} if self.pooler else {}),
            **({"read_only": True} if self.read_only else {}),
            "latency_ms": round((time.perf_counter() - started) * 1000, 3),
        }

    def unhealthy(self, exc: StoreError) -> dict[str, Any]:
        report = {"ok": False, "store": "postgresql", "durable": True, "url": self.url}
        return {**report, "error": str(exc)}


def advisory_key(schema: str | None, session_id: str) -> int:
    """The advisory-lock key of a session: a signed 64-bit hash of the schema and the id.

    Appends lock ``hashtext(session_id)``, a 32-bit value in the same key
    space; keeping these keys out of that range means a held session never
    stalls an append of another (or its own).
    """
    key = session_hash(f"{schema or ''}\0{session_id}")  # no schema name holds a NUL
    return key ^ (1 << 62) if -(2**31) <= key < 2**31 else key


def alive(conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any]) -> bool:
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


def one_row(row: tuple[Any, ...] | None) -> tuple[Any, ...]:
    """``row``, from a statement that always returns one."""
    if row is None:
        raise StoreError("PostgreSQL returned no row where one was expected")
    return row


def checkpoint_of(row: Sequence[Any] | None) -> Checkpoint | None:
    """``(seq, data)`` from a row of the two (None: no checkpoint)."""
    return None if row is None or row[0] is None else (int(row[0]), bytes(row[1]))


def loaded_from_checkpoint(
    rows: Sequence[tuple[Any, ...]],
) -> tuple[Checkpoint | None, list[Entry]]:
    """The checkpoint and the entries, from the rows of ``LOAD_FROM_CHECKPOINT``."""
    checkpoint = checkpoint_of(rows[0][1:3]) if rows and rows[0][0] == 0 else None
    return checkpoint, [entry_from_json(row[3]) for row in rows[checkpoint is not None :]]


def earlier_from(rows: Sequence[tuple[Any, ...]]) -> Earlier:
    """``Earlier`` from the rows of ``EARLIER``."""
    kept = [entry_from_json(row[3]) for row in rows[1:]]
    return Earlier.of_all(kept, int(rows[0][1]), int(rows[0][2]))


def entries_of(rows: Sequence[tuple[Any, ...]]) -> list[Entry]:
    """The entries of rows whose first column is an entry's JSON document."""
    return [entry_from_json(row[0]) for row in rows]


def unlock_failed(session_id: str, exc: StoreError) -> None:
    logger.warning(
        "could not unlock session %r (it is released when the lock connection ends): %s",
        session_id,
        exc,
    )


def lock_lost(session_id: str, url: str) -> None:
    logger.warning(
        "the lock of session %r at %s was lost while held (its connection ended)", session_id, url
    )


def lease_lost(session_id: str, url: str) -> bool:
    """Log that a renewal found the lease of ``session_id`` gone; False (renew no more)."""
    logger.warning(
        "the lock of session %r at %s was lost while held (its lease expired and was taken"
        " over, or its row was deleted)",
        session_id,
        url,
    )
    return False


def renewal_failed(session_id: str, exc: StoreError) -> bool:
    """Log a renewal the server did not take; True (try again at the next one)."""
    logger.warning("could not renew the lock of session %r (retrying): %s", session_id, exc)
    return True


def release_failed(session_id: str, exc: StoreError) -> None:
    logger.warning(
        "could not release the lock of session %r (retried every %s s until the server"
        " answers; else its lease expires): %s",
        session_id,
        RELEASE_RETRY,
        exc,
    )


class LeaseBook:
    """The lease rows of one store: those held now, and those still to release.

    A lease whose holder ended without deleting it (the server did not answer)
    would keep its session locked until it expires; so would a take the client
    gave up on but the server may still commit. The store retries deleting
    them in the background, each only while it still carries its holder's
    token, so a later holder of the session is never touched. Shared by the
    holders (threads or tasks) and the retrying thread or task.
    """

    def __init__(self, url: str) -> None:
        self._url = url
        self._guard = threading.Lock()
        self._held: dict[str, str] = {}  # holder token -> session id
        self._unreleased: dict[str, str] = {}

    def hold(self, holder: str, session_id: str) -> None:
        with self._guard:
            self._held[holder] = session_id

    def end(self, holder: str) -> None:
        with self._guard:
            self._held.pop(holder, None)

    def unreleased(self, holder: str, session_id: str) -> None:
        with self._guard:
            self._unreleased[holder] = session_id

    def released(self, holder: str, session_id: str) -> None:
        with self._guard:
            self._unreleased.pop(holder, None)
        logger.info("released the lock of session %r at %s late", session_id, self._url)

    def held(self) -> list[tuple[str, str]]:
        """(holder, session id) of each lease held now."""
        with self._guard:
            return list(self._held.items())

    def to_release(self) -> list[tuple[str, str]]:
        """(holder, session id) of each lease still to release."""
        with self._guard:
            return list(self._unreleased.items())
