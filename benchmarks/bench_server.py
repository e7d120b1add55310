"""CPU per request, cold sessions and load through ``ctxwindow serve``, side by side.

Real processes on 127.0.0.1: a fake OpenAI-compatible upstream (uvicorn,
answers at once) and ``python -m ctxwindow.server`` forwarding to it. Linux
only: CPU time is read from ``/proc``. Three parts, in one run:

1. CPU per request. For each store (a SQLite file, Redis, PostgreSQL), with
   the archive off, on searched by words alone (``words``) and on as by
   default (words and meaning, ``on``), M sequential non-streamed chat
   completions (gpt-4o), each a new ~15-word user turn: without a session
   (stateless: the same 10-message history each time, plus the new turn) and
   on sessions of 10, 2,000 and 20,000 stored messages (``on``: the
   ``--embedder-sizes``). CPU = utime + stime of every process in the
   service's process group (its workers too), read from ``/proc/<pid>/stat``
   before and after the batch, divided by M; the same for the fake
   upstream's process. "After" is once the archive has nothing queued: the
   indexing its worker does after the requests is theirs. Each batch follows
   a few unmeasured warm-up requests. The table sets each row beside the
   floor's at the same size (``on``: the embedding floor's) and beside the
   10-message row of the same setting.
2. Cold session: the first request on the largest session, sent to a
   service process that has never loaded it (wall time and service CPU).
   That process has answered a stateless request and the smaller sessions
   first, so what is measured is the session's load, not the process's.
3. Load: 20 concurrent sessions x 10 turns straight to the fake upstream,
   then through the floor proxies, then through the service (SQLite store;
   archive by words, the defaults, the defaults with ``--workers 2``).

The floor (``FLOOR_PROXY``, measured first, at every size): a plain stateful
proxy that reads the newest 20 stored messages in one indexed query, appends
the new turn, forwards both and stores the reply; the embedding floor also
embeds each message it stores with the service's default embedder.

Per store, one service process (archive off) prefills the sessions through
the sessions API, in batches of 500: alternating user/assistant texts of
20-60 words, some Chinese or Japanese, from a seeded ``random.Random``, never
the same text twice. Fresh processes then serve the same sessions, each
archive setting with an archive file of its own: off, words, on (the
worker indexes the whole session in the background after the first
request, which does not wait for it), then words and on again (they find
the session indexed). The first request each of them sends to the largest
session is a cold one. Session ids are new in every run (Redis db 11,
PostgreSQL database ``test``) and are deleted at the end.

Nothing here asserts a time: the targets print PASS or MISS.
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
import signal
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from workload import sentences

MODEL = "gpt-4o"
STORES = ("sqlite", "redis", "postgresql")
SIZES = (10, 2_000, 20_000)
REQUESTS = 100  # measured requests per batch (M)
WARMUP = 5  # unmeasured requests before each batch
PREFILL_BATCH = 500  # messages per POST /v1/sessions/{id}/messages
STATELESS_HISTORY = 10
SESSIONS = 20  # part 3: concurrent sessions
TURNS = 10  # part 3: turns per session
SEED = 20240509
SERVER_URLS = {
    "redis": "redis://127.0.0.1:6379/11",
    "postgresql": "postgresql://127.0.0.1:5432/test",
}
TARGETS = {"stateless": 1.5, "session": 2.0, "sizes": 1.3, "throughput": 0.70, "cold": 0.3}
"""Service / floor CPU per request (stateless, session), the largest session / 10 messages,
the service's throughput / the floor's, seconds for a cold session's first request."""
CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100

FAKE_UPSTREAM = r"""
import sys
import uvicorn
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route

async def chat(request):
    body = await request.json()
    message = {"role": "assistant", "content": "Noted: %d messages" % len(body["messages"])}
    return JSONResponse({
        "id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": body["model"],
        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    })

async def up(request):
    return JSONResponse({})

app = Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"]), Route("/", up)])
uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
"""

FLOOR_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS m (session TEXT, seq INTEGER, body BLOB, vector BLOB,"
    " PRIMARY KEY (session, seq)) WITHOUT ROWID"
)
FLOOR_HISTORY = 20  # stored messages the floor forwards before the new turn

