"""What the compression tests compress: entries made in code (an incident report, tool calls,
mixed scripts), texts drawn by Hypothesis, and a fake summarizing model."""

from __future__ import annotations

import asyncio
import dataclasses
import re
from collections.abc import Sequence
from typing import Any

from hypothesis import strategies as st

from ctxwindow.messages import Entry, Message
from ctxwindow.tokens import chat_tokenizer

TOK = chat_tokenizer("gpt-4o")
INCIDENT = (
    "Thanks for your message. We appreciate your message and your patience. "
    "The migration of cluster kappa-7 failed at 03:14 UTC with error E4021. "
    "We appreciate your patience. Thanks again for your patience and your message. "
    "Please restart node 12 before Friday. Have a nice day."
)


def make(message: Message, seq: int = 0, **fields: Any) -> Entry:
    return Entry(message, TOK.message_tokens(message), seq=seq, **fields)


def user(text: str, seq: int = 0) -> Entry:
    return make({"role": "user", "content": text}, seq)


def tool(content: str, call_id: str = "call_1", seq: int = 1) -> Entry:
    return make({"role": "tool", "tool_call_id": call_id, "content": content}, seq)


def call(name: str = "list_users", call_id: str = "call_1", content: str | None = None) -> Entry:
    function = {"name": name, "arguments": '{"limit": 1000}'}
    calls = [{"id": call_id, "type": "function", "function": function}]
    return make({"role": "assistant", "content": content, "tool_calls": calls})


def snapshot(entries: Sequence[Entry]) -> list[dict[str, Any]]:
    return [dataclasses.asdict(entry) for entry in entries]


WORDS = [
    "cluster", "node", "E4021", "3.14", "e.g.", "Dr.", "東京", "会議", "服务器", "崩溃",
    "です", "ます", "😀", "🎉", "the", "and", "payment", "2024-05-01", "id-77", "ok",
]  # fmt: skip
PUNCT = [" ", " ", " ", ". ", "! ", "? ", "。", "！", "？", "；", "…", "\n", "\n- ", ", "]


@st.composite
def texts(draw: st.DrawFn) -> str:
    pieces = draw(st.lists(st.tuples(st.sampled_from(WORDS), st.sampled_from(PUNCT)), max_size=80))
    return "".join(word + punct for word, punct in pieces)


class FakeModel:
    """A deterministic async completion: the summary is a function of the input.

    It replies with the ids, codes and numbers of the text it is sent, and
    counts calls and how many are in flight at once.
    """

    def __init__(self, delay: float = 0.0, reply: str | None = None, error: bool = False) -> None:
        self.delay, self.reply, self.error = delay, reply, error
        self.calls: list[list[Message]] = []
        self.in_flight = 0
        self.max_in_flight = 0

    async def __call__(self, messages: list[Message]) -> str:
        self.calls.append(messages)
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            await asyncio.sleep(self.delay)
            if self.error:
                raise RuntimeError("the model is down")
            return self.reply if self.reply is not None else summary_of(messages[-1]["content"])
        finally:
            self.in_flight -= 1


def summary_of(text: str) -> str:
    found = re.findall(r"[\w-]*\d[\w:-]*", text)
    return "Key facts: " + ", ".join(dict.fromkeys(found)) + "."
