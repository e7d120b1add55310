"""Capacity: store round trips per turn, turns per second per store node, bytes per session.

Linux only (CPU time from ``/proc``). The servers are the benchmark's own,
started on free ports and removed at the end (the shared ones are not
touched): a Redis node (append-only file, ``appendfsync everysec``), a Redis
Cluster of 3 primaries and 3 replicas (``tests/support/redis_cluster.py``), a
PostgreSQL server with its defaults (``fsync`` on, ``shared_buffers`` 128 MB)
and a PgBouncer in transaction mode in front of it
(``tests/support/pgbouncer.py``). One that cannot start is named, its rows
are left out, and the run goes on. Four parts:

1. Round trips and bytes per turn. A turn is what ``ctxwindow serve`` does
   for a chat completion in session mode with the defaults, the archive off
   (so that the archive's SQLite is not counted): hold the session (the
   store's lock), store the user turn (``append_after``: the window is
   checked as it stores), build, send upstream, store the reply, release. The service runs in
   this process (``create_app``, the real route through
   ``httpx.ASGITransport``, the upstream an ``httpx.MockTransport``) and
   reaches its store through a counting TCP proxy (asyncio, in a thread):
   a client write after a server reply starts a round trip; bytes are counted
   each way. A cluster's nodes each get a proxy (redis-py's connections are
   pointed at them). SQLite: the statements, from every connection's trace
   callback. Cross-checks: Redis's ``INFO commandstats``, and a real
   ``ctxwindow serve`` process behind the same proxy (Redis, PostgreSQL,
   PgBouncer).
2. Requests per second through N ``ctxwindow serve`` processes (N = 1, 2,
   4; each on a port of its own, warmed, the sessions spread over them as a
   balancer would) over the Redis node and over the PostgreSQL server (with
   the store's 4 idle connections a process, and with ``?pool_size=16``), a
   fake upstream answering at once, driven by a light HTTP client
   (``CONCURRENCY`` sessions at once); the CPU per request of the service,
   the upstream, the client and the store server, and the connections the
   store server accepted.
3. The store alone: N client processes (1, 2, 4) each looping the turn's
   store calls through the store API (lock, append the user turn after the
   newest entry the client knows, append the reply, unlock); turns per second in all, and the store
   server's CPU per turn (``/proc/<pid>/stat`` of redis-server, of the
   postmaster and its backends, of pgbouncer). One node takes at most
   1 / (its CPU seconds per turn) turns a second per core it can use.
4. Bytes per stored session of 100 and 2,000 messages, written as the
   service writes them (the last turn through the service: a long session
   gets its checkpoint) into a new SQLite file and a new PostgreSQL database:
   Redis ``MEMORY USAGE`` of the session's keys and the ``used_memory``
   delta (less buffers), PostgreSQL's ``pg_total_relation_size`` delta of
   the ctxwindow tables (indexes and TOAST included, after ``VACUUM``),
   SQLite's pages in use.

Messages: seeded synthetic chat turns, user turns of 60 words and assistant
replies of 120 (a Chinese or Japanese word counts as one), a quarter of them
with Chinese or Japanese sentences, one sentence in eight followed by an
emoji. Parts 2 and 3 alternate their settings round by round and report
medians; every part says how busy the machine was (``os.getloadavg()``, and
the CPU other processes used while it measured). Nothing here asserts
anything.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import json
import os
import platform
import random
import shutil
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import httpx

from bench_server import Process, free_port, revision, running
from ctxwindow.errors import CtxWindowError
from workload import sentences

REPO = Path(__file__).resolve().parent.parent
MODEL = "gpt-4o"
SEED = 20261207
USER_WORDS, REPLY_WORDS = 60, 120
EMOJI = ("🙂", "👍", "🚀", "🎉", "🤔", "✅", "📦", "🔥")
BACKENDS = ("sqlite", "redis", "redis-cluster", "postgresql", "pgbouncer")
SERVED = ("redis", "postgresql")  # part 2: the service over these
CROSS_CHECKED = ("redis", "postgresql", "pgbouncer")  # part 1: through ctxwindow serve too
PROCESSES = (1, 2, 4)  # part 2: service processes
CLIENTS = (1, 2, 4)  # part 3: client processes of the store
CONCURRENCY = 16  # part 2: sessions in flight at once
POOLED = f"pg pool={CONCURRENCY}"  # part 2: PostgreSQL, the store's URL with ?pool_size=16
WARMUP_REQUESTS = 40  # part 2: a service process's first requests, not measured
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Plan:
    """How long each part runs (``--quick``: shorter)."""

    turns: int  # part 1: measured turns a backend (300 reach the first checkpoint)
    rounds: int  # parts 2 and 3: rounds, each setting once a round
    serve_seconds: float  # part 2: a window
    store_seconds: float  # part 3: a window
    sessions: dict[int, int]  # part 4: size -> how many sessions of it


FULL = Plan(300, 3, 5.0, 3.0, {100: 20, 2_000: 5})
QUICK = Plan(60, 1, 3.0, 2.0, {100: 4, 2_000: 1})


# -- workload ------------------------------------------------------------------------


class Texts:
    """Seeded chat texts of a given number of words: a quarter with Chinese or Japanese
    sentences, one sentence in eight followed by an emoji."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)

    def text(self, n_words: int) -> str:
        return sentences(self.rng, n_words, EMOJI)

    def user(self) -> dict[str, str]:
        return {"role": "user", "content": self.text(USER_WORDS)}

    def reply(self) -> dict[str, str]:
        return {"role": "assistant", "content": self.text(REPLY_WORDS)}


def completion(message: dict[str, str]) -> dict[str, Any]:
    """An OpenAI chat completion answering ``message`` (no ``usage``: made-up counts would
    only make the service warn that its tokenizer disagrees)."""
    return {
        "id": "chatcmpl-scale", "object": "chat.completion", "created": 0, "model": MODEL,
        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
    }  # fmt: skip


FAKE_UPSTREAM = r"""
import json, sys, uvicorn
from starlette.applications import Starlette
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

replies = [json.dumps(r).encode() for r in json.load(open(sys.argv[2]))]
served = [0]

async def chat(request):
    await request.body()
    served[0] += 1
    return Response(replies[served[0] % len(replies)], media_type="application/json")

async def up(request):
    return JSONResponse({})

app = Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"]), Route("/", up)])
uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
"""
"""The upstream of part 2: answers at once, with seeded 120-word replies (a file of
completions), in turn."""


# -- CPU -----------------------------------------------------------------------------


def stat_fields(pid: int) -> list[str]:
    """``/proc/<pid>/stat`` from the state on (state, ppid, pgrp, …, utime at 11)."""
    return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()


def proc_cpu(pid: int, *, reaped: bool = False) -> float:
    """CPU seconds of process ``pid`` (every thread); ``reaped``: and of its children that
    ended and were waited for."""
    try:
        fields = stat_fields(pid)
    except OSError:
        return 0.0
    ticks = int(fields[11]) + int(fields[12])
    if reaped:
        ticks += int(fields[13]) + int(fields[14])
    return ticks / CLOCK_TICKS


