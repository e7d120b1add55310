"""The service as a real process (python -m ctxwindow.server) on a free port."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextmanager
def server(
    port: int, store: str, upstream: str, data_dir: Path | None = None, *flags: str
) -> Iterator[subprocess.Popen[bytes]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CTXWINDOW_")}
    if data_dir is not None:
        env["CTXWINDOW_DATA_DIR"] = str(data_dir)  # the archive goes there
    process = subprocess.Popen(
        [sys.executable, "-m", "ctxwindow.server", "--port", str(port), "--store", store,
         "--upstream", upstream, *flags],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True,
    )  # fmt: skip
    try:
        wait_ready(port, process)
        yield process
    finally:
        stop(process)
        if process.stderr is not None:
            process.stderr.close()


def stop(process: subprocess.Popen[bytes]) -> None:
    """Stop the service and its workers (its own process group): politely, then not."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=10)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)  # whatever is left of the group
    process.wait(timeout=10)


def wait_ready(port: int, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if process.poll() is not None:
            error = process.stderr.read().decode(errors="replace") if process.stderr else ""
            raise RuntimeError(f"server exited: {error}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            time.sleep(0.1)
    raise TimeoutError("server did not start within 30 s")
