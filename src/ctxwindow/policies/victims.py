"""How ``PriorityWindow`` chooses the unit to evict next.

The newest units, up to ``reserve_recent`` tokens and at least those holding
the newest ``recent_messages`` messages, wait in a protected tail and go
last: oldest first, the latest user turn last of all; but one the window can
still compress goes first, and comes back to the tail compressed (the unit
being added too, last of those, unless it is a user turn). Older units sit
in a heap per budget category, keyed by (priority, minus tokens per unit of
importance, seq): the lowest priority goes first, then the biggest, then the
oldest. A unit whose priority changes is pushed again with a new version; a
key that is stale (its unit gone or re-keyed) is dropped when it reaches the
top, so choosing a victim is O(log n) amortized. The queue only chooses: the
window stores the units (``Kept.units``) and removes them.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable, Iterator, Mapping

from ctxwindow.messages import Unit
from ctxwindow.policies.rules import Priority

HeapKey = tuple[int, float, int, int]  # priority, -tokens per importance, seq, version


class VictimQueue:
    """The order of eviction over the window's unpinned units.

    ``kept`` is the window's units by seq (a key whose unit is no longer there
    is stale); ``reserve`` gives the tokens of the protected recent tail, and
    ``messages`` the newest messages it holds whatever their tokens;
    ``compressible`` says whether the window could still make a unit smaller.
    """

    def __init__(
        self,
        kept: Mapping[int, Unit],
        reserve: Callable[[], int],
        messages: int = 0,
        compressible: Callable[[Unit], bool] = lambda unit: False,
    ) -> None:
        self._kept = kept
        self._reserve = reserve
        self._messages = messages
        self._compressible = compressible
        self._recent: deque[Unit] = deque()  # the newest units, evicted last
        self._recent_tokens = 0
        self._recent_messages = 0
        self.lent: Unit | None = None  # taken from the tail to be compressed, to come back
        self._tried: set[int] = set()  # seqs of recent units whose compression failed
        self._heaps: dict[str, list[HeapKey]] = {}
        self.latest_user: Unit | None = None  # raised to HIGH while it is the latest

    # -- units coming and going -------------------------------------------------------

    def track(self, unit: Unit) -> None:
        """Take in a new unpinned unit (a user turn becomes the latest user turn)."""
        if unit.entries[0].message["role"] == "user":
            self._raise_latest_user(unit)
        self._recent.append(unit)
        self._counted(unit, +1)
        self._settle_recent()

    def grown(self, unit: Unit, delta: int) -> None:
        """A tool result made ``unit`` ``delta`` bigger."""
        if self._recent and unit is self._recent[-1]:
            self._recent_tokens += delta
            self._recent_messages += 1
            self._settle_recent()

    def untrack_newest(self, unit: Unit) -> None:
        """Forget the newest unit, dropped whole (any heap key of it goes stale)."""
        if self._recent and self._recent[-1] is unit:
            self._recent.pop()
            self._counted(unit, -1)

    def discard(self, unit: Unit) -> None:
        """Forget a unit evicted without being taken (any heap key of it goes stale)."""
        if unit in self._recent:
            self._recent.remove(unit)
            self._counted(unit, -1)

    def _counted(self, unit: Unit, sign: int) -> None:
        """``unit`` came into the recent tail (+1) or left it (-1)."""
        self._recent_tokens += sign * unit.size
        self._recent_messages += sign * len(unit.entries)

    def removed(self, unit: Unit) -> None:
        """The window no longer keeps ``unit``."""
        if unit is self.latest_user:
            self.latest_user = None
        if unit is self.lent:
            self.lent = None
        self._tried.discard(unit.seq)

    def not_compressed(self, unit: Unit) -> None:
        """The lent ``unit`` could not be made smaller: back to the tail as it was, to go
        in its turn (oldest first), not before older units."""
        self._tried.add(unit.seq)
        self.replaced(unit)

    def replaced(self, unit: Unit) -> None:
        """``unit`` was compressed in place: back to the recent tail if it was taken from
        there (in its place by seq), else queued by its new size."""
        if unit is not self.lent:
            self.push(unit)
            return
        self.lent = None
        at = next((i for i, other in enumerate(self._recent) if other.seq > unit.seq), None)
        self._recent.insert(len(self._recent) if at is None else at, unit)
        self._counted(unit, +1)

    def clear(self) -> None:
        self._recent.clear()
        self._recent_tokens = self._recent_messages = 0
        self.lent = None
        self._tried.clear()
        self._heaps.clear()
        self.latest_user = None

    def _raise_latest_user(self, unit: Unit) -> None:
        previous, self.latest_user = self.latest_user, unit
        unit.priority = max(unit.priority, int(Priority.HIGH))
        if previous is not None and previous.seq in self._kept:
            previous.priority = previous.entries[0].priority
            self.requeue(previous)

    def _settle_recent(self) -> None:
        """Move units out of the protected recent tail once it holds the reserve, and the
        newest ``messages`` messages, without them."""
        reserve = self._reserve()
        while len(self._recent) > 1 and self._recent_tokens - self._recent[0].size >= reserve:
            if self._recent_messages - len(self._recent[0].entries) < self._messages:
                break
            unit = self._recent.popleft()
            self._counted(unit, -1)
            self.push(unit)

    # -- the heaps -----------------------------------------------------------------------

    def push(self, unit: Unit) -> None:
        """Queue a unit by its current priority and size (older keys of it go stale)."""
        unit.version += 1
        importance = float(unit.entries[0].metadata.get("importance", 1.0)) or 1.0
        key = (unit.priority, -unit.size / importance, unit.seq, unit.version)
        heapq.heappush(self._heaps.setdefault(unit.category, []), key)

    def requeue(self, unit: Unit) -> None:
        if unit not in self._recent:
            self.push(unit)  # the old heap key is now stale (its version is behind)

    def _valid_top(self, category: str) -> HeapKey | None:
        heap = self._heaps.get(category)
        while heap:
            key = heap[0]
            unit = self._kept.get(key[2])
            if unit is not None and unit.version == key[3]:
                return key
            heapq.heappop(heap)  # evicted or re-keyed since: stale
        return None

    def take(self, category: str | None, keep: Unit | None) -> Unit | None:
        """Remove and return the next victim (of one category, or of any); ``keep`` only
        lent (``lent``), to be compressed in its place, never to be evicted."""
        categories = [category] if category else list(self._heaps)
        tops = [key for c in categories if (key := self._valid_top(c)) is not None]
        if tops:
            key = min(tops)
            unit = self._kept[key[2]]
            heapq.heappop(self._heaps[unit.category])
            unit.version += 1
            return unit
        # The recent reserve gives way only when nothing else is left: first the
        # units the window can still compress (lent, to come back smaller), ``keep``
        # last among them, then oldest first, the latest user turn last.
        candidates = [u for u in self._recent if u is not keep and category in (None, u.category)]
        shrinkable = candidates
        if keep is not None and self._may_shrink(keep, category):
            shrinkable = [*candidates, keep]
        compressible = (u for u in shrinkable if u.seq not in self._tried and self._compressible(u))
        self.lent = next(compressible, None)
        if self.lent is None and not candidates:
            return None
        oldest = next((u for u in candidates if u is not self.latest_user), None)
        victim = self.lent or oldest or candidates[0]
        self._recent.remove(victim)
        self._counted(victim, -1)
        return victim

    def _may_shrink(self, keep: Unit, category: str | None) -> bool:
        """Whether ``keep`` (say, the unit just added), never evicted, may be compressed
        before an older recent unit goes: a recent unit, not the latest user turn (the
        question, sent as asked) nor a call waiting for its results."""
        return (
            keep is not self.latest_user
            and not keep.pending
            and category in (None, keep.category)
            and any(unit is keep for unit in self._recent)
        )

    def order(self) -> Iterator[Unit]:
        """The unpinned units kept, in the order a narrower budget leaves them out.

        The order of eviction, without touching the queue: the heaps' keys
        smallest first, then the recent tail, the latest user turn last. Lazy:
        each heap is read in key order by a frontier of its positions (a
        position's children are pushed when it is taken), so a caller that
        stops after ``m`` units pays O(m log n), whatever the window holds.
        """
        latest = self.latest_user
        frontier = [(heap[0], 0, heap) for heap in self._heaps.values() if heap]
        heapq.heapify(frontier)
        while frontier:
            key, at, heap = heapq.heappop(frontier)
            for child in (2 * at + 1, 2 * at + 2):
                if child < len(heap):
                    heapq.heappush(frontier, (heap[child], child, heap))
            unit = self._kept.get(key[2])
            if unit is not None and unit.version == key[3] and unit is not latest:
                yield unit  # else stale: gone, re-keyed, or the latest user turn
        yield from [u for u in self._recent if u is not latest]
        if latest is not None and latest.seq in self._kept:
            yield latest
