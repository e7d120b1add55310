"""``SQLiteArchive``: the embedded archive, on SQLite FTS5 (stdlib ``sqlite3``).

Two tables: ``{table}`` holds each entry whole (JSON) with its vector
(float32 BLOB), ``{table}_fts`` an FTS5 index of its segmented text
(``text.index_text``) with the ``porter unicode61 remove_diacritics 2``
tokenizer: English words match their inflections (``shipped`` ≈ ``ships``),
accents and case are folded, and CJK text arrives already cut into
unigrams and bigrams. A second FTS5 column holds scope tokens (a hash of the
session id and of the user id), so a search matches only the rows of its
sessions inside the index instead of filtering every match afterwards.
Ranking is FTS5's ``bm25()`` on the text column. ``{table}_watermark`` holds
each session's watermark (``Archive.indexed_through``).
"""

from __future__ import annotations

import hashlib
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from ctxwindow.archive.base import Archive, Document, Ranked, Scope, check_table_name
from ctxwindow.archive.embedders import Embedder
from ctxwindow.archive.vectors import StoredVector, pack
from ctxwindow.errors import StoreError, StoreUnavailableError

TOKENIZER = "porter unicode61 remove_diacritics 2"
_BATCH = 500  # SQLite's default limit on host parameters is 999


