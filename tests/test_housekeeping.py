"""Housekeeping never leaks, never destroys (issue 28, item 4).

A summary endpoint that fails, stalls or answers with what is no summary
(nothing, an error, a refusal, an HTML page, a stream, the request echoed)
never replaces history: the stored turns stay, the context is the one the
extractive fold gives, the report says why and the summarizer counts it
(the field's bugs: an empty summary replaced the history, docker-agent PR
#3469; the error text became the summary, LangChain #38867). The summary is
a request of its own, never streamed (LangChain.js #9455). A compaction that
cannot happen says so and goes on at its next turn (an orphaned call
disabled compaction for good, ADK #7236). The endpoint is real HTTP
(tests/support/fake_openai.py); the only other fake is ``FakeModel``, an
upstream model too.
"""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import pydantic
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxwindow import ContextManager, PriorityWindow
from ctxwindow.compress import (
    CompressionError,
    Extractive,
    LLMSummarizer,
    RollingSummary,
    openai_completion,
)
from ctxwindow.compress.prompt import HEADINGS, SYSTEM_PROMPT
from ctxwindow.compress.replies import unusable
from ctxwindow.messages import Entry, Message
from ctxwindow.policies import Folding, Keeping, Window
from ctxwindow.server.settings import Settings
from ctxwindow.stores import MemoryStore
from ctxwindow.tokens import chat_tokenizer

from .support.compress import INCIDENT, FakeModel, make, texts, user
from .support.fake_openai import fake_openai

TOK = chat_tokenizer("gpt-4o")
PAD = " Thanks, that sounds great!" * 6  # each turn over a fold's room: the model is asked
FACTS = [
    "Order A-{n} ships to Oslo on Friday; Caroline paid invoice {n}00.",
    "订单B-{n}已经发货了，预计星期五到上海。",
    "田中さんは請求書C-{n}の件で3200円払いました。",
    "📦 Parcel D-{n} left the Tromsø depot 🚚",
]
PAGE = b"<!DOCTYPE html><html><head><title>502 Bad Gateway</title></head><body>nginx</body></html>"
SSE = b'data: {"choices":[{"index":0,"delta":{"content":"Key facts"}}]}\n\ndata: [DONE]\n\n'
UNUSED = "the model's summary was not used: "


def turn(n: int) -> Message:
    role = "user" if n % 2 == 0 else "assistant"
    return {"role": role, "content": FACTS[n % 4].format(n=n) + PAD}


# -- a summary endpoint that misbehaves -------------------------------------------------

REPLIES: dict[str, Callable[[dict[str, Any]], str]] = {
    "empty": lambda body: "",
    "whitespace": lambda body: " \n\t ",
    "error-text": lambda body: "Error: upstream request failed with status 502 (Bad Gateway)",
    "refusal": lambda body: "I'm sorry, but I can't help with that request.",
    "refusal-zh": lambda body: "抱歉，我无法处理这个请求。",
    "html-as-text": lambda body: PAGE.decode(),
    "json-error-as-text": lambda body: '{"error": {"message": "The server is overloaded"}}',
    "prompt-echoed": lambda body: body["messages"][0]["content"],
    "transcript-echoed": lambda body: body["messages"][-1]["content"][:300],
}
RAW = {  # status, then the body's content type and bytes
    "200-html-page": (200, ("text/html", PAGE)),
    "503-html-page": (503, ("text/html", PAGE)),
    "200-event-stream": (200, ("text/event-stream", SSE)),
}
KINDS = {
    **dict.fromkeys(["500", "refused", *RAW], "failed"),
    "stall": "timeout",
    **dict.fromkeys(["empty", "whitespace"], "empty"),
    **dict.fromkeys(set(REPLIES) - {"empty", "whitespace"}, "not_a_summary"),
}


@contextmanager
def misbehaving(how: str) -> Iterator[str]:
    """The base URL of a summary endpoint that misbehaves ``how``."""
    if how == "refused":  # nothing listens there
        with socket.socket() as free:
            free.bind(("127.0.0.1", 0))
            port = free.getsockname()[1]
        yield f"http://127.0.0.1:{port}/v1"
        return
    released = threading.Event()
    with fake_openai(REPLIES.get(how, lambda body: "Key facts: A-1.")) as fake:
        if how == "stall":
            fake.reply = lambda body: "Key facts, too late." if released.wait(10) else ""
        elif how == "500":
            fake.status = 500
        elif how in RAW:
            fake.status, fake.raw = RAW[how]
        try:
            yield fake.base_url
        finally:
            released.set()


