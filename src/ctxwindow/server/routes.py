"""The protocol routes: each reads its request with its protocol's adapter and hands it to
the one exchange (``exchange.serve``). A new protocol is a new ``Adapter`` and one line
here."""

from __future__ import annotations

import inspect
from typing import Any

from fastapi import APIRouter, Depends, Request, Response

from ctxwindow.server import exchange
from ctxwindow.server.inputs import read_json
from ctxwindow.server.protocols.anthropic import AnthropicMessages, keyed_tenant
from ctxwindow.server.protocols.base import Adapter
from ctxwindow.server.protocols.chat import ChatCompletions
from ctxwindow.server.protocols.responses import Responses
from ctxwindow.server.service import Service


def router(service: Service, tenant: Any) -> APIRouter:
    """The three routes; ``tenant`` is the dependency that authenticates a request
    (Anthropic's SDKs send their key as ``x-api-key``: ``keyed_tenant``)."""
    api = APIRouter()
    routes: list[tuple[type[Adapter], str, str, Any]] = [
        (ChatCompletions, "chat_completions", "chat", tenant),
        (Responses, "responses", "responses", tenant),
        (AnthropicMessages, "messages", "messages", keyed_tenant(service)),
    ]
    for adapter, name, tag, authenticated in routes:
        add_route(api, service, adapter, authenticated, name=name, tag=tag)
    return api


def add_route(
    api: APIRouter,
    service: Service,
    adapter: type[Adapter],
    authenticated: Any,
    *,
    name: str,
    tag: str,
) -> None:
    """``POST adapter.path`` on ``api``: the request read by ``adapter``, authenticated by
    the dependency ``authenticated`` (it returns the tenant), through the exchange."""

    async def endpoint(request: Request, tenant: str = Depends(authenticated)) -> Response:
        body = await read_json(request, service.settings.max_request_bytes)
        return await exchange.serve(service, adapter(service, request, body), tenant)

    api.add_api_route(
        adapter.path, endpoint, methods=["POST"], name=name, tags=[tag],
        openapi_extra=adapter.schema, description=inspect.cleandoc(adapter.__doc__ or ""),
    )  # fmt: skip
