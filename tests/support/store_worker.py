"""A store client in its own process, for the multi-process store contract tests.

    python tests/support/store_worker.py URL SESSION [--count N] [--wait] [--tiered] [--async]

Opens the store at URL (``--tiered``: a ``TieredStore`` over it), prints
``ready``, waits for a line on stdin if ``--wait``, then appends one entry at
a time and prints ``SEQ ID`` as soon as each append has returned. With
``--count 0`` it appends until it is killed.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import os
import sys
from typing import Any

from ctxwindow.messages import Entry
from ctxwindow.stores import open_async_store, open_store

MAX_APPENDS = 100_000  # a worker whose parent died stops on its own


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("session")
    parser.add_argument("--count", type=int, default=50)
    parser.add_argument("--wait", action="store_true")
    parser.add_argument("--tiered", action="store_true")
    parser.add_argument("--async", dest="asynchronous", action="store_true")
    return parser.parse_args()


def new_entry(n: int) -> Entry:
    text = f"process {os.getpid()} entry {n} 进程 🎉"
    return Entry(message={"role": "user", "content": text}, tokens=n, seq=0)


def appends(count: int) -> range:
    return range(count if count > 0 else MAX_APPENDS)


def report(stored: list[Entry]) -> None:
    print(stored[0].seq, stored[0].id, flush=True)


def start(args: argparse.Namespace) -> None:
    print("ready", flush=True)
    if args.wait:
        sys.stdin.readline()


def run_sync(args: argparse.Namespace) -> None:
    durable = open_store(args.url)
    store: Any = durable
    if args.tiered:
        store = importlib.import_module("ctxwindow.stores.tiered").TieredStore(durable, hot_size=8)
    start(args)
    for n in appends(args.count):
        report(store.append(args.session, [new_entry(n)]))
    store.close()
    durable.close()


async def run_async(args: argparse.Namespace) -> None:
    durable = open_async_store(args.url)
    store: Any = durable
    if args.tiered:
        tiered = importlib.import_module("ctxwindow.stores.tiered")
        store = tiered.AsyncTieredStore(durable, hot_size=8)
    await store.health()  # connect before saying ready
    start(args)
    for n in appends(args.count):
        report(await store.append(args.session, [new_entry(n)]))
    await store.close()
    await durable.close()


def main() -> None:
    args = parse_args()
    if args.asynchronous:
        asyncio.run(run_async(args))
    else:
        run_sync(args)


if __name__ == "__main__":
    main()
