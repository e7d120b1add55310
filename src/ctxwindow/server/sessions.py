"""The sessions API: list, append without calling the model, read, inspect the context,
delete."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from fastapi import APIRouter, Depends, Query, Request

from ctxwindow.errors import CtxWindowError
from ctxwindow.messages import Entry
from ctxwindow.policies.explain import EARLIER, Decision
from ctxwindow.policies.rules import text_of
from ctxwindow.redact.redactor import redacted_preview
from ctxwindow.server.errors import APIError, from_library
from ctxwindow.server.inputs import check_messages, idempotency_key, read_json
from ctxwindow.server.openapi import APPEND_BODY, SESSION_LIST
from ctxwindow.server.service import Service, entry_json
from ctxwindow.server.tenants import scoped
from ctxwindow.stores.base.checks import MAX_COUNT, find_unstorable

PATH_ID = "session_id"  # the parameter a bad session id in the path is named by
MAX_PAGE = 100  # sessions on one page of GET /v1/sessions at most


def router(service: Service, tenant: Any) -> APIRouter:
    """The ``/v1/sessions`` routes over ``service``; ``tenant`` names the caller (a dependency)."""
    api = APIRouter(prefix="/v1/sessions", tags=["sessions"])
    _add_list(api, service, tenant)
    _add_append(api, service, tenant)
    _add_messages(api, service, tenant)
    _add_context(api, service, tenant)
    _add_delete(api, service, tenant)
    return api


async def _existing(service: Service, session_id: str, tenant: str) -> str:
    """The tenant's scoped id of a stored session (``session_id``, or the id a listing's
    handle stands for); a 404 if it has no messages."""
    resolved = await service.listing.resolve(service.store, tenant, session_id)
    sid = None if resolved is None else scoped(tenant, resolved, param=PATH_ID)
    if sid is None or not await service.session_size(sid):
        raise APIError(404, f"no session {session_id!r}", code="session_not_found")
    return sid


def _add_list(api: APIRouter, service: Service, tenant: Any) -> None:
    listed = {
        "description": "A page of sessions",
        "content": {"application/json": {"schema": SESSION_LIST}},
    }

    @api.get("", responses={200: listed})
    async def list_sessions(
        limit: int = Query(20, ge=1, le=MAX_PAGE, description="sessions on the page"),
        after: str | None = Query(None, description="the last id of the previous page"),
        prefix: str | None = Query(None, description="only ids starting with it"),
        tenant: str = Depends(tenant),
    ) -> Any:
        """The tenant's sessions, sorted by id (code point), a page at a time.

        Only the tenant's own: their store ids all start ``tenant:``, which the
        service's own sessions (``ctxwindow.calibration``) never do.
        """
        if after is not None:  # a handle, when the list shows them: the id it stands for
            after = await service.listing.resolve(service.store, tenant, after) or after
        ids = await service.store.sessions(
            prefix=_scoped_prefix(tenant, prefix), after=_cursor(tenant, after), limit=limit + 1
        )
        data = [await _summary(service, sid, tenant) for sid in ids[:limit]]
        return {
            "object": "list",
            "data": data,
            "first_id": data[0].get("ref", data[0]["id"]) if data else None,
            "last_id": data[-1].get("ref", data[-1]["id"]) if data else None,
            "has_more": len(ids) > limit,
        }


def _scoped_prefix(tenant: str, prefix: str | None) -> str:
    """The store prefix of the tenant's ids starting with ``prefix`` (all for None or "")."""
    return scoped(tenant, prefix, param="prefix") if prefix else f"{tenant}:"


def _cursor(tenant: str, after: str | None) -> str | None:
    """The store id of a page's cursor (a session id: a 400 for one no session could have)."""
    return None if after is None else scoped(tenant, after, param="after")


async def _summary(service: Service, sid: str, tenant: str) -> dict[str, Any]:
    """A session of the list: its id as the tenant wrote it, its size, its first and last
    entries' times (None if it was deleted since it was listed)."""
    first = await service.store.load(sid, limit=1)
    last = await service.store.tail(sid, 1)
    return {
        **service.listing.shown(tenant, sid[len(tenant) + 1 :]),
        "object": "session",
        "messages": last[0].seq if last else 0,
        "created_at": first[0].created_at if first else None,
        "updated_at": last[0].created_at if last else None,
    }


