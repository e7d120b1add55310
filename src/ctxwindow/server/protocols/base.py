"""``Adapter``: what one wire format does in the exchange (``server/exchange.py``).

An adapter is made per request from its body, checked (a 400 naming the field)
and read into chat messages, the session's new turns. The exchange asks it
for the rest: where the session is, the context as the upstream's body, the
reply in the upstream's answer (a body, or a stream through a collector), the
client's body, a stored reply answered again, and the error shape of its
SDKs. A protocol is one subclass, and its route is one line
(``server/routes.py``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, ClassVar, Protocol

from fastapi import Request, Response

from ctxwindow.errors import CtxWindowError
from ctxwindow.messages import Entry, Message
from ctxwindow.policies import Context
from ctxwindow.server import inputs
from ctxwindow.server.errors import APIError, from_library
from ctxwindow.server.service import Service
from ctxwindow.server.sse import EventReply
from ctxwindow.server.tenants import scoped


class Collector(EventReply, Protocol):
    """An ``EventReply`` that adds up to the assistant message to store."""

    usage: dict[str, Any] | None  # as calibration reads it (``prompt_tokens``)

    def message(self) -> Message | None:
        """The reply (``content``, ``tool_calls``); None if there is nothing to store."""


class Adapter(ABC):
    """One protocol's side of an exchange, for one request."""

    path: ClassVar[str]  # the route's, e.g. "/v1/chat/completions"
    upstream_path: ClassVar[str]  # of the upstream, e.g. "chat/completions"
    schema: ClassVar[dict[str, Any]]  # the route's ``openapi_extra``
    param: ClassVar[str] = "messages"  # the body field of the new turns, named in errors
    reply_param: ClassVar[str] = "max_tokens"  # ... of the tokens kept for the reply
    beside: ClassVar[tuple[str, str]] = ("tools", "the tool definitions")  # ... of ``extra``

    def __init__(self, service: Service, request: Request, body: dict[str, Any]) -> None:
        """``body`` checked and read: ``model``, ``stream``, ``turns``, ``reply_tokens``,
        ``extra`` (tokens sent beside the context), ``headers`` (sent upstream)."""
        self.service, self.request, self.body = service, request, body
        self.model: str = body["model"]
        self.stream = bool(body.get("stream"))
        self.turns: list[Message] = []
        self.reply_tokens = 0
        self.extra = 0
        self.headers: dict[str, str] | None = None  # None: the upstream's defaults
        self.previews = False  # whether ``admit`` must see the session's context first

    # -- request -> session --------------------------------------------------------------

    async def session(self, tenant: str) -> str | None:
        """The request's session (scoped to ``tenant``), None to pass it through statelessly;
        by default ``X-Session-Id``."""
        session_id = inputs.header_text(self.request, "X-Session-Id")
        return None if session_id is None else scoped(tenant, session_id)

    def admit(self, context: Context, budget: int) -> None:
        """Refuse, before anything is stored, a request the session cannot take in
        ``budget``: ``context`` is the session's, built before its new turns. Called only
        when ``previews`` is set."""
        return None

    def check(self, context: Context, budget: int) -> None:
        """Refuse a context built in ``budget`` (a 400); by default any goes."""
        return None

    # -- context -> upstream ---------------------------------------------------------------

    @abstractmethod
    def forward(self, context: list[Message], stable: int) -> dict[str, Any]:
        """The upstream's body for a built context (``stable``: its cacheable prefix)."""

    def passed_through(self, sent: list[Message]) -> dict[str, Any]:
        """The upstream's body of a stateless request whose turns go as ``sent`` (masked
        when a redactor runs): the context is the turns."""
        return self.forward(sent, 0)

    def count(self, sent: list[Message]) -> int:
        """The prompt tokens of a stateless request whose turns go as ``sent``."""
        return self.service.tokenizer(self.model).count(sent) + self.extra

    # -- upstream -> reply -> client -------------------------------------------------------

    @abstractmethod
    def reply(self, data: Any) -> Message | None:
        """The reply in a non-streamed upstream body; None if it holds none."""

    @abstractmethod
    def usage(self, data: Any) -> dict[str, Any] | None:
        """A non-streamed upstream body's usage, as calibration reads it."""

    @abstractmethod
    def collector(self) -> Collector:
        """What reads a streamed reply."""

    def answer(self, data: Any, raw: bytes) -> bytes:
        """The client's body of a non-streamed upstream body ``data`` (``raw``: as it came)."""
        return raw

    def kept(self, answer: Any) -> dict[str, Any] | None:
        """Metadata stored with the reply, from the upstream's body or a stream's collector."""
        return None

    @abstractmethod
    def replay(self, entry: Entry) -> Response:
        """A stored reply answered again to a retry (``stream`` as the retry asks)."""

    # -- errors ----------------------------------------------------------------------------

    def named(self, exc: APIError) -> APIError:
        """A refusal of the new turns naming this protocol's field rather than chat's."""
        if exc.param == "messages" and self.param != "messages":
            exc.param = self.param
        return exc

    def refused(self, exc: CtxWindowError | ValueError) -> APIError:
        """A library error about the new turns as this protocol's 400."""
        return self.named(from_library(exc))
