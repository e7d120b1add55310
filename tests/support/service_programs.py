"""Session programs for the service: what a client of each protocol sends, turn by turn.

A ``Program`` is one session as a client drives it: a system prompt or none, tool
definitions or none, maybe a history the client writes itself in its first request (a
user turn, the assistant's calls, their results, an answer), then requests in order. A
request carries a user turn, or the results of the calls the upstream's last reply made
(every id, some errors; maybe a user turn after them, as clients send "and also ..."
with the results), and says what the upstream answers it: text, or that many parallel
calls (a tool loop is several of those in a row before the next user text). Each
request has a budget (``X-Context-Max-Tokens``: none, tiny to large; mostly the
program's own) and is streamed or not. A program may enable extended thinking
(Anthropic) or reasoning (Responses): the fake upstream then thinks before it answers.
Texts are English, Chinese, Japanese, emoji and mixed, some thousands of tokens long,
some with images; a few tell a fact that a later one asks for (what recall brings back).

Every drawn program is valid for its provider as the client sends it: texts are never
blank (Anthropic refuses blank text) and hold no NUL (the service refuses it, a
documented limit), every call is answered in the very next request, ids are unique. So
an invalid upstream body is the service's doing. ``render`` writes a request in a
protocol's own format (``tests/support/service_runs.py`` sends it).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from hypothesis import strategies as st

from tests.support.conversations import IMAGES, said
from tests.support.windows import long_texts

PROTOCOLS = ("chat_completions", "responses", "anthropic_messages")
TOOL = "where_is"
SCHEMA = {"type": "object", "properties": {"order": {"type": "string"}}}
MAX_TOKENS = 1024  # of the reply; Anthropic requires it

Body = dict[str, Any]


@dataclass(frozen=True)
class Said:
    """A user turn: its text, and images after it."""

    text: str
    images: tuple[str, ...] = ()


@dataclass(frozen=True)
class Request:
    """One client request: the results of the pending calls (one per call, in order;
    "Error: ..." marks a failed one), then a user turn, either or both; what the upstream
    answers (``calls``: 0 for text, else that many parallel calls); budget; streamed."""

    results: tuple[str, ...] = ()
    said: Said | None = None
    calls: int = 0
    budget: int | None = None
    stream: bool = False


@dataclass(frozen=True)
class Prelude:
    """A history the client writes in its first request: a user turn, the assistant's
    parallel calls (maybe with a text), their results, the assistant's answer."""

    said: Said
    text: str | None
    results: tuple[str, ...]
    answer: str


@dataclass(frozen=True)
class Program:
    protocol: str
    system: str | None
    tools: bool
    prelude: Prelude | None
    requests: tuple[Request, ...]
    naming: str  # how the session is named: "header", "body" (metadata / conversation), "previous"
    truncation: str = "auto"  # Responses only
    thinking: bool = False  # extended thinking (Anthropic), reasoning (Responses)


# -- drawing ---------------------------------------------------------------------------------

# Several thousand tokens, under the service's max_message_chars (a 413 past it, documented).
very_long = long_texts.map(lambda text: (text + " ") * 12)
# A fact told early and asked for later: what the hybrid recalls once the window evicted it.
FACTS = [
    "The gate code for the warehouse in Tromsø is 4471.",
    "倉庫の暗証番号は 4471 です。",
    "What is the gate code for the Tromsø warehouse?",
    "倉庫の暗証番号は何ですか？",
]
user_texts = st.one_of(said, said, said, st.sampled_from(FACTS), long_texts, very_long)
results = st.one_of(said, st.just(""), said.map("Error: {}".format), long_texts, very_long)
"""A tool's output: text, nothing, an error, or a large output."""
budgets = st.one_of(
    st.none(), st.none(), st.integers(20, 300), st.integers(300, 3_000), st.integers(3_000, 40_000)
)


@st.composite
def says(draw: st.DrawFn) -> Said:
    images = draw(st.lists(st.sampled_from(IMAGES), max_size=2)) if draw(st.booleans()) else []
    return Said(draw(user_texts), tuple(images))


