"""Stores under faults: servers stopped, stalled and restarted; SQLite files that cannot be written.

Every server these tests stop, stall or restart is their own
(``tests/support/own_servers.py``): a ``redis-server`` or a PostgreSQL cluster on a
free port, in a temporary directory, ended after the test (module) — never
the shared servers. Without the binaries they skip (fail with
``CTXWINDOW_REQUIRE_SERVERS=1``). SQLite faults that need root (an immutable
file, a full tmpfs) skip without it.

Every scenario is bounded: stores get ``timeout=1`` and each call that could
hang runs in a thread given a few seconds (``within``); a stalled server is
resumed in a ``finally``. What the scenarios pin down:

- a session lock whose holder ended while the server was away is free
  within 5 s of the server's return (Redis: the holder retries its release in
  the background; PostgreSQL: the server drops the locks of a connection that
  ended), and a dead holder's Redis lease outlives it by ``lock_ttl`` at most;
- calls and ``health()`` of a stalled server fail within the store's timeout;
- SQLite's ``health()`` says when appends would fail or be lost (a deleted
  directory, a read-only file or directory, a full disk, a write lock held
  too long), and the service refuses to start on a store it cannot write,
  with one line naming the path and exit code 2.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import sqlite3
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from ctxwindow.errors import SessionBusyError, StoreError, StoreUnavailableError
from ctxwindow.messages import Entry
from tests.support.own_servers import (
    OwnPostgres,
    OwnRedis,
    find_pg_bin,
    find_redis_server,
    free_port,
)
from tests.support.stores import no_server

pytestmark = [
    pytest.mark.skipif(sys.platform != "linux", reason="signals, /proc and statvfs"),
    pytest.mark.servers,
]

T = TypeVar("T")
FLAVOURS = ["sync", "async"]
TIMEOUT = 1.0  # the stores' timeout in these tests, in seconds
USABLE_WITHIN = 5.0  # the goal: a session is usable this long after its store returns
HUNG = RuntimeError("still running")


def entries(*texts: str) -> list[Entry]:
    return [Entry(message={"role": "user", "content": text}, tokens=1, seq=0) for text in texts]


def within(limit: float, call: Callable[[], T]) -> tuple[float, Any]:
    """(seconds taken, the result or the exception) of ``call``, given ``limit`` seconds.

    A call still running after ``limit`` gives ``(inf, HUNG)``; it is left to
    finish in its daemon thread (the test resumes the server it waits for).
    """
    outcome: list[Any] = []

    def run() -> None:
        try:
            outcome.append(call())
        except Exception as exc:
            outcome.append(exc)

    started = time.monotonic()
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(limit)
    if thread.is_alive():
        return float("inf"), HUNG
    return time.monotonic() - started, outcome[0]


def seconds_until_locked(store: Any, session_id: str, limit: float) -> float:
    """How long until ``store`` takes the session (polled); fails after ``limit`` seconds."""
    started = time.monotonic()
    while time.monotonic() - started < limit:
        try:
            with store.lock(session_id, timeout=0):
                return time.monotonic() - started
        except StoreError:  # held (SessionBusyError), or the server is still coming back
            time.sleep(0.05)
    raise AssertionError(f"session {session_id!r} still held {limit} s after its store returned")


# -- async stores driven from test code, their loop running all along (as the service's) -----


class LoopThread:
    """An event loop running in a thread of its own, as a service's loop runs."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result()

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join()
        self.loop.close()


class Awaited:
    """An ``AsyncStore`` with the sync API, each call awaited on the ``LoopThread``."""

    def __init__(self, store: Any, loop: LoopThread) -> None:
        self.store, self._loop = store, loop

    def append(self, session_id: str, batch: list[Entry]) -> Any:
        return self._loop.run(self.store.append(session_id, batch))

    def load(self, session_id: str) -> Any:
        return self._loop.run(self.store.load(session_id))

    def health(self) -> Any:
        return self._loop.run(self.store.health())

    @contextlib.contextmanager
    def lock(self, session_id: str, *, timeout: float | None = None) -> Iterator[None]:
        held = self.store.lock(session_id, timeout=timeout)
        self._loop.run(held.__aenter__())
        try:
            yield
        finally:
            self._loop.run(held.__aexit__(None, None, None))

    def close(self) -> None:
        self._loop.run(self.store.close())


