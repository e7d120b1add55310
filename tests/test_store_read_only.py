"""A store opened read-only (``open_store(url, read_only=True)``): it reads what is there,
changes nothing (no schema created or migrated, no index upkeep) and refuses writes.

Every store the URL opener makes, in both flavours, against the real servers; then
what each backend adds: SQLite's ``mode=ro`` on an older file, PostgreSQL's read-only
transactions on an empty database, Redis's listing without index upkeep.
"""

from __future__ import annotations

import asyncio
import sqlite3
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from ctxwindow import Entry
from ctxwindow.errors import StoreError
from ctxwindow.stores import AsyncMemoryStore, MemoryStore, open_async_store, open_store
from ctxwindow.stores.sqlite import SCHEMA_VERSION, SQLiteStore
from tests.support.store_files import entry, folder_state, older_file
from tests.support.stores import Blocking, require_server, sqlite_url

READ_ONLY = "is opened read-only: it cannot"
TEXTS = ["你好", "こんにちは 🙂", "mixed Ελληνικά"]


def texts(entries: list[Entry]) -> list[str]:
    return [entry.message["content"] for entry in entries]


def every_write(store: Any, session_id: str) -> dict[str, Callable[[], Any]]:
    """Each write of the contract, as a call that should be refused."""
    return {
        "append": lambda: store.append(session_id, [entry("more")]),
        "delete a session": lambda: store.delete(session_id),
        "truncate": lambda: store.truncate(session_id, 0),
        "save a checkpoint": lambda: store.save_checkpoint(session_id, 1, b"window"),
    }


def what_is_stored(store: Any, session_id: str) -> tuple[Any, ...]:
    return (
        texts(store.load(session_id)),
        texts(store.tail(session_id, 2)),
        store.checkpoint(session_id),
        store.replayed(session_id, "key-1") is not None,
    )