FLOOR_PROXY = r"""
import sqlite3, sys, orjson, httpx, uvicorn
from starlette.applications import Starlette
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

port, upstream_url, path, schema, history, embed = sys.argv[1:]
db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
db.execute("PRAGMA journal_mode=WAL")
db.execute("PRAGMA synchronous=NORMAL")
db.execute(schema)
client = httpx.AsyncClient(base_url=upstream_url, timeout=60)
if embed == "yes":  # the same model as the service's archive, each stored message embedded once
    from ctxwindow.archive.embedders import default_embedder
    embedder = default_embedder()
    embedder.threads = 1  # its cheapest in CPU: 45-51 ms a request, 69 ms with both cores

def vectors(messages):
    if embed != "yes":
        return [None] * len(messages)
    return [orjson.dumps(v) for v in embedder.embed_passages([m["content"] for m in messages])]

def append(session, messages):
    # the newest stored messages in one indexed query, then the new ones after them
    rows = db.execute("SELECT seq, body FROM m WHERE session = ? ORDER BY seq DESC LIMIT ?",
                      (session, int(history))).fetchall()
    last = rows[0][0] if rows else 0
    db.execute("BEGIN")
    db.executemany("INSERT INTO m VALUES (?, ?, ?, ?)", [
        (session, last + i, orjson.dumps(m), v)
        for i, (m, v) in enumerate(zip(messages, vectors(messages)), 1)
    ])
    db.execute("COMMIT")
    return [orjson.loads(body) for _, body in reversed(rows)], last + len(messages)

def store(session, seq, message):
    db.execute("INSERT INTO m VALUES (?, ?, ?, ?)",
               (session, seq, orjson.dumps(message), vectors([message])[0]))

async def chat(request):
    body = orjson.loads(await request.body())
    session = request.headers.get("x-session-id")
    if session is not None:
        stored, last = append(session, body["messages"])
        body["messages"] = stored + body["messages"]
    upstream = await client.post("/chat/completions", content=orjson.dumps(body),
                                 headers={"content-type": "application/json"})
    if session is not None:
        store(session, last + 1, orjson.loads(upstream.content)["choices"][0]["message"])
    return Response(upstream.content, media_type="application/json")

async def up(request):
    return JSONResponse({})

app = Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"]), Route("/", up)])
uvicorn.run(app, host="127.0.0.1", port=int(port), log_level="warning")
"""
"""The floor: the least a stateful Python proxy does per request (uvicorn + Starlette, orjson,
httpx to the upstream; with a session: read the newest ``FLOOR_HISTORY`` stored messages in one
indexed query, append the new turn, forward both, store the reply; no budget, no counting, no
archive). ``embed=yes``: each stored message also embedded once, by the service's default
embedder (the least recall by meaning costs)."""


# -- workload ------------------------------------------------------------------------


class Texts:
    """Seeded chat texts, about a quarter with Chinese or Japanese; never the same twice."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.seen: set[str] = set()

    def text(self, low: int, high: int) -> str:
        text = self._text(self.rng.randint(low, high))
        while text in self.seen:
            text = self._text(self.rng.randint(low, high))
        self.seen.add(text)
        return text

    def messages(self, n: int, first: int = 0) -> list[dict[str, str]]:
        """``n`` alternating messages, 20-60 words; a user's first if ``first`` is even."""
        roles = ("user", "assistant")
        return [{"role": roles[(first + i) % 2], "content": self.text(20, 60)} for i in range(n)]

    def turn(self) -> dict[str, str]:
        """A new user turn of about 15 words."""
        return {"role": "user", "content": self.text(12, 18)}

    def _text(self, n_words: int) -> str:
        return sentences(self.rng, n_words)


# -- processes -----------------------------------------------------------------------


def group_cpu(pgid: int) -> float:
    """CPU seconds (user + system) of the live processes of process group ``pgid``."""
    ticks = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rpartition(")")[2].split()
        except OSError:
            continue  # the process ended meanwhile
        if int(fields[2]) == pgid:  # fields from 'state' on: pgrp, ..., utime, stime
            ticks += int(fields[11]) + int(fields[12])
    return ticks / CLOCK_TICKS


@dataclass
class Process:
    """A child process in its own process group (so with its workers), answering at ``url``."""

    popen: subprocess.Popen[bytes]
    url: str
    log: Path | None = None

    def cpu(self) -> float:
        return group_cpu(self.popen.pid)


def log_tail(log: Path | None, lines: int = 8) -> str:
    """The last ``lines`` of a service's log, indented, to show with an error."""
    if log is None or not log.exists():
        return ""
    return "".join(
        f"\n      | {line}" for line in log.read_text(errors="replace").splitlines()[-lines:]
    )


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_until_up(process: Process, path: str, seconds: float = 30.0) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if process.popen.poll() is not None:
            break
        try:
            httpx.get(process.url + path, timeout=1.0)
            return
        except httpx.HTTPError:
            time.sleep(0.1)
    raise RuntimeError(f"{process.url} did not come up{log_tail(process.log)}")


@contextlib.contextmanager
def running(
    args: list[str], port: int, health: str, env: dict[str, str], log: Path | None = None
) -> Iterator[Process]:
    """Start ``args`` in a new process group, wait for ``health``, stop the group at the end."""
    out = log.open("ab") if log is not None else subprocess.DEVNULL
    popen = subprocess.Popen(
        args, env={**os.environ, **env}, stdout=out, stderr=out, start_new_session=True
    )
    process = Process(popen, f"http://127.0.0.1:{port}", log)
    try:
        wait_until_up(process, health)
        yield process
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(popen.pid, signal.SIGTERM)
        popen.wait(timeout=30)
        if log is not None and not isinstance(out, int):
            out.close()


