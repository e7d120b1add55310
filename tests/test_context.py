"""ContextManager: durable adds, hydration without re-tokenizing, recall in place, async twin."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import threading
from pathlib import Path
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from ctxwindow import (
    BudgetError,
    IdempotencyConflictError,
    InvalidMessageError,
    MessageTooLargeError,
    OrphanToolResultError,
    SessionBusyError,
    SessionFullError,
    StoreInputError,
    TokenWindow,
    count_tokens,
)
from ctxwindow.archive.sqlite import SQLiteArchive
from ctxwindow.context import AsyncContextManager, ContextManager, default_budget, request_hash
from ctxwindow.messages import Entry
from ctxwindow.stores.memory import AsyncMemoryStore, MemoryStore
from ctxwindow.stores.sqlite import SQLiteStore


def chat(cm: ContextManager, session: str, turns: int) -> None:
    for i in range(turns):
        cm.add(session, {"role": "user", "content": f"question {i} about delivery times"})
        cm.add(session, {"role": "assistant", "content": f"answer {i}: usually three days"})


def contents(messages: list[dict[str, Any]]) -> list[str]:
    return [str(m.get("content")) for m in messages]


def test_default_budget_is_a_ratio_of_the_context_window_minus_the_reply() -> None:
    assert default_budget("gpt-4o", 0.75, 4096) == 128_000 * 3 // 4 - 4096
    assert default_budget("gpt-4o", 5000, 4096) == 5000
    assert ContextManager(MemoryStore(), model="gpt-4").budget == int(8192 * 0.75) - 4096
    with pytest.raises(ValueError, match="ratio"):
        default_budget("gpt-4o", 1.5, 0)


def test_add_stores_first_and_build_fits_the_budget(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "s.db")
    cm = ContextManager(store, budget=300)
    cm.add("s", {"role": "system", "content": "Be brief."})
    chat(cm, "s", 40)
    assert len(cm.history("s")) == 81  # everything stays in the store
    context = cm.build("s")
    assert context.total_tokens <= 300
    assert context.total_tokens == count_tokens(context.messages)
    assert context.messages[0] == {"role": "system", "content": "Be brief."}
    assert contents(context.messages)[-1] == "answer 39: usually three days"
    narrow = cm.build("s", max_tokens=120)
    assert narrow.total_tokens <= 120


def test_a_new_system_message_replaces_the_prompt() -> None:
    cm = ContextManager(MemoryStore(), budget=500)
    cm.add("s", {"role": "system", "content": "Be brief."})
    cm.add("s", {"role": "user", "content": "hello there, friend"})
    cm.add("s", {"role": "system", "content": "Answer in Chinese. 用中文回答。"})
    messages = cm.build("s").messages
    assert [m["role"] for m in messages].count("system") == 1
    assert messages[0]["content"] == "Answer in Chinese. 用中文回答。"


def test_bad_tool_order_is_refused_before_anything_is_stored() -> None:
    cm = ContextManager(MemoryStore(), budget=500)
    with pytest.raises(OrphanToolResultError):
        cm.add("s", {"role": "tool", "tool_call_id": "nope", "content": "{}"})
    cm.add(
        "s",
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
    )  # fmt: skip
    with pytest.raises(InvalidMessageError, match="c1"):
        cm.add("s", {"role": "user", "content": "too early"})
    assert len(cm.history("s")) == 1
    cm.add("s", {"role": "tool", "tool_call_id": "c1", "content": '{"ok": true}'})
    assert [m["role"] for m in cm.build("s").messages] == ["assistant", "tool"]


def test_an_idempotent_retry_adds_nothing() -> None:
    cm = ContextManager(MemoryStore(), budget=500)
    first = cm.add("s", {"role": "user", "content": "pay invoice 7"}, idempotency_key="k1")
    again = cm.add("s", {"role": "user", "content": "pay invoice 7"}, idempotency_key="k1")
    assert first.id == again.id and first.seq == again.seq
    assert len(cm.history("s")) == 1
    assert contents(cm.build("s").messages) == ["pay invoice 7"]


def test_hydration_uses_the_stored_token_counts(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "s.db")
    # Entries written with a token count no tokenizer would give: if the window
    # re-tokenized them on load, its total would not be made of these counts.
    entries = [Entry({"role": "user", "content": f"message {i}"}, 50, 0) for i in range(20)]
    store.append("s", entries)
    cm = ContextManager(SQLiteStore(tmp_path / "s.db"), budget=1000)
    context = cm.build("s")
    kept = len(context.messages)
    assert kept < 20  # 50 "tokens" each cannot all fit in 1,000
    assert cm.history("s")[0].tokens == 50


def test_evicted_facts_are_recalled_in_place(tmp_path: Path) -> None:
    cm = ContextManager(SQLiteStore(tmp_path / "s.db"), budget=400, archive=SQLiteArchive())
    cm.add("s", {"role": "system", "content": "Be brief."})
    cm.add("s", {"role": "user", "content": "My tracking id is SF1234567890 for the blue kettle."})
    cm.add("s", {"role": "user", "content": "我的会员号是 VIP-8848，住在东京。"})
    chat(cm, "s", 60)
    cm.add("s", {"role": "user", "content": "What is the tracking id of the blue kettle?"})
    context = cm.build("s")
    texts = contents(context.messages)
    fact = "My tracking id is SF1234567890 for the blue kettle."
    assert fact in texts
    assert texts.index(fact) < texts.index("What is the tracking id of the blue kettle?")
    assert context.total_tokens <= 400
    assert context.total_tokens == count_tokens(context.messages)
    recalled = [d for d in context.report.decisions if d.state == "recalled"]
    assert recalled[0].preview == fact  # the best match first, then its neighbours
    assert all(abs(d.seq - recalled[0].seq) <= 3 for d in recalled)
    chinese = cm.build("s", query="东京的会员号")
    assert "我的会员号是 VIP-8848，住在东京。" in contents(chinese.messages)
    assert len(set(map(str, chinese.messages))) == len(chinese.messages)  # no duplicates


def test_delete_removes_the_session_everywhere(tmp_path: Path) -> None:
    archive = SQLiteArchive()
    cm = ContextManager(SQLiteStore(tmp_path / "s.db"), budget=200, archive=archive)
    chat(cm, "s", 30)
    assert archive.search("s", "delivery", k=3)
    assert cm.delete("s") is True
    assert cm.history("s") == []
    assert archive.search("s", "delivery", k=3) == []
    assert cm.build("s").messages == []


def test_the_async_twin_behaves_the_same() -> None:
    async def run() -> list[str]:
        cm = AsyncContextManager(AsyncMemoryStore(), budget=300)
        await cm.add("s", {"role": "system", "content": "Be brief."})
        for i in range(30):
            await cm.add("s", {"role": "user", "content": f"question {i} about delivery times"})
        context = await cm.build("s")
        assert context.total_tokens <= 300
        assert len(await cm.history("s")) == 31
        return contents(context.messages)

    texts = asyncio.run(run())
    assert texts[0] == "Be brief." and texts[-1] == "question 29 about delivery times"


facts = st.sampled_from(
    [
        "My tracking id is SF1234567890.",
        "我住在东京，会员号 VIP-8848。",
        "配達は夜がいいです。",
        "The reset code is RST-9921.",
        "question about delivery times",
        "answer: usually three days",
    ]
)


@settings(max_examples=40)
@given(
    st.lists(
        st.one_of(
            st.tuples(st.just("msg"), st.sampled_from(["user", "assistant"]), facts),
            st.tuples(st.just("tool"), facts),
        ),
        min_size=1,
        max_size=60,
    ),
    st.integers(120, 600),
    st.lists(st.sampled_from(["tracking id", "东京 会员号", "配達", "reset code", ""]), max_size=3),
    st.booleans(),
)
def test_invariants_hold_with_recall_on(
    program: list[tuple[str, ...]], budget: int, queries: list[str], prompt_cache: bool
) -> None:
    """Budget, exact count, whole tool units, chronological order, no duplicates.

    Recalled units are in place (their seq) without ``prompt_cache``; with it,
    the window's own messages are in order and each recalled block is.
    """
    cm = ContextManager(
        MemoryStore(), budget=budget, archive=SQLiteArchive(), prompt_cache=prompt_cache
    )
    cm.add("s", {"role": "system", "content": "Be brief."})
    for step, op in enumerate(program):
        if op[0] == "msg":
            cm.add("s", {"role": op[1], "content": f"{op[2]} (turn {step})"})
        else:
            call = {
                "id": f"c{step}",
                "type": "function",
                "function": {"name": "f", "arguments": "{}"},
            }
            cm.add("s", {"role": "assistant", "content": None, "tool_calls": [call]})
            cm.add("s", {"role": "tool", "tool_call_id": f"c{step}", "content": f"{op[1]} #{step}"})
    order = {m.id: m.seq for m in cm.history("s")}
    texts = {str(e.message): e.seq for e in cm.history("s")}
    for query in [*queries, None]:
        context = cm.build("s", query=query or None)
        messages = context.messages
        assert context.total_tokens <= budget
        assert context.total_tokens == count_tokens(messages)
        assert messages[0] == {"role": "system", "content": "Be brief."}
        assert len({str(m) for m in messages}) == len(messages)  # nothing twice
        back = {d.seq for d in context.report.decisions if d.state == "recalled"}
        seqs = [texts[str(m)] for m in messages if str(m) in texts and m["role"] != "system"]
        if prompt_cache:
            seqs = [seq for seq in seqs if seq not in back]
        assert seqs == sorted(seqs)  # chronological, recalled units in place
        for index, message in enumerate(messages):
            if message["role"] == "tool":
                assert messages[index - 1].get("tool_calls")
            if message.get("tool_calls"):
                assert messages[index + 1]["role"] == "tool"
        recalled = [d for d in context.report.decisions if d.state == "recalled"]
        assert all(d.id in order for d in recalled)
    stored = cm.history("s")
    question = {"role": "user", "content": "the tracking id and 会员号?"}
    preview = cm.preview("s", question)
    assert preview.total_tokens <= budget
    assert preview.total_tokens == count_tokens(preview.messages)
    assert preview.messages[-1] == question
    assert cm.history("s") == stored  # nothing stored


# -- turns: several managers (or processes) on one store --------------------------------


def token_window(budget: int, tokenizer: Any) -> TokenWindow:
    return TokenWindow(budget, tokenizer.model, tokenizer=tokenizer)


def test_a_manager_catches_up_with_what_another_stored() -> None:
    store = MemoryStore()
    first, second = ContextManager(store, budget=400), ContextManager(store, budget=400)
    first.add("s", {"role": "system", "content": "Be brief."})
    first.add("s", {"role": "user", "content": "我的订单号是 A-1042。"})
    assert first.build("s").messages[-1]["content"] == "我的订单号是 A-1042。"
    second.add("s", {"role": "assistant", "content": "承知しました 🙂"})
    second.add("s", {"role": "user", "content": "Where is it?"})
    assert contents(first.build("s").messages) == [
        "Be brief.", "我的订单号是 A-1042。", "承知しました 🙂", "Where is it?",
    ]  # fmt: skip
    assert first.build("s").messages == second.build("s").messages


def test_a_session_deleted_and_rebuilt_elsewhere_is_reloaded() -> None:
    store = MemoryStore()
    first, second = ContextManager(store, budget=400), ContextManager(store, budget=400)
    first.add("s", {"role": "user", "content": "old secret plan"})
    first.build("s")
    second.delete("s")
    assert first.build("s").messages == []
    second.add("s", {"role": "user", "content": "a new start"})
    assert contents(first.build("s").messages) == ["a new start"]
    second.delete("s")
    second.add("s", {"role": "user", "content": "same length, other text"})
    assert contents(first.build("s").messages) == ["same length, other text"]


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 2), st.sampled_from(["user", "assistant"]), facts), max_size=40
    ),
    st.integers(40, 300),
)
def test_managers_sharing_a_store_build_what_a_fresh_one_builds(
    program: list[tuple[int, str, str]], budget: int
) -> None:
    """Whoever added what, every manager's window equals one loaded fresh from the store."""
    store = MemoryStore()
    managers = [ContextManager(store, budget=budget, policy=token_window) for _ in range(3)]
    for step, (who, role, text) in enumerate(program):
        managers[who].add("s", {"role": role, "content": f"{text} ({step})"})
        managers[(who + 1) % 3].build("s")
    fresh = ContextManager(store, budget=budget, policy=token_window).build("s").messages
    for manager in managers:
        assert manager.build("s").messages == fresh


