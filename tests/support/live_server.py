"""An app served over real HTTP on a free 127.0.0.1 port, in a thread: for the browser.

``with serving(app) as base_url: ...`` runs uvicorn with the app's lifespan
(start-up and shutdown run as in production) and stops it at the end of the
block. A browser cannot talk to Starlette's in-process ``TestClient``.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import uvicorn

STARTUP_TIMEOUT = 30.0


@contextmanager
def serving(app: Any) -> Iterator[str]:
    """``app`` served at the returned base URL (``http://127.0.0.1:PORT``) for the block."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name="live-server", daemon=True)
    thread.start()
    give_up = time.monotonic() + STARTUP_TIMEOUT
    while not server.started:
        if not thread.is_alive() or time.monotonic() > give_up:
            raise RuntimeError(f"the app did not start on port {port}")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(STARTUP_TIMEOUT)
