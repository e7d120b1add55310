"""SQLite stores: the default durable store, standard library only.

Durability. The database runs in WAL mode. With ``synchronous="NORMAL"`` (the
default) an append that returned survives a crash of the process, ``kill -9``
included: the commit is in the operating system's hands before ``append``
returns. Surviving power loss or a kernel crash needs ``synchronous="FULL"``,
which syncs the WAL to disk at every commit (slower).

Concurrency. Each append is one ``BEGIN IMMEDIATE`` transaction that reads the
last sequence number of the session and inserts after it, so appends from any
number of threads and processes are serialized by SQLite's write lock: none
collides, none is lost. Waiting for the lock is bounded by ``busy_timeout``
seconds, after which the store raises ``StoreUnavailableError``. Each thread
uses its own connection (borrowed from a small pool); ``":memory:"`` has one
connection shared under a lock.

Session locks. ``lock(session_id)`` of a file store also holds the session
against other processes (and other store objects) using the file: an
open-file-description lock (Linux ``F_OFD_SETLK``) on one byte of
``<path>-lock``, at an offset hashed from the session id. The kernel releases
it when the holder closes it or dies (``kill -9`` included), at once. Where
such locks do not exist (not Linux), and for ``":memory:"``, the lock holds
within the process only.

Schema. ``MIGRATIONS`` maps each schema version to the function that brings a
database from the previous version to it; opening a store applies the missing
ones in one transaction and records the version in ``schema_version``.

>>> from ctxwindow import Entry
>>> with SQLiteStore(":memory:") as store:
...     stored = store.append("s1", [Entry({"role": "user", "content": "hi"}, tokens=1, seq=0)])
...     [entry.seq for entry in store.load("s1")]
[1]
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3
import threading
import urllib.parse
import weakref
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any, Literal, TypeVar

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
)
from ctxwindow.stores.locks import (
    OFD_SETLK,
    async_poll,
    open_lock_file,
    poll,
    session_hash,
    try_lock_byte,
    unlock_byte,
)

T = TypeVar("T")
Synchronous = Literal["NORMAL", "FULL"]

Row = tuple[str, int, str, str, int, float]  # session_id, seq, id, json, tokens, created_at


def _create_entries(conn: sqlite3.Connection) -> None:
    conn.execute(
        "CREATE TABLE entries ("
        " session_id TEXT NOT NULL, seq INTEGER NOT NULL, id TEXT NOT NULL,"
        " json TEXT NOT NULL, tokens INTEGER NOT NULL, created_at REAL NOT NULL,"
        " PRIMARY KEY (session_id, seq))"
    )
    conn.execute("CREATE UNIQUE INDEX entries_session_id_id ON entries (session_id, id)")


def _create_idempotency(conn: sqlite3.Connection) -> None:
    conn.execute(
        "CREATE TABLE idempotency ("
        " session_id TEXT NOT NULL, key TEXT NOT NULL,"
        " first_seq INTEGER NOT NULL, last_seq INTEGER NOT NULL,"
        " PRIMARY KEY (session_id, key))"
    )


# Version n is reached from version n - 1 by MIGRATIONS[n]; never edit a released one.
MIGRATIONS: dict[int, Callable[[sqlite3.Connection], None]] = {
    1: _create_entries,
    2: _create_idempotency,
}
SCHEMA_VERSION = max(MIGRATIONS)

# SQLite primary result codes meaning "the file cannot be used right now".
_UNAVAILABLE_CODES = {
    3,  # SQLITE_PERM
    5,  # SQLITE_BUSY: the lock wait exceeded busy_timeout
    6,  # SQLITE_LOCKED
    8,  # SQLITE_READONLY
    10,  # SQLITE_IOERR
    13,  # SQLITE_FULL
    14,  # SQLITE_CANTOPEN
}
_UNAVAILABLE_WORDS = ("unable to open", "readonly", "locked", "disk i/o", "full", "permission")


def sqlite_url(path: str) -> str:
    """The ``sqlite:///`` URL of a path (absolute paths get four slashes)."""
    return "sqlite:///" + urllib.parse.quote(path, safe="/:\\")


def store_error(exc: sqlite3.Error | UnicodeError, path: str) -> StoreError:
    """Map an error of ``sqlite3`` to the ctxwindow exception tree."""
    if isinstance(exc, UnicodeError):
        return StoreError(f"SQLite store at {path!r}: text that is not valid Unicode: {exc}")
    code = getattr(exc, "sqlite_errorcode", None)  # Python 3.11+
    if isinstance(code, int):
        unavailable = code & 0xFF in _UNAVAILABLE_CODES
    else:
        unavailable = any(word in str(exc).lower() for word in _UNAVAILABLE_WORDS)
    kind = StoreUnavailableError if unavailable else StoreError
    return kind(f"SQLite store at {path!r}: {exc}")


