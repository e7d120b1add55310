"""A session's vectors kept in memory between searches (``vectors.Matrix``).

A search by meaning scores the query against every vector of the session. The
archive keeps each session's vectors in memory and reads only the rows added
since its last search, so a search costs the same whatever the session's
size. These tests hold it to what reading every vector again would rank:
after any mix of writes, in this archive or in another one on the same file
(another process), a search ranks exactly as an archive that never searched.
"""

from __future__ import annotations

import contextlib
import hashlib
import sqlite3
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctxwindow import ContextManager, Entry
from ctxwindow.archive import Archive, PostgresArchive, base, vectors
from ctxwindow.archive.sqlite import SQLiteArchive
from ctxwindow.archive.vectors import Matrix, pack
from ctxwindow.stores.memory import MemoryStore
from tests.support.archives import drop_tables

WORDS = ["parcel", "depot", "invoice", "猫", "寿司", "🚚", "refund", "Leeds"]


class HashEmbedder:
    """Texts to 4-dimensional vectors from their hash: ties and near-ties are common."""

    dim = 4

    def embed(self, texts: list[str]) -> list[list[float]]:
        return [[b % 3 - 1.0 for b in hashlib.sha256(t.encode()).digest()[:4]] for t in texts]


def archive_at(path: Path) -> SQLiteArchive:
    return SQLiteArchive(str(path), embedder=HashEmbedder())


Opener = Callable[[], Archive]


@contextlib.contextmanager
def shared_storage(
    backend: str, tmp_path: Path, name: str, request: pytest.FixtureRequest
) -> Iterator[Opener]:
    """Opens archives on one SQLite file or one PostgreSQL table (dropped afterwards): each
    archive opened is another process's view of the same rows."""
    if backend == "sqlite":
        path = tmp_path / f"{name}.db"
        yield lambda: archive_at(path)
        return
    url = request.getfixturevalue("postgres_url")
    table = f"ctxwindow_archive_test_{uuid.uuid4().hex[:12]}"
    try:
        yield lambda: PostgresArchive(url, table=table, embedder=HashEmbedder())
    finally:
        drop_tables([table])


def ranked(archive: Archive, session: str, query: str, before: int | None) -> list[Any]:
    hits = archive.search(session, query, k=6, before=before)
    return [(h.entry.id, round(h.score, 9), h.lexical_rank, h.dense_rank) for h in hits]


texts = st.lists(st.sampled_from(WORDS), min_size=1, max_size=3).map(" ".join)
operations = st.lists(
    st.one_of(
        st.tuples(
            st.just("index"), st.sampled_from("ab"), st.booleans(), st.lists(texts, max_size=5)
        ),
        st.tuples(st.just("forget"), st.sampled_from("ab"), st.booleans(), st.just([])),
        st.tuples(st.just("search"), st.sampled_from("ab"), texts, st.none() | st.integers(1, 30)),
    ),
    min_size=1,
    max_size=12,
)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(steps=operations)
@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_a_search_ranks_as_one_that_read_every_vector(
    tmp_path: Path, request: pytest.FixtureRequest, backend: str, steps: list[Any]
) -> None:
    """Writes by this archive or another on the same rows (``other``), forgets, searches in
    any order: each search equals a fresh archive's, which reads every vector."""
    name = hashlib.sha256(repr(steps).encode()).hexdigest()[:12]
    with shared_storage(backend, tmp_path, name, request) as open_archive:
        check_steps(open_archive, steps)


def check_steps(archive_at: Opener, steps: list[Any]) -> None:
    mine, other = archive_at(), archive_at()
    seqs = {"a": 0, "b": 0}
    try:
        for kind, session, arg, more in steps:
            if kind == "index":
                writer = other if arg else mine
                batch = []
                for text in more:
                    seqs[session] += 1
                    n = seqs[session]
                    batch.append(Entry({"role": "user", "content": text}, 3, n, id=f"{session}{n}"))
                writer.index(session, batch)
            elif kind == "forget":
                (other if arg else mine).forget(session)
            else:
                with archive_at() as fresh:
                    assert ranked(mine, session, arg, more) == ranked(fresh, session, arg, more)
        for session in "ab":
            with archive_at() as fresh:
                assert ranked(mine, session, "parcel 猫", None) == ranked(
                    fresh, session, "parcel 猫", None
                )
    finally:
        mine.close()
        other.close()


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_a_session_searched_again_reads_only_what_was_added(
    tmp_path: Path, request: pytest.FixtureRequest, backend: str
) -> None:
    """The second search reads no vector again; one entry added: that row alone."""
    read: list[int] = []
    with shared_storage(backend, tmp_path, "a", request) as open_archive, open_archive() as archive:
        reading = archive._vectors_after

        def counted(session_id: str, key: int) -> list[Any]:
            rows = reading(session_id, key)
            read.append(len(rows))
            return rows

        archive._vectors_after = counted  # type: ignore[method-assign]
        searched_again(archive)
    assert read == [50, 1]  # the whole session once, then the one row added


def searched_again(archive: Archive) -> None:
    archive.index(
        "s", [Entry({"role": "user", "content": f"parcel {i}"}, 3, i + 1) for i in range(50)]
    )
    archive.search("s", "parcel depot")
    archive.search("s", "parcel refund")
    archive.index("s", [Entry({"role": "user", "content": "depot 🚚"}, 3, 51)])
    archive.search("s", "depot")


