"""Behaviour of the server stores (Redis, PostgreSQL) and of TieredStore beyond the contract.

The servers come from ``CTXWINDOW_TEST_REDIS_URL`` (default
``redis://127.0.0.1:6379/15``) and ``CTXWINDOW_TEST_POSTGRES_URL`` (default
``postgresql://127.0.0.1:5432/test``). Without a server these tests skip,
unless ``CTXWINDOW_REQUIRE_SERVERS=1`` (CI), which turns the skip into a
failure. Every test works in its own key prefix or schema and removes it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import multiprocessing
import os
import re
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, cast

import pytest

from ctxwindow.errors import StoreError, StoreUnavailableError
from ctxwindow.extras import install_hint
from ctxwindow.messages import Entry
from ctxwindow.stores.base import Store, entry_to_json
from ctxwindow.stores.tiered import Fillable
from tests.support.stores import no_server

pytestmark = pytest.mark.servers

REDIS_URL = os.environ.get("CTXWINDOW_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")
POSTGRES_URL = os.environ.get("CTXWINDOW_TEST_POSTGRES_URL", "postgresql://127.0.0.1:5432/test")
CLOSED_REDIS = "redis://:s3cret-pw@127.0.0.1:1/0"  # nothing listens on port 1
CLOSED_POSTGRES = "postgresql://app:s3cret-pw@127.0.0.1:1/test"


def entries(*texts: str) -> list[Entry]:
    return [
        Entry(message={"role": "user", "content": text}, tokens=len(text), seq=0) for text in texts
    ]


def contents(stored: Sequence[Entry]) -> list[str]:
    return [entry.message["content"] for entry in stored]


# -- servers and per-test namespaces -------------------------------------------------------


@pytest.fixture(scope="session")
def redis_url() -> str:
    try:
        import redis
    except ImportError:
        no_server("redis-py is not installed: pip install 'ctxwindow[redis]'")
    client = redis.Redis.from_url(REDIS_URL, socket_connect_timeout=2, socket_timeout=2)
    try:
        client.ping()
    except redis.RedisError as exc:
        no_server(f"no Redis at {REDIS_URL} (set CTXWINDOW_TEST_REDIS_URL): {exc}")
    finally:
        client.close()
    return REDIS_URL


@pytest.fixture(scope="session")
def postgres_url() -> str:
    try:
        import psycopg
    except ImportError:
        no_server("psycopg is not installed: pip install 'ctxwindow[postgres]'")
    try:
        psycopg.connect(POSTGRES_URL, connect_timeout=2).close()
    except psycopg.Error as exc:
        reason = str(exc).splitlines()[0]
        no_server(f"no PostgreSQL at {POSTGRES_URL} (set CTXWINDOW_TEST_POSTGRES_URL): {reason}")
    return POSTGRES_URL


@pytest.fixture
def prefix(redis_url: str) -> Iterator[str]:
    """A Redis key prefix of this test only; its keys are removed afterwards."""
    import redis

    name = f"ctxwindow-test-{uuid.uuid4().hex}"
    yield name
    with redis.Redis.from_url(redis_url) as client:
        keys = list(client.scan_iter(match=f"{name}:*", count=1000))
        if keys:
            client.delete(*keys)


@pytest.fixture
def schema(postgres_url: str) -> Iterator[str]:
    """A PostgreSQL schema of this test only; dropped afterwards."""
    import psycopg

    name = f"ctxwindow_test_{uuid.uuid4().hex[:12]}"
    yield name
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')


@pytest.fixture
def redis_store(redis_url: str, prefix: str) -> Iterator[Any]:
    from ctxwindow.stores.redis import RedisStore

    with RedisStore(redis_url, prefix=prefix) as store:
        yield store


@pytest.fixture
def pg_store(postgres_url: str, schema: str) -> Iterator[Any]:
    from ctxwindow.stores.postgres import PostgresStore

    with PostgresStore(postgres_url, schema=schema) as store:
        yield store


def pg_execute(url: str, query: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        cursor = conn.execute(query, params)
        return cursor.fetchall() if cursor.description else []


# -- URLs and errors ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("redis://:pw-123@h:6379/0", "redis://:***@h:6379/0"),
        ("redis://user:p%40ss-word@h/1", "redis://user:***@h/1"),
        ("rediss://h:6380/2", "rediss://h:6380/2"),
        (
            "postgresql://app:pw-123@db/app?sslmode=require",
            "postgresql://app:***@db/app?sslmode=require",
        ),
        (
            "postgresql://db/app?password=pw-123&sslmode=require",
            "postgresql://db/app?password=***&sslmode=require",
        ),
        ("postgresql://db/app", "postgresql://db/app"),
    ],
)
def test_urls_are_shown_without_their_password(url: str, shown: str) -> None:
    from ctxwindow.stores.base import redact_url

    assert redact_url(url) == shown


def test_error_texts_lose_the_password_in_any_spelling() -> None:
    from ctxwindow.stores.base import scrub

    url = "redis://user:p%40ss-word@h/1"
    text = scrub(f"failed to reach {url} with p@ss-word or p%40ss-word", url)
    assert "ss-word" not in text
    assert "redis://user:***@h/1" in text


@pytest.mark.parametrize("url", ["http://:s3cret-pw@h/0", "127.0.0.1:6379", "postgresql://h/db"])
def test_redis_store_wants_a_redis_url(url: str) -> None:
    from ctxwindow.stores.redis import RedisStore

    with pytest.raises(ValueError, match="not a Redis URL") as caught:
        RedisStore(url)
    assert "s3cret" not in str(caught.value)


@pytest.mark.parametrize("url", ["redis://:s3cret-pw@h/0", "mysql://h/db", "dbname=test"])
def test_postgres_store_wants_a_postgres_url(url: str) -> None:
    from ctxwindow.stores.postgres import PostgresStore

    with pytest.raises(ValueError, match="not a PostgreSQL URL") as caught:
        PostgresStore(url)
    assert "s3cret" not in str(caught.value)


def open_redis() -> object:
    from ctxwindow.stores.redis import RedisStore

    return RedisStore("redis://127.0.0.1:1/0")


def open_postgres() -> object:
    from ctxwindow.stores.postgres import PostgresStore

    return PostgresStore("postgresql://127.0.0.1:1/test")


@pytest.mark.parametrize(("module", "make"), [("redis", open_redis), ("psycopg", open_postgres)])
def test_a_missing_driver_says_which_extra_to_install(
    module: str, make: Callable[[], object], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, module, None)  # as if it were not installed
    extra = "redis" if module == "redis" else "postgres"
    with pytest.raises(ImportError, match=re.escape(install_hint(extra))):
        make()


def test_redis_options_are_checked() -> None:
    from ctxwindow.stores.redis import RedisStore

    with pytest.raises(ValueError, match="ttl"):
        RedisStore("redis://h/0", ttl=0)
    with pytest.raises(ValueError, match="prefix"):
        RedisStore("redis://h/0", prefix="")


def test_unreachable_redis_is_unavailable_with_a_clear_message() -> None:
    redis = pytest.importorskip("redis")
    from ctxwindow.stores.redis import RedisStore

    store = RedisStore(CLOSED_REDIS, timeout=1)
    calls: list[Callable[[], object]] = [
        lambda: store.append("s", entries("hello")),
        lambda: store.load("s"),
        lambda: store.get("s", "id"),
        lambda: store.sessions(),
    ]
    for call in calls:
        with pytest.raises(StoreUnavailableError) as caught:
            call()
        message = str(caught.value)
        assert "Redis at redis://:***@127.0.0.1:1/0 is unavailable" in message
        assert "s3cret" not in message
        assert isinstance(caught.value.__cause__, redis.ConnectionError)
    health = store.health()
    assert health["ok"] is False and "unavailable" in health["error"]
    assert "s3cret" not in json.dumps(health)
    store.close()


def test_unreachable_postgres_is_unavailable_at_open() -> None:
    psycopg = pytest.importorskip("psycopg")
    from ctxwindow.stores.postgres import PostgresStore

    with pytest.raises(StoreUnavailableError) as caught:
        PostgresStore(CLOSED_POSTGRES, timeout=2)
    message = str(caught.value)
    assert "PostgreSQL at postgresql://app:***@127.0.0.1:1/test is unavailable (open)" in message
    assert "s3cret" not in message
    assert isinstance(caught.value.__cause__, psycopg.OperationalError)


def test_unreachable_servers_for_the_async_stores() -> None:
    pytest.importorskip("redis")
    pytest.importorskip("psycopg")
    from ctxwindow.stores.postgres import AsyncPostgresStore
    from ctxwindow.stores.redis import AsyncRedisStore

    async def main() -> None:
        for store in (
            AsyncRedisStore(CLOSED_REDIS, timeout=1),
            AsyncPostgresStore(CLOSED_POSTGRES),
        ):
            with pytest.raises(StoreUnavailableError, match=r"127\.0\.0\.1:1") as caught:
                await store.load("s")
            assert "s3cret" not in str(caught.value)
            health = await store.health()
            assert health["ok"] is False and "s3cret" not in health["error"]
            await store.close()

    asyncio.run(main())


def test_redis_credentials_refused_is_a_store_error_not_unavailable(redis_url: str) -> None:
    from urllib.parse import urlsplit

    from ctxwindow.stores.redis import RedisStore

    parts = urlsplit(redis_url)
    url = parts._replace(netloc=f"nobody:s3cret-pw@{parts.hostname}:{parts.port or 6379}").geturl()
    with RedisStore(url) as store, pytest.raises(StoreError) as caught:
        store.load("s")
    assert not isinstance(caught.value, StoreUnavailableError)
    assert "nobody:***@" in str(caught.value) and "s3cret" not in str(caught.value)


def test_closed_stores_say_so(redis_store: Any, pg_store: Any) -> None:
    for store in (redis_store, pg_store):
        store.close()
        with pytest.raises(StoreError, match="closed"):
            store.load("s")


def test_health_says_what_durable_means_on_this_server(redis_store: Any, pg_store: Any) -> None:
    redis_health, pg_health = redis_store.health(), pg_store.health()
    assert (redis_health["ok"], redis_health["store"]) == (True, "redis")
    assert isinstance(redis_health["durable"], bool)
    assert "append-only file" in redis_health["detail"]
    assert (pg_health["ok"], pg_health["store"], pg_health["durable"]) == (True, "postgresql", True)
    assert "fsync=on" in pg_health["detail"]


# -- Redis -------------------------------------------------------------------------------


def test_redis_keeps_sequence_numbers_in_the_documents(redis_store: Any, redis_url: str) -> None:
    import redis

    stored = redis_store.append("s:1", entries("一", "二"))
    stored += redis_store.append("s:1", entries("🎉 three"))
    with redis.Redis.from_url(redis_url) as client:
        docs = client.lrange(f"{redis_store.prefix}:e:s:1", 0, -1)
        ids = client.hgetall(f"{redis_store.prefix}:i:s:1")
    assert [json.loads(doc)["seq"] for doc in docs] == [1, 2, 3]
    assert [json.loads(doc)["message"]["content"] for doc in docs] == ["一", "二", "🎉 three"]
    assert {key.decode(): int(seq) for key, seq in ids.items()} == {e.id: e.seq for e in stored}


def test_redis_ttl_is_set_and_refreshed_by_every_append(redis_url: str, prefix: str) -> None:
    import redis

    from ctxwindow.stores.redis import RedisStore

    keys = [f"{prefix}:{kind}:s" for kind in "eik"]
    with (
        RedisStore(redis_url, prefix=prefix, ttl=30) as store,
        redis.Redis.from_url(redis_url) as client,
    ):
        store.append("s", entries("a"), idempotency_key="k1")
        assert all(25_000 < client.pttl(key) <= 30_000 for key in keys)
        for key in keys:
            client.pexpire(key, 1000)
        store.append("s", entries("b"))
        assert all(25_000 < client.pttl(key) <= 30_000 for key in keys)
    with RedisStore(redis_url, prefix=prefix) as forever:
        forever.append("t", entries("c"))
        with redis.Redis.from_url(redis_url) as client:
            assert client.pttl(f"{prefix}:e:t") == -1


def test_redis_sessions_expire_after_the_ttl(redis_url: str, prefix: str) -> None:
    from ctxwindow.stores.redis import RedisStore

    with RedisStore(redis_url, prefix=prefix, ttl=0.2) as store:
        store.append("brief", entries("a", "b"), idempotency_key="k")
        assert store.sessions() == ["brief"]
        time.sleep(0.4)
        assert store.load("brief") == []
        assert store.sessions() == []
        assert [e.seq for e in store.append("brief", entries("c"), idempotency_key="k")] == [1]


def test_redis_sessions_are_listed_by_prefix_without_glob_surprises(
    redis_url: str, prefix: str
) -> None:
    from ctxwindow.stores.redis import RedisStore

    ids = ["user:1", "user:2", "user*", "user[1]", "us?r", "用户:3", "e:tricky"]
    with RedisStore(redis_url, prefix=prefix) as store:
        for session_id in ids:
            store.append(session_id, entries("hi"))
        assert store.sessions() == sorted(ids)
        assert store.sessions(prefix="user") == ["user*", "user:1", "user:2", "user[1]"]
        assert store.sessions(prefix="user*") == ["user*"]
        assert store.sessions(prefix="user[") == ["user[1]"]
        assert store.sessions(prefix="用户") == ["用户:3"]
    with RedisStore(redis_url, prefix=f"{prefix}-other") as other:
        assert other.sessions() == []


def test_redis_rejects_an_entry_id_already_in_the_session(redis_store: Any) -> None:
    first = redis_store.append("s", entries("a"))
    again = entries("b")
    again[0].id = first[0].id
    with pytest.raises(StoreError, match="already in session"):
        redis_store.append("s", [*entries("c"), *again])
    assert contents(redis_store.load("s")) == ["a"]  # the whole batch was refused


def test_redis_fill_copies_numbered_entries_and_refuses_a_gap(
    redis_store: Any, pg_store: Any
) -> None:
    durable = pg_store.append("s", entries("a", "b", "c", "d"))
    assert redis_store.fill("s", durable[2:]) is False  # would leave 1 and 2 out
    assert redis_store.load("s") == []
    assert redis_store.fill("s", durable[:2]) is True
    assert redis_store.fill("s", durable[1:]) is True  # the overlap is skipped
    assert redis_store.load("s") == durable
    assert redis_store.get("s", durable[3].id) == durable[3]
    with pytest.raises(ValueError, match="consecutive"):
        redis_store.fill("s", [durable[0], durable[2]])


def test_redis_fill_refuses_what_append_refuses_in_the_same_words(redis_store: Any) -> None:
    """``fill`` is public (the tiered store calls it): it checks its input as the base does."""
    numbered = [
        Entry(message={"role": "user", "content": text}, tokens=1, seq=seq)
        for seq, text in enumerate(("一", "二 🎉"), start=1)
    ]
    for session_id, batch in [("", numbered), ("s", ["not an entry"]), ("s", "text")]:
        with pytest.raises(StoreError) as by_append:
            redis_store.append(session_id, batch)
        with pytest.raises(StoreError) as by_fill:
            redis_store.fill(session_id, batch)
        assert str(by_fill.value) == str(by_append.value)
    assert redis_store.fill("s", []) is True
    assert redis_store.load("s") == []
    redis_store.close()
    with pytest.raises(StoreError, match="closed"):
        redis_store.fill("s", numbered)


def _append_from_a_process(kind: str, url: str, namespace: str, worker: int) -> list[int]:
    """Runs in a child process: 10 appends of 3 entries, the last one retried."""
    store: Store
    if kind == "redis":
        from ctxwindow.stores.redis import RedisStore

        store = RedisStore(url, prefix=namespace)
    else:
        from ctxwindow.stores.postgres import PostgresStore

        store = PostgresStore(url, schema=namespace)
    seqs = []
    with store:
        for i in range(10):
            batch = entries(*(f"w{worker}-{i}-{j}" for j in range(3)))
            seqs += [e.seq for e in store.append("shared", batch, idempotency_key=f"w{worker}-{i}")]
        retried = store.append("shared", entries("x", "y", "z"), idempotency_key=f"w{worker}-9")
        assert [e.seq for e in retried] == seqs[-3:]
        store.append("shared", entries("once"), idempotency_key="everyone")
    return seqs


@pytest.mark.parametrize("kind", ["redis", "postgres"])
def test_appends_from_many_processes_never_collide(
    kind: str, request: pytest.FixtureRequest
) -> None:
    if kind == "redis":
        url, namespace = request.getfixturevalue("redis_url"), request.getfixturevalue("prefix")
        store: Store = request.getfixturevalue("redis_store")
    else:
        url, namespace = request.getfixturevalue("postgres_url"), request.getfixturevalue("schema")
        store = request.getfixturevalue("pg_store")
    context = multiprocessing.get_context("spawn")
    with context.Pool(4) as pool:
        args = [(kind, url, namespace, worker) for worker in range(4)]
        results = pool.starmap(_append_from_a_process, args)
    loaded = store.load("shared")
    assert [e.seq for e in loaded] == list(range(1, 4 * 30 + 2))
    acknowledged = [seq for seqs in results for seq in seqs]
    assert len(set(acknowledged)) == len(acknowledged) == 120
    texts = contents(loaded)
    assert texts.count("once") == 1 and len(set(texts)) == len(texts)
    for worker in range(4):  # each process's batches stay whole and in its order
        mine = [t for t in texts if t.startswith(f"w{worker}-")]
        assert mine == [f"w{worker}-{i}-{j}" for i in range(10) for j in range(3)]


def test_async_redis_store_round_trip(redis_url: str, prefix: str) -> None:
    from ctxwindow.stores.redis import AsyncRedisStore

    async def main() -> None:
        async with AsyncRedisStore(redis_url, prefix=prefix, ttl=60) as store:
            stored = await store.append("会话", entries("你好", "こんにちは"), idempotency_key="k")
            assert await store.append("会话", entries("x"), idempotency_key="k") == stored
            assert await store.load("会话", after=1) == stored[1:]
            assert await store.tail("会话", 1) == stored[1:]
            assert await store.get("会话", stored[0].id) == stored[0]
            assert await store.sessions() == ["会话"]
            assert (await store.health())["ok"] is True
            assert await store.delete("会话") is True
            assert await store.load("会话") == []

    asyncio.run(main())


# -- PostgreSQL --------------------------------------------------------------------------

# Version 1 of the schema, written out by hand as an older ctxwindow left it.
SCHEMA_V1 = """
CREATE SCHEMA "{s}";
CREATE TABLE "{s}".ctxwindow_schema_version (
    version integer PRIMARY KEY, applied_at double precision NOT NULL);