def manager(fold: Callable[[Entry | None, Sequence[Entry], int], Entry]) -> ContextManager:
    def policy(budget: int, tokenizer: Any) -> Window:
        keeping, folding = Keeping(reserve_recent=0), Folding(summarizer=fold, summary_tokens=120)
        return PriorityWindow(budget, tokenizer=tokenizer, keeping=keeping, folding=folding)

    return ContextManager(MemoryStore(), "gpt-4o", policy=policy, budget=420, prefetch=False)


def awaited(rolling: RollingSummary) -> Callable[[Entry | None, Sequence[Entry], int], Entry]:
    """A window's summarizer that waits for the model (``afold``), as a blocking agent does."""
    return lambda old, evicted, room: asyncio.run(rolling.afold(old, evicted, room))


@pytest.mark.parametrize("how", sorted(KINDS))
def test_a_misbehaving_summary_endpoint_never_replaces_history(how: str) -> None:
    """The stored turns stay; the context is the extractive fold's, word for word; the
    summary's row and the report say why; the summarizer counts the failure by kind."""
    sent = [turn(n) for n in range(16)]
    control = manager(RollingSummary(Extractive(TOK)).fold)
    with misbehaving(how) as base_url:
        complete = openai_completion(base_url, "summary-model", api_key="k", max_retries=0)
        with LLMSummarizer(complete, TOK, timeout=0.3 if how == "stall" else 10) as summarizer:
            failing = manager(awaited(RollingSummary(summarizer)))
            for message in sent:
                failing.add("s", message)
                control.add("s", message)
    assert [e.message for e in failing.history("s")] == sent
    built, expected = failing.build("s"), control.build("s")
    assert built.messages == expected.messages
    assert summarizer.failures[KINDS[how]] >= 1 and set(summarizer.failures) == {KINDS[how]}
    assert summarizer.last_failure is not None
    summary = next(d for d in built.report.decisions if d.seq is None)
    assert UNUSED + summarizer.last_failure in summary.reason
    assert built.report.compaction == "rolling summary: " + UNUSED + summarizer.last_failure
    assert "compaction: rolling summary: " in str(built.report)


def test_the_sync_fold_says_why_the_summary_the_fold_before_asked_for_was_not_used() -> None:
    """The default policy folds without waiting (the model's summary is computed in the
    background): the next fold learns how it went, and its report says so."""
    with misbehaving("error-text") as base_url:
        complete = openai_completion(base_url, "summary-model", api_key="k", max_retries=0)
        with LLMSummarizer(complete, TOK) as summarizer:
            cm = ContextManager(MemoryStore(), summarizer=summarizer, budget=420, prefetch=False)
            for n in range(16):
                cm.add("s", turn(n))
                assert summarizer.wait(10)
            context = cm.build("s")
    assert summarizer.failures["not_a_summary"] >= 2 and len(summarizer.cache) == 0
    assert not any("upstream request failed" in str(m["content"]) for m in context.messages)
    assert "asked for by the fold before was not used: an error or a refusal" in str(
        context.report.compaction
    )


def test_a_model_that_replies_with_an_error_keeps_the_old_summary_facts() -> None:
    """LangChain #38867: the error text became the summary. The old summary's facts stay."""
    old = RollingSummary(Extractive(TOK)).fold(None, [user("Ticket T-881 is blocked." + PAD)], 60)
    later = [make({"role": "assistant", "content": "Order A-1042 ships Friday." + PAD}, 1)]
    with LLMSummarizer(FakeModel(reply="Error: the model is overloaded"), TOK) as summarizer:
        new = asyncio.run(RollingSummary(summarizer).afold(old, later, 60))
    assert "T-881" in new.message["content"] and "overloaded" not in new.message["content"]
    assert new.metadata["compressed"]["by"] == "rolling(extractive)"
    assert new.metadata["compressed"]["fallback"].startswith(UNUSED + "an error or a refusal")


def test_the_sync_call_never_serves_a_failed_summary_and_says_why_at_the_next_call() -> None:
    """The call that starts the summary cannot know (the fallback, no reason); the next one
    with the same request says why, and nothing that failed is cached."""
    entries = [user(INCIDENT, 0), user("Also ticket T-881 is blocked. " + INCIDENT, 1)]
    model = FakeModel(reply="I'm sorry, but I can't help with that.")
    with LLMSummarizer(model, TOK) as summarizer:
        first = summarizer(entries, 80)
        assert summarizer.wait(5)
        again = summarizer(entries, 80)
        assert summarizer.wait(5)
    assert [e.message for e in again] == [e.message for e in first]
    assert all("fallback" not in e.metadata["compressed"] for e in first)
    assert all(e.metadata["compressed"]["fallback"].startswith(UNUSED) for e in again)
    assert summarizer.failures == {"not_a_summary": 2} and len(summarizer.cache) == 0


