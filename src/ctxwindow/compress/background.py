"""Running coroutines without blocking the caller.

On a running event loop (``asyncio.get_running_loop()``) work becomes a task
of that loop; otherwise it goes to a private event loop on a daemon thread,
started on first use. ``drain()`` awaits both kinds; ``wait()`` blocks on the
thread's work only (a loop's tasks need that loop to run, so await
``drain()`` there); ``close()`` cancels what is left and stops the thread.

Work runs in a fresh ``contextvars.Context``, not the caller's: a task would
otherwise inherit the caller's context variables, and with them, say, the
callbacks of the agent run that happened to trigger a summary, which would
then stream the summary model's output to that run's user.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import threading
import time
from collections.abc import Callable, Coroutine
from typing import Any

Work = Callable[[], Coroutine[Any, Any, None]]


class Background:
    """Where an ``LLMSummarizer`` runs the summaries nobody waits for."""

    def __init__(self) -> None:
        self._lock = threading.RLock()  # a future done at once calls back under submit's lock
        self._tasks: set[asyncio.Task[None]] = set()
        self._futures: set[concurrent.futures.Future[None]] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._closed = False

    def submit(self, work: Work) -> bool:
        """Start ``work()`` in the background; False (nothing started) once closed."""
        with self._lock:
            if self._closed:
                return False
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                self._start_future(work)
            else:
                task = contextvars.Context().run(loop.create_task, work())
                self._tasks.add(task)
                task.add_done_callback(self._forget)
        return True

    def _start_future(self, work: Work) -> None:
        loop = self._thread_loop()
        future = contextvars.Context().run(asyncio.run_coroutine_threadsafe, work(), loop)
        self._futures.add(future)
        future.add_done_callback(self._forget)

    def _forget(self, done: Any) -> None:
        with self._lock:
            self._tasks.discard(done)
            self._futures.discard(done)

    def _thread_loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            self._loop = asyncio.new_event_loop()
            self._thread = threading.Thread(
                target=_serve, args=(self._loop,), name="ctxwindow-summaries", daemon=True
            )
            self._thread.start()
        return self._loop

    def _pending(self) -> tuple[list[asyncio.Task[None]], list[concurrent.futures.Future[None]]]:
        with self._lock:
            return list(self._tasks), list(self._futures)

    async def drain(self) -> None:
        """Wait for the work on this loop and on the background thread to finish."""
        loop = asyncio.get_running_loop()
        while True:
            tasks, futures = self._pending()
            waiting: list[asyncio.Future[None]] = [t for t in tasks if t.get_loop() is loop]
            waiting += [asyncio.wrap_future(f) for f in futures]
            if not waiting:
                return
            await asyncio.gather(*waiting, return_exceptions=True)

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the background thread's work is done; False on timeout."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            futures = self._pending()[1]
            if not futures:
                return True
            left = None if deadline is None else max(deadline - time.monotonic(), 0.0)
            _, not_done = concurrent.futures.wait(futures, timeout=left)
            if not_done:
                return False

    def close(self) -> None:
        """Cancel unfinished work and stop the background thread (idempotent)."""
        with self._lock:
            self._closed = True
            tasks, loop, thread = list(self._tasks), self._loop, self._thread
        for task in tasks:
            with contextlib.suppress(RuntimeError):  # its loop is already closed
                task.get_loop().call_soon_threadsafe(task.cancel)
        if loop is not None and thread is not None and not loop.is_closed():
            loop.call_soon_threadsafe(loop.stop)
            if thread is not threading.current_thread():
                thread.join()


def _serve(loop: asyncio.AbstractEventLoop) -> None:
    """The background thread: run the loop until stopped, then cancel what is left."""
    asyncio.set_event_loop(loop)
    try:
        loop.run_forever()
    finally:
        pending = asyncio.all_tasks(loop)
        for task in pending:
            task.cancel()
        loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.run_until_complete(loop.shutdown_default_executor())
        loop.close()