def upstream_process(port: int) -> contextlib.AbstractContextManager[Process]:
    return running([sys.executable, "-c", FAKE_UPSTREAM, str(port)], port, "/", {})


@contextlib.contextmanager
def floor_process(
    upstream: Process,
    sessions: dict[str, list[dict[str, str]]] | None = None,
    *,
    embed: bool = False,
) -> Iterator[Process]:
    """``FLOOR_PROXY`` in front of ``upstream``, its SQLite file in a temporary folder, the
    ``sessions`` (id -> messages) written into it before it starts."""
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="bench-floor-") as folder:
        path = Path(folder) / "floor.db"
        with contextlib.closing(sqlite3.connect(path)) as db, db:
            db.execute(FLOOR_SCHEMA)
            db.executemany(
                "INSERT INTO m VALUES (?, ?, ?, NULL)",
                [
                    (session, seq, json.dumps(message))
                    for session, messages in (sessions or {}).items()
                    for seq, message in enumerate(messages, 1)
                ],
            )
        args = [sys.executable, "-c", FLOOR_PROXY, str(port), f"{upstream.url}/v1", str(path),
                FLOOR_SCHEMA, str(FLOOR_HISTORY), "yes" if embed else "no"]  # fmt: skip
        with running(args, port, "/", {}, Path(folder) / "floor.log") as proxy:
            yield proxy


@dataclass(frozen=True)
class Setting:
    """How a service is configured: its archive and its embedder."""

    label: str
    archive: bool
    embedder: bool

    def env(self, folder: Path) -> dict[str, str]:
        if not self.archive:
            return {"CTXWINDOW_ARCHIVE": "off"}
        # an archive file per setting, so that one does not inherit another's index
        env = {"CTXWINDOW_ARCHIVE": str(folder / f"archive-{self.label}.db")}
        return env if self.embedder else {**env, "CTXWINDOW_EMBEDDER": "off"}


OFF = Setting("off", archive=False, embedder=False)
WORDS = Setting("words", archive=True, embedder=False)
DEFAULTS = Setting("on", archive=True, embedder=True)
"""The archive settings measured: off; on, searched by words alone; on as by default (words and
meaning, the packaged embedder)."""


def service_process(
    upstream: Process, store: str, folder: Path, setting: Setting = DEFAULTS, *, workers: int = 1
) -> contextlib.AbstractContextManager[Process]:
    """``python -m ctxwindow.server`` over ``store``; its output goes to ``folder``/service.log."""
    port = free_port()
    args = [
        sys.executable, "-m", "ctxwindow.server", "--port", str(port), "--upstream",
        f"{upstream.url}/v1", "--store", store, "--workers", str(workers),
    ]  # fmt: skip
    env = {
        "CTXWINDOW_DATA_DIR": str(folder),
        "CTXWINDOW_MAX_MESSAGES_PER_SESSION": "100000",
        **setting.env(folder),
    }
    return running(args, port, "/healthz", env, folder / "service.log")


def store_url(store: str, folder: Path) -> str:
    if store == "sqlite":
        return f"sqlite:///{folder / 'sessions.db'}"
    return SERVER_URLS[store]


def reachable(url: str) -> bool:
    """Whether a Redis or PostgreSQL server answers a TCP connection (a SQLite file: yes)."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme == "sqlite":
        return True
    try:
        with socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 0), 2.0):
            return True
    except OSError:
        return False


# -- requests ------------------------------------------------------------------------


class ServiceError(RuntimeError):
    """The service answered with a 4xx/5xx (status and body in the message)."""


@dataclass
class Run:
    """What every part shares: the client, the upstream, the texts, what went wrong."""

    client: httpx.Client
    upstream: Process
    texts: Texts
    requests: int
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex[:8])
    problems: list[str] = field(default_factory=list)

    def problem(self, text: str) -> None:
        """Keep ``text`` for the end of the output, and show it now (in case of a crash)."""
        self.problems.append(text)
        note(text)

    def post(self, url: str, body: dict[str, Any], session: str | None = None) -> float:
        """POST ``body``; the wall seconds. A 4xx/5xx raises ``ServiceError``."""
        headers = {"X-Session-Id": session} if session is not None else {}
        start = time.perf_counter()
        response = self.client.post(url, json=body, headers=headers)
        seconds = time.perf_counter() - start
        if response.status_code >= 400:
            raise ServiceError(f"{response.status_code} from POST {url}: {response.text[:500]}")
        return seconds

    def backlog(self, service: Process, seconds: float = 1800.0) -> float | None:
        """Wait until the service's archive has nothing queued (``ctxwindow_archive_queued``
        is 0); the largest backlog seen, None if there was none (or no archive)."""
        deadline, seen = time.monotonic() + seconds, 0.0
        while True:
            answer = self.client.get(f"{service.url}/metrics")
            text = answer.text if answer.status_code == 200 else ""  # the floor has none
            line = next(
                (x for x in text.splitlines() if x.startswith("ctxwindow_archive_queued ")), ""
            )
            queued = float(line.split()[1]) if line else 0.0
            seen = max(seen, queued)
            if queued == 0:
                return seen or None
            if time.monotonic() > deadline:
                raise ServiceError(f"the archive still had {queued:.0f} turns queued")
            time.sleep(0.05)

    def chat(self, service: Process, session: str | None, history: list[Any]) -> float:
        """One completion: the session's new user turn, or ``history`` + a new turn."""
        messages = [self.texts.turn()] if session is not None else [*history, self.texts.turn()]
        body = {"model": MODEL, "messages": messages}
        return self.post(f"{service.url}/v1/chat/completions", body, session)