class SQLiteArchive(Archive):
    """An archive in one SQLite file (or in memory), searchable with FTS5.

    >>> from ctxwindow import Entry
    >>> with SQLiteArchive() as archive:
    ...     _ = archive.index("s1", [Entry({"role": "user", "content": "It ships Monday"}, 5, 1)])
    ...     [hit.entry.message["content"] for hit in archive.search("s1", "when is it shipped?")]
    ['It ships Monday']

    One connection serves every thread, one call at a time; several
    processes may share a file (WAL mode, ``timeout`` seconds of waiting for
    a lock). ``embedder`` adds dense search fused with BM25 (see ``Archive``).
    """

    def __init__(
        self,
        path: str = ":memory:",
        *,
        embedder: Embedder | None = None,
        table: str = "ctxwindow_archive",
        min_similarity: float = 0.2,
        dense_weight: float = 1.0,
        depth: int = 50,
        timeout: float = 5.0,
    ) -> None:
        super().__init__(
            embedder=embedder, min_similarity=min_similarity, dense_weight=dense_weight, depth=depth
        )
        self.path = path
        self._table = check_table_name(table)
        self._lock = threading.Lock()
        self._db = _connect(path, timeout)
        try:
            with self._errors("create the archive tables"):
                self._create_tables()
        except StoreError:
            self._db.close()
            raise

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def _create_tables(self) -> None:
        t = self._table
        if self.path != ":memory:":
            self._db.execute("PRAGMA journal_mode=WAL")
            # No fsync per batch: a power cut may undo the last batches, but never a batch
            # without its watermark, so their turns are archived again after the next load.
            self._db.execute("PRAGMA synchronous=NORMAL")
        with self._transaction():
            self._db.execute(
                f"CREATE TABLE IF NOT EXISTS {t} ("
                " id INTEGER PRIMARY KEY, session_id TEXT NOT NULL, entry_id TEXT NOT NULL,"
                " user_id TEXT, seq INTEGER NOT NULL, entry TEXT NOT NULL, vector BLOB,"
                " UNIQUE (session_id, entry_id))"
            )
            self._db.execute(f"CREATE INDEX IF NOT EXISTS {t}_user ON {t} (user_id)")
            self._db.execute(f"CREATE INDEX IF NOT EXISTS {t}_seq ON {t} (session_id, seq)")
            self._db.execute(
                f"CREATE VIRTUAL TABLE IF NOT EXISTS {t}_fts"
                f" USING fts5(body, scope, tokenize = '{TOKENIZER}')"
            )
            self._db.execute(
                f"CREATE TABLE IF NOT EXISTS {t}_watermark"
                " (session_id TEXT PRIMARY KEY, through INTEGER NOT NULL) WITHOUT ROWID"
            )

    def _stored(self, session_id: str, entry_ids: list[str]) -> dict[str, tuple[str, str | None]]:
        found: dict[str, tuple[str, str | None]] = {}
        with self._errors("read the archive"):
            for batch in _batches(entry_ids):
                rows = self._db.execute(
                    f"SELECT entry_id, entry, user_id FROM {self._table}"
                    f" WHERE session_id = ? AND entry_id IN ({_marks(batch)})",
                    (session_id, *batch),
                )
                found.update((entry_id, (entry, user)) for entry_id, entry, user in rows)
        return found

    def _write(
        self, session_id: str, user_id: str | None, documents: list[Document], through: int | None
    ) -> None:
        scope = _scope_tokens(session_id, user_id)
        t = self._table
        with self._errors("write to the archive"), self._transaction():
            for doc in documents:
                key = self._upsert(session_id, user_id, doc)
                self._db.execute(f"DELETE FROM {t}_fts WHERE rowid = ?", (key,))
                self._db.execute(
                    f"INSERT INTO {t}_fts (rowid, body, scope) VALUES (?, ?, ?)",
                    (key, doc.body, scope),
                )
            if through is not None:
                self._db.execute(
                    f"INSERT INTO {t}_watermark (session_id, through) VALUES (?, ?)"
                    " ON CONFLICT (session_id) DO UPDATE"
                    " SET through = max(through, excluded.through)",
                    (session_id, through),
                )

    def _indexed_through(self, session_id: str) -> int:
        with self._errors("read the archive's watermark"):
            row = self._db.execute(
                f"SELECT through FROM {self._table}_watermark WHERE session_id = ?", (session_id,)
            ).fetchone()
        return 0 if row is None else int(row[0])

    def _upsert(self, session_id: str, user_id: str | None, doc: Document) -> int:
        vector = None if doc.vector is None else pack(doc.vector)
        row = self._db.execute(
            f"SELECT id FROM {self._table} WHERE session_id = ? AND entry_id = ?",
            (session_id, doc.entry_id),
        ).fetchone()
        if row is not None:
            self._db.execute(
                f"UPDATE {self._table} SET user_id = ?, seq = ?, entry = ?, vector = ?"
                " WHERE id = ?",
                (user_id, doc.seq, doc.json, vector, row[0]),
            )
            return int(row[0])
        cursor = self._db.execute(
            f"INSERT INTO {self._table} (session_id, entry_id, user_id, seq, entry, vector)"
            " VALUES (?, ?, ?, ?, ?, ?)",
            (session_id, doc.entry_id, user_id, doc.seq, doc.json, vector),
        )
        assert cursor.lastrowid is not None
        return cursor.lastrowid

    def _lexical(self, scope: Scope, terms: list[str], depth: int) -> list[Ranked]:
        t = self._table
        with self._errors("search the archive"):
            rows = self._db.execute(
                f"SELECT e.id, e.seq, -bm25({t}_fts, 1.0, 0.0) AS score"
                f" FROM {t}_fts JOIN {t} AS e ON e.id = {t}_fts.rowid"
                f" WHERE {t}_fts MATCH ? AND (e.session_id = ? OR e.user_id = ?)"
                " ORDER BY score DESC, e.seq, e.id LIMIT ?",
                (_match_expression(scope, terms), scope.session_id, scope.user_id, depth),
            ).fetchall()
        return [Ranked(key, seq, score) for key, seq, score in rows]

    def _vectors(self, scope: Scope) -> list[tuple[int, int, StoredVector]]:
        with self._errors("read the archive's vectors"):
            rows = self._db.execute(
                f"SELECT id, seq, vector FROM {self._table}"
                " WHERE (session_id = ? OR user_id = ?) AND vector IS NOT NULL",
                (scope.session_id, scope.user_id),
            ).fetchall()
        return [(key, seq, vector) for key, seq, vector in rows]

    def _load(self, keys: Sequence[int]) -> dict[int, tuple[str, str]]:
        found: dict[int, tuple[str, str]] = {}
        with self._errors("read the archive"):
            for batch in _batches(list(keys)):
                rows = self._db.execute(
                    f"SELECT id, session_id, entry FROM {self._table}"
                    f" WHERE id IN ({_marks(batch)})",
                    batch,
                )
                found.update((key, (session_id, entry)) for key, session_id, entry in rows)
        return found

    def _at(self, session_id: str, seqs: list[int]) -> list[str]:
        found: list[str] = []
        with self._errors("read the archive"):
            for batch in _batches(seqs):
                rows = self._db.execute(
                    f"SELECT entry FROM {self._table}"
                    f" WHERE session_id = ? AND seq IN ({_marks(batch)})",
                    (session_id, *batch),
                )
                found.extend(entry for (entry,) in rows)
        return found

    def _forget(self, session_id: str) -> int:
        t = self._table
        with self._errors("forget a session"), self._transaction():
            self._db.execute(
                f"DELETE FROM {t}_fts WHERE rowid IN (SELECT id FROM {t} WHERE session_id = ?)",
                (session_id,),
            )
            self._db.execute(f"DELETE FROM {t}_watermark WHERE session_id = ?", (session_id,))
            return self._db.execute(f"DELETE FROM {t} WHERE session_id = ?", (session_id,)).rowcount

    @contextmanager
    def _transaction(self) -> Iterator[None]:
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    @contextmanager
    def _errors(self, doing: str) -> Iterator[None]:
        """Hold the connection, and turn sqlite3 errors into ``StoreError``."""
        with self._lock:
            try:
                yield
            except sqlite3.Error as exc:
                raise _store_error(f"SQLiteArchive({self.path!r}) could not {doing}", exc) from exc


