"""Window checkpoints: a window resumed from a checkpoint carries on exactly as the original.

Property: run a random program of adds (chat, tool calls answered in several
steps, pins, documents, small talk, a new system prompt) on a window, take a
checkpoint at a random step, send it through JSON, resume it in a fresh window
of the same configuration, then run the rest of the program on both: after
every step both send the same messages, count the same tokens, report the same
totals and leave out the same units for a narrower budget.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxwindow import MessageWindow, TokenWindow
from ctxwindow.context.policy import hybrid_policy
from ctxwindow.errors import (
    BudgetError,
    InvalidMessageError,
    MessageTooLargeError,
    PinnedOverBudgetError,
)
from ctxwindow.policies import Keeping, PriorityWindow, Window
from ctxwindow.policies.checkpoint import CheckpointError
from ctxwindow.tokens.defaults import chat_tokenizer

from .support.windows import texts

TOKENIZER = chat_tokenizer("gpt-4o")
LONG = " ".join(f"Line {i}: the parcel 包裹 {i} left the depot at {i}:00 😀." for i in range(60))

steps = st.one_of(
    st.tuples(st.just("msg"), st.sampled_from(["user", "assistant"]), texts),
    st.tuples(st.just("msg"), st.sampled_from(["user", "assistant"]), st.just(LONG)),
    st.tuples(st.just("msg"), st.just("user"), st.sampled_from(["thanks", "好的", "记住: 42"])),
    st.tuples(st.just("call"), st.integers(1, 2)),
    st.tuples(st.just("result"), texts),
    st.tuples(st.just("pin"), texts),
    st.tuples(st.just("system"), texts),
)

WINDOWS: dict[str, Callable[[int], Window]] = {
    "hybrid": lambda budget: hybrid_policy()(budget, TOKENIZER),
    "hybrid-nosummary": lambda budget: hybrid_policy(summary=False)(budget, TOKENIZER),
    "priority-tight": lambda budget: PriorityWindow(
        budget,
        tokenizer=TOKENIZER,
        oversize="truncate",
        keeping=Keeping(reserve_recent=40, caps={"document": budget // 3}),
    ),
    "token": lambda budget: TokenWindow(budget, tokenizer=TOKENIZER, oversize="drop"),
    "message": lambda budget: MessageWindow(max(2, budget // 40)),
}


class Driver:
    """Plays a program's steps on a window (a refused step changes nothing)."""

    def __init__(self) -> None:
        self.waiting: list[str] = []
        self.calls = 0

    def play(self, window: Window, step: tuple[Any, ...], n: int) -> None:
        kind = step[0]
        try:
            if kind == "msg" and not self.waiting:
                window.add({"role": step[1], "content": step[2] or "…"}, seq=n)
            elif kind == "call" and not self.waiting:
                ids = [f"c{n}_{i}" for i in range(step[1])]
                calls = [
                    {"id": i, "type": "function", "function": {"name": "f", "arguments": "{}"}}
                    for i in ids
                ]
                window.add({"role": "assistant", "content": None, "tool_calls": calls}, seq=n)
                self.waiting = ids
            elif kind == "result" and self.waiting:
                call = self.waiting.pop(0)
                window.add({"role": "tool", "tool_call_id": call, "content": step[1]}, seq=n)
            elif kind == "pin" and not self.waiting:
                window.add({"role": "user", "content": step[1] or "…"}, pin=True, seq=n)
            elif kind == "system" and not self.waiting:
                window.set_system(step[1] or "Be brief.")
        except (MessageTooLargeError, PinnedOverBudgetError, InvalidMessageError):
            pass
        if window.pending_tool_calls != frozenset(self.waiting):
            self.waiting = sorted(window.pending_tool_calls)  # a dropped call: its results go


def same(a: Window, b: Window) -> None:
    assert a.messages() == b.messages()
    assert a.total_tokens == b.total_tokens
    assert a.pending_tool_calls == b.pending_tool_calls
    narrow = max(a.pinned_tokens, a.total_tokens * 2 // 3)
    assert narrowed(a, narrow) == narrowed(b, narrow)
    if isinstance(a, PriorityWindow):
        assert isinstance(b, PriorityWindow)
        ra, rb = a.report(), b.report()
        assert (ra.evicted_entries, ra.evicted_tokens) == (rb.evicted_entries, rb.evicted_tokens)
        assert dict(ra.tokens_by_priority) == dict(rb.tokens_by_priority)
        assert ra.tokens_by_category == rb.tokens_by_category


def narrowed(window: Window, budget: int) -> Any:
    """What a narrower budget sends (or the error it raises)."""
    try:
        built = window.build(max_tokens=budget)
    except BudgetError as exc:
        return str(exc)
    return built.messages, built.total_tokens


@settings(max_examples=150, deadline=None)
@given(
    st.sampled_from(sorted(WINDOWS)),
    st.integers(150, 900),
    st.lists(steps, min_size=1, max_size=60),
    st.data(),
)
def test_a_resumed_window_carries_on_exactly_as_the_original(
    name: str, budget: int, program: list[tuple[Any, ...]], data: st.DataObject
) -> None:
    make = WINDOWS[name]
    original, driver = make(budget), Driver()
    at = data.draw(st.integers(0, len(program)), label="checkpoint after step")
    for n, step in enumerate(program[:at], 1):
        driver.play(original, step, n)
    state = orjson.loads(orjson.dumps(original.checkpoint()))  # what a store gives back
    resumed = make(budget)
    resumed.resume(state)
    same(original, resumed)
    twin = Driver()
    twin.waiting = list(driver.waiting)
    for n, step in enumerate(program[at:], at + 1):
        driver.play(original, step, n)
        twin.play(resumed, step, n)
        same(original, resumed)


def test_a_checkpoint_of_another_configuration_or_damaged_is_refused_and_changes_nothing() -> None:
    window = hybrid_policy()(400, TOKENIZER)
    for n in range(1, 30):
        window.add({"role": "user" if n % 2 else "assistant", "content": f"turn {n} {LONG}"}, seq=n)
    state = window.checkpoint()
    with pytest.raises(CheckpointError, match="configured otherwise"):
        hybrid_policy()(500, TOKENIZER).resume(state)
    with pytest.raises(CheckpointError, match="configured otherwise"):
        hybrid_policy(summary=False)(400, TOKENIZER).resume(state)
    with pytest.raises(CheckpointError, match="this version"):
        hybrid_policy()(400, TOKENIZER).resume({**state, "version": 0})
    damaged = {**state, "units": [{**state["units"][0], "size": state["units"][0]["size"] + 1}]}
    fresh = hybrid_policy()(400, TOKENIZER)
    with pytest.raises(CheckpointError, match="measures"):
        fresh.resume(damaged)
    assert (
        fresh.messages() == []
        and fresh.total_tokens == hybrid_policy()(400, TOKENIZER).total_tokens
    )
    fresh.resume(state)  # still fresh: the good one goes in
    assert fresh.messages() == window.messages()
    with pytest.raises(CheckpointError, match="fresh window"):
        fresh.resume(state)