@dataclass
class Batch:
    service_ms: float  # CPU per request
    upstream_ms: float
    wall_ms: float  # median wall time per request


def batch(run: Run, service: Process, session: str | None, history: list[Any]) -> Batch:
    """WARMUP requests, then ``run.requests`` measured ones, sequential. The archive's
    indexing of their turns, which its worker may do after them, is charged to them: the
    CPU is read once nothing is queued (before the batch too)."""
    for _ in range(WARMUP):
        run.chat(service, session, history)
    run.backlog(service)
    service_cpu, upstream_cpu = service.cpu(), run.upstream.cpu()
    walls = [run.chat(service, session, history) for _ in range(run.requests)]
    run.backlog(service)
    n = run.requests
    return Batch(
        (service.cpu() - service_cpu) * 1000 / n,
        (run.upstream.cpu() - upstream_cpu) * 1000 / n,
        statistics.median(walls) * 1000,
    )


def prefill(run: Run, service: Process, session: str, size: int) -> None:
    """``size`` alternating messages stored through the sessions API, PREFILL_BATCH a request."""
    url = f"{service.url}/v1/sessions/{session}/messages"
    for start in range(0, size, PREFILL_BATCH):
        messages = run.texts.messages(min(PREFILL_BATCH, size - start), first=start)
        run.post(url, {"model": MODEL, "messages": messages})


def delete(run: Run, service: Process, session: str) -> None:
    """Delete ``session`` (store, window, archive); a 404 is a session never stored."""
    response = run.client.delete(f"{service.url}/v1/sessions/{session}")
    if response.status_code not in (200, 404):
        run.problem(f"DELETE {session}: {response.status_code} {response.text[:300]}")


# -- part 1 and 2: CPU per request, cold sessions ------------------------------------


@dataclass
class Row:
    store: str  # "floor" for the floor proxy
    archive: str  # a Setting's label; the floor's: "-", or "embed" (it embeds what it stores)
    size: int | None  # None: stateless
    batch: Batch

    def label(self) -> str:
        return f"{self.store}, archive {self.archive}, {size_label(self.size)}"


@dataclass
class Cold:
    store: str
    archive: str
    size: int
    wall_s: float
    cpu_s: float
    backlog_s: float | None = None  # the archive's background catch-up after it, wall


@dataclass
class Results:
    sizes: tuple[int, ...]
    embedder_sizes: tuple[int, ...]  # the sizes the default embedder is measured at
    rows: list[Row] = field(default_factory=list)
    colds: list[Cold] = field(default_factory=list)

    def sizes_of(self, setting: Setting) -> tuple[int, ...]:
        return self.embedder_sizes if setting.embedder else self.sizes

    def floor(self, row: Row) -> Row | None:
        """The floor's row to set ``row`` beside: the same size, embedding if ``row``'s
        service embeds (stateless: the plain floor's)."""
        embeds = row.archive == DEFAULTS.label and row.size is not None
        archive = "embed" if embeds else "-"
        return next(
            (r for r in self.rows if (r.store, r.archive, r.size) == ("floor", archive, row.size)),
            None,
        )