INSERT INTO "{s}".ctxwindow_schema_version VALUES (1, 0);
CREATE TABLE "{s}".ctxwindow_entries (
    session_id text NOT NULL, seq bigint NOT NULL, id text NOT NULL, doc jsonb NOT NULL,
    tokens integer NOT NULL, created_at double precision NOT NULL,
    PRIMARY KEY (session_id, seq), UNIQUE (session_id, id));
CREATE TABLE "{s}".ctxwindow_idempotency (
    session_id text NOT NULL, key text NOT NULL, first_seq bigint NOT NULL,
    last_seq bigint NOT NULL, PRIMARY KEY (session_id, key));
"""


def test_postgres_creates_its_schema_at_the_latest_version(
    pg_store: Any, postgres_url: str
) -> None:
    from ctxwindow.stores.postgres import SCHEMA_VERSION

    assert pg_store.health()["schema_version"] == SCHEMA_VERSION
    rows = pg_execute(
        postgres_url, f'SELECT version FROM "{pg_store.schema}".ctxwindow_schema_version ORDER BY 1'
    )
    assert [row[0] for row in rows] == list(range(1, SCHEMA_VERSION + 1))


def test_postgres_migrates_a_version_1_database(postgres_url: str, schema: str) -> None:
    import psycopg

    from ctxwindow.stores.postgres import SCHEMA_VERSION, PostgresStore

    old = {"alice": entries("hello", "world"), "bob": entries("你好")}
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(SCHEMA_V1.format(s=schema))
        for session_id, batch in old.items():
            for seq, entry in enumerate(batch, start=1):
                entry.seq = seq
                conn.execute(
                    f'INSERT INTO "{schema}".ctxwindow_entries VALUES (%s, %s, %s, %s, %s, %s)',
                    (
                        session_id,
                        seq,
                        entry.id,
                        entry_to_json(entry),
                        entry.tokens,
                        entry.created_at,
                    ),
                )
    with PostgresStore(postgres_url, schema=schema) as store:
        assert store.health()["schema_version"] == SCHEMA_VERSION
        assert store.sessions() == ["alice", "bob"]  # listed from the table version 2 adds
        assert store.load("alice") == old["alice"]
        assert [e.seq for e in store.append("alice", entries("again"))] == [3]
        assert store.sessions(prefix="b") == ["bob"]
    rows = pg_execute(postgres_url, f'SELECT version FROM "{schema}".ctxwindow_schema_version')
    assert sorted(row[0] for row in rows) == list(range(1, SCHEMA_VERSION + 1))


def test_postgres_refuses_a_schema_newer_than_it_knows(postgres_url: str, schema: str) -> None:
    from ctxwindow.stores.postgres import PostgresStore

    PostgresStore(postgres_url, schema=schema).close()
    pg_execute(postgres_url, f'INSERT INTO "{schema}".ctxwindow_schema_version VALUES (99, 0)')
    with pytest.raises(StoreError, match="version 99, newer than this ctxwindow knows"):
        PostgresStore(postgres_url, schema=schema)


def test_postgres_concurrent_openers_migrate_once(postgres_url: str, schema: str) -> None:
    from ctxwindow.stores.postgres import SCHEMA_VERSION, PostgresStore

    start = threading.Barrier(8)

    def open_store(_: int) -> int:
        start.wait()
        with PostgresStore(postgres_url, schema=schema) as store:
            return int(store.health()["schema_version"])

    with ThreadPoolExecutor(8) as pool:
        assert list(pool.map(open_store, range(8))) == [SCHEMA_VERSION] * 8
    rows = pg_execute(postgres_url, f'SELECT version FROM "{schema}".ctxwindow_schema_version')
    assert sorted(row[0] for row in rows) == list(range(1, SCHEMA_VERSION + 1))


def test_postgres_append_is_committed_when_it_returns(pg_store: Any, postgres_url: str) -> None:
    stored = pg_store.append("s", entries("durable"), idempotency_key="k")
    # another connection sees it: the transaction committed before append returned
    rows = pg_execute(
        postgres_url,
        f"SELECT seq, id, doc->>'seq' FROM \"{pg_store.schema}\".ctxwindow_entries",
    )
    assert rows == [(1, stored[0].id, "1")]
    keys = pg_execute(postgres_url, f'SELECT * FROM "{pg_store.schema}".ctxwindow_idempotency')
    assert keys == [("s", "k", 1, 1)]


def test_postgres_explains_that_jsonb_cannot_hold_nul(pg_store: Any) -> None:
    with pytest.raises(StoreError, match="NUL") as caught:
        pg_store.append("s", entries("before\x00after secret"))
    assert "secret" not in str(caught.value)  # the message text is not echoed into logs
    assert contents(pg_store.append("s", entries("fine"))) == ["fine"]


def test_postgres_replaces_connections_the_server_closed(pg_store: Any, postgres_url: str) -> None:
    pg_store.append("s", entries("a"))
    pids = [conn.info.backend_pid for conn in pg_store._idle]
    assert pids
    for pid in pids:
        pg_execute(postgres_url, "SELECT pg_terminate_backend(%s)", (pid,))
    time.sleep(0.2)
    assert contents(pg_store.load("s")) == ["a"]


def test_async_postgres_store_round_trip(postgres_url: str, schema: str) -> None:
    from ctxwindow.stores.postgres import SCHEMA_VERSION, AsyncPostgresStore

    async def main() -> None:
        async with AsyncPostgresStore(postgres_url, schema=schema) as store:
            batches = await asyncio.gather(
                *(store.append("s", entries(f"{i}a", f"{i}b")) for i in range(5))
            )
            assert sorted(e.seq for batch in batches for e in batch) == list(range(1, 11))
            retried = await store.append("s", entries("k"), idempotency_key="k")
            assert await store.append("s", entries("other"), idempotency_key="k") == retried
            assert [e.seq for e in await store.tail("s", 2)] == [10, 11]
            assert (await store.health())["schema_version"] == SCHEMA_VERSION
            assert await store.delete("s") is True
            assert await store.sessions() == []

    asyncio.run(main())


@pytest.mark.parametrize(("pool_size", "kept"), [(None, 4), ("2", 2), ("12", 12), ("0", 0)])
def test_postgres_keeps_pool_size_idle_connections_from_16_calls_at_once(
    postgres_url: str, schema: str, pool_size: str | None, kept: int
) -> None:
    """16 calls at once each take a connection (opened for the call when none is idle);
    after them the store keeps ``pool_size`` idle, 4 by default, or what ``?pool_size=``
    says: counted by the server (``pg_stat_activity``, by an application name of the test's
    own), not by the store."""
    from ctxwindow.stores.postgres import AsyncPostgresStore

    name = f"pool-{uuid.uuid4().hex[:8]}"
    url = f"{postgres_url}?application_name={name}"
    if pool_size is not None:
        url += f"&pool_size={pool_size}"

    def connected(expected: int) -> int:
        """The test's connections to the server, once ``expected`` (or after 5 s): a closed
        connection's backend leaves the view when it has ended."""
        query = "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s"
        deadline = time.monotonic() + 5
        while (n := int(pg_execute(postgres_url, query, (name,))[0][0])) != expected:
            if time.monotonic() > deadline:
                break
            time.sleep(0.05)
        return n

    async def main() -> None:
        async with AsyncPostgresStore(url, schema=schema) as store:
            assert store.pool_size == kept
            await store.append("s", entries("first 一"))
            loads = await asyncio.gather(*(store.load("s") for _ in range(16)))
            assert all(contents(loaded) == ["first 一"] for loaded in loads)
            assert connected(kept) == kept
        assert connected(0) == 0

    asyncio.run(main())


