"""``PriorityWindow``: the token budget as the hard limit, value deciding what goes.

On top of ``TokenWindow``'s guarantees (whole units, pinned kept, exact
counts), it gives up the least valuable content first:

- every entry gets a ``Priority`` from ordered rules (first match wins); the
  latest user turn is raised to HIGH; CRITICAL entries are never evicted;
- the newest units, up to ``reserve_recent`` tokens, are evicted last;
- categories (``document``, ``recalled``, ``tool``, ``chat``, ``summary``,
  ``system``) can be capped, so one cannot crowd out the others;
- the victim is the unit with the lowest priority, then the most tokens per
  unit of importance (``metadata["importance"]``, default 1), then the
  oldest — taken from a heap per category, O(log n) per unit;
- a victim above ``compress_threshold`` tokens is first handed to the
  compressor; if the compressed form is small enough it replaces the unit in
  the window (the original stays wherever the caller stores it);
- evicted units can be folded by a ``summarizer`` into one rolling summary,
  pinned after the system prompt and capped at ``summary_tokens``; evictions
  are folded in batches of ``fold_tokens`` (default half the summary budget),
  since each fold re-summarizes the summary;
- repeated small talk keeps only the latest greeting or acknowledgement;
- ``build()`` returns the messages with a ``Report`` of every decision, and
  can narrow the budget per call (``budget_hook``).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from typing import Any

from ctxwindow.errors import PinnedOverBudgetError
from ctxwindow.messages import SYSTEM_ROLES, Entry, Message, Unit, make_message
from ctxwindow.policies.base import EvictHook, Given, Oversize
from ctxwindow.policies.explain import Context, Report
from ctxwindow.policies.folding import Compressor, Folds, Summarizer, fold, shrink, shrink_alone
from ctxwindow.policies.journal import Journal
from ctxwindow.policies.rules import (
    DEFAULT_RULES,
    Priority,
    Rule,
    assign,
    category_of,
    check_rules,
    infer_kind,
    is_small_talk,
)
from ctxwindow.policies.token_window import TokenWindow
from ctxwindow.policies.victims import VictimQueue
from ctxwindow.tokens.chat import ChatTokenizer

BudgetHook = Callable[[Any], int]


class PriorityWindow(TokenWindow):
    """A token window that evicts by priority, compresses first, and explains itself.

    >>> w = PriorityWindow(max_tokens=200, system="Be brief.", reserve_recent=0)
    >>> _ = w.add("user", "Remember: my passport number is X1234567.")
    >>> for i in range(30):
    ...     _ = w.add("assistant", f"Noted, item {i} of a long and ordinary list.")
    >>> any("X1234567" in m["content"] for m in w.messages())
    True
    """

    def __init__(
        self,
        max_tokens: int,
        model: str = "gpt-4o",
        system: str | None = None,
        reserve_output: int = 0,
        *,
        rules: Sequence[Rule] = DEFAULT_RULES,
        caps: Mapping[str, int] | None = None,
        reserve_recent: int | None = None,
        compressor: Compressor | None = None,
        compress_threshold: int = 2000,
        summarizer: Summarizer | None = None,
        summary_tokens: int = 800,
        fold_tokens: int | None = None,
        dedupe_small_talk: bool = True,
        document_tokens: int = 1000,
        budget_hook: BudgetHook | None = None,
        log_size: int = 10_000,
        tools: Sequence[Mapping[str, Any]] | None = None,
        oversize: Oversize = "error",
        on_evict: EvictHook | None = None,
        tokenizer: ChatTokenizer | None = None,
        estimate: bool = False,
    ) -> None:
        self.rules = check_rules(rules)
        self.caps = dict(caps or {})
        self._reserve_recent = reserve_recent
        self.compressor = compressor
        self.compress_threshold = compress_threshold
        self.summarizer = summarizer
        self.summary_tokens = summary_tokens
        # Folding re-summarizes the summary, so evictions are folded in batches.
        self.fold_tokens = fold_tokens if fold_tokens is not None else max(64, summary_tokens // 2)
        self._folds = Folds()  # evicted, not yet in the summary
        self.dedupe_small_talk = dedupe_small_talk
        self.document_tokens = document_tokens
        self.budget_hook = budget_hook
        self._live: dict[int, Unit] = {}  # unpinned kept units by seq, in order
        self._messages: dict[int, Message] = {}  # every kept message by entry seq, in order
        self._queue = VictimQueue(self._live, lambda: self.reserve_recent)
        self._category_tokens: dict[str, int] = {}
        self._small_talk: Unit | None = None
        self._summary: Unit | None = None
        self._journal = Journal(log_size)  # what left or changed, for reports
        self._cause = "over budget"
        super().__init__(
            max_tokens,
            model,
            system,
            reserve_output,
            tools=tools,
            oversize=oversize,
            on_evict=on_evict,
            tokenizer=tokenizer,
            estimate=estimate,
        )

    def set_system(self, content: str | list[Any]) -> None:
        cap = self.caps.get("system")
        size = self.tokenizer.message_tokens({"role": "system", "content": content})
        if cap is not None and size > cap:
            raise PinnedOverBudgetError(
                f"the system prompt needs {size} tokens; its category cap is {cap}"
            )
        super().set_system(content)
        assert self._system is not None
        self._system.entries[0].priority = int(Priority.CRITICAL)
        self._system.priority, self._system.category = int(Priority.CRITICAL), "system"
        self._category_tokens["system"] = self._system.size

    @property
    def reserve_recent(self) -> int:
        """Tokens of the newest units evicted last (default: a quarter of the budget, <= 2,000)."""
        if self._reserve_recent is not None:
            return self._reserve_recent
        return min(2000, self.budget // 4)

    # -- adding ------------------------------------------------------------------

    def add(
        self,
        role_or_message: str | Mapping[str, Any],
        content: Any = None,
        *,
        pin: bool = False,
        metadata: Mapping[str, Any] | None = None,
        priority: Priority | int | None = None,
        kind: str | None = None,
        tokens: int | None = None,
        entry_id: str | None = None,
    ) -> Entry | None:
        """Add a message; ``priority`` and ``kind`` override the rules and inference.

        ``metadata={"important": True}`` marks a turn HIGH; ``"importance"``
        (a positive number, default 1) weighs it among its priority.
        """
        meta = dict(metadata or {})
        if priority is not None:
            meta["priority"] = int(Priority(priority))
        if kind is not None:
            meta["kind"] = kind
        return super().add(
            role_or_message, content, pin=pin, metadata=meta, tokens=tokens, entry_id=entry_id
        )

    def _entry(
        self, message: Message, pin: bool, metadata: Mapping[str, Any] | None, given: Given
    ) -> Entry | None:
        meta = dict(metadata or {})
        given_kind = meta.pop("kind", None)
        entry = super()._entry(message, pin, meta, given)
        if entry is not None:
            entry.kind = infer_kind(message, entry.tokens, given_kind, self.document_tokens)
            chosen = meta.get("priority")
            entry.priority = Priority.CRITICAL if pin else _priority(entry, self.rules, chosen)
        return entry

    def _track(self, unit: Unit) -> None:
        entry = unit.entries[0]
        unit.priority = entry.priority
        unit.category = category_of(entry)
        self._live[entry.seq] = unit
        self._queue.track(unit)
        self._category_tokens[unit.category] = (
            self._category_tokens.get(unit.category, 0) + unit.size
        )
        if self.dedupe_small_talk and is_small_talk(entry):
            self._forget_small_talk(unit)

    def _admit(self, unit: Unit) -> None:
        entry = unit.entries[0]
        if not entry.pinned and entry.priority >= Priority.CRITICAL:
            entry.pinned = True  # a CRITICAL rule (a system message) pins the entry
            self._require_pinned_fit(self._pinned_used + unit.size, "CRITICAL entries")
        super()._admit(unit)
        if unit.pinned:
            unit.priority, unit.category = int(Priority.CRITICAL), category_of(entry)
            self._count_category(unit, +1)
        self._enforce_cap(unit.category, keep=unit)

    def _grown(self, unit: Unit, delta: int) -> None:
        self._category_tokens[unit.category] = self._category_tokens.get(unit.category, 0) + delta
        self._queue.grown(unit, delta)

    def _forget_small_talk(self, unit: Unit) -> None:
        previous, self._small_talk = self._small_talk, unit
        if previous is not None and previous.seq in self._live:
            self._evict_now(previous, "repeated small talk")

    def _pop_victim(self, keep: Unit | None) -> Unit | None:
        return self._queue.take(None, keep)

    def _untrack_newest(self, unit: Unit) -> None:
        self._queue.untrack_newest(unit)
        self._live.pop(unit.seq, None)

    # -- compression, caps, eviction ----------------------------------------------------

    def _fit_oversize(self, entries: list[Entry], entry: Entry, room: int) -> Entry | None:
        """Compress a message that alone is too big before the oversize policy applies."""
        size = self._measure(entries)
        if size <= room or self.compressor is None:
            return super()._fit_oversize(entries, entry, room)
        less = shrink_alone(self.compressor, entry, room - (size - entry.tokens))
        if less is not None:
            self._log_compressed(entry, less, "larger than the whole budget")
            return less
        return super()._fit_oversize(entries, entry, room)

    def _shrink(self, unit: Unit) -> bool:
        overflow = self._used - self._budget
        return self._compress(unit, unit.size - overflow, "over budget")

    def _compress(self, unit: Unit, room: int, cause: str) -> bool:
        """Compress a unit above the threshold to fit ``room``; True if it stays, smaller."""
        if self.compressor is None or unit.size <= self.compress_threshold:
            return False
        target = max(1, min(self.compress_threshold, room))
        found = shrink(self.compressor, unit, target, self._measure)
        if found is None:
            return False
        self._replace(unit, found[0], cause)
        self._queue.push(unit)
        return True

    def _log_compressed(self, old: Entry, new: Entry, cause: str) -> None:
        self._journal.compressed(old, new, cause)
        if self.on_event is not None:
            self.on_event("compressed", 1)

    def _replace(self, unit: Unit, entries: list[Entry], cause: str) -> None:
        before_tokens = sum(e.tokens for e in unit.entries)
        for old, new in zip(unit.entries, entries, strict=False):
            if new is not old:
                self._log_compressed(old, new, cause)
        after_tokens = sum(e.tokens for e in entries)
        for entry in entries:
            self._messages[entry.seq] = entry.message  # same place in the order
        self._count_category(unit, -1)
        unit.entries = entries
        old_size, unit.size = unit.size, self._measure(entries)
        self._count_category(unit, +1)
        self._used += unit.size - old_size
        self._tokens += after_tokens - before_tokens

    def _enforce_cap(self, category: str, keep: Unit | None) -> None:
        cap = self.caps.get(category)
        if cap is None:
            return
        if category == "system":
            return  # the system prompt's cap is checked when it is set
        cause = f"{category} over its cap of {cap}"
        evicted = []
        while (over := self._category_tokens.get(category, 0) - cap) > 0:
            # others of the category first; the new unit itself only if it alone is too big
            unit = self._queue.take(category, keep) or self._queue.take(category, self._open)
            if unit is None:
                break
            if self._compress(unit, unit.size - over, cause):
                continue
            self._account(unit, -1, pinned=False)
            self._view_remove(unit)
            evicted.append(unit)
        if evicted:
            self._cause = cause
            self._evicted(evicted)

    def _evict_now(self, unit: Unit, reason: str) -> None:
        self._queue.discard(unit)
        self._account(unit, -1, pinned=False)
        self._view_remove(unit)
        self._cause = reason
        self._evicted([unit])

    def _evicted(self, units: list[Unit]) -> None:
        cause, self._cause = self._cause, "over budget"
        self._journal.evicted(units, cause)
        super()._evicted(units)
        if self.summarizer is not None:
            self._folds.add(units)
            if self._folds.tokens >= self.fold_tokens:
                self._fold()

    def _fold(self) -> None:
        """Fold the evicted entries waiting for it into the rolling summary."""
        entries, old = self._folds.take(), self._summary
        room = min(
            self.summary_tokens, self._budget - (self._pinned_used - (old.size if old else 0))
        )
        summary = fold(self.summarizer, old, entries, room) if self.summarizer else None
        if summary is None:
            return
        if old is not None:
            self._account(old, -1, pinned=True)
            self._count_category(old, -1)
        self._summary = summary
        self._account(self._summary, +1, pinned=True)
        self._count_category(self._summary, +1)
        self._journal.summarized(entries)
        if self.on_event is not None:
            self.on_event("summary_updated", 1)
        if self._used > self._budget:
            self._evict_until_fits()

    def _count_category(self, unit: Unit, sign: int) -> None:
        self._category_tokens[unit.category] = (
            self._category_tokens.get(unit.category, 0) + sign * unit.size
        )

    def _account(self, unit: Unit, sign: int, *, pinned: bool) -> None:
        super()._account(unit, sign, pinned=pinned)
        if sign < 0 and not pinned:
            self._category_tokens[unit.category] = (
                self._category_tokens.get(unit.category, 0) - unit.size
            )

    # -- the view ------------------------------------------------------------------

    # The view is a dict seq -> message: insertion order is chronological, and
    # a unit evicted from anywhere leaves in O(1). messages() is one copy.

    def _view_add(self, entry: Entry) -> None:
        self._messages[entry.seq] = entry.message

    def _view_remove(self, unit: Unit) -> None:
        for entry in unit.entries:
            self._messages.pop(entry.seq, None)
        self._journal.forget(unit)
        self._live.pop(unit.seq, None)
        self._queue.removed(unit)

    def _all_units(self) -> list[Unit]:
        summary = [self._summary] if self._summary else []
        return [*summary, *self._pinned, *self._live.values()]

    def units(self) -> Iterator[Unit]:
        live: Iterator[Unit] = iter(self._live.values())
        if self._pinned:
            live = heapq.merge(self._pinned, live, key=lambda unit: unit.seq)
        return iter([self._summary, *live]) if self._summary else live

    def messages(self) -> list[Message]:
        """System prompt(s), rolling summary, then the kept messages in order."""
        head = [] if self._system is None else [self._system.entries[0].message]
        body = [*head, *self._messages.values()]
        if self._summary is not None:
            at = 0
            while at < len(body) and body[at]["role"] in SYSTEM_ROLES:
                at += 1
            body.insert(at, self._summary.entries[0].message)
        return body

    def clear(self) -> None:
        super().clear()
        self._live.clear()
        self._messages.clear()
        self._queue.clear()
        self._category_tokens = {"system": self._system.size} if self._system else {}
        self._small_talk = self._summary = None
        self._folds.clear()
        self._journal.clear()

    # -- building ----------------------------------------------------------------

    def build(
        self, request: Any = None, max_tokens: int | None = None, keep: Collection[str] = ()
    ) -> Context:
        """The context to send now, with its report.

        The budget is ``max_tokens``, else ``budget_hook(request)``, else the
        window's; it can only narrow the window's budget. A narrower budget
        leaves out more units by the same order of eviction, without
        compressing and without changing the window; units with an entry id
        in ``keep`` go last.
        """
        budget = max_tokens if max_tokens is not None else self._hook_budget(request)
        budget = self._budget if budget is None else min(budget, self._budget)
        left_out = self._narrow(budget, keep) if self._used > budget else set()
        messages = self.messages() if not left_out else self._messages_without(left_out)
        # Every entry was counted once when added: the sum of what stays is exact.
        gone = sum(e.tokens for seq in left_out for e in self._live[seq].entries)
        tokens = self.total_tokens - gone
        return Context(messages, tokens, self._report(budget, left_out, tokens))

    def preview(self, role_or_message: str | Mapping[str, Any], content: Any = None) -> Context:
        """The context if the message were added now, read-only (see ``Window.preview``).

        The window is built for the budget less the message, leaving units out
        in the order of eviction without compressing or summarizing them.
        """
        entry = self._preview_entry(make_message(role_or_message, content))
        built = self.build(max_tokens=self._budget - entry.tokens)
        return built.plus(entry.message, entry.tokens, budget=self._budget)

    @property
    def pinned_tokens(self) -> int:
        summary = self._summary.entries[0].tokens if self._summary is not None else 0
        return super().pinned_tokens + summary

    def _hook_budget(self, request: Any) -> int | None:
        return None if self.budget_hook is None else int(self.budget_hook(request))

    def _narrow(self, budget: int, keep: Collection[str] = ()) -> set[int]:
        """Seqs of the units a narrower budget leaves out, in eviction order (``keep`` last)."""
        order = self._queue.order(self._live.values())
        if keep:
            kept = [u for u in order if any(e.id in keep for e in u.entries)]
            order = [u for u in order if u not in kept] + kept
        if budget < self._pinned_used:
            raise PinnedOverBudgetError(
                f"a budget of {budget} is below the {self._pinned_used} tokens "
                "that are never evicted"
            )
        used, out = self._used, set()
        for unit in order:
            if used <= budget:
                break
            used -= unit.size
            out.add(unit.seq)
        return out

    def _messages_without(self, left_out: set[int]) -> list[Message]:
        out = {id(e.message) for seq in left_out for e in self._live[seq].entries}
        return [m for m in self.messages() if id(m) not in out]

    def report(self) -> Report:
        """The explanation of the current window (see ``build``)."""
        return self._report(self._budget, set(), self.total_tokens)

    def _report(self, budget: int, left_out: set[int], tokens: int) -> Report:
        units, system = list(self.units()), self._system
        return self._journal.report(
            budget, tokens, self.reserve_output, self._category_tokens, system, units, left_out
        )


def _priority(entry: Entry, rules: Sequence[Rule], given: Any) -> int:
    if given is not None:
        return int(Priority(given))
    return int(assign(entry, rules))