@dataclass
class StoreBench:
    """Parts 1 and 2 for one store: prefill, then a fresh service per archive setting."""

    run: Run
    store: str
    url: str
    folder: Path
    results: Results

    @property
    def sessions(self) -> dict[int, str]:
        return {size: f"bench-{self.run.run_id}-{self.store}-{size}" for size in self.results.sizes}

    def __call__(self) -> None:
        try:
            self._prefill()
            for setting in (OFF, WORDS, DEFAULTS):
                self._served(setting)
            self._indexed()
        finally:
            self._delete()

    def service(self, setting: Setting) -> contextlib.AbstractContextManager[Process]:
        return service_process(self.run.upstream, self.url, self.folder, setting)

    def _prefill(self) -> None:
        start = time.perf_counter()
        with self.service(OFF) as service:
            for size, session in self.sessions.items():
                prefill(self.run, service, session, size)
        seconds = time.perf_counter() - start
        note(f"{self.store}: prefilled {sum(self.results.sizes):,} messages in {seconds:.1f} s")

    def _served(self, setting: Setting) -> None:
        """Stateless, then each session: its first request (cold for the largest), a batch."""
        history = self.run.texts.messages(STATELESS_HISTORY)
        sizes = self.results.sizes_of(setting)
        with self.service(setting) as service:
            self._row(setting.label, None, batch(self.run, service, None, history))
            for size in sizes:
                session = self.sessions[size]
                self._first(service, size, session, setting.label, cold=size == max(sizes))
                self._row(setting.label, size, batch(self.run, service, session, []))

    def _indexed(self) -> None:
        """Fresh processes whose archive holds the sessions (indexed by the runs before): the
        first request on the largest session, cold again."""
        for setting in (WORDS, DEFAULTS):
            largest = max(self.results.sizes_of(setting))
            with self.service(setting) as service:
                self.run.chat(service, None, [])
                self._first(service, largest, self.sessions[largest], f"{setting.label}, indexed")

    def _delete(self) -> None:
        """Delete the sessions through a fresh service (archive on: its entries go too)."""
        try:
            with self.service(WORDS) as service:
                for session in self.sessions.values():
                    delete(self.run, service, session)
        except (RuntimeError, httpx.HTTPError) as exc:
            left = ", ".join(self.sessions.values())
            self.run.problem(f"{self.store}: sessions {left} not deleted: {exc}")

    def _row(self, archive_label: str, size: int | None, measured: Batch) -> None:
        self.results.rows.append(Row(self.store, archive_label, size, measured))
        shown = size_label(size)
        note(f"{self.store}, archive {archive_label}, {shown}: {measured.service_ms:.2f} ms")

    def _first(
        self, service: Process, size: int, session: str, archive_label: str, cold: bool = True
    ) -> None:
        """The session's first request; then, outside what is measured, wait until the
        archive has indexed what the session queued (in the background)."""
        cpu = service.cpu()
        started = time.perf_counter()
        wall = self.run.chat(service, session, [])
        cpu = service.cpu() - cpu
        backlog = self.run.backlog(service)
        if cold:
            caught_up = None if backlog is None else time.perf_counter() - started
            self.results.colds.append(Cold(self.store, archive_label, size, wall, cpu, caught_up))
            note(f"{self.store}, archive {archive_label}: cold {size:,} in {wall:.2f} s")


def bench_floor(run: Run, results: Results) -> None:
    """The floor proxy at every size, its sessions written in before it starts; then the
    floor that embeds what it stores, at the default embedder's sizes."""
    texts = Texts(SEED + 1)
    sessions = {size: f"floor-{run.run_id}-{size}" for size in results.sizes}
    stored = {sessions[size]: texts.messages(size) for size in results.sizes}
    with floor_process(run.upstream, stored) as proxy:
        history = run.texts.messages(STATELESS_HISTORY)
        results.rows.append(Row("floor", "-", None, batch(run, proxy, None, history)))
        for size, session in sessions.items():
            results.rows.append(Row("floor", "-", size, batch(run, proxy, session, [])))
    note("floor proxy measured")
    with floor_process(run.upstream, stored, embed=True) as proxy:
        for size in results.embedder_sizes:
            results.rows.append(Row("floor", "embed", size, batch(run, proxy, sessions[size], [])))
    note("floor proxy with the embedder measured")


def bench_stores(
    run: Run, stores: list[str], sizes: tuple[int, ...], embedder_sizes: tuple[int, ...]
) -> Results:
    """Parts 1 and 2 for each store that answers; a store stops at its first error."""
    results = Results(sizes, embedder_sizes)
    bench_floor(run, results)
    for store in stores:
        with tempfile.TemporaryDirectory(prefix=f"bench-{store}-") as folder:
            url = store_url(store, Path(folder))
            if not reachable(url):
                run.problem(f"skipped: {store} not reachable at {url}")
                continue
            try:
                StoreBench(run, store, url, Path(folder), results)()
            except (ServiceError, RuntimeError, httpx.HTTPError) as exc:
                tail = log_tail(Path(folder) / "service.log")
                run.problem(f"{store}: stopped: {exc}{tail}")
    return results


def size_label(size: int | None) -> str:
    return "stateless" if size is None else f"{size:,} msgs"


