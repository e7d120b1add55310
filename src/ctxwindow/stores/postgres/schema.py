"""The PostgreSQL stores' schema: their tables, the migrations that make them, their version.

``MIGRATIONS`` maps each version to its statements; ``{s}`` is the schema
qualifier (``""`` or ``"name."``), bound by ``common.Queries``. A database
records the versions applied in ``ctxwindow_schema_version``; a store opened
for writing applies the missing ones under an advisory lock, a read-only one
applies none (``Queries.migrations``, ``Queries.check_readable``).
"""

from __future__ import annotations

# The entries a window keeps at any budget (``kept_always``): pinned, or system messages.
KEPT_ALWAYS = "(doc->>'pinned' = 'true' OR doc->'message'->>'role' = 'system')"

# version -> statements; {s} is the schema qualifier ("" or "name.")
MIGRATIONS: dict[int, tuple[str, ...]] = {
    1: (
        """CREATE TABLE {s}ctxwindow_entries (
            session_id text NOT NULL,
            seq bigint NOT NULL,
            id text NOT NULL,
            doc jsonb NOT NULL,
            tokens integer NOT NULL,
            created_at double precision NOT NULL,
            PRIMARY KEY (session_id, seq),
            UNIQUE (session_id, id))""",
        """CREATE TABLE {s}ctxwindow_idempotency (
            session_id text NOT NULL,
            key text NOT NULL,
            first_seq bigint NOT NULL,
            last_seq bigint NOT NULL,
            PRIMARY KEY (session_id, key))""",
    ),
    # Listing sessions from the entries table reads its whole index.
    2: (
        """CREATE TABLE {s}ctxwindow_sessions (
            session_id text PRIMARY KEY,
            last_seq bigint NOT NULL,
            updated_at double precision NOT NULL)""",
        """INSERT INTO {s}ctxwindow_sessions (session_id, last_seq, updated_at)
            SELECT session_id, max(seq), max(created_at) FROM {s}ctxwindow_entries
            GROUP BY session_id""",
    ),
    3: (
        """CREATE TABLE {s}ctxwindow_checkpoints (
            session_id text PRIMARY KEY,
            seq bigint NOT NULL,
            data bytea NOT NULL)""",
    ),
    # Pages of sessions in code-point order (as every store lists them), read from an
    # index whatever the database's collation: the primary key sorts by that collation.
    4: (
        """CREATE INDEX ctxwindow_sessions_by_code_point
            ON {s}ctxwindow_sessions (session_id COLLATE "C")""",
    ),
    # The entries a window keeps at any budget, for a bounded cold load (``EARLIER``).
    5: (
        """CREATE INDEX ctxwindow_entries_kept_always
            ON {s}ctxwindow_entries (session_id, seq) WHERE """
        + KEPT_ALWAYS,
    ),
    # The session locks of stores behind a transaction pooler (``pooler="transaction"``):
    # one lease row per held session, expiring on the server's clock.
    6: (
        """CREATE TABLE {s}ctxwindow_locks (
            session_id text PRIMARY KEY,
            holder text NOT NULL,
            expires_at timestamptz NOT NULL)""",
    ),
}
SCHEMA_VERSION = max(MIGRATIONS)

VERSION_TABLE = """CREATE TABLE IF NOT EXISTS {s}ctxwindow_schema_version (
    version integer PRIMARY KEY, applied_at double precision NOT NULL)"""
CURRENT_VERSION = "SELECT coalesce(max(version), 0) FROM {s}ctxwindow_schema_version"
# A migration of a large database may take long: it is not bounded by the store's timeout.
NO_TIMEOUT = "SET LOCAL statement_timeout = 0"
RECORD_VERSION = "INSERT INTO {s}ctxwindow_schema_version (version, applied_at) VALUES (%s, %s)"
