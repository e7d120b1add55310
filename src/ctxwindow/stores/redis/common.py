"""What both Redis stores share: the key layout, options, error mapping and orphaned leases.

``Layout`` knows the key names, builds the arguments of the Lua scripts
(``scripts``, registered on a client by ``Scripts``) and reads their
replies; the stores in ``aio`` and ``sync`` only send the commands.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import re
import threading
import time
import zlib
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit

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
CLUSTER_SCHEMES = ("redis+cluster", "rediss+cluster")
SCHEMES = ("redis", "rediss", "unix", *CLUSTER_SCHEMES)
RELEASE_RETRY = 0.5  # seconds between the retries of a release the server did not take
# A cluster's index of session ids is this many sorted sets, each in a slot of its own (a
# session's shard is a hash of its id): a page of ``sessions()`` merges their pages. Fixed
# for good: a store that counted otherwise would look for ids in the wrong sets.
INDEX_SHARDS = 16
REDIRECTIONS = 3  # MOVED replies a write that waits for replicas follows before it gives up
NOT_INDEXED = 2  # APPEND's reply (FILL's, negated) to a first try that would create a session
NOT_NEWEST = 3  # APPEND's reply to an append_after whose last entry is not the newest one


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


@dataclasses.dataclass(frozen=True)
class Target:
    """Where a store's URL points: one server (``url``, for redis-py's ``from_url``) or a
    cluster (``nodes`` to start from, and the ``options`` of every connection)."""

    cluster: bool
    url: str
    nodes: tuple[tuple[str, int], ...]
    options: dict[str, Any]
    wait_replicas: int


def parse_url(url: str) -> Target:
    """The target of a Redis URL; ``ValueError`` naming what is wrong with it.

    ``redis://``, ``rediss://`` and ``unix://`` are one server (redis-py's
    spelling); ``redis+cluster://[user:password@]host:port[,host:port…]``
    (``rediss+cluster://`` with TLS) is a Redis Cluster, found from any of the
    nodes listed. Either may end with ``?wait_replicas=N``: an append returns
    only once N replicas have it (``WAIT``).
    """
    scheme = urlsplit(url).scheme if isinstance(url, str) else ""
    if scheme not in SCHEMES:
        raise ValueError(
            f"not a Redis URL: {redact_url(str(url))!r} (expected redis://, rediss://, unix://"
            " or redis+cluster://)"
        )
    head, _, query = url.partition("?")
    params = parse_qsl(query, keep_blank_values=True)
    waits = [value for name, value in params if name == "wait_replicas"]
    rest = [(name, value) for name, value in params if name != "wait_replicas"]
    wait_replicas = _wait_replicas(waits[-1] if waits else "0", url)
    if scheme not in CLUSTER_SCHEMES:
        single = head + ("?" + urlencode(rest) if rest else "")
        return Target(False, single, (), {}, wait_replicas)
    if rest:
        names = ", ".join(sorted({name for name, _ in rest}))
        raise ValueError(
            f"{redact_url(url)!r}: a cluster URL takes no parameter but wait_replicas (got {names})"
        )
    return Target(True, head, *_cluster_nodes(head, scheme), wait_replicas)


def make_client(module: Any, target: Target, options: dict[str, Any]) -> Any:
    """A client of ``target`` from ``module`` (``redis`` or ``redis.asyncio``): a
    ``RedisCluster`` started from the URL's nodes, or a ``Redis`` of the URL."""
    if target.cluster:
        nodes = [module.cluster.ClusterNode(host, port) for host, port in target.nodes]
        return module.RedisCluster(startup_nodes=nodes, **target.options, **options)
    return module.Redis.from_url(target.url, **options)


def _wait_replicas(text: str, url: str) -> int:
    if not text.isdigit():
        raise ValueError(
            f"{redact_url(url)!r}: wait_replicas must be a whole number of replicas, got {text!r}"
        )
    return int(text)


def _cluster_nodes(head: str, scheme: str) -> tuple[tuple[tuple[str, int], ...], dict[str, Any]]:
    """The seed nodes and connection options of ``redis+cluster://…`` (without its query)."""
    rest = head[len(scheme) + 3 :]
    userinfo, _, hosts = rest.rpartition("@")
    hosts, _, path = hosts.partition("/")
    if path not in ("", "0"):
        raise ValueError(f"{redact_url(head)!r}: a Redis Cluster has database 0 only, not {path!r}")
    nodes = []
    for address in hosts.split(","):
        host, _, port = address.rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"{redact_url(head)!r}: each node is host:port, got {address!r}")
        nodes.append((host.strip("[]"), int(port)))
    options: dict[str, Any] = {"ssl": scheme == "rediss+cluster"}
    if userinfo:
        user, has_password, password = userinfo.partition(":")
        options["username"] = unquote(user) or None
        options["password"] = unquote(password) if has_password else None
    return tuple(nodes), options


