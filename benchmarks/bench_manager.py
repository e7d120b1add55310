"""ContextManager per turn against TokenWindow, and the hybrid's recall build on LoCoMo.

A script, not a test: it prints what it measured, ratios taken side by side
in the same run, and a PASS/MISS line per target. Nothing fails on a time.

1. **Per turn.** One turn = add a user message, build the context, add the
   assistant's reply (``TokenWindow``: ``add`` + ``messages()`` + ``add``),
   with N = 100, 1,000 and 10,000 messages already in the session. The
   contenders, budget 4,096 tokens for gpt-4o, system prompt set:
   ``TokenWindow``; ``ContextManager`` (default hybrid policy) over a
   ``MemoryStore``; over a ``SQLiteStore`` (temporary file); over a
   ``SQLiteStore`` with a ``SQLiteArchive`` (temporary file). They take turns
   in rotating order, turn by turn, on the same texts: each contender gets its
   own copy tagged `` #k``, so that counting it is a cache miss for each, as
   a new message's count is (the count cache is shared by the process).
   Clocks per turn: wall (``perf_counter``) and the calling thread's CPU
   (``thread_time``) over the three calls, and the CPU of the whole process
   (``process_time``, every thread) from the start of the turn until the
   archive has indexed the turn's last message. The archive indexes in a
   background worker thread; the script waits for it after each turn, outside
   the wall time but inside the process CPU, so each turn is charged with its
   own indexing and the next turn starts with nothing queued (a server's idle
   time between requests). The prefill (``extend`` in batches, then
   ``drain()`` and the same wait) is not timed per turn. Then a fresh
   ``TokenWindow`` takes the same turns back to back, not interleaved: how
   much the interleaving (cold CPU caches after a manager's turn) costs it.
2. **Recall build.** Each LoCoMo dev conversation (``../shared/data``, read
   in place, never copied: CC BY-NC) goes whole into a ``ContextManager`` as
   ``ctxwindow eval``'s ``hybrid_words`` strategy builds it (``MemoryStore``,
   in-memory ``SQLiteArchive``, ``reserve_output=0``, no prefetch), at
   budgets 2,048 and 4,096; then every question is timed as
   ``manager.preview(session, {"role": "user", "content": question})``
   (wall and CPU; the archive drained first). The ``on_event`` hook's
   ``("recall_seconds", s)`` gives the share of the time spent searching the
   archive. Without the file, a synthetic 600-turn conversation stands in.
   These builds search by words (the archive without an embedder): part 3
   prices the embedder.
3. **The default embedder's cost per turn.** With ``EMBEDDER_N`` messages in
   the session, the same turns through a ``SQLiteArchive`` searched by words
   and one searched by words and meaning (``default_embedder()``, the
   ``dense`` extra), interleaved as in part 1: the difference of the median
   process CPU per turn is what the embedder adds (embedding the turn's two
   messages in the archive's worker, the question as a query, and scanning
   the vectors). Skipped, with the reason, without the extra.

``--quick``: N up to 1,000, 50 turns, 2 conversations. ``--turns T`` sets the
timed turns per N (default 200).
"""

from __future__ import annotations

import argparse
import datetime
import gc
import os
import platform
import random
import statistics
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ctxwindow import TokenWindow
from ctxwindow.archive.embedders import Embedder, default_embedder
from ctxwindow.archive.sqlite import SQLiteArchive
from ctxwindow.context import ContextManager
from ctxwindow.eval import load_dataset
from ctxwindow.messages import Entry
from ctxwindow.stores.base import Store
from ctxwindow.stores.memory import MemoryStore
from ctxwindow.stores.sqlite import SQLiteStore
from ctxwindow.tokens import chat_tokenizer
from workload import EN_WORDS, JA_WORDS, ZH_WORDS

