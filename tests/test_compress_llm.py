"""LLM summaries, background summaries, the OpenAI-compatible client and rolling summaries."""

from __future__ import annotations

import asyncio
import dataclasses
import re
import sys
import time
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxwindow.compress import (
    CompressionError,
    Extractive,
    LLMSummarizer,
    RollingSummary,
    Truncate,
    openai_completion,
    total_tokens,
)
from ctxwindow.compress.prompt import HEADINGS
from ctxwindow.extras import install_hint
from ctxwindow.messages import Entry, Message

from .support.compress import (
    INCIDENT,
    TOK,
    FakeModel,
    call,
    make,
    snapshot,
    summary_of,
    texts,
    tool,
    user,
)
from .support.fake_openai import fake_openai


def long_chat() -> list[Entry]:
    return [
        user(INCIDENT, 0),
        make({"role": "assistant", "content": "Noted. " + INCIDENT}, 1),
        user("Also ticket T-881 is blocked. " + INCIDENT, 2),
    ]


def by(entry: Entry) -> str:
    return str(entry.metadata["compressed"]["by"])


# -- summarize (awaited) ------------------------------------------------------------


def test_several_entries_become_one_summary_entry() -> None:
    model = FakeModel()
    entries = long_chat()
    before = snapshot(entries)
    [out] = asyncio.run(LLMSummarizer(model, TOK).summarize(entries, 80))
    assert snapshot(entries) == before
    assert out.tokens <= 80 and out.tokens == TOK.message_tokens(out.message)
    assert out.message["role"] == "user" and out.kind == "summary"
    assert out.message["content"].startswith("Summary of earlier conversation:\nKey facts: ")
    assert "E4021" in out.message["content"] and "T-881" in out.message["content"]
    assert out.seq == 0 and out.metadata["summarized_ids"] == [e.id for e in entries]
    assert out.metadata["compressed"] == {
        "by": "llm",
        "from_tokens": total_tokens(entries),
        "to_tokens": out.tokens,
    }


def test_the_prompt_asks_for_a_short_faithful_summary_in_the_texts_language() -> None:
    model = FakeModel()
    asyncio.run(LLMSummarizer(model, TOK).summarize(long_chat(), 80))
    [system, request] = model.calls[0]
    assert system["role"] == "system"
    for word in ("name", "number", "id", "date", "decision", "language of the text"):
        assert word in system["content"]
    room = int(re.search(r"at most (\d+) tokens", system["content"]).group(1))  # type: ignore[union-attr]
    assert 16 <= room < 80
    assert request["content"].startswith("user: Thanks for your message.")
    assert "\n\nassistant: Noted." in request["content"]


def test_a_chinese_conversation_gets_a_chinese_heading() -> None:
    entries = [
        user("服务器在凌晨三点崩溃了，错误代码是E503。" * 6, 0),
        user("请在周五之前修复。" * 6, 1),
    ]
    model = FakeModel(reply="服务器崩溃，错误E503，周五前修复。")
    [out] = asyncio.run(LLMSummarizer(model, TOK).summarize(entries, 60))
    assert out.message["content"] == HEADINGS["zh"] + "\n服务器崩溃，错误E503，周五前修复。"


def test_a_single_entry_keeps_its_role_and_tool_call() -> None:
    call_entry = call(content=INCIDENT * 3)
    result = tool(INCIDENT * 3, call_id="call_1")
    summarizer = LLMSummarizer(FakeModel(), TOK)
    [summarized_call] = asyncio.run(summarizer.summarize([call_entry], 60))
    [summarized_result] = asyncio.run(summarizer.summarize([result], 40))
    assert summarized_call.message["tool_calls"] == call_entry.message["tool_calls"]
    assert summarized_call.message["content"].startswith("Key facts:")
    assert summarized_result.message["tool_call_id"] == "call_1"
    assert summarized_result.message["role"] == "tool" and summarized_result.id == result.id
    assert by(summarized_result) == "llm" and summarized_result.tokens <= 40


@pytest.mark.parametrize(
    "model",
    [
        FakeModel(delay=5.0),  # too slow
        FakeModel(error=True),
        FakeModel(reply="word " * 500),  # over the target
        FakeModel(reply="   "),
    ],
    ids=["timeout", "exception", "over-target", "empty"],
)
def test_a_failing_model_falls_back_to_the_extractive_form(model: FakeModel) -> None:
    entries = long_chat()
    started = time.monotonic()
    out = asyncio.run(LLMSummarizer(model, TOK, timeout=0.2).summarize(entries, 150))
    assert time.monotonic() - started < 2
    # The same texts; each entry also says why (tests/test_housekeeping.py).
    assert [e.message for e in out] == [e.message for e in Extractive(TOK)(entries, 150)]
    assert [by(e) for e in out] == ["extractive"] * 3
    assert len(model.calls) == 1


def test_a_custom_fallback_is_used() -> None:
    summarizer = LLMSummarizer(FakeModel(error=True), TOK, fallback=Truncate(TOK))
    [out] = asyncio.run(summarizer.summarize([user("word " * 300)], 50))
    assert by(out) == "truncate" and out.tokens <= 50


