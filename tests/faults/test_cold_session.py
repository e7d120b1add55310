"""A long session without a usable checkpoint loads only what its window needs (issue:
a cold 100,000-message session took 56.6 s and 290 MB for its first turn).

Such a session (written through the store, by another version or
configuration) was read and replayed whole. Now the manager reads the
newest entries that fill the budget and, of the older ones, those a window
keeps at any budget (the system prompt, pinned entries); the rest is
counted as left out and reaches the archive in the background, a batch at
a time. These tests write a long session straight into SQLite, Redis and
PostgreSQL (the real servers), count what the manager reads, and check
what the window holds against the session. The time and memory targets are
measured by ``benchmarks/bench_cold.py``.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from ctxwindow.archive.sqlite import SQLiteArchive
from ctxwindow.context import AsyncContextManager, checkpoints
from ctxwindow.messages import Entry
from ctxwindow.server import Settings, create_app
from ctxwindow.server.tenants import ANONYMOUS, scoped
from tests.support.faults.upstream import FaultyUpstream
from tests.support.stores import async_store

LONG = 3 * checkpoints.NEWEST  # entries: well past what a cold load reads at first
BUDGET = 2_000  # tokens: the window holds about 100 of the session's turns
PINNED_AT, NEW_SYSTEM_AT = 5, 1_500


def long_session(tokens: int) -> list[Entry]:
    """``LONG`` entries: a system prompt replaced midway, a pinned fact, alternating turns,
    each stored as ``tokens`` tokens."""
    entries = [Entry({"role": "system", "content": "You answer in English."}, 6, 0)]
    for n in range(2, LONG + 1):
        if n == NEW_SYSTEM_AT:
            message = {"role": "system", "content": "Réponds en français 🇫🇷。"}
        elif n == PINNED_AT:
            message = {"role": "user", "content": "My locker code is 4711 — 覚えて"}
        else:
            role = "user" if n % 2 else "assistant"
            message = {"role": role, "content": f"turn {n}: 包裹 {n} is on its way 🚚"}
        entries.append(Entry(message, tokens, 0, pinned=n == PINNED_AT))
    return entries


class Reads:
    """What a store handed out: the largest single read and the total, in entries."""

    def __init__(self, store: Any) -> None:
        self.largest = self.total = 0
        for name in ("load", "tail", "load_from_checkpoint", "earlier"):
            setattr(store, name, self._counting(getattr(store, name)))

    def _counting(self, method: Any) -> Any:
        async def counted(*args: Any, **kwargs: Any) -> Any:
            result = await method(*args, **kwargs)
            entries = result[1] if isinstance(result, tuple) else getattr(result, "kept", result)
            self.largest = max(self.largest, len(entries))
            self.total += len(entries)
            return result

        return counted


@pytest.fixture(params=["sqlite", "redis", "postgresql"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    with async_store(request.param, tmp_path) as opened:
        yield opened


async def write(store: Any, sid: str, tokens: int = 20) -> list[Entry]:
    """The long session, appended straight to the store (no manager, no checkpoint)."""
    stored: list[Entry] = []
    entries = long_session(tokens)
    for start in range(0, len(entries), 500):
        stored += await store.append(sid, entries[start : start + 500])
    return stored


def texts(messages: list[dict[str, Any]]) -> list[str]:
    return [str(message["content"]) for message in messages]


def test_a_cold_long_session_reads_its_newest_turns_and_what_is_kept_always(
    store: Any,
) -> None:
    sid = f"cold-{uuid.uuid4().hex[:8]}"

    async def first_turn() -> tuple[list[Entry], Any, Reads, Any]:
        stored = await write(store, sid)
        reads = Reads(store)
        manager = AsyncContextManager(store, model="gpt-4o-mini", budget=BUDGET)
        context = await manager.build(sid)
        checkpoint = await store.checkpoint(sid)
        again = await AsyncContextManager(store, model="gpt-4o-mini", budget=BUDGET).build(sid)
        await manager.close()
        return stored, context, reads, (checkpoint, again)

    stored, context, reads, (checkpoint, again) = asyncio.run(first_turn())

    # Read: the newest entries (NEWEST at most, in one read) and the three kept always
    # (two system prompts, the pinned entry); the second load, nothing but its checkpoint.
    assert reads.largest <= checkpoints.NEWEST
    assert reads.total <= checkpoints.NEWEST + 3, reads.total
    sent = texts(context.messages)
    assert sent[0] == "Réponds en français 🇫🇷。"  # the system prompt in force, not the first
    assert "My locker code is 4711 — 覚えて" in sent  # pinned 5 entries in, kept
    newest = [str(e.message["content"]) for e in stored[-20:]]
    assert sent[-20:] == newest  # the newest turns, none crowded out
    # Everything else (the replaced system prompt too) is accounted for as left out.
    held = sum(1 for e in stored if str(e.message["content"]) in sent)
    assert context.report.evicted_entries == len(stored) - held
    assert context.report.earlier_entries > 0
    # A checkpoint through the last entry: the next load resumes this very window.
    assert checkpoint is not None and checkpoint[0] == stored[-1].seq
    assert again.messages == context.messages


def test_the_archive_gets_what_a_cold_load_skipped_a_batch_at_a_time(
    store: Any, tmp_path: Path
) -> None:
    sid = f"cold-{uuid.uuid4().hex[:8]}"
    archive = SQLiteArchive(tmp_path / "archive.db")

    async def first_turn_then_close() -> tuple[list[Entry], Reads, int, int]:
        stored = await write(store, sid)
        reads = Reads(store)
        manager = AsyncContextManager(
            store, model="gpt-4o-mini", budget=BUDGET, archive=archive, search_batches=1
        )
        await manager.add(sid, {"role": "user", "content": "where is 包裹 12?"})
        await manager.build(sid)
        largest_first = reads.largest
        queued = manager.queued
        await manager.drain()  # indexes the rest, a batch at a time
        await manager.close()
        return stored, reads, largest_first, queued

    stored, reads, largest_first, queued = asyncio.run(first_turn_then_close())
    assert largest_first <= checkpoints.NEWEST
    assert queued > 0  # the backlog is the worker's, not the first turn's
    assert reads.largest <= checkpoints.NEWEST  # the backlog too was read in batches
    assert archive.indexed_through(sid) == stored[-1].seq + 1  # the question as well
    hits = archive.search(sid, "包裹 12", k=5)
    assert 12 in [hit.entry.seq for hit in hits]  # a turn no window replayed, recalled


def test_the_service_answers_a_cold_long_session_from_its_newest_turns(
    store: Any, upstream: FaultyUpstream
) -> None:
    sid = f"cold-{uuid.uuid4().hex[:8]}"
    settings = Settings(store="memory://", upstream=upstream.base_url, archive="off")
    with TestClient(create_app(settings, store=store), raise_server_exceptions=False) as http:
        assert http.portal is not None
        # On the service's loop, under the id it keeps for the client's (tenant "default").
        # 3,072 turns of 400 tokens: 10 times what gpt-4o-mini's window holds.
        stored = http.portal.call(write, store, scoped(ANONYMOUS, sid), 400)
        turn = {"role": "user", "content": "and the locker code?"}
        response = http.post(
            "/v1/chat/completions",
            json={"model": "gpt-4o-mini", "messages": [turn]},
            headers={"X-Session-Id": sid},
        )
        assert response.status_code == 200, response.text[:400]
        sent = texts(upstream.requests[-1]["messages"])
        assert sent[0] == "Réponds en français 🇫🇷。"
        assert "My locker code is 4711 — 覚えて" in sent
        assert sent[-2:] == [str(stored[-1].message["content"]), "and the locker code?"]
        assert len(sent) < len(stored) // 2  # the newest turns, not the history
        report = http.get(f"/v1/sessions/{sid}/context", params={"limit": 5}).json()
        rows = {row["seq"]: row for row in report["report"]["decisions"]}
        assert rows[2]["state"] == "evicted", rows  # an old turn, accounted for as left out
        assert report["report"]["evicted_entries"] > len(stored) // 2

        # Its pages, read in turn, are the whole report: the same rows, the same totals.
        whole = http.get(f"/v1/sessions/{sid}/context").json()
        paged, after, more = [], 0, True
        while more:
            page = http.get(
                f"/v1/sessions/{sid}/context", params={"after": after, "limit": 700}
            ).json()
            # The rows the context sends first (system prompt, summary) lead the first page.
            assert len(page["report"]["decisions"]) <= 700 + (2 if not after else 0)
            paged += page["report"]["decisions"]
            after, more = paged[-1]["seq"], page["has_more"]
            totals = {k: v for k, v in page["report"].items() if k != "decisions"}
            assert totals == {k: v for k, v in whole["report"].items() if k != "decisions"}
        assert paged == whole["report"]["decisions"]