SEED = 20240509
MODEL = "gpt-4o"
BUDGET = 4096
SYSTEM = (
    "You are a careful, friendly assistant for a small software team. Answer concisely, "
    "cite the file you are talking about, and say so when you are not sure."
)
SIZES = (100, 1_000, 10_000)
QUICK_SIZES = (100, 1_000)
TURNS, QUICK_TURNS = 200, 50
PREFILL_BATCH = 500
RECALL_BUDGETS = (2048, 4096)
QUICK_CONVERSATIONS = 2
SYNTHETIC_TURNS, SYNTHETIC_QUESTIONS = 600, 200
LOCOMO = Path(__file__).resolve().parents[2] / "shared" / "data" / "locomo-dev.json"
SESSION = "bench"
TARGET_RATIO = 10.0  # ContextManager with an archive / TokenWindow, CPU per turn
TARGET_P99_MS = 2.0  # hybrid build with recall, wall p99
EMBEDDER_N = 1_000  # messages in the session when the embedder's cost per turn is measured
WORDS, MEANING = "words (BM25)", "words + meaning (e5)"

Message = dict[str, str]
Pair = tuple[Message, Message]  # a user turn and its reply


# -- workload ------------------------------------------------------------------------


EMOJI = ("😀", "🚀", "👍", "🎉", "🤖", "❤️", "🔥", "✅", "🙏", "😅", "👩‍💻", "💡")
IDENTS = ("config.yaml", "main.py", "README.md", "v2.3.1", "HTTP 503", "utf-8", "/api/v1/users")


class Texts:
    """Seeded chat texts of 10-80 words, some Chinese or Japanese, some emoji; none twice."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.seen: set[str] = set()

    def messages(self, n: int, first: int = 0) -> list[Message]:
        """``n`` alternating messages, a user's first if ``first`` is even."""
        roles = ("user", "assistant")
        return [self.message(roles[(first + i) % 2]) for i in range(n)]

    def message(self, role: str) -> Message:
        text = self._text(role)
        while text in self.seen:
            text = self._text(role)
        self.seen.add(text)
        return {"role": role, "content": text}

    def _text(self, role: str) -> str:
        rng = self.rng
        median = 20 if role == "user" else 45  # replies are longer
        n_words = int(min(80, max(10, rng.lognormvariate(0.0, 0.5) * median)))
        cjk = ZH_WORDS if rng.random() < 0.6 else JA_WORDS
        cjk_share = rng.choice((0.0, 0.0, 0.0, 0.25, 0.9))
        emoji_rate = 0.05 if rng.random() < 0.2 else 0.0
        sentences, words = [], 0
        while words < n_words:
            length = min(n_words - words, rng.randint(5, 14))
            words += length
            if rng.random() < cjk_share:
                sentences.append("".join(rng.choices(cjk, k=length)) + rng.choice("。！？"))
            else:
                sentences.append(self._sentence(length, emoji_rate))
        return " ".join(sentences)

    def _sentence(self, length: int, emoji_rate: float) -> str:
        rng, parts = self.rng, []
        for _ in range(length):
            r = rng.random()
            word = rng.choice(IDENTS) if r < 0.03 else str(rng.randint(0, 99_999))
            parts.append(rng.choice(EN_WORDS) if r >= 0.06 else word)
            if rng.random() < emoji_rate:
                parts.append(rng.choice(EMOJI))
        sentence = " ".join(parts)
        return sentence[0].upper() + sentence[1:] + rng.choice("..?!")


def tagged(message: Message, tag: int) -> Message:
    """The message with a contender's tag: the same work, but new to the count cache."""
    return {"role": message["role"], "content": f"{message['content']} #{tag}"}


# -- the archive, watched ------------------------------------------------------------


class WatchedArchive(SQLiteArchive):
    """A ``SQLiteArchive`` that can be waited on until a session is indexed through a seq."""

    def __init__(self, path: str = ":memory:", embedder: Embedder | None = None) -> None:
        super().__init__(path, embedder=embedder)
        self._indexed = threading.Condition()
        self._through: dict[str, int] = {}

    def index(
        self,
        session_id: str,
        entries: Iterable[Entry],
        *,
        user_id: str | None = None,
        through: int | None = None,
    ) -> int:
        changed = super().index(session_id, entries, user_id=user_id, through=through)
        with self._indexed:
            done = max(self._through.get(session_id, 0), through or 0)
            self._through[session_id] = done
            self._indexed.notify_all()
        return changed

    def wait_through(self, session_id: str, seq: int, timeout: float = 60.0) -> None:
        """Block until the session is indexed through ``seq`` (by any thread)."""

        def done() -> bool:
            return self._through.get(session_id, 0) >= seq

        with self._indexed:
            if not self._indexed.wait_for(done, timeout):
                raise RuntimeError(f"the archive did not index seq {seq} in {timeout} s")


