"""The window template: adding messages, the budget, and the "evict until it fits" loop.

Like ``cachetools.Cache``, the base owns the budget and the loop; a subclass
says how big an entry is (``_size_of``), what the window costs before any unit
(``_overhead``) and, if it wants, which unit goes next (``_track``,
``_pop_victim``, ``_untrack``: the oldest by default). Every window keeps its
units in a ``Kept`` (policies/kept.py), reads them out through
``WindowView`` (policies/view.py) and writes its checkpoints through
``ResumableWindow`` (policies/resumable.py); policies/oversize.py says what
becomes of a message too big for it. Every message is tokenized once, in
``add``; running totals make ``add`` and each eviction O(1) amortized.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from ctxwindow.errors import InvalidMessageError, OrphanToolResultError, PinnedOverBudgetError
from ctxwindow.messages import SYSTEM_ROLES, Entry, Message, Unit, make_message, tool_call_ids
from ctxwindow.policies.journal import TOO_LARGE, Journal
from ctxwindow.policies.kept import Kept
from ctxwindow.policies.oversize import OVERSIZE, too_large, truncated
from ctxwindow.policies.oversize import Oversize as Oversize  # its former home
from ctxwindow.policies.resumable import ResumableWindow
from ctxwindow.policies.resumable import stored_kind as stored_kind
from ctxwindow.tokens.chat import ChatTokenizer
from ctxwindow.tokens.defaults import chat_tokenizer

logger = logging.getLogger("ctxwindow.policies")

Given = tuple["int | None", "str | None", "int | None"]  # a restored entry's tokens, id, seq
EvictHook = Callable[[list[Unit]], None]


class Window(ResumableWindow):
    """A conversation kept inside a budget; whole units leave from the oldest end.

    Subclasses define the size measure. Public behaviour shared by every window:

    - ``add(role, content)`` / ``add(message)`` / ``extend(messages)``;
    - ``messages()``: the system prompt first, then the kept messages in order;
    - ``total_tokens``: prompt tokens of ``messages()`` as the model bills them;
    - the system prompt and pinned messages are never evicted;
    - a tool call and its results are one unit, evicted together;
    - ``on_evict`` receives every list of units that leaves the window;
    - with ``low_water`` (a share of the budget, say 0.75), a window over its
      budget evicts in one step down to that share of the room the budget
      leaves beside what is never evicted, so that the next turns only append
      and the prompt prefix a provider caches stays the same until the next
      step (see docs/caching.md). ``None`` (the default) evicts only what the
      budget needs: a sliding window whose prefix changes on every turn.
    """

    def __init__(
        self,
        budget: int,
        *,
        model: str = "gpt-4o",
        system: str | None = None,
        tools: Sequence[Mapping[str, Any]] | None = None,
        oversize: Oversize = "error",
        on_evict: EvictHook | None = None,
        tokenizer: ChatTokenizer | None = None,
        estimate: bool = False,
        low_water: float | None = None,
    ) -> None:
        if oversize not in OVERSIZE:
            raise ValueError(f"oversize must be one of {OVERSIZE}, got {oversize!r}")
        if low_water is not None and (
            isinstance(low_water, bool) or not isinstance(low_water, (int, float))
            or not 0 < low_water <= 1
        ):  # fmt: skip
            raise ValueError(f"low_water must be a share in (0, 1] or None, got {low_water!r}")
        self._check_budget(budget)
        self.low_water = low_water
        self.last_step: str | None = None  # why the window last evicted (see ``Report``)
        self.tokenizer = tokenizer or chat_tokenizer(model, estimate=estimate)
        self.model = model
        self.oversize: Oversize = oversize
        self.on_evict = on_evict
        self._budget = budget
        self._next_seq = 0  # entries get increasing seqs (a restored one keeps its own)
        self._open: Unit | None = None  # the unit whose tool results are still due
        self._dropped_calls: set[str] = set()
        self._tools = list(tools or ())
        self._base_tokens = self.tokenizer.count([], self._tools)  # priming + tools
        self._kept = Kept(self._overhead(), self._base_tokens)
        self._journal = Journal(self.log_size)  # what left the window, for its reports
        self._oldest: deque[Unit] = deque()  # unpinned units, oldest first: the default victims
        # Told of work as it happens, for metrics (``PriorityWindow``: "compressed",
        # "summary_updated"); a plain window has nothing to tell.
        self.on_event: Callable[[str, float], None] | None = None
        if system is not None:
            self.set_system(system)

    # -- what subclasses define (and ``_size_of``, see WindowView) ----------------

    def _measure(self, entries: Sequence[Entry]) -> int:
        return sum(self._size_of(entry) for entry in entries)

    def _overhead(self) -> int:
        """What the window costs with no message in it."""
        return 0

    def _check_budget(self, budget: int) -> None:
        if not isinstance(budget, int) or budget < 1:
            raise ValueError(f"budget must be a positive integer, got {budget!r}")

    def _track(self, unit: Unit) -> None:
        """Take note of a new unpinned unit (just kept) as a candidate for eviction."""
        self._oldest.append(unit)

    def _pop_victim(self, keep: Unit | None) -> Unit | None:
        """Choose the unit to evict next (the oldest) and forget it, or None; never ``keep``."""
        if not self._oldest or self._oldest[0] is keep:
            return None
        return self._oldest.popleft()

    def _untrack(self, unit: Unit) -> None:
        """Forget the newest unpinned unit, which leaves without being chosen (dropped whole)."""
        # Nothing is added while a unit is open, so it is the newest evictable unit.
        assert self._oldest[-1] is unit
        self._oldest.pop()

    def _eviction_order(self) -> Iterable[Unit]:
        return self._oldest

    def _grown(self, unit: Unit, delta: int) -> None:
        """Called when a tool result makes a kept unit ``delta`` bigger."""

    def _shrink(self, unit: Unit, excess: int) -> bool:
        """Make a victim smaller instead of evicting it; True if it stays (compressed)."""
        return False

    def _remove(self, unit: Unit) -> None:
        """Take a kept unit out of the window (evicted or dropped)."""
        self._kept.remove(unit)
        self._journal.forget(unit)

    def _resume_unit(self, unit: Unit) -> None:
        """Take note of a unit kept again from a checkpoint (as ``_track`` would, evicting
        nothing)."""
        if not unit.pinned:
            self._oldest.append(unit)

    # -- adding ------------------------------------------------------------------

    def add(
        self,
        role_or_message: str | Mapping[str, Any],
        content: Any = None,
        *,
        pin: bool = False,
        metadata: Mapping[str, Any] | None = None,
        kind: str | None = None,
        tokens: int | None = None,
        entry_id: str | None = None,
        seq: int | None = None,
    ) -> Entry | None:
        """Add one message; evict the oldest units until the window fits again.

        A ``system``/``developer`` message is pinned. Returns the stored entry,
        or ``None`` when the ``"drop"`` oversize policy discarded it. ``kind``
        labels the entry (``PriorityWindow`` budgets by it). ``tokens``,
        ``entry_id`` and ``seq`` restore an entry from a store: its stored count
        (for this window's model) is trusted, so it is not tokenized again, and
        it keeps its id and sequence number (which must be above the last
        entry's), so reports name it as the store does.
        """
        message = make_message(role_or_message, content)
        pin = pin or message["role"] in SYSTEM_ROLES
        given = (tokens, entry_id, seq)
        if message["role"] == "tool":
            return self._labelled(self._add_tool_result(message, metadata, given), kind)
        if self._open is not None:
            raise InvalidMessageError(
                f"tool calls {sorted(self._open.pending)} have no results yet; "
                "add their tool messages before the next message"
            )
        entry = self._labelled(self._entry(message, pin, metadata, given), kind)
        if entry is None:
            return None
        pending = set(tool_call_ids(message)) if "tool_calls" in message else set()
        self._admit(Unit([entry], self._size_of(entry), pending))
        return entry

    @staticmethod
    def _labelled(entry: Entry | None, kind: str | None) -> Entry | None:
        if entry is not None and kind is not None:
            entry.kind = kind
        return entry

    def extend(self, messages: Iterable[Mapping[str, Any]]) -> None:
        """Add several messages in order.

        Every message is validated before any is added, so a malformed one
        changes nothing. A budget error (``oversize="error"``) stops at the
        message that does not fit; the ones before it stay added.
        """
        checked = [make_message(m) for m in messages]
        for message in checked:
            self.add(message)

    def set_system(
        self,
        content: str | list[Any],
        *,
        entry_id: str | None = None,
        seq: int = -1,
        tokens: int | None = None,
    ) -> None:
        """Set or replace the system prompt (always first, never evicted); ``entry_id``,
        ``seq`` and ``tokens``: the stored message's, if it is one (they order nothing: it
        stays first; the tokens as stored, else counted). A stored prompt replaced is
        counted as left out of the context (``Report.evicted_entries``)."""
        entry = Entry(
            make_message("system", content), 0, seq=seq, pinned=True, kind="system", priority=0
        )
        if entry_id is not None:
            entry.id = entry_id
        entry.tokens = self.tokenizer.message_tokens(entry.message) if tokens is None else tokens
        unit = Unit([entry], self._size_of(entry))
        old = self._kept.system
        pinned = self._kept.pinned_used - (old.size if old else 0) + unit.size
        self._require_pinned_fit(pinned, "the system prompt")
        self._kept.set_system(unit)
        if old is not None and old.entries[0].seq >= 0:  # a stored message, left out now
            self.left_out(1, old.entries[0].tokens)
        self._evict_until_fits()

    def restore(self, entries: Iterable[Entry]) -> None:
        """Add stored entries again, with their stored ids, token counts and kinds."""
        for entry in entries:
            self.add(
                entry.message,
                pin=entry.pinned,
                metadata=entry.metadata,
                kind=stored_kind(entry),
                tokens=entry.tokens,
                entry_id=entry.id,
            )

    def _new_entry(
        self, message: Message, metadata: Mapping[str, Any] | None, given: Given
    ) -> Entry:
        tokens, entry_id, seq = given
        if seq is None:
            seq = self._next_seq
        elif seq < self._next_seq:
            last = self._next_seq - 1
            raise ValueError(f"seq {seq} is not after the window's last entry's ({last})")
        if tokens is None:
            tokens = self.tokenizer.message_tokens(message)
        self._next_seq = seq + 1
        entry = Entry(message, tokens, seq, metadata=dict(metadata or {}))
        if entry_id is not None:
            entry.id = entry_id
        return entry

    def _entry(
        self, message: Message, pin: bool, metadata: Mapping[str, Any] | None, given: Given
    ) -> Entry | None:
        entry = self._new_entry(message, metadata, given)
        entry.pinned = pin
        size = self._size_of(entry)
        room = self._budget - self._kept.pinned_used
        if pin:
            self._require_pinned_fit(self._kept.pinned_used + size, "pinned messages")
            return entry
        if size <= room:
            return entry
        return self._fit_oversize([entry], entry, room)

    def _admit(self, unit: Unit) -> None:
        """Keep a new single-entry unit, then evict until the window fits."""
        self._kept.add(unit)
        if unit.pending:
            self._open = unit
        if not unit.entries[0].pinned:
            self._track(unit)
        if self._kept.used > self._budget:
            self._evict_until_fits(keep=unit)

    # -- tool results ------------------------------------------------------------

    def _add_tool_result(
        self, message: Message, metadata: Mapping[str, Any] | None, given: Given
    ) -> Entry | None:
        call_id = message["tool_call_id"]
        unit = self._open
        if unit is None or call_id not in unit.pending:
            if call_id in self._dropped_calls:
                self._dropped_calls.discard(call_id)
                self._notify([Unit([self._new_entry(message, metadata, given)], 0)], "dropped")
                return None
            raise OrphanToolResultError(
                f"tool result for call {call_id!r} has no matching assistant tool call "
                "waiting for results in this window"
            )
        entry = self._new_entry(message, metadata, given)
        if unit.pinned:
            grown = self._kept.pinned_used + self._size_of(entry)
            self._require_pinned_fit(grown, "the pinned tool call and its results")
        else:
            room = self._budget - self._kept.pinned_used
            fitted = self._fit_oversize([*unit.entries, entry], entry, room)
            if fitted is None:
                self._drop_open_unit(unit, self._measure([*unit.entries, entry]), room)
                return None
            entry = fitted
        self._extend_unit(unit, entry, call_id)
        return entry

    def _extend_unit(self, unit: Unit, entry: Entry, call_id: str) -> None:
        size = self._size_of(entry)
        self._kept.grow(unit, entry, size)  # the open unit is the newest
        unit.pending.discard(call_id)
        self._grown(unit, size)
        if not unit.pending:
            self._open = None
        self._evict_until_fits(keep=unit)

    def _drop_open_unit(self, unit: Unit, size: int, room: int) -> None:
        """Drop the open unit whole: with its next result it would be ``size``, more than the
        ``room`` the budget leaves. Its messages were added, so each gets an evicted row."""
        self._untrack(unit)
        self._remove(unit)
        self._dropped_calls |= unit.pending
        self._open = None
        self._journal.dropped(unit, TOO_LARGE.format(size=size, room=room))
        self._notify([unit], "dropped")

    # -- oversize policy -------------------------------------------------------------

    def _fit_oversize(self, entries: list[Entry], entry: Entry, room: int) -> Entry | None:
        """Apply the oversize policy when ``entries`` (ending in ``entry``) exceed ``room``."""
        size = self._measure(entries)
        if size <= room:
            return entry
        if self.oversize == "drop":
            logger.debug(
                "dropping a %s message of size %d (room %d)", entry.message["role"], size, room
            )
            if entry.message["role"] != "tool":
                self._notify([Unit([entry], size)], "dropped")
                self._dropped_calls |= set(tool_call_ids(entry.message))
            return None
        own_room = room - (size - self._size_of(entry))
        if self.oversize == "truncate" and truncated(
            entry, own_room, self.tokenizer, self._size_of
        ):
            return entry
        raise too_large(entry, size, self._budget, self._kept.pinned_used)

    # -- eviction ----------------------------------------------------------------

    def _evict_until_fits(
        self,
        keep: Unit | None = None,
        excess: Callable[[], int] | None = None,
        victim: Callable[[Unit | None], Unit | None] | None = None,
    ) -> None:
        """Evict (or shrink) victims, never ``keep``, until the window fits its budget; or
        evict ``victim(keep)`` while ``excess()`` is positive (``PriorityWindow``'s caps)."""
        keep = keep or self._open  # a call waiting for its results is never evicted
        choose = victim or self._pop_victim
        if excess is None:
            if self._kept.used <= self._budget:
                return
            target, self._left_out = self.own_step_target(), 0  # the hint, used once
            excess = lambda: self._kept.used - target  # noqa: E731
        evicted: list[Unit] = []
        while (over := excess()) > 0:
            unit = choose(keep)
            if unit is None:
                break
            if not self._shrink(unit, over):
                self._remove(unit)
                evicted.append(unit)
        if evicted:
            self._evicted(evicted)

    def make_room(self, size: int, *, keep: int | None = None) -> None:
        """Evict so that ``size`` is free below the budget, in one step (see ``low_water``):
        room for what is sent beside the window, say recalled turns; never the unit of
        seq ``keep`` (say, the question the room is made for)."""
        if self._kept.used + size <= self._budget:
            return
        target = self.step_target(max(self._budget - size, 0))
        spared = None if keep is None else self._kept.units.get(keep)
        self._evict_until_fits(spared, excess=lambda: self._kept.used - target)

    def step_target(self, budget: int | None = None) -> int:
        """What the window evicts down to when it is over ``budget`` (its own by default):
        the budget itself, or with ``low_water`` that share of the room beside what is
        never evicted."""
        budget = self._budget if budget is None else budget
        if self.low_water is None:
            return budget
        pinned = min(self._kept.pinned_used, budget)
        return pinned + int((budget - pinned) * self.low_water)

    def _evicted(self, units: list[Unit], cause: str = "over budget") -> None:
        """Called with every batch of units evicted to fit the budget."""
        n = sum(len(unit.entries) for unit in units)
        self.last_step = f"{cause}: {n} message(s) evicted before seq {self._next_seq}"
        self._journal.evicted(units, cause)
        self._notify(units, "evicted")

    def _notify(self, units: list[Unit], what: str) -> None:
        if logger.isEnabledFor(logging.DEBUG):
            n, used, budget = sum(len(u.entries) for u in units), self._kept.used, self._budget
            logger.debug(
                "%s %d unit(s), %d message(s); window now %d/%d", what, len(units), n, used, budget
            )
        if self.on_evict is not None:
            self.on_evict(units)

    def _require_pinned_fit(self, pinned_size: int, what: str) -> None:
        if pinned_size > self._budget:
            raise PinnedOverBudgetError(
                f"{what} would need {pinned_size} of a budget of {self._budget} "
                "for content that is never evicted; nothing was changed"
            )

    # -- budget ------------------------------------------------------------------

    def resize(self, budget: int) -> None:
        """Change the budget now; shrinking evicts at once. Pinned content must still fit."""
        self._check_budget(budget)
        if self._kept.pinned_used > budget:
            raise PinnedOverBudgetError(
                f"cannot resize to {budget}: the system prompt, pinned messages and fixed "
                f"overhead need {self._kept.pinned_used}; the budget is unchanged"
            )
        self._budget = budget
        self._evict_until_fits(keep=self._open)

    def clear(self) -> None:
        """Forget every message except the system prompt (not reported to ``on_evict``)."""
        self._kept.clear()
        self._oldest.clear()
        self._open = None
        self._dropped_calls.clear()
        self._journal.clear()
