"""Archives under test, as fixtures for every test module (tests/conftest.py).

``make_archive`` makes fresh, empty archives of each backend (SQLite and
PostgreSQL) and drops them afterwards; ``postgres_url`` is the test server's,
or a skip (a failure under ``CTXWINDOW_REQUIRE_SERVERS=1``).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from ctxwindow.archive import Archive, PostgresArchive, SQLiteArchive

POSTGRES_URL = os.environ.get("CTXWINDOW_TEST_POSTGRES_URL", "postgresql://127.0.0.1:5432/test")
REQUIRE_SERVERS = os.environ.get("CTXWINDOW_REQUIRE_SERVERS") == "1"

MakeArchive = Callable[..., Archive]


def _postgres_available() -> str | None:
    """None when the server answers, else why not."""
    try:
        import psycopg
    except ImportError:
        return "psycopg is not installed (pip install 'ctxwindow[postgres]')"
    try:
        with psycopg.connect(POSTGRES_URL, connect_timeout=3):
            return None
    except psycopg.Error as exc:
        return f"PostgreSQL at {POSTGRES_URL} is unreachable: {exc}"


@pytest.fixture(scope="session")
def postgres_url() -> str:
    reason = _postgres_available()
    if reason is not None:
        if REQUIRE_SERVERS:
            pytest.fail(f"CTXWINDOW_REQUIRE_SERVERS=1 but {reason}")
        pytest.skip(reason)
    return POSTGRES_URL


@pytest.fixture(params=["sqlite", "postgres"])
def make_archive(request: pytest.FixtureRequest) -> Iterator[MakeArchive]:
    """A factory of fresh, empty archives of one backend; closed (and dropped) afterwards."""
    made: list[Archive] = []
    tables: list[str] = []

    def make(**options: Any) -> Archive:
        if request.param == "sqlite":
            archive: Archive = SQLiteArchive(**options)
        else:
            url = request.getfixturevalue("postgres_url")
            tables.append(f"ctxwindow_archive_test_{uuid.uuid4().hex[:12]}")
            archive = PostgresArchive(url, table=tables[-1], **options)
        made.append(archive)
        return archive

    yield make
    for archive in made:
        archive.close()
    if tables:
        drop_tables(tables)


def drop_tables(tables: list[str]) -> None:
    """Drop each archive's tables: its entries, watermarks and index."""
    import psycopg
    from psycopg import sql

    parts = ("", "_watermark", "_sessions", "_users", "_postings")
    with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
        for table in tables:
            names = [sql.Identifier(f"{table}{part}") for part in parts]
            conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.SQL(", ").join(names)))
