"""Whole conversations in the chat wire format, drawn by Hypothesis, with a budget.

What an app hands ctxwindow: a system prompt or none, then whole units in order (a
message, or an assistant's tool calls with every result) and maybe, last, a *pending*
call: an assistant message whose results have not all come yet. The tests that build a
context through every path and check it against the providers' rules
(tests/test_valid_paths.py, benchmarks/bench_valid.py) replay one as ``steps``.

What is drawn: English, Chinese, Japanese, emoji and mixed texts (tests/support/windows.py's
phrases), messages of thousands of tokens, secrets for the redactor; user turns with
images; one call or parallel calls, results that are errors, several calls in a row before
the next user turn (nested), results in any order. Every drawn conversation is valid in
every protocol as it is (``test_a_drawn_conversation_is_valid_before_any_path``), so a
violation is the path's doing. Texts of whitespace alone, and empty user turns, are left
out for that reason: the service's converter makes them invalid Anthropic requests as
they come (``test_a_blank_user_turn_reaches_anthropic_as_a_valid_request``).
Budgets run from a few tokens above what the system prompt takes to far more than the
whole conversation needs.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from hypothesis import strategies as st

from ctxwindow import count_tokens
from tests.support.windows import PHRASES, texts, tool_unit

Message = dict[str, Any]

SECRETS = [
    "卡号4111 1111 1111 1111",
    "身份证11010519491231002X",
    "IBAN DE89 3704 0044 0532 0130 00，密碼：abc123",
    "mail me at kenji.sato@example.co.jp",
]
TOOL_NAMES = ["f", "get_weather", "search_orders"]
IMAGES = [
    "https://example.com/receipt.png",
    # a 1x1 PNG, as clients inline a screenshot
    "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQ"
    "DwAEhQGAhKmMIQAAAABJRU5ErkJggg==",
]

said = texts.filter(lambda text: text.strip() != "" and "\x00" not in text) | st.sampled_from(
    SECRETS
)
"""A text with something in it (no NUL, which no store keeps): what an assistant says."""

long_texts = st.tuples(
    st.lists(st.sampled_from([p for p in PHRASES if p] + SECRETS), min_size=1, max_size=6),
    st.integers(300, 1_200),
).map(lambda drawn: " ".join(drawn[0] * drawn[1]))
"""Several thousand tokens: a pasted document, a large tool output."""

user_texts = st.one_of(said, said, said, long_texts)


@st.composite
def user_turns(draw: st.DrawFn) -> Message:
    """A user message: text, or text and images as content parts."""
    text = draw(user_texts)
    images = draw(st.lists(st.sampled_from(IMAGES), max_size=2))
    if not images:
        return {"role": "user", "content": text}
    details = draw(st.lists(st.sampled_from(["low", "high", "auto"]), min_size=2, max_size=2))
    parts: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
    parts += [
        {"type": "image_url", "image_url": {"url": url, "detail": detail}}
        for url, detail in zip(images, details, strict=False)
    ]
    return {"role": "user", "content": parts}


results = st.one_of(said, st.just(""), said.map("Error: {}".format), long_texts)
"""A tool's output: text, nothing, an error, or a large output."""


@st.composite
def tool_calls(draw: st.DrawFn, tag: int) -> list[Message]:
    """An assistant's calls (one, or parallel) with every result, in an order drawn:
    ``windows.tool_unit`` with names and arguments of their own."""
    n = draw(st.integers(1, 3))
    unit = tool_unit(n, draw(st.lists(results, min_size=n, max_size=n)), tag)
    for call in unit[0]["tool_calls"]:
        arguments = {"q": draw(said), "limit": draw(st.integers(1, 50))}
        call["function"] = {
            "name": draw(st.sampled_from(TOOL_NAMES)),
            "arguments": json.dumps(arguments, ensure_ascii=False),
        }
    if draw(st.booleans()):
        unit[0]["content"] = draw(said)  # an assistant that says something, then calls
    order = draw(st.permutations(range(n)))
    return [unit[0], *(unit[1 + i] for i in order)]


