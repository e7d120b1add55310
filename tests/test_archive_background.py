"""The managers archive turns in the background, and searches still see every turn.

Every turn a window sees is queued for the archive; a worker (a thread for
``ContextManager``, a task for ``AsyncContextManager``) indexes the queue in
batches between requests. A search first indexes what its session still has
queued; ``close`` indexes the rest; a session loaded cold queues only what is
above the archive's watermark. See ``context/archiving.py``.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import pytest

from ctxwindow import Entry, StoreError
from ctxwindow.archive import SQLiteArchive
from ctxwindow.context import AsyncContextManager, ContextManager
from ctxwindow.context.archiving import BATCH
from ctxwindow.stores.memory import AsyncMemoryStore, MemoryStore
from ctxwindow.stores.sqlite import SQLiteStore

FACT = "My tracking id is SF1234567890 for the blue kettle."


class GatedArchive(SQLiteArchive):
    """An archive whose ``index`` records each call, then waits at a gate (open by default)."""

    def __init__(self, path: str = ":memory:") -> None:
        super().__init__(path)
        self.gate = threading.Event()
        self.gate.set()
        self.entered = threading.Event()  # an index call is under way (or was)
        self.calls: list[tuple[str, list[int], int | None]] = []  # (thread, seqs, through)
        self.searches = 0
        self.failures = 0  # index calls left to fail

    def index(
        self,
        session_id: str,
        entries: Iterable[Entry],
        *,
        user_id: str | None = None,
        through: int | None = None,
    ) -> int:
        batch = list(entries)
        self.calls.append((threading.current_thread().name, [e.seq for e in batch], through))
        self.entered.set()
        assert self.gate.wait(10), "the test never opened the gate"
        if self.failures:
            self.failures -= 1
            raise StoreError("the archive's disk is full")
        return super().index(session_id, batch, user_id=user_id, through=through)

    def scores(self, *args: Any, **kwargs: Any) -> Any:  # recall's search
        self.searches += 1
        return super().scores(*args, **kwargs)

    def indexed(self) -> list[int]:
        return sorted(seq for _, seqs, _ in self.calls for seq in seqs)


def wait_until(done: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 10
    while not done():
        assert time.monotonic() < deadline, f"never: {what}"
        time.sleep(0.005)


def chat(add: Callable[[dict[str, Any]], Any], turns: int, start: int = 0) -> None:
    for i in range(start, start + turns):
        add({"role": "user", "content": f"question {i} about delivery times"})
        add({"role": "assistant", "content": f"answer {i}: usually three days 🚚"})


def converse(cm: ContextManager, sid: str = "s") -> None:
    cm.add(sid, {"role": "system", "content": "Be brief."})
    cm.add(sid, {"role": "user", "content": FACT})
    chat(lambda m: cm.add(sid, m), 40)


def contents(messages: Sequence[dict[str, Any]]) -> list[str]:
    return [str(m["content"]) for m in messages]


# -- off the request ------------------------------------------------------------------


def test_add_returns_while_the_archive_is_busy() -> None:
    """A turn never waits for indexing: the worker thread does it, between requests."""
    archive = GatedArchive()
    archive.gate.clear()
    cm = ContextManager(MemoryStore(), budget=300, archive=archive, prefetch=False)
    cm.add("s", {"role": "user", "content": FACT})
    assert archive.entered.wait(10)  # the worker is in index, held at the gate
    chat(lambda m: cm.add("s", m), 30)  # ... and turns go on being acknowledged
    assert len(cm.history("s")) == 61
    assert [thread for thread, _, _ in archive.calls] == ["ctxwindow-archive"]
    archive.gate.set()
    context = cm.build("s", query="tracking id kettle")
    assert FACT in contents(context.messages)
    cm.close()


def test_the_async_add_returns_while_the_archive_is_busy() -> None:
    archive = GatedArchive()
    archive.gate.clear()

    async def run() -> list[str]:
        async with AsyncContextManager(
            AsyncMemoryStore(), budget=300, archive=archive, prefetch=False
        ) as cm:
            await cm.add("s", {"role": "user", "content": FACT})
            await asyncio.sleep(0)  # the worker task starts, and waits in a thread
            assert await asyncio.to_thread(archive.entered.wait, 10)
            for i in range(30):
                await cm.add("s", {"role": "user", "content": f"question {i} about delivery"})
            assert len(archive.calls) == 1
            archive.gate.set()
            context = await cm.build("s", query="tracking id kettle")
            return contents(context.messages)

    assert FACT in asyncio.run(run())


def test_a_build_after_the_worker_caught_up_indexes_nothing() -> None:
    archive = GatedArchive()
    cm = ContextManager(MemoryStore(), budget=300, archive=archive, prefetch=False)
    converse(cm)
    last = cm.history("s")[-1].seq
    wait_until(lambda: archive.indexed_through("s") == last, "the worker archived every turn")
    calls = len(archive.calls)
    context = cm.build("s", query="tracking id kettle")
    assert archive.searches == 1 and len(archive.calls) == calls  # searched; indexed nothing
    assert FACT in contents(context.messages)
    assert {thread for thread, _, _ in archive.calls} == {"ctxwindow-archive"}
    cm.close()


def test_the_async_worker_archives_between_requests() -> None:
    archive = GatedArchive()

    async def run() -> None:
        async with AsyncContextManager(
            AsyncMemoryStore(), budget=300, archive=archive, prefetch=False
        ) as cm:
            await cm.add("s", {"role": "user", "content": FACT})
            for i in range(40):
                await cm.add("s", {"role": "assistant", "content": f"answer {i}: three days"})
            deadline = time.monotonic() + 10
            while archive.indexed_through("s") < 41:  # the loop is free: the worker runs
                assert time.monotonic() < deadline
                await asyncio.sleep(0.005)
            calls = len(archive.calls)
            context = await cm.build("s", query="tracking id kettle")
            assert len(archive.calls) == calls and archive.searches == 1
            assert FACT in contents(context.messages)

    asyncio.run(run())


def test_a_turn_is_indexed_in_one_batch_as_it_ends() -> None:
    """The worker leaves a session alone while a turn holds it (other sessions go on), then
    indexes what the turn added in one batch; a search inside the turn still sees it."""
    archive = GatedArchive()
    cm = ContextManager(MemoryStore(), budget=300, archive=archive, prefetch=False)
    with cm.turn("s"):
        cm.add("s", {"role": "user", "content": FACT})
        cm.add("s", {"role": "assistant", "content": "Noted: SF1234567890 🫖"})
        cm.add("other", {"role": "user", "content": "a turn of another session"})
        wait_until(lambda: archive.indexed_through("other") == 1, "the other session indexed")
        assert archive.indexed_through("s") == 0  # the worker ran, and left "s" alone
    wait_until(lambda: archive.indexed_through("s") == 2, "the turn indexed as it ended")
    assert [(thread, seqs) for thread, seqs, _ in archive.calls] == [
        ("ctxwindow-archive", [1]),
        ("ctxwindow-archive", [1, 2]),
    ]
    with cm.turn("s"):
        chat(lambda m: cm.add("s", m), 30)  # FACT leaves the window
        context = cm.build("s", query="tracking id kettle")
        assert FACT in contents(context.messages)
        assert archive.indexed_through("s") == 62  # the search indexed the turn's entries
    with pytest.raises(RuntimeError), cm.turn("s"):  # a turn that fails
        cm.add("s", {"role": "user", "content": "Is it shipped?"})
        cm.add("other", {"role": "assistant", "content": "another session's turn"})
        wait_until(lambda: archive.indexed_through("other") == 2, "the other session indexed")
        raise RuntimeError("the upstream is down")
    wait_until(lambda: archive.indexed_through("s") == 63, "the failed turn indexed as it ended")
    cm.close()


def test_an_async_turn_is_indexed_in_one_batch_as_it_ends() -> None:
    archive = GatedArchive()

    async def run() -> None:
        async with AsyncContextManager(
            AsyncMemoryStore(), budget=300, archive=archive, prefetch=False
        ) as cm:
            async with cm.turn("s"):
                await cm.add("s", {"role": "user", "content": FACT})
                await cm.add("s", {"role": "assistant", "content": "Noted: SF1234567890 🫖"})
                await cm.add("other", {"role": "user", "content": "a turn of another session"})
                while archive.indexed_through("other") < 1:  # the worker runs meanwhile
                    await asyncio.sleep(0.005)
                assert archive.indexed_through("s") == 0  # ... and leaves "s" alone
            deadline = time.monotonic() + 10
            while archive.indexed_through("s") < 2:
                assert time.monotonic() < deadline, "the turn was never indexed"
                await asyncio.sleep(0.005)
            assert [seqs for _, seqs, _ in archive.calls] == [[1], [1, 2]]

    asyncio.run(run())


# -- searches see everything queued before them -----------------------------------------


class SlowArchive(SQLiteArchive):
    """Indexing that takes a while, so that the worker lags behind the turns."""

    def _write(self, *args: Any, **kwargs: Any) -> None:
        time.sleep(0.003)
        super()._write(*args, **kwargs)


@pytest.mark.parametrize("prefetch", [True, False])
def test_contexts_are_those_of_a_manager_that_archives_before_each_search(
    prefetch: bool,
) -> None:
    """However far the worker got, a build gives what it gives with everything archived."""
    lagging = ContextManager(MemoryStore(), budget=300, archive=SlowArchive(), prefetch=prefetch)
    drained = ContextManager(MemoryStore(), budget=300, archive=SQLiteArchive(), prefetch=prefetch)
    queries = ["tracking id kettle", "delivery 7", "answer 3 three days", None]
    for cm in (lagging, drained):
        cm.add("s", {"role": "system", "content": "Be brief. 简短回答。"})
    seen: dict[int, list[Any]] = {id(lagging): [], id(drained): []}
    for i in range(30):
        message = {"role": "user", "content": f"{FACT if i == 2 else ''} turn {i} 東京 📦"}
        for cm in (lagging, drained):
            cm.add("s", message)
            cm.add("s", {"role": "assistant", "content": f"answer {i}: three days"})
            if cm is drained:
                cm.drain()
            if i % 5 == 4:
                for query in queries:
                    context = cm.build("s", query=query)
                    seen[id(cm)].append((context.messages, context.total_tokens))
    assert seen[id(lagging)] == seen[id(drained)]
    lagging.close()
    drained.close()


def test_a_build_waits_for_the_batch_under_way() -> None:
    """The worker holds the session's only batch: the search waits for it, not around it."""
    archive = GatedArchive()
    cm = ContextManager(MemoryStore(), budget=300, archive=archive, prefetch=False)
    converse(cm)
    cm.drain()  # everything archived; now one more turn, held at the gate
    archive.gate.clear()
    archive.entered.clear()
    cm.add("s", {"role": "user", "content": "The reset code is RST-9921."})
    assert archive.entered.wait(10)
    threading.Timer(0.05, archive.gate.set).start()
    context = cm.build("s", query="reset code")
    assert "The reset code is RST-9921." in contents(context.messages)
    assert archive.indexed_through("s") == cm.history("s")[-1].seq
    cm.close()


