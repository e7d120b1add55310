"""The stores under test: every kind and flavour behind one sync API, and the shared servers.

``case`` (a fixture: import it into a test module) gives one store of each kind
(memory, sqlite, redis, postgresql, tiered, redis-cluster, pgbouncer) in both
flavours; async stores are driven through ``Blocking``, one event loop per test.
Redis and PostgreSQL come from ``CTXWINDOW_TEST_REDIS_URL`` /
``CTXWINDOW_TEST_POSTGRES_URL``; the cluster and the PgBouncer are started by the
tests (``redis_cluster``, ``pgbouncer``). They are skipped when unreachable, unless
``CTXWINDOW_REQUIRE_SERVERS=1`` (CI), which turns the skip into a failure
(``require_server``, ``no_server``).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import importlib
import os
import socket
import urllib.parse
import uuid
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import pytest

from ctxwindow.errors import StoreError
from ctxwindow.stores import (
    AsyncMemoryStore,
    AsyncSQLiteStore,
    AsyncStore,
    MemoryStore,
    SQLiteStore,
    open_async_store,
    open_store,
)

T = TypeVar("T")

REDIS_URL = os.environ.get("CTXWINDOW_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")
POSTGRES_URL = os.environ.get("CTXWINDOW_TEST_POSTGRES_URL", "postgresql://127.0.0.1:5432/test")
REQUIRE_SERVERS = os.environ.get("CTXWINDOW_REQUIRE_SERVERS") == "1"
SERVERS = {
    "redis": ("Redis", REDIS_URL, "ctxwindow.stores.redis", 6379),
    "postgresql": ("PostgreSQL", POSTGRES_URL, "ctxwindow.stores.postgres", 5432),
}

KINDS = ("memory", "sqlite", "redis", "postgresql", "tiered", "redis-cluster", "pgbouncer")
FLAVOURS = ("sync", "async")


# --- building the stores -------------------------------------------------------------------


@functools.cache
def server_problem(kind: str) -> str | None:
    """Why the server store of ``kind`` cannot be tested here, or None."""
    name, url, module, default_port = SERVERS[kind]
    try:
        importlib.import_module(module)
    except ImportError as exc:
        return f"{module} cannot be imported: {exc}"
    parts = urllib.parse.urlsplit(url)
    try:
        if parts.hostname:  # a quick TCP check gives a clear reason instead of a long timeout
            socket.create_connection(
                (parts.hostname, parts.port or default_port), timeout=2
            ).close()
        with open_store(url) as store:
            health = store.health()
    except (OSError, StoreError) as exc:
        return f"{name} not reachable at {url}: {exc}"
    return None if health.get("ok") else f"{name} not healthy at {url}: {health}"


def require_server(kind: str) -> str:
    problem = server_problem(kind)
    if problem is not None:
        if REQUIRE_SERVERS:
            pytest.fail(f"{problem} (CTXWINDOW_REQUIRE_SERVERS=1)")
        pytest.skip(problem)
    return SERVERS[kind][1]


def no_server(reason: str) -> None:
    """Skip for ``reason`` (a server is missing), or fail under CTXWINDOW_REQUIRE_SERVERS=1."""
    if REQUIRE_SERVERS:
        pytest.fail(f"{reason} (CTXWINDOW_REQUIRE_SERVERS=1)")
    pytest.skip(reason)


def server_url(kind: str) -> str:
    """The URL of the server store of ``kind``: a shared server, or one the tests start
    (a Redis Cluster, a PgBouncer in front of the shared PostgreSQL) once per process."""
    if kind == "redis-cluster":
        from tests.support.redis_cluster import cluster_url

        return cluster_url()
    if kind == "pgbouncer":
        from tests.support.pgbouncer import pgbouncer_url

        return pgbouncer_url()
    return require_server(kind)


def tiered_class(flavour: str) -> Any:
    from ctxwindow.stores import tiered

    return tiered.TieredStore if flavour == "sync" else tiered.AsyncTieredStore


def sqlite_url(path: Path) -> str:
    return "sqlite:///" + str(path)  # an absolute path: four slashes in all


class Blocking:
    """An ``AsyncStore`` with the sync API, run on one event loop (one per test)."""

    def __init__(self, store: AsyncStore, loop: asyncio.AbstractEventLoop) -> None:
        self.store = store
        self.loop = loop

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        return self.loop.run_until_complete(coroutine)

    def append(self, session_id: Any, entries: Any, *, idempotency_key: Any = None) -> Any:
        return self.run(self.store.append(session_id, entries, idempotency_key=idempotency_key))

    def append_after(
        self, session_id: Any, last: Any, entries: Any, *, idempotency_key: Any = None
    ) -> Any:
        appended = self.store.append_after(
            session_id, last, entries, idempotency_key=idempotency_key
        )
        return self.run(appended)

    def load(self, session_id: Any, *, after: Any = 0, limit: Any = None) -> Any:
        return self.run(self.store.load(session_id, after=after, limit=limit))

    def tail(self, session_id: Any, n: Any) -> Any:
        return self.run(self.store.tail(session_id, n))

    def get(self, session_id: Any, entry_id: Any) -> Any:
        return self.run(self.store.get(session_id, entry_id))

    def delete(self, session_id: Any) -> Any:
        return self.run(self.store.delete(session_id))

    def truncate(self, session_id: Any, after: Any) -> Any:
        return self.run(self.store.truncate(session_id, after))

    def sessions(self, *, prefix: Any = None, after: Any = None, limit: Any = None) -> Any:
        return self.run(self.store.sessions(prefix=prefix, after=after, limit=limit))

    def health(self) -> Any:
        return self.run(self.store.health())

    def replayed(self, session_id: Any, idempotency_key: Any) -> Any:
        return self.run(self.store.replayed(session_id, idempotency_key))

    def save_checkpoint(self, session_id: Any, seq: Any, data: Any) -> Any:
        return self.run(self.store.save_checkpoint(session_id, seq, data))

    def checkpoint(self, session_id: Any) -> Any:
        return self.run(self.store.checkpoint(session_id))

    def load_from_checkpoint(self, session_id: Any, *, limit: Any = None) -> Any:
        return self.run(self.store.load_from_checkpoint(session_id, limit=limit))

    def earlier(self, session_id: Any, before: Any) -> Any:
        return self.run(self.store.earlier(session_id, before))

    @contextlib.contextmanager
    def lock(self, session_id: Any, *, timeout: Any = None) -> Iterator[None]:
        """The async lock, entered and left on this loop, as a plain ``with`` block."""
        held = self.store.lock(session_id, timeout=timeout)
        self.run(held.__aenter__())
        try:
            yield
        except BaseException as exc:
            if not self.run(held.__aexit__(type(exc), exc, exc.__traceback__)):
                raise
        else:
            self.run(held.__aexit__(None, None, None))

    def close(self) -> None:
        self.run(self.store.close())


@dataclasses.dataclass
class Case:
    """One store under test: ``store`` has the sync API whatever the flavour."""

    kind: str
    flavour: str
    store: Any
    raw: Any  # the Store or AsyncStore itself
    prefix: str
    url: str | None  # what a worker process opens; None for the memory store
    loop: asyncio.AbstractEventLoop | None

    def sid(self, name: str = "session") -> str:
        return self.prefix + name

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        assert self.loop is not None
        return self.loop.run_until_complete(coroutine)

    def worker_flags(self) -> list[str]:
        tiered = ["--tiered"] if self.kind == "tiered" else []
        return tiered + (["--async"] if self.flavour == "async" else [])


def build(kind: str, flavour: str, tmp_path: Path, loop: asyncio.AbstractEventLoop | None) -> Any:
    """(store, url, durable tier to close) for one kind and flavour."""
    if kind == "memory":
        return (MemoryStore() if flavour == "sync" else AsyncMemoryStore()), None, None
    path = tmp_path / "store.db"
    url = sqlite_url(path) if kind in ("sqlite", "tiered") else server_url(kind)
    if kind == "tiered":
        cls = tiered_class(flavour)
        durable = SQLiteStore(path) if flavour == "sync" else AsyncSQLiteStore(path)
        return cls(durable, hot_size=8), url, durable
    if flavour == "sync":
        return open_store(url), url, None

    async def opened() -> AsyncStore:  # some clients want a running loop when built
        return open_async_store(url)

    assert loop is not None
    return loop.run_until_complete(opened()), url, None


@pytest.fixture(
    params=[(kind, flavour) for kind in KINDS for flavour in FLAVOURS],
    ids=[f"{kind}-{flavour}" for kind in KINDS for flavour in FLAVOURS],
)
def case(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Case]:
    kind, flavour = request.param
    loop = asyncio.new_event_loop() if flavour == "async" else None
    try:
        raw, url, durable = build(kind, flavour, tmp_path, loop)
        store = raw if loop is None else Blocking(raw, loop)
        prefix = f"ctxw-test-{uuid.uuid4().hex[:12]}-"
        yield Case(kind, flavour, store, raw, prefix, url, loop)
        for session_id in store.sessions(prefix=prefix):
            store.delete(session_id)
        store.close()
        if durable is not None:
            (durable if loop is None else Blocking(durable, loop)).close()
    finally:
        if loop is not None:
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()


@contextmanager
def async_stores(kind: str, tmp_path: Path) -> Iterator[Callable[[], Any]]:
    """Opens ``AsyncStore`` objects of ``kind`` (memory, sqlite, redis, postgresql) that
    share one fresh set of data — as processes share a store; removed after.

    Redis and PostgreSQL are the real servers (see ``require_server``); each
    set gets its own key prefix or schema, so tests never see each other.
    """
    name = f"ctxwindow_test_{uuid.uuid4().hex[:12]}"
    if kind == "memory":
        from ctxwindow.stores.memory import AsyncMemoryStore, MemoryStore

        shared = MemoryStore()
        yield lambda: AsyncMemoryStore(shared)
    elif kind == "sqlite":
        from ctxwindow.stores.sqlite import AsyncSQLiteStore

        yield lambda: AsyncSQLiteStore(tmp_path / f"{name}.db")
    elif kind == "redis":
        import redis

        from ctxwindow.stores.redis import AsyncRedisStore

        url = require_server(kind)
        yield lambda: AsyncRedisStore(url, prefix=name)
        with redis.Redis.from_url(url) as client:
            keys = list(client.scan_iter(match=f"{name}:*", count=1000))
            if keys:
                client.delete(*keys)
    else:
        import psycopg

        from ctxwindow.stores.postgres import AsyncPostgresStore

        url = require_server(kind)
        yield lambda: AsyncPostgresStore(url, schema=name)
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')


@contextmanager
def async_store(kind: str, tmp_path: Path) -> Iterator[Any]:
    """One ``AsyncStore`` of ``kind`` on fresh data (see ``async_stores``)."""
    with async_stores(kind, tmp_path) as open_store:
        yield open_store()
