"""Load through ``ctxwindow serve`` on loopback, against a fake upstream, side by side.

Starts two real processes on 127.0.0.1: a fake OpenAI-compatible upstream
(answers at once) and ``python -m ctxwindow.server`` (SQLite store in a
temporary folder) forwarding to it. Then SESSIONS concurrent conversations of
TURNS turns each go (a) straight to the fake upstream and (b) through the
service (one process, then ``--workers 2``), and the script prints
throughput and latency p50/p99 for each, and the service's added latency.
Bounded: SESSIONS x TURNS requests per side.
Nothing here asserts a time.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

SESSIONS = 20
TURNS = 10

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


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_until_up(url: str, seconds: float = 30.0) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            httpx.get(url, timeout=1.0)
            return
        except httpx.HTTPError:
            time.sleep(0.1)
    raise RuntimeError(f"{url} did not come up")


async def conversation(
    client: httpx.AsyncClient, url: str, session: str, latencies: list[float]
) -> None:
    for turn in range(TURNS):
        body = {
            "model": "gpt-4o",
            "messages": [{"role": "user", "content": f"turn {turn}: where is order A-{turn:04d}?"}],
        }
        start = time.perf_counter()
        response = await client.post(url, json=body, headers={"X-Session-Id": session})
        latencies.append((time.perf_counter() - start) * 1000)
        response.raise_for_status()


async def load(url: str, label: str) -> tuple[float, list[float]]:
    latencies: list[float] = []
    async with httpx.AsyncClient(timeout=30.0) as client:
        start = time.perf_counter()
        await asyncio.gather(
            *(conversation(client, url, f"{label}-{i}", latencies) for i in range(SESSIONS))
        )
        elapsed = time.perf_counter() - start
    return len(latencies) / elapsed, latencies


def report(label: str, rate: float, latencies: list[float]) -> tuple[float, float]:
    p50 = statistics.median(latencies)
    p99 = statistics.quantiles(latencies, n=100)[-1]
    print(f"{label:<38} {rate:>9.1f} req/s {p50:>9.2f} ms {p99:>9.2f} ms")
    return p50, p99


def start_service(
    port: int, upstream_port: int, folder: str, workers: int
) -> subprocess.Popen[bytes]:
    """``python -m ctxwindow.server`` in its own process group (its workers with it)."""
    return subprocess.Popen(
        [
            sys.executable, "-m", "ctxwindow.server", "--port", str(port),
            "--upstream", f"http://127.0.0.1:{upstream_port}/v1",
            "--store", f"sqlite:///{Path(folder) / 'sessions.db'}", "--workers", str(workers),
        ],
        env={**os.environ, "CTXWINDOW_DATA_DIR": folder}, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip


def stop(process: subprocess.Popen[bytes]) -> None:
    os.killpg(process.pid, signal.SIGTERM)
    process.wait(timeout=15)


def main() -> None:
    upstream_port = free_port()
    ports = {1: free_port(), 2: free_port()}
    with tempfile.TemporaryDirectory() as one, tempfile.TemporaryDirectory() as two:
        upstream = subprocess.Popen(
            [sys.executable, "-c", FAKE_UPSTREAM, str(upstream_port)], stderr=subprocess.DEVNULL,
            start_new_session=True,
        )  # fmt: skip
        services = {
            n: start_service(ports[n], upstream_port, f, n) for n, f in ((1, one), (2, two))
        }
        try:
            wait_until_up(f"http://127.0.0.1:{upstream_port}/")
            for port in ports.values():
                wait_until_up(f"http://127.0.0.1:{port}/healthz")
            print(f"{SESSIONS} concurrent sessions x {TURNS} turns, loopback, SQLite store")
            print(f"{'':<38} {'throughput':>15} {'p50':>12} {'p99':>12}")
            direct = asyncio.run(load(f"http://127.0.0.1:{upstream_port}/v1/chat/completions", "d"))
            base = report("fake upstream directly", *direct)
            for workers, port in ports.items():
                served = asyncio.run(load(f"http://127.0.0.1:{port}/v1/chat/completions", "s"))
                label = "through ctxwindow serve" + (
                    f" (--workers {workers})" if workers > 1 else ""
                )
                through = report(label, *served)
                print(
                    f"  added by the service: p50 {through[0] - base[0]:.2f} ms, "
                    f"p99 {through[1] - base[1]:.2f} ms"
                )
        finally:
            for process in (*services.values(), upstream):
                stop(process)


if __name__ == "__main__":
    main()
