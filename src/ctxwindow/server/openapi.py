"""The OpenAPI document, saying what the service reads and answers as it really does.

FastAPI documents a route's path and query parameters from its signature.
``install`` adds what the signatures do not show: the headers each route
reads, the error statuses it answers with their body (``Error``, OpenAI's;
``AnthropicError`` under ``/v1/messages``; either on ``/v1/models``, by the
request's ``anthropic-version``),
authentication when API keys are configured, and the constraints the service
checks on request bodies (``model`` not empty, at least one message). Request
validation errors are answered 400 (see ``errors.install``), so FastAPI's
default 422 ``HTTPValidationError`` is taken out: 422 means an
``Idempotency-Key`` reused with another body.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from fastapi import FastAPI

from ctxwindow.messages import ROLES
from ctxwindow.server.inputs import MAX_IDEMPOTENCY_KEY
from ctxwindow.server.settings import Settings
from ctxwindow.server.tenants import MAX_SESSION_ID


def json_body(schema: dict[str, Any]) -> dict[str, Any]:
    """The ``openapi_extra`` of a route whose required JSON body follows ``schema``."""
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": schema}}}}


def object_body(required: list[str], properties: dict[str, Any]) -> dict[str, Any]:
    """``json_body`` of an object with ``required`` fields and ``properties`` (more allowed:
    a protocol's other fields are passed on)."""
    schema = {"type": "object", "required": required, "properties": properties}
    return json_body({**schema, "additionalProperties": True})


ERROR = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["message", "type", "param", "code"],
            "properties": {
                "message": {"type": "string", "description": "what is wrong, for people"},
                "type": {"type": "string", "description": "the class of error, as OpenAI's"},
                "param": {
                    "type": ["string", "null"],
                    "description": "the field, header or parameter at fault",
                },
                "code": {"type": ["string", "null"], "description": "what is wrong, for code"},
            },
        }
    },
}

ANTHROPIC_ERROR = {
    "type": "object",
    "required": ["type", "error"],
    "properties": {
        "type": {"const": "error"},
        "error": {
            "type": "object",
            "required": ["type", "message"],
            "properties": {
                "type": {"type": "string", "description": "the class of error, as Anthropic's"},
                "message": {"type": "string", "description": "what is wrong, for people"},
                "param": {
                    "type": ["string", "null"],
                    "description": "ctxwindow's: the field, header or parameter at fault",
                },
                "code": {
                    "type": ["string", "null"],
                    "description": "ctxwindow's: what is wrong, for code",
                },
            },
        },
    },
}
ERRORS = {  # the components.schemas of error bodies
    "Error": ERROR,
    "AnthropicError": ANTHROPIC_ERROR,
    "AnyError": {"anyOf": [{"$ref": "#/components/schemas/Error"},
                           {"$ref": "#/components/schemas/AnthropicError"}]},
}  # fmt: skip

MODEL = {"type": "string", "minLength": 1, "description": "a model the service knows"}
MESSAGE = {
    "type": "object",
    "required": ["role"],
    "properties": {
        "role": {"type": "string", "enum": list(ROLES)},
        "content": {
            "anyOf": [
                {"type": "string"},
                {"type": "array", "items": {"type": "object"}},
                {"type": "null"},
            ]
        },
        "name": {"type": "string"},
        "tool_call_id": {"type": "string"},
        "tool_calls": {"type": "array", "items": {"type": "object"}},
    },
    "additionalProperties": True,
}
MESSAGES = {"type": "array", "minItems": 1, "items": MESSAGE}

APPEND_BODY = {
    "type": "object",
    "required": ["messages"],
    "properties": {"messages": MESSAGES, "model": {**MODEL, "default": "gpt-4o"}},
}

