"""``AsyncPostgresStore``: the store's primitives as psycopg calls, and its session locks.

The base (``AsyncStore``) checks every argument first; these methods only run
the statements of ``common`` on pooled connections. Session locks are held
on the ``AsyncLockConnection`` (advisory locks), or as lease rows by
``AsyncLeases`` behind a transaction pooler. The sync twin,
``stores/postgres/sync.py``, is generated from ``aio.py`` by ``tools/unasync.py``.
"""

from __future__ import annotations

import functools
import secrets
import threading
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

from ctxwindow.concurrency.aio import Background, Lock, poll, repeating
from ctxwindow.errors import SessionBusyError, StoreError
from ctxwindow.messages import Entry
from ctxwindow.stores.base import AsyncStore, Checkpoint, Earlier, entry_from_json, page_start
from ctxwindow.stores.base.checks import prefix_end
from ctxwindow.stores.postgres.common import (
    CHECKPOINT,
    CURRENT_VERSION,
    DELETE,
    DROP_LEASE,
    EARLIER,
    GET,
    HEALTH,
    LOAD,
    LOAD_FROM_CHECKPOINT,
    LOCK_SESSION,
    NO_TIMEOUT,
    RANGE,
    READ_ONLY,
    RECORD_VERSION,
    RELEASE_RETRY,
    RENEW_LEASE,
    REPLAYED,
    SAVE_CHECKPOINT,
    SCHEMA_VERSION,
    SESSION_TIMEOUTS,
    STATE,
    TAIL,
    TAKE_LEASE,
    TRANSACTION_TIMEOUTS,
    TRUNCATE,
    TRY_LOCK,
    UNLOCK,
    VERSION_TABLE,
    WRITE,
    LeaseBook,
    Queries,
    advisory_key,
    alive,
    checkpoint_of,
    earlier_from,
    entries_of,
    lease_lost,
    load_psycopg,
    loaded_from_checkpoint,
    lock_lost,
    one_row,
    release_failed,
    renewal_failed,
    sessions_query,
    unlock_failed,
)

if TYPE_CHECKING:
    import psycopg


