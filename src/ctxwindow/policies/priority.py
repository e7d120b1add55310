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
  since each fold re-summarizes the summary; the report calls a folded
  message ``summarized`` only while the summary draws on it;
- repeated small talk keeps only the latest greeting or acknowledgement;
- ``build()`` returns the messages with a ``Report`` of every decision, and
  can narrow the budget per call (``budget_hook``).

Here: priorities, caps, small talk and the glue; the rest has its own module
(victims.py; folding_window.py over folding.py; journal.py; the map is in
policies/__init__.py).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from itertools import chain
from typing import Any

from ctxwindow.errors import BudgetError, PinnedOverBudgetError
from ctxwindow.messages import Entry, Message, Unit, make_message
from ctxwindow.policies import checkpoint
from ctxwindow.policies._deprecated import grouped, keyword_only
from ctxwindow.policies.base import EvictHook, Given, Oversize
from ctxwindow.policies.explain import Context, Report
from ctxwindow.policies.folding import Folding, Folds
from ctxwindow.policies.folding_window import FoldingWindow
from ctxwindow.policies.journal import Journal
from ctxwindow.policies.kept import keep_last, leave_out, unit_tokens
from ctxwindow.policies.rules import (
    Keeping,
    Priority,
    category_of,
    infer_kind,
    is_small_talk,
    priority_of,
)
from ctxwindow.policies.victims import VictimQueue
from ctxwindow.tokens.chat import ChatTokenizer

BudgetHook = Callable[[Any], int]


