"""Building blocks of the session locks that stores hold across processes.

``Store.lock`` (``stores.base``) takes an in-process lock first, then the
store's ``_hold``, built from these pieces:

- ``poll`` / ``async_poll``: repeat a non-blocking attempt until it succeeds
  or the deadline passes, pausing 2 ms, doubling up to 50 ms, in between;
  ``SessionBusyError`` once the deadline has passed.
- ``session_hash``: a 64-bit hash of a text that every process computes alike
  (Python's ``hash()`` of a string changes from one process to the next).
- ``open_lock_file``, ``try_lock_byte``, ``unlock_byte``: Linux
  open-file-description locks (``F_OFD_SETLK``) on single bytes of a file.
  Such a lock belongs to one open file description, so two descriptors in one
  process exclude each other, and the kernel drops it when the descriptor
  closes, the holder's death (``kill -9``) included. ``OFD_SETLK`` is None
  where they are not available (not Linux, or not 64-bit).
"""

from __future__ import annotations

import asyncio
import errno
import hashlib
import os
import struct
import sys
import time
from collections.abc import Awaitable, Callable, Iterator

from ctxwindow.stores.base import busy

FIRST_PAUSE = 0.002  # seconds between the first attempts; doubled after each one
LONGEST_PAUSE = 0.05


def _pauses(deadline: float | None) -> Iterator[float]:
    """Sleeps between attempts, never past ``deadline`` (a ``time.monotonic()`` value)."""
    pause = FIRST_PAUSE
    while True:
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:
            return
        yield pause if left is None else min(pause, left)
        pause = min(2 * pause, LONGEST_PAUSE)


def poll(attempt: Callable[[], bool], deadline: float | None, session_id: str) -> None:
    """Call ``attempt`` until it returns True; ``SessionBusyError`` once ``deadline`` passed.

    It is always tried once, so a deadline already past means "try once".
    """
    pauses = _pauses(deadline)
    while not attempt():
        pause = next(pauses, None)
        if pause is None:
            raise busy(session_id)
        time.sleep(pause)


async def async_poll(
    attempt: Callable[[], Awaitable[bool]], deadline: float | None, session_id: str
) -> None:
    """``poll`` for asyncio: the pauses are ``asyncio.sleep``."""
    pauses = _pauses(deadline)
    while not await attempt():
        pause = next(pauses, None)
        if pause is None:
            raise busy(session_id)
        await asyncio.sleep(pause)


def session_hash(text: str) -> int:
    """A signed 64-bit hash of ``text``, the same in every process."""
    data = text.encode("utf-8", "surrogatepass")  # session ids may hold lone surrogates
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "big", signed=True)


# -- byte locks on a file (Linux open-file-description locks) -------------------------


def _ofd_setlk() -> int | None:
    """``F_OFD_SETLK`` where ``_FLOCK`` below matches ``struct flock`` (64-bit Linux)."""
    if sys.platform != "linux" or struct.calcsize("P") != 8:
        return None
    import fcntl

    command: int | None = getattr(fcntl, "F_OFD_SETLK", None)
    return command


OFD_SETLK = _ofd_setlk()

# struct flock on x86_64 and aarch64 Linux: short l_type, short l_whence, off_t l_start,
# off_t l_len, pid_t l_pid, padded to 32 bytes (native alignment puts 4 bytes after l_whence).
_FLOCK = struct.Struct("hhqqi4x")


def _flock(kind: int, offset: int) -> bytes:
    return _FLOCK.pack(kind, os.SEEK_SET, offset, 1, 0)  # l_pid must be 0 for OFD locks


def open_lock_file(path: str) -> int:
    """A new descriptor of the lock file at ``path`` (created if missing); ``OSError``."""
    return os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)


def try_lock_byte(fd: int, offset: int) -> bool:
    """Take an exclusive lock on byte ``offset`` of ``fd`` without waiting; False if taken."""
    import fcntl

    assert OFD_SETLK is not None, "open-file-description locks are not available here"
    try:
        fcntl.fcntl(fd, OFD_SETLK, _flock(fcntl.F_WRLCK, offset))
    except OSError as exc:
        if exc.errno in (errno.EAGAIN, errno.EACCES):
            return False
        raise
    return True


def unlock_byte(fd: int, offset: int) -> None:
    """Release byte ``offset``: closing ``fd`` is not enough if a forked child shares it."""
    import fcntl

    assert OFD_SETLK is not None, "open-file-description locks are not available here"
    fcntl.fcntl(fd, OFD_SETLK, _flock(fcntl.F_UNLCK, offset))
