"""Every path builds only valid requests, by property (issue 28, item 2).

Hypothesis draws whole conversations (tests/support/conversations.py: tool calls one at a
time or parallel, nested, failed and pending; images, long messages, CJK and emoji) and
budgets from a few tokens above the system prompt to more than everything. Each is replayed
through every path (tests/support/paths.py: the windows, priorities and caps, the hybrid,
compression, the rolling summary, the manager with recall, redaction, the cache mode's
steps, strict roles; tests/support/adapter_paths.py: LangChain, LlamaIndex, the OpenAI
Agents SDK), and every context it builds is checked with ``ctxwindow.validate`` in each
protocol it serves: Chat Completions, its Anthropic form as the service converts it, the
strict chat templates for the paths that serve them, Responses for the Agents session.
benchmarks/bench_valid.py runs the same checks at scale and prints the counts.

**A call waiting for its results is never evicted or summarized away.** Precisely: while a
call of the conversation waits for results (its assistant message was added, not every
result yet), every context a path builds holds that assistant message (every id of its
calls) and each result it got so far, unless they, with the system prompt, take more than
the room the budget leaves (a sixth of the room is kept aside for a rolling summary and
for counts that differ, such as a model counted by estimate). What then happens is the
window's oversize policy (policies/oversize.py, policies/base.py): ``"drop"`` (the
hybrid's, the manager's) leaves the whole unit out and drops its later results silently;
``"error"`` refuses the message that does not fit (``MessageTooLargeError``) and changes
nothing; ``"truncate"`` cuts a result's text to fit and refuses what has no text to cut (an
assistant message of tool calls alone). Two paths are held to less: LangChain's
``start_on="human"`` leaves out whatever comes before a human turn, a waiting call too; the
agent middleware stores a call with its results, and no agent asks its model in between.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given

from ctxwindow import ContextManager, MessageTooLargeError, PriorityWindow, TokenWindow
from ctxwindow.integrations.openai_agents import to_items
from ctxwindow.stores.memory import MemoryStore
from tests.support.adapter_paths import ADAPTER_PATHS
from tests.support.conversations import IMAGES, Conversation, Step, with_budgets
from tests.support.paths import (
    CHAT,
    LIBRARY_PATHS,
    Path,
    Sent,
    empty,
    fits,
    lost_pending,
    violations,
)
from tests.support.windows import hybrid_window

PATHS: dict[str, Path] = {**LIBRARY_PATHS, **ADAPTER_PATHS}


@given(drawn=with_budgets())
def test_a_drawn_conversation_is_valid_before_any_path(drawn: tuple[Conversation, int]) -> None:
    """Whole, as far as it went at each step that builds, a drawn conversation breaks no
    rule (but the answers a pending call still waits for): what a path's context breaks,
    the path broke."""
    conversation, _ = drawn
    sent = conversation.messages()[:1] if conversation.system is not None else []
    for step in conversation.steps():
        sent += step.messages
        if not step.builds:
            continue
        for protocol in CHAT:
            assert violations(protocol, Sent(step, None, list(sent))) == [], protocol
        items = [item for message in sent for item in to_items(message)]
        assert violations("responses", Sent(step, None, items=items)) == []


def check(conversation: Conversation, path: Path, sent: Sent) -> None:
    """One context: valid in each protocol of the path; nothing of the conversation, or a
    refusal, only when the newest turn (or the waiting call) does not fit; the waiting call
    kept (see the module docstring)."""
    newest = sent.step.waiting or sent.step.messages
    if sent.refused is not None:
        assert not fits(conversation, newest, sent.room, sent.count), f"refused: {sent.refused}"
        return
    for protocol in path.protocols:
        broken = violations(protocol, sent)
        assert broken == [], f"{protocol}: {[str(v) for v in broken]}\n{shown(sent)}"
    if path.holds_pending:
        assert not (empty(sent) and fits(conversation, newest, sent.room, sent.count)), shown(sent)
        assert not lost_pending(conversation, sent), f"the waiting call left out\n{shown(sent)}"


def shown(sent: Sent) -> str:
    """The context, short enough to read in a failure."""
    sent_ = sent.items if sent.items is not None else sent.messages
    return "\n".join(repr(m)[:200] for m in sent_)


@pytest.mark.parametrize("name", PATHS)
@given(drawn=with_budgets())
def test_every_context_a_path_builds_is_a_valid_request(
    name: str, drawn: tuple[Conversation, int]
) -> None:
    conversation, budget = drawn
    path = PATHS[name]
    for sent in path.run(conversation, budget):
        check(conversation, path, sent)


# -- found by the properties above, pinned -------------------------------------------------

ARGUMENTS = '{"q": "' + "订单 A-1042 " * 60 + '"}'  # larger than the budgets below
CALL = {"id": "call_1", "type": "function",
        "function": {"name": "search_orders", "arguments": ARGUMENTS}}  # fmt: skip
TOO_LARGE_CALL = {"role": "assistant", "content": None, "tool_calls": [CALL]}
RESULT = {"role": "tool", "tool_call_id": "call_1", "content": "A-1042 shipped."}


@pytest.mark.parametrize("oversize", ["drop", "error", "truncate"])
def test_a_waiting_call_too_large_for_the_budget_meets_the_oversize_policy(
    oversize: Any,
) -> None:
    """A call larger than all the room: ``drop`` leaves it out with its results (no orphan
    is sent); ``error`` and ``truncate`` (nothing to cut in tool calls) refuse it and
    change nothing."""
    window = TokenWindow(60, system="Be brief.", oversize=oversize)
    window.add("user", "Where is A-1042? 我的订单在哪里？")
    before = window.messages()
    if oversize == "drop":
        window.add(TOO_LARGE_CALL)
        window.add(RESULT)
        assert window.messages() == before and not window.pending_tool_calls
        return
    with pytest.raises(MessageTooLargeError):
        window.add(TOO_LARGE_CALL)
    assert window.messages() == before


def test_the_manager_takes_the_results_of_a_call_its_window_dropped() -> None:
    """The hybrid window drops a call too large for its budget, and documents that its
    results are dropped with it; the manager must take them too (it refused them with
    ``OrphanToolResultError`` before the app could go on: found by the property above)."""
    manager = ContextManager(MemoryStore(), budget=60)
    manager.add("s", {"role": "user", "content": "Where is A-1042? 我的订单在哪里？"})
    manager.add("s", TOO_LARGE_CALL)
    manager.add("s", RESULT)
    manager.add("s", {"role": "user", "content": "And now? 🚚"})
    assert violations("chat_completions", Sent(Step(()), 60, manager.build("s").messages)) == []
    assert [e.message for e in manager.history("s")][1:3] == [TOO_LARGE_CALL, RESULT]


def test_a_message_larger_than_the_budget_is_never_kept_compressed_to_nothing() -> None:
    """A message larger than the whole budget is compressed, else dropped: an assistant turn
    cut to no text at all is an invalid request (``chat.assistant_not_empty``) and says
    nothing. Found by the property above (the hybrid kept ``{"content": ""}``)."""
    window = hybrid_window(13)
    window.add("user", "hello")
    window.add("assistant", "The order A-1042 shipped.")
    sent = Sent(Step(()), 13, window.build().messages)
    assert violations("chat_completions", sent) == []


def test_a_reply_that_is_the_only_unit_left_may_be_compressed_in_its_place() -> None:
    """The window may compress the reply it is adding before an older recent turn goes
    (``VictimQueue.take``); with no older turn left (the strict path's merge left the
    first user turn in the rolling summary's room at 13 tokens), the queue chose its
    victim among none and raised ``IndexError``. Found by the property above."""
    conversation = Conversation(
        system=None,
        units=(
            ({"role": "user", "content": "hello"},),
            ({"role": "assistant", "content": "hello"},),
        ),
        pending=(),
    )
    for sent in PATHS["strict/merge"].run(conversation, 13):
        check(conversation, PATHS["strict/merge"], sent)


def test_a_dropped_tool_unit_leaves_no_prefill_that_anthropic_refuses() -> None:
    """A tool unit larger than the budget is dropped whole; the context then ends with the
    assistant's earlier text, which Anthropic reads as a prefill and refuses when it ends
    with whitespace (``anthropic.text_not_blank``). Found by the property above, through
    the service's converter (``to_anthropic``), with every window and the manager."""
    manager = ContextManager(MemoryStore(), budget=80)
    manager.add("s", {"role": "user", "content": "hi 你好"})
    manager.add("s", {"role": "assistant", "content": "Noted. "})
    manager.extend("s", [TOO_LARGE_CALL, RESULT])
    sent = Sent(Step(()), 80, manager.build("s").messages)
    assert violations("chat_completions", sent) == []
    assert violations("anthropic_messages", sent) == []


BLANK_TURNS = [
    [{"type": "text", "text": " "}, {"type": "image_url", "image_url": {"url": IMAGES[0]}}],
    "\n",
    [{"type": "text", "text": "\u3000"}, {"type": "image_url", "image_url": {"url": IMAGES[1]}}],
    "",
]


@pytest.mark.parametrize("content", BLANK_TURNS)
def test_a_blank_user_turn_reaches_anthropic_as_a_valid_request(content: Any) -> None:
    """A user turn of whitespace alone, or of nothing, is valid Chat Completions; the
    service's converter must make a valid Anthropic request of it: no blank text block
    (``to_anthropic`` leaves out empty blocks only), and no turn left out that makes the
    assistant's text before it a prefill ending in whitespace. Drawn conversations hold no
    such turn, so that the properties above check what the paths do; this checks the
    converter alone."""
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "Where is A-1042? 我的订单在哪里？"},
        {"role": "assistant", "content": "It left Leeds. 🚚 "},
        {"role": "user", "content": content},
    ]
    sent = Sent(Step(()), None, messages)
    assert violations("chat_completions", sent) == []
    assert violations("anthropic_messages", sent) == []


