"""Every path that builds a context, replayed over a drawn conversation: what each sends.

A path replays a ``Conversation`` (tests/support/conversations.py) at a budget and, after
each step that builds (``Step.builds``), yields a ``Sent``: the context as chat messages
(an adapter's output converted back by the adapter's own converter), as Responses items
(the Agents session), or the documented refusal (a ``BudgetError``) given instead.
``LIBRARY_PATHS`` names the windows and the library's paths with the protocols their
contexts are checked in (the framework adapters: tests/support/adapter_paths.py).
``violations`` checks one ``Sent`` in one protocol as it would be sent (Anthropic: as the
service converts it), and ``lost_pending`` says whether it left out a call still waiting
for its results although there was room for it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from ctxwindow import ContextManager, MessageWindow, PriorityWindow, TokenWindow, count_tokens
from ctxwindow.archive.sqlite import SQLiteArchive
from ctxwindow.compress import Chain, Extractive, RollingSummary, Structured, Truncate
from ctxwindow.context import hybrid_policy
from ctxwindow.errors import BudgetError
from ctxwindow.messages import SYSTEM_ROLES
from ctxwindow.policies import Folding, Keeping, Priority, Window
from ctxwindow.policies.alternate import alternate
from ctxwindow.redact import Redactor
from ctxwindow.server.protocols.blocks import to_anthropic, with_breakpoint
from ctxwindow.stores.memory import MemoryStore
from ctxwindow.tokens import chat_tokenizer
from ctxwindow.tokens.registry import ModelRegistry
from ctxwindow.validate import Violation, check
from tests.support.conversations import Conversation, Message, Step
from tests.support.windows import hybrid_window

SESSION = "s"
TOKENIZER = chat_tokenizer("gpt-4o")
CHAT = ("chat_completions", "anthropic_messages")
STRICT = (*CHAT, "chat_template")
# What a missing answer to a call still waiting for its results is called, per protocol.
ANSWERED = ("chat.tool_call_answered", "anthropic.tool_use_answered",
            "responses.function_call_answered")  # fmt: skip
FINAL_TURN = ("anthropic.text_not_blank",)  # rules of a request's final assistant turn


@dataclass(frozen=True)
class Sent:
    """One context a path built after ``step``, within ``room`` tokens (None: a window
    counted in messages) as ``count`` counts them (the path's model); chat ``messages``, or
    Responses ``items``; ``stable`` leading messages are the prompt cache's prefix;
    ``refused``: the refusal given instead."""

    step: Step
    room: int | None
    messages: list[Message] = field(default_factory=list)
    items: list[dict[str, Any]] | None = None
    stable: int = 0
    refused: str | None = None
    count: Callable[[list[Message]], int] = count_tokens


Run = Callable[[Conversation, int], Iterator[Sent]]


@dataclass(frozen=True)
class Path:
    """A way to build contexts, the protocols they are checked in, and whether it keeps the
    newest turn and a call waiting for results when they fit (LangChain's ``start_on``
    leaves out whatever comes before a human turn)."""

    run: Run
    protocols: tuple[str, ...] = CHAT
    holds_pending: bool = True


# -- the checks ------------------------------------------------------------------------------


def request(protocol: str, sent: Sent) -> Any:
    """The request ``sent`` makes in ``protocol`` (Anthropic: the service's conversion,
    with its cache breakpoint)."""
    if protocol == "responses":
        return {"model": "gpt-4o", "input": sent.items}
    if protocol == "chat_template":
        return sent.messages
    if protocol == "anthropic_messages":
        system, turns = to_anthropic(sent.messages)
        with_breakpoint(system, turns, sent.messages[: sent.stable])
        body: dict[str, Any] = {"model": "claude-sonnet-4-5", "max_tokens": 1024}
        return {**body, "messages": turns, **({"system": system} if system else {})}
    return {"model": "gpt-4o", "messages": sent.messages}


def empty(sent: Sent) -> bool:
    """Whether ``sent`` holds nothing of the conversation: no message but the system prompt,
    no item (every turn too large for the budget, or none yet)."""
    if sent.items is not None:
        return not sent.items
    return all(m["role"] in SYSTEM_ROLES for m in sent.messages)


def violations(protocol: str, sent: Sent) -> list[Violation]:
    """The rules ``sent`` breaks in ``protocol``, but the missing answers of the calls still
    waiting for results (the conversation has not got them either).

    A request without a message is nothing to send (no provider takes one), and is not
    checked: a context with nothing of the conversation (``empty``; ``test_valid_paths``
    says when a path may build one), or whose Anthropic form has no message (the service's
    converter leaves out a message with no content blocks: empty user texts).
    """
    if empty(sent):
        return []
    body = request(protocol, sent)
    if protocol == "anthropic_messages" and not body["messages"]:
        return []
    return [v for v in check(protocol, body) if not awaited(v, sent.step)]


def awaited(violation: Violation, step: Step) -> bool:
    """Whether ``violation`` is the conversation's own, not yet the path's, after ``step``: a
    missing answer of a call still waiting for results; and, while one waits, what only a
    request ending with an assistant turn breaks (no request is sent before the results
    come; when they do, the request ends with them)."""
    if not step.waiting:
        return False
    if violation.rule in FINAL_TURN and "final assistant" in violation.message:
        return True
    return violation.rule in ANSWERED and any(repr(i) in violation.message for i in step.pending)


def holds(sent: Sent, waiting: tuple[Message, ...]) -> bool:
    """Whether ``sent`` has the waiting call (every id of it) and each result it got."""
    calls = {c["id"] for c in waiting[0]["tool_calls"]}
    results = {m["tool_call_id"] for m in waiting[1:]}
    if sent.items is not None:
        sent_calls = {i.get("call_id") for i in sent.items if i.get("type") == "function_call"}
        outputs = {i.get("call_id") for i in sent.items if i.get("type") == "function_call_output"}
    else:
        sent_calls = {c["id"] for m in sent.messages for c in m.get("tool_calls") or ()}
        outputs = {m["tool_call_id"] for m in sent.messages if m["role"] == "tool"}
    return calls <= sent_calls and results <= outputs


def fits(
    conversation: Conversation,
    messages: tuple[Message, ...],
    room: int | None,
    count: Callable[[list[Message]], int] = count_tokens,
) -> bool:
    """Whether ``messages`` with the system prompt take at most ``room`` less a sixth (what
    a rolling summary, redaction placeholders or a model's own count may add), counted by
    ``count`` (as gpt-4o bills them unless the path's model counts otherwise); always, for a
    window counted in messages."""
    if room is None:
        return True
    head = conversation.messages()[:1] if conversation.system is not None else []
    return count([*head, *messages]) + room // 6 + 20 <= room


def lost_pending(conversation: Conversation, sent: Sent) -> bool:
    """Whether ``sent`` leaves out the waiting call, or a result of it, although they fit."""
    waiting = sent.step.waiting
    if not waiting or sent.refused is not None or holds(sent, waiting):
        return False
    return fits(conversation, waiting, sent.room, sent.count)


# -- windows ---------------------------------------------------------------------------------

Add = Callable[[Window, Message, int], object]
PRIORITIES = [None, Priority.LOW, Priority.HIGH, Priority.MEDIUM]


def plain_add(window: Window, message: Message, step: int) -> object:
    return window.add(message)


def ranked_add(window: Window, message: Message, step: int) -> object:
    """Add with a priority that changes from step to step (``PriorityWindow``)."""
    assert isinstance(window, PriorityWindow)
    return window.add(message, priority=PRIORITIES[step % len(PRIORITIES)])


def window_path(
    make: Callable[[Conversation, int], Window],
    finish: Callable[[list[Message]], list[Message]] = list,
    add: Add = plain_add,
    protocols: tuple[str, ...] = CHAT,
    narrowed: bool = False,
) -> Path:
    """A window made for the budget, each message added in turn, ``build()`` after each
    step that builds, its messages ``finish``-ed; ``narrowed``: ``build(max_tokens=…)``
    with a quarter, a half or three quarters of what the window holds, by turns (a call's
    budget below the window's). A refused add ends the replay: the app cannot go on as
    planned (its tool results would have no call)."""

    def run(conversation: Conversation, budget: int) -> Iterator[Sent]:
        window = make(conversation, budget)
        for i, step in enumerate(conversation.steps()):
            try:
                for message in step.messages:
                    add(window, message, i)
            except BudgetError as exc:
                yield Sent(step, room_of(window, None), refused=str(exc))
                return
            if step.builds:
                narrow = max(1, window.total_tokens * (1 + i % 3) // 4) if narrowed else None
                yield built(window, step, narrow, finish)

    return Path(run, protocols)


def built(
    window: Window, step: Step, narrow: int | None, finish: Callable[[list[Message]], list[Message]]
) -> Sent:
    """The window's context after ``step`` (in ``narrow`` tokens), or its refusal."""
    room = room_of(window, narrow)
    try:
        context = window.build(max_tokens=narrow)
    except BudgetError as exc:
        return Sent(step, room, refused=str(exc))
    stable = context.report.stable_messages
    return Sent(step, room, finish(context.messages), stable=stable)


def room_of(window: Window, narrow: int | None) -> int | None:
    """The tokens a context of the window may take: ``narrow``, else its budget (None for
    a window counted in messages)."""
    if narrow is not None:
        return narrow
    return window.budget if window.budget_in_tokens else None


def messages_for(budget: int) -> int:
    """A message budget for a token budget: a message for about 40 tokens, at least the
    four of the largest tool unit (so a waiting call always fits)."""
    return max(4, budget // 40)


def with_system(window: Window, conversation: Conversation) -> Window:
    if conversation.system is not None:
        window.set_system(conversation.system)
    return window


def folding(budget: int, *, compress: bool, summarize: bool) -> Folding:
    compressor = Chain(Structured(TOKENIZER), Extractive(TOKENIZER), Truncate(TOKENIZER))
    fold = RollingSummary(Extractive(TOKENIZER), TOKENIZER).fold
    return Folding(
        compressor=compressor if compress else None,
        compress_threshold=max(budget // 8, 20),
        summarizer=fold if summarize else None,
        summary_tokens=max(budget // 8, 20),
        fold_tokens=30,
    )


def priority_window(conversation: Conversation, budget: int) -> Window:
    """Priorities (``ranked_add``), caps per category, a small recent reserve. The caps
    take older units of their category, never a newest one that ``fits`` (a unit alone
    over its cap is evicted: ``check`` does not model that)."""
    cap = max(budget - budget // 6 - 20, 1)
    keeping = Keeping(caps={"tool": cap, "document": cap}, reserve_recent=40)
    return PriorityWindow(budget, system=conversation.system, keeping=keeping, oversize="drop")


def folding_window(compress: bool, summarize: bool) -> Callable[[Conversation, int], Window]:
    def make(conversation: Conversation, budget: int) -> Window:
        how = folding(budget, compress=compress, summarize=summarize)
        return PriorityWindow(budget, system=conversation.system, oversize="drop", folding=how)

    return make


def token_window(oversize: Any = "drop", low_water: float | None = None) -> Any:
    def make(conversation: Conversation, budget: int) -> Window:
        system = conversation.system
        return TokenWindow(budget, system=system, oversize=oversize, low_water=low_water)

    return make


def message_window(low_water: float | None = None) -> Any:
    def make(conversation: Conversation, budget: int) -> Window:
        return MessageWindow(
            messages_for(budget), system=conversation.system, oversize="drop",
            low_water=low_water,
        )  # fmt: skip

    return make


def stepping_hybrid(conversation: Conversation, budget: int) -> Window:
    return with_system(hybrid_policy(cache=True)(budget, TOKENIZER), conversation)


def strictly(mode: str) -> Callable[[list[Message]], list[Message]]:
    return lambda messages: alternate(messages, mode)


# -- the manager -----------------------------------------------------------------------------

STRICT_MODELS = ModelRegistry.from_config(
    {"models": {f"strict-{mode}": {"context_window": 32_768, "estimate": True,
                                   "strict_roles": mode} for mode in ("merge", "bridge")}}
)  # fmt: skip


def manager_path(protocols: tuple[str, ...] = CHAT, **options: Any) -> Path:
    """A ``ContextManager`` over a ``MemoryStore`` (``options``: its keywords, a fresh
    archive for ``archive=True``), each message added in turn, ``build`` after each step
    that builds; a ``BudgetError`` of a build is its documented refusal."""

    def run(conversation: Conversation, budget: int) -> Iterator[Sent]:
        given = dict(options, archive=SQLiteArchive()) if options.get("archive") else options
        manager = ContextManager(MemoryStore(), budget=budget, **given)
        try:
            yield from replay(manager, conversation, budget)
        finally:
            manager.close()

    return Path(run, protocols)


def replay(manager: ContextManager, conversation: Conversation, budget: int) -> Iterator[Sent]:
    for message in conversation.messages()[:1] if conversation.system is not None else []:
        manager.add(SESSION, message)
    for step in conversation.steps():
        for message in step.messages:
            manager.add(SESSION, message)
        if not step.builds:
            continue
        try:
            context = manager.build(SESSION)
        except BudgetError as exc:
            yield Sent(step, budget, refused=str(exc))
            continue
        yield Sent(step, budget, context.messages, stable=context.report.stable_messages)


def strict_manager(mode: str) -> Path:
    """The manager for a model whose template wants alternating roles, counted by an
    estimate: the budget grows by what the estimate adds to the system prompt (budgets are
    drawn just above it as gpt-4o counts it), and what fits is judged by the estimate's
    count (it counts CJK text higher than gpt-4o does: a question gpt-4o would take can be
    refused)."""
    model = f"strict-{mode}"
    path = manager_path(STRICT, model=model, models=STRICT_MODELS)
    estimate = STRICT_MODELS.tokenizer(model).count

    def run(conversation: Conversation, budget: int) -> Iterator[Sent]:
        head = conversation.messages()[:1] if conversation.system is not None else []
        grown = budget + max(estimate(head) - count_tokens(head), 0)
        for sent in path.run(conversation, grown):
            yield replace(sent, count=estimate)

    return Path(run, STRICT)


LIBRARY_PATHS: dict[str, Path] = {
    "MessageWindow": window_path(message_window()),
    "TokenWindow": window_path(token_window()),
    "TokenWindow/truncate": window_path(token_window("truncate")),
    "TokenWindow/narrowed": window_path(token_window(), narrowed=True),
    "PriorityWindow": window_path(priority_window, add=ranked_add),
    "PriorityWindow/narrowed": window_path(priority_window, add=ranked_add, narrowed=True),
    "hybrid": window_path(lambda c, budget: with_system(hybrid_window(budget), c)),
    "compression": window_path(folding_window(compress=True, summarize=False)),
    "rolling-summary": window_path(folding_window(compress=False, summarize=True)),
    "manager/recall": manager_path(archive=True),
    "manager/recall/no-cache": manager_path(archive=True, prompt_cache=False),
    "redact/storage": manager_path(redactor=Redactor()),
    "redact/context": manager_path(redactor=Redactor(), redact="context"),
    "steps/TokenWindow": window_path(token_window(low_water=0.75)),
    "steps/MessageWindow": window_path(message_window(low_water=0.5)),
    "steps/hybrid": window_path(stepping_hybrid),
    "alternate/merge": window_path(token_window(), strictly("merge"), protocols=STRICT),
    "alternate/bridge": window_path(token_window(), strictly("bridge"), protocols=STRICT),
    "strict/merge": strict_manager("merge"),
    "strict/bridge": strict_manager("bridge"),
}
