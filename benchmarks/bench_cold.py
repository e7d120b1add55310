"""A cold 100,000-message session with no usable checkpoint: the service's first turn.

A session written straight into the store (by another version, another
configuration, an import) has no checkpoint the service can use. Its first
turn used to read and replay every entry: 56.6 s and +290 MB measured from
outside. Now the service reads the newest entries that fill the budget and
the ones kept at any budget (``AsyncStore.earlier``), and leaves the rest to
the archive's worker, a batch at a time.

Per store (SQLite; Redis db 11 and PostgreSQL database ``test`` if they
answer), the script writes ``--size`` alternating messages (seeded texts,
20-60 words, a quarter Chinese or Japanese; a system prompt first, a pinned
fact early) straight into the store, then starts fresh ``ctxwindow serve``
processes over it (archive off; archive on with the default embedder) in
front of a fake upstream. Each answers one chat turn of a tiny session first
(the process's own start-up: imports, tokenizer, embedder), then the first
turn of the long session (timed; the process's RSS before and after), a
second turn, and the first page of ``/context``.

Side by side in the same run, the old way: the same session loaded whole in
this process (``ContextManager`` over the store with a cold load that reads
every entry, as before), timed with its RSS growth.

Nothing here asserts a time: the targets print PASS or MISS.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import os
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from bench_server import (
    SERVER_URLS,
    Process,
    Texts,
    free_port,
    reachable,
    revision,
    running,
    upstream_process,
)
from ctxwindow.context import ContextManager, checkpoints
from ctxwindow.messages import Entry
from ctxwindow.stores import open_store
from ctxwindow.tokens import chat_tokenizer

MODEL = "gpt-4o-mini"
SEED = 20261203
TARGET_SECONDS, TARGET_MB = 2.0, 100.0


def rss_mb(pid: int) -> float:
    """Resident memory of the process ``pid`` and its children, in MiB."""
    total = 0
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            fields = dict(line.split(":", 1) for line in status.read_text().splitlines())
        except (OSError, ValueError):
            continue
        if int(status.parent.name) == pid or fields.get("PPid", "").strip() == str(pid):
            total += int(fields.get("VmRSS", "0 kB").split()[0])
    return total / 1024


def write_session(url: str, sid: str, size: int) -> int:
    """``size`` messages straight into the store at ``url``; returns their tokens."""
    texts, tokenizer = Texts(SEED), chat_tokenizer(MODEL)
    system = {"role": "system", "content": "You are a helpful assistant. Be brief."}
    messages = [system, *texts.messages(size - 1)]
    messages[3] = {"role": "user", "content": "Remember: my locker code is 4711 (ロッカー)."}
    tokens = 0
    with open_store(url) as store:
        for start in range(0, size, 1000):
            batch = []
            for n, message in enumerate(messages[start : start + 1000], start):
                count = tokenizer.message_tokens(message)
                tokens += count
                batch.append(Entry(message, count, 0, pinned=n == 3))
            store.append(sid, batch)
    return tokens


def old_way(url: str, sid: str) -> tuple[float, float]:
    """(seconds, MiB) of the old cold load in this process: every entry read and replayed."""
    saved = checkpoints.NEWEST
    checkpoints.NEWEST = 10**12  # reads every entry, replays them all: as before
    gc.collect()
    before = rss_mb(os.getpid())
    try:
        with ContextManager(url, model=MODEL) as manager:
            started = time.perf_counter()
            manager.build(sid)
            return time.perf_counter() - started, rss_mb(os.getpid()) - before
    finally:
        checkpoints.NEWEST = saved


@contextlib.contextmanager
def service(upstream: Process, url: str, folder: Path, archive: bool) -> Iterator[Process]:
    port = free_port()
    args = [
        sys.executable, "-m", "ctxwindow.server", "--port", str(port), "--upstream",
        f"{upstream.url}/v1", "--store", url,
    ]  # fmt: skip
    env = {"CTXWINDOW_DATA_DIR": str(folder), "CTXWINDOW_MAX_MESSAGES_PER_SESSION": "1000000"}
    if not archive:
        env["CTXWINDOW_ARCHIVE"] = "off"
    with running(args, port, "/healthz", env, folder / "service.log") as process:
        yield process


def turn(client: httpx.Client, process: Process, sid: str, text: str) -> tuple[float, Any]:
    started = time.perf_counter()
    response = client.post(
        f"{process.url}/v1/chat/completions",
        json={"model": MODEL, "messages": [{"role": "user", "content": text}]},
        headers={"X-Session-Id": sid},
    )
    elapsed = time.perf_counter() - started
    if response.status_code != 200:
        raise RuntimeError(f"{response.status_code}: {response.text[:300]}")
    return elapsed, response.json()


def idle(client: httpx.Client, process: Process, seconds: float = 60.0) -> None:
    """Wait until the service's archive has nothing queued (``ctxwindow_archive_queued``)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        metrics = client.get(f"{process.url}/metrics").text
        queued = [
            line for line in metrics.splitlines() if line.startswith("ctxwindow_archive_queued")
        ]
        if not queued or float(queued[0].split()[-1]) == 0:
            return
        time.sleep(0.2)


