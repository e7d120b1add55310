"""The SQL of ``PostgresArchive``: its tables, and the upkeep and the searches of its index.

Each text is bound by ``PostgresArchive._sql``: ``{t}`` is the archive's
table, ``{w}`` its watermarks, and ``{s}``, ``{u}``, ``{p}`` the index's
sessions, users and postings (see ``archive.postgres``). ``{users}`` is
replaced first, by ``USERS`` in a user-wide search and by nothing otherwise.
"""

from __future__ import annotations

from ctxwindow.archive import ranking

CONFIG = "english"
COUNT_ID = 2**63 - 1
"""The id of the last posting of each (session, lexeme): its ``tf`` is the lexeme's row count."""

_UNITS = (
    f"trunc(q.weight * p.tf * {ranking.K1 + 1!r}::float8 / (p.tf + {ranking.K1!r}::float8"
    f" * ({1 - ranking.B!r}::float8 + {ranking.B!r}::float8 * p.length / %(average)s::float8))"
    f" * {ranking.UNITS!r}::float8)::bigint"
)  # ranking.units: the same float8 operations in the same order as Python's

SCOPE = f"""
WITH sids AS (
    SELECT sid FROM {{s}} WHERE session_id = %(session_id)s
    UNION SELECT sid FROM {{u}} WHERE user_id = %(user_id)s
), query AS (
    SELECT lexeme, count(*) AS n
    FROM unnest(%(terms)s::text[]) AS term,
        unnest(tsvector_to_array(to_tsvector('{CONFIG}', term))) AS lexeme
    GROUP BY lexeme
), scope AS (
    SELECT coalesce(array_agg(sid ORDER BY sid), '{{{{}}}}') AS sids FROM sids
)
SELECT
    scope.sids,
    (SELECT coalesce(sum(rows), 0) FROM {{s}} WHERE sid = ANY(scope.sids)),
    (SELECT coalesce(sum(length), 0) FROM {{s}} WHERE sid = ANY(scope.sids)),
    (SELECT coalesce(json_object_agg(lexeme, n), '{{{{}}}}') FROM query),
    (SELECT coalesce(json_object_agg(lexeme, df), '{{{{}}}}') FROM (
        SELECT query.lexeme, sum(p.tf) AS df FROM unnest(scope.sids) AS s (sid), query,
            LATERAL (SELECT tf FROM {{p}} AS p WHERE p.sid = s.sid AND p.lexeme = query.lexeme
                AND p.id = {COUNT_ID} OFFSET 0) AS p
        GROUP BY query.lexeme
    ) AS frequencies)
FROM scope
"""
"""The searched sessions, their rows and total length, the query's lexemes (made by the same
``to_tsvector`` as the rows', so stemming agrees) and each one's row count in the scope."""

READ = f"""
WITH q (lexeme, weight) AS (SELECT * FROM unnest(%(lexemes)s::text[], %(weights)s::float8[]))
SELECT s.id, s.seq, s.units FROM (
    SELECT p.id, max(p.seq) AS seq, sum({_UNITS}) AS units
    FROM q, unnest(%(sids)s::bigint[]) AS scope (sid), LATERAL (
        SELECT id, seq, tf, length FROM {{p}} AS p
        WHERE p.sid = scope.sid AND p.lexeme = q.lexeme AND p.id < {COUNT_ID} OFFSET 0
    ) AS p
    GROUP BY p.id
) AS s {{users}}
ORDER BY s.units DESC, s.seq, s.id LIMIT %(limit)s
"""

FILL = f"""
SELECT s.id, s.seq, s.units FROM (
    SELECT p.id, p.seq, {_UNITS.replace("q.weight", "%(weight)s::float8")} AS units FROM {{p}} AS p
    WHERE p.sid = %(sid)s AND p.lexeme = %(lexeme)s AND p.id < {COUNT_ID}
    ORDER BY p.id DESC LIMIT %(limit)s
) AS s {{users}}
"""

POSTINGS = """
SELECT p.id, p.lexeme, p.tf, p.length
FROM unnest(%s::text[]) AS q (lexeme), unnest(%s::bigint[]) AS s (sid),
    unnest(%s::bigint[]) AS k (id), LATERAL (
        SELECT id, lexeme, tf, length FROM {p} AS p
        WHERE p.sid = s.sid AND p.lexeme = q.lexeme AND p.id = k.id OFFSET 0
    ) AS p
"""
"""The postings of these lexemes in these rows, one primary-key lookup each."""

USERS = (
    "WHERE EXISTS (SELECT 1 FROM {t} AS e WHERE e.id = s.id"
    " AND (e.session_id = %(session_id)s OR e.user_id = %(user_id)s))"
)
"""A user's sessions may hold rows of other users: only the user's, and the session's."""

SESSION = """
WITH lock AS MATERIALIZED (
    SELECT pg_advisory_xact_lock(hashtext(%(table)s), hashtext(%(session_id)s))
), made AS (
    INSERT INTO {s} (session_id, rows, length) SELECT %(session_id)s, 0, 0 FROM lock
    ON CONFLICT (session_id) DO NOTHING RETURNING sid
)
SELECT sid FROM made UNION ALL SELECT sid FROM {s} WHERE session_id = %(session_id)s
"""
"""The session's ``sid``, made if new, under a lock held until the write commits: one writer
per session at a time, so the rows a write replaces are not replaced under it."""