def settle(archive: WatchedArchive | None, seq: int) -> None:
    """Wait until every turn up to ``seq`` is archived and the worker has gone idle."""
    if archive is None:
        return
    archive.wait_through(SESSION, seq)
    time.sleep(0.001)  # the worker's few µs after a batch: not charged to the next contender


# -- part 1: contenders --------------------------------------------------------------


@dataclass
class Sample:
    """One turn's clocks, in ns."""

    wall: int
    thread: int
    process: int
    search: int = 0  # inside archive searches (on_event's recall_seconds)


@dataclass
class Times:
    """The samples of one contender at one N, and what its last context held."""

    samples: list[Sample] = field(default_factory=list)
    kept: int = 0
    prefill_s: float = 0.0

    def of(self, clock: str) -> list[int]:
        return [getattr(s, clock) for s in self.samples]


class WindowTurns:
    """``TokenWindow``: add + messages() + add."""

    name = "TokenWindow"

    def __init__(self) -> None:
        self.window = TokenWindow(BUDGET, MODEL, system=SYSTEM)

    def prefill(self, messages: Sequence[Message]) -> None:
        for message in messages:
            self.window.add(message)

    def turn(self, user: Message, reply: Message) -> tuple[Sample, int]:
        t0, c0, w0 = time.thread_time_ns(), time.process_time_ns(), time.perf_counter_ns()
        self.window.add(user)
        kept = len(self.window.messages())
        self.window.add(reply)
        wall = time.perf_counter_ns() - w0
        return Sample(wall, time.thread_time_ns() - t0, time.process_time_ns() - c0), kept

    def close(self) -> None:
        pass


class ManagerTurns:
    """``ContextManager``: add(user) + build + add(reply), then the archive caught up."""

    def __init__(self, name: str, store: Store, archive: WatchedArchive | None = None) -> None:
        self.name = name
        self.archive = archive
        self.searched = 0.0
        self.manager = ContextManager(
            store, MODEL, archive=archive, budget=BUDGET, reserve_output=0, on_event=self.on_event
        )

    def on_event(self, name: str, value: float) -> None:
        if name == "recall_seconds":
            self.searched += value

    def prefill(self, messages: Sequence[Message]) -> None:
        last = self.manager.add(SESSION, {"role": "system", "content": SYSTEM})
        for start in range(0, len(messages), PREFILL_BATCH):
            last = self.manager.extend(SESSION, messages[start : start + PREFILL_BATCH])[-1]
        self.manager.drain()
        settle(self.archive, last.seq)

    def turn(self, user: Message, reply: Message) -> tuple[Sample, int]:
        manager, self.searched = self.manager, 0.0
        t0, c0, w0 = time.thread_time_ns(), time.process_time_ns(), time.perf_counter_ns()
        manager.add(SESSION, user)
        kept = len(manager.build(SESSION).messages)
        last = manager.add(SESSION, reply)
        wall, thread = time.perf_counter_ns() - w0, time.thread_time_ns() - t0
        settle(self.archive, last.seq)
        cpu = time.process_time_ns() - c0
        return Sample(wall, thread, cpu, round(self.searched * 1e9)), kept

    def close(self) -> None:
        self.manager.close()
        if self.archive is not None:
            self.archive.close()


Contender = WindowTurns | ManagerTurns
ALONE = "TokenWindow, back to back"


def contenders(folder: Path, n: int) -> list[Contender]:
    return [
        WindowTurns(),
        ManagerTurns("manager, memory", MemoryStore()),
        ManagerTurns("manager, SQLite", SQLiteStore(folder / f"plain-{n}.db")),
        ManagerTurns(
            "manager, SQLite + archive",
            SQLiteStore(folder / f"archived-{n}.db"),
            WatchedArchive(str(folder / f"archive-{n}.db")),
        ),
    ]


def measure_size(texts: Texts, n: int, turns: int, folder: Path) -> dict[str, Times]:
    """Prefill every contender with the same N messages, then time ``turns`` turns each,
    interleaved; then a fresh TokenWindow takes the same turns back to back."""
    prefill = texts.messages(n)
    pairs = [(texts.message("user"), texts.message("assistant")) for _ in range(turns)]
    racers = contenders(folder, n)
    times = interleaved(racers, prefill, pairs)
    alone = WindowTurns()
    times[ALONE] = prefilled(alone, prefill)
    gc.collect()
    for user, reply in pairs:
        timed_turn(alone, times[ALONE], tagged(user, len(racers)), tagged(reply, len(racers)))
    return times


