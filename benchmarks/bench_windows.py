"""Benchmarks for ctxwindow's windows and token-counting backends (run: ``make bench``).

A script, not a test: it prints what it measured and a PASS/MISS line per
target; nothing fails on timing. Everything runs offline: the encodings come
from ``ctxwindow.tokens.get_encoding`` (packaged, verified files), never from
tiktoken's downloader.

What is measured (all contenders side by side, in the same run, on the same
texts):

1. Per-turn cost of a context window = one ``add()`` of a new message plus one
   ``messages()`` call, with N = 100 / 1,000 / 10,000 messages already added:
   (a) ``ctxwindow.TokenWindow``;
   (b) the naive window of the usual tutorial: a list of the whole history,
       re-counted with tiktoken (content tokens + 3 per message) on every add,
       oldest messages dropped until the total fits;
   (c) ``langchain_core.messages.trim_messages`` on the whole history with a
       token counter built on the same tiktoken encoding.
2. Bookkeeping share of a TokenWindow turn: the part of a turn that is not
   tokenizing the new message.
3. Token-counting backends: tiktoken vs bpe-openai (speed, load time, identical
   ids).
"""

from __future__ import annotations

import datetime
import gc
import os
import platform
import random
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from importlib import metadata

from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    trim_messages,
)

from ctxwindow import TokenWindow, count_tokens
from ctxwindow.tokens import (
    BpeOpenAICounter,
    ChatTokenizer,
    TiktokenCounter,
    chat_tokenizer,
    get_encoding,
)

SEED = 20240509
BUDGET = 8192
MODEL = "gpt-4o"  # o200k_base
ENCODING = "o200k_base"
SYSTEM = (
    "You are a careful, friendly assistant for a small software team. Answer concisely, "
    "cite the file you are talking about, and say so when you are not sure."
)
HISTORY_SIZES = (100, 1_000, 10_000)
# Timed turns per contender and history size. TokenWindow: REPS fresh windows, each
# prefilled with the same N messages, then TW_TURNS timed turns on never-seen texts.
# The list-based contenders re-tokenize the whole history every turn, so they get
# fewer turns at large N; each of their turns starts from exactly N messages.
REPS = 10
TW_TURNS = 50
TURNS = {
    "TokenWindow": dict.fromkeys((100, 1_000, 10_000), REPS * TW_TURNS),
    "naive": {100: 200, 1_000: 50, 10_000: 10},
    "trim_messages": {100: 100, 1_000: 30, 10_000: 8},
}
CONTENDERS = ("TokenWindow", "naive", "trim_messages")
LABELS = {
    "TokenWindow": "ctxwindow TokenWindow",
    "naive": "naive re-count (tiktoken)",
    "trim_messages": "langchain trim_messages",
}
TARGET_FLAT = 1.5  # TokenWindow at 10,000 / at 100
TARGET_SPEEDUP = 200.0  # contender / TokenWindow at 1,000
TARGET_BOOKKEEPING = 0.10  # share of a TokenWindow turn that is not tokenizing
BACKEND_SAMPLES = 2_000
LONG_DOC_TOKENS = 50_000
LOAD_REPEATS = 5
SPEED_REPEATS = 7
N_FUZZ = 300

Turn = tuple[str, str]  # (role, content)


# -- workload ------------------------------------------------------------------------


def _words(text: str) -> tuple[str, ...]:
    return tuple(text.split())