class AsyncPostgresStore(AsyncStore):
    """Sessions in PostgreSQL: durable, shared by every process that opens the database.

    Opening connects and brings the tables up to ``SCHEMA_VERSION``: the sync
    store when it is built, the async one at its first call (a constructor
    cannot await), which then reports an unreachable server. Idle
    connections (at most ``pool_size``, 4 by default; ``?pool_size=`` in the
    URL) are kept for reuse: a call finding none opens one, and closes it
    after if ``pool_size`` are idle already, so a process making more calls at
    once than that starts a server backend for each call beyond. ``timeout`` (in
    seconds) bounds every call, a stalled server included (see the package
    docs); connecting takes at least 2 s to time out (libpq's rule).

    ``read_only=True``: the tables are not created nor migrated (a database
    without them is a ``StoreError``) and every transaction is read-only
    (``default_transaction_read_only``), so the server refuses any write.

    ``pooler="transaction"`` (or ``?pooler=transaction`` in the URL): for a
    pooler in transaction mode (PgBouncer) between the store and the server.
    No statement is prepared on the server, the timeouts and read-only mode
    are set per transaction, and a session lock is a lease row that lasts
    ``lock_ttl`` seconds (5 by default; ``?lock_ttl=`` in the URL) unless its
    holder renews it: how long a holder that died keeps its session locked.
    See the package docs.

    Example: ``AsyncPostgresStore("postgresql://app@pgbouncer.internal:6432/app?pooler=transaction")``.
    """

    def __init__(
        self,
        url: str,
        *,
        schema: str | None = None,
        pool_size: int | None = None,
        timeout: float = 5.0,
        read_only: bool = False,
        pooler: str | None = None,
        lock_ttl: float | None = None,
    ) -> None:
        self._q = Queries(
            url, schema, timeout, read_only, pooler=pooler, lock_ttl=lock_ttl, pool_size=pool_size
        )
        self.url, self.schema, self.read_only = self._q.url, schema, read_only
        self.pooler, self.lock_ttl, self.pool_size = (
            self._q.pooler,
            self._q.lock_ttl,
            self._q.pool_size,
        )
        self._psycopg = load_psycopg()
        self._idle: list[psycopg.AsyncConnection[tuple[Any, ...]]] = []
        # Guards only list operations, never I/O: a sync store's threads share the
        # idle connections, and the async store can take it without blocking its loop.
        self._guard = threading.Lock()
        self._migrated = False
        # Behind a transaction pooler a session-level advisory lock would stay on a server
        # connection other clients then use: the lock is a row instead.
        self._locks: AsyncLockConnection | AsyncLeases = (
            AsyncLeases(self) if self.pooler else AsyncLockConnection(self._q)
        )
        # A constructor cannot await: the async store opens at its first call; the sync
        # one opens now (a first connection brings the tables up to date).
        # unasync: sync only
        # try:
        #     with self._connection("open"):
        #         pass
        # except BaseException:
        #     self.close()
        #     raise
        # unasync: end

    # -- the primitives (arguments checked by the base) -------------------------------

    async def _append(
        self, session_id: str, entries: list[Entry], idempotency_key: str | None
    ) -> list[Entry]:
        stored = await self._stored(session_id, entries, idempotency_key, None)
        assert stored is not None  # only a ``last`` refuses
        return stored

    async def _append_after(
        self,
        session_id: str,
        entries: list[Entry],
        idempotency_key: str | None,
        last: tuple[int, str],
    ) -> list[Entry] | None:
        return await self._stored(session_id, entries, idempotency_key, last)

    async def _stored(
        self,
        session_id: str,
        entries: list[Entry],
        idempotency_key: str | None,
        last: tuple[int, str] | None,
    ) -> list[Entry] | None:
        """``_append`` (``last`` None), or only after ``last``: one transaction, whose
        ``STATE`` reads the newest entry with the key (no statement more for the check)."""
        state = {"session": session_id, "key": idempotency_key}
        async with self._transaction(f"append to session {session_id!r}") as conn:
            await conn.execute(LOCK_SESSION, (session_id,))
            cursor = await conn.execute(self._q(STATE), state)
            seq, entry_id, *done = one_row(await cursor.fetchone())
            if done[0] is not None:  # a retried idempotency key: the first call's entries
                cursor = await conn.execute(self._q(RANGE), (session_id, *done))
                return entries_of(await cursor.fetchall())
            if last is not None and (seq, entry_id or "") != last:
                return None  # the caller's copy is stale: the transaction ends, writing nothing
            stored, params = self._q.write(session_id, entries, idempotency_key, seq + 1)
            await conn.execute(self._q(WRITE), params)
        return stored

    async def _load(self, session_id: str, after: int, limit: int | None) -> list[Entry]:
        rows = await self._fetch(f"load session {session_id!r}", LOAD, (session_id, after, limit))
        return entries_of(rows)

    async def _tail(self, session_id: str, n: int) -> list[Entry]:
        return entries_of(await self._fetch(f"load session {session_id!r}", TAIL, (session_id, n)))

    async def _get(self, session_id: str, entry_id: str) -> Entry | None:
        action = f"get an entry of session {session_id!r}"
        rows = await self._fetch(action, GET, (session_id, entry_id))
        return entry_from_json(rows[0][0]) if rows else None

    async def _delete(self, session_id: str) -> bool:
        counts = []
        async with self._transaction(f"delete session {session_id!r}") as conn:
            await conn.execute(LOCK_SESSION, (session_id,))
            for statement in DELETE:
                cursor = await conn.execute(self._q(statement), (session_id,))
                counts.append(cursor.rowcount)
        return counts[0] > 0 or counts[2] > 0  # entries, or a session whose entries are gone

    async def _truncate(self, session_id: str, after: int) -> list[Entry]:
        params = {"session": session_id, "after": after}
        async with self._transaction(f"truncate session {session_id!r}") as conn:
            await conn.execute(LOCK_SESSION, (session_id,))
            cursor = await conn.execute(self._q(TRUNCATE), params)
            return entries_of(await cursor.fetchall())

    async def _sessions(self, prefix: str, after: str | None, limit: int | None) -> list[str]:
        start, inclusive = page_start(prefix, after)
        end = prefix_end(prefix)
        query = sessions_query(inclusive, bounded=end is not None)
        params = {"start": start, "end": end, "limit": limit}
        async with self._connection("list sessions") as conn:
            cursor = await conn.execute(self._q(query), params)
            return [row[0] for row in await cursor.fetchall()]

    async def _replayed(self, session_id: str, idempotency_key: str) -> list[Entry] | None:
        action = f"replay a key of session {session_id!r}"
        rows = await self._fetch(action, REPLAYED, (session_id, idempotency_key))
        return entries_of(rows) if rows else None  # a recorded key always covers some entries

    async def _save_checkpoint(self, session_id: str, seq: int, data: bytes) -> int | None:
        params = {"session": session_id, "seq": seq, "data": data}
        async with self._transaction(f"save the checkpoint of session {session_id!r}") as conn:
            await conn.execute(LOCK_SESSION, (session_id,))
            cursor = await conn.execute(self._q(SAVE_CHECKPOINT), params)
            last = int(one_row(await cursor.fetchone())[0])
        return last if last < seq else None

    async def _checkpoint(self, session_id: str) -> Checkpoint | None:
        async with self._connection(f"read the checkpoint of session {session_id!r}") as conn:
            cursor = await conn.execute(self._q(CHECKPOINT), (session_id,), binary=True)
            return checkpoint_of(await cursor.fetchone())

    async def _load_from_checkpoint(
        self, session_id: str, limit: int | None
    ) -> tuple[Checkpoint | None, list[Entry]]:
        async with self._connection(f"load session {session_id!r}") as conn:
            query = self._q(LOAD_FROM_CHECKPOINT)
            params = {"session": session_id, "limit": limit}
            cursor = await conn.execute(query, params, binary=True)
            return loaded_from_checkpoint(await cursor.fetchall())

    async def _earlier(self, session_id: str, before: int) -> Earlier:
        async with self._connection(f"load session {session_id!r}") as conn:
            params = {"session": session_id, "before": before}
            cursor = await conn.execute(self._q(EARLIER), params, binary=True)
            return earlier_from(await cursor.fetchall())

    async def _health(self) -> dict[str, Any]:
        started = time.perf_counter()
        try:
            async with self._connection("health check") as conn:
                cursor = await conn.execute(self._q(HEALTH))
                row, server = one_row(await cursor.fetchone()), conn.info.server_version
        except StoreError as exc:
            return self._q.unhealthy(exc)
        return self._q.health(started, row, server)

    async def _close(self) -> None:
        await self._locks.close()  # first: giving up leases takes pooled connections
        with self._guard:
            idle, self._idle = self._idle, []
        for conn in idle:
            await conn.close()

    @asynccontextmanager
    async def _hold(self, session_id: str, deadline: float | None) -> AsyncIterator[None]:
        """The lock across processes: an advisory lock, or a lease row in pooler mode."""
        async with self._locks.hold(session_id, deadline):
            yield

    # -- the pool: idle connections, taken by one call at a time ----------------------

    async def _fetch(
        self, action: str, query: str, args: tuple[Any, ...] | dict[str, Any]
    ) -> list[tuple[Any, ...]]:
        async with self._connection(action) as conn:
            cursor = await conn.execute(self._q(query), args)
            return await cursor.fetchall()

    @asynccontextmanager
    async def _transaction(
        self, action: str
    ) -> AsyncIterator[psycopg.AsyncConnection[tuple[Any, ...]]]:
        async with self._connection(action) as conn, conn.transaction():
            if self.pooler:  # the server connection's own settings are not ours to change
                await conn.execute(TRANSACTION_TIMEOUTS, self._q.timeouts())
            yield conn

    @asynccontextmanager
    async def _connection(
        self, action: str
    ) -> AsyncIterator[psycopg.AsyncConnection[tuple[Any, ...]]]:
        """A pooled connection, the tables brought up to date once; errors mapped for ``action``.

        The block has until the store's timeout to finish, counted from now.
        """
        with self._q.errors(action):
            deadline = self._q.deadline()
            conn = await self._take(deadline)
            try:
                if not self._migrated:
                    await self._migrate(conn)
                with self._q.watched(conn, action, deadline):
                    yield conn
            finally:
                await self._release(conn)

    async def _take(self, deadline: float) -> psycopg.AsyncConnection[tuple[Any, ...]]:
        """An idle connection the server has not closed, or a new one."""
        while True:
            with self._guard:
                conn = self._idle.pop() if self._idle else None
            if conn is None:
                return await _connect(self._q, deadline)
            if alive(conn):
                return conn
            await conn.close()

    async def _release(self, conn: psycopg.AsyncConnection[tuple[Any, ...]]) -> None:
        """Keep ``conn`` for the next call if it is idle and there is room; else close it."""
        idle = conn.info.transaction_status == self._psycopg.pq.TransactionStatus.IDLE
        with self._guard:
            kept = idle and not conn.closed and not self._closed
            kept = kept and len(self._idle) < self.pool_size
            if kept:
                self._idle.append(conn)
        if not kept:
            await conn.close()

    async def _migrate(self, conn: psycopg.AsyncConnection[tuple[Any, ...]]) -> None:
        """Bring the tables up to ``SCHEMA_VERSION``: one transaction, under an advisory lock.

        Reading the version is bounded by the timeout; a migration is not (it
        may have a large table to go through).
        """
        with self._q.watched(conn, "read the schema version", self._q.deadline()):
            current = await self._version(conn)
        if self.read_only:
            self._q.check_readable(current)
        elif current != SCHEMA_VERSION:
            await self._upgrade(conn)
        self._migrated = True

    async def _version(self, conn: psycopg.AsyncConnection[tuple[Any, ...]]) -> int:
        try:
            cursor = await conn.execute(self._q(CURRENT_VERSION))
        except self._psycopg.errors.UndefinedTable:  # a new database (autocommit: no harm done)
            return 0
        return int(one_row(await cursor.fetchone())[0])

    async def _upgrade(self, conn: psycopg.AsyncConnection[tuple[Any, ...]]) -> None:
        async with conn.transaction():
            await conn.execute(NO_TIMEOUT)
            await conn.execute(*self._q.migration_lock())
            create_schema = self._q.create_schema()
            if create_schema is not None:
                await conn.execute(create_schema)
            await conn.execute(self._q(VERSION_TABLE))
            cursor = await conn.execute(self._q(CURRENT_VERSION))
            current = int(one_row(await cursor.fetchone())[0])
            for version, statements in self._q.migrations(current):
                for statement in statements:
                    await conn.execute(statement)
                await conn.execute(self._q(RECORD_VERSION), (version, time.time()))