@pytest.fixture
def opened() -> Iterator[Callable[..., Any]]:
    """``opened(flavour, sync_class, async_class, *args, **options)``: a store with the sync
    API (an async one runs on a loop of its own); every store is closed after the test."""
    loop = LoopThread()
    stores: list[Any] = []

    def open_store(flavour: str, sync_class: Any, async_class: Any, *args: Any, **kw: Any) -> Any:
        store = (
            sync_class(*args, **kw)
            if flavour == "sync"
            else Awaited(async_class(*args, **kw), loop)
        )
        stores.append(store)
        return store

    yield open_store
    for store in reversed(stores):
        with contextlib.suppress(StoreError):
            store.close()
    loop.close()


# -- Redis -------------------------------------------------------------------------------------


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[OwnRedis]:
    if find_redis_server() is None:
        no_server("no redis-server binary (set CTXWINDOW_TEST_REDIS_SERVER)")
    pytest.importorskip("redis")
    with OwnRedis(tmp_path / "redis") as server:
        yield server


def redis_store(opened: Callable[..., Any], flavour: str, url: str, **options: Any) -> Any:
    from ctxwindow.stores.redis import AsyncRedisStore, RedisStore

    return opened(flavour, RedisStore, AsyncRedisStore, url, timeout=TIMEOUT, **options)


@pytest.mark.parametrize("fault", ["stall", "restart"])
@pytest.mark.parametrize("flavour", FLAVOURS)
def test_a_redis_lease_its_holder_could_not_release_is_freed_when_redis_returns(
    own_redis: OwnRedis, opened: Callable[..., Any], flavour: str, fault: str
) -> None:
    """The holder ends while Redis is stalled or down: its release fails, and is retried in
    the background, so the session is free at once when Redis is back, even with a 30 s
    lease — that a restarted Redis restores from its snapshot. (Before: 20–30 s.)"""
    holder = redis_store(opened, flavour, own_redis.url, lock_ttl=30)
    other = redis_store(opened, "sync", own_redis.url)
    session = f"会话-🔒-{fault}"
    try:
        with holder.lock(session):
            own_redis.stall() if fault == "stall" else own_redis.stop()
        time.sleep(1.0)  # the store stays away a while after the holder ended
    finally:
        own_redis.resume() if fault == "stall" else own_redis.start()
    assert seconds_until_locked(other, session, USABLE_WITHIN) < USABLE_WITHIN