EN_WORDS = _words(
    "the a an and or but if then so because when while after before of to in on at for "
    "with from by about into over under between this that these those it its we you they "
    "he she I me my your our their is are was were be been being have has had do does did "
    "can could will would should may might must not no yes please thanks sure okay maybe "
    "file function class method test tests error bug fix patch build release version "
    "config value values list dict string number token tokens window budget message "
    "messages model prompt system user assistant reply context history cache memory "
    "time speed fast slow query database server client request response header status "
    "code line lines loop index key keys path folder repo branch commit merge review "
    "deploy log logs metric metrics chart report table column row data schema field "
    "type types python rust docs example examples question answer idea plan step steps "
    "first second next last again still already just only also even really quite very "
    "good better best bad worse simple hard easy small large long short new old same "
    "different important useful clear wrong right true false empty full open closed "
    "run runs ran read write wrote add remove change update check try use make see know "
    "think want need look find show tell explain help work works start stop keep send"
)
ZH_WORDS = _words(
    "你好 我们 今天 天气 很好 数据 模型 上下文 窗口 问题 请 帮我 翻译 这个 句子 "
    "为什么 怎么 可以 需要 测试 代码 文件 函数 错误 修复 版本 发布 用户 助手 回答 "
    "时间 速度 缓存 内存 服务器 请求 响应 日志 配置 谢谢 没问题 当然 也许 已经"
)
JA_WORDS = _words(
    "こんにちは ありがとう 東京 今日は 天気 データ モデル です ます について "
    "質問 答え ファイル 関数 エラー 修正 テスト コード 設定 速い 遅い 確認 "
    "お願いします 大丈夫 すみません 少し もう一度 説明 例えば つまり"
)
EMOJI = ("😀", "🚀", "👍", "🎉", "🤖", "❤️", "🔥", "✅", "🙏", "😅", "👩‍💻", "🇯🇵", "💡", "📈")
IDENTS = ("config.yaml", "main.py", "README.md", "v2.3.1", "HTTP 503", "utf-8", "/api/v1/users")


class TextSource:
    """Deterministic chat texts, 10-200 words, some CJK and emoji; never the same text twice."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.seen: set[str] = set()

    def take(self, n: int, first_role: int = 0) -> list[Turn]:
        """``n`` alternating turns, the first a user's if ``first_role`` is 0."""
        out = []
        for i in range(n):
            role = "user" if (i + first_role) % 2 == 0 else "assistant"
            text = self._text(role)
            while text in self.seen:
                text = self._text(role)
            self.seen.add(text)
            out.append((role, text))
        return out

    def _text(self, role: str) -> str:
        rng = self.rng
        median = 25 if role == "user" else 80  # assistants write longer replies
        n_words = int(min(200, max(10, rng.lognormvariate(0.0, 0.6) * median)))
        kind = rng.random()
        cjk = ZH_WORDS if rng.random() < 0.6 else JA_WORDS
        cjk_share = 0.0 if kind < 0.72 else (0.25 if kind < 0.9 else 0.9)
        emoji_rate = 0.04 if rng.random() < 0.2 else 0.0
        sentences: list[str] = []
        words = 0
        while words < n_words:
            length = min(n_words - words, rng.randint(5, 16))
            words += length
            if rng.random() < cjk_share:
                body = "".join(rng.choice(cjk) for _ in range(length))
                sentences.append(body + rng.choice("。！？"))
                continue
            parts = []
            for _ in range(length):
                r = rng.random()
                if r < 0.03:
                    parts.append(rng.choice(IDENTS))
                elif r < 0.06:
                    parts.append(str(rng.randint(0, 99_999)))
                else:
                    parts.append(rng.choice(EN_WORDS))
                if rng.random() < emoji_rate:
                    parts.append(rng.choice(EMOJI))
            sentence = " ".join(parts)
            sentences.append(sentence[0].upper() + sentence[1:] + rng.choice("..?!:"))
        joiner = "\n\n" if role == "assistant" and rng.random() < 0.3 else " "
        return joiner.join(sentences)


# -- contenders ----------------------------------------------------------------------


