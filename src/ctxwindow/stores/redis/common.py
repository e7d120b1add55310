"""What both Redis stores share: the key layout, options, error mapping and orphaned leases.

``Layout`` knows the key names, builds the arguments of the Lua scripts
(``scripts``, registered on a client by ``Scripts``) and reads their
replies; the stores in ``aio`` and ``sync`` only send the commands.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlsplit

from ctxwindow.errors import StoreError, StoreUnavailableError
from ctxwindow.extras import install_hint
from ctxwindow.messages import Entry
from ctxwindow.stores.base import (
    Checkpoint,
    Earlier,
    encode_entry,
    entry_from_json,
    page_start,
    redact_url,
    scrub,
)
from ctxwindow.stores.redis.scripts import EARLIER_PAGE as EARLIER_PAGE  # aio reads these here
from ctxwindow.stores.redis.scripts import Scripts as Scripts

logger = logging.getLogger("ctxwindow.stores")

INSTALL_HINT = install_hint("redis")
SCHEMES = ("redis", "rediss", "unix")
RELEASE_RETRY = 0.5  # seconds between the retries of a release the server did not take


def load_redis() -> Any:
    """The ``redis`` package (with ``redis.asyncio``), or an ImportError saying what to install."""
    try:
        import redis
        import redis.asyncio
    except ImportError as exc:
        raise ImportError(f"the Redis stores need 'redis': {INSTALL_HINT}") from exc
    return redis


def earlier_page(found: Earlier, reply: Sequence[Any]) -> Earlier:
    """``found`` with one page of ``EARLIER`` (its reply) added."""
    kept = [entry_from_json(doc) for doc in reply[2:]]
    return Earlier(
        [*found.kept, *kept], found.entries + int(reply[0]), found.tokens + int(reply[1])
    )


def check_options(url: str, prefix: str, ttl: float | None, lock_ttl: float) -> None:
    """``ValueError`` for a URL that is not Redis's, an empty prefix, or a bad ttl."""
    scheme = urlsplit(url).scheme if isinstance(url, str) else ""
    if scheme not in SCHEMES:
        raise ValueError(
            f"not a Redis URL: {redact_url(str(url))!r} (expected redis://, rediss:// or unix://)"
        )
    if not isinstance(prefix, str) or not prefix:
        raise ValueError("prefix must be a non-empty string")
    if ttl is not None and not ttl > 0:
        raise ValueError(f"ttl must be None or a positive number of seconds, got {ttl!r}")
    if isinstance(lock_ttl, bool) or not isinstance(lock_ttl, (int, float)) or not lock_ttl > 0:
        raise ValueError(f"lock_ttl must be a positive number of seconds, got {lock_ttl!r}")


def _glob_escape(text: str) -> str:
    return re.sub(r"([*?\[\]\\])", r"\\\1", text)


def _append_body(entry: Entry) -> tuple[str, str]:
    """The entry's id and its JSON document without ``{"seq":N,``, which the script adds."""
    text = encode_entry(entry, 0)
    head = '{"id":' + json.dumps(entry.id, ensure_ascii=False) + ',"seq":0,'
    if text.startswith(head):  # the usual layout: cut the seq out without parsing
        return entry.id, text[1 : len(head) - 9] + text[len(head) - 1 :]
    data = json.loads(text)
    del data["seq"]
    return entry.id, json.dumps(data, ensure_ascii=False, separators=(",", ":"))[1:]


