"""The explanation as state: one row per message, and totals that add up to the rows.

Property tests over random programs on every window kind (``TokenWindow``,
``MessageWindow``, a hybrid ``PriorityWindow`` that compresses and folds a
summary, each with and without stepped eviction), on builds narrowed or not
and on previews; then through a ``ContextManager`` with recall and the
service's ``/context``, whose rows cover every stored message with the ids
and seqs ``/messages`` gives.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from fastapi.testclient import TestClient
from hypothesis import given
from hypothesis import strategies as st

from ctxwindow import ContextManager, MessageWindow, PriorityWindow, TokenWindow
from ctxwindow.errors import BudgetError, CtxWindowError
from ctxwindow.policies import Keeping, Window
from ctxwindow.policies.explain import IN_CONTEXT, STATES
from ctxwindow.policies.journal import FOLDED_AWAY
from ctxwindow.stores.memory import MemoryStore
from tests.support.windows import check_totals, hybrid_window, long_texts, texts, tool_unit

ops = st.one_of(
    st.tuples(st.just("msg"), st.sampled_from(["user", "assistant"]), st.one_of(texts, long_texts)),
    st.tuples(st.just("tool"), st.integers(1, 2), st.lists(texts, min_size=2, max_size=2)),
    st.tuples(st.just("pin"), texts),
)


def make(kind: str, budget: int, low_water: float | None) -> Window:
    if kind == "token":
        return TokenWindow(max_tokens=budget, system="be brief", low_water=low_water)
    if kind == "message":
        return MessageWindow(max_messages=max(budget // 40, 2), system="sys", low_water=low_water)
    window = hybrid_window(budget)
    window.low_water = low_water
    return window


def run(window: Window, program: list[tuple[Any, ...]]) -> list[str]:
    """Run ``program`` on ``window``; the ids of the entries it added, in order."""
    added: list[str] = []
    for step, op in enumerate(program):
        messages = (
            tool_unit(op[1], op[2], step)
            if op[0] == "tool"
            else [{"role": "user" if op[0] == "pin" else op[1], "content": op[-1]}]
        )
        for message in messages:
            try:
                entry = window.add(message, pin=op[0] == "pin")
            except CtxWindowError:
                window.clear()
                return []  # refused (too large): the window starts again, untested here
            if entry is not None:
                added.append(entry.id)
    return added


@given(
    st.sampled_from(["token", "message", "hybrid"]),
    st.lists(ops, max_size=30),
    st.integers(150, 700),
    st.sampled_from([None, 0.7]),
    st.integers(40, 700),
)
def test_every_message_has_one_row_and_the_totals_add_up(
    kind: str, program: list[Any], budget: int, low_water: float | None, narrower: int
) -> None:
    window = make(kind, budget, low_water)
    added = run(window, program)
    built = window.build()
    check_totals(built.report, built.total_tokens)
    stored_rows = {d.id for d in built.report.decisions if d.seq is not None and d.seq >= 0}
    assert stored_rows == set(added), "one row for every message added, none for others"
    assert built.report.earlier_entries == 0, "the log (1,000 events) holds them all"
    try:
        narrowed = window.build(max_tokens=narrower)
    except BudgetError:
        return  # narrower than what is never evicted
    check_totals(narrowed.report, narrowed.total_tokens)
    left = [d for d in narrowed.report.decisions if d.reason.endswith("for this call")]
    assert narrowed.report.evicted_entries == built.report.evicted_entries + len(left)
    try:
        previewed = window.preview("user", "and the parcel 包裹 🚚?")
    except CtxWindowError:
        return
    check_totals(previewed.report, previewed.total_tokens)
    assert previewed.report.decisions[-1].preview == "and the parcel 包裹 🚚?"


def test_an_older_eviction_than_the_log_holds_is_counted_not_itemised() -> None:
    window = PriorityWindow(200, log_size=5, keeping=Keeping(reserve_recent=0))
    for i in range(40):
        window.add("user", f"order A-{i} 已发货 shipped today from the depot")
    report = window.build().report
    check_totals(report, window.total_tokens)
    itemised = sum(not d.in_context for d in report.decisions)
    assert itemised <= 5 < report.evicted_entries
    assert report.earlier_entries == report.evicted_entries - itemised > 0
    assert "not itemised" in str(report)


def test_the_priority_of_a_row_is_the_one_the_window_applied() -> None:
    """The issue's example: the row and the totals agree (HIGH: an identifier)."""
    window = PriorityWindow(max_tokens=1000, model="gpt-4o")
    window.add("user", "My tracking id is SF1234567890.")
    report = window.build().report
    [row] = report.decisions
    assert row.priority == "HIGH" and report.tokens_by_priority["HIGH"] == row.tokens
    assert report.tokens_by_category == {"chat": row.tokens}
    assert "kept       HIGH" in str(report)