def test_a_turn_holds_the_session_against_other_threads() -> None:
    cm = ContextManager(MemoryStore(), budget=400, lock_timeout=0.1)
    with cm.turn("s"):
        cm.add("s", {"role": "user", "content": "inside my own turn"})  # no self-deadlock
        outcome: list[BaseException] = []
        worker = threading.Thread(
            target=lambda: _catching(outcome, cm.add, "s", {"role": "user", "content": "x"})
        )
        worker.start()
        worker.join()
        assert isinstance(outcome[0], SessionBusyError)
        cm.add("other", {"role": "user", "content": "other sessions are free"})
    assert contents(cm.build("s").messages) == [
        "inside my own turn"
    ]  # the refused add stored nothing
    cm.add("s", {"role": "user", "content": "after the turn"})
    assert len(cm.history("s")) == 2


def _catching(outcome: list[BaseException], call: Any, *args: Any) -> None:
    try:
        call(*args)
    except BaseException as exc:
        outcome.append(exc)


def test_concurrent_async_turns_never_interleave() -> None:
    async def one_turn(cm: AsyncContextManager, n: int) -> None:
        async with cm.turn("s"):
            await cm.add("s", {"role": "user", "content": f"question {n}"})
            await asyncio.sleep(0.001 * (n % 3))  # the upstream call
            await cm.build("s")
            await cm.add("s", {"role": "assistant", "content": f"answer {n}"})

    async def run() -> list[Entry]:
        store = AsyncMemoryStore()
        managers = [AsyncContextManager(store, budget=400) for _ in range(2)]
        await asyncio.gather(*(one_turn(managers[n % 2], n) for n in range(20)))
        return await managers[0].history("s")

    history = asyncio.run(run())
    pairs = [
        (history[i].message["content"], history[i + 1].message["content"]) for i in range(0, 40, 2)
    ]
    assert sorted(pairs) == sorted((f"question {n}", f"answer {n}") for n in range(20))