@st.composite
def rounds(draw: st.DrawFn, tools: bool) -> list[Request]:
    """A user turn, then the tool loop it starts (each step the results of the last calls,
    answered by more calls or by text), maybe a user turn riding with the last results."""
    loop = draw(st.lists(st.integers(1, 3), max_size=3)) if tools else []
    answers = [*loop, 0]
    out = [Request(said=draw(says()), calls=answers[0])]
    for calls, then in zip(loop, answers[1:], strict=True):
        more = draw(st.none() | says()) if then == 0 else None
        out.append(Request(tuple(draw(st.lists(results, min_size=calls, max_size=calls))),
                           more, then))  # fmt: skip
    return out


@st.composite
def timed(draw: st.DrawFn, request: Request, usual: int | None) -> Request:
    """``request`` with a budget (mostly the program's ``usual``), streamed or not."""
    budget = draw(st.sampled_from([usual, usual]) | budgets)
    return Request(request.results, request.said, request.calls, budget, draw(st.booleans()))


@st.composite
def preludes(draw: st.DrawFn) -> Prelude:
    n = draw(st.integers(1, 3))
    done = tuple(draw(st.lists(results, min_size=n, max_size=n)))
    return Prelude(draw(says()), draw(st.none() | said), done, draw(said))


@st.composite
def programs(draw: st.DrawFn, protocol: str, max_rounds: int = 4) -> Program:
    """A session program of ``protocol`` of one to ``max_rounds`` user turns."""
    tools = draw(st.booleans())
    requests = [r for _ in range(draw(st.integers(1, max_rounds))) for r in draw(rounds(tools))]
    namings = {"responses": ["header", "body", "previous"], "anthropic_messages": ["header"]}
    usual = draw(budgets)
    return Program(
        protocol=protocol,
        system=draw(st.none() | said | long_texts.map(lambda text: text[:2_000])),
        tools=tools,
        prelude=draw(st.none() | preludes()) if tools else None,
        requests=tuple(draw(timed(r, usual)) for r in requests),
        naming=draw(st.sampled_from(namings.get(protocol, ["header", "body"]))),
        truncation=draw(st.sampled_from(["auto", "auto", "auto", "disabled"])),
        thinking=protocol != "chat_completions" and draw(st.booleans()),
    )


# -- rendering -------------------------------------------------------------------------------


def render(program: Program, index: int, ids: list[str], prelude_ids: list[str]) -> Body:
    """The body of request ``index`` (``ids``: the calls its results answer; the first
    request also carries the system prompt and the prelude, whose calls are
    ``prelude_ids``), less the session naming (``service_runs`` adds it)."""
    request = program.requests[index]
    write = WRITERS[program.protocol]
    turns: list[Body] = []
    if index == 0 and program.prelude is not None:
        turns += write.prelude(program.prelude, prelude_ids)
    turns += write.turn(request, ids)
    if index == 0 and program.system is not None and program.protocol == "chat_completions":
        turns.insert(0, {"role": "system", "content": program.system})
    return write.body(program, request, turns)


def error(result: str) -> bool:
    return result.startswith("Error: ")


class Chat:
    @staticmethod
    def said(said: Said) -> Body:
        if not said.images:
            return {"role": "user", "content": said.text}
        images = [{"type": "image_url", "image_url": {"url": url}} for url in said.images]
        return {"role": "user", "content": [{"type": "text", "text": said.text}, *images]}

    @classmethod
    def turn(cls, request: Request, ids: list[str]) -> list[Body]:
        out = [{"role": "tool", "tool_call_id": i, "content": r}
               for i, r in zip(ids, request.results, strict=True)]  # fmt: skip
        return out + ([cls.said(request.said)] if request.said is not None else [])

    @classmethod
    def prelude(cls, prelude: Prelude, ids: list[str]) -> list[Body]:
        calls = [{"id": i, "type": "function",
                  "function": {"name": TOOL, "arguments": json.dumps({"order": f"D-{n}"})}}
                 for n, i in enumerate(ids)]  # fmt: skip
        asked = {"role": "assistant", "content": prelude.text, "tool_calls": calls}
        done = cls.turn(Request(prelude.results), ids)
        return [
            cls.said(prelude.said),
            asked,
            *done,
            {"role": "assistant", "content": prelude.answer},
        ]

    @staticmethod
    def body(program: Program, request: Request, turns: list[Body]) -> Body:
        body: Body = {"model": "gpt-4o", "messages": turns, "stream": request.stream}
        if program.tools:
            function = {"name": TOOL, "description": "Where an order is", "parameters": SCHEMA}
            body["tools"] = [{"type": "function", "function": function}]
        return body