def test_a_compressed_row_says_why_the_models_summary_was_not_used() -> None:
    """An awaited ``LLMSummarizer`` as the window's compressor: its fallback's row says why."""
    with LLMSummarizer(FakeModel(reply=""), TOK) as summarizer:
        folding = Folding(compress_threshold=60, compressor=lambda entries, target: (
            asyncio.run(summarizer.summarize(entries, target))))  # fmt: skip
        window = PriorityWindow(400, keeping=Keeping(reserve_recent=0), folding=folding)
        window.add("user", INCIDENT * 3)
        for n in range(6):
            window.add(turn(n))
    [row] = [d for d in window.report().decisions if d.state == "compressed"]
    assert row.compressor == "extractive"
    assert row.reason.endswith("; the model's summary was not used: an empty reply")
    assert summarizer.failures == {"empty": 1}


# -- the summary is its own request, never streamed ---------------------------------------


def test_the_summary_request_is_not_streamed_and_is_the_summarizers_own() -> None:
    entries = [user(INCIDENT, 0), user("Also ticket T-881 is blocked. " + INCIDENT, 1)]
    with fake_openai(lambda body: "Key facts: E4021, T-881.") as fake:
        complete = openai_completion(fake.base_url, "summary-model", api_key="k")
        [out] = asyncio.run(LLMSummarizer(complete, TOK).summarize(entries, 80))
    [body] = fake.requests
    assert body["stream"] is False and "stream_options" not in body
    assert [m["role"] for m in body["messages"]] == ["system", "user"]
    assert body["messages"][0]["content"].startswith(SYSTEM_PROMPT.split(".")[0])
    assert out.message["content"] == HEADINGS["en"] + "\nKey facts: E4021, T-881."


def test_the_service_offers_no_model_summary_so_none_can_reach_its_clients() -> None:
    """docs/server.md: the service's rolling summary is extractive or off."""
    assert Settings(summary="off").summary == "off"
    with pytest.raises(pydantic.ValidationError):
        Settings(summary="llm")  # type: ignore[arg-type]


def test_an_endpoint_that_answers_no_chat_completion_raises_a_compression_error() -> None:
    """The SDK hands over an HTML page or a stream as text: that is an error, not a reply."""
    with fake_openai(lambda body: "") as fake:
        complete = openai_completion(fake.base_url, "m", api_key="k", max_retries=0)
        for kind, body in [("text/html", PAGE), ("text/event-stream", SSE)]:
            fake.raw = (kind, body)
            with pytest.raises(CompressionError, match="returned no chat completion"):
                asyncio.run(complete([{"role": "user", "content": "hi"}]))


# -- what is no summary: both sides of the rule ------------------------------------------

NOT_SUMMARIES = [
    "Error: upstream request failed", "RuntimeError: the model is down",
    "Error code: 503 - {'error': 'overloaded'}", "Traceback (most recent call last):\n  x",
    "502 Bad Gateway", "Service Unavailable", "Rate limit exceeded, retry later",
    "<!DOCTYPE html><html>", "<html><body>error</body></html>", '{"error": "overloaded"}',
    "I'm sorry, but I can't help with that.", "I’m sorry, I can’t assist with this request.",
    "Sorry, I cannot summarize this.", "I cannot help with that.", "As an AI language model, I",
    "**Error:** failed", "很抱歉，但我不能帮助你。", "申し訳ありませんが、要約できません。",
    "I'm sorry, but I'm unable to help with that.", "We're unable to summarize this text.",
]  # fmt: skip
SUMMARIES = [
    "Key facts: E4021, kappa-7, 03:14 UTC.", "Sorry for the delay: order A-7 ships Friday.",
    "The user can't log in; the agent reset the password.", "I can't make it Friday, Bob said.",
    "Errors were found in build 7; rollback agreed.", "User reported the error: E4021.",
    "服务器崩溃，错误E503，周五前修复。", "田中さんは3200円払いました。",
    "🎉 Party for team K1 tonight 🥳",
    "Unfortunately the parcel was delayed; a refund was agreed.",
    "I'm unable to attend Friday, Bob wrote; the review moves to Monday.",
]  # fmt: skip
TRANSCRIPT = "user: Order A-7 is late.\n\nassistant: Noted, we will check the depot."