SESSION = {
    "type": "object",
    "required": ["id", "object", "messages", "created_at", "updated_at"],
    "properties": {
        "id": {
            "type": "string",
            "description": "the session id, as the tenant wrote it (NFC); with listed_ids"
            " 'redacted' redacted, with 'hashed' its handle (~ and 32 hex digits)",
        },
        "ref": {
            "type": "string",
            "description": "with listed_ids 'redacted': the handle that opens the session"
            " (the routes take it in place of the id)",
        },
        "object": {"type": "string", "const": "session"},
        "messages": {"type": "integer", "description": "entries stored (the last seq)"},
        "created_at": {"type": ["number", "null"], "description": "the first entry's time"},
        "updated_at": {"type": ["number", "null"], "description": "the last entry's time"},
    },
}
SESSION_LIST = {
    "type": "object",
    "required": ["object", "data", "first_id", "last_id", "has_more"],
    "properties": {
        "object": {"type": "string", "const": "list"},
        "data": {"type": "array", "items": SESSION},
        "first_id": {"type": ["string", "null"]},
        "last_id": {"type": ["string", "null"], "description": "the `after` of the next page"},
        "has_more": {"type": "boolean"},
    },
}

HEADERS: dict[str, dict[str, Any]] = {
    "X-Session-Id": {
        "description": "The session (UTF-8 text, NFC-normalised); without it, and without"
        " metadata.session_id, the request is stateless.",
        "schema": {"type": "string", "minLength": 1, "maxLength": MAX_SESSION_ID},
    },
    "Idempotency-Key": {
        "description": "Makes a retry safe: the same key with the same body stores nothing"
        " twice and replays the stored reply; with another body it is a 422.",
        "schema": {"type": "string", "minLength": 1, "maxLength": MAX_IDEMPOTENCY_KEY},
    },
    "X-Context-Max-Tokens": {
        "description": "Narrows the prompt budget of this request (ASCII digits; a number"
        " past any budget narrows nothing).",
        "schema": {"type": "integer", "minimum": 1},
    },
    "anthropic-version": {
        "description": "Sent by the Anthropic SDKs: the answer, and its errors, take"
        " Anthropic's shape; sent on upstream (printable ASCII).",
        "schema": {"type": "string"},
    },
}

RETRY_AFTER = {"description": "seconds to wait before retrying", "schema": {"type": "integer"}}

STATUSES = {
    400: "Invalid input: the body, a field, a header or a parameter (named in `param`).",
    401: "A missing or unknown API key.",
    404: "No such session, response or model (for this tenant).",
    409: "The session stayed busy with another request for longer than `lock_timeout`.",
    413: "The body, a message or the session is over its limit.",
    422: "An `Idempotency-Key` reused with another body.",
    429: "The tenant's rate limit is reached.",
    502: "The upstream failed or answered something that is not a completion.",
    503: "The session store is unavailable.",
    504: "The upstream timed out.",
}


@dataclass(frozen=True)
class Route:
    """What one operation reads and answers, beyond its signature."""

    headers: tuple[str, ...] = ()
    statuses: tuple[int, ...] = ()
    tenant: bool = True  # needs an API key (when configured) and counts in the rate limit
    answers: tuple[str, ...] = ()  # headers of its 200 answer
    errors: str = "Error"  # the schema of its error bodies (a key of ``ERRORS``)


EXCHANGE = Route(  # a call of the model over a session's context, in any protocol
    ("X-Session-Id", "Idempotency-Key", "X-Context-Max-Tokens"),
    (400, 409, 413, 422, 502, 503, 504),
    answers=("X-Context-Tokens", "X-Context-Evicted", "X-Context-Recalled", "X-Context-Estimated",
             "X-Context-Replayed"),
)  # fmt: skip
COUNTED = ("X-Context-Tokens", "X-Context-Evicted", "X-Context-Recalled", "X-Context-Estimated")
MODELS = Route(("anthropic-version",), (400,), answers=("X-Context-Upstream-Listed",),
               errors="AnyError")  # fmt: skip

ROUTES = {
    ("post", "/v1/chat/completions"): EXCHANGE,
    ("post", "/v1/responses"): EXCHANGE,
    ("post", "/v1/messages"): replace(EXCHANGE, errors="AnthropicError"),
    ("post", "/v1/messages/count_tokens"): Route(
        ("X-Session-Id", "X-Context-Max-Tokens"),
        (400, 409, 413, 503),
        answers=COUNTED,
        errors="AnthropicError",
    ),
    ("get", "/v1/responses/{response_id}"): Route((), (400, 404, 503)),
    ("get", "/v1/models"): MODELS,
    ("get", "/v1/models/{model_id}"): replace(MODELS, statuses=(400, 404)),
    ("post", "/v1/sessions/{session_id}/messages"): Route(
        ("Idempotency-Key",), (400, 409, 413, 422, 503)
    ),
    ("get", "/v1/sessions"): Route((), (400, 503)),
    ("get", "/v1/sessions/{session_id}/messages"): Route((), (400, 404, 503)),
    ("get", "/v1/sessions/{session_id}/context"): Route((), (400, 404, 409, 503)),
    ("delete", "/v1/sessions/{session_id}"): Route((), (400, 404, 409, 503)),
    ("get", "/healthz"): Route(tenant=False),
    ("get", "/readyz"): Route(tenant=False),
    ("get", "/metrics"): Route(tenant=False),
}

