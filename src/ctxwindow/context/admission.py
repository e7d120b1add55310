"""Admission: a new message checked, redacted and counted before it is stored or previewed.

``Admission`` is the part of the managers' ``Core`` (``context/core.py``)
that turns what a caller adds into the entries to store: validated (tool
results answer waiting calls, in order), redacted (``redact="storage"``),
tokenized once. It also refuses a batch that would overfill the session or
that the build after it could not send, and readies the message a preview
ends with.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ctxwindow.context.batch import check_room
from ctxwindow.context.contracts import EventHook
from ctxwindow.context.question import check_unit_fits, compressed
from ctxwindow.context.session import Session, waiting_after
from ctxwindow.errors import (
    BudgetError,
    InvalidMessageError,
    OrphanToolResultError,
    PinnedOverBudgetError,
)
from ctxwindow.messages import SYSTEM_ROLES, Entry, Message, make_message
from ctxwindow.policies import Window
from ctxwindow.redact.redactor import RedactFn
from ctxwindow.tokens.chat import ChatTokenizer


class Admission:
    """The managers' admission of new messages (a part of ``Core``, which sets these fields)."""

    tokenizer: ChatTokenizer
    redactor: RedactFn | None
    redact_context: bool  # redacted as each context is built, not before storing
    on_event: EventHook | None

    def prepare(
        self,
        session: Session,
        message: Mapping[str, Any],
        pin: bool,
        metadata: Mapping[str, Any] | None,
        kind: str | None,
        pending: frozenset[str] | None = None,
    ) -> Entry:
        """Validate, redact and tokenize a new message: the entry to store.

        ``pending``: the tool calls waiting for results (default: the window's).
        """
        clean = make_message(message)  # validated before a redactor sees it
        if self.redactor is not None and not self.redact_context:
            clean = make_message(self.redactor(dict(clean)))
        pending = session.window.pending_tool_calls if pending is None else pending
        dropped = session.window.dropped_tool_calls  # their results are taken, and dropped
        if clean["role"] == "tool" and clean["tool_call_id"] not in pending | dropped:
            raise OrphanToolResultError(
                f"tool result for call {clean['tool_call_id']!r} does not answer a waiting call"
            )
        if clean["role"] != "tool" and pending:
            raise InvalidMessageError(
                f"tool calls {sorted(pending)} have no results yet; add their tool messages first"
            )
        entry = Entry(clean, self.tokenizer.message_tokens(clean), 0)
        entry.pinned = pin or clean["role"] in SYSTEM_ROLES
        entry.metadata = dict(metadata or {})
        if kind is not None:
            entry.kind = kind
        return entry

    def prepare_all(
        self, session: Session, messages: Sequence[Message], metadata: Mapping[str, Any] | None
    ) -> list[Entry]:
        """The entries of a batch, each prepared before any is stored: tool calls and their
        results checked in order, as the window will take them."""
        pending, entries = session.window.pending_tool_calls, []
        for message in messages:
            entries.append(self.prepare(session, message, False, metadata, None, pending))
            pending = waiting_after(pending, entries[-1].message)
        return entries

    def prepare_batch(
        self,
        session: Session,
        messages: Sequence[Message],
        metadata: Mapping[str, Any] | None,
        max_messages: int | None,
        budget: int | None,
    ) -> list[Entry]:
        """The entries of a batch (``prepare_all``), refused before any is stored if they
        would take the session over ``max_messages`` (``SessionFullError``) or if the build
        in ``budget`` after them could not send them (``check_sendable``)."""
        entries = self.prepare_all(session, messages, metadata)
        if max_messages is not None:  # the window has caught up: its last seq is the store's
            check_room(session.last_seq, len(entries), max_messages)
        if budget is not None and entries:
            self.check_sendable(session, entries, budget)
        return entries

    def check_sendable(self, session: Session, entries: list[Entry], budget: int) -> None:
        """Refuse a batch (before it is stored) that the build in ``budget`` after it could
        not send: tool calls of the batch left without their results (no provider takes a
        request that ends so: ``InvalidMessageError``), or a question (the batch's last
        user turn) that cannot fit, not even compressed, beside what is always sent
        (``MessageTooLargeError``, as ``build`` would raise it after storing), or a tool
        call and its results that do not fit whole beside it (a build would leave them
        out, and send a context without them). A batch that holds a system message is
        checked against a lower bound of what is then always sent: it and the priming."""
        pending = session.window.pending_tool_calls
        for entry in entries:
            pending = waiting_after(pending, entry.message)
        if pending and any(entry.message.get("tool_calls") for entry in entries):
            calls = ", ".join(sorted(pending))
            raise InvalidMessageError(
                f"the new turns end with tool calls that have no result ({calls}): send each"
                " call's result after it, in the same request"
            )
        last, window = entries[-1], session.window
        # With system messages of its own, the batch changes what is always sent: at least
        # they and the reply priming (a lower bound: a refusal here is one build would make)
        pinned = sum(entry.tokens for entry in entries if entry.pinned)
        always = pinned + self.tokenizer.count([]) if pinned else window.pinned_tokens
        if pinned and always > budget:
            raise PinnedOverBudgetError(
                f"a budget of {budget} is below the {always} tokens of the new system messages"
            )
        if last.message["role"] == "tool":  # framing, pinned messages, summary: never left out
            check_unit_fits(closed_unit(window, entries), budget - always, budget)
        elif last.message["role"] == "user" and last.tokens > budget - always:
            if not pinned:  # the summary too, as the build sends it
                always = window.build(max_tokens=window.pinned_tokens, sent=False).total_tokens
            if last.tokens > budget - always:
                compressed(window, last, budget - always, budget)

    def previewed(self, session: Session, message: Mapping[str, Any], budget: int) -> Entry:
        """A message to preview, validated (and redacted as ``add`` would), with its tokens.

        A user turn is the question: compressed if with what is always sent it
        does not fit ``budget`` (``MessageTooLargeError`` if it cannot be).
        """
        clean = make_message(message)
        if clean["role"] == "tool" or clean["role"] in SYSTEM_ROLES:
            raise InvalidMessageError("preview takes a new user or assistant turn")
        if self.redactor is not None:
            clean = make_message(self.redactor(dict(clean)))
        entry = Entry(clean, self.tokenizer.message_tokens(clean), -1)
        room = budget - session.window.pinned_tokens
        if entry.tokens > room:
            if clean["role"] != "user":
                raise BudgetError(
                    f"the message takes {entry.tokens} tokens, over the {room} the budget of "
                    f"{budget} leaves after what is always sent"
                )
            entry = compressed(session.window, entry, room, budget, self.on_event)
        return entry


def closed_unit(window: Window, entries: Sequence[Entry]) -> list[Entry]:
    """The tool unit a batch ending in tool results closes: its call (in the batch, else
    the window's open unit) and every result of it."""
    call = next((i for i in range(len(entries) - 1, -1, -1)
                 if entries[i].message.get("tool_calls")), None)  # fmt: skip
    if call is not None:
        return list(entries[call:])
    opened = window.open_unit
    return [*(opened.entries if opened is not None else ()), *entries]
