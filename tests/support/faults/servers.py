"""Private Redis and PostgreSQL servers that a test may stop, stall and restart.

Each lives in a temporary directory of its own and listens on a free port of
127.0.0.1, never on the shared servers' ports; it runs in a process group of
its own, and ``stall()`` (SIGSTOP) freezes every process it started (PostgreSQL's
backends along with its postmaster). Without the binaries a test skips, saying why, unless
``CTXWINDOW_REQUIRE_SERVERS=1`` (CI), which makes it a failure.

PostgreSQL refuses to run as root: under root the server runs as the
``postgres`` account (else ``nobody``), in directories given to that account.
``initdb`` runs once per test session; each server starts from a copy.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any, NoReturn

import pytest

REQUIRE_SERVERS = os.environ.get("CTXWINDOW_REQUIRE_SERVERS") == "1"
START_LIMIT = 30.0  # seconds a server may take to answer after it was started


def no_server(reason: str) -> NoReturn:
    if REQUIRE_SERVERS:
        pytest.fail(f"{reason} (CTXWINDOW_REQUIRE_SERVERS=1)")
    pytest.skip(reason)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def find_binary(name: str) -> str | None:
    """``name`` on PATH, else in Debian's /usr/lib/postgresql/<version>/bin."""
    found = shutil.which(name)
    if found is None:
        candidates = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
        found = candidates[-1] if candidates else None
    return found


def descendants(pid: int) -> list[int]:
    """The processes below ``pid``, from /proc (children before grandchildren)."""
    parents: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError):
                stat = Path(f"/proc/{entry}/stat").read_text()
                parent = int(stat.rsplit(")", 1)[1].split()[1])
                parents.setdefault(parent, []).append(int(entry))
    found, frontier = [], [pid]
    while frontier:
        children = [c for p in frontier for c in parents.get(p, [])]
        found += children
        frontier = children
    return found


