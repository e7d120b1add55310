"""Response ids of the Responses API, and which session a request names.

The session is named by ``conversation`` (an id, or ``{"id": ...}``), by
``previous_response_id`` (a response id of this service encodes its session:
``resp_`` + 24 random hex digits + the session id in URL-safe base64), or by
``X-Session-Id``. A request naming none starts a new session (its id is in
the response id, so ``previous_response_id`` continues it).
"""

from __future__ import annotations

import base64
import binascii
import secrets
import uuid
from typing import Any

from fastapi import Request

from ctxwindow.server import inputs
from ctxwindow.server.errors import APIError
from ctxwindow.server.tenants import scoped

PREFIX = "resp_"
NONCE = 24  # hex digits of randomness in a response id, before the session


def response_id(session_id: str) -> str:
    """A new response id of the session ``session_id`` (the client's id, unscoped)."""
    encoded = base64.urlsafe_b64encode(session_id.encode()).rstrip(b"=").decode()
    return f"{PREFIX}{secrets.token_hex(NONCE // 2)}{encoded}"


def session_of(response: str) -> str:
    """The session id a response id of this service encodes; a 400 for any other id."""
    session = session_in(response)
    if session is None:
        raise not_found(response)
    return session


def session_in(response: str) -> str | None:
    """The session id a response id of this service encodes; None for any other id."""
    encoded = response[len(PREFIX) + NONCE :]
    if not response.startswith(PREFIX) or not encoded:
        return None
    try:
        return base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4)).decode()
    except (binascii.Error, ValueError):
        return None


def named_session(
    request: Request, body: dict[str, Any], tenant: str
) -> tuple[str, str, str] | None:
    """(scoped id, the client's id, the field that named it) of the request's session."""
    conversation = _conversation(body.get("conversation"))
    previous = body.get("previous_response_id")
    if conversation is not None and previous is not None:
        raise APIError(
            400, "send either conversation or previous_response_id, not both",
            param="previous_response_id",
        )  # fmt: skip
    named = [
        (value, param)
        for value, param in (
            (inputs.header_text(request, "X-Session-Id"), "X-Session-Id"),
            (conversation, "conversation"),
            (None if previous is None else session_of(previous), "previous_response_id"),
        )
        if value is not None
    ]
    found = [(scoped(tenant, value, param=param), value, param) for value, param in named]
    if len({sid for sid, _, _ in found}) > 1:
        raise APIError(
            400, f"{found[1][2]} names another session than {found[0][2]}", param=found[1][2]
        )
    return found[0] if found else None


def _conversation(value: Any) -> str | None:
    if isinstance(value, dict):
        value = value.get("id")
        if not isinstance(value, str):
            raise invalid("conversation.id", "must be a string")
    if value is not None and not isinstance(value, str):
        raise invalid("conversation", "must be an id or {'id': ...}")
    return value


def new_session(tenant: str) -> tuple[str, str]:
    """A session for a request that names none: an id nobody can guess."""
    session_id = f"resp-{uuid.uuid4().hex}"
    return scoped(tenant, session_id), session_id


def invalid(name: str, what: str) -> APIError:
    return APIError(400, f"'{name}' {what}", code="invalid_value", param=name)


def not_found(response: str) -> APIError:
    shown = response if len(response) <= 80 else response[:80] + "…"
    return APIError(
        400, f"previous response {shown!r} not found", code="previous_response_not_found",
        param="previous_response_id",
    )  # fmt: skip
