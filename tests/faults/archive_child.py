"""A ``ContextManager`` in a process of its own, for tests/faults/test_kill9_archive.py.

    python -m tests.faults.archive_child STORE_PATH ARCHIVE_PATH

Adds turns to session ``s`` (a SQLite store and a SQLite archive, a budget
that evicts most turns, no prefetch) and prints ``SEQ ID`` as soon as each
add has returned. The archive is slow — each entry of a batch takes 2 ms
inside the batch's transaction — so when the process is killed turns are
queued for the archive, and most likely a batch is half written.
"""

from __future__ import annotations

import sys
import time

from ctxwindow.archive import SQLiteArchive
from ctxwindow.archive.base import Document
from ctxwindow.context import ContextManager
from ctxwindow.stores.sqlite import SQLiteStore

MAX_TURNS = 5_000  # a child whose parent died stops on its own


class SlowArchive(SQLiteArchive):
    def _upsert(self, session_id: str, user_id: str | None, doc: Document) -> int:
        time.sleep(0.002)  # inside the transaction of the batch
        return super()._upsert(session_id, user_id, doc)


def turn(i: int) -> dict[str, str]:
    if i % 2 == 0:
        return {"role": "user", "content": f"turn {i}: where is parcel P-{i:05d}? 包裹在哪里 📦"}
    return {"role": "assistant", "content": f"turn {i}: parcel P-{i - 1:05d} left Lyon. 発送済み"}


def main(store: str, archive: str) -> None:
    manager = ContextManager(
        SQLiteStore(store), budget=300, archive=SlowArchive(archive), prefetch=False
    )
    for i in range(MAX_TURNS):
        message = {"role": "system", "content": "Be brief."} if i == 0 else turn(i)
        entry = manager.add("s", message)
        print(entry.seq, entry.id, flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
