"""The managers' ``truncate`` and ``pop``: removed entries leave the store, the window and
the archive (recall never brings them back), and other managers' windows catch up."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from ctxwindow import StoreInputError
from ctxwindow.archive.sqlite import SQLiteArchive
from ctxwindow.context import AsyncContextManager, ContextManager, HotSessions, checkpoints
from ctxwindow.stores.memory import AsyncMemoryStore, MemoryStore
from ctxwindow.stores.sqlite import SQLiteStore

FACT = "My tracking id is SF1234567890 for the blue kettle — 蓝色水壶 🫖"
EARLY = "我的会员号是 VIP-8848，住在东京。"


def chat(cm: ContextManager, session: str, turns: int, topic: str = "delivery times") -> None:
    for i in range(turns):
        cm.add(session, {"role": "user", "content": f"question {i} about {topic}"})
        cm.add(session, {"role": "assistant", "content": f"answer {i}: usually three days"})


def contents(messages: list[dict[str, Any]]) -> list[str]:
    return [str(m.get("content")) for m in messages]


def test_pop_removes_the_last_entry_from_store_and_window() -> None:
    cm = ContextManager(MemoryStore(), budget=2000)
    cm.add("s", {"role": "system", "content": "Be brief."})
    chat(cm, "s", 3)
    assert contents(cm.build("s").messages)[-1] == "answer 2: usually three days"
    popped = cm.pop("s")
    assert popped is not None and popped.seq == 7
    assert popped.message["content"] == "answer 2: usually three days"
    assert [e.seq for e in cm.history("s")] == list(range(1, 7))
    assert contents(cm.build("s").messages)[-1] == "question 2 about delivery times"
    added = cm.add("s", {"role": "assistant", "content": "答案：三天 ✅"})
    assert added.seq == 7  # contiguous: the popped seq is taken again
    assert contents(cm.build("s").messages)[-1] == "答案：三天 ✅"


def test_pop_on_an_empty_session_is_none() -> None:
    cm = ContextManager(MemoryStore(), budget=2000)
    assert cm.pop("empty") is None
    cm.add("one", {"role": "user", "content": "hi"})
    assert cm.pop("one") is not None
    assert cm.pop("one") is None
    assert cm.history("one") == [] and cm.build("one").messages == []


def test_truncate_returns_what_it_removed_and_keeps_the_rest() -> None:
    cm = ContextManager(MemoryStore(), budget=2000)
    chat(cm, "s", 5)
    removed = cm.truncate("s", 4)
    assert [e.seq for e in removed] == list(range(5, 11))
    assert contents(cm.build("s").messages) == [
        "question 0 about delivery times",
        "answer 0: usually three days",
        "question 1 about delivery times",
        "answer 1: usually three days",
    ]
    assert cm.truncate("s", 4) == [] and cm.truncate("s", 100) == []
    assert [e.seq for e in cm.truncate("s", 0)] == [1, 2, 3, 4]
    assert cm.build("s").messages == []


@pytest.mark.parametrize("bad", [-1, "3", None, 1.0, True])
def test_bad_cuts_are_refused_and_remove_nothing(bad: Any) -> None:
    cm = ContextManager(MemoryStore(), budget=2000)
    chat(cm, "s", 2)
    with pytest.raises(StoreInputError):
        cm.truncate("s", bad)
    assert len(cm.history("s")) == 4
    with pytest.raises(StoreInputError):
        cm.truncate("", 0)


def test_recall_never_brings_back_a_removed_entry(tmp_path: Path) -> None:
    archive = SQLiteArchive()
    cm = ContextManager(SQLiteStore(tmp_path / "s.db"), budget=300, archive=archive)
    cm.add("s", {"role": "system", "content": "Be brief."})
    cm.add("s", {"role": "user", "content": EARLY})
    chat(cm, "s", 30)
    fact = cm.add("s", {"role": "user", "content": FACT})
    chat(cm, "s", 30)
    asked = cm.build("s", query="tracking id of the blue kettle")
    assert FACT in contents(asked.messages)  # recalled from the archive
    cm.drain()
    assert archive.indexed_through("s") == cm.history("s")[-1].seq

    removed = cm.truncate("s", fact.seq - 1)
    assert removed[0].message["content"] == FACT
    assert all(hit.entry.seq < fact.seq for hit in archive.search("s", "kettle tracking", k=5))
    built = cm.build("s", query="tracking id of the blue kettle")
    assert FACT not in contents(built.messages)
    # what remains is archived again (the watermark did not skip it), and recalled
    chat(cm, "s", 3, topic="weather")
    cm.drain()
    assert archive.indexed_through("s") == cm.history("s")[-1].seq == fact.seq + 5
    assert EARLY in contents(cm.build("s", query="东京的会员号").messages)
    assert not any(FACT in hit.entry.message["content"] for hit in archive.search("s", "kettle"))


def test_a_watermark_past_the_end_of_a_session_is_healed_on_load(tmp_path: Path) -> None:
    """A manager (here: the store, truncated behind every manager's back) whose archive
    holds entries past the session's end forgets them when it loads the session."""
    archive = SQLiteArchive()
    store = SQLiteStore(tmp_path / "s.db")
    with ContextManager(store, budget=300, archive=archive) as cm:
        chat(cm, "s", 20)
        cm.add("s", {"role": "user", "content": FACT})
        cm.drain()
    store = SQLiteStore(tmp_path / "s.db")
    store.truncate("s", 40)
    cm = ContextManager(store, budget=300, archive=archive)
    cm.build("s")
    cm.drain()
    assert archive.indexed_through("s") == 40
    assert not archive.search("s", "kettle tracking")
    cm.close()


def test_another_managers_window_catches_up_after_a_pop_or_truncate(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "s.db")
    first = ContextManager(store, budget=2000, hot_sessions=HotSessions(8))
    second = ContextManager(store, budget=2000, hot_sessions=HotSessions(8))
    chat(first, "s", 4)
    assert len(second.build("s").messages) == 8
    first.pop("s")
    assert contents(second.build("s").messages)[-1] == "question 3 about delivery times"
    # truncated, then written anew to the same length: the last seq alone cannot tell
    first.truncate("s", 4)
    chat(first, "s", 2, topic="refunds")
    assert [e.seq for e in first.history("s")] == list(range(1, 9))
    seen = contents(second.build("s").messages)
    assert seen == contents(first.build("s").messages)
    assert seen[-1] == "answer 1: usually three days" and "question 1 about refunds" in seen
    assert "question 2 about delivery times" not in seen


def test_a_retry_of_a_popped_request_is_stored_again() -> None:
    cm = ContextManager(MemoryStore(), budget=2000)
    batch = [
        {"role": "user", "content": "Where is parcel 42?"},
        {"role": "assistant", "content": "Parcel 42 is in Osaka."},
    ]
    first = cm.extend("s", batch, idempotency_key="req-1")
    assert cm.extend("s", batch, idempotency_key="req-1") == first  # a plain retry: replayed
    assert cm.pop("s") is not None
    again = cm.extend("s", batch, idempotency_key="req-1")
    assert [e.seq for e in again] == [2, 3]
    assert contents(cm.build("s").messages) == [
        "Where is parcel 42?",
        "Where is parcel 42?",
        "Parcel 42 is in Osaka.",
    ]


def test_a_checkpoint_past_the_cut_is_not_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(checkpoints, "EVERY", 10)
    store = SQLiteStore(tmp_path / "s.db")
    cm = ContextManager(store, budget=2000)
    chat(cm, "s", 12)
    assert store.checkpoint("s") is not None and store.checkpoint("s")[0] > 14
    cm.truncate("s", 14)
    assert store.checkpoint("s") is None or store.checkpoint("s")[0] <= 14
    fresh = ContextManager(SQLiteStore(tmp_path / "s.db"), budget=2000)
    built = contents(fresh.build("s").messages)
    assert built == contents(cm.build("s").messages)
    assert built[-1] == "answer 6: usually three days" and len(built) == 14


def test_the_async_manager_pops_and_truncates_the_same() -> None:
    async def run() -> tuple[Any, list[str], list[int]]:
        async with AsyncContextManager(AsyncMemoryStore(), budget=2000) as cm:
            for i in range(3):
                await cm.add("s", {"role": "user", "content": f"q{i} 质问"})
                await cm.add("s", {"role": "assistant", "content": f"a{i} 回答"})
            popped = await cm.pop("s")
            removed = await cm.truncate("s", 2)
            built = contents((await cm.build("s")).messages)
            return popped, built, [e.seq for e in removed]

    popped, built, removed = asyncio.run(run())
    assert popped.message["content"] == "a2 回答"
    assert built == ["q0 质问", "a0 回答"] and removed == [3, 4, 5]
