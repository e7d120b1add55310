"""A tenant's sessions in a store that many tenants share: the store's id is ``TENANT:ID``.

The service (``ctxwindow serve``) keeps every tenant's sessions in one store,
each under the id the client wrote with the tenant's name in front, so that
two tenants never meet in one session. ``session_key`` is that mapping, the
one the service and ``ctxwindow sessions`` use; ``tenant_prefix`` is the store
prefix of a tenant's ids. The tenant ``""`` stands for none: a store written
by the library, whose ids are the store's own.

>>> session_key("default", "user-42")
'default:user-42'
>>> tenant_prefix("acme", "会话")
'acme:会话'
>>> session_key("", "user-42")
'user-42'
"""

from __future__ import annotations

import re
import unicodedata

from ctxwindow.errors import StoreInputError
from ctxwindow.stores.base.checks import MAX_SESSION_ID as STORE_MAX_SESSION_ID
from ctxwindow.stores.base.checks import check_session_id

ANONYMOUS = "default"  # the tenant of a service without API keys
MAX_SESSION_ID = 200  # characters of a client's session id; the tenant's name comes on top

_CONTROL = re.compile("[\x00-\x1f\x7f\ud800-\udfff]")


def session_key(tenant: str, session_id: str) -> str:
    """The store's id of the tenant's session ``session_id``: ``tenant:id``, in NFC.

    Unicode writes some characters in several ways (``Å`` is U+00C5, or ``A``
    and U+030A); normalised to NFC they are one session wherever the id came
    from. ``StoreInputError`` says why an id cannot be one: too long for the
    store with the tenant's name, control characters, or ``/``, ``.``, ``..``
    (the service's paths, ``/v1/sessions/{id}``, could not name it). For the
    tenant ``""`` the id is the store's own, checked as every store checks ids.
    """
    if not tenant:
        return check_session_id(session_id)
    session_id = unicodedata.normalize("NFC", session_id)
    room = min(MAX_SESSION_ID, STORE_MAX_SESSION_ID - len(tenant) - 1)
    if not session_id or len(session_id) > room:
        raise StoreInputError(_length_problem(tenant, room))
    if _CONTROL.search(session_id):
        raise StoreInputError(
            "a session id must not hold control characters (U+0000 to U+001F, U+007F)"
            " or lone surrogates"
        )
    if "/" in session_id or session_id in (".", ".."):
        raise StoreInputError(
            "a session id must not hold '/', nor be '.' or '..': it is one segment of"
            " the API's paths (/v1/sessions/{id}/messages), which could not reach it"
        )
    return f"{tenant}:{session_id}"


def tenant_prefix(tenant: str, prefix: str = "") -> str:
    """The store prefix of the tenant's ids that start with ``prefix`` (all of them for "")."""
    if prefix:
        return session_key(tenant, prefix)
    return f"{tenant}:" if tenant else ""


def _length_problem(tenant: str, room: int) -> str:
    if room == MAX_SESSION_ID:
        return f"a session id must have 1 to {MAX_SESSION_ID} characters"
    return (
        f"a session id of tenant {tenant!r} must have 1 to {max(room, 0)} characters: the"
        f" store keeps ids of up to {STORE_MAX_SESSION_ID} characters, and the tenant's name"
        f" ({len(tenant)} characters) and a colon come first"
    )
