"""The archive's backlogs: ranges of stored entries queued by a cold load, and when the
worker may read them (``context/archiving.py``)."""

from __future__ import annotations

from typing import Any

import pytest

from ctxwindow.context import archiving
from ctxwindow.context.archiving import ArchiveQueue, Turns
from ctxwindow.messages import Entry


def entry(seq: int) -> Entry:
    return Entry({"role": "user", "content": f"turn {seq} 🚚"}, 5, seq)


def test_a_backlog_comes_before_the_entries_queued_after_it() -> None:
    queue = ArchiveQueue()
    queue.put("s", [entry(101), entry(102)])
    queue.put_stored("s", 40, 100)
    assert queue.waiting("s") == 62 and len(queue) == 62
    assert queue.take("s") == []  # the range first: the watermark needs the order
    assert queue.stored("s") == (40, 100)
    queue.read("s", 70)
    assert queue.stored("s") == (70, 100) and queue.waiting("s") == 32
    queue.read("s", 100)
    assert queue.stored("s") is None
    assert [e.seq for e in queue.take("s")] == [101, 102]
    assert queue.next() is None and len(queue) == 0


def test_an_empty_range_queues_nothing_and_discard_forgets_a_backlog() -> None:
    queue = ArchiveQueue()
    queue.put_stored("s", 10, 10)
    assert queue.next() is None
    queue.put_stored("s", 0, 5000)
    assert queue.next() == "s" and queue.backlogged()
    queue.discard("s")
    assert queue.next() is None and not queue.backlogged() and len(queue) == 0


def test_next_can_pass_over_backlogs_and_a_held_backlog_waits() -> None:
    queue = ArchiveQueue()
    queue.put_stored("cold", 0, 90_000)
    queue.put("hot", [entry(1)])
    assert queue.next() == "cold"
    assert queue.next(stored=False) == "hot"  # fresh turns are not held up by a backlog
    queue.hold("cold")  # its batch failed
    assert queue.next() == "hot" and not queue.backlogged()
    queue.put("cold", [entry(90_001)])  # the session queues more: tried again
    assert queue.next() == "cold"


def test_next_waits_for_a_turn_to_end_but_not_its_backlog() -> None:
    """A session a turn holds gives the worker nothing of what the turn adds, but a cold
    load's backlog still moves (at the backlog's pace, ``Turns``)."""
    queue = ArchiveQueue()
    queue.put("hot", [entry(1)])
    queue.put_stored("cold", 0, 500)
    queue.put("cold", [entry(501)])
    under_way = {"hot", "cold"}
    assert queue.next(busy=under_way) == "cold"  # its backlog
    assert queue.next(stored=False, busy=under_way) is None
    assert queue.next(busy={"cold"}) == "hot"
    queue.read("cold", 500)  # the backlog is done: what its turn added waits for its end
    assert queue.next(busy=under_way) is None
    assert queue.next() == "hot"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr(archiving.time, "monotonic", fake)
    return fake


def test_backlogs_go_slowly_beside_turns_and_at_full_speed_when_quiet(
    clock: Clock, monkeypatch: Any
) -> None:
    monkeypatch.setattr(archiving, "QUIET", 1.0)
    monkeypatch.setattr(archiving, "BUSY_EVERY", 5.0)
    turns = Turns()
    turns.defer_backlog()  # a cold load queued one
    with turns.of("s1"):
        assert not turns.backlog_now()
        clock.now += 4.9
        assert not turns.backlog_now()
        clock.now += 0.2  # BUSY_EVERY on: one batch, even with a turn under way
        assert turns.backlog_now()
        turns.defer_backlog()
        assert not turns.backlog_now()
    clock.now += 0.5
    assert not turns.backlog_now()  # the turn just ended: not quiet yet
    clock.now += 0.6
    assert turns.backlog_now()  # quiet for a second: full speed
    turns.defer_backlog()
    assert turns.backlog_now()  # quiet: no pause between batches
