"""The inspector (/ui) in a browser page, as its tests drive it."""

from __future__ import annotations

from typing import Any

from tests.support.browser import new_page


class Inspector:
    """A browser page on the inspector that lets only the live server's requests through."""

    def __init__(self, browser: Any, base_url: str, key: str | None = None) -> None:
        self.base_url = base_url
        self.page = new_page(browser)
        self.blocked: list[str] = []
        self.page.route("**/*", self._only_the_service)
        if key is not None:
            self.page.add_init_script(f"sessionStorage.setItem('ctxwindow.api-key', {key!r})")

    def _only_the_service(self, route: Any) -> None:
        if route.request.url.startswith(self.base_url + "/"):
            route.continue_()
        else:
            self.blocked.append(route.request.url)
            route.abort()

    def open(self, fragment: str = "") -> Any:
        self.page.goto(f"{self.base_url}/ui/{fragment}")
        return self.page

    def check(self, *expected_statuses: int) -> None:
        """No request left the service; no errors but the failed loads of
        ``expected_statuses`` (the browser logs a 401 or 404 answer to fetch as an error)."""
        assert self.blocked == []
        allowed = tuple(f"status of {status}" for status in expected_statuses)
        unexpected = [e for e in self.page.errors if not (allowed and any(a in e for a in allowed))]
        assert unexpected == []