def print_cpu(results: Results, requests: int) -> None:
    rule(f"1. CPU per request, {requests} sequential requests per row (+{WARMUP} warm-up)")
    print("   service = utime+stime of the service's processes, every thread (its archive's")
    print("   worker too); upstream = the fake upstream's. 'floor' = a plain proxy in the")
    print("   service's place (uvicorn + Starlette + orjson + httpx; with a session it reads the")
    print(f"   newest {FLOOR_HISTORY} stored messages in one indexed SQLite query, appends the new")
    print("   turn, forwards both, stores the reply); 'embed' = the floor that also embeds each")
    print("   message it stores with the service's default embedder, once.")
    print("   archive: off; 'words' = on, searched by words alone (embedder off); 'on' = the")
    print("   defaults (words and meaning). / floor = service CPU / the floor's at that size")
    print("   ('on': the embedding floor's); x 10 msgs = / the 10-message row of that setting")
    print(
        f"   {'store':<11} {'archive':<8} {'session':<11} {'service':>9} {'upstream':>9}"
        f" {'/ floor':>8} {'x 10 msgs':>9} {'wall p50':>9}"
    )
    rows = results.rows
    base = {(r.store, r.archive): r.batch.service_ms for r in rows if r.size == 10}
    for row in rows:
        b, ten = row.batch, base.get((row.store, row.archive), 0.0)
        versus = ratio(b.service_ms, ten) if row.size is not None and ten else ""
        floor = results.floor(row) if row.store != "floor" else None
        over = ratio(b.service_ms, floor.batch.service_ms) if floor is not None else ""
        print(
            f"   {row.store:<11} {row.archive:<8} {size_label(row.size):<11}"
            f" {b.service_ms:>6.2f} ms {b.upstream_ms:>6.2f} ms"
            f" {over:>8} {versus:>9} {b.wall_ms:>6.2f} ms"
        )


def print_cold(colds: list[Cold]) -> None:
    rule("2. Cold session: the first request on a session the service process never loaded")
    print("   'words', 'on' = the archive starts empty: the worker indexes the session in the")
    print("   background while the first search uses what is indexed ('archive caught up': wall")
    print("   from the request's start until nothing is queued, polled on /metrics; not the")
    print("   request's); ', indexed' = a fresh process whose archive already holds the session")
    print(
        f"   {'store':<11} {'archive':<12} {'session':<12} {'wall':>9} {'service CPU':>12}"
        f" {'archive caught up':>18}"
    )
    for cold in colds:
        caught_up = "-" if cold.backlog_s is None else f"{cold.backlog_s:.2f} s"
        print(
            f"   {cold.store:<11} {cold.archive:<12} {size_label(cold.size):<12}"
            f" {cold.wall_s:>7.3f} s {cold.cpu_s:>10.3f} s {caught_up:>18}"
        )


# -- part 3: load --------------------------------------------------------------------


@dataclass
class Load:
    rate: float
    p50: float
    p99: float
    service_ms: float  # CPU per request; 0 when direct
    upstream_ms: float


async def conversation(
    client: httpx.AsyncClient, url: str, session: str, latencies: list[float], errors: list[str]
) -> None:
    for turn in range(TURNS):
        body = {
            "model": MODEL,
            "messages": [{"role": "user", "content": f"turn {turn}: where is order A-{turn:04d}?"}],
        }
        start = time.perf_counter()
        response = await client.post(url, json=body, headers={"X-Session-Id": session})
        latencies.append((time.perf_counter() - start) * 1000)
        if response.status_code >= 400:
            errors.append(f"{response.status_code} {response.text[:300]}")


async def concurrent(url: str, label: str, errors: list[str]) -> list[float]:
    """SESSIONS conversations at once against ``url``: the latency of every request, ms."""
    latencies: list[float] = []
    async with httpx.AsyncClient(timeout=120.0) as client:
        await asyncio.gather(
            *(conversation(client, url, f"{label}-{i}", latencies, errors) for i in range(SESSIONS))
        )
    return latencies


def load(run: Run, target: Process, service: Process | None, label: str) -> Load:
    """SESSIONS concurrent conversations against ``target``; CPU of ``service`` and upstream."""
    service_cpu = service.cpu() if service is not None else 0.0
    upstream_cpu = run.upstream.cpu()
    errors: list[str] = []
    start = time.perf_counter()
    latencies = asyncio.run(concurrent(f"{target.url}/v1/chat/completions", label, errors))
    if service is not None:
        run.backlog(service)  # the archive's indexing of the turns is part of serving them
    rate = len(latencies) / (time.perf_counter() - start)
    if errors:
        run.problem(f"load {label}: {len(errors)} errors, the first: {errors[0]}")
    n = len(latencies)
    return Load(
        rate,
        statistics.median(latencies),
        statistics.quantiles(latencies, n=100)[-1],
        (service.cpu() - service_cpu) * 1000 / n if service is not None else 0.0,
        (run.upstream.cpu() - upstream_cpu) * 1000 / n,
    )


@dataclass
class LoadResults:
    direct: Load
    floor: Load  # through FLOOR_PROXY
    floor_embed: Load  # through FLOOR_PROXY embedding what it stores
    served: dict[str, Load]  # by label: "words", "on", "on, --workers 2"


