"""One contract that every ``TokenCounter`` backend passes (like cachetools' CacheTestMixin)."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ctxwindow.tokens import (
    BpeOpenAICounter,
    CachedCounter,
    EstimateCounter,
    EstimateWarning,
    TiktokenCounter,
    TokenCounter,
)

SAMPLES = [
    "",
    "hello world",
    "  leading and trailing spaces  ",
    "line one\nline two\r\n\ttabbed",
    "中文分词不是按空格来的。",
    "日本語とカタカナ、ひらがなの混在テキスト。",
    "emoji 🎉🚀 and ZWJ 👩‍👩‍👧‍👦 and flags 🇨🇳🇯🇵",
    "mixed: English, 中文, 日本語, 한국어 😀",
    '{"json": [1, 2, 3], "key": "value"}',
    "<|endoftext|> is plain text here",
    "x" * 5000,
]


def _estimate() -> EstimateCounter:
    with pytest.warns(EstimateWarning):
        return EstimateCounter()


def _hf_tiny() -> TokenCounter:
    from ctxwindow.tokens.hf import HuggingFaceCounter

    from .support.hf_models import train_tiny_bpe

    return HuggingFaceCounter(train_tiny_bpe(), "hf-tiny-bpe")


EXACT: dict[str, Callable[[], TokenCounter]] = {
    "hf-tiny-bpe": _hf_tiny,
    "tiktoken-o200k": lambda: TiktokenCounter("o200k_base"),
    "tiktoken-cl100k": lambda: TiktokenCounter("cl100k_base"),
    "bpe-openai-o200k": lambda: BpeOpenAICounter("o200k_base"),
    "bpe-openai-cl100k": lambda: BpeOpenAICounter("cl100k_base"),
    "cached-tiktoken": lambda: CachedCounter(TiktokenCounter("o200k_base"), maxsize=4),
}
ALL: dict[str, Callable[[], TokenCounter]] = {**EXACT, "estimate": _estimate}


@pytest.fixture(params=sorted(ALL))
def counter(request: pytest.FixtureRequest) -> TokenCounter:
    return ALL[request.param]()


@pytest.fixture(params=sorted(EXACT))
def exact_counter(request: pytest.FixtureRequest) -> TokenCounter:
    return EXACT[request.param]()


def test_satisfies_the_protocol(counter: TokenCounter) -> None:
    assert isinstance(counter, TokenCounter)
    assert isinstance(counter.name, str) and counter.name
    assert isinstance(counter.exact, bool)


@pytest.mark.parametrize("text", SAMPLES)
def test_count_is_the_length_of_encode(counter: TokenCounter, text: str) -> None:
    assert counter.count(text) == len(counter.encode(text))
    assert counter.count(text) >= (1 if text else 0)


@pytest.mark.parametrize("text", SAMPLES)
def test_exact_counters_round_trip(exact_counter: TokenCounter, text: str) -> None:
    assert exact_counter.decode(exact_counter.encode(text)) == text


def test_count_is_safe_across_threads(counter: TokenCounter) -> None:
    expected = {text: counter.count(text) for text in SAMPLES}
    errors: list[str] = []

    def work() -> None:
        for _ in range(20):
            for text, n in expected.items():
                if counter.count(text) != n:
                    errors.append(text)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []


@pytest.mark.parametrize("encoding", ["o200k_base", "cl100k_base"])
@given(text=st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=200))
def test_bpe_openai_gives_the_same_ids_as_tiktoken(encoding: str, text: str) -> None:
    """tiktoken is the reference; the Rust core of bpe-openai must agree id for id."""
    assert _bpe(encoding).encode(text) == _tiktoken(encoding).encode(text)


@pytest.mark.parametrize("encoding", ["o200k_base", "cl100k_base"])
@pytest.mark.parametrize("text", SAMPLES)
def test_bpe_openai_agrees_on_the_samples(encoding: str, text: str) -> None:
    assert _bpe(encoding).encode(text) == _tiktoken(encoding).encode(text)


_counters: dict[str, TokenCounter] = {}


def _bpe(encoding: str) -> TokenCounter:
    return _counters.setdefault("bpe" + encoding, BpeOpenAICounter(encoding))


def _tiktoken(encoding: str) -> TokenCounter:
    return _counters.setdefault("tt" + encoding, TiktokenCounter(encoding))
