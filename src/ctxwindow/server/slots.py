"""How many protocol requests a process serves at once, and how many of them one tenant's.

Each request of the three protocol routes holds a slot from the moment it is
admitted until its answer is sent (a stream: until its last byte, or the
client has gone), upstream call included. The process has ``total`` slots,
and one tenant takes at most ``per_tenant`` of them, so a tenant holding a
hundred long streams cannot leave the others waiting for a connection that
never comes (httpx would answer them a pool timeout, a 504 from a healthy
upstream). A request with no slot free is answered at once: 429
``upstream_busy`` with ``Retry-After``, before anything is read from the
store or stored. The upstream connection pool is sized to ``total``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

from ctxwindow.server.errors import APIError

RETRY_AFTER = "1"  # seconds: long streams end all the time; a retry soon finds a slot


class Slots:
    """The slots of one process (one event loop: no lock is needed)."""

    def __init__(self, total: int, per_tenant: int) -> None:
        if not 0 < per_tenant <= total:
            raise ValueError(f"per_tenant must be from 1 to total ({total}), not {per_tenant}")
        self.total, self.per_tenant = total, per_tenant
        self.held: Counter[str] = Counter()
        self.busy = 0
        self.refused: Counter[str] = Counter()  # by reason: "process", "tenant"

    def take(self, tenant: str) -> Callable[[], None]:
        """A slot for ``tenant``, and the call that gives it back (once, however often it
        is called); a 429 when the process or the tenant has none free."""
        if self.busy >= self.total:
            self.refused["process"] += 1
            raise _busy(f"the service is answering {self.total} requests, its limit")
        if self.held[tenant] >= self.per_tenant:
            self.refused["tenant"] += 1
            raise _busy(f"this tenant has {self.per_tenant} requests under way, its share")
        self.busy += 1
        self.held[tenant] += 1
        given: list[bool] = []

        def release() -> None:
            if given:
                return
            given.append(True)
            self.busy -= 1
            self.held[tenant] -= 1
            if not self.held[tenant]:
                del self.held[tenant]

        return release


def _busy(why: str) -> APIError:
    return APIError(
        429, f"{why}; retry in a second", code="upstream_busy",
        headers={"Retry-After": RETRY_AFTER},
    )  # fmt: skip
