"""Session programs (``service_programs.py``) run through the service, every body the fake
upstream receives checked with ``ctxwindow.validate``.

The fakes answer as the program says (text, or that many parallel calls), streamed or
not, and record what they receive. A request the service refuses (a 4xx) must leave
nothing behind: no body upstream, nothing stored (else it is ``leaked``). The client then
does what a client does after a budget refusal, sends it again without
``X-Context-Max-Tokens``; when that is refused too, or a request without the header is,
the program stops there. ``Tally`` counts the bodies checked, the invalid ones, and the
refusals by code; a refusal other than a budget's (``context_length_exceeded`` of a
request with a budget of its own, or with ``truncation: "disabled"``) is kept as
``unexpected``: the service refused a request valid for its provider.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from itertools import count
from typing import Any

import httpx
import httpx2
from fastapi.testclient import TestClient

from ctxwindow import validate
from ctxwindow.server import Settings, create_app
from ctxwindow.server.protocols.response_ids import session_of
from tests.support.chat_upstream import FakeUpstream
from tests.support.protocol_upstreams import REPLY, FakeMessages, FakeResponses
from tests.support.service_programs import TOOL, Body, Program, render

PATHS = {
    "chat_completions": "/v1/chat/completions",
    "responses": "/v1/responses",
    "anthropic_messages": "/v1/messages",
}
VALIDATORS: dict[str, Callable[[Any], list[validate.Violation]]] = {
    "chat_completions": validate.chat_completions,
    "responses": validate.responses,
    "anthropic_messages": validate.anthropic_messages,
}
SETTINGS: dict[str, dict[str, Any]] = {
    # The defaults, with the archive (recall by words: the embedder would load a model).
    "hybrid": {"archive": None, "embedder": "off"},
    # ... in a small window (2,048 tokens for gpt-4o): turns cut by X-Context-Max-Tokens
    # alone stay in the window, unarchived (docs/server.md); these leave it, and come back.
    "hybrid_recall": {"archive": None, "embedder": "off", "budget_ratio": 0.016},
    "token_window": {"policy": "token_window", "archive": None, "embedder": "off"},
}
_numbers = count()


def arguments(n: int) -> str:
    return json.dumps({"order": f"D-{n}", "城市": "東京"}, ensure_ascii=False)


class ScriptedChat(FakeUpstream):
    """A chat completions upstream answering ``calls`` parallel calls, or text when 0."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0
        self.answered: list[str] = []  # the ids of the last answer's calls

    def handle(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        self.requests.append(body)
        n = len(self.requests)
        self.answered = [f"call_{n}_{i}" for i in range(self.calls)]
        function = {"name": TOOL, "arguments": arguments(n)}
        calls = [{"id": i, "type": "function", "function": function} for i in self.answered]
        message: Body = {"role": "assistant", "content": "Let me look." if n % 2 else None}
        message = {**message, "tool_calls": calls} if calls else {**message, "content": REPLY}
        if not body.get("stream"):
            return httpx.Response(200, json={
                "id": f"chatcmpl-{n}", "object": "chat.completion", "created": 0,
                "model": body["model"], "usage": {"prompt_tokens": 9, "completion_tokens": 1},
                "choices": [{"index": 0, "message": message,
                             "finish_reason": "tool_calls" if calls else "stop"}],
            })  # fmt: skip
        return httpx.Response(200, content=_chat_events(message, body),
                              headers={"content-type": "text/event-stream"})  # fmt: skip


def _chat_events(message: Body, body: Body) -> bytes:
    deltas: list[Body] = [{"role": "assistant", "content": message["content"]}]
    for index, call in enumerate(message.get("tool_calls") or ()):
        head = {**call, "function": {"name": TOOL, "arguments": ""}}
        deltas.append({"tool_calls": [{"index": index, **head}]})
        text = call["function"]["arguments"]
        deltas += [{"tool_calls": [{"index": index, "function": {"arguments": text[j : j + 6]}}]}
                   for j in range(0, len(text), 6)]  # fmt: skip
    head = {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": body["model"]}
    chunks = [{**head, "choices": [{"index": 0, "delta": d, "finish_reason": None}]}
              for d in deltas]  # fmt: skip
    if (body.get("stream_options") or {}).get("include_usage"):
        chunks.append(
            {**head, "choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 1}}
        )
    return "".join(f"data: {json.dumps(c)}\n\n" for c in chunks).encode() + b"data: [DONE]\n\n"


class ScriptedResponses(FakeResponses):
    """A Responses upstream answering ``calls`` parallel function calls, or text when 0;
    a reasoning item first when the request asks for reasoning (a reasoning model)."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0
        self.answered: list[str] = []

    def answer(self, body: dict[str, Any]) -> dict[str, Any]:
        # A text answer (of any body: an invalid one is the validators' to report) ...
        answer = super().answer({"model": body.get("model"), "input": [{}]})
        answer["instructions"] = body.get("instructions")
        n = len(self.requests)
        self.answered = [f"call_{n}_{i}" for i in range(self.calls)]
        if self.answered:  # ... or the calls, after a few words on odd turns
            said = answer["output"] if n % 2 else []
            answer["output"] = said + [
                {"type": "function_call", "id": f"fc_{i}", "call_id": i, "name": TOOL,
                 "arguments": arguments(n), "status": "completed"}
                for i in self.answered
            ]  # fmt: skip
        if body.get("reasoning"):
            thought = {"type": "reasoning", "id": f"rs_{n}", "encrypted_content": f"enc{n}==",
                       "summary": [{"type": "summary_text", "text": f"思考 {n}"}]}  # fmt: skip
            answer["output"] = [thought, *answer["output"]]
        return answer


class ScriptedMessages(FakeMessages):
    """An Anthropic upstream answering ``calls`` parallel tool_use blocks, or text when 0;
    a signed thinking block first when the request enables thinking (``FakeMessages``)."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0
        self.answered: list[str] = []

    def answer(self, body: dict[str, Any]) -> dict[str, Any]:
        empty = {"model": body.get("model"), "messages": [{"content": ""}]}
        answer = super().answer({**empty, "thinking": body.get("thinking")})
        n = len(self.requests)
        self.answered = [f"toolu_{n}_{i}" for i in range(self.calls)]
        if self.answered:
            thought = [b for b in answer["content"] if b["type"] == "thinking"]
            said = [{"type": "text", "text": "Let me look."}] if n % 2 else []
            answer["content"] = (
                thought
                + said
                + [
                    {"type": "tool_use", "id": i, "name": TOOL, "input": json.loads(arguments(n))}
                    for i in self.answered
                ]
            )
            answer["stop_reason"] = "tool_use"
        return answer


Fake = ScriptedChat | ScriptedResponses | ScriptedMessages
FAKES: dict[str, type[Fake]] = {
    "chat_completions": ScriptedChat,
    "responses": ScriptedResponses,
    "anthropic_messages": ScriptedMessages,
}


@dataclass
class Tally:
    """What the runs found: bodies checked, invalid bodies, refusals by code."""

    bodies: int = 0
    requests: int = 0
    refused: Counter[str] = field(default_factory=Counter)
    invalid: list[tuple[Program, Body, list[validate.Violation]]] = field(default_factory=list)
    unexpected: list[tuple[Program, int, str]] = field(default_factory=list)
    leaked: list[tuple[Program, int, str]] = field(default_factory=list)  # refused, not clean

    @property
    def clean(self) -> bool:
        return not (self.invalid or self.unexpected or self.leaked)

    def check(self, program: Program, body: Body) -> None:
        self.bodies += 1
        violations = VALIDATORS[program.protocol](body)
        if violations:
            self.invalid.append((program, body, violations))


@dataclass
class Service:
    """One app with the fake upstream of one protocol, for many programs."""

    protocol: str
    http: TestClient
    fake: Fake
    small: bool = False  # the model's own budget is small: it refuses what does not fit too

    def run(self, program: Program, tally: Tally) -> None:
        Run(self, program, tally, next(_numbers)).all()


class Run:
    """One program against one ``Service``."""

    def __init__(self, service: Service, program: Program, tally: Tally, number: int) -> None:
        self.service, self.program, self.tally = service, program, tally
        self.name = f"prog-{number}-{program.naming}"
        self.pending: list[str] = []  # the ids of the calls the last reply made
        kind = "toolu" if program.protocol == "anthropic_messages" else "call"
        made = len(program.prelude.results) if program.prelude else 0
        self.prelude = [f"{kind}_p{number}_{i}" for i in range(made)]  # the prelude's calls
        self.response: str | None = None  # the last response id (Responses)

    def all(self) -> None:
        for index, request in enumerate(self.program.requests):
            if self.send(index, request.budget):
                continue
            if request.budget is None or not self.send(index, None):
                return  # the client gives up: the rest of the program needs this request

    def send(self, index: int, budget: int | None) -> bool:
        """Request ``index``; whether the service answered it (it forwarded one body)."""
        fake, http, tally = self.service.fake, self.service.http, self.tally
        body, headers = self.named(render(self.program, index, self.pending, self.prelude))
        if budget is not None:
            headers["X-Context-Max-Tokens"] = str(budget)
        sent, before = len(fake.requests), self.stored()
        fake.calls = self.program.requests[index].calls
        answer = http.post(PATHS[self.program.protocol], json=body, headers=headers)
        tally.requests += 1
        assert answer.status_code < 500, answer.text
        if answer.status_code >= 400:
            if len(fake.requests) != sent or self.stored() != before:
                self.tally.leaked.append((self.program, answer.status_code, answer.text))
            self.refused(answer, budget)
            return False
        assert len(fake.requests) == sent + 1
        tally.check(self.program, fake.requests[-1])
        self.pending = list(fake.answered)
        if self.program.protocol == "responses":
            self.response = _response_id(answer)
        return True

    def refused(self, answer: httpx2.Response, budget: int | None) -> None:
        error = answer.json().get("error") or {}
        code = str(error.get("code") or error.get("type") or answer.status_code)
        self.tally.refused[code] += 1
        disabled = self.program.protocol == "responses" and self.program.truncation == "disabled"
        asked = budget is not None or disabled or self.service.small
        if not (code == "context_length_exceeded" and asked):
            self.tally.unexpected.append((self.program, answer.status_code, answer.text))

    def named(self, body: Body) -> tuple[Body, dict[str, str]]:
        """``body`` and its headers, naming the program's session its way."""
        naming, protocol = self.program.naming, self.program.protocol
        if naming == "header":
            return body, {"X-Session-Id": self.name}
        if naming == "body" and protocol == "chat_completions":
            return {**body, "metadata": {"session_id": self.name}}, {}
        if naming == "body":
            return {**body, "conversation": f"会话 {self.name} 🙂"}, {}
        if self.response is None:
            return body, {}  # a new session, named by the response's id from now on
        return {**body, "previous_response_id": self.response}, {}

    def stored(self) -> list[Body] | None:
        """The session's stored messages (None when it cannot be named yet)."""
        naming = self.program.naming
        if naming == "previous" and self.response is None:
            return None
        name = {"header": self.name, "body": self.name, "previous": ""}[naming]
        if naming == "body" and self.program.protocol == "responses":
            name = f"会话 {self.name} 🙂"
        elif naming == "previous":
            name = session_of(self.response or "")
        answer = self.service.http.get(f"/v1/sessions/{name}/messages")
        if answer.status_code == 404:
            return []
        assert answer.status_code == 200, answer.text
        return [entry["message"] for entry in answer.json()["data"]]


def _response_id(answer: httpx2.Response) -> str:
    """Our response id, from a response body or the events of a streamed one."""
    if not answer.headers["content-type"].startswith("text/event-stream"):
        return str(answer.json()["id"])
    for line in answer.text.split("\n"):  # SSE lines end at \n only (not at U+2028, ...)
        if line.startswith("data: ") and '"response.completed"' in line:
            return str(json.loads(line[6:])["response"]["id"])
    raise AssertionError(f"no response.completed event in {answer.text[:300]!r}")


@contextmanager
def serving(protocol: str, policy: str) -> Iterator[Service]:
    """A ``Service`` of ``protocol`` with the settings ``SETTINGS[policy]``, open while in
    the ``with`` block."""
    fake = FAKES[protocol]()
    settings = Settings(store="memory://", upstream="http://upstream.test/v1", **SETTINGS[policy])
    with TestClient(create_app(settings, upstream_transport=fake.transport())) as http:
        yield Service(protocol, http, fake, small="budget_ratio" in SETTINGS[policy])
