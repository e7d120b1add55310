"""The threading side of the seam (see ``ctxwindow.concurrency``)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import ParamSpec, TypeVar

from ctxwindow.concurrency._pauses import busy, pauses

logger = logging.getLogger("ctxwindow.concurrency")

P = ParamSpec("P")
T = TypeVar("T")

Lock = threading.Lock  # held across waits: ``async with`` / ``with``


def run_blocking(fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
    """Blocking work, in the caller's thread (nothing else waits on it)."""
    return fn(*args, **kwargs)


def sleep(seconds: float) -> None:
    time.sleep(seconds)


def poll(attempt: Callable[[], bool], deadline: float | None, session_id: str) -> None:
    """Call ``attempt`` until it returns True; ``SessionBusyError`` once ``deadline`` passed.

    It is always tried once, so a deadline already past means "try once".
    """
    waits = pauses(deadline)
    while not attempt():
        pause = next(waits, None)
        if pause is None:
            raise busy(session_id)
        time.sleep(pause)


@contextmanager
def repeating(step: Callable[[], bool], interval: float, name: str) -> Iterator[None]:
    """Call ``step`` every ``interval`` seconds in a daemon thread while the block runs.

    The thread ends at the end of the block, or earlier when ``step`` returns False.
    """
    stop = threading.Event()

    def run() -> None:
        while not stop.wait(interval):
            if not step():
                return

    thread = threading.Thread(target=run, name=name, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


class Background:
    """Call ``step`` every ``interval`` seconds in a daemon thread, from the first ``start()``
    until ``stop()``: work that outlives the call that needed it."""

    def __init__(self, step: Callable[[], None], interval: float, name: str) -> None:
        self._step, self._interval, self._name = step, interval, name
        self._guard = threading.Lock()
        self._running: tuple[threading.Thread, threading.Event] | None = None

    def start(self) -> None:
        """Start the thread, unless it runs already."""
        with self._guard:
            if self._running is None:
                self._running = _started(self._run, self._name)

    def stop(self) -> None:
        with self._guard:
            running, self._running = self._running, None
        if running is not None:
            thread, stop = running
            stop.set()
            if thread is not threading.current_thread():
                thread.join()

    def _run(self, stop: threading.Event) -> None:
        while not stop.wait(self._interval):
            self._step()


class Worker:
    """Call ``step`` in a daemon thread until it returns False, from each ``wake()``: work
    queued for the background (the archive's indexing), done between requests.

    ``wake()`` after queueing work starts the thread, or keeps it going; it
    waits ``linger`` seconds for more work before it ends, so that a busy
    session does not start a thread a turn. An exception of ``step`` is
    logged and ends the round, as if it returned False.
    """

    def __init__(self, step: Callable[[], bool], name: str, linger: float = 1.0) -> None:
        self._step, self._name, self._linger = step, name, linger
        self._guard = threading.Lock()
        self._woken = threading.Event()
        self._running: tuple[threading.Thread, threading.Event] | None = None

    def wake(self) -> None:
        """Run ``step`` until it returns False, in the worker thread (started if need be)."""
        with self._guard:
            self._woken.set()
            if self._running is None or not self._running[0].is_alive():  # (or lost in a fork)
                self._running = _started(self._run, self._name)

    def stop(self) -> None:
        """Wait for the step under way, if any, and end the thread (``wake()`` starts another)."""
        with self._guard:
            running, self._running = self._running, None
        if running is not None:
            thread, stop = running
            stop.set()
            self._woken.set()
            if thread is not threading.current_thread():
                thread.join()

    def _run(self, stop: threading.Event) -> None:
        while True:
            self._woken.clear()
            while not stop.is_set() and self._stepped():
                pass
            if stop.is_set() or not self._woken.wait(self._linger):
                with self._guard:
                    if not stop.is_set() and self._woken.is_set():
                        continue  # woken as it gave up waiting
                    if self._running is not None and self._running[1] is stop:
                        self._running = None
                    return

    def _stepped(self) -> bool:
        try:
            return self._step()
        except Exception:
            logger.exception("background work %r failed", self._name)
            return False


class SessionLocks:
    """One ``threading.Lock`` per session held or waited for; forgotten when nobody needs it."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._locks: dict[str, tuple[threading.Lock, int]] = {}

    def sessions(self) -> list[str]:
        """The sessions held or waited for now."""
        with self._guard:
            return list(self._locks)

    @contextmanager
    def hold(self, session_id: str, deadline: float | None) -> Iterator[None]:
        with self._guard:
            lock, users = self._locks.get(session_id, (None, 0))
            lock = lock or threading.Lock()
            self._locks[session_id] = (lock, users + 1)
        try:
            wait = -1.0 if deadline is None else max(0.0, deadline - time.monotonic())
            if not lock.acquire(timeout=wait):
                raise busy(session_id)
            try:
                yield
            finally:
                lock.release()
        finally:
            with self._guard:
                lock, users = self._locks[session_id]
                if users == 1:
                    del self._locks[session_id]
                else:
                    self._locks[session_id] = (lock, users - 1)


def _started(
    run: Callable[[threading.Event], None], name: str
) -> tuple[threading.Thread, threading.Event]:
    """A daemon thread running ``run(stop)``, started, and the event that stops it."""
    stop = threading.Event()
    thread = threading.Thread(target=run, args=(stop,), name=name, daemon=True)
    thread.start()
    return thread, stop
