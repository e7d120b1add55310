"""``Postings``: ``SQLiteArchive``'s inverted index, per session, in B-tree tables.

A search reads a bounded number of postings whatever the archive's size
(``ranking``), from three tables beside the archive's ``{table}``:

- ``{table}_postings (sid, term, id) -> tf, length, seq``: one row per term
  of an entry (stop terms left out), keyed by the session first: a session's
  postings of a term are one range, and other sessions' rows are never read.
  The row's length and seq are copied in, so ranking never reads the
  entries. The last row of each range (id ``COUNT_ID``) holds the term's
  document frequency in the session;
- ``{table}_pending (sid, id) -> seq, length, tf``: the rows whose postings
  wait, each with its terms' frequencies (JSON), one row a row. Writing a
  row's postings dirties a page of the postings table per term (about 100
  pages for a turn of two chat messages, 1.0 ms); a pending row dirties one.
  Once ``PENDING`` rows of a session wait, they are posted together, their
  terms sharing pages (0.8 ms a turn on average at 2,000 stored messages). A
  search from the lexicon reads the waiting rows beside the postings; a
  search of the tables posts them first;
- ``{table}_sessions (sid, session_id, rows, length, replaced)``: the
  session's number of rows (waiting ones too), their total length, and how
  many times rows were replaced in place; ``{table}_users (user_id, sid)``:
  the sessions indexed under a user, for user-wide searches.

With numpy, a search of one session reads its postings from memory instead
(``lexicon.Lexicon``, exactly the same ranking): each searched session's
lexicon is kept, up to ``LEXICON_POSTINGS`` postings over all sessions, with
the postings of every term its searches held, read from the tables the first
time; before each search, in one read transaction, it takes the rows added
since and reads the terms it lacks. It starts again, empty, when rows were
replaced in place (the session's ``replaced`` count, kept by every writer),
or when the session's row count or total length is not what it holds (rows
went, or an archive of an earlier version was indexed).

Nothing here takes the archive's lock or opens a transaction, but for the
lexicon's read and the posting of waiting rows before a search of the tables:
the archive holds its lock around each call.
"""

from __future__ import annotations

import sqlite3
from collections import Counter, OrderedDict
from collections.abc import Iterator, Sequence

import orjson

from ctxwindow.archive import ranking
from ctxwindow.archive.base import Scope
from ctxwindow.archive.lexicon import Lexicon, TermPostings
from ctxwindow.archive.vectors import numpy_or_none

COUNT_ID = 2**63 - 1
"""The id of the last posting of each (session, term): its ``tf`` is how many of the session's
rows hold the term. It sits next to the newest postings, so indexing a row dirties one page per
term, not one for the posting and one for a separate count (47 pages a turn, not 75)."""
BATCH = 400  # SQLite's default limit on host parameters was 999 before 3.32
PENDING = 64
"""The rows of a session whose postings may wait: the next row indexed posts them all. At 2,000
stored messages a turn's indexing (two messages) took 1.0-1.3 ms of CPU posted at once, and
0.8 ms on average with up to 64 waiting: 0.35 ms a turn, and 13 ms for the turn in 32 that
posts (with up to 32 waiting: 0.86 ms on average, 10 ms; 16: 1.0 ms, 8 ms). A search from the
lexicon reads the waiting rows (their frequencies decoded once)."""
DECODED = 4096  # waiting rows' frequencies kept decoded (those of 64 sessions)
LEXICON_POSTINGS = 2_000_000
"""The postings kept in memory over all sessions (32 bytes each, up to 64 with the arrays'
room to grow: 64-128 MB): past it, the sessions searched longest ago are dropped, never the
one searched now (a session of 10,000 chat messages holds ~425,000 postings, most of them of
terms no search asks for)."""
_SESSIONS = 200  # sessions per statement of a user-wide search (beside up to 128 terms)
_UNITS = (
    f"CAST(q.weight * p.tf * {ranking.K1 + 1!r} / (p.tf + {ranking.K1!r}"
    f" * ({1 - ranking.B!r} + {ranking.B!r} * p.length / :average)) * {ranking.UNITS!r}"
    " AS INTEGER)"
)  # ranking.units: the same operations in the same order, so Python and SQL agree to the bit

Counted = tuple[int, int, dict[str, int], int]
"""A row as indexed: ``(key, seq, term -> frequency, length)``."""


