"""One contract for both managers: the same inputs give the same contexts on every store.

``ContextManager`` and ``AsyncContextManager`` run the same conversation over
every store of the store contract (memory, SQLite, Redis, PostgreSQL, tiered;
sync and async), and each context, preview and report must equal what a sync
manager over a ``MemoryStore`` gives — the reference.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from ctxwindow import SessionFullError
from ctxwindow.archive.sqlite import SQLiteArchive
from ctxwindow.context import AsyncContextManager, ContextManager, checkpoints
from ctxwindow.redact import Redactor
from ctxwindow.stores.memory import MemoryStore

from .support.stores import Case

BUDGET = 300


class Blocking:
    """An ``AsyncContextManager`` with the sync API, run on the case's event loop."""

    def __init__(self, manager: AsyncContextManager, loop: asyncio.AbstractEventLoop) -> None:
        self.manager = manager
        self.loop = loop

    def __getattr__(self, name: str) -> Callable[..., Any]:
        method = getattr(self.manager, name)
        return lambda *args, **kwargs: self.loop.run_until_complete(method(*args, **kwargs))


def manager_of(store: Case, **options: Any) -> Any:
    options = {"budget": BUDGET, "archive": SQLiteArchive(), **options}
    if store.flavour == "sync":
        return ContextManager(store.raw, **options)
    assert store.loop is not None
    return Blocking(AsyncContextManager(store.raw, **options), store.loop)


def reference(**options: Any) -> ContextManager:
    return ContextManager(
        MemoryStore(), **{"budget": BUDGET, "archive": SQLiteArchive(), **options}
    )


def call(n: int) -> dict[str, Any]:
    function = {"name": "track", "arguments": f'{{"order": "A-{n}"}}'}
    return {"role": "assistant", "content": None,
            "tool_calls": [{"id": f"c{n}", "type": "function", "function": function}]}  # fmt: skip


def converse(manager: Any, sid: str) -> list[Any]:
    """A conversation that evicts, recalls, previews and replays; what each step gave."""
    seen: list[Any] = []
    manager.add(sid, {"role": "system", "content": "Be brief. 简短回答。"})
    manager.add(sid, {"role": "user", "content": "My tracking id is SF1234567890 for the kettle."})
    manager.add(sid, {"role": "user", "content": "我的会员号是 VIP-8848，住在东京。🙂"})
    for i in range(12):
        manager.add(sid, {"role": "user", "content": f"where is order A-{i}?"})
        manager.add(sid, call(i))
        manager.add(sid, {"role": "tool", "tool_call_id": f"c{i}", "content": f"A-{i}: shipped"})
        manager.add(sid, {"role": "assistant", "content": f"Order A-{i} has shipped. 発送済み"})
    for query in ("tracking id kettle", "东京 会员号", None):
        seen.append(shape(manager.build(sid, query=query)))
    seen.append(shape(manager.preview(sid, {"role": "user", "content": "And my 会员号?"})))
    turns = [{"role": "user", "content": "one more"}, {"role": "assistant", "content": "ok"}]
    first = manager.extend(sid, turns, idempotency_key="k1", max_messages=100)
    again = manager.extend(sid, turns, idempotency_key="k1", max_messages=100)
    seen.append(([e.seq for e in first], [e.id for e in again] == [e.id for e in first]))
    with pytest.raises(SessionFullError):
        manager.extend(sid, turns, max_messages=len(manager.history(sid)) + 1)
    seen.append([e.message for e in manager.history(sid)])
    return seen


def shape(context: Any) -> tuple[Any, ...]:
    """What must match: the messages, the count, and every decision but generated ids."""
    decisions = [
        (d.state, d.role, d.category, d.tokens, d.preview) for d in context.report.decisions
    ]
    return context.messages, context.total_tokens, sorted(decisions)


def test_both_managers_give_the_reference_contexts_on_every_store(case: Case) -> None:
    assert converse(manager_of(case), case.sid("s")) == converse(reference(), "s")


def test_without_prefetch_and_with_context_redaction_the_contexts_match(case: Case) -> None:
    """Redaction at context time, recall searched at build time: still the reference."""
    options = {"prefetch": False, "redactor": Redactor(), "redact": "context"}
    manager, sid = manager_of(case, **options), case.sid("s")
    assert converse(manager, sid) == converse(reference(**options), "s")
    manager.add(sid, {"role": "user", "content": "写信给我: li.wei@example.com"})
    assert manager.history(sid)[-1].message["content"].endswith("li.wei@example.com")  # as sent
    assert "li.wei@example.com" not in str(manager.build(sid).messages)  # masked upstream


