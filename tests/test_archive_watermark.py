"""The archive's watermark, on every backend: how far each session is indexed.

``index(..., through=seq)`` records, in the transaction that writes the
entries, that everything of the session up to ``seq`` is archived;
``indexed_through`` reads it back. A manager loading a session queues only
the entries after it. PostgreSQL tests skip as in tests/test_archive.py.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from ctxwindow import Entry
from ctxwindow.archive import Archive, SQLiteArchive
from ctxwindow.archive.base import Document

from .support.archives import MakeArchive

TURNS = [Entry({"role": "user", "content": f"turn {n}: 東京 parcel 📦"}, 7, n) for n in range(10)]


def turn(seq: int) -> Entry:
    return TURNS[seq]


@pytest.fixture
def archive(make_archive: MakeArchive) -> Archive:
    """A fresh archive of each backend."""
    return make_archive()


def test_a_session_never_indexed_has_no_watermark(archive: Archive) -> None:
    assert archive.indexed_through("s") == 0
    archive.index("s", [turn(1), turn(2)])  # the caller said nothing about a watermark
    assert archive.indexed_through("s") == 0


def test_index_through_records_the_watermark_with_the_entries(archive: Archive) -> None:
    assert archive.index("s", [turn(1), turn(2), turn(3)], through=3) == 3
    assert archive.indexed_through("s") == 3
    assert [e.seq for e in archive.at("s", [1, 2, 3])] == [1, 2, 3]


def test_the_watermark_only_rises(archive: Archive) -> None:
    archive.index("s", [turn(5)], through=5)
    archive.index("s", [turn(2)], through=2)  # a slower process's older claim
    assert archive.indexed_through("s") == 5
    archive.index("s", [turn(6)])
    assert archive.indexed_through("s") == 5
    archive.index("s", [turn(9)], through=9)
    assert archive.indexed_through("s") == 9


def test_a_watermark_is_recorded_when_nothing_changed(archive: Archive) -> None:
    """Entries archived already (by another process, say) still move the watermark."""
    archive.index("s", [turn(1), turn(2)])
    assert archive.index("s", [turn(1), turn(2)], through=2) == 0
    assert archive.indexed_through("s") == 2
    assert archive.index("s", [], through=4) == 0
    assert archive.indexed_through("s") == 4


def test_watermarks_are_per_session(archive: Archive) -> None:
    archive.index("a", [turn(1), turn(2)], through=2)
    archive.index("b", [turn(1)], through=1)
    assert (archive.indexed_through("a"), archive.indexed_through("b")) == (2, 1)
    assert archive.indexed_through("c") == 0


def test_forget_clears_the_watermark_of_that_session_only(archive: Archive) -> None:
    archive.index("a", [turn(1), turn(2)], through=2)
    archive.index("b", [turn(1)], through=1)
    assert archive.forget("a") == 2
    assert archive.indexed_through("a") == 0
    assert archive.indexed_through("b") == 1
    archive.index("a", [turn(1)], through=1)  # the session, rebuilt
    assert archive.indexed_through("a") == 1


def test_a_failed_write_moves_no_watermark(
    archive: Archive, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The entries and the watermark are one transaction: neither is kept alone."""
    archive.index("s", [turn(1)], through=1)
    write = archive._write

    def failing(
        session_id: str, user: str | None, docs: list[Document], through: int | None
    ) -> None:
        bad = Document("bad", 2**63, docs[0].json, docs[0].body, None)  # too big for 64 bits
        write(session_id, user, [docs[0], bad], through)

    monkeypatch.setattr(archive, "_write", failing)
    with pytest.raises(Exception):  # noqa: B017 - whatever the driver raises
        archive.index("s", [turn(2), turn(3)], through=3)
    monkeypatch.undo()
    assert archive.indexed_through("s") == 1
    assert [e.seq for e in archive.at("s", [1, 2, 3])] == [1]


@pytest.mark.parametrize("bad", [2**63, -(2**63) - 1, "3", 1.5, True])
def test_through_must_be_a_sequence_number(archive: Archive, bad: object) -> None:
    with pytest.raises(ValueError):
        archive.index("s", [turn(1)], through=bad)  # type: ignore[arg-type]
    assert archive.indexed_through("s") == 0
    assert archive.at("s", [1]) == []


def test_a_sqlite_file_keeps_its_watermarks(tmp_path: Path) -> None:
    with SQLiteArchive(str(tmp_path / "a.db")) as archive:
        archive.index("s", [turn(1), turn(2)], through=2)
    with SQLiteArchive(str(tmp_path / "a.db")) as archive:
        assert archive.indexed_through("s") == 2


def test_an_archive_made_before_watermarks_gains_the_table(tmp_path: Path) -> None:
    """An archive file of an earlier version has no watermark table: it is created on open,
    and its sessions start at 0 (a manager archives them again, idempotently)."""
    path = str(tmp_path / "old.db")
    with SQLiteArchive(path) as archive:
        archive.index("s", [turn(1)])
    with sqlite3.connect(path) as db:
        db.execute("DROP TABLE ctxwindow_archive_watermark")
    db.close()
    with SQLiteArchive(path) as archive:
        assert archive.indexed_through("s") == 0
        assert archive.index("s", [turn(1)], through=1) == 0
        assert archive.indexed_through("s") == 1
