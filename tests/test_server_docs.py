"""``/docs`` and ``/redoc`` work offline: every asset comes from the service itself.

The pages are opened in headless chromium (``tests/support/browser.py``) with every
request that does not go to 127.0.0.1 blocked and recorded: none may be
attempted, and the UIs must have rendered the API's operations.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from ctxwindow.server import Settings, create_app
from ctxwindow.server.docs import ASSETS

from .support.browser import new_page, screenshot
from .support.live_server import serving

CDN_HOSTS = ("cdn.jsdelivr.net", "fonts.googleapis.com", "fastapi.tiangolo.com", "unpkg.com")


@pytest.fixture
def app() -> FastAPI:  # one per test: its lifespan closes its store
    return create_app(Settings(store="memory://"))


def offline_page(browser: Any) -> tuple[Any, list[str]]:
    """A page whose requests to anywhere but 127.0.0.1 are refused, and the list of them."""
    page = new_page(browser)
    outside: list[str] = []

    def only_here(route: Any) -> None:
        if urlsplit(route.request.url).hostname == "127.0.0.1":
            route.continue_()
        else:
            outside.append(route.request.url)
            route.abort()

    page.route("**/*", only_here)
    return page, outside


def test_the_pages_name_no_cdn_and_their_assets_are_served(app: FastAPI) -> None:
    with TestClient(app) as client:
        check_pages_and_assets(client)


def check_pages_and_assets(client: TestClient) -> None:
    for path in ("/docs", "/redoc"):
        page = client.get(path)
        assert page.status_code == 200
        assert not any(host in page.text for host in CDN_HOSTS), path
        assert f'{ASSETS}/favicon.png"' in page.text
        assert "default-src 'self'" in page.headers["content-security-policy"]
    for asset in ("swagger-ui-bundle.js", "swagger-ui.css", "redoc.standalone.js", "favicon.png"):
        answer = client.get(f"{ASSETS}/{asset}")
        assert answer.status_code == 200 and len(answer.content) > 1000, asset


def test_the_docs_pages_are_not_in_the_openapi_document(app: FastAPI) -> None:
    with TestClient(app) as client:
        paths = client.get("/openapi.json").json()["paths"]
    assert not any(p.startswith(("/docs", "/redoc")) for p in paths)


def test_swagger_ui_renders_the_operations_without_internet(browser: Any, app: FastAPI) -> None:
    page, outside = offline_page(browser)
    with serving(app) as base:
        page.goto(f"{base}/docs")
        chat = page.locator('.opblock-post .opblock-summary-path[data-path="/v1/chat/completions"]')
        chat.wait_for(timeout=20_000)
        paths = page.locator(".opblock-summary-path").evaluate_all(
            "elements => elements.map(e => e.getAttribute('data-path'))"
        )
        screenshot(page, "docs-swagger-offline")
    assert outside == []
    assert {"/v1/responses", "/v1/messages", "/healthz"} <= set(paths)
    assert page.errors == []


def test_redoc_renders_the_operations_without_internet(browser: Any, app: FastAPI) -> None:
    page, outside = offline_page(browser)
    with serving(app) as base:
        page.goto(f"{base}/redoc")
        operation = page.locator(
            '[data-section-id="operation/chat_completions_v1_chat_completions_post"]'
        )
        operation.wait_for(timeout=20_000)
        text = operation.inner_text()
        screenshot(page, "docs-redoc-offline")
    assert outside == []
    assert "/v1/chat/completions" in text and "X-Session-Id" in text
    # The one thing ReDoc would fetch from elsewhere, its attribution logo, is refused by
    # the page's policy before any request; nothing else goes wrong.
    assert all("cdn.redoc.ly" in error for error in page.errors), page.errors
