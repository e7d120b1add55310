"""kill -9 in the middle of truncating: the session is wholly before or wholly after.

A child process (tests/faults/truncate_child.py) appends a batch of 200
entries (~1 KB each) under an idempotency key, checkpoints it, truncates the
session back to its first 50 entries, and again, in a loop. It is killed
with SIGKILL a random few milliseconds after a batch is acknowledged: around
the checkpoint and the truncate (which deletes 200 entries, their ids, the
key and the checkpoint). Then the session must be either the 50 entries
(truncated) or the 50 and one whole batch (not yet): contiguous seqs, the
batch's key replaying exactly the batch or nothing, no checkpoint past the
end, no id of a removed entry left behind (the same ids append again).

Runs on SQLite, and on a private Redis (append-only file, fsync always) and
PostgreSQL; three kills each. Budget: ~5 s a store on 2 cores.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from ctxwindow.messages import Entry
from ctxwindow.stores import open_store
from tests.support.faults.servers import PrivatePostgres, PrivateRedis
from tests.support.faults.truncate_child import batch

pytestmark = pytest.mark.servers

ROOT = Path(__file__).resolve().parents[2]
BASE, SIZE = 50, 200
ROUNDS = 3  # kills a store
MIN_CYCLES = 2  # whole append-and-truncate cycles before a kill


def run_child(url: str, session: str, first: int) -> int:
    """Run the child until it has done a few cycles, kill it after an append; the index
    of the last batch it started."""
    child = subprocess.Popen(
        [sys.executable, "-m", "tests.support.faults.truncate_child", url, session, str(BASE),
         str(SIZE), str(first)],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
        text=True,
    )  # fmt: skip
    deadline, cycles, last = time.monotonic() + 60, 0, first
    try:
        assert child.stdout is not None
        assert child.stdout.readline() == "ready\n", child.stderr.read() if child.stderr else ""
        while True:
            line = child.stdout.readline()
            assert line, f"the child exited: {child.stderr.read() if child.stderr else ''}"
            assert time.monotonic() < deadline, "the child is too slow"
            what, index = line.split()
            last = int(index)
            cycles += what == "truncated"
            if what == "appended" and cycles >= MIN_CYCLES:
                time.sleep(random.uniform(0, 0.02))  # somewhere in the checkpoint or the truncate
                break
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child.pid, signal.SIGKILL)
        child.wait(timeout=10)
        for pipe in (child.stdout, child.stderr):
            if pipe is not None:
                pipe.close()
    return last + 1  # the kill may have come after the next append started


def check_whole(store: Any, session: str, base: list[Entry], first: int, last: int) -> str:
    """The session is the base entries, plus at most one whole batch; returns which."""
    loaded = store.load(session)
    assert [e.seq for e in loaded] == list(range(1, len(loaded) + 1))
    assert loaded[:BASE] == base
    extra = loaded[BASE:]
    assert len(extra) in (0, SIZE), f"a truncate left {len(extra)} of {SIZE} entries"
    kept = int(extra[0].id[1:].split("-")[0]) if extra else None
    if kept is not None:
        assert [e.id for e in extra] == [e.id for e in batch(kept, SIZE)]
    for i in range(first, last + 1):
        replay = store.replayed(session, f"k{i}")
        assert replay == (extra if i == kept else None), f"the key of batch {i} is wrong"
    checkpoint = store.checkpoint(session)
    assert checkpoint is None or checkpoint[0] <= len(loaded)
    return "before" if extra else "after"


def run_kills(url: str) -> None:
    session = f"kill9-truncate-{os.getpid()}"
    with open_store(url) as store:
        base = store.append(session, [Entry({"role": "user", "content": f"base {n} 基"}, n, 0)
                                      for n in range(BASE)])  # fmt: skip
        for round_ in range(ROUNDS):
            first = round_ * 1000
            last = run_child(url, session, first)
            check_whole(store, session, base, first, last)
            store.truncate(session, BASE)
            again = store.append(session, batch(last - 1, SIZE), idempotency_key=f"k{last - 1}")
            assert [e.seq for e in again] == list(range(BASE + 1, BASE + SIZE + 1))
            store.truncate(session, BASE)
        store.delete(session)


def test_kill9_while_truncating_on_sqlite(tmp_path: Path) -> None:
    run_kills(f"sqlite:///{tmp_path / 'sessions.db'}")


def test_kill9_while_truncating_on_redis(private_redis: PrivateRedis) -> None:
    run_kills(private_redis.url)


def test_kill9_while_truncating_on_postgres(private_postgres: PrivatePostgres) -> None:
    run_kills(private_postgres.url)
