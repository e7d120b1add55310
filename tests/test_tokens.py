"""Token counting: OpenAI's published examples, framing, Unicode, images, registry."""

from __future__ import annotations

import base64
import math
import struct
import zlib

import pytest

from ctxwindow import (
    EncodingDataError,
    EstimateWarning,
    InvalidMessageError,
    UnknownModelError,
    count_tokens,
    model_info,
)
from ctxwindow.tokens import CachedCounter, TiktokenCounter, chat_tokenizer, get_encoding
from ctxwindow.tokens.encodings import SPECS, read_ranks
from ctxwindow.tokens.images import DEFAULT_IMAGE_SIZE, image_size, patch_count, tile_count
from ctxwindow.tokens.registry import UNKNOWN_ESTIMATE
from tests.support.guide import GUIDE_MESSAGES, GUIDE_TOOL_MESSAGES, GUIDE_TOOLS


@pytest.mark.parametrize(
    ("model", "expected"),
    [
        ("gpt-3.5-turbo", 129),
        ("gpt-4-0613", 129),
        ("gpt-4", 129),
        ("gpt-4o", 124),
        ("gpt-4o-mini", 124),
        ("gpt-4o-2024-08-06", 124),
    ],
)
def test_guide_example_matches_api_prompt_tokens(model: str, expected: int) -> None:
    assert count_tokens(GUIDE_MESSAGES, model=model) == expected


@pytest.mark.parametrize(
    ("model", "expected"),
    [("gpt-3.5-turbo", 105), ("gpt-4", 105), ("gpt-4o", 101), ("gpt-4o-mini", 101)],
)
def test_guide_tools_example_matches_api_prompt_tokens(model: str, expected: int) -> None:
    assert count_tokens(GUIDE_TOOL_MESSAGES, model=model, tools=GUIDE_TOOLS) == expected


def test_framing_is_three_per_message_one_per_name_three_priming() -> None:
    enc = get_encoding("o200k_base")
    text = "Hello, world"
    bare = len(enc.encode("user")) + len(enc.encode(text))
    assert count_tokens([{"role": "user", "content": text}]) == 3 + bare + 3
    named = {"role": "user", "content": text, "name": "ann"}
    assert count_tokens([named]) == 3 + bare + len(enc.encode("ann")) + 1 + 3


@pytest.mark.parametrize(
    "text",
    [
        "请用中文总结这段对话，并列出三个要点。",
        "日本語の文章も正しく数えられますか？カタカナとひらがな、漢字。",
        "🎉🚀👩‍👩‍👧‍👦 emoji, ZWJ sequences and flags 🇨🇳🇯🇵",
        "Mixed: English, 中文, 日本語, 한국어, русский, العربية and 😀 in one line.",
        "",
    ],
)
@pytest.mark.parametrize("model", ["gpt-4", "gpt-4o"])
def test_unicode_content_counts_its_exact_encoding(text: str, model: str) -> None:
    enc = get_encoding(model_info(model).encoding)
    expected = 3 + len(enc.encode("user")) + len(enc.encode(text)) + 3
    assert count_tokens([{"role": "user", "content": text}], model=model) == expected


def test_cjk_is_counted_not_guessed() -> None:
    # o200k encodes common Chinese words as one token each; an estimate by
    # characters would say 6 here.
    enc = get_encoding("o200k_base")
    assert len(enc.encode("你好世界")) < 4
    assert enc.decode(enc.encode("你好世界")) == "你好世界"


def test_assistant_tool_calls_and_tool_results_are_counted() -> None:
    enc = get_encoding("o200k_base")
    call = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "lookup", "arguments": '{"q": "东京 weather"}'},
            }
        ],
    }
    result = {"role": "tool", "tool_call_id": "call_1", "content": '{"temp": 21}'}
    call_tokens = 3 + len(enc.encode("assistant")) + 3 + len(enc.encode("lookup"))
    call_tokens += len(enc.encode('{"q": "东京 weather"}'))
    result_tokens = 3 + len(enc.encode("tool")) + len(enc.encode("call_1"))
    result_tokens += len(enc.encode('{"temp": 21}'))
    assert count_tokens([call, result]) == call_tokens + result_tokens + 3