# -- close, delete ------------------------------------------------------------------------


def test_close_archives_what_is_queued() -> None:
    archive = GatedArchive()
    archive.gate.clear()
    cm = ContextManager(MemoryStore(), budget=300, archive=archive, prefetch=False)
    converse(cm)
    stored = [e.seq for e in cm.history("s") if e.message["role"] != "system"]
    assert archive.indexed_through("s") == 0  # nothing archived yet: the worker waits
    archive.gate.set()
    cm.close()
    assert archive.indexed_through("s") == stored[-1]
    assert [e.seq for e in archive.at("s", stored)] == stored


def test_the_async_close_archives_what_is_queued() -> None:
    archive = GatedArchive()
    archive.gate.clear()
    stored: list[int] = []

    async def run() -> None:
        cm = AsyncContextManager(AsyncMemoryStore(), budget=300, archive=archive, prefetch=False)
        for i in range(50):
            entry = await cm.add("s", {"role": "user", "content": f"turn {i} 東京"})
            stored.append(entry.seq)
        assert archive.indexed_through("s") == 0
        archive.gate.set()
        await cm.close()

    asyncio.run(run())
    assert archive.indexed_through("s") == 50
    assert [e.seq for e in archive.at("s", stored)] == stored


def test_delete_drops_the_queued_turns_and_waits_for_the_batch_under_way() -> None:
    archive = GatedArchive()
    archive.gate.clear()
    cm = ContextManager(MemoryStore(), budget=300, archive=archive, prefetch=False)
    converse(cm)
    assert archive.entered.wait(10)
    threading.Timer(0.05, archive.gate.set).start()
    assert cm.delete("s") is True
    cm.close()
    assert archive.at("s", range(1, 200)) == []
    assert archive.indexed_through("s") == 0