@pytest.mark.parametrize("kind", [TokenWindow, PriorityWindow])
def test_a_narrowed_build_keeps_the_call_that_waits_for_results(kind: type[TokenWindow]) -> None:
    """``build(max_tokens=…)`` leaves out whole units, "pinned ones and a call still
    waiting for results never" (``WindowView.build``). ``PriorityWindow`` left the waiting
    call out, the latest user turn being the last it gives up. Found by the property above
    (``PriorityWindow/narrowed``)."""
    window = kind(2000, system="Be brief.")
    window.add("user", "请总结这份报告。 " * 300)
    call = {"role": "assistant", "content": None, "tool_calls": [{**CALL, "function": {
        "name": "search_orders", "arguments": '{"q": "A-1042"}'}}]}  # fmt: skip
    window.add(call)
    assert call in window.build(max_tokens=window.total_tokens * 3 // 4).messages


def test_the_checks_see_a_lost_waiting_call_and_a_result_without_its_call() -> None:
    """What the properties rely on can fail: a context without the waiting call, with room
    for it, is a lost call; a result without its call breaks a rule in every protocol."""
    call = {
        **TOO_LARGE_CALL,
        "tool_calls": [{**CALL, "function": {"name": "f", "arguments": "{}"}}],
    }
    question = {"role": "user", "content": "Where is A-1042?"}
    conversation = Conversation("Be brief.", ((question,),), (call,))
    [*_, waiting] = conversation.steps()
    assert lost_pending(conversation, Sent(waiting, 2000, [question]))
    assert not lost_pending(conversation, Sent(waiting, 2000, [question, call]))
    orphan = Sent(Step((question,)), 2000, [question, RESULT])
    for protocol in CHAT:
        assert violations(protocol, orphan) != []
    assert violations("responses", Sent(orphan.step, 2000, items=to_items(RESULT))) != []