def merged_page(batches: Sequence[Sequence[bytes]], limit: int | None) -> list[str]:
    """The first ``limit`` ids (all if None) of the shards' pages, in code-point order.

    Each shard's page is its first ``limit`` ids, and no id is in two shards, so
    the first ``limit`` of them all are among them. Code-point order is the
    order of the UTF-8 bytes that ``ZRANGEBYLEX`` compares.
    """
    ids = sorted(member.decode("utf-8") for batch in batches for member in batch)
    return ids if limit is None else ids[:limit]


def check_options(url: str, prefix: str, ttl: float | None, lock_ttl: float) -> Target:
    """The URL's target; ``ValueError`` for a URL that is not Redis's, an empty prefix
    (or, on a cluster, one with ``{`` or ``}``, which would move its hash tag), a bad ttl."""
    target = parse_url(url)
    if not isinstance(prefix, str) or not prefix:
        raise ValueError("prefix must be a non-empty string")
    if target.cluster and ("{" in prefix or "}" in prefix):
        raise ValueError(f"on a Redis Cluster the prefix may not hold '{{' or '}}': {prefix!r}")
    if ttl is not None and not ttl > 0:
        raise ValueError(f"ttl must be None or a positive number of seconds, got {ttl!r}")
    if isinstance(lock_ttl, bool) or not isinstance(lock_ttl, (int, float)) or not lock_ttl > 0:
        raise ValueError(f"lock_ttl must be a positive number of seconds, got {lock_ttl!r}")
    return target


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
    """Key names, script arguments and replies, shared by the sync and async stores.

    On one server a session's keys are ``P:e:<session>`` and so on, and the
    scripts that create or remove a session keep the index ``P:sessions`` as
    they go. On a cluster every key of a session carries the hash tag
    ``{s:<session>}`` (``P:{s:<session>}:e``…), so each script touches one
    slot, and the index is ``INDEX_SHARDS`` sorted sets ``P:sessions:{ix:<n>}``
    that the store keeps beside the scripts (``shard_key``).
    """

    def __init__(self, url: str, prefix: str, ttl: float | None, lock_ttl: float) -> None:
        self.target = check_options(url, prefix, ttl, lock_ttl)
        self.cluster = self.target.cluster
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
        self.wait_ms = 0  # set by client_options: how long WAIT waits for the replicas

    def _key(self, kind: str, session_id: str) -> str:
        if self.cluster:
            return f"{self.prefix}:{{s:{session_id}}}:{kind}"
        return f"{self.prefix}:{kind}:{session_id}"

    def keys(self, session_id: str) -> list[str]:
        """The session's entries list, ids hash, idempotency keys hash and checkpoint hash."""
        return [self._key(kind, session_id) for kind in "eikc"]

    def indexed_keys(self, session_id: str) -> list[str]:
        """The keys of the scripts that create or remove a session (append, fill, delete,
        truncate): the session's, and on one server the index of session ids too."""
        keys = self.keys(session_id)
        return keys if self.cluster else [*keys, self.index_key]

    @property
    def index_key(self) -> str:
        """The sorted set of every session id (scores 0: ordered by their UTF-8 bytes)."""
        return f"{self.prefix}:sessions"

    def shard_key(self, session_id: str) -> str:
        """On a cluster, the part of the index that holds ``session_id``."""
        return self.shard_keys[zlib.crc32(session_id.encode("utf-8")) % INDEX_SHARDS]

    @property
    def shard_keys(self) -> list[str]:
        return [f"{self.prefix}:sessions:{{ix:{n}}}" for n in range(INDEX_SHARDS)]

    @property
    def indexed_marker(self) -> str:
        """Set once the index holds the sessions written before it existed."""
        return f"{self.prefix}:sessions:indexed"

    def bounds(self, prefix: str, after: str | None) -> tuple[bytes, bytes]:
        """The ``ZRANGEBYLEX`` bounds of a page of ``sessions()``."""
        start, inclusive = page_start(prefix, after)
        low = (b"[" if inclusive else b"(") + start.encode()
        high = b"(" + prefix.encode() + b"\xff" if prefix else b"+"  # no UTF-8 holds 0xFF
        return low, high

    def page_args(self, prefix: str, after: str | None, limit: int | None, tidy: bool) -> list[Any]:
        """The ``SESSIONS`` arguments of one page: ``ZRANGEBYLEX`` bounds, limit, key head,
        and whether to drop the ids of sessions that are gone from the index."""
        low, high = self.bounds(prefix, after)
        everything = limit is None or limit >= 2**32  # a sorted set holds fewer members
        return [low, high, -1 if everything else limit, f"{self.prefix}:e:", int(tidy)]

    def checkpoint_keys(self, session_id: str) -> list[str]:
        """The keys of the checkpoint scripts: the entries list and the checkpoint hash."""
        return [self._key(kind, session_id) for kind in "ec"]

    def entries_key(self, session_id: str) -> str:
        return self._key("e", session_id)

    def lease_key(self, session_id: str) -> str:
        return self._key("lock", session_id)

    def match(self, prefix: str) -> str:
        """The ``SCAN`` pattern of the entries lists of sessions starting with ``prefix``."""
        return f"{_glob_escape(self.prefix)}:e:{_glob_escape(prefix)}*"

    def session_of(self, key: bytes) -> str:
        return key.decode("utf-8")[len(self.prefix) + 3 :]

    def append_args(
        self,
        session_id: str,
        entries: Sequence[Entry],
        idempotency_key: str | None,
        last: tuple[int, str] | None = None,
    ) -> list[Any]:
        """``APPEND``'s arguments; on a cluster, as a first try that may not create the
        session (``may_create`` turns that on once the index holds it). With ``last``,
        the entries are stored only if the session's newest entry is that ``(seq, id)``."""
        newest = ("", "") if last is None else last  # '': a plain append checks nothing
        args: list[Any] = [self.ttl_ms, idempotency_key or "", session_id, int(not self.cluster)]
        args.extend(newest)
        for entry in entries:
            args.extend(_append_body(entry))
        return args

    @staticmethod
    def may_create(args: list[Any]) -> list[Any]:
        """``APPEND`` or ``FILL`` arguments that may create the session."""
        return [*args[:3], 1, *args[4:]]

    def appended(self, session_id: str, args: list[Any], reply: list[Any]) -> list[Entry]:
        """The stored copies, from the reply of ``APPEND`` to ``args`` (any but a refused
        ``append_after``'s, ``NOT_NEWEST``)."""
        status = int(reply[0])
        if status == -1:
            raise StoreError(
                f"Redis at {self.url}: entry id {reply[1].decode()!r} is already in session "
                f"{session_id!r} (entry ids are unique per session)"
            )
        if status == 0:  # a retried idempotency key: the first call's entries
            return [entry_from_json(doc) for doc in reply[1:]]
        first, bodies = int(reply[1]), args[7::2]  # copies, exactly as a load returns them
        return [entry_from_json(f'{{"seq":{first + i},{body}') for i, body in enumerate(bodies)]

    @staticmethod
    def checkpoint_of(reply: Any) -> Checkpoint | None:
        """``(seq, data)`` from the ``[seq, data]`` of a script (None: no checkpoint)."""
        return None if not reply or reply[0] is None else (int(reply[0]), bytes(reply[1]))

    def fill_args(self, session_id: str, entries: Sequence[Entry]) -> list[Any]:
        seqs = [entry.seq for entry in entries]
        if seqs != list(range(seqs[0], seqs[0] + len(seqs))):
            raise ValueError("fill() takes entries with consecutive sequence numbers")
        args: list[Any] = [self.ttl_ms, seqs[0], session_id, int(not self.cluster)]
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
        """Timeouts, and no retries: a retried append could be applied twice. (A cluster's
        client still follows MOVED and ASK: a redirected command had not run.)"""
        backoff = load_redis().backoff.NoBackoff()
        self.wait_ms = max(1, round(timeout * 500))  # half the timeout: the reply comes in time
        return {
            "socket_connect_timeout": timeout,
            "socket_timeout": timeout,
            "retry": retry_class(backoff, 0),
        }

    def check_replicas(self, acknowledged: int, wanted: int) -> None:
        """``StoreUnavailableError`` if fewer replicas than ``wanted`` took a write in time."""
        if acknowledged < wanted:
            raise StoreUnavailableError(
                f"Redis at {self.url}: {acknowledged} of the {wanted} replicas asked for"
                f" (wait_replicas) took the write within {self.wait_ms} ms; it may be kept:"
                " retry with the same idempotency key"
            )

    def cluster_health(self, persistence: dict[Any, Any], info: dict[Any, Any]) -> dict[Any, Any]:
        """A cluster's ``INFO persistence`` for the health report: off unless every node has
        its append-only file on; ``StoreError`` unless the cluster says its state is ok."""
        nodes = [value for value in persistence.values() if isinstance(value, dict)]
        if str(info.get("cluster_state")) != "ok":
            raise StoreUnavailableError(
                f"Redis Cluster at {self.url} is not ok: cluster_state"
                f" {info.get('cluster_state')!r}"
            )
        if not nodes:  # one node answered, flat
            return persistence
        every = all(str(node.get("aof_enabled", 0)) == "1" for node in nodes)
        return {"aof_enabled": int(every)}

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
        except (
            exceptions.ConnectionError,
            exceptions.TimeoutError,
            exceptions.ClusterDownError,  # a failover under way: MasterDownError too
            exceptions.TryAgainError,
            exceptions.AskError,  # a redirection not followed in time: MovedError too
            exceptions.RedisClusterException,  # no node answered for a slot, and the like
        ) as exc:
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
