"""What both flavours of the tiered store share: the hot tier, the warm tier's state, docs.

- ``HotTier``: whole sessions in an in-process LRU, each entry kept as its
  JSON text (a ``Doc``) and decoded afresh for every reader; a session an
  append reached without it being cached is marked (``Floor``) so that a
  slower read cannot put an older copy back.
- ``WarmState``: whether the warm store is in use, when to try it again, and
  which sessions it missed while it was bypassed.
- Helpers on lists of docs (``merge``, ``load_window``, ``find``, …) and the
  health report.

No I/O happens here: the stores of ``aio`` and ``sync`` call their tiers.
"""

from __future__ import annotations

import logging
import threading
import time
from bisect import bisect_right
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from ctxwindow.errors import StoreError
from ctxwindow.messages import Entry
from ctxwindow.stores.base import entry_from_json, entry_to_json

logger = logging.getLogger("ctxwindow.stores")


@dataclass(frozen=True, slots=True)
class Doc:
    """An entry as the hot tier keeps it: its JSON text, decoded afresh for each reader."""

    seq: int
    id: str
    text: str


@dataclass(frozen=True)
class Floor:
    """A hot-tier mark: the session reaches ``seq`` but is not cached whole."""

    seq: int


def docs_of(entries: Iterable[Entry]) -> list[Doc]:
    return [Doc(entry.seq, entry.id, entry_to_json(entry)) for entry in entries]


def decode(docs: Iterable[Doc]) -> list[Entry]:
    return [entry_from_json(doc.text) for doc in docs]


def merge(current: Sequence[Doc], new: Sequence[Doc]) -> list[Doc] | None:
    """``current`` followed by the entries of ``new`` past its end; None if there is a gap."""
    end = current[-1].seq if current else 0
    if new and new[0].seq > end + 1:
        return None
    return [*current, *(doc for doc in new if doc.seq > end)]


def _end(known: Sequence[Doc] | Floor) -> int:
    if isinstance(known, Floor):
        return known.seq
    return known[-1].seq if known else 0


class HotTier:
    """The hot tier: whole sessions in an LRU (thread-safe).

    ``epoch`` counts the truncates this process made: a read or an append that
    started before one may hold removed entries, so it is not cached.
    """

    def __init__(self, size: int) -> None:
        if size < 0:
            raise ValueError(f"hot_size must be >= 0, got {size}")
        self.size = size
        self.epoch = 0
        self._data: OrderedDict[str, list[Doc] | Floor] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        with self._lock:
            return sum(isinstance(value, list) for value in self._data.values())

    def get(self, session_id: str) -> list[Doc] | None:
        with self._lock:
            value = self._data.get(session_id)
            if not isinstance(value, list):
                return None
            self._data.move_to_end(session_id)
            return value

    def loaded(self, session_id: str, docs: list[Doc], epoch: int, replace: bool = False) -> None:
        """Cache a session read from a lower tier, unless an append overtook the read (or,
        with ``replace``, the cached copy is known stale) or a truncate came after it."""
        with self._lock:
            if epoch != self.epoch:
                return
            known = self._data.get(session_id)
            if replace or known is None or _end(known) <= _end(docs):
                self._set(session_id, docs)

    def appended(self, session_id: str, stored: Sequence[Entry], epoch: int) -> None:
        """Extend a cached session; mark one that is not cached, so a slower read can't win."""
        if not self.size:
            return
        new = docs_of(stored)
        with self._lock:
            if epoch != self.epoch:  # a truncate raced the append: read it afresh
                self._data.pop(session_id, None)
                return
            known = self._data.get(session_id)
            if new[0].seq == 1:
                merged: list[Doc] | None = new
            elif isinstance(known, list):
                merged = merge(known, new)
            else:
                merged = None
            self._set(session_id, Floor(new[-1].seq) if merged is None else merged)

    def pop(self, session_id: str) -> None:
        with self._lock:
            self._data.pop(session_id, None)

    def truncated(self, session_id: str) -> None:
        """Drop the session: reads and appends under way when it was truncated cache nothing."""
        with self._lock:
            self.epoch += 1
            self._data.pop(session_id, None)

    def _set(self, session_id: str, value: list[Doc] | Floor) -> None:
        self._data[session_id] = value
        self._data.move_to_end(session_id)
        while len(self._data) > self.size:
            self._data.popitem(last=False)


class WarmState:
    """Whether the warm store is in use, and what it missed while it was not."""

    def __init__(self, retry_after: float, clock: Callable[[], float]) -> None:
        self.retry_after = retry_after
        self.clock = clock
        self.error: str | None = None
        self.retry_at = 0.0
        self.stale: set[str] = set()  # sessions written while the warm store was bypassed

    def usable(self) -> bool:
        return self.error is None or self.clock() >= self.retry_at

    def bypassed(self, session_id: str | None) -> None:
        if session_id is not None:
            self.stale.add(session_id)

    def failed(self, exc: StoreError, session_id: str | None, warm: str, durable: str) -> None:
        self.bypassed(session_id)
        if self.error is None:
            logger.warning(
                "the warm store %s failed; serving from %s until it is back: %s",
                warm,
                durable,
                exc,
            )
        self.error = f"{type(exc).__name__}: {exc}"
        self.retry_at = self.clock() + self.retry_after

    def recovered(self, warm: str) -> None:
        if self.error is not None:
            logger.warning("the warm store %s is back", warm)
            self.error = None


def load_window(docs: list[Doc], after: int, limit: int | None) -> list[Entry]:
    """The entries of ``docs`` with ``seq > after``, at most ``limit`` of them."""
    start = bisect_right(docs, after, key=lambda doc: doc.seq)
    return decode(docs[start : None if limit is None else start + limit])


def find(docs: list[Doc], entry_id: str) -> Entry | None:
    return next((entry_from_json(d.text) for d in reversed(docs) if d.id == entry_id), None)


def is_current(cached: list[Doc], last: list[Entry]) -> bool:
    """Whether ``last`` (a store's ``tail(…, 1)``) is the newest entry of ``cached``."""
    return bool(last) and last[0].seq == cached[-1].seq and last[0].id == cached[-1].id


def extends(docs: list[Doc], cached: list[Doc]) -> bool:
    """Whether ``docs`` (a whole session) still hold the newest entry of ``cached`` where it
    was: False once the session was truncated (or deleted) and maybe written anew."""
    end = cached[-1]
    return len(docs) >= end.seq and docs[end.seq - 1].id == end.id


def report(durable: dict[str, Any], hot: HotTier) -> dict[str, Any]:
    """The tiered store's ``health()`` from its durable tier's report."""
    return {
        "ok": bool(durable.get("ok")),
        "store": "tiered",
        "durable": bool(durable.get("durable")),
        "degraded": False,
        "hot": {"sessions": len(hot), "max_sessions": hot.size},
        "durable_tier": durable,
    }


def unhealthy(url: str, exc: StoreError) -> dict[str, Any]:
    return {"ok": False, "url": url, "error": str(exc)}


def time_left(deadline: float | None) -> float | None:
    """A ``lock`` timeout that ends at ``deadline`` (a ``time.monotonic()`` value)."""
    return None if deadline is None else max(0.0, deadline - time.monotonic())
