"""Tiered session stores: a hot in-process LRU, a warm cache, a durable store.

Example::

    store = TieredStore(PostgresStore(postgres_url), warm=RedisStore(redis_url, ttl=3600))

- The durable store (SQLite, PostgreSQL) is the source of truth and numbers
  the entries. An append goes there first, so an acknowledged append is as
  durable as that store makes it; the warm and hot tiers are then updated
  best effort: their failures never fail an append the durable store took.
- A read is answered by the hot tier, else the warm one, else the durable
  store (which then fills the other two). Unless ``single_writer=True``, a
  hot answer is first checked against the newest entry of the next tier (one
  small round trip), so sessions that other processes write are not served
  stale from this process's memory.
- The warm copy of a session is always a prefix of the durable one: entries
  are copied with the durable sequence numbers (``RedisStore.fill``), and a
  copy found missing or behind is refilled from the durable store.
- A warm store that fails (``StoreError``; typically Redis down) is bypassed:
  one warning is logged, reads and writes go to the durable store,
  ``health()`` reports ``"degraded": True``, and the warm store is tried again
  after ``retry_after`` seconds. Sessions this process wrote meanwhile are
  dropped from the warm store when it is back, so it never serves what it
  missed; writes of other processes during the outage are bounded by the
  warm store's TTL.
- ``replayed`` and ``lock`` are the durable store's: it is the source of
  truth, so a session held through a ``TieredStore`` is held against every
  user of that durable store, in this process and in others.
- The hot tier keeps each entry as its JSON text and decodes a fresh copy for
  every reader, so no caller can change what it holds.

The package: ``common`` (what both flavours share: the hot tier, the warm
tier's state, helpers on cached entries), ``aio`` (``AsyncTieredStore``,
written by hand: the primitives of the store contract over the tiers) and
``sync`` (``TieredStore``, generated from ``aio`` by ``tools/unasync.py``).
"""

from ctxwindow.stores.tiered.aio import AsyncFillable, AsyncTieredStore
from ctxwindow.stores.tiered.sync import Fillable, TieredStore

__all__ = ["AsyncFillable", "AsyncTieredStore", "Fillable", "TieredStore"]
