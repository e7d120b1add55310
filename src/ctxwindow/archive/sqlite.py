"""``SQLiteArchive``: the embedded archive, on SQLite (stdlib ``sqlite3``).

``{table}`` holds each entry whole (JSON) with its vector (float32 BLOB), its
indexed terms and its length. The archive keeps its own inverted index,
per session, in B-tree tables, so that a search reads a bounded number of
postings whatever the archive's size (``ranking``): ``{table}_postings``,
``{table}_sessions`` and ``{table}_users``, written and searched by
``sqlite_postings.Postings``. This module owns the entries, the watermarks,
the connection and its errors.

Terms are those of FTS5's ``porter unicode61 remove_diacritics 2`` tokenizer
(``tokenizer.FTS5Tokenizer``) over the segmented text (``text.index_text``):
English words match their inflections (``shipped`` ≈ ``ships``), accents
and case are folded, and CJK text arrives already cut into unigrams and
bigrams. Ranking is BM25 with FTS5's constants over the scope's statistics.
``{table}_watermark`` holds each session's watermark
(``Archive.indexed_through``).

An archive written by an earlier version (an FTS5 table ``{table}_fts``) is
indexed again when opened, in batches, and its FTS5 table dropped.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from ctxwindow.archive.base import Archive, Document, Ranked, Scope, check_table_name
from ctxwindow.archive.embedders import Embedder
from ctxwindow.archive.sqlite_postings import BATCH, Counted, Postings, batches, marks
from ctxwindow.archive.sqlite_postings import COUNT_ID as COUNT_ID  # its former home
from ctxwindow.archive.text import entry_text, index_text
from ctxwindow.archive.tokenizer import FTS5Tokenizer
from ctxwindow.archive.vectors import StoredVector, pack
from ctxwindow.errors import StoreError, StoreUnavailableError
from ctxwindow.stores.base import entry_from_json


class SQLiteArchive(Archive):
    """An archive in one SQLite file (or in memory), with its own per-session index.

    >>> from ctxwindow import Entry
    >>> with SQLiteArchive() as archive:
    ...     _ = archive.index("s1", [Entry({"role": "user", "content": "It ships Monday"}, 5, 1)])
    ...     [hit.entry.message["content"] for hit in archive.search("s1", "when is it shipped?")]
    ['It ships Monday']

    One connection serves every thread, one call at a time; several
    processes may share a file (WAL mode, ``timeout`` seconds of waiting for
    a lock). ``embedder`` adds dense search fused with BM25 (see ``Archive``).
    A search reads at most about ``reads_per_hit`` postings per hit asked for
    (``archive.ranking``).
    """

    def __init__(
        self,
        path: str = ":memory:",
        *,
        embedder: Embedder | None = None,
        table: str = "ctxwindow_archive",
        min_similarity: float = 0.2,
        dense_weight: float = 0.4,
        depth: int = 50,
        reads_per_hit: int = 40,
        timeout: float = 5.0,
    ) -> None:
        super().__init__(
            embedder=embedder,
            min_similarity=min_similarity,
            dense_weight=dense_weight,
            depth=depth,
            reads_per_hit=reads_per_hit,
        )
        self.path = path
        self._table = check_table_name(table)
        self._lock = threading.Lock()
        self._db = _connect(path, timeout)
        self._postings = Postings(self._db, self._table)
        try:
            with self._errors("create the archive tables"):
                self._create_tables()
                self._tokenizer = FTS5Tokenizer(self._db, f"{table}_words")
            with self._errors("index the archive of an earlier version"):
                self._upgrade()
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
                " id INTEGER PRIMARY KEY AUTOINCREMENT, session_id TEXT NOT NULL,"
                " entry_id TEXT NOT NULL,"
                " user_id TEXT, seq INTEGER NOT NULL, entry TEXT NOT NULL, vector BLOB,"
                " terms TEXT, length INTEGER, UNIQUE (session_id, entry_id))"
            )
            columns = {row[1] for row in self._db.execute(f"PRAGMA table_info({t})")}
            for column in ("terms TEXT", "length INTEGER"):  # absent before postings
                if column.split()[0] not in columns:
                    self._db.execute(f"ALTER TABLE {t} ADD COLUMN {column}")
            # Without AUTOINCREMENT (a table made before it), SQLite gives the keys of rows
            # deleted at the top to the next rows: a session forgotten and archived again by
            # another process could keep its key range and row count, and a matrix its former
            # vectors. Such a table keeps no matrix (``_vector_mark``): vectors read per search.
            (made,) = self._db.execute(
                "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ?", (t,)
            ).fetchone()
            self._keys_grow = "AUTOINCREMENT" in made.upper()
            self._postings.keep_lexicons(self._keys_grow)
            self._db.execute(f"CREATE INDEX IF NOT EXISTS {t}_user ON {t} (user_id)")
            self._db.execute(f"CREATE INDEX IF NOT EXISTS {t}_seq ON {t} (session_id, seq)")
            self._postings.create_tables()
            self._db.execute(
                f"CREATE TABLE IF NOT EXISTS {t}_watermark"
                " (session_id TEXT PRIMARY KEY, through INTEGER NOT NULL) WITHOUT ROWID"
            )

    # Writing.

    def _stored(self, session_id: str, entry_ids: list[str]) -> dict[str, tuple[str, str | None]]:
        found: dict[str, tuple[str, str | None]] = {}
        with self._errors("read the archive"):
            for batch in batches(entry_ids):
                rows = self._db.execute(
                    f"SELECT entry_id, entry, user_id FROM {self._table}"
                    f" WHERE session_id = ? AND entry_id IN ({marks(batch)})",
                    (session_id, *batch),
                )
                found.update((entry_id, (entry, user)) for entry_id, entry, user in rows)
        return found

    def _write(
        self, session_id: str, user_id: str | None, documents: list[Document], through: int | None
    ) -> None:
        with self._errors("write to the archive"):
            counted = self._count([doc.body for doc in documents])
            with self._transaction():
                if documents:
                    self._replace(session_id, user_id, documents, counted)
                if through is not None:
                    self._db.execute(
                        f"INSERT INTO {self._table}_watermark (session_id, through) VALUES (?, ?)"
                        " ON CONFLICT (session_id) DO UPDATE"
                        " SET through = max(through, excluded.through)",
                        (session_id, through),
                    )

    def _replace(
        self,
        session_id: str,
        user_id: str | None,
        documents: list[Document],
        counted: list[tuple[dict[str, int], int]],
    ) -> None:
        """Insert the documents, or update the rows they replace, with their postings."""
        t = self._table
        sid = self._postings.session(session_id)
        if user_id is not None:
            self._postings.add_user(user_id, sid)
        existing = self._existing(session_id, [doc.entry_id for doc in documents])
        self._postings.unindex(sid, list(existing.values()))
        (last,) = self._db.execute(f"SELECT coalesce(max(id), 0) FROM {t}").fetchone()
        if self._keys_grow:  # never a key of rows deleted since (AUTOINCREMENT's record)
            recorded = self._db.execute("SELECT seq FROM sqlite_sequence WHERE name = ?", (t,))
            last = max([last, *(seq for (seq,) in recorded)])
        updates: list[tuple[object, ...]] = []
        inserts: list[tuple[object, ...]] = []
        rows: list[Counted] = []
        for doc, (frequency, length) in zip(documents, counted, strict=True):
            vector = None if doc.vector is None else pack(doc.vector)
            terms = " ".join(frequency)
            if doc.entry_id in existing:
                key = existing[doc.entry_id][0]
                updates.append((user_id, doc.seq, doc.json, vector, terms, length, key))
            else:
                last = key = last + 1
                row = (session_id, doc.entry_id, user_id, doc.seq, doc.json, vector, terms, length)
                inserts.append((key, *row))
            rows.append((key, doc.seq, frequency, length))
        self._db.executemany(
            f"UPDATE {t} SET user_id = ?, seq = ?, entry = ?, vector = ?, terms = ?, length = ?"
            " WHERE id = ?",
            updates,
        )
        self._db.executemany(
            f"INSERT INTO {t} (id, session_id, entry_id, user_id, seq, entry, vector, terms,"
            " length) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            inserts,
        )
        self._postings.index(sid, rows)

    def _count(self, texts: list[str]) -> list[tuple[dict[str, int], int]]:
        """Each text's ``(term -> frequency, length)``. The length counts one token more than
        the text has, as FTS5's ``bm25()`` did with the scope column of the former index: so the
        scores of a one-session archive are the former ones."""
        return [(terms, length + 1) for terms, length in self._tokenizer.count_all(texts)]

    def _existing(self, session_id: str, entry_ids: list[str]) -> dict[str, tuple[int, str, int]]:
        """``entry_id -> (key, terms, length)`` for the ids the session already holds."""
        found: dict[str, tuple[int, str, int]] = {}
        for batch in batches(entry_ids):
            rows = self._db.execute(
                f"SELECT entry_id, id, terms, length FROM {self._table}"
                f" WHERE session_id = ? AND entry_id IN ({marks(batch)})",
                (session_id, *batch),
            )
            found.update((entry_id, (key, terms, length)) for entry_id, key, terms, length in rows)
        return found

    def _indexed_through(self, session_id: str) -> int:
        with self._errors("read the archive's watermark"):
            row = self._db.execute(
                f"SELECT through FROM {self._table}_watermark WHERE session_id = ?", (session_id,)
            ).fetchone()
        return 0 if row is None else int(row[0])

    # Searching.

    def _lexical(self, scope: Scope, terms: list[str], depth: int, budget: int) -> list[Ranked]:
        with self._errors("search the archive"):
            query = self._tokenizer.query(terms)
            rows = self._postings.search(scope, query, depth, budget)
        return list(map(Ranked._make, rows))

    def _vectors(self, scope: Scope) -> list[tuple[int, int, StoredVector]]:
        with self._errors("read the archive's vectors"):
            rows = self._db.execute(
                f"SELECT id, seq, vector FROM {self._table}"
                " WHERE (session_id = ? OR user_id = ?) AND vector IS NOT NULL",
                (scope.session_id, scope.user_id),
            ).fetchall()
        return [(key, seq, vector) for key, seq, vector in rows]

    def _vector_mark(self, session_id: str) -> tuple[int, int] | None:
        if not self._keys_grow:
            return None
        t = self._table
        with self._errors("read the archive"):
            row = self._db.execute(
                f"SELECT rows FROM {t}_sessions WHERE session_id = ?", (session_id,)
            ).fetchone()
            (newest,) = self._db.execute(f"SELECT coalesce(max(id), 0) FROM {t}").fetchone()
        return (0 if row is None else int(row[0])), int(newest)

    def _vectors_after(
        self, session_id: str, key: int
    ) -> list[tuple[int, int, StoredVector | None]]:
        t = self._table
        # From the start: by the session's index; past a key: along the keys from there (the
        # rows added to the archive since), ``+session_id`` keeping the planner off the index.
        where = "session_id = ?" if key == 0 else "id > ? AND +session_id = ?"
        with self._errors("read the archive's vectors"):
            return self._db.execute(
                f"SELECT id, seq, vector FROM {t} WHERE {where} ORDER BY id",
                (session_id,) if key == 0 else (key, session_id),
            ).fetchall()

    def _load(self, keys: Sequence[int]) -> dict[int, tuple[str, str]]:
        found: dict[int, tuple[str, str]] = {}
        with self._errors("read the archive"):
            for batch in batches(list(keys)):
                rows = self._db.execute(
                    f"SELECT id, session_id, entry FROM {self._table} WHERE id IN ({marks(batch)})",
                    batch,
                )
                found.update((key, (session_id, entry)) for key, session_id, entry in rows)
        return found

    def _at(self, session_id: str, seqs: list[int]) -> list[str]:
        found: list[str] = []
        with self._errors("read the archive"):
            for batch in batches(seqs):
                rows = self._db.execute(
                    f"SELECT entry FROM {self._table}"
                    f" WHERE session_id = ? AND seq IN ({marks(batch)})",
                    (session_id, *batch),
                )
                found.extend(entry for (entry,) in rows)
        return found

    def _forget(self, session_id: str) -> int:
        t = self._table
        with self._errors("forget a session"), self._transaction():
            self._postings.forget(session_id)
            self._db.execute(f"DELETE FROM {t}_watermark WHERE session_id = ?", (session_id,))
            return self._db.execute(f"DELETE FROM {t} WHERE session_id = ?", (session_id,)).rowcount

    # An archive of an earlier version: FTS5, no postings.

    def _upgrade(self) -> None:
        """Index the rows of an archive made before postings, then drop its FTS5 table."""
        t = self._table
        exists = f"SELECT 1 FROM sqlite_master WHERE name = '{t}_fts'"
        while self._db.execute(exists).fetchone():
            with self._transaction():
                rows = self._db.execute(
                    f"SELECT id, session_id, entry, seq FROM {t} WHERE terms IS NULL LIMIT {BATCH}"
                ).fetchall()
                if not rows:
                    self._db.execute(f"DROP TABLE IF EXISTS {t}_fts")
                    continue
                texts = [index_text(entry_text(entry_from_json(row[2]))) for row in rows]
                counted = self._count(texts)
                by_session: dict[str, list[Counted]] = {}
                for row, (frequency, length) in zip(rows, counted, strict=True):
                    key, session_id, _, seq = row
                    by_session.setdefault(session_id, []).append((key, seq, frequency, length))
                    self._db.execute(
                        f"UPDATE {t} SET terms = ?, length = ? WHERE id = ?",
                        (" ".join(frequency), length, key),
                    )
                for session_id, indexed in by_session.items():
                    self._postings.index(self._postings.session(session_id), indexed)
                users = self._db.execute(
                    f"SELECT DISTINCT user_id, session_id FROM {t} WHERE user_id IS NOT NULL"
                    f" AND id IN ({marks(rows)})",
                    [row[0] for row in rows],
                ).fetchall()
                for user_id, session_id in users:
                    self._postings.add_user(user_id, self._postings.session(session_id))

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
