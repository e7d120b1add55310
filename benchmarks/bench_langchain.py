"""Per-turn cost of trimming a LangChain history turn after turn (run from this folder).

A script, not a test: it prints what it measured and the ratios, side by side in
one run; nothing fails on timing. Offline (packaged encodings).

One turn = append one new message to the history, then trim it to the budget
(``strategy="last"``, ``include_system=True``, ``start_on="human"``), with
N = 1,000 messages already in the history (a system prompt, user and assistant
messages of 10-120 words, some Chinese or Japanese, and a tool call with its
result every ninth turn). Texts never repeat, so no cache hides tokenizing.
Contenders, each from the same prefilled history:

1. ``ctxwindow.integrations.langchain.trim_messages`` on the growing list
   (``token_counter="gpt-4o"``), its cache warmed by one call on the prefill;
2. the same, given a new list of the same messages each turn (as LangGraph
   state is), which also pays the copy of the list;
3. the same, its cache cleared before every turn (what the cache saves);
4. ``langchain_core.messages.trim_messages`` with an exact tiktoken counter
   (o200k_base, the chat framing of OpenAI's guide: 3 a message, 3 of reply
   priming, tool calls' names and arguments) — every turn counts again;
5. ``langchain_core.messages.trim_messages`` with ctxwindow's exact counter
   (``ChatTokenizer.count``, which caches counts by text: the same texts are
   not tokenized twice, so it only pays conversion and adding up).
"""

from __future__ import annotations

import gc
import json
import platform
import random
import statistics
import time
from collections.abc import Callable
from importlib import metadata
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.messages import trim_messages as langchain_trim

from ctxwindow.integrations import langchain as adapter
from ctxwindow.integrations.langchain import to_openai, trim_messages
from ctxwindow.tokens import chat_tokenizer, get_encoding
from workload import EN_WORDS, JA_WORDS, ZH_WORDS

SEED = 20241130
N = 1_000
BUDGET = 8192
MODEL = "gpt-4o"
TURNS = {"ours": 300, "ours_copy": 300, "ours_cold": 20, "lc_tiktoken": 20, "lc_ctxwindow": 20}
OPTIONS: dict[str, Any] = {"max_tokens": BUDGET, "include_system": True, "start_on": "human"}
TOKENIZER = chat_tokenizer(MODEL)
ENCODE = get_encoding("o200k_base").encode_ordinary


class Conversation:
    """Seeded, never-repeating messages: user and assistant turns, a tool unit every 9th."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.n = 0

    def text(self, words: int) -> str:
        rng, self.n = self.rng, self.n + 1
        pool = EN_WORDS if rng.random() < 0.75 else (ZH_WORDS if rng.random() < 0.6 else JA_WORDS)
        joiner = "" if pool is not EN_WORDS else " "
        return f"{self.n}. " + joiner.join(rng.choice(pool) for _ in range(words))

    def turn(self) -> list[BaseMessage]:
        """The next turn: a user message, or a tool unit, or an assistant message."""
        i, rng = self.n, self.rng
        if i % 2 == 0:
            return [HumanMessage(self.text(rng.randint(10, 40)))]
        if i % 9 == 1:
            call = {"name": "search", "args": {"query": self.text(5)}, "id": f"call_{i}"}
            result = ToolMessage(self.text(rng.randint(30, 120)), tool_call_id=f"call_{i}")
            return [AIMessage("", tool_calls=[call]), result]
        return [AIMessage(self.text(rng.randint(20, 120)))]

    def messages(self, n: int) -> list[BaseMessage]:
        out: list[BaseMessage] = []
        while len(out) < n:
            out += self.turn()
        return out


def tiktoken_counter(messages: list[BaseMessage]) -> int:
    """Exact prompt tokens for gpt-4o, re-tokenizing every message (what users write)."""
    total = 3
    for message in messages:
        total += 3 + len(ENCODE(message.type)) + len(ENCODE(str(message.content)))
        for call in getattr(message, "tool_calls", ()):
            total += 3 + len(ENCODE(call["name"])) + len(ENCODE(json.dumps(call["args"])))
    return total


def ctxwindow_counter(messages: list[BaseMessage]) -> int:
    return TOKENIZER.count([to_openai(m) for m in messages])


def contenders() -> dict[str, Callable[[list[BaseMessage]], list[BaseMessage]]]:
    def cold(history: list[BaseMessage]) -> list[BaseMessage]:
        adapter.trim_messages.cache_clear()  # type: ignore[attr-defined]
        return trim_messages(history, **OPTIONS)

    return {
        "ours": lambda history: trim_messages(history, **OPTIONS),
        "ours_copy": lambda history: trim_messages(list(history), **OPTIONS),
        "ours_cold": cold,
        "lc_tiktoken": lambda history: langchain_trim(
            history, token_counter=tiktoken_counter, **OPTIONS
        ),
        "lc_ctxwindow": lambda history: langchain_trim(
            history, token_counter=ctxwindow_counter, **OPTIONS
        ),
    }


LABELS = {
    "ours": "ctxwindow trim_messages",
    "ours_copy": "ctxwindow, new list each turn",
    "ours_cold": "ctxwindow, cache cleared",
    "lc_tiktoken": "langchain, tiktoken counter",
    "lc_ctxwindow": "langchain, ctxwindow counter",
}


def time_turns(name: str, trim: Callable[[list[BaseMessage]], list[BaseMessage]]) -> list[float]:
    """Seconds per turn: append the next message, trim; from the same N-message prefill."""
    adapter.trim_messages.cache_clear()  # type: ignore[attr-defined]
    history = Conversation(SEED).messages(N)
    fresh = Conversation(SEED + 1).messages(TURNS[name])
    trim(history)  # warm: the first call on a history reads all of it
    times = []
    gc.collect()
    for message in fresh[: TURNS[name]]:
        started = time.perf_counter()
        history.append(message)
        kept = trim(history)
        times.append(time.perf_counter() - started)
    assert not name.startswith("ours") or ctxwindow_counter(kept) <= BUDGET
    return times


def main() -> None:
    print("ctxwindow vs LangChain: trim_messages turn after turn")
    print(
        f"python {platform.python_version()}, langchain-core {metadata.version('langchain-core')}"
    )
    print(f"N = {N:,} messages, budget {BUDGET:,} tokens ({MODEL}), include_system, start_on=human")
    print()
    print(f"  {'contender':<30} {'turns':>5}  {'median':>10}  {'p90':>10}")
    medians = {}
    time_turns("ours", contenders()["ours"])  # warm the interpreter's caches once
    for name, trim in contenders().items():
        times = time_turns(name, trim)
        medians[name] = statistics.median(times)
        p90 = statistics.quantiles(times, n=10)[-1]
        print(f"  {LABELS[name]:<30} {len(times):>5}  {fmt(medians[name])}  {fmt(p90)}")
    print()
    print("  Ratios (medians, this run):")
    for other in ("lc_tiktoken", "lc_ctxwindow", "ours_cold", "ours_copy"):
        ratio = medians[other] / medians["ours"]
        print(f"    {LABELS[other]:<30} / ctxwindow trim_messages: {ratio:8.1f}x")


def fmt(seconds: float) -> str:
    return f"{seconds * 1e6:>8.1f}µs" if seconds < 1e-3 else f"{seconds * 1e3:>8.2f}ms"


if __name__ == "__main__":
    main()
