"""PriorityWindow: rules, eviction order, caps, compression first, summary, explanation."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import pytest

from ctxwindow import PinnedOverBudgetError, count_tokens
from ctxwindow.messages import Entry
from ctxwindow.policies import Folding, Keeping, Match, Priority, PriorityWindow
from ctxwindow.policies.rules import DEFAULT_RULES, assign, infer_kind


def entry(role: str, content: str, **fields: Any) -> Entry:
    e = Entry({"role": role, "content": content}, 5, 0)
    for key, value in fields.items():
        setattr(e, key, value)
    return e


@pytest.mark.parametrize(
    ("role", "content", "fields", "expected"),
    [
        ("system", "rules", {}, Priority.CRITICAL),
        ("developer", "rules", {}, Priority.CRITICAL),
        ("user", "anything", {"kind": "summary"}, Priority.CRITICAL),
        ("user", "plain", {"metadata": {"important": True}}, Priority.HIGH),
        ("user", "Please remember my seat is 14C", {}, Priority.HIGH),
        ("user", "This is IMPORTANT: the code is 7", {}, Priority.HIGH),
        ("user", "请记住我的会员号是 8848", {}, Priority.HIGH),
        ("user", "重点：周五之前交付", {}, Priority.HIGH),
        ("user", "帮我总结一下", {}, Priority.HIGH),
        ("user", "これは重要です", {}, Priority.HIGH),
        ("user", "old material", {"kind": "recalled"}, Priority.LOW),
        ("user", "thanks!", {}, Priority.LOW),
        ("assistant", "好的", {}, Priority.LOW),
        ("user", "ありがとうございます。", {}, Priority.LOW),
        ("user", "ok 👍", {}, Priority.LOW),
        ("user", "thanks, and what about the refund?", {}, Priority.MEDIUM),
        ("assistant", "The refund takes 5 days.", {}, Priority.MEDIUM),
    ],
)
def test_default_rules(role: str, content: str, fields: dict[str, Any], expected: Priority) -> None:
    assert assign(entry(role, content, **fields), DEFAULT_RULES) == expected


def test_kind_inference() -> None:
    assert infer_kind({"role": "user", "content": "x"}, 5000, None, 1000) == "document"
    assert infer_kind({"role": "user", "content": "x"}, 50, None, 1000) == "chat"
    assert (
        infer_kind({"role": "tool", "content": "x", "tool_call_id": "c"}, 5, None, 1000) == "tool"
    )
    assert infer_kind({"role": "user", "content": "x"}, 5, "recalled", 1000) == "recalled"
    with pytest.raises(ValueError, match="unknown kind 'note'"):
        infer_kind({"role": "user", "content": "x"}, 5, "note", 1000)


def fill(window: PriorityWindow, n: int, start: int = 0) -> None:
    for i in range(start, start + n):
        window.add("user", f"ordinary question number {i} about shipping")
        window.add("assistant", f"ordinary answer number {i} about shipping")


def contents(window: PriorityWindow) -> list[str]:
    return [str(m["content"]) for m in window.messages()]


def test_high_priority_outlives_older_and_newer_medium_turns() -> None:
    window = PriorityWindow(260, system="sys", keeping=Keeping(reserve_recent=0))
    fill(window, 2)
    window.add("user", "Remember: my passport number is X1234567.")
    fill(window, 20, start=2)
    kept = contents(window)
    assert "Remember: my passport number is X1234567." in kept
    assert "ordinary question number 0 about shipping" not in kept
    assert window.total_tokens <= 260
    assert window.total_tokens == count_tokens(window.messages())


def test_low_goes_before_medium_and_explicit_priority_wins() -> None:
    window = PriorityWindow(160, keeping=Keeping(reserve_recent=0))
    window.add("user", "background you may drop", priority=Priority.LOW)
    window.add("user", "a medium turn that should stay")
    window.add("assistant", "pinned by priority", priority=Priority.HIGH)
    fill(window, 3)
    window.add("user", "a turn " * 40)
    kept = contents(window)
    assert "background you may drop" not in kept
    assert "pinned by priority" in kept


def test_within_a_priority_the_biggest_per_importance_goes_first() -> None:
    window = PriorityWindow(320, keeping=Keeping(reserve_recent=0))
    window.add("user", "small old turn")
    window.add("user", "big turn " * 60)
    window.add("user", "big but important " * 60, metadata={"importance": 10})
    window.add("user", "the newest question, which must stay " * 3)
    kept = contents(window)
    assert "small old turn" in kept
    assert not any(text.startswith("big turn") for text in kept)
    assert any(text.startswith("big but important") for text in kept)


def test_recent_reserve_is_evicted_last() -> None:
    window = PriorityWindow(300, keeping=Keeping(reserve_recent=120))
    window.add("user", "an old high one to keep", priority=Priority.HIGH)
    fill(window, 12)
    kept = contents(window)
    assert kept[-1] == "ordinary answer number 11 about shipping"
    assert "an old high one to keep" in kept


def test_category_caps_hold_and_evict_within_the_category() -> None:
    window = PriorityWindow(5000, keeping=Keeping(caps={"document": 500}, document_tokens=200))
    doc1 = "Manual part one. " * 80
    doc2 = "Manual part two. " * 80
    window.add("user", doc1)
    fill(window, 3)
    window.add("user", doc2)
    report = window.report()
    assert report.tokens_by_category["document"] <= 500
    kept = contents(window)
    assert doc2 in kept and doc1 not in kept
    assert "ordinary question number 0 about shipping" in kept  # chat untouched
    evicted = [d for d in report.decisions if d.state == "evicted"]
    assert evicted and "document over its cap of 500" in evicted[0].reason


def test_system_cap_is_checked() -> None:
    with pytest.raises(PinnedOverBudgetError, match="cap is 5"):
        PriorityWindow(
            1000,
            system="a system prompt longer than five tokens",
            keeping=Keeping(caps={"system": 5}),
        )


def halve(tag: str = "halve") -> Any:
    calls: list[int] = []

    def compressor(entries: Sequence[Entry], target: int) -> list[Entry]:
        calls.append(target)
        out = []
        for e in entries:
            text = str(e.message["content"])
            short = text[: len(text) // 4]
            message = dict(e.message, content=short)
            new = Entry(message, 0, e.seq, id=e.id, priority=e.priority, kind=e.kind)
            new.metadata = {**e.metadata, "compressed": {"by": tag}}
            from ctxwindow.tokens import chat_tokenizer

            new.tokens = chat_tokenizer("gpt-4o").message_tokens(message)
            out.append(new)
        return out

    compressor.calls = calls  # type: ignore[attr-defined]
    return compressor


def test_compression_before_eviction_replaces_in_the_window() -> None:
    compressor = halve()
    window = PriorityWindow(
        600,
        keeping=Keeping(reserve_recent=0),
        folding=Folding(compressor=compressor, compress_threshold=300),
    )
    long_text = "A long pasted log line with details. " * 60
    original = {"role": "user", "content": long_text}
    window.add(original)
    fill(window, 12)
    kept = contents(window)
    assert compressor.calls, "the compressor was not tried"
    assert long_text not in kept
    assert long_text[: len(long_text) // 4] in kept  # compressed, still in the window
    assert original["content"] == long_text  # the caller's message is untouched
    decisions = [d for d in window.report().decisions if d.state == "compressed"]
    assert decisions and decisions[0].compressor == "halve"
    assert decisions[0].stored_tokens > decisions[0].tokens
    assert window.total_tokens == count_tokens(window.messages())


def test_rolling_summary_folds_evictions_and_stays_capped() -> None:
    seen: list[list[str]] = []

    def summarizer(old: Entry | None, evicted: Sequence[Entry], budget: int) -> Entry:
        seen.append([str(e.message["content"]) for e in evicted])
        count = (old.metadata["count"] if old else 0) + len(evicted)
        text = f"Summary: {count} earlier messages about shipping."
        from ctxwindow.tokens import chat_tokenizer

        message = {"role": "user", "content": text}
        e = Entry(message, chat_tokenizer("gpt-4o").message_tokens(message), -1)
        e.metadata = {"count": count}
        return e

    window = PriorityWindow(
        200, system="sys", folding=Folding(summarizer=summarizer, summary_tokens=40)
    )
    fill(window, 15)
    messages = window.messages()
    assert messages[0]["content"] == "sys"
    assert str(messages[1]["content"]).startswith("Summary: ")
    evicted_total = sum(len(batch) for batch in seen)
    assert messages[1]["content"] == f"Summary: {evicted_total} earlier messages about shipping."
    assert window.total_tokens <= 200
    assert window.total_tokens == count_tokens(messages)
    assert window.report().tokens_by_category["summary"] <= 40


def test_repeated_small_talk_keeps_only_the_latest() -> None:
    window = PriorityWindow(1000)
    window.add("user", "hi")
    window.add("assistant", "Hello! How can I help?")
    window.add("user", "thanks")
    window.add("user", "ok")
    kept = contents(window)
    assert kept == ["Hello! How can I help?", "ok"]
    kept_window = PriorityWindow(1000, keeping=Keeping(dedupe_small_talk=False))
    kept_window.extend([{"role": "user", "content": "hi"}, {"role": "user", "content": "ok"}])
    assert contents(kept_window) == ["hi", "ok"]


def test_budget_per_call_narrows_without_changing_the_window() -> None:
    asked: list[Any] = []

    def hook(request: Any) -> int:
        asked.append(request)
        return 120 if request == "quick" else 10_000

    window = PriorityWindow(600, system="sys", budget_hook=hook)
    window.add("user", "Remember: the wifi password is hunter2.")
    fill(window, 10)
    full = window.build("creative")
    quick = window.build("quick")
    assert asked == ["creative", "quick"]
    assert full.total_tokens == window.total_tokens  # capped at the window's own budget
    assert quick.total_tokens <= 120 < full.total_tokens
    assert quick.total_tokens == count_tokens(quick.messages)
    assert quick.messages[0]["content"] == "sys"
    assert window.build().messages == full.messages  # nothing changed
    assert window.build(max_tokens=130).total_tokens <= 130
    with pytest.raises(PinnedOverBudgetError):
        window.build(max_tokens=2)


def test_report_explains_every_entry_and_serialises() -> None:
    window = PriorityWindow(150, system="系统提示", keeping=Keeping(reserve_recent=0))
    window.add("user", "请记住：我的订单号是 A-1042。")
    fill(window, 6)
    context = window.build()
    data = context.report.to_dict()
    json.dumps(data, ensure_ascii=False)
    actions = {d["state"] for d in data["decisions"]}
    assert {"pinned", "kept", "evicted"} <= actions
    assert data["budget"] == 150 and data["headroom"] == 150 - data["used"]
    assert sum(data["tokens_by_priority"].values()) == window.total_tokens - 3  # minus priming
    text = str(context.report)
    assert "budget 150 tokens" in text and "请记住" in text and "evicted" in text
    ids = [d["id"] for d in data["decisions"] if d["state"] in ("kept", "pinned")]
    assert len(ids) == len(window.messages())


def test_custom_rules_first_match_wins() -> None:
    rules = [Match(Priority.HIGH, pattern=r"ORDER-\d+"), *DEFAULT_RULES]
    window = PriorityWindow(150, keeping=Keeping(rules=rules, reserve_recent=0))
    window.add("assistant", "Your ORDER-77 shipped.")
    fill(window, 8)
    assert "Your ORDER-77 shipped." in contents(window)
    with pytest.raises(TypeError, match="callable"):
        PriorityWindow(100, keeping=Keeping(rules=["not a rule"]))  # type: ignore[list-item]


def test_tool_units_stay_whole() -> None:
    window = PriorityWindow(220, keeping=Keeping(reserve_recent=0))
    for i in range(6):
        window.add("user", f"look up item {i}")
        window.add(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": f"c{i}",
                        "type": "function",
                        "function": {"name": "get", "arguments": "{}"},
                    }
                ],
            }
        )
        window.add({"role": "tool", "tool_call_id": f"c{i}", "content": f'{{"item": {i}}}'})
    messages = window.messages()
    for index, message in enumerate(messages):
        if message["role"] == "tool":
            assert messages[index - 1].get("tool_calls")
        if message.get("tool_calls"):
            assert messages[index + 1]["role"] == "tool"


def test_report_totals_match_the_decisions_without_reading_them() -> None:
    window = PriorityWindow(150, keeping=Keeping(reserve_recent=0))
    fill(window, 12)
    report = window.build().report
    evicted = [d for d in report.decisions if d.state == "evicted"]
    assert report.evicted_entries == len(evicted) > 0
    assert report.evicted_tokens == sum(d.stored_tokens for d in evicted)
    narrow = window.build(max_tokens=60).report
    assert narrow.evicted_entries > report.evicted_entries
    assert narrow.evicted_entries == sum(1 for d in narrow.decisions if d.state == "evicted")


def test_a_report_read_later_tells_what_had_happened_when_it_was_built() -> None:
    """Decisions are made when first read, from the log as it was at the build."""
    window = PriorityWindow(max_tokens=120, model="gpt-4o", keeping=Keeping(reserve_recent=0))
    for i in range(12):
        window.add("user", f"order A-{i} 包裹 {i} shipped today from the depot")
    early = window.build().report
    evicted_then = early.evicted_entries
    for i in range(12, 30):
        window.add("user", f"order A-{i} 包裹 {i} shipped today from the depot")
    late = window.build().report
    assert late.evicted_entries > evicted_then > 0
    gone = [d for d in early.decisions if d.state == "evicted"]
    assert len(gone) == evicted_then  # not the evictions that came after the build
    assert len([d for d in late.decisions if d.state == "evicted"]) == late.evicted_entries
