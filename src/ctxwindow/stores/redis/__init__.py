"""Redis session stores: ``RedisStore`` and ``AsyncRedisStore`` (redis-py).

Keys of one session (``P`` is the store's ``prefix``)::

    P:e:<session>   list of entry JSON documents; the entry with seq n is at index n-1
    P:i:<session>   hash: entry id -> seq
    P:k:<session>   hash: idempotency key -> "first_seq:last_seq"
    P:c:<session>   hash: the checkpoint, fields "seq" and "data"

and of the store: ``P:sessions``, a sorted set of every session id (scores 0,
so ``ZRANGEBYLEX`` reads a page of ``sessions()`` in code-point order), and
``P:sessions:indexed``, set once the ids of sessions written before the index
are in it (the first listing scans for them).

An append is one Lua script: it reads the list's length, pushes the entries
with their sequence numbers written into the JSON, records their ids and the
idempotency key, all atomically on the server, so appends from any number of
processes never collide, and a retried key returns the first call's entries.
With ``ttl`` (seconds), every append refreshes the expiry of the session's
keys: the store is then a cache (the warm tier of a ``TieredStore``).

The scripts that create or remove a session keep the index: an append's
first entry (or a fill into an empty list) adds the id, ``delete`` and a
truncate to 0 remove it. Ids whose entries vanished on their own (expired,
evicted) are dropped by the listing that meets them and, with a ``ttl``, by
writes sampling the index.

On a Redis Cluster (``redis+cluster://host:port,host:port``: the client finds
the other nodes, follows MOVED and ASK, and reads the map of the slots again
after a failover) every key of a session carries the hash tag ``{s:<session>}``
(``P:{s:<session>}:e`` and so on, the lease too), so each script touches one
slot, whatever braces the id holds. The index of session ids is then
``INDEX_SHARDS`` (16) sorted sets ``P:sessions:{ix:<n>}`` spread over the
cluster, a session's set picked by a hash of its id; a page of ``sessions()``
reads the next ``limit`` ids of each, merges them and checks that their entries
exist, so paging stays exact. A script cannot keep that index (it is in
another slot): the store does, beside it. The first append of a session puts
the id in its set before anything is written (the script refuses to create a
session until told the id is indexed) and again after (a delete in another
process may have taken it out meanwhile); a delete or a truncate to 0 takes it
out, then puts it back if the session was written again in between. So a
session with entries is always listed; an id whose entries are gone is dropped
by the listing that meets it, and with a ``ttl``, the first append of a session
drops the dead among three random ids of its set.

``?wait_replicas=N`` (on one server or a cluster): an append is acknowledged
only once N replicas have it. The script and a ``WAIT`` go in one pipeline,
on one connection to the session's primary; fewer replicas within half the
timeout is a ``StoreUnavailableError`` (the entries may be kept: retry with
the same idempotency key, whose replay waits for them again). Without it an
acknowledged append is in the primary's memory only until replication sends
it, asynchronously: a primary that dies first loses it, and its promoted
replica never had it.

A truncate is one script too: it cuts the list, drops the ids of the entries it
removes, the idempotency keys covering any of them and a checkpoint past the
cut, so no other client ever sees it half done.

A checkpoint is saved by a script too: only if its seq is within the list's
length and not below the stored one; with ``ttl`` it refreshes every key of
the session, so it never outlives its entries. A checkpoint found past the end
of the list (its entries expired or were evicted) is not returned, and the
session's next first entry deletes it.

Session locks. ``lock(session_id)`` also holds the session against every
other process using the server: a lease, ``SET P:lock:<session> <token> NX PX
<lock_ttl>``, renewed every ``lock_ttl / 3`` while the block runs (by a
thread, or an asyncio task) and deleted at the end only if it still holds
this holder's random token. If the server does not answer that delete (it is
stalled, restarting, unreachable), the store retries it in the background
every 0.5 s until the server takes it, so a lease never outlives a holder
that ended by more than the server's own absence: a server back from a
restart (which restores the lease from its snapshot) or a stall frees the
session at once. A holder that dies without releasing (``kill -9``) keeps the
session locked until the lease expires: at most ``lock_ttl`` seconds (5 by
default). A lease found lost while held (the renewals could not reach the
server for longer than the lease) is logged as a warning.

Durability is the server's: an append that returned is in Redis memory, and
on disk only as the server's persistence is configured (``appendonly yes``
with ``appendfsync always`` for every write; the default ``everysec`` can lose
about a second). Commands are not retried by the client (a retried append
could be applied twice); callers retry with an idempotency key.

The package: ``scripts`` (the Lua scripts) and ``common`` (the key layout,
options and error mapping), which both flavours share, ``aio``
(``AsyncRedisStore``, written by hand) and ``sync`` (``RedisStore``,
generated from ``aio`` by ``tools/unasync.py``).
"""

from ctxwindow.stores.redis.aio import AsyncRedisStore
from ctxwindow.stores.redis.common import INDEX_SHARDS, INSTALL_HINT, SCHEMES
from ctxwindow.stores.redis.sync import RedisStore

__all__ = ["INDEX_SHARDS", "INSTALL_HINT", "SCHEMES", "AsyncRedisStore", "RedisStore"]