def _check_options(path: str, synchronous: str, busy_timeout: float) -> None:
    if not isinstance(path, str) or not path:
        raise ValueError("a SQLite store needs a file path (or ':memory:')")
    if synchronous not in ("NORMAL", "FULL"):
        raise ValueError(f"synchronous must be 'NORMAL' or 'FULL', got {synchronous!r}")
    if not busy_timeout >= 0:
        raise ValueError(f"busy_timeout must be >= 0 seconds, got {busy_timeout!r}")


def _connect(path: str, synchronous: str, busy_timeout: float) -> sqlite3.Connection:
    conn = sqlite3.connect(
        path, timeout=busy_timeout, isolation_level=None, check_same_thread=False
    )
    try:
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute(f"PRAGMA synchronous = {synchronous}")
    except BaseException:
        conn.close()
        raise
    return conn


class _Connections:
    """Connections lent to one thread at a time; ``single`` keeps exactly one (``:memory:``)."""

    def __init__(
        self, connect: Callable[[], sqlite3.Connection], *, single: bool, path: str
    ) -> None:
        self._connect = connect
        self._path = path
        self._idle: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        self._turn: contextlib.AbstractContextManager[Any] = (
            threading.Lock() if single else contextlib.nullcontext()
        )
        self._pid = os.getpid()
        self.closed = False

    @contextlib.contextmanager
    def borrow(self) -> Iterator[sqlite3.Connection]:
        with self._turn:
            conn = self._take()
            try:
                yield conn
            finally:
                self._give_back(conn)

    def _take(self) -> sqlite3.Connection:
        with self._lock:
            if self.closed:
                raise StoreError(f"SQLite store at {self._path!r} is closed")
            if self._pid != os.getpid():  # a forked child must not touch its parent's connections
                self._idle, self._pid = [], os.getpid()
            if self._idle:
                return self._idle.pop()
        return self._connect()

    def _give_back(self, conn: sqlite3.Connection) -> None:
        with contextlib.suppress(sqlite3.Error):
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            with self._lock:
                if not self.closed and not conn.in_transaction and self._pid == os.getpid():
                    self._idle.append(conn)
                    return
        conn.close()

    def close(self) -> None:
        with self._lock:
            self.closed = True
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()


class _LockFile:
    """The lock file beside a database: byte ``n`` locked means the session hashed to ``n`` is held.

    Every acquisition opens its own descriptor, so that two store objects in
    one process exclude each other as two processes do, and closes it when
    the session is released.
    """

    def __init__(self, db_path: str) -> None:
        self.db_path = db_path
        self.path = os.path.abspath(db_path) + "-lock"

    @classmethod
    def beside(cls, db_path: str) -> _LockFile | None:
        """The lock file of a database file; None when only the in-process lock applies."""
        return None if db_path == ":memory:" or OFD_SETLK is None else cls(db_path)

    def open(self) -> int:
        with self._errors():
            return open_lock_file(self.path)

    def try_lock(self, fd: int, session_id: str) -> bool:
        with self._errors():
            return try_lock_byte(fd, _offset(session_id))

    def release(self, fd: int, session_id: str) -> None:
        """Unlock the session's byte (if held) and close ``fd``; never raises."""
        try:
            with contextlib.suppress(OSError):
                unlock_byte(fd, _offset(session_id))
        finally:
            os.close(fd)

    @contextlib.contextmanager
    def _errors(self) -> Iterator[None]:
        try:
            yield
        except OSError as exc:
            raise StoreUnavailableError(
                f"SQLite store at {self.db_path!r}: cannot lock {self.path!r}: {exc}"
            ) from exc


def _offset(session_id: str) -> int:
    """The byte of the lock file that stands for ``session_id``: a 63-bit hash of it."""
    return session_hash(session_id) & (2**63 - 1)