class NaiveWindow:
    """The tutorial window: keep everything, re-count everything on every add.

    This is the generous version of it: each add tokenizes every message once
    (not once per dropped message), then drops the oldest until the total fits.
    """

    def __init__(self, budget: int, system: str) -> None:
        self.enc = get_encoding(ENCODING)
        self.budget = budget
        self.system = {"role": "system", "content": system}
        self.history: list[dict[str, str]] = []
        self.kept: list[dict[str, str]] = [self.system]

    def add(self, role: str, content: str) -> None:
        self.history.append({"role": role, "content": content})
        encode = self.enc.encode_ordinary
        counts = [len(encode(m["content"])) + 3 for m in self.history]
        total = 3 + len(encode(self.system["content"])) + 3 + sum(counts)  # priming + system
        start = 0
        while total > self.budget and start < len(counts):
            total -= counts[start]
            start += 1
        self.kept = [self.system, *self.history[start:]]

    def messages(self) -> list[dict[str, str]]:
        return self.kept


def lc_token_counter(messages: list[BaseMessage]) -> int:
    """Tokens of a list of langchain messages: content + 3 per message + 3 priming."""
    encode = get_encoding(ENCODING).encode_ordinary
    return 3 + sum(len(encode(m.content)) + 3 for m in messages)  # str content


def to_langchain(turns: Sequence[Turn]) -> list[BaseMessage]:
    return [HumanMessage(text) if role == "user" else AIMessage(text) for role, text in turns]


class TurnTimes:
    """Nanoseconds per timed turn, and for TokenWindow its parts and the tokenize baselines."""

    def __init__(self) -> None:
        self.turn: list[int] = []
        self.add: list[int] = []
        self.messages: list[int] = []
        self.tok_raw: list[int] = []
        self.tok_chat: list[int] = []
        self.kept = 0


def time_token_window(prefill: Sequence[Turn], turns: Sequence[Turn]) -> TurnTimes:
    """TokenWindow turns, plus tokenizing each new message alone, on the same text.

    ``REPS`` fresh windows are prefilled with the same N messages (not timed)
    and each takes the next ``TW_TURNS`` new texts. The tokenize baselines use
    the very same text as the turn, in the same cache state: the raw tiktoken
    counter has no cache, and the ``ChatTokenizer`` is a fresh one whose count
    cache has never seen the text (the window's shared cache has not either).
    The three measurements of a turn rotate their order, so none of them always
    runs first (on cold CPU caches).
    """
    framing = chat_tokenizer(MODEL).framing
    raw = TiktokenCounter(ENCODING)
    per_message = framing.per_message
    clock = time.perf_counter_ns
    out = TurnTimes()
    for rep in range(REPS):
        window = TokenWindow(max_tokens=BUDGET, model=MODEL, system=SYSTEM)
        for role, text in prefill:
            window.add(role, text)
        fresh_chat = ChatTokenizer(TiktokenCounter(ENCODING), framing, model=MODEL)
        gc.collect()
        for i, (role, text) in enumerate(turns[rep * TW_TURNS : (rep + 1) * TW_TURNS]):
            for step in ((0, 1, 2), (1, 2, 0), (2, 0, 1))[i % 3]:
                if step == 0:
                    t0 = clock()
                    raw.count(role) + raw.count(text) + per_message
                    out.tok_raw.append(clock() - t0)
                elif step == 1:
                    t0 = clock()
                    fresh_chat.message_tokens({"role": role, "content": text})
                    out.tok_chat.append(clock() - t0)
                else:
                    t0 = clock()
                    window.add(role, text)
                    t1 = clock()
                    window.messages()
                    t2 = clock()
                    out.turn.append(t2 - t0)
                    out.add.append(t1 - t0)
                    out.messages.append(t2 - t1)
        kept = window.messages()
        # A sanity check of the result (outside the timed region).
        assert window.total_tokens == count_tokens(kept, model=MODEL) <= BUDGET
        out.kept = len(kept)
        del window, fresh_chat
    return out


def time_naive(prefill: Sequence[Turn], turns: Sequence[Turn]) -> TurnTimes:
    """Naive window turns; the added message is removed after timing (history stays N)."""
    window = NaiveWindow(BUDGET, SYSTEM)
    window.history.extend({"role": r, "content": t} for r, t in prefill)
    clock = time.perf_counter_ns
    out = TurnTimes()
    gc.collect()
    for role, text in turns:
        t0 = clock()
        window.add(role, text)
        window.messages()
        out.turn.append(clock() - t0)
        out.kept = len(window.messages())
        window.history.pop()
    return out