@pytest.mark.parametrize("reply", NOT_SUMMARIES)
def test_errors_refusals_and_pages_are_no_summary(reply: str) -> None:
    assert (unusable(reply, TRANSCRIPT) or "").startswith("an error or a refusal")


@pytest.mark.parametrize("reply", SUMMARIES)
def test_real_summaries_are_summaries(reply: str) -> None:
    assert unusable(reply, TRANSCRIPT) is None


def test_echoes_are_no_summary_but_a_summary_may_start_like_its_one_message() -> None:
    assert unusable(SYSTEM_PROMPT.format(max_tokens=60), TRANSCRIPT) is not None
    assert unusable(TRANSCRIPT[:40], TRANSCRIPT) == "the conversation echoed back, not summarized"
    one = "The migration of cluster kappa-7 failed at 03:14 UTC with error E4021. " * 3
    assert unusable(one[:72], one, transcript=False) is None


@settings(max_examples=60)
@given(text=texts(), cut=st.tuples(st.integers(0, 400), st.integers(1, 400)))
def test_property_a_reply_of_the_texts_own_words_is_a_summary(
    text: str, cut: tuple[int, int]
) -> None:
    """Words of the conversation (CJK, emoji, ids, numbers) are never judged no summary."""
    reply = text[cut[0] : cut[0] + cut[1]]
    assert unusable(reply, "user: " + text, transcript=False) is None or not reply.strip()


@settings(max_examples=60)
@given(before=texts(), after=texts(), marker=st.sampled_from(NOT_SUMMARIES[:3] + SUMMARIES))
def test_property_a_marker_the_conversation_says_itself_is_no_reason(
    before: str, after: str, marker: str
) -> None:
    """A summary of a session that says "Error: …" may start with it."""
    text = f"user: {before}\n\nassistant: {marker} {after}"
    assert unusable(marker + " " + after, text, transcript=False) is None


# -- a compaction that cannot happen says so, and goes on at its next turn ----------------

NOT_FOLDED = "evicted; not folded into the rolling summary: "


class Flaky:
    """A rolling summary (extractive) whose folds fail while ``failing`` is set."""

    def __init__(self) -> None:
        self.rolling = RollingSummary(Extractive(TOK))
        self.failing = True
        self.calls = 0

    def __call__(self, old: Entry | None, evicted: Sequence[Entry], room: int) -> Entry:
        self.calls += 1
        if self.failing:
            raise ConnectionError("the summary model is down")
        return self.rolling.fold(old, evicted, room)


def folding_window(
    summarizer: Any, budget: int = 300, oversize: Any = "error", **folding: Any
) -> PriorityWindow:
    folding = {"summary_tokens": 100, "fold_tokens": 1, **folding}
    return PriorityWindow(
        budget, system="Be brief.", keeping=Keeping(reserve_recent=0), oversize=oversize,
        folding=Folding(summarizer=summarizer, **folding),
    )  # fmt: skip


def test_a_failing_summarizer_never_breaks_a_turn_and_compaction_resumes() -> None:
    """The turn goes on (before: the add raised, after storing); the rows and the report say
    why the evicted turns are not in the summary; once it works, the next fold folds."""
    flaky = Flaky()
    cm = manager(flaky)
    sent = [turn(n) for n in range(10)]
    for message in sent:
        cm.add("s", message)
    assert flaky.calls and [e.message for e in cm.history("s")] == sent
    report = cm.build("s").report
    why = "the summarizer failed: ConnectionError('the summary model is down')"
    assert report.compaction == f"the rolling summary was not updated: {why}"
    not_folded = [d for d in report.decisions if d.reason.startswith(NOT_FOLDED)]
    assert not_folded and all(d.reason == NOT_FOLDED + why for d in not_folded)
    flaky.failing = False
    for n in range(10, 16):
        cm.add("s", turn(n))
    report = cm.build("s").report
    assert report.compaction is None and report.messages_by_state["summarized"] > 0


