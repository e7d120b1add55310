"""One contract suite for every session store (docs/stores.md), sync and async.

Every test in the first part runs for each kind of store (memory, sqlite,
redis, postgresql, tiered) in both flavours. Async stores are driven from
these sync tests by ``Blocking``, one event loop per test. Redis and
PostgreSQL come from ``CTXWINDOW_TEST_REDIS_URL`` / ``CTXWINDOW_TEST_POSTGRES_URL``
and are skipped when unreachable, unless ``CTXWINDOW_REQUIRE_SERVERS=1`` (CI),
which turns the skip into a failure. Each test works under its own session-id
prefix and deletes what it wrote.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import itertools
import json
import logging
import os
import queue
import re
import signal
import sqlite3
import subprocess
import sys
import threading
import time
import types
import uuid
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctxwindow.errors import SessionBusyError, StoreError, StoreInputError, StoreUnavailableError
from ctxwindow.extras import install_hint
from ctxwindow.messages import Entry
from ctxwindow.stores import (
    AsyncMemoryStore,
    AsyncSQLiteStore,
    MemoryStore,
    SQLiteStore,
    entry_to_json,
    locks,
    open_async_store,
    open_store,
)
from ctxwindow.stores import sqlite as sqlite_module
from ctxwindow.stores.base import MAX_CHECKPOINT, Earlier, Store, entry_from_json
from ctxwindow.stores.sqlite import files as sqlite_files
from ctxwindow.stores.sqlite import schema as sqlite_schema
from tests.support.stores import (
    FLAVOURS,
    REDIS_URL,
    Blocking,
    Case,
    require_server,
    sqlite_url,
    tiered_class,
)

WORKER = Path(__file__).parent / "support" / "store_worker.py"
LOCK_WORKER = Path(__file__).parent / "support" / "lock_worker.py"


def entry(text: str = "hello", **fields: Any) -> Entry:
    return Entry(message={"role": "user", "content": text}, tokens=len(text), seq=0, **fields)


def seqs(entries: list[Entry]) -> list[int]:
    return [stored.seq for stored in entries]


def texts(entries: list[Entry]) -> list[str]:
    return [stored.message["content"] for stored in entries]


# --- the contract ------------------------------------------------------------------------


def test_sequence_numbers_count_from_one_in_append_order(case: Case) -> None:
    sid = case.sid()
    first = case.store.append(sid, [entry("a")])
    batch = case.store.append(sid, [entry("b"), entry("c"), entry("d")])
    assert seqs(first) == [1]
    assert seqs(batch) == [2, 3, 4]
    assert seqs(case.store.load(sid)) == [1, 2, 3, 4]
    assert texts(case.store.load(sid)) == ["a", "b", "c", "d"]


def test_an_empty_append_stores_nothing(case: Case) -> None:
    assert case.store.append(case.sid(), []) == []
    assert case.store.load(case.sid()) == []
    assert case.sid() not in case.store.sessions(prefix=case.prefix)


def test_load_after_and_limit(case: Case) -> None:
    sid = case.sid()
    case.store.append(sid, [entry(str(n)) for n in range(1, 11)])
    assert texts(case.store.load(sid, after=7)) == ["8", "9", "10"]
    assert texts(case.store.load(sid, after=2, limit=3)) == ["3", "4", "5"]
    assert texts(case.store.load(sid, limit=2)) == ["1", "2"]
    assert case.store.load(sid, limit=0) == []
    assert case.store.load(sid, after=10) == []
    assert case.store.load(case.sid("unknown")) == []


def test_tail(case: Case) -> None:
    sid = case.sid()
    case.store.append(sid, [entry(str(n)) for n in range(1, 6)])
    assert texts(case.store.tail(sid, 2)) == ["4", "5"]
    assert seqs(case.store.tail(sid, 100)) == [1, 2, 3, 4, 5]
    assert case.store.tail(sid, 0) == []
    assert case.store.tail(case.sid("unknown"), 3) == []


def test_get_by_id(case: Case) -> None:
    sid, other = case.sid("a"), case.sid("b")
    stored = case.store.append(sid, [entry("one"), entry("two")])
    case.store.append(other, [entry("elsewhere", id="only-in-b")])
    assert case.store.get(sid, stored[1].id) == stored[1]
    assert case.store.get(sid, "no-such-id") is None
    assert case.store.get(sid, "only-in-b") is None
    assert case.store.get(case.sid("unknown"), stored[0].id) is None


def test_metadata_and_content_come_back_exactly(case: Case) -> None:
    """Integers beyond 64 bits stay integers (not floats), and so do the long digit runs,
    floats and scripts of texts, as stored."""
    sid = case.sid("exact")
    metadata = {"big": 2**70, "negative": -(2**64) - 1, "int64": 2**63 - 1, "ratio": 0.1,
                "id": "SF12345678901234567890", "名前": "テスト 🎉",
                "list": [2**80, [1, -(2**66)]], "digits": ":12345678901234567890"}  # fmt: skip
    stored = case.store.append(sid, [entry("订单 12345678901234567890 ✅", metadata=metadata)])
    loaded = case.store.load(sid)
    assert loaded == stored
    assert loaded[0].metadata == metadata
    assert type(loaded[0].metadata["big"]) is int


# Integers at the edges of 64 bits, where orjson starts to read floats, beside any others.
edges = st.sampled_from([2**63 - 1, 2**63, 2**64 - 1, 2**64, -(2**63), -(2**63) - 1, 10**30])
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | edges
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)  # fmt: skip


@given(
    metadata=st.dictionaries(st.text(), json_values, max_size=4),
    text=st.text(),
    part=json_values,
    created_at=st.floats(0, 1e12) | edges,
)
def test_an_entry_comes_back_from_its_json_exactly(
    metadata: dict[str, Any], text: str, part: Any, created_at: float
) -> None:
    """Any JSON value in the metadata, the message and the text, integers of any size
    included (``json`` reads again what orjson read with a float of 2**63 or more)."""
    message = {"role": "user", "content": text, "part": part}
    written = Entry(message, 3, 7, id="e", created_at=created_at, metadata=metadata)
    try:
        read = entry_from_json(entry_to_json(written))
    except ValueError:
        return  # a lone surrogate: refused when written (``StoreInputError``)
    assert read == written
    assert json.dumps(read.metadata, sort_keys=True) == json.dumps(metadata, sort_keys=True)
    assert json.dumps(read.message, sort_keys=True) == json.dumps(message, sort_keys=True)
    assert repr(read.created_at) == repr(created_at)


def test_delete(case: Case) -> None:
    sid, kept = case.sid("gone"), case.sid("kept")
    case.store.append(sid, [entry("a"), entry("b")])
    case.store.append(kept, [entry("c")])
    assert case.store.delete(sid) is True
    assert case.store.delete(sid) is False
    assert case.store.load(sid) == []
    assert case.store.tail(sid, 5) == []
    assert sid not in case.store.sessions(prefix=case.prefix)
    assert texts(case.store.load(kept)) == ["c"]
    assert seqs(case.store.append(sid, [entry("again")])) == [1]


def test_sessions_are_sorted_and_filtered_by_plain_prefix(case: Case) -> None:
    names = ["b", "a", "a%b", "a_b", "a*b", "a[b", "axb", "会话", "会话🎉"]
    for name in names:
        case.store.append(case.sid(name), [entry(name)])
    assert case.store.sessions(prefix=case.prefix) == sorted(case.sid(name) for name in names)
    assert case.store.sessions(prefix=case.sid("a%")) == [case.sid("a%b")]
    assert case.store.sessions(prefix=case.sid("a_")) == [case.sid("a_b")]
    assert case.store.sessions(prefix=case.sid("a*")) == [case.sid("a*b")]
    assert case.store.sessions(prefix=case.sid("a[")) == [case.sid("a[b")]
    assert case.store.sessions(prefix=case.sid("会")) == [case.sid("会话"), case.sid("会话🎉")]
    assert set(case.store.sessions(prefix=case.prefix)) <= set(case.store.sessions())
    assert case.store.sessions(prefix=case.sid("zzz")) == []


# Ids that sort differently by code point, by UTF-16 and by a locale's collation: ASCII,
# Chinese, Japanese, emoji (beyond the BMP), a private-use character after the
# surrogates, the last code point, and characters LIKE and globs would read.
PAGED = [
    "a", "a%b", "a*[x", "a_c", "ab", "Z", "b", "会话", "会话🎉", "日本語", "ｶﾀｶﾅ", "🎉",
    "\ue000", "\U0010ffff", "mixé😀中", "x\\y",
]  # fmt: skip


def stored_pages(case: Case) -> list[str]:
    """``PAGED`` stored under the case's prefix; the stored ids, sorted by code point."""
    for name in PAGED:
        case.store.append(case.sid(name), [entry(name)])
    return sorted(case.sid(name) for name in PAGED)


def paged(store: Any, prefix: str, sizes: Sequence[int], after: str | None = None) -> list[str]:
    """Every id of ``sessions(prefix=…)``, read in pages of ``sizes`` (cycled) from ``after``."""
    listed: list[str] = []
    for turn in itertools.count():
        size = sizes[turn % len(sizes)]
        page = store.sessions(prefix=prefix, after=after, limit=size)
        assert len(page) <= size
        listed += page
        if len(page) < size:
            return listed
        after = page[-1]
    raise AssertionError("unreachable")


def test_sessions_are_sorted_by_code_point_across_scripts(case: Case) -> None:
    """Every store orders ids alike: by code point (UTF-8 bytes), not by a locale."""
    ids = stored_pages(case)
    assert case.store.sessions(prefix=case.prefix) == ids
    assert case.store.sessions(prefix=case.sid("会")) == [case.sid("会话"), case.sid("会话🎉")]
    assert case.store.sessions(prefix=case.sid("\U0010ffff")) == [case.sid("\U0010ffff")]


@pytest.mark.parametrize("size", [1, 2, 3, 7, 16, 17])
def test_pages_of_sessions_add_up_to_the_whole_list(case: Case, size: int) -> None:
    ids = stored_pages(case)
    assert paged(case.store, case.prefix, [size]) == ids
    assert case.store.sessions(prefix=case.prefix, limit=size) == ids[:size]


def test_prefix_after_and_limit_together(case: Case) -> None:
    stored_pages(case)
    a = case.sid("a")
    assert case.store.sessions(prefix=a, limit=2) == [a, case.sid("a%b")]
    assert case.store.sessions(prefix=a, after=case.sid("a%b"), limit=2) == [
        case.sid("a*[x"),
        case.sid("a_c"),
    ]
    assert case.store.sessions(prefix=a, after=case.sid("a_c"), limit=2) == [case.sid("ab")]
    assert case.store.sessions(prefix=a, after=case.sid("ab"), limit=2) == []
    chinese = case.sid("会话")
    assert case.store.sessions(prefix=chinese, after=chinese) == [case.sid("会话🎉")]
    assert case.store.sessions(prefix=case.sid("日"), after=case.prefix, limit=1) == [
        case.sid("日本語")
    ]


def test_a_cursor_need_not_be_a_stored_id(case: Case) -> None:
    """``after`` is a position, not an id: a page may end on a session deleted since."""
    ids = stored_pages(case)
    assert case.store.sessions(prefix=case.prefix, after=case.sid("aa")) == [
        i for i in ids if i > case.sid("aa")
    ]
    assert case.store.sessions(prefix=case.prefix, after=case.sid("会")) == [
        case.sid("会话"), case.sid("会话🎉"), case.sid("日本語"), case.sid("\ue000"),
        case.sid("ｶﾀｶﾅ"), case.sid("🎉"), case.sid("\U0010ffff"),
    ]  # fmt: skip
    assert case.store.sessions(prefix=case.prefix, after="") == ids
    assert case.store.sessions(prefix=case.prefix, after=case.prefix[:-1]) == ids
    assert case.store.sessions(prefix=case.prefix, after=case.sid("\U0010ffff" * 300)) == []
    case.store.delete(ids[2])
    assert case.store.sessions(prefix=case.prefix, after=ids[2], limit=2) == ids[3:5]