def test_an_async_turn_can_end_in_another_task() -> None:
    """A streamed reply is stored by the response's task, after the handler returned."""

    async def run() -> list[str]:
        cm = AsyncContextManager(AsyncMemoryStore(), budget=400, lock_timeout=0.05)
        stack = contextlib.AsyncExitStack()
        await stack.enter_async_context(cm.turn("s"))
        await cm.add("s", {"role": "user", "content": "streamed question"})

        async def finish() -> None:
            await cm.add("s", {"role": "assistant", "content": "streamed answer"})
            await stack.aclose()

        intruder = cm.add("s", {"role": "user", "content": "too early"})
        with pytest.raises(SessionBusyError):  # another request's task (not started in the turn)
            await contextvars.Context().run(asyncio.ensure_future, intruder)
        await asyncio.create_task(finish())
        await cm.add("s", {"role": "user", "content": "next question"})
        return [e.message["content"] for e in await cm.history("s")]

    assert asyncio.run(run()) == ["streamed question", "streamed answer", "next question"]


# -- redaction of contexts, not of the store ----------------------------------------------


def test_redact_context_keeps_the_store_as_sent_and_masks_what_is_sent() -> None:
    from ctxwindow.redact import Redactor

    store = MemoryStore()
    cm = ContextManager(store, budget=400, redactor=Redactor(), redact="context")
    cm.add("s", {"role": "system", "content": "Support bot. 管理员邮箱 admin@example.com"})
    cm.add("s", {"role": "user", "content": "我的卡号是 4111 1111 1111 1111，密码：hunter2"})
    stored = [e.message["content"] for e in cm.history("s")]
    assert "4111 1111 1111 1111" in stored[1] and "hunter2" in stored[1]
    context = cm.build("s")
    sent = contents(context.messages)
    assert sent == ["Support bot. 管理员邮箱 [EMAIL]", "我的卡号是 [BANK_CARD]，密码：[PASSWORD]"]
    assert context.total_tokens == count_tokens(context.messages) <= 400
    assert context.report.used == context.total_tokens


