"""End to end: the service as real processes on loopback.

SIGKILL mid-conversation, restart on the same database: every acknowledged turn
(a request that got its 200) is there, and the conversation continues. Two
processes sharing one store (SQLite file, Redis, PostgreSQL) answer concurrent
requests of one session one after another.
"""

from __future__ import annotations

import os
import signal
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.chat_upstream import assert_turns_never_interleave
from tests.support.fake_openai import fake_openai
from tests.support.server_process import free_port, server
from tests.support.stores import require_server

pytestmark = [
    pytest.mark.skipif(sys.platform == "win32", reason="uses SIGKILL"),
    pytest.mark.servers,
]


def turn(port: int, text: str) -> dict[str, Any]:
    response = httpx.post(
        f"http://127.0.0.1:{port}/v1/chat/completions",
        headers={"X-Session-Id": "durable"},
        json={"model": "gpt-4o", "messages": [{"role": "user", "content": text}]},
        timeout=30,
    )
    response.raise_for_status()
    body: dict[str, Any] = response.json()
    return body


def test_acknowledged_turns_survive_sigkill(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'sessions.db'}"
    with fake_openai(lambda body: f"answer to: {body['messages'][-1]['content']}") as upstream:
        port = free_port()
        with server(port, store, upstream.base_url) as process:
            for i in range(5):
                turn(port, f"Parcel {i} goes to depot {i} — 第{i}号")
            os.kill(process.pid, signal.SIGKILL)
            process.wait(timeout=10)
        port = free_port()
        with server(port, store, upstream.base_url):
            turn(port, "Which depot for parcel 3?")
            url = f"http://127.0.0.1:{port}/v1/sessions/durable/messages"
            stored = httpx.get(url, timeout=10).json()["data"]
    texts = [e["message"]["content"] for e in stored]
    expected = []
    for i in range(5):
        asked = f"Parcel {i} goes to depot {i} — 第{i}号"
        expected += [asked, f"answer to: {asked}"]
    expected += ["Which depot for parcel 3?", "answer to: Which depot for parcel 3?"]
    assert texts == expected
    assert [m["content"] for m in upstream.requests[-1]["messages"]] == expected[:-1]


def ask(port: int, session: str, text: str) -> int:
    response = httpx.post(
        f"http://127.0.0.1:{port}/v1/chat/completions",
        headers={"X-Session-Id": session},
        json={"model": "gpt-4o", "messages": [{"role": "user", "content": text}]},
        timeout=60,
    )
    return response.status_code


def slow_echo(body: dict[str, Any]) -> str:
    time.sleep(0.02)  # a window in which an unserialized second request would interleave
    return f"answer to: {body['messages'][-1]['content']}"


@pytest.mark.parametrize("kind", ["sqlite", "redis", "postgresql"])
def test_processes_sharing_a_store_serve_one_session_in_turn(tmp_path: Path, kind: str) -> None:
    store = f"sqlite:///{tmp_path / 'sessions.db'}" if kind == "sqlite" else require_server(kind)
    session = f"shared-{uuid.uuid4().hex[:12]}"
    with fake_openai(slow_echo) as upstream:
        ports = [free_port(), free_port()]
        with (
            server(ports[0], store, upstream.base_url, tmp_path),
            server(ports[1], store, upstream.base_url, tmp_path),
        ):
            with ThreadPoolExecutor(8) as pool:
                asks = [(ports[n % 2], session, f"问题 {n} 🙂") for n in range(16)]
                statuses = list(pool.map(lambda a: ask(*a), asks))
            url = f"http://127.0.0.1:{ports[1]}/v1/sessions/{session}"
            history = httpx.get(f"{url}/messages", timeout=10).json()["data"]
            httpx.delete(url, timeout=10)
    assert statuses == [200] * 16
    assert len(history) == 32
    assert_turns_never_interleave(history, upstream.requests)


def test_workers_of_one_service_serve_one_session_in_turn(tmp_path: Path) -> None:
    """``--workers 2``: two processes behind one port, one SQLite store."""
    store = f"sqlite:///{tmp_path / 'sessions.db'}"
    with fake_openai(slow_echo) as upstream:
        port = free_port()
        with server(port, store, upstream.base_url, tmp_path, "--workers", "2"):
            with ThreadPoolExecutor(8) as pool:
                asks = [(port, "workers", f"质问 {n} ✈️") for n in range(16)]
                statuses = list(pool.map(lambda a: ask(*a), asks))
            url = f"http://127.0.0.1:{port}/v1/sessions/workers/messages"
            history = httpx.get(url, timeout=10).json()["data"]
    assert statuses == [200] * 16
    assert len(history) == 32
    assert_turns_never_interleave(history, upstream.requests)
