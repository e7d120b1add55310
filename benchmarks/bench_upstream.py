"""CPU per upstream call: the service's client (httpx on aiohttp) beside the others.

The service sends each completion straight to its transport
(``server/upstream.py``: the client's redirects, cookies and URL merging do
nothing there), httpx's interface on aiohttp's pool (``httpx-aiohttp``).
Beside it, in one process and one event loop, taking turns round by round on
the same requests: ``httpx.AsyncHTTPTransport`` (httpx's own, the service's
until 2026-12-06), ``httpx.AsyncClient.post`` (the client around it),
``httpcore.AsyncConnectionPool`` (what httpx's transport wraps) and
``aiohttp.ClientSession`` alone. Each call POSTs a chat body
of ~2 KB to the fake upstream of ``bench_server.py`` (another process,
uvicorn) and reads its JSON answer whole; CPU is this process's
(``time.process_time``), so the upstream's own work is not in it. Keep-alive
connections, one pool per client, sequential calls, with and without uvloop
when it is installed. Nothing here asserts a time.

Run: ``.venv/bin/python benchmarks/bench_upstream.py [--calls N]``.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import httpcore
import httpx
import orjson

from bench_server import free_port, upstream_process
from ctxwindow.server.upstream import Transport

ROUNDS = 10
BODY = {
    "model": "gpt-4o",
    "messages": [{"role": "user", "content": "where is order A-1042? " * 20}] * 4,
}

Call = Callable[[bytes], Awaitable[bytes]]


async def clients(url: str) -> tuple[dict[str, Call], Callable[[], Awaitable[None]]]:
    """Each client's call (the body's bytes to the answer's), and how to close them all."""
    headers = {"content-type": "application/json", "accept": "application/json"}
    service = Transport()
    transport = httpx.AsyncHTTPTransport()
    client = httpx.AsyncClient(transport=httpx.AsyncHTTPTransport())
    pool = httpcore.AsyncConnectionPool()
    session = aiohttp.ClientSession()
    endpoint = httpx.URL(f"{url}/v1/chat/completions")

    def through(chosen: httpx.AsyncBaseTransport) -> Call:
        async def call(body: bytes) -> bytes:
            request = httpx.Request("POST", endpoint, headers=headers, content=body)
            response = await chosen.handle_async_request(request)
            try:
                return await response.aread()
            finally:
                await response.aclose()

        return call

    async def via_client(body: bytes) -> bytes:
        return (await client.post(endpoint, headers=headers, content=body)).content

    async def via_httpcore(body: bytes) -> bytes:
        response = await pool.request(
            "POST", str(endpoint), headers=list(headers.items()), content=body
        )
        return response.content

    async def via_aiohttp(body: bytes) -> bytes:
        async with session.post(str(endpoint), data=body, headers=headers) as response:
            return await response.read()

    found: dict[str, Call] = {
        "httpx on aiohttp (the service's)": through(service),
        "httpx transport": through(transport),
        "httpx AsyncClient.post": via_client,
        "httpcore pool": via_httpcore,
        "aiohttp ClientSession": via_aiohttp,
    }
    closers: list[Callable[[], Awaitable[Any]]] = [
        service.aclose,
        transport.aclose,
        client.aclose,
        pool.aclose,
        session.close,
    ]

    async def close() -> None:
        for closer in closers:
            await closer()

    return found, close


async def measure(url: str, calls: int) -> dict[str, float]:
    """Median over ROUNDS of each client's CPU per call, ms; the clients take turns."""
    found, close = await clients(url)
    body = orjson.dumps(BODY)
    per_call: dict[str, list[float]] = {name: [] for name in found}
    try:
        for call in found.values():  # connections open, code warm
            for _ in range(20):
                orjson.loads(await call(body))
        for _ in range(ROUNDS):
            for name, call in found.items():
                start = time.process_time()
                for _ in range(calls // ROUNDS):
                    orjson.loads(await call(body))
                per_call[name].append((time.process_time() - start) * 1000 / (calls // ROUNDS))
    finally:
        await close()
    return {name: statistics.median(values) for name, values in per_call.items()}


def show(title: str, measured: dict[str, float]) -> None:
    print(f"\n{title}")
    base = next(iter(measured.values()))
    for name, ms in measured.items():
        print(f"   {name:<34} {ms:>7.3f} ms CPU/call  {ms / base:>5.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=2000, help="calls per client (default 2000)")
    args = parser.parse_args()
    with upstream_process(free_port()) as upstream:
        show("asyncio", asyncio.run(measure(upstream.url, args.calls)))
        try:
            uvloop = importlib.import_module("uvloop")
        except ImportError:
            print("\nuvloop not installed: not measured (pip install uvloop)")
        else:
            show("uvloop", uvloop.run(measure(upstream.url, args.calls)))


if __name__ == "__main__":
    main()