class Expanding:
    """Replaces each digit by a long placeholder, and counts the messages it saw."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, message: dict[str, Any]) -> dict[str, Any]:
        self.calls += 1
        text = "".join(
            "[A_VERY_LONG_PLACEHOLDER]" if c.isdigit() else c for c in message["content"]
        )
        return {**message, "content": text}


@settings(max_examples=30, deadline=None)
@given(
    st.lists(st.sampled_from(["订单 7", "ok", "code 12345", "配達 3 日", "🙂"]), max_size=25),
    st.integers(60, 300),
)
def test_a_redacted_context_fits_the_budget_even_when_placeholders_are_longer(
    texts: list[str], budget: int
) -> None:
    cm = ContextManager(
        MemoryStore(), budget=budget, redactor=Expanding(), redact="context", policy=token_window
    )
    for i, text in enumerate(texts):
        cm.add("s", {"role": "user" if i % 2 else "assistant", "content": text})
    context = cm.build("s")
    assert context.total_tokens == count_tokens(context.messages) <= budget
    assert all(not any(c.isdigit() for c in m["content"]) for m in context.messages)


def test_each_message_of_a_context_is_redacted_once() -> None:
    redactor = Expanding()
    cm = ContextManager(MemoryStore(), budget=2000, redactor=redactor, redact="context")
    chat(cm, "s", 5)
    cm.build("s")
    cm.build("s")
    assert redactor.calls == 10  # the second build reused every redacted copy
    cm.add("s", {"role": "user", "content": "one more 1"})
    cm.build("s")
    assert redactor.calls == 11


def test_an_unknown_redact_mode_is_refused() -> None:
    with pytest.raises(ValueError, match="redact must be one of"):
        ContextManager(MemoryStore(), redact="upstream")  # type: ignore[arg-type]


def test_on_event_tells_of_compressions_summary_folds_and_recall_searches() -> None:
    events: list[tuple[str, float]] = []
    cm = ContextManager(
        MemoryStore(),
        budget=512,
        archive=SQLiteArchive(),
        on_event=lambda n, v: events.append((n, v)),
    )
    manual = " ".join(
        f"Step {i}: tighten bolt {i} to {i + 10} Nm, check the seal." for i in range(40)
    )
    cm.add("s", {"role": "user", "content": f"The manual: {manual}"})
    chat(cm, "s", 20)
    cm.build("s", query="bolt 7 torque")
    names = [name for name, _ in events]
    assert names.count("compressed") >= 1 and names.count("summary_updated") >= 1
    searches = [value for name, value in events if name == "recall_seconds"]
    assert searches and all(0 <= value < 60 for value in searches)


def test_a_turn_handed_over_is_carried_on_elsewhere() -> None:
    """hand_over: this task takes the session like anybody else; carry_on: act within it."""

    async def run() -> list[str]:
        cm = AsyncContextManager(AsyncMemoryStore(), budget=400, lock_timeout=0.05)
        stack = contextlib.AsyncExitStack()
        await stack.enter_async_context(cm.turn("s"))
        await cm.add("s", {"role": "user", "content": "質問: where is it?"})
        cm.hand_over("s")
        with pytest.raises(SessionBusyError):  # no longer within the turn, which is held
            await cm.add("s", {"role": "user", "content": "too early"})

        async def finish() -> None:
            with cm.carry_on("s"):
                await cm.add("s", {"role": "assistant", "content": "回答: in Lyon 🚚"})
            await stack.aclose()

        await contextvars.Context().run(asyncio.ensure_future, finish())
        await cm.add("s", {"role": "user", "content": "thanks"})  # free again
        return [e.message["content"] for e in await cm.history("s")]

    assert asyncio.run(run()) == ["質問: where is it?", "回答: in Lyon 🚚", "thanks"]


# -- the async manager: archive work off the event loop, prefetch ---------------------


class WatchedArchive(SQLiteArchive):
    """An archive whose indexing waits until the event loop has run something else."""

    def __init__(self) -> None:
        super().__init__()
        self.loop_ran = threading.Event()
        self.batches: list[int] = []  # entries per index call
        self.waited: list[bool] = []  # whether the loop ran while each call waited
        self.searches = 0

    def index(self, session_id: str, entries: Any, *, user_id: str | None = None) -> int:
        batch = list(entries)
        self.batches.append(len(batch))
        self.waited.append(self.loop_ran.wait(timeout=5))
        return super().index(session_id, batch, user_id=user_id)

    def scores(self, *args: Any, **kwargs: Any) -> Any:  # recall's search
        self.searches += 1
        return super().scores(*args, **kwargs)


def test_archiving_a_large_batch_leaves_the_event_loop_free() -> None:
    """Indexing waits until another coroutine ran: on the loop it would wait in vain."""
    archive = WatchedArchive()

    async def run() -> None:
        cm = AsyncContextManager(AsyncMemoryStore(), budget=300, archive=archive, prefetch=False)
        await cm.add("s", {"role": "system", "content": "Be brief."})
        for i in range(400):
            await cm.add("s", {"role": "user", "content": f"turn {i}: 东京 tracking SF{i:06d}"})

        async def another_request() -> None:
            await asyncio.sleep(0)
            archive.loop_ran.set()

        context, _ = await asyncio.gather(cm.build("s", query="SF000007"), another_request())
        assert any("SF000007" in str(m["content"]) for m in context.messages)

    asyncio.run(run())
    assert sum(archive.batches) == 400  # every turn, archived (in batches) before the search
    assert all(archive.waited)


def test_the_async_manager_prefetches_recall_like_the_sync_one() -> None:
    archive = WatchedArchive()
    archive.loop_ran.set()

    async def run() -> list[str]:
        async with AsyncContextManager(AsyncMemoryStore(), budget=300, archive=archive) as cm:
            for i in range(60):
                await cm.add("s", {"role": "assistant", "content": f"note {i}: code K{i:03d}"})
            await cm.add("s", {"role": "user", "content": "what was code K007?"})
            searches = archive.searches
            context = await cm.build("s")
            assert archive.searches == searches == 1  # the add searched; the build reused it
            return [str(m["content"]) for m in context.messages]

    assert "note 7: code K007" in asyncio.run(run())


# -- extend: one idempotent batch -------------------------------------------------------


def batch_of(n: int) -> list[dict[str, Any]]:
    return [
        {"role": "user" if i % 2 == 0 else "assistant", "content": f"消息 {i} 🙂"} for i in range(n)
    ]


def test_extend_stores_a_batch_once_and_replays_it() -> None:
    cm = ContextManager(MemoryStore(), budget=400)
    first = cm.extend("s", batch_of(3), idempotency_key="req-1", metadata={"request": "req-1"})
    again = cm.extend("s", batch_of(3), idempotency_key="req-1")
    assert [e.seq for e in first] == [1, 2, 3] and [e.id for e in again] == [e.id for e in first]
    assert len(cm.history("s")) == 3
    bound = {"request": "req-1", "request_hash": request_hash(batch_of(3))}  # the key's request
    assert all(e.metadata == bound for e in cm.history("s"))


def test_extend_validates_every_message_before_storing_any() -> None:
    cm = ContextManager(MemoryStore(), budget=400)
    with pytest.raises(InvalidMessageError):
        cm.extend("s", [*batch_of(2), {"role": "wizard", "content": "x"}])
    assert cm.history("s") == []


def test_extend_refuses_a_batch_over_the_limit_and_counts_only_new_messages() -> None:
    cm = ContextManager(MemoryStore(), budget=400)
    cm.extend("s", batch_of(3), idempotency_key="a", max_messages=4)
    with pytest.raises(SessionFullError, match="over 4 messages"):
        cm.extend("s", batch_of(2), idempotency_key="b", max_messages=4)
    assert len(cm.history("s")) == 3  # nothing of the refused batch
    assert len(cm.extend("s", batch_of(3), idempotency_key="a", max_messages=4)) == 3  # a retry


def test_extend_with_max_tokens_refuses_what_the_next_build_could_not_send() -> None:
    cm = ContextManager(MemoryStore(), budget=400)
    cm.add("s", {"role": "system", "content": "Answer briefly, in the user's language. " * 4})
    call = {"id": "call_9", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    dangling = [{"role": "user", "content": "Where?"},
                {"role": "assistant", "content": None, "tool_calls": [call]}]  # fmt: skip
    with pytest.raises(InvalidMessageError, match="call_9"):
        cm.extend("s", dangling, max_tokens=400)
    with pytest.raises(MessageTooLargeError):  # 5 tokens leave the question no room at all
        cm.extend("s", [{"role": "user", "content": "東京はどこ? 🗼 " * 40}], max_tokens=5)
    assert len(cm.history("s")) == 1  # nothing of either batch
    cm.extend("s", dangling)  # without max_tokens the library takes a call awaiting results
    answered = [{"role": "tool", "tool_call_id": "call_9", "content": "here"}]
    assert len(cm.extend("s", answered, max_tokens=400)) == 1
    big = cm.extend("s", [{"role": "user", "content": "東京はどこ? 🗼 " * 40}], max_tokens=60)
    assert cm.build("s", max_tokens=60).messages[-1]["content"] != big[0].message["content"]


def test_the_async_extend_behaves_like_the_sync_one() -> None:
    async def run() -> list[int]:
        async with AsyncContextManager(AsyncMemoryStore(), budget=400) as cm:
            stored = await cm.extend("s", batch_of(3), idempotency_key="k", max_messages=3)
            assert [e.id for e in await cm.extend("s", batch_of(3), idempotency_key="k")] == [
                e.id for e in stored
            ]
            with pytest.raises(SessionFullError):
                await cm.extend("s", batch_of(1), max_messages=3)
            return [e.seq for e in await cm.history("s")]

    assert asyncio.run(run()) == [1, 2, 3]


def test_no_search_while_the_window_holds_the_whole_session() -> None:
    archive = WatchedArchive()
    archive.loop_ran.set()
    cm = ContextManager(MemoryStore(), budget=300, archive=archive)
    for i in range(4):
        cm.add("s", {"role": "user", "content": f"short turn {i} about the kettle"})
    cm.build("s", query="kettle")
    assert archive.searches == 0  # recall could not change this context
    chat(cm, "s", 40)
    cm.build("s", query="kettle")
    assert archive.searches >= 1
    assert any("short turn 0" in str(m["content"]) for m in cm.build("s", query="turn 0").messages)


def test_managers_sharing_hot_sessions_keep_one_window_a_session_counted_for_the_asker() -> None:
    """The service's models share one window cache: a session's window is the last asker's."""
    from ctxwindow.context import HotSessions

    store, hot = MemoryStore(), HotSessions(8)
    o200k = ContextManager(store, model="gpt-4o", budget=600, hot_sessions=hot)
    cl100k = ContextManager(store, model="gpt-4", budget=600, hot_sessions=hot)
    text = "配送は三日かかります 🚚 and the tracking id is SF1234567890"
    for i in range(6):
        o200k.add("s", {"role": "user", "content": f"{text} {i}"})
    first = o200k.build("s")
    assert len(hot) == 1 and hot.get("s", o200k._core) is not None

    by_cl100k = cl100k.build("s")  # replaces the window: gpt-4's framing and budget
    assert len(hot) == 1 and hot.get("s", o200k._core) is None
    fresh = ContextManager(store, model="gpt-4", budget=600).build("s")
    assert by_cl100k.messages == fresh.messages
    assert by_cl100k.total_tokens == fresh.total_tokens
    cl100k.add("s", {"role": "user", "content": "one more"})
    again = o200k.build("s")  # reloaded for gpt-4o, with what gpt-4's manager added
    assert len(hot) == 1 and hot.get("s", cl100k._core) is None
    assert again.messages[-1]["content"] == "one more"
    assert again.messages[-2] == first.messages[-1]
    alone = ContextManager(store, model="gpt-4o", budget=600).build("s")
    assert again.messages == alone.messages and again.total_tokens == alone.total_tokens


