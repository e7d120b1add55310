"""``SQLiteStore``: the store's primitives over one SQLite file (see the package docs)."""

from __future__ import annotations

import contextlib
import os
import sqlite3
import weakref
from collections.abc import Iterator
from functools import partial
from typing import Any

from ctxwindow.concurrency.sync import poll
from ctxwindow.errors import StoreError, StoreUnavailableError
from ctxwindow.messages import Entry
from ctxwindow.stores.base import (
    Checkpoint,
    Earlier,
    Store,
    encode_entry,
    entry_from_json,
    page_start,
)
from ctxwindow.stores.base.checks import MAX_COUNT, prefix_end
from ctxwindow.stores.sqlite.disk import DatabaseFile, why_not_writable
from ctxwindow.stores.sqlite.files import (
    Connections,
    LockFile,
    Synchronous,
    check_options,
    connect,
    sqlite_url,
    store_error,
)
from ctxwindow.stores.sqlite.schema import (
    CHECKPOINTS_SINCE,
    IDEMPOTENCY_SINCE,
    KEPT_ALWAYS,
    check_readable,
    migrate,
    schema_version,
    stored_before,
)

Row = tuple[str, int, str, str, int, float]  # session_id, seq, id, json, tokens, created_at
# A checkpoint never moves backwards: a stored one with a higher seq stays.
SAVE_CHECKPOINT = """INSERT INTO checkpoints VALUES (?, ?, ?) ON CONFLICT (session_id)
    DO UPDATE SET seq = excluded.seq, data = excluded.data WHERE checkpoints.seq <= excluded.seq"""


# What a truncate removes past ``after``: entries, the keys covering any of them (a
# retry of a removed request is stored again), and a checkpoint of removed entries.
TRUNCATED = (("entries", "seq"), ("idempotency", "last_seq"), ("checkpoints", "seq"))