def test_postgres_pool_size_is_taken_from_the_url_or_the_argument(postgres_url: str) -> None:
    from ctxwindow.stores.postgres import AsyncPostgresStore, PostgresStore

    assert AsyncPostgresStore(f"{postgres_url}?pool_size=9").pool_size == 9
    assert AsyncPostgresStore(postgres_url, pool_size=9).pool_size == 9
    assert AsyncPostgresStore(f"{postgres_url}?pool_size=9", pool_size=9).pool_size == 9
    with PostgresStore(f"{postgres_url}?pool_size=3&application_name=kept") as store:
        assert store.pool_size == 3  # and libpq, which refuses what it does not know, opened it
        assert store.url.endswith("?pool_size=3&application_name=kept")


# -- TieredStore -------------------------------------------------------------------------


class Spy(Store):
    """A store wrapper that records calls, and can be switched off like a server going down."""

    def __init__(self, inner: Store) -> None:
        self.inner, self.url = inner, inner.url
        self.calls: list[str] = []
        self.down = False

    def _call(self, name: str) -> None:
        self.calls.append(name)
        if self.down:
            raise StoreUnavailableError(f"{self.url} is down (test)")

    def _append(
        self, session_id: str, entries: list[Entry], idempotency_key: str | None
    ) -> list[Entry]:
        self._call("append")
        return self.inner.append(session_id, entries, idempotency_key=idempotency_key)

    def fill(self, session_id: str, entries: Sequence[Entry]) -> bool:
        self._call("fill")
        return cast(Fillable, self.inner).fill(session_id, entries)

    def _load(self, session_id: str, after: int, limit: int | None) -> list[Entry]:
        self._call("load")
        return self.inner.load(session_id, after=after, limit=limit)

    def _tail(self, session_id: str, n: int) -> list[Entry]:
        self._call("tail")
        return self.inner.tail(session_id, n)

    def _get(self, session_id: str, entry_id: str) -> Entry | None:
        self._call("get")
        return self.inner.get(session_id, entry_id)

    def _delete(self, session_id: str) -> bool:
        self._call("delete")
        return self.inner.delete(session_id)

    def _sessions(self, prefix: str, after: str | None, limit: int | None) -> list[str]:
        self._call("sessions")
        return self.inner.sessions(prefix=prefix, after=after, limit=limit)

    def _replayed(self, session_id: str, idempotency_key: str) -> list[Entry] | None:
        self._call("replayed")
        return self.inner.replayed(session_id, idempotency_key)

    def _health(self) -> dict[str, Any]:
        if self.down:
            return {"ok": False, "url": self.url, "error": "down (test)"}
        return self.inner.health()

    def taken(self) -> list[str]:
        calls, self.calls = self.calls, []
        return calls


