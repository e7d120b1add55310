"""Store faults on private servers: Redis, PostgreSQL and PgBouncer stopped, stalled, restarted.

The service runs as a real process (``python -m ctxwindow.server``) over a
Redis or PostgreSQL of the test's own (``tests/faults/servers.py``), never the
shared ones. Each scenario:

1. acknowledged turns on two sessions;
2. a third turn held in flight at the upstream (it holds its session);
3. the fault: ``stopped`` (a clean shutdown), ``stalled`` (SIGSTOP to the
   server and every process it started) or ``restarted`` (SIGKILL, then started again at
   once); the held turn is let go while the store is away;
4. while it is away (stopped, stalled): a new turn and a read are 503 with
   ``Retry-After`` and ``/readyz`` is 503, each within ``HANG`` (20 s: the
   stores' 5 s timeout twice, and a margin) — a longer wait is a hang;
5. the store returns: every session (the held one too) takes a new turn
   within ``RECOVERY`` (5 s) — no lease left behind answers 409 longer — and
   ``/readyz`` is 200;
6. nothing acknowledged is lost or doubled (``Ledger.assert_kept``).

Budget: ~15 s a scenario on 2 cores (a stall costs the stores' timeouts),
~135 s for the nine.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from ctxwindow.errors import StoreError
from ctxwindow.stores.redis import RedisStore
from tests.support.faults.ledger import RECOVERY, Ledger, assert_ready, assert_unavailable
from tests.support.faults.servers import PrivatePostgres, PrivateRedis, PrivateServer
from tests.support.faults.service import running_service
from tests.support.faults.upstream import FaultyUpstream
from tests.support.stores import no_server

pytestmark = pytest.mark.servers

FAULTS = ["stopped", "stalled", "restarted"]
SETTINGS = {"lock_timeout": 2, "upstream_timeout": 30}  # a busy session answers 409 after 2 s


def run_outage(
    server: PrivateServer, fault: str, upstream: FaultyUpstream, tmp_path: Path
) -> dict[str, float]:
    url = server.url  # type: ignore[attr-defined]
    with running_service(url, upstream.base_url, tmp_path, **SETTINGS) as service:
        ledger = Ledger(service.url)
        for n in range(2):
            for sid in ("parcel-a", "parcel-b"):
                assert ledger.turn(sid, f"{sid} #{n}: où est mon colis? 📦").status_code == 200
        assert_ready(ledger, True)
        with ThreadPoolExecutor(4) as pool:
            upstream.gate = threading.Event()
            held = pool.submit(ledger.turn, "parcel-a", "parcel-a held: 配達は？")
            upstream.wait_for_requests(5)  # the four turns above and the held one
            try:
                if fault == "restarted":
                    server.kill()
                    server.start()
                    upstream.gate.set()
                elif fault == "stalled":
                    server.stall()
                    upstream.gate.set()
                    probe_while_away(ledger, pool, held)
                    server.resume()
                else:
                    server.stop()
                    upstream.gate.set()
                    probe_while_away(ledger, pool, held)
                    server.start()
            finally:
                upstream.gate.set()
                server.resume()
            returned = time.monotonic()
            held_status = held.result().status_code
        assert held_status in (200, 503), held.result().text[:400]
        took = ledger.usable_within(["parcel-a", "parcel-b", "parcel-c"], returned, fault)
        assert_ready(ledger, True, within=RECOVERY)
        ledger.assert_kept()
    return took


def probe_while_away(
    ledger: Ledger, pool: ThreadPoolExecutor, held: Future[httpx.Response]
) -> None:
    """While the store is away: 503 with Retry-After for a turn and a read, /readyz 503."""
    turn = pool.submit(ledger.turn, "parcel-c", "parcel-c: a new question while away")
    read = pool.submit(ledger.get, "/v1/sessions/parcel-b/messages")
    ready = pool.submit(ledger.get, "/readyz")
    assert_unavailable(turn.result())
    assert_unavailable(read.result())
    assert ready.result().status_code == 503, ready.result().text
    held.result()  # the held turn has finished (stored or refused) before the store returns


@pytest.mark.parametrize("fault", FAULTS)
def test_redis_outage(
    private_redis: PrivateRedis, upstream: FaultyUpstream, tmp_path: Path, fault: str
) -> None:
    """Redis stopped, stalled or restarted under the service (budget ~15 s)."""
    run_outage(private_redis, fault, upstream, tmp_path)


@pytest.mark.parametrize("fault", FAULTS)
def test_postgres_outage(
    private_postgres: PrivatePostgres, upstream: FaultyUpstream, tmp_path: Path, fault: str
) -> None:
    """PostgreSQL stopped, stalled or restarted under the service (budget ~15 s)."""
    run_outage(private_postgres, fault, upstream, tmp_path)


@pytest.mark.parametrize("fault", FAULTS)
def test_pgbouncer_outage(
    private_postgres: PrivatePostgres, upstream: FaultyUpstream, tmp_path: Path, fault: str
) -> None:
    """PgBouncer (transaction mode, in front of a PostgreSQL of the test's own) stopped,
    stalled or restarted under the service, whose store URL says ``pooler=transaction``:
    503 with Retry-After while it is away, every session usable within 5 s after (no
    lease row left holding one), nothing acknowledged lost (budget ~15 s)."""
    from tests.support.pgbouncer import OwnPgBouncer, find_pgbouncer

    if find_pgbouncer() is None:
        no_server("pgbouncer is not installed (tools/install-browser installs it)")
    with OwnPgBouncer(private_postgres.url) as bouncer:
        assert "pooler=transaction" in bouncer.url
        run_outage(bouncer, fault, upstream, tmp_path)


def test_a_lease_asked_for_while_redis_stalls_does_not_outlive_the_stall(
    private_redis: PrivateRedis,
) -> None:
    """A lock taken while Redis is stopped times out; the stalled server still runs that
    SET when it resumes, so the store deletes the lease it gave up on (by its own token):
    the session can be locked again at once, not ``lock_ttl`` (30 s here) later."""
    store = RedisStore(private_redis.url, timeout=1.0, lock_ttl=30.0)
    try:
        with store.lock("colis-✅"):
            pass  # connected, and the lock works
        private_redis.stall()
        try:
            with pytest.raises(StoreError), store.lock("colis-✅", timeout=1.0):
                pytest.fail("the lock was taken while the server was stopped")
        finally:
            private_redis.resume()
        start = time.monotonic()
        while True:
            try:
                with store.lock("colis-✅", timeout=0.5):
                    break
            except StoreError:  # busy: the abandoned lease is there until it is released
                assert time.monotonic() - start < RECOVERY, "the abandoned lease still holds"
    finally:
        store.close()