def test_hot_sessions_drop_the_least_recently_used_window() -> None:
    from ctxwindow.context import HotSessions

    hot = HotSessions(2)
    cm = ContextManager(MemoryStore(), model="gpt-4o", budget=500, hot_sessions=hot)
    for session in ("a", "b", "a", "c"):
        cm.add(session, {"role": "user", "content": f"hello {session}"})
    assert len(hot) == 2
    assert hot.get("a", cm._core) is not None and hot.get("b", cm._core) is None
    with pytest.raises(ValueError, match="hot_sessions must be a positive int"):
        HotSessions(0)


# -- the question: the newest user turn is always sent ---------------------------------

words = st.sampled_from(["parcel", "Osaka", "東京", "配達", "会員号", "🚚", "where", "is", "my"])
question_texts = st.lists(words, min_size=1, max_size=160).map(" ".join)


def ends_with_question(context: Any, question: dict[str, Any], entry_id: str) -> bool:
    """The context ends with the question, whole or as the report says it was compressed."""
    last = context.messages[-1]
    if last == question:
        return True
    compressed = [d for d in context.report.decisions if d.state == "compressed"]
    return last["role"] == "user" and any(d.id == entry_id for d in compressed)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.sampled_from(["user", "assistant"]), facts), max_size=12),
    question_texts,
    st.integers(8, 700),
    st.one_of(st.none(), st.integers(1, 150), st.integers(1, 700)),
    st.booleans(),
)
@example([("user", "Where is parcel 7?")], " ".join(["parcel"] * 100), 4000, 50, False)
@example([], "where is my parcel " * 40, 20, None, False)  # over the window's own budget
def test_the_question_is_sent_compressed_or_build_refuses(
    history: list[tuple[str, str]], text: str, budget: int, narrow: int | None, system: bool
) -> None:
    """For any budget and last user message: the context ends with (a compressed form of)
    the message, within the budget, or build raises BudgetError — never a context without it."""
    cm = ContextManager(MemoryStore(), budget=max(budget, 64 if system else 8))
    if system:
        cm.add("s", {"role": "system", "content": "Be brief. 简短回答。"})
    for role, fact in history:
        cm.add("s", {"role": role, "content": fact})
    question = {"role": "user", "content": text}
    stored = cm.add("s", question)
    try:
        context = cm.build("s", max_tokens=narrow)
    except BudgetError:
        return
    assert ends_with_question(context, question, stored.id)
    assert context.total_tokens == count_tokens(context.messages)
    assert context.total_tokens <= min(narrow or cm.budget, cm.budget)
    assert cm.build("s", max_tokens=narrow).messages == context.messages  # deterministic


