"""Building blocks of the session locks that stores hold across processes.

``Store.lock`` (``stores.base``) takes an in-process lock first, then the
store's ``_hold``, built from these pieces:

- ``poll`` (in ``ctxwindow.concurrency``, one for each flavour): repeat a
  non-blocking attempt until it succeeds or the deadline passes, pausing
  2 ms, doubling up to 50 ms, in between; ``SessionBusyError`` after.
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

import errno
import hashlib
import os
import struct
import sys


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