class Responses:
    @staticmethod
    def said(said: Said) -> Body:
        parts = [{"type": "input_text", "text": said.text}]
        parts += [{"type": "input_image", "image_url": url} for url in said.images]
        return {"type": "message", "role": "user", "content": parts}

    @classmethod
    def turn(cls, request: Request, ids: list[str]) -> list[Body]:
        out = [{"type": "function_call_output", "call_id": i, "output": r}
               for i, r in zip(ids, request.results, strict=True)]  # fmt: skip
        return out + ([cls.said(request.said)] if request.said is not None else [])

    @classmethod
    def prelude(cls, prelude: Prelude, ids: list[str]) -> list[Body]:
        said = [] if prelude.text is None else [assistant_item(prelude.text)]
        calls = [{"type": "function_call", "call_id": i, "name": TOOL,
                  "arguments": json.dumps({"order": f"D-{n}"})}
                 for n, i in enumerate(ids)]  # fmt: skip
        done = cls.turn(Request(prelude.results), ids)
        return [cls.said(prelude.said), *said, *calls, *done, assistant_item(prelude.answer)]

    @staticmethod
    def body(program: Program, request: Request, turns: list[Body]) -> Body:
        said = request.said
        plain = said is not None and not said.images and len(turns) == 1  # input as a string
        body: Body = {"model": "gpt-4o", "input": said.text if plain and said else turns,
                      "stream": request.stream, "truncation": program.truncation}  # fmt: skip
        if program.system is not None:
            body["instructions"] = program.system
        if program.thinking:
            body["reasoning"] = {"effort": "low"}
        if program.tools:
            body["tools"] = [{"type": "function", "name": TOOL, "parameters": SCHEMA,
                              "description": "Where an order is"}]  # fmt: skip
        return body


def assistant_item(text: str) -> Body:
    return {"type": "message", "role": "assistant",
            "content": [{"type": "output_text", "text": text}]}  # fmt: skip


class Anthropic:
    @staticmethod
    def blocks(said: Said) -> list[Body]:
        out: list[Body] = [{"type": "text", "text": said.text}]
        for url in said.images:
            media, _, data = url.removeprefix("data:").partition(";base64,")
            source = (
                {"type": "base64", "media_type": media, "data": data} if url.startswith("data:")
                else {"type": "url", "url": url}
            )  # fmt: skip
            out.append({"type": "image", "source": source})
        return out

    @classmethod
    def turn(cls, request: Request, ids: list[str]) -> list[Body]:
        blocks: list[Body] = []
        for i, result in zip(ids, request.results, strict=True):
            block: Body = {"type": "tool_result", "tool_use_id": i, "content": result}
            blocks.append({**block, "is_error": True} if error(result) else block)
        if request.said is not None:
            if not blocks and not request.said.images:
                return [{"role": "user", "content": request.said.text}]
            blocks += cls.blocks(request.said)
        return [{"role": "user", "content": blocks}]

    @classmethod
    def prelude(cls, prelude: Prelude, ids: list[str]) -> list[Body]:
        said = [] if prelude.text is None else [{"type": "text", "text": prelude.text}]
        uses = [{"type": "tool_use", "id": i, "name": TOOL, "input": {"order": f"D-{n}"}}
                for n, i in enumerate(ids)]  # fmt: skip
        asked = {"role": "assistant", "content": [*said, *uses]}
        done = cls.turn(Request(prelude.results), ids)
        answer = {"role": "assistant", "content": prelude.answer}
        return [{"role": "user", "content": cls.blocks(prelude.said)}, asked, *done, answer]

    @staticmethod
    def body(program: Program, request: Request, turns: list[Body]) -> Body:
        body: Body = {"model": "claude-sonnet-4-5", "max_tokens": MAX_TOKENS, "messages": turns,
                      "stream": request.stream}  # fmt: skip
        if program.system is not None:
            body["system"] = program.system
        if program.thinking:
            body["thinking"] = {"type": "enabled", "budget_tokens": MAX_TOKENS // 2}
        if program.tools:
            body["tools"] = [{"name": TOOL, "description": "Where an order is",
                              "input_schema": SCHEMA}]  # fmt: skip
        return body


WRITERS: dict[str, type[Chat] | type[Responses] | type[Anthropic]] = {
    "chat_completions": Chat,
    "responses": Responses,
    "anthropic_messages": Anthropic,
}