@pytest.fixture
def tiers(pg_store: Any, redis_url: str, prefix: str) -> Iterator[tuple[Spy, Spy]]:
    from ctxwindow.stores.redis import RedisStore

    with RedisStore(redis_url, prefix=prefix, ttl=60) as warm:
        yield Spy(pg_store), Spy(warm)


def test_tiered_reads_come_from_the_hot_tier_after_the_first_load(tiers: tuple[Spy, Spy]) -> None:
    from ctxwindow.stores.tiered import TieredStore

    durable, warm = tiers
    written = durable.inner.append("s", entries("one", "two", "三"))  # by an earlier process
    store = TieredStore(durable, warm)
    assert store.load("s") == written
    assert (durable.taken(), warm.taken()) == (["load"], ["load", "fill"])  # warm miss, refill
    assert store.load("s", after=1) == written[1:]
    assert store.tail("s", 1) == written[2:]
    assert store.get("s", written[0].id) == written[0]
    # served from memory: only the newest entry's seq is checked against the warm tier
    assert (durable.taken(), warm.taken()) == ([], ["tail", "tail", "tail"])

    alone = TieredStore(durable, warm, single_writer=True)
    assert alone.load("s") == written  # the warm tier answers a second process
    assert (durable.taken(), warm.taken()) == ([], ["load"])
    assert alone.load("s") == written and alone.tail("s", 2) == written[1:]
    assert (durable.taken(), warm.taken()) == ([], [])


