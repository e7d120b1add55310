"""Counts that calibrate themselves: the upstream's ``usage.prompt_tokens`` against ours.

Every upstream reply that reports usage gives a ratio, ``prompt_tokens``
over ctxwindow's count of the same request (messages, framing and tools),
per model entry. The last ``WINDOW`` ratios of a model are kept; its ratio is
their median (robust to the odd reply a gateway pads) and its spread their
median absolute deviation.

- For an **estimated** model, once ``MIN_SAMPLES`` replies were seen, the
  prompt budget in ctxwindow's counts is the budget divided by
  ``median + 2 * spread`` (clamped to ``FACTOR_RANGE``): a count that is 25 %
  high lets a quarter more in, one that is low lets less in, and the real
  prompt lands at the budget instead of a safety margin away from it.
- For an **exact** counter the ratio is only watched: a drift over
  ``DRIFT`` (1 %), once ``MIN_SAMPLES`` replies were seen, is logged once
  per model, as a sign of a wrong tokenizer or chat template, and nothing
  is corrected.

Both are exported as ``ctxwindow_count_ratio{model, model_sent}`` (see
``metrics.py``). The ratios are kept in the store (the checkpoint of the
session ``ctxwindow.calibration``: a tenant's session id always holds a
``:``, so no client can reach it), loaded
at start-up, saved after each of a model's first ``EAGER`` replies, then at
most every ``SAVE_EVERY`` seconds, and at shutdown. Worker processes each
learn and save; the last save wins, and all load it at start-up.
"""

from __future__ import annotations

import logging
import statistics
import time
from collections import deque
from collections.abc import Callable
from typing import Any

import orjson

from ctxwindow.errors import StoreError
from ctxwindow.stores.base import AsyncStore
from ctxwindow.tokens.models import ModelInfo

logger = logging.getLogger("ctxwindow.server")

SESSION = "ctxwindow.calibration"
WINDOW = 64
MIN_SAMPLES = 5
FACTOR_RANGE = (0.5, 2.0)
DRIFT = 0.01
EAGER = 32
SAVE_EVERY = 10.0
MAX_MODELS = 256  # names are clients' input: the table (and the metric's labels) stay bounded


class Calibration:
    """Per-model ratios of the upstream's prompt tokens to ours; see the module docstring."""

    def __init__(
        self,
        store: AsyncStore,
        on_ratio: Callable[[str, float], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self.on_ratio = on_ratio
        self.clock = clock
        self.ratios: dict[str, deque[float]] = {}
        self._factors: dict[str, float] = {}
        self._warned: set[str] = set()
        self._loaded = False
        self._saved_at = clock()
        self._dirty = False

    async def load(self) -> None:
        """The ratios the store keeps (once; a store that cannot say starts from nothing)."""
        if self._loaded:
            return
        self._loaded = True
        try:
            saved = await self.store.checkpoint(SESSION)
        except StoreError as exc:
            logger.warning("calibration: cannot read the saved ratios (%s); starting afresh", exc)
            return
        if saved is None:
            return
        try:
            data = orjson.loads(saved[1])
        except orjson.JSONDecodeError:
            logger.warning("calibration: the saved ratios are not JSON; starting afresh")
            return
        for model, ratios in (data.get("ratios") or {}).items():
            kept = [float(r) for r in ratios if isinstance(r, (int, float)) and r > 0]
            if kept and len(self.ratios) < MAX_MODELS:
                self.ratios[model] = deque(kept[-WINDOW:], maxlen=WINDOW)
                median = self._learnt(model)
                if self.on_ratio is not None:
                    self.on_ratio(model, median)

    def factor(self, model: str) -> float:
        """What to multiply an estimated model's budget by: 1 until ``MIN_SAMPLES`` replies.

        Worked out when a reply is observed (or the ratios loaded), read per request."""
        return self._factors.get(model, 1.0)

    def _learnt(self, model: str) -> float:
        """The model's median ratio, after its factor is worked out again."""
        seen = self.ratios[model]
        median = statistics.median(seen)
        if len(seen) >= MIN_SAMPLES:
            spread = statistics.median(abs(r - median) for r in seen)
            low, high = FACTOR_RANGE
            self._factors[model] = min(high, max(low, 1.0 / (median + 2 * spread)))
        return median

    async def observe(self, info: ModelInfo, model: str, ours: int, upstream: Any) -> None:
        """Take note of one reply: ``upstream`` prompt tokens for ``ours`` counted."""
        if not isinstance(upstream, int) or isinstance(upstream, bool) or upstream < 1 or ours < 1:
            return
        await self.load()  # before the first save, so that it does not overwrite the kept ones
        key = calibration_key(info, model)
        seen = self.ratios.get(key)
        if seen is None:
            if len(self.ratios) >= MAX_MODELS:
                return
            seen = self.ratios[key] = deque(maxlen=WINDOW)
        seen.append(upstream / ours)
        median = self._learnt(key)
        if self.on_ratio is not None:
            self.on_ratio(key, median)
        drifts = len(seen) >= MIN_SAMPLES and abs(median - 1) > DRIFT
        if drifts and not info.estimated and key not in self._warned:
            self._warned.add(key)
            logger.warning(
                "model %s: the upstream counts %.1f %% %s tokens than ctxwindow's exact"
                " counter (%s); a wrong tokenizer or chat template?",
                key, abs(median - 1) * 100, "more" if median > 1 else "fewer", info.counter,
            )  # fmt: skip
        self._dirty = True
        if len(seen) <= EAGER or self.clock() - self._saved_at >= SAVE_EVERY:
            await self.save()

    async def save(self) -> None:
        """Keep the ratios in the store (if they changed); a failing store is only logged."""
        if not self._dirty:
            return
        data = orjson.dumps({"ratios": {m: list(r) for m, r in self.ratios.items()}})
        try:
            await self.store.save_checkpoint(SESSION, 0, data)
        except StoreError as exc:
            logger.warning("calibration: cannot save the ratios (%s)", exc)
            return
        self._dirty = False
        self._saved_at = self.clock()


def calibration_key(info: ModelInfo, model: str) -> str:
    """Ratios are kept per entry (a glob's models share its counter), an unknown name by name."""
    return model if info.source.startswith("default") else info.name