class SQLiteStore(Store):
    """A durable store in one SQLite file (WAL mode; see the module docs for the guarantees).

    ``path`` is a file path or ``":memory:"``; the file is created if missing,
    its directory is not. ``synchronous="FULL"`` also survives power loss.
    ``busy_timeout`` is how long an append waits for another writer, in seconds
    (and the longest ``health()`` takes). ``read_only=True`` opens an existing
    file read-only (``mode=ro``) and leaves it as it is: no schema migration,
    no journal mode set, no lock file; writes are refused.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        synchronous: Synchronous = "NORMAL",
        busy_timeout: float = 5.0,
        read_only: bool = False,
    ) -> None:
        self.path = os.fspath(path)
        check_options(self.path, synchronous, busy_timeout, read_only)
        self.synchronous = synchronous
        self.busy_timeout = busy_timeout
        self.read_only = read_only
        self.url = sqlite_url(self.path)
        opener = partial(connect, self.path, synchronous, busy_timeout, read_only)
        self._connections = Connections(opener, single=self.path == ":memory:", path=self.path)
        weakref.finalize(self, self._connections.close)  # a store left open closes when collected
        self._lock_file = None if read_only else LockFile.beside(self.path)
        self._file: DatabaseFile | None = None
        self._check_directory()
        try:
            if read_only:
                self.schema_version = check_readable(self.path, self._reading)
            else:
                self.schema_version = self._migrate()
            if self.path != ":memory:":
                self._file = DatabaseFile(self.path)
        except StoreUnavailableError as exc:
            self._connections.close()
            raise self._explained(exc) from exc.__cause__
        except BaseException:
            self._connections.close()
            raise

    def _append(
        self, session_id: str, entries: list[Entry], idempotency_key: str | None
    ) -> list[Entry]:
        stored = self._stored(session_id, entries, idempotency_key, None)
        assert stored is not None  # only a ``last`` refuses
        return stored

    def _append_after(
        self,
        session_id: str,
        entries: list[Entry],
        idempotency_key: str | None,
        last: tuple[int, str],
    ) -> list[Entry] | None:
        return self._stored(session_id, entries, idempotency_key, last)

    def _stored(
        self,
        session_id: str,
        entries: list[Entry],
        idempotency_key: str | None,
        last: tuple[int, str] | None,
    ) -> list[Entry] | None:
        """``_append`` (``last`` None), or only after ``last``: one write transaction."""
        with self._writing() as conn:
            if idempotency_key is not None:
                replayed = self._replay(conn, session_id, idempotency_key)
                if replayed is not None:
                    return [entry_from_json(text) for text in replayed]
            if last is not None and _newest(conn, session_id) != last:
                return None
            after = _last_seq(conn, session_id) if last is None else last[0]
            rows = self._insert(conn, session_id, entries, after)
            if idempotency_key is not None:
                conn.execute(
                    "INSERT INTO idempotency VALUES (?, ?, ?, ?)",
                    (session_id, idempotency_key, rows[0][1], rows[-1][1]),
                )
        return [entry_from_json(row[3]) for row in rows]

    def _load(self, session_id: str, after: int, limit: int | None) -> list[Entry]:
        with self._reading() as conn:
            rows = conn.execute(
                "SELECT json FROM entries WHERE session_id = ? AND seq > ? ORDER BY seq LIMIT ?",
                (session_id, after, -1 if limit is None else limit),
            ).fetchall()
        return [entry_from_json(text) for (text,) in rows]

    def _tail(self, session_id: str, n: int) -> list[Entry]:
        with self._reading() as conn:
            rows = conn.execute(
                "SELECT json FROM entries WHERE session_id = ? ORDER BY seq DESC LIMIT ?",
                (session_id, n),
            ).fetchall()
        return [entry_from_json(text) for (text,) in reversed(rows)]

    def _get(self, session_id: str, entry_id: str) -> Entry | None:
        with self._reading() as conn:
            row = conn.execute(
                "SELECT json FROM entries WHERE session_id = ? AND id = ?", (session_id, entry_id)
            ).fetchone()
        return None if row is None else entry_from_json(row[0])

    def _delete(self, session_id: str) -> bool:
        with self._writing() as conn:
            deleted = conn.execute("DELETE FROM entries WHERE session_id = ?", (session_id,))
            conn.execute("DELETE FROM idempotency WHERE session_id = ?", (session_id,))
            conn.execute("DELETE FROM checkpoints WHERE session_id = ?", (session_id,))
            return deleted.rowcount > 0

    def _truncate(self, session_id: str, after: int) -> list[Entry]:
        """One write transaction: the entries, the keys covering any of them, a checkpoint."""
        with self._writing() as conn:
            rows = conn.execute(
                "SELECT json FROM entries WHERE session_id = ? AND seq > ? ORDER BY seq",
                (session_id, after),
            ).fetchall()
            if rows:
                for table, column in TRUNCATED:
                    conn.execute(
                        f"DELETE FROM {table} WHERE session_id = ? AND {column} > ?",
                        (session_id, after),
                    )
        return [entry_from_json(text) for (text,) in rows]

    def _sessions(self, prefix: str, after: str | None, limit: int | None) -> list[str]:
        start, inclusive = page_start(prefix, after)
        params = {"start": start, "end": prefix_end(prefix), "limit": limit or MAX_COUNT}
        sql = sessions_query(inclusive, bounded=params["end"] is not None)
        with self._reading() as conn:
            rows = conn.execute(sql, params).fetchall()
        return [session_id for (session_id,) in rows]

    def _replayed(self, session_id: str, idempotency_key: str) -> list[Entry] | None:
        if self.schema_version < IDEMPOTENCY_SINCE:
            return None
        with self._reading() as conn:
            documents = self._replay(conn, session_id, idempotency_key)
        return None if documents is None else [entry_from_json(text) for text in documents]

    def _save_checkpoint(self, session_id: str, seq: int, data: bytes) -> int | None:
        with self._writing() as conn:
            last = _last_seq(conn, session_id)
            if seq > last:
                return last
            conn.execute(SAVE_CHECKPOINT, (session_id, seq, data))
        return None

    def _checkpoint(self, session_id: str) -> Checkpoint | None:
        if self.schema_version < CHECKPOINTS_SINCE:
            return None
        with self._reading() as conn:
            return _checkpoint_of(conn, session_id)

    def _load_from_checkpoint(
        self, session_id: str, limit: int | None
    ) -> tuple[Checkpoint | None, list[Entry]]:
        with self._reading() as conn, _snapshot(conn):
            has_checkpoints = self.schema_version >= CHECKPOINTS_SINCE
            checkpoint = _checkpoint_of(conn, session_id) if has_checkpoints else None
            rows = conn.execute(
                "SELECT json FROM entries WHERE session_id = ? AND seq > ?"
                " ORDER BY seq DESC LIMIT ?",
                (session_id, checkpoint[0] if checkpoint else 0, -1 if limit is None else limit),
            ).fetchall()
        return checkpoint, [entry_from_json(text) for (text,) in reversed(rows)]

    def _earlier(self, session_id: str, before: int) -> Earlier:
        with self._reading() as conn, _snapshot(conn):
            kept = conn.execute(
                f"SELECT json FROM entries WHERE session_id = ? AND seq < ? AND {KEPT_ALWAYS}"
                " ORDER BY seq",
                (session_id, before),
            ).fetchall()
            count, tokens = conn.execute(
                "SELECT count(*), coalesce(sum(tokens), 0) FROM entries"
                " WHERE session_id = ? AND seq < ?",
                (session_id, before),
            ).fetchone()
        return Earlier.of_all([entry_from_json(text) for (text,) in kept], count, tokens)

    def _health(self) -> dict[str, Any]:
        """Whether an append would be taken and kept: the file is still there, writable, with
        room, and the write lock can be had within ``busy_timeout``."""
        report: dict[str, Any] = {"store": "sqlite", "path": self.path, "url": self.url}
        if self.read_only:
            report["read_only"] = True
        try:
            with self._reading() as conn:
                journal = conn.execute("PRAGMA journal_mode").fetchone()[0]
                synchronous = conn.execute("PRAGMA synchronous").fetchone()[0]
                version = schema_version(conn)
                problems = self._write_problems(conn)
        except StoreError as exc:
            return {"ok": False, **report, "error": str(exc)}
        report.update(
            durable=self.path != ":memory:",
            journal_mode=journal,
            synchronous={1: "NORMAL", 2: "FULL", 3: "EXTRA"}.get(synchronous, "OFF"),
            schema_version=version,
        )
        if problems:
            error = f"SQLite store at {self.path!r} cannot write: " + "; ".join(problems)
            return {"ok": False, **report, "error": error}
        return {"ok": True, **report}

    def _write_problems(self, conn: sqlite3.Connection) -> list[str]:
        """What stops writes, seen from outside; else a write transaction, rolled back."""
        if self.read_only:  # nothing is written: being readable is all it takes
            return []
        problems = [] if self._file is None else self._file.problems()
        if not problems:  # a connection opened read-only says so here
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("ROLLBACK")
        return problems

    def _close(self) -> None:
        self._connections.close()

    @contextlib.contextmanager
    def _hold(self, session_id: str, deadline: float | None) -> Iterator[None]:
        """The session's byte of the lock file, polled until ``deadline``."""
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
                self._check_file()
                conn.execute("COMMIT")
            except BaseException:
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")
                raise

    def _insert(
        self, conn: sqlite3.Connection, session_id: str, entries: list[Entry], last: int
    ) -> list[Row]:
        """Insert ``entries`` after seq ``last`` (the session's last, read in this write)."""
        rows: list[Row] = [
            (session_id, seq, entry.id, encode_entry(entry, seq), entry.tokens, entry.created_at)
            for seq, entry in enumerate(entries, last + 1)
        ]
        try:
            conn.executemany("INSERT INTO entries VALUES (?, ?, ?, ?, ?, ?)", rows)
        except sqlite3.IntegrityError as exc:
            stored = [row[2] for row in rows if stored_before(conn, session_id, row[2], last)]
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

    def _check_file(self) -> None:
        """Refuse to commit into a file no longer at the path (deleted, replaced): lost writes."""
        moved = None if self._file is None else self._file.moved()
        if moved is not None:
            raise StoreUnavailableError(f"SQLite store at {self.path!r}: {moved}")

    def _explained(self, exc: StoreUnavailableError) -> StoreUnavailableError:
        """``exc`` with the reason the path gives, if any (a read-only directory, say)."""
        reason = None if self.path == ":memory:" else why_not_writable(self.path)
        return exc if reason is None else StoreUnavailableError(f"{exc}; {reason}")

    def _check_directory(self) -> None:
        if self.path == ":memory:":
            return
        directory = os.path.dirname(os.path.abspath(self.path))
        if not os.path.isdir(directory):
            raise StoreUnavailableError(
                f"SQLite store at {self.path!r}: the directory {directory!r} does not exist"
            )

    def _migrate(self) -> int:
        return migrate(self.path, self._reading, self._writing)


