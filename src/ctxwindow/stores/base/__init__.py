"""The store contract: sessions kept as append-only, sequenced lists of entries.

A store keeps every entry a session ever had, until ``truncate`` or ``delete``
removes it (eviction moves an entry out of a window, never out of the store).
Sync and async flavours are separate classes; neither blocks on the other.

- ``append(session_id, entries, idempotency_key=None) -> list[Entry]``: the
  store assigns each entry the next sequence number of the session (1, 2, …)
  and returns the stored copies. Concurrent appends from many threads and
  processes lose nothing and duplicate nothing. With an ``idempotency_key``,
  a retried append with the same key is a no-op that returns the entries the
  first call stored. An append that returned is durable in a durable store.
  ``append_after(session_id, last, entries, idempotency_key=None)`` appends
  only if the session's newest entry is still ``last`` (its ``(seq, id)``,
  ``(0, "")`` for none) and returns None otherwise, storing nothing: the
  managers append a turn and learn that their window is current in one round
  trip (every store of ctxwindow; a store without an ``_append_after`` of its
  own gets the base's default, a few calls under the session's lock).
- ``load(session_id, after=0, limit=None)``: entries with ``seq > after`` in
  order; ``tail(session_id, n)``: the last ``n``; ``get(session_id, id)``;
  ``delete(session_id) -> bool``; ``sessions(prefix=None, after=None,
  limit=None)`` (sorted, one page at a time); ``health()``;
  ``close()`` and context-manager support.
- ``truncate(session_id, after) -> list[Entry]``: the one removal (what an
  adapter's "pop" needs): the entries past ``after`` go, atomically, with
  their idempotency keys and a checkpoint past ``after``; sequence numbers
  stay contiguous (the next append gets ``after + 1``); returns what went.
- ``replayed(session_id, idempotency_key)``: the entries an earlier append
  with that key stored, or None (the key's append never happened).
- ``save_checkpoint(session_id, seq, data)``: keep ``data`` (bytes, at most
  64 MiB: the serialized window through entry ``seq``) as the session's one
  checkpoint; a checkpoint never moves backwards (a save below the stored
  ``seq`` is a no-op) and never covers entries the session lacks.
  ``checkpoint(session_id) -> (seq, data) | None``;
  ``load_from_checkpoint(session_id, limit=None) -> (checkpoint, entries
  after it)`` (the ``limit`` newest of them), in one round trip where the
  backend allows. ``delete`` removes it too.
- ``earlier(session_id, before) -> Earlier``: what a cold load that replays
  only the newest entries needs of the older ones: the pinned entries and
  system messages before ``before``, and how many the others are with their
  stored tokens (selected in place where the backend allows).
- ``lock(session_id, timeout=None)``: a context manager (async with for the
  async stores) that holds the session exclusively until the block ends:
  against every other holder in this process and, for a store that processes
  share (SQLite file, Redis, PostgreSQL), in every other process using it. It
  waits up to ``timeout`` seconds (None: as long as it takes), then raises
  ``SessionBusyError``. It is not reentrant. A holder that dies never leaves
  the session locked for good (see each store for how long it can last).
- ``read_only``: a store opened to look (``open_store(url, read_only=True)``,
  as ``ctxwindow sessions list``, ``show`` and ``export`` open theirs) refuses
  ``append``, ``delete``, ``truncate`` and ``save_checkpoint`` with
  ``StoreError``, and changes nothing on open: SQLite opens the file
  read-only and PostgreSQL its transactions, neither migrating the schema;
  Redis does no index upkeep.
- Token counts are stored with each entry: loading never re-tokenizes.
- A store that is down raises ``StoreUnavailableError``; other failures of the
  backend raise ``StoreError``; both are mapped at the boundary.

The package: ``checks`` (input checks and entry JSON, shared by every
backend), ``aio`` (``AsyncStore``: the public methods check their input once,
then call the backend's primitives ``_append``, ``_load``, … — a backend is
those and nothing else) and ``sync`` (``Store``, generated from ``aio`` by
``tools/unasync.py``).
"""

from ctxwindow.concurrency._pauses import busy
from ctxwindow.stores.base.aio import AsyncStore
from ctxwindow.stores.base.checks import (
    MAX_CHECKPOINT,
    MAX_SESSION_ID,
    Checkpoint,
    Earlier,
    check_after,
    check_checkpoint,
    check_count,
    check_cursor,
    check_entries,
    check_idempotency_key,
    check_last,
    check_page_size,
    check_prefix,
    check_replay_key,
    check_session_id,
    check_timeout,
    earlier_of,
    encode_entry,
    entry_from_json,
    entry_to_json,
    kept_always,
    page_start,
    redact_url,
    scrub,
)
from ctxwindow.stores.base.sync import Store

__all__ = [
    "MAX_CHECKPOINT",
    "MAX_SESSION_ID",
    "AsyncStore",
    "Checkpoint",
    "Earlier",
    "Store",
    "busy",
    "check_after",
    "check_checkpoint",
    "check_count",
    "check_cursor",
    "check_entries",
    "check_idempotency_key",
    "check_last",
    "check_page_size",
    "check_prefix",
    "check_replay_key",
    "check_session_id",
    "check_timeout",
    "earlier_of",
    "encode_entry",
    "entry_from_json",
    "entry_to_json",
    "kept_always",
    "page_start",
    "redact_url",
    "scrub",
]