def _connect(path: str, timeout: float) -> sqlite3.Connection:
    try:
        return sqlite3.connect(path, timeout=timeout, isolation_level=None, check_same_thread=False)
    except sqlite3.Error as exc:
        raise StoreUnavailableError(f"SQLiteArchive cannot open {path!r}: {exc}") from exc


def _store_error(what: str, exc: sqlite3.Error) -> StoreError:
    text = str(exc)
    if "closed database" in text:
        return StoreError(f"{what}: the archive is closed")
    if "no such module: fts5" in text:
        return StoreError(f"{what}: this Python's sqlite3 lacks FTS5 ({text})")
    if isinstance(exc, sqlite3.OperationalError) and (
        "unable to open" in text or "locked" in text or "disk I/O" in text
    ):
        return StoreUnavailableError(f"{what}: {text}")
    return StoreError(f"{what}: {text}")


def _match_expression(scope: Scope, terms: list[str]) -> str:
    """``scope : (...) AND body : ("t1" OR "t2" ...)``; every term quoted, so no syntax survives."""
    tokens = _scope_tokens(scope.session_id, scope.user_id).split()
    scopes = " OR ".join(_quote(token) for token in tokens)
    words = " OR ".join(_quote(term) for term in terms)
    return f"scope : ({scopes}) AND body : ({words})"


def _scope_tokens(session_id: str, user_id: str | None) -> str:
    tokens = [f"s{_digest(session_id)}"]
    if user_id is not None:
        tokens.append(f"u{_digest(user_id)}")
    return " ".join(tokens)


def _digest(text: str) -> str:
    return hashlib.blake2b(text.encode(), digest_size=12).hexdigest()


def _quote(term: str) -> str:
    return '"' + term.replace('"', '""') + '"'


def _marks(batch: Sequence[object]) -> str:
    return ", ".join("?" * len(batch))


def _batches(items: list[str] | list[int]) -> Iterator[list[str] | list[int]]:
    for start in range(0, len(items), _BATCH):
        yield items[start : start + _BATCH]