def bench_load(run: Run) -> LoadResults:
    """Direct, through the floors, then through the service (archive by words; defaults; the
    defaults with 2 workers); one that fails is left out."""
    direct = load(run, run.upstream, None, f"d-{run.run_id}")
    with floor_process(run.upstream) as proxy:
        floor = load(run, proxy, proxy, f"f-{run.run_id}")
    with floor_process(run.upstream, embed=True) as proxy:
        floor_embed = load(run, proxy, proxy, f"fe-{run.run_id}")
    served: dict[str, Load] = {}
    for setting, workers in ((WORDS, 1), (DEFAULTS, 1), (DEFAULTS, 2)):
        label = setting.label + (f", --workers {workers}" if workers > 1 else "")
        with tempfile.TemporaryDirectory(prefix="bench-load-") as folder:
            url = store_url("sqlite", Path(folder))
            try:
                with service_process(
                    run.upstream, url, Path(folder), setting, workers=workers
                ) as service:
                    served[label] = load(run, service, service, f"s{len(served)}-{run.run_id}")
            except (RuntimeError, httpx.HTTPError) as exc:
                run.problem(f"load, archive {label}: stopped: {exc}")
    return LoadResults(direct, floor, floor_embed, served)


def print_load(results: LoadResults) -> None:
    rule(f"3. Load: {SESSIONS} concurrent sessions x {TURNS} turns, loopback, SQLite store")
    print("   CPU/req = CPU time of the service's processes (or the upstream's) / requests;")
    print("   / floor = throughput / the floor's ('on': the embedding floor's)")
    print(
        f"   {'':<38} {'throughput':>12} {'p50':>9} {'p99':>9} {'svc CPU/req':>12}"
        f" {'up CPU/req':>11}"
    )
    show_load("fake upstream directly", results.direct)
    show_load("through the floor proxy", results.floor)
    show_load("through the floor proxy, embedding", results.floor_embed)
    for label, through in results.served.items():
        show_load(f"through ctxwindow serve, archive {label}", through)
        floor = results.floor if label == WORDS.label else results.floor_embed
        added = through.p50 - results.direct.p50, through.p99 - results.direct.p99
        print(
            f"     / floor {through.rate / floor.rate:.0%};"
            f" added p50 {added[0]:.2f} ms, p99 {added[1]:.2f} ms"
        )


def show_load(label: str, result: Load) -> None:
    cpu = f"{result.service_ms:.2f} ms" if result.service_ms else "-"
    print(
        f"   {label:<38} {result.rate:>6.1f} req/s {result.p50:>6.2f} ms {result.p99:>6.2f} ms"
        f" {cpu:>12} {result.upstream_ms:>8.2f} ms"
    )


# -- summary -------------------------------------------------------------------------


def ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}x" if b > 0 else "n/a"


def rule(title: str) -> None:
    print(f"\n{title}\n{'-' * len(title)}")


def note(text: str) -> None:
    """Progress, on stderr; the tables come at the end of each part."""
    print(f"  .. {text}", file=sys.stderr, flush=True)


Worst = tuple[float, str]  # (value, where it was measured)


def size_ratios(rows: list[Row]) -> list[Worst]:
    """Each session row's service CPU / the 10-message row of its store and archive."""
    base = {(r.store, r.archive): r.batch.service_ms for r in rows if r.size == 10}
    return [
        (r.batch.service_ms / base[r.store, r.archive], r.label())
        for r in rows
        if r.size is not None and base.get((r.store, r.archive), 0) > 0
    ]


def over_floor(results: Results, rows: list[Row]) -> list[Worst]:
    """Each row's service CPU / its floor's (``Results.floor``)."""
    return [
        (row.batch.service_ms / floor.batch.service_ms, row.label())
        for row in rows
        if (floor := results.floor(row)) is not None and floor.batch.service_ms > 0
    ]


def print_targets(results: Results, load_results: LoadResults) -> None:
    rule("Summary (targets: the SQLite store; / floor as in part 1)")
    rows = [r for r in results.rows if r.store == "sqlite"]
    stateless = over_floor(results, [r for r in rows if r.size is None])
    show_target(stateless, "stateless", "service / floor CPU per request, stateless", "<= 1.5x")
    for setting, floor_name in ((WORDS, "floor"), (DEFAULTS, "embedding floor")):
        mine = [r for r in rows if r.archive == setting.label and r.size is not None]
        label = f"archive {setting.label}: service / {floor_name} CPU per request, with a session"
        show_target(over_floor(results, mine), "session", label, "<= 2x")
        most = max((r.size or 0 for r in mine), default=0)
        grown = [w for w in size_ratios(mine) if w[1].endswith(f" {most:,} msgs")]
        label = f"archive {setting.label}: the session of {most:,} / of 10 messages"
        show_target(grown, "sizes", label, "<= 1.3x")
    floors = {WORDS.label: load_results.floor, DEFAULTS.label: load_results.floor_embed}
    for label, floor in floors.items():
        if label in load_results.served:
            share = load_results.served[label].rate / floor.rate
            verdict = "PASS" if share >= TARGETS["throughput"] else "MISS"
            print(f"   {verdict}  archive {label}: throughput through the service (1 process) /"
                  f" the floor's: {share:.0%} (target >= 70%)")  # fmt: skip
        else:
            print(f"   n/a   archive {label}: throughput through the service: not measured")
    colds = [(c.wall_s, f"{c.store}, archive {c.archive}") for c in results.colds]
    show_target(colds, "cold", "cold session (the largest), first request", "<= 0.3 s")


