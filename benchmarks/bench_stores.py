"""Stores side by side: append throughput, and ContextManager.build on stored sessions.

For each store (memory, SQLite, Redis, PostgreSQL, tiered PostgreSQL+Redis)
and N = 100, 1,000, 10,000 stored messages:

- append throughput in batches of 100 (target for SQLite: >= 5,000 messages/s);
- the first ``build`` of a ``ContextManager`` that has never seen the session
  (it loads the session once, with the stored token counts);
- the hot path: ``add`` one message then ``build``, median of 30 turns, which
  must stay flat as N grows (the window lives in memory; nothing is reloaded
  or re-counted). Each call takes the session lock and checks the store for
  what others added; "in one turn" is the same two calls inside
  ``ContextManager.turn`` (as the service makes them): one lock, one check.
  The two are measured alternately, side by side.

Redis and PostgreSQL come from CTXWINDOW_TEST_REDIS_URL /
CTXWINDOW_TEST_POSTGRES_URL (defaults 127.0.0.1); a store that cannot be
opened is reported and skipped. Nothing here asserts a time.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from ctxwindow.context import ContextManager
from ctxwindow.errors import StoreError
from ctxwindow.messages import Entry
from ctxwindow.stores.base import Store
from ctxwindow.stores.memory import MemoryStore
from ctxwindow.stores.sqlite import SQLiteStore
from ctxwindow.tokens import chat_tokenizer

REDIS = os.environ.get("CTXWINDOW_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")
POSTGRES = os.environ.get("CTXWINDOW_TEST_POSTGRES_URL", "postgresql://127.0.0.1:5432/test")
SIZES = (100, 1_000, 10_000)
BUDGET = 8192
HOT_TURNS = 30


def redis() -> Store:
    from ctxwindow.stores.redis import RedisStore

    return RedisStore(REDIS, prefix=f"bench-{uuid.uuid4().hex[:8]}")


def postgres() -> Store:
    from ctxwindow.stores.postgres import PostgresStore

    return PostgresStore(POSTGRES)


def tiered() -> Store:
    from ctxwindow.stores.tiered import TieredStore

    return TieredStore(postgres(), warm=redis())


def stores(folder: Path) -> dict[str, Callable[[], Store]]:
    return {
        "memory": MemoryStore,
        "sqlite": lambda: SQLiteStore(folder / "bench.db"),
        "redis": redis,
        "postgresql": postgres,
        "tiered (pg+redis)": tiered,
    }


def messages(n: int) -> list[Entry]:
    tokenizer = chat_tokenizer("gpt-4o")
    out = []
    for i in range(n):
        role = "user" if i % 2 == 0 else "assistant"
        text = f"message {i}: the parcel for order A-{i:05d} ships from 上海 in {i % 7 + 1} days."
        message = {"role": role, "content": text}
        out.append(Entry(message, tokenizer.message_tokens(message), 0))
    return out


def run(name: str, make: Callable[[], Store]) -> None:
    for n in SIZES:
        try:
            store = make()
        except (StoreError, ImportError, OSError) as exc:
            print(f"{name:<18} skipped: {exc}")
            return
        session = f"bench-{uuid.uuid4().hex}"
        entries = messages(n)
        start = time.perf_counter()
        for i in range(0, n, 100):
            store.append(session, entries[i : i + 100])
        rate = n / (time.perf_counter() - start)
        manager = ContextManager(store, budget=BUDGET, reserve_output=0)
        start = time.perf_counter()
        manager.build(session)
        cold = (time.perf_counter() - start) * 1000
        hot: list[float] = []
        held: list[float] = []
        for turn in range(HOT_TURNS):
            message = {"role": "user", "content": f"new question {turn} about order A-{turn:05d}"}
            start = time.perf_counter()
            manager.add(session, message)
            manager.build(session)
            hot.append((time.perf_counter() - start) * 1000)
            start = time.perf_counter()
            with manager.turn(session):
                manager.add(session, {**message, "content": f"{message['content']} (again)"})
                manager.build(session)
            held.append((time.perf_counter() - start) * 1000)
        print(
            f"{name:<18} {n:>7,} {rate:>12,.0f}/s {cold:>11.1f} ms "
            f"{statistics.median(hot):>10.2f} ms {statistics.median(held):>11.2f} ms"
        )
        store.delete(session)
        store.close()


def main() -> None:
    print(f"ContextManager over each store, budget {BUDGET:,} tokens (gpt-4o)")
    print(
        f"{'store':<18} {'N':>7} {'append (x100)':>14} {'first build':>14}"
        f" {'hot add+build':>13} {'in one turn':>14}"
    )
    with tempfile.TemporaryDirectory() as folder:
        for name, make in stores(Path(folder)).items():
            run(name, make)
    print("targets: hot add+build flat in N for every store; SQLite append >= 5,000 messages/s")


if __name__ == "__main__":
    main()