def time_trim(prefill: Sequence[Turn], turns: Sequence[Turn]) -> TurnTimes:
    """trim_messages turns; converting the new text is not timed, appending and trimming is."""
    history: list[BaseMessage] = [SystemMessage(SYSTEM), *to_langchain(prefill)]
    new = to_langchain(turns)
    clock = time.perf_counter_ns
    out = TurnTimes()
    gc.collect()
    for message in new:
        t0 = clock()
        history.append(message)
        kept = trim_messages(
            history,
            max_tokens=BUDGET,
            token_counter=lc_token_counter,
            strategy="last",
            include_system=True,
            start_on="human",
        )
        out.turn.append(clock() - t0)
        out.kept = len(kept)
        history.pop()
    return out


# -- statistics and formatting -------------------------------------------------------


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (works for a handful of samples)."""
    ordered = sorted(values)
    rank = max(1, min(len(ordered), round(q / 100 * len(ordered) + 0.5)))
    return ordered[rank - 1]


def fmt_ns(ns: float) -> str:
    if ns < 1_000:
        return f"{ns:.0f} ns"
    if ns < 1_000_000:
        return f"{ns / 1_000:.1f} µs"
    if ns < 1_000_000_000:
        return f"{ns / 1_000_000:.2f} ms"
    return f"{ns / 1_000_000_000:.2f} s"


def fmt_ratio(x: float) -> str:
    return f"{x:,.0f}x" if x >= 100 else f"{x:.2f}x"


def rule(title: str) -> None:
    print()
    print(title)
    print("-" * len(title))


# -- benchmark 1 and 2: windows --------------------------------------------------------


def bench_windows(source: TextSource) -> dict[str, float]:
    rule("1. Per-turn cost: one add() + one messages() with N messages already added")
    print(
        f"   Budget {BUDGET:,} tokens ({MODEL}, {ENCODING}), system prompt set. Timed per turn:\n"
        "   (a) window.add(role, text) + window.messages()  [TokenWindow]\n"
        "   (b) window.add(role, text) + window.messages()  [naive: re-count all, drop oldest]\n"
        "   (c) history.append(msg) + trim_messages(history, ...)  [text -> HumanMessage/\n"
        "       AIMessage conversion done before the clock starts]\n"
        "   Same new texts for all three at each N (TokenWindow takes more of them), each new\n"
        "   to every cache. (b) and (c) drop the new message after timing, so every turn\n"
        f"   starts from exactly N; TokenWindow: {REPS} fresh windows x {TW_TURNS} turns per N."
    )
    print(f"   {'N':>6}  {'contender':<27} {'turns':>5}  {'median':>10}  {'p90':>10}  {'kept':>4}")
    medians: dict[tuple[str, int], float] = {}
    tw_times: dict[int, TurnTimes] = {}
    for n in HISTORY_SIZES:
        prefill = source.take(n)
        turns = source.take(max(t[n] for t in TURNS.values()), first_role=n % 2)
        for name in CONTENDERS:
            count = TURNS[name][n]
            if name == "TokenWindow":
                times = tw_times[n] = time_token_window(prefill, turns[:count])
            elif name == "naive":
                times = time_naive(prefill, turns[:count])
            else:
                times = time_trim(prefill, turns[:count])
            gc.collect()
            med = medians[(name, n)] = statistics.median(times.turn)
            print(
                f"   {n:>6,}  {LABELS[name]:<27} {len(times.turn):>5}  {fmt_ns(med):>10}  "
                f"{fmt_ns(percentile(times.turn, 90)):>10}  {times.kept:>4}",
                flush=True,
            )
    print("   kept = messages sent after the last timed turn, system prompt included")

    tw = {n: medians[("TokenWindow", n)] for n in HISTORY_SIZES}
    flat = tw[10_000] / tw[100]
    print()
    print("   Ratios (medians, this run):")
    print(f"     TokenWindow at N=10,000 / at N=100: {flat:.2f}x   (target <= {TARGET_FLAT}x)")
    for n in HISTORY_SIZES:
        a = medians[("naive", n)] / tw[n]
        b = medians[("trim_messages", n)] / tw[n]
        target = f"   (target >= {TARGET_SPEEDUP:.0f}x each)" if n == 1_000 else ""
        print(
            f"     N={n:<6,}  naive / TokenWindow {fmt_ratio(a):>7}   "
            f"trim_messages / TokenWindow {fmt_ratio(b):>7}{target}"
        )

    rule("2. Bookkeeping share of a TokenWindow turn (the part that is not tokenizing)")
    print(
        "   tok raw  = TiktokenCounter.count(role) + .count(content) + 3 framing (no cache)\n"
        "   tok chat = ChatTokenizer.message_tokens(message) with a fresh count cache (a miss,\n"
        "              as inside add(); includes the cache's hash and lookup)\n"
        "   Both on the same text as the turn. share = median(turn - tok) / median(turn);\n"
        "   'add only' leaves messages() out."
    )
    print(
        f"   {'N':>6}  {'turn':>8}  {'add()':>8}  {'messages()':>10}  {'tok raw':>8}  "
        f"{'tok chat':>8}  {'share raw':>9}  {'share chat':>10}  {'add only':>8}"
    )
    shares: dict[str, list[float]] = {"raw": [], "chat": [], "add": []}
    for n, t in tw_times.items():
        turn = statistics.median(t.turn)
        raw = statistics.median(a - b for a, b in zip(t.turn, t.tok_raw, strict=True)) / turn
        chat = statistics.median(a - b for a, b in zip(t.turn, t.tok_chat, strict=True)) / turn
        add_med = statistics.median(t.add)
        add_only = statistics.median(a - b for a, b in zip(t.add, t.tok_raw, strict=True)) / add_med
        shares["raw"].append(raw)
        shares["chat"].append(chat)
        shares["add"].append(add_only)
        print(
            f"   {n:>6,}  {fmt_ns(turn):>8}  {fmt_ns(add_med):>8}  "
            f"{fmt_ns(statistics.median(t.messages)):>10}  "
            f"{fmt_ns(statistics.median(t.tok_raw)):>8}  "
            f"{fmt_ns(statistics.median(t.tok_chat)):>8}  "
            f"{raw:>9.1%}  {chat:>10.1%}  {add_only:>8.1%}"
        )
    return {
        "flat": flat,
        "naive_x": medians[("naive", 1_000)] / tw[1_000],
        "trim_x": medians[("trim_messages", 1_000)] / tw[1_000],
        "share_raw": max(shares["raw"]),
        "share_chat": max(shares["chat"]),
        "share_add": max(shares["add"]),
    }


# -- benchmark 3: backends ------------------------------------------------------------

EDGE_CASES = [
    "",
    " ",
    "   \n\n\t  ",
    "Hello, world!",
    "I'm sure they'll've done it; you'd've DONE IT too. Don't.",
    "<|endoftext|> and <|endofprompt|> inside user text",
    "12345678901234567890 3.14159 1,000,000",
    "ｆｕｌｌｗｉｄｔｈ ＡＢＣ １２３",
    "👩‍👩‍👧‍👦 🇯🇵🇺🇸 ❤️" + "😀" * 40,
    "a" * 2_000,
    "\t\tindented\r\nline\r\n\r\n  more",
    "naïve café résumé Ångström",
    "Привет, мир! Как дела?",
    "مرحبا بالعالم",
    "नमस्ते दुनिया",
    "x" + " " * 100 + "y",
    "def f(x):\n    return {'a': [1, 2, 3]}  # comment\n",
    "http://example.com/a/b?c=d&e=f#g",
]


def fuzz_texts(rng: random.Random, n: int) -> list[str]:
    """Random strings over mixed Unicode blocks (no surrogates)."""
    blocks = [(0x20, 0x7E), (0xA0, 0x24F), (0x400, 0x4FF), (0x3040, 0x30FF), (0x4E00, 0x9FFF)]
    blocks += [(0x1F300, 0x1F64F), (0x0600, 0x06FF), (0x0900, 0x097F)]
    out = []
    for _ in range(n):
        chars = []
        for _ in range(rng.randint(1, 80)):
            lo, hi = rng.choice(blocks)
            chars.append(chr(rng.randint(lo, hi)) if rng.random() < 0.8 else rng.choice(" \n\t"))
        out.append("".join(chars))
    return out


def load_seconds(cls: str, encoding: str) -> tuple[float, float]:
    """Median (load, first count) seconds of a counter in fresh interpreters."""
    code = (
        "import time\n"
        "from ctxwindow.tokens import counter\n"
        "t0 = time.perf_counter()\n"
        f"c = counter.{cls}({encoding!r})\n"
        "t1 = time.perf_counter()\n"
        "c.count('warm up the tokenizer')\n"
        "t2 = time.perf_counter()\n"
        "print(t1 - t0, t2 - t1)\n"
    )
    loads, firsts = [], []
    for _ in range(LOAD_REPEATS):
        out = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True
        ).stdout.split()
        loads.append(float(out[0]))
        firsts.append(float(out[1]))
    return statistics.median(loads), statistics.median(firsts)


def timed(func: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    func()
    return time.perf_counter() - t0


class BackendResult:
    def __init__(self) -> None:
        self.compared = 0
        self.mismatches = 0
        self.speedup: dict[str, tuple[float, float]] = {}  # encoding -> (chat texts, long doc)


def bench_backends(source: TextSource) -> BackendResult:
    rule("3. Exact backends: tiktoken (ctxwindow's default) vs bpe-openai")
    texts = [text for _, text in source.take(BACKEND_SAMPLES)]
    reference = TiktokenCounter(ENCODING)
    parts: list[str] = []
    tokens = 0
    for _, text in source.take(5_000):
        parts.append(text)
        tokens += reference.count(text)
        if tokens >= LONG_DOC_TOKENS:
            break
    long_doc = "\n\n".join(parts)
    samples = [*texts, long_doc, *EDGE_CASES, *fuzz_texts(random.Random(SEED + 1), N_FUZZ)]
    print(
        f"   Texts: {len(texts):,} chat texts of the workload, and one long document "
        f"({len(long_doc):,} chars).\n"
        f"   Speed = best of {SPEED_REPEATS} passes of counter.count(), the two backends "
        "alternating pass by pass.\n"
        f"   load = median of {LOAD_REPEATS} fresh interpreters (imports done before the clock "
        "starts);\n"
        "   1st count = the first count() after loading."
    )
    print(
        f"   {'encoding':<12} {'backend':<11} {'chat texts':>13} {'long doc':>13} "
        f"{'load':>8} {'1st count':>9}"
    )
    result = BackendResult()
    for encoding in ("o200k_base", "cl100k_base"):
        counters = {"tiktoken": TiktokenCounter(encoding), "bpe-openai": BpeOpenAICounter(encoding)}
        chat_tokens = sum(counters["tiktoken"].count(t) for t in texts)
        doc_tokens = counters["tiktoken"].count(long_doc)
        best = {name: [float("inf"), float("inf")] for name in counters}
        for _ in range(SPEED_REPEATS):
            for name, c in counters.items():
                best[name][0] = min(best[name][0], timed(lambda c=c: [c.count(t) for t in texts]))
                best[name][1] = min(best[name][1], timed(lambda c=c: c.count(long_doc)))
        for name, c in counters.items():
            load, first = load_seconds(type(c).__name__, encoding)
            print(
                f"   {encoding:<12} {name:<11} {chat_tokens / best[name][0] / 1e6:>6.2f} Mtok/s "
                f"{doc_tokens / best[name][1] / 1e6:>6.2f} Mtok/s {load * 1e3:>5.0f} ms "
                f"{first * 1e3:>6.2f} ms",
                flush=True,
            )
        tk, bp = counters["tiktoken"], counters["bpe-openai"]
        mismatches = [s for s in samples if tk.encode(s) != bp.encode(s)]
        result.compared += len(samples)
        result.mismatches += len(mismatches)
        speedup = (
            best["tiktoken"][0] / best["bpe-openai"][0],
            best["tiktoken"][1] / best["bpe-openai"][1],
        )
        result.speedup[encoding] = speedup
        print(
            f"   {encoding:<12} speed bpe-openai / tiktoken: {speedup[0]:.2f}x on chat texts, "
            f"{speedup[1]:.2f}x on the long doc\n"
            f"   {'':<12} ids compared on {len(samples):,} samples ({len(texts):,} chat texts, "
            f"the {doc_tokens:,}-token doc,\n"
            f"   {'':<12} {len(EDGE_CASES)} edge cases, {N_FUZZ} random Unicode strings): "
            f"{len(mismatches)} mismatches"
        )
        for s in mismatches[:3]:
            print(f"     mismatch on {s[:60]!r}")
    return result


# -- main ------------------------------------------------------------------------------


def version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "?"


def verdict(ok: bool) -> str:
    return "PASS" if ok else "MISS"


def main() -> None:
    started = time.perf_counter()
    now = datetime.datetime.now(datetime.timezone.utc).astimezone()
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    print("ctxwindow benchmarks")
    print("====================")
    print(f"date      {now:%Y-%m-%d %H:%M %Z}")
    print(f"python    {platform.python_version()} ({platform.python_implementation()})")
    print(
        f"machine   {platform.machine()}, {platform.system()}, "
        f"CPUs {os.cpu_count()} (usable {cpus})"
    )
    print(
        f"packages  ctxwindow {version('ctxwindow')}, tiktoken {version('tiktoken')}, "
        f"bpe-openai {version('bpe-openai')}, langchain-core {version('langchain-core')}"
    )
    print(f"workload  seed {SEED}; alternating user/assistant, 10-200 words, some CJK/emoji")

    get_encoding(ENCODING)  # load once, outside every timed region
    source = TextSource(SEED)
    w = bench_windows(source)
    b = bench_backends(source)

    rule("Summary (targets)")
    print(
        f"   {verdict(w['flat'] <= TARGET_FLAT)}  TokenWindow per-turn cost, N=10,000 / N=100: "
        f"{w['flat']:.2f}x (target <= {TARGET_FLAT}x)"
    )
    print(
        f"   {verdict(w['naive_x'] >= TARGET_SPEEDUP)}  naive re-count / TokenWindow at "
        f"N=1,000: {w['naive_x']:,.0f}x (target >= {TARGET_SPEEDUP:.0f}x)"
    )
    print(
        f"   {verdict(w['trim_x'] >= TARGET_SPEEDUP)}  trim_messages / TokenWindow at "
        f"N=1,000: {w['trim_x']:,.0f}x (target >= {TARGET_SPEEDUP:.0f}x)"
    )
    print(
        f"   {verdict(w['share_raw'] < TARGET_BOOKKEEPING)}  TokenWindow bookkeeping share "
        f"(worst N): {w['share_raw']:.1%} of a turn (target < {TARGET_BOOKKEEPING:.0%})\n"
        f"         [{w['share_chat']:.1%} if the count cache counts as tokenizing; "
        f"{w['share_add']:.1%} of add() alone, without messages()]"
    )
    print(
        f"   {verdict(b.mismatches == 0)}  bpe-openai ids identical to tiktoken: "
        f"{b.mismatches} mismatches in {b.compared:,} samples"
    )
    for encoding, (chat, doc) in b.speedup.items():
        print(
            f"   info  bpe-openai speed / tiktoken speed ({encoding}): {chat:.2f}x on chat "
            f"texts, {doc:.2f}x on the long doc"
        )
    print(f"   total run time {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
