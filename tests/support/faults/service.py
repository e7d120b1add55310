"""The service as a real process (``python -m ctxwindow.server``) on a free loopback port.

Its settings come from ``CTXWINDOW_*`` environment variables, as in
production; only this process's own are passed (none of the caller's). A test
may kill it with SIGKILL and start another on the same store.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from tests.support.faults.servers import free_port

START_LIMIT = 30.0  # seconds for the service to answer /healthz


class ServiceProcess:
    def __init__(self, store: str, upstream: str, data_dir: Path, **settings: Any) -> None:
        self.store, self.upstream, self.data_dir = store, upstream, data_dir
        self.settings = settings
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None
        self.log = data_dir / f"service-{self.port}.log"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def environment(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("CTXWINDOW_")}
        env["CTXWINDOW_DATA_DIR"] = str(self.data_dir)
        env.update({f"CTXWINDOW_{k.upper()}": str(v) for k, v in self.settings.items()})
        return env

    def spawn(self) -> subprocess.Popen[bytes]:
        """Start the process without waiting for it to answer."""
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "ctxwindow.server", "--port", str(self.port),
                 "--store", self.store, "--upstream", self.upstream],
                env=self.environment(), stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip
        return self.process

    def start(self) -> None:
        process = self.spawn()
        deadline = time.monotonic() + START_LIMIT
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise RuntimeError(f"the service exited at start: {self.output()}")
            try:
                if httpx.get(f"{self.url}/healthz", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                time.sleep(0.05)
        raise TimeoutError(f"the service did not start in {START_LIMIT} s: {self.output()}")

    def start_or_exit(self) -> bool:
        """Start; True once it answers /healthz, False if it exited instead."""
        try:
            self.start()
        except RuntimeError:
            assert self.process is not None and self.process.poll() is not None
            return False
        return True

    def output(self) -> str:
        with contextlib.suppress(OSError):
            return self.log.read_text(errors="replace")
        return ""

    def kill9(self) -> None:
        assert self.process is not None
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=10)

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=10)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=10)


@contextmanager
def running_service(
    store: str, upstream: str, data_dir: Path, **settings: Any
) -> Iterator[ServiceProcess]:
    service = ServiceProcess(store, upstream, data_dir, **settings)
    service.start()
    try:
        yield service
    finally:
        service.stop()