def test_a_tool_call_waiting_for_its_results_keeps_its_room_and_the_fold_waits() -> None:
    """Before, the summary grew into the room of a call that cannot be evicted, and its
    result was then refused as too large. The batch waits, and is folded later."""
    window = folding_window(RollingSummary(Extractive(TOK)).fold, budget=400, summary_tokens=200)
    for n in range(3):  # they fit: the call's own admission evicts them
        window.add(turn(n))
    big = "The report says: " + " ".join(f"item {n} costs {n * 7} dollars." for n in range(46))
    calls = [{"id": "c1", "type": "function", "function": {"name": "report", "arguments": "{}"}}]
    window.add({"role": "assistant", "content": big, "tool_calls": calls})
    waiting = window.report().compaction or ""
    assert waiting.startswith("the rolling summary waits: a tool call waiting for its results")
    window.add({"role": "tool", "tool_call_id": "c1", "content": "done"})
    window.add("user", "Thanks, what next?")
    report = window.report()
    assert report.compaction is None
    summary = next(d for d in report.decisions if d.seq is None)
    assert summary.reason.startswith("rolling summary: it carries something of")
    assert {d.seq for d in report.decisions if d.state == "summarized"} & {0, 1, 2}


def test_no_room_for_a_summary_is_said_on_the_rows_and_in_the_report() -> None:
    window = folding_window(RollingSummary(Extractive(TOK)).fold, summary_tokens=10)
    for n in range(8):
        window.add(turn(n))
    report = window.build().report
    why = "its room is 10 tokens (a summary needs 16)"
    assert report.compaction == f"the rolling summary was not updated: {why}"
    assert next(d.reason for d in report.decisions if d.state == "evicted") == NOT_FOLDED + why


def test_over_budget_with_nothing_it_may_evict_is_said_until_it_fits_again() -> None:
    """A narrower budget than a call waiting for its results: said, not silent; its
    result then drops the unit as too large (``oversize="drop"``), and the window fits."""
    window = folding_window(None, budget=300, oversize="drop")
    calls = [{"id": "c1", "type": "function", "function": {"name": "look", "arguments": "{}"}}]
    window.add({"role": "assistant", "content": "Looking up " + INCIDENT * 2, "tool_calls": calls})
    window.resize(100)
    stuck = window.report().compaction or ""
    assert stuck.startswith("over budget by ") and stuck.endswith(
        "with nothing left it may evict (pinned messages, a tool call waiting for its results)"
    )
    assert window.add({"role": "tool", "tool_call_id": "c1", "content": "found"}) is None
    assert window.report().compaction is None and window.total_tokens <= 100


@st.composite
def schedules(draw: st.DrawFn) -> tuple[list[Message], list[bool]]:
    """A conversation (words of every script) and, per fold, whether the summarizer fails."""
    said = draw(st.lists(texts(), min_size=6, max_size=30))
    messages: list[Message] = [
        {"role": ("user", "assistant")[n % 2], "content": f"{s} {FACTS[n % 4].format(n=n)}"}
        for n, s in enumerate(said)
    ]
    return messages, draw(st.lists(st.booleans(), min_size=1, max_size=12))


@settings(max_examples=60, deadline=None)
@given(schedule=schedules(), budget=st.integers(100, 400))
def test_property_failed_folds_leave_the_summary_and_say_so(
    schedule: tuple[list[Message], list[bool]], budget: int
) -> None:
    """Whatever folds fail: no add raises, the context fits, a failed fold leaves the summary
    as it was, its turns' rows say so, and the report names the failure until a fold works."""
    messages, fails = schedule
    rolling, outcomes, made, failed_ids = RollingSummary(Extractive(TOK)), [], [], set()

    def fold(old: Entry | None, evicted: Sequence[Entry], room: int) -> Entry:
        fail = fails[len(outcomes) % len(fails)]
        outcomes.append(fail)
        if fail:
            failed_ids.update(e.id for e in evicted)
            raise RuntimeError("down")
        entry = rolling.fold(old, evicted, room)
        made.append(entry.message)
        return entry

    window = folding_window(fold, budget, "drop", summary_tokens=max(16, budget // 5))
    for message in messages:
        window.add(message)
        built = window.build()
        assert built.total_tokens <= budget
        assert [m for m in built.messages if _summary(m)] == made[-1:]
        if outcomes:
            compaction = built.report.compaction
            assert "not updated" in (compaction or "") if outcomes[-1] else compaction is None
    rows = {d.id: d for d in window.report().decisions}
    assert all(rows[i].reason.startswith(NOT_FOLDED) for i in failed_ids if i in rows)


def _summary(message: Message) -> bool:
    return str(message.get("content")).startswith(tuple(HEADINGS.values()))