def postgres_cpu(postmaster: int, *, backends: bool) -> float:
    """CPU seconds of a PostgreSQL server's backends (``backends``), or of the rest: the
    postmaster, its background processes (WAL writer, checkpointer, autovacuum…) and the
    children it reaped. Backends run in sessions of their own: found by their parent; their
    title names their client's address, ``user db 127.0.0.1(port)``."""
    total = 0.0 if backends else proc_cpu(postmaster, reaped=True)
    for process in Path("/proc").glob("[0-9]*"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = (process / "stat").read_text().rpartition(")")[2].split()
            if int(fields[1]) != postmaster:
                continue
            is_backend = b"(" in (process / "cmdline").read_bytes()
            if is_backend == backends:
                total += (int(fields[11]) + int(fields[12])) / CLOCK_TICKS
    return total


def machine_busy() -> float:
    """CPU seconds every process of the machine has used (``/proc/stat``, all cores)."""
    values = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = values[3] + values[4]  # idle, iowait
    return (sum(values[:8]) - idle) / CLOCK_TICKS


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f} {five:.2f} {fifteen:.2f} ({os.cpu_count()} CPUs)"


@dataclass
class Meter:
    """CPU seconds of named parties over a window, and of the whole machine."""

    parties: dict[str, Callable[[], float]]
    started: dict[str, float] = field(default_factory=dict)
    wall: float = 0.0

    def start(self) -> None:
        self.started = {name: read() for name, read in self.parties.items()}
        self.started["machine"] = machine_busy()
        self.wall = time.perf_counter()

    def stop(self) -> dict[str, float]:
        """CPU seconds each party used since ``start``; ``others``: the machine's less ours."""
        used = {name: read() - self.started[name] for name, read in self.parties.items()}
        machine = machine_busy() - self.started["machine"]
        used["others"] = max(0.0, machine - sum(used.values()))
        used["wall"] = time.perf_counter() - self.wall
        return used


# -- servers -------------------------------------------------------------------------


@dataclass
class Backend:
    """A store measured: its URL, the ports its clients connect to, its server's CPU."""

    name: str
    url: str
    ports: list[int]  # where clients connect: one server, or every node of a cluster
    cpu: dict[str, Callable[[], float]]  # the server's processes, by part
    connections: Callable[[], int] | None = None  # the server's connections so far

    def proxied(self, ports: dict[int, int]) -> str:
        """The URL with its port through the proxy (a cluster's: the same, redirected)."""
        if self.name == "redis-cluster" or not self.ports:
            return self.url
        port = self.ports[0]
        return self.url.replace(f":{port}/", f":{ports[port]}/", 1)


def _support() -> None:
    """``tests.support`` importable (the helpers that start servers), lazily."""
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))


class Servers:
    """The benchmark's own servers; ``missing``: the backends that could not start, and why."""

    def __init__(self, folder: Path, wanted: list[str]) -> None:
        self.folder = folder
        self.backends: dict[str, Backend] = {}
        self.missing: dict[str, str] = {}
        self.stack = contextlib.ExitStack()
        self.cluster: Any = None  # the OwnCluster, the OwnPostgres: what part 4 asks
        self.postgres: Any = None
        starts = {
            "sqlite": self._sqlite, "redis": self._redis, "redis-cluster": self._cluster,
            "postgresql": self._postgres, "pgbouncer": self._pgbouncer,
        }  # fmt: skip
        try:
            for name in wanted:
                try:
                    self.backends[name] = starts[name]()
                except (ImportError, RuntimeError, OSError, subprocess.SubprocessError) as exc:
                    self.missing[name] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
                    note(f"{name}: not measured: {self.missing[name]}")
        except BaseException:  # interrupted (SIGTERM, Ctrl-C): what started is stopped
            self.close()
            raise

    def close(self) -> None:
        self.stack.close()

    def _sqlite(self) -> Backend:
        return Backend("sqlite", f"sqlite:///{self.folder / 'sessions.db'}", [], {})

    def _redis(self) -> Backend:
        _support()
        from tests.support.own_servers import OwnRedis

        class DurableRedis(OwnRedis):
            """The common durable setting: an append-only file synced every second."""

            def command(self) -> list[str]:
                return [*super().command(), "--appendonly", "yes", "--appendfsync", "everysec"]

        node = self.stack.enter_context(DurableRedis(self.folder / "redis", save=False))
        pid = node.process.pid
        cpu = {"redis-server": lambda: proc_cpu(pid)}
        return Backend("redis", node.url, [node.port], cpu, self._redis_connections(node.port))

    def _cluster(self) -> Backend:
        _support()
        from tests.support.redis_cluster import OwnCluster

        cluster = self.stack.enter_context(OwnCluster(self.folder / "cluster"))
        self.cluster = cluster
        primaries = [node.process.pid for node in cluster.primaries()]
        replicas = [n.process.pid for n in cluster.running() if n.process.pid not in primaries]
        return Backend(
            "redis-cluster", cluster.url, [node.port for node in cluster.nodes],
            {
                "3 primaries": lambda: sum(proc_cpu(pid) for pid in primaries),
                "3 replicas": lambda: sum(proc_cpu(pid) for pid in replicas),
            },
        )  # fmt: skip

    def _postgres(self) -> Backend:
        _support()
        from tests.support.own_servers import OwnPostgres

        class DefaultPostgres(OwnPostgres):
            """PostgreSQL's defaults (fsync on, shared_buffers 128 MB), not the tests'."""

            def command(self) -> list[str]:
                return [
                    str(Path(self.bin_dir, "postgres")), "-D", str(self.data),
                    "-p", str(self.port), "-c", "listen_addresses=127.0.0.1",
                    "-c", f"unix_socket_directories={self.directory}",
                ]  # fmt: skip

        server = self.stack.enter_context(DefaultPostgres())
        self.postgres = server
        pid = server.process.pid
        cpu = {
            "backends": lambda: postgres_cpu(pid, backends=True),
            "postmaster+ended": lambda: postgres_cpu(pid, backends=False),
        }
        sessions = self._postgres_sessions(server.url)
        return Backend("postgresql", server.url, [server.port], cpu, sessions)

    def _pgbouncer(self) -> Backend:
        if "postgresql" not in self.backends:
            raise RuntimeError("needs the PostgreSQL server, which did not start")
        _support()
        from tests.support.pgbouncer import OwnPgBouncer

        postgres = self.backends["postgresql"]
        bouncer = self.stack.enter_context(OwnPgBouncer(postgres.url, pool_size=20))
        pid = bouncer.process.pid
        cpu = {**postgres.cpu, "pgbouncer": lambda: proc_cpu(pid)}
        return Backend("pgbouncer", bouncer.url, [bouncer.port], cpu, postgres.connections)

    def _redis_connections(self, port: int) -> Callable[[], int]:
        """Connections the node has accepted so far (``INFO stats``), read on one of its own."""
        import redis

        client = self.stack.enter_context(redis.Redis(port=port))
        return lambda: int(client.info("stats")["total_connections_received"])

    def _postgres_sessions(self, url: str) -> Callable[[], int]:
        """Sessions the server has begun so far (``pg_stat_database``), read on one of its own:
        each is a backend process started."""
        import psycopg

        conn = self.stack.enter_context(psycopg.connect(url, autocommit=True))

        def sessions() -> int:
            conn.execute("SELECT pg_stat_clear_snapshot()")
            row = conn.execute("SELECT sum(sessions) FROM pg_stat_database").fetchone()
            return int(row[0]) if row and row[0] is not None else 0

        return sessions


# -- the counting proxy --------------------------------------------------------------


