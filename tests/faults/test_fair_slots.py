"""One tenant's long streams do not starve the others: request slots, per process and tenant.

A real service process with two tenants and ``max_upstream_calls`` 20 (so a
tenant's share is 10). Alice opens 110 long streams at once (each about 3 s);
while they run, Bob sends 10 requests. Alice gets at most 10 answered at a
time and the rest a 429 ``upstream_busy`` with ``Retry-After`` at once (not a
504 after the upstream timeout); every one of Bob's requests is answered, and
quickly. The finding: with httpx's default pool of 100 connections, 110
streams of one tenant left every other tenant waiting for a connection and
answered 504 "upstream timed out" from a healthy upstream.

Budget: ~10 s on 2 cores (one service start).
"""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.faults.service import running_service
from tests.support.faults.upstream import FaultyUpstream, echo

pytestmark = pytest.mark.servers

ALICE, BOB = "key-alice", "key-bob"
STREAMS = 110


def reply(body: dict[str, Any]) -> str:
    """Alice's answers are long (150 pieces, ~3 s at 20 ms a piece), Bob's short."""
    text = body["messages"][-1].get("content") or ""
    return "z" * 600 if text.startswith("alice") else echo(body)


def test_one_tenants_streams_leave_the_other_tenants_slots(
    tmp_path: Path, upstream: FaultyUpstream
) -> None:
    upstream.reply, upstream.mode, upstream.gap = reply, "slow", 0.02
    keys = json.dumps({ALICE: "alice", BOB: "bob"})
    with running_service(
        f"sqlite:///{tmp_path / 'sessions.db'}", upstream.base_url, tmp_path,
        api_keys=keys, max_upstream_calls=20,
    ) as service:  # fmt: skip

        def ask(key: str, text: str, stream: bool) -> tuple[int, dict[str, str], float]:
            body = {"model": "gpt-4o", "stream": stream,
                    "messages": [{"role": "user", "content": text}]}  # fmt: skip
            started = time.monotonic()
            with httpx.Client(base_url=service.url, timeout=60) as client, client.stream(
                "POST", "/v1/chat/completions", json=body,
                headers={"Authorization": f"Bearer {key}"},
            ) as response:  # fmt: skip
                response.read()
            return response.status_code, dict(response.headers), time.monotonic() - started

        with ThreadPoolExecutor(STREAMS) as pool:
            alice = [pool.submit(ask, ALICE, f"alice {i}", True) for i in range(STREAMS)]
            upstream.wait_for_requests(10)  # her share is under way
            bob = [ask(BOB, f"bob {i}: 東京? 🚚", False) for i in range(10)]
            answered = [future.result() for future in alice]
        metrics = httpx.get(f"{service.url}/metrics", headers={"Authorization": f"Bearer {BOB}"})
    assert [status for status, _, _ in bob] == [200] * 10, bob
    assert max(took for _, _, took in bob) < 5, "Bob waited behind Alice's streams"
    statuses = [status for status, _, _ in answered]
    assert set(statuses) <= {200, 429}, statuses
    assert statuses.count(429) >= STREAMS - 20, "Alice took more than her share at once"
    for status, headers, took in answered:
        if status == 429:
            assert headers["retry-after"] == "1" and took < 5
    assert 'ctxwindow_upstream_busy_total{scope="tenant"}' in metrics.text
    assert 'ctxwindow_upstream_calls_limit{scope="tenant"} 10.0' in metrics.text
