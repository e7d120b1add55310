"""A ``ContextManager`` in a process of its own, for tests/faults/test_kill9_archive.py.

    python -m tests.support.faults.archive_child STORE_PATH ARCHIVE_PATH

Adds turns to session ``s`` (a SQLite store and a SQLite archive, a budget
that evicts most turns, no prefetch) and prints ``SEQ ID`` as soon as each
add has returned. The archive is slow — each entry of a batch takes 2 ms
inside the batch's transaction — and stalls for good inside the batch that
reaches seq ``STALL_AFTER`` + 1, so when the process is killed (after 300
acknowledged turns) turns are queued for the archive and a batch is half
written, however loaded the machine (with the 2 ms alone, a loaded machine
let the archive catch up before the kill).
"""

from __future__ import annotations

import sys
import time
from typing import Any

from ctxwindow.archive import SQLiteArchive
from ctxwindow.archive.base import Document
from ctxwindow.context import ContextManager
from ctxwindow.stores.sqlite import SQLiteStore

MAX_TURNS = 5_000  # a child whose parent died stops on its own
STALL_AFTER = 100  # the archive never writes past this seq


class SlowArchive(SQLiteArchive):
    def _replace(
        self, session_id: str, user_id: str | None, documents: list[Document], counted: Any
    ) -> None:
        super()._replace(session_id, user_id, documents, counted)  # inside the batch's transaction
        stalled = any(doc.seq > STALL_AFTER for doc in documents)
        time.sleep(3600 if stalled else 0.002 * len(documents))


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
