"""A chunked body of 200 MB (no Content-Length) is refused with 413 at low memory cost.

The service runs as a real process; the body is made lazily and sent over a
raw socket, 64 KiB a chunk, and the client stops sending as soon as an answer
arrives. The cost is the server's peak resident memory (``VmHWM``, reset
through ``/proc/PID/clear_refs`` just before) minus its resident memory then.

Budget: ~15 s for the two endpoints on 2 cores (less once the limit is
enforced while reading: the server then stops after ~1 MB).
"""

from __future__ import annotations

import select
import socket
import sys
from pathlib import Path

import pytest

from tests.support.faults.service import running_service
from tests.support.faults.upstream import FaultyUpstream

pytestmark = [
    pytest.mark.skipif(
        not sys.platform.startswith("linux"), reason="reads the server's memory from /proc"
    ),
    pytest.mark.servers,
]

ATTACK = 200 * 2**20  # bytes the client offers
CHUNK = 64 * 2**10
MEMORY_LIMIT = 20 * 2**20  # what refusing the attack may cost the server


def memory(pid: int, field: str) -> int:
    """``VmRSS`` or ``VmHWM`` of ``pid``, in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) * 1024
    raise LookupError(field)


def send_chunked(port: int, path: str, total: int) -> tuple[int | None, int]:
    """POST ``total`` bytes of a JSON body in chunks; (status or None, bytes sent)."""
    head = (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        "X-Session-Id: big\r\nTransfer-Encoding: chunked\r\n\r\n"
    ).encode()
    start = b'{"model": "gpt-4o", "messages": [{"role": "user", "content": "'
    piece = b"%x\r\n" % CHUNK + b"a" * CHUNK + b"\r\n"
    sent = 0
    with socket.create_connection(("127.0.0.1", port), timeout=60) as sock:
        try:
            sock.sendall(head + b"%x\r\n" % len(start) + start + b"\r\n")
            while sent < total:
                if select.select([sock], [], [], 0)[0]:  # an answer already: stop sending
                    break
                sock.sendall(piece)
                sent += CHUNK
            else:
                end = b'"}]}'
                sock.sendall(b"%x\r\n%s\r\n0\r\n\r\n" % (len(end), end))
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server hung up: its answer (if any) is already in our buffer
        try:
            answer = sock.recv(4096)
        except ConnectionResetError:
            return None, sent
    status = answer.split(b" ", 2)[1] if answer.startswith(b"HTTP/") else None
    return (int(status) if status is not None else None), sent


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/sessions/big/messages"])
def test_a_chunked_body_over_the_limit_costs_little_memory(
    tmp_path: Path, upstream: FaultyUpstream, path: str
) -> None:
    """413, and the server's peak memory grows by less than 20 MB while refusing."""
    store = f"sqlite:///{tmp_path / 'sessions.db'}"
    with running_service(store, upstream.base_url, tmp_path) as service:
        assert service.process is not None
        pid = service.process.pid
        for _ in range(3):  # warm: imports, the tokenizer and the store opened
            warm = send_chunked(service.port, path, CHUNK)
            assert warm[0] == 200, warm
        Path(f"/proc/{pid}/clear_refs").write_text("5")  # reset the peak to the current size
        before = memory(pid, "VmRSS")
        status, sent = send_chunked(service.port, path, ATTACK)
        cost = memory(pid, "VmHWM") - before
    assert status == 413, f"answer {status} after {sent >> 20} MB sent"
    assert cost < MEMORY_LIMIT, f"refusing cost {cost >> 20} MB (sent {sent >> 20} MB)"