def show_target(measured: list[Worst], key: str, label: str, goal: str) -> None:
    """PASS/MISS for the worst of ``measured`` (the unit is the goal's)."""
    if not measured:
        print(f"   n/a   {label}: not measured")
        return
    value, where = max(measured)
    unit = goal.split()[-1]
    shown = f"{value:.2f}x" if unit.endswith("x") else f"{value:.3g} {unit}"
    verdict = "PASS" if value <= TARGETS[key] else "MISS"
    print(f"   {verdict}  {label} (worst): {shown} (target {goal}) [{where}]")


# -- main ----------------------------------------------------------------------------


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--stores", help=f"comma-separated, of {','.join(STORES)} (default all)")
    parser.add_argument("--sizes", help="comma-separated session sizes (default 10,2000,20000)")
    parser.add_argument(
        "--embedder-sizes",
        help="comma-separated session sizes the default embedder is measured at, of --sizes"
        " (default those up to 2,000: indexing 20,000 messages with it takes ~15 min here)",
    )
    parser.add_argument(
        "--requests", type=int, help=f"measured requests a row (default {REQUESTS})"
    )
    parser.add_argument(
        "--quick", action="store_true",
        help="sqlite only, sizes 10,2000, 30 requests a row (flags given still win)",
    )  # fmt: skip
    args = parser.parse_args()
    quick = args.quick
    args.stores = split(args.stores, str) if args.stores else ["sqlite"] if quick else [*STORES]
    if unknown := set(args.stores) - set(STORES):
        parser.error(f"unknown store(s) {', '.join(sorted(unknown))}: use {', '.join(STORES)}")
    sizes = split(args.sizes, int) if args.sizes else [10, 2_000] if quick else [*SIZES]
    args.sizes = tuple(sorted(set(sizes)))
    if args.embedder_sizes:
        args.embedder_sizes = tuple(sorted(set(split(args.embedder_sizes, int))))
        if not set(args.embedder_sizes) <= set(args.sizes):
            parser.error("--embedder-sizes must be some of --sizes")
    else:
        args.embedder_sizes = tuple(size for size in args.sizes if size <= 2_000) or args.sizes[:1]
    args.requests = args.requests or (30 if quick else REQUESTS)
    return args


def split(text: str, kind: type[Any]) -> list[Any]:
    return [kind(part.strip()) for part in text.split(",") if part.strip()]


def header(args: argparse.Namespace) -> None:
    print("ctxwindow server benchmark\n==========================")
    print(f"date      {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC")
    print(f"python    {platform.python_version()} ({platform.python_implementation()})")
    print(f"machine   {platform.machine()}, {platform.system()}, CPUs {os.cpu_count()}")
    print(f"checkout  {revision()}")
    sizes = ", ".join(f"{size:,}" for size in args.sizes)
    print(f"stores    {', '.join(args.stores)}; sessions of {sizes} messages")
    embedded = ", ".join(f"{size:,}" for size in args.embedder_sizes)
    print(f"embedder  the default archive (words and meaning) at {embedded} messages")
    print(f"workload  seed {SEED}; {args.requests} measured requests a row; model {MODEL}")


def revision() -> str:
    """The commit measured, and whether src/ differs from it (others may be editing it)."""
    here = Path(__file__).resolve().parent

    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], cwd=here, capture_output=True, text=True)
        return done.stdout.strip() if done.returncode == 0 else ""

    commit = git("log", "-1", "--format=%h %s")[:70] or "unknown (not a git checkout)"
    return commit + (
        " (+ uncommitted changes in src/)" if git("status", "--porcelain", "--", ":/src") else ""
    )


def main() -> None:
    args = arguments()
    header(args)
    began = time.perf_counter()
    with upstream_process(free_port()) as upstream, httpx.Client(timeout=120.0) as client:
        run = Run(client, upstream, Texts(SEED), args.requests)
        results = bench_stores(run, args.stores, args.sizes, args.embedder_sizes)
        print_cpu(results, args.requests)
        print_cold(results.colds)
        load_results = bench_load(run)
        print_load(load_results)
    print_targets(results, load_results)
    for problem in run.problems:
        print(f"   note  {problem}")
    print(f"   total run time {time.perf_counter() - began:.0f} s")


if __name__ == "__main__":
    main()
