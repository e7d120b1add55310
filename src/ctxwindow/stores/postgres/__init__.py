"""PostgreSQL session stores: ``PostgresStore`` and ``AsyncPostgresStore`` (psycopg 3).

Tables (in ``schema`` when given, else the connection's search path)::

    ctxwindow_entries      (session_id, seq, id, doc jsonb, tokens, created_at)
                           primary key (session_id, seq), unique (session_id, id)
    ctxwindow_idempotency  (session_id, key, first_seq, last_seq)
    ctxwindow_sessions     (session_id, last_seq, updated_at)   -- since version 2
                           index (session_id COLLATE "C")        -- since version 4
    ctxwindow_checkpoints  (session_id, seq, data bytea)         -- since version 3
    ctxwindow_locks        (session_id, holder, expires_at)      -- since version 6
    ctxwindow_schema_version (version, applied_at)

The store creates and upgrades its tables when it opens: ``MIGRATIONS`` are
applied in order, in one transaction that holds an advisory lock, so openers
racing on a fresh database wait for each other instead of failing. A
database newer than this code is refused rather than guessed at. A store
opened with ``read_only=True`` creates and migrates nothing (an older schema
is read as it is; a database without the tables is a ``StoreError``), and its
connections set ``default_transaction_read_only``: the server refuses writes.

An append is one transaction: it takes ``pg_advisory_xact_lock`` on the
session, numbers the entries from ``max(seq) + 1``, inserts them and the
idempotency key, and commits before returning, so an acknowledged append is
on disk (with the server's default ``synchronous_commit = on``). Saving a
checkpoint takes the same session lock and upserts it only if its seq is
within ``ctxwindow_sessions.last_seq`` and not below the stored one; a cold
load reads the checkpoint and the entries after it in one statement. A
truncate takes the same session lock and, in one statement of one
transaction, deletes the entries past its cut, the idempotency keys covering
any of them and a checkpoint past it, and moves ``last_seq`` back.

Timeouts. Every call is bounded by the store's ``timeout`` (5 s by default),
a stalled server included (stopped, or a network that drops packets without
a word): a watchdog thread shuts down the socket of a call still waiting at
its deadline (``watchdog``), so the call fails with ``StoreUnavailableError``
and the connection is never reused. Connecting has libpq's ``connect_timeout``
(the timeout, 2 s at least). Each connection also sets ``statement_timeout``
and ``idle_in_transaction_session_timeout`` to the timeout, so the server
itself drops a statement or a transaction left waiting by a stalled client
(with its locks); behind a pooler each transaction sets them (below).
Migrations are the exception: they may take long on a large database and
are not bounded.

Session locks. ``lock(session_id)`` also holds the session against every
other process using the database: a session-level advisory lock
(``pg_try_advisory_lock``, polled until the timeout) on a connection each
store object keeps for its locks, released with ``pg_advisory_unlock``. The
server releases it when that connection ends, so a holder that dies
(``kill -9``) frees its sessions as soon as the server notices the closed
connection. The key is a 64-bit hash of the schema and the session id, kept
outside the 32-bit range of the per-append ``hashtext`` locks. A restarted
server holds no lock; a stalled one frees the locks of a holder that ended
meanwhile as soon as it runs again (the holder's unlock gave up after the
timeout and dropped the connection).

Behind a pooler in transaction mode (PgBouncer: ``pool_mode = transaction``)
give ``pooler="transaction"``, or ``?pooler=transaction`` in the URL (the
store takes its own parameters, ``pooler`` and ``lock_ttl``, out of the URL
before libpq sees it; ``store.url`` keeps them). A client's server
connection then changes from one transaction to the next and is shared with
other clients, so the store keeps nothing on it:

- no statement is prepared on the server (psycopg's ``prepare_threshold``
  is None): PgBouncer before 1.21 would run a statement prepared by one
  client on a server connection that lacks it, or that another client
  prepared it on;
- nothing is ``SET`` at connect: each transaction the store opens sets the
  timeouts with ``SET LOCAL`` (``set_config(…, true)``) as its first
  statement (one more round trip, about 0.15 ms through a local PgBouncer,
  on a write that takes milliseconds), so the server still drops a
  transaction a stalled client left open, with its locks. Single-statement
  reads open no transaction and are bounded by the watchdog only (wrapping
  them would cost three round trips, about 0.5 ms, for each read): a bound
  on the server for those is the role's or database's ``statement_timeout``
  (``ALTER ROLE … SET``) or PgBouncer's ``query_timeout``. A read-only
  store's transactions begin ``READ ONLY``, so the server refuses their
  writes; its reads are plain ``SELECT`` statements;
- a session lock is a lease row in ``ctxwindow_locks``: taken by one
  statement (inserted, or taken over from a lease that expired), polled
  until the timeout; renewed every ``lock_ttl / 3`` while the block runs (a
  thread; a task for the async store); deleted at the end only if it still
  carries the holder's random token. Expiry is on the server's clock
  (``clock_timestamp()``). A holder killed with ``kill -9`` keeps its
  session until its lease ends: at most ``lock_ttl`` seconds (5 by default;
  ``?lock_ttl=``). A release the server did not take (the pooler or the
  server was down) is retried every 0.5 s in the background, so such a
  session is free soon after they are back; a renewal that finds its lease
  taken over logs a warning, and the block runs on, no longer exclusive.
  While another holder has the session a take inserts nothing (no row
  lock, no transaction id per poll). ``close()`` deletes the leases the
  store still holds.

The lease is used only in pooler mode: without a pooler the advisory lock
frees the session of a dead holder at once, is never lost by a holder that
stalls longer than a lease, and writes nothing. The two do not exclude each
other: processes that lock sessions of one database must all use the same
mode (``pooler=transaction`` works on a direct connection too, so a process
that bypasses the pooler gives it as well).

The package: ``schema`` (the tables and their migrations) and ``common``
(the SQL and error mapping), which both flavours share, ``watchdog`` (the
deadline on each call), ``aio`` (``AsyncPostgresStore``, written by hand)
and ``sync`` (``PostgresStore``, generated from ``aio`` by
``tools/unasync.py``).
"""

from ctxwindow.stores.postgres.aio import AsyncPostgresStore
from ctxwindow.stores.postgres.common import (
    INSTALL_HINT,
    MIGRATIONS,
    SCHEMA_VERSION,
    SCHEMES,
    advisory_key,
)
from ctxwindow.stores.postgres.sync import PostgresStore

__all__ = [
    "INSTALL_HINT",
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "SCHEMES",
    "AsyncPostgresStore",
    "PostgresStore",
    "advisory_key",
]