class PriorityWindow(FoldingWindow):
    """A token window that evicts by priority, compresses first, and explains itself.

    Like ``TokenWindow``, it takes the budget and the model by position and
    the rest by keyword; what it keeps comes as one ``Keeping`` (rules, caps,
    the recent reserve) and what it makes of victims as one ``Folding``
    (compressor, summarizer).

    >>> w = PriorityWindow(200, system="Be brief.", keeping=Keeping(reserve_recent=0))
    >>> _ = w.add("user", "Remember: my passport number is X1234567.")
    >>> for i in range(30):
    ...     _ = w.add("assistant", f"Noted, item {i} of a long and ordinary list.")
    >>> any("X1234567" in m["content"] for m in w.messages())
    True
    """

    @keyword_only("system", "reserve_output")
    @grouped(keeping=Keeping, folding=Folding)
    def __init__(
        self,
        max_tokens: int,
        model: str = "gpt-4o",
        *,
        system: str | None = None,
        reserve_output: int = 0,
        keeping: Keeping | None = None,
        folding: Folding | None = None,
        budget_hook: BudgetHook | None = None,
        log_size: int = 10_000,
        tools: Sequence[Mapping[str, Any]] | None = None,
        oversize: Oversize = "error",
        on_evict: EvictHook | None = None,
        tokenizer: ChatTokenizer | None = None,
        estimate: bool = False,
        low_water: float | None = None,
    ) -> None:
        self._set_keeping(keeping or Keeping())
        self._set_folding(folding or Folding())
        self.budget_hook = budget_hook
        super().__init__(
            max_tokens,
            model,
            reserve_output=reserve_output,
            tools=tools,
            oversize=oversize,
            on_evict=on_evict,
            tokenizer=tokenizer,
            estimate=estimate,
            low_water=low_water,
        )
        self._start(log_size, system)

    def _set_keeping(self, keeping: Keeping) -> None:
        """What an entry is worth: its rules, the caps of its category, the recent reserve."""
        self.keeping = keeping
        self.rules, self.caps = tuple(keeping.rules), dict(keeping.caps or {})
        self._reserve_recent = keeping.reserve_recent
        self.dedupe_small_talk = keeping.dedupe_small_talk
        self.document_tokens = keeping.document_tokens

    def _start(self, log_size: int, system: str | None) -> None:
        """The state that needs the window's storage; then the system prompt."""
        self._queue = VictimQueue(
            self._kept.units,
            lambda: self.reserve_recent,
            self.keeping.recent_messages,
            lambda unit: self.compressor is not None and unit.size > self.compress_threshold,
        )
        self._categories: dict[str, int] = {}  # kept tokens by budget category
        self._folds = Folds()  # evicted, not yet in the summary
        self._journal = Journal(log_size, ranked=True)
        self._small_talk: Unit | None = None
        self._stale: list[Unit] = []  # repeated small talk waiting for the next step
        self._cause = "over budget"  # why the running eviction happens
        if system is not None:
            self.set_system(system)

    def set_system(
        self,
        content: str | list[Any],
        *,
        entry_id: str | None = None,
        seq: int = -1,
        tokens: int | None = None,
    ) -> None:
        cap = self.caps.get("system")
        size = self.tokenizer.message_tokens({"role": "system", "content": content})
        if cap is not None and size > cap:
            raise PinnedOverBudgetError(
                f"the system prompt needs {size} tokens; its category cap is {cap}"
            )
        super().set_system(content, entry_id=entry_id, seq=seq, tokens=tokens)
        system = self._kept.system
        assert system is not None
        system.entries[0].priority = int(Priority.CRITICAL)
        system.priority, system.category = int(Priority.CRITICAL), "system"
        self._categories["system"] = system.size

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
        seq: int | None = None,
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
            role_or_message, content, pin=pin, metadata=meta, tokens=tokens, entry_id=entry_id,
            seq=seq,
        )  # fmt: skip

    def _entry(
        self, message: Message, pin: bool, metadata: Mapping[str, Any] | None, given: Given
    ) -> Entry | None:
        meta = dict(metadata or {})
        given_kind = meta.pop("kind", None)
        entry = super()._entry(message, pin, meta, given)
        if entry is not None:
            entry.kind = infer_kind(message, entry.tokens, given_kind, self.document_tokens)
            chosen = meta.get("priority")
            entry.priority = Priority.CRITICAL if pin else priority_of(entry, self.rules, chosen)
        return entry

    def _admit(self, unit: Unit) -> None:
        entry = unit.entries[0]
        if not entry.pinned and entry.priority >= Priority.CRITICAL:
            entry.pinned = True  # a CRITICAL rule (a system message) pins the entry
            self._require_pinned_fit(self._kept.pinned_used + unit.size, "CRITICAL entries")
        unit.priority = int(Priority.CRITICAL) if entry.pinned else entry.priority
        unit.category = category_of(entry)
        self._count_category(unit, +1)
        super()._admit(unit)
        self._enforce_cap(unit.category, keep=unit)

    def _grown(self, unit: Unit, delta: int) -> None:
        self._categories[unit.category] = self._categories.get(unit.category, 0) + delta
        self._queue.grown(unit, delta)

    def _count_category(self, unit: Unit, sign: int) -> None:
        self._categories[unit.category] = self._categories.get(unit.category, 0) + sign * unit.size

    # -- choosing victims (the queue), and what happens to them ---------------------------

    def _track(self, unit: Unit) -> None:
        self._queue.track(unit)
        if self.dedupe_small_talk and is_small_talk(unit.entries[0]):
            previous, self._small_talk = self._small_talk, unit
            if previous is not None and previous.seq in self._kept.units:
                if self.low_water is None:
                    self._evict_now(previous, "repeated small talk")
                else:  # stepping: it goes first at the next step, the prefix stays
                    self._stale.append(previous)

    def _pop_victim(self, keep: Unit | None) -> Unit | None:
        while self._stale:  # repeated small talk, kept until this step (``low_water``)
            unit = self._stale.pop()
            if unit is not keep and self._kept.units.get(unit.seq) is unit:
                self._queue.discard(unit)
                return unit
        return self._queue.take(None, keep)

    def _untrack(self, unit: Unit) -> None:
        self._queue.untrack_newest(unit)

    def _eviction_order(self) -> Iterator[Unit]:
        return self._queue.order()

    def _remove(self, unit: Unit) -> None:
        super()._remove(unit)
        self._count_category(unit, -1)
        self._queue.removed(unit)

    def _enforce_cap(self, category: str, keep: Unit | None) -> None:
        cap = self.caps.get(category)
        if cap is None or category == "system":
            return  # the system prompt's cap is checked when it is set
        self._cause = f"{category} over its cap of {cap}"
        # others of the category first; the new unit itself only if it alone is too big
        self._evict_until_fits(
            keep,
            excess=lambda: self._categories.get(category, 0) - cap,
            victim=lambda spared: (
                self._queue.take(category, spared) or self._queue.take(category, self._open)
            ),
        )
        self._cause = "over budget"

    def make_room(self, size: int, *, keep: int | None = None) -> None:
        self._cause = "room for recalled turns"
        super().make_room(size, keep=keep)
        self._cause = "over budget"

    def _evict_now(self, unit: Unit, reason: str) -> None:
        self._queue.discard(unit)
        self._remove(unit)
        self._cause = reason
        self._evicted([unit])

    def _evicted(self, units: list[Unit], cause: str = "over budget") -> None:
        cause, self._cause = self._cause, "over budget"
        super()._evicted(units, cause)

    # -- victims made smaller (policies/folding_window.py): the categories' totals ---------

    def _shrink(self, unit: Unit, excess: int) -> bool:
        if unit is self._queue.lent:  # a recent unit: made smaller, kept among the newest
            if not self._compress(unit, self.compress_threshold // 2, self._cause):
                self._queue.not_compressed(unit)  # it goes in its turn, not before older ones
            return True
        return self._compress(unit, unit.size - excess, self._cause)

    def _replace(self, unit: Unit, entries: list[Entry], size: int) -> None:
        self._count_category(unit, -1)
        super()._replace(unit, entries, size)
        self._count_category(unit, +1)
        self._queue.replaced(unit)

    def _set_summary(self, old: Unit | None, new: Unit) -> None:
        if old is not None:
            self._count_category(old, -1)
        super()._set_summary(old, new)
        self._count_category(new, +1)

    # -- checkpoints (policies/checkpoint.py) ---------------------------------------------

    def _configuration(self) -> list[Any]:
        rules = checkpoint.fingerprint(list(self.rules))
        own = [
            sorted(self.caps.items()), self._reserve_recent, self.keeping.recent_messages,
            self.compressor,
            self.compress_threshold, self.summarizer, self.summary_tokens, self.fold_tokens,
            self.dedupe_small_talk, self.document_tokens, self.reserve_output, rules,
        ]  # fmt: skip
        return [*super()._configuration(), *own]

    def checkpoint(self) -> dict[str, Any]:
        """The window's state (see ``Window.checkpoint``), with the rolling summary, the
        evictions waiting to be folded into it, and the report's running totals."""
        summary = self._kept.summary
        small_talk = self._small_talk
        return {
            **super().checkpoint(),
            "summary": checkpoint.entry_state(summary.entries[0]) if summary else None,
            "folds": [checkpoint.entry_state(entry) for entry in self._folds.entries],
            "fold_tokens": self._folds.tokens,
            "small_talk": small_talk.seq if small_talk is not None else None,
            "stale": [unit.seq for unit in self._stale if unit.seq in self._kept.units],
        }

    def _resume(self, state: Mapping[str, Any]) -> None:
        super()._resume(state)
        system = self._kept.system
        if system is not None:
            system.entries[0].priority = int(Priority.CRITICAL)
            system.priority, system.category = int(Priority.CRITICAL), "system"
            self._categories["system"] = system.size
        if (data := state.get("summary")) is not None:
            entry = checkpoint.entry_from_state(data)
            unit = Unit([entry], entry.tokens, priority=int(Priority.CRITICAL), category="summary")
            self._kept.set_summary(unit)
            self._count_category(unit, +1)
        folds = checkpoint.field(state, "folds", list)
        self._folds.entries = [checkpoint.entry_from_state(entry) for entry in folds]
        self._folds.tokens = int(checkpoint.field(state, "fold_tokens", int))
        talk = state.get("small_talk")
        self._small_talk = None if talk is None else self._kept.units.get(int(talk))
        stale = (self._kept.units.get(int(seq)) for seq in state.get("stale") or ())
        self._stale = [unit for unit in stale if unit is not None]

    def _resume_unit(self, unit: Unit) -> None:
        self._count_category(unit, +1)
        if not unit.pinned:
            self._queue.track(unit)

    def clear(self) -> None:
        super().clear()
        self._queue.clear()
        system = self._kept.system
        self._categories = {"system": system.size} if system else {}
        self._small_talk = None
        self._stale.clear()
        self._folds.clear()

    # -- building ----------------------------------------------------------------

    def build(
        self,
        request: Any = None,
        max_tokens: int | None = None,
        keep: Collection[str] = (),
        added: Sequence[Unit] = (),
        *,
        sent: bool = True,
        grid: int | None = None,
        omit: Collection[str] = (),
    ) -> Context:
        """The context to send now, with its report.

        The budget is ``max_tokens``, else ``budget_hook(request)``, else the
        window's; it can only narrow the window's budget. A narrower budget
        leaves out more units by the same order of eviction (in whole steps
        with ``low_water``: ``in_steps``), without compressing and without
        changing the window; units with an entry id
        in ``keep`` go last. ``added`` units (recalled ones, not in the
        window) are put in by their seqs, on top of the budget. ``sent=False``:
        a context not sent, whose cut is no hint; ``grid``: the budget whose
        steps the cut follows; ``omit``: entry ids whose units are left out
        first, whatever the room (see ``Window.build``).
        """
        if max_tokens is None and self.budget_hook is not None:
            max_tokens = int(self.budget_hook(request))
        budget = self._budget if max_tokens is None else min(max_tokens, self._budget)
        omitted = self._omitted(omit)
        left = self._narrow(budget, keep, stepped=True, grid=grid, omitted=omitted)
        if sent:
            self._left_out = sum(unit.size for unit in left[len(omitted) :])
        return self._built(budget, left, added)

    def _built(self, budget: int, left: list[Unit], added: Sequence[Unit] = ()) -> Context:
        """The context without the units ``left`` out, with ``added``, for ``budget``."""
        changed = left or added
        messages = self._kept.messages_without(left, added) if changed else self.messages()
        # Every entry was counted once when added: the sum of what stays is exact.
        tokens = self.total_tokens - sum(map(unit_tokens, left)) + sum(map(unit_tokens, added))
        context = Context(messages, tokens, self._report(budget, left, tokens))
        return context.with_stable(self.stable_prefix(messages, left, added), self.last_step)

    def preview(self, role_or_message: str | Mapping[str, Any], content: Any = None) -> Context:
        """The context if the message were added now, read-only (see ``Window.preview``).

        The window is built for the budget less the message, leaving units out
        in the order of eviction without compressing or summarizing them.
        """
        entry = self._preview_entry(make_message(role_or_message, content))
        room = self._budget
        if self._kept.used + entry.tokens > room:  # as ``add`` would evict: down to the step
            room = self.own_step_target()
        budget = min(room - entry.tokens, self._budget)
        built = self._built(budget, self._narrow(budget))
        return built.plus(self.previewed_row(entry), entry.message, budget=self._budget)

    def _narrow(
        self,
        budget: int,
        keep: Collection[str] = (),
        stepped: bool = False,
        grid: int | None = None,
        omitted: Sequence[Unit] = (),
    ) -> list[Unit]:
        """The units a narrower budget leaves out: the ``omitted`` ones first, then in
        eviction order (``keep`` last), never a call still waiting for its results
        (``BudgetError`` if the rest cannot fit); in whole steps if ``stepped`` (a build's,
        not a preview's: that is what adding evicts), of ``grid`` if given, then what
        ``budget`` needs beyond them (``Window.build``)."""
        used = self._kept.used - sum(unit.size for unit in omitted)
        if used <= budget:
            return list(omitted)
        if budget < self._kept.pinned_used:
            raise PinnedOverBudgetError(
                f"a budget of {budget} is below the {self._kept.pinned_used} tokens "
                "that are never evicted"
            )
        out = set(map(id, omitted))
        # what may leave, read off the kept units: the order of eviction is walked lazily,
        # as far as the excess needs (a narrow build of a long window reads a few units)
        units = self._kept.units.values()
        waiting = [u for u in units if not (u.pinned or u.pending or id(u) in out)]
        if not waiting:
            raise BudgetError(f"what the window must keep takes {used}, over {budget}")
        newest = max(waiting, key=lambda unit: unit.seq)  # left out last but ``keep``
        rest = (
            unit
            for unit in self._eviction_order()
            if not (unit.pending or unit is newest or id(unit) in out)
        )
        order = keep_last(chain(rest, (newest,)), keep)
        excess = used - budget
        if stepped:
            most = sum(unit.size for unit in waiting) - newest.size
            excess = self._narrowed_excess(used, budget, grid, most)
        left = leave_out(order, excess, lambda unit: unit.size)
        kept = used - sum(unit.size for unit in left)
        if kept > budget:  # a call waiting for its results stays, as in every window
            raise BudgetError(f"what the window must keep takes {kept} tokens, over {budget}")
        return [*omitted, *left]

    def report(self) -> Report:
        """The explanation of the current window (see ``build``)."""
        return self._report(self._budget, [], self.total_tokens)