def interleaved(
    racers: Sequence[Contender],
    prefill: Sequence[Message],
    pairs: Sequence[tuple[Message, Message]],
) -> dict[str, Times]:
    """Each contender prefilled, then the turns timed, the contenders in rotating order."""
    times = {racer.name: prefilled(racer, prefill) for racer in racers}
    gc.collect()
    for i, (user, reply) in enumerate(pairs):
        for k in rotated(range(len(racers)), i):
            timed_turn(racers[k], times[racers[k].name], tagged(user, k), tagged(reply, k))
    for racer in racers:
        racer.close()
    return times


def prefilled(racer: Contender, prefill: Sequence[Message]) -> Times:
    started = time.perf_counter()
    racer.prefill(prefill)
    return Times(prefill_s=time.perf_counter() - started)


def timed_turn(racer: Contender, times: Times, user: Message, reply: Message) -> None:
    sample, times.kept = racer.turn(user, reply)
    times.samples.append(sample)


def rotated(items: Sequence[int], shift: int) -> list[int]:
    shift %= len(items)
    return [*items[shift:], *items[:shift]]


# -- part 1: report ------------------------------------------------------------------


def bench_turns(sizes: Sequence[int], turns: int) -> dict[int, dict[str, Times]]:
    rule("1. Per turn: ContextManager vs TokenWindow (add user + build + add reply)")
    print(
        f"   Budget {BUDGET:,} tokens ({MODEL}), system prompt set; {turns} turns per N, the\n"
        "   contenders in rotating order turn by turn, on the same texts (tagged per\n"
        "   contender so each count is a cache miss).\n"
        "   wall = the three calls; thread CPU = the calling thread's CPU over them;\n"
        "   process CPU = every thread's, until the archive has indexed the turn (its\n"
        "   worker runs in the background; waited for after each turn).\n"
        "   x TW = median process CPU (wall) / TokenWindow's, this N. 'TokenWindow, back to\n"
        "   back' = a fresh TokenWindow taking the same turns after the others, not interleaved."
    )
    print(
        f"   {'N':>6}  {'contender':<26} {'wall p50':>9} {'wall p99':>9} {'thread p50':>10}"
        f" {'CPU p50':>9} {'CPU p99':>9} {'x TW CPU':>9} {'x TW wall':>9} {'kept':>5}"
        f" {'search':>6} {'prefill':>8}"
    )
    results: dict[int, dict[str, Times]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-manager-") as folder:
        texts = Texts(SEED)
        for n in sizes:
            results[n] = measure_size(texts, n, turns, Path(folder))
            print_size(n, results[n])
    print(
        "   kept = messages in the context built at the last timed turn; search = share of the\n"
        "   wall time inside archive searches (on_event recall_seconds); prefill = adding the\n"
        f"   N messages (ContextManager: extend by {PREFILL_BATCH}, drain, wait for the archive)"
    )
    return results


def print_size(n: int, times: dict[str, Times]) -> None:
    base = times[WindowTurns.name]
    base_cpu, base_wall = median(base.of("process")), median(base.of("wall"))
    for name, t in times.items():
        walls, cpus = t.of("wall"), t.of("process")
        print(
            f"   {n:>6,}  {name:<26} {fmt_ns(median(walls)):>9} {fmt_ns(p99(walls)):>9}"
            f" {fmt_ns(median(t.of('thread'))):>10} {fmt_ns(median(cpus)):>9}"
            f" {fmt_ns(p99(cpus)):>9} {median(cpus) / base_cpu:>8.1f}x"
            f" {median(walls) / base_wall:>8.1f}x {t.kept:>5} {search_share(t):>6}"
            f" {t.prefill_s:>6.2f} s",
            flush=True,
        )


def search_share(times: Times) -> str:
    """The share of the wall time spent in archive searches ('-' without any)."""
    searched = sum(times.of("search"))
    return f"{searched / sum(times.of('wall')):.0%}" if searched else "-"


def worst_ratio(
    results: dict[int, dict[str, Times]], name: str, clock: str, base: str = WindowTurns.name
) -> tuple[float, int]:
    """The largest median(``clock``) ratio of ``name`` to ``base`` over N, and its N."""
    ratios = [
        (median(times[name].of(clock)) / median(times[base].of(clock)), n)
        for n, times in results.items()
    ]
    return max(ratios)


# -- part 2: the recall build ----------------------------------------------------------


@dataclass
class Conversation:
    """A conversation's messages with their ids, and the questions asked after it."""

    name: str
    ids: list[str]
    messages: list[Message]
    questions: list[str]


@dataclass
class Built:
    """The clocks of each question's preview, in ns, and the search seconds inside them."""

    wall: list[int] = field(default_factory=list)
    cpu: list[int] = field(default_factory=list)
    search_s: float = 0.0
    ingest_s: float = 0.0

    def extend(self, other: Built) -> None:
        self.wall += other.wall
        self.cpu += other.cpu
        self.search_s += other.search_s
        self.ingest_s += other.ingest_s


def locomo_conversations(limit: int | None) -> list[Conversation] | None:
    """LoCoMo's dev conversations, rendered as the eval renders them; None without the file."""
    if not LOCOMO.exists():
        return None
    dataset, _ = load_dataset(f"locomo:{LOCOMO}", include_unanswerable=True)
    return [
        Conversation(
            c.id,
            list(c.message_ids),
            [dict(m) for m in c.messages],
            [q.question for q in c.questions],
        )
        for c in dataset.conversations[:limit]
    ]


def synthetic_conversation(texts: Texts) -> Conversation:
    """A stand-in of LoCoMo's size: 600 turns of two speakers, 200 questions."""
    messages = []
    for i, message in enumerate(texts.messages(SYNTHETIC_TURNS)):
        speaker = "Ann" if i % 2 == 0 else "Bo"
        messages.append({"role": message["role"], "content": f"{speaker}: {message['content']}"})
    questions = [texts.message("user")["content"] for _ in range(SYNTHETIC_QUESTIONS)]
    ids = [f"D{i}" for i in range(len(messages))]
    return Conversation("synthetic", ids, messages, questions)


def measure_conversation(conversation: Conversation, budget: int) -> Built:
    """Ingest the conversation as the eval's ``hybrid`` does, then preview every question."""
    searches: list[float] = []

    def on_event(name: str, value: float) -> None:
        if name == "recall_seconds":
            searches.append(value)

    archive = WatchedArchive()
    manager = ContextManager(
        MemoryStore(), MODEL, archive=archive, budget=budget, reserve_output=0,
        prefetch=False, on_event=on_event,
    )  # fmt: skip
    built = Built()
    started = time.perf_counter()
    last = None
    for message_id, message in zip(conversation.ids, conversation.messages, strict=True):
        last = manager.add(SESSION, message, metadata={"id": message_id})
    manager.drain()
    assert last is not None
    settle(archive, last.seq)
    built.ingest_s = time.perf_counter() - started
    gc.collect()
    searches.clear()
    for question in conversation.questions:
        preview = {"role": "user", "content": question}
        c0, w0 = time.process_time_ns(), time.perf_counter_ns()
        manager.preview(SESSION, preview)
        built.wall.append(time.perf_counter_ns() - w0)
        built.cpu.append(time.process_time_ns() - c0)
    built.search_s = sum(searches)
    manager.close()
    archive.close()
    return built


def bench_recall(conversations: list[Conversation], source: str) -> dict[int, Built]:
    rule("2. The hybrid's build with recall: ContextManager.preview per question")
    print(
        f"   {source}\n"
        "   Per budget and conversation: every turn added (MemoryStore, in-memory SQLiteArchive,\n"
        "   reserve_output 0, no prefetch: as `ctxwindow eval` builds `hybrid_words`),\n"
        "   the archive drained, then preview(session, question) timed for every question.\n"
        "   search = share of the wall time inside archive searches (on_event recall_seconds)."
    )
    print(
        f"   {'budget':>6}  {'conversation':<12} {'turns':>5} {'qs':>4} {'wall p50':>9}"
        f" {'wall p99':>9} {'wall max':>9} {'CPU p50':>9} {'CPU p99':>9} {'CPU max':>9}"
        f" {'search':>6}"
    )
    totals: dict[int, Built] = {}
    for budget in RECALL_BUDGETS:
        total = totals[budget] = Built()
        for conversation in conversations:
            built = measure_conversation(conversation, budget)
            total.extend(built)
            print_built(budget, conversation.name, len(conversation.messages), built)
        turns = sum(len(c.messages) for c in conversations)
        print_built(budget, "all", turns, total)
    ingest = ", ".join(f"{b:,}: {t.ingest_s:.1f} s" for b, t in totals.items())
    print(f"   ingest (add every turn, then drain; not timed above), by budget: {ingest}")
    return totals


def print_built(budget: int, name: str, turns: int, built: Built) -> None:
    share = built.search_s * 1e9 / sum(built.wall)
    print(
        f"   {budget:>6,}  {name:<12} {turns:>5,} {len(built.wall):>4}"
        f" {fmt_ns(median(built.wall)):>9} {fmt_ns(p99(built.wall)):>9}"
        f" {fmt_ns(max(built.wall)):>9} {fmt_ns(median(built.cpu)):>9}"
        f" {fmt_ns(p99(built.cpu)):>9} {fmt_ns(max(built.cpu)):>9} {share:>6.0%}",
        flush=True,
    )


# -- part 3: the default embedder ---------------------------------------------------


def bench_embedder(turns: int) -> float | None:
    """The default embedder's cost per turn: the same turns through an archive searched by
    words alone and by words and meaning, interleaved; returns the added process CPU (ns)."""
    rule(f"3. The default embedder's cost per turn (N = {EMBEDDER_N:,}, {turns} turns)")
    try:
        embedder = default_embedder()
    except ImportError as exc:  # installed but not loadable
        print(f"   not measured: {exc}")
        return None
    if embedder is None:
        print("   not measured: the dense extra is not installed (pip install '.[dense]')")
        return None
    print(
        f"   {type(embedder).__name__} ({getattr(embedder, 'name', '?')}): a turn's two messages\n"
        "   embedded as passages by the archive's worker, the question as a query, and the\n"
        "   session's vectors scanned per search; both contenders as in part 1 (SQLite store\n"
        "   and archive files). CPU = the process's, every thread, until the turn is indexed."
    )
    texts = Texts(SEED + 1)
    prefill = texts.messages(EMBEDDER_N)
    pairs = [(texts.message("user"), texts.message("assistant")) for _ in range(turns)]
    with tempfile.TemporaryDirectory(prefix="bench-embedder-") as name:
        folder = Path(name)
        racers = [
            ManagerTurns(
                WORDS, SQLiteStore(folder / "w.db"), WatchedArchive(str(folder / "wa.db"))
            ),
            ManagerTurns(
                MEANING,
                SQLiteStore(folder / "m.db"),
                WatchedArchive(str(folder / "ma.db"), embedder=embedder),
            ),
        ]
        times = interleaved(racers, prefill, pairs)
    print(f"   {'archive':<26} {'wall p50':>9} {'wall p99':>9} {'CPU p50':>9} {'CPU p99':>9}")
    for name, t in times.items():
        print(
            f"   {name:<26} {fmt_ns(median(t.of('wall'))):>9} {fmt_ns(p99(t.of('wall'))):>9}"
            f" {fmt_ns(median(t.of('process'))):>9} {fmt_ns(p99(t.of('process'))):>9}"
        )
    added = median(times[MEANING].of("process")) - median(times[WORDS].of("process"))
    wall = median(times[MEANING].of("wall")) - median(times[WORDS].of("wall"))
    print(f"   the embedder's cost per turn: {fmt_ns(added)} CPU, {fmt_ns(wall)} wall (medians)")
    return added


def recall_workload(quick: bool) -> tuple[list[Conversation], str]:
    limit = QUICK_CONVERSATIONS if quick else None
    found = locomo_conversations(limit)
    if found is not None:
        questions = sum(len(c.questions) for c in found)
        return found, (
            f"LoCoMo dev ({LOCOMO.name}, read in place): {len(found)} conversations, "
            f"{questions} questions\n   (all of qa with evidence, adversarial ones included)."
        )
    note = f"{LOCOMO} not found (see shared/data/README.md): a synthetic conversation instead"
    return [synthetic_conversation(Texts(SEED + 1))], note + "."


# -- statistics and formatting ---------------------------------------------------------


def median(values: Sequence[int]) -> float:
    return float(statistics.median(values))


def p99(values: Sequence[int]) -> float:
    """Nearest-rank 99th percentile."""
    ordered = sorted(values)
    rank = max(1, min(len(ordered), round(0.99 * len(ordered) + 0.5)))
    return float(ordered[rank - 1])


def fmt_ns(ns: float) -> str:
    if ns < 1_000_000:
        return f"{ns / 1_000:.1f} µs"
    if ns < 1_000_000_000:
        return f"{ns / 1_000_000:.2f} ms"
    return f"{ns / 1_000_000_000:.2f} s"


def rule(title: str) -> None:
    print()
    print(title)
    print("-" * len(title))


def verdict(ok: bool) -> str:
    return "PASS" if ok else "MISS"


def revision() -> str:
    """The commit measured, and whether src/ differs from it (others may be editing it)."""
    here = Path(__file__).resolve().parent

    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], cwd=here, capture_output=True, text=True)
        return done.stdout.strip() if done.returncode == 0 else ""

    commit = git("log", "-1", "--format=%h %s")[:70] or "unknown (not a git checkout)"
    dirty = git("status", "--porcelain", "--", ":/src")
    return commit + (" (+ uncommitted changes in src/)" if dirty else "")


