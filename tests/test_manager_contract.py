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
from ctxwindow.context import AsyncContextManager, ContextManager
from ctxwindow.stores.memory import MemoryStore

from .test_store_contract import Case, case  # noqa: F401 - the store fixture, reused

BUDGET = 300


class Blocking:
    """An ``AsyncContextManager`` with the sync API, run on the case's event loop."""

    def __init__(self, manager: AsyncContextManager, loop: asyncio.AbstractEventLoop) -> None:
        self.manager = manager
        self.loop = loop

    def __getattr__(self, name: str) -> Callable[..., Any]:
        method = getattr(self.manager, name)
        return lambda *args, **kwargs: self.loop.run_until_complete(method(*args, **kwargs))


def manager_of(store: Case) -> Any:
    if store.flavour == "sync":
        return ContextManager(store.raw, budget=BUDGET, archive=SQLiteArchive())
    assert store.loop is not None
    manager = AsyncContextManager(store.raw, budget=BUDGET, archive=SQLiteArchive())
    return Blocking(manager, store.loop)


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
    decisions = [(d.action, d.role, d.kind, d.tokens, d.preview) for d in context.report.decisions]
    return context.messages, context.total_tokens, sorted(decisions)


def test_both_managers_give_the_reference_contexts_on_every_store(case: Case) -> None:  # noqa: F811
    reference = converse(ContextManager(MemoryStore(), budget=BUDGET, archive=SQLiteArchive()), "s")
    assert converse(manager_of(case), case.sid("s")) == reference
