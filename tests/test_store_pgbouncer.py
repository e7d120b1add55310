"""PostgreSQL stores behind PgBouncer in transaction mode (``?pooler=transaction``).

The contract suites run every store test on the "pgbouncer" cases too
(``tests/support/stores.py``); this module checks what only a pooler in
transaction mode shows: writers in several processes, lease locks (taken,
renewed, lost, freed after ``kill -9``), a PgBouncer restarted under load (on
an instance of the test's own), nothing prepared or set on shared server
connections, and the URL parameters. PgBouncer 1.18 (Debian's) tracks no
prepared statements: a store that prepared them fails here.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from ctxwindow.cli import app
from ctxwindow.errors import SessionBusyError, StoreError, StoreUnavailableError
from ctxwindow.messages import Entry
from ctxwindow.stores import entry_to_json, open_async_store, open_store
from ctxwindow.stores.postgres import MIGRATIONS, SCHEMA_VERSION, AsyncPostgresStore, PostgresStore
from ctxwindow.stores.postgres.common import split_url
from tests.support.pgbouncer import OwnPgBouncer, pgbouncer_url
from tests.support.stores import POSTGRES_URL

psycopg = pytest.importorskip("psycopg")  # the stores import it when they connect

T = TypeVar("T")
servers = pytest.mark.servers  # the tests that start PgBouncer (the others check arguments)
FLAVOURS = ["sync", "async"]
SUPPORT = Path(__file__).parent / "support"
TIMEOUT = 1.0  # the stores' timeout in the fault test, in seconds


def entries(*texts: str) -> list[Entry]:
    return [Entry(message={"role": "user", "content": text}, tokens=1, seq=0) for text in texts]


def unique(name: str = "s") -> str:
    return f"pgb-{uuid.uuid4().hex[:10]}-{name}"


def admin(query: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """``query`` on the shared PostgreSQL directly (not through any pooler)."""
    with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
        cursor = conn.execute(query, params)
        return cursor.fetchall() if cursor.description else []


# -- stores of both flavours, an async one on a loop that runs all along ----------------------


class OnLoop:
    """An ``AsyncPostgresStore`` with the sync API, its calls awaited on an event loop that
    runs in a thread of its own all along (as a service's does): its lease renewals run
    between calls."""

    def __init__(self, *args: Any, **options: Any) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

        async def built() -> AsyncPostgresStore:
            return AsyncPostgresStore(*args, **options)

        self.store = self.run(built())

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result()

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.store, name)
        return lambda *args, **kw: self.run(method(*args, **kw))

    @contextlib.contextmanager
    def lock(self, session_id: str, *, timeout: float | None = None) -> Iterator[None]:
        held = self.store.lock(session_id, timeout=timeout)
        self.run(held.__aenter__())
        try:
            yield
        finally:
            self.run(held.__aexit__(None, None, None))

    def close(self) -> None:
        self.run(self.store.close())

    def shut_down(self) -> None:
        """Stop the loop (the store closed first)."""
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join()
        self.loop.close()


@pytest.fixture
def schema() -> Iterator[str]:
    """A schema of the test's own (the stores create it), dropped after."""
    name = f"ctxwindow_pgb_{uuid.uuid4().hex[:12]}"
    yield name
    admin(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')


@pytest.fixture
def opened() -> Iterator[Callable[..., Any]]:
    """``opened(flavour, url, **options)``: a PostgreSQL store with the sync API; each is
    closed after the test."""
    stores: list[Any] = []

    def open_one(flavour: str, url: str, **options: Any) -> Any:
        store = PostgresStore(url, **options) if flavour == "sync" else OnLoop(url, **options)
        stores.append(store)
        return store

    yield open_one
    for store in reversed(stores):
        with contextlib.suppress(StoreError):
            store.close()
        if isinstance(store, OnLoop):
            store.shut_down()


@pytest.fixture
def bouncer_url() -> str:
    """The URL of this process's PgBouncer (``?pooler=transaction``)."""
    return pgbouncer_url()


@pytest.fixture
def own_bouncer() -> Iterator[OwnPgBouncer]:
    pgbouncer_url()  # skips (or fails) as the shared one would
    with OwnPgBouncer() as bouncer:
        yield bouncer


@pytest.fixture
def one_server_connection() -> Iterator[OwnPgBouncer]:
    """A PgBouncer of the test's own with one server connection: every client's
    transactions run on the same server session, which a probe can then look into."""
    pgbouncer_url()
    with OwnPgBouncer(pool_size=1) as bouncer:
        yield bouncer


def lease_rows(schema: str) -> list[tuple[Any, ...]]:
    return admin(f'SELECT session_id, holder FROM "{schema}".ctxwindow_locks')


def expire_lease(schema: str, session_id: str) -> None:
    """Make the session's lease expired now, as if its holder stopped renewing it."""
    admin(
        f'UPDATE "{schema}".ctxwindow_locks SET expires_at = clock_timestamp()'
        " - interval '1 second' WHERE session_id = %s",
        (session_id,),
    )


def busy(store: Any, session_id: str) -> bool:
    """Whether another holder has the session (one try, from this thread)."""
    try:
        with store.lock(session_id, timeout=0):
            return False
    except SessionBusyError:
        return True


def seconds_until_locked(store: Any, session_id: str, limit: float) -> float:
    started = time.monotonic()
    while time.monotonic() - started < limit:
        try:
            with store.lock(session_id, timeout=0):
                return time.monotonic() - started
        except StoreError:  # held (SessionBusyError), or PgBouncer still coming back
            time.sleep(0.02)
    raise AssertionError(f"session {session_id!r} still held after {limit} s")


# -- the URL parameters --------------------------------------------------------------------


def test_the_store_parameters_are_kept_from_libpq_byte_for_byte() -> None:
    url = "postgresql://u@db:6432/app?application_name=a%20b&pooler=transaction&lock_ttl=2"
    assert split_url(url) == (
        "postgresql://u@db:6432/app?application_name=a%20b",
        {"pooler": "transaction", "lock_ttl": "2"},
    )
    assert split_url("postgresql://db/app") == ("postgresql://db/app", {})


def test_the_redacted_url_still_says_the_pooler() -> None:
    store = AsyncPostgresStore("postgresql://app:s3cret-pw@db:6432/app?pooler=transaction")
    assert store.url == "postgresql://app:***@db:6432/app?pooler=transaction"
    assert (store.pooler, store.lock_ttl) == ("transaction", 5.0)
    direct = AsyncPostgresStore("postgresql://db/app")
    assert (direct.pooler, direct.lock_ttl) == (None, 5.0)


BAD = [
    ("?pooler=session", {}, "pooler='session'"),
    ("?pooler=", {}, "pooler=''"),
    ("", {"pooler": "statement"}, "pooler='statement'"),
    ("?pooler=transaction", {"pooler": "Transaction"}, "pooler='Transaction'"),
    ("?pooler=transaction&lock_ttl=0", {}, "lock_ttl must be a positive number.*'0'"),
    ("?pooler=transaction&lock_ttl=soon", {}, "lock_ttl must be a positive number.*'soon'"),
    ("?pooler=transaction", {"lock_ttl": -1}, "lock_ttl must be a positive number.*-1"),
    ("?pooler=transaction&lock_ttl=2", {"lock_ttl": 3}, "lock_ttl=3 contradicts lock_ttl=2"),
    ("?lock_ttl=2", {}, "lock_ttl is the lease of a lock in pooler mode only"),
    ("", {"lock_ttl": 2}, "lock_ttl is the lease of a lock in pooler mode only"),
    ("?pool_size=-1", {}, "pool_size must be a whole number.*'-1'"),
    ("?pool_size=four", {}, "pool_size must be a whole number.*'four'"),
    ("?pool_size=²", {}, "pool_size must be a whole number.*'²'"),
    ("?pool_size=1001", {}, "pool_size must be a whole number.*'1001'"),
    ("?pool_size=", {}, "pool_size must be a whole number.*''"),
    ("", {"pool_size": True}, "pool_size must be a whole number.*True"),
    ("", {"pool_size": 2.5}, "pool_size must be a whole number.*2.5"),
    ("?pool_size=8", {"pool_size": 4}, "pool_size=4 contradicts pool_size=8"),
]


@pytest.mark.parametrize(("query", "options", "error"), BAD)
@pytest.mark.parametrize("flavour", FLAVOURS)
def test_bad_store_url_options_are_refused_naming_them(
    flavour: str, query: str, options: dict[str, Any], error: str
) -> None:
    """Refused when the store is built, before anything connects; the URL (redacted)
    is named when the bad value is in it."""
    url = "postgresql://app:s3cret-pw@127.0.0.1:9/app" + query
    cls = PostgresStore if flavour == "sync" else AsyncPostgresStore
    with pytest.raises(ValueError, match=error) as caught:
        cls(url, **options)
    assert "s3cret-pw" not in str(caught.value)
    if query and not options:
        assert "postgresql://app:***@127.0.0.1:9/app" in str(caught.value)
        with pytest.raises(ValueError, match=error):
            (open_store if flavour == "sync" else open_async_store)(url)


def test_the_cli_refuses_a_bad_pooler_in_one_line() -> None:
    url = "postgresql://127.0.0.1:9/app?pooler=session"
    result = CliRunner().invoke(app, ["sessions", "list", "--store", url])
    assert result.exit_code == 2
    assert "pooler='session'" in result.stderr and "Traceback" not in result.stderr


@servers
@pytest.mark.parametrize("flavour", FLAVOURS)
def test_the_pooler_parameter_round_trips_through_open_store(
    bouncer_url: str, flavour: str
) -> None:
    url = bouncer_url + "&lock_ttl=2.5"
    sid = unique("往返 🎉")
    if flavour == "sync":
        with open_store(url) as store:
            assert isinstance(store, PostgresStore)
            assert (store.url, store.pooler, store.lock_ttl) == (url, "transaction", 2.5)
            health = store.health()
            with store.lock(sid, timeout=5):
                store.append(sid, entries("через пулер", "プーラー"))
            store.delete(sid)
    else:

        async def main() -> dict[str, Any]:
            async with open_async_store(url) as store:
                assert isinstance(store, AsyncPostgresStore)
                assert (store.url, store.pooler, store.lock_ttl) == (url, "transaction", 2.5)
                async with store.lock(sid, timeout=5):
                    await store.append(sid, entries("через пулер"))
                await store.delete(sid)
                return await store.health()

        health = asyncio.run(main())
    assert health["ok"] is True and health["pooler"] == "transaction"
    assert health["url"] == url


@servers
def test_the_cli_reads_a_store_through_the_pooler(bouncer_url: str) -> None:
    from ctxwindow.stores.tenants import ANONYMOUS, session_key

    name = unique("会话")
    with open_store(bouncer_url) as store:
        store.append(session_key(ANONYMOUS, name), entries("你好", "こんにちは"))
    try:
        result = CliRunner().invoke(
            app, ["sessions", "list", "--store", bouncer_url, "--prefix", name, "--json"]
        )
        assert result.exit_code == 0, result.stderr
        assert name in result.stdout
    finally:
        with open_store(bouncer_url) as store:
            store.delete(session_key(ANONYMOUS, name))


# -- nothing prepared, nothing set on a server connection others share ---------------------


def prepared_on_the_server(bouncer: OwnPgBouncer) -> list[str]:
    """The statements prepared on the one server connection behind ``bouncer``."""
    with psycopg.connect(split_url(bouncer.url)[0], autocommit=True, prepare_threshold=None) as c:
        return [row[0] for row in c.execute("SELECT name FROM pg_prepared_statements")]


def settings_on_the_server(bouncer: OwnPgBouncer) -> tuple[str, str, str]:
    with psycopg.connect(split_url(bouncer.url)[0], autocommit=True, prepare_threshold=None) as c:
        row = c.execute(
            "SELECT current_setting('statement_timeout'),"
            " current_setting('idle_in_transaction_session_timeout'),"
            " current_setting('default_transaction_read_only')"
        ).fetchone()
    assert row is not None
    return row


def use_every_call(store: Any, session_id: str) -> None:
    store.append(session_id, entries("a", "b"), idempotency_key=f"k-{uuid.uuid4().hex}")
    store.load(session_id)
    store.tail(session_id, 1)
    store.get(session_id, "nope")
    store.sessions(prefix=session_id)
    store.save_checkpoint(session_id, 1, b"\x00checkpoint")
    store.load_from_checkpoint(session_id, limit=1)
    store.earlier(session_id, 2)
    store.health()
    with store.lock(session_id, timeout=5):
        pass


@servers
@pytest.mark.parametrize("flavour", FLAVOURS)
def test_a_pooler_store_prepares_nothing_on_the_server(
    one_server_connection: OwnPgBouncer, opened: Callable[..., Any], flavour: str, schema: str
) -> None:
    """psycopg prepares a statement run 5 times; PgBouncer 1.18 would hand it to another
    client's transaction, or a later one to a server connection that lacks it."""
    bouncer = one_server_connection
    store = opened(flavour, bouncer.url, schema=schema)
    for _ in range(8):
        use_every_call(store, "s")
    assert prepared_on_the_server(bouncer) == []
    # the control: a client that prepares leaves its statement on that server connection
    with psycopg.connect(split_url(bouncer.url)[0], autocommit=True) as preparing:
        for _ in range(6):
            preparing.execute("SELECT 1 + %s", (1,))
    assert prepared_on_the_server(bouncer) != []


@servers
@pytest.mark.parametrize("read_only", [False, True])
def test_a_pooler_store_sets_its_timeouts_per_transaction_only(
    one_server_connection: OwnPgBouncer, schema: str, read_only: bool
) -> None:
    """The timeouts (and read-only mode) hold inside the store's transactions and are
    gone after them: the server connection is the next client's as it was."""
    bouncer = one_server_connection
    before = settings_on_the_server(bouncer)
    assert before[0] != "1500ms"
    PostgresStore(bouncer.url, schema=schema).close()  # creates the tables
    with PostgresStore(bouncer.url, schema=schema, timeout=1.5, read_only=read_only) as store:
        if not read_only:
            use_every_call(store, "s")
        store.load("s")
        # below the store's API: what its transactions run under
        with store._transaction("look at the settings") as conn:
            row = conn.execute(
                "SELECT current_setting('statement_timeout'),"
                " current_setting('idle_in_transaction_session_timeout'),"
                " current_setting('transaction_read_only')"
            ).fetchone()
        assert row == ("1500ms", "1500ms", "on" if read_only else "off")
        assert settings_on_the_server(bouncer) == before
    # the control: a store without pooler mode sets them on the (shared) server connection
    with PostgresStore(split_url(bouncer.url)[0], schema=schema, timeout=1.5) as direct:
        direct.load("s")
        assert settings_on_the_server(bouncer)[:2] == ("1500ms", "1500ms")


@servers
def test_a_read_only_pooler_store_is_refused_by_the_server_too(
    bouncer_url: str, schema: str
) -> None:
    """Below the store's own check: its transactions begin READ ONLY."""
    with PostgresStore(bouncer_url, schema=schema) as writer:
        writer.append("s", entries("kept"))
    with PostgresStore(bouncer_url, schema=schema, read_only=True) as reader:
        with pytest.raises(StoreError, match="read-only transaction"):
            reader._append("s", entries("sneaked in"), None)
        with pytest.raises(StoreError, match="read-only transaction"):
            reader._truncate("s", 0)
        assert [e.message["content"] for e in reader.load("s")] == ["kept"]
        with reader.lock("s", timeout=5):  # a lock is coordination, not data: it still works
            assert [row[0] for row in lease_rows(schema)] == ["s"]
    assert lease_rows(schema) == []


# -- the schema: version 6 adds the lease table, from any older version ----------------------


@servers
@pytest.mark.parametrize("version", range(1, SCHEMA_VERSION))
def test_a_database_of_any_older_version_migrates_through_the_pooler(
    bouncer_url: str, schema: str, version: int
) -> None:
    old = dataclasses.replace(entries("旧的 entry")[0], seq=1)
    with psycopg.connect(POSTGRES_URL, autocommit=True) as conn, conn.transaction():
        conn.execute(f'CREATE SCHEMA "{schema}"')
        conn.execute(
            f'CREATE TABLE "{schema}".ctxwindow_schema_version'
            " (version integer PRIMARY KEY, applied_at double precision NOT NULL)"
        )
        for step in range(1, version + 1):
            for statement in MIGRATIONS[step]:
                conn.execute(statement.replace("{s}", f'"{schema}".'))
            conn.execute(f'INSERT INTO "{schema}".ctxwindow_schema_version VALUES (%s, 0)', (step,))
        row = ("old", 1, old.id, entry_to_json(old), old.tokens, old.created_at)
        conn.execute(
            f'INSERT INTO "{schema}".ctxwindow_entries VALUES (%s, %s, %s, %s, %s, %s)', row
        )
        if version >= 2:
            conn.execute(f"INSERT INTO \"{schema}\".ctxwindow_sessions VALUES ('old', 1, 0)")
    with PostgresStore(bouncer_url, schema=schema) as store:
        assert store.health()["schema_version"] == SCHEMA_VERSION
        assert store.load("old") == [old]
        with store.lock("old", timeout=5):
            assert [row[0] for row in lease_rows(schema)] == ["old"]
            assert [e.seq for e in store.append("old", entries("新的"))] == [2]
    assert lease_rows(schema) == []


# -- several processes through the pooler ---------------------------------------------------


def spawn(script: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(SUPPORT / script), *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def run_together(workers: list[subprocess.Popen[str]]) -> list[tuple[str, str]]:
    """Start the workers at once, every one connected first; their output."""
    for worker in workers:
        assert worker.stdout is not None
        assert worker.stdout.readline() == "ready\n", worker.communicate()[1]
    for worker in workers:
        assert worker.stdin is not None
        worker.stdin.write("go\n")
        worker.stdin.flush()
    return [worker.communicate(timeout=120) for worker in workers]


@servers
def test_four_writer_processes_lose_nothing_and_store_nothing_twice(bouncer_url: str) -> None:
    """Two sync and two async writers, two to a session, each appending 40 entries one at
    a time: every acknowledged append is there once, and the seqs run 1..80."""
    sessions = [unique("甲"), unique("乙")]
    workers = []
    with contextlib.ExitStack() as stack:
        for n in range(4):
            flags = ["--count", "40", "--wait", *(["--async"] if n % 2 else [])]
            workers.append(
                stack.enter_context(spawn("store_worker.py", bouncer_url, sessions[n // 2], *flags))
            )
        outputs = run_together(workers)
    try:
        assert all(worker.returncode == 0 for worker in workers), [err for _, err in outputs]
        with PostgresStore(bouncer_url) as store:
            for n, sid in enumerate(sessions):
                reported = [line.split() for out, _ in outputs[2 * n : 2 * n + 2]
                            for line in out.splitlines()]  # fmt: skip
                loaded = store.load(sid)
                assert [e.seq for e in loaded] == list(range(1, 81))
                assert sorted((int(seq), id_) for seq, id_ in reported) == [
                    (e.seq, e.id) for e in loaded
                ]
    finally:
        with PostgresStore(bouncer_url) as store:
            for sid in sessions:
                store.delete(sid)


@servers
def test_two_processes_exclude_each_other_through_the_pooler(
    bouncer_url: str, tmp_path: Path
) -> None:
    """A sync and an async process each add 1 to a file 25 times under the lock."""
    counter = tmp_path / "counter"
    counter.write_text("0")
    sid = unique("计数")
    with contextlib.ExitStack() as stack:
        workers = [
            stack.enter_context(
                spawn("lock_worker.py", bouncer_url, sid, str(counter), "--count", "25", *flags)
            )
            for flags in ([], ["--async"])
        ]
        outputs = run_together(workers)
    assert [out for out, _ in outputs] == ["done\n", "done\n"], [err for _, err in outputs]
    assert counter.read_text() == "50"


@servers
@pytest.mark.parametrize("flavour", FLAVOURS)
def test_a_holder_killed_with_sigkill_keeps_the_session_until_its_lease_ends(
    bouncer_url: str, flavour: str, tmp_path: Path
) -> None:
    """Free when the lease the holder last renewed ends (on the server's clock): not
    before, and within lock_ttl (2 s) of the kill."""
    lock_ttl = 2.0
    url = f"{bouncer_url}&lock_ttl={lock_ttl:g}"
    sid = unique("killed")
    args = ["--hold", *(["--async"] if flavour == "async" else [])]
    with PostgresStore(url) as other, spawn("lock_worker.py", url, sid, str(tmp_path), *args) as h:
        assert h.stdout is not None and h.stdin is not None
        assert h.stdout.readline() == "ready\n", h.communicate()[1]
        h.stdin.write("go\n")
        h.stdin.flush()
        assert h.stdout.readline() == "held\n", h.communicate()[1]
        time.sleep(lock_ttl * 1.5)  # renewed past its first lease
        assert busy(other, sid)
        h.send_signal(signal.SIGKILL)
        h.wait()
        killed = time.monotonic()
        [(left,)] = admin(
            "SELECT extract(epoch FROM expires_at - clock_timestamp())::float8"
            " FROM ctxwindow_locks WHERE session_id = %s",
            (sid,),
        )
        assert 0 < left <= lock_ttl
        assert busy(other, sid)
        seconds_until_locked(other, sid, lock_ttl + 5)
        freed = time.monotonic() - killed
    assert left - 0.1 < freed < left + 1.5


# -- leases in one process -----------------------------------------------------------------


@servers
@pytest.mark.parametrize("flavour", FLAVOURS)
def test_a_lease_is_renewed_while_its_block_runs(
    bouncer_url: str, opened: Callable[..., Any], flavour: str, schema: str
) -> None:
    """Held for 3 lock_ttl, the session stays held; a renewal finds the lease expired but
    still its own (nobody took it) and extends it; the end of the block frees it."""
    url = f"{bouncer_url}&lock_ttl=1"
    holder, other = opened(flavour, url, schema=schema), opened("sync", url, schema=schema)
    with holder.lock("s"):
        ends = time.monotonic() + 3.0
        while time.monotonic() < ends:
            assert busy(other, "s")
            time.sleep(0.1)
        expire_lease(schema, "s")
        time.sleep(1.0)  # renewals (every 1/3 s) ran since
        assert busy(other, "s")
    assert not busy(other, "s")
    assert lease_rows(schema) == []


@servers
@pytest.mark.parametrize("flavour", FLAVOURS)
def test_a_lease_taken_over_is_reported_lost_and_not_released_by_its_former_holder(
    bouncer_url: str,
    opened: Callable[..., Any],
    flavour: str,
    schema: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    url = f"{bouncer_url}&lock_ttl=1"
    holder, taker = opened(flavour, url, schema=schema), opened("sync", url, schema=schema)
    third = opened("sync", url, schema=schema)
    held = holder.lock("s")
    with caplog.at_level(logging.WARNING, logger="ctxwindow.stores"):
        held.__enter__()
        expire_lease(schema, "s")  # as if the holder stalled past its lease
        with taker.lock("s", timeout=0):
            time.sleep(1.0)  # the former holder's renewal (every 1/3 s) finds the lease gone
            assert "was lost while held" in caplog.text
            held.__exit__(None, None, None)  # its release finds the taker's lease: kept
            assert busy(third, "s")
    assert not busy(third, "s")
    assert lease_rows(schema) == []


@servers
@pytest.mark.parametrize("flavour", FLAVOURS)
def test_closing_a_store_gives_up_its_leases(
    bouncer_url: str, opened: Callable[..., Any], flavour: str, schema: str
) -> None:
    """Not held until the lease (5 s) ends: close deletes it; the block ending later
    sends nothing."""
    holder = opened(flavour, bouncer_url, schema=schema)
    other = opened("sync", bouncer_url, schema=schema)
    with holder.lock("s"):
        holder.close()
        assert seconds_until_locked(other, "s", 3.0) < 1.0
    assert lease_rows(schema) == []


Operation = tuple[str, int]
HOLDERS = 3
OPERATIONS = st.lists(
    st.tuples(st.sampled_from(["take", "release", "expire"]), st.integers(0, HOLDERS - 1)),
    max_size=16,
)


@pytest.fixture(scope="module")
def three_holders() -> Iterator[tuple[list[PostgresStore], str]]:
    """Three store objects on one schema (as three processes), with a lease far longer
    than an example: a lease expires only when the test says so."""
    url = pgbouncer_url() + "&lock_ttl=600"
    name = f"ctxwindow_pgb_{uuid.uuid4().hex[:12]}"
    stores = [PostgresStore(url, schema=name) for _ in range(HOLDERS)]
    yield stores, name
    for store in stores:
        store.close()
    admin(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')


@servers
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(operations=OPERATIONS)
def test_leases_behave_as_the_model_says(
    three_holders: tuple[list[PostgresStore], str], operations: list[Operation]
) -> None:
    """Take (one try), release and expiry, in any order, from three holders: a take
    succeeds exactly when nobody holds a live lease, and a release removes only the
    releaser's own lease (a holder whose lease expired and was taken over removes nothing)."""
    stores, schema = three_holders
    sid = unique()
    owner: int | None = None  # whose token the lease row carries
    expired = False
    open_blocks: dict[int, Any] = {}
    try:
        for operation, who in operations:
            if operation == "take" and who not in open_blocks:  # a holder never re-takes
                block = stores[who].lock(sid, timeout=0)
                try:
                    block.__enter__()
                except SessionBusyError:
                    assert owner is not None and not expired, (operation, who)
                    continue
                assert owner is None or expired, (operation, who, owner)
                open_blocks[who], owner, expired = block, who, False
            elif operation == "release" and who in open_blocks:
                open_blocks.pop(who).__exit__(None, None, None)
                if owner == who:
                    owner, expired = None, False
            elif operation == "expire" and owner is not None:
                expire_lease(schema, sid)
                expired = True
            assert [row[0] for row in lease_rows(schema)].count(sid) == (owner is not None)
    finally:
        for block in open_blocks.values():
            block.__exit__(None, None, None)
        admin(f'DELETE FROM "{schema}".ctxwindow_locks WHERE session_id = %s', (sid,))


# -- PgBouncer restarted under load (an instance of the test's own) ---------------------------


@dataclasses.dataclass
class Load:
    """Appends one entry at a time to a session until stopped; what each call gave."""

    store: Any
    session_id: str
    acknowledged: list[Entry] = dataclasses.field(default_factory=list)
    failures: list[tuple[float, BaseException]] = dataclasses.field(default_factory=list)
    last_success: float = 0.0

    def __post_init__(self) -> None:
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self) -> None:
        n = 0
        while not self.stop.is_set():
            started = time.monotonic()
            try:
                self.acknowledged += self.store.append(self.session_id, entries(f"负载 {n}"))
                self.last_success = time.monotonic()
            except StoreError as exc:
                self.failures.append((time.monotonic() - started, exc))
                time.sleep(0.02)
            n += 1

    def end(self) -> None:
        self.stop.set()
        self.thread.join(timeout=30)
        assert not self.thread.is_alive(), "an append hung"


@servers
@pytest.mark.parametrize("how", ["stop", "kill"])
@pytest.mark.parametrize("flavour", FLAVOURS)
def test_pgbouncer_restarted_under_load(
    own_bouncer: OwnPgBouncer, opened: Callable[..., Any], flavour: str, how: str, schema: str
) -> None:
    """While PgBouncer is down (SIGTERM: immediate shutdown; SIGKILL) every call fails
    with StoreUnavailableError within the store's timeout (connecting: libpq's 2 s at
    least); once it is back the same store objects work again, nothing acknowledged is
    lost, and the lock released while it was down is free within 2 s — not the lease's
    30 s: the release is retried in the background."""
    store = opened(flavour, own_bouncer.url, schema=schema, timeout=TIMEOUT, lock_ttl=30)
    other = opened("sync", own_bouncer.url, schema=schema, timeout=TIMEOUT)
    store.append("load", entries("before"))
    load = Load(store, "load")
    try:
        time.sleep(0.5)
        held = store.lock("held")
        held.__enter__()
        getattr(own_bouncer, how)()
        started = time.monotonic()
        held.__exit__(None, None, None)  # its release fails: retried in the background
        assert time.monotonic() - started < max(TIMEOUT, 2.0) + 1.5
        time.sleep(1.0)
        own_bouncer.start()
        back = time.monotonic()
        while load.last_success < back:
            assert time.monotonic() - back < 5.0, "appends did not resume"
            time.sleep(0.05)
        assert seconds_until_locked(other, "held", 5.0) < 2.0
    finally:
        load.end()
    assert load.failures, "PgBouncer was down: some append must have failed"
    assert all(isinstance(exc, StoreUnavailableError) for _, exc in load.failures), load.failures
    assert max(took for took, _ in load.failures) < max(TIMEOUT, 2.0) + 1.5
    stored = other.load("load")
    assert [e.seq for e in stored] == list(range(1, len(stored) + 1))
    assert {e.id for e in load.acknowledged} <= {e.id for e in stored}
    assert lease_rows(schema) == []


@servers
def test_an_archive_behind_pgbouncer_prepares_nothing_and_serves_two_clients(
    one_server_connection: OwnPgBouncer,
) -> None:
    """``PostgresArchive`` with ``?pooler=transaction``: two archives (two connections to the
    pooler, one server connection behind it) index and search 30 times each, past psycopg's
    threshold for preparing a statement; each search finds what was said, and nothing is
    prepared on the server connection."""
    from ctxwindow.archive import PostgresArchive
    from tests.support.archives import drop_tables

    table = f"ctxw_archive_{uuid.uuid4().hex[:8]}"
    url = one_server_connection.url
    assert "pooler=transaction" in url
    archives = [PostgresArchive(url, table=table) for _ in range(2)]
    try:
        for n in range(30):
            said = Entry(
                message={"role": "user", "content": f"parcel {n} 包裹 📦"}, tokens=4, seq=n + 1
            )
            archives[n % 2].index("s", [said], through=n + 1)
            hits = archives[(n + 1) % 2].search("s", f"parcel {n}", k=3)
            assert hits and hits[0].entry.message["content"] == f"parcel {n} 包裹 📦"
        assert prepared_on_the_server(one_server_connection) == []
    finally:
        for archive in archives:
            archive.close()
        drop_tables([table])