def header(args: argparse.Namespace) -> None:
    print("ctxwindow manager benchmark\n===========================")
    print(f"date      {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC")
    print(f"python    {platform.python_version()} ({platform.python_implementation()})")
    print(f"machine   {platform.machine()}, {platform.system()}, CPUs {os.cpu_count()}")
    print(f"checkout  {revision()}")
    sizes = ", ".join(f"{n:,}" for n in args.sizes)
    print(f"workload  seed {SEED}; N = {sizes}; {args.turns} turns per N; 10-80 words, some CJK")


def summary(
    turns: dict[int, dict[str, Times]], recall: dict[int, Built], embedder: float | None
) -> None:
    rule("Summary (targets)")
    archived = "manager, SQLite + archive"
    cpu, n = worst_ratio(turns, archived, "process")
    print(
        f"   {verdict(cpu <= TARGET_RATIO)}  ContextManager with an archive / TokenWindow per "
        f"turn (process CPU, median, worst N={n:,}): {cpu:.1f}x (target <= {TARGET_RATIO:.0f}x)"
    )
    wall, n = worst_ratio(turns, archived, "wall")
    print(f"   info  the same in wall time (worst N={n:,}): {wall:.1f}x")
    alone, n = worst_ratio(turns, archived, "process", base=ALONE)
    print(f"   info  the same against TokenWindow back to back (worst N={n:,}): {alone:.1f}x")
    for name in ("manager, memory", "manager, SQLite"):
        ratio, n = worst_ratio(turns, name, "process")
        print(f"   info  {name} / TokenWindow (process CPU, worst N={n:,}): {ratio:.1f}x")
    budget, worst = max(recall.items(), key=lambda item: p99(item[1].wall))
    print(
        f"   {verdict(p99(worst.wall) <= TARGET_P99_MS * 1e6)}  hybrid build with recall p99 "
        f"(wall, worst budget {budget:,}): {fmt_ns(p99(worst.wall))} "
        f"(target <= {TARGET_P99_MS:.0f} ms); CPU p99 {fmt_ns(p99(worst.cpu))}"
    )
    if embedder is not None:
        print(f"   info  the default embedder's cost per turn (process CPU): {fmt_ns(embedder)}")


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="N up to 1,000, 50 turns, 2 convs")
    parser.add_argument("--turns", type=int, help=f"timed turns per N (default {TURNS})")
    args = parser.parse_args()
    args.sizes = QUICK_SIZES if args.quick else SIZES
    args.turns = args.turns or (QUICK_TURNS if args.quick else TURNS)
    if args.turns < 1:
        parser.error("--turns must be at least 1")
    return args


def main() -> None:
    args = arguments()
    started = time.perf_counter()
    header(args)
    chat_tokenizer(MODEL).text("load the encoding outside every timed region")
    turns = bench_turns(args.sizes, args.turns)
    conversations, source = recall_workload(args.quick)
    recall = bench_recall(conversations, source)
    embedder = bench_embedder(args.turns)
    summary(turns, recall, embedder)
    print(f"   total run time {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
