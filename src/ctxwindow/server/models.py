"""``GET /v1/models`` and ``GET /v1/models/{id}``: the models a client can name.

The list is the upstream's own (``GET {upstream}/models``, asked in the
client's protocol), then the names of the service's model registry the
upstream did not list (``owned_by: "ctxwindow"``, ``created`` 0). The
registry's globs (``*claude-sonnet-4*``) are families, not models: they are
not listed. An upstream that gives no list (it fails, has no such route,
takes over ``LIST_TIMEOUT``) leaves the registry's names alone, and
``X-Context-Upstream-Listed: false`` says so.

The shape is OpenAI's, ``{"object": "list", "data": [{"id", "object",
"created", "owned_by"}]}``, unless the request carries ``anthropic-version``,
as every Anthropic SDK call does: then Anthropic's, ``{"data": [{"type":
"model", "id", "display_name", "created_at"}], "has_more", "first_id",
"last_id"}``, paged by ``limit``, ``after_id`` and ``before_id``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from fastapi import APIRouter, Depends, Query, Request, Response
from fastapi.responses import JSONResponse

from ctxwindow.server import inputs
from ctxwindow.server.errors import APIError, speaks_anthropic
from ctxwindow.server.protocols.anthropic import ANTHROPIC_VERSION, PASSED_ON
from ctxwindow.server.service import Service
from ctxwindow.tokens.models import ModelInfo
from ctxwindow.tokens.registry import is_glob

LISTED = "X-Context-Upstream-Listed"  # answer header: "true" when the upstream's list is in
MAX_PAGE = 1000  # models on one page of Anthropic's list at most (Anthropic's own limit)
OWNER = "ctxwindow"  # ``owned_by`` of the names only the registry lists

_OPENAI_MODEL = {
    "type": "object",
    "required": ["id", "object", "created", "owned_by"],
    "properties": {
        "id": {"type": "string"},
        "object": {"const": "model"},
        "created": {"type": "integer", "description": "Unix seconds (0: unknown)"},
        "owned_by": {"type": "string"},
    },
}
_ANTHROPIC_MODEL = {
    "type": "object",
    "required": ["type", "id", "display_name", "created_at"],
    "properties": {
        "type": {"const": "model"},
        "id": {"type": "string"},
        "display_name": {"type": "string"},
        "created_at": {"type": "string", "description": "RFC 3339 (the epoch: unknown)"},
        "max_input_tokens": {"type": "integer"},
        "max_tokens": {"type": "integer"},
    },
}
_PAGE = {
    "type": "object",
    "required": ["data", "has_more", "first_id", "last_id"],
    "properties": {
        "data": {"type": "array", "items": _ANTHROPIC_MODEL},
        "has_more": {"type": "boolean"},
        "first_id": {"type": ["string", "null"]},
        "last_id": {"type": ["string", "null"]},
    },
}
_LIST = {
    "type": "object",
    "required": ["object", "data"],
    "properties": {"object": {"const": "list"}, "data": {"type": "array", "items": _OPENAI_MODEL}},
}
LIST_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "OpenAI's list, or Anthropic's page (with `anthropic-version`)",
        "content": {"application/json": {"schema": {"anyOf": [_LIST, _PAGE]}}},
    }
}
MODEL_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "OpenAI's model, or Anthropic's (with `anthropic-version`)",
        "content": {"application/json": {"schema": {"anyOf": [_OPENAI_MODEL, _ANTHROPIC_MODEL]}}},
    }
}


@dataclass(frozen=True)
class Model:
    """One model of the list, as either protocol shows it."""

    id: str
    created: int  # Unix seconds, 0 when unknown
    owned_by: str = OWNER
    listed: dict[str, Any] = field(default_factory=dict)  # the upstream's item, as it came
    info: ModelInfo | None = None  # the registry's entry, for the names only it lists

    def openai(self) -> dict[str, Any]:
        return {**self.listed, "id": self.id, "object": "model", "created": self.created,
                "owned_by": self.owned_by}  # fmt: skip

    def anthropic(self) -> dict[str, Any]:
        created_at = self.listed.get("created_at")
        if not isinstance(created_at, str):
            created_at = datetime.fromtimestamp(self.created, timezone.utc).strftime(
                "%Y-%m-%dT%H:%M:%SZ"
            )
        name = self.listed.get("display_name")
        item = {**self.listed, "type": "model", "id": self.id, "created_at": created_at,
                "display_name": name if isinstance(name, str) else self.id}  # fmt: skip
        if self.info is not None:
            item.update(max_input_tokens=self.info.context_window, max_tokens=self.info.max_output)
        return item


def router(service: Service, tenant: Any) -> APIRouter:
    """The routes; ``tenant`` takes the key as ``Authorization: Bearer`` or ``x-api-key``."""
    api = APIRouter(prefix="/v1/models", tags=["models"])

    @api.get("", responses=LIST_RESPONSES)
    async def list_models(
        request: Request,
        limit: int = Query(20, ge=1, le=MAX_PAGE, description="Anthropic's page size"),
        after_id: str | None = Query(None, description="Anthropic's: the page after this id"),
        before_id: str | None = Query(None, description="Anthropic's: the page before it"),
        tenant: str = Depends(tenant),
    ) -> Response:
        """The upstream's models and the registry's names (see the module docstring)."""
        models, listed = await known(service, request)
        if not speaks_anthropic(request):
            body: dict[str, Any] = {"object": "list", "data": [m.openai() for m in models]}
        else:
            body = _page([m.anthropic() for m in models], limit, after_id, before_id)
        return JSONResponse(body, headers={LISTED: "true" if listed else "false"})

    @api.get("/{model_id:path}", responses=MODEL_RESPONSES)
    async def retrieve_model(
        model_id: str, request: Request, tenant: str = Depends(tenant)
    ) -> Response:
        """One model of the list; a 404 for a name it does not hold."""
        models, listed = await known(service, request)
        found = next((m for m in models if m.id == model_id), None)
        if found is None:
            raise APIError(
                404, f"model {model_id!r} not found: it is not in GET /v1/models",
                code="model_not_found", param="model",
            )  # fmt: skip
        body = found.anthropic() if speaks_anthropic(request) else found.openai()
        return JSONResponse(body, headers={LISTED: "true" if listed else "false"})

    return api


async def known(service: Service, request: Request) -> tuple[list[Model], bool]:
    """The models of the list, and whether the upstream's own list is among them."""
    upstream = await _upstream(service, request)
    seen = {m.id for m in upstream or ()}
    registry = service.models
    names = [n for n in registry.known() if not is_glob(n) and n not in seen]
    mine = [Model(name, 0, info=registry.find(name)) for name in dict.fromkeys(names)]
    return [*(upstream or ()), *mine], upstream is not None


