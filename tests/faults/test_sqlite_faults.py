"""SQLite faults under the service (a real process): read-only file, missing directory, full disk.

While the file cannot take writes, a turn is 503 with ``Retry-After`` (or, for
a file made read-only under open connections, acknowledged and kept) and
``/readyz`` is 503 (never 200 while writes fail, never a hang, never a
traceback); once the fault is mended every session takes a turn within
``RECOVERY`` (5 s) without a restart, and nothing acknowledged is lost. A
service that cannot open its store at start-up may instead exit, with a
non-zero status and a message naming the file, and no traceback.

- read-only: the database file made immutable (``chattr +i``, as root) or
  mode 0444 (others), before the service starts or while it serves;
- missing: the store's directory does not exist at start-up, or is deleted
  while the service runs;
- full: the store on a 4 MB tmpfs filled up by another file (mounting needs
  root: skipped, saying so, otherwise).

Budget: ~10 s a scenario on 2 cores (mostly the service's start), ~50 s in all.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.support.faults.ledger import RECOVERY, Ledger, assert_ready, assert_unavailable
from tests.support.faults.service import ServiceProcess, running_service
from tests.support.faults.upstream import FaultyUpstream

pytestmark = pytest.mark.servers

BIG = "Parcel manifest: " + "包裹 box 📦 " * 6000  # ~60k characters, under the 100k limit


def store_url(path: Path) -> str:
    return f"sqlite:///{path}"


def assert_exited_cleanly(service: ServiceProcess, path: Path) -> None:
    """A service that would not start: a non-zero status, the file named, no traceback."""
    assert service.process is not None and service.process.returncode != 0
    output = service.output()
    assert "Traceback" not in output, output[-2000:]
    assert str(path.parent) in output, f"the message does not name {path}: {output[-1000:]}"


def acknowledge_some(ledger: Ledger, sessions: tuple[str, ...] = ("s1", "s2")) -> None:
    for sid in sessions:
        response = ledger.turn(sid, f"{sid}: Zürich → 東京, parcel 7 🚚")
        assert response.status_code == 200, response.text[:400]


def assert_refused_while_broken(ledger: Ledger, text: str = "while broken") -> None:
    assert_unavailable(ledger.turn("s1", f"s1: {text}"))
    assert_ready(ledger, False)


def read_only(path: Path) -> None:
    """Make ``path`` unwritable, also for root (immutable); skip if this machine cannot."""
    if os.geteuid() != 0:
        path.chmod(0o444)
        return
    chattr = shutil.which("chattr")
    if chattr is None:
        pytest.skip("running as root, and chattr (e2fsprogs) is missing to make a file immutable")
    done = subprocess.run([chattr, "+i", str(path)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"this file system cannot make a file immutable: {done.stderr.decode()}")


def writable(path: Path) -> None:
    if os.geteuid() == 0:
        subprocess.run(["chattr", "-i", str(path)], check=True)
    else:
        path.chmod(0o644)


def test_read_only_database_file(tmp_path: Path, upstream: FaultyUpstream) -> None:
    """Started on a read-only file: 503s and /readyz 503; writable again: usable in 5 s."""
    db = tmp_path / "store" / "sessions.db"
    db.parent.mkdir()
    with running_service(store_url(db), upstream.base_url, tmp_path) as first:
        ledger = Ledger(first.url)
        acknowledge_some(ledger)
    read_only(db)
    try:
        service = ServiceProcess(store_url(db), upstream.base_url, tmp_path)
        if not service.start_or_exit():
            assert_exited_cleanly(service, db)
            return
        try:
            ledger.base_url = service.url
            assert_refused_while_broken(ledger)
            writable(db)
            mended = time.monotonic()
            ledger.usable_within(["s1", "s2"], mended, "read-only")
            assert_ready(ledger, True, within=RECOVERY)
            ledger.assert_kept()
        finally:
            service.stop()
    finally:
        with contextlib.suppress(subprocess.CalledProcessError, OSError):
            writable(db)


def test_database_file_made_read_only_while_serving(
    tmp_path: Path, upstream: FaultyUpstream
) -> None:
    """Made read-only under a running service: /readyz 503; a turn is 503 with Retry-After,
    or acknowledged and then kept (SQLite's open connections may still write to their
    WAL file). Writable again: usable within 5 s, and after a restart nothing acknowledged
    is lost."""
    db = tmp_path / "store" / "sessions.db"
    db.parent.mkdir()
    with running_service(store_url(db), upstream.base_url, tmp_path) as service:
        ledger = Ledger(service.url)
        acknowledge_some(ledger)
        read_only(db)
        try:
            response = ledger.turn("s1", "s1: while read-only")
            if response.status_code != 200:
                assert_unavailable(response)
            assert_ready(ledger, False)
        finally:
            writable(db)
        mended = time.monotonic()
        ledger.usable_within(["s1", "s2"], mended, "read-only")
        assert_ready(ledger, True, within=RECOVERY)
        ledger.assert_kept()
    with running_service(store_url(db), upstream.base_url, tmp_path) as again:
        ledger.base_url = again.url
        ledger.assert_kept()


def test_missing_directory_at_start(tmp_path: Path, upstream: FaultyUpstream) -> None:
    """No directory for the store at start-up: a clean exit, or 503s until it exists."""
    db = tmp_path / "not-yet" / "sessions.db"
    service = ServiceProcess(store_url(db), upstream.base_url, tmp_path)
    if not service.start_or_exit():
        assert_exited_cleanly(service, db)
        return
    try:
        ledger = Ledger(service.url)
        assert_refused_while_broken(ledger)
        db.parent.mkdir()
        mended = time.monotonic()
        ledger.usable_within(["s1", "s2"], mended, "mkdir")
        assert_ready(ledger, True, within=RECOVERY)
        ledger.assert_kept()
    finally:
        service.stop()


def test_directory_deleted_while_serving(tmp_path: Path, upstream: FaultyUpstream) -> None:
    """Writes into a deleted file are never acknowledged: 503 and /readyz 503 meanwhile.

    Once the directory is back the service either takes turns again (and keeps
    them) or keeps saying 503 on both (a restart reopens the store): /readyz
    never says ready while turns fail.
    """
    db = tmp_path / "store" / "sessions.db"
    db.parent.mkdir()
    with running_service(store_url(db), upstream.base_url, tmp_path) as service:
        ledger = Ledger(service.url)
        acknowledge_some(ledger)
        shutil.rmtree(db.parent)
        assert_refused_while_broken(ledger)
        ledger.acknowledged.clear()  # what was acknowledged went with the directory
        db.parent.mkdir()
        response = ledger.turn("s3", "s3: after the directory came back")
        if response.status_code == 200:
            assert_ready(ledger, True, within=RECOVERY)
            ledger.assert_kept()
        else:
            assert_unavailable(response)
            assert_ready(ledger, False)


@contextmanager
def small_disk(where: Path, size: str = "4m") -> Iterator[Path]:
    """A tmpfs of ``size`` mounted at ``where`` (root only: skip otherwise)."""
    if os.geteuid() != 0:
        pytest.skip("a full disk is a small tmpfs, and mounting one needs root")
    where.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)], capture_output=True
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def fill(disk: Path) -> Path:
    """Write a file until the disk is full; the file (delete it to make room).

    Unbuffered: a buffered file that took part of its last block would try the
    rest again when closed, and fail there.
    """
    filler = disk / "filler"
    block = b"\0" * 65536
    with open(filler, "wb", buffering=0) as out:
        try:
            while True:
                out.write(block)
        except OSError as exc:
            assert exc.errno == errno.ENOSPC, exc
    return filler


def test_disk_full(tmp_path: Path, upstream: FaultyUpstream) -> None:
    """A full disk: 503s and /readyz 503; room again: usable within 5 s, nothing lost."""
    with small_disk(tmp_path / "disk") as disk:
        db = disk / "sessions.db"
        with running_service(store_url(db), upstream.base_url, tmp_path) as service:
            ledger = Ledger(service.url)
            acknowledge_some(ledger)
            filler = fill(disk)
            assert_refused_while_broken(ledger, BIG)
            filler.unlink()
            mended = time.monotonic()
            ledger.usable_within(["s1", "s2"], mended, "disk full")
            assert_ready(ledger, True, within=RECOVERY)
            ledger.assert_kept()