def test_two_managers_over_one_store_see_each_others_turns(case: Case) -> None:
    """A second manager (another worker) adds; the first catches up before it builds."""

    def alternate(one: Any, two: Any, sid: str) -> list[Any]:
        one.add(sid, {"role": "user", "content": "订单 A-1 在哪里？"})
        two.add(sid, {"role": "assistant", "content": "A-1: 已发货"})
        one.add(sid, {"role": "user", "content": "and A-2?"})
        return [shape(one.build(sid)), shape(two.build(sid))]

    store = MemoryStore()
    expected = alternate(
        ContextManager(store, budget=BUDGET), ContextManager(store, budget=BUDGET), "s"
    )
    seen = alternate(manager_of(case, archive=None), manager_of(case, archive=None), case.sid("s"))
    assert seen == expected
    assert [m["content"] for m in seen[0][0]] == ["订单 A-1 在哪里？", "A-1: 已发货", "and A-2?"]


PRIMITIVES = ("_append", "_append_after", "_load", "_tail", "_replayed", "_load_from_checkpoint",
              "_earlier", "_save_checkpoint", "_checkpoint", "_get")  # fmt: skip


def counted(case: Case) -> list[str]:
    """The names of the store primitives called from now on (the store's own calls within
    one primitive, such as the default ``_append_after``'s, counted too)."""
    calls: list[str] = []
    for name in PRIMITIVES:
        method = getattr(case.raw, name)

        def spy(*args: Any, _name: str = name, _method: Any = method, **kwargs: Any) -> Any:
            calls.append(_name)
            return _method(*args, **kwargs)

        setattr(case.raw, name, spy)
    return calls


def test_a_turn_costs_one_store_call_to_store_each_message(case: Case) -> None:
    """Once the window is loaded, a turn held for the question, the context and the reply
    (as the service holds one for a request) makes two store calls: the question's
    append checks that the window is current as it stores it (``append_after``), the
    reply's is a plain append. A store without an ``append_after`` of its own would read
    the newest entry first (and a key's batch), inside the base's default. A call on its
    own is a turn of its own."""
    manager, sid = manager_of(case, archive=None), case.sid("turns")
    manager.add(sid, {"role": "user", "content": "订单 A-1 在哪里？"})
    calls = counted(case)

    def held(i: int) -> None:
        question = {"role": "user", "content": f"and A-{i}? 🚚"}
        reply = {"role": "assistant", "content": f"A-{i}: 発送済み"}
        if case.flavour == "sync":
            with manager.turn(sid):
                manager.add(sid, question, idempotency_key=f"q{i}")
                manager.build(sid)
                manager.add(sid, reply)
            return
        raw = manager.manager

        async def turn() -> None:
            async with raw.turn(sid):
                await raw.add(sid, question, idempotency_key=f"q{i}")
                await raw.build(sid)
                await raw.add(sid, reply)

        case.run(turn())

    for i in range(3):
        held(i)
    native = "_append_after" in type(case.raw).__dict__
    keyed = ["_append_after"] if native else ["_append_after", "_replayed", "_tail", "_append"]
    assert calls == [*keyed, "_append"] * 3
    calls.clear()
    manager.build(sid)  # a turn of its own: it reads the newest entry
    manager.add(sid, {"role": "user", "content": "one more 🙂"})  # no key
    plain = ["_append_after"] if native else ["_append_after", "_tail", "_append"]
    assert calls == ["_tail", *plain]