BAD_PAGES: dict[str, Callable[[Any], Any]] = {
    "limit 0": lambda s: s.sessions(limit=0),
    "limit negative": lambda s: s.sessions(limit=-1),
    "limit a bool": lambda s: s.sessions(limit=True),
    "limit a float": lambda s: s.sessions(limit=2.0),
    "limit a string": lambda s: s.sessions(limit="10"),
    "limit from 2**63": lambda s: s.sessions(limit=2**63),
    "after a number": lambda s: s.sessions(after=3),
    "after bytes": lambda s: s.sessions(after=b"s"),
    "after with NUL": lambda s: s.sessions(after="s\x00"),
    "after with a lone surrogate": lambda s: s.sessions(after="s\ud800"),
    "prefix bad before after": lambda s: s.sessions(prefix=1, after=2, limit=0),
    "after bad before limit": lambda s: s.sessions(after=2, limit=0),
}


@pytest.mark.parametrize("what", list(BAD_PAGES))
def test_bad_page_arguments_get_the_same_error_from_every_store(case: Case, what: str) -> None:
    """``StoreInputError`` naming the argument, in the same words from every store."""
    with pytest.raises(StoreInputError) as expected:
        BAD_PAGES[what](MemoryStore())
    with pytest.raises(StoreInputError) as raised:
        BAD_PAGES[what](case.store)
    assert str(raised.value) == str(expected.value)
    assert str(raised.value).startswith(("limit ", "after ", "a session prefix "))


def test_the_largest_page_is_accepted(case: Case) -> None:
    ids = stored_pages(case)
    assert case.store.sessions(prefix=case.prefix, limit=2**63 - 1) == ids


CURSORS = st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=6)


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    sizes=st.lists(st.integers(1, len(PAGED) + 2), min_size=1, max_size=4),
    start=st.one_of(st.none(), CURSORS),
    within=st.sampled_from(["", "a", "会", "x"]),
)
def test_pages_of_any_size_concatenate_to_the_list(
    case: Case, sizes: list[int], start: str | None, within: str
) -> None:
    """Property: from any cursor (an id or not), pages of any sizes add up to every id above
    it, in order; ``sessions()`` itself being the whole list."""
    if not case.store.sessions(prefix=case.prefix, limit=1):
        stored_pages(case)  # once for the whole test: the fixture outlives the examples
    prefix = case.sid(within)
    everything = case.store.sessions(prefix=prefix)
    after = None if start is None else case.sid(start)
    expected = [i for i in everything if after is None or i > after]
    assert paged(case.store, prefix, sizes, after) == expected


def test_sessions_are_isolated(case: Case) -> None:
    a, b = case.sid("a"), case.sid("b")
    case.store.append(a, [entry("a1")])
    case.store.append(b, [entry("b1"), entry("b2")])
    case.store.append(a, [entry("a2")])
    assert texts(case.store.load(a)) == ["a1", "a2"]
    assert seqs(case.store.load(a)) == [1, 2]
    assert seqs(case.store.load(b)) == [1, 2]


def test_stored_entries_are_copies(case: Case) -> None:
    sid = case.sid()
    given = entry("original", metadata={"tags": ["a"]})
    returned = case.store.append(sid, [given])[0]
    assert given.seq == 0  # append does not touch the caller's entry
    given.message["content"] = "changed by the caller"
    given.metadata["tags"].append("given")
    returned.message["content"] = "changed through the returned copy"
    returned.metadata["tags"].append("returned")
    loaded = case.store.load(sid)[0]
    loaded.message["content"] = "changed through a loaded copy"
    again = case.store.get(sid, given.id)
    assert again is not None
    assert again.message["content"] == "original"
    assert again.metadata == {"tags": ["a"]}
    assert case.store.load(sid)[0] == again


def test_every_field_round_trips(case: Case) -> None:
    call = {
        "id": "call_1",
        "type": "function",
        "function": {"name": "f", "arguments": '{"q":"東京"}'},
    }
    entries = [
        Entry(
            message={"role": "assistant", "content": None, "tool_calls": [call]},
            tokens=42,
            seq=0,
            id="entry-1",
            pinned=True,
            priority=-3,
            kind="summary",
            created_at=1714557600.123456,
            metadata={"source": "test", "nested": {"list": [1, 2.5, None, True], "ja": "日本"}},
        ),
        Entry(
            message={
                "role": "user",
                "name": "ann",
                "content": [
                    {"type": "text", "text": "look"},
                    {"type": "image_url", "image_url": {"url": "https://x.invalid/a.png"}},
                ],
            },
            tokens=0,
            seq=0,
            created_at=0.1 + 0.2,
        ),
    ]
    expected = [dataclasses.replace(e, seq=seq) for seq, e in enumerate(entries, 1)]
    assert case.store.append(case.sid(), entries) == expected
    assert case.store.load(case.sid()) == expected
    assert case.store.tail(case.sid(), 2) == expected
    assert case.store.get(case.sid(), "entry-1") == expected[0]


def test_large_entries_round_trip(case: Case) -> None:
    big = "0123456789abcdef" * 65536 + "上下文🎉"  # more than 1 MB
    stored = case.store.append(case.sid(), [entry(big), entry("small")])
    assert texts(case.store.load(case.sid())) == [big, "small"]
    assert case.store.get(case.sid(), stored[0].id) == stored[0]
    assert texts(case.store.tail(case.sid(), 1)) == ["small"]


UNICODE = {
    "chinese": "上下文窗口：保留重要的信息，而不是静默丢弃。",
    "japanese": "コンテキストを管理します。ひらがな、カタカナ、漢字。",
    "emoji": "🎉👍🏽👨‍👩‍👧‍👦🇯🇵🏳️‍🌈",
    "mixed": "Hello 你好 こんにちは مرحبا שלום Привет 🌍 e\u0301 ﬁ",
    "controls": "".join(map(chr, range(1, 32))) + "\x7f\u0085\u2028\u2029\ufeff\u200b",
}


def test_unicode_round_trips(case: Case) -> None:
    for name, text in UNICODE.items():
        sid = case.sid(f"{name}-{text[:3]}")
        stored = case.store.append(
            sid, [entry(text, id=f"{name}-{text[:2]}", metadata={name: text})]
        )
        assert case.store.load(sid) == stored
        assert case.store.get(sid, stored[0].id) == stored[0]
        assert stored[0].message["content"] == text
        assert sid in case.store.sessions(prefix=case.prefix)


def test_a_retry_with_the_same_idempotency_key_is_a_no_op(case: Case) -> None:
    sid = case.sid()
    batch = [entry("a"), entry("b")]
    first = case.store.append(sid, batch, idempotency_key="request-1")
    same_objects = case.store.append(sid, batch, idempotency_key="request-1")
    rebuilt = case.store.append(sid, [entry("a"), entry("b")], idempotency_key="request-1")
    assert seqs(first) == [1, 2]
    assert same_objects == first
    assert rebuilt == first
    assert case.store.load(sid) == first
    assert seqs(case.store.append(sid, [entry("c")], idempotency_key="request-2")) == [3]
    assert seqs(
        case.store.append(case.sid("other"), [entry("x")], idempotency_key="request-1")
    ) == [1]


def test_concurrent_retries_store_once(case: Case) -> None:
    sid = case.sid()
    batch = [entry("a"), entry("b"), entry("c")]
    if case.flavour == "sync":
        with ThreadPoolExecutor(8) as pool:
            results = list(
                pool.map(lambda _: case.store.append(sid, batch, idempotency_key="k"), range(8))
            )
    else:

        async def retries() -> list[list[Entry]]:
            calls = (case.raw.append(sid, batch, idempotency_key="k") for _ in range(8))
            return list(await asyncio.gather(*calls))

        results = case.run(retries())
    assert all(result == results[0] for result in results)
    assert case.store.load(sid) == results[0]


def test_appends_from_many_threads_lose_nothing(case: Case) -> None:
    sid = case.sid()

    def appends(worker: int) -> list[Entry]:
        return [case.store.append(sid, [entry(f"{worker}-{n}")])[0] for n in range(50)]

    async def async_appends(worker: int) -> list[Entry]:
        stored = [await case.raw.append(sid, [entry(f"{worker}-{n}")]) for n in range(50)]
        return [batch[0] for batch in stored]

    async def all_async() -> list[list[Entry]]:
        return list(await asyncio.gather(*(async_appends(worker) for worker in range(8))))

    if case.flavour == "sync":
        with ThreadPoolExecutor(8) as pool:
            results = list(pool.map(appends, range(8)))
    else:
        results = case.run(all_async())
    returned = [stored for result in results for stored in result]
    loaded = case.store.load(sid)
    assert seqs(loaded) == list(range(1, 401))
    assert sorted(seqs(returned)) == list(range(1, 401))
    assert {stored.id: stored.seq for stored in loaded} == {e.id: e.seq for e in returned}
    for result in results:  # each worker's appends keep their order
        assert seqs(result) == sorted(seqs(result))


def durable(case: Case) -> None:
    if case.url is None:
        pytest.skip("the memory store is not durable and lives in one process")


