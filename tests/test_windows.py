"""The windows: eviction by whole units, pinning, oversize policies, resize, hooks."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from ctxwindow import (
    InvalidMessageError,
    MessageTooLargeError,
    MessageWindow,
    OrphanToolResultError,
    PinnedOverBudgetError,
    TokenWindow,
    Unit,
    count_tokens,
)


def call(call_id: str, *more: str) -> dict[str, Any]:
    ids = (call_id, *more)
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": i, "type": "function", "function": {"name": "search", "arguments": "{}"}}
            for i in ids
        ],
    }


def result(call_id: str, content: str = "ok") -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": content}


def contents(window: TokenWindow | MessageWindow) -> list[Any]:
    return [m.get("content") for m in window.messages()]


# -- TokenWindow ---------------------------------------------------------------


def test_token_window_keeps_the_newest_messages_that_fit() -> None:
    window = TokenWindow(max_tokens=40, system="sys")
    for i in range(30):
        window.add("user", f"message {i}")
        assert window.total_tokens <= 40
        assert window.total_tokens == count_tokens(window.messages())
    kept = contents(window)
    assert kept[0] == "sys"
    assert kept[-1] == "message 29"
    numbers = [int(text.split()[1]) for text in kept[1:]]
    assert numbers == list(range(numbers[0], 30))


def test_reserve_output_and_tools_count_against_the_budget() -> None:
    tools = [{"type": "function", "function": {"name": "f", "description": "does f"}}]
    window = TokenWindow(max_tokens=80, reserve_output=30, tools=tools)
    for i in range(20):
        window.add("user", f"hello number {i}")
    assert window.total_tokens == count_tokens(window.messages(), tools=tools)
    assert window.total_tokens + 30 <= 80
    assert window.used == window.total_tokens + 30


def test_add_accepts_role_content_and_dicts_and_copies_them() -> None:
    window = TokenWindow(max_tokens=1000)
    message = {"role": "user", "content": "hi", "name": "ann"}
    window.add(message)
    window.add("assistant", "hello")
    message["content"] = "changed"
    assert window.messages() == [
        {"role": "user", "content": "hi", "name": "ann"},
        {"role": "assistant", "content": "hello"},
    ]


def test_invalid_message_changes_nothing() -> None:
    window = TokenWindow(max_tokens=1000)
    window.add("user", "kept")
    with pytest.raises(InvalidMessageError):
        window.add("wizard", "x")
    with pytest.raises(InvalidMessageError):
        window.extend([{"role": "user", "content": "a"}, {"role": "user", "content": 3}])
    assert contents(window) == ["kept"]


def test_tool_call_and_results_are_evicted_together() -> None:
    evicted: list[Unit] = []
    window = TokenWindow(max_tokens=120, on_evict=evicted.extend)
    window.add(call("c1", "c2"))
    window.add(result("c1", "first result"))
    window.add(result("c2", "second result"))
    while not evicted:
        window.add("user", "filler text to push the window")
    unit = evicted[0]
    assert [m["role"] for m in unit.messages()] == ["assistant", "tool", "tool"]
    assert window.messages()[0]["role"] == "user"


def test_window_never_starts_with_an_orphan() -> None:
    window = TokenWindow(max_tokens=90)
    for i in range(12):
        window.add("user", f"question {i}")
        window.add(call(f"c{i}"))
        window.add(result(f"c{i}", f"answer {i} " * 3))
        first = window.messages()[0]
        assert first["role"] == "user" or "tool_calls" in first
        assert first["role"] != "tool"


def test_tool_result_without_its_call_is_an_error() -> None:
    window = TokenWindow(max_tokens=1000)
    window.add("user", "hi")
    with pytest.raises(OrphanToolResultError, match="'nope'"):
        window.add(result("nope"))
    assert len(window) == 1


def test_message_while_results_are_due_is_an_error() -> None:
    window = TokenWindow(max_tokens=1000)
    window.add(call("c1"))
    with pytest.raises(InvalidMessageError, match="c1"):
        window.add("user", "too early")
    window.add(result("c1"))
    window.add("user", "now fine")
    assert len(window) == 3


def test_system_prompt_is_first_and_never_evicted() -> None:
    window = TokenWindow(max_tokens=30, system="你是一个乐于助人的助手。")
    for i in range(50):
        window.add("user", f"turn {i}")
    assert window.messages()[0] == {"role": "system", "content": "你是一个乐于助人的助手。"}
    window.set_system("Be brief.")
    assert window.system == "Be brief."
    assert window.total_tokens == count_tokens(window.messages())


def test_pinned_messages_stay_in_place() -> None:
    window = TokenWindow(max_tokens=60)
    window.add("user", "first")
    window.add("user", "remember: my name is Ann", pin=True)
    for i in range(30):
        window.add("assistant", f"reply {i}")
    kept = contents(window)
    assert "remember: my name is Ann" in kept
    assert "first" not in kept
    assert kept.index("remember: my name is Ann") == 0
    assert window.total_tokens == count_tokens(window.messages())


def test_system_messages_added_later_are_pinned() -> None:
    window = TokenWindow(max_tokens=50)
    window.add("developer", "rules")
    for i in range(30):
        window.add("user", f"turn {i}")
    assert window.messages()[0] == {"role": "developer", "content": "rules"}


def test_pinned_over_budget_is_an_error_and_changes_nothing() -> None:
    window = TokenWindow(max_tokens=30, system="short")
    window.add("user", "hello")
    with pytest.raises(PinnedOverBudgetError, match="budget of 30"):
        window.add("user", "a pinned message far too long for this budget " * 3, pin=True)
    with pytest.raises(PinnedOverBudgetError):
        TokenWindow(max_tokens=10, system="a system prompt longer than ten tokens for sure")
    with pytest.raises(PinnedOverBudgetError):
        window.set_system("a system prompt longer than thirty tokens " * 6)
    assert contents(window) == ["short", "hello"]


def test_oversize_error_names_sizes_and_changes_nothing() -> None:
    window = TokenWindow(max_tokens=50, system="sys")
    window.add("user", "small")
    with pytest.raises(MessageTooLargeError, match="budget is 50") as info:
        window.add("user", "word " * 200)
    assert "size" in str(info.value)
    assert contents(window) == ["sys", "small"]


def test_oversize_truncate_keeps_head_and_tail_with_a_marker() -> None:
    window = TokenWindow(max_tokens=80, system="sys", oversize="truncate")
    text = "HEAD " + "middle words " * 200 + "日本語のTAIL"
    entry = window.add("user", text)
    assert entry is not None and entry.metadata["truncated"]
    content = window.messages()[-1]["content"]
    assert content.startswith("HEAD") and content.endswith("日本語のTAIL")
    assert "cut by ctxwindow" in content and "chars" in content
    assert window.total_tokens <= 80
    assert window.total_tokens == count_tokens(window.messages())


def test_oversize_truncate_of_a_tool_result() -> None:
    window = TokenWindow(max_tokens=120, oversize="truncate")
    window.add(call("c1"))
    window.add(result("c1", '{"rows": [' + "1, " * 500 + "2]}"))
    assert window.messages()[-1]["role"] == "tool"
    assert "cut by ctxwindow" in window.messages()[-1]["content"]
    assert window.total_tokens <= 120


def test_oversize_drop_discards_and_reports() -> None:
    dropped: list[Unit] = []
    window = TokenWindow(max_tokens=50, oversize="drop", on_evict=dropped.extend)
    window.add("user", "small")
    assert window.add("user", "word " * 200) is None
    assert contents(window) == ["small"]
    assert dropped and dropped[0].messages()[0]["content"].startswith("word")


def test_oversize_drop_of_a_tool_unit_drops_its_later_results_too() -> None:
    window = TokenWindow(max_tokens=60, oversize="drop")
    window.add("user", "go")
    window.add(call("c1", "c2"))
    assert window.add(result("c1", "huge " * 300)) is None
    assert window.add(result("c2", "late")) is None  # its call is gone: dropped, not an orphan
    window.add("user", "next")
    assert contents(window) == ["go", "next"]


def test_resize_shrinks_at_once_and_grows_without_eviction() -> None:
    evicted: list[Unit] = []
    window = TokenWindow(max_tokens=200, system="sys", on_evict=evicted.extend)
    for i in range(10):
        window.add("user", f"message {i}")
    before = len(window)
    window.max_tokens = 40
    assert window.total_tokens <= 40 and len(window) < before
    assert sum(len(u.entries) for u in evicted) == before - len(window)
    window.resize(500)
    assert window.max_tokens == 500
    with pytest.raises(PinnedOverBudgetError, match="budget is unchanged"):
        window.resize(3)
    assert window.max_tokens == 500
    with pytest.raises(ValueError, match="positive integer"):
        window.resize(0)


def test_clear_keeps_the_system_prompt() -> None:
    window = TokenWindow(max_tokens=100, system="sys")
    window.extend([{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}])
    window.clear()
    assert window.messages() == [{"role": "system", "content": "sys"}]
    assert len(window) == 0
    assert window.total_tokens == count_tokens(window.messages())


def test_evictions_are_logged_at_debug(caplog: pytest.LogCaptureFixture) -> None:
    window = TokenWindow(max_tokens=30)
    with caplog.at_level(logging.DEBUG, logger="ctxwindow.policies"):
        for i in range(10):
            window.add("user", f"message {i}")
    assert any("evicted" in record.getMessage() for record in caplog.records)


def test_each_message_is_tokenized_once() -> None:
    window = TokenWindow(max_tokens=60)
    seen: list[str] = []
    original = window.tokenizer.counter.count

    def spy(text: str) -> int:
        seen.append(text)
        return original(text)

    window.tokenizer.counter.count = spy  # type: ignore[method-assign]
    try:
        for i in range(40):
            window.add("user", f"a distinct message number {i}")
            window.messages()
            _ = window.total_tokens
    finally:
        del window.tokenizer.counter.count  # type: ignore[method-assign]
    contents_seen = [text for text in seen if text.startswith("a distinct")]
    assert len(contents_seen) == 40


def test_bad_constructor_arguments_are_named() -> None:
    with pytest.raises(ValueError, match="oversize"):
        TokenWindow(max_tokens=10, oversize="cut")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="reserve_output"):
        TokenWindow(max_tokens=10, reserve_output=-1)
    with pytest.raises(ValueError, match="positive integer"):
        TokenWindow(max_tokens=0)
    with pytest.raises(ValueError, match="truncate"):
        MessageWindow(max_messages=3, oversize="truncate")


# -- MessageWindow ---------------------------------------------------------------


def test_message_window_keeps_exactly_the_last_n() -> None:
    window = MessageWindow(max_messages=5, system="sys")
    for i in range(12):
        window.add("user", str(i))
    assert contents(window) == ["sys", "7", "8", "9", "10", "11"]
    assert len(window) == 5
    assert window.total_tokens == count_tokens(window.messages())


def test_message_window_evicts_tool_units_whole() -> None:
    window = MessageWindow(max_messages=4)
    window.add("user", "q")
    window.add(call("c1", "c2"))
    window.add(result("c1"))
    window.add(result("c2"))
    window.add("user", "next")
    assert [m["role"] for m in window.messages()] == ["assistant", "tool", "tool", "user"]
    window.add("user", "after")
    # the unit of three had to go whole, leaving fewer than four messages
    assert contents(window) == ["next", "after"]
    assert len(window) == 2


def test_message_window_resize_and_oversize_unit() -> None:
    window = MessageWindow(max_messages=3)
    for i in range(3):
        window.add("user", str(i))
    window.max_messages = 1
    assert contents(window) == ["2"]
    window.add(call("a", "b"))
    with pytest.raises(MessageTooLargeError):
        window.add(result("a"))
    assert window.max_messages == 1


def test_message_window_counts_pinned_messages() -> None:
    window = MessageWindow(max_messages=3)
    window.add("user", "pinned", pin=True)
    for i in range(5):
        window.add("user", str(i))
    assert contents(window) == ["pinned", "3", "4"]
    window.add("user", "p2", pin=True)
    window.add("user", "p3", pin=True)
    assert contents(window) == ["pinned", "p2", "p3"]
    with pytest.raises(PinnedOverBudgetError):
        window.add("user", "p4", pin=True)
    assert contents(window) == ["pinned", "p2", "p3"]


def test_every_window_labels_entries_with_a_kind_and_restores_it() -> None:
    window = TokenWindow(200)
    entry = window.add("user", "see the attached manual", kind="document")
    assert entry is not None and entry.kind == "document"
    copy = TokenWindow(200)
    copy.restore(window.entries())
    assert [e.kind for e in copy.entries()] == ["document"]
    assert copy.entries()[0].id == entry.id
