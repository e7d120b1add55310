"""``GET /v1/responses/{id}``: a response read back from the session that holds it.

A response id of this service names its session (``responses.session_in``);
the response itself is kept in the metadata of the reply it carried
(``responses.KEPT``), so it is found by reading the session from its newest
entry back, a page at a time. It is the tenant's own: another tenant's key
reads a session of its own, where the id is not found (404, as for an id
this service never gave, a response of a request sent with ``store:
false``, or one whose session was deleted or truncated past it). It is
answered whole: ``stream=true`` (re-streaming a response's events) is a 400.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Query

from ctxwindow.errors import CtxWindowError
from ctxwindow.server.errors import APIError, from_library
from ctxwindow.server.protocols.response_ids import session_in
from ctxwindow.server.protocols.responses import KEPT
from ctxwindow.server.service import Service
from ctxwindow.server.tenants import scoped

PAGE = 200  # entries read at a time, newest first

_RESPONSE = {"type": "object", "required": ["id", "object", "output"]}
FOUND: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "The response, as the request that made it was answered",
        "content": {"application/json": {"schema": _RESPONSE}},
    }
}


def router(service: Service, tenant: Any) -> APIRouter:
    api = APIRouter()

    @api.get("/v1/responses/{response_id}", tags=["responses"], responses=FOUND)
    async def retrieve(
        response_id: str,
        stream: bool = Query(False, description="not offered: the response is answered whole"),
        tenant: str = Depends(tenant),
    ) -> Any:
        """A response of the tenant's sessions, as it was answered (see the module)."""
        if stream:
            raise APIError(
                400, "stream=true is not offered: a kept response is answered whole",
                code="invalid_parameter", param="stream",
            )  # fmt: skip
        sid = _session(tenant, response_id)
        found = None if sid is None else await stored(service, sid, response_id)
        if found is None:
            shown = response_id if len(response_id) <= 80 else response_id[:80] + "…"
            raise APIError(
                404, f"response {shown!r} not found", code="response_not_found",
                param="response_id",
            )  # fmt: skip
        return found

    return api


def _session(tenant: str, response_id: str) -> str | None:
    """The tenant's store id of the session ``response_id`` names; None if it names none."""
    session = session_in(response_id)
    if session is None:
        return None
    try:
        return scoped(tenant, session)
    except APIError:  # no session could have that id: no response is in it
        return None


async def stored(service: Service, sid: str, response_id: str) -> dict[str, Any] | None:
    """The response ``response_id`` kept in session ``sid``, or None."""
    try:
        end = await service.session_size(sid)
        while end > 0:
            start = max(end - PAGE, 0)
            for entry in reversed(await service.store.load(sid, after=start, limit=end - start)):
                kept = entry.metadata.get(KEPT)
                if isinstance(kept, dict) and kept.get("id") == response_id:
                    return kept
            end = start
    except CtxWindowError as exc:
        raise from_library(exc) from exc
    return None