def _add_append(api: APIRouter, service: Service, tenant: Any) -> None:
    @api.post(
        "/{session_id}/messages",
        openapi_extra={
            "requestBody": {
                "required": True,
                "content": {"application/json": {"schema": APPEND_BODY}},
            }
        },
    )
    async def append(session_id: str, request: Request, tenant: str = Depends(tenant)) -> Any:
        """Append messages to the session without calling the model."""
        body = await read_json(request, service.settings.max_request_bytes)
        messages = check_messages(body.get("messages"), service.settings.max_message_chars)
        model = body.get("model", "gpt-4o")
        if not isinstance(model, str) or not model:
            raise APIError(400, "'model' must be a model name", param="model")
        # A listing's handle names the session it stands for (else it is a new id).
        session_id = await service.listing.resolve(service.store, tenant, session_id) or session_id
        sid = scoped(tenant, session_id, param=PATH_ID)
        manager = service.manager(model)
        key = idempotency_key(request)
        limit = service.settings.max_messages_per_session
        try:
            stored = await manager.extend(sid, messages, idempotency_key=key, max_messages=limit)
        except CtxWindowError as exc:
            raise from_library(exc) from exc
        return {"object": "list", "data": [entry_json(e) for e in stored]}


def _add_messages(api: APIRouter, service: Service, tenant: Any) -> None:
    @api.get("/{session_id}/messages")
    async def messages(
        session_id: str,
        limit: int | None = Query(None, ge=1, le=MAX_COUNT),
        after: int = Query(0, ge=0, le=MAX_COUNT),
        tenant: str = Depends(tenant),
    ) -> Any:
        """Stored messages with ``seq > after``; user turns no reply followed are marked."""
        sid = await _existing(service, session_id, tenant)
        entries = await service.store.load(sid, after=after, limit=limit)
        at_end = limit is None or len(entries) < limit
        return {"object": "list", "data": _marked(entries, at_end)}


def _add_context(api: APIRouter, service: Service, tenant: Any) -> None:
    @api.get("/{session_id}/context")
    async def context(
        session_id: str,
        model: str = "gpt-4o",
        max_tokens: int | None = Query(None, ge=1, le=MAX_COUNT),
        query: str | None = None,
        limit: int | None = Query(None, ge=1, le=MAX_COUNT),
        after: int = Query(0, ge=0, le=MAX_COUNT),
        tenant: str = Depends(tenant),
    ) -> Any:
        """The context a completion would be sent now, with the report of every decision.

        ``limit`` and ``after`` page the report's rows (``decisions``) by seq, as
        ``/messages`` pages the history: the rows with ``seq > after``, at most
        ``limit`` of them, and ``has_more``; its totals are the whole session's.
        """
        if query is not None and (bad := find_unstorable(query)) is not None:
            raise APIError(400, f"query {bad[1]}", code="invalid_parameter", param="query")
        sid = await _existing(service, session_id, tenant)
        manager = service.manager(model)  # a 400 for an unknown model
        budget = service.budget(model)
        try:
            built = await manager.build(
                sid, query=query, max_tokens=min(max_tokens or budget, budget)
            )
            # One page of the history, or all of it (O(session): the inspector pages).
            page = await service.store.load(
                sid, after=after, limit=None if limit is None else limit + 1
            )
        except CtxWindowError as exc:
            raise from_library(exc) from exc
        more = limit is not None and len(page) > limit
        if limit is None and not after:
            report = built.report.covering(page, _left_out(service)).to_dict()
        else:  # the rows of the page; the totals the whole session's
            report = built.report.page(page[:limit], after, _left_out(service)).to_dict()
            report["earlier"] = {"entries": 0, "tokens": 0}  # each has its row on a page
        return {
            "messages": built.messages,
            "total_tokens": built.total_tokens,
            "report": report,
            "has_more": more,
        }


def _left_out(service: Service) -> Callable[[Entry], Decision]:
    """The row of a stored message the window's report does not itemise (its preview
    redacted, as the report's are)."""
    redact = service.redactor

    def row(entry: Entry) -> Decision:
        decision = Decision.of(entry, "evicted", EARLIER)
        if redact is None:
            return decision
        return replace(decision, preview=redacted_preview(text_of(entry.message), redact))

    return row


def _add_delete(api: APIRouter, service: Service, tenant: Any) -> None:
    @api.delete("/{session_id}")
    async def delete(session_id: str, tenant: str = Depends(tenant)) -> Any:
        """Delete the session: store, windows, archive."""
        sid = await _existing(service, session_id, tenant)
        manager = service.manager("gpt-4o")  # any model's: the session lock is the store's
        async with manager.turn(sid):
            for other in service.managers():
                await other.delete(sid)  # the windows, the archive and the store
        return {"id": session_id, "object": "session.deleted", "deleted": True}


def _marked(entries: list[Entry], at_end: bool) -> list[dict[str, Any]]:
    """Entries as JSON; user turns with no assistant reply after them marked ``unanswered``."""
    answered = not at_end
    out: list[dict[str, Any]] = []
    for entry in reversed(entries):
        role = entry.message["role"]
        if role == "assistant":
            answered = True
        out.append(entry_json(entry, unanswered=role == "user" and not answered))
    return out[::-1]