def measure(client: httpx.Client, process: Process, sid: str) -> dict[str, float]:
    turn(client, process, f"warm-{uuid.uuid4().hex[:6]}", "hello, 你好 👋")  # start-up
    idle(client, process)  # the archive's worker indexed that turn: the embedder is loaded
    before = rss_mb(process.popen.pid)
    first, _ = turn(client, process, sid, "And my locker code, again?")
    after = rss_mb(process.popen.pid)
    second, _ = turn(client, process, sid, "Thanks. What did we say last?")
    started = time.perf_counter()
    page = client.get(f"{process.url}/v1/sessions/{sid}/context", params={"limit": 50})
    context_s = time.perf_counter() - started
    return {
        "first_s": first, "rss_mb": after - before, "second_s": second,
        "context_s": context_s, "context_kb": len(page.content) / 1024,
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=100_000, help="messages in the session")
    parser.add_argument("--stores", default="sqlite,redis,postgresql")
    args = parser.parse_args()
    print("ctxwindow cold-session benchmark\n================================")
    print(f"date      {time.strftime('%Y-%m-%d %H:%M', time.gmtime())} UTC; CPUs {os.cpu_count()}")
    print(f"checkout  {revision()}")
    print(f"session   {args.size:,} messages written straight to the store; model {MODEL}")
    rows = []
    with (
        tempfile.TemporaryDirectory(prefix="bench-cold-") as tmp,
        httpx.Client(timeout=600.0) as client,
        upstream_process(free_port()) as upstream,
    ):
        folder = Path(tmp)
        for store in args.stores.split(","):
            url = f"sqlite:///{folder / 'sessions.db'}" if store == "sqlite" else SERVER_URLS[store]
            if not reachable(url):
                print(f"   {store}: not reachable, skipped")
                continue
            name = f"cold-{uuid.uuid4().hex[:8]}"
            sid = f"default:{name}"  # the id the service keeps for the client's (no keys)
            tokens = write_session(url, sid, args.size)
            print(f"   {store}: wrote {args.size:,} messages, {tokens:,} tokens")
            try:
                for archive in (False, True):
                    cold_again(url, sid, args.size)
                    data = folder / f"{store}-{archive}"
                    data.mkdir()
                    with service(upstream, url, data, archive) as process:
                        found = measure(client, process, name)
                    rows.append((store, "on" if archive else "off", found))
                    print(f"   {store}, archive {'on' if archive else 'off'}: {found}")
                cold_again(url, sid, args.size)
                seconds, mb = old_way(url, sid)
                rows.append((store, "old way", {"first_s": seconds, "rss_mb": mb}))
            finally:
                with open_store(url) as raw:
                    raw.delete(sid)
    report(rows)


def cold_again(url: str, sid: str, size: int) -> None:
    """The session as written: the turns a run added go, with the checkpoint saved after
    them (the written session ends with a question, so none was saved before)."""
    with open_store(url) as store:
        store.truncate(sid, size)
        assert store.checkpoint(sid) is None


def report(rows: list[tuple[str, str, dict[str, float]]]) -> None:
    print("\n   store        archive    first turn   RSS growth   2nd turn  /context p1")
    for store, archive, found in rows:
        extra = (
            f"{found['second_s']:>9.3f} s {found['context_s']:>7.3f} s"
            f" ({found['context_kb']:.0f} KiB)"
            if "second_s" in found
            else ""
        )
        print(
            f"   {store:<12} {archive:<9} {found['first_s']:>9.2f} s {found['rss_mb']:>9.0f} MB"
            f" {extra}"
        )
    print()
    for store in dict.fromkeys(row[0] for row in rows):
        old = next(f for s, a, f in rows if s == store and a == "old way")
        for s, archive, found in rows:
            if s != store or archive == "old way":
                continue
            ok = found["first_s"] <= TARGET_SECONDS and found["rss_mb"] <= TARGET_MB
            print(
                f"   {'PASS' if ok else 'MISS'}  {store}, archive {archive}: first turn"
                f" {found['first_s']:.2f} s (<= {TARGET_SECONDS} s), +{found['rss_mb']:.0f} MB"
                f" (<= {TARGET_MB:.0f} MB); the old way {old['first_s'] / found['first_s']:.0f}x"
                f" slower, {old['rss_mb']:.0f} MB"
            )


if __name__ == "__main__":
    main()
