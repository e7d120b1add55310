"""A session-lock holder in its own process, for the multi-process lock tests.

    python tests/support/lock_worker.py URL SESSION COUNTER [--count N] [--hold]
                                [--tiered] [--async] [--lock-ttl SECONDS]

Opens the store at URL (``--tiered``: a ``TieredStore`` over it; ``--lock-ttl``:
a Redis store with that lease), prints ``ready`` and waits for a line on stdin.
Then, N times: under ``store.lock(SESSION)``, reads the number in the file
COUNTER, sleeps a little and writes it back plus one; prints ``done``. With
``--hold`` it instead takes the lock, prints ``held`` and keeps it until it is
killed (or stdin closes).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import sys
import time
from pathlib import Path
from typing import Any

from ctxwindow.stores import open_async_store, open_store

PAUSE = 0.005  # between reading and writing the counter: a lost update would show


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("session")
    parser.add_argument("counter", type=Path)
    parser.add_argument("--count", type=int, default=10)
    parser.add_argument("--hold", action="store_true")
    parser.add_argument("--tiered", action="store_true")
    parser.add_argument("--async", dest="asynchronous", action="store_true")
    parser.add_argument("--lock-ttl", type=float)
    return parser.parse_args()


def open_durable(args: argparse.Namespace) -> Any:
    if args.lock_ttl is not None:  # Redis only: a short lease
        redis = importlib.import_module("ctxwindow.stores.redis")
        cls = redis.AsyncRedisStore if args.asynchronous else redis.RedisStore
        return cls(args.url, lock_ttl=args.lock_ttl)
    return (open_async_store if args.asynchronous else open_store)(args.url)


def wrap(args: argparse.Namespace, durable: Any) -> Any:
    if not args.tiered:
        return durable
    tiered = importlib.import_module("ctxwindow.stores.tiered")
    cls = tiered.AsyncTieredStore if args.asynchronous else tiered.TieredStore
    return cls(durable, hot_size=8)


def say(word: str) -> None:
    print(word, flush=True)


def run_sync(args: argparse.Namespace) -> None:
    with wrap(args, open_durable(args)) as store:
        say("ready")
        sys.stdin.readline()
        if args.hold:
            with store.lock(args.session):
                say("held")
                sys.stdin.readline()
            return
        for _ in range(args.count):
            with store.lock(args.session):
                value = int(args.counter.read_text())
                time.sleep(PAUSE)
                args.counter.write_text(str(value + 1))
        say("done")


async def run_async(args: argparse.Namespace) -> None:
    async with wrap(args, open_durable(args)) as store:
        await store.health()  # connect before saying ready
        say("ready")
        await asyncio.to_thread(sys.stdin.readline)
        if args.hold:
            async with store.lock(args.session):
                say("held")
                await asyncio.to_thread(sys.stdin.readline)
            return
        for _ in range(args.count):
            async with store.lock(args.session):
                value = int(args.counter.read_text())
                await asyncio.sleep(PAUSE)
                args.counter.write_text(str(value + 1))
        say("done")


def main() -> None:
    args = parse_args()
    if args.asynchronous:
        asyncio.run(run_async(args))
    else:
        run_sync(args)


if __name__ == "__main__":
    main()
