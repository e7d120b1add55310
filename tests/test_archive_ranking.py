"""Ranking by words with a bounded number of postings read (``ctxwindow.archive.ranking``).

The plan is a pure function: the terms read are the rarest, within the
budget. Both backends keep per-session postings: a rare word is found among
thousands of common ones, common words alone still give k hits, replacing or
forgetting entries leaves the statistics of the survivors, and other
sessions never change a session's ranking. On one session, SQLite's scores
are those of the former FTS5 ``bm25()`` search (the reference, rebuilt here),
and a search does the same work in a session four times larger. PostgreSQL
tests skip as in tests/test_archive.py.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxwindow import Entry
from ctxwindow.archive import SQLiteArchive, ranking, sqlite_postings
from ctxwindow.archive.text import entry_text, index_text, query_terms
from ctxwindow.archive.tokenizer import FTS5Tokenizer
from ctxwindow.stores.base import entry_to_json

from .support.archives import MakeArchive

# Words whose terms are no stop word's term ("one" is "on"): the former search
# matched those against stop words, the postings do not (tokenizer.py).
WORDS = (
    *("kettle", "garden", "river", "piano", "window", "lantern", "harbor", "meadow", "violin"),
    *("orchard", "candle", "pepper", "shipping", "shipped", "ships", "parcel", "monday"),
    *("lisbon", "warehouse", "flight", "terminal", "tea", "coffee", "café", "naïve", "ABC123"),
    *("东京", "退货", "政策", "航班", "配達", "倉庫", "🎉", "🍕"),
)
STOPS = ("the", "my", "of", "and", "to", "is", "was", "when")


def entries(*texts: str, start: int = 1) -> list[Entry]:
    return [Entry({"role": "user", "content": text}, 5, start + i) for i, text in enumerate(texts)]


# The plan.

frequencies = st.dictionaries(
    st.text("abcdefgh", min_size=1, max_size=3), st.integers(0, 500), min_size=1, max_size=12
)


@given(frequencies, st.integers(1, 1000), st.integers(1, 3))
def test_the_plan_reads_the_rarest_terms_within_the_budget(
    df: dict[str, int], budget: int, count: int
) -> None:
    stats = ranking.Statistics(rows=1000, length=20_000, frequencies=df)
    plan = ranking.plan(dict.fromkeys(df, count), stats, budget)
    found = {term for term, n in df.items() if n > 0}
    if plan is None:
        assert not found
        return
    assert set(plan.read) | set(plan.rescore) == found and not set(plan.read) & set(plan.rescore)
    read = sum(df[term] for term in plan.read)
    assert read <= budget
    if plan.rescore:  # the first term left over did not fit, nor any after it
        first = next(iter(plan.rescore))
        assert read + df[first] > budget and plan.fill == budget - read
        assert all(df[term] <= df[first] for term in plan.read)
        assert list(plan.rescore) == sorted(plan.rescore, key=lambda t: (df[t], t))
    else:
        assert plan.fill == 0
    weights = {**plan.read, **plan.rescore}
    assert weights == {t: count * ranking.idf(1000, df[t]) for t in found}


def test_everything_is_read_when_it_fits() -> None:
    stats = ranking.Statistics(10, 100, {"a": 3, "b": 5, "c": 2})
    plan = ranking.plan({"a": 1, "b": 2, "c": 1, "zzz": 1}, stats, budget=10)
    assert plan is not None
    assert list(plan.read) == ["c", "a", "b"] and plan.rescore == {} and plan.fill == 0
    assert plan.read["b"] == 2 * ranking.idf(10, 5) and plan.average_length == 10


def test_common_words_only_fill_from_the_rarest() -> None:
    stats = ranking.Statistics(1000, 10_000, {"a": 600, "b": 300})
    plan = ranking.plan({"a": 1, "b": 1}, stats, budget=100)
    assert plan is not None
    assert plan.read == {} and list(plan.rescore) == ["b", "a"] and plan.fill == 100


def test_idf_is_floored_for_words_in_half_the_rows() -> None:
    assert ranking.idf(10, 5) == 1e-6 and ranking.idf(10, 9) == 1e-6
    assert ranking.idf(10, 1) > ranking.idf(10, 2) > 0


# The same scores as the former FTS5 search, on one session.


def fts5_reference(texts: list[str], query: str) -> list[tuple[int, float]]:
    """``(seq, score)`` best first: the former index (body + a one-token scope column) and
    the former query, over every row."""
    db = sqlite3.connect(":memory:")
    db.execute(
        "CREATE VIRTUAL TABLE f USING fts5(body, scope,"
        " tokenize = 'porter unicode61 remove_diacritics 2')"
    )
    db.executemany(
        "INSERT INTO f (rowid, body, scope) VALUES (?, ?, 'sabc')",
        [(seq, index_text(entry_text(e))) for seq, e in enumerate(entries(*texts), 1)],
    )
    terms = " OR ".join('"' + term.replace('"', '""') + '"' for term in query_terms(query))
    if not terms:
        return []
    rows = db.execute(
        "SELECT rowid, -bm25(f, 1.0, 0.0) AS score FROM f WHERE f MATCH ?"
        " ORDER BY score DESC, rowid",
        (f"body : ({terms})",),
    ).fetchall()
    return [(seq, score) for seq, score in rows]


texts = st.lists(
    st.lists(st.sampled_from(WORDS + STOPS), min_size=1, max_size=12).map(" ".join),
    min_size=1,
    max_size=25,
)
queries = st.lists(st.sampled_from(WORDS + STOPS), min_size=1, max_size=6).map(" ".join)


@given(texts, queries)
def test_one_session_ranks_as_the_former_fts5_search(rows: list[str], query: str) -> None:
    with SQLiteArchive() as archive:
        archive.index("s", entries(*rows))
        hits = archive.search("s", query, k=len(rows))
    expected = fts5_reference(rows, query)
    # Scores are summed in units of 1e-12 (ranking.UNITS).
    scores = pytest.approx([score for _, score in expected], rel=1e-9, abs=1e-11)
    assert [hit.score for hit in hits] == scores
    # Equal scores may be ordered differently by float noise in FTS5: compare by score.
    assert sorted(hit.entry.seq for hit in hits) == sorted(seq for seq, _ in expected)


# Bounded work.

COMMON = ("note", "list", "today", "okay", "thanks", "sure", "great", "maybe")


def chatter(n: int, start: int = 1) -> list[Entry]:
    """Rows of common words only: each in a quarter of the rows or more."""
    return entries(
        *(" ".join(COMMON[(i + j) % len(COMMON)] for j in range(4)) for i in range(n)),
        start=start,
    )


def test_a_rare_word_finds_its_entry_among_thousands_of_common_ones(
    make_archive: MakeArchive,
) -> None:
    archive = make_archive(reads_per_hit=4)  # 200 postings for 50 hits
    rows = chatter(5000)
    rows[3000] = Entry({"role": "user", "content": "note: the zeppelin lands today"}, 5, 3001)
    archive.index("s", rows)
    hits = archive.search("s", "when does the zeppelin land? note it today, thanks")
    assert hits[0].entry.seq == 3001
    assert len(hits) == 5  # the rest of the budget went to the newest rows with "note"
    assert all(hit.entry.seq > 4500 for hit in hits[1:])


def test_a_query_of_common_words_still_returns_k_hits(
    make_archive: MakeArchive,
) -> None:
    """Every term is over budget: the newest postings of the rarest are read and ranked."""
    archive = make_archive(reads_per_hit=1)
    archive.index("s", chatter(2000))
    hits = archive.search("s", "great note, thanks", k=50)
    assert len(hits) == 50
    assert all(hit.entry.seq > 1900 for hit in hits)  # among the newest 50 postings
    assert [hit.score for hit in hits] == sorted((hit.score for hit in hits), reverse=True)


def test_when_every_posting_fits_the_bound_changes_nothing(
    make_archive: MakeArchive,
) -> None:
    rows = [f"{a} {b} {c}" for a, b, c in zip(WORDS, WORDS[3:], WORDS[7:], strict=False)] * 8
    bounded, unbounded = make_archive(), make_archive(reads_per_hit=10**9)
    for archive in (bounded, unbounded):
        archive.index("s", entries(*rows))
    for query in ("kettle garden", "shipping monday tea", "东京 🎉", "river"):
        expected = [(h.entry.seq, h.score) for h in unbounded.search("s", query, k=50)]
        assert [(h.entry.seq, h.score) for h in bounded.search("s", query, k=50)] == expected


def test_a_user_wide_search_is_bounded_too(
    make_archive: MakeArchive,
) -> None:
    archive = make_archive(reads_per_hit=2)
    archive.index("s1", chatter(600), user_id="u1")
    archive.index("s2", [*chatter(600), *entries("the zeppelin note", start=601)], user_id="u1")
    archive.index("s3", entries("zeppelin of another user"), user_id="u2")
    hits = archive.search("s1", "zeppelin note", k=50, user_id="u1")
    assert (hits[0].session_id, hits[0].entry.seq) == ("s2", 601)
    assert {hit.session_id for hit in hits} <= {"s1", "s2"} and len(hits) == 50


def vm_steps(archive: SQLiteArchive, queries: list[str]) -> int:
    """SQLite virtual-machine instructions run by the searches: work, measured without a clock."""
    steps = 0

    def count() -> int:
        nonlocal steps
        steps += 1
        return 0

    archive._db.set_progress_handler(count, 100)
    for query in queries:
        archive.search("s", query, k=20)
    archive._db.set_progress_handler(None, 0)
    return steps


@pytest.mark.parametrize("lexicons", [False, True], ids=["tables", "lexicons"])
def test_a_search_does_the_same_work_in_a_session_four_times_larger(lexicons: bool) -> None:
    """Searched in the tables, a search reads the same postings; with the session's lexicon
    kept in memory (numpy), a search of terms searched before reads no posting again."""

    def session(n: int) -> list[Entry]:
        """Common words, and a rare word per 100 rows."""
        rows = chatter(n)
        for i in range(0, n, 100):
            rows[i] = Entry({"role": "user", "content": f"zeppelin{i // 100} note"}, 5, i + 1)
        return rows

    queries = ["zeppelin3 note thanks", "great note today", "zeppelin7 maybe okay sure"]
    work = {}
    for reads_per_hit in (5, 10**9):
        with (
            SQLiteArchive(reads_per_hit=reads_per_hit) as small,
            SQLiteArchive(reads_per_hit=reads_per_hit) as large,
        ):
            for archive, n in ((small, 2000), (large, 8000)):
                archive._postings.keep_lexicons(lexicons)
                archive.index("s", session(n))
                for query in queries:  # a lexicon reads each term's postings once
                    archive.search("s", query, k=1)
            work[reads_per_hit] = vm_steps(large, queries) / vm_steps(small, queries)
    assert work[5] < 1.3  # bounded: the same postings read
    if lexicons:
        assert work[10**9] < 1.3  # no posting read from the tables again
    else:
        assert work[10**9] > 3  # every posting: four times the rows, about four times the work


# Statistics stay right through replacing and forgetting.

operations = st.lists(
    st.tuples(
        st.sampled_from(["a", "b"]),  # session
        st.integers(1, 6),  # seq (and entry id)
        st.lists(st.sampled_from(WORDS), min_size=1, max_size=5).map(" ".join),
        st.booleans(),  # forget the session before
    ),
    min_size=1,
    max_size=15,
)


@contextmanager
def pending(rows: int) -> Iterator[None]:
    """``sqlite_postings.PENDING`` set for one drawn example (a fixture would span them all)."""
    was, sqlite_postings.PENDING = sqlite_postings.PENDING, rows
    try:
        yield
    finally:
        sqlite_postings.PENDING = was


@given(operations, queries, st.sampled_from([1, 2, 3, 64]))
def test_replacing_and_forgetting_leave_the_statistics_of_the_survivors(
    steps: list[tuple[str, int, str, bool]], query: str, waiting: int
) -> None:
    """With postings posted at once, or left waiting for 2, 3 or 64 rows; searched from the
    session's lexicon, then from the tables."""
    kept: dict[str, dict[int, str]] = {"a": {}, "b": {}}
    with pending(waiting), SQLiteArchive() as archive:
        for session, seq, text, forget in steps:
            if forget:
                archive.forget(session)
                kept[session] = {}
            archive.index(session, [Entry({"role": "user", "content": text}, 5, seq, id=str(seq))])
            kept[session][seq] = text
        for session, survivors in kept.items():
            with SQLiteArchive() as fresh:
                fresh.index(
                    session,
                    [
                        Entry({"role": "user", "content": text}, 5, seq, id=str(seq))
                        for seq, text in sorted(survivors.items())
                    ],
                )
                expected = [(h.entry.seq, h.score) for h in fresh.search(session, query, k=10)]
            found = archive.search(session, query, k=10)  # from the lexicon: rows as they wait
            assert [(h.entry.seq, h.score) for h in found] == expected
            archive._postings.keep_lexicons(False)  # the tables: the waiting rows posted first
            found = archive.search(session, query, k=10)
            assert [(h.entry.seq, h.score) for h in found] == expected
            archive._postings.keep_lexicons(True)