class SQLiteStore(Store):
    """A durable store in one SQLite file (WAL mode; see the module docs for the guarantees).

    ``path`` is a file path or ``":memory:"``; the file is created if missing,
    its directory is not. ``synchronous="FULL"`` also survives power loss.
    ``busy_timeout`` is how long an append waits for another writer, in seconds.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        synchronous: Synchronous = "NORMAL",
        busy_timeout: float = 5.0,
    ) -> None:
        self.path = os.fspath(path)
        _check_options(self.path, synchronous, busy_timeout)
        self.synchronous = synchronous
        self.busy_timeout = busy_timeout
        self.url = sqlite_url(self.path)
        connect = partial(_connect, self.path, synchronous, busy_timeout)
        self._connections = _Connections(connect, single=self.path == ":memory:", path=self.path)
        weakref.finalize(self, self._connections.close)  # a store left open closes when collected
        self._lock_file = _LockFile.beside(self.path)
        self._check_directory()
        try:
            self.schema_version = self._migrate()
        except BaseException:
            self._connections.close()
            raise

    def append(
        self, session_id: str, entries: Sequence[Entry], *, idempotency_key: str | None = None
    ) -> list[Entry]:
        check_session_id(session_id)
        check_entries(entries)
        check_idempotency_key(idempotency_key)
        if not entries:
            return []  # nothing to store, and no key to remember
        with self._writing() as conn:
            if idempotency_key is not None:
                replayed = self._replay(conn, session_id, idempotency_key)
                if replayed is not None:
                    return [entry_from_json(text) for text in replayed]
            rows = self._insert(conn, session_id, entries)
            if idempotency_key is not None:
                conn.execute(
                    "INSERT INTO idempotency VALUES (?, ?, ?, ?)",
                    (session_id, idempotency_key, rows[0][1], rows[-1][1]),
                )
        return [entry_from_json(row[3]) for row in rows]

    def load(self, session_id: str, *, after: int = 0, limit: int | None = None) -> list[Entry]:
        check_session_id(session_id)
        check_count("after", after)
        check_count("limit", limit)
        with self._reading() as conn:
            rows = conn.execute(
                "SELECT json FROM entries WHERE session_id = ? AND seq > ? ORDER BY seq LIMIT ?",
                (session_id, after, -1 if limit is None else limit),
            ).fetchall()
        return [entry_from_json(text) for (text,) in rows]

    def tail(self, session_id: str, n: int) -> list[Entry]:
        check_session_id(session_id)
        check_count("n", n)
        with self._reading() as conn:
            rows = conn.execute(
                "SELECT json FROM entries WHERE session_id = ? ORDER BY seq DESC LIMIT ?",
                (session_id, n),
            ).fetchall()
        return [entry_from_json(text) for (text,) in reversed(rows)]

    def get(self, session_id: str, entry_id: str) -> Entry | None:
        check_session_id(session_id)
        if not isinstance(entry_id, str):
            return None
        with self._reading() as conn:
            row = conn.execute(
                "SELECT json FROM entries WHERE session_id = ? AND id = ?", (session_id, entry_id)
            ).fetchone()
        return None if row is None else entry_from_json(row[0])

    def delete(self, session_id: str) -> bool:
        check_session_id(session_id)
        with self._writing() as conn:
            deleted = conn.execute("DELETE FROM entries WHERE session_id = ?", (session_id,))
            conn.execute("DELETE FROM idempotency WHERE session_id = ?", (session_id,))
            return deleted.rowcount > 0

    def sessions(self, *, prefix: str | None = None) -> list[str]:
        if prefix is not None and not isinstance(prefix, str):
            raise StoreError("a session prefix must be a string")
        # A range on the primary key, not LIKE: '%' and '_' in a prefix are plain text.
        low, high = prefix or "", _prefix_end(prefix or "")
        sql = "SELECT DISTINCT session_id FROM entries WHERE session_id >= ?"
        params: tuple[str, ...] = (low,) if high is None else (low, high)
        if high is not None:
            sql += " AND session_id < ?"
        with self._reading() as conn:
            rows = conn.execute(sql + " ORDER BY session_id", params).fetchall()
        return [session_id for (session_id,) in rows]

    def replayed(self, session_id: str, idempotency_key: str) -> list[Entry] | None:
        check_session_id(session_id)
        check_replay_key(idempotency_key)
        with self._reading() as conn:
            documents = self._replay(conn, session_id, idempotency_key)
        return None if documents is None else [entry_from_json(text) for text in documents]

    def health(self) -> dict[str, Any]:
        report: dict[str, Any] = {"store": "sqlite", "path": self.path, "url": self.url}
        try:
            with self._reading() as conn:
                journal = conn.execute("PRAGMA journal_mode").fetchone()[0]
                synchronous = conn.execute("PRAGMA synchronous").fetchone()[0]
                version = _schema_version(conn)
        except StoreError as exc:
            return {"ok": False, **report, "error": str(exc)}
        return {
            "ok": True,
            **report,
            "durable": self.path != ":memory:",
            "journal_mode": journal,
            "synchronous": {1: "NORMAL", 2: "FULL", 3: "EXTRA"}.get(synchronous, "OFF"),
            "schema_version": version,
        }

    def close(self) -> None:
        self._connections.close()

    @contextlib.contextmanager
    def _hold(self, session_id: str, deadline: float | None) -> Iterator[None]:
        """The session's byte of the lock file, polled until ``deadline``."""
        if self._connections.closed:
            raise StoreError(f"SQLite store at {self.path!r} is closed")
        lock_file = self._lock_file
        if lock_file is None:
            yield
            return
        fd = lock_file.open()
        try:
            poll(lambda: lock_file.try_lock(fd, session_id), deadline, session_id)
            yield
        finally:
            lock_file.release(fd, session_id)

    @contextlib.contextmanager
    def _reading(self) -> Iterator[sqlite3.Connection]:
        try:
            with self._connections.borrow() as conn:
                yield conn
        except (sqlite3.Error, UnicodeError) as exc:
            raise store_error(exc, self.path) from exc

    @contextlib.contextmanager
    def _writing(self) -> Iterator[sqlite3.Connection]:
        """One ``BEGIN IMMEDIATE`` transaction: committed on success, rolled back on any error."""
        with self._reading() as conn:
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
                conn.execute("COMMIT")
            except BaseException:
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")
                raise

    def _insert(
        self, conn: sqlite3.Connection, session_id: str, entries: Sequence[Entry]
    ) -> list[Row]:
        last: int = conn.execute(
            "SELECT COALESCE(MAX(seq), 0) FROM entries WHERE session_id = ?", (session_id,)
        ).fetchone()[0]
        rows: list[Row] = [
            (session_id, seq, entry.id, encode_entry(entry, seq), entry.tokens, entry.created_at)
            for seq, entry in enumerate(entries, last + 1)
        ]
        try:
            conn.executemany("INSERT INTO entries VALUES (?, ?, ?, ?, ?, ?)", rows)
        except sqlite3.IntegrityError as exc:
            stored = [row[2] for row in rows if _stored_before(conn, session_id, row[2], last)]
            raise StoreError(
                f"entry ids already stored in session {session_id!r}: {stored}"
            ) from exc
        return rows

    @staticmethod
    def _replay(conn: sqlite3.Connection, session_id: str, key: str) -> list[str] | None:
        """The documents a previous append with ``key`` stored, or None."""
        seqs = conn.execute(
            "SELECT first_seq, last_seq FROM idempotency WHERE session_id = ? AND key = ?",
            (session_id, key),
        ).fetchone()
        if seqs is None:
            return None
        rows = conn.execute(
            "SELECT json FROM entries WHERE session_id = ? AND seq BETWEEN ? AND ? ORDER BY seq",
            (session_id, *seqs),
        ).fetchall()
        return [text for (text,) in rows]

    def _check_directory(self) -> None:
        if self.path == ":memory:":
            return
        directory = os.path.dirname(os.path.abspath(self.path))
        if not os.path.isdir(directory):
            raise StoreUnavailableError(
                f"SQLite store at {self.path!r}: the directory {directory!r} does not exist"
            )

    def _migrate(self) -> int:
        """Bring the schema to ``SCHEMA_VERSION``; the write lock is taken only if needed."""
        with self._reading() as conn:
            if self._known_version(conn) == SCHEMA_VERSION:
                return SCHEMA_VERSION
        with self._writing() as conn:
            current = self._known_version(conn)
            for version in range(current + 1, SCHEMA_VERSION + 1):
                MIGRATIONS[version](conn)
            conn.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
            conn.execute("DELETE FROM schema_version")
            conn.execute("INSERT INTO schema_version VALUES (?)", (SCHEMA_VERSION,))
        return SCHEMA_VERSION

    def _known_version(self, conn: sqlite3.Connection) -> int:
        version = _schema_version(conn)
        if version > SCHEMA_VERSION:
            raise StoreError(
                f"SQLite store at {self.path!r} has schema version {version}, newer than"
                f" this ctxwindow knows ({SCHEMA_VERSION}): upgrade ctxwindow"
            )
        return version