@dataclass
class Counts:
    """Round trips (a client write after a server reply starts one), bytes each way, new
    connections; for SQLite: statements, of them ``BEGIN``s (``connections``)."""

    round_trips: int = 0
    up: int = 0  # client -> server
    down: int = 0
    connections: int = 0

    def __sub__(self, other: Counts) -> Counts:
        return Counts(
            self.round_trips - other.round_trips, self.up - other.up,
            self.down - other.down, self.connections - other.connections,
        )  # fmt: skip

    def __add__(self, other: Counts) -> Counts:
        return Counts(
            self.round_trips + other.round_trips, self.up + other.up,
            self.down + other.down, self.connections + other.connections,
        )  # fmt: skip


class Proxies:
    """Counting TCP proxies on 127.0.0.1, one per server port, in a thread of their own."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.counts: dict[int, Counts] = {}  # by proxy port
        self.servers: list[asyncio.Server] = []

    def open(self, target: int) -> int:
        """A proxy to ``127.0.0.1:target``; its port."""
        counts = Counts()

        async def start() -> asyncio.Server:
            return await asyncio.start_server(
                lambda r, w: self._relay(r, w, target, counts), "127.0.0.1", 0
            )

        server = asyncio.run_coroutine_threadsafe(start(), self.loop).result()
        self.servers.append(server)
        port = int(server.sockets[0].getsockname()[1])
        self.counts[port] = counts
        return port

    def total(self, ports: list[int]) -> Counts:
        """The counts of the proxies at ``ports``, so far (a copy)."""
        return sum((Counts() + self.counts[port] for port in ports), Counts())

    def close(self) -> None:
        async def stop() -> None:
            for server in self.servers:
                server.close()

        asyncio.run_coroutine_threadsafe(stop(), self.loop).result()
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)

    async def _relay(
        self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter, target: int,
        counts: Counts,
    ) -> None:  # fmt: skip
        counts.connections += 1
        try:
            server_r, server_w = await asyncio.open_connection("127.0.0.1", target)
        except OSError:
            client_w.close()
            return
        replied = [True]

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter, up: bool) -> None:
            try:
                while data := await src.read(1 << 16):
                    if up:
                        counts.round_trips += replied[0]
                        replied[0] = False
                        counts.up += len(data)
                    else:
                        replied[0] = True
                        counts.down += len(data)
                    dst.write(data)
                    await dst.drain()
            except OSError:
                pass
            finally:
                dst.close()

        await asyncio.gather(pipe(client_r, server_w, True), pipe(server_r, client_w, False))


@contextlib.contextmanager
def redirected(ports: dict[int, int]) -> Iterator[None]:
    """redis-py's asyncio connections to a port of ``ports`` go to its proxy instead (a
    cluster's clients learn the nodes' own addresses from the cluster)."""
    from redis.asyncio.connection import Connection

    original = Connection._connection_arguments

    def arguments(self: Any) -> Any:
        args = dict(original(self))
        args["port"] = ports.get(int(args["port"]), args["port"])
        return args

    Connection._connection_arguments = arguments  # type: ignore[method-assign]
    try:
        yield
    finally:
        Connection._connection_arguments = original  # type: ignore[method-assign]


class Statements:
    """Every SQLite connection opened meanwhile counts its statements (trace callback)."""

    def __init__(self) -> None:
        self.counts = Counts()
        self._connect = sqlite3.connect

    def __enter__(self) -> Statements:
        def connect(*args: Any, **kwargs: Any) -> sqlite3.Connection:
            conn = self._connect(*args, **kwargs)
            conn.set_trace_callback(self._seen)
            return conn

        sqlite3.connect = connect  # type: ignore[assignment]
        return self

    def __exit__(self, *exc: object) -> None:
        sqlite3.connect = self._connect

    def _seen(self, statement: str) -> None:
        self.counts.round_trips += 1
        self.counts.connections += statement.lstrip().upper().startswith("BEGIN")

    def total(self) -> Counts:
        return Counts() + self.counts


# -- part 1: round trips and bytes per turn ------------------------------------------


def service_settings(url: str, folder: Path) -> Any:
    from ctxwindow.server.settings import Settings

    return Settings(store=url, upstream="http://upstream.invalid/v1", archive="off",
                    data_dir=folder)  # fmt: skip


def mock_upstream(texts: Texts) -> httpx.MockTransport:
    """The upstream in process: a new 120-word reply to every request."""

    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json=completion(texts.reply()))

    return httpx.MockTransport(answer)


@contextlib.asynccontextmanager
async def in_process(url: str, folder: Path, texts: Texts) -> Any:
    """The service over ``url`` in this process, and a client of its routes."""
    from ctxwindow.server.app import create_app

    app = create_app(service_settings(url, folder), upstream_transport=mock_upstream(texts))
    transport = httpx.ASGITransport(app=app)
    try:
        async with httpx.AsyncClient(transport=transport, base_url="http://ctxwindow") as client:
            yield app, client
    finally:
        await app.state.service.aclose()


async def chat(client: httpx.AsyncClient, session: str, texts: Texts) -> None:
    body = {"model": MODEL, "messages": [texts.user()]}
    answer = await client.post("/v1/chat/completions", json=body, headers={"X-Session-Id": session})
    if answer.status_code != 200:
        raise RuntimeError(f"{answer.status_code} from the service: {answer.text[:300]}")


@dataclass
class TurnCounts:
    backend: str
    how: str  # "in process" or "ctxwindow serve"
    turns: list[Counts]
    commands: dict[str, float] = field(default_factory=dict)  # Redis: calls a turn

    def typical(self) -> Counts:
        """The median turn by round trips, and the median bytes."""
        return Counts(
            int(statistics.median(t.round_trips for t in self.turns)),
            int(statistics.median(t.up for t in self.turns)),
            int(statistics.median(t.down for t in self.turns)),
            int(statistics.median(t.connections for t in self.turns)),
        )

    def mean(self, attribute: str) -> float:
        return statistics.fmean(getattr(t, attribute) for t in self.turns)

    def heaviest(self) -> Counts:
        return max(self.turns, key=lambda t: (t.round_trips, t.up))


def commandstats(port: int) -> dict[str, int]:
    """``INFO commandstats`` of the Redis node at ``port``: calls by command."""
    import redis

    with redis.Redis(port=port) as client:
        stats = client.info("commandstats")
    return {name.removeprefix("cmdstat_"): int(value["calls"]) for name, value in stats.items()}


async def count_in_process(
    counter: Callable[[], Counts], url: str, folder: Path, turns: int
) -> list[Counts]:
    """``turns`` turns of one session through the service in this process, after two turns
    not counted (the session's first load, connections opened): the counts of each."""
    texts = Texts(SEED)
    session = f"scale-{uuid.uuid4().hex[:10]}"
    counted = []
    async with in_process(url, folder, texts) as (_, client):
        for _ in range(2):
            await chat(client, session, texts)
        for _ in range(turns):
            before = counter()
            await chat(client, session, texts)
            counted.append(counter() - before)
    return counted


def count_turns(
    backend: Backend, proxies: Proxies, folder: Path, turns: int, node: int | None
) -> TurnCounts:
    """Part 1 for one backend, in this process; ``node``: the port of a Redis node whose
    ``INFO commandstats`` to read too."""
    if backend.name == "sqlite":
        with Statements() as statements:
            counted = asyncio.run(count_in_process(statements.total, backend.url, folder, turns))
        return TurnCounts(backend.name, "in process", counted)
    ports = {port: proxies.open(port) for port in backend.ports}

    def counter() -> Counts:
        return proxies.total(list(ports.values()))

    before = commandstats(node) if node is not None else {}
    with redirected(ports) if backend.name == "redis-cluster" else contextlib.nullcontext():
        counted = asyncio.run(count_in_process(counter, backend.proxied(ports), folder, turns))
    calls: dict[str, float] = {}
    if node is not None:  # the Redis node: what its commands were (the 2 first turns too)
        after = commandstats(node)
        calls = {k: (v - before.get(k, 0)) / (turns + 2) for k, v in after.items()}
        calls = {k: v for k, v in calls.items() if v > 0 and k not in ("info", "ping")}
    return TurnCounts(backend.name, "in process", counted, calls)


def count_served(
    backend: Backend, proxies: Proxies, upstream: Process, folder: Path, turns: int
) -> TurnCounts:
    """The cross-check: the same turns through a real ``ctxwindow serve`` process whose
    store is behind a proxy of its own."""
    ports = {port: proxies.open(port) for port in backend.ports}
    texts = Texts(SEED + 1)
    session = f"scale-served-{uuid.uuid4().hex[:10]}"
    counted = []
    with serve(upstream, backend.proxied(ports), folder) as service, httpx.Client() as client:
        url = f"{service.url}/v1/chat/completions"
        for i in range(turns + 2):
            before = proxies.total(list(ports.values()))
            body = {"model": MODEL, "messages": [texts.user()]}
            answer = client.post(url, json=body, headers={"X-Session-Id": session})
            if answer.status_code != 200:
                raise RuntimeError(f"{answer.status_code} from the service: {answer.text[:300]}")
            if i >= 2:
                counted.append(proxies.total(list(ports.values())) - before)
    return TurnCounts(backend.name, "ctxwindow serve", counted)


def bench_turns(
    servers: Servers, proxies: Proxies, upstream: Process, folder: Path, plan: Plan
) -> list[TurnCounts]:
    """Part 1 for every backend, then the cross-checks; a backend that fails is named."""
    found = []
    for name, backend in servers.backends.items():
        node = backend.ports[0] if name == "redis" else None
        try:
            found.append(count_turns(backend, proxies, folder, plan.turns, node))
            note(f"{name}: counted {plan.turns} turns")
        except (RuntimeError, OSError, CtxWindowError) as exc:
            servers.missing[f"{name} (part 1)"] = f"{type(exc).__name__}: {exc}"[:300]
    for name in CROSS_CHECKED:
        if name in servers.backends:
            try:
                found.append(count_served(servers.backends[name], proxies, upstream, folder, 30))
            except (RuntimeError, OSError, httpx.HTTPError) as exc:
                servers.missing[f"{name} (part 1, through ctxwindow serve)"] = str(exc)[:300]
    return found


def print_turns(results: list[TurnCounts], turns: int) -> None:
    rule("1. Store round trips and bytes per turn (a chat completion in session mode)")
    print("   The service's defaults, archive off. Network stores: through a counting TCP proxy")
    print("   (a client write after a server reply starts a round trip; bytes of the payload,")
    print("   each way). SQLite: statements executed. The median turn, the mean over the")
    print(f"   {turns} turns, and the heaviest turn over the median: every 512 stored entries")
    print("   (256 turns) a turn also saves the session's checkpoint (the window's state).")
    print(
        f"   {'backend':<14} {'how':<16} {'trips':>6} {'mean':>6} {'up B':>7} {'down B':>7}"
        f"   {'heaviest: + trips':>17} {'+ up KiB':>9}"
    )
    for r in results:
        typical, heaviest = r.typical(), r.heaviest()
        extra = heaviest.round_trips - typical.round_trips
        if r.backend == "sqlite":
            print(
                f"   {'sqlite':<14} {r.how:<16} {typical.round_trips:>6}"
                f" {r.mean('round_trips'):>6.2f} {'statements':>15}   {extra:>17}"
            )
            continue
        print(
            f"   {r.backend:<14} {r.how:<16} {typical.round_trips:>6}"
            f" {r.mean('round_trips'):>6.2f} {typical.up:>7,} {typical.down:>7,}"
            f"   {extra:>17} {(heaviest.up - typical.up) / 1024:>9,.0f}"
        )
        if r.commands:  # what the first two turns did once (creating the session) left out
            calls = ", ".join(f"{k} {v:.1f}" for k, v in sorted(r.commands.items()) if v >= 0.5)
            print(f"   {'':<14} INFO commandstats a turn (scripts' inner calls too): {calls}")


# -- part 2: the service's requests per second ----------------------------------------


def upstream_process(folder: Path) -> contextlib.AbstractContextManager[Process]:
    texts = Texts(SEED + 2)
    replies = folder / "replies.json"
    replies.write_text(json.dumps([completion(texts.reply()) for _ in range(200)]))
    port = free_port()
    return running([sys.executable, "-c", FAKE_UPSTREAM, str(port), str(replies)], port, "/", {})


def serve(upstream: Process, url: str, folder: Path) -> contextlib.AbstractContextManager[Process]:
    """``python -m ctxwindow.server`` over ``url`` (archive off), its log in ``folder``."""
    port = free_port()
    args = [
        sys.executable, "-m", "ctxwindow.server", "--port", str(port), "--upstream",
        f"{upstream.url}/v1", "--store", url,
    ]  # fmt: skip
    env = {"CTXWINDOW_DATA_DIR": str(folder), "CTXWINDOW_ARCHIVE": "off"}
    log = folder / f"service-{port}.log"
    return running(args, port, "/healthz", env, log)


async def post(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, head: bytes, body: bytes
) -> int:
    """One request on a kept-alive HTTP/1.1 connection; the status (the body is read)."""
    writer.write(head + b"Content-Length: %d\r\n\r\n" % len(body) + body)
    await writer.drain()
    lines = (await reader.readuntil(b"\r\n\r\n")).split(b"\r\n")
    length = next(
        int(line.split(b":", 1)[1]) for line in lines if line.lower().startswith(b"content-length:")
    )
    await reader.readexactly(length)
    return int(lines[0].split()[1])


async def conversation(
    port: int, session: str, bodies: list[bytes], until: float, latencies: list[float],
    errors: list[int],
) -> None:  # fmt: skip
    """Turns of one session, one after another, until ``until``."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    head = (
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: ctxwindow\r\n"
        b"Content-Type: application/json\r\nX-Session-Id: " + session.encode() + b"\r\n"
    )
    turn = 0
    while time.perf_counter() < until:
        start = time.perf_counter()
        status = await post(reader, writer, head, bodies[turn % len(bodies)])
        turn += 1
        if status == 200:
            latencies.append(time.perf_counter() - start)
        else:
            errors.append(status)
    writer.close()


@dataclass
class Window:
    """One measured window of load: requests done, latencies, CPU by party."""

    requests: int
    seconds: float
    latencies: list[float]
    errors: list[int]
    cpu: dict[str, float]
    connections: int = 0  # the store server accepted meanwhile

    @property
    def rate(self) -> float:
        return self.requests / self.seconds

    def per_request_ms(self, party: str) -> float:
        return self.cpu.get(party, 0.0) * 1000 / max(1, self.requests)


def drive(
    ports: list[int], bodies: list[bytes], seconds: float, meter: Meter, label: str
) -> Window:
    """``CONCURRENCY`` new sessions at once for ``seconds``, session i sent to ``ports[i % n]``
    (as a balancer that keeps a session on one process would)."""
    latencies: list[float] = []
    errors: list[int] = []

    async def all_sessions() -> float:
        until = time.perf_counter() + seconds
        start = time.perf_counter()
        await asyncio.gather(*(
            conversation(
                ports[i % len(ports)], f"{label}-{i}", bodies[i:] + bodies[:i], until,
                latencies, errors,
            )
            for i in range(CONCURRENCY)
        ))  # fmt: skip
        return time.perf_counter() - start

    meter.start()
    elapsed = asyncio.run(all_sessions())
    return Window(len(latencies), elapsed, latencies, errors, meter.stop())


def warm(service: Process, bodies: list[bytes], label: str) -> None:
    """A service process's first requests (imports, tokenizer, connections): not measured."""
    with httpx.Client(timeout=120.0) as client:
        for i in range(WARMUP_REQUESTS):
            client.post(
                f"{service.url}/v1/chat/completions", content=bodies[i % len(bodies)],
                headers={"X-Session-Id": f"{label}-{i % 4}", "Content-Type": "application/json"},
            )  # fmt: skip


@dataclass
class ServedRow:
    backend: str
    processes: int
    windows: list[Window] = field(default_factory=list)

    def median(self, value: Callable[[Window], float]) -> float:
        return statistics.median(value(w) for w in self.windows)


def bench_served(
    servers: Servers, upstream: Process, folder: Path, plan: Plan, run_id: str
) -> list[ServedRow]:
    """Part 2: per store, ``max(PROCESSES)`` service processes on ports of their own, warmed;
    N of them take the load at a time, the stores and the Ns taking turns round by round."""
    texts = Texts(SEED + 3)
    bodies = [json.dumps({"model": MODEL, "messages": [texts.user()]}).encode() for _ in range(64)]
    backends = [servers.backends[name] for name in SERVED if name in servers.backends]
    if (postgres := servers.backends.get("postgresql")) is not None:
        # beside it, each process keeping as many idle connections as sessions come at once
        pooled = replace(postgres, name=POOLED, url=f"{postgres.url}?pool_size={CONCURRENCY}")
        servers.backends[POOLED] = pooled
        backends.append(pooled)
    rows = [ServedRow(b.name, n) for b in backends for n in PROCESSES]
    with contextlib.ExitStack() as stack:
        services = {
            b.name: [
                stack.enter_context(serve(upstream, b.url, folder)) for _ in range(max(PROCESSES))
            ]
            for b in backends
        }
        for name, processes in services.items():
            for i, service in enumerate(processes):
                warm(service, bodies, f"{run_id}-{name}-{i}-warm")
        for round_ in range(plan.rounds):
            for row in rows:
                processes = services[row.backend][: row.processes]
                meter = Meter({
                    "service": lambda ps=processes: sum(p.cpu() for p in ps),
                    "upstream": upstream.cpu, "client": time.process_time,
                    **servers.backends[row.backend].cpu,
                })  # fmt: skip
                ports = [int(p.url.rsplit(":", 1)[1]) for p in processes]
                label = f"{run_id}-{row.backend}-{row.processes}-{round_}"
                connections = servers.backends[row.backend].connections or (lambda: 0)
                opened = connections()
                window = drive(ports, bodies, plan.serve_seconds, meter, label)
                window.connections = connections() - opened
                row.windows.append(window)
                note(f"{row.backend}, {row.processes} process(es): {window.rate:.0f} req/s")
    return rows


def print_served(rows: list[ServedRow], backends: dict[str, Backend], plan: Plan) -> None:
    rule("2. Requests per second through N ctxwindow serve processes (chat, session mode)")
    print(f"   {CONCURRENCY} sessions at once (spread over the N processes), each a turn after")
    print(f"   the other, {plan.serve_seconds:g} s a window; {plan.rounds} round(s), the settings")
    print("   taking turns; medians of the windows. The fake upstream answers at once. CPU ms a")
    print("   request of the service (its N processes), the upstream, the client (this process),")
    print("   the store server (its processes). Cores busy: the service's, the store server's,")
    print("   and other processes' of the machine meanwhile (2 = the whole machine). conns =")
    print("   connections the store server accepted a request (PostgreSQL: backends started).")
    print(
        f"   {'':<27} {'':<7} {'':<7} {'CPU ms a request':^33}  {'cores busy':^20}"
        f"\n   {'store':<11} {'procs':>5} {'req/s':>7} {'p50 ms':>7} {'p99 ms':>7}"
        f" {'service':>8} {'upstream':>8} {'client':>7} {'store':>7}"
        f"  {'service':>7} {'store':>6} {'others':>6} {'conns':>6} {'errors':>6}"
        "  store ms by process"
    )
    for row in rows:
        store = list(backends[row.backend].cpu)

        def store_ms(w: Window, store: list[str] = store) -> float:
            return sum(w.per_request_ms(p) for p in store)

        def cores(w: Window, parties: list[str]) -> float:
            return sum(w.cpu[p] for p in parties) / w.seconds

        p50 = row.median(lambda w: statistics.median(w.latencies) * 1000)
        p99 = row.median(lambda w: statistics.quantiles(w.latencies, n=100)[-1] * 1000)
        print(
            f"   {row.backend:<11} {row.processes:>5} {row.median(lambda w: w.rate):>7.0f}"
            f" {p50:>7.1f} {p99:>7.1f}"
            f" {row.median(lambda w: w.per_request_ms('service')):>8.2f}"
            f" {row.median(lambda w: w.per_request_ms('upstream')):>8.2f}"
            f" {row.median(lambda w: w.per_request_ms('client')):>7.2f}"
            f" {row.median(store_ms):>7.3f}"
            f"  {row.median(lambda w: cores(w, ['service'])):>7.2f}"
            f" {row.median(lambda w, s=store: cores(w, s)):>6.2f}"
            f" {row.median(lambda w: cores(w, ['others'])):>6.2f}"
            f" {row.median(lambda w: w.connections / max(1, w.requests)):>6.2f}"
            f" {sum(len(w.errors) for w in row.windows):>6}  {split(row, store)}"
        )


def split(row: ServedRow, parts: list[str]) -> str:
    """The store server's CPU ms a request, by process (those that used any)."""
    found = ((p, row.median(lambda w, p=p: w.per_request_ms(p))) for p in parts)
    return ", ".join(f"{p} {ms:.3f}" for p, ms in found if ms > 0)


# -- part 3: the store alone ---------------------------------------------------------

STORE_CLIENT = r"""
import json, sys, time
from ctxwindow.messages import Entry
from ctxwindow.stores.url import open_store

url, prefix, path = sys.argv[1:4]
turns = json.load(open(path))  # [[user message, tokens], [reply, tokens]] pairs
meta = {"model": "gpt-4o", "budget": 96000}
store = open_store(url)
sessions = [f"{prefix}-{i}" for i in range(32)]

newest = {}  # each session's newest (seq, id), as a manager's window knows it

def turn(n):
    session = sessions[n % len(sessions)]
    (user, user_tokens), (reply, reply_tokens) = turns[n % len(turns)]
    asked = [Entry(user, user_tokens, 0, metadata=meta)]
    with store.lock(session, timeout=30):
        if store.append_after(session, newest.get(session, (0, "")), asked) is None:
            store.tail(session, 1)  # stored since elsewhere: the window catches up
            store.append(session, asked)
        stored = store.append(session, [Entry(reply, reply_tokens, 0)])
        newest[session] = (stored[-1].seq, stored[-1].id)

for n in range(40):  # connections opened, scripts loaded, every session started
    turn(n)
print("ready", flush=True)
n = 40
for line in sys.stdin:
    words = line.split()
    if words[0] != "go":
        break
    seconds, done, failed, last = float(words[1]), 0, 0, ""
    cpu, start = time.process_time(), time.perf_counter()
    while time.perf_counter() - start < seconds:
        try:
            turn(n)
            done += 1
        except Exception as exc:
            failed, last = failed + 1, repr(exc)[:200]
        n += 1
    print(json.dumps({"turns": done, "seconds": time.perf_counter() - start,
                      "cpu": time.process_time() - cpu, "failed": failed, "last": last}),
          flush=True)
store.close()
"""
"""A client process of part 3: the turn's store calls in a loop, on 32 sessions of its own,
for as long as each ``go SECONDS`` line says; a line of JSON after each."""


@dataclass
class StoreWindow:
    clients: int
    turns: int
    seconds: float
    client_cpu: float
    failed: int
    cpu: dict[str, float]  # the server's, by part; others

    @property
    def rate(self) -> float:
        return self.turns / self.seconds

    def server_ms(self, parts: list[str]) -> float:
        return sum(self.cpu[p] for p in parts) * 1000 / max(1, self.turns)


class StoreClients:
    """``max(CLIENTS)`` client processes of one backend, ready; ``go(n, seconds)`` drives n."""

    def __init__(self, backend: Backend, turns_file: Path, prefix: str) -> None:
        self.backend = backend
        args = [sys.executable, "-c", STORE_CLIENT, backend.url]
        self.popens = [
            subprocess.Popen(
                [*args, f"{prefix}-{i}", str(turns_file)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
                bufsize=1,
            )
            for i in range(max(CLIENTS))
        ]
        for popen in self.popens:
            assert popen.stdout is not None
            if popen.stdout.readline().strip() != "ready":
                raise RuntimeError(f"a {backend.name} client did not start")

    def go(self, n: int, seconds: float) -> StoreWindow:
        meter = Meter(dict(self.backend.cpu))
        meter.start()
        for popen in self.popens[:n]:
            assert popen.stdin is not None
            popen.stdin.write(f"go {seconds}\n")
        answers = []
        for popen in self.popens[:n]:
            assert popen.stdout is not None
            answers.append(json.loads(popen.stdout.readline()))
        cpu = meter.stop()
        cpu["others"] = max(0.0, cpu["others"] - sum(a["cpu"] for a in answers))
        if failed := [a["last"] for a in answers if a["failed"]]:
            note(f"{self.backend.name}: failed turns, the last: {failed[0]}")
        return StoreWindow(
            n, sum(a["turns"] for a in answers), max(a["seconds"] for a in answers),
            sum(a["cpu"] for a in answers), sum(a["failed"] for a in answers), cpu,
        )  # fmt: skip

    def close(self) -> None:
        for popen in self.popens:
            with contextlib.suppress(OSError, ValueError):
                assert popen.stdin is not None
                popen.stdin.write("quit\n")
                popen.stdin.close()
        for popen in self.popens:
            try:
                popen.wait(10)
            except subprocess.TimeoutExpired:
                popen.kill()


def turns_file(folder: Path) -> Path:
    """Pairs of (user turn, reply) with their token counts, for the client processes."""
    from ctxwindow.tokens import chat_tokenizer

    tokenizer, texts = chat_tokenizer(MODEL), Texts(SEED + 4)
    pairs = []
    for _ in range(64):
        user, reply = texts.user(), texts.reply()
        pairs.append(
            [[user, tokenizer.message_tokens(user)], [reply, tokenizer.message_tokens(reply)]]
        )
    path = folder / "turns.json"
    path.write_text(json.dumps(pairs, ensure_ascii=False))
    return path


def bench_store_alone(
    servers: Servers, folder: Path, plan: Plan, run_id: str
) -> dict[str, list[StoreWindow]]:
    """Part 3: every backend's clients started first; then, round by round, each backend
    at 1, 2 and 4 clients in turn."""
    path = turns_file(folder)
    clients: dict[str, StoreClients] = {}
    try:
        for name, backend in servers.backends.items():
            if name == "sqlite":
                continue  # a file: no server of its own to measure
            try:
                clients[name] = StoreClients(backend, path, f"alone-{run_id}-{name}")
            except (RuntimeError, OSError) as exc:
                servers.missing[f"{name} (part 3)"] = str(exc)
                note(f"{name}: part 3 not measured: {exc}")
        windows: dict[str, list[StoreWindow]] = {name: [] for name in clients}
        for _ in range(plan.rounds):
            for name, group in clients.items():
                for n in CLIENTS:
                    window = group.go(n, plan.store_seconds)
                    windows[name].append(window)
                    note(f"{name}, {n} client(s): {window.rate:.0f} turns/s")
        return windows
    finally:
        for group in clients.values():
            group.close()


def print_store_alone(
    windows: dict[str, list[StoreWindow]], backends: dict[str, Backend], plan: Plan
) -> dict[str, dict[str, float]]:
    """The table; returns the store server's median CPU ms a turn over every window, by
    backend and by process of the server."""
    rule("3. The store alone: N client processes, each a loop of the turn's store calls")
    print("   lock, append_after (the user turn), append the reply, unlock (sync store API, 32")
    print(f"   sessions a client); {plan.store_seconds:g} s a window, {plan.rounds} round(s),")
    print("   the settings taking turns; medians. 'server ms' = the store server's CPU a turn")
    print("   (every process of it); 'turns/s a core' = 1000 / server ms; 'client ms' = a")
    print("   client's CPU a turn (Python and the driver); 'others' = cores busy with other")
    print("   processes; by process: server ms (1000 / it = turns/s a core of that process).")
    print(
        f"   {'backend':<14} {'clients':>7} {'turns/s':>8} {'server ms':>10} {'turns/s a core':>15}"
        f" {'client ms':>10} {'others':>7}  server ms by process"
    )
    per_turn: dict[str, dict[str, float]] = {}
    for name, found in windows.items():
        parts = list(backends[name].cpu)
        for n in CLIENTS:
            mine = [w for w in found if w.clients == n]
            rate = statistics.median(w.rate for w in mine)
            server = statistics.median(w.server_ms(parts) for w in mine)
            client = statistics.median(w.client_cpu * 1000 / max(1, w.turns) for w in mine)
            others = statistics.median(w.cpu["others"] / w.seconds for w in mine)
            split = ", ".join(
                f"{p} {ms:.3f} ({1000 / ms:,.0f}/s)"
                for p in parts
                if (ms := statistics.median(w.server_ms([p]) for w in mine)) > 0
            )
            print(
                f"   {name:<14} {n:>7} {rate:>8.0f} {server:>10.3f} {1000 / server:>15,.0f}"
                f" {client:>10.2f} {others:>7.2f}  {split}"
            )
        per_turn[name] = {p: statistics.median(w.server_ms([p]) for w in found) for p in parts}
    return per_turn


# -- part 4: bytes per stored session -------------------------------------------------


@dataclass
class Footprint:
    backend: str
    size: int  # messages a session
    sessions: int
    measures: dict[str, float]  # what was measured -> bytes a session
    checkpoint: float  # the mean checkpoint's payload (its window's state), bytes


def message_bytes(texts: Texts) -> tuple[float, float]:
    """Mean UTF-8 bytes of a user turn and of a reply's text."""
    users = [len(texts.user()["content"].encode()) for _ in range(200)]
    replies = [len(texts.reply()["content"].encode()) for _ in range(200)]
    return statistics.fmean(users), statistics.fmean(replies)


async def write_sessions(url: str, folder: Path, sessions: list[str], size: int) -> None:
    """Each session: ``size - 2`` messages appended as the service stores them (the user
    turns with the request's model and budget), then a turn through the service (its first
    load: a long session's checkpoint is saved)."""
    from ctxwindow.messages import Entry
    from ctxwindow.stores.tenants import ANONYMOUS, session_key

    texts = Texts(SEED + 5)
    async with in_process(url, folder, texts) as (app, client):
        service = app.state.service
        tokenizer, budget = service.tokenizer(MODEL), service.budget(MODEL)
        meta = {"model": MODEL, "budget": budget}
        for session in sessions:
            entries = []
            for _ in range((size - 2) // 2):
                user, reply = texts.user(), texts.reply()
                entries.append(Entry(user, tokenizer.message_tokens(user), 0, metadata=meta))
                entries.append(Entry(reply, tokenizer.message_tokens(reply), 0))
            stored = session_key(ANONYMOUS, session)  # the service's id of it: tenant:id
            for start in range(0, len(entries), 100):
                await service.store.append(stored, entries[start : start + 100])
            await chat(client, session, texts)


class Measure:
    """What a backend's stored sessions take, read before and after they are written; the
    SQLite file and the PostgreSQL database are new ones (``url``): no free space left by
    the other parts is reused."""

    def __init__(self, backend: Backend, servers: Servers, folder: Path) -> None:
        self.backend, self.servers = backend, servers
        self.url = backend.url
        if backend.name == "sqlite":
            self.url = f"sqlite:///{folder / 'footprint.db'}"
        elif backend.name == "postgresql":
            self.url = new_database(backend.url, "footprint")

    def totals(self) -> dict[str, float]:
        name = self.backend.name
        if name == "sqlite":
            return {"pages in use": sqlite_bytes(self.url)}
        if name == "postgresql":
            return {"relations": postgres_bytes(self.url)}
        time.sleep(1.5)  # the append-only file's and the replicas' buffers drained
        return {"used_memory*": sum(redis_used(port) for port in self.primaries())}

    def per_session(self, sessions: list[str]) -> dict[str, float]:
        """Redis: ``MEMORY USAGE`` of each session's keys (exact), a mean."""
        if not self.backend.name.startswith("redis"):
            return {}
        total = sum(redis_keys_bytes(port, sessions) for port in self.primaries())
        return {"MEMORY USAGE": total / len(sessions)}

    def primaries(self) -> list[int]:
        if self.backend.name == "redis-cluster":
            return [node.port for node in self.servers.cluster.primaries()]
        return self.backend.ports


def checkpoint_bytes(url: str, sessions: list[str]) -> float:
    """The mean size of the sessions' checkpoints (0 for none), as the store returns them."""
    from ctxwindow.stores.tenants import ANONYMOUS, session_key
    from ctxwindow.stores.url import open_store

    with open_store(url) as store:
        found = [store.checkpoint(session_key(ANONYMOUS, session)) for session in sessions]
    return statistics.fmean(len(c[1]) if c else 0 for c in found)


def sqlite_bytes(url: str) -> float:
    path = url.removeprefix("sqlite:///")
    with contextlib.closing(sqlite3.connect(path)) as db:
        pages = db.execute("PRAGMA page_count").fetchone()[0]
        free = db.execute("PRAGMA freelist_count").fetchone()[0]
        size = db.execute("PRAGMA page_size").fetchone()[0]
    return float((pages - free) * size)


def new_database(url: str, name: str) -> str:
    """``CREATE DATABASE name`` on the server of ``url``; its URL."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    return f"{url.rsplit('/', 1)[0]}/{name}"


def postgres_bytes(url: str) -> float:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        tables = [row[0] for row in conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = 'public'"
            " AND tablename LIKE 'ctxwindow%'"
        )]  # fmt: skip
        for table in tables:
            conn.execute(f"VACUUM {table}")
        row = conn.execute(
            "SELECT coalesce(sum(pg_total_relation_size(quote_ident(tablename))), 0)"
            " FROM pg_tables WHERE schemaname = 'public' AND tablename LIKE 'ctxwindow%'"
        ).fetchone()
    return float(row[0] if row else 0)


REDIS_BUFFERS = ("mem_total_replication_buffers", "mem_clients_normal", "mem_aof_buffer")
"""Parts of ``used_memory`` that are buffers, not data: the replication backlog (which fills
up to its 1 MB as writes come, then stays), clients' buffers, the append-only file's."""


def redis_used(port: int) -> float:
    """The node's ``used_memory`` less its buffers (``REDIS_BUFFERS``)."""
    import redis

    with redis.Redis(port=port) as client:
        memory = client.info("memory")
    return float(memory["used_memory"] - sum(memory.get(k, 0) for k in REDIS_BUFFERS))


def redis_keys_bytes(port: int, sessions: list[str]) -> float:
    import redis

    total = 0
    with redis.Redis(port=port) as client:
        for session in sessions:
            for key in client.scan_iter(match=f"*{session}*", count=1000):
                total += client.memory_usage(key, samples=0) or 0
    return float(total)


def bench_footprint(servers: Servers, folder: Path, plan: Plan, run_id: str) -> list[Footprint]:
    """Part 4: per backend (one that fails is named), the sizes in order."""
    found = []
    for name, backend in servers.backends.items():
        if name == "pgbouncer":
            continue  # the same tables as postgresql
        try:
            measure = Measure(backend, servers, folder)
            found.extend(footprints(measure, folder, plan, run_id))
        except (RuntimeError, OSError, CtxWindowError) as exc:
            servers.missing[f"{name} (part 4)"] = f"{type(exc).__name__}: {exc}"[:300]
    return found


def footprints(measure: Measure, folder: Path, plan: Plan, run_id: str) -> list[Footprint]:
    """Each size's sessions written in turn, measured as a delta over them."""
    from ctxwindow.stores.url import open_store

    found, name = [], measure.backend.name
    open_store(measure.url).close()  # the tables made: not part of a session's bytes
    # First sessions, not counted: what the first rows bring once (PostgreSQL's free space
    # and visibility maps, Redis's script cache and index, on every primary of a cluster)
    # is no session's either.
    first = [f"mem-{run_id}-first-{k:02d}" for k in range(12)]
    asyncio.run(write_sessions(measure.url, folder, first, 100))
    before = measure.totals()
    for size, count in plan.sessions.items():
        sessions = [f"mem-{run_id}-{size}-{k:03d}" for k in range(count)]
        asyncio.run(write_sessions(measure.url, folder, sessions, size))
        after = measure.totals()
        measures = {k: (after[k] - before[k]) / count for k in after}
        measures.update(measure.per_session(sessions))
        checkpoint = checkpoint_bytes(measure.url, sessions)
        found.append(Footprint(name, size, count, measures, checkpoint))
        before = after
        note(f"{name}: {count} sessions of {size:,} messages stored")
    return found


def print_footprint(found: list[Footprint], user: float, reply: float) -> None:
    rule("4. Bytes a stored session takes (its checkpoint included)")
    print(
        f"   Text alone: a user turn {user:,.0f} B, a reply {reply:,.0f} B on average (UTF-8), so"
    )
    print(f"   {(user + reply) / 2:,.0f} B a message. Redis: 'used_memory*' = the node's (the")
    print("   cluster's primaries') used_memory delta / sessions, less buffers (replication")
    print("   backlog, clients', the append-only file's); the session index and the allocator's")
    print("   rounding included. 'MEMORY USAGE' = the session's keys, exact (SAMPLES 0).")
    print("   A cluster's replicas hold as much again. PostgreSQL, in a new database:")
    print("   pg_total_relation_size of the ctxwindow tables (indexes, TOAST) after VACUUM.")
    print("   SQLite, in a new file: pages in use x page size (the file after a checkpoint).")
    print("   'checkpoint' = the payload of the session's checkpoint (its window's state, saved")
    print("   every 512 entries; none below), part of 'a session'; '/ text' = a message's")
    print("   share / its text's.")
    print(
        f"   {'backend':<14} {'messages':>8} {'sessions':>8} {'measure':<14}"
        f" {'a session':>12} {'a message':>10} {'/ text':>7} {'checkpoint':>11}"
    )
    for f in found:
        for what, value in f.measures.items():
            print(
                f"   {f.backend:<14} {f.size:>8,} {f.sessions:>8} {what:<14}"
                f" {value / 1024:>9,.1f} KiB {value / f.size:>8,.0f} B"
                f" {value / f.size / ((user + reply) / 2):>6.2f}x"
                f" {f.checkpoint / 1024:>7,.0f} KiB"
            )


# -- summary -------------------------------------------------------------------------


def rule(title: str) -> None:
    print(f"\n{title}\n{'-' * len(title)}")
    print(f"   [{load()}]")


def note(text: str) -> None:
    """Progress, on stderr; the tables come at the end of each part."""
    print(f"  .. {text}", file=sys.stderr, flush=True)


def print_summary(
    turns: list[TurnCounts],
    rows: list[ServedRow],
    backends: dict[str, Backend],
    store_ms: dict[str, dict[str, float]],
    found: list[Footprint],
) -> None:
    rule("Summary")
    for r in turns:
        if r.how == "in process":
            typical = r.typical()
            if r.backend == "sqlite":
                what = f"{typical.round_trips} statements a turn"
            else:
                what = (
                    f"{typical.round_trips} round trips a turn, {typical.up:,} B up,"
                    f" {typical.down:,} B down (the median turn)"
                )
            print(f"   {r.backend:<14} {what}")
    for name in SERVED:
        mine = [row for row in rows if row.backend == name]
        if not mine:
            continue
        best = max(mine, key=lambda row: row.median(lambda w: w.rate))
        service = best.median(lambda w: w.per_request_ms("service"))
        server = list(backends[name].cpu)
        store = statistics.median(sum(w.per_request_ms(p) for p in server) for w in best.windows)
        print(
            f"   {name:<14} through the service: at most {best.median(lambda w: w.rate):,.0f}"
            f" req/s here ({best.processes} processes); CPU a request: service {service:.1f} ms,"
            f" store server {store:.2f} ms ({service / store:.0f}x less)"
        )
    for name, by_process in store_ms.items():
        each = "; ".join(
            f"{part} {ms:.3f} ms, at most {1000 / ms:,.0f} turns/s a core"
            for part, ms in by_process.items() if ms > 0
        )  # fmt: skip
        print(f"   {name:<14} store server CPU a turn (part 3, all windows): {each}")
    for f in found:
        value = max(f.measures.values())
        print(f"   {f.backend:<14} {f.size:>6,} messages: {value / 1024:,.0f} KiB a session")


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--backends", help=f"comma-separated, of {','.join(BACKENDS)} (default all)"
    )
    parser.add_argument(
        "--parts", default="1,2,3,4", help="comma-separated parts to run (default 1,2,3,4)"
    )
    parser.add_argument(
        "--quick", action="store_true",
        help="shorter: 60 turns in part 1, 1 round of shorter windows, fewer sessions",
    )  # fmt: skip
    args = parser.parse_args()
    args.backends = [b.strip() for b in (args.backends or ",".join(BACKENDS)).split(",")]
    if unknown := set(args.backends) - set(BACKENDS):
        parser.error(f"unknown backend(s) {', '.join(sorted(unknown))}: use {', '.join(BACKENDS)}")
    if "pgbouncer" in args.backends and "postgresql" not in args.backends:
        args.backends.insert(args.backends.index("pgbouncer"), "postgresql")
    args.parts = {int(p) for p in args.parts.split(",") if p.strip()}
    return args


def header(args: argparse.Namespace, plan: Plan) -> None:
    print("ctxwindow capacity benchmark\n============================")
    print(f"date      {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC")
    print(f"python    {platform.python_version()} ({platform.python_implementation()})")
    print(f"machine   {platform.machine()}, {platform.system()}, CPUs {os.cpu_count()}; {load()}")
    print(f"checkout  {revision()}")
    print(f"backends  {', '.join(args.backends)}; parts {', '.join(map(str, sorted(args.parts)))}")
    print(f"workload  seed {SEED}; user turns {USER_WORDS} words, replies {REPLY_WORDS}; a quarter")
    print("          with Chinese or Japanese, emoji; model gpt-4o (budget 96,000 tokens)")
    print(f"run       {'--quick' if args.quick else 'full'}: {plan.turns} turns in part 1,"
          f" {plan.rounds} round(s) in parts 2-3")  # fmt: skip


def versions(servers: Servers) -> None:
    """The servers' versions, for the record."""
    found = []
    if shutil.which("redis-server"):
        out = subprocess.run(["redis-server", "--version"], capture_output=True, text=True)
        found.append(out.stdout.split(" sha=")[0].replace("Redis server v=", "Redis "))
    if "postgresql" in servers.backends:
        import psycopg

        with psycopg.connect(servers.postgres.url) as conn:
            row = conn.execute("SHOW server_version").fetchone()
            found.append(f"PostgreSQL {row[0] if row else '?'}")
    if "pgbouncer" in servers.backends:
        out = subprocess.run(["pgbouncer", "--version"], capture_output=True, text=True)
        found.append(out.stdout.splitlines()[0] if out.stdout else "PgBouncer")
    print(f"servers   {'; '.join(found)} (the benchmark's own, on free ports)")
    for name, why in servers.missing.items():
        print(f"missing   {name}: not measured: {why}")


def main() -> None:
    args = arguments()
    plan = QUICK if args.quick else FULL
    header(args, plan)
    began, run_id = time.perf_counter(), uuid.uuid4().hex[:8]
    folder = Path(tempfile.mkdtemp(prefix="bench-scale-"))
    servers = Servers(folder, args.backends)
    proxies = Proxies()
    try:
        versions(servers)
        turns: list[TurnCounts] = []
        store_ms: dict[str, dict[str, float]] = {}
        found: list[Footprint] = []
        rows: list[ServedRow] = []
        with upstream_process(folder) as upstream:
            if 1 in args.parts:
                turns = bench_turns(servers, proxies, upstream, folder, plan)
                print_turns(turns, plan.turns)
            if 2 in args.parts:
                rows = bench_served(servers, upstream, folder, plan, run_id)
                print_served(rows, servers.backends, plan)
        if 3 in args.parts:
            windows = bench_store_alone(servers, folder, plan, run_id)
            store_ms = print_store_alone(windows, servers.backends, plan)
        if 4 in args.parts:
            found = bench_footprint(servers, folder, plan, run_id)
            print_footprint(found, *message_bytes(Texts(SEED + 5)))
        print_summary(turns, rows, servers.backends, store_ms, found)
        for name, why in servers.missing.items():
            print(f"   not measured: {name}: {why}")
    finally:
        proxies.close()
        servers.close()
        shutil.rmtree(folder, ignore_errors=True)
    print(f"   total run time {time.perf_counter() - began:.0f} s")


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # run the cleanup on a kill too
    main()