def test_a_message_compressed_then_evicted_then_summarized_is_one_row() -> None:
    window = hybrid_window(400)
    for i in range(14):
        window.add("user", f"订单 A-{i} 已发货。 The code is K{i}. " * 12)
    built = window.build()
    report = built.report
    check_totals(report, window.total_tokens)
    summarized = [d for d in report.decisions if d.state == "summarized"]
    assert summarized and all(d.priority is not None for d in summarized)
    assert all(d.stored_tokens > 0 and d.tokens == 0 for d in summarized)
    [summary] = [d for d in report.decisions if d.category == "summary"]
    assert summary.seq is None and summary.state == "pinned"
    assert [d.category for d in report.decisions[:2]] == ["system", "summary"]  # as sent
    text = built.messages[1]["content"]
    assert all(f"K{d.seq}." in text for d in summarized), "a summarized row is in the summary"
    away = [d for d in report.decisions if d.reason == FOLDED_AWAY]
    assert away and all(d.state == "evicted" and f"K{d.seq}." not in text for d in away)
    assert f"of the {len(summarized) + len(away)} messages folded" in summary.reason


def test_a_summary_that_holds_nothing_claims_nothing() -> None:
    """The first shape of the live case: a summary too small for any fact."""
    window = hybrid_window(160)
    for i in range(14):
        window.add("user", f"订单 A-{i} 已发货。 The code is K{i}. " * 6)
    built = window.build()
    check_totals(built.report, built.total_tokens)
    assert built.messages[1]["content"].strip() == "Summary of earlier conversation:"
    folded = [d for d in built.report.decisions if d.reason == FOLDED_AWAY]
    assert folded and built.report.messages_by_state["summarized"] == 0
    assert built.report.messages_by_state["evicted"] == len(folded)


@given(st.lists(st.sampled_from(long_texts_list := ["订单 A-1042 已发货。", "The code is K7.",
                                                    "日本語の文。", "gate code 4471 Tromsø"]),
                min_size=4, max_size=40))  # fmt: skip
def test_the_manager_rows_cover_the_session_with_its_stored_ids_and_seqs(
    texts_: list[str],
) -> None:
    from ctxwindow.archive.sqlite import SQLiteArchive

    archive = SQLiteArchive()
    store = MemoryStore()
    manager = ContextManager(store, "gpt-4o", budget=300, archive=archive, reserve_output=0)
    try:
        for i, text in enumerate(texts_):
            manager.add("s", {"role": "user", "content": f"{text} (turn {i})"})
            manager.add("s", {"role": "assistant", "content": f"noted {i}"})
        built = manager.build("s", query="what is the gate code for Tromsø?")
        check_totals(built.report, built.total_tokens)
        history = store.load("s")
        covered = built.report.covering(history)
        check_totals(covered, built.total_tokens)
        assert covered.earlier_entries == 0
        stored = {e.id: e.seq for e in history}
        rows = {d.id: d.seq for d in covered.decisions if d.seq is not None}
        assert rows == stored, "one row per stored message, with its stored id and seq"
    finally:
        manager.close()
        archive.close()


