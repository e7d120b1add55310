"""JSON errors in the shape of the client's protocol.

OpenAI's, ``{"error": {"message", "type", "param", "code"}}``, for every route
but Anthropic's; Anthropic's, ``{"type": "error", "error": {"type", "message",
"param", "code"}}`` (its types, with ctxwindow's ``param`` and ``code`` kept),
under ``/v1/messages`` and for any request that carries ``anthropic-version``
(the Anthropic SDKs send it on every call: ``/v1/models``, a route the service
lacks). ``APIError`` is what route code raises; ``install`` maps it, request
validation errors, the router's refusals and the library's own errors to
responses at the boundary.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException
from starlette.routing import compile_path

from ctxwindow.errors import (
    BudgetError,
    IdempotencyConflictError,
    InvalidMessageError,
    SessionBusyError,
    SessionFullError,
    StoreError,
    StoreInputError,
    StoreUnavailableError,
    UnknownModelError,
)

_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    404: "not_found_error",
    405: "invalid_request_error",
    409: "conflict_error",
    413: "invalid_request_error",
    422: "invalid_request_error",
    429: "rate_limit_error",
    500: "server_error",
    502: "upstream_error",
    503: "service_unavailable",
    504: "upstream_timeout",
}
# Anthropic's error types by status; any other 4xx is an invalid request, a 5xx api_error.
_ANTHROPIC_TYPES = {
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    503: "overloaded_error",
    504: "timeout_error",
}
ANTHROPIC_PATH = "/v1/messages"


class APIError(Exception):
    """An error answered to the client with ``status`` and an OpenAI-style body."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        code: str | None = None,
        param: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.code = code
        self.param = param
        self.headers = headers

    def response(self, *, anthropic: bool = False) -> JSONResponse:
        """The answer: OpenAI's body, or with ``anthropic`` Anthropic's (``body``)."""
        return JSONResponse(self.body(anthropic), status_code=self.status, headers=self.headers)

    def body(self, anthropic: bool = False) -> dict[str, Any]:
        kind = anthropic_type(self.status) if anthropic else _TYPES.get(self.status, "api_error")
        error = {
            "message": _utf8(self.message),
            "type": kind,
            "param": None if self.param is None else _utf8(self.param),
            "code": self.code,
        }
        return {"type": "error", "error": error} if anthropic else {"error": error}


def anthropic_type(status: int) -> str:
    """Anthropic's error type of an HTTP status."""
    if status in _ANTHROPIC_TYPES:
        return _ANTHROPIC_TYPES[status]
    return "invalid_request_error" if 400 <= status < 500 else "api_error"


def speaks_anthropic(request: Request) -> bool:
    """Whether errors of ``request`` take Anthropic's shape: under ``/v1/messages``, or sent
    with ``anthropic-version`` (the header every Anthropic SDK call carries)."""
    path, root = request.scope["path"], request.scope.get("root_path", "")
    path = path[len(root) :] if root and path.startswith(root) else path  # mounted under root
    under = path == ANTHROPIC_PATH or path.startswith(ANTHROPIC_PATH + "/")
    return under or "anthropic-version" in request.headers


def answer(request: Request, error: APIError) -> JSONResponse:
    """``error`` answered in the shape of ``request``'s protocol."""
    return error.response(anthropic=speaks_anthropic(request))


def _utf8(text: str) -> str:
    """``text`` with what has no UTF-8 form (a client's lone surrogate) escaped as ``\\ud800``."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


RETRY_AFTER = "1"  # seconds a client should wait before retrying a store that was down


def from_library(exc: Exception) -> APIError:
    """The library's errors by cause: bad input 4xx, a store down 503, a store fault 500."""
    if isinstance(exc, StoreInputError):
        return APIError(400, str(exc), code="invalid_request")
    if isinstance(exc, IdempotencyConflictError):
        return APIError(422, str(exc), code="idempotency_key_reused", param="Idempotency-Key")
    if isinstance(exc, UnknownModelError):
        return APIError(400, str(exc), code="model_not_found", param="model")
    if isinstance(exc, BudgetError):
        return APIError(400, str(exc), code="context_length_exceeded", param="messages")
    if isinstance(exc, (InvalidMessageError, ValueError)):
        return APIError(400, str(exc), code="invalid_message", param="messages")
    if isinstance(exc, SessionFullError):
        return APIError(413, str(exc), code="session_full")
    if isinstance(exc, SessionBusyError):
        return APIError(409, f"{exc}; retry later", code="session_busy")
    if isinstance(exc, StoreUnavailableError):
        return APIError(
            503, f"session store unavailable: {exc}", code="store_unavailable",
            headers={"Retry-After": RETRY_AFTER},
        )  # fmt: skip
    if isinstance(exc, StoreError):
        return APIError(500, f"session store failed: {exc}", code="store_error")
    raise exc


def install(app: FastAPI) -> None:
    async def api_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, APIError)
        return answer(request, exc)

    async def invalid(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        first = exc.errors()[0] if exc.errors() else {}
        param = ".".join(str(p) for p in first.get("loc", ())[1:]) or None
        message = str(first.get("msg", "invalid request"))
        if param is not None:
            message = f"{param}: {message}"
        return answer(request, APIError(400, message, code="invalid_parameter", param=param))

    async def store_error(request: Request, exc: Exception) -> JSONResponse:
        return answer(request, from_library(exc))

    async def http_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, HTTPException)
        return answer(request, routing_error(request, exc))

    app.add_exception_handler(APIError, api_error)
    app.add_exception_handler(HTTPException, http_error)
    app.add_exception_handler(StoreError, store_error)
    app.add_exception_handler(RequestValidationError, invalid)


def routing_error(request: Request, exc: HTTPException) -> APIError:
    """The router's own refusals (no such route, a method the path does not take) in the
    API's error shape; a 405's ``Allow`` lists the methods of every route of the path
    (Starlette's names only those of the first route it tried)."""
    where, method = request.url.path, request.method
    if exc.status_code == 405:
        allowed = sorted(_methods(request) | set(_listed((exc.headers or {}).get("Allow", ""))))
        return APIError(
            405, f"{method} is not allowed on {where}; it takes {', '.join(allowed)}",
            code="method_not_allowed", headers={**(exc.headers or {}), "Allow": ", ".join(allowed)},
        )  # fmt: skip
    headers = dict(exc.headers) if exc.headers else None
    if exc.status_code == 404:
        return APIError(404, f"no route {method} {where}", code="not_found", headers=headers)
    return APIError(exc.status_code, str(exc.detail), headers=headers)


_HTTP_METHODS = frozenset({"get", "put", "post", "delete", "options", "head", "patch", "trace"})


def _methods(request: Request) -> set[str]:
    """The methods of every documented route whose path matches the request's (from the
    app's OpenAPI schema, compiled once per app)."""
    table = getattr(request.app.state, "route_methods", None)
    if table is None:
        paths = request.app.openapi().get("paths", {})
        table = [
            (compile_path(path)[0], {m.upper() for m in operations if m in _HTTP_METHODS})
            for path, operations in paths.items()
        ]
        request.app.state.route_methods = table
    found = {m for regex, methods in table if regex.match(request.scope["path"]) for m in methods}
    return found


def _listed(header: str) -> list[str]:
    return [name.strip() for name in header.split(",") if name.strip()]