class AsyncLockConnection:
    """The connection that holds a store's session locks, one call at a time: session-level
    advisory locks.

    Opened by the first lock; one found closed (a server restart, a network
    failure: the server then released its locks) is replaced at the next one.
    """

    def __init__(self, q: Queries) -> None:
        self._q = q
        self._conn: psycopg.AsyncConnection[tuple[Any, ...]] | None = None
        self._turn = Lock()  # held across I/O: one call at a time on the connection
        self._closed = False  # then no call may open a connection nothing would close

    @asynccontextmanager
    async def hold(self, session_id: str, deadline: float | None) -> AsyncIterator[None]:
        """The session's advisory lock on this connection, polled until ``deadline``."""
        key = advisory_key(self._q.schema, session_id)
        with self._q.errors(f"lock session {session_id!r}"):
            await poll(functools.partial(self.try_lock, key), deadline, session_id)
        try:
            yield
        finally:
            await self._release(key, session_id)

    async def _release(self, key: int, session_id: str) -> None:
        """Unlock; a failure is only logged (the connection ending releases it).
        Once closed there is nothing to do: closing the connection released it."""
        if self._closed:
            return
        try:
            with self._q.errors(f"unlock session {session_id!r}"):
                released = await self.unlock(key)
        except StoreError as exc:
            unlock_failed(session_id, exc)
            return
        if not released:
            lock_lost(session_id, self._q.url)

    async def try_lock(self, key: int) -> bool:
        """Take the advisory lock ``key`` without waiting; False if another holds it."""
        async with self._turn:
            if self._closed:
                raise StoreError(f"the store at {self._q.url} is closed")
            if self._conn is None or not alive(self._conn):
                await self._reconnect()
            return await self._ask(TRY_LOCK, key)

    async def unlock(self, key: int) -> bool:
        """False if the lock was not held any more (its connection ended)."""
        async with self._turn:
            if self._conn is None or self._conn.closed:
                return False
            return await self._ask(UNLOCK, key)

    async def close(self) -> None:
        async with self._turn:
            self._closed = True
            if self._conn is not None:
                await self._conn.close()
                self._conn = None

    async def _ask(self, query: str, key: int) -> bool:
        """The answer to ``query`` about lock ``key``, within the store's timeout."""
        assert self._conn is not None
        with self._q.watched(self._conn, "session lock", self._q.deadline()):
            cursor = await self._conn.execute(query, (key,))
            return bool(one_row(await cursor.fetchone())[0])

    async def _reconnect(self) -> None:
        if self._conn is not None:
            await self._conn.close()
            self._conn = None
        self._conn = await _connect(self._q, self._q.deadline())


