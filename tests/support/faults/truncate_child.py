"""A store client that appends and truncates in a loop, for tests/faults/test_kill9_truncate.py.

    python -m tests.support.faults.truncate_child URL SESSION BASE BATCH FIRST

Opens the store at URL, prints ``ready``, then for i = FIRST, FIRST + 1, …:
appends BATCH entries with ids ``b{i}-{j}`` under the idempotency key
``k{i}`` and prints ``appended i``; saves a checkpoint through them; then
truncates the session back to BASE entries and prints ``truncated i``. It is
meant to be killed (SIGKILL) at any point of that loop.
"""

from __future__ import annotations

import sys

from ctxwindow.messages import Entry
from ctxwindow.stores import open_store

MAX_ROUNDS = 10_000  # a child whose parent died stops on its own
FILLER = "上下文窗口 — contexte — コンテキスト 🧾 " * 20  # ~1 KB an entry: truncates take time


def batch(i: int, size: int) -> list[Entry]:
    return [
        Entry(
            message={"role": "user", "content": f"{i}/{j} {FILLER}"},
            tokens=j,
            seq=0,
            id=f"b{i}-{j}",
        )
        for j in range(size)
    ]


def main(url: str, session: str, base: int, size: int, first: int) -> None:
    with open_store(url) as store:
        store.health()
        print("ready", flush=True)
        for i in range(first, first + MAX_ROUNDS):
            stored = store.append(session, batch(i, size), idempotency_key=f"k{i}")
            print("appended", i, flush=True)
            store.save_checkpoint(session, stored[-1].seq, f"through batch {i}".encode())
            store.truncate(session, base)
            print("truncated", i, flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]))
