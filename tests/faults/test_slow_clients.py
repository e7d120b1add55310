"""Slow clients hold no connection past the configured deadlines (``ctxwindow serve``).

200 connections to a real service process: 50 send nothing, 100 send their
headers a byte every 0.2 s and never finish them, 50 send whole headers and
then their body a byte every 0.2 s. With ``header_timeout`` 1 s and
``body_timeout`` 1.5 s, every one must be answered a 408 in the API's error
shape and closed by the server within its deadline and a margin for a loaded
machine, while a normal request is answered meanwhile; the metrics count
them. Before the deadlines existed all 200 stayed open for as long as the
clients kept them (the finding: 40 s, bounded by the file-descriptor limit).

Budget: ~8 s on 2 cores (one service start).
"""

from __future__ import annotations

import contextlib
import json
import selectors
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.faults.service import ServiceProcess, running_service
from tests.support.faults.upstream import FaultyUpstream

pytestmark = pytest.mark.servers

HEAD, BODY = 1.0, 1.5  # the service's deadlines, seconds
MARGIN = 2.5  # seconds of slack for a loaded machine
DRIP = 0.2  # seconds between the bytes a slow client sends
HEADERS = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"


class Slow:
    def __init__(self, kind: str, port: int) -> None:
        self.kind = kind
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.opened = time.monotonic()
        self.closed: float | None = None
        self.answer = b""
        self.head_sent = 0.0
        if kind == "body":
            self.sock.sendall(HEADERS + b"Content-Length: 5000\r\n\r\n{")
            self.head_sent = time.monotonic()
        self.sock.setblocking(False)

    def drip(self) -> None:
        if self.closed is None and self.kind != "silent":
            with contextlib.suppress(OSError):  # the server may have closed it already
                self.sock.send(b"x" if self.kind == "head" else b" ")

    def read(self) -> None:
        try:
            data = self.sock.recv(65536)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        self.answer += data
        if not data:
            self.closed = time.monotonic()

    @property
    def deadline(self) -> float:
        return self.head_sent + BODY if self.kind == "body" else self.opened + HEAD


@pytest.fixture
def service(tmp_path: Path, upstream: FaultyUpstream) -> Iterator[ServiceProcess]:
    """The service as a real process, with the deadlines ``HEAD`` and ``BODY``."""
    with running_service(
        f"sqlite:///{tmp_path / 'sessions.db'}", upstream.base_url, tmp_path,
        header_timeout=HEAD, body_timeout=BODY,
    ) as started:  # fmt: skip
        yield started


def test_slow_clients_are_answered_408_and_dropped_in_time(service: ServiceProcess) -> None:
    clients = [
        Slow(kind, service.port)
        for kind, n in (("silent", 50), ("head", 100), ("body", 50))
        for _ in range(n)
    ]
    selector = selectors.DefaultSelector()
    for client in clients:
        selector.register(client.sock, selectors.EVENT_READ, client)
    meanwhile = httpx.get(f"{service.url}/healthz", timeout=10)
    started, dripped = time.monotonic(), 0.0
    while any(c.closed is None for c in clients) and time.monotonic() - started < 15:
        if time.monotonic() - dripped >= DRIP:
            for client in clients:
                client.drip()
            dripped = time.monotonic()
        for key, _ in selector.select(timeout=0.05):
            client = key.data
            client.read()
            if client.closed is not None:
                selector.unregister(client.sock)
    metrics = httpx.get(f"{service.url}/metrics", timeout=10).text
    for client in clients:
        client.sock.close()
    assert meanwhile.status_code == 200
    held = [c for c in clients if c.closed is None]
    assert not held, f"{len(held)} slow connections still open after 15 s"
    late = [round(c.closed - c.deadline, 2) for c in clients if c.closed > c.deadline + MARGIN]  # type: ignore[operator]
    assert not late, f"closed past their deadline by {late} s"
    early = [c.kind for c in clients if c.closed < c.deadline - 0.2]  # type: ignore[operator]
    assert not early, f"closed before their deadline: {early}"
    for client in clients:
        head, _, body = client.answer.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 408"), client.answer[:200]
        assert json.loads(body)["error"]["code"] == "request_timeout"
    assert 'ctxwindow_request_timeouts_total{phase="head"} 150.0' in metrics
    assert 'ctxwindow_request_timeouts_total{phase="body"} 50.0' in metrics


def test_a_slow_second_request_on_a_kept_alive_connection_gets_its_408(
    service: ServiceProcess,
) -> None:
    sock = socket.create_connection(("127.0.0.1", service.port), timeout=10)
    sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    first = b""
    while not first.endswith(b'{"status":"ok"}'):  # the whole first answer, head and body
        first += sock.recv(65536)
    assert first.startswith(b"HTTP/1.1 200"), first[:100]
    sock.sendall(HEADERS)  # the next request's head, never finished
    started, answer = time.monotonic(), b""
    while chunk := sock.recv(65536):
        answer += chunk
    took = time.monotonic() - started
    sock.close()
    assert answer.startswith(b"HTTP/1.1 408"), answer[:200]
    assert HEAD - 0.2 <= took <= HEAD + MARGIN