# -- cold loads ----------------------------------------------------------------------


def test_a_cold_load_queues_only_what_the_archive_lacks(tmp_path: Path) -> None:
    store, path = str(tmp_path / "s.db"), str(tmp_path / "a.db")
    with ContextManager(SQLiteStore(store), budget=300, archive=SQLiteArchive(path)) as first:
        converse(first)  # archived, and the watermark at the last seq
    with ContextManager(SQLiteStore(store), budget=300) as without:  # no archive: 10 more turns
        chat(lambda m: without.add("s", m), 5, start=100)
    archive = GatedArchive(path)
    with ContextManager(SQLiteStore(store), budget=300, archive=archive) as second:
        second.build("s", query="tracking id kettle")
        newer = [e.seq for e in second.history("s")][-10:]
    assert archive.indexed() == newer
    archive = GatedArchive(path)
    with ContextManager(SQLiteStore(store), budget=300, archive=archive) as third:
        assert FACT in contents(third.build("s", query="tracking id kettle").messages)
    assert archive.calls == []  # a restart archives nothing again


def test_with_search_batches_a_search_leaves_a_long_backlog_to_the_worker(
    tmp_path: Path,
) -> None:
    """With ``search_batches=1`` (the service's), a long session loaded beside an archive
    that does not hold it: the first search does not wait for its indexing (the worker is
    held at a gate meanwhile); the worker indexes it in the background, in seq order,
    nothing left out; then a search again indexes its session's few new turns first."""
    store = str(tmp_path / "s.db")
    with ContextManager(SQLiteStore(store), budget=300) as plain:  # no archive yet
        converse(plain)
        chat(lambda m: plain.add("s", m), 300, start=100)
    archive = GatedArchive(str(tmp_path / "a.db"))
    archive.gate.clear()
    with ContextManager(SQLiteStore(store), budget=300, archive=archive, search_batches=1) as cm:
        cm.build("s", query="tracking id kettle")  # returns: the worker waits at the gate
        assert cm.queued > BATCH
        assert {thread for thread, _, _ in archive.calls} <= {"ctxwindow-archive"}
        archive.gate.set()
        wait_until(lambda: cm.queued == 0, "the worker indexed the backlog")
        last = cm.history("s")[-1].seq
        wait_until(lambda: archive.indexed_through("s") == last, "the watermark at the end")
        assert archive.indexed() == [e.seq for e in cm.history("s") if e.seq > 1]
        assert FACT in contents(cm.build("s", query="tracking id kettle").messages)
        chat(lambda m: cm.add("s", m), 1, start=900)
        cm.build("s", query="tracking id kettle")  # indexes (or waits for) the new turns
        assert cm.queued == 0 and archive.indexed_through("s") == last + 2