def test_the_service_context_has_one_row_per_stored_message() -> None:
    """``/context`` rows and ``/messages`` agree on ids and seqs; the totals add up."""
    from ctxwindow.archive.sqlite import SQLiteArchive
    from ctxwindow.server.app import create_app
    from ctxwindow.server.settings import Settings
    from tests.support.chat_upstream import FakeUpstream, chat

    upstream, archive = FakeUpstream(), SQLiteArchive()
    app = create_app(
        Settings(store="memory://", upstream="http://u.test/v1", budget_ratio=0.004),
        upstream_transport=upstream.transport(), archive=archive,
    )  # fmt: skip
    with TestClient(app) as http:
        chat(http, "The gate code for the warehouse in Tromsø is 4471.", "r")
        for i in range(30):
            upstream.reply = f"Logged shipment {i} 📦 of ceramic tiles to depot {i % 5}."
            chat(http, f"Log shipment {i}: {i} pallets of ceramic tiles, 易碎.", "r")
        query = {"query": "What is the gate code for the Tromsø warehouse?"}
        context = http.get("/v1/sessions/r/context", params=query).json()
        stored = http.get("/v1/sessions/r/messages").json()["data"]
    archive.close()
    report = context["report"]
    rows = report["decisions"]
    assert {d["id"]: d["seq"] for d in rows if d["seq"] is not None} == {
        e["id"]: e["seq"] for e in stored
    }
    assert len(rows) == len(stored) + 1  # and the summary
    states = Counter(d["state"] for d in rows)
    assert states["recalled"] and states["kept"] and states["summarized"] + states["evicted"]
    assert report["messages_by_state"] == {s: states[s] for s in STATES}
    inside = sum(d["tokens"] for d in rows if d["state"] in IN_CONTEXT)
    assert report["used"] == report["framing"] + inside + report["reserve_output"]
    assert context["total_tokens"] == report["used"] - report["reserve_output"]
    assert report["evicted_entries"] == sum(d["state"] not in IN_CONTEXT for d in rows)
    assert report["earlier"] == {"entries": 0, "tokens": 0}
    gate = next(d for d in rows if "4471" in d["preview"])
    assert gate["state"] == "recalled" and gate["seq"] == stored[0]["seq"]


def test_a_tool_unit_dropped_whole_has_an_evicted_row_for_each_message_added() -> None:
    """The saved falsifying example: beside four pinned turns, a tool call's second result
    makes its unit too large (``oversize="drop"``); the call and the first result, both
    added, leave with the unit, and each has its row, evicted as too large."""
    window = hybrid_window(150)
    pins = [
        "The order A-1042 shipped.",
        "The order A-1042 shipped.",
        "请记住我的生日是五月三日。",
        "hello hello hello hello hello hello hello hello hello hello",
    ]
    added = [window.add("user", text, pin=True) for text in pins]
    big = "hello hello hello" + " The order A-1042 shipped." * 7
    call, first, second = tool_unit(2, [big, "hello"], 4)
    added += [window.add(call), window.add(first)]
    assert window.add(second) is None  # too large with it: the unit is dropped whole
    built = window.build()
    check_totals(built.report, built.total_tokens)
    rows = {d.id: d for d in built.report.decisions if d.seq is not None and d.seq >= 0}
    assert set(rows) == {entry.id for entry in added if entry is not None}
    dropped = [rows[entry.id] for entry in added[-2:] if entry is not None]
    assert len(dropped) == 2 and all(d.state == "evicted" for d in dropped)
    assert all(d.reason.startswith("dropped: too large") for d in dropped)
    assert built.report.evicted_entries == 2 and built.report.earlier_entries == 0


def test_a_dropped_tool_call_of_a_plain_window_has_its_row() -> None:
    window = TokenWindow(max_tokens=60, oversize="drop")
    go = window.add("user", "go")
    call, first, second = tool_unit(2, ["huge " * 300, "late"], 0)
    kept = window.add(call)
    assert go is not None and kept is not None
    assert window.add(first) is None and window.add(second) is None
    report = window.build().report
    check_totals(report, window.total_tokens)
    assert [(d.id, d.state) for d in report.decisions] == [(go.id, "kept"), (kept.id, "evicted")]
    assert "too large" in report.decisions[-1].reason and report.evicted_entries == 1
