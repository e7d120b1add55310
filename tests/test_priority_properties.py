"""Property tests: PriorityWindow keeps every invariant over random kinds and priorities."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from ctxwindow import MessageTooLargeError, PinnedOverBudgetError, Unit, count_tokens
from ctxwindow.policies import Keeping, Priority, PriorityWindow

from .support.windows import check_one_storage, hybrid_window, long_texts, texts, tool_unit

entries = st.one_of(
    st.tuples(
        st.just("msg"),
        st.sampled_from(["user", "assistant"]),
        st.one_of(texts, st.sampled_from(["thanks", "好的", "Remember: code 42", "记住这个"])),
        st.one_of(st.none(), st.sampled_from(list(Priority)[:3])),
        st.one_of(st.none(), st.sampled_from(["chat", "document", "recalled"])),
        st.sampled_from([1.0, 1.0, 5.0]),
    ),
    st.tuples(st.just("tool"), st.integers(1, 3), st.lists(texts, min_size=3, max_size=3)),
    st.tuples(st.just("pin"), texts),
    st.tuples(st.just("narrow"), st.integers(20, 400)),
    st.tuples(st.just("resize"), st.integers(40, 600)),
)


def run(program: list[tuple[Any, ...]], budget: int, caps: dict[str, int], reserve: int) -> Any:
    evicted: list[list[dict[str, Any]]] = []
    added: list[list[dict[str, Any]]] = []
    pinned: list[dict[str, Any]] = []

    def on_evict(units: list[Unit]) -> None:
        evicted.extend(u.messages() for u in units)

    window = PriorityWindow(
        budget, system="sys", on_evict=on_evict, keeping=Keeping(caps=caps, reserve_recent=reserve)
    )
    for step, op in enumerate(program):
        before = window.messages()
        try:
            if op[0] == "msg":
                message = {"role": op[1], "content": op[2], "name": f"s{step}"}
                window.add(message, priority=op[3], kind=op[4], metadata={"importance": op[5]})
                added.append([message])
            elif op[0] == "tool":
                unit = tool_unit(op[1], op[2], step)
                for message in unit:
                    window.add(message)
                added.append(unit)
            elif op[0] == "pin":
                message = {"role": "user", "content": op[1], "name": f"s{step}"}
                window.add(message, pin=True)
                pinned.append(message)
            elif op[0] == "narrow":
                narrowed = window.build(max_tokens=op[1])
                assert narrowed.total_tokens <= op[1]
                assert narrowed.total_tokens == count_tokens(narrowed.messages)
                assert window.messages() == before  # building never changes the window
                assert narrowed.messages == without(before, next_victims(window, op[1]))
            else:
                window.resize(op[1])
        except (MessageTooLargeError, PinnedOverBudgetError):
            if op[0] == "tool" and window.messages() != before:
                return window  # a refused tool result leaves its call open: stop here
            assert window.messages() == before, "a refused operation changed the window"
        check(window, added, pinned, evicted)
    return window


def next_victims(window: PriorityWindow, max_tokens: int) -> list[dict[str, Any]]:
    """The messages a narrower budget leaves out: the queue's units in eviction order (every
    live heap key sorted, then the recent tail, the latest user turn, the newest unit last;
    never a call waiting for results) until the rest fits. Built eagerly here, to check
    the window's lazy walk of its heaps."""
    queue, units = window._queue, window._kept.units
    latest = queue.latest_user

    def live(key: tuple[int, float, int, int]) -> bool:
        unit = units.get(key[2])
        return unit is not None and unit.version == key[3] and unit is not latest

    keys = sorted(key for heap in queue._heaps.values() for key in heap if live(key))
    order = [units[key[2]] for key in keys] + [u for u in queue._recent if u is not latest]
    if latest is not None and latest.seq in units:
        order.append(latest)
    order = [unit for unit in order if not unit.pending]  # a call waiting for results stays
    if order:  # the newest unit goes last, as the one ``add`` keeps
        newest = max(order, key=lambda unit: unit.seq)
        order = [unit for unit in order if unit is not newest] + [newest]
    used, left = window._kept.used, []
    for unit in order:
        if used <= max_tokens:
            break
        used -= unit.size
        left += unit.messages()
    return left