def test_tiered_hot_copies_see_other_processes_appends(tiers: tuple[Spy, Spy]) -> None:
    from ctxwindow.stores.tiered import TieredStore

    durable, warm = tiers
    first, second = TieredStore(durable, warm), TieredStore(durable, warm)
    first.append("s", entries("a"))
    assert contents(first.load("s")) == ["a"]
    second.append("s", entries("b"))
    assert contents(first.load("s")) == ["a", "b"]
    assert contents(first.append("s", entries("c"))) == ["c"]
    assert contents(second.load("s")) == ["a", "b", "c"]


def test_tiered_append_goes_to_the_durable_store_first(tiers: tuple[Spy, Spy]) -> None:
    from ctxwindow.stores.tiered import TieredStore

    durable, warm = tiers
    store = TieredStore(durable, warm)
    stored = store.append("s", entries("a", "b"), idempotency_key="k")
    assert (durable.taken(), warm.taken()) == (["append"], ["fill"])
    assert durable.inner.load("s") == stored == warm.inner.load("s")
    assert store.append("s", entries("retry"), idempotency_key="k") == stored
    assert warm.inner.load("s") == stored  # the retry copied nothing twice
    warm.taken()

    durable.down = True
    with pytest.raises(StoreUnavailableError):
        store.append("s", entries("lost?"))
    assert warm.taken() == [] and warm.inner.load("s") == stored
    durable.down = False
    assert store.load("s") == stored


