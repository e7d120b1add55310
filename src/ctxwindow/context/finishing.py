"""Finishing: the context as it is sent, built within the budget from the window and recall.

``Finishing`` is the part of the managers' ``Core`` (``context/core.py``)
that ends a build: the window built in the budget less the recalled units,
those merged in at their places (``with_recalled`` reports them), the
question kept last; then the context finished as the model takes it,
redacted (``redact="context"``, each message once) and with one system
message and alternating roles (``ModelInfo.strict_roles``), rebuilt with
less room when finishing costs more tokens than it saves.
"""

from __future__ import annotations

from dataclasses import replace

from ctxwindow.context.contracts import EventHook
from ctxwindow.context.question import Question, sends, with_question
from ctxwindow.context.session import Session
from ctxwindow.errors import BudgetError
from ctxwindow.messages import SYSTEM_ROLES, Entry, Message, Unit, stored_tokens
from ctxwindow.policies import Context
from ctxwindow.policies.alternate import alternate, is_alternating
from ctxwindow.policies.explain import Decision, Decisions, Report
from ctxwindow.policies.rules import text_of
from ctxwindow.recall import Recall
from ctxwindow.redact.redactor import RedactFn, redacted_preview
from ctxwindow.tokens.chat import ChatTokenizer
from ctxwindow.tokens.models import StrictRoles

RECALLED = "recalled: matched the query"
CARRIED = "recalled for an earlier turn: kept in place for the prompt cache"
SQUEEZED = "one of the newest messages, compressed to fit this context beside what it recalls"


class Finishing:
    """The end of the managers' builds (a part of ``Core``, which sets these fields)."""

    tokenizer: ChatTokenizer
    strict_roles: StrictRoles | None
    redactor: RedactFn | None
    redact_context: bool  # redacted as each context is built, not before storing
    on_event: EventHook | None

    @staticmethod
    def merge(
        context: Context,
        recalled: list[Unit],
        budget: int,
        carried: frozenset[str] = frozenset(),
        squeezed: frozenset[str] = frozenset(),
    ) -> Context:
        """The window's context, built with the recalled units in place, reported so.

        (The window was built in ``budget`` less the recalled units' room, and
        put each recalled unit at its original position, its seq, or with
        ``prompt_cache`` where it was recalled: ``Unit.at``; the ``squeezed``
        newest messages in place of their whole form, which it left out.)
        """
        if not recalled:
            return context
        report = with_recalled(
            context.report, recalled, budget, context.total_tokens, carried, squeezed
        )
        return replace(context, report=report)

    def context(
        self,
        session: Session,
        budget: int,
        recalled: Recall,
        question: Question | None,
        *,
        sent: bool = True,
    ) -> Context:
        """The context to send, ``finished`` (redacted, roles alternating) and within budget.

        It ends with the ``question`` (see ``context/question.py``), if any.
        A placeholder or a bridging message can take more tokens than it
        saves: then the context is built with less room, the largest room that fits.
        ``sent=False``: a context not sent (a preview, a count), whose cut the
        window does not take as a hint for its next step (``Window.build``).
        """
        built = self.build_window(session, budget, recalled, question, sent=sent)
        if not self.redact_context and self.strict_roles is None:
            return built
        fitted = self.finished(session, built, budget)
        if fitted.total_tokens > budget:
            overshoot = fitted.total_tokens - budget
            room = budget - overshoot
            fitted = self.fit_finished(session, budget, recalled, question, room, sent=sent)
        if self.redact_context:
            kept = {id(message) for message in fitted.messages}
            session.redacted = {k: hit for k, hit in session.redacted.items() if id(hit[1]) in kept}
        return fitted

    def finished(self, session: Session, built: Context, budget: int) -> Context:
        """``built`` as it is sent: redacted (``redact="context"``), then with alternating
        roles (a model whose template wants them: ``ModelInfo.strict_roles``)."""
        if self.redact_context:
            built = self.redacted(session, built, budget)
        if self.strict_roles is not None:
            built = self.alternated(built)
        return built

    def alternated(self, built: Context) -> Context:
        """``built`` with one system message and alternating roles, its tokens recounted.

        Strict templates also take one system message: the system prompt and
        the rolling summary are joined (a blank line between them).
        """
        messages = built.messages
        systems = sum(1 for m in messages[:2] if m["role"] in SYSTEM_ROLES)
        if systems < 2 and is_alternating(messages):
            return built
        assert self.strict_roles is not None
        sent = alternate(_one_system(messages), self.strict_roles)
        count = self.tokenizer.message_tokens
        extra = sum(map(count, sent)) - sum(map(count, messages))
        report = built.report
        report = replace(report, used=report.used + extra, framing=report.framing + extra)
        return Context(sent, built.total_tokens + extra, report)

    def fit_finished(
        self,
        session: Session,
        budget: int,
        recalled: Recall,
        question: Question | None,
        room: int,
        *,
        sent: bool = True,
    ) -> Context:
        """The finished context of the largest room up to ``room`` that fits in ``budget``.

        ``room`` (the budget less the overshoot) is tried first and usually
        fits; bisection then finds the largest room below the budget that does.
        The rooms tried are not sent: the one found is built again if it is.
        """
        best, best_room, low, high = None, 0, 0, budget - 1
        mid = min(max(room, 0), high)
        while low <= high:
            try:
                built = self.build_window(session, mid, recalled, question, sent=False)
            except BudgetError:  # too little room for what must be kept: try more
                low = mid + 1
            else:
                attempt = self.finished(session, built, budget)
                if attempt.total_tokens > budget:
                    high = mid - 1
                else:
                    best, best_room, low = attempt, mid, mid + 1
            mid = (low + high) // 2
        if best is None:
            raise BudgetError(f"the finished context does not fit in {budget} tokens")
        if sent:  # the same build, now as the one sent (``Window.build``'s hint)
            self.build_window(session, best_room, recalled, question)
        return best

    def redacted(self, session: Session, built: Context, budget: int) -> Context:
        """``built`` with its messages redacted and its tokens corrected (maybe over budget)."""
        hits = [self.redact_one(session, m) for m in built.messages]
        extra = sum(change for _, _, change in hits)
        redact, decisions = self.redactor, built.report.decisions
        assert redact is not None

        def previews() -> list[Decision]:  # the report shows no more than the model sees
            return [replace(d, preview=redacted_preview(d.preview, redact)) for d in decisions]

        report = replace(
            built.report, budget=budget, used=built.report.used + extra,
            framing=built.report.framing + extra, decisions=Decisions(previews),
        )  # fmt: skip
        return Context([clean for _, clean, _ in hits], built.total_tokens + extra, report)

    def redact_one(self, session: Session, message: Message) -> tuple[Message, Message, int]:
        """(message, its redacted copy, the tokens that adds), redacting each message once."""
        assert self.redactor is not None
        hit = session.redacted.get(id(message))
        if hit is None or hit[0] is not message:
            clean = self.redactor(dict(message))
            change = 0
            if clean != message:
                change = self.tokenizer.message_tokens(clean) - self.tokenizer.message_tokens(
                    message
                )
            hit = session.redacted[id(message)] = (message, clean, change)
        return hit

    def build_window(
        self,
        session: Session,
        budget: int,
        recalled: Recall,
        question: Question | None,
        *,
        sent: bool = True,
    ) -> Context:
        """The window in ``budget`` less the recalled units, and they merged in.

        The ``question`` is left out last; if the window left it out all the
        same, recall goes first, then all but what is always sent (and the
        question is compressed if it must be).
        """
        keep = recalled.keep if question is None else recalled.keep | {question[0].id}
        window, units = session.window, recalled.units
        # the recalled turns' room is exact, the rest in steps; what a step leaves empty for
        # the next turns stays empty
        room = budget - recalled.tokens - recalled.spare
        context = window.build(
            max_tokens=room, keep=keep, added=units, sent=sent, grid=budget, omit=recalled.squeezed
        )
        built = self.merge(context, units, budget, recalled.carried, recalled.squeezed)
        if question is None or sends(session.window, built, question):
            return built
        if recalled.units:
            return self.build_window(session, budget, Recall(), question, sent=sent)
        return with_question(session.window, budget, question[0], self.on_event, sent=sent)