def test_replacing_and_forgetting_on_every_backend(
    make_archive: MakeArchive,
) -> None:
    archive, fresh = make_archive(), make_archive()
    first, second, third = entries("kettle garden", "river piano kettle", "tea monday")
    archive.index("a", [first, second, third])
    archive.index("b", entries("kettle kettle lisbon"))
    second.message = {"role": "user", "content": "kettle tea"}
    assert archive.index("a", [second]) == 1  # replaces it
    archive.index("b", entries("kettle again"), user_id="u")
    archive.forget("b")
    fresh.index("a", entries("kettle garden", "kettle tea", "tea monday"))
    for query in ("kettle", "tea piano", "river"):
        expected = [(h.entry.seq, h.score) for h in fresh.search("a", query)]
        assert [(h.entry.seq, h.score) for h in archive.search("a", query)] == expected
    assert archive.search("b", "kettle") == [] and archive.search("x", "kettle", user_id="u") == []


def test_other_sessions_never_change_a_sessions_ranking(
    make_archive: MakeArchive,
) -> None:
    archive = make_archive()
    archive.index("a", entries("zeppelin over the bay", "kettle on the stove", "tea"))
    before = [(hit.entry.seq, hit.score) for hit in archive.search("a", "kettle zeppelin")]
    archive.index("b", entries(*(f"zeppelin sighting {i}" for i in range(30))))
    after = [(hit.entry.seq, hit.score) for hit in archive.search("a", "kettle zeppelin")]
    assert after == before