def test_nothing_is_asked_when_the_entries_fit_or_the_room_is_too_small() -> None:
    model = FakeModel()
    summarizer = LLMSummarizer(model, TOK)
    entries = long_chat()
    assert asyncio.run(summarizer.summarize(entries, 10_000)) == entries
    tiny = asyncio.run(summarizer.summarize(entries, 15))
    assert tiny == Extractive(TOK)(entries, 15)
    assert model.calls == []


def test_a_cache_hit_avoids_a_second_call() -> None:
    model = FakeModel()
    summarizer = LLMSummarizer(model, TOK)
    first = asyncio.run(summarizer.summarize(long_chat(), 80))
    second = asyncio.run(summarizer.summarize(long_chat(), 80))  # same texts, new entry ids
    assert len(model.calls) == 1
    assert first[0].message == second[0].message
    asyncio.run(summarizer.summarize(long_chat(), 90))  # another target is another summary
    assert len(model.calls) == 2


def test_the_cache_is_bounded() -> None:
    model = FakeModel()
    summarizer = LLMSummarizer(model, TOK, cache_size=2)
    for target in (70, 80, 90, 70):
        asyncio.run(summarizer.summarize(long_chat(), target))
    assert len(summarizer.cache) == 2
    assert len(model.calls) == 4  # 70 was the oldest and left when 90 came


def test_concurrency_is_limited() -> None:
    model = FakeModel(delay=0.02)
    summarizer = LLMSummarizer(model, TOK, max_concurrency=2)

    async def main() -> None:
        await asyncio.gather(*(summarizer.summarize(long_chat(), 60 + n) for n in range(8)))

    asyncio.run(main())
    assert len(model.calls) == 8
    assert model.max_in_flight == 2


def test_bad_settings_are_refused() -> None:
    with pytest.raises(CompressionError):
        LLMSummarizer(FakeModel(), TOK, max_concurrency=0)


# -- __call__ (never waits for the network) ----------------------------------------------


def test_background_thread_serves_the_extractive_form_first_then_the_summary() -> None:
    model = FakeModel(delay=0.5)
    with LLMSummarizer(model, TOK) as summarizer:
        entries = long_chat()
        started = time.monotonic()
        first = summarizer(entries, 80)
        again = summarizer(entries, 80)  # already in flight: not asked twice
        assert time.monotonic() - started < 0.4  # did not wait for the model
        assert [by(e) for e in first] == ["extractive"] * 3 and again == first
        assert summarizer.wait(5)
        [later] = summarizer(entries, 80)
        assert by(later) == "llm" and later.kind == "summary"
    assert len(model.calls) == 1


def test_background_task_on_a_running_loop() -> None:
    model = FakeModel(delay=0.01)
    summarizer = LLMSummarizer(model, TOK)

    async def main() -> tuple[list[Entry], list[Entry]]:
        first = summarizer(long_chat(), 80)
        await summarizer.drain()
        return first, summarizer(long_chat(), 80)

    first, later = asyncio.run(main())
    assert [by(e) for e in first] == ["extractive"] * 3
    assert [by(e) for e in later] == ["llm"]
    summarizer.close()


def test_a_failed_background_summary_is_not_cached() -> None:
    model = FakeModel(error=True)
    with LLMSummarizer(model, TOK) as summarizer:
        summarizer(long_chat(), 80)
        assert summarizer.wait(5)
        assert [by(e) for e in summarizer(long_chat(), 80)] == ["extractive"] * 3
        assert summarizer.wait(5)
    assert len(model.calls) == 2 and len(summarizer.cache) == 0


def test_close_cancels_pending_work_and_stops_scheduling() -> None:
    model = FakeModel(delay=30)
    summarizer = LLMSummarizer(model, TOK)
    summarizer(long_chat(), 80)
    started = time.monotonic()
    summarizer.close()
    summarizer.close()
    assert time.monotonic() - started < 5
    assert summarizer.wait(1)
    assert [by(e) for e in summarizer(long_chat(), 90)] == ["extractive"] * 3
    assert len(model.calls) <= 1


# -- openai_completion against a real HTTP endpoint ------------------------------------


def echo(body: dict[str, Any]) -> str:
    return summary_of(body["messages"][-1]["content"])


def test_openai_completion_sends_model_messages_and_max_tokens(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CTXWINDOW_LLM_API_KEY", "sk-from-env")
    messages: list[Message] = [{"role": "user", "content": "ticket T-9 at 10:30"}]
    with fake_openai(echo) as fake:
        complete = openai_completion(fake.base_url, "summary-model", max_tokens=77)
        reply = asyncio.run(complete(messages))
        explicit = openai_completion(fake.base_url, "m2", api_key="sk-given")
        asyncio.run(explicit(messages))
    assert reply == "Key facts: T-9, 10:30."
    body = fake.requests[0]
    assert body["model"] == "summary-model" and body["messages"] == messages
    assert body["max_tokens"] == 77 and body["temperature"] == 0
    assert fake.headers[0]["authorization"] == "Bearer sk-from-env"
    assert fake.headers[1]["authorization"] == "Bearer sk-given"


def test_openai_completion_maps_endpoint_errors() -> None:
    with fake_openai(echo) as fake:
        fake.status = 500
        complete = openai_completion(fake.base_url, "m", api_key="k", max_retries=0)
        with pytest.raises(CompressionError, match="summary endpoint") as caught:
            asyncio.run(complete([{"role": "user", "content": "hi"}]))
    assert caught.value.__cause__ is not None


def test_openai_completion_without_the_sdk_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "openai", None)
    with pytest.raises(ImportError, match=re.escape(install_hint("llm"))):
        openai_completion("http://127.0.0.1:9/v1", "m")


