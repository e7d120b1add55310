"""The asyncio side of the seam (see ``ctxwindow.concurrency``)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import ParamSpec, TypeVar

from ctxwindow.concurrency._pauses import busy, pauses

logger = logging.getLogger("ctxwindow.concurrency")

P = ParamSpec("P")
T = TypeVar("T")

Lock = asyncio.Lock  # held across waits: ``async with`` / ``with``


async def run_blocking(fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
    """Run blocking work in a worker thread, leaving the event loop free."""
    return await asyncio.to_thread(fn, *args, **kwargs)


async def sleep(seconds: float) -> None:
    await asyncio.sleep(seconds)


async def poll(
    attempt: Callable[[], Awaitable[bool]], deadline: float | None, session_id: str
) -> None:
    """Await ``attempt`` until it returns True; ``SessionBusyError`` once ``deadline`` passed.

    It is always tried once, so a deadline already past means "try once".
    """
    waits = pauses(deadline)
    while not await attempt():
        pause = next(waits, None)
        if pause is None:
            raise busy(session_id)
        await asyncio.sleep(pause)


@asynccontextmanager
async def repeating(
    step: Callable[[], Awaitable[bool]], interval: float, name: str
) -> AsyncIterator[None]:
    """Await ``step`` every ``interval`` seconds in a task while the block runs.

    The task ends at the end of the block, or earlier when ``step`` returns False. A step
    under way at the end of the block is awaited, not cancelled (as the threads of
    ``concurrency.sync.repeating`` are joined): a store call cancelled mid-flight leaves
    its connection to be closed by a later turn of the event loop, which may never come.
    """
    stop = asyncio.Event()

    async def run() -> None:
        while True:
            try:
                await asyncio.wait_for(stop.wait(), interval)
                return
            except TimeoutError:
                pass
            if not await step():
                return

    task = asyncio.create_task(run(), name=name)
    try:
        yield
    finally:
        stop.set()
        await asyncio.gather(task, return_exceptions=True)


class Background:
    """Await ``step`` every ``interval`` seconds in a task, from the first ``start()`` until
    ``stop()``: work that outlives the call that needed it."""

    def __init__(self, step: Callable[[], Awaitable[None]], interval: float, name: str) -> None:
        self._step, self._interval, self._name = step, interval, name
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Start the task on the running loop, unless it runs there already."""
        loop = asyncio.get_running_loop()
        if self._task is None or self._task.done() or self._task.get_loop() is not loop:
            self._task = loop.create_task(self._run(), name=self._name)

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is None or task.done():
            return
        if task.get_loop() is not asyncio.get_running_loop():  # started under another loop
            with contextlib.suppress(RuntimeError):  # that loop is closed: the task is gone
                task.get_loop().call_soon_threadsafe(task.cancel)
            return
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self._interval)
            await self._step()


class Worker:
    """Await ``step`` in a task until it returns False, from each ``wake()``: work queued
    for the background (the archive's indexing), done between requests.

    No task runs while there is nothing to do; ``wake()`` after queueing work
    starts one (or keeps the running one going). An exception of ``step`` is
    logged and ends the task; the next ``wake()`` starts another.
    """

    def __init__(self, step: Callable[[], Awaitable[bool]], name: str) -> None:
        self._step, self._name = step, name
        self._task: asyncio.Task[None] | None = None
        self._runs = 0  # each task runs while this is its number: ``stop`` moves it on

    def wake(self) -> None:
        """Run ``step`` until it returns False, on the running loop (soon, not now)."""
        loop = asyncio.get_running_loop()
        if self._task is None or self._task.done() or self._task.get_loop() is not loop:
            self._runs += 1
            self._task = loop.create_task(self._run(self._runs), name=self._name)

    async def stop(self) -> None:
        """Wait for the step under way, if any; the task then ends, work left or not (what
        is left waits for the next ``wake()``)."""
        task, self._task = self._task, None
        self._runs += 1
        if task is None or task.done() or task.get_loop() is not asyncio.get_running_loop():
            return  # done, or of another loop (which ends it)
        await asyncio.gather(task, return_exceptions=True)

    async def _run(self, run: int) -> None:
        # A wake() while a step awaits sees this task running: the work it announces is
        # seen by the next step, as long as ``step`` returns False only right after it
        # found nothing to do (no await in between).
        try:
            while run == self._runs and await self._step():
                pass
        except Exception:
            logger.exception("background work %r failed", self._name)


class SessionLocks:
    """One ``asyncio.Lock`` per session held or waited for; forgotten when nobody needs it."""

    def __init__(self) -> None:
        self._locks: dict[str, tuple[asyncio.Lock, int]] = {}

    def sessions(self) -> list[str]:
        """The sessions held or waited for now."""
        return list(self._locks)

    @asynccontextmanager
    async def hold(self, session_id: str, deadline: float | None) -> AsyncIterator[None]:
        lock, users = self._locks.get(session_id, (None, 0))
        lock = lock or asyncio.Lock()
        self._locks[session_id] = (lock, users + 1)
        try:
            # At least 1 ms: before Python 3.12, wait_for(…, 0) gives up before the first try.
            wait = None if deadline is None else max(0.001, deadline - time.monotonic())
            try:
                await asyncio.wait_for(lock.acquire(), wait)
            except asyncio.TimeoutError:
                raise busy(session_id) from None
            try:
                yield
            finally:
                lock.release()
        finally:
            lock, users = self._locks[session_id]
            if users == 1:
                del self._locks[session_id]
            else:
                self._locks[session_id] = (lock, users - 1)
