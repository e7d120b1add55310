"""A real headless browser for the tests of pages: Debian's chromium driven by Playwright.

``make test`` installs chromium and its fonts (tools/install-browser); the
browser is launched from /usr/bin/chromium (Playwright never downloads one)
with the network features that would call out switched off. Use the
``browser`` fixture (one per test module: Playwright's sync API keeps an event
loop running in this thread while it is open, and later tests that call
``asyncio.run`` must not find it) and open pages with
``new_page(browser)``; ``screenshot(page, name)`` keeps a PNG under
``tests/.screenshots/`` for a person to look at and returns its bytes.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = os.environ.get("CTXWINDOW_TEST_CHROMIUM", "/usr/bin/chromium")
FLAGS = [
    "--no-sandbox",  # CI runs as root
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",  # else it tries to reach Google's hosts
    "--disable-component-update",
    "--disable-sync",
]
SCREENSHOTS = Path(__file__).parents[1] / ".screenshots"


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Headless chromium for this test module (fails, not skips, when it is missing:
    ``make test`` installs it, so a missing browser is a broken set-up)."""
    from playwright.sync_api import sync_playwright

    if shutil.which(CHROMIUM) is None:
        pytest.fail(f"no chromium at {CHROMIUM}: run tools/install-browser (make test does)")
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        try:
            yield launched
        finally:
            launched.close()


def new_page(browser: Any, *, width: int = 1280, height: int = 900) -> Any:
    """A page in a fresh context (no cookies or storage from other tests); errors the page
    logs to its console or throws are collected in ``page.errors``."""
    context = browser.new_context(viewport={"width": width, "height": height})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
    page.errors = errors
    return page


def screenshot(page: Any, name: str, **options: Any) -> bytes:
    """A PNG of ``page`` (or pass ``full_page=True``), kept as tests/.screenshots/NAME.png."""
    SCREENSHOTS.mkdir(exist_ok=True)
    return bytes(page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), **options))
