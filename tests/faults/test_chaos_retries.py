"""Chaos: clients that share sessions and retry with their keys, the server killed 14 times.

Four clients, two to a session, send numbered questions, each with its own
``Idempotency-Key``. Every failure (the connection lost at a ``kill -9``, a
503 while the store is back, a 409 while a dead process's lock lingers) is
retried with the same key. Meanwhile the other client of the session may get
its turn answered: the retry then meets a session that moved on, and must be
refused with ``idempotency_turn_superseded`` (the client gives that question
up) rather than answered after the other turn. A killer thread sends SIGKILL
to the service 14 times, each once a few more turns were acknowledged, and
starts it again on the same port and store.

The account, printed, must show 0 wrong replies (every reply a client got, and
every one stored, answers the question just before it), 0 duplicated (no
question or answer stored twice), 0 interleaved (never two assistant turns in
a row, never an answer away from its question) and 0 acknowledged turns lost.

Runs on SQLite, and on a private Redis (append-only, fsync always) and
PostgreSQL. Budget: ~40-60 s a store on 2 cores (15 service starts).
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from itertools import pairwise
from pathlib import Path

import httpx
import pytest

from tests.support.faults.ledger import Ledger
from tests.support.faults.servers import PrivatePostgres, PrivateRedis
from tests.support.faults.service import ServiceProcess
from tests.support.faults.upstream import FaultyUpstream

pytestmark = pytest.mark.servers

SESSIONS, PER_SESSION = 2, 2  # four clients
KILLS = 14
EVERY = 3  # acknowledged turns between two kills
RETRY_LIMIT = 45.0  # seconds a question is retried before the run is failed


class Chaos:
    def __init__(self, service: ServiceProcess) -> None:
        self.service = service
        self.ledger = Ledger(service.url)
        self.done = threading.Event()
        self.counts: Counter[str] = Counter()
        self.guard = threading.Lock()
        self.refused: list[str] = []

    def count(self, what: str) -> None:
        with self.guard:
            self.counts[what] += 1

    def ask(self, sid: str, text: str) -> None:
        """``text`` until it is answered, or refused as superseded (then given up)."""
        deadline = time.monotonic() + RETRY_LIMIT
        while True:
            self.count("requests")
            try:
                response = self.ledger.turn(sid, text)  # asserts a 200 is this turn's answer
            except httpx.TransportError:
                self.count("connection lost")
            else:
                if response.status_code == 200:
                    self.count("acknowledged")
                    return
                if response.status_code == 409 and "superseded" in response.text:
                    assert response.headers.get("x-should-retry") == "false"
                    with self.guard:
                        self.refused.append(text)
                    self.count("refused: the session moved on")
                    return
                assert response.status_code in (409, 502, 503, 504), response.text[:400]
                self.count(f"answered {response.status_code}, retried")
            assert time.monotonic() < deadline, f"{text!r} never answered nor refused"
            time.sleep(0.05)

    def client(self, session: int, client: int) -> None:
        turn = 0
        while not self.done.is_set():
            self.ask(f"chaos-{session}", f"s{session} c{client} q{turn}: 第{turn}号 — où? 📦")
            turn += 1

    def killer(self) -> None:
        try:
            for _ in range(KILLS):
                target = self.counts["acknowledged"] + EVERY
                while self.counts["acknowledged"] < target:
                    time.sleep(0.01)
                self.service.kill9()
                self.count("kills")
                self.service.start()
        finally:
            self.done.set()


def run_chaos(store: str, upstream: FaultyUpstream, tmp_path: Path) -> None:
    upstream.mode, upstream.gap = "slow", 0.03  # requests in flight at every kill
    service = ServiceProcess(store, upstream.base_url, tmp_path, lock_timeout=2)
    service.start()
    chaos = Chaos(service)
    try:
        with ThreadPoolExecutor(SESSIONS * PER_SESSION + 1) as pool:
            killer = pool.submit(chaos.killer)
            clients = [
                pool.submit(chaos.client, s, c) for s in range(SESSIONS) for c in range(PER_SESSION)
            ]
            killer.result()
            for client in clients:
                client.result()
        account = {sid: chaos.ledger.history(sid) for sid in chaos.ledger.acknowledged}
    finally:
        service.stop()
    wrong = duplicated = interleaved = lost = 0
    for sid, asked in chaos.ledger.acknowledged.items():
        history = account[sid]
        roles = [m["role"] for m in history]
        contents = [m["content"] for m in history]
        questions = [c for r, c in zip(roles, contents, strict=True) if r == "user"]
        duplicated += sum(n - 1 for n in Counter(contents).values() if n > 1)
        interleaved += sum(1 for a, b in pairwise(roles) if a == b == "assistant")
        wrong += sum(
            1 for i, (role, text) in enumerate(zip(roles, contents, strict=True))
            if role == "assistant" and (i == 0 or text != f"answer to: {contents[i - 1]}")
        )  # fmt: skip
        lost += sum(1 for q in asked if q not in questions or f"answer to: {q}" not in contents)
    acknowledged = sum(len(asked) for asked in chaos.ledger.acknowledged.values())
    print(
        f"\nchaos on {store.split(':')[0]}: {dict(chaos.counts)}; acknowledged turns"
        f" {acknowledged}, refused {len(chaos.refused)}; wrong replies {wrong}, duplicated"
        f" {duplicated}, interleaved {interleaved}, acknowledged lost {lost}"
    )
    assert chaos.counts["kills"] == KILLS
    assert chaos.counts["connection lost"] > 0, "no kill met a request in flight"
    assert (wrong, duplicated, interleaved, lost) == (0, 0, 0, 0), account


def test_chaos_on_sqlite(tmp_path: Path, upstream: FaultyUpstream) -> None:
    run_chaos(f"sqlite:///{tmp_path / 'sessions.db'}", upstream, tmp_path)


def test_chaos_on_redis(
    private_redis: PrivateRedis, upstream: FaultyUpstream, tmp_path: Path
) -> None:
    run_chaos(private_redis.url, upstream, tmp_path)


def test_chaos_on_postgres(
    private_postgres: PrivatePostgres, upstream: FaultyUpstream, tmp_path: Path
) -> None:
    run_chaos(private_postgres.url, upstream, tmp_path)
