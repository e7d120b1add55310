"""kill -9 while turns are queued for the archive: nothing acknowledged is lost, from the
store or from the archive.

A child process (tests/faults/archive_child.py) adds turns through a
``ContextManager`` with a SQLite store and a slow SQLite archive, and is
killed with SIGKILL once 300 turns are acknowledged, with turns queued for
the archive and a batch most likely half written. Then:

- every acknowledged turn is in the store, in order;
- the archive's watermark did not lie: every entry up to it is archived,
  and the kill left some above it unarchived;
- a new manager on the same files builds the session (a search, so it
  archives what the session has queued: everything above the watermark),
  and then every stored turn but the system prompt is in the archive.

Budget: ~5 s.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ctxwindow.archive import SQLiteArchive
from ctxwindow.context import ContextManager
from ctxwindow.stores.sqlite import SQLiteStore

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
KILL_AFTER = 300  # acknowledged turns


def run_child(store: Path, archive: Path) -> list[tuple[int, str]]:
    """The (seq, id) of every turn the child acknowledged before it was killed."""
    child = subprocess.Popen(
        [sys.executable, "-m", "tests.support.faults.archive_child", str(store), str(archive)],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
    )  # fmt: skip
    acknowledged: list[tuple[int, str]] = []
    deadline = time.monotonic() + 60
    try:
        assert child.stdout is not None
        while len(acknowledged) < KILL_AFTER:
            line = child.stdout.readline()
            assert line, f"the child exited: {child.stderr.read().decode() if child.stderr else ''}"
            assert time.monotonic() < deadline, "the child is too slow"
            seq, entry_id = line.split()
            acknowledged.append((int(seq), entry_id.decode()))
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child.pid, signal.SIGKILL)
        child.wait(timeout=10)
        for pipe in (child.stdout, child.stderr):
            if pipe is not None:
                pipe.close()
    return acknowledged


def test_kill9_with_turns_queued_for_the_archive(tmp_path: Path) -> None:
    store, archive_path = tmp_path / "sessions.db", tmp_path / "archive.db"
    acknowledged = run_child(store, archive_path)

    with SQLiteStore(store) as sessions:
        stored = sessions.load("s")
    ids = [(e.seq, e.id) for e in stored]
    assert ids[: len(acknowledged)] == acknowledged  # nothing acknowledged lost
    turns = [e for e in stored if e.message["role"] != "system"]

    with SQLiteArchive(str(archive_path)) as archive:
        watermark = archive.indexed_through("s")
        below = [e.seq for e in turns if e.seq <= watermark]
        assert [e.seq for e in archive.at("s", below)] == below  # the watermark did not lie
    assert watermark < turns[-1].seq, "the kill left nothing to archive: make the child slower"

    archive = SQLiteArchive(str(archive_path))
    with ContextManager(SQLiteStore(store), budget=300, archive=archive) as manager:
        manager.build("s")  # searches for the last question: what is queued is archived first
        archived = archive.at("s", [e.seq for e in turns])
        assert [(e.seq, e.id) for e in archived] == [(e.seq, e.id) for e in turns]
        assert archive.indexed_through("s") == turns[-1].seq
    archive.close()
