"""Session ids in listings: as written, redacted, or hashed (``Settings.listed_ids``).

An id is what a client chose, and clients choose e-mail addresses, phone
numbers, customer names. ``GET /v1/sessions`` (and the inspector's list) can
show instead the id redacted (``support-[EMAIL]``) with a **handle** to open
the session by, or the handle alone. A handle is ``~`` and 32 hex digits of
an HMAC-SHA256 of the tenant and id under ``listed_ids_key``: the same in
every process with that key, and no one without the key can tell which id
it stands for (not even by hashing a guess). The ``/v1/sessions/{id}``
routes and the list's ``after`` take a handle in place of the id: the
handles of the ids a process listed are remembered (the last 65,536), and
another is found by hashing the tenant's ids a page at a time (O(sessions),
once per handle and process).
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections import OrderedDict
from typing import Any

from ctxwindow.redact.redactor import RedactFn, Redactor, redacted_preview
from ctxwindow.stores.base import AsyncStore

HANDLE = re.compile(r"~[0-9a-f]{32}")
REMEMBERED = 65_536  # handles a process keeps resolved
PAGE = 1_000  # ids read at a time to find a handle not remembered


class Listing:
    """How a listing shows session ids, and the handles it gave back to ids."""

    def __init__(self, mode: str, key: bytes | None, redact: RedactFn | None) -> None:
        self.mode = mode
        self._key = key or b""
        self._redact = redact or Redactor()  # the service's, else the default detectors
        self._known: OrderedDict[str, str] = OrderedDict()  # (tenant:handle) -> id

    def handle(self, tenant: str, session_id: str) -> str:
        digest = hmac.new(self._key, f"{tenant}:{session_id}".encode(), hashlib.sha256)
        return "~" + digest.hexdigest()[:32]

    def shown(self, tenant: str, session_id: str) -> dict[str, Any]:
        """The id fields of a listed session: ``id`` (and ``ref`` when redacted)."""
        if self.mode == "plain":
            return {"id": session_id}
        handle = self.handle(tenant, session_id)
        self._remember(f"{tenant}:{handle}", session_id)
        if self.mode == "hashed":
            return {"id": handle}
        shown = redacted_preview(session_id, self._redact, width=len(session_id) + 64)
        return {"id": shown, "ref": handle}

    async def resolve(self, store: AsyncStore, tenant: str, given: str) -> str | None:
        """The id a handle stands for (None: no session of the tenant has it); any other
        ``given`` is an id already."""
        if self.mode == "plain" or not HANDLE.fullmatch(given):
            return given
        found = self._known.get(f"{tenant}:{given}")
        if found is not None:
            self._known.move_to_end(f"{tenant}:{given}")
            return found
        after = None
        while page := await store.sessions(prefix=f"{tenant}:", after=after, limit=PAGE):
            for sid in page:
                session_id = sid[len(tenant) + 1 :]
                if hmac.compare_digest(self.handle(tenant, session_id), given):
                    self._remember(f"{tenant}:{given}", session_id)
                    return session_id
            after = page[-1]
        return None

    def _remember(self, key: str, session_id: str) -> None:
        self._known[key] = session_id
        self._known.move_to_end(key)
        while len(self._known) > REMEMBERED:
            self._known.popitem(last=False)