def test_search_batches_must_be_none_or_positive() -> None:
    with pytest.raises(ValueError, match="search_batches must be None or at least 1, got 0"):
        ContextManager(MemoryStore(), archive=SQLiteArchive(), search_batches=0)


class PlainArchive:
    """An archive of the user's own: the manager's contract only, no watermark."""

    def __init__(self) -> None:
        self.inner = SQLiteArchive()
        self.indexed: list[int] = []

    def index(self, session_id: str, entries: Sequence[Entry]) -> object:
        self.indexed.extend(e.seq for e in entries)
        return self.inner.index(session_id, entries)

    def search(self, session_id: str, query: str, *, k: int = 5) -> Sequence[Any]:
        return self.inner.search(session_id, query, k=k)

    def at(self, session_id: str, seqs: Sequence[int]) -> Sequence[Entry]:
        return self.inner.at(session_id, seqs)

    def forget(self, session_id: str) -> object:
        return self.inner.forget(session_id)


class OldSubclass(SQLiteArchive):
    """A subclass written before watermarks: its ``index`` takes no ``through``."""

    def index(
        self, session_id: str, entries: Iterable[Entry], *, user_id: str | None = None
    ) -> int:
        return super().index(session_id, entries, user_id=user_id)


def test_an_archive_without_watermarks_gets_every_entry_again_on_a_cold_load(
    tmp_path: Path,
) -> None:
    store = str(tmp_path / "s.db")
    plain = PlainArchive()
    with ContextManager(SQLiteStore(store), budget=300, archive=plain) as first:
        converse(first)
        every = [e.seq for e in first.history("s") if e.message["role"] != "system"]
    assert sorted(set(plain.indexed)) == every
    plain.indexed.clear()
    with ContextManager(SQLiteStore(store), budget=300, archive=plain) as second:
        assert FACT in contents(second.build("s", query="tracking id kettle").messages)
    assert plain.indexed == every  # all queued again: nothing says what is archived
    old = OldSubclass()
    with ContextManager(SQLiteStore(store), budget=300, archive=old) as third:
        assert FACT in contents(third.build("s", query="tracking id kettle").messages)
    assert old.indexed_through("s") == 0
    assert [e.seq for e in old.at("s", every)] == every