@pytest.fixture(params=["sqlite", "redis", "postgresql"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    kind = request.param
    return sqlite_url(tmp_path / "会话.db") if kind == "sqlite" else require_server(kind)


@pytest.mark.parametrize("flavour", ["sync", "async"])
def test_a_store_opened_read_only_reads_everything_and_writes_nothing(
    url: str, flavour: str
) -> None:
    session_id = f"ro-{uuid.uuid4().hex[:12]}-会话"
    with open_store(url) as writer:
        writer.append(session_id, [entry(text) for text in TEXTS], idempotency_key="key-1")
        writer.save_checkpoint(session_id, 2, b"window through 2")
        stored = what_is_stored(writer, session_id)
    loop = asyncio.new_event_loop() if flavour == "async" else None
    try:
        if loop is None:
            reader: Any = open_store(url, read_only=True)
        else:
            reader = Blocking(loop.run_until_complete(_opened(url)), loop)
        assert what_is_stored(reader, session_id) == stored
        assert session_id in reader.sessions(prefix="ro-")
        for action, write in every_write(reader, session_id).items():
            with pytest.raises(StoreError, match=f"{READ_ONLY} {action}$"):
                write()
        assert reader.health()["ok"] is True
        reader.close()
    finally:
        if loop is not None:
            loop.close()
    with open_store(url) as writer:
        assert what_is_stored(writer, session_id) == stored  # nothing was changed
        assert writer.delete(session_id) is True  # the control: the same write, allowed


async def _opened(url: str) -> Any:  # some clients want a running loop when built
    return open_async_store(url, read_only=True)


def test_a_memory_store_can_be_read_through_a_read_only_view() -> None:
    shared = MemoryStore()
    shared.append("s", [entry("hello")])
    loop = asyncio.new_event_loop()
    try:
        view = Blocking(AsyncMemoryStore(shared, read_only=True), loop)
        assert texts(view.load("s")) == ["hello"]
        for action, write in every_write(view, "s").items():
            with pytest.raises(StoreError, match=f"{READ_ONLY} {action}$"):
                write()
    finally:
        loop.close()
    assert texts(shared.load("s")) == ["hello"]
    with pytest.raises(StoreError, match=f"{READ_ONLY} append$"):
        open_store("memory://", read_only=True).append("s", [entry("x")])


# --- SQLite: mode=ro, and no migration ---------------------------------------------------


@pytest.mark.parametrize("version", range(1, SCHEMA_VERSION))
def test_an_older_sqlite_file_is_read_as_it_is(tmp_path: Path, version: int) -> None:
    path = tmp_path / "old.db"
    stored = older_file(path, version)
    before = folder_state(tmp_path)
    for opener in (open_store, open_async_store):
        reader = opener(sqlite_url(path), read_only=True)
        loop = None
        if opener is open_async_store:
            loop = asyncio.new_event_loop()
            reader = Blocking(reader, loop)
        try:
            assert reader.sessions() == ["default:旧"]
            assert reader.load("default:旧")[0].id == stored.id
            assert reader.earlier("default:旧", 2).entries == 1
            # what a file of this version could not hold, it holds none of
            assert reader.checkpoint("default:旧") is None
            assert reader.replayed("default:旧", "any key") is None
            checkpoint, entries = reader.load_from_checkpoint("default:旧")
            assert checkpoint is None and texts(entries) == [stored.message["content"]]
            assert reader.health()["schema_version"] == version
            reader.close()
        finally:
            if loop is not None:
                loop.close()
    assert folder_state(tmp_path) == before  # not migrated, not touched, nothing beside it
    with SQLiteStore(path) as writer:  # the control: opened to write, it is migrated
        assert writer.schema_version == SCHEMA_VERSION
    assert folder_state(tmp_path)["old.db"] != before["old.db"]


def test_a_live_sqlite_store_is_read_while_the_service_writes(tmp_path: Path) -> None:
    """WAL mode: the reader sees each commit of a writer that keeps the file open, and its
    reads leave the database file's bytes as the writer's last checkpoint left them."""
    path = tmp_path / "sessions.db"
    with SQLiteStore(path) as writer, SQLiteStore(path, read_only=True) as reader:
        writer.append("s", [entry("first")])
        assert texts(reader.load("s")) == ["first"]
        writer.append("s", [entry("second")])
        assert texts(reader.load("s")) == ["first", "second"]
        assert reader.health()["read_only"] is True
        assert reader.health()["ok"] is True


def another_programs_database(path: Path) -> None:
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE other (x)")


@pytest.mark.parametrize(
    "make",
    [lambda path: path.write_bytes(b""), another_programs_database],
    ids=["empty file", "another program's database"],
)
def test_a_file_without_a_ctxwindow_store_is_an_error_and_stays_as_it_was(
    tmp_path: Path, make: Callable[[Path], Any]
) -> None:
    path = tmp_path / "other.db"
    make(path)
    before = folder_state(tmp_path)
    with pytest.raises(StoreError, match="holds no ctxwindow store"):
        open_store(sqlite_url(path), read_only=True)
    assert folder_state(tmp_path) == before


def test_read_only_never_creates_a_file(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="no SQLite store at"):
        open_store(sqlite_url(tmp_path / "typo.db"), read_only=True)  # create=True is overruled
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(ValueError, match="':memory:' holds nothing to read"):
        SQLiteStore(":memory:", read_only=True)


def test_a_newer_sqlite_file_is_still_refused(tmp_path: Path) -> None:
    path = tmp_path / "new.db"
    older_file(path, SCHEMA_VERSION)
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE schema_version SET version = ?", (SCHEMA_VERSION + 1,))
    with pytest.raises(StoreError, match="newer than this ctxwindow knows"):
        open_store(sqlite_url(path), read_only=True)


# --- PostgreSQL: read-only transactions, no tables created -----------------------------


@pytest.fixture
def postgres_schema() -> Iterator[tuple[str, str]]:
    """(url, a schema of its own), dropped at the end."""
    url = require_server("postgresql")
    import psycopg

    schema = f"ctxw_ro_{uuid.uuid4().hex[:10]}"
    yield url, schema
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def schema_exists(url: str, schema: str) -> bool:
    import psycopg

    with psycopg.connect(url) as conn:
        query = "SELECT count(*) FROM pg_namespace WHERE nspname = %s"
        return bool(conn.execute(query, (schema,)).fetchone()[0])  # type: ignore[index]


def test_postgres_read_only_creates_no_tables(postgres_schema: tuple[str, str]) -> None:
    from ctxwindow.stores.postgres import PostgresStore

    url, schema = postgres_schema
    with pytest.raises(StoreError, match=f"holds no ctxwindow tables in schema '{schema}'"):
        PostgresStore(url, schema=schema, read_only=True)
    assert not schema_exists(url, schema)
    with PostgresStore(url, schema=schema):  # the control: opened to write, it creates them
        pass
    assert schema_exists(url, schema)


def test_postgres_read_only_is_refused_by_the_server_too(postgres_schema: tuple[str, str]) -> None:
    """Below the store's own check: its transactions are read-only, so even a backend
    primitive called directly cannot write."""
    from ctxwindow.stores.postgres import PostgresStore

    url, schema = postgres_schema
    with PostgresStore(url, schema=schema) as writer:
        writer.append("s", [entry("kept")])
    with PostgresStore(url, schema=schema, read_only=True) as reader:
        with pytest.raises(StoreError, match="read-only transaction"):
            reader._append("s", [entry("sneaked in")], None)
        with pytest.raises(StoreError, match="read-only transaction"):
            reader._delete("s")
        assert texts(reader.load("s")) == ["kept"]


def test_postgres_read_only_does_not_migrate(postgres_schema: tuple[str, str]) -> None:
    import psycopg

    from ctxwindow.stores.postgres import PostgresStore
    from ctxwindow.stores.postgres.common import MIGRATIONS as MIGRATIONS_PG
    from ctxwindow.stores.postgres.common import SCHEMA_VERSION as PG_VERSION

    url, schema = postgres_schema
    with PostgresStore(url, schema=schema) as writer:
        writer.append("s", [entry("kept")])
    # as a ctxwindow from before versions 5 (an index) and 6 (the lease table) left it
    assert "CREATE INDEX ctxwindow_entries_kept_always" in MIGRATIONS_PG[5][0]
    assert "CREATE TABLE {s}ctxwindow_locks" in MIGRATIONS_PG[6][0]
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f'DROP INDEX "{schema}".ctxwindow_entries_kept_always')
        conn.execute(f'DROP TABLE "{schema}".ctxwindow_locks')
        conn.execute(f'DELETE FROM "{schema}".ctxwindow_schema_version WHERE version >= 5')
    with PostgresStore(url, schema=schema, read_only=True) as reader:
        assert texts(reader.load("s")) == ["kept"]
        assert reader.health()["schema_version"] == 4
    with PostgresStore(url, schema=schema) as writer:  # the control: a writer migrates it
        assert writer.health()["schema_version"] == PG_VERSION == 6


# --- Redis: no index upkeep ------------------------------------------------------------


@pytest.fixture
def redis_prefix() -> Iterator[tuple[str, str, Any]]:
    """(url, a key prefix of its own, a client), its keys deleted at the end."""
    url = require_server("redis")
    import redis

    client = redis.Redis.from_url(url)
    prefix = f"ctxw-ro-{uuid.uuid4().hex[:10]}"
    yield url, prefix, client
    for key in client.scan_iter(match=f"{prefix}:*"):
        client.delete(key)
    client.close()


def redis_state(client: Any, prefix: str) -> dict[bytes, Any]:
    """Every key of ``prefix`` with its value (DUMP), for before/after comparisons."""
    return {key: client.dump(key) for key in client.scan_iter(match=f"{prefix}:*")}


def test_redis_read_only_lists_without_an_index_and_builds_none(
    redis_prefix: tuple[str, str, Any],
) -> None:
    from ctxwindow.stores.redis import RedisStore

    url, prefix, client = redis_prefix
    ids = ["b", "a", "日本", "c-1", "c-2"]
    with RedisStore(url, prefix=prefix) as writer:
        for session_id in ids:
            writer.append(session_id, [entry("hi")])
    client.delete(f"{prefix}:sessions", f"{prefix}:sessions:indexed")  # as before the index
    before = redis_state(client, prefix)
    with RedisStore(url, prefix=prefix, read_only=True) as reader:
        assert reader.sessions() == sorted(ids)
        assert reader.sessions(prefix="c-") == ["c-1", "c-2"]
        assert reader.sessions(after="a", limit=2) == ["b", "c-1"]
        assert reader.sessions(prefix="c-", after="c-1") == ["c-2"]
    assert redis_state(client, prefix) == before
    with RedisStore(url, prefix=prefix) as writer:  # the control: a writer builds the index
        assert writer.sessions() == sorted(ids)
    assert client.exists(f"{prefix}:sessions:indexed")


def test_redis_read_only_leaves_a_stale_index_entry(redis_prefix: tuple[str, str, Any]) -> None:
    from ctxwindow.stores.redis import RedisStore

    url, prefix, client = redis_prefix
    with RedisStore(url, prefix=prefix) as writer:
        writer.append("kept", [entry("hi")])
        writer.append("gone", [entry("hi")])
        writer.sessions()  # the index is built
    client.delete(f"{prefix}:e:gone")  # its entries evicted, as a cache's may be
    with RedisStore(url, prefix=prefix, read_only=True) as reader:
        assert reader.sessions() == ["kept"]
    assert client.zscore(f"{prefix}:sessions", "gone") is not None  # not tidied
    with RedisStore(url, prefix=prefix) as writer:  # the control: a writer tidies it
        assert writer.sessions() == ["kept"]
    assert client.zscore(f"{prefix}:sessions", "gone") is None
    with (
        RedisStore(url, prefix=prefix, read_only=True) as reader,
        pytest.raises(StoreError, match=f"{READ_ONLY} fill$"),
    ):
        reader.fill("kept", reader.load("kept"))
