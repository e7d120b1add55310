"""The sessions API: list, append without calling the model, read, inspect the context,
delete."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Query, Request

from ctxwindow.errors import CtxWindowError
from ctxwindow.messages import Entry
from ctxwindow.policies.explain import EARLIER, Decision, Report, in_order
from ctxwindow.policies.rules import text_of
from ctxwindow.redact.redactor import redacted_preview
from ctxwindow.server.errors import APIError, from_library
from ctxwindow.server.inputs import check_messages, idempotency_key, read_json
from ctxwindow.server.openapi import APPEND_BODY, SESSION_LIST, json_body
from ctxwindow.server.service import Service, entry_json
from ctxwindow.server.tenants import scoped
from ctxwindow.stores.base.checks import MAX_COUNT, find_unstorable

PATH_ID = "session_id"  # the parameter a bad session id in the path is named by
MAX_PAGE = 100  # sessions on one page of GET /v1/sessions at most
DEFAULT_MODEL = "gpt-4o"  # a context's model when neither the request nor the session names one
LOOK_BACK = 16  # the newest entries searched for the session's last request's model
State = Literal["pinned", "kept", "compressed", "recalled", "summarized", "evicted"]  # STATES


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
        openapi_extra=json_body(APPEND_BODY),
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
        model: str | None = Query(
            None, description="the model to build for; by default the session's last request's"
        ),
        max_tokens: int | None = Query(None, ge=1, le=MAX_COUNT),
        query: str | None = None,
        limit: int | None = Query(None, ge=1, le=MAX_COUNT),
        after: int = Query(0, ge=0, le=MAX_COUNT),
        state: Annotated[State | None, Query(description="only the rows in this state")] = None,
        tenant: str = Depends(tenant),
    ) -> Any:
        """The context a completion would be sent now, with the report of every decision.

        Built for ``model`` within ``max_tokens``; without ``model``, for the model
        and the budget of the session's last request (``model_source`` says which:
        ``parameter``, ``session`` or ``default``, gpt-4o). ``limit`` and ``after``
        page the report's rows (``decisions``) by seq, as ``/messages`` pages the
        history: the rows with ``seq > after``, at most ``limit`` of them, and
        ``has_more``; ``state`` keeps the rows in that state only. The totals are
        the whole session's.
        """
        if query is not None and (bad := find_unstorable(query)) is not None:
            raise APIError(400, f"query {bad[1]}", code="invalid_parameter", param="query")
        sid = await _existing(service, session_id, tenant)
        model, source, asked = await _model_of(service, sid, model, max_tokens)
        manager = service.manager(model)  # a 400 for an unknown model
        budget = service.budget(model)
        try:
            built = await manager.build(sid, query=query, max_tokens=min(asked or budget, budget))
            report, more = await _rows(service, sid, built.report, limit, after, state)
        except CtxWindowError as exc:
            raise from_library(exc) from exc
        return {
            "model": model,
            "model_source": source,
            "messages": built.messages,
            "total_tokens": built.total_tokens,
            "report": report,
            "has_more": more,
            "stable_end": _stable_end(built.report, len(built.messages)),
        }


async def _model_of(
    service: Service, sid: str, model: str | None, max_tokens: int | None
) -> tuple[str, str, int | None]:
    """(model, where it comes from, the budget asked): the parameters, else the session's
    last request's model and budget, else the default model."""
    if model is not None:
        return model, "parameter", max_tokens
    last = await _last_request(service, sid)
    if last is None:
        return DEFAULT_MODEL, "default", max_tokens
    try:
        service.model(last[0])
    except APIError as exc:  # the service's models changed since
        raise APIError(
            400, f"the session's last request was for model {last[0]!r}, which this service"
            " does not know now: pass model=", code="model_not_found", param="model",
        ) from exc  # fmt: skip
    return last[0], "session", max_tokens if max_tokens is not None else last[1]


async def _last_request(service: Service, sid: str) -> tuple[str, int] | None:
    """The model and budget of the session's last request through a protocol route: the
    turns it stored carry them (``exchange.store_turns``); None if none of the newest
    ``LOOK_BACK`` entries does (a session filled through ``/messages`` or the library)."""
    for entry in reversed(await service.store.tail(sid, LOOK_BACK)):
        model, budget = entry.metadata.get("model"), entry.metadata.get("budget")
        if isinstance(model, str) and model and isinstance(budget, int) and budget > 0:
            return model, budget
    return None


async def _rows(
    service: Service, sid: str, report: Report, limit: int | None, after: int, state: str | None
) -> tuple[dict[str, Any], bool]:
    """The report as JSON with the rows asked for (all, a page, those of a state), and
    whether more follow. Reads no history for a state the window itemises, else one page
    of it (for ``evicted``: beside the page, as many entries as the window holds)."""
    left_out = _left_out(service)
    if state is not None and state != "evicted":
        paged, more = report.in_state(state, after, limit)
    else:
        skip = 0 if state is None else sum(d.state != "evicted" for d in report.decisions)
        page = await service.store.load(
            sid, after=after, limit=None if limit is None else limit + 1 + skip
        )
        if state is not None:
            itemised = {d.id for d in report.decisions if d.state != "evicted"}
            page = [e for e in page if e.id not in itemised]
        more = limit is not None and len(page) > limit
        if limit is None and not after and state is None:  # every row, from the whole history
            return report.covering(page, left_out).to_dict(), False
        paged = report.page(page[:limit], after, left_out, state=state)
    out = paged.to_dict()
    out["earlier"] = {"entries": 0, "tokens": 0}  # each has its row on a page
    return out, more


def _stable_end(report: Report, sent: int) -> str | None:
    """The id of the row the context's stable prefix ends with (None: it has none), of
    ``sent`` messages; messages of no row (right after the pinned ones) are counted out."""
    inside = in_order(d for d in report.decisions if d.in_context)
    pinned = sum(d.state == "pinned" for d in inside)
    stable = report.stable_messages
    if stable > pinned:
        stable = max(pinned, stable - max(0, sent - len(inside)))
    stable = min(stable, len(inside))
    return inside[stable - 1].id if stable else None


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