# -- failures ------------------------------------------------------------------------


def test_a_failed_batch_is_logged_and_its_turns_stay_queued(
    caplog: pytest.LogCaptureFixture,
) -> None:
    archive = GatedArchive()
    archive.failures = 1
    cm = ContextManager(MemoryStore(), budget=300, archive=archive, prefetch=False)
    with caplog.at_level(logging.ERROR, logger="ctxwindow.context"):
        cm.add("s", {"role": "user", "content": FACT})
        wait_until(lambda: archive.failures == 0, "the worker tried")
        wait_until(lambda: bool(caplog.records), "the failure was logged")
    assert "could not archive turns of session 's'" in caplog.records[0].getMessage()
    assert archive.indexed_through("s") == 0  # the watermark did not pass the failed turn
    chat(lambda m: cm.add("s", m), 30)  # the worker goes on (the thread did not die)
    context = cm.build("s", query="tracking id kettle")
    assert FACT in contents(context.messages)  # the failed turn was archived after all
    assert archive.indexed_through("s") == cm.history("s")[-1].seq
    cm.close()


def test_a_search_fails_while_the_archive_does_and_nothing_is_lost(
    caplog: pytest.LogCaptureFixture,
) -> None:
    archive = GatedArchive()
    archive.failures = 1_000
    cm = ContextManager(MemoryStore(), budget=300, archive=archive, prefetch=False)
    with caplog.at_level(logging.CRITICAL, logger="ctxwindow.context"):
        converse(cm)
        with pytest.raises(StoreError, match="disk is full"):
            cm.build("s", query="tracking id kettle")
        archive.failures = 0  # the disk has room again
        context = cm.build("s", query="tracking id kettle")
    assert FACT in contents(context.messages)
    stored = [e.seq for e in cm.history("s") if e.message["role"] != "system"]
    assert [e.seq for e in archive.at("s", stored)] == stored
    cm.close()


def test_close_logs_a_batch_it_cannot_archive(caplog: pytest.LogCaptureFixture) -> None:
    """Left unarchived, under the watermark: the next load of the session queues it again."""
    archive = GatedArchive()
    archive.failures = 1_000
    cm = ContextManager(MemoryStore(), budget=300, archive=archive, prefetch=False)
    with caplog.at_level(logging.ERROR, logger="ctxwindow.context"):
        cm.add("s", {"role": "user", "content": FACT})
        cm.close()
    assert any("session 's'" in r.getMessage() for r in caplog.records)
    assert archive.indexed_through("s") == 0


def test_drain_waits_for_the_batch_the_worker_is_indexing() -> None:
    """A batch the worker has taken off the queue is no longer queued: ``drain`` waits for
    it all the same (it returned at once before, with the last turns not indexed yet)."""
    archive = GatedArchive()
    manager = ContextManager(MemoryStore(), budget=400, archive=archive)
    try:
        archive.gate.clear()
        manager.add("s", {"role": "user", "content": FACT})
        assert archive.entered.wait(10), "the worker never started on the batch"
        threading.Timer(0.3, archive.gate.set).start()  # the worker finishes a bit later
        manager.drain()
        assert archive.indexed_through("s") == manager.history("s")[-1].seq
    finally:
        archive.gate.set()
        manager.close()


def test_a_batch_being_indexed_still_counts_as_queued() -> None:
    """``queued`` (the service's ``ctxwindow_archive_queued``) is 0 only once the worker's
    batch is indexed, not when it was taken off the queue: a drain that waits for 0 waits
    for the indexing too."""
    archive = GatedArchive()
    archive.gate.clear()
    cm = ContextManager(MemoryStore(), budget=300, archive=archive, prefetch=False)
    cm.add("s", {"role": "user", "content": "where is parcel 猫-7?"})
    assert archive.entered.wait(10), "the worker never took its batch"
    assert cm.queued == 1  # taken off the queue, not indexed yet
    archive.gate.set()
    wait_until(lambda: cm.queued == 0, "the worker indexed its batch")
    assert archive.indexed() == [1]
    cm.close()
