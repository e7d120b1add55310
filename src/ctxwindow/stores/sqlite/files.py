"""The SQLite store's files: opening connections (a small pool), errors, the lock file."""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import urllib.parse
from collections.abc import Callable, Iterator
from typing import Any, Literal

from ctxwindow.errors import StoreError, StoreUnavailableError
from ctxwindow.stores.locks import (
    OFD_SETLK,
    open_lock_file,
    session_hash,
    try_lock_byte,
    unlock_byte,
)

Synchronous = Literal["NORMAL", "FULL"]

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


def check_options(
    path: str, synchronous: str, busy_timeout: float, read_only: bool = False
) -> None:
    if not isinstance(path, str) or not path:
        raise ValueError("a SQLite store needs a file path (or ':memory:')")
    if read_only and path == ":memory:":
        raise ValueError("a read-only SQLite store needs a file: ':memory:' holds nothing to read")
    if synchronous not in ("NORMAL", "FULL"):
        raise ValueError(f"synchronous must be 'NORMAL' or 'FULL', got {synchronous!r}")
    if not busy_timeout >= 0:
        raise ValueError(f"busy_timeout must be >= 0 seconds, got {busy_timeout!r}")


def connect(
    path: str, synchronous: str, busy_timeout: float, read_only: bool = False
) -> sqlite3.Connection:
    """A connection in WAL mode; ``read_only``: the file opened as it is, with ``mode=ro``."""
    if read_only:
        uri = "file:" + urllib.parse.quote(os.path.abspath(path)) + "?mode=ro"
        return sqlite3.connect(
            uri, uri=True, timeout=busy_timeout, isolation_level=None, check_same_thread=False
        )
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


class Connections:
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


class LockFile:
    """The lock file beside a database: byte ``n`` locked means the session hashed to ``n`` is held.

    Every acquisition opens its own descriptor, so that two store objects in
    one process exclude each other as two processes do, and closes it when
    the session is released.
    """

    def __init__(self, db_path: str) -> None:
        self.db_path = db_path
        self.path = os.path.abspath(db_path) + "-lock"

    @classmethod
    def beside(cls, db_path: str) -> LockFile | None:
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
