"""``SQLiteArchive``: the embedded archive, on SQLite (stdlib ``sqlite3``).

``{table}`` holds each entry whole (JSON) with its vector (float32 BLOB), its
indexed terms and its length. The archive keeps its own inverted index,
per session, in B-tree tables, so that a search reads a bounded number of
postings whatever the archive's size (``ranking``):

- ``{table}_postings (sid, term, id) -> tf, length, seq``: one row per term
  of an entry (stop terms left out), keyed by the session first: a session's
  postings of a term are one range, and other sessions' rows are never read.
  The row's length and seq are copied in, so ranking never reads the
  entries. The last row of each range (id ``COUNT_ID``) holds the term's
  document frequency in the session;
- ``{table}_sessions (sid, session_id, rows, length)``: the session's number
  of rows and total length; ``{table}_users (user_id, sid)``: the sessions
  indexed under a user, for user-wide searches.

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
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from ctxwindow.archive import ranking
from ctxwindow.archive.base import Archive, Document, Ranked, Scope, check_table_name
from ctxwindow.archive.embedders import Embedder
from ctxwindow.archive.text import entry_text, index_text
from ctxwindow.archive.tokenizer import FTS5Tokenizer
from ctxwindow.archive.vectors import StoredVector, pack
from ctxwindow.errors import StoreError, StoreUnavailableError
from ctxwindow.stores.base import entry_from_json

COUNT_ID = 2**63 - 1
"""The id of the last posting of each (session, term): its ``tf`` is how many of the session's
rows hold the term. It sits next to the newest postings, so indexing a row dirties one page per
term, not one for the posting and one for a separate count (47 pages a turn, not 75)."""
_BATCH = 400  # SQLite's default limit on host parameters was 999 before 3.32
_SESSIONS = 200  # sessions per statement of a user-wide search (beside up to 128 terms)
_UNITS = (
    f"CAST(q.weight * p.tf * {ranking.K1 + 1!r} / (p.tf + {ranking.K1!r}"
    f" * ({1 - ranking.B!r} + {ranking.B!r} * p.length / :average)) * {ranking.UNITS!r}"
    " AS INTEGER)"
)  # ranking.units: the same operations in the same order, so Python and SQL agree to the bit

Counted = tuple[int, int, dict[str, int], int]
"""A row as indexed: ``(key, seq, term -> frequency, length)``."""


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
                " id INTEGER PRIMARY KEY, session_id TEXT NOT NULL, entry_id TEXT NOT NULL,"
                " user_id TEXT, seq INTEGER NOT NULL, entry TEXT NOT NULL, vector BLOB,"
                " terms TEXT, length INTEGER, UNIQUE (session_id, entry_id))"
            )
            columns = {row[1] for row in self._db.execute(f"PRAGMA table_info({t})")}
            for column in ("terms TEXT", "length INTEGER"):  # absent before postings
                if column.split()[0] not in columns:
                    self._db.execute(f"ALTER TABLE {t} ADD COLUMN {column}")
            self._db.execute(f"CREATE INDEX IF NOT EXISTS {t}_user ON {t} (user_id)")
            self._db.execute(f"CREATE INDEX IF NOT EXISTS {t}_seq ON {t} (session_id, seq)")
            self._db.execute(
                f"CREATE TABLE IF NOT EXISTS {t}_sessions (sid INTEGER PRIMARY KEY,"
                " session_id TEXT NOT NULL UNIQUE, rows INTEGER NOT NULL, length INTEGER NOT NULL)"
            )
            self._db.execute(
                f"CREATE TABLE IF NOT EXISTS {t}_users (user_id TEXT NOT NULL,"
                " sid INTEGER NOT NULL, PRIMARY KEY (user_id, sid)) WITHOUT ROWID"
            )
            self._db.execute(f"CREATE INDEX IF NOT EXISTS {t}_users_sid ON {t}_users (sid)")
            self._db.execute(
                f"CREATE TABLE IF NOT EXISTS {t}_postings (sid INTEGER NOT NULL,"
                " term TEXT NOT NULL, id INTEGER NOT NULL, tf INTEGER NOT NULL,"
                " length INTEGER NOT NULL, seq INTEGER NOT NULL, PRIMARY KEY (sid, term, id))"
                " WITHOUT ROWID"
            )
            self._db.execute(
                f"CREATE TABLE IF NOT EXISTS {t}_watermark"
                " (session_id TEXT PRIMARY KEY, through INTEGER NOT NULL) WITHOUT ROWID"
            )

    # Writing.

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
        sid = self._session(session_id)
        if user_id is not None:
            self._db.execute(
                f"INSERT OR IGNORE INTO {t}_users (user_id, sid) VALUES (?, ?)", (user_id, sid)
            )
        existing = self._existing(session_id, [doc.entry_id for doc in documents])
        self._unindex(sid, list(existing.values()))
        (last,) = self._db.execute(f"SELECT coalesce(max(id), 0) FROM {t}").fetchone()
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
        self._index(sid, rows)

    def _count(self, texts: list[str]) -> list[tuple[dict[str, int], int]]:
        """Each text's ``(term -> frequency, length)``. The length counts one token more than
        the text has, as FTS5's ``bm25()`` did with the scope column of the former index: so the
        scores of a one-session archive are the former ones."""
        return [(terms, length + 1) for terms, length in self._tokenizer.count_all(texts)]

    def _session(self, session_id: str) -> int:
        """The session's ``sid``, made if new."""
        t = self._table
        self._db.execute(
            f"INSERT OR IGNORE INTO {t}_sessions (session_id, rows, length) VALUES (?, 0, 0)",
            (session_id,),
        )
        (sid,) = self._db.execute(
            f"SELECT sid FROM {t}_sessions WHERE session_id = ?", (session_id,)
        ).fetchone()
        return int(sid)

    def _existing(self, session_id: str, entry_ids: list[str]) -> dict[str, tuple[int, str, int]]:
        """``entry_id -> (key, terms, length)`` for the ids the session already holds."""
        found: dict[str, tuple[int, str, int]] = {}
        for batch in _batches(entry_ids):
            rows = self._db.execute(
                f"SELECT entry_id, id, terms, length FROM {self._table}"
                f" WHERE session_id = ? AND entry_id IN ({_marks(batch)})",
                (session_id, *batch),
            )
            found.update((entry_id, (key, terms, length)) for entry_id, key, terms, length in rows)
        return found

    def _index(self, sid: int, rows: list[Counted]) -> None:
        """Postings, document frequencies and the session's totals for new rows."""
        t = self._table
        postings = [
            (sid, term, key, tf, length, seq) for key, seq, frequency, length in rows
            for term, tf in frequency.items()
        ]  # fmt: skip
        postings.sort()  # B-tree order: each page is visited once
        self._db.executemany(f"INSERT INTO {t}_postings VALUES (?, ?, ?, ?, ?, ?)", postings)
        frequencies = Counter(term for _, _, frequency, _ in rows for term in frequency)
        self._db.executemany(
            f"INSERT INTO {t}_postings VALUES (?, ?, {COUNT_ID}, ?, 0, 0)"
            " ON CONFLICT (sid, term, id) DO UPDATE SET tf = tf + excluded.tf",
            sorted((sid, term, n) for term, n in frequencies.items()),
        )
        self._db.execute(
            f"UPDATE {t}_sessions SET rows = rows + ?, length = length + ? WHERE sid = ?",
            (len(rows), sum(length for _, _, _, length in rows), sid),
        )

    def _unindex(self, sid: int, rows: list[tuple[int, str, int]]) -> None:
        """The reverse of ``_index``, for rows ``(key, terms, length)`` about to be replaced."""
        if not rows:
            return
        t = self._table
        terms = [(key, term) for key, text, _ in rows for term in (text or "").split()]
        self._db.executemany(
            f"DELETE FROM {t}_postings WHERE sid = ? AND term = ? AND id = ?",
            [(sid, term, key) for key, term in terms],
        )
        frequencies = Counter(term for _, term in terms)
        self._db.executemany(
            f"UPDATE {t}_postings SET tf = tf - ? WHERE sid = ? AND term = ? AND id = {COUNT_ID}",
            [(n, sid, term) for term, n in frequencies.items()],
        )
        self._db.executemany(
            f"DELETE FROM {t}_postings WHERE sid = ? AND term = ? AND id = {COUNT_ID} AND tf <= 0",
            [(sid, term) for term in frequencies],
        )
        self._db.execute(
            f"UPDATE {t}_sessions SET rows = rows - ?, length = length - ? WHERE sid = ?",
            (len(rows), sum(length or 0 for _, _, length in rows), sid),
        )

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
            sids = self._sids(scope)
            if not query or not sids:
                return []
            plan = ranking.plan(query, self._statistics(sids, list(query)), budget)
            if plan is None:
                return []
            rows = ranking.best(
                plan,
                depth,
                lambda plan, limit: self._read(scope, sids, plan, limit),
                lambda plan, found: self._fill(scope, sids, plan, found),
                lambda terms, keys: self._postings(sids, terms, keys),
            )
        return [Ranked(key, seq, score) for key, seq, score in rows]

    def _sids(self, scope: Scope) -> list[int]:
        """The sessions searched: the named one, and the user's."""
        t = self._table
        sids = self._db.execute(
            f"SELECT sid FROM {t}_sessions WHERE session_id = ?", (scope.session_id,)
        ).fetchall()
        if scope.user_id is not None:
            sids += self._db.execute(
                f"SELECT sid FROM {t}_users WHERE user_id = ?", (scope.user_id,)
            ).fetchall()
        return sorted({sid for (sid,) in sids})

    def _statistics(self, sids: list[int], terms: list[str]) -> ranking.Statistics:
        t = self._table
        rows = length = 0
        frequencies: Counter[str] = Counter()
        for batch in _batches(sids, _SESSIONS):
            n, total = self._db.execute(
                f"SELECT coalesce(sum(rows), 0), coalesce(sum(length), 0) FROM {t}_sessions"
                f" WHERE sid IN ({_marks(batch)})",
                batch,
            ).fetchone()
            rows += n
            length += total
            frequencies.update(
                dict(
                    self._db.execute(
                        f"SELECT term, sum(tf) FROM {t}_postings WHERE sid IN ({_marks(batch)})"
                        f" AND term IN ({_marks(terms)}) AND id = {COUNT_ID} GROUP BY term",
                        (*batch, *terms),
                    )
                )
            )
        return ranking.Statistics(rows, length, frequencies)

    def _read(self, scope: Scope, sids: list[int], plan: ranking.Plan, depth: int) -> ranking.Found:
        """The best ``depth`` rows holding a term of ``plan.read`` (``ranking.best``)."""
        t = self._table
        terms = ", ".join(f"(:t{i}, :w{i})" for i in range(len(plan.read)))
        params = self._params(scope, plan.average_length, depth)
        for i, (term, weight) in enumerate(plan.read.items()):
            params[f"t{i}"], params[f"w{i}"] = term, weight
        found: ranking.Found = {}
        for batch in _batches(sids, _SESSIONS):
            marks = ", ".join(f":s{i}" for i in range(len(batch)))
            rows = self._db.execute(
                f"WITH q (term, weight) AS (VALUES {terms})"
                " SELECT s.id, s.seq, s.units FROM (SELECT id, max(seq) AS seq,"
                f" sum(units) AS units FROM (SELECT p.id, p.seq, {_UNITS} AS units FROM q"
                f" JOIN {t}_postings AS p ON p.sid IN ({marks}) AND p.term = q.term"
                f" AND p.id < {COUNT_ID}) GROUP BY id) AS s{self._users(scope)}"
                " ORDER BY s.units DESC, s.seq, s.id LIMIT :limit",
                params | {f"s{i}": sid for i, sid in enumerate(batch)},
            )
            found.update((key, (seq, units)) for key, seq, units in rows)
        return found

    def _fill(
        self, scope: Scope, sids: list[int], plan: ranking.Plan, found: ranking.Found
    ) -> set[int]:
        """The rows of the newest ``plan.fill`` postings of the first term left over, session
        by session, added to ``found`` (``ranking.best``)."""
        t = self._table
        term, weight = next(iter(plan.rescore.items()))
        params = self._params(scope, plan.average_length, plan.fill)
        params.update(t0=term, w0=weight)
        filled: set[int] = set()
        for sid in sids:
            rows = self._db.execute(
                f"SELECT s.id, s.seq, s.units FROM (SELECT p.id, p.seq,"
                f" {_UNITS.replace('q.weight', ':w0')} AS units FROM {t}_postings AS p"
                f" WHERE p.sid = :s0 AND p.term = :t0 AND p.id < {COUNT_ID}"
                f" ORDER BY p.id DESC LIMIT :limit) AS s{self._users(scope)}",
                params | {"s0": sid},
            )
            for key, seq, units in rows:
                found[key] = (seq, found.get(key, (seq, 0))[1] + units)
                filled.add(key)
        return filled

    def _params(self, scope: Scope, average_length: float, limit: int) -> dict[str, object]:
        params: dict[str, object] = {"average": average_length, "limit": limit}
        if scope.user_id is not None:
            params.update(session_id=scope.session_id, user_id=scope.user_id)
        return params

    def _users(self, scope: Scope) -> str:
        """The filter of a user-wide search: a user's sessions may hold others' rows."""
        if scope.user_id is None:
            return ""
        return (
            f" WHERE EXISTS (SELECT 1 FROM {self._table} AS e WHERE e.id = s.id"
            " AND (e.session_id = :session_id OR e.user_id = :user_id))"
        )

    def _postings(
        self, sids: list[int], terms: list[str], keys: list[int]
    ) -> Iterator[tuple[int, str, int, int]]:
        """``(key, term, tf, length)`` of these rows' postings of these terms."""
        for batch in _batches(sids, _SESSIONS):
            for chunk in _batches(keys, _BATCH):
                yield from self._db.execute(
                    f"SELECT id, term, tf, length FROM {self._table}_postings"
                    f" WHERE sid IN ({_marks(batch)}) AND term IN ({_marks(terms)})"
                    f" AND id IN ({_marks(chunk)})",
                    (*batch, *terms, *chunk),
                ).fetchall()

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
            row = self._db.execute(
                f"SELECT sid FROM {t}_sessions WHERE session_id = ?", (session_id,)
            ).fetchone()
            if row is not None:
                for part in ("postings", "users", "sessions"):
                    self._db.execute(f"DELETE FROM {t}_{part} WHERE sid = ?", row)
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
                    f"SELECT id, session_id, entry, seq FROM {t} WHERE terms IS NULL LIMIT {_BATCH}"
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
                    self._index(self._session(session_id), indexed)
                users = self._db.execute(
                    f"SELECT DISTINCT user_id, session_id FROM {t} WHERE user_id IS NOT NULL"
                    f" AND id IN ({_marks(rows)})",
                    [row[0] for row in rows],
                ).fetchall()
                for user_id, session_id in users:
                    self._db.execute(
                        f"INSERT OR IGNORE INTO {t}_users (user_id, sid) VALUES (?, ?)",
                        (user_id, self._session(session_id)),
                    )

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


def _marks(batch: Sequence[object]) -> str:
    return ", ".join("?" * len(batch))


def _batches(
    items: Sequence[str] | Sequence[int], size: int = _BATCH
) -> Iterator[Sequence[str] | Sequence[int]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]
