"""The store a ``ctxwindow sessions`` command works on, and where else a session is.

``opened`` opens the store of ``--store URL`` for one command, as it is (read
only unless told; any store failure ends the command in one line); the
sessions and their entries are read ``PAGE`` at a time. An unknown session's
error says where the id is if it is elsewhere (written as the store keeps it,
or under another tenant), and a tenant with no sessions is told whose the
store has, among its first ``LOOKED_AT`` ids.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import unicodedata
from collections.abc import Iterator
from typing import Any, NoReturn

import typer

from ctxwindow.cli_output import fail
from ctxwindow.errors import StoreError
from ctxwindow.messages import Entry
from ctxwindow.stores import Store, open_store
from ctxwindow.stores.tenants import session_key, tenant_prefix
from ctxwindow.stores.url import default_store_url

PAGE = 1000  # entries, or sessions, read from the store at a time
LOOKED_AT = 100_000  # ids an error reads at most to say where else a session is


@contextlib.contextmanager
def opened(url: str | None, *, read_only: bool = True) -> Iterator[Store]:
    """The existing store of ``url`` (None: the one ``ctxwindow serve`` uses by default),
    read-only unless told, closed at the end; any store failure ends the command in one
    line (exit status 2)."""
    given = url or default_store_url(os.environ.get("CTXWINDOW_DATA_DIR") or ".")
    if given.startswith("memory:") or given in ("sqlite://", "sqlite:///:memory:"):
        typer.echo(
            f"ctxwindow: warning: {given} is a new, empty store: it holds no sessions", err=True
        )
    try:
        store = open_store(given, create=False, read_only=read_only)
    except (StoreError, ImportError, ValueError) as exc:
        default = " (the default store, as for ctxwindow serve; give --store URL)"
        fail(f"{exc}{'' if url else default}")
    try:
        with store:
            yield store
    except (StoreError, ImportError, ValueError) as exc:
        fail(str(exc))


def of_tenant(tenant: str) -> str:
    return f" of tenant {tenant!r}" if tenant else ""


def missing(store: Store, tenant: str, session_id: str) -> NoReturn:
    """The error of an unknown session, saying where the id is if it is elsewhere."""
    found = f"no session {session_id!r}{of_tenant(tenant)} in {store.url}"
    fail(found + (as_stored(store, tenant, session_id) or under_tenants(store, tenant, session_id)))


def as_stored(store: Store, tenant: str, session_id: str) -> str:
    """A hint for an id written as the store keeps it (``TENANT:ID``, or a library's own)."""
    with contextlib.suppress(StoreError):  # not an id any store keeps
        if tenant and store.tail(session_id, 1):
            owner, _, rest = session_id.partition(":")
            if not rest:
                return f"; the store has {session_id!r} with no tenant: add --tenant ''"
            option = "" if owner == tenant else f" with --tenant {shlex.quote(owner)}"
            return f"; ids are written without their tenant: did you mean {rest!r}{option}?"
    return ""


def under_tenants(store: Store, tenant: str, session_id: str) -> str:
    """A hint naming the tenants that have a session ``session_id`` (among the first
    ``LOOKED_AT`` ids of the store)."""
    wanted = unicodedata.normalize("NFC", session_id)
    owners = [
        owner for owner, _, rest in (key.partition(":") for key in first_keys(store))
        if rest == wanted and owner != tenant
    ]  # fmt: skip
    if not owners:
        return ""
    if len(owners) == 1:
        return f"; tenant {owners[0]!r} has one: add --tenant {shlex.quote(owners[0])}"
    names = ", ".join(repr(owner) for owner in owners[:3]) + (", ..." if len(owners) > 3 else "")
    return f"; tenants {names} have one: add --tenant NAME"


def other_tenants(store: Store, tenant: str) -> None:
    """Say on stderr whose sessions the store has, when ``tenant`` has none."""
    owners: dict[str, None] = {}  # in order, once each
    for key in first_keys(store):
        owner, colon, _ = key.partition(":")
        owners[owner if colon else ""] = None
    named = [owner for owner in owners if owner]
    whose = []
    if named:
        names = ", ".join(repr(owner) for owner in named[:5])
        whose.append(f"of {names}{', ...' if len(named) > 5 else ''} (--tenant NAME)")
    if "" in owners:
        whose.append("with no tenant (--tenant '')")
    if whose:
        typer.echo(
            f"ctxwindow: no sessions of tenant {tenant!r} in {store.url}; it has sessions"
            f" {' and '.join(whose)}",
            err=True,
        )


def first_keys(store: Store) -> Iterator[str]:
    """The store's own ids, in order, up to ``LOOKED_AT`` of them."""
    after = None
    for _ in range(LOOKED_AT // PAGE):
        page = store.sessions(after=after, limit=PAGE)
        yield from page
        if len(page) < PAGE:
            return
        after = page[-1]


def page_of(
    store: Store, prefix: str | None, after: str | None, limit: int | None
) -> tuple[list[str], bool]:
    """The ids of one page (every id for ``limit=None``), and whether more follow."""
    if limit is not None:
        ids = store.sessions(prefix=prefix, after=after, limit=limit + 1)
        return ids[:limit], len(ids) > limit
    ids = []
    while page := store.sessions(prefix=prefix, after=after, limit=PAGE):
        ids += page
        after = page[-1]
    return ids, False


def summary(store: Store, tenant: str, key: str) -> dict[str, Any]:
    """A session as GET /v1/sessions shows one: messages stored, first and last times."""
    first, last = store.load(key, limit=1), store.tail(key, 1)
    return {
        "id": key[len(tenant_prefix(tenant)) :],
        "tenant": tenant,
        "object": "session",
        "messages": last[0].seq if last else 0,
        "created_at": first[0].created_at if first else None,
        "updated_at": last[0].created_at if last else None,
    }


def last_seq(store: Store, session_id: str) -> int:
    last = store.tail(session_id, 1)
    return last[0].seq if last else 0


def entry_pages(store: Store, tenant: str, session_id: str) -> Iterator[list[Entry]]:
    """The session's entries, ``PAGE`` at a time; an unknown session fails at the first."""
    key = session_key(tenant, session_id)
    page = store.load(key, limit=PAGE)
    if not page:
        missing(store, tenant, session_id)
    while page:
        yield page
        page = store.load(key, after=page[-1].seq, limit=PAGE)


def every_entry(store: Store, tenant: str, session_id: str) -> list[Entry]:
    return [entry for page in entry_pages(store, tenant, session_id) for entry in page]