class AsyncLeases:
    """A store's session locks in pooler mode: a lease row per held session.

    Taken by one statement (a new row, or the row of a lease that expired),
    polled until the deadline; renewed every ``lock_ttl / 3`` while the block
    runs (a task; a thread in the sync store); deleted at the end only if it
    still carries the holder's random token. Expiry is on the server's clock.
    Each statement runs on any pooled connection of the store: nothing depends
    on which server connection the pooler gives. A delete the server did not
    answer is retried in the background until it does (``LeaseBook``).
    """

    def __init__(self, store: AsyncPostgresStore) -> None:
        self._store, self._q = store, store._q
        self._book = LeaseBook(self._q.url)
        self._releaser = Background(self._release_late, RELEASE_RETRY, "ctxwindow-postgres-release")
        self._closed = False  # then the leases were given up: a block ending later sends nothing

    @asynccontextmanager
    async def hold(self, session_id: str, deadline: float | None) -> AsyncIterator[None]:
        """A lease on the session, renewed every ``lock_ttl / 3`` until the block ends."""
        holder = secrets.token_hex(16)
        try:
            await poll(functools.partial(self._take, session_id, holder), deadline, session_id)
        except SessionBusyError:
            raise
        except StoreError:
            # A take the client gave up on may still commit on the server: its row would
            # then lock the session for lock_ttl.
            self._release_later(session_id, holder)
            raise
        self._book.hold(holder, session_id)
        try:
            renew = functools.partial(self._renew, session_id, holder)
            async with repeating(renew, self._q.lock_ttl / 3, "ctxwindow-postgres-lease"):
                yield
        finally:
            self._book.end(holder)
            await self._release(session_id, holder)

    async def close(self) -> None:
        """Stop retrying, and give up the leases still held or unreleased (once each: those
        the server does not take expire by their lease)."""
        self._closed = True
        await self._releaser.stop()
        for holder, session_id in self._book.held() + self._book.to_release():
            try:
                await self._drop(session_id, holder)
            except StoreError:
                return

    async def _take(self, session_id: str, holder: str) -> bool:
        action = f"lock session {session_id!r}"
        return bool(await self._store._fetch(action, TAKE_LEASE, self._q.lease(session_id, holder)))

    async def _renew(self, session_id: str, holder: str) -> bool:
        """Extend the lease; False once it is lost, or the store closed (which gave it up).
        A renewal the server did not take is tried again at the next turn."""
        if self._closed:
            return False
        action = f"renew the lock of session {session_id!r}"
        try:
            rows = await self._store._fetch(action, RENEW_LEASE, self._q.lease(session_id, holder))
        except StoreError as exc:
            return renewal_failed(session_id, exc)
        return bool(rows) or lease_lost(session_id, self._q.url)

    async def _release(self, session_id: str, holder: str) -> None:
        """Delete the lease if it is still ours; one the server did not take is retried."""
        if self._closed:
            return
        try:
            await self._drop(session_id, holder)
        except StoreError as exc:
            release_failed(session_id, exc)
            self._release_later(session_id, holder)

    async def _drop(self, session_id: str, holder: str) -> None:
        action = f"unlock session {session_id!r}"
        await self._store._fetch(action, DROP_LEASE, self._q.lease(session_id, holder))

    def _release_later(self, session_id: str, holder: str) -> None:
        if not self._closed:
            self._book.unreleased(holder, session_id)
            self._releaser.start()

    async def _release_late(self) -> None:
        """Retry the failed releases, in the background, until the server takes them."""
        for holder, session_id in self._book.to_release():
            try:
                await self._drop(session_id, holder)
            except StoreError:
                return  # still unreachable: the next round tries again
            self._book.released(holder, session_id)


async def _connect(q: Queries, deadline: float) -> psycopg.AsyncConnection[tuple[Any, ...]]:
    """A new connection to the store's database (autocommit: transactions are explicit),
    whose server gives up on a statement or an idle transaction after the store's timeout.

    Behind a transaction pooler nothing is set on the server connection (another client
    gets it next): a read-only store's transactions start with ``BEGIN READ ONLY``, and
    each transaction sets the timeouts itself (``TRANSACTION_TIMEOUTS``).
    """
    driver = load_psycopg()
    conn: psycopg.AsyncConnection[tuple[Any, ...]]
    conn = await driver.AsyncConnection.connect(q.raw_url, **q.connect_options())
    try:
        if q.pooler:
            if q.read_only:
                await conn.set_read_only(True)  # no I/O: how psycopg spells its BEGIN
            return conn
        with q.watched(conn, "connect", deadline):
            await conn.execute(SESSION_TIMEOUTS, q.timeouts())
            if q.read_only:
                await conn.execute(READ_ONLY)
    except BaseException:
        await conn.close()
        raise
    return conn
