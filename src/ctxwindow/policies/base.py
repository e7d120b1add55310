"""The window base class: budget arithmetic and the "evict until it fits" loop.

Like ``cachetools.Cache``, the base owns the budget and the loop; a subclass
says how big an entry is (``_size_of``), what the window costs before any unit
(``_overhead``) and, if it wants, which unit goes first (``_pop_victim``).

Units live in two places: evictable units in a deque, oldest first, and
pinned units (the system prompt is held apart) in a list. A third deque, the
*view*, holds every kept message in order, so ``messages()`` is one copy.
Every message is tokenized once, in ``add``; running totals make ``add`` and
each eviction O(1) (an oldest-first eviction only passes the pinned messages
that precede the victim in the view).
"""

from __future__ import annotations

import itertools
import logging
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from typing import Any, Literal

from ctxwindow.errors import (
    BudgetError,
    InvalidMessageError,
    MessageTooLargeError,
    OrphanToolResultError,
    PinnedOverBudgetError,
)
from ctxwindow.messages import SYSTEM_ROLES, Entry, Message, Unit, make_message, tool_call_ids
from ctxwindow.policies.explain import Context, Report
from ctxwindow.tokens.chat import ChatTokenizer, chat_tokenizer
from ctxwindow.tokens.truncate import truncate_text

logger = logging.getLogger("ctxwindow.policies")

Oversize = Literal["error", "truncate", "drop"]
Given = tuple["int | None", "str | None"]  # a restored entry's stored tokens and id
EvictHook = Callable[[list[Unit]], None]
_OVERSIZE = ("error", "truncate", "drop")


def stored_kind(entry: Entry) -> str | None:
    """The kind to give again when a stored entry is restored; None lets the window infer it
    (``chat`` is the default, and a ``summary`` is the window's own)."""
    return entry.kind if entry.kind not in ("chat", "summary") else None


