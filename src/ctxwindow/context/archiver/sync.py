# Generated from src/ctxwindow/context/archiver/aio.py by tools/unasync.py: do not edit.
# Edit the async source, then run `python tools/unasync.py`.
"""``Archiver``: a manager's turns into its archive, and back out for recall.

Written once (``context/archiver/aio.py``); the sync twin
(``context/archiver/sync.py``) is generated from it by ``tools/unasync.py``.
The queue, the batches and the watermark are ``context/archiving.py``'s; the
recall steps without I/O are ``Core``'s (``context/recalling.py``). The
archiver does the I/O around them: it indexes a session's queued turns in
batches (a stored backlog read from the store a batch at a time), in the
background by a ``Worker`` (a task, or a thread) or before a search; it
searches, reads the neighbours of the hits and makes whole units of them.
Blocking archive work runs through ``ctxwindow.concurrency`` (a worker
thread for the async flavour, a plain call for the sync one).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence

from ctxwindow.concurrency.sync import SessionLocks, Worker, run_blocking, sleep
from ctxwindow.context.archiving import (
    BACKLOG_BATCH,
    BATCH,
    ArchiveQueue,
    Indexing,
    Turns,
    index_batch,
    indexed_through,
)
from ctxwindow.context.contracts import ArchiveLike
from ctxwindow.context.core import Core
from ctxwindow.context.session import AROUND, Session, after_for, in_tool_unit, unit_of
from ctxwindow.messages import Entry, Unit
from ctxwindow.stores.base import Store

logger = logging.getLogger("ctxwindow.context")


class Archiver:
    """What a manager has still to archive, the worker that archives it, and the searches.

    ``store`` is the manager's (backlogs and tool units are read from it);
    ``core`` gives the archive and the turns each window saw since last asked.
    Without an archive nothing is queued, and ``forget`` and ``close`` do nothing.
    """

    def __init__(self, store: Store, core: Core) -> None:
        self.store = store
        self._core = core
        self.queue = ArchiveQueue()
        self.indexing = Indexing()  # entries taken off the queue, being indexed now
        self.turns = Turns()  # under way: backlogs are read slowly meanwhile
        self._archiving = SessionLocks()  # a session's batches, one at a time
        self._worker = Worker(self._archive_next, "ctxwindow-archive")

    @property
    def archive(self) -> ArchiveLike | None:
        return self._core.archive

    def later(self, session: Session, after: int = 0) -> None:
        """Queue the turns the window saw since last asked (those after ``after``) for the
        archive, and wake the worker."""
        queued = self._core.unarchived(session, after)
        if queued:
            self.queue.put(session.id, queued)
            self._worker.wake()

    def ended(self, session_id: str) -> None:
        """A turn of the session ended: the worker indexes what it added (see ``Turns``)."""
        if self.queue.waiting(session_id):
            self._worker.wake()

    def missed(self, session: Session) -> None:
        """Queue for the archive what it has not got of a session just loaded: the turns
        above its watermark (all, if it keeps none); those the load did not replay as a
        range of the store."""
        archive = self.archive
        assert archive is not None
        through = run_blocking(indexed_through, archive, session.id)
        if through > session.last_seq:  # archived entries the session has lost (truncated)
            run_blocking(archive.forget, session.id)
            through = 0
        # What the load did not replay is read from the store by the worker, batch by batch.
        if through < session.replayed_after:
            self.queue.put_stored(session.id, through, session.replayed_after)
            self.turns.defer_backlog()  # not beside the turn that loaded it
        self.later(session, after=through)

    def forget(self, session_id: str) -> None:
        """Forget the session's queued turns and the archived ones, after a batch under way."""
        archive = self.archive
        if archive is not None:
            with self._archiving.hold(session_id, None):
                self.queue.discard(session_id)
                run_blocking(archive.forget, session_id)

    def drain(self, *, backlogs: bool = True) -> None:
        """Archive every turn still queued now (see ``ContextManager.drain``)."""
        # Also the sessions whose batch the worker is indexing now (taken off the queue):
        # ``_archive`` waits for it.
        for session_id in dict.fromkeys([*self.queue.sessions(), *self._archiving.sessions()]):
            if not backlogs and self.queue.stored(session_id) is not None:
                continue
            try:
                self._archive(session_id)
            except Exception:
                logger.exception("could not archive the turns queued for session %r", session_id)

    def close(self) -> None:
        """Archive what is still queued but for the stored backlogs, then stop the worker."""
        if self.archive is not None:
            self.drain(backlogs=False)
            self._worker.stop()

    def candidates(
        self, session: Session, query: str, budget: int, batches: int | None
    ) -> list[tuple[float, Unit]]:
        """Archived units that match ``query``, ``(score, unit)`` best first (cached per query).

        None when the window holds the whole session within ``budget``. The
        search sees every turn queued before it, unless ``batches`` (the
        manager's ``search_batches``) cannot hold them: a backlog is the
        worker's, and the search does not wait for it.
        """
        core, archive = self._core, self.archive
        if archive is None or not query or core.holds_all(session, budget):
            return []
        key = f"{session.last_seq}:{budget}:{query}"  # (the depth follows the budget)
        if session.recall is not None and session.recall[0] == key:
            return session.recall[1]
        self.later(session)
        whole = batches is None or self.queue.waiting(session.id) <= batches * BATCH
        if whole:
            self._archive(session.id)
        started = time.perf_counter()
        depth = core.recall.depth_for(budget)
        own, found = run_blocking(core.search, session, query, depth)
        self._cache(session, found)
        reading = core.reading(session, own, budget)
        while True:  # the candidates, best first, until enough are read
            try:
                seqs = next(reading)
            except StopIteration as done:
                ranked: list[tuple[float, Unit]] = done.value
                break
            self._cache(session, run_blocking(archive.at, session.id, seqs))
        core.searched(started)
        session.recall = (key, ranked) if whole else None  # kept only if it saw every turn
        return ranked

    def _cache(self, session: Session, read: Sequence[Entry]) -> None:
        """Cache the units of the entries ``read`` that the session has not cached."""
        for entry in self._core.uncached(session, read):
            self._core.cache(session, self._whole_unit(session.id, entry))

    def _whole_unit(self, session_id: str, entry: Entry) -> Unit:
        """The entry with the rest of its tool unit (call and results), from the store."""
        around = None
        if in_tool_unit(entry):
            around = self.store.load(session_id, after=after_for(entry), limit=AROUND)
        return unit_of(entry, around)

    def _archive(self, session_id: str, *, batches: int | None = None) -> None:
        """Archive what the session has queued, batch by batch (at most ``batches``).

        A failed batch goes back to the front of the queue, and the error up.
        """
        archive = self.archive
        assert archive is not None
        with self._archiving.hold(session_id, None):
            done = 0
            # The worker's backlog batches are short (it runs beside turns); a search or a
            # drain that waits for the whole backlog reads it in full batches.
            size = BATCH if batches is None else BACKLOG_BATCH
            while batches is None or done < batches:
                if (span := self.queue.stored(session_id)) is not None:
                    self._archive_stored(session_id, *span, size)
                elif batch := self.queue.take(session_id):
                    try:
                        with self.indexing.of(batch):
                            run_blocking(index_batch, archive, session_id, batch)
                    except BaseException:
                        self.queue.put_back(session_id, batch)
                        raise
                else:
                    break
                done += 1

    def _archive_stored(self, session_id: str, after: int, through: int, size: int) -> None:
        """Archive the next batch (``size`` entries at most) of the session's stored entries
        ``after`` to ``through``.

        A failure leaves the range where it was, the session held, and the error up.
        """
        archive = self.archive
        assert archive is not None
        try:
            limit = min(size, through - after)
            page = self.store.load(session_id, after=after, limit=limit)
            batch = [entry for entry in page if entry.message["role"] != "system"]
            last = page[-1].seq if page else through  # none: truncated meanwhile
            if batch:
                with self.indexing.of(batch):
                    run_blocking(index_batch, archive, session_id, batch, last)
        except BaseException:
            self.queue.hold(session_id)
            raise
        self.queue.read(session_id, last)

    def _archive_next(self) -> bool:
        """The worker's step: a batch of the session that has waited longest; False if none.

        Backlogs go slowly unless the manager is quiet (see ``Turns``).
        """
        backlog, busy = self.turns.backlog_now(), self.turns.under_way()
        session_id = self.queue.next(stored=backlog, busy=busy)
        if session_id is None:
            if not backlog and self.queue.backlogged():
                sleep(0.1)  # until the manager is quiet, or the next batch is due
                return True
            return False
        if self.queue.stored(session_id) is not None:
            self.turns.defer_backlog()
        try:
            self._archive(session_id, batches=1)
        except Exception:
            logger.exception(
                "could not archive turns of session %r; they stay queued (retried with its "
                "next turn or search, or at close)",
                session_id,
            )
        return True