UNINDEX = f"""
WITH old AS (
    SELECT id, tsv FROM {{t}} WHERE session_id = %(session_id)s AND entry_id = ANY(%(entry_ids)s)
), words AS (
    SELECT old.id, w.lexeme FROM old, unnest(old.tsv) AS w
), counts AS (
    SELECT lexeme, count(*) AS n FROM words GROUP BY lexeme
), postings AS (
    DELETE FROM {{p}} AS p USING words
    WHERE p.sid = %(sid)s AND p.lexeme = words.lexeme AND p.id = words.id
), fewer AS (
    UPDATE {{p}} AS p SET tf = p.tf - counts.n FROM counts
    WHERE p.sid = %(sid)s AND p.lexeme = counts.lexeme AND p.id = {COUNT_ID} AND p.tf > counts.n
), gone AS (
    DELETE FROM {{p}} AS p USING counts
    WHERE p.sid = %(sid)s AND p.lexeme = counts.lexeme AND p.id = {COUNT_ID} AND p.tf <= counts.n
)
UPDATE {{s}} SET rows = rows - (SELECT count(*) FROM old),
    length = length - (SELECT coalesce(sum(length(tsv)), 0) FROM old)
WHERE sid = %(sid)s
"""
"""The rows about to be replaced leave the index (postings, row counts, the session's totals)."""

INDEX = f"""
WITH new AS (
    SELECT id, seq, tsv FROM {{t}}
    WHERE session_id = %(session_id)s AND entry_id = ANY(%(entry_ids)s)
), words AS (
    SELECT new.id, new.seq, length(new.tsv) AS length, w.lexeme,
        coalesce(cardinality(w.positions), 1) AS tf
    FROM new, unnest(new.tsv) AS w
), postings AS (
    INSERT INTO {{p}} (sid, lexeme, id, tf, length, seq)
    SELECT %(sid)s, lexeme, id, tf, length, seq FROM words
), counts AS (
    INSERT INTO {{p}} (sid, lexeme, id, tf, length, seq)
    SELECT %(sid)s, lexeme, {COUNT_ID}, count(*), 0, 0 FROM words GROUP BY lexeme
    ON CONFLICT (sid, lexeme, id) DO UPDATE SET tf = {{p}}.tf + excluded.tf
)
UPDATE {{s}} SET rows = rows + (SELECT count(*) FROM new),
    length = length + (SELECT coalesce(sum(length(tsv)), 0) FROM new)
WHERE sid = %(sid)s
"""
"""The rows just written join the index."""

TABLES = (
    "CREATE TABLE IF NOT EXISTS {t} ("
    " id bigserial PRIMARY KEY, session_id text NOT NULL, entry_id text NOT NULL,"
    " user_id text, seq bigint NOT NULL, entry text NOT NULL,"
    " tsv tsvector NOT NULL, vector real[], UNIQUE (session_id, entry_id))",
    "DROP INDEX IF EXISTS {i_tsv}",  # searched through the postings now
    "CREATE INDEX IF NOT EXISTS {i_user} ON {t} (user_id)",
    "CREATE INDEX IF NOT EXISTS {i_seq} ON {t} (session_id, seq)",
    "CREATE TABLE IF NOT EXISTS {w} (session_id text PRIMARY KEY, through bigint NOT NULL)",
    "CREATE TABLE IF NOT EXISTS {s} (sid bigserial PRIMARY KEY,"
    " session_id text NOT NULL UNIQUE, rows bigint NOT NULL, length bigint NOT NULL)",
    "CREATE TABLE IF NOT EXISTS {u} (user_id text NOT NULL, sid bigint NOT NULL,"
    " PRIMARY KEY (user_id, sid))",
    "CREATE INDEX IF NOT EXISTS {i_users_sid} ON {u} (sid)",
    "CREATE TABLE IF NOT EXISTS {p} (sid bigint NOT NULL, lexeme text NOT NULL,"
    " id bigint NOT NULL, tf integer NOT NULL, length integer NOT NULL,"
    " seq bigint NOT NULL, PRIMARY KEY (sid, lexeme, id))",
)
"""The tables and indexes, made if missing (``{i_tsv}``: the full-text index of earlier
versions, dropped)."""

BACKFILL = (
    "INSERT INTO {s} (session_id, rows, length)"
    " SELECT session_id, count(*), sum(length(tsv)) FROM {t} GROUP BY session_id",
    "INSERT INTO {u} (user_id, sid) SELECT DISTINCT e.user_id, s.sid"
    " FROM {t} AS e JOIN {s} AS s USING (session_id) WHERE e.user_id IS NOT NULL",
    "INSERT INTO {p} (sid, lexeme, id, tf, length, seq)"
    " SELECT s.sid, w.lexeme, e.id, coalesce(cardinality(w.positions), 1), length(e.tsv), e.seq"
    " FROM {t} AS e JOIN {s} AS s USING (session_id), unnest(e.tsv) AS w",
    "INSERT INTO {p} (sid, lexeme, id, tf, length, seq)"
    f" SELECT s.sid, w.lexeme, {COUNT_ID}, count(*), 0, 0"
    " FROM {t} AS e JOIN {s} AS s USING (session_id), unnest(e.tsv) AS w"
    " GROUP BY s.sid, w.lexeme",
)
"""The index of a table written by an earlier version (without postings), in four statements."""