class Window(ABC):
    """A conversation kept inside a budget; whole units leave from the oldest end.

    Subclasses define the size measure. Public behaviour shared by every window:

    - ``add(role, content)`` / ``add(message)`` / ``extend(messages)``;
    - ``messages()``: the system prompt first, then the kept messages in order;
    - ``total_tokens``: prompt tokens of ``messages()`` as the model bills them;
    - the system prompt and pinned messages are never evicted;
    - a tool call and its results are one unit, evicted together;
    - ``on_evict`` receives every list of units that leaves the window.
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
    ) -> None:
        if oversize not in _OVERSIZE:
            raise ValueError(f"oversize must be one of {_OVERSIZE}, got {oversize!r}")
        self._check_budget(budget)
        self.tokenizer = tokenizer or chat_tokenizer(model, estimate=estimate)
        self.model = model
        self.oversize: Oversize = oversize
        self.on_evict = on_evict
        self._budget = budget
        self._seq = itertools.count()
        self._units: deque[Unit] = deque()
        self._pinned: list[Unit] = []
        self._view: deque[Message] = deque()  # every kept message, in order
        self._system: Unit | None = None
        self._open: Unit | None = None  # the unit whose tool results are still due
        self._dropped_calls: set[str] = set()
        self._tools = list(tools or ())
        self._base_tokens = self.tokenizer.count([], self._tools)  # priming + tools
        self._tokens = self._base_tokens
        self._used = self._overhead()
        self._pinned_used = self._used
        self._n_messages = 0
        # Told of work as it happens, for metrics (``PriorityWindow``: "compressed",
        # "summary_updated"); a plain window has nothing to tell.
        self.on_event: Callable[[str, float], None] | None = None
        if system is not None:
            self.set_system(system)

    # -- what subclasses define -------------------------------------------------

    @abstractmethod
    def _size_of(self, entry: Entry) -> int:
        """The size of one entry in the window's budget unit."""

    def _measure(self, entries: Sequence[Entry]) -> int:
        return sum(self._size_of(entry) for entry in entries)

    def _overhead(self) -> int:
        """What the window costs with no message in it."""
        return 0

    def _check_budget(self, budget: int) -> None:
        if not isinstance(budget, int) or budget < 1:
            raise ValueError(f"budget must be a positive integer, got {budget!r}")

    def _track(self, unit: Unit) -> None:
        """Record a new unpinned unit as a candidate for eviction."""
        self._units.append(unit)

    def _pop_victim(self, keep: Unit | None) -> Unit | None:
        """Remove and return the unit to evict next (the oldest), or None; never ``keep``."""
        if not self._units or self._units[0] is keep:
            return None
        return self._units.popleft()

    def _untrack_newest(self, unit: Unit) -> None:
        """Forget the newest unpinned unit (it is being dropped whole)."""
        # Nothing is added while a unit is open, so it is the newest evictable unit.
        assert self._units[-1] is unit
        self._units.pop()

    def _grown(self, unit: Unit, delta: int) -> None:  # noqa: B027 - an optional hook
        """Called when a tool result makes a kept unit ``delta`` bigger."""

    def _shrink(self, unit: Unit) -> bool:
        """Make a victim smaller instead of evicting it; True if it stays (compressed)."""
        return False

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
    ) -> Entry | None:
        """Add one message; evict the oldest units until the window fits again.

        A ``system``/``developer`` message is pinned. Returns the stored entry,
        or ``None`` when the ``"drop"`` oversize policy discarded it. ``kind``
        labels the entry (``PriorityWindow`` budgets by it). ``tokens`` and
        ``entry_id`` restore an entry from a store: its stored count (for this
        window's model) is trusted, so it is not tokenized again.
        """
        message = make_message(role_or_message, content)
        pin = pin or message["role"] in SYSTEM_ROLES
        given = (tokens, entry_id)
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

    def set_system(self, content: str | list[Any]) -> None:
        """Set or replace the system prompt (always first, never evicted)."""
        entry = Entry(
            make_message("system", content), 0, seq=-1, pinned=True, kind="system", priority=0
        )
        entry.tokens = self.tokenizer.message_tokens(entry.message)
        unit = Unit([entry], self._size_of(entry))
        old = self._system
        old_size = old.size if old else 0
        self._require_pinned_fit(self._pinned_used - old_size + unit.size, "the system prompt")
        if old is not None:
            self._account(old, -1, pinned=True)
        self._system = unit
        self._account(unit, +1, pinned=True)
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

    @property
    def pending_tool_calls(self) -> frozenset[str]:
        """Ids of tool calls whose results the window still waits for."""
        return frozenset(self._open.pending) if self._open is not None else frozenset()

    def _new_entry(
        self, message: Message, metadata: Mapping[str, Any] | None, given: Given
    ) -> Entry:
        tokens, entry_id = given
        if tokens is None:
            tokens = self.tokenizer.message_tokens(message)
        entry = Entry(message, tokens, next(self._seq), metadata=dict(metadata or {}))
        if entry_id is not None:
            entry.id = entry_id
        return entry

    def _entry(
        self, message: Message, pin: bool, metadata: Mapping[str, Any] | None, given: Given
    ) -> Entry | None:
        entry = self._new_entry(message, metadata, given)
        entry.pinned = pin
        size = self._size_of(entry)
        if pin:
            self._require_pinned_fit(self._pinned_used + size, "pinned messages")
            return entry
        if size <= self._budget - self._pinned_used:
            return entry
        return self._fit_oversize([entry], entry, self._budget - self._pinned_used)

    def _admit(self, unit: Unit) -> None:
        """Take in a new single-entry unit, then evict until the window fits."""
        entry = unit.entries[0]
        if entry.pinned:
            self._pinned.append(unit)
        else:
            self._track(unit)
        self._view_add(entry)
        self._used += unit.size
        self._tokens += entry.tokens
        self._n_messages += 1
        if entry.pinned:
            self._pinned_used += unit.size
        if unit.pending:
            self._open = unit
        if self._used > self._budget:
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
            grown = self._pinned_used + self._size_of(entry)
            self._require_pinned_fit(grown, "the pinned tool call and its results")
        else:
            room = self._budget - self._pinned_used - unit.size
            fitted = self._fit_oversize([*unit.entries, entry], entry, room + unit.size)
            if fitted is None:
                self._drop_open_unit(unit)
                return None
            entry = fitted
        self._extend_unit(unit, entry, call_id)
        return entry

    def _extend_unit(self, unit: Unit, entry: Entry, call_id: str) -> None:
        before = unit.size
        unit.entries.append(entry)
        self._view_add(entry)  # the open unit is the newest
        unit.size += self._size_of(entry)
        unit.pending.discard(call_id)
        self._grown(unit, unit.size - before)
        self._used += unit.size - before
        self._tokens += entry.tokens
        self._n_messages += 1
        if unit.pinned:
            self._pinned_used += unit.size - before
        if not unit.pending:
            self._open = None
        self._evict_until_fits(keep=unit)

    def _drop_open_unit(self, unit: Unit) -> None:
        self._untrack_newest(unit)
        self._view_remove(unit)
        self._account(unit, -1, pinned=False)
        self._dropped_calls |= unit.pending
        self._open = None
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
        if self.oversize == "truncate" and self._truncate(entry, own_room):
            return entry
        raise MessageTooLargeError(
            f"a {entry.message['role']} message of size {size} does not fit: the budget is "
            f"{self._budget} and {self._pinned_used} of it is taken by the system prompt, "
            "pinned messages and fixed overhead; nothing was added "
            "(choose oversize='truncate' or 'drop' to allow this)"
        )

    def _truncate(self, entry: Entry, room: int) -> bool:
        """Cut the entry's text so its size is at most ``room``; False if impossible."""
        if not isinstance(entry.message.get("content"), str):
            return False
        framing = self.tokenizer.message_tokens(dict(entry.message, content=""))
        target = room - framing
        if target < 1:
            return False
        text = truncate_text(entry.message["content"], target, self.tokenizer.counter)
        entry.message = dict(entry.message, content=text)
        entry.tokens = self.tokenizer.message_tokens(entry.message)
        entry.metadata["truncated"] = True
        return self._size_of(entry) <= room

    # -- eviction ----------------------------------------------------------------

    def _evict_until_fits(self, keep: Unit | None = None) -> None:
        evicted: list[Unit] = []
        keep = keep or self._open  # a call waiting for its results is never evicted
        while self._used > self._budget:
            unit = self._pop_victim(keep)
            if unit is None:
                break
            if self._shrink(unit):
                continue
            self._account(unit, -1, pinned=False)
            self._view_remove(unit)
            evicted.append(unit)
        if evicted:
            self._evicted(evicted)

    def _evicted(self, units: list[Unit]) -> None:
        """Called with every batch of units evicted to fit the budget."""
        self._notify(units, "evicted")

    # -- the view: every kept message, in order ----------------------------------------

    def _view_add(self, entry: Entry) -> None:
        self._view.append(entry.message)

    def _view_remove(self, unit: Unit) -> None:
        """Remove a unit's messages from the view."""
        if self._view and self._view[-1] is unit.entries[-1].message:  # the newest
            for _ in unit.entries:
                self._view.pop()
            return
        view, first = self._view, unit.entries[0].message
        index = 0
        while view[index] is not first:  # only pinned messages can precede the oldest unit
            index += 1
        if index == 0:
            for _ in unit.entries:
                view.popleft()
        else:
            for _ in unit.entries:
                del view[index]

    def _notify(self, units: list[Unit], what: str) -> None:
        if logger.isEnabledFor(logging.DEBUG):
            logger.debug(
                "%s %d unit(s), %d message(s); window now %d/%d",
                what,
                len(units),
                sum(len(u.entries) for u in units),
                self._used,
                self._budget,
            )
        if self.on_evict is not None:
            self.on_evict(units)

    def _account(self, unit: Unit, sign: int, *, pinned: bool) -> None:
        self._used += sign * unit.size
        entries = unit.entries
        tokens = entries[0].tokens if len(entries) == 1 else sum(e.tokens for e in entries)
        self._tokens += sign * tokens
        if unit is not self._system:
            self._n_messages += sign * len(unit.entries)
        if pinned:
            self._pinned_used += sign * unit.size

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
        if self._pinned_used > budget:
            raise PinnedOverBudgetError(
                f"cannot resize to {budget}: the system prompt, pinned messages and fixed "
                f"overhead need {self._pinned_used}; the budget is unchanged"
            )
        self._budget = budget
        self._evict_until_fits(keep=self._open)

    # -- reading -----------------------------------------------------------------

    def build(
        self, request: Any = None, max_tokens: int | None = None, keep: Collection[str] = ()
    ) -> Context:
        """The context to send now; read-only.

        ``max_tokens`` narrows the budget for this call (in tokens, whatever
        the window's own unit): the oldest whole units are left out until the
        rest fits, pinned ones and a call still waiting for results never, and
        units with an entry id in ``keep`` (say, relevant to the query) last.
        ``request`` is for windows with a budget hook (``PriorityWindow``).
        """
        messages, tokens = self.messages(), self._tokens
        if max_tokens is None or tokens <= max_tokens:
            return Context(messages, tokens, Report(max_tokens or tokens, tokens, 0, {}, {}))
        units = [u for u in self.units() if not (u.pinned or u.pending)]
        kept = [u for u in units if any(e.id in keep for e in u.entries)] if keep else []
        left_out: set[int] = set()
        for unit in [u for u in units if u not in kept] + kept:
            if tokens <= max_tokens:
                break
            tokens -= sum(entry.tokens for entry in unit.entries)
            left_out.update(id(entry.message) for entry in unit.entries)
        if tokens > max_tokens:
            raise BudgetError(f"what the window must keep takes {tokens} tokens, over {max_tokens}")
        kept_messages = [m for m in messages if id(m) not in left_out]
        return Context(kept_messages, tokens, Report(max_tokens, tokens, 0, {}, {}))

    def preview(self, role_or_message: str | Mapping[str, Any], content: Any = None) -> Context:
        """The context this window would hold if the message were added now; read-only.

        For evaluations and "what would the model see" checks: the units that
        adding it would evict are left out of a copy, nothing changes. The
        message must start a new turn (not a tool result, and no call may be
        waiting for results); one larger than the window can ever hold raises
        ``MessageTooLargeError`` whatever the oversize policy.

        >>> from ctxwindow import TokenWindow
        >>> w = TokenWindow(max_tokens=20)
        >>> _ = w.add("user", "first question")
        >>> _ = w.add("assistant", "first answer")
        >>> [m["content"] for m in w.preview("user", "a second question").messages]
        ['first answer', 'a second question']
        >>> len(w)
        2
        """
        entry = self._preview_entry(make_message(role_or_message, content))
        size = self._size_of(entry)
        used, tokens = self._used + size, self._tokens + entry.tokens
        left_out: set[int] = set()
        for unit in self._units:  # the oldest first: the order of eviction
            if used <= self._budget:
                break
            used -= unit.size
            tokens -= sum(e.tokens for e in unit.entries)
            left_out.update(id(e.message) for e in unit.entries)
        kept = [m for m in self.messages() if id(m) not in left_out]
        return Context([*kept, entry.message], tokens, Report(self._budget, tokens, 0, {}, {}))

    def _preview_entry(self, message: Message) -> Entry:
        """The entry ``preview`` would add, checked like ``add`` would check it."""
        if message["role"] == "tool" or self._open is not None:
            raise InvalidMessageError(
                "preview takes a message that starts a new turn: not a tool result, "
                "and not while tool calls wait for their results"
            )
        entry = Entry(message, self.tokenizer.message_tokens(message), -1)
        room = self._budget - self._pinned_used
        if self._size_of(entry) > room:
            raise MessageTooLargeError(
                f"a {message['role']} message of size {self._size_of(entry)} cannot fit in "
                f"the {room} the window can give it"
            )
        return entry

    def messages(self) -> list[Message]:
        """The messages to send: the system prompt first, then the kept ones in order."""
        if self._system is None:
            return list(self._view)
        return [self._system.entries[0].message, *self._view]

    def _all_units(self) -> list[Unit]:
        """Every kept unit but the system prompt, in any order."""
        return [*self._pinned, *self._units]

    def units(self) -> Iterator[Unit]:
        """The kept units (pinned and evictable) in chronological order, system prompt excluded."""
        return iter(sorted(self._all_units(), key=lambda unit: unit.seq))

    def entries(self) -> list[Entry]:
        """The kept entries in chronological order, system prompt excluded."""
        return [entry for unit in self.units() for entry in unit.entries]

    @property
    def total_tokens(self) -> int:
        """Prompt tokens of ``messages()`` (plus tool definitions) as the model bills them."""
        return self._tokens

    @property
    def budget(self) -> int:
        return self._budget

    @property
    def pinned_tokens(self) -> int:
        """Prompt tokens of what is never evicted: framing, the system prompt, pinned units."""
        system = self._system.entries[0].tokens if self._system is not None else 0
        pinned = sum(entry.tokens for unit in self._pinned for entry in unit.entries)
        return self._base_tokens + system + pinned

    @property
    def used(self) -> int:
        """How much of the budget the window takes now, in the window's unit."""
        return self._used

    @property
    def system(self) -> str | list[Any] | None:
        return None if self._system is None else self._system.entries[0].message["content"]

    def __len__(self) -> int:
        """Number of kept messages, the system prompt excluded."""
        return self._n_messages

    def clear(self) -> None:
        """Forget every message except the system prompt (not reported to ``on_evict``)."""
        for unit in self._all_units():
            self._account(unit, -1, pinned=unit.pinned)
        self._units.clear()
        self._pinned.clear()
        self._view.clear()
        self._open = None
        self._dropped_calls.clear()