# The tokenizer.


def test_the_tokenizer_gives_fts5s_terms() -> None:
    db = sqlite3.connect(":memory:")
    tokenizer = FTS5Tokenizer(db)
    text = index_text("Shipping 東京駅 café, naïve ÜBER ships! 🎉 one of the others")
    db.execute(
        "CREATE VIRTUAL TABLE f USING fts5(x, tokenize='porter unicode61 remove_diacritics 2')"
    )
    db.execute("CREATE VIRTUAL TABLE v USING fts5vocab(f, instance)")
    db.execute("INSERT INTO f VALUES (?)", (text,))
    fts5 = dict(db.execute("SELECT term, count(*) FROM v GROUP BY term").fetchall())
    frequency, length = tokenizer.count(text)
    assert length == sum(fts5.values())
    assert frequency == {t: n for t, n in fts5.items() if t not in tokenizer.stop_terms}
    assert {"on", "other", "the", "of"} <= tokenizer.stop_terms
    assert tokenizer.query(query_terms("shipped to 東京, one of the others")) == {
        "ship": 1,
        "東京": 1,
    }


def test_the_tokenizer_forgets_words_when_its_cache_is_full(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from ctxwindow.archive import tokenizer as module

    monkeypatch.setattr(module, "_CACHED", 200)
    tokenizer = FTS5Tokenizer(sqlite3.connect(":memory:"))
    first = tokenizer.count_all([f"word{i} shipping" for i in range(150)])
    again = tokenizer.count_all([f"word{i} shipping" for i in range(150)])
    assert first == again and first[7] == ({"word7": 1, "ship": 1}, 2)


def test_a_batch_that_fills_the_cache_keeps_the_words_it_knew_already(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Known words beside enough new ones to fill the cache: the cache starts again with
    all the batch's words (it used to keep only the new ones, and the known ones raised
    KeyError: a long session's backlog could not be archived)."""
    from ctxwindow.archive import tokenizer as module

    monkeypatch.setattr(module, "_CACHED", 200)
    tokenizer = FTS5Tokenizer(sqlite3.connect(":memory:"))
    tokenizer.count_all(["turn shipping 東京"])
    counted = tokenizer.count_all([f"turn {i}: shipping 東京" for i in range(300)])
    assert counted[299] == ({"turn": 1, "299": 1, "ship": 1, "東京": 1}, 4)


# An archive made by an earlier version (FTS5, no postings).


def test_an_archive_of_the_fts5_version_is_indexed_when_opened(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    rows = [
        ("s1", entries("the parcel ships on monday", "tea in lisbon"), None),
        ("s2", entries("kettle garden"), "u1"),
    ]
    with sqlite3.connect(path) as db:  # the tables of the FTS5 version (its FTS5 rows unused)
        db.execute(
            "CREATE TABLE ctxwindow_archive (id INTEGER PRIMARY KEY, session_id TEXT NOT NULL,"
            " entry_id TEXT NOT NULL, user_id TEXT, seq INTEGER NOT NULL, entry TEXT NOT NULL,"
            " vector BLOB, UNIQUE (session_id, entry_id))"
        )
        db.execute("CREATE VIRTUAL TABLE ctxwindow_archive_fts USING fts5(body, scope)")
        db.execute(
            "CREATE TABLE ctxwindow_archive_watermark"
            " (session_id TEXT PRIMARY KEY, through INTEGER NOT NULL) WITHOUT ROWID"
        )
        db.executemany(
            "INSERT INTO ctxwindow_archive (session_id, entry_id, user_id, seq, entry)"
            " VALUES (?, ?, ?, ?, ?)",
            [(s, e.id, user, e.seq, entry_to_json(e)) for s, batch, user in rows for e in batch],
        )
        db.execute("INSERT INTO ctxwindow_archive_watermark VALUES ('s1', 2)")
    with SQLiteArchive(str(path)) as archive:
        assert [h.entry.message["content"] for h in archive.search("s1", "shipped")] == [
            "the parcel ships on monday"
        ]
        assert archive.indexed_through("s1") == 2
        assert [h.session_id for h in archive.search("s1", "kettle", user_id="u1")] == ["s2"]
        tables = {name for (name,) in archive._db.execute("SELECT name FROM sqlite_master")}
    assert "ctxwindow_archive_fts" not in tables


def test_a_postgres_table_of_the_former_version_is_indexed_when_opened(postgres_url: str) -> None:
    import uuid

    import psycopg

    from ctxwindow.archive import PostgresArchive

    table = f"ctxwindow_archive_test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(postgres_url, autocommit=True) as db:  # the former version's tables
        db.execute(
            f"CREATE TABLE {table} (id bigserial PRIMARY KEY, session_id text NOT NULL,"
            " entry_id text NOT NULL, user_id text, seq bigint NOT NULL, entry text NOT NULL,"
            " tsv tsvector NOT NULL, vector real[], UNIQUE (session_id, entry_id))"
        )
        db.execute(f"CREATE INDEX {table}_tsv ON {table} USING gin (tsv)")
        for session, user, batch in (
            ("s1", None, entries("the parcel ships on monday", "tea in lisbon")),
            ("s2", "u1", entries("kettle garden")),
        ):
            for e in batch:
                db.execute(
                    f"INSERT INTO {table} (session_id, entry_id, user_id, seq, entry, tsv)"
                    " VALUES (%s, %s, %s, %s, %s, to_tsvector('english', %s))",
                    (session, e.id, user, e.seq, entry_to_json(e), index_text(entry_text(e))),
                )
    archive = PostgresArchive(postgres_url, table=table)
    try:
        assert [h.entry.message["content"] for h in archive.search("s1", "shipped")] == [
            "the parcel ships on monday"
        ]
        assert [h.session_id for h in archive.search("s1", "kettle", user_id="u1")] == ["s2"]
        archive.index("s1", entries("monday again", start=3))
        assert [h.entry.seq for h in archive.search("s1", "monday")] == [3, 1]
    finally:
        archive.drop()
        archive.close()


# A session's lexicon in memory ranks as the tables do, whoever wrote what.

lexicon_steps = st.lists(
    st.one_of(
        st.tuples(  # index texts (new seqs, or seqs already there: replaced), by which archive
            st.just("index"),
            st.sampled_from("ab"),
            st.booleans(),
            st.lists(st.tuples(st.integers(1, 12), queries), min_size=1, max_size=6),
        ),
        st.tuples(st.just("forget"), st.sampled_from("ab"), st.booleans(), st.just([])),
    ),
    min_size=1,
    max_size=12,
)


@settings(max_examples=150, deadline=None)
@given(lexicon_steps, queries, st.integers(1, 4), st.integers(1, 8), st.sampled_from([1, 3, 64]))
def test_a_sessions_lexicon_ranks_as_the_tables_whoever_wrote(
    tmp_path_factory: pytest.TempPathFactory,
    steps: list[Any],
    query: str,
    reads_per_hit: int,
    k: int,
    waiting: int,
) -> None:
    """This archive keeps each searched session's postings in memory; another on the same
    file (another process) writes, replaces and forgets too. After every step, each search
    of this one ranks exactly as a search of the tables, for a query and for every word (a
    bound low enough to leave terms over and fill): with postings posted at once, or left
    waiting for 3 or 64 rows (this one searches first, reading the rows that wait; the
    search of the tables then posts them)."""
    path = str(tmp_path_factory.mktemp("lexicon") / "archive.db")
    bound = {"reads_per_hit": reads_per_hit, "depth": 1}  # k hits, k x reads_per_hit postings
    with (
        pending(waiting),
        SQLiteArchive(path, **bound) as mine,
        SQLiteArchive(path, **bound) as other,
        SQLiteArchive(path, **bound) as tables,
    ):
        tables._postings.keep_lexicons(False)
        assert mine._postings._numpy is not None  # the tests' install has numpy (dense extra)
        for kind, session, by_other, texts in steps:
            writer = other if by_other else mine
            if kind == "index":
                writer.index(
                    session,
                    [
                        Entry({"role": "user", "content": text}, 5, seq, id=f"{session}{seq}")
                        for seq, text in dict(texts).items()
                    ],
                )
            else:
                writer.forget(session)
            for searched in "ab":
                for asked in (query, " ".join(WORDS)):
                    found = [(h.entry.seq, h.score) for h in mine.search(searched, asked, k=k)]
                    expected = [(h.entry.seq, h.score) for h in tables.search(searched, asked, k=k)]
                    assert found == expected


def test_postings_wait_until_enough_rows_do_and_are_found_meanwhile(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A row's postings wait (one row of the pending table) until ``PENDING`` rows of its
    session do, then all go to the postings together; a search from the lexicon finds the
    waiting rows and writes nothing, a search of the tables posts them first."""
    monkeypatch.setattr(sqlite_postings, "PENDING", 4)

    def state(archive: SQLiteArchive) -> tuple[int, int]:
        """(rows waiting, rows posted)"""
        t = archive._table
        (waiting,) = archive._db.execute(f"SELECT count(*) FROM {t}_pending").fetchone()
        (posted,) = archive._db.execute(
            f"SELECT count(DISTINCT id) FROM {t}_postings WHERE id < ?", (sqlite_postings.COUNT_ID,)
        ).fetchone()
        return waiting, posted

    with SQLiteArchive() as archive, SQLiteArchive() as tables:
        tables._postings.keep_lexicons(False)
        for each in (archive, tables):
            each.index("s", entries("kettle garden", "river piano", "piano lesson monday"))
            assert state(each) == (3, 0)
        assert [h.entry.seq for h in archive.search("s", "piano lesson")] == [3, 2]
        assert state(archive) == (3, 0)  # the lexicon read them where they wait
        assert [h.entry.seq for h in tables.search("s", "piano lesson")] == [3, 2]
        assert state(tables) == (0, 3)  # the tables' search posted them first
        archive.index("s", entries("lantern", start=4))
        assert state(archive) == (0, 4)  # the fourth row: all four posted together
        tables.index("s", entries("lantern", start=4))
        for each in (archive, tables):
            each.index("s", entries("piano again", start=5))
        found = [(h.entry.seq, h.score) for h in archive.search("s", "piano", k=3)]
        assert found == [(h.entry.seq, h.score) for h in tables.search("s", "piano", k=3)]
        assert sorted(seq for seq, _ in found) == [2, 3, 5]
        archive.forget("s")
        assert state(archive) == (0, 0)


@pytest.mark.parametrize("lexicons", [False, True], ids=["tables", "lexicons"])
def test_a_row_replaced_while_it_waits_leaves_the_frequencies_of_the_others(
    monkeypatch: pytest.MonkeyPatch, lexicons: bool
) -> None:
    """Its postings were never written: replacing it takes its waiting row, not the
    document frequencies of the rows posted with the same words."""
    monkeypatch.setattr(sqlite_postings, "PENDING", 3)
    texts = ["kettle garden", "river piano", "tea monday", "kettle tea", "lantern", "violin"]

    def rows(*texts: str, start: int = 1) -> list[Entry]:
        return [replace(entry, id=str(entry.seq)) for entry in entries(*texts, start=start)]

    with SQLiteArchive() as archive, SQLiteArchive() as fresh:
        archive._postings.keep_lexicons(lexicons)
        archive.index("s", rows(*texts[:3]))  # posted together
        archive.index("s", rows("kettle harbor", start=4))  # waits
        archive.index("s", rows(*texts[3:], start=4))  # replaces it, then all posted
        fresh.index("s", rows(*texts))
        for query in ("kettle", "tea kettle", "harbor"):
            expected = [(h.entry.seq, h.score) for h in fresh.search("s", query, k=6)]
            assert [(h.entry.seq, h.score) for h in archive.search("s", query, k=6)] == expected


def test_lexicons_keep_at_most_their_bound_of_postings_dropping_the_oldest_search(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Past ``LEXICON_POSTINGS`` over all sessions, the lexicons searched longest ago go, never
    the one searched now; a session searched again reads its terms again, ranking as before."""
    monkeypatch.setattr(sqlite_postings, "LEXICON_POSTINGS", 50)
    with SQLiteArchive() as archive:
        for session in ("a", "b", "c"):
            archive.index(session, entries(*(f"kettle garden {i}" for i in range(30))))
        first = [(h.entry.seq, h.score) for h in archive.search("a", "kettle garden", k=5)]
        for session in ("b", "c"):
            archive.search(session, "kettle garden", k=5)
        kept = archive._postings._kept
        assert list(kept) == [3]  # 60 postings a session: only the one searched now stays
        assert [(h.entry.seq, h.score) for h in archive.search("a", "kettle garden", k=5)] == first