def _one_system(messages: list[Message]) -> list[Message]:
    """``messages`` with their leading system messages joined into the first one."""
    head = 0
    while head < len(messages) and messages[head]["role"] in SYSTEM_ROLES:
        head += 1
    if head < 2:
        return messages
    texts = [text_of(m) for m in messages[:head]]
    system = {"role": messages[0]["role"], "content": "\n\n".join(t for t in texts if t)}
    return [system, *messages[head:]]


def with_recalled(
    report: Report,
    recalled: list[Unit],
    budget: int,
    tokens: int,
    carried: frozenset[str] = frozenset(),
    squeezed: frozenset[str] = frozenset(),
) -> Report:
    """The window's ``report`` with the recalled units' tokens and rows: a recalled entry
    was evicted, its row is now ``recalled`` (and it is no longer counted out). Recall,
    not the window's ranking, chose them: their rows have no priority. A ``squeezed``
    entry (one of the newest messages, compressed for this context) is ``compressed``."""
    entries = [entry for unit in recalled for entry in unit.entries]

    def row(e: Entry) -> Decision:
        if e.id in squeezed:
            return Decision.of(e, "compressed", SQUEEZED)
        reason = CARRIED if e.id in carried else RECALLED
        return Decision.of(e, "recalled", reason, category="recalled")

    def rows() -> list[Decision]:
        return [row(e) for e in entries]

    return report.amended(
        rows,
        budget=budget,
        used=tokens + report.reserve_output,
        evicted_entries=max(0, report.evicted_entries - len(entries)),
        evicted_tokens=max(0, report.evicted_tokens - sum(map(stored_tokens, entries))),
        recalled_entries=len(entries) - len(squeezed),
    )
