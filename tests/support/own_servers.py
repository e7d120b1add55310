"""Redis and PostgreSQL servers of a test's own, to stop, stall and restart at will.

The shared servers (``CTXWINDOW_TEST_REDIS_URL``, ``CTXWINDOW_TEST_POSTGRES_URL``)
are never stopped or stalled: a fault test starts its own instance on a free
port, in a temporary directory, as its own process group (so that SIGSTOP
stalls every process of it), and ``close()`` ends it::

    with OwnRedis(tmp_path) as server:
        store = RedisStore(server.url)
        with server.stalled():      # SIGSTOP … SIGCONT
            ...
        server.restart()            # SIGTERM (the server saves its RDB), then start again

Binaries: ``redis-server`` on the PATH (or ``CTXWINDOW_TEST_REDIS_SERVER``);
PostgreSQL's ``initdb`` and ``postgres`` from ``CTXWINDOW_TEST_PG_BIN``, else
the newest ``/usr/lib/postgresql/*/bin``, else the PATH. PostgreSQL refuses to
run as root: then it runs as the ``postgres`` user. ``find_redis_server`` and
``find_pg_bin`` return None when there is none (the tests then skip).
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
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import Any

START_TIMEOUT = 15.0  # seconds a server may take to accept connections


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def find_redis_server() -> str | None:
    return os.environ.get("CTXWINDOW_TEST_REDIS_SERVER") or shutil.which("redis-server")


def find_pg_bin() -> str | None:
    """The directory holding ``initdb`` and ``postgres``, or None."""
    candidates = [os.environ.get("CTXWINDOW_TEST_PG_BIN", "")]
    candidates += sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=_version, reverse=True)
    candidates.append(os.path.dirname(shutil.which("initdb") or ""))
    for directory in candidates:
        if directory and all(os.access(Path(directory, n), os.X_OK) for n in _PG_NAMES):
            return directory
    return None


_PG_NAMES = ("initdb", "postgres")


def _version(path: str) -> int:
    digits = Path(path).parent.name
    return int(digits) if digits.isdigit() else 0


def _wait_until(ready: Any, what: str, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    while not ready():
        if process.poll() is not None:
            raise RuntimeError(f"{what} exited with {process.returncode} while starting")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} did not accept connections within {START_TIMEOUT} s")
        time.sleep(0.02)


def _accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def _children(parent: int) -> list[int]:
    """The processes whose parent is ``parent`` (Linux ``/proc``)."""
    found = []
    for stat in glob.glob("/proc/[0-9]*/stat"):
        with contextlib.suppress(OSError):
            fields = Path(stat).read_text().rpartition(")")[2].split()
            if int(fields[1]) == parent:
                found.append(int(Path(stat).parent.name))
    return found


class _OwnServer:
    """A server process of the test's own: start, stop, kill, stall, resume, restart."""

    name = "server"
    stop_signal = signal.SIGTERM

    def __init__(self) -> None:
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None
        self.stalled_now = False

    def command(self) -> list[str]:
        raise NotImplementedError

    def ready(self) -> bool:
        return _accepts(self.port)

    def popen_options(self) -> dict[str, Any]:
        return {}

    def start(self) -> None:
        assert self.process is None, f"the {self.name} is already running"
        self.process = subprocess.Popen(
            self.command(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # its own process group: SIGSTOP reaches every process
            **self.popen_options(),
        )
        _wait_until(self.ready, f"the {self.name} on port {self.port}", self.process)

    def stop(self) -> None:
        """A clean shutdown (``stop_signal``), waited for."""
        self._end(self.stop_signal)

    def kill(self) -> None:
        self._end(signal.SIGKILL)

    def restart(self) -> None:
        self.stop()
        self.start()

    def stall(self) -> None:
        """SIGSTOP every process of the server: connections stay open, nothing answers."""
        self._signal(signal.SIGSTOP)
        self.stalled_now = True

    def resume(self) -> None:
        self._signal(signal.SIGCONT)
        self.stalled_now = False

    @contextlib.contextmanager
    def stalled(self) -> Iterator[None]:
        self.stall()
        try:
            yield
        finally:
            self.resume()

    def close(self) -> None:
        if self.process is not None:
            self.kill()

    def __enter__(self) -> _OwnServer:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def _signal(self, signum: int) -> None:
        assert self.process is not None, f"the {self.name} is not running"
        os.killpg(self.process.pid, signum)
        for pid in _children(self.process.pid):  # PostgreSQL's backends have sessions of their own
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signum)

    def _end(self, signum: int) -> None:
        assert self.process is not None, f"the {self.name} is not running"
        if self.stalled_now:
            self.resume()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signum)
        try:
            self.process.wait(timeout=START_TIMEOUT)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
        with contextlib.suppress(ProcessLookupError):  # children left behind by SIGKILL
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process = None


