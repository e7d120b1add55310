"""The question a build must send: the newest user turn, whole, compressed, or refused.

A session whose newest message is a user turn (nothing answers it yet) is
asking something, and a context without that turn has the model answer
something else. So a build sends it: the window leaves it out last, and
when even alone with what is always sent (framing, the system prompt,
pinned messages, the rolling summary) it is too big, it goes compressed by
the window's compressor (a ``PriorityWindow``'s, or head/tail truncation
for a window configured to truncate). When that cannot make it fit either,
``MessageTooLargeError`` (a ``BudgetError``) names the sizes.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import replace

from ctxwindow.context.contracts import EventHook
from ctxwindow.errors import CompressionError, MessageTooLargeError
from ctxwindow.messages import Entry, stored_tokens
from ctxwindow.policies import Context, Decision, Window
from ctxwindow.policies.folding import Compressor, shrink_alone
from ctxwindow.policies.rules import text_of
from ctxwindow.tokens.truncate import MARKER

Question = tuple[Entry, "Entry | None"]
"""The newest user turn as stored, and as the window kept it (None: the window dropped it)."""

WHY = "the question: the newest user turn is always sent"


def asked(question: Question | None, stored: Entry, kept: Entry | None) -> Question | None:
    """The session's question once ``stored`` (kept by the window as ``kept``) is added.

    A user turn asks; an assistant or tool message answers it (or works on
    it); a system message changes nothing.
    """
    role = stored.message["role"]
    if role == "user":
        return (stored, kept)
    if role in ("assistant", "tool"):
        return None
    return question


def sends(window: Window, context: Context, question: Question) -> bool:
    """Whether ``context`` ends with the question, in the form the window keeps it."""
    stored, kept = question
    if not context.messages or kept is None:
        return False
    last = context.messages[-1]
    if last is kept.message:
        return True
    current = held(window, stored)  # the window compressed it since it was added
    return current is not None and last is current.message


def held(window: Window, stored: Entry) -> Entry | None:
    """The window's present form of a stored entry (the newest first), or None."""
    for unit in reversed(list(window.units())):
        for entry in unit.entries:
            if entry.id == stored.id:
                return entry
    return None


def with_question(
    window: Window,
    budget: int,
    question: Entry,
    on_event: EventHook | None = None,
    *,
    sent: bool = True,
) -> Context:
    """What is always sent, then ``question`` (compressed if it must be), within ``budget``.

    ``question`` is the turn as stored, not a form the window compressed
    already. Every other unit is left out: this is the context of a budget
    that has room for nothing but the question. ``sent``: as ``Window.build``'s.
    """
    always = window.build(max_tokens=window.pinned_tokens, sent=sent)
    room = budget - always.total_tokens
    if question.tokens <= room:
        asked = question
    else:
        asked = compressed(window, question, room, budget, on_event)
    context = always.plus(_row(window, question, asked), asked.message, budget=budget)
    current = held(window, question)  # left out of ``always``, and counted out: not so
    if current is None:
        return context
    report = context.report
    return replace(
        context,
        report=replace(
            report,
            evicted_entries=report.evicted_entries - 1,
            evicted_tokens=report.evicted_tokens - stored_tokens(current),
        ),
    )


def compressed(
    window: Window, question: Entry, room: int, budget: int, on_event: EventHook | None = None
) -> Entry:
    """``question`` compressed to ``room`` tokens; ``MessageTooLargeError`` if it cannot be.

    ``on_event("compressed", 1)`` is told, as a window tells of its compressions.
    """
    compressor = compressor_of(window)
    less = None
    if compressor is not None and room > 0:
        try:
            less = shrink_alone(compressor, question, room)
        except CompressionError:
            less = None  # a room below what one empty message takes
    if less is None or not says_something(less):
        how = "even compressed it does not fit" if compressor else "the window compresses nothing"
        raise MessageTooLargeError(
            f"the question (the newest user message) takes {question.tokens} tokens; a budget "
            f"of {budget} leaves it {max(room, 0)} after the {budget - room} tokens always sent "
            f"(framing, system prompt, pinned messages, summary), and {how}"
        )
    if on_event is not None:
        on_event("compressed", 1)
    return less


def check_unit_fits(unit: Sequence[Entry], room: int, budget: int) -> None:
    """``MessageTooLargeError`` if a tool unit (a call and its results) does not fit whole
    in ``room`` tokens beside what is always sent: stored, a build in ``budget`` would leave
    it out whole (a narrowed build compresses nothing), and send a context without it."""
    size = sum(entry.tokens for entry in unit)
    if size > room:
        raise MessageTooLargeError(
            f"the tool call and its results take {size} tokens; a budget of {budget} leaves"
            f" them {max(room, 0)} after the {budget - room} tokens always sent"
        )


_MARKS = re.compile(re.escape(MARKER).replace(r"\{chars\}", r"\d+").replace(r"\{tokens\}", r"\d+"))


def says_something(entry: Entry) -> bool:
    """Whether a compressed message still has some text besides the marks of the cuts
    (a head/tail cut to nothing but its marker is not a form of the question)."""
    text = _MARKS.sub("", text_of(entry.message)).replace("…", "")
    return any(char.isalnum() for char in text)


def compressor_of(window: Window) -> Compressor | None:
    """How the window makes a message smaller: its compressor, or truncation if configured."""
    compressor: Compressor | None = getattr(window, "compressor", None)  # the priority window's
    if compressor is not None:
        return compressor
    if window.oversize == "truncate":
        from ctxwindow.compress import Truncate

        return Truncate(window.tokenizer)
    return None


def _row(window: Window, question: Entry, sent: Entry) -> Decision:
    """The report's row of the question: sent whole or compressed."""
    unit = next((u for u in window.units() if u.seq == question.seq), None)
    applied = {} if unit is None else window.applied(unit, question)
    if sent is question:
        return Decision.of(question, "kept", WHY, **applied)
    return Decision.of(sent, "compressed", f"{WHY}, in what the budget leaves it", **applied)