def spawn(case: Case, session_id: str, *flags: str) -> subprocess.Popen[str]:
    assert case.url is not None
    args = [sys.executable, str(WORKER), case.url, session_id, *case.worker_flags(), *flags]
    return subprocess.Popen(
        args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def run_together(workers: list[subprocess.Popen[str]]) -> list[tuple[str, str]]:
    """Wait until every worker is ready, start them all at once, then collect their output."""
    for worker in workers:  # all connected before any starts: real contention
        assert worker.stdout is not None
        assert worker.stdout.readline() == "ready\n", worker.communicate()[1]
    for worker in workers:
        assert worker.stdin is not None
        worker.stdin.write("go\n")
        worker.stdin.flush()
    return [worker.communicate(timeout=120) for worker in workers]


def test_appends_from_many_processes_lose_nothing(case: Case) -> None:
    durable(case)
    sid = case.sid()
    with contextlib.ExitStack() as stack:
        workers = [
            stack.enter_context(spawn(case, sid, "--count", "50", "--wait")) for _ in range(4)
        ]
        outputs = run_together(workers)
    assert all(worker.returncode == 0 for worker in workers), [err for _, err in outputs]
    reported = dict(line.split() for out, _ in outputs for line in out.splitlines())
    loaded = case.store.load(sid)
    assert seqs(loaded) == list(range(1, 201))
    assert {str(stored.seq): stored.id for stored in loaded} == reported


def read_lines(stream: Any, lines: queue.Queue[str]) -> None:
    for line in stream:
        lines.put(line)
    lines.put("")


def appended_until_killed(worker: subprocess.Popen[str], count: int) -> dict[int, str]:
    """Read ``SEQ ID`` lines until ``count`` appends have returned, then ``kill -9`` the worker."""
    lines: queue.Queue[str] = queue.Queue()
    reader = threading.Thread(target=read_lines, args=(worker.stdout, lines), daemon=True)
    reader.start()
    reported: dict[int, str] = {}
    try:
        assert lines.get(timeout=30) == "ready\n"
        while len(reported) < count:
            line = lines.get(timeout=30)
            if not line:
                pytest.fail(f"the worker stopped: {worker.stderr.read()}")  # type: ignore[union-attr]
            seq, entry_id = line.split()
            reported[int(seq)] = entry_id
    finally:
        worker.send_signal(signal.SIGKILL)  # mid-run: most likely inside an append
        worker.wait()
        reader.join(timeout=10)
    return reported


def test_acknowledged_appends_survive_kill_9(case: Case) -> None:
    durable(case)
    sid = case.sid()
    with spawn(case, sid, "--count", "0") as worker:
        reported = appended_until_killed(worker, 40)
    loaded = {stored.seq: stored.id for stored in case.store.load(sid)}
    assert {seq: loaded.get(seq) for seq in reported} == reported
    assert list(loaded) == list(range(1, len(loaded) + 1))
    assert seqs(case.store.append(sid, [entry("after the crash")])) == [len(loaded) + 1]


SESSION_OPERATIONS: list[Callable[[Any, Any], Any]] = [
    lambda store, session_id: store.append(session_id, [entry()]),
    lambda store, session_id: store.load(session_id),
    lambda store, session_id: store.tail(session_id, 1),
    lambda store, session_id: store.get(session_id, "id"),
    lambda store, session_id: store.delete(session_id),
    lambda store, session_id: store.truncate(session_id, 0),
]


def test_bad_session_ids_raise_store_error(case: Case) -> None:
    for bad in ["", "x" * 257, None, 42, b"bytes"]:
        for operation in SESSION_OPERATIONS:
            with pytest.raises(StoreError):
                operation(case.store, bad)
    assert case.store.append("x" * 256, [entry()])[0].seq >= 1  # the longest allowed
    case.store.delete("x" * 256)


BAD_BATCHES: dict[str, Callable[[], Any]] = {
    "a dict, not an Entry": lambda: [entry("ok"), {"role": "user", "content": "hi"}],
    "metadata that is not JSON": lambda: [entry("ok"), entry("x", metadata={"o": object()})],
    "negative tokens": lambda: [entry("ok"), Entry({"role": "user", "content": "x"}, -1, 0)],
    "an empty id": lambda: [entry("ok"), entry("x", id="")],
    "a repeated id": lambda: [entry("a", id="same"), entry("b", id="same")],
    "an id already stored": lambda: [entry("ok"), entry("x", id="first")],
    "one entry, not a list": lambda: entry("x"),
    "a string": lambda: "not entries",
}


@pytest.mark.parametrize("what", list(BAD_BATCHES))
def test_bad_entries_raise_store_error_and_store_nothing(case: Case, what: str) -> None:
    sid = case.sid()
    case.store.append(sid, [entry("first", id="first")])
    with pytest.raises(StoreError):
        case.store.append(sid, BAD_BATCHES[what]())
    assert texts(case.store.load(sid)) == ["first"]
    assert seqs(case.store.append(sid, [entry("next")])) == [2]


def test_bad_arguments_raise_store_error(case: Case) -> None:
    sid = case.sid()
    case.store.append(sid, [entry()])
    with pytest.raises(StoreError):
        case.store.load(sid, limit=-1)
    with pytest.raises(StoreError):
        case.store.tail(sid, -1)
    with pytest.raises(StoreError):
        case.store.append(sid, [entry()], idempotency_key="")


BAD_CALLS: dict[str, Callable[[Any], Any]] = {
    "session id and entries both bad": lambda s: s.append("", "not entries"),
    "entries and key both bad": lambda s: s.append("s", [entry(id="")], idempotency_key=""),
    "a session id too long": lambda s: s.load("x" * 257, after=-1),
    "after and limit both bad": lambda s: s.load("s", after=-1, limit=-1),
    "limit a float": lambda s: s.load("s", limit=1.5),
    "n a bool": lambda s: s.tail("s", True),
    "n negative": lambda s: s.tail("s", -1),
    "a bytes session": lambda s: s.get(b"s", "id"),
    "a prefix that is not a string": lambda s: s.sessions(prefix=1),
    "a replay key that is not a string": lambda s: s.replayed("s", 42),
    "a replay with both bad": lambda s: s.replayed(None, None),
    "a truncate cut that is negative": lambda s: s.truncate("s", -1),
    "a truncate cut that is a string": lambda s: s.truncate("s", "3"),
    "a truncate cut that is None": lambda s: s.truncate("s", None),
    "a truncate cut that is a bool": lambda s: s.truncate("s", True),
    "a truncate cut that is a float": lambda s: s.truncate("s", 2.0),
    "a truncate cut too large": lambda s: s.truncate("s", 2**63),
    "a truncate of a bad session": lambda s: s.truncate("", 0),
    **{f"a batch with {what}": (lambda s, w=what: s.append("s", BAD_BATCHES[w]())) for what in [
        "a dict, not an Entry", "negative tokens", "an empty id", "a repeated id",
        "one entry, not a list", "a string",
    ]},
}  # fmt: skip


def test_bad_input_gets_the_same_error_from_every_store(case: Case) -> None:
    """The base checks input once, so every backend refuses it with the same words."""
    reference = MemoryStore()
    for what, call in BAD_CALLS.items():
        with pytest.raises(StoreError) as expected:
            call(reference)
        with pytest.raises(StoreError) as raised:
            call(case.store)
        assert str(raised.value) == str(expected.value), what
    assert case.store.sessions(prefix=case.prefix) == []  # nothing stored by any of them


def test_health_is_ok(case: Case) -> None:
    health = case.store.health()
    assert health["ok"] is True


def test_async_calls_leave_the_event_loop_free(case: Case) -> None:
    if case.flavour == "sync" or case.kind == "memory":
        pytest.skip("only stores that wait on files or servers must yield")
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0)

    async def append_while_ticking() -> int:
        task = asyncio.create_task(ticker())
        before = ticks
        await case.raw.append(case.sid(), [entry("x" * 100_000)])
        task.cancel()
        return ticks - before

    assert case.run(append_while_ticking()) > 0


# --- replaying an idempotency key --------------------------------------------------------


def test_replayed_gives_what_the_keyed_append_returned(case: Case) -> None:
    sid, key = case.sid(), "请求-リクエスト-🔑"
    assert case.store.replayed(sid, key) is None  # an unknown session
    case.store.append(sid, [entry("before")])
    batch = [entry(UNICODE["chinese"]), entry(UNICODE["japanese"]), entry(UNICODE["emoji"])]
    stored = case.store.append(sid, batch, idempotency_key=key)
    case.store.append(sid, [entry("after")], idempotency_key="later")
    assert case.store.replayed(sid, key) == stored
    assert seqs(stored) == [2, 3, 4]
    assert texts(case.store.replayed(sid, key)) == [e.message["content"] for e in batch]
    assert texts(case.store.replayed(sid, "later")) == ["after"]
    assert case.store.replayed(sid, "never-used") is None
    assert case.store.replayed(case.sid("other"), key) is None  # keys are per session
    case.store.delete(sid)
    assert case.store.replayed(sid, key) is None


def test_replayed_rejects_bad_input(case: Case) -> None:
    for bad_session in ["", "x" * 257, None, 42, b"bytes"]:
        with pytest.raises(StoreError):
            case.store.replayed(bad_session, "key")
    for bad_key in ["", None, 42, b"key"]:
        with pytest.raises(StoreError):
            case.store.replayed(case.sid(), bad_key)


# --- appending after the newest entry a caller knows (append_after) ----------------------


def newest(store: Any, sid: str) -> tuple[int, str]:
    last = store.tail(sid, 1)
    return (last[0].seq, last[0].id) if last else (0, "")


def test_append_after_stores_only_after_the_newest_entry(case: Case) -> None:
    sid = case.sid()
    assert case.store.append_after(sid, (1, "x"), [entry("a")]) is None  # it has none
    first = case.store.append_after(sid, (0, ""), [entry("a")])
    assert seqs(first) == [1]
    assert case.store.append_after(sid, (0, ""), [entry("b")]) is None
    assert case.store.append_after(sid, (1, "not-its-id"), [entry("b")]) is None
    batch = case.store.append_after(sid, (1, first[0].id), [entry("b"), entry("c")])
    assert seqs(batch) == [2, 3]
    assert case.store.append_after(sid, (1, first[0].id), [entry("d")]) is None
    assert case.store.append_after(sid, (3, batch[-1].id), []) == []
    assert case.store.append_after(sid, (2, batch[0].id), []) is None
    assert texts(case.store.load(sid)) == ["a", "b", "c"]


def test_append_after_a_session_truncated_and_refilled_is_refused(case: Case) -> None:
    """The same seq with another entry at it: the caller's copy is not the session."""
    sid = case.sid()
    old = case.store.append(sid, [entry("a"), entry("b")])
    case.store.truncate(sid, 1)
    case.store.append(sid, [entry("c")])
    assert newest(case.store, sid)[0] == old[1].seq
    assert case.store.append_after(sid, (old[1].seq, old[1].id), [entry("d")]) is None
    assert texts(case.store.load(sid)) == ["a", "c"]


def test_append_after_with_a_used_key_returns_its_first_batch(case: Case) -> None:
    sid, key = case.sid(), "请求-🔑"
    first = case.store.append_after(sid, (0, ""), [entry("問い")], idempotency_key=key)
    case.store.append(sid, [entry("later")])
    again = case.store.append_after(sid, (0, ""), [entry("問い")], idempotency_key=key)
    assert again == first  # whatever the newest entry is now
    assert texts(case.store.load(sid)) == ["問い", "later"]


@pytest.mark.parametrize(
    "bad", [None, (1,), [0, ""], (-1, ""), (0, "x"), (1, ""), ("1", "x"), (True, "x"), (1, 2)]
)
def test_a_bad_last_is_refused_by_every_store_and_stores_nothing(case: Case, bad: Any) -> None:
    sid = case.sid()
    with pytest.raises(StoreInputError, match="last must be"):
        case.store.append_after(sid, bad, [entry("a")])
    assert case.store.load(sid) == []


APPEND_STEPS = st.lists(
    st.tuples(st.sampled_from(["after", "stale", "append", "truncate"]), st.integers(0, 3)),
    max_size=12,
)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(steps=APPEND_STEPS)
def test_append_after_stores_exactly_when_the_newest_entry_is_last(
    case: Case, steps: list[tuple[str, int]]
) -> None:
    """Property: beside plain appends and truncates, ``append_after`` stores its batch
    exactly when ``last`` is the session's newest entry (then right after it), and
    otherwise changes nothing."""
    sid = case.sid(uuid.uuid4().hex[:8])
    appends_after_exactly(case.store, sid, steps)
    case.store.delete(sid)


class DefaultAppendAfter(MemoryStore):
    """A store with no ``_append_after`` of its own: the base's default (a few calls)."""

    _append_after = Store._append_after


@given(steps=APPEND_STEPS)
def test_the_default_append_after_keeps_the_contract(steps: list[tuple[str, int]]) -> None:
    """A store written without ``_append_after`` (the base's default) keeps the contract."""
    appends_after_exactly(DefaultAppendAfter(), "s", steps)


def appends_after_exactly(store: Any, sid: str, steps: list[tuple[str, int]]) -> None:
    for action, n in steps:
        before = store.load(sid)
        true_last = (before[-1].seq, before[-1].id) if before else (0, "")
        if action == "append":
            store.append(sid, [entry(f"p{i}") for i in range(n + 1)])
        elif action == "truncate":
            store.truncate(sid, max(0, len(before) - n))
        else:
            last = true_last
            if action == "stale":  # an older entry, or the right seq with another id
                old = before[n % len(before)] if before else None
                last = (old.seq, old.id) if old else (1, "x")
                if last == true_last:
                    last = (last[0], "another")
            batch = [entry(f"a{i}") for i in range(n + 1)]
            stored = store.append_after(sid, last, batch)
            if action == "after":
                assert seqs(stored) == list(range(true_last[0] + 1, true_last[0] + n + 2))
                assert store.load(sid) == before + stored
            else:
                assert stored is None
                assert store.load(sid) == before


# --- window checkpoints ------------------------------------------------------------------

WINDOW_JSON = json.dumps(
    {"through": 3, "summary": UNICODE["chinese"] + UNICODE["emoji"], "ids": ["a", "b"]},
    ensure_ascii=False,
).encode("utf-8")


def test_a_checkpoint_round_trips_with_the_entries_after_it(case: Case) -> None:
    sid = case.sid("会话🎉")
    assert case.store.checkpoint(sid) is None
    assert case.store.load_from_checkpoint(sid) == (None, [])
    stored = case.store.append(sid, [entry(str(n)) for n in range(1, 6)])
    assert case.store.load_from_checkpoint(sid) == (None, stored)  # none yet: every entry
    assert case.store.save_checkpoint(sid, 3, WINDOW_JSON) is None
    assert case.store.checkpoint(sid) == (3, WINDOW_JSON)
    assert case.store.load_from_checkpoint(sid) == ((3, WINDOW_JSON), stored[3:])
    later = case.store.append(sid, [entry("6")])
    assert case.store.load_from_checkpoint(sid) == ((3, WINDOW_JSON), [*stored[3:], *later])
    case.store.save_checkpoint(sid, 6, b"through six")
    assert case.store.load_from_checkpoint(sid) == ((6, b"through six"), [])
    assert case.store.load(sid) == [*stored, *later]  # the entries are untouched