def test_a_window_behind_the_store_catches_up_before_it_refuses_or_stores(case: Case) -> None:
    """Another manager (another worker) stored turns since this one's window saw the
    store: what this one stores is checked against the session as it is, not as its
    window last saw it."""
    one, two, sid = manager_of(case, archive=None), manager_of(case, archive=None), case.sid("s")
    one.add(sid, {"role": "user", "content": "where is A-1?"})
    one.add(sid, call(1))
    two.add(sid, {"role": "tool", "tool_call_id": "c1", "content": "A-1: 已发货"})
    # one's window still waits for c1's result, which two stored: the turn is taken
    one.add(sid, {"role": "user", "content": "and A-2? 🙂"})
    two.add(sid, {"role": "assistant", "content": "A-2 ships today."})
    # one's window holds 4 messages, the session 5: one more would take it over 5
    with pytest.raises(SessionFullError):
        one.extend(sid, [{"role": "user", "content": "再一个"}], max_messages=5)
    first = two.extend(sid, [{"role": "user", "content": "last one"}], idempotency_key="k")
    one.add(sid, {"role": "assistant", "content": "noted"})
    # a retry through the manager whose window is behind: the first batch, nothing stored
    again = one.extend(sid, [{"role": "user", "content": "last one"}], idempotency_key="k")
    assert [e.id for e in again] == [e.id for e in first]
    assert [m["content"] for m in map(lambda e: e.message, one.history(sid))] == [
        "where is A-1?", None, "A-1: 已发货", "and A-2? 🙂", "A-2 ships today.", "last one",
        "noted",
    ]  # fmt: skip
    assert shape(one.build(sid)) == shape(two.build(sid))


def test_a_deleted_session_starts_again_from_nothing(case: Case) -> None:
    manager, sid = manager_of(case), case.sid("gone")
    converse(manager, sid)
    assert manager.delete(sid) is True
    assert manager.history(sid) == [] and manager.build(sid).messages == []
    manager.add(sid, {"role": "user", "content": "新的开始 🌱"})
    fresh = reference()
    fresh.add("s", {"role": "user", "content": "新的开始 🌱"})
    assert shape(manager.build(sid)) == shape(fresh.build("s"))
    assert manager.delete(sid) is True and manager.delete(sid) is False


def test_a_restarted_manager_carries_on_from_the_sessions_checkpoint(
    case: Case,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A manager that loads a session cold (another process, after a restart) resumes its
    checkpoint and replays only what came after: it then gives what a manager that never
    stopped gives, recall included (the archive gets what the checkpoint covered)."""
    monkeypatch.setattr(checkpoints, "EVERY", 16)
    resumed: list[int] = []
    resume = checkpoints.resumed

    def spied(session: Any, seq: int, data: bytes) -> bool:
        done = resume(session, seq, data)
        resumed.append(seq if done else -1)
        return done

    monkeypatch.setattr(checkpoints, "resumed", spied)

    def first_part(manager: Any, sid: str) -> None:
        manager.add(sid, {"role": "system", "content": "Be brief. 简短回答。"})
        manager.add(sid, {"role": "user", "content": "My tracking id is SF1234567890, kettle."})
        for i in range(20):
            manager.add(sid, {"role": "user", "content": f"where is order A-{i}? 🚚"})
            manager.add(sid, call(i))
            manager.add(sid, {"role": "tool", "tool_call_id": f"c{i}", "content": f"A-{i}: ok"})
            manager.add(sid, {"role": "assistant", "content": f"Order A-{i} shipped. 発送済み"})
        manager.add(sid, {"role": "user", "content": "And one still waiting?"})
        manager.add(sid, call(99))  # a call waiting for its result when the process stops

    def second_part(manager: Any, sid: str) -> list[Any]:
        manager.add(sid, {"role": "tool", "tool_call_id": "c99", "content": "A-99: lost 😢"})
        manager.add(sid, {"role": "assistant", "content": "A-99 was lost."})
        seen = []
        for query in ("tracking id kettle", None):
            built = manager.build(sid, query=query)
            seen.append((built.messages, built.total_tokens, built.report.evicted_entries))
        manager.add(sid, {"role": "user", "content": "What was my tracking id?"})
        built = manager.build(sid)
        seen.append((built.messages, built.total_tokens, built.report.evicted_entries))
        return seen

    never_stopped = reference()
    first_part(never_stopped, "s")
    expected = second_part(never_stopped, "s")

    archive, sid = SQLiteArchive(), case.sid("restart")
    first = manager_of(case, archive=archive)
    first_part(first, sid)
    del first  # the process is gone; what it archived stays, what it queued is lost
    later = manager_of(case, archive=SQLiteArchive())  # a new process, an empty archive
    assert second_part(later, sid) == expected
    assert len(resumed) == 1 and resumed[0] >= 64  # resumed, not replayed from seq 1
    assert "SF1234567890" in str(expected[0][0])  # recalled from before the checkpoint