@settings(max_examples=40, deadline=None)
@given(question_texts, st.integers(1, 400), st.booleans())
def test_a_previewed_question_is_compressed_or_refused_like_a_built_one(
    text: str, budget: int, system: bool
) -> None:
    cm = ContextManager(MemoryStore(), budget=400)
    if system:
        cm.add("s", {"role": "system", "content": "Be brief."})
    chat(cm, "s", 3)
    question = {"role": "user", "content": text}
    try:
        context = cm.preview("s", question, max_tokens=budget)
    except BudgetError:
        return
    last = context.messages[-1]
    assert last == question or (last["role"] == "user" and last["content"] != text)
    assert context.total_tokens == count_tokens(context.messages) <= budget


def test_a_question_too_large_for_a_narrow_budget_is_sent_compressed() -> None:
    """The service's case: 50 tokens, a 100-word question — compressed, never left out."""
    cm = ContextManager(MemoryStore(), budget=4000)
    chat(cm, "s", 3)
    words_100 = " ".join(f"parcel{i}" for i in range(100))
    stored = cm.add("s", {"role": "user", "content": f"Where is it? {words_100}"})
    context = cm.build("s", max_tokens=50)
    assert [m["role"] for m in context.messages] == ["user"]
    assert context.total_tokens == count_tokens(context.messages) <= 50
    [decision] = [d for d in context.report.decisions if d.id == stored.id]
    assert decision.state == "compressed" and decision.stored_tokens == stored.tokens