def test_tiered_keeps_the_warm_copy_consistent(tiers: tuple[Spy, Spy]) -> None:
    from ctxwindow.stores.tiered import TieredStore

    durable, warm = tiers
    store = TieredStore(durable, warm)
    store.append("s", entries("a", "b"))
    warm.inner.delete("s")  # expired from the warm tier
    store.append("s", entries("c"))
    assert contents(warm.inner.load("s")) == ["a", "b", "c"]  # refilled from durable

    durable.inner.append("s", entries("d"))  # written where this warm copy did not see it
    stored = store.append("s", entries("e"))
    assert [e.seq for e in stored] == [5]
    assert warm.inner.load("s") == durable.inner.load("s")
    assert [e.seq for e in warm.inner.load("s")] == [1, 2, 3, 4, 5]

    assert store.delete("s") is True
    assert warm.inner.load("s") == [] and store.load("s") == []


def test_tiered_hands_out_copies(tiers: tuple[Spy, Spy]) -> None:
    from ctxwindow.stores.tiered import TieredStore

    store = TieredStore(*tiers, single_writer=True)
    given = entries("a")[0]
    given.metadata["tags"] = ["x"]
    returned = store.append("s", [given])[0]
    returned.metadata["tags"].append("through the returned copy")
    loaded = store.load("s")[0]
    loaded.metadata["tags"].append("through a loaded copy")
    loaded.message["content"] = "changed"
    loaded.pinned = True
    again = store.get("s", given.id)
    assert again is not None and again.metadata == {"tags": ["x"]}
    assert store.load("s") == [again] and contents([again]) == ["a"] and not again.pinned