class Layout:
    """Key names, script arguments and replies, shared by the sync and async stores."""

    def __init__(self, url: str, prefix: str, ttl: float | None, lock_ttl: float) -> None:
        check_options(url, prefix, ttl, lock_ttl)
        self.raw_url = url
        # Set when the store closes: a call still under way then (a lock block ending
        # later) must not open a new connection, which nothing would ever close.
        self.closed = False
        self.url = redact_url(url)
        self.prefix = prefix
        self.ttl = ttl
        self.ttl_ms = 0 if ttl is None else max(1, round(ttl * 1000))
        self.lock_ttl = lock_ttl
        self.lock_ttl_ms = max(1, round(lock_ttl * 1000))

    def keys(self, session_id: str) -> list[str]:
        """The session's entries list, ids hash, idempotency keys hash and checkpoint hash."""
        return [f"{self.prefix}:{kind}:{session_id}" for kind in "eikc"]

    def indexed_keys(self, session_id: str) -> list[str]:
        """The session's keys and the index of session ids: the keys of the scripts that
        create or remove a session (append, fill, delete, truncate)."""
        return [*self.keys(session_id), self.index_key]

    @property
    def index_key(self) -> str:
        """The sorted set of every session id (scores 0: ordered by their UTF-8 bytes)."""
        return f"{self.prefix}:sessions"

    @property
    def indexed_marker(self) -> str:
        """Set once the index holds the sessions written before it existed."""
        return f"{self.prefix}:sessions:indexed"

    def page_args(self, prefix: str, after: str | None, limit: int | None, tidy: bool) -> list[Any]:
        """The ``SESSIONS`` arguments of one page: ``ZRANGEBYLEX`` bounds, limit, key head,
        and whether to drop the ids of sessions that are gone from the index."""
        start, inclusive = page_start(prefix, after)
        low = (b"[" if inclusive else b"(") + start.encode()
        high = b"(" + prefix.encode() + b"\xff" if prefix else b"+"  # no UTF-8 holds 0xFF
        everything = limit is None or limit >= 2**32  # a sorted set holds fewer members
        return [low, high, -1 if everything else limit, f"{self.prefix}:e:", int(tidy)]

    def checkpoint_keys(self, session_id: str) -> list[str]:
        """The keys of the checkpoint scripts: the entries list and the checkpoint hash."""
        return [f"{self.prefix}:{kind}:{session_id}" for kind in "ec"]

    def entries_key(self, session_id: str) -> str:
        return f"{self.prefix}:e:{session_id}"

    def lease_key(self, session_id: str) -> str:
        return f"{self.prefix}:lock:{session_id}"

    def match(self, prefix: str) -> str:
        """The ``SCAN`` pattern of the entries lists of sessions starting with ``prefix``."""
        return f"{_glob_escape(self.prefix)}:e:{_glob_escape(prefix)}*"

    def session_of(self, key: bytes) -> str:
        return key.decode("utf-8")[len(self.prefix) + 3 :]

    def append_args(
        self, session_id: str, entries: Sequence[Entry], idempotency_key: str | None
    ) -> list[Any]:
        args: list[Any] = [self.ttl_ms, idempotency_key or "", session_id]
        for entry in entries:
            args.extend(_append_body(entry))
        return args

    def appended(self, session_id: str, args: list[Any], reply: list[Any]) -> list[Entry]:
        """The stored copies, from the reply of ``APPEND`` to ``args``."""
        status = int(reply[0])
        if status == -1:
            raise StoreError(
                f"Redis at {self.url}: entry id {reply[1].decode()!r} is already in session "
                f"{session_id!r} (entry ids are unique per session)"
            )
        if status == 0:  # a retried idempotency key: the first call's entries
            return [entry_from_json(doc) for doc in reply[1:]]
        first, bodies = int(reply[1]), args[4::2]  # copies, exactly as a load returns them
        return [entry_from_json(f'{{"seq":{first + i},{body}') for i, body in enumerate(bodies)]

    @staticmethod
    def checkpoint_of(reply: Any) -> Checkpoint | None:
        """``(seq, data)`` from the ``[seq, data]`` of a script (None: no checkpoint)."""
        return None if not reply or reply[0] is None else (int(reply[0]), bytes(reply[1]))

    def fill_args(self, session_id: str, entries: Sequence[Entry]) -> list[Any]:
        seqs = [entry.seq for entry in entries]
        if seqs != list(range(seqs[0], seqs[0] + len(seqs))):
            raise ValueError("fill() takes entries with consecutive sequence numbers")
        args: list[Any] = [self.ttl_ms, seqs[0], session_id]
        for entry in entries:
            args += [entry.id, encode_entry(entry, entry.seq)]
        return args

    def health(self, started: float, persistence: dict[Any, Any] | StoreError) -> dict[str, Any]:
        """The health report, from ``INFO persistence`` or the error that asking it raised."""
        report: dict[str, Any] = {"ok": True, "store": "redis", "durable": False, "url": self.url}
        if isinstance(persistence, StoreError):
            return {**report, "ok": False, "error": str(persistence)}
        aof = str(persistence.get("aof_enabled", 0)) == "1"
        detail = (
            "append-only file on: appends are as safe as the server's appendfsync"
            if aof
            else "no append-only file: appends since the last snapshot are lost in a crash"
        )
        latency = round((time.perf_counter() - started) * 1000, 3)
        report.update(durable=aof, detail=detail, prefix=self.prefix, ttl=self.ttl)
        return {**report, "latency_ms": latency}

    def client_options(self, timeout: float, retry_class: Any) -> dict[str, Any]:
        """Timeouts, and no retries: a retried append could be applied twice."""
        backoff = load_redis().backoff.NoBackoff()
        return {
            "socket_connect_timeout": timeout,
            "socket_timeout": timeout,
            "retry": retry_class(backoff, 0),
        }

    @contextmanager
    def errors(self, action: str) -> Iterator[None]:
        """Map redis-py errors to ``StoreError``/``StoreUnavailableError``; a ``StoreError``
        before anything is sent once the store is closed."""
        if self.closed:
            raise StoreError(f"the store at {self.url} is closed: cannot {action}")
        exceptions = load_redis().exceptions
        try:
            yield
        except exceptions.AuthenticationError as exc:  # a ConnectionError, but retrying won't help
            raise StoreError(
                f"Redis at {self.url} refused the credentials: {self._text(exc)}"
            ) from exc
        except (exceptions.ConnectionError, exceptions.TimeoutError) as exc:
            raise StoreUnavailableError(
                f"Redis at {self.url} is unavailable ({action}): {self._text(exc)}"
            ) from exc
        except exceptions.RedisError as exc:
            raise StoreError(f"Redis at {self.url}: {action} failed: {self._text(exc)}") from exc

    def _text(self, exc: BaseException) -> str:
        return scrub(str(exc) or type(exc).__name__, self.raw_url)

    # -- session locks: what a holder logs -------------------------------------------

    def still_leased(self, session_id: str, renewed: Any) -> bool:
        """Whether a renewal found the lease still ours; a lost one is logged."""
        if int(renewed) == 1:
            return True
        logger.warning(
            "the lock of session %r at %s was lost (its lease expired or was taken over)"
            " while the session was held",
            session_id,
            self.url,
        )
        return False

    def renewal_failed(self, session_id: str, exc: StoreError) -> None:
        logger.warning("could not renew the lock of session %r (retrying): %s", session_id, exc)

    def release_failed(self, session_id: str, exc: StoreError) -> None:
        logger.warning(
            "could not release the lock of session %r (retried every %s s until the server"
            " answers): %s",
            session_id,
            RELEASE_RETRY,
            exc,
        )


class Orphans:
    """Leases whose holder ended but could not delete them: retried until the server answers.

    Such a lease would otherwise keep its session locked for up to ``lock_ttl``
    after the server is back, or longer: a server restarted from its snapshot
    restores the lease, and a stalled one still runs the renewals it received
    while stopped. A take the client gave up on is one too: the stalled server
    may still run it when it resumes. Each is deleted only if it still holds its
    own token, so a later holder of the session is never touched. Shared by the
    holders' threads and the retrying one.
    """

    def __init__(self, url: str) -> None:
        self._url = url
        self._guard = threading.Lock()
        self._leases: dict[tuple[str, str], str] = {}  # (lease key, token) -> session id

    def add(self, key: str, token: str, session_id: str) -> None:
        with self._guard:
            self._leases[key, token] = session_id

    def pending(self) -> list[tuple[str, str, str]]:
        """(key, token, session id) of each lease still to release."""
        with self._guard:
            return [(key, token, session) for (key, token), session in self._leases.items()]

    def released(self, key: str, token: str, session_id: str) -> None:
        with self._guard:
            self._leases.pop((key, token), None)
        logger.info("released the lock of session %r at %s late", session_id, self._url)