def test_a_question_that_cannot_fit_beside_the_system_prompt_is_a_budget_error() -> None:
    cm = ContextManager(MemoryStore(), budget=4000)
    cm.add("s", {"role": "system", "content": "Always answer in formal Japanese. " * 4})
    cm.add("s", {"role": "user", "content": "where is parcel 7 " * 30})
    with pytest.raises(MessageTooLargeError, match=r"the question .* takes \d+ tokens"):
        cm.build("s", max_tokens=40)
    with pytest.raises(BudgetError):
        cm.preview("s", {"role": "user", "content": "and parcel 8? " * 30}, max_tokens=40)


def test_an_answered_question_may_leave_a_narrow_context() -> None:
    """Only a question nothing answers yet is forced in: after a reply, the usual order."""
    cm = ContextManager(MemoryStore(), budget=4000)
    cm.add("s", {"role": "user", "content": "where is parcel 7 " * 30})
    cm.add("s", {"role": "assistant", "content": "In Osaka."})
    context = cm.build("s", max_tokens=20)  # no error: nothing is asked
    assert all(m["role"] != "user" for m in context.messages)


# -- extend: all or nothing, and a key bound to its request -------------------------------

CALL = {
    "role": "assistant",
    "content": None,
    "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
}


ORPHAN = {"role": "tool", "tool_call_id": "x", "content": "{}"}