def test_summarizer_over_http_in_the_background() -> None:
    with fake_openai(echo) as fake:
        complete = openai_completion(fake.base_url, "summary-model", api_key="k")
        with LLMSummarizer(complete, TOK) as summarizer:
            summarizer(long_chat(), 80)
            assert summarizer.wait(10)
            [out] = summarizer(long_chat(), 80)
    assert "T-881" in out.message["content"] and by(out) == "llm"
    assert fake.requests[0]["messages"][0]["role"] == "system"


# -- rolling summary ----------------------------------------------------------------


def test_rolling_summary_folds_incrementally_within_budget() -> None:
    rolling = RollingSummary(LLMSummarizer(FakeModel(), TOK))
    chat = long_chat()
    first = asyncio.run(rolling.afold(None, chat[:2], 60))
    assert first.kind == "summary" and first.pinned and first.tokens <= 60
    assert first.metadata["summarized_ids"] == [chat[0].id, chat[1].id]
    second = asyncio.run(rolling.afold(first, chat[2:], 60))
    assert second.id == first.id and second.seq == first.seq and second.tokens <= 60
    assert second.metadata["summarized_ids"] == [e.id for e in chat]
    assert "T-881" in second.message["content"]
    assert second.message["content"].startswith(HEADINGS["en"])


def test_rolling_summary_never_grows_past_its_budget() -> None:
    rolling = RollingSummary(Extractive(TOK))
    summary = None
    evicted = [user(f"Order {n} for client C{n} ships on day {n}. " * 5, n) for n in range(12)]
    for n in range(0, 12, 3):
        summary = rolling.fold(summary, evicted[n : n + 3], 50)
        assert summary.tokens <= 50 and summary.tokens == TOK.message_tokens(summary.message)
    assert summary is not None
    assert summary.metadata["summarized_ids"] == [e.id for e in evicted]
    assert summary.seq == 0


def test_rolling_summary_with_background_llm_uses_the_summary_once_ready() -> None:
    with LLMSummarizer(FakeModel(), TOK) as summarizer:
        rolling = RollingSummary(summarizer)
        chat = long_chat()
        early = rolling.fold(None, chat, 70)
        assert early.tokens <= 70 and by(early) == "rolling(extractive)"  # the fallback, now
        assert "Key facts" not in early.message["content"]
        assert summarizer.wait(5)
        ready = rolling.fold(None, chat, 70)
    assert "Key facts: " in ready.message["content"] and ready.tokens <= 70
    assert by(ready) == "rolling(llm)"


def test_rolling_summary_errors() -> None:
    rolling = RollingSummary(Extractive(TOK))
    with pytest.raises(CompressionError, match="nothing to fold"):
        rolling.fold(None, [], 50)
    with pytest.raises(CompressionError, match="below an empty summary"):
        rolling.fold(None, long_chat(), 3)
    with pytest.raises(CompressionError, match="tokenizer"):
        RollingSummary(lambda entries, target: list(entries))  # type: ignore[arg-type]
    summary = rolling.fold(None, long_chat(), 60)
    assert rolling.fold(summary, [], 60) is summary


# -- property -----------------------------------------------------------------------


@st.composite
def chats(draw: st.DrawFn) -> list[Entry]:
    roles = draw(st.lists(st.sampled_from(["user", "assistant", "tool"]), min_size=1, max_size=4))
    return [
        tool(draw(texts()), call_id=f"c{n}", seq=n)
        if role == "tool"
        else make({"role": role, "content": draw(texts())}, n)
        for n, role in enumerate(roles)
    ]


@settings(max_examples=40)
@given(entries=chats(), share=st.floats(0.0, 1.2), reply=st.sampled_from([None, "", "x " * 400]))
def test_property_summaries_never_grow_mutate_or_lose_roles(
    entries: list[Entry], share: float, reply: str | None
) -> None:
    before = snapshot(entries)
    target = int(total_tokens(entries) * share)
    out = asyncio.run(LLMSummarizer(FakeModel(reply=reply), TOK).summarize(entries, target))
    assert snapshot(entries) == before
    assert total_tokens(out) <= total_tokens(entries)
    if len(out) == len(entries):
        for old, new in zip(entries, out, strict=True):
            assert new.message["role"] == old.message["role"]
            assert new.message.get("tool_call_id") == old.message.get("tool_call_id")
    else:
        [merged] = out
        assert merged.kind == "summary" and merged.tokens <= target
        assert merged.metadata["summarized_ids"] == [e.id for e in entries]
    assert all(dataclasses.is_dataclass(e) for e in out)
