"""Tenants: an API key names a tenant; each tenant has its own session ids and rate limit.

The rate limit is a sliding window of 60 seconds per tenant. ``LocalLimiter``
counts in this process; ``RedisLimiter`` counts in Redis, so every process of
the service shares one count (with a Redis store it is the default).
"""

from __future__ import annotations

import logging
import math
import time
import uuid
from collections import defaultdict, deque
from collections.abc import Callable
from typing import Any, Protocol

from ctxwindow.errors import StoreInputError
from ctxwindow.server.errors import APIError
from ctxwindow.stores.base import redact_url
from ctxwindow.stores.tenants import ANONYMOUS as ANONYMOUS
from ctxwindow.stores.tenants import MAX_SESSION_ID as MAX_SESSION_ID
from ctxwindow.stores.tenants import session_key

WINDOW = 60.0  # seconds

log = logging.getLogger("ctxwindow.server")


class Limiter(Protocol):
    async def admit(self, tenant: str) -> bool:
        """Count one request of ``tenant``; False if the window is already full."""

    async def retry_after(self, tenant: str) -> float:
        """Seconds until ``tenant``'s window has room again (after ``admit`` said no)."""


class LocalLimiter:
    """At most ``limit`` requests per tenant in any ``window`` seconds, in this process."""

    def __init__(
        self, limit: int, window: float = WINDOW, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.limit, self.window, self.clock = limit, window, clock
        self._seen: defaultdict[str, deque[float]] = defaultdict(deque)

    async def admit(self, tenant: str) -> bool:
        now = self.clock()
        seen = self._seen[tenant]
        while seen and seen[0] <= now - self.window:
            seen.popleft()
        if len(seen) >= self.limit:
            return False
        seen.append(now)
        return True

    async def retry_after(self, tenant: str) -> float:
        seen = self._seen[tenant]
        return seen[0] + self.window - self.clock() if seen else 0.0


# A sorted set per tenant: one member per admitted request, scored by the
# server's clock (one clock for every process and machine).
_ADMIT = """
local now = redis.call('TIME')
local ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
local window, limit = tonumber(ARGV[1]), tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ms - window)
if redis.call('ZCARD', KEYS[1]) >= limit then return 0 end
redis.call('ZADD', KEYS[1], ms, ARGV[3])
redis.call('PEXPIRE', KEYS[1], window)
return 1
"""


class RedisLimiter:
    """The same limit counted in Redis: shared by every process using ``url`` (one server,
    or a Redis Cluster: ``redis+cluster://…``).

    If Redis cannot be reached the request is admitted (and a warning logged):
    the limit protects the upstream, it must not take the service down.
    """

    def __init__(
        self, url: str, limit: int, window: float = WINDOW, prefix: str = "ctxwindow:rate"
    ) -> None:
        import redis.asyncio

        from ctxwindow.stores.redis.common import make_client, parse_url

        self.url, self.limit, self.window, self.prefix = url, limit, window, prefix
        # One key a tenant: a Redis Cluster takes it as it is.
        self._client: Any = make_client(redis.asyncio, parse_url(url), {"socket_timeout": 2.0})
        self._script = self._client.register_script(_ADMIT)

    async def admit(self, tenant: str) -> bool:
        import redis

        try:
            admitted = await self._script(
                keys=[f"{self.prefix}:{tenant}"],
                args=[int(self.window * 1000), self.limit, uuid.uuid4().hex],
            )
        except redis.RedisError as exc:
            log.warning("rate limit not checked, Redis at %s failed: %s", redact_url(self.url), exc)
            return True
        return bool(admitted)

    async def retry_after(self, tenant: str) -> float:
        import redis

        try:
            oldest = await self._client.zrange(f"{self.prefix}:{tenant}", 0, 0, withscores=True)
            seconds, micros = await self._client.time()
        except redis.RedisError:
            return self.window
        if not oldest:
            return 0.0
        return float(oldest[0][1]) / 1000 + self.window - (int(seconds) + int(micros) / 1e6)

    async def aclose(self) -> None:
        await self._client.aclose()


class Tenants:
    """``authenticate(header) -> tenant`` and the per-tenant rate limit (``limiter``): a 429
    says in ``Retry-After`` when the oldest request of the window leaves it."""

    def __init__(
        self, api_keys: dict[str, str], per_minute: int = 0, limiter: Limiter | None = None
    ) -> None:
        self.api_keys = dict(api_keys)
        self.per_minute = per_minute
        self.limiter = limiter if limiter is not None else LocalLimiter(per_minute)

    def authenticate(self, authorization: str | None) -> str:
        if not self.api_keys:
            return ANONYMOUS
        scheme, _, key = (authorization or "").partition(" ")
        tenant = self.api_keys.get(key.strip()) if scheme.lower() == "bearer" else None
        if tenant is None:
            raise APIError(401, "missing or invalid API key", code="invalid_api_key")
        return tenant

    async def admit(self, tenant: str) -> None:
        """Count one request; a 429 when the tenant made ``per_minute`` in the last minute."""
        if self.per_minute and not await self.limiter.admit(tenant):
            wait = math.ceil(max(await self.limiter.retry_after(tenant), 1.0))
            raise APIError(
                429, f"rate limit of {self.per_minute} requests per minute reached",
                code="rate_limit_exceeded", headers={"Retry-After": str(wait)},
            )  # fmt: skip


def scoped(tenant: str, session_id: str, *, param: str = "X-Session-Id") -> str:
    """The store's session id of the client's ``session_id``: ``tenant:id``, in NFC
    (``session_key``, which ``ctxwindow sessions`` uses too).

    A 400 naming ``param`` for an id the store could not keep, or the API's
    paths could not name (``/``, ``.``, ``..``).
    """
    try:
        return session_key(tenant, session_id)
    except StoreInputError as exc:
        raise APIError(400, str(exc), code="invalid_session_id", param=param) from None