def test_a_cold_load_can_read_only_the_newest_entries_after_the_checkpoint(case: Case) -> None:
    sid = case.sid("新しい")
    stored = case.store.append(sid, [entry(str(n)) for n in range(1, 11)])
    assert case.store.load_from_checkpoint(sid, limit=4) == (None, stored[6:])
    assert case.store.load_from_checkpoint(sid, limit=0) == (None, [])
    assert case.store.load_from_checkpoint(sid, limit=50) == (None, stored)
    case.store.save_checkpoint(sid, 8, b"eight")
    assert case.store.load_from_checkpoint(sid, limit=4) == ((8, b"eight"), stored[8:])
    assert case.store.load_from_checkpoint(sid, limit=1) == ((8, b"eight"), stored[9:])
    assert case.store.load_from_checkpoint(sid, limit=0) == ((8, b"eight"), [])
    with pytest.raises(StoreInputError, match="limit"):
        case.store.load_from_checkpoint(sid, limit=-1)


@pytest.fixture
def small_pages(monkeypatch: pytest.MonkeyPatch) -> None:
    """``earlier`` read three entries at a time, wherever a backend reads it in pages."""
    import ctxwindow.stores.base.aio as base_aio
    import ctxwindow.stores.base.sync as base_sync
    import ctxwindow.stores.redis.aio as redis_aio
    import ctxwindow.stores.redis.sync as redis_sync

    for module in (base_aio, base_sync, redis_aio, redis_sync):
        monkeypatch.setattr(module, "EARLIER_PAGE", 3)


@pytest.mark.usefixtures("small_pages")
def test_earlier_finds_what_a_window_keeps_and_counts_the_rest(case: Case) -> None:
    sid = case.sid("较早的")
    system = Entry({"role": "system", "content": "规则 🎌"}, tokens=7, seq=0)
    lookalikes = [  # what only looks like a pinned entry or a system message
        entry('{"role":"system"} "pinned":true', metadata={"pinned": True, "role": "system"}),
        Entry({"role": "user", "content": "x", "name": "system"}, tokens=3, seq=0),
    ]
    entries = [
        entry("a"), system, entry("bb"), *lookalikes, entry("ピン", pinned=True), entry("c"),
        entry("dd"), Entry({"role": "system", "content": "new"}, tokens=2, seq=0), entry("e"),
    ]  # fmt: skip
    stored = case.store.append(sid, entries)
    found = case.store.earlier(sid, before=9)  # the entries 1-8
    assert [e.seq for e in found.kept] == [2, 6]
    assert found.kept == [stored[1], stored[5]]
    others = [e for e in stored[:8] if e.seq not in (2, 6)]
    assert (found.entries, found.tokens) == (len(others), sum(e.tokens for e in others))
    everything = case.store.earlier(sid, before=100)
    assert [e.seq for e in everything.kept] == [2, 6, 9]
    assert everything.entries == 7
    assert case.store.earlier(sid, before=1) == Earlier([], 0, 0)
    assert case.store.earlier(case.sid("none"), before=50) == Earlier([], 0, 0)
    with pytest.raises(StoreInputError, match="before"):
        case.store.earlier(sid, before=-1)


def test_any_bytes_round_trip_in_a_checkpoint(case: Case) -> None:
    sid = case.sid()
    case.store.append(sid, [entry("a"), entry("b")])
    every_byte = bytes(range(256)) * 4
    big = os.urandom(2**20) + WINDOW_JSON  # more than 1 MiB
    for seq, data in [(1, every_byte), (2, big), (2, b""), (2, bytearray(b"\x00buffer\xff"))]:
        case.store.save_checkpoint(sid, seq, data)
        saved = case.store.checkpoint(sid)
        assert saved == (seq, bytes(data))
        assert type(saved[1]) is bytes
        assert case.store.load_from_checkpoint(sid)[0] == (seq, bytes(data))


def test_a_checkpoint_replaces_the_previous_one(case: Case) -> None:
    sid, other = case.sid("a"), case.sid("b")
    case.store.append(sid, [entry("a"), entry("b"), entry("c")])
    case.store.append(other, [entry("x")])
    case.store.save_checkpoint(sid, 1, b"one")
    case.store.save_checkpoint(other, 1, b"other")
    case.store.save_checkpoint(sid, 2, b"two")
    assert case.store.checkpoint(sid) == (2, b"two")
    case.store.save_checkpoint(sid, 2, b"two, again")  # the same seq: the newer data
    assert case.store.checkpoint(sid) == (2, b"two, again")
    assert case.store.checkpoint(other) == (1, b"other")  # one per session


def test_a_checkpoint_never_moves_backwards(case: Case) -> None:
    sid = case.sid()
    case.store.append(sid, [entry(str(n)) for n in range(10)])
    case.store.save_checkpoint(sid, 7, b"seven")
    assert case.store.save_checkpoint(sid, 4, b"four") is None  # a no-op, not an error
    case.store.save_checkpoint(sid, 0, b"zero")
    assert case.store.checkpoint(sid) == (7, b"seven")
    assert seqs(case.store.load_from_checkpoint(sid)[1]) == [8, 9, 10]


def test_racing_checkpoints_keep_the_highest(case: Case) -> None:
    sid = case.sid()
    case.store.append(sid, [entry(str(n)) for n in range(40)])
    order = [(n * 17) % 41 for n in range(41)]  # 0..40, shuffled

    async def all_async() -> None:
        await asyncio.gather(*(case.raw.save_checkpoint(sid, n, str(n).encode()) for n in order))

    if case.flavour == "sync":
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda n: case.store.save_checkpoint(sid, n, str(n).encode()), order))
    else:
        case.run(all_async())
    assert case.store.checkpoint(sid) == (40, b"40")


def test_a_checkpoint_never_covers_entries_the_session_lacks(case: Case) -> None:
    """``StoreInputError``, in the same words from every store; nothing saved or changed."""
    from ctxwindow.errors import StoreInputError

    sid = case.sid()
    reference = MemoryStore()
    for store in (reference, case.store):
        store.append(sid, [entry("a"), entry("b")])
        store.save_checkpoint(sid, 1, b"one")
    with pytest.raises(StoreInputError) as expected:
        reference.save_checkpoint(sid, 3, b"three")
    with pytest.raises(StoreInputError) as raised:
        case.store.save_checkpoint(sid, 3, b"three")
    assert str(raised.value) == str(expected.value)
    assert "has 2 entries" in str(raised.value)
    with pytest.raises(StoreInputError):
        case.store.save_checkpoint(case.sid("empty"), 1, b"nothing to cover")
    assert case.store.checkpoint(case.sid("empty")) is None
    assert case.store.checkpoint(sid) == (1, b"one")
    assert texts(case.store.load(sid)) == ["a", "b"]
    assert seqs(case.store.append(sid, [entry("c")])) == [3]


def test_delete_removes_the_checkpoint(case: Case) -> None:
    sid = case.sid()
    case.store.append(sid, [entry("a"), entry("b")])
    case.store.save_checkpoint(sid, 2, b"two")
    assert case.store.delete(sid) is True
    assert case.store.checkpoint(sid) is None
    assert case.store.load_from_checkpoint(sid) == (None, [])
    again = case.store.append(sid, [entry("again")])  # a new session under the same id
    assert case.store.load_from_checkpoint(sid) == (None, again)


def test_a_session_with_only_a_checkpoint_is_not_listed(case: Case) -> None:
    sid, listed = case.sid("checkpoint-only"), case.sid("with-entries")
    case.store.save_checkpoint(sid, 0, b"an empty window")  # seq 0 covers no entry
    case.store.append(listed, [entry("a")])
    case.store.save_checkpoint(listed, 1, b"one")
    assert case.store.checkpoint(sid) == (0, b"an empty window")
    assert case.store.sessions(prefix=case.prefix) == [listed]
    assert case.store.load(sid) == []
    assert case.store.delete(sid) is False  # it had no entries, but the checkpoint goes
    assert case.store.checkpoint(sid) is None
    case.store.save_checkpoint(sid, 0, b"empty again")
    assert seqs(case.store.append(sid, [entry("first")])) == [1]
    assert case.store.load_from_checkpoint(sid) == ((0, b"empty again"), case.store.load(sid))


@functools.cache
def too_large() -> bytes:
    """One byte over the limit of a checkpoint (64 MiB), made once."""
    return bytes(MAX_CHECKPOINT + 1)


BAD_CHECKPOINT_CALLS: dict[str, Callable[[Any, str], Any]] = {
    "a negative seq": lambda s, sid: s.save_checkpoint(sid, -1, b"x"),
    "seq 2**63": lambda s, sid: s.save_checkpoint(sid, 2**63, b"x"),
    "seq a float": lambda s, sid: s.save_checkpoint(sid, 1.0, b"x"),
    "seq a bool": lambda s, sid: s.save_checkpoint(sid, True, b"x"),
    "seq a string": lambda s, sid: s.save_checkpoint(sid, "1", b"x"),
    "data a string": lambda s, sid: s.save_checkpoint(sid, 1, "{}"),
    "data None": lambda s, sid: s.save_checkpoint(sid, 1, None),
    "data a dict": lambda s, sid: s.save_checkpoint(sid, 1, {"window": []}),
    "data over 64 MiB": lambda s, sid: s.save_checkpoint(sid, 1, too_large()),
    "seq and data both bad": lambda s, sid: s.save_checkpoint(sid, -1, "x"),
    "an empty session id": lambda s, sid: s.save_checkpoint("", 1, b"x"),
    "a session id too long": lambda s, sid: s.save_checkpoint("x" * 257, 1, b"x"),
    "NUL in a session id": lambda s, sid: s.save_checkpoint(sid + "\x00", 1, b"x"),
    "a session id and data both bad": lambda s, sid: s.save_checkpoint(None, 1, "x"),
    "a bytes session id, read": lambda s, sid: s.checkpoint(b"s"),
    "a lone surrogate in a session id, read": lambda s, sid: s.checkpoint(sid + "\ud800"),
    "an empty session id, cold load": lambda s, sid: s.load_from_checkpoint(""),
    "a number for a session id, cold load": lambda s, sid: s.load_from_checkpoint(42),
}


@pytest.mark.parametrize("what", list(BAD_CHECKPOINT_CALLS))
def test_bad_checkpoint_arguments_get_the_same_error_from_every_store(
    case: Case, what: str
) -> None:
    from ctxwindow.errors import StoreInputError

    sid = case.sid()
    case.store.append(sid, [entry("a")])
    case.store.save_checkpoint(sid, 1, b"kept")
    with pytest.raises(StoreInputError) as expected:
        BAD_CHECKPOINT_CALLS[what](MemoryStore(), sid)
    with pytest.raises(StoreInputError) as raised:
        BAD_CHECKPOINT_CALLS[what](case.store, sid)
    assert str(raised.value) == str(expected.value)
    assert case.store.checkpoint(sid) == (1, b"kept")
    assert texts(case.store.load(sid)) == ["a"]


def test_a_checkpoint_too_large_names_the_limit() -> None:
    from ctxwindow.errors import StoreInputError

    store = MemoryStore()
    store.append("s", [entry()])
    with pytest.raises(StoreInputError, match=r"at most 64 MiB \(67108864 bytes\)"):
        store.save_checkpoint("s", 1, bytes(MAX_CHECKPOINT + 1))
    store.save_checkpoint("s", 1, bytes(MAX_CHECKPOINT))  # the limit itself is fine
    assert store.checkpoint("s") == (1, bytes(MAX_CHECKPOINT))


def test_a_closed_store_refuses_checkpoints(case: Case) -> None:
    store: Any
    if case.url is not None:
        store = open_again(case)
    elif case.loop is None:
        store = MemoryStore()
    else:
        store = Blocking(AsyncMemoryStore(), case.loop)
    store.close()
    for call in (
        lambda: store.save_checkpoint(case.sid(), 0, b"x"),
        lambda: store.checkpoint(case.sid()),
        lambda: store.load_from_checkpoint(case.sid()),
    ):
        with pytest.raises(StoreError, match="closed"):
            call()