@pytest.mark.parametrize(
    ("batch", "error"),
    [
        ([{"role": "user", "content": "包裹 7?"}, ORPHAN], OrphanToolResultError),
        ([CALL, {"role": "user", "content": "and then?"}], InvalidMessageError),
        ([{"role": "user", "content": "ok 🙂"}, {"role": "user", "content": "a\x00b"}],
         StoreInputError),
        ([{"role": "user", "content": "ok"}, {"role": "user", "content": "x", "bad": float("nan")}],
         StoreInputError),
    ],
)  # fmt: skip
def test_a_batch_with_one_bad_message_stores_none(batch: list[Any], error: type) -> None:
    """[valid, invalid] stores nothing, whatever refuses the second: tool order, the store."""
    cm = ContextManager(MemoryStore(), budget=400)
    with pytest.raises(error):
        cm.extend("s", batch, idempotency_key="k")
    assert cm.history("s") == []
    assert cm.extend("s", batch[:1], idempotency_key="k2")  # the session is usable
    assert contents(cm.build("s").messages) == [str(batch[0]["content"])]


def test_a_batch_with_its_tool_calls_and_results_is_checked_in_order() -> None:
    cm = ContextManager(MemoryStore(), budget=400)
    result = {"role": "tool", "tool_call_id": "c1", "content": '{"eta": "明天"}'}
    stored = cm.extend("s", [{"role": "user", "content": "eta?"}, CALL, result])
    assert [e.message["role"] for e in stored] == ["user", "assistant", "tool"]
    assert [m["role"] for m in cm.build("s").messages] == ["user", "assistant", "tool"]


def test_a_key_reused_with_other_messages_is_refused_and_stores_nothing() -> None:
    cm = ContextManager(MemoryStore(), budget=400)
    first = cm.extend("s", batch_of(2), idempotency_key="req-1")
    with pytest.raises(IdempotencyConflictError, match="req-1"):
        cm.extend("s", [{"role": "user", "content": "another question"}], idempotency_key="req-1")
    assert cm.history("s") == first
    assert cm.extend("s", batch_of(2), idempotency_key="req-1") == first  # the same: replayed


def test_a_key_is_bound_to_the_request_hash_given() -> None:
    """The service hashes the whole request body: a different body conflicts even when the
    messages are the same; the same body replays."""
    cm = ContextManager(MemoryStore(), budget=400)
    first = cm.extend("s", batch_of(1), idempotency_key="k", request_hash="sha256:aaa")
    with pytest.raises(IdempotencyConflictError):
        cm.extend("s", batch_of(1), idempotency_key="k", request_hash="sha256:bbb")
    assert cm.extend("s", batch_of(1), idempotency_key="k", request_hash="sha256:aaa") == first


def test_the_request_hash_is_canonical() -> None:
    """Key order and insignificant whitespace do not change it; a value does."""
    one = request_hash({"model": "gpt-4o", "messages": [{"role": "user", "content": "東京"}]})
    two = request_hash({"messages": [{"content": "東京", "role": "user"}], "model": "gpt-4o"})
    assert one == two and one.startswith("sha256:")
    assert request_hash({"model": "gpt-4o", "messages": []}) != one


def test_the_async_extend_refuses_a_reused_key_like_the_sync_one() -> None:
    async def run() -> list[Entry]:
        async with AsyncContextManager(AsyncMemoryStore(), budget=400) as cm:
            await cm.extend("s", batch_of(1), idempotency_key="k")
            with pytest.raises(IdempotencyConflictError):
                await cm.extend("s", batch_of(2), idempotency_key="k")
            return await cm.history("s")

    assert len(asyncio.run(run())) == 1


def test_with_context_redaction_the_report_previews_are_redacted_too() -> None:
    """``/context`` shows the report: it must not show what the model was not sent."""
    from ctxwindow.redact import Redactor

    cm = ContextManager(MemoryStore(), budget=120, redactor=Redactor(), redact="context")
    cm.add("s", {"role": "user", "content": "邮箱 li.wei@example.com，卡号 4111 1111 1111 1111"})
    for i in range(8):
        cm.add("s", {"role": "user", "content": f"filler turn {i} about parcels and 配送"})
    built = cm.build("s")
    previews = " ".join(d.preview for d in built.report.decisions)
    assert "li.wei@example.com" not in previews and "4111 1111 1111 1111" not in previews
    assert "[EMAIL]" in previews
    assert cm.history("s")[0].message["content"].startswith("邮箱 li.wei@example.com")