class Postings:
    """The index of the archive ``table`` on ``db``: its tables, its upkeep, its searches."""

    def __init__(self, db: sqlite3.Connection, table: str) -> None:
        self._db = db
        self._table = table
        self._numpy: object = None  # numpy where lexicons are kept (``keep_lexicons``)
        self._kept: OrderedDict[int, Lexicon] = OrderedDict()  # by sid, searched longest ago first
        self._decoded: dict[bytes, dict[str, int]] = {}  # waiting rows' frequencies, by text

    def keep_lexicons(self, keep: bool) -> None:
        """Whether searches may keep sessions' postings in memory (with numpy): only where
        keys only grow, so that the rows above the highest key looked at are all that is new."""
        self._numpy = numpy_or_none() if keep else None
        self._kept.clear()

    def create_tables(self) -> None:
        t = self._table
        self._db.execute(
            f"CREATE TABLE IF NOT EXISTS {t}_sessions (sid INTEGER PRIMARY KEY,"
            " session_id TEXT NOT NULL UNIQUE, rows INTEGER NOT NULL, length INTEGER NOT NULL,"
            " replaced INTEGER NOT NULL DEFAULT 0)"
        )
        columns = {row[1] for row in self._db.execute(f"PRAGMA table_info({t}_sessions)")}
        if "replaced" not in columns:  # a table made before lexicons
            self._db.execute(
                f"ALTER TABLE {t}_sessions ADD COLUMN replaced INTEGER NOT NULL DEFAULT 0"
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
            f"CREATE TABLE IF NOT EXISTS {t}_pending (sid INTEGER NOT NULL, id INTEGER NOT NULL,"
            " seq INTEGER NOT NULL, length INTEGER NOT NULL, tf TEXT NOT NULL,"
            " PRIMARY KEY (sid, id)) WITHOUT ROWID"
        )

    # Writing.

    def session(self, session_id: str) -> int:
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

    def add_user(self, user_id: str, sid: int) -> None:
        """Index the session ``sid`` under ``user_id`` too, for the user's searches."""
        self._db.execute(
            f"INSERT OR IGNORE INTO {self._table}_users (user_id, sid) VALUES (?, ?)",
            (user_id, sid),
        )

    def index(self, sid: int, rows: list[Counted]) -> None:
        """New rows (or rows replaced, ``unindex``ed first): the session's totals, and their
        postings, which wait until ``PENDING`` rows of the session do, then go all together."""
        t = self._table
        self._db.executemany(
            f"INSERT INTO {t}_pending VALUES (?, ?, ?, ?, ?)",
            [(sid, key, seq, length, orjson.dumps(tf)) for key, seq, tf, length in rows],
        )
        self._db.execute(
            f"UPDATE {t}_sessions SET rows = rows + ?, length = length + ? WHERE sid = ?",
            (len(rows), sum(length for _, _, _, length in rows), sid),
        )
        (waiting,) = self._db.execute(
            f"SELECT count(*) FROM {t}_pending WHERE sid = ?", (sid,)
        ).fetchone()
        if waiting >= PENDING:
            self._post(sid)

    def _post(self, sid: int) -> None:
        """Write the postings and document frequencies of the session's waiting rows."""
        t = self._table
        rows = [
            (key, seq, orjson.loads(tf), length)
            for key, seq, length, tf in self._db.execute(
                f"SELECT id, seq, length, tf FROM {t}_pending WHERE sid = ?", (sid,)
            )
        ]
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
        self._db.execute(f"DELETE FROM {t}_pending WHERE sid = ?", (sid,))

    def unindex(self, sid: int, rows: list[tuple[int, str, int]]) -> None:
        """The reverse of ``index``, for rows ``(key, terms, length)`` about to be replaced:
        a waiting row leaves the pending table, a posted one its postings."""
        if not rows:
            return
        t = self._table
        waiting: set[int] = set()
        for chunk in batches([key for key, _, _ in rows]):
            found = self._db.execute(
                f"SELECT id FROM {t}_pending WHERE sid = ? AND id IN ({marks(chunk)})",
                (sid, *chunk),
            )
            waiting.update(key for (key,) in found)
        self._db.executemany(
            f"DELETE FROM {t}_pending WHERE sid = ? AND id = ?", [(sid, key) for key in waiting]
        )
        terms = [
            (key, term)
            for key, text, _ in rows
            if key not in waiting
            for term in (text or "").split()
        ]
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
            f"UPDATE {t}_sessions SET rows = rows - ?, length = length - ?,"
            " replaced = replaced + 1 WHERE sid = ?",
            (len(rows), sum(length or 0 for _, _, length in rows), sid),
        )

    def forget(self, session_id: str) -> None:
        """Drop the session's postings, totals and users."""
        t = self._table
        row = self._db.execute(
            f"SELECT sid FROM {t}_sessions WHERE session_id = ?", (session_id,)
        ).fetchone()
        if row is not None:
            self._kept.pop(row[0], None)
            for part in ("postings", "pending", "users", "sessions"):
                self._db.execute(f"DELETE FROM {t}_{part} WHERE sid = ?", row)

    # Searching.

    def search(
        self, scope: Scope, query: dict[str, int], depth: int, budget: int
    ) -> list[tuple[int, int, float]]:
        """``(key, seq, score)`` of the best ``depth`` rows for ``query`` (``term -> count``)
        in the scope, reading about ``budget`` postings at most (``ranking.best``): from the
        session's lexicon where one can be kept, else from the tables."""
        if scope.user_id is None and self._numpy is not None:
            lexicon = self._lexicon(scope.session_id, list(query)) if query else None
            if lexicon is None:
                return []
            plan = ranking.plan(query, lexicon.statistics(query), budget)
            if plan is None:
                return []
            return lexicon.best(plan, depth)
        sids = self._sids(scope)
        if not query or not sids:
            return []
        self._post_waiting(sids)
        plan = ranking.plan(query, self._statistics(sids, list(query)), budget)
        if plan is None:
            return []
        return ranking.best(
            plan,
            depth,
            lambda plan, limit: self._read(scope, sids, plan, limit),
            lambda plan, found: self._fill(scope, sids, plan, found),
            ranking.rescored(lambda terms, keys: self._postings(sids, terms, keys)),
        )

    def _lexicon(self, session_id: str, terms: list[str]) -> Lexicon | None:
        """The session's postings of ``terms`` (and of those searched before) in memory, up
        to date (None: it has none), in one read transaction: what was added since the
        lexicon last looked, and the postings of the terms it lacks."""
        t = self._table
        self._db.execute("BEGIN")
        try:
            row = self._db.execute(
                f"SELECT sid, rows, length, replaced FROM {t}_sessions WHERE session_id = ?",
                (session_id,),
            ).fetchone()
            if row is None:
                return None
            sid, rows, length, replaced = row
            (newest,) = self._db.execute(f"SELECT coalesce(max(id), 0) FROM {t}").fetchone()
            lexicon = self._kept.pop(sid, None)
            if lexicon is not None and lexicon.replaced == replaced and lexicon.checked < newest:
                self._catch_up(lexicon, sid, session_id, newest)
            if lexicon is None or lexicon.state != (rows, length, replaced):
                # new, or rows went or were replaced in place: started again
                lexicon = Lexicon(self._numpy)
                lexicon.rows, lexicon.length, lexicon.replaced = rows, length, replaced
                lexicon.checked = newest
            if missing := lexicon.missing(terms):
                lexicon.add(self._read_postings(sid, missing, 0, lexicon.checked), missing)
        finally:
            self._db.execute("COMMIT")
        self._kept[sid] = lexicon
        while (
            len(self._kept) > 1 and sum(k.postings for k in self._kept.values()) > LEXICON_POSTINGS
        ):
            self._kept.popitem(last=False)  # never the one searched now
        return lexicon

    def _catch_up(self, lexicon: Lexicon, sid: int, session_id: str, newest: int) -> None:
        """Add the session's rows with keys in ``(lexicon.checked, newest]`` to ``lexicon``:
        their number, length and postings of the terms it holds."""
        t, after = self._table, lexicon.checked
        rows = self._db.execute(  # along the keys added since (``+`` keeps the index out)
            f"SELECT terms, length FROM {t} WHERE id > ? AND id <= ? AND +session_id = ?"
            " AND terms IS NOT NULL",
            (after, newest, session_id),
        ).fetchall()
        held = lexicon.terms
        terms = sorted({term for text, _ in rows for term in text.split() if term in held})
        if terms:
            lexicon.add(self._read_postings(sid, terms, after, newest))
        lexicon.rows += len(rows)
        lexicon.length += sum(length for _, length in rows)
        lexicon.checked = newest

    def _read_postings(
        self, sid: int, terms: Sequence[str], after: int, through: int
    ) -> Iterator[TermPostings]:
        """Each of ``terms`` with the session's postings of it ``(key, seq, tf, length)``,
        keys in ``(after, through]`` in key order, the waiting rows' among them: a query a
        term, numbers only, so that no row is regrouped in Python (a common term has
        thousands)."""
        waiting = self._waiting(sid, terms, after, through)
        for term in terms:
            rows = self._db.execute(
                f"SELECT id, seq, tf, length FROM {self._table}_postings WHERE sid = ?"
                f" AND term = ? AND id > ? AND id <= ? AND id < {COUNT_ID} ORDER BY id",
                (sid, term, after, through),
            ).fetchall()
            if more := waiting.get(term):
                posted = rows[-1][0] if rows else 0
                rows += more
                if posted > more[0][0]:  # a posted row replaced in place: it waits now
                    rows.sort()
            yield term, rows

    def _waiting(
        self, sid: int, terms: Sequence[str], after: int, through: int
    ) -> dict[str, list[tuple[int, int, int, int]]]:
        """The postings of ``terms`` in the session's waiting rows with keys in ``(after,
        through]``, by term, in key order."""
        found: dict[str, list[tuple[int, int, int, int]]] = {}
        rows = self._db.execute(
            f"SELECT id, seq, length, tf FROM {self._table}_pending"
            " WHERE sid = ? AND id > ? AND id <= ? ORDER BY id",
            (sid, after, through),
        ).fetchall()
        if rows:
            read = [(key, seq, length, self._frequencies(tf)) for key, seq, length, tf in rows]
            for term in terms:
                hits = [(key, seq, tf[term], n) for key, seq, n, tf in read if term in tf]
                if hits:
                    found[term] = hits
        return found

    def _frequencies(self, stored: bytes) -> dict[str, int]:
        """A waiting row's ``term -> tf``, read once: searches read the same rows again."""
        found = self._decoded.get(stored)
        if found is None:
            if len(self._decoded) >= DECODED:
                self._decoded.clear()
            found = self._decoded[stored] = orjson.loads(stored)
        return found

    def _post_waiting(self, sids: list[int]) -> None:
        """Post the waiting rows of these sessions, in a transaction of its own: a search of
        the tables reads postings and document frequencies only from there."""
        t = self._table
        waiting: list[int] = []
        for batch in batches(sids, _SESSIONS):
            waiting += [
                sid
                for (sid,) in self._db.execute(
                    f"SELECT DISTINCT sid FROM {t}_pending WHERE sid IN ({marks(batch)})", batch
                )
            ]
        if not waiting:
            return
        self._db.execute("BEGIN IMMEDIATE")
        try:
            for sid in waiting:
                self._post(sid)
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

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
        for batch in batches(sids, _SESSIONS):
            n, total = self._db.execute(
                f"SELECT coalesce(sum(rows), 0), coalesce(sum(length), 0) FROM {t}_sessions"
                f" WHERE sid IN ({marks(batch)})",
                batch,
            ).fetchone()
            rows += n
            length += total
            frequencies.update(
                dict(
                    self._db.execute(
                        f"SELECT term, sum(tf) FROM {t}_postings WHERE sid IN ({marks(batch)})"
                        f" AND term IN ({marks(terms)}) AND id = {COUNT_ID} GROUP BY term",
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
        for batch in batches(sids, _SESSIONS):
            session_marks = ", ".join(f":s{i}" for i in range(len(batch)))
            rows = self._db.execute(
                f"WITH q (term, weight) AS (VALUES {terms})"
                " SELECT s.id, s.seq, s.units FROM (SELECT id, max(seq) AS seq,"
                f" sum(units) AS units FROM (SELECT p.id, p.seq, {_UNITS} AS units FROM q"
                f" JOIN {t}_postings AS p ON p.sid IN ({session_marks}) AND p.term = q.term"
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
        for batch in batches(sids, _SESSIONS):
            for chunk in batches(keys, BATCH):
                yield from self._db.execute(
                    f"SELECT id, term, tf, length FROM {self._table}_postings"
                    f" WHERE sid IN ({marks(batch)}) AND term IN ({marks(terms)})"
                    f" AND id IN ({marks(chunk)})",
                    (*batch, *terms, *chunk),
                ).fetchall()


def marks(batch: Sequence[object]) -> str:
    """The ``?`` placeholders of one parameter per item."""
    return ", ".join("?" * len(batch))


def batches(
    items: Sequence[str] | Sequence[int], size: int = BATCH
) -> Iterator[Sequence[str] | Sequence[int]]:
    """``items`` in slices of ``size``, each within SQLite's limit on host parameters."""
    for start in range(0, len(items), size):
        yield items[start : start + size]