# --- session locks -----------------------------------------------------------------------


def try_lock(case: Case, store: Any, session_id: str, timeout: float) -> bool:
    """Whether ``store.lock(session_id, timeout=…)`` is had (then left at once).

    Sync stores try from another thread, as a concurrent request would.
    """

    def take() -> bool:
        try:
            with store.lock(session_id, timeout=timeout):
                return True
        except SessionBusyError:
            return False

    if case.flavour == "async":
        return take()
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(take).result()


def shared(case: Case) -> None:
    if case.url is None:
        pytest.skip("the memory store lives in one process: no other process can share it")


def open_again(case: Case) -> Any:
    """A second store object over the case's data, as another process would open it."""
    assert case.url is not None
    url = case.url

    def opened() -> Any:
        durable = (open_store if case.flavour == "sync" else open_async_store)(url)
        return tiered_class(case.flavour)(durable, hot_size=8) if case.kind == "tiered" else durable

    if case.loop is None:
        return opened()

    async def opened_on_the_loop() -> Any:
        return opened()

    return Blocking(case.run(opened_on_the_loop()), case.loop)


def test_the_lock_keeps_read_modify_write_whole(case: Case) -> None:
    """Holders that read a counter, pause, and write it plus one lose no update."""
    sid, counter = case.sid(), [0]

    def bump() -> None:
        for _ in range(5):
            with case.raw.lock(sid):
                value = counter[0]
                time.sleep(0.002)
                counter[0] = value + 1

    async def async_bump() -> None:
        for _ in range(5):
            async with case.raw.lock(sid):
                value = counter[0]
                await asyncio.sleep(0.002)
                counter[0] = value + 1

    async def all_async() -> None:
        await asyncio.gather(*(async_bump() for _ in range(6)))

    if case.flavour == "sync":
        with ThreadPoolExecutor(6) as pool:
            for done in [pool.submit(bump) for _ in range(6)]:
                done.result()
    else:
        case.run(all_async())
    assert counter[0] == 30


def test_holding_one_session_does_not_block_another(case: Case) -> None:
    with case.store.lock(case.sid("a")):
        assert try_lock(case, case.store, case.sid("b"), 0.5)


def test_a_held_session_times_out_other_holders(case: Case) -> None:
    sid = case.sid()
    with case.store.lock(sid):
        assert not try_lock(case, case.store, sid, 0.2)
        assert not try_lock(case, case.store, sid, 0)  # the holder still has it
        with pytest.raises(SessionBusyError, match="held"), case.store.lock(sid, timeout=0):
            pass
    assert try_lock(case, case.store, sid, 0)  # free: timeout=0 takes it at the first try


def test_bad_lock_arguments_raise_store_error(case: Case) -> None:
    for bad_timeout in [-1, -0.5, "1", float("nan"), True]:
        with pytest.raises(StoreError), case.store.lock(case.sid(), timeout=bad_timeout):
            pass
    for bad_session in ["", "x" * 257, None, 42]:
        with pytest.raises(StoreError), case.store.lock(bad_session):
            pass
    assert try_lock(case, case.store, case.sid(), 0)


def test_unicode_session_ids_lock(case: Case) -> None:
    sid = case.sid("会话-セッション-🙂")
    with case.store.lock(sid, timeout=5):
        assert not try_lock(case, case.store, sid, 0)
        assert try_lock(case, case.store, case.sid("会话-セッション-🙃"), 0.5)
    assert try_lock(case, case.store, sid, 0)


def test_the_lock_is_released_when_the_block_raises(case: Case) -> None:
    sid = case.sid()
    with pytest.raises(RuntimeError, match="in the block"), case.store.lock(sid):
        raise RuntimeError("in the block")
    assert try_lock(case, case.store, sid, 0)
    if case.url is not None:  # released across processes too
        with contextlib.closing(open_again(case)) as other:
            assert try_lock(case, other, sid, 0)


def test_another_store_object_on_the_same_data_is_excluded(case: Case) -> None:
    shared(case)
    sid = case.sid()
    with contextlib.closing(open_again(case)) as other:
        with case.store.lock(sid):
            assert not try_lock(case, other, sid, 0.2)
            assert try_lock(case, other, case.sid("another session"), 0.5)
        with other.lock(sid, timeout=0):
            assert not try_lock(case, case.store, sid, 0)
        assert try_lock(case, case.store, sid, 0)