def test_the_vectors_kept_stay_under_their_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(base, "MATRIX_ROWS", 10)
    archive = archive_at(tmp_path / "a.db")
    for session in ("s1", "s2", "s3"):
        archive.index(
            session, [Entry({"role": "user", "content": f"parcel {i}"}, 3, i + 1) for i in range(6)]
        )
        archive.search(session, "parcel")
    kept = archive._matrices
    assert sum(len(m) for m in kept.values()) <= 10 and list(kept) == ["s3"]  # the newest


@settings(max_examples=100, deadline=None)
@given(
    rows=st.lists(
        st.tuples(st.integers(1, 40), st.lists(st.integers(-2, 2), min_size=3, max_size=3)),
        max_size=40,
    ),
    query=st.lists(st.integers(-2, 2), min_size=3, max_size=3),
    depth=st.integers(1, 8),
    before=st.none() | st.integers(1, 41),
)
def test_with_or_without_numpy_the_same_rows_rank_alike(
    rows: list[Any], query: list[int], depth: int, before: int | None
) -> None:
    """The numpy product and the pure-Python one: the same rows, scores and floor."""
    stored = [(key, seq, pack([float(x) for x in v])) for key, (seq, v) in enumerate(rows, 1)]
    with_numpy = Matrix(3)
    with_numpy.add(stored)
    without = Matrix(3)
    without._numpy = None
    without._vectors = []
    without.add(stored)
    q = [float(x) for x in query]
    fast, fast_floor = with_numpy.best(q, depth, before, 0.2)
    slow, slow_floor = without.best(q, depth, before, 0.2)
    assert [(k, s) for k, s, _ in fast] == [(k, s) for k, s, _ in slow]
    assert [c for _, _, c in fast] == pytest.approx([c for _, _, c in slow])
    assert fast_floor == pytest.approx(slow_floor)


def test_vectors_of_another_size_never_rank() -> None:
    matrix = Matrix(2)
    matrix.add([(1, 1, pack([1.0, 0.0])), (2, 2, pack([1.0, 0.0, 0.0])), (3, 3, None)])
    assert (len(matrix), matrix.rows) == (1, 3)
    assert [key for key, _, _ in matrix.best([1.0, 0.0], 5, None, 0.0)[0]] == [1]
    assert vectors.Matrix(2).best([1.0, 0.0], 5, None, 0.0) == ([], 0.0)


def test_a_session_forgotten_elsewhere_and_archived_again_is_not_ranked_on_its_former_vectors(
    tmp_path: Path,
) -> None:
    """Another process forgets the session, this one archives as many new turns: without
    keys that only grow, SQLite gave them the former keys and the matrix kept the former
    vectors (found by the property test above)."""
    path = tmp_path / "a.db"
    with archive_at(path) as mine, archive_at(path) as other:
        other.index("a", [Entry({"role": "user", "content": "猫"}, 3, 1, id="a1")])
        mine.search("a", "猫")
        other.forget("a")
        mine.index("a", [Entry({"role": "user", "content": "parcel depot"}, 3, 2, id="a2")])
        with archive_at(path) as fresh:
            assert ranked(fresh, "a", "parcel depot", None)[0][3] == 1  # by meaning too
            assert ranked(mine, "a", "parcel depot", None) == ranked(
                fresh, "a", "parcel depot", None
            )


def test_a_table_made_before_keys_only_grew_keeps_no_matrix(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    with sqlite3.connect(path) as db:  # the table as archives made it before AUTOINCREMENT
        db.execute(
            "CREATE TABLE ctxwindow_archive (id INTEGER PRIMARY KEY, session_id TEXT NOT NULL,"
            " entry_id TEXT NOT NULL, user_id TEXT, seq INTEGER NOT NULL, entry TEXT NOT NULL,"
            " vector BLOB, terms TEXT, length INTEGER, UNIQUE (session_id, entry_id))"
        )
    with archive_at(path) as archive:
        archive.index("a", [Entry({"role": "user", "content": "parcel 猫"}, 3, 1, id="a1")])
        assert [h.entry.id for h in archive.search("a", "猫")] == ["a1"]
        assert archive._matrices == {}


class FormCounting(HashEmbedder):
    """Counts each text embedded, by form (query or passage)."""

    def __init__(self) -> None:
        self.queries: list[str] = []
        self.passages: list[str] = []

    def embed_queries(self, texts: list[str]) -> list[list[float]]:
        self.queries += texts
        return self.embed(texts)

    def embed_passages(self, texts: list[str]) -> list[list[float]]:
        self.passages += texts
        return self.embed(texts)


def test_a_user_turn_is_embedded_once_for_its_search_and_its_archiving() -> None:
    """A user turn is archived in the query form and searched for as it is asked: whichever
    comes first embeds it, the other takes that vector. Replies are passages."""
    embedder = FormCounting()
    with SQLiteArchive(embedder=embedder) as archive:
        cm = ContextManager(MemoryStore(), budget=200, archive=archive, prefetch=True)
        for i in range(30):
            cm.add("s", {"role": "user", "content": f"where did parcel {i} go?"})
            cm.build("s")
            cm.add("s", {"role": "assistant", "content": f"parcel {i} left the depot"})
        cm.drain()
        asked = [f"where did parcel {i} go?" for i in range(30)]
        assert sorted(embedder.queries) == sorted(asked)  # once each: search and archive
        assert embedder.passages and not set(embedder.passages) & set(asked)
        archive.index("s", [Entry({"role": "user", "content": "a new one"}, 3, 999, id="n")])
        archive.search("s", "a new one")
        assert embedder.queries.count("a new one") == 1  # archived first, then searched
