"""Tenants: an API key names a tenant; each tenant has its own session ids and rate limit."""

from __future__ import annotations

import time
from collections import defaultdict, deque
from collections.abc import Callable

from ctxwindow.server.errors import APIError

ANONYMOUS = "default"
MAX_SESSION_ID = 200


class Tenants:
    """``authenticate(header) -> tenant`` and a per-tenant sliding-window rate limit."""

    def __init__(
        self,
        api_keys: dict[str, str],
        per_minute: int = 0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.api_keys = dict(api_keys)
        self.per_minute = per_minute
        self.clock = clock
        self._seen: defaultdict[str, deque[float]] = defaultdict(deque)

    def authenticate(self, authorization: str | None) -> str:
        if not self.api_keys:
            return ANONYMOUS
        scheme, _, key = (authorization or "").partition(" ")
        tenant = self.api_keys.get(key.strip()) if scheme.lower() == "bearer" else None
        if tenant is None:
            raise APIError(401, "missing or invalid API key", code="invalid_api_key")
        return tenant

    def admit(self, tenant: str) -> None:
        """Count one request; a 429 when the tenant made ``per_minute`` in the last minute."""
        if not self.per_minute:
            return
        now = self.clock()
        seen = self._seen[tenant]
        while seen and seen[0] <= now - 60:
            seen.popleft()
        if len(seen) >= self.per_minute:
            raise APIError(
                429, f"rate limit of {self.per_minute} requests per minute reached",
                code="rate_limit_exceeded",
            )  # fmt: skip
        seen.append(now)


def scoped(tenant: str, session_id: str) -> str:
    """The store's session id: the tenant's name, a colon, the client's id."""
    if not session_id or len(session_id) > MAX_SESSION_ID:
        raise APIError(
            400, f"a session id must have 1 to {MAX_SESSION_ID} characters",
            code="invalid_session_id", param="session_id",
        )  # fmt: skip
    return f"{tenant}:{session_id}"