async def _upstream(service: Service, request: Request) -> list[Model] | None:
    """The upstream's list, asked with the request's protocol; None if it gave none."""
    if speaks_anthropic(request):
        passed = inputs.passed_on(request, PASSED_ON)
        extra = {"anthropic-version": ANTHROPIC_VERSION, **passed}
        headers = service.upstream.headers(extra, key="x-api-key")
        data = await service.upstream.models(headers, {"limit": str(MAX_PAGE)})
    else:
        data = await service.upstream.models(service.upstream.headers())
    items = data.get("data") if isinstance(data, dict) else None
    if not isinstance(items, list):
        return None
    models: dict[str, Model] = {}
    for item in items:
        if isinstance(item, dict) and isinstance(item.get("id"), str) and item["id"]:
            models.setdefault(item["id"], _listed(item))
    return list(models.values())


def _listed(item: dict[str, Any]) -> Model:
    """A model of the upstream's list, in OpenAI's shape or Anthropic's."""
    owner = item.get("owned_by")
    return Model(item["id"], _created(item), owner if isinstance(owner, str) else "upstream", item)


def _created(item: dict[str, Any]) -> int:
    """OpenAI's ``created`` (Unix seconds) or Anthropic's ``created_at`` (RFC 3339); 0 if
    neither is readable."""
    created = item.get("created")
    if type(created) is int and created >= 0:
        return created
    stamp = item.get("created_at")
    if isinstance(stamp, str):
        try:
            moment = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
        except ValueError:
            return 0
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=timezone.utc)
        return max(int(moment.timestamp()), 0)
    return 0


def _page(
    items: list[dict[str, Any]], limit: int, after_id: str | None, before_id: str | None
) -> dict[str, Any]:
    """Anthropic's page of ``items``: ``limit`` after ``after_id``, before ``before_id``, or
    from the start; ``has_more`` says whether more follow in that direction."""
    if after_id is not None and before_id is not None:
        raise APIError(400, "send after_id or before_id, not both", param="before_id")
    ids = [item["id"] for item in items]
    if before_id is not None:
        end = _at(ids, before_id, "before_id")
        start = max(end - limit, 0)
        page, more = items[start:end], start > 0
    else:
        start = 0 if after_id is None else _at(ids, after_id, "after_id") + 1
        page, more = items[start : start + limit], start + limit < len(items)
    return {
        "data": page,
        "has_more": more,
        "first_id": page[0]["id"] if page else None,
        "last_id": page[-1]["id"] if page else None,
    }


def _at(ids: list[str], cursor: str, param: str) -> int:
    if cursor not in ids:
        raise APIError(
            400, f"{param} {cursor!r} is not a model of the list", code="invalid_parameter",
            param=param,
        )  # fmt: skip
    return ids.index(cursor)