def test_tiered_serves_from_durable_while_the_warm_redis_is_down(
    pg_store: Any, caplog: pytest.LogCaptureFixture
) -> None:
    from ctxwindow.stores.redis import RedisStore
    from ctxwindow.stores.tiered import TieredStore

    caplog.set_level(logging.WARNING, logger="ctxwindow.stores")
    store = TieredStore(pg_store, RedisStore(CLOSED_REDIS, ttl=60, timeout=1), retry_after=0)
    acknowledged = []
    for i in range(5):
        acknowledged += store.append(f"s{i % 2}", entries(f"m{i}"))
        assert store.load(f"s{i % 2}")[-1] == acknowledged[-1]
    assert store.load("s0") == [
        e for e in acknowledged if e.message["content"] in ("m0", "m2", "m4")
    ]
    assert pg_store.load("s1") == store.load("s1")  # nothing lost: all of it in the durable store

    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1  # once per outage, not per call
    assert "warm store redis://:***@127.0.0.1:1/0 failed" in warnings[0].getMessage()
    assert "s3cret" not in caplog.text

    health = store.health()
    assert health["ok"] is True and health["degraded"] is True
    assert health["warm"]["ok"] is False and "unavailable" in health["warm"]["error"]
    assert health["durable_tier"]["ok"] is True and health["durable"] is True
    store.close()


def test_tiered_uses_the_warm_store_again_when_it_is_back(
    tiers: tuple[Spy, Spy], caplog: pytest.LogCaptureFixture
) -> None:
    from ctxwindow.stores.tiered import TieredStore

    caplog.set_level(logging.WARNING, logger="ctxwindow.stores")
    durable, warm = tiers
    now = [0.0]
    store = TieredStore(durable, warm, retry_after=10, clock=lambda: now[0])
    store.append("s", entries("a", "b"))
    warm.down = True
    store.append("s", entries("c"))  # the warm copy misses this one
    store.append("t", entries("only durable"))
    assert store.health()["degraded"] is True
    now[0] += 5
    warm.taken()
    assert contents(store.load("s")) == ["a", "b", "c"]
    assert warm.taken() == []  # not retried before retry_after

    warm.down = False
    now[0] += 10
    health = store.health()
    assert health["degraded"] is False and health["warm"]["ok"] is True
    assert warm.inner.load("s") == [] and warm.inner.load("t") == []  # what it missed, dropped
    assert "is back" in caplog.text

    other = TieredStore(durable, warm)  # another process, reading through the warm tier
    assert contents(other.load("s")) == ["a", "b", "c"]
    assert contents(warm.inner.load("s")) == ["a", "b", "c"]
    store.append("s", entries("d"))
    assert contents(warm.inner.load("s")) == ["a", "b", "c", "d"]