def test_a_dead_holders_redis_lease_outlives_it_by_at_most_lock_ttl(
    own_redis: OwnRedis, opened: Callable[..., Any], tmp_path: Path
) -> None:
    """A holder killed with SIGKILL cannot release: its lease (default ``lock_ttl``, 5 s),
    restored by a Redis restart, keeps the session at most that long. (Before: 30 s.)"""
    from ctxwindow.stores.redis import RedisStore

    assert RedisStore.__init__.__kwdefaults__["lock_ttl"] == 5.0  # type: ignore[index]
    worker = Path(__file__).parent / "support" / "lock_worker.py"
    with subprocess.Popen(
        [sys.executable, str(worker), own_redis.url, "s", str(tmp_path / "n"), "--hold"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=Path(__file__).parent.parent,
    ) as holder:  # fmt: skip
        try:
            assert holder.stdout is not None and holder.stdin is not None
            assert holder.stdout.readline().strip() == b"ready"
            holder.stdin.write(b"go\n")
            holder.stdin.flush()
            assert holder.stdout.readline().strip() == b"held"
        finally:
            holder.kill()
    own_redis.restart()  # the lease comes back from the snapshot
    other = redis_store(opened, "sync", own_redis.url)
    assert seconds_until_locked(other, "s", 5.0 + 1.0) <= 5.0 + 0.5


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_a_redis_lease_survives_a_stall_shorter_than_lock_ttl(
    own_redis: OwnRedis, opened: Callable[..., Any], flavour: str
) -> None:
    """A short lease is still renewed across a short blip: the holder keeps the session."""
    holder = redis_store(opened, flavour, own_redis.url)
    other = redis_store(opened, "sync", own_redis.url)
    with holder.lock("s"):
        with own_redis.stalled():
            time.sleep(1.0)
        time.sleep(2.0)  # past a renewal (every lock_ttl / 3)
        with pytest.raises(SessionBusyError), other.lock("s", timeout=0):
            pass
    assert seconds_until_locked(other, "s", 2.0) < 2.0


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_redis_calls_and_health_are_bounded_while_redis_is_stalled(
    own_redis: OwnRedis, opened: Callable[..., Any], flavour: str
) -> None:
    store = redis_store(opened, flavour, own_redis.url)
    store.append("s", entries("before"))
    bound = TIMEOUT + 1.5
    try:
        own_redis.stall()
        took, health = within(bound + 5, store.health)
        assert took < bound and health["ok"] is False and "unavailable" in health["error"]
        took, error = within(bound + 5, lambda: store.append("s", entries("during")))
        assert took < bound and isinstance(error, StoreUnavailableError), error
        took, error = within(bound + 5, lambda: store.load("s"))
        assert took < bound and isinstance(error, StoreUnavailableError), error
    finally:
        own_redis.resume()
    assert store.health()["ok"] is True
    assert [e.message["content"] for e in store.load("s")] == ["before"]


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_a_tiered_store_rides_a_stalled_warm_redis_within_its_timeout(
    own_redis: OwnRedis, opened: Callable[..., Any], flavour: str, tmp_path: Path
) -> None:
    """The warm tier is bypassed after one call of ``timeout``: appends keep being
    acknowledged by the durable store, and health says "degraded" within the bound."""
    from ctxwindow.stores.redis import AsyncRedisStore, RedisStore
    from ctxwindow.stores.sqlite import AsyncSQLiteStore, SQLiteStore
    from ctxwindow.stores.tiered import AsyncTieredStore, TieredStore

    sync = flavour == "sync"
    warm = (RedisStore if sync else AsyncRedisStore)(own_redis.url, ttl=60, timeout=TIMEOUT)
    durable = (SQLiteStore if sync else AsyncSQLiteStore)(tmp_path / "s.db")
    store = opened(flavour, TieredStore, AsyncTieredStore, durable, warm, retry_after=1.0)
    store.append("s", entries("before"))
    bound = TIMEOUT + 1.5
    try:
        own_redis.stall()
        for text in ("during 1", "during 2", "during 3"):
            took, stored = within(bound + 5, lambda text=text: store.append("s", entries(text)))
            assert took < bound and not isinstance(stored, Exception), stored
        took, health = within(bound + 5, store.health)
        assert took < bound and health["ok"] is True and health["degraded"] is True, health
    finally:
        own_redis.resume()
    texts = ["before", "during 1", "during 2", "during 3"]
    assert [e.message["content"] for e in store.load("s")] == texts


# -- PostgreSQL --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def own_postgres() -> Iterator[OwnPostgres]:
    if find_pg_bin() is None:
        no_server("no PostgreSQL binaries (set CTXWINDOW_TEST_PG_BIN)")
    pytest.importorskip("psycopg")
    server = OwnPostgres()
    try:
        yield server
    finally:
        server.close()


def pg_store(opened: Callable[..., Any], flavour: str, url: str, schema: str) -> Any:
    from ctxwindow.stores.postgres import AsyncPostgresStore, PostgresStore

    return opened(flavour, PostgresStore, AsyncPostgresStore, url, schema=schema, timeout=TIMEOUT)


def new_schema() -> str:
    return f"faults_{uuid.uuid4().hex[:12]}"


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_postgres_calls_and_health_are_bounded_while_the_server_is_stalled(
    own_postgres: OwnPostgres, opened: Callable[..., Any], flavour: str
) -> None:
    """A stalled server (SIGSTOP) answers nothing: each call, pooled connection or new,
    fails with ``StoreUnavailableError`` within the store's timeout (connecting: libpq's
    2 s at least). (Before: the call on a pooled connection hung for the whole stall.)"""
    store = pg_store(opened, flavour, own_postgres.url, new_schema())
    store.append("s", entries("before"))
    with store.lock("held"):
        pass  # the lock connection is open too
    bound = max(TIMEOUT, 2.0) + 1.5
    try:
        own_postgres.stall()
        took, health = within(bound + 5, store.health)
        assert took < bound and health["ok"] is False and "unavailable" in health["error"]
        for call in (
            lambda: store.append("s", entries("during")),
            lambda: store.load("s"),
            lambda: store.lock("s", timeout=0).__enter__(),
        ):
            took, error = within(bound + 5, call)
            assert took < bound and isinstance(error, StoreUnavailableError), (took, error)
    finally:
        own_postgres.resume()
    assert store.health()["ok"] is True
    assert [e.message["content"] for e in store.load("s")] == ["before"]


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_a_postgres_session_lock_is_freed_when_the_server_restarts(
    own_postgres: OwnPostgres,
    opened: Callable[..., Any],
    flavour: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Advisory locks die with their connection: a restarted server holds none, and the
    holder that could not unlock says so and can lock again."""
    schema = new_schema()
    holder = pg_store(opened, flavour, own_postgres.url, schema)
    other = pg_store(opened, "sync", own_postgres.url, schema)
    with caplog.at_level(logging.WARNING, logger="ctxwindow.stores"), holder.lock("s"):
        own_postgres.restart()
        assert seconds_until_locked(other, "s", USABLE_WITHIN) < 1.0
    assert "lock" in caplog.text
    assert seconds_until_locked(holder, "s", USABLE_WITHIN) < 1.0


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_a_postgres_session_lock_is_freed_when_a_stall_ends(
    own_postgres: OwnPostgres, opened: Callable[..., Any], flavour: str
) -> None:
    """The holder ends during a stall: its unlock gives up within the timeout (the
    connection is dropped), and the server frees the lock as soon as it runs again."""
    schema = new_schema()
    holder = pg_store(opened, flavour, own_postgres.url, schema)
    other = pg_store(opened, "sync", own_postgres.url, schema)
    held = holder.lock("s")
    held.__enter__()
    try:
        own_postgres.stall()
        took, _ = within(TIMEOUT + 6, lambda: held.__exit__(None, None, None))
        assert took < TIMEOUT + 1.5  # before: the unlock waited for the whole stall
        time.sleep(1.0)
    finally:
        own_postgres.resume()
    assert seconds_until_locked(other, "s", USABLE_WITHIN) < 1.0


# -- SQLite: health that tells the truth -------------------------------------------------------


def sqlite_store(opened: Callable[..., Any], flavour: str, path: Path, **options: Any) -> Any:
    from ctxwindow.stores.sqlite import AsyncSQLiteStore, SQLiteStore

    return opened(flavour, SQLiteStore, AsyncSQLiteStore, path, **options)


@contextlib.contextmanager
def read_only(path: Path) -> Iterator[None]:
    """``path`` (file or directory) not writable: immutable for root (which ignores the
    permission bits), read-only permissions for anyone else."""
    if os.geteuid() == 0:
        if shutil.which("chattr") is None:
            pytest.skip("root ignores permissions and there is no chattr")
        if subprocess.run(["chattr", "+i", str(path)], capture_output=True).returncode != 0:
            pytest.skip(f"the file system of {path} has no immutable attribute")
        try:
            yield
        finally:
            subprocess.run(["chattr", "-i", str(path)], check=True)
        return
    mode = path.stat().st_mode
    path.chmod(0o555 if path.is_dir() else 0o444)
    try:
        yield
    finally:
        path.chmod(mode)


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_sqlite_health_and_appends_when_the_directory_is_deleted(
    opened: Callable[..., Any], flavour: str, tmp_path: Path
) -> None:
    """Open connections would keep writing to the deleted file, and the turns would be lost
    at the next start: health says so, and an append is refused, not acknowledged."""
    directory = tmp_path / "données-数据"
    directory.mkdir()
    store = sqlite_store(opened, flavour, directory / "s.db")
    store.append("s", entries("kept"))
    assert store.health()["ok"] is True
    shutil.rmtree(directory)
    health = store.health()
    assert health["ok"] is False
    assert str(directory / "s.db") in health["error"] and "deleted" in health["error"]
    with pytest.raises(StoreUnavailableError, match="deleted"):
        store.append("s", entries("lost"))


@pytest.mark.parametrize("target", ["file", "directory"])
@pytest.mark.parametrize("flavour", FLAVOURS)
def test_sqlite_health_when_the_file_or_its_directory_is_read_only(
    opened: Callable[..., Any], flavour: str, target: str, tmp_path: Path
) -> None:
    path = tmp_path / "s.db"
    store = sqlite_store(opened, flavour, path)
    store.append("s", entries("one"))
    with read_only(path if target == "file" else tmp_path):
        health = store.health()
        assert health["ok"] is False, health
        assert str(path) in health["error"] and "not writable" in health["error"]
    assert store.health()["ok"] is True


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_sqlite_health_when_the_disk_is_full(
    opened: Callable[..., Any], flavour: str, tmp_path: Path
) -> None:
    mount = tmp_path / "small"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mount)], capture_output=True
    )
    if done.returncode != 0:
        pytest.skip("cannot mount a small tmpfs here (needs root)")
    try:
        store = sqlite_store(opened, flavour, mount / "s.db")
        store.append("s", entries("one"))
        filler = os.open(mount / "filler", os.O_WRONLY | os.O_CREAT)
        with contextlib.suppress(OSError):  # ENOSPC
            while True:
                os.write(filler, b"\0" * 65536)
        os.close(filler)
        health = store.health()
        assert health["ok"] is False and "full" in health["error"], health
        with pytest.raises(StoreUnavailableError, match="full"):
            store.append("s", entries("x" * 200_000))
        os.unlink(mount / "filler")
        assert store.health()["ok"] is True
        store.close()
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=True)


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_sqlite_health_is_bounded_while_another_writer_holds_the_lock(
    opened: Callable[..., Any], flavour: str, tmp_path: Path
) -> None:
    """An append would wait ``busy_timeout`` and fail; health waits as long, and says so."""
    store = sqlite_store(opened, flavour, tmp_path / "s.db", busy_timeout=0.3)
    store.append("s", entries("one"))
    writer = sqlite3.connect(tmp_path / "s.db", isolation_level=None)
    try:
        writer.execute("BEGIN IMMEDIATE")
        took, health = within(5, store.health)
        assert took < 2 and health["ok"] is False and "locked" in health["error"], health
        writer.execute("ROLLBACK")
    finally:
        writer.close()
    assert store.health()["ok"] is True


# -- the service refuses to start on a store it cannot write -----------------------------------


def start_service(store_url: str, data_dir: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CTXWINDOW_")}
    env["CTXWINDOW_DATA_DIR"] = str(data_dir)
    return subprocess.run(
        [sys.executable, "-m", "ctxwindow.server", "--port", str(free_port()),
         "--store", store_url, "--upstream", "http://127.0.0.1:9/v1"],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def assert_refused(done: subprocess.CompletedProcess[str], path: Path, why: str) -> None:
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2, done.stderr
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert lines[0].startswith("ctxwindow: error: SQLite store at")
    assert str(path) in lines[0] and why in lines[0], lines[0]


def test_the_service_refuses_a_missing_directory_in_one_line(tmp_path: Path) -> None:
    path = tmp_path / "missing" / "s.db"
    done = start_service(f"sqlite:///{path}", tmp_path)
    assert_refused(done, path, "does not exist")


def test_the_service_refuses_a_read_only_directory_in_one_line(tmp_path: Path) -> None:
    directory = tmp_path / "ro"
    directory.mkdir()
    with read_only(directory):
        done = start_service(f"sqlite:///{directory / 's.db'}", tmp_path)
    assert_refused(done, directory / "s.db", "not writable")


def test_the_service_refuses_a_read_only_file_system_in_one_line(tmp_path: Path) -> None:
    """An existing database on a file system remounted read-only."""
    mount = tmp_path / "ro-fs"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "tmpfs", str(mount)], capture_output=True)
    if done.returncode != 0:
        pytest.skip("cannot mount a tmpfs here (needs root)")
    try:
        from ctxwindow.stores.sqlite import SQLiteStore

        SQLiteStore(mount / "s.db").close()
        subprocess.run(["mount", "-o", "remount,ro", str(mount)], check=True)
        done = start_service(f"sqlite:///{mount / 's.db'}", tmp_path)
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=True)
    assert_refused(done, mount / "s.db", "read-only file system")


def test_readyz_is_503_once_the_sqlite_directory_is_deleted(tmp_path: Path) -> None:
    """``/readyz`` asks ``store.health()``, which now sees the deleted file."""
    import httpx
    from fastapi.testclient import TestClient

    from ctxwindow.server.app import create_app
    from ctxwindow.server.settings import Settings

    directory = tmp_path / "data"
    directory.mkdir()
    settings = Settings(
        store=f"sqlite:///{directory / 's.db'}", upstream="http://u.test/v1", archive="off"
    )
    app = create_app(
        settings, upstream_transport=httpx.MockTransport(lambda r: httpx.Response(200))
    )
    with TestClient(app) as http:
        assert http.get("/readyz").status_code == 200
        shutil.rmtree(directory)
        response = http.get("/readyz")
    assert response.status_code == 503 and response.json()["store"] is False
