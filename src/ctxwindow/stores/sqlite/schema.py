"""The SQLite store's schema: its versions and migrations, and the queries the store shares."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from contextlib import AbstractContextManager

from ctxwindow.errors import StoreError

Opening = Callable[[], AbstractContextManager[sqlite3.Connection]]


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


def _create_checkpoints(conn: sqlite3.Connection) -> None:
    # A rowid table: large blobs belong in one (WITHOUT ROWID would copy them into the index).
    conn.execute(
        "CREATE TABLE checkpoints ("
        " session_id TEXT NOT NULL PRIMARY KEY, seq INTEGER NOT NULL, data BLOB NOT NULL)"
    )


# The entries a window keeps at any budget (``kept_always``), found by a partial index:
# a bounded cold load reads them without scanning the session. A query must spell the
# condition exactly so for SQLite to use the index.
KEPT_ALWAYS = (
    "(json_extract(json, '$.pinned') = 1 OR json_extract(json, '$.message.role') = 'system')"
)


def _index_kept_always(conn: sqlite3.Connection) -> None:
    conn.execute(
        f"CREATE INDEX entries_kept_always ON entries (session_id, seq) WHERE {KEPT_ALWAYS}"
    )


# Version n is reached from version n - 1 by MIGRATIONS[n]; never edit a released one.
MIGRATIONS: dict[int, Callable[[sqlite3.Connection], None]] = {
    1: _create_entries,
    2: _create_idempotency,
    3: _create_checkpoints,
    4: _index_kept_always,
}
SCHEMA_VERSION = max(MIGRATIONS)
# What a file of an older version, opened read-only (so not migrated), lacks: it stored none.
IDEMPOTENCY_SINCE, CHECKPOINTS_SINCE = 2, 3


def migrate(path: str, reading: Opening, writing: Opening) -> int:
    """Bring the schema to ``SCHEMA_VERSION``; the write lock is taken only if needed."""
    with reading() as conn:
        if _known_version(conn, path) == SCHEMA_VERSION:
            return SCHEMA_VERSION
    with writing() as conn:
        current = _known_version(conn, path)
        for version in range(current + 1, SCHEMA_VERSION + 1):
            MIGRATIONS[version](conn)
        conn.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
        conn.execute("DELETE FROM schema_version")
        conn.execute("INSERT INTO schema_version VALUES (?)", (SCHEMA_VERSION,))
    return SCHEMA_VERSION


def check_readable(path: str, reading: Opening) -> int:
    """The schema version of a file opened read-only, which is not migrated: an older
    one is read as it is (what it lacks, it has not stored); none is an error."""
    with reading() as conn:
        version = _known_version(conn, path)
        if version == 0:
            raise StoreError(
                f"SQLite file {path!r} holds no ctxwindow store (it has no ctxwindow schema)"
            )
    return version


def _known_version(conn: sqlite3.Connection, path: str) -> int:
    version = schema_version(conn)
    if version > SCHEMA_VERSION:
        raise StoreError(
            f"SQLite store at {path!r} has schema version {version}, newer than"
            f" this ctxwindow knows ({SCHEMA_VERSION}): upgrade ctxwindow"
        )
    return version


def schema_version(conn: sqlite3.Connection) -> int:
    exists = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_version'"
    ).fetchone()
    if exists is None:
        return 0
    version: int | None = conn.execute("SELECT MAX(version) FROM schema_version").fetchone()[0]
    return version or 0


def stored_before(conn: sqlite3.Connection, session_id: str, entry_id: str, last: int) -> bool:
    row = conn.execute(
        "SELECT 1 FROM entries WHERE session_id = ? AND id = ? AND seq <= ?",
        (session_id, entry_id, last),
    ).fetchone()
    return row is not None