def spawn_locker(case: Case, session_id: str, counter: Path, *flags: str) -> subprocess.Popen[str]:
    assert case.url is not None
    args = [sys.executable, str(LOCK_WORKER), case.url, session_id, str(counter), *flags]
    return subprocess.Popen(
        [*args, *case.worker_flags()],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_the_lock_excludes_other_processes(case: Case, tmp_path: Path) -> None:
    """4 processes each add 1 to a counter file 10 times under the lock: the file says 40."""
    shared(case)
    sid, counter = case.sid(), tmp_path / "counter"
    counter.write_text("0")
    with contextlib.ExitStack() as stack:
        workers = [
            stack.enter_context(spawn_locker(case, sid, counter, "--count", "10")) for _ in range(4)
        ]
        outputs = run_together(workers)
    assert all(worker.returncode == 0 for worker in workers), [err for _, err in outputs]
    assert [out for out, _ in outputs] == ["done\n"] * 4
    assert counter.read_text() == "40"


def test_a_holder_killed_with_sigkill_does_not_keep_the_session(case: Case, tmp_path: Path) -> None:
    """SQLite and PostgreSQL free the session at once; Redis when the lease (1 s here) ends,
    PostgreSQL behind PgBouncer when its lease row does (5 s, the default)."""
    shared(case)
    sid = case.sid()
    lease = ["--lock-ttl", "1"] if case.kind in ("redis", "redis-cluster") else []
    with spawn_locker(case, sid, tmp_path / "unused", "--hold", *lease) as holder:
        assert holder.stdout is not None and holder.stdin is not None
        assert holder.stdout.readline() == "ready\n", holder.communicate()[1]
        holder.stdin.write("go\n")
        holder.stdin.flush()
        assert holder.stdout.readline() == "held\n", holder.communicate()[1]
        assert not try_lock(case, case.store, sid, 0.2)
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    assert try_lock(case, case.store, sid, 10)  # waits until the session is free


# --- SQLite: schema migrations, files, errors -------------------------------------------

VERSION_1 = [  # the schema as ctxwindow's first SQLite store wrote it
    "CREATE TABLE schema_version (version INTEGER NOT NULL)",
    "INSERT INTO schema_version VALUES (1)",
    "CREATE TABLE entries (session_id TEXT NOT NULL, seq INTEGER NOT NULL, id TEXT NOT NULL,"
    " json TEXT NOT NULL, tokens INTEGER NOT NULL, created_at REAL NOT NULL,"
    " PRIMARY KEY (session_id, seq))",
    "CREATE UNIQUE INDEX entries_session_id_id ON entries (session_id, id)",
]


def make_database(path: Path, statements: list[str], rows: Sequence[Entry] = ()) -> None:
    with sqlite3.connect(path) as conn:
        for statement in statements:
            conn.execute(statement)
        for e in rows:
            values = ("old", e.seq, e.id, entry_to_json(e), e.tokens, e.created_at)
            conn.execute("INSERT INTO entries VALUES (?, ?, ?, ?, ?, ?)", values)
    conn.close()


def test_opening_a_version_1_database_migrates_it(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    old = dataclasses.replace(entry("from version 1", id="old-1"), seq=1)
    make_database(path, VERSION_1, [old])
    with SQLiteStore(path) as store:
        assert store.health()["schema_version"] == sqlite_module.SCHEMA_VERSION == 4
        assert store.load("old") == [old]
        first = store.append("old", [entry("new")], idempotency_key="k")
        assert store.append("old", [entry("new")], idempotency_key="k") == first
        assert seqs(store.load("old")) == [1, 2]
        store.save_checkpoint("old", 1, b"through the old entry")
        assert store.load_from_checkpoint("old") == ((1, b"through the old entry"), [first[0]])


VERSION_2 = [  # version 1, with the idempotency keys of version 2
    *VERSION_1,
    "UPDATE schema_version SET version = 2",
    "CREATE TABLE idempotency (session_id TEXT NOT NULL, key TEXT NOT NULL,"
    " first_seq INTEGER NOT NULL, last_seq INTEGER NOT NULL, PRIMARY KEY (session_id, key))",
    "INSERT INTO idempotency VALUES ('old', 'k', 1, 1)",
]


VERSION_3 = [  # version 2, with the checkpoints of version 3
    "UPDATE schema_version SET version = 3",
    "CREATE TABLE checkpoints (session_id TEXT NOT NULL PRIMARY KEY, seq INTEGER NOT NULL,"
    " data BLOB NOT NULL)",
]


def test_opening_a_version_2_database_adds_checkpoints_and_keeps_everything(
    tmp_path: Path,
) -> None:
    path = tmp_path / "old.db"
    old = dataclasses.replace(entry("from version 2", id="old-1"), seq=1)
    make_database(path, VERSION_2, [old])
    with SQLiteStore(path) as store:
        assert store.health()["schema_version"] == 4
        assert store.load("old") == [old]
        assert store.replayed("old", "k") == [old]
        assert store.checkpoint("old") is None
        store.save_checkpoint("old", 1, b"{}")
    with SQLiteStore(path) as store:  # opened again: nothing to migrate, all kept
        assert store.load_from_checkpoint("old") == ((1, b"{}"), [])
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT version FROM schema_version").fetchall() == [(4,)]
    conn.close()


def test_a_version_3_database_gets_the_index_of_entries_kept_at_any_budget(
    tmp_path: Path,
) -> None:
    path = tmp_path / "old.db"
    rows = [
        dataclasses.replace(entry("old", id="e1"), seq=1),
        dataclasses.replace(entry("ピン留め", id="e2", pinned=True), seq=2),
        dataclasses.replace(entry("later", id="e3"), seq=3),
    ]
    make_database(path, [*VERSION_2, *VERSION_3], rows)
    with SQLiteStore(path) as store:
        assert store.earlier("old", before=3) == Earlier([rows[1]], 1, rows[0].tokens)
    with sqlite3.connect(path) as conn:
        plan = conn.execute(
            "EXPLAIN QUERY PLAN SELECT json FROM entries WHERE session_id = ? AND seq < ?"
            f" AND {sqlite_schema.KEPT_ALWAYS} ORDER BY seq",
            ("old", 3),
        ).fetchall()
    conn.close()
    assert "entries_kept_always" in str(plan)


def test_a_database_from_a_newer_ctxwindow_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "new.db"
    SQLiteStore(path).close()
    make_database(path, ["UPDATE schema_version SET version = 99"])
    with pytest.raises(StoreError, match="newer"):
        SQLiteStore(path)


def test_a_failing_migration_changes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "store.db"
    SQLiteStore(path).close()

    def broken(conn: sqlite3.Connection) -> None:
        conn.execute("CREATE TABLE half_done (x INTEGER)")
        conn.execute("THIS IS NOT SQL")

    current = sqlite_schema.SCHEMA_VERSION
    monkeypatch.setitem(sqlite_schema.MIGRATIONS, current + 1, broken)
    monkeypatch.setattr(sqlite_schema, "SCHEMA_VERSION", current + 1)
    with pytest.raises(StoreError, match=re.escape(str(path))):
        SQLiteStore(path)
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT version FROM schema_version").fetchall() == [(current,)]
        tables = {name for (name,) in conn.execute("SELECT name FROM sqlite_master")}
    conn.close()
    assert "half_done" not in tables


def test_wal_and_synchronous_are_set(tmp_path: Path) -> None:
    with (
        SQLiteStore(tmp_path / "a.db") as normal,
        SQLiteStore(tmp_path / "b.db", synchronous="FULL") as full,
    ):
        assert normal.health()["journal_mode"] == "wal"
        assert normal.health()["synchronous"] == "NORMAL"
        assert full.health()["synchronous"] == "FULL"
    with pytest.raises(ValueError, match="synchronous"):
        SQLiteStore(tmp_path / "c.db", synchronous="OFF")  # type: ignore[arg-type]


def unopenable_paths(tmp_path: Path) -> dict[str, Path]:
    (tmp_path / "a-file").write_text("not a directory")
    (tmp_path / "a-directory.db").mkdir()
    return {
        "missing directory": tmp_path / "missing" / "store.db",
        "parent is a file": tmp_path / "a-file" / "store.db",
        "path is a directory": tmp_path / "a-directory.db",
    }


def test_an_unopenable_path_raises_store_unavailable(tmp_path: Path) -> None:
    for what, path in unopenable_paths(tmp_path).items():
        with pytest.raises(StoreUnavailableError, match=re.escape(str(path))):
            SQLiteStore(path)
        store = AsyncSQLiteStore(path)
        health = asyncio.run(store.health())
        assert health["ok"] is False, what
        with pytest.raises(StoreUnavailableError):
            asyncio.run(store.load("s"))
        asyncio.run(store.close())


def test_a_read_only_database_raises_store_unavailable(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    with SQLiteStore(path) as store:
        store.append("s", [entry()])
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)  # what a read-only file gives
    with conn, pytest.raises(sqlite3.Error) as raised:
        conn.execute("INSERT INTO entries VALUES ('s', 9, 'x', '{}', 0, 0)")
    conn.close()
    error = sqlite_module.store_error(raised.value, str(path))
    assert isinstance(error, StoreUnavailableError)
    assert str(path) in str(error)


def test_a_file_that_is_not_a_database_raises_store_error(tmp_path: Path) -> None:
    path = tmp_path / "garbage.db"
    path.write_bytes(b"this is not a SQLite database, only text pretending to be one" * 100)
    with pytest.raises(StoreError, match="not a database") as raised:
        SQLiteStore(path)
    assert not isinstance(raised.value, StoreUnavailableError)
    assert isinstance(raised.value.__cause__, sqlite3.Error)
    assert str(path) in str(raised.value)


def test_waiting_too_long_for_the_write_lock_raises_store_unavailable(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    with SQLiteStore(path, busy_timeout=0.05) as store:
        blocker = sqlite3.connect(path, isolation_level=None)
        blocker.execute("BEGIN IMMEDIATE")
        try:
            with pytest.raises(StoreUnavailableError, match="locked"):
                store.append("s", [entry()])
        finally:
            blocker.execute("ROLLBACK")
            blocker.close()
        assert seqs(store.append("s", [entry()])) == [1]


def test_a_checkpoint_that_cannot_be_saved_leaves_the_entries_alone(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    with SQLiteStore(path, busy_timeout=0.05) as store:
        stored = store.append("s", [entry("a"), entry("b")])
        store.save_checkpoint("s", 1, b"one")
        blocker = sqlite3.connect(path, isolation_level=None)
        blocker.execute("BEGIN IMMEDIATE")
        try:
            with pytest.raises(StoreUnavailableError, match="locked"):
                store.save_checkpoint("s", 2, b"two")
        finally:
            blocker.execute("ROLLBACK")
            blocker.close()
        assert store.load_from_checkpoint("s") == ((1, b"one"), stored[1:])
        assert seqs(store.append("s", [entry("c")])) == [3]


def test_a_closed_store_raises_store_error(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "store.db")
    store.close()
    store.close()
    with pytest.raises(StoreError, match="closed"):
        store.load("s")
    assert store.health()["ok"] is False
    async_store = AsyncSQLiteStore(tmp_path / "store.db")
    asyncio.run(async_store.close())
    with pytest.raises(StoreError, match="closed"):
        asyncio.run(async_store.load("s"))


def test_an_in_memory_database_is_shared_by_threads() -> None:
    with SQLiteStore(":memory:") as store:
        with ThreadPoolExecutor(4) as pool:
            list(pool.map(lambda n: store.append("s", [entry(str(n))]), range(20)))
        assert seqs(store.load("s")) == list(range(1, 21))
        assert store.health()["durable"] is False


def test_the_memory_store_says_it_is_not_durable() -> None:
    health = MemoryStore().health()
    assert health["ok"] is True
    assert health["durable"] is False


def test_sqlite_locks_one_byte_of_a_file_beside_the_database(tmp_path: Path) -> None:
    if locks.OFD_SETLK is None:
        pytest.skip("no open-file-description locks on this system (64-bit Linux only)")
    path = tmp_path / "store.db"
    offset = locks.session_hash("会话") & (2**63 - 1)
    with SQLiteStore(path) as store, store.lock("会话"):
        fd = locks.open_lock_file(str(path) + "-lock")  # as another process would
        try:
            assert not locks.try_lock_byte(fd, offset)
            assert locks.try_lock_byte(fd, offset - 1)  # the neighbours stand for other sessions
            assert locks.try_lock_byte(fd, offset + 1)
        finally:
            os.close(fd)
    with SQLiteStore(":memory:") as memory, memory.lock("会话", timeout=0):
        pass


def test_without_ofd_locks_sqlite_holds_sessions_within_the_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fallback where ``F_OFD_SETLK`` does not exist (not Linux): docs/stores.md."""
    monkeypatch.setattr(sqlite_files, "OFD_SETLK", None)
    path = tmp_path / "store.db"
    with SQLiteStore(path) as store, SQLiteStore(path) as other, store.lock("s"):
        with pytest.raises(SessionBusyError), store.lock("s", timeout=0):
            pass
        with other.lock("s", timeout=0):  # not excluded: only the process's own lock
            pass
    assert not (tmp_path / "store.db-lock").exists()


# --- session locks: hashes, Redis leases, PostgreSQL lock connections --------------------


def test_session_hashes_are_the_same_in_every_process() -> None:
    """Processes must agree on the byte or key that stands for a session (unlike ``hash()``)."""
    assert locks.session_hash("会话-セッション-🙂") == -5973015763248839973
    assert locks.session_hash("") == -1970711489451281740


def taken_now(store: Any, session_id: str) -> bool:
    try:
        with store.lock(session_id, timeout=0):
            return True
    except SessionBusyError:
        return False


def eventually(check: Callable[[], bool], seconds: float = 10) -> bool:
    """Whether ``check()`` became true within ``seconds`` (polled)."""
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def test_redis_lock_ttl_must_be_positive_seconds() -> None:
    redis_module = pytest.importorskip("ctxwindow.stores.redis", reason="redis-py not installed")
    for cls in (redis_module.RedisStore, redis_module.AsyncRedisStore):
        for bad in (0, -1, "30", True, None):
            with pytest.raises(ValueError, match="lock_ttl"):
                cls(REDIS_URL, lock_ttl=bad)


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_a_redis_lease_is_renewed_while_held(flavour: str) -> None:
    """Held for 2.5 leases of 1 s, the session is still held: the lease was renewed."""
    url = require_server("redis")
    from ctxwindow.stores.redis import AsyncRedisStore, RedisStore

    prefix = f"ctxw-test-{uuid.uuid4().hex[:12]}"

    async def hold_async(other: Any) -> bool:
        async with AsyncRedisStore(url, prefix=prefix, lock_ttl=1) as store, store.lock("s"):
            await asyncio.sleep(2.5)
            return taken_now(other, "s")

    with RedisStore(url, prefix=prefix) as other:
        if flavour == "sync":
            with RedisStore(url, prefix=prefix, lock_ttl=1) as store, store.lock("s"):
                time.sleep(2.5)
                assert not taken_now(other, "s")
        else:
            assert not asyncio.run(hold_async(other))
        assert taken_now(other, "s")  # released at the end of the block


@contextlib.contextmanager
def redis_with_client(**options: Any) -> Iterator[tuple[Any, Any, str]]:
    """A ``RedisStore`` under a fresh prefix, a raw client, and the prefix; keys removed after."""
    url = require_server("redis")
    import redis

    from ctxwindow.stores.redis import RedisStore

    prefix = f"ctxw-test-{uuid.uuid4().hex[:12]}"
    with RedisStore(url, prefix=prefix, **options) as store, redis.Redis.from_url(url) as client:
        try:
            yield store, client, prefix
        finally:
            keys = list(client.scan_iter(match=f"{prefix}:*", count=1000))
            if keys:
                client.delete(*keys)


def test_redis_lists_sessions_from_a_sorted_set_of_their_ids() -> None:
    """The index a page is read from (``ZRANGEBYLEX``): ids join it with their first entry
    and leave it with their last (delete, truncate to 0)."""
    with redis_with_client() as (store, client, prefix):
        for name in ["b", "会话", "a"]:
            store.append(name, [entry(name)])
        store.append("a", [entry("again")])
        assert store.sessions() == ["a", "b", "会话"]
        assert client.zrange(f"{prefix}:sessions", 0, -1) == [b"a", b"b", "会话".encode()]
        store.delete("b")
        store.truncate("a", 0)
        assert client.zrange(f"{prefix}:sessions", 0, -1) == ["会话".encode()]


def test_redis_sessions_stored_before_the_index_are_listed() -> None:
    """A database written by an earlier ctxwindow (no index) is indexed by its first
    listing, once; later sessions join the index as they are appended."""
    with redis_with_client() as (store, client, prefix):
        for name in ["old", "旧い", "older"]:
            store.append(name, [entry(name)])
        client.delete(f"{prefix}:sessions", f"{prefix}:sessions:indexed")
        assert store.sessions(limit=2) == ["old", "older"]
        assert client.get(f"{prefix}:sessions:indexed") == b"1"
        store.append("new", [entry("new")])
        assert store.sessions() == ["new", "old", "older", "旧い"]


def test_redis_drops_sessions_whose_entries_are_gone_from_the_index() -> None:
    """Entries a server evicted (``maxmemory``) or expired leave their id in the index: a
    page skips it, still full, and drops it."""
    with redis_with_client() as (store, client, prefix):
        for name in "abcdef":
            store.append(name, [entry(name)])
        client.delete(f"{prefix}:e:b", f"{prefix}:e:c", f"{prefix}:e:e")  # as eviction would
        assert store.sessions(limit=2) == ["a", "d"]
        assert store.sessions(after="d", limit=2) == ["f"]
        assert client.zrange(f"{prefix}:sessions", 0, -1) == [b"a", b"d", b"f"]


def test_a_redis_cache_keeps_its_index_from_growing_with_expired_sessions() -> None:
    """With a ttl, sessions expire without a word to the index; each write drops dead ids
    it samples, so the index of a cache stays within a small multiple of its live
    sessions, listed or not."""
    with redis_with_client(ttl=0.05) as (store, client, prefix):
        for number in range(300):  # about 20 sessions live at a time
            store.append(f"s{number}", [entry()])
            time.sleep(0.002)
        assert client.zcard(f"{prefix}:sessions") < 100  # 300 without the pruning
        assert len(store.sessions()) < 100


def test_a_redis_checkpoint_is_one_hash_beside_the_session_keys() -> None:
    with redis_with_client() as (store, client, prefix):
        store.append("会话", [entry("a")])
        store.save_checkpoint("会话", 1, "日本".encode())
        assert client.hgetall(f"{prefix}:c:会话") == {b"seq": b"1", b"data": "日本".encode()}
        assert store.delete("会话") is True
        assert client.exists(f"{prefix}:c:会话") == 0


def test_a_redis_checkpoint_expires_with_its_session() -> None:
    """With a ttl, saving a checkpoint refreshes every key of the session, and an append
    refreshes the checkpoint: it never outlives the entries it covers."""
    with redis_with_client(ttl=60) as (store, client, prefix):
        store.append("s", [entry("a")])
        for kind in "eik":
            client.pexpire(f"{prefix}:{kind}:s", 5000)
        store.save_checkpoint("s", 1, b"one")
        assert all(client.pttl(f"{prefix}:{kind}:s") > 50_000 for kind in "eic")
        client.pexpire(f"{prefix}:c:s", 5000)
        store.append("s", [entry("b")])
        assert client.pttl(f"{prefix}:c:s") > 50_000


def test_a_redis_checkpoint_whose_entries_are_gone_is_ignored_then_dropped() -> None:
    """A cache can lose the entries list (expiry, eviction) and keep the checkpoint: it then
    covers nothing, so it is not returned, and the session's next first entry drops it."""
    with redis_with_client() as (store, client, prefix):
        store.append("s", [entry("a"), entry("b")])
        store.save_checkpoint("s", 2, b"two")
        client.delete(f"{prefix}:e:s", f"{prefix}:i:s")  # as an eviction would
        assert store.checkpoint("s") is None
        assert store.load_from_checkpoint("s") == (None, [])
        again = store.append("s", [entry("c"), entry("d"), entry("e")])
        assert client.exists(f"{prefix}:c:s") == 0
        assert store.load_from_checkpoint("s") == (None, again)
        store.delete("s")
        store.save_checkpoint("s", 0, b"empty")  # seq 0 covers nothing: it stays
        store.append("s", [entry("f")])
        assert store.checkpoint("s") == (0, b"empty")


def test_a_lost_redis_lease_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    url = require_server("redis")
    import redis

    from ctxwindow.stores.redis import RedisStore

    caplog.set_level(logging.WARNING, logger="ctxwindow.stores")
    prefix = f"ctxw-test-{uuid.uuid4().hex[:12]}"
    key = f"{prefix}:lock:会话"
    with RedisStore(url, prefix=prefix, lock_ttl=0.3) as store, redis.Redis.from_url(url) as client:
        with store.lock("会话"):
            token = client.get(key)
            assert token is not None
            client.delete(key)  # as if the lease had expired
            assert eventually(lambda: "was lost" in caplog.text)
        assert token.decode() not in caplog.text
        assert taken_now(store, "会话")


def advisory_holders(conn: Any, key: int) -> list[int]:
    """Backends holding the session-level advisory lock ``key`` (a signed bigint)."""
    unsigned = key & (2**64 - 1)
    rows = conn.execute(
        "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted"
        " AND classid::bigint = %s AND objid::bigint = %s AND objsubid = 1",
        (unsigned >> 32, unsigned & 0xFFFFFFFF),
    ).fetchall()
    return [pid for (pid,) in rows]


def test_a_broken_postgres_lock_connection_is_replaced(caplog: pytest.LogCaptureFixture) -> None:
    """The server drops the locks of a connection that ends; the next lock reconnects."""
    url = require_server("postgresql")
    import psycopg

    from ctxwindow.stores.postgres import PostgresStore, advisory_key

    caplog.set_level(logging.WARNING, logger="ctxwindow.stores")
    sid = f"ctxw-test-{uuid.uuid4().hex[:12]}-会话"
    key = advisory_key(None, sid)
    assert not -(2**31) <= key < 2**31  # apart from the appends' hashtext() locks
    with PostgresStore(url) as store, psycopg.connect(url, autocommit=True) as admin:
        with store.lock(sid):
            holders = advisory_holders(admin, key)
            assert len(holders) == 1
            admin.execute("SELECT pg_terminate_backend(%s)", holders)
            assert eventually(lambda: not advisory_holders(admin, key))
        assert "could not unlock" in caplog.text
        with store.lock(sid, timeout=5):
            assert len(advisory_holders(admin, key)) == 1
        assert advisory_holders(admin, key) == []


def test_postgres_pages_by_code_point_whatever_the_collation() -> None:
    """A database whose collation sorts by language (ICU here) still pages by code point,
    from the index version 4 adds, like every other store."""
    url = require_server("postgresql")
    import psycopg

    from ctxwindow.stores.postgres import PostgresStore

    schema = f"ctxwindow_test_{uuid.uuid4().hex[:12]}"
    ids = ["a", "B", "é", "z", "会话", "🎉", "Z", "_x"]
    with psycopg.connect(url, autocommit=True) as admin:
        try:
            with PostgresStore(url, schema=schema) as store:
                admin.execute(
                    f'ALTER TABLE "{schema}".ctxwindow_sessions'
                    ' ALTER COLUMN session_id TYPE text COLLATE "und-x-icu"'
                )
                for name in ids:
                    store.append(name, [entry(name)])
                assert store.sessions() == sorted(ids)
                assert paged(store, "", [3]) == sorted(ids)
                admin.execute("SET enable_seqscan = off")  # a table this small would be read whole
                plan = admin.execute(
                    f'EXPLAIN SELECT session_id FROM "{schema}".ctxwindow_sessions'
                    ' WHERE session_id COLLATE "C" > \'a\' ORDER BY session_id COLLATE "C" LIMIT 2'
                ).fetchall()
                assert "ctxwindow_sessions_by_code_point" in str(plan)
        finally:
            admin.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


# --- URLs ----------------------------------------------------------------------------------


def test_memory_urls() -> None:
    assert isinstance(open_store("memory://"), MemoryStore)
    assert isinstance(open_async_store("memory://"), AsyncMemoryStore)
    with pytest.raises(StoreError, match="memory://"):
        open_store("memory://somewhere")


def test_sqlite_urls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with open_store("sqlite:///relative.db") as store:
        assert isinstance(store, SQLiteStore)
        store.append("s", [entry()])
    assert (tmp_path / "relative.db").exists()
    absolute = tmp_path / "with space 空.db"
    with open_store(sqlite_url(absolute)) as store, open_store(store.url) as again:
        store.append("s", [entry("shared")])
        assert isinstance(again, SQLiteStore)
        assert again.path == str(absolute)
        assert texts(again.load("s")) == ["shared"]
    for url in ("sqlite:///:memory:", "sqlite://"):
        with open_store(url) as store:
            assert store.health()["durable"] is False
    assert isinstance(open_async_store(sqlite_url(absolute)), AsyncSQLiteStore)


def test_sqlite_url_options(tmp_path: Path) -> None:
    url = sqlite_url(tmp_path / "store.db") + "?synchronous=full&busy_timeout=1.5"
    with open_store(url) as store:
        assert isinstance(store, SQLiteStore)
        assert (store.synchronous, store.busy_timeout) == ("FULL", 1.5)
    for bad in ("?synchronous=OFF", "?busy_timeout=soon", "?journal=delete"):
        with pytest.raises(StoreError, match=re.escape("synchronous=NORMAL|FULL")):
            open_store(sqlite_url(tmp_path / "store.db") + bad)
    with pytest.raises(StoreError, match="no host"):
        open_store("sqlite://host/store.db")


def test_create_false_opens_only_a_store_that_exists(tmp_path: Path) -> None:
    """A SQLite file that is not there is an error naming it, not a new, empty database."""
    missing = tmp_path / "打错了.db"
    for opener in (open_store, open_async_store):
        with pytest.raises(StoreError, match=re.escape(f"no SQLite store at {str(missing)!r}")):
            opener(sqlite_url(missing), create=False)
        with pytest.raises(StoreError, match="the file is not a file"):
            opener(sqlite_url(tmp_path), create=False)
    assert list(tmp_path.iterdir()) == []
    with open_store(sqlite_url(missing)) as store:  # create=True, the default: made
        store.append("s", [entry()])
    with open_store(sqlite_url(missing), create=False) as store:
        assert texts(store.load("s")) == ["hello"]
    with open_store("sqlite:///:memory:", create=False) as store:
        assert store.health()["durable"] is False


def test_default_store_url_is_the_services(tmp_path: Path) -> None:
    from ctxwindow.server import Settings
    from ctxwindow.stores.url import default_store_url

    assert default_store_url(tmp_path) == sqlite_url(tmp_path / "sessions.db")
    assert Settings(data_dir=tmp_path).store_url() == default_store_url(tmp_path)


@pytest.mark.parametrize(
    ("path", "url"),
    [("sessions.db", "sqlite:///sessions.db"), ("/srv/会话.db", "sqlite:////srv/会话.db")],
)
def test_a_path_for_a_url_gets_the_url_to_write(path: str, url: str) -> None:
    with pytest.raises(StoreError, match=re.escape(f"; for a SQLite file write {url!r}")):
        open_store(path)


@pytest.mark.parametrize("url", ["mysql://db/x", "file:///tmp/x.db", "sessions.db", ""])
def test_an_unknown_scheme_lists_the_supported_ones(url: str) -> None:
    for opener in (open_store, open_async_store):
        with pytest.raises(StoreError) as raised:
            opener(url)
        for scheme in ("memory://", "sqlite://", "redis://", "postgresql://"):
            assert scheme in str(raised.value)


@pytest.mark.parametrize(
    ("url", "module", "package", "extra"),
    [
        ("redis://127.0.0.1:6379/15", "ctxwindow.stores.redis", "redis", "redis"),
        ("postgresql://127.0.0.1/test", "ctxwindow.stores.postgres", "psycopg", "postgres"),
    ],
)
def test_a_missing_extra_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch, url: str, module: str, package: str, extra: str
) -> None:
    def missing(*args: Any, **kwargs: Any) -> None:
        raise ModuleNotFoundError(f"No module named {package!r}", name=package)

    # a store module that needs its package only when a store is built
    fake = types.ModuleType(module)
    for name in ("RedisStore", "AsyncRedisStore", "PostgresStore", "AsyncPostgresStore"):
        setattr(fake, name, missing)
    monkeypatch.setitem(sys.modules, module, fake)
    for opener in (open_store, open_async_store):
        with pytest.raises(ImportError, match=re.escape(install_hint(extra))) as raised:
            opener(url)
        assert isinstance(raised.value.__cause__, ModuleNotFoundError)


def nested(depth: int) -> Any:
    value: Any = "bottom"
    for _ in range(depth):
        value = [value]
    return value


UNSTORABLE: dict[str, Callable[[Any, str], Any]] = {
    "NUL in content": lambda s, sid: s.append(sid, [entry("a\x00b")]),
    "a lone surrogate in content": lambda s, sid: s.append(sid, [entry("a\ud800b")]),
    "NUL in a content part": lambda s, sid: s.append(sid, [Entry(
        {"role": "user", "content": [{"type": "text", "text": "\x00"}]}, 1, 0)]),
    "NUL in a metadata key": lambda s, sid: s.append(sid, [entry(metadata={"k\x00": 1})]),
    "a lone surrogate in metadata":
        lambda s, sid: s.append(sid, [entry(metadata={"k": ["\udfff"]})]),
    "NaN in metadata": lambda s, sid: s.append(sid, [entry(metadata={"score": float("nan")})]),
    "an infinite created_at": lambda s, sid: s.append(sid, [entry(created_at=float("inf"))]),
    "metadata nested too deep": lambda s, sid: s.append(sid, [entry(metadata={"k": nested(200)})]),
    "NUL in an entry id": lambda s, sid: s.append(sid, [entry(id="a\x00")]),
    "NUL in the second entry": lambda s, sid: s.append(sid, [entry("ok"), entry("\x00")]),
    "NUL in a session id": lambda s, sid: s.load(sid + "\x00"),
    "a lone surrogate in a session id": lambda s, sid: s.append(sid + "\ud800", [entry()]),
    "NUL in an idempotency key": lambda s, sid: s.append(sid, [entry()], idempotency_key="k\x00"),
    "a lone surrogate in a replay key": lambda s, sid: s.replayed(sid, "\ud800"),
    "NUL in a prefix": lambda s, sid: s.sessions(prefix=sid + "\x00"),
    "after from 2**63": lambda s, sid: s.load(sid, after=2**63),
    "limit from 2**63": lambda s, sid: s.load(sid, limit=2**63),
    "n from 2**63": lambda s, sid: s.tail(sid, 2**63),
}  # fmt: skip


@pytest.mark.parametrize("what", list(UNSTORABLE))
def test_what_some_store_cannot_keep_every_store_refuses_alike(case: Case, what: str) -> None:
    """NUL (PostgreSQL cannot store it), lone surrogates (not UTF-8), NaN and infinities (not
    JSON), counts from 2**63 (not a 64-bit integer): ``StoreInputError`` from every store, in
    the same words, and nothing stored."""
    from ctxwindow.errors import StoreInputError

    sid = case.sid()
    case.store.append(sid, [entry("first")])
    with pytest.raises(StoreInputError) as expected:
        UNSTORABLE[what](MemoryStore(), sid)
    with pytest.raises(StoreInputError) as raised:
        UNSTORABLE[what](case.store, sid)
    assert str(raised.value) == str(expected.value)
    assert texts(case.store.load(sid)) == ["first"]
    assert case.store.sessions(prefix=case.prefix) == [sid]


def test_the_largest_counts_and_deepest_metadata_are_accepted(case: Case) -> None:
    sid = case.sid()
    case.store.append(sid, [entry(metadata={"k": nested(98)})])
    assert case.store.load(sid, after=2**63 - 1) == []
    assert texts(case.store.load(sid, limit=2**63 - 1)) == ["hello"]
    assert texts(case.store.tail(sid, 2**63 - 1)) == ["hello"]
    assert case.store.load(sid)[0].metadata == {"k": nested(98)}


# --- truncate: the one removal -------------------------------------------------------------


def numbered(case: Case, sid: str, count: int) -> list[Entry]:
    return case.store.append(sid, [entry(f"entry {n} 第{n}条 🧾") for n in range(1, count + 1)])


def test_truncate_removes_the_entries_past_the_cut_and_returns_them(case: Case) -> None:
    sid = case.sid()
    stored = numbered(case, sid, 8)
    removed = case.store.truncate(sid, 5)
    assert removed == stored[5:]  # oldest first, exactly as stored
    assert case.store.load(sid) == stored[:5]
    assert case.store.tail(sid, 3) == stored[2:5]
    assert case.store.load(sid, after=4) == stored[4:5]
    assert [case.store.get(sid, e.id) for e in stored] == [*stored[:5], None, None, None]
    assert seqs(case.store.append(sid, [entry("next")])) == [6]  # contiguous from the cut
    assert seqs(case.store.load(sid)) == [1, 2, 3, 4, 5, 6]


def test_a_removed_entry_id_can_be_stored_again(case: Case) -> None:
    sid = case.sid()
    stored = case.store.append(sid, [entry("a", id="a"), entry("b", id="b")])
    assert case.store.truncate(sid, 1) == stored[1:]
    again = case.store.append(sid, [entry("b again", id="b")])
    assert seqs(again) == [2] and case.store.get(sid, "b") == again[0]


def test_truncate_at_or_past_the_end_removes_nothing(case: Case) -> None:
    sid = case.sid()
    stored = numbered(case, sid, 3)
    case.store.save_checkpoint(sid, 3, b"state")
    assert case.store.truncate(sid, 3) == []
    assert case.store.truncate(sid, 1000) == []
    assert case.store.truncate(case.sid("unknown"), 0) == []
    assert case.store.load(sid) == stored
    assert case.store.checkpoint(sid) == (3, b"state")
    assert case.store.sessions(prefix=case.prefix) == [sid]


def test_truncate_to_zero_empties_the_session(case: Case) -> None:
    sid = case.sid()
    stored = numbered(case, sid, 4)
    keyed = case.store.append(sid, [entry("keyed")], idempotency_key="k")
    case.store.save_checkpoint(sid, 2, b"state")
    assert case.store.truncate(sid, 0) == [*stored, *keyed]
    assert case.store.load(sid) == [] and case.store.tail(sid, 1) == []
    assert case.store.sessions(prefix=case.prefix) == []
    assert case.store.checkpoint(sid) is None and case.store.replayed(sid, "k") is None
    assert case.store.delete(sid) is False  # nothing left to delete
    assert seqs(case.store.append(sid, [entry("anew")])) == [1]


def test_truncate_forgets_the_idempotency_keys_of_removed_entries(case: Case) -> None:
    sid = case.sid()
    kept = case.store.append(sid, [entry("a"), entry("b")], idempotency_key="kept")
    split = case.store.append(sid, [entry("c"), entry("d")], idempotency_key="split")
    gone = case.store.append(sid, [entry("e")], idempotency_key="gone")
    assert case.store.truncate(sid, 3) == [split[1], *gone]
    assert case.store.replayed(sid, "kept") == kept
    assert case.store.replayed(sid, "split") is None  # half its batch is gone: no ghost replay
    assert case.store.replayed(sid, "gone") is None
    retried = case.store.append(sid, [entry("e")], idempotency_key="gone")
    assert seqs(retried) == [4] and texts(retried) == ["e"]  # stored again, not a ghost
    assert case.store.append(sid, [entry("x")], idempotency_key="kept") == kept
    assert case.store.replayed(sid, "gone") == retried


def test_truncate_drops_a_checkpoint_past_the_cut(case: Case) -> None:
    sid = case.sid()
    numbered(case, sid, 6)
    case.store.save_checkpoint(sid, 5, b"through 5")
    case.store.truncate(sid, 5)
    assert case.store.checkpoint(sid) == (5, b"through 5")  # covers only what is left
    case.store.truncate(sid, 4)
    assert case.store.checkpoint(sid) is None
    assert case.store.load_from_checkpoint(sid) == (None, case.store.load(sid))
    numbered(case, sid, 3)
    case.store.save_checkpoint(sid, 6, b"through 6")  # a checkpoint saves again after the cut
    assert case.store.checkpoint(sid) == (6, b"through 6")


def test_truncate_keeps_unicode_exactly(case: Case) -> None:
    sid = case.sid("上下文-🎉")
    stored = case.store.append(
        sid, [entry(text, metadata={name: text}) for name, text in UNICODE.items()]
    )
    removed = case.store.truncate(sid, 2)
    assert removed == stored[2:] and texts(removed) == list(UNICODE.values())[2:]
    assert case.store.load(sid) == stored[:2]
    assert sid in case.store.sessions(prefix=case.prefix)


def test_bad_truncate_arguments_remove_nothing(case: Case) -> None:
    sid = case.sid()
    stored = numbered(case, sid, 3)
    for bad in [-1, None, "1", 1.0, True, 2**63]:
        with pytest.raises(StoreError):
            case.store.truncate(sid, bad)
    assert case.store.load(sid) == stored


def check_log(loaded: list[Entry], appended: dict[str, int], removed: list[Entry]) -> None:
    """Every appended entry is either still stored at the seq it got, or was removed by
    exactly one truncate at that seq; the log is contiguous from 1."""
    assert seqs(loaded) == list(range(1, len(loaded) + 1))
    kept = {stored.id: stored.seq for stored in loaded}
    gone = {stored.id: stored.seq for stored in removed}
    assert len(gone) == len(removed)  # nothing removed twice
    assert not kept.keys() & gone.keys()
    assert {**kept, **gone} == appended


def truncating(case: Case, sid: str, stop: threading.Event) -> list[Entry]:
    """Cut a few entries off the session's end, again and again, until ``stop``."""
    removed: list[Entry] = []
    n = 0
    while not stop.is_set():
        last = case.store.tail(sid, 1)
        if last:
            n += 1
            removed += case.store.truncate(sid, max(0, last[0].seq - 1 - n % 4))
        time.sleep(0.002)
    return removed


def test_truncates_racing_appends_leave_no_gap_and_no_duplicate(case: Case) -> None:
    sid = case.sid()

    def appends(worker: int) -> list[Entry]:
        stored = []
        for n in range(40):
            stored.append(case.store.append(sid, [entry(f"{worker}-{n}")])[0])
            time.sleep(0.0005)  # the memory store never waits: let the cutter's thread in
        return stored

    async def cutting(stop: asyncio.Event) -> list[Entry]:
        removed: list[Entry] = []
        n = 0
        while not stop.is_set():
            last = await case.raw.tail(sid, 1)
            if last:
                n += 1
                removed += await case.raw.truncate(sid, max(0, last[0].seq - 1 - n % 4))
            await asyncio.sleep(0.001)
        return removed

    async def all_async() -> tuple[list[list[Entry]], list[Entry]]:
        stop = asyncio.Event()
        cutter = asyncio.ensure_future(cutting(stop))

        async def worker(w: int) -> list[Entry]:
            stored = []
            for n in range(40):
                stored += await case.raw.append(sid, [entry(f"{w}-{n}")])
                await asyncio.sleep(0)  # the memory store never waits: let the cutter in
            return stored

        results = await asyncio.gather(*(worker(w) for w in range(6)))
        stop.set()
        return list(results), await cutter

    if case.flavour == "sync":
        stop = threading.Event()
        with ThreadPoolExecutor(7) as pool:
            cutter = pool.submit(truncating, case, sid, stop)
            results = list(pool.map(appends, range(6)))
            stop.set()
            removed = cutter.result()
    else:
        results, removed = case.run(all_async())
    appended = {stored.id: stored.seq for result in results for stored in result}
    assert len(appended) == 240
    assert removed, "no truncate raced the appends"
    check_log(case.store.load(sid), appended, removed)
    assert seqs(case.store.append(sid, [entry("last")])) == [len(case.store.load(sid))]


def test_truncates_racing_appends_from_many_processes(case: Case) -> None:
    durable(case)
    sid = case.sid()
    stop = threading.Event()
    with contextlib.ExitStack() as stack, ThreadPoolExecutor(1) as pool:
        workers = [
            stack.enter_context(spawn(case, sid, "--count", "40", "--wait")) for _ in range(3)
        ]
        cutter = pool.submit(truncating, case, sid, stop)
        try:
            outputs = run_together(workers)
        finally:
            stop.set()
        removed = cutter.result()
    assert all(worker.returncode == 0 for worker in workers), [err for _, err in outputs]
    appended = {
        entry_id: int(seq)
        for out, _ in outputs
        for seq, entry_id in map(str.split, out.splitlines())
    }
    assert len(appended) == 120
    check_log(case.store.load(sid), appended, removed)


def test_a_redis_truncate_leaves_no_key_of_removed_entries() -> None:
    with redis_with_client() as (store, client, prefix):
        stored = store.append("s", [entry("a"), entry("b")], idempotency_key="k1")
        store.append("s", [entry("c")], idempotency_key="k2")
        store.save_checkpoint("s", 3, b"x")
        store.truncate("s", 2)
        assert sorted(client.hkeys(f"{prefix}:i:s")) == sorted(e.id.encode() for e in stored)
        assert client.hkeys(f"{prefix}:k:s") == [b"k1"]
        assert not client.exists(f"{prefix}:c:s")
        store.truncate("s", 0)
        assert list(client.scan_iter(match=f"{prefix}:*")) == []


def test_a_stale_redis_copy_is_dropped_by_a_fill_that_disagrees() -> None:
    with redis_with_client(ttl=60) as (store, _, _):
        old = [dataclasses.replace(entry(t), seq=n) for n, t in enumerate("abc", 1)]
        assert store.fill("s", old)
        new = [*old[:1], *(dataclasses.replace(entry(t), seq=n) for n, t in enumerate("xy", 2))]
        assert store.fill("s", new) is False  # another entry at seq 2: the copy is stale
        assert store.load("s") == []
        assert store.fill("s", new) and store.load("s") == new


@pytest.mark.servers
def test_tiered_copies_in_other_processes_follow_a_truncate(tmp_path: Path) -> None:
    """Two tiered stores (as two processes would) over one SQLite file and one Redis: what
    one truncates, and writes anew past the other's cached end, the other reads right."""
    url = require_server("redis")
    from ctxwindow.stores.redis import RedisStore
    from ctxwindow.stores.tiered import TieredStore

    prefix = f"ctxw-test-{uuid.uuid4().hex[:12]}"

    def tiered() -> Any:
        warm = RedisStore(url, prefix=prefix, ttl=60)
        return TieredStore(SQLiteStore(tmp_path / "s.db"), warm=warm, hot_size=4)

    first, second = tiered(), tiered()
    try:
        first.append("s", [entry(f"old {n}") for n in range(6)])
        assert texts(second.load("s")) == [f"old {n}" for n in range(6)]
        first.truncate("s", 3)
        assert texts(second.load("s")) == ["old 0", "old 1", "old 2"]
        assert texts(first.warm.load("s")) == ["old 0", "old 1", "old 2"]  # type: ignore[union-attr]
        first.truncate("s", 2)
        first.append("s", [entry(f"new {n} 新") for n in range(5)])
        expected = first.durable.load("s")
        assert seqs(expected) == [1, 2, 3, 4, 5, 6, 7]
        assert second.load("s") == expected and second.tail("s", 2) == expected[-2:]
        assert second.get("s", expected[-1].id) == expected[-1]
        assert first.load("s") == expected and first.warm.load("s") == expected  # type: ignore[union-attr]
    finally:
        first.delete("s")
        first.close()
        second.close()