ANSWER_HEADERS = {
    "X-Context-Tokens": "prompt tokens sent upstream",
    "X-Context-Evicted": "entries of the session left out of this context",
    "X-Context-Recalled": "archived entries recalled into it",
    "X-Context-Estimated": "`true` when the model's counts are estimates",
    "X-Context-Replayed": "`true` when answered from the store (a retried Idempotency-Key)",
    "X-Context-Upstream-Listed": "`false` when the upstream gave no model list (the"
    " registry's names alone)",
}


def install(app: FastAPI, settings: Settings) -> None:
    """Serve ``document`` of FastAPI's own document as ``app``'s ``/openapi.json``."""
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = document(generate(), settings)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


def document(schema: dict[str, Any], settings: Settings) -> dict[str, Any]:
    """``schema`` (FastAPI's) with what ``ROUTES`` says and ``settings`` turn on."""
    components = schema.setdefault("components", {})
    schemas = components.setdefault("schemas", {})
    for name in ("HTTPValidationError", "ValidationError"):
        schemas.pop(name, None)
    schemas.update(ERRORS)
    if settings.api_keys:
        components["securitySchemes"] = {
            "apiKey": {"type": "http", "scheme": "bearer", "description": "a key of api_keys"}
        }
    for path, operations in schema.get("paths", {}).items():
        for method, operation in operations.items():
            route = ROUTES.get((method, path))
            if route is not None:
                _describe(operation, route, _keyed(route, path, settings), settings)
    return schema


def _keyed(route: Route, path: str, settings: Settings) -> bool:
    """Whether the operation needs an API key: /v1/ routes with keys, /metrics unless open."""
    if not settings.api_keys:
        return False
    return route.tenant or (path == "/metrics" and not settings.metrics_public)


def _describe(operation: dict[str, Any], route: Route, keyed: bool, settings: Settings) -> None:
    parameters = [
        p for p in operation.get("parameters", []) if p.get("name", "").lower() != "authorization"
    ]
    parameters += [
        {"name": n, "in": "header", "required": False, **HEADERS[n]} for n in route.headers
    ]
    operation["parameters"] = parameters
    responses = operation.setdefault("responses", {})
    responses.pop("422", None)
    statuses = set(route.statuses)
    if keyed:
        operation["security"] = [{"apiKey": []}]
        statuses.add(401)
    if route.tenant and settings.rate_limit_per_minute:
        statuses.add(429)
    for status in sorted(statuses):
        responses[str(status)] = _error(status, route.errors)
    if route.answers:
        ok = responses.setdefault("200", {"description": "Successful Response"})
        ok["headers"] = {
            name: {"description": ANSWER_HEADERS[name], "schema": {"type": "string"}}
            for name in route.answers
        }
    _constrain(operation)


def _error(status: int, schema: str = "Error") -> dict[str, Any]:
    response: dict[str, Any] = {
        "description": STATUSES[status],
        "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{schema}"}}},
    }
    if status in (429, 503):
        response["headers"] = {"Retry-After": RETRY_AFTER}
    return response


def _constrain(operation: dict[str, Any]) -> None:
    """What the service refuses, in the request body's schema: an empty model, no messages."""
    content = operation.get("requestBody", {}).get("content", {})
    properties = content.get("application/json", {}).get("schema", {}).get("properties", {})
    if "model" in properties:
        properties["model"] = {**properties["model"], **MODEL}
    if "messages" in properties and "minItems" not in properties["messages"]:  # not Anthropic's
        properties["messages"] = {**properties["messages"], **MESSAGES}