def _schema_version(conn: sqlite3.Connection) -> int:
    exists = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_version'"
    ).fetchone()
    if exists is None:
        return 0
    version: int | None = conn.execute("SELECT MAX(version) FROM schema_version").fetchone()[0]
    return version or 0


def _stored_before(conn: sqlite3.Connection, session_id: str, entry_id: str, last: int) -> bool:
    row = conn.execute(
        "SELECT 1 FROM entries WHERE session_id = ? AND id = ? AND seq <= ?",
        (session_id, entry_id, last),
    ).fetchone()
    return row is not None


def _prefix_end(prefix: str) -> str | None:
    """The smallest string above every string starting with ``prefix`` (None: no bound).

    SQLite compares text as UTF-8 bytes, which orders like code points.
    """
    chars = list(prefix)
    while chars:
        following = ord(chars.pop()) + 1
        if following == 0xD800:  # skip the surrogates, which UTF-8 cannot encode
            following = 0xE000
        if following <= 0x10FFFF:
            return "".join(chars) + chr(following)
    return None


class AsyncSQLiteStore(AsyncStore):
    """The SQLite store, awaited: every SQLite call runs on the store's own worker threads.

    The file is opened by the first call, off the event loop, so errors about
    the path surface there (``health()`` reports them as ``{"ok": False}``).
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        synchronous: Synchronous = "NORMAL",
        busy_timeout: float = 5.0,
        max_workers: int = 4,
    ) -> None:
        self.path = os.fspath(path)
        _check_options(self.path, synchronous, busy_timeout)
        self.url = sqlite_url(self.path)
        self._open = partial(
            SQLiteStore, self.path, synchronous=synchronous, busy_timeout=busy_timeout
        )
        self._lock_file = _LockFile.beside(self.path)
        self._store: SQLiteStore | None = None
        self._opening = threading.Lock()
        self._closed = False
        self._executor = ThreadPoolExecutor(max_workers, thread_name_prefix="ctxwindow-sqlite")

    async def append(
        self, session_id: str, entries: Sequence[Entry], *, idempotency_key: str | None = None
    ) -> list[Entry]:
        return await self._run(
            lambda s: s.append(session_id, entries, idempotency_key=idempotency_key)
        )

    async def load(
        self, session_id: str, *, after: int = 0, limit: int | None = None
    ) -> list[Entry]:
        return await self._run(lambda s: s.load(session_id, after=after, limit=limit))

    async def tail(self, session_id: str, n: int) -> list[Entry]:
        return await self._run(lambda s: s.tail(session_id, n))

    async def get(self, session_id: str, entry_id: str) -> Entry | None:
        return await self._run(lambda s: s.get(session_id, entry_id))

    async def delete(self, session_id: str) -> bool:
        return await self._run(lambda s: s.delete(session_id))

    async def sessions(self, *, prefix: str | None = None) -> list[str]:
        return await self._run(lambda s: s.sessions(prefix=prefix))

    async def replayed(self, session_id: str, idempotency_key: str) -> list[Entry] | None:
        return await self._run(lambda s: s.replayed(session_id, idempotency_key))

    async def health(self) -> dict[str, Any]:
        try:
            return await self._run(lambda s: s.health())
        except StoreError as exc:
            return {"ok": False, "store": "sqlite", "path": self.path, "error": str(exc)}

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        await asyncio.get_running_loop().run_in_executor(self._executor, self._close_store)
        self._executor.shutdown(wait=False)

    @contextlib.asynccontextmanager
    async def _hold(self, session_id: str, deadline: float | None) -> AsyncIterator[None]:
        """As ``SQLiteStore._hold``; the lock calls never block, so they run on the loop."""
        if self._closed:
            raise StoreError(f"SQLite store at {self.path!r} is closed")
        lock_file = self._lock_file
        if lock_file is None:
            yield
            return
        fd = lock_file.open()

        async def attempt() -> bool:
            return lock_file.try_lock(fd, session_id)

        try:
            await async_poll(attempt, deadline, session_id)
            yield
        finally:
            lock_file.release(fd, session_id)

    async def _run(self, call: Callable[[SQLiteStore], T]) -> T:
        if self._closed:
            raise StoreError(f"SQLite store at {self.path!r} is closed")
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, lambda: call(self._sync_store()))

    def _sync_store(self) -> SQLiteStore:
        with self._opening:
            if self._store is None:
                if self._closed:
                    raise StoreError(f"SQLite store at {self.path!r} is closed")
                self._store = self._open()
            return self._store

    def _close_store(self) -> None:
        with self._opening:
            if self._store is not None:
                self._store.close()