def test_text_parts_count_like_text() -> None:
    parts = [{"type": "text", "text": "first part "}, {"type": "text", "text": "第二部分"}]
    enc = get_encoding("o200k_base")
    expected = 3 + 1 + len(enc.encode("first part ")) + len(enc.encode("第二部分")) + 3
    assert count_tokens([{"role": "user", "content": parts}]) == expected


def _png(width: int, height: int) -> str:
    header = b"\x89PNG\r\n\x1a\n"
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    chunk = struct.pack(">I", 13) + b"IHDR" + ihdr + struct.pack(">I", zlib.crc32(b"IHDR" + ihdr))
    return "data:image/png;base64," + base64.b64encode(header + chunk).decode()


def _image(url: str, detail: str = "high", **size: int) -> dict[str, object]:
    return {"type": "image_url", "image_url": {"url": url, "detail": detail, **size}}


def _image_tokens(part: dict[str, object], model: str = "gpt-4o") -> int:
    tokenizer = chat_tokenizer(model)
    return tokenizer.content_tokens([part])


def test_image_tiles_follow_openai_published_examples() -> None:
    # OpenAI's examples: 1024x1024 high -> 765; 2048x4096 high -> 1105; low -> 85.
    assert _image_tokens(_image("https://x/a.png", width=1024, height=1024)) == 765
    assert _image_tokens(_image("https://x/a.png", width=2048, height=4096)) == 1105
    assert _image_tokens(_image("https://x/a.png", detail="low", width=4096, height=8192)) == 85


def test_image_size_is_read_from_a_data_url() -> None:
    part = _image(_png(2048, 4096))
    assert image_size(part) == (2048, 4096)
    assert _image_tokens(part) == 1105


def test_image_without_size_uses_the_documented_default() -> None:
    part = _image("https://example.invalid/cat.jpg", detail="auto")
    assert image_size(part) == DEFAULT_IMAGE_SIZE
    assert _image_tokens(part) == 85 + 170 * tile_count(*DEFAULT_IMAGE_SIZE)


def test_patch_billed_models_use_patches() -> None:
    # OpenAI's example: 1024x1024 -> 1024 patches; 1800x2400 -> capped to 1452 patches.
    assert patch_count(1024, 1024) == 1024
    assert patch_count(1800, 2400) == 1452
    part = _image("https://x/a.png", width=1024, height=1024)
    assert _image_tokens(part, "gpt-4.1-mini") == 1659  # ceil(1024 * 1.62)


def test_gpt4o_mini_bills_images_at_its_own_rate() -> None:
    part = _image("https://x/a.png", width=1024, height=1024)
    assert _image_tokens(part, "gpt-4o-mini") == 2833 + 5667 * 4


@pytest.mark.parametrize(
    ("name", "family"),
    [
        ("gpt-4o-2024-08-06", "gpt-4o"),
        ("gpt-4o-mini-2024-07-18", "gpt-4o-mini"),
        ("gpt-4-0613", "gpt-4"),
        ("gpt-4-32k-0613", "gpt-4-32k"),
        ("gpt-4-turbo-2024-04-09", "gpt-4-turbo"),
        ("gpt-4-1106-preview", "gpt-4-turbo"),
        ("gpt-3.5-turbo-0125", "gpt-3.5-turbo"),
        ("gpt-4.1-2025-04-14", "gpt-4.1"),
        ("gpt-4.1-mini-2025-04-14", "gpt-4.1-mini"),
        ("o3-mini-2025-01-31", "o3-mini"),
        ("o4-mini", "o4-mini"),
        ("gpt-5-2025-08-07", "gpt-5"),
        ("gpt-5-nano", "gpt-5-nano"),
    ],
)
def test_registry_resolves_exact_then_prefix(name: str, family: str) -> None:
    assert model_info(name).name == family


def test_registry_carries_limits_and_prices() -> None:
    info = model_info("gpt-4o")
    assert (info.encoding, info.context_window, info.max_output) == ("o200k_base", 128_000, 16_384)
    assert info.input_cost(1_000_000) == pytest.approx(2.50)
    assert model_info("gpt-4").encoding == "cl100k_base"


