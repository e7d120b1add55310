"""Property tests: the invariants of DESIGN.md hold for any sequence of operations.

Each example is a random program of adds (chat messages, tool units, pinned
messages), resizes and clears, run on a ``TokenWindow`` and a ``MessageWindow``.
After every step the window is checked against a simple model of what was
added and what was reported evicted.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from ctxwindow import (
    BudgetError,
    MessageTooLargeError,
    MessageWindow,
    PinnedOverBudgetError,
    TokenWindow,
    Unit,
    count_tokens,
)
from ctxwindow.messages import Entry
from ctxwindow.policies import Window
from ctxwindow.tokens import chat_tokenizer
from tests.support.windows import check_one_storage, texts, tool_unit

ops = st.one_of(
    st.tuples(st.just("msg"), st.sampled_from(["user", "assistant"]), texts),
    st.tuples(st.just("tool"), st.integers(1, 3), st.lists(texts, min_size=3, max_size=3)),
    st.tuples(st.just("pin"), texts),
    st.tuples(st.just("resize"), st.integers(1, 400)),
    st.tuples(st.just("clear")),
)


@dataclass
class Model:
    """What the test knows: every unit added, and every unit reported evicted."""

    added: list[list[dict[str, Any]]] = field(default_factory=list)
    order: list[dict[str, Any]] = field(default_factory=list)  # every message, in add order
    pinned: list[list[dict[str, Any]]] = field(default_factory=list)
    evicted: list[list[dict[str, Any]]] = field(default_factory=list)


def make_token_window(budget: int, system: str | None, model: Model) -> Window:
    def on_evict(units: list[Unit]) -> None:
        model.evicted.extend(u.messages() for u in units)

    return TokenWindow(
        max_tokens=max(budget, 40), system=system, reserve_output=5, on_evict=on_evict
    )


def make_message_window(budget: int, system: str | None, model: Model) -> Window:
    def on_evict(units: list[Unit]) -> None:
        model.evicted.extend(u.messages() for u in units)

    return MessageWindow(max_messages=max(budget // 20, 1), system=system, on_evict=on_evict)


def snapshot(window: Window) -> tuple[list[dict[str, Any]], int, int]:
    return window.messages(), window.total_tokens, window.budget


def apply(window: Window, op: tuple[Any, ...], step: int, model: Model) -> None:
    """Run one operation; a refused operation must leave the window unchanged."""
    before = snapshot(window)
    try:
        run_op(window, op, step, model)
    except (MessageTooLargeError, PinnedOverBudgetError):
        if op[0] == "tool" and window.messages() != before[0]:
            # A tool unit was refused part-way: its call is open and awaits
            # results. Clear, as an application would, and reset the model.
            reset(window, model)
            return
        assert snapshot(window) == before, "a refused operation changed the window"


def run_op(window: Window, op: tuple[Any, ...], step: int, model: Model) -> None:
    # a name makes every message distinct, so the model can tell them apart
    if op[0] == "resize":
        window.resize(op[1] // 20 + 1 if isinstance(window, MessageWindow) else op[1])
    elif op[0] == "clear":
        reset(window, model)
    elif op[0] == "tool":
        unit = tool_unit(op[1], op[2], step)
        for message in unit:
            window.add(message)
        model.added.append(unit)
        model.order.extend(unit)
    else:
        role = "user" if op[0] == "pin" else op[1]
        message = {"role": role, "content": op[-1], "name": f"s{step}"}
        window.add(message, pin=op[0] == "pin")
        (model.pinned if op[0] == "pin" else model.added).append([message])
        model.order.append(message)


def reset(window: Window, model: Model) -> None:
    window.clear()
    for kept in (model.added, model.order, model.pinned, model.evicted):
        kept.clear()


def check_invariants(window: Window, model: Model) -> None:
    check_one_storage(window)
    messages = window.messages()
    body = messages[1:] if messages and messages[0]["role"] == "system" else messages

    # 1. the budget holds; total_tokens is the billed count of messages()
    assert window.used <= window.budget
    assert window.total_tokens == count_tokens(messages)
    if isinstance(window, TokenWindow):
        assert window.total_tokens + window.reserve_output <= window.max_tokens

    # 2. pinned entries are all there
    for unit in model.pinned:
        assert unit[0] in body

    # 3 and 4. every kept message is whole, and tool units are whole
    kept_units = [u for u in model.added if u[0] in body]
    for unit in kept_units:
        start = body.index(unit[0])
        assert body[start : start + len(unit)] == unit
    assert sum(len(u) for u in kept_units) + sum(len(u) for u in model.pinned) == len(body)
    assert len(window) == len(body)
    if body:
        assert body[0]["role"] != "tool"

    # 5. order is chronological and the kept (unpinned) units are the newest ones
    positions = [model.order.index(m) for m in body]
    assert positions == sorted(positions)
    if kept_units:
        assert model.added[-len(kept_units) :] == kept_units

    # 7. nothing is lost silently: every added unit is kept or was reported evicted
    gone = model.added[: len(model.added) - len(kept_units)]
    assert all(unit in model.evicted for unit in gone)


def run(make: Any, budget: int, system: str | None, program: list[tuple[Any, ...]]) -> Window:
    model = Model()
    try:
        window = make(budget, system, model)
    except PinnedOverBudgetError:
        # refused at construction: only right when the system prompt cannot fit
        assert system is not None
        assert count_tokens([{"role": "system", "content": system}]) + 5 > max(budget, 40)
        return TokenWindow(max_tokens=max(budget, 40))
    for step, op in enumerate(program):
        apply(window, op, step, model)
        check_invariants(window, model)
    return window


@given(st.integers(1, 400), st.one_of(st.none(), texts), st.lists(ops, max_size=40))
def test_token_window_invariants(budget: int, system: str | None, program: list[Any]) -> None:
    run(make_token_window, budget, system, program)


@given(st.integers(1, 400), st.one_of(st.none(), texts), st.lists(ops, max_size=40))
def test_message_window_invariants(budget: int, system: str | None, program: list[Any]) -> None:
    run(make_message_window, budget, system, program)


@given(st.integers(40, 400), texts, st.lists(ops, max_size=30))
def test_building_twice_gives_the_same_context(
    budget: int, system: str, program: list[Any]
) -> None:
    first = run(make_token_window, budget, system, program)
    second = run(make_token_window, budget, system, program)
    assert first.messages() == second.messages()
    assert first.messages() == first.messages()
    assert first.total_tokens == second.total_tokens


def replay(make: Any, budget: int, program: list[tuple[str, str]]) -> Window:
    window: Window = make(budget, "Be brief.", Model())
    window.oversize = "drop"
    for role, text in program:
        window.add(role, text)
    return window


@given(
    st.lists(st.tuples(st.sampled_from(["user", "assistant"]), texts), max_size=40),
    st.integers(40, 400),
    texts,
)
def test_a_preview_is_what_adding_would_give_and_changes_nothing(
    program: list[tuple[str, str]], budget: int, question: str
) -> None:
    for make in (make_token_window, make_message_window):
        window = replay(make, budget, program)
        before = (window.messages(), window.total_tokens, len(window), window.used)
        try:
            preview = window.preview("user", question)
        except MessageTooLargeError:
            continue
        assert (window.messages(), window.total_tokens, len(window), window.used) == before
        added = replay(make, budget, program)
        added.add("user", question)
        assert preview.messages == added.messages()
        assert preview.total_tokens == added.total_tokens == count_tokens(preview.messages)


@given(
    st.sampled_from(["token", "priority"]),
    st.lists(st.tuples(st.integers(1, 4), texts), min_size=1, max_size=40),
    st.data(),
)
def test_restored_seqs_place_added_units_and_answer_holds(
    kind: str, program: list[tuple[int, str]], data: st.DataObject
) -> None:
    """Entries restored with their store seqs keep them; units ``added`` to a build (not
    kept) go where their seqs put them, and ``holds`` and ``holding`` answer by seq."""
    from ctxwindow import PriorityWindow

    window: Window = (
        TokenWindow(300, system="Be brief.")
        if kind == "token"
        else PriorityWindow(max_tokens=300, model="gpt-4o", system="Be brief.")
    )
    seq, stored = 0, []
    for gap, text in program:
        seq += gap
        role = "user" if len(stored) % 2 == 0 else "assistant"
        entry = window.add({"role": role, "content": text or "…"}, seq=seq, entry_id=f"e{seq}")
        assert entry is not None and entry.seq == seq and entry.id == f"e{seq}"
        stored.append((seq, entry.message))
    kept = {e.seq for e in window.entries() if e.kind != "summary"}
    assert all(window.holds(s) is (s in kept) for s, _ in stored)
    asked = [s for s, _ in stored] + [0, seq + 1]  # and seqs it never saw
    assert window.holding(asked) == kept
    some = data.draw(st.lists(st.sampled_from(asked)))  # any few: the ends of a range matter
    assert window.holding(some) == kept.intersection(some)
    assert [e.seq for e in window.newest_first()] == [e.seq for e in reversed(window.entries())]
    gone = [(s, m) for s, m in stored if s not in kept]
    added = data.draw(st.lists(st.sampled_from(gone), unique_by=lambda g: g[0])) if gone else []
    units = [
        Unit([Entry({"role": m["role"], "content": f"again: {m['content']}"}, 3, s)], 3)
        for s, m in added
    ]
    built = window.build(added=units)
    plain = window.build()
    assert built.total_tokens == plain.total_tokens + 3 * len(units)
    # Take the added ones out again: what is left is the plain context, in its order.
    again = {id(u.entries[0].message) for u in units}
    assert [m for m in built.messages if id(m) not in again] == plain.messages
    # Each added unit sits after every kept message of a smaller seq, before every larger.
    position = {id(m): i for i, m in enumerate(built.messages)}
    for unit in units:
        at, s = position[id(unit.entries[0].message)], unit.seq
        for e in window.entries():
            if e.kind != "summary" and id(e.message) in position:
                assert (position[id(e.message)] < at) is (e.seq < s)
    try:
        window.add({"role": "user", "content": "late"}, seq=seq)
    except ValueError as exc:
        assert f"seq {seq} is not after" in str(exc)
    else:
        raise AssertionError("a seq at or below the last one must be refused")


@given(
    st.sampled_from(["token", "priority"]),
    st.lists(texts, min_size=1, max_size=30),
    st.integers(1, 4),
    st.integers(60, 400),
    st.data(),
)
def test_omitted_units_are_left_out_and_replaced_in_place(
    kind: str, program: list[str], newest: int, room: int, data: st.DataObject
) -> None:
    """A build's ``omit`` (the newest messages sent compressed instead) leaves those units
    out whatever the room, their ``added`` forms in their places, the rest as a build of
    the room less them; the window is not changed."""
    from ctxwindow import PriorityWindow

    window: Window = (
        TokenWindow(400, system="Be brief.")
        if kind == "token"
        else PriorityWindow(max_tokens=400, model="gpt-4o", system="Be brief.")
    )
    for i, text in enumerate(program):
        window.add({"role": "user" if i % 2 == 0 else "assistant", "content": text or "…"})
    units = [u for u in window.units() if not u.pinned][-newest:]
    omitted = data.draw(st.lists(st.sampled_from(units), unique_by=id, max_size=newest))
    omit = {e.id for u in omitted for e in u.entries}
    tokens = chat_tokenizer("gpt-4o").message_tokens
    forms = [{**u.entries[0].message, "content": "short"} for u in omitted]
    short = [
        Unit([Entry(m, tokens(m), u.seq)], tokens(m)) for m, u in zip(forms, omitted, strict=True)
    ]
    before = (window.messages(), window.total_tokens, window.own_step_target())
    try:
        built = window.build(max_tokens=room, omit=omit, added=short, sent=False)
    except BudgetError:
        return
    assert (window.messages(), window.total_tokens, window.own_step_target()) == before
    sent = [m for m in built.messages if m["content"] != "short"]
    assert not any(id(m) in {id(e.message) for u in omitted for e in u.entries} for m in sent)
    assert built.total_tokens == count_tokens(built.messages)
    assert built.total_tokens <= room + sum(u.size for u in short)
    position = {id(m): i for i, m in enumerate(built.messages)}
    for unit in short:
        at = position[id(unit.entries[0].message)]
        for e in window.entries():
            if e.kind != "summary" and id(e.message) in position:
                assert (position[id(e.message)] < at) is (e.seq < unit.seq)
    window.build(max_tokens=room, omit=omit, added=short)  # sent: still read-only
    assert window.messages() == before[0]
