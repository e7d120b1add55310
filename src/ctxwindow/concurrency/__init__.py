"""The one seam between the async code and the sync code generated from it.

The async sources (``stores/*/aio.py``, ``context/aio.py``, ``stores/base/aio.py``)
import their waiting and background work from ``ctxwindow.concurrency.aio``;
``tools/unasync.py`` writes their sync twins, which import the same names from
``ctxwindow.concurrency.sync``. The two modules are the only place where the
flavours really differ, name for name:

- ``run_blocking(fn, *args)``: blocking work (archive indexing, search, a
  SQLite call) off the event loop (``asyncio.to_thread``), or simply called;
- ``sleep(seconds)``;
- ``poll(attempt, deadline, session_id)``: retry a non-blocking attempt until it
  succeeds or the deadline passes (``SessionBusyError``);
- ``repeating(step, interval, name)``: run ``step`` every ``interval`` seconds
  in the background (an asyncio task, or a daemon thread) while a block runs,
  until ``step`` returns False;
- ``Background(step, interval, name)``: ``step`` every ``interval`` seconds,
  detached from any block, from the first ``start()`` until ``stop()`` (work
  that outlives the call that needed it: a release retried once a server is back);
- ``Worker(step, name)``: ``step`` again and again in the background until it
  returns False, from each ``wake()`` (a task; a daemon thread that lingers a
  second for more work): work queued for between requests (archive indexing);
- ``SessionLocks``: one in-process lock per session, held or waited for;
- ``Lock``: a plain lock that may be held across waits (``asyncio.Lock``,
  ``threading.Lock``).
"""