def answers(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except OSError:
        return False
    return True


class PrivateServer:
    """A server process in its own group: ``start``, ``stop``, ``kill``, ``stall``, ``resume``."""

    stop_signal = signal.SIGTERM

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None
        self.stalled = False

    def command(self) -> list[str]:
        raise NotImplementedError

    def popen_options(self) -> dict[str, Any]:
        return {}

    def ready(self) -> bool:
        raise NotImplementedError

    def start(self) -> None:
        log = open(self.directory / "server.log", "ab")  # noqa: SIM115 (the process keeps it)
        self.process = subprocess.Popen(
            self.command(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            **self.popen_options(),
        )  # fmt: skip
        log.close()
        deadline = time.monotonic() + START_LIMIT
        while not self.ready():
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{type(self).__name__} did not start: {self.log_tail()}")
            time.sleep(0.05)

    def send(self, signum: int) -> None:
        """``signum`` to the server and every process it started (PostgreSQL's backends put
        themselves in process groups of their own, so a group signal would miss them)."""
        if self.process is None or self.process.poll() is not None:
            return
        for pid in [self.process.pid, *descendants(self.process.pid)]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signum)

    def stop(self) -> None:
        """A clean shutdown (what an operator's restart does)."""
        self.resume()
        self.send(self.stop_signal)
        self._reap()

    def kill(self) -> None:
        """A crash: SIGKILL to the whole group."""
        self.resume()
        self.send(signal.SIGKILL)
        self._reap()

    def stall(self) -> None:
        self.send(signal.SIGSTOP)
        self.stalled = True

    def resume(self) -> None:
        if self.stalled:
            self.send(signal.SIGCONT)
            self.stalled = False

    def close(self) -> None:
        self.kill()

    def _reap(self) -> None:
        if self.process is None:
            return
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.send(signal.SIGKILL)
            self.process.wait(timeout=10)
        while answers(self.port):  # children of the group may still hold the port
            time.sleep(0.05)

    def log_tail(self) -> str:
        with contextlib.suppress(OSError):
            return (self.directory / "server.log").read_text(errors="replace")[-2000:]
        return ""


class PrivateRedis(PrivateServer):
    """``redis-server`` with an append-only file fsynced at every write: an acknowledged
    write survives a stop or a crash, as it must for "nothing acknowledged lost"."""

    binary = find_binary("redis-server")

    def command(self) -> list[str]:
        assert self.binary is not None
        return [
            self.binary, "--port", str(self.port), "--bind", "127.0.0.1",
            "--dir", str(self.directory), "--appendonly", "yes", "--appendfsync", "always",
            "--save", "", "--protected-mode", "no", "--daemonize", "no",
        ]  # fmt: skip

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def ready(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as sock:
                sock.sendall(b"PING\r\n")
                return sock.recv(64).startswith(b"+PONG")
        except OSError:
            return False


def _postgres_account() -> pwd.struct_passwd | None:
    """The account PostgreSQL runs as when the tests run as root."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        with contextlib.suppress(KeyError):
            return pwd.getpwnam(name)
    return None


def _give(path: Path, account: pwd.struct_passwd | None) -> None:
    if account is None:
        return
    for root, dirs, files in os.walk(path):
        os.chown(root, account.pw_uid, account.pw_gid)
        for name in dirs + files:
            os.lchown(os.path.join(root, name), account.pw_uid, account.pw_gid)


class PrivatePostgres(PrivateServer):
    """``postgres`` on a copy of a cluster made by ``initdb`` (trust authentication)."""

    binary = find_binary("postgres")
    stop_signal = signal.SIGINT  # "fast" shutdown: roll back clients, then exit cleanly

    def __init__(self, directory: Path, template: Path) -> None:
        super().__init__(directory)
        self.account = _postgres_account()
        self.data = directory / "data"
        shutil.copytree(template, self.data, symlinks=True)
        _give(directory, self.account)
        os.chmod(self.data, 0o700)

    def command(self) -> list[str]:
        assert self.binary is not None
        return [
            self.binary, "-D", str(self.data), "-p", str(self.port), "-h", "127.0.0.1",
            "-k", str(self.directory), "-c", "fsync=off", "-c", "max_connections=50",
        ]  # fmt: skip

    def popen_options(self) -> dict[str, Any]:
        if self.account is None:
            return {}
        return {"user": self.account.pw_uid, "group": self.account.pw_gid, "extra_groups": []}

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def ready(self) -> bool:
        import psycopg

        try:
            psycopg.connect(self.url, connect_timeout=2).close()
        except psycopg.Error:
            return False
        return True


def private_directory(prefix: str) -> Path:
    """A fresh directory under the system's temporary directory, reachable by the
    PostgreSQL account (pytest's ``tmp_path`` is private to the user running the tests)."""
    path = Path(tempfile.mkdtemp(prefix=prefix))
    os.chmod(path, 0o755)
    return path


def make_postgres_template() -> Path:
    """A cluster made by ``initdb`` once, copied by every ``PrivatePostgres``."""
    initdb = find_binary("initdb")
    if initdb is None or PrivatePostgres.binary is None:
        no_server("PostgreSQL's initdb and postgres binaries are not installed")
    account = _postgres_account()
    if os.geteuid() == 0 and account is None:
        no_server("running as root with no 'postgres' or 'nobody' account for PostgreSQL")
    home = private_directory("ctxwindow-pg-template-")
    _give(home, account)
    options: dict[str, Any] = {}
    if account is not None:
        options = {"user": account.pw_uid, "group": account.pw_gid, "extra_groups": []}
    done = subprocess.run(
        [initdb, "-D", str(home / "data"), "-U", "postgres", "-A", "trust", "-E", "UTF8",
         "--locale=C", "--no-sync"],
        capture_output=True, timeout=120, **options,
    )  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"initdb failed: {bytes(done.stderr).decode(errors='replace')}")
    return home / "data"
