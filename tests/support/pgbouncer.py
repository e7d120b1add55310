"""PgBouncer in transaction mode in front of the shared PostgreSQL, for the pooler tests.

``pgbouncer_url()`` starts one PgBouncer per test process (on a free port,
stopped at exit) and gives its URL with ``?pooler=transaction``: the URL the
"pgbouncer" store cases and their worker processes open. A test that stops or
restarts PgBouncer starts one of its own (``OwnPgBouncer``), never the shared one::

    with OwnPgBouncer() as bouncer:
        store = PostgresStore(bouncer.url)
        bouncer.restart()           # SIGTERM (immediate shutdown), then start again

The binary is ``pgbouncer`` on the PATH (or ``CTXWINDOW_TEST_PGBOUNCER``;
Debian's package, installed by ``tools/install-browser``). PgBouncer refuses
to run as root: then it runs as the ``postgres`` user (else ``nobody``), in a
temporary directory of its own. Without the binary or the shared PostgreSQL
the tests skip (fail with ``CTXWINDOW_REQUIRE_SERVERS=1``).
"""

from __future__ import annotations

import atexit
import functools
import getpass
import os
import pwd
import shutil
import signal
import tempfile
import urllib.parse
from pathlib import Path
from typing import Any

from tests.support.own_servers import _OwnServer
from tests.support.stores import POSTGRES_URL, no_server, server_problem

POOLER = "pooler=transaction"


def find_pgbouncer() -> str | None:
    return os.environ.get("CTXWINDOW_TEST_PGBOUNCER") or shutil.which("pgbouncer")


class OwnPgBouncer(_OwnServer):
    """A ``pgbouncer`` (``pool_mode = transaction``, ``auth_type = any``) in front of the
    PostgreSQL at ``upstream``, with at most ``pool_size`` server connections."""

    name = "pgbouncer"
    stop_signal = signal.SIGTERM  # immediate shutdown: clients are cut off

    def __init__(self, upstream: str = POSTGRES_URL, *, pool_size: int = 20) -> None:
        super().__init__()
        binary = find_pgbouncer()
        if binary is None:
            raise RuntimeError("no pgbouncer binary (apt-get install pgbouncer)")
        self.binary = binary
        self.upstream = urllib.parse.urlsplit(upstream)
        self._as_user: dict[str, Any] = {}
        if os.geteuid() == 0:  # PgBouncer refuses to run as root
            user = _unprivileged_user()
            self._as_user = {"user": user.pw_uid, "group": user.pw_gid}
        # Not under pytest's tmp_path: as root, its directories are closed to that user.
        self.directory = Path(tempfile.mkdtemp(prefix="ctxwindow-pgbouncer-"))
        self.config = self.directory / "pgbouncer.ini"
        self.config.write_text(self._config(pool_size))
        try:
            if self._as_user:
                os.chown(self.directory, self._as_user["user"], self._as_user["group"])
            self.start()
        except BaseException:
            self.close()
            raise

    @property
    def database(self) -> str:
        return self.upstream.path.lstrip("/") or "postgres"

    @property
    def url(self) -> str:
        """The store URL through this PgBouncer, in pooler mode."""
        return f"postgresql://127.0.0.1:{self.port}/{self.database}?{POOLER}"

    def command(self) -> list[str]:
        return [self.binary, str(self.config)]

    def popen_options(self) -> dict[str, Any]:
        return dict(self._as_user)

    def close(self) -> None:
        try:
            super().close()
        finally:
            shutil.rmtree(self.directory, ignore_errors=True)

    def _config(self, pool_size: int) -> str:
        server = {
            "host": self.upstream.hostname or "127.0.0.1",
            "port": self.upstream.port or 5432,
            "dbname": self.database,
            "user": urllib.parse.unquote(self.upstream.username or getpass.getuser()),
        }
        if self.upstream.password:
            server["password"] = urllib.parse.unquote(self.upstream.password)
        connect = " ".join(f"{key}={value}" for key, value in server.items())
        return f"""[databases]
{self.database} = {connect}

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {self.port}
unix_socket_dir =
auth_type = any
pool_mode = transaction
default_pool_size = {pool_size}
max_client_conn = 1000
logfile = {self.directory / "pgbouncer.log"}
"""


def _unprivileged_user() -> pwd.struct_passwd:
    try:
        return pwd.getpwnam("postgres")
    except KeyError:
        return pwd.getpwnam("nobody")


@functools.cache
def _problem() -> str | None:
    """Why the PgBouncer store cases cannot run here, or None."""
    if find_pgbouncer() is None:
        return "pgbouncer is not installed (apt-get install pgbouncer; tools/install-browser)"
    return server_problem("postgresql")


@functools.cache
def _shared() -> OwnPgBouncer:
    bouncer = OwnPgBouncer()
    atexit.register(bouncer.close)
    return bouncer


def pgbouncer_url() -> str:
    """The URL (``?pooler=transaction``) of this process's PgBouncer, started at the first call."""
    problem = _problem()
    if problem is None:
        try:
            return _shared().url
        except (RuntimeError, OSError) as exc:
            problem = f"PgBouncer did not start: {exc}"
    no_server(problem)
    raise AssertionError("unreachable")  # no_server skips or fails