class OwnRedis(_OwnServer):
    """A ``redis-server`` in ``directory``; ``save=True`` keeps an RDB across restarts."""

    name = "redis-server"
    stop_signal = signal.SIGTERM  # a shutdown that saves the RDB (with the leases in it)

    def __init__(self, directory: Path, *, save: bool = True, binary: str | None = None) -> None:
        super().__init__()
        self.directory = directory
        self.save = save
        self.binary = binary or find_redis_server() or "redis-server"
        directory.mkdir(parents=True, exist_ok=True)
        self.start()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def command(self) -> list[str]:
        return [
            self.binary, "--port", str(self.port), "--bind", "127.0.0.1",
            "--dir", str(self.directory), "--save", "3600 1" if self.save else "",
            "--appendonly", "no", "--protected-mode", "no", "--daemonize", "no",
        ]  # fmt: skip

    def ready(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as sock:
                sock.sendall(b"PING\r\n")
                return sock.recv(16).startswith(b"+PONG")
        except OSError:
            return False


class OwnPostgres(_OwnServer):
    """A PostgreSQL cluster of its own (``initdb`` in a new temporary directory, removed by
    ``close()``), trust auth, database ``test``."""

    name = "postgres"
    stop_signal = signal.SIGINT  # "fast" shutdown: ends the sessions (SIGTERM waits for them)

    def __init__(self, *, bin_dir: str | None = None) -> None:
        super().__init__()
        found = bin_dir or find_pg_bin()
        if found is None:
            raise RuntimeError("no PostgreSQL binaries (set CTXWINDOW_TEST_PG_BIN)")
        self.bin_dir = found
        self._as_user: dict[str, Any] = {}
        if os.geteuid() == 0:  # PostgreSQL refuses to run as root
            user = pwd.getpwnam("postgres")
            self._as_user = {"user": user.pw_uid, "group": user.pw_gid}
        # Not under pytest's tmp_path: as root, its directories are closed to the postgres user.
        self.directory = Path(tempfile.mkdtemp(prefix="ctxwindow-pg-"))
        self.data = self.directory / "data"
        try:
            if self._as_user:
                os.chown(self.directory, self._as_user["user"], self._as_user["group"])
            self._initdb()
            self.start()
            self._create_database()
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        try:
            super().close()
        finally:
            shutil.rmtree(self.directory, ignore_errors=True)

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/test"

    def command(self) -> list[str]:
        return [
            str(Path(self.bin_dir, "postgres")), "-D", str(self.data), "-p", str(self.port),
            "-c", "listen_addresses=127.0.0.1", "-c", f"unix_socket_directories={self.directory}",
            "-c", "fsync=off", "-c", "max_connections=40", "-c", "shared_buffers=16MB",
        ]  # fmt: skip

    def popen_options(self) -> dict[str, Any]:
        return dict(self._as_user)

    def ready(self) -> bool:
        import psycopg

        try:
            psycopg.connect(self._admin_url, connect_timeout=2).close()
        except psycopg.Error:
            return False
        return True

    @property
    def _admin_url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _initdb(self) -> None:
        done = subprocess.run(
            [str(Path(self.bin_dir, "initdb")), "-D", str(self.data), "-A", "trust",
             "-U", "postgres", "-E", "UTF8", "--no-sync", "--locale=C"],
            check=False, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            **self._as_user,
        )  # fmt: skip
        if done.returncode != 0:
            raise RuntimeError(f"initdb failed: {done.stderr.decode(errors='replace')}")

    def _create_database(self) -> None:
        import psycopg

        with psycopg.connect(self._admin_url, autocommit=True) as conn:
            exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = 'test'").fetchone()
            if exists is None:
                conn.execute("CREATE DATABASE test")
