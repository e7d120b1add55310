"""kill -9 under concurrent load, then an exact account of every acknowledged turn.

Four clients, one session each, send numbered turns (each with its own
``Idempotency-Key``) to the service, a real process. Once 12 turns are
acknowledged the service gets SIGKILL, with requests in flight (the upstream
takes 50 ms an answer, so some are between storing the question and storing
the reply). A new process starts on the same store; each client retries the
turn it was not answered, with the same key, until it is (409/503 meanwhile
are retried: a lease of the dead process may linger a few seconds), then
sends one more. Every session must then hold exactly its turns, in order,
each question once and followed by its one answer: nothing acknowledged lost,
nothing doubled, nothing out of order.

Runs on SQLite, and on a private Redis (append-only file, fsync always) and
PostgreSQL. Budget: ~20 s a store on 2 cores (two service starts), ~60 s in all.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from tests.support.faults.ledger import Ledger
from tests.support.faults.servers import PrivatePostgres, PrivateRedis
from tests.support.faults.service import ServiceProcess
from tests.support.faults.upstream import FaultyUpstream

pytestmark = pytest.mark.servers

CLIENTS = 4
TURNS = 40  # at most, per client, before the kill
KILL_AFTER = 12  # acknowledged turns
RETRY_LIMIT = 45.0  # seconds a client retries its unanswered turn after the restart


def question(client: int, turn: int) -> str:
    return f"client {client}, turn {turn}: 第{turn}号 — où? 📦"


def load(ledger: Ledger, enough: threading.Event) -> Callable[[int], tuple[int, str] | None]:
    """A client's turns until one fails: the (turn, question) it was not answered."""

    def run(client: int) -> tuple[int, str] | None:
        for turn in range(TURNS):
            text = question(client, turn)
            try:
                response = ledger.turn(f"client-{client}", text)
            except httpx.TransportError:
                return turn, text
            if response.status_code != 200:
                assert enough.is_set(), response.text[:400]  # only the kill may fail a turn
                return turn, text
            if sum(len(asked) for asked in ledger.acknowledged.values()) >= KILL_AFTER:
                enough.set()
        return None

    return run


def retry(ledger: Ledger, client: int, text: str) -> None:
    """Send ``text`` again with its key until it is answered (bounded)."""
    deadline = time.monotonic() + RETRY_LIMIT
    while True:
        response = ledger.turn(f"client-{client}", text)
        if response.status_code == 200:
            return
        assert response.status_code in (409, 503), response.text[:400]
        assert time.monotonic() < deadline, f"client {client}: {text!r} never answered again"
        time.sleep(0.2)


def run_kill9(store: str, upstream: FaultyUpstream, tmp_path: Path) -> None:
    upstream.mode, upstream.gap = "slow", 0.05
    first = ServiceProcess(store, upstream.base_url, tmp_path, lock_timeout=2)
    first.start()
    ledger, enough = Ledger(first.url), threading.Event()
    try:
        with ThreadPoolExecutor(CLIENTS) as pool:
            running = [pool.submit(load(ledger, enough), c) for c in range(CLIENTS)]
            assert enough.wait(60), "the load never reached the kill"
            first.kill9()
            unanswered = [future.result() for future in running]
    finally:
        first.stop()
    assert all(u is not None for u in unanswered), "a client finished before the kill"
    second = ServiceProcess(store, upstream.base_url, tmp_path, lock_timeout=2)
    second.start()
    try:
        ledger.base_url = second.url
        for client, (turn, text) in enumerate(u for u in unanswered if u is not None):
            retry(ledger, client, text)
            assert ledger.turn(f"client-{client}", question(client, turn + 1)).status_code == 200
        for client in range(CLIENTS):
            asked = ledger.acknowledged[f"client-{client}"]
            assert asked == [question(client, t) for t in range(len(asked))]
            contents = [m["content"] for m in ledger.history(f"client-{client}")]
            assert contents == [x for q in asked for x in (q, f"answer to: {q}")], (
                f"client {client}: acknowledged {len(asked)} turns, stored {contents}"
            )
    finally:
        second.stop()


def test_kill9_on_sqlite(tmp_path: Path, upstream: FaultyUpstream) -> None:
    """SQLite file store (budget ~20 s)."""
    run_kill9(f"sqlite:///{tmp_path / 'sessions.db'}", upstream, tmp_path)


def test_kill9_on_redis(
    private_redis: PrivateRedis, upstream: FaultyUpstream, tmp_path: Path
) -> None:
    """Private Redis, append-only file fsynced always (budget ~20 s)."""
    run_kill9(private_redis.url, upstream, tmp_path)


def test_kill9_on_postgres(
    private_postgres: PrivatePostgres, upstream: FaultyUpstream, tmp_path: Path
) -> None:
    """Private PostgreSQL (budget ~20 s)."""
    run_kill9(private_postgres.url, upstream, tmp_path)