def test_unknown_model_is_one_short_line_with_a_close_name_and_the_way_out() -> None:
    with pytest.raises(UnknownModelError) as info:
        count_tokens([{"role": "user", "content": "hi"}], model="gpt-4x")
    message = str(info.value)
    assert "'gpt-4x'" in message and "did you mean gpt-4?" in message
    assert "--model-config" in message and "CTXWINDOW_UNKNOWN_MODELS=estimate" in message
    assert len(message) < 200 and "\n" not in message
    with pytest.raises(UnknownModelError):
        model_info("mystery-7b")


def test_estimator_only_when_asked_and_it_warns() -> None:
    messages = [{"role": "user", "content": "Hello there, 你好！"}]
    with pytest.warns(EstimateWarning):
        estimated = count_tokens(messages, model="mystery-7b", estimate=True)
    tokenizer = chat_tokenizer("mystery-7b", estimate=True)
    assert not tokenizer.exact
    # 13 narrow characters and 3 wide ones, by the default estimate for unknown models.
    e = UNKNOWN_ESTIMATE
    assert tokenizer.text("Hello there, 你好！") == math.ceil(
        (3 * e.tokens_per_wide + 13 / e.chars_per_token) * e.margin
    )
    assert estimated >= count_tokens(messages, model="gpt-4o")


def test_catalogued_families_are_estimated_with_a_warning() -> None:
    with pytest.warns(EstimateWarning, match="claude-sonnet-4-5"):
        tokenizer = chat_tokenizer("claude-sonnet-4-5")
    assert not tokenizer.exact
    assert model_info("claude-sonnet-4-5").estimated


def test_known_model_with_estimate_flag_stays_exact() -> None:
    messages = [{"role": "user", "content": "hi"}]
    assert count_tokens(messages, "gpt-4o", estimate=True) == count_tokens(messages, "gpt-4o")


@pytest.mark.parametrize(
    ("message", "fragment"),
    [
        ({"role": "robot", "content": "x"}, "unknown role 'robot'"),
        ({"role": "user"}, "has no 'content'"),
        ({"role": "user", "content": 42}, "'content' must be a string or a list"),
        ({"role": "tool", "content": "x"}, "tool_call_id"),
        ({"role": "user", "content": [{"type": "audio"}]}, "unsupported part type 'audio'"),
        ({"role": "user", "content": "x", "tool_calls": []}, "only assistant"),
        ({"role": "assistant", "content": None, "tool_calls": [{"id": 1}]}, "string 'id'"),
    ],
)
def test_invalid_messages_are_named(message: dict[str, object], fragment: str) -> None:
    with pytest.raises(InvalidMessageError, match="messages\\[0\\]") as info:
        count_tokens([message])
    assert fragment in str(info.value)


def test_empty_request_costs_the_reply_priming() -> None:
    assert count_tokens([]) == 3
    assert count_tokens([{"role": "assistant", "content": None}]) == 3 + 1 + 3


def test_encoding_hash_is_verified() -> None:
    spec = SPECS["cl100k_base"]
    with pytest.raises(EncodingDataError, match="SHA-256"):
        read_ranks(spec, b"aGVsbG8= 0\n")


def test_offline_encodings_match_tiktoken_reference_ids() -> None:
    # Known ids from tiktoken's own test-suite for these encodings.
    assert get_encoding("cl100k_base").encode("hello world") == [15339, 1917]
    assert get_encoding("o200k_base").encode("hello world") == [24912, 2375]


def test_count_cache_tokenizes_each_text_once() -> None:
    calls: list[str] = []

    class Spy(TiktokenCounter):
        def count(self, text: str) -> int:
            calls.append(text)
            return super().count(text)

    cached = CachedCounter(Spy("o200k_base"), maxsize=2)
    long_text = "a sentence long enough to be cached " * 3
    assert cached.count(long_text) == cached.count(long_text)
    assert calls == [long_text]
    cached.count(long_text + "1")
    cached.count(long_text + "2")  # evicts the first (maxsize=2)
    cached.count(long_text)
    assert calls.count(long_text) == 2