def without(messages: list[dict[str, Any]], left: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [m for m in messages if m not in left]


def check(
    window: PriorityWindow,
    added: list[list[dict[str, Any]]],
    pinned: list[dict[str, Any]],
    evicted: list[list[dict[str, Any]]],
) -> None:
    check_one_storage(window)
    messages = window.messages()
    body = messages[1:]
    assert window.total_tokens + window.reserve_output <= window.max_tokens
    assert window.total_tokens == count_tokens(messages)
    assert messages[0] == {"role": "system", "content": "sys"}
    for message in pinned:
        assert message in body
    order = [m for unit in added for m in unit] + pinned
    kept = [u for u in added if u[0] in body]
    for unit in kept:  # whole units, whole messages
        start = body.index(unit[0])
        assert body[start : start + len(unit)] == unit
    assert all(m in order for m in body)
    seqs = [int(str(m["name"])[1:]) if "name" in m else _call_step(m) for m in body]
    assert seqs == sorted(seqs)  # chronological
    if body:
        assert body[0]["role"] != "tool"
    for unit in added:  # nothing lost silently
        assert unit in kept or unit in evicted
    report = window.report()
    cap_checked = {c: t for c, t in report.tokens_by_category.items() if c in window.caps}
    assert all(t <= window.caps[c] for c, t in cap_checked.items())


def _call_step(message: dict[str, Any]) -> int:
    call_id = message.get("tool_call_id") or message["tool_calls"][0]["id"]
    return int(call_id.split("_")[1])


@given(
    st.lists(entries, max_size=40),
    st.integers(60, 500),
    st.sampled_from([{}, {"document": 150}, {"recalled": 60, "chat": 200}]),
    st.sampled_from([0, 50, 200]),
)
def test_priority_window_invariants(
    program: list[Any], budget: int, caps: dict[str, int], reserve: int
) -> None:
    run(program, budget, caps, reserve)


@given(st.lists(entries, max_size=30), st.integers(60, 500))
def test_priority_window_is_deterministic(program: list[Any], budget: int) -> None:
    first = run(program, budget, {}, 50)
    second = run(program, budget, {}, 50)
    assert first.messages() == second.messages()

    def decisions(window: PriorityWindow) -> list[tuple[int, str, int, str]]:
        return [(d.seq, d.state, d.tokens, d.reason) for d in window.build().report.decisions]

    assert decisions(first) == decisions(second)


@given(
    st.lists(
        st.one_of(
            st.tuples(st.just("msg"), st.sampled_from(["user", "assistant"]), long_texts),
            st.tuples(
                st.just("tool"), st.integers(1, 2), st.lists(long_texts, min_size=3, max_size=3)
            ),
        ),
        max_size=25,
    ),
    st.integers(120, 600),
)
def test_hybrid_window_keeps_the_invariants(program: list[Any], budget: int) -> None:
    """With compression and a rolling summary: budget, exact count, whole tool units, order."""
    window = hybrid_window(budget)
    names: list[str] = []
    for step, op in enumerate(program):
        if op[0] == "msg":
            window.add({"role": op[1], "content": op[2], "name": f"s{step}"})
            names.append(f"s{step}")
        else:
            for message in tool_unit(op[1], op[2], step):
                window.add(message)
        check_one_storage(window)  # the rolling summary too: first of units(), first after sys
        messages = window.messages()
        assert window.total_tokens <= budget
        assert window.total_tokens == count_tokens(messages)
        assert messages[0] == {"role": "system", "content": "sys"}
        body = messages[1:]
        summaries = [d for d in window.report().decisions if d.category == "summary"]
        if summaries:  # the rolling summary sits right after the system prompt
            assert body[0]["role"] == "user" and "name" not in body[0]
            body = body[1:]
        steps = [int(str(m["name"])[1:]) if "name" in m else _call_step(m) for m in body]
        assert steps == sorted(steps)
        for index, message in enumerate(body):
            if message["role"] == "tool":
                previous = body[index - 1]
                assert previous["role"] == "tool" or previous.get("tool_calls")
            if message.get("tool_calls"):
                ids = {c["id"] for c in message["tool_calls"]}
                results = {m["tool_call_id"] for m in body[index + 1 : index + 1 + len(ids)]}
                assert results == ids
        check_preview(window, budget)


def check_preview(window: PriorityWindow, budget: int) -> None:
    """A preview fits, counts exactly, ends with the message, and changes nothing."""
    before = (window.messages(), window.total_tokens, window.report().evicted_entries)
    preview = window.preview("user", "what is the code? 代码是什么？")
    assert preview.total_tokens <= budget
    assert preview.total_tokens == count_tokens(preview.messages)
    assert preview.messages[-1] == {"role": "user", "content": "what is the code? 代码是什么？"}
    assert preview.messages[:-1] == [m for m in before[0] if m in preview.messages[:-1]]
    assert (window.messages(), window.total_tokens, window.report().evicted_entries) == before


@given(
    st.lists(
        st.tuples(
            st.sampled_from(["user", "assistant"]),
            st.sampled_from(["ok", "see config.yaml", "订单 A-1042 已发货。", "日本語の文。 🎉"]),
            st.one_of(st.none(), st.sampled_from(list(Priority)[:3])),
            st.sampled_from([1.0, 1.0, 0.5, 5.0]),
        ),
        min_size=1,
        max_size=80,
    ),
    st.integers(0, 60),
    st.data(),
)
def test_a_narrower_budget_leaves_out_units_in_eviction_order(
    program: list[Any], reserve: int, data: st.DataObject
) -> None:
    """However many units wait in the heaps, a narrowed build leaves out exactly the units
    that eviction would take next, in its order (the window read lazily, not sorted)."""
    window = PriorityWindow(10_000, system="sys", keeping=Keeping(reserve_recent=reserve))
    for step, (role, text, priority, importance) in enumerate(program):
        message = {"role": role, "content": text, "name": f"s{step}"}
        window.add(message, priority=priority, metadata={"importance": importance})
    before = window.messages()
    floor = window._kept.pinned_used
    budget = data.draw(st.integers(floor, max(floor, window.report().used)))
    narrowed = window.build(max_tokens=budget)
    assert narrowed.messages == without(before, next_victims(window, narrowed.report.budget))
    assert window.messages() == before
