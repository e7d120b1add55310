"""The database file on disk: still where the store opened it, writable, with room to grow.

An open SQLite connection keeps working on a file that was deleted (with its
directory) or replaced: its writes then go to a file nobody will open again.
A connection opened before the file became read-only (immutable, a file
system remounted read-only) or before the disk filled up does not know it
until a write fails, or, in WAL mode, until a checkpoint does. So the store
checks from outside, with a few system calls (``stat``, ``access``,
``statvfs``): ``health()`` reports what it finds, and a write to a file that is
no longer at its path is refused rather than acknowledged and lost.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

MIN_FREE_BYTES = 1 << 20  # below this, any append may fail with "database or disk is full"


class DatabaseFile:
    """The database file a store opened (``path``), and what would stop writes to it."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.directory = os.path.dirname(os.path.abspath(path))
        self._identity = _identity(path)

    def moved(self) -> str | None:
        """Why writes would be lost (the opened file is no longer at its path), or None."""
        try:
            identity = _identity(self.path)
        except FileNotFoundError:
            return f"the database file was deleted (or its directory {self.directory!r} was)"
        except OSError as exc:
            return f"the database file cannot be found: {exc}"
        if identity != self._identity:
            return "the database file was replaced since the store opened it (reopen the store)"
        return None

    def problems(self) -> list[str]:
        """Why writes would fail or be lost, as short phrases; empty when nothing is wrong."""
        moved = self.moved()
        if moved is not None:
            return [moved]
        found = [
            f"{what} is not writable{_read_only(where)}"
            for what, where in self._written()
            if not os.access(where, os.W_OK)
        ]
        free = free_bytes(self.directory)
        if free is not None and free < MIN_FREE_BYTES:
            found.append(f"the file system of {self.directory!r} is full ({free} bytes free)")
        return found

    def _written(self) -> Iterator[tuple[str, str]]:
        """The files SQLite writes, and the directory where it creates its -wal and -shm."""
        yield "the database file", self.path
        for suffix in ("-wal", "-shm"):
            if os.path.exists(self.path + suffix):
                yield f"{self.path + suffix!r}", self.path + suffix
        yield f"the directory {self.directory!r}", self.directory


def why_not_writable(path: str) -> str | None:
    """Why a database at ``path`` cannot be created or written, if its directory says so."""
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        return f"the directory {directory!r} does not exist"
    target = path if os.path.exists(path) else directory
    if not os.access(target, os.W_OK):
        name = "the database file" if target == path else f"the directory {directory!r}"
        return f"{name} is not writable{_read_only(target)}"
    return None


def free_bytes(directory: str) -> int | None:
    """Bytes free for an unprivileged writer on the file system of ``directory``."""
    try:
        stats = os.statvfs(directory)
    except (OSError, AttributeError):  # AttributeError: no statvfs (Windows)
        return None
    return stats.f_bavail * stats.f_frsize


def _identity(path: str) -> tuple[int, int]:
    stat = os.stat(path)
    return stat.st_dev, stat.st_ino


def _read_only(path: str) -> str:
    try:
        read_only = bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except (OSError, AttributeError):
        return ""
    return " (read-only file system)" if read_only else ""
