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

Health. ``health()`` is ``{"ok": True, …}`` only when an append would be
taken and kept: the database file is still the one the store opened (not
deleted with its directory, not replaced), it, its directory and its -wal and
-shm files are writable (not read-only, immutable or on a read-only file
system), its file system has at least 1 MiB free, and the write lock can be
had within ``busy_timeout`` (``BEGIN IMMEDIATE``, rolled back). It takes at
most ``busy_timeout``. An append to a file no longer at its path is refused
with ``StoreUnavailableError`` instead of being acknowledged and lost.

Schema. ``MIGRATIONS`` maps each schema version to the function that brings a
database from the previous version to it; opening a store applies the missing
ones in one transaction and records the version in ``schema_version``
(3 added the ``checkpoints`` table: a file of an earlier version gains it when
opened, and keeps everything else). A store opened with ``read_only=True``
(``mode=ro``) migrates nothing: a file of an earlier version is read as it
is, and a file with no ctxwindow schema is a ``StoreError``.

The package: ``files`` (connections, errors, the lock file), ``disk`` (what
the file system says about the database file), ``schema``
(versions and migrations), ``store`` (``SQLiteStore``: the primitives of the
store contract) and ``aio`` (``AsyncSQLiteStore``, which runs a
``SQLiteStore`` on worker threads).

>>> from ctxwindow import Entry
>>> with SQLiteStore(":memory:") as store:
...     stored = store.append("s1", [Entry({"role": "user", "content": "hi"}, tokens=1, seq=0)])
...     [entry.seq for entry in store.load("s1")]
[1]
"""

from ctxwindow.stores.sqlite.aio import AsyncSQLiteStore
from ctxwindow.stores.sqlite.files import sqlite_url, store_error
from ctxwindow.stores.sqlite.schema import MIGRATIONS, SCHEMA_VERSION
from ctxwindow.stores.sqlite.store import SQLiteStore

__all__ = [
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "AsyncSQLiteStore",
    "SQLiteStore",
    "sqlite_url",
    "store_error",
]