def test_tiered_without_a_warm_store_checks_hot_copies_against_durable(pg_store: Any) -> None:
    from ctxwindow.stores.tiered import TieredStore

    durable = Spy(pg_store)
    store = TieredStore(durable, hot_size=1)
    store.append("a", entries("1"))
    store.append("b", entries("2"))  # evicts a from the hot tier
    durable.taken()
    assert contents(store.load("a")) == ["1"] and durable.taken() == ["load"]
    assert contents(store.load("a")) == ["1"] and durable.taken() == ["tail"]
    health = store.health()
    assert (health["ok"], health["degraded"], health["durable_tier"]["ok"]) == (True, False, True)
    assert health["hot"] == {"sessions": 1, "max_sessions": 1} and "warm" not in health


def test_tiered_fills_a_warm_store_without_fill_by_appending() -> None:
    from ctxwindow.stores.memory import MemoryStore
    from ctxwindow.stores.tiered import TieredStore

    durable, warm = MemoryStore(), MemoryStore()
    store = TieredStore(durable, warm)
    store.append("s", entries("a", "b"))
    assert warm.load("s") == durable.load("s")
    warm.delete("s")
    store.append("s", entries("c"))  # the copy went missing: refilled from durable
    assert warm.load("s") == durable.load("s")
    durable.append("s", entries("d"))  # a writer that bypasses the warm tier
    assert [e.seq for e in store.append("s", entries("e"))] == [5]
    assert warm.load("s") == durable.load("s")  # the copy was behind: refilled
    assert contents(store.load("s")) == ["a", "b", "c", "d", "e"]


def test_async_tiered_store_degrades_and_recovers(
    postgres_url: str, schema: str, redis_url: str, prefix: str
) -> None:
    from ctxwindow.stores.postgres import AsyncPostgresStore
    from ctxwindow.stores.redis import AsyncRedisStore
    from ctxwindow.stores.tiered import AsyncTieredStore

    async def main() -> None:
        durable = AsyncPostgresStore(postgres_url, schema=schema)
        async with AsyncTieredStore(durable, AsyncRedisStore(CLOSED_REDIS, timeout=1)) as down:
            stored = await down.append("s", entries("a", "b"))
            assert await down.load("s") == stored
            health = await down.health()
            assert health["ok"] is True and health["degraded"] is True
        durable = AsyncPostgresStore(postgres_url, schema=schema)
        warm = AsyncRedisStore(redis_url, prefix=prefix, ttl=60)
        async with AsyncTieredStore(durable, warm) as up:
            assert await up.load("s") == stored  # filled the warm tier
            assert await warm.load("s") == stored
            more = await up.append("s", entries("c"), idempotency_key="k")
            assert await up.append("s", entries("c"), idempotency_key="k") == more
            assert await warm.load("s") == [*stored, *more]
            assert await up.tail("s", 1) == more
            assert (await up.health())["degraded"] is False

    asyncio.run(main())


# -- a store closed while one of its locks is held ----------------------------------------


def _open_connections(store: Any) -> int:
    """Connections ``store`` holds open to its server (the lock's included)."""
    if hasattr(store, "_locks"):  # PostgreSQL: the lock's connection (if any) and the idle ones
        lock = getattr(store._locks, "_conn", None)  # none for the lease rows of pooler mode
        return int(lock is not None and not lock.closed) + len(store._idle)
    pool = store._client.connection_pool  # Redis
    held = [*pool._available_connections, *pool._in_use_connections]
    return sum(1 for connection in held if connection.is_connected)


@pytest.mark.parametrize("kind", ["redis", "postgresql"])
def test_a_store_closed_while_a_lock_is_held_gives_it_up_and_opens_nothing_after(
    kind: str, tmp_path: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """The block ending after ``close`` sends nothing (a connection opened then would never
    be closed), and another process takes the session at once: closing gave the lock up."""
    from tests.support.stores import async_stores

    async def run() -> tuple[int, float]:
        with async_stores(kind, tmp_path) as open_store:
            first, second = open_store(), open_store()
            await first.append("会话-1", [Entry({"role": "user", "content": "hi"}, 1, 0)])
            async with first.lock("会话-1"):
                await first.close()
                started = time.monotonic()
                async with second.lock("会话-1", timeout=3):
                    waited = time.monotonic() - started
            await asyncio.sleep(0.05)  # a renewal or release would have run by now
            opened = _open_connections(first)
            await second.close()
            return opened, waited

    with caplog.at_level(logging.WARNING):
        opened, waited = asyncio.run(run())
    assert opened == 0
    assert waited < 1.0  # not the lease's ttl (5 s): given up by close
    assert not [r for r in caplog.records if "lock" in r.getMessage()]  # no "lost" warnings
