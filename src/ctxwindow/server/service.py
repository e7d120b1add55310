"""The service's state: the store, a context manager per model (one window cache), upstream…"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import httpx

from ctxwindow.context import ArchiveLike, AsyncContextManager, HotSessions, Policy, hybrid_policy
from ctxwindow.context.policy import LOW_WATER
from ctxwindow.errors import CtxWindowError
from ctxwindow.messages import Entry
from ctxwindow.policies import TokenWindow
from ctxwindow.redact import RedactFn
from ctxwindow.server.calibration import Calibration, calibration_key
from ctxwindow.server.errors import from_library
from ctxwindow.server.listing import Listing
from ctxwindow.server.metrics import Metrics
from ctxwindow.server.settings import Settings
from ctxwindow.server.slots import Slots
from ctxwindow.server.streams import Streams
from ctxwindow.server.tenants import Limiter, LocalLimiter, RedisLimiter, Tenants
from ctxwindow.server.upstream import Upstream
from ctxwindow.stores.base import AsyncStore
from ctxwindow.stores.url import open_async_store
from ctxwindow.tokens.chat import ChatTokenizer
from ctxwindow.tokens.models import ModelInfo

REBUDGET = 0.02  # how far calibration moves a budget before the windows follow


class Service:
    """What the routes share. Sessions of every model live in the one store."""

    def __init__(
        self,
        settings: Settings,
        *,
        store: AsyncStore | None = None,
        upstream_transport: httpx.AsyncBaseTransport | None = None,
        redactor: RedactFn | None = None,
        archive: ArchiveLike | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings = settings
        self.store = store if store is not None else open_async_store(settings.store_url())
        self.redactor = redactor
        self.archive = archive
        queued = None if archive is None else lambda: sum(m.queued for m in self.managers())
        self.metrics = Metrics(redactor, queued, settings.model_registry)
        self.upstream = Upstream(settings, self.metrics, upstream_transport)
        self.slots = Slots(settings.max_upstream_calls, settings.upstream_calls_per_tenant())
        self.metrics.watch_slots(self.slots)
        self.streams = Streams()  # streamed replies still finishing, waited for in ``aclose``
        self.tenants = Tenants(
            settings.api_keys, settings.rate_limit_per_minute, _limiter(settings, clock)
        )
        self.models = settings.model_registry
        self.calibration = Calibration(self.store, self.metrics.count_ratio)
        key = settings.listed_ids_key
        secret = None if key is None else key.get_secret_value().encode()
        self.listing = Listing(settings.listed_ids, secret, redactor)
        self._managers: dict[str, tuple[AsyncContextManager, float]] = {}
        self._retired: list[AsyncContextManager] = []  # replaced by a recalibrated one
        self._sessions = HotSessions()  # one window a session, whichever model asks
        self._policy = window_policy(settings)

    def model(self, model: str) -> ModelInfo:
        """The entry of ``model`` (a 400 ``model_not_found`` for a name nothing matches)."""
        try:
            return self.models.resolve(model)
        except CtxWindowError as exc:
            raise from_library(exc) from exc

    def tokenizer(self, model: str) -> ChatTokenizer:
        return self.models.tokenizer_of(self.model(model))

    def budget(self, model: str, reply: int = 0) -> int:
        """The prompt budget of ``model`` in ctxwindow's counts: the settings' budget, for an
        estimated model scaled by what calibration learnt (see ``calibration.py``)."""
        info = self.model(model)
        budget = self.settings.budget_for(model, reply)
        return int(budget * self._factor(info, model))

    def _factor(self, info: ModelInfo, model: str) -> float:
        if not (self.settings.calibrate and info.estimated):
            return 1.0
        return self.calibration.factor(calibration_key(info, model))

    def manager(self, model: str) -> AsyncContextManager:
        """The manager of ``model``; all share one window cache (a session keeps one window).

        An estimated model's manager is made again when calibration moved its
        budget by more than ``REBUDGET`` (its sessions' windows reload once)."""
        made = self._managers.get(model)
        info = self.model(model)
        factor = self._factor(info, model)
        if made is not None and abs(made[1] - factor) <= REBUDGET * made[1]:
            return made[0]
        manager = AsyncContextManager(
            self.store, model, policy=self._policy, archive=self.archive,
            redactor=self.redactor, budget=self.budget(model), reserve_output=0,
            lock_timeout=self.settings.lock_timeout, hot_sessions=self._sessions,
            redact="context" if self.settings.redact == "upstream" else "storage",
            on_event=self.metrics.event, search_batches=1, models=self.models,
            prompt_cache=self.settings.prompt_cache,
        )  # fmt: skip
        if made is not None:
            self._retired.append(made[0])
        self._managers[model] = (manager, factor)
        return manager

    async def observe_usage(self, model: str, ours: int, usage: Any) -> None:
        """Calibrate with an upstream reply's ``usage`` (if it has one) for ``ours`` counted."""
        if isinstance(usage, dict):
            info = self.model(model)
            prompt = usage.get("prompt_tokens")
            await self.calibration.observe(info, model, ours, prompt)
            details = usage.get("prompt_tokens_details")
            cached = _count(details.get("cached_tokens") if isinstance(details, dict) else 0)
            billed = _count(prompt)
            if billed is not None:
                self.metrics.usage(info, model, billed, cached or 0)

    def managers(self) -> list[AsyncContextManager]:
        return [*self._retired, *(m for m, _ in self._managers.values())]

    async def session_size(self, session_id: str) -> int:
        """Entries stored so far (sequence numbers start at 1 and have no gaps)."""
        last = await self.store.tail(session_id, 1)
        return last[0].seq if last else 0

    async def aclose(self) -> None:
        """Archive the turns still queued (else they wait for their session's next load),
        but for the stored backlogs of cold loads (their next load queues them again: a
        long one would hold the shutdown for minutes), then close the limiter, the upstream
        client and the store; first, streams still storing their reply or releasing their
        session finish."""
        try:
            await self.streams.finished()
            for manager in self.managers():
                await manager.drain(backlogs=False)
            await self.calibration.save()
        finally:  # whatever failed above, nothing is left open
            try:
                if isinstance(self.tenants.limiter, RedisLimiter):
                    await self.tenants.limiter.aclose()
                await self.upstream.aclose()
            finally:
                await self.store.close()


def _count(value: Any) -> int | None:
    """A count of tokens from an upstream's usage, or None."""
    ok = isinstance(value, int) and not isinstance(value, bool) and value >= 0
    return value if ok else None


def window_policy(settings: Settings) -> Policy:
    """The windows ``settings`` ask for (see ``Settings.policy``, ``compressor``, ``summary``)."""
    cache = settings.prompt_cache
    if settings.policy == "token_window":
        return lambda budget, tokenizer: TokenWindow(
            budget, tokenizer.model, tokenizer=tokenizer, oversize="truncate",
            low_water=LOW_WATER if cache else None,
        )  # fmt: skip
    return hybrid_policy(
        summary=settings.summary == "extractive", compressor=settings.compressor, cache=cache
    )


def _limiter(settings: Settings, clock: Callable[[], float]) -> Limiter:
    """Rate limits counted in Redis when there is one to share, else in this process."""
    url = settings.rate_limit_redis()
    if settings.rate_limit_per_minute and url is not None:
        return RedisLimiter(url, settings.rate_limit_per_minute)
    return LocalLimiter(settings.rate_limit_per_minute, clock=clock)


def entry_json(entry: Entry, *, unanswered: bool = False) -> dict[str, Any]:
    metadata = {**entry.metadata, "unanswered": True} if unanswered else entry.metadata
    return {
        "id": entry.id,
        "seq": entry.seq,
        "message": entry.message,
        "tokens": entry.tokens,
        "pinned": entry.pinned,
        "kind": entry.kind,
        "created_at": entry.created_at,
        "metadata": metadata,
    }
