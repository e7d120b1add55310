"""The read-only half of every window: what it sends now, and what it would send.

``WindowView`` answers from the window's ``Kept`` units and changes nothing:
``messages()``, ``units()``, ``entries()``, the totals, ``build()`` (a context
for this call, narrowed if asked) and ``preview()`` (the context if one more
message came). ``Window`` (policies/base.py) adds everything that changes it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import replace
from typing import Any

from ctxwindow.errors import BudgetError, InvalidMessageError, MessageTooLargeError
from ctxwindow.messages import SYSTEM_ROLES, Entry, Message, Unit, make_message
from ctxwindow.policies.explain import Context, Decision, Report
from ctxwindow.policies.journal import Journal
from ctxwindow.policies.kept import Kept, in_steps, keep_last, leave_out, unit_tokens
from ctxwindow.tokens.chat import ChatTokenizer

PREVIEWED = "previewed: the message the context would end with (not added)"


class WindowView(ABC):
    """What a window holds, read without changing it (``Window`` sets these fields)."""

    tokenizer: ChatTokenizer
    _kept: Kept
    _journal: Journal
    _budget: int
    _base_tokens: int  # the context's tokens in no message: priming, tool definitions
    _next_seq: int
    _open: Unit | None  # the unit whose tool results are still due
    _dropped_calls: set[str]  # calls dropped whole, whose results are still taken
    _left_out = 0  # what the last narrowed build left out (``own_step_target``)
    reserve_output = 0  # tokens kept free for the reply (``PriorityWindow``'s option)
    budget_in_tokens = True  # False: ``MessageWindow``, whose budget is a count of messages
    # The evictions a report itemises (the last ``log_size``; earlier ones are counted).
    log_size = 1_000

    @abstractmethod
    def _size_of(self, entry: Entry) -> int:
        """The size of one entry in the window's budget unit."""

    @abstractmethod
    def _eviction_order(self) -> Iterable[Unit]:
        """The evictable units in the order they would be evicted."""

    low_water: float | None
    last_step: str | None

    def stable_prefix(
        self, messages: Sequence[Message], left: Collection[Unit], added: Sequence[Unit]
    ) -> int:
        """How many leading ``messages`` (built with ``left`` units left out and ``added``
        ones put in) the next turn repeats unchanged unless the window steps: all of them
        when it evicts in steps (``low_water``) and nothing is left out or put back by its
        seq; else only the leading system messages (the system prompt, the summary)."""
        if self.low_water is not None and not left and all(u.at is not None for u in added):
            return len(messages)
        head = 0
        while head < len(messages) and messages[head]["role"] in SYSTEM_ROLES:
            head += 1
        return head

    @abstractmethod
    def step_target(self, budget: int | None = None) -> int:
        """What the window evicts down to when it is over ``budget`` (see ``Window``)."""

    def own_step_target(self) -> int:
        """What the window evicts down to when a new turn takes it over its budget: its step
        target, or, after a narrowed build (``build(max_tokens=...)``) left units out, those
        (more or less than a step) if that is enough. The requests carry on from where
        those builds cut, so the prompt's prefix moves only where the builds' steps move
        it."""
        hinted = self._kept.used - self._left_out
        return hinted if self._left_out and hinted <= self._budget else self.step_target()

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
        """The context to send now; read-only, but for a hint (``sent``).

        ``max_tokens`` narrows the budget for this call (in tokens, whatever
        the window's own unit): the oldest whole units are left out until the
        rest fits (with ``low_water``, in whole steps, so the cut moves as
        seldom as the window's own: ``in_steps``), pinned ones and a call
        still waiting for results never, and units with an entry id in
        ``keep`` (say, relevant to the query) last.
        ``added`` units (say, recalled ones, not in the window) are put in by
        their seqs, on top of ``max_tokens``. ``request`` is for windows with
        a budget hook (``PriorityWindow``).
        ``grid``: the budget whose steps the cut follows, when ``max_tokens``
        is it less a room that changes from call to call (recalled turns,
        which take their room exactly): whole steps of ``grid``, then just
        what ``max_tokens`` needs beyond them.
        What a narrowed build ``sent`` leaves out is what the window's own next
        step takes if that is enough (``own_step_target``); pass
        ``sent=False`` for a context that is not sent (a preview, a count, a
        check), which then changes nothing. Units with an entry id in ``omit``
        are left out first, whatever the room (their place taken by ``added``
        forms of them: the newest messages compressed for one context).
        """
        omitted = self._omitted(omit)
        tokens = self._kept.tokens - sum(map(unit_tokens, omitted))
        budget = self._budget if self.budget_in_tokens else self._kept.tokens
        left = list(omitted)
        if max_tokens is not None and tokens > max_tokens:
            out = set(map(id, omitted))
            units = [u for u in self.units() if not (u.pinned or u.pending or id(u) in out)]
            most = sum(map(unit_tokens, units[:-1]))  # all but the newest
            excess = tokens - max_tokens
            if self.budget_in_tokens:
                excess = self._narrowed_excess(tokens, max_tokens, grid, most)
            left += leave_out(keep_last(units, keep), excess, unit_tokens)
            tokens = self._kept.tokens - sum(unit_tokens(unit) for unit in left)
            if tokens > max_tokens:
                raise BudgetError(
                    f"what the window must keep takes {tokens} tokens, over {max_tokens}"
                )
        if sent:
            narrowed = left[len(omitted) :]
            self._left_out = sum(unit.size for unit in narrowed) if self.budget_in_tokens else 0
        messages = self._kept.messages_without(left, added) if left or added else self.messages()
        report = self._report(budget if max_tokens is None else max_tokens, left, tokens)
        extra = sum(map(unit_tokens, added))
        stable = self.stable_prefix(messages, left, added)
        return Context(messages, tokens + extra, report).with_stable(stable, self.last_step)

    def _omitted(self, omit: Collection[str]) -> list[Unit]:
        """The units a build leaves out first: those with an entry id in ``omit`` (found
        newest first, as they are the newest messages), never one pinned or waiting for
        the results of a call."""
        wanted, found = set(omit), []
        for unit in self.newest_units() if wanted else ():
            ids = {e.id for e in unit.entries}
            if wanted.isdisjoint(ids):
                continue
            if not (unit.pinned or unit.pending):
                found.append(unit)
            wanted -= ids
            if not wanted:
                break
        return found

    def _narrowed_excess(self, used: int, budget: int, grid: int | None, most: int) -> int:
        """What a build narrowed to ``budget`` leaves out of ``used`` tokens: whole steps of
        ``grid`` (``budget`` if None; at most the window's; ``in_steps``, never past ``most``
        for the rounding), then just what ``budget`` needs beyond them."""
        on = budget if grid is None else min(grid, self._budget)
        stepped = in_steps(max(used - on, 0), on - self.step_target(on), most)
        return max(used - budget, stepped)

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
        excess = self._kept.used + self._size_of(entry) - self._budget
        if excess > 0:  # as ``add`` would evict: down to its step target
            excess = self._kept.used + self._size_of(entry) - self.own_step_target()
        left = leave_out(self._eviction_order(), excess, lambda unit: unit.size)
        tokens = self._kept.tokens - sum(unit_tokens(unit) for unit in left)
        budget = self._budget if self.budget_in_tokens else tokens + entry.tokens
        report = self._report(budget, left, tokens)
        built = Context(self._kept.messages_without(left), tokens, report)
        return built.plus(self.previewed_row(entry), entry.message)

    def previewed_row(self, entry: Entry, seq: int | None = None) -> Decision:
        """The report's row of a message ``preview`` adds, at ``seq`` (default: the one the
        window would give it), compressed if it had to be."""
        state = "compressed" if "compressed" in entry.metadata else "kept"
        at = self._next_seq if seq is None else seq
        return Decision.of(replace(entry, seq=at), state, PREVIEWED)

    def applied(self, unit: Unit, entry: Entry) -> dict[str, Any]:
        """The category and priority (if the window ranks) it applied to ``entry`` of ``unit``,
        as ``Decision.of`` takes them."""
        return self._journal.applied(unit, entry)

    def _report(self, budget: int, left: Sequence[Unit], tokens: int) -> Report:
        """The report on the window as it is, ``left`` units left out of this call."""
        return self._journal.report(
            budget, tokens, framing=self._base_tokens, system=self._kept.system,
            summary=self._kept.summary, units=list(self._kept.units.values()), left=left,
            reserve_output=self.reserve_output, estimated=self._estimated,
        )  # fmt: skip

    @property
    def _estimated(self) -> bool:
        return not self.tokenizer.exact

    def _preview_entry(self, message: Message) -> Entry:
        """The entry ``preview`` would add, checked like ``add`` would check it."""
        if message["role"] == "tool" or self._open is not None:
            raise InvalidMessageError(
                "preview takes a message that starts a new turn: not a tool result, "
                "and not while tool calls wait for their results"
            )
        entry = Entry(message, self.tokenizer.message_tokens(message), -1)
        room = self._budget - self._kept.pinned_used
        if self._size_of(entry) > room:
            raise MessageTooLargeError(
                f"a {message['role']} message of size {self._size_of(entry)} cannot fit in "
                f"the {room} the window can give it"
            )
        return entry

    def messages(self) -> list[Message]:
        """The messages to send: the system prompt first, then the kept ones in order."""
        return self._kept.messages()

    def units(self) -> Iterator[Unit]:
        """The kept units (pinned and evictable) in chronological order, system prompt excluded."""
        return self._kept.in_order()

    def newest_first(self) -> Iterator[Entry]:
        """The kept entries from the newest back (read lazily: stop early, pay little)."""
        for unit in reversed(self._kept.units.values()):
            yield from reversed(unit.entries)

    def newest_units(self) -> Iterator[Unit]:
        """The kept units from the newest back, system prompt excluded (read lazily)."""
        return reversed(self._kept.units.values())

    def holds(self, seq: int) -> bool:
        """Whether the window keeps the entry of this seq (whole or compressed), in O(log n)."""
        return self._kept.holds(seq)

    def holding(self, seqs: Iterable[int]) -> set[int]:
        """The seqs of ``seqs`` whose entries the window keeps (whole or compressed)."""
        return self._kept.holding(seqs)

    def entries(self) -> list[Entry]:
        """The kept entries in chronological order, system prompt excluded."""
        return [entry for unit in self.units() for entry in unit.entries]

    @property
    def pending_tool_calls(self) -> frozenset[str]:
        """Ids of tool calls whose results the window still waits for."""
        return frozenset(self._open.pending) if self._open is not None else frozenset()

    @property
    def open_unit(self) -> Unit | None:
        """The unit whose tool results the window still waits for, if any."""
        return self._open

    @property
    def dropped_tool_calls(self) -> frozenset[str]:
        """Ids of tool calls the window dropped (too large) whose results it still takes,
        and drops in turn."""
        return frozenset(self._dropped_calls)

    @property
    def total_tokens(self) -> int:
        """Prompt tokens of ``messages()`` (plus tool definitions) as the model bills them."""
        return self._kept.tokens

    @property
    def budget(self) -> int:
        return self._budget

    @property
    def pinned_tokens(self) -> int:
        """Prompt tokens of what is never evicted: framing, the system prompt, pinned units."""
        return self._kept.pinned_tokens

    @property
    def used(self) -> int:
        """How much of the budget the window takes now, in the window's unit."""
        return self._kept.used

    @property
    def system(self) -> str | list[Any] | None:
        system = self._kept.system
        return None if system is None else system.entries[0].message["content"]

    def __len__(self) -> int:
        """Number of kept messages, the system prompt excluded."""
        return self._kept.count
