"""A cold load from the newest entries keeps the invariants (DESIGN: budget, pinned entries,
whole tool units, order, determinism), for any session.

Sessions are written by one manager and loaded cold by another with another
budget, so the writer's checkpoint cannot be used; ``checkpoints.NEWEST``
and ``PAGE`` are made small so that every session of a few turns takes the
bounded path (``context/aio.py``, ``_load``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ctxwindow.context import ContextManager, checkpoints
from ctxwindow.stores.memory import MemoryStore

BUDGET = 260
TEXTS = st.sampled_from(
    ["where is 包裹 7?", "配達は明日です 🚚", "ok", "the gate code is 4471", "mixé 中文 😀 text"]
)
TURN = st.one_of(
    st.tuples(st.just("user"), TEXTS, st.booleans()),  # (role, text, pinned)
    st.tuples(st.just("assistant"), TEXTS, st.just(False)),
    st.tuples(st.just("tools"), TEXTS, st.integers(1, 2)),  # a call and its results
    st.tuples(st.just("system"), TEXTS, st.just(False)),
)


@pytest.fixture(autouse=True)
def small_loads() -> Iterator[None]:
    saved = checkpoints.NEWEST, checkpoints.PAGE
    checkpoints.NEWEST, checkpoints.PAGE = 6, 4
    try:
        yield
    finally:
        checkpoints.NEWEST, checkpoints.PAGE = saved


def write(store: MemoryStore, turns: list[tuple[str, str, Any]]) -> None:
    writer = ContextManager(store, budget=100_000)
    writer.add("s", {"role": "system", "content": "You are terse."})
    for n, (kind, text, extra) in enumerate(turns):
        if kind == "tools":
            calls = [
                {"id": f"c{n}-{i}", "type": "function",
                 "function": {"name": "track", "arguments": f'{{"n": {i}}}'}}
                for i in range(extra)
            ]  # fmt: skip
            writer.extend("s", [
                {"role": "assistant", "content": None, "tool_calls": calls},
                *({"role": "tool", "tool_call_id": c["id"], "content": text} for c in calls),
            ])  # fmt: skip
        else:
            writer.add("s", {"role": kind, "content": text}, pin=extra is True)


def check_tool_units(messages: list[dict[str, Any]]) -> None:
    """No result without its call before it, no call without all its results after it."""
    waiting: set[str] = set()
    for message in messages:
        if message["role"] == "tool":
            assert message["tool_call_id"] in waiting, messages
            waiting.discard(message["tool_call_id"])
        else:
            assert not waiting, messages  # a call's results come right after it
            waiting = {c["id"] for c in message.get("tool_calls") or []}
    assert not waiting


@given(turns=st.lists(TURN, min_size=4, max_size=30))
def test_a_cold_load_from_the_newest_entries_keeps_the_invariants(
    turns: list[tuple[str, str, Any]],
) -> None:
    store = MemoryStore()
    write(store, turns)
    stored = store.load("s")
    asked: list[int] = []
    earlier = store.earlier
    store.earlier = lambda sid, before: asked.append(before) or earlier(sid, before)  # type: ignore[method-assign]
    first = ContextManager(store, budget=BUDGET).build("s")
    if sum(e.tokens for e in stored) > 2 * BUDGET:  # too long to replay whole: bounded
        assert asked and asked[0] > 1
    again = ContextManager(MemoryStore(), budget=BUDGET)  # the same session, elsewhere
    again.store.append("s", stored)
    second = again.build("s")

    assert second.messages == first.messages  # deterministic
    assert first.total_tokens <= BUDGET  # the budget (DESIGN 1)
    systems = [e for e in stored if e.message["role"] == "system"]
    assert first.messages[0] == {"role": "system", "content": systems[-1].message["content"]}
    sent = [m.get("content") for m in first.messages]
    for entry in stored:  # pinned entries are kept (DESIGN 2; a replaced prompt is not)
        if entry.pinned and entry.message["role"] != "system":
            assert entry.message["content"] in sent
    check_tool_units(first.messages[1:])  # whole tool units (DESIGN 4)
    seqs = [d.seq for d in first.report.decisions if d.in_context and d.seq is not None]
    assert seqs[1:] == sorted(seqs[1:])  # chronological after the system prompt (DESIGN 5)
    last = stored[-1]
    if last.message["role"] != "system":
        assert first.messages[-1]["content"] == last.message["content"]  # the newest turn