def sessions_query(inclusive: bool, *, bounded: bool) -> str:
    """One page of session ids, from ``:start`` (included or not) below ``:end`` if
    ``bounded``: a range on the primary key, not LIKE ('%' and '_' in a prefix are text).

    Each id is one index seek past the one before (``min`` above it), so a page costs
    its length, whatever the sessions hold: a DISTINCT would read every entry's key.
    """
    end = " AND session_id < :end" if bounded else ""
    first = f"session_id {'>=' if inclusive else '>'} :start{end}"
    return f"""WITH RECURSIVE page(session_id, n) AS (
        SELECT (SELECT min(session_id) FROM entries WHERE {first}), 1
        UNION ALL
        SELECT (SELECT min(session_id) FROM entries WHERE session_id > page.session_id{end}),
            n + 1
        FROM page WHERE page.session_id IS NOT NULL AND n < :limit)
    SELECT session_id FROM page WHERE session_id IS NOT NULL ORDER BY session_id"""


def _newest(conn: sqlite3.Connection, session_id: str) -> tuple[int, str]:
    """The session's newest entry's ``(seq, id)``; ``(0, "")`` when it has none."""
    row = conn.execute(
        "SELECT seq, id FROM entries WHERE session_id = ? ORDER BY seq DESC LIMIT 1",
        (session_id,),
    ).fetchone()
    return (0, "") if row is None else (row[0], row[1])


def _last_seq(conn: sqlite3.Connection, session_id: str) -> int:
    last: int = conn.execute(
        "SELECT COALESCE(MAX(seq), 0) FROM entries WHERE session_id = ?", (session_id,)
    ).fetchone()[0]
    return last


def _checkpoint_of(conn: sqlite3.Connection, session_id: str) -> Checkpoint | None:
    row = conn.execute(
        "SELECT seq, data FROM checkpoints WHERE session_id = ?", (session_id,)
    ).fetchone()
    return None if row is None else (row[0], bytes(row[1]))


@contextlib.contextmanager
def _snapshot(conn: sqlite3.Connection) -> Iterator[None]:
    """A read transaction: the statements of the block see one state of the database."""
    conn.execute("BEGIN")
    try:
        yield
    finally:
        with contextlib.suppress(sqlite3.Error):
            conn.execute("COMMIT")
