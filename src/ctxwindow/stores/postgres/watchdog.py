"""``Watchdog``: a deadline on each call to the server, enforced from outside the call.

psycopg waits for the server's answer as long as it takes, and the server's
``statement_timeout`` cannot help when the server itself is stalled (stopped,
swapped out, a network path that silently drops packets): a call would hang
for the whole stall. So each call registers its connection's socket with a
deadline, and one daemon thread per process shuts the socket down when a
deadline passes. The blocked call then fails at once, sync or async, with a
psycopg ``OperationalError`` that the store maps to ``StoreUnavailableError``;
the connection is dead and is never pooled again.

The watchdog keeps a duplicate of the socket's descriptor while a call is
watched, so it never touches a descriptor number that was closed and reused.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import os
import socket
import threading
import time
from collections.abc import Iterator


class Watch:
    """One watched call: ``expired`` tells whether the watchdog cut it off."""

    def __init__(self, sock: socket.socket, deadline: float) -> None:
        self.sock = sock
        self.deadline = deadline
        self.expired = False
        self.done = False


class Watchdog:
    """Shuts down the socket of every watched call still running at its deadline."""

    def __init__(self) -> None:
        self._guard = threading.Condition()
        self._heap: list[tuple[float, int, Watch]] = []
        self._order = itertools.count()
        self._thread: threading.Thread | None = None

    @contextlib.contextmanager
    def watch(self, fileno: int, deadline: float) -> Iterator[Watch]:
        """Watch the socket ``fileno`` until the block ends; cut off at ``deadline`` (monotonic)."""
        watch = Watch(socket.socket(fileno=os.dup(fileno)), deadline)
        with self._guard:
            heapq.heappush(self._heap, (deadline, next(self._order), watch))
            if self._heap[0][2] is watch:
                self._guard.notify()
            self._start()
        try:
            yield watch
        finally:
            with self._guard:
                watch.done = True  # the heap entry is dropped when its deadline comes
            watch.sock.close()

    def _start(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(
                target=self._run, name="ctxwindow-postgres-watchdog", daemon=True
            )
            self._thread.start()

    def _run(self) -> None:
        with self._guard:
            while True:
                while self._heap and (self._heap[0][2].done or self._heap[0][0] <= _now()):
                    _, _, watch = heapq.heappop(self._heap)
                    if not watch.done:
                        watch.expired = True
                        with contextlib.suppress(OSError):
                            watch.sock.shutdown(socket.SHUT_RDWR)
                wait = self._heap[0][0] - _now() if self._heap else None
                self._guard.wait(wait)


def _now() -> float:
    return time.monotonic()


WATCHDOG = Watchdog()  # one thread for every store of the process
