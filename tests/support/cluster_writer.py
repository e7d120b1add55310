"""A writer process for the cluster failover test: appends until told to stop, retrying.

    python tests/support/cluster_writer.py URL STOP SESSION [SESSION…]

Appends entries until the file ``STOP`` exists, the n-th to ``SESSION[n % len]``
with entry id and idempotency key ``<pid>-<n>``; an append the store could not
make (a primary killed, a failover under way) is retried with the same key until
it returns, for at most ``GIVE_UP`` seconds. Prints ``SESSION ID SEQ`` once each
append has returned (it is then acknowledged), and ``done`` at the end. Writing
until told, not a fixed count, keeps it writing through the whole failover on a
machine of any speed.
"""

from __future__ import annotations

import functools
import itertools
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from ctxwindow.errors import StoreError
from ctxwindow.messages import Entry
from ctxwindow.stores import open_store

GIVE_UP = 60.0  # seconds one append is retried for
T = TypeVar("T")


def retried(call: Callable[[], T]) -> T:
    """``call()``, again after each ``StoreError`` until it returns, for ``GIVE_UP`` s."""
    deadline = time.monotonic() + GIVE_UP
    while True:
        try:
            return call()
        except StoreError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def main() -> None:
    url, stop, sessions = sys.argv[1], Path(sys.argv[2]), sys.argv[3:]
    store = retried(lambda: open_store(url))  # a failover under way: no map of the slots yet
    print("ready", flush=True)
    for n in itertools.count():
        if stop.exists():
            break
        session_id, key = sessions[n % len(sessions)], f"{os.getpid()}-{n}"
        entry = Entry(id=key, message={"role": "user", "content": f"写 {key} ✍️"}, tokens=1, seq=0)
        stored = retried(functools.partial(store.append, session_id, [entry], idempotency_key=key))
        print(session_id, key, stored[0].seq, flush=True)
    store.close()
    print("done", flush=True)


if __name__ == "__main__":
    main()