@st.composite
def exchanges(draw: st.DrawFn, tag: int) -> list[list[Message]]:
    """One exchange as units: user turns (one, or two sent together), then the assistant's
    side: calls one after another (nested, before any user turn) and maybe an answer."""
    units = [[draw(user_turns())] for _ in range(draw(st.integers(0, 2)))]
    for i in range(draw(st.integers(0, 2))):
        units.append(draw(tool_calls(tag * 10 + i)))
    for _ in range(draw(st.integers(0, 2))):  # two answers in a row happen too
        units.append([{"role": "assistant", "content": draw(said)}])
    return units


@dataclass(frozen=True)
class Step:
    """What an app adds at once, and what the conversation waits for after it.

    ``waiting``: the pending call and the results it has so far (empty when no call
    waits); ``asks``: a user turn or a tool unit's results came, so the model is asked
    now (an agent asks at nothing else).
    """

    messages: tuple[Message, ...]
    waiting: tuple[Message, ...] = ()
    asks: bool = False

    @property
    def pending(self) -> frozenset[str]:
        """Ids of the calls still waiting for results."""
        if not self.waiting:
            return frozenset()
        answered = {result["tool_call_id"] for result in self.waiting[1:]}
        return frozenset(c["id"] for c in self.waiting[0]["tool_calls"]) - answered

    @property
    def builds(self) -> bool:
        """Whether a context is built after this step: the model is asked, or a call waits."""
        return self.asks or bool(self.waiting)


@dataclass(frozen=True)
class Conversation:
    """A system prompt or none, whole units in order, and maybe a pending call last (its
    assistant message, then the results that came so far)."""

    system: str | None
    units: tuple[tuple[Message, ...], ...]
    pending: tuple[Message, ...] = ()

    def messages(self) -> list[Message]:
        """Every message, in order, the system prompt first."""
        head = [{"role": "system", "content": self.system}] if self.system is not None else []
        return [*head, *(m for unit in self.units for m in unit), *self.pending]

    def steps(self) -> Iterator[Step]:
        """The units as an app adds them; the pending call, then each of its results."""
        for unit in self.units:
            yield Step(unit, asks=unit[0]["role"] == "user" or "tool_calls" in unit[0])
        for n in range(1, len(self.pending) + 1):
            yield Step(self.pending[n - 1 : n], self.pending[:n])


@st.composite
def conversations(draw: st.DrawFn) -> Conversation:
    """A conversation of up to five exchanges; a third of them end with a pending call."""
    system = draw(st.none() | said | long_texts.map(lambda text: text[:2_000]))
    units = [u for i in range(draw(st.integers(1, 5))) for u in draw(exchanges(i))]
    units = units or [[draw(user_turns())]]
    pending: list[Message] = []
    if draw(st.integers(0, 2)) == 0:
        unit = draw(tool_calls(tag=99))
        pending = unit[: draw(st.integers(1, len(unit) - 1))]  # at least one result missing
    return Conversation(system, tuple(map(tuple, units)), tuple(pending))


def floor(conversation: Conversation, model: str = "gpt-4o") -> int:
    """The tokens of a request with the system prompt alone (the framing, reply priming)."""
    head = conversation.messages()[:1] if conversation.system is not None else []
    return count_tokens(head, model)


budget_above = st.one_of(st.integers(10, 60), st.integers(60, 600), st.integers(600, 30_000))
"""Tokens above ``floor``: from a few (every turn too large) to more than everything."""


@st.composite
def with_budgets(draw: st.DrawFn) -> tuple[Conversation, int]:
    """A conversation and a budget in tokens, at least ten above its ``floor``."""
    conversation = draw(conversations())
    return conversation, floor(conversation) + draw(budget_above)
