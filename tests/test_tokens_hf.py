"""The Hugging Face ``tokenizers`` backend, on a small BPE trained offline in the tests."""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer, processors

from ctxwindow.errors import EncodingDataError
from ctxwindow.extras import install_hint
from ctxwindow.tokens.chat import ChatFraming, ChatTokenizer
from ctxwindow.tokens.counter import EstimateWarning, TokenCounter
from ctxwindow.tokens.hf import (
    DEFAULT_FRAMING,
    INSTALL_HINT,
    HuggingFaceCounter,
    TemplateChatTokenizer,
    hf_chat_tokenizer,
)
from tests.support.hf_models import (
    LLAMA31,
    SAMPLES,
    render_chat_template,
    trained_tokenizer_json,
    write_llama31_model,
)

CHATML = (
    "{% for message in messages %}"
    "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
LLAMA31_DATE = "26 Jul 2024"  # the template's default date_string; transformers passes none
CONVERSATIONS = [
    [{"role": "user", "content": "Hello there"}],
    [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "你好，请介绍一下自己。"},
    ],
    [
        {"role": "system", "content": "日本語で答えてください。"},
        {"role": "user", "content": "東京の天気は？"},
        {"role": "assistant", "content": "晴れです 😀"},
        {"role": "user", "content": "Thanks!\nAnd tomorrow?"},
    ],
    [
        {"role": "user", "content": "emoji 👨‍👩‍👧 and 中文"},
        {"role": "assistant", "content": "Sure: 🎉🎉"},
    ],
]


def _config(template: Any = CHATML, **extra: Any) -> dict[str, Any]:
    config: dict[str, Any] = {
        "bos_token": "<s>",
        "eos_token": {"content": "</s>", "special": True},
        **extra,
    }
    if template is not None:
        config["chat_template"] = template
    return config


def make_model(
    root: Path, tokenizer_json: Path, config: Mapping[str, Any] | None, name: str = "tiny"
) -> Path:
    """A model folder with the trained tokenizer.json and, if given, a tokenizer_config.json."""
    folder = root / name
    folder.mkdir()
    (folder / "tokenizer.json").write_text(tokenizer_json.read_text("utf-8"), "utf-8")
    if config is not None:
        (folder / "tokenizer_config.json").write_text(json.dumps(config), "utf-8")
    return folder


@pytest.fixture(scope="session")
def tokenizer_json(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("trained") / "tokenizer.json"
    path.write_text(trained_tokenizer_json(), "utf-8")
    return path


@pytest.fixture(scope="session")
def llama_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A Llama 3.1 Instruct look-alike: the tiny tokenizer and the real chat template."""
    return write_llama31_model(tmp_path_factory.mktemp("models") / "Llama-3.1-8B-Instruct")


@pytest.fixture(scope="session")
def raw(tokenizer_json: Path) -> Tokenizer:
    """The trained tokenizer through the library itself: the oracle."""
    return Tokenizer.from_file(str(tokenizer_json))


@pytest.fixture(scope="session")
def chatml_folder(tmp_path_factory: pytest.TempPathFactory, tokenizer_json: Path) -> Path:
    return make_model(tmp_path_factory.mktemp("models"), tokenizer_json, _config())


@pytest.fixture(scope="session")
def hf_counter(chatml_folder: Path) -> HuggingFaceCounter:
    """The small trained tokenizer as a ``HuggingFaceCounter`` (for the counter contract suite)."""
    return HuggingFaceCounter.from_folder(chatml_folder)


def oracle(raw: Tokenizer, text: str) -> int:
    return len(raw.encode(text, add_special_tokens=False).ids)


def chatml(messages: Sequence[Mapping[str, str]], prefix: str = "") -> str:
    """ChatML rendered by hand, with the generation prompt."""
    body = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages)
    return prefix + body + "<|im_start|>assistant\n"


# -- the counter ------------------------------------------------------------------


def test_counter_follows_the_protocol(hf_counter: HuggingFaceCounter) -> None:
    """It is an exact TokenCounter named after its folder."""
    assert isinstance(hf_counter, TokenCounter)
    assert hf_counter.exact is True
    assert hf_counter.name == "tiny"


@pytest.mark.parametrize("text", SAMPLES)
def test_round_trip_and_count(hf_counter: HuggingFaceCounter, raw: Tokenizer, text: str) -> None:
    """Mixed scripts and emoji decode back exactly; count is the length of encode."""
    ids = hf_counter.encode(text)
    assert ids == raw.encode(text, add_special_tokens=False).ids
    assert hf_counter.decode(ids) == text
    assert hf_counter.count(text) == len(ids) > 0


@settings(max_examples=150, deadline=None)
@given(text=st.text())
def test_round_trip_any_text(hf_counter: HuggingFaceCounter, text: str) -> None:
    """A byte-level tokenizer round-trips any Unicode text."""
    ids = hf_counter.encode(text)
    assert hf_counter.decode(ids) == text
    assert hf_counter.count(text) == len(ids)


def test_added_tokens_in_text_count_once(hf_counter: HuggingFaceCounter) -> None:
    """Chat markers written in the text are one token each, as in a rendered template."""
    assert hf_counter.count("<|im_start|>") == 1
    assert hf_counter.count("<|im_start|><|im_end|><s></s>") == 4
    assert hf_counter.decode(hf_counter.encode("<s>hi</s>")) == "<s>hi</s>"


def test_counting_adds_no_special_tokens(tmp_path: Path, raw: Tokenizer) -> None:
    """A post-processor that adds BOS/EOS does not change counts."""
    tokenizer = Tokenizer.from_str(raw.to_str())
    tokenizer.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>",
        special_tokens=[("<s>", raw.token_to_id("<s>")), ("</s>", raw.token_to_id("</s>"))],
    )
    assert len(tokenizer.encode("hello world").ids) == oracle(raw, "hello world") + 2
    path = tmp_path / "tokenizer.json"
    tokenizer.save(str(path))
    assert HuggingFaceCounter.from_file(path).count("hello world") == oracle(raw, "hello world")


def test_saved_truncation_is_ignored(tmp_path: Path, raw: Tokenizer) -> None:
    """A tokenizer.json saved with truncation still counts every token."""
    tokenizer = Tokenizer.from_str(raw.to_str())
    tokenizer.enable_truncation(max_length=4)
    path = tmp_path / "tokenizer.json"
    tokenizer.save(str(path))
    text = SAMPLES[4]
    assert HuggingFaceCounter.from_file(path).count(text) == oracle(raw, text) > 4


def test_from_file_names_the_folder(tokenizer_json: Path) -> None:
    counter = HuggingFaceCounter.from_file(tokenizer_json)
    assert counter.name == tokenizer_json.parent.name
    assert HuggingFaceCounter.from_file(tokenizer_json, name="mine").name == "mine"


# -- errors -----------------------------------------------------------------------


def test_missing_file_names_the_path(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere" / "tokenizer.json"
    with pytest.raises(EncodingDataError, match="nowhere") as info:
        HuggingFaceCounter.from_file(missing)
    assert str(missing) in str(info.value)
    assert isinstance(info.value.__cause__, OSError)


def test_missing_folder_names_the_path(tmp_path: Path) -> None:
    with pytest.raises(EncodingDataError, match="no model folder") as info:
        HuggingFaceCounter.from_folder(tmp_path / "absent")
    assert str(tmp_path / "absent") in str(info.value)


def test_folder_without_tokenizer_json(tmp_path: Path) -> None:
    with pytest.raises(EncodingDataError) as info:
        hf_chat_tokenizer(tmp_path)
    assert str(tmp_path / "tokenizer.json") in str(info.value)


def test_corrupt_tokenizer_file_is_converted(tmp_path: Path) -> None:
    """The library's bare Exception becomes an EncodingDataError, chained."""
    bad = tmp_path / "tokenizer.json"
    bad.write_text('{"not": "a tokenizer"}', "utf-8")
    with pytest.raises(EncodingDataError) as info:
        HuggingFaceCounter.from_file(bad)
    assert str(bad) in str(info.value)
    assert info.value.__cause__ is not None


def test_corrupt_config_is_converted(tmp_path: Path, tokenizer_json: Path) -> None:
    folder = make_model(tmp_path, tokenizer_json, None)
    (folder / "tokenizer_config.json").write_text("{oops", "utf-8")
    with pytest.raises(EncodingDataError) as info:
        hf_chat_tokenizer(folder)
    assert str(folder / "tokenizer_config.json") in str(info.value)


def test_missing_tokenizers_gives_install_hint(
    monkeypatch: pytest.MonkeyPatch, tokenizer_json: Path
) -> None:
    monkeypatch.setitem(sys.modules, "tokenizers", None)
    with pytest.raises(ImportError, match=re.escape(install_hint("hf"))):
        HuggingFaceCounter.from_file(tokenizer_json)


def test_missing_jinja2_gives_install_hint(
    monkeypatch: pytest.MonkeyPatch, chatml_folder: Path
) -> None:
    monkeypatch.setitem(sys.modules, "jinja2", None)
    with pytest.raises(ImportError, match="jinja2") as info:
        hf_chat_tokenizer(chatml_folder)
    assert INSTALL_HINT in str(info.value)


# -- chat framing from the template -------------------------------------------------


def test_role_names_differ_in_the_tiny_vocabulary(hf_counter: HuggingFaceCounter) -> None:
    """Precondition of the next tests: roles are not all one token here."""
    counts = {role: hf_counter.count(role) for role in ("system", "user", "assistant")}
    assert len(set(counts.values())) > 1, counts


@pytest.mark.parametrize("messages", CONVERSATIONS)
def test_chatml_counts_equal_the_rendering(
    chatml_folder: Path, raw: Tokenizer, messages: list[dict[str, str]]
) -> None:
    """count() is the token count of the full ChatML rendering, for every role."""
    chat = hf_chat_tokenizer(chatml_folder)
    assert chat.count(messages) == oracle(raw, chatml(messages))
    per_message = sum(chat.message_tokens(m) for m in messages)
    assert chat.count([]) + per_message == chat.count(messages)


def test_chatml_framing_values(chatml_folder: Path, hf_counter: HuggingFaceCounter) -> None:
    """ChatML costs 4 tokens around each message plus the role; priming is the reply header."""
    chat = hf_chat_tokenizer(chatml_folder)
    assert isinstance(chat, TemplateChatTokenizer)
    assert chat.framing.per_message == 4
    assert chat.per_role == {"user": 4, "assistant": 4, "system": 4}
    assert chat.framing.reply_priming == hf_counter.count("<|im_start|>assistant\n")
    assert chat.framing.tools == ChatFraming().tools
    assert chat.exact


def test_tokenizer_json_path_finds_the_sibling_config(chatml_folder: Path, raw: Tokenizer) -> None:
    chat = hf_chat_tokenizer(chatml_folder / "tokenizer.json", name="qwen-tiny")
    assert chat.model == "qwen-tiny"
    assert chat.count(CONVERSATIONS[2]) == oracle(raw, chatml(CONVERSATIONS[2]))


# Text for generated messages: words, CJK, emoji and whitespace anywhere,
# including at the ends where it can be trimmed or merge with the framing.
_EDGE = st.text(alphabet=" \n\t", max_size=3)
EDGY_TEXT = st.one_of(
    st.builds(
        "{}{}{}".format,
        _EDGE,
        st.text(alphabet="ab X1!,. 中文日本語😀👍🏽\n\t", max_size=10),
        _EDGE,
    ),
    st.text(max_size=12),
)


def conversations(max_turns: int = 5) -> st.SearchStrategy[list[dict[str, str]]]:
    """An optional system message, then alternating user/assistant messages."""

    def build(system: str | None, turns: list[str]) -> list[dict[str, str]]:
        head = [] if system is None else [{"role": "system", "content": system}]
        roles = ["user", "assistant"] * max_turns
        return head + [{"role": r, "content": c} for r, c in zip(roles, turns, strict=False)]

    return st.builds(
        build, st.none() | EDGY_TEXT, st.lists(EDGY_TEXT, min_size=1, max_size=max_turns)
    )


@pytest.fixture(scope="session")
def chatml_chat(chatml_folder: Path) -> ChatTokenizer:
    return hf_chat_tokenizer(chatml_folder)


@settings(max_examples=60, deadline=None)
@given(messages=conversations())
def test_chatml_exact_for_generated_content(
    chatml_chat: ChatTokenizer, raw: Tokenizer, messages: list[dict[str, str]]
) -> None:
    """Exact for any content, whitespace at its ends included."""
    assert chatml_chat.count(messages) == oracle(raw, chatml(messages))


@pytest.mark.parametrize("content", ["", " ", "\n", "\n\nhello", "  two", "\n  中文", "end\n\n"])
def test_chatml_content_merging_with_the_framing(
    chatml_chat: ChatTokenizer, raw: Tokenizer, content: str
) -> None:
    """A newline or spaces at the start of content merge with the role line's newline.

    The tiny vocabulary has "\\n\\n" and "\\n  " as tokens, as real ones do, so
    counting the content on its own would be a token off.
    """
    assert isinstance(chatml_chat, TemplateChatTokenizer)
    messages = [{"role": "user", "content": content}]
    assert chatml_chat.count(messages) == oracle(raw, chatml(messages))
    assert chatml_chat.layouts["user"].lead == "<|im_start|>user\n"


def test_bos_prefix_is_counted_once(tmp_path: Path, tokenizer_json: Path, raw: Tokenizer) -> None:
    """A constant prefix from the config's bos_token lands in the reply priming."""
    folder = make_model(tmp_path, tokenizer_json, _config("{{ bos_token }}" + CHATML))
    chat = hf_chat_tokenizer(folder)
    for messages in CONVERSATIONS:
        assert chat.count(messages) == oracle(raw, chatml(messages, prefix="<s>"))
    assert chat.framing.per_message == 4


def test_eos_token_from_a_dict(tmp_path: Path, tokenizer_json: Path, raw: Tokenizer) -> None:
    """Special tokens given as {"content": ...} render as their content."""
    template = CHATML.replace("'<|im_end|>'", "eos_token")
    folder = make_model(tmp_path, tokenizer_json, _config(template))
    messages = CONVERSATIONS[1]
    expected = chatml(messages).replace("<|im_end|>", "</s>")
    assert hf_chat_tokenizer(folder).count(messages) == oracle(raw, expected)


def test_named_default_template_from_a_list(
    tmp_path: Path, tokenizer_json: Path, raw: Tokenizer
) -> None:
    templates = [
        {"name": "tool_use", "template": "{{ raise_exception('not this one') }}"},
        {"name": "default", "template": CHATML},
    ]
    folder = make_model(tmp_path, tokenizer_json, _config(templates))
    assert hf_chat_tokenizer(folder).count(CONVERSATIONS[2]) == oracle(
        raw, chatml(CONVERSATIONS[2])
    )


def test_chat_template_jinja_file(tmp_path: Path, tokenizer_json: Path, raw: Tokenizer) -> None:
    """A separate chat_template.jinja (newer transformers) is used over the config."""
    folder = make_model(tmp_path, tokenizer_json, _config("{{ raise_exception('stale') }}"))
    (folder / "chat_template.jinja").write_text(CHATML, "utf-8")
    assert hf_chat_tokenizer(folder).count(CONVERSATIONS[3]) == oracle(
        raw, chatml(CONVERSATIONS[3])
    )


def test_default_system_prompt_stays_exact(
    tmp_path: Path, tokenizer_json: Path, raw: Tokenizer
) -> None:
    """A template that injects a system prompt when none is given (Qwen2.5) adds up too."""
    default = "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
    template = (
        "{% if messages[0]['role'] != 'system' %}{{ '" + default.replace("\n", "\\n") + "' }}"
        "{% endif %}" + CHATML
    )
    chat = hf_chat_tokenizer(make_model(tmp_path, tokenizer_json, _config(template)))
    assert isinstance(chat, TemplateChatTokenizer)
    assert chat.per_role["system"] < 0  # a system message replaces the default (documented)
    for messages in CONVERSATIONS:
        prefix = "" if messages[0]["role"] == "system" else default
        assert chat.count(messages) == oracle(raw, chatml(messages, prefix=prefix))


def test_template_dropping_roles_uses_per_role_costs(
    tmp_path: Path, tokenizer_json: Path, raw: Tokenizer
) -> None:
    """Roles framed differently, with the role name not rendered, are still exact."""
    template = (
        "{% for m in messages %}"
        "{% if m['role'] == 'user' %}{{ '<s>' + m['content'] + '</s>' }}"
        "{% else %}{{ '<|im_start|>' + m['content'] + '<|im_end|>\n' }}{% endif %}"
        "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>' }}{% endif %}"
    )
    chat = hf_chat_tokenizer(make_model(tmp_path, tokenizer_json, _config(template)))
    for messages in CONVERSATIONS:
        expected = "".join(
            f"<s>{m['content']}</s>"
            if m["role"] == "user"
            else f"<|im_start|>{m['content']}<|im_end|>\n"
            for m in messages
        )
        assert chat.count(messages) == oracle(raw, expected + "<|im_start|>")


def test_alternating_roles_template_is_probed_without_warning(
    tmp_path: Path, tokenizer_json: Path, raw: Tokenizer
) -> None:
    """Templates that require user/assistant alternation (Llama 2, Mistral) still probe."""
    template = (
        "{% if messages[0]['role'] == 'system' %}{% set rest = messages[1:] %}"
        "{% else %}{% set rest = messages %}{% endif %}"
        "{% for m in rest %}{% if (m['role'] == 'user') != (loop.index0 % 2 == 0) %}"
        "{{ raise_exception('Conversation roles must alternate user/assistant/user/...') }}"
        "{% endif %}{% endfor %}" + CHATML
    )
    chat = hf_chat_tokenizer(make_model(tmp_path, tokenizer_json, _config(template)))
    assert isinstance(chat, TemplateChatTokenizer)
    for messages in CONVERSATIONS:
        assert chat.count(messages) == oracle(raw, chatml(messages))


def test_template_rejecting_system_warns_and_keeps_the_rest(
    tmp_path: Path, tokenizer_json: Path, raw: Tokenizer
) -> None:
    """A system probe that raises (Gemma) warns; user/assistant stay measured."""
    template = (
        "{% if messages[0]['role'] == 'system' %}"
        "{{ raise_exception('System role not supported') }}{% endif %}" + CHATML
    )
    folder = make_model(tmp_path, tokenizer_json, _config(template))
    with pytest.warns(EstimateWarning, match="System role not supported"):
        chat = hf_chat_tokenizer(folder)
    assert isinstance(chat, TemplateChatTokenizer)
    assert "system" not in chat.per_role
    messages = CONVERSATIONS[3]
    assert chat.count(messages) == oracle(raw, chatml(messages))


@pytest.mark.parametrize(
    "template",
    [
        "{{ raise_exception('this model does not chat') }}",
        "{% for message in messages %}{{ message['content'] + 1 }}{% endfor %}",
        "{% for message in messages %}",
        [{"name": "rag", "template": CHATML}],
        42,
    ],
    ids=["raises", "type-error", "syntax-error", "no-default", "not-text"],
)
def test_unprobeable_template_falls_back_with_a_warning(
    tmp_path: Path, tokenizer_json: Path, hf_counter: HuggingFaceCounter, template: Any
) -> None:
    folder = make_model(tmp_path, tokenizer_json, _config(template))
    with pytest.warns(EstimateWarning, match="cannot be probed"):
        chat = hf_chat_tokenizer(folder)
    assert type(chat) is ChatTokenizer
    assert chat.framing == DEFAULT_FRAMING
    message = {"role": "user", "content": "中文"}
    assert chat.count([message]) == 3 + 4 + hf_counter.count("user") + hf_counter.count("中文")


@pytest.mark.parametrize("config", [None, _config(None)], ids=["no-config", "no-template"])
def test_no_template_uses_default_framing(
    tmp_path: Path,
    tokenizer_json: Path,
    hf_counter: HuggingFaceCounter,
    config: dict[str, Any] | None,
) -> None:
    """A base model: conservative defaults, per_message=4, reply_priming=3, per_name=1."""
    chat = hf_chat_tokenizer(make_model(tmp_path, tokenizer_json, config))
    assert type(chat) is ChatTokenizer
    assert chat.framing == ChatFraming(per_message=4, per_name=1, reply_priming=3)
    messages = [{"role": "user", "content": "日本語 😀", "name": "bob"}]
    count = hf_counter.count
    assert chat.count(messages) == 3 + 4 + count("user") + count("日本語 😀") + count("bob") + 1


def test_names_dropped_by_the_template_cost_nothing(chatml_folder: Path) -> None:
    chat = hf_chat_tokenizer(chatml_folder)
    plain = [{"role": "user", "content": "hello"}]
    named = [{"role": "user", "content": "hello", "name": "张三"}]
    assert chat.count(named) == chat.count(plain)


def test_names_rendered_by_the_template_are_measured(
    tmp_path: Path, tokenizer_json: Path, raw: Tokenizer
) -> None:
    template = CHATML.replace(
        "message['role'] + '\n'",
        "message['role'] + ((':' + message['name']) if message['name'] is defined else '') + '\n'",
    )
    chat = hf_chat_tokenizer(make_model(tmp_path, tokenizer_json, _config(template)))
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "你好", "name": "张三"},
        {"role": "assistant", "content": "hello alice"},
        {"role": "user", "content": "world", "name": "alice"},
    ]
    rendered = chatml(messages).replace("user\n你好", "user:张三\n你好")
    rendered = rendered.replace("user\nworld", "user:alice\nworld")
    assert chat.count(messages) == oracle(raw, rendered)


def test_block_whitespace_is_trimmed_like_transformers(
    tmp_path: Path, tokenizer_json: Path, raw: Tokenizer
) -> None:
    """trim_blocks and lstrip_blocks: a template laid out on lines renders as ChatML."""
    template = """\
{% for message in messages %}
    {% if message['role'] %}{{ '<|im_start|>' + message['role'] + '\\n' }}{% endif %}
    {% if true %}{{ message['content'] + '<|im_end|>\\n' }}{% endif %}
{% endfor %}
{% if add_generation_prompt %}
    {% if true %}{{ '<|im_start|>assistant\\n' }}{% endif %}
{% endif %}
"""
    chat = hf_chat_tokenizer(make_model(tmp_path, tokenizer_json, _config(template)))
    for messages in CONVERSATIONS:
        assert chat.count(messages) == oracle(raw, chatml(messages))


def test_llama3_shaped_template(tmp_path: Path, tokenizer_json: Path, raw: Tokenizer) -> None:
    """Role headers between added tokens, trimmed content, BOS on the first message only."""
    template = (
        "{% for message in messages %}"
        "{% set content = '<|im_start|>' + message['role'] + '<|im_end|>\n\n'"
        " + message['content'] | trim + '</s>' %}"
        "{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}"
        "{{ content }}{% endfor %}"
        "{% if add_generation_prompt %}{{ '<|im_start|>assistant<|im_end|>\n\n' }}{% endif %}"
    )
    chat = hf_chat_tokenizer(make_model(tmp_path, tokenizer_json, _config(template)))
    for messages in CONVERSATIONS:
        body = "".join(f"<|im_start|>{m['role']}<|im_end|>\n\n{m['content']}</s>" for m in messages)
        expected = "<s>" + body + "<|im_start|>assistant<|im_end|>\n\n"
        assert chat.count(messages) == oracle(raw, expected)


# -- Llama 3.1: its real template on the tiny tokenizer -------------------------------

LLAMA_TOKENS = {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"}


@pytest.fixture(scope="session")
def llama_chat(llama_folder: Path) -> ChatTokenizer:
    return hf_chat_tokenizer(llama_folder)


def llama31(messages: Sequence[Mapping[str, Any]]) -> str:
    return render_chat_template(LLAMA31, messages, **LLAMA_TOKENS)


def test_llama31_rendering_as_published() -> None:
    """The oracle renders the template as Meta documents the 3.1 prompt format."""
    expected = (
        "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n"
        f"Cutting Knowledge Date: December 2023\nToday Date: {LLAMA31_DATE}\n\n"
        "Be brief.<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\n你好<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n"
    )
    messages = [{"role": "system", "content": " Be brief.\n"}, {"role": "user", "content": "你好 "}]
    assert llama31(messages) == expected


def test_write_llama31_model(tmp_path: Path) -> None:
    """The helper other tests reuse: a folder with tokenizer.json and the template config."""
    folder = write_llama31_model(tmp_path / "meta-llama" / "Llama-3.1-8B-Instruct")
    config = json.loads((folder / "tokenizer_config.json").read_text("utf-8"))
    assert config["chat_template"] == LLAMA31
    assert config["bos_token"] == "<|begin_of_text|>"
    assert Tokenizer.from_file(str(folder / "tokenizer.json")).token_to_id("<|eot_id|>") is not None


@pytest.mark.parametrize("messages", CONVERSATIONS)
def test_llama31_counts_equal_the_rendering(
    llama_chat: ChatTokenizer, raw: Tokenizer, messages: list[dict[str, str]]
) -> None:
    """count() is the token count of the full Llama 3.1 rendering, with or without system."""
    assert llama_chat.count(messages) == oracle(raw, llama31(messages))
    per_message = sum(llama_chat.message_tokens(m) for m in messages)
    assert llama_chat.count([]) + per_message == llama_chat.count(messages)


@settings(max_examples=100, deadline=None)
@given(messages=conversations())
def test_llama31_exact_for_generated_conversations(
    llama_chat: ChatTokenizer, raw: Tokenizer, messages: list[dict[str, str]]
) -> None:
    """Exact for any conversation: trimmed ends, CJK, emoji, newlines, empty messages."""
    assert llama_chat.count(messages) == oracle(raw, llama31(messages))


def test_llama31_system_block_is_always_rendered(
    llama_chat: ChatTokenizer, hf_counter: HuggingFaceCounter
) -> None:
    """The date lines are in the reply priming; a system message adds what it adds there."""
    assert isinstance(llama_chat, TemplateChatTokenizer)
    system_block = (
        "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n"
        f"Cutting Knowledge Date: December 2023\nToday Date: {LLAMA31_DATE}\n\n<|eot_id|>"
    )
    assert llama31([{"role": "user", "content": "hi"}]).startswith(system_block)
    reply = "<|start_header_id|>assistant<|end_header_id|>\n\n"
    assert llama_chat.framing.reply_priming == hf_counter.count(system_block + reply)
    system = {"role": "system", "content": "日本語で答えてください。"}
    user = {"role": "user", "content": "hi"}
    added = hf_counter.count(llama31([system, user])) - hf_counter.count(llama31([user]))
    assert llama_chat.message_tokens(system) == added
    # its text, and "\n\n" before it no longer one token as before "<|eot_id|>"
    assert added == hf_counter.count(system["content"]) + 1


@pytest.mark.parametrize("content", ["", " ", "\n\n", " 你好\n", "\n\nhello", "emoji 😀 \t"])
def test_llama31_trims_content(
    llama_chat: ChatTokenizer, raw: Tokenizer, hf_counter: HuggingFaceCounter, content: str
) -> None:
    """Content is counted trimmed, as the template's "| trim" renders it, for every role."""
    assert isinstance(llama_chat, TemplateChatTokenizer)
    assert all(layout.lstrip and layout.rstrip for layout in llama_chat.layouts.values())
    for role in ("system", "user", "assistant"):
        messages = [{"role": role, "content": content}]
        assert llama_chat.count(messages) == oracle(raw, llama31(messages))
    if content.strip():
        trimmed = {"role": "user", "content": content.strip()}
        assert llama_chat.message_tokens({"role": "user", "content": content}) == (
            llama_chat.message_tokens(trimmed)
        )


def test_llama31_text_parts_are_trimmed_at_the_ends(llama_chat: ChatTokenizer) -> None:
    parts = [{"type": "text", "text": "  first "}, {"type": "text", "text": " last\n"}]
    trimmed = [{"type": "text", "text": "first "}, {"type": "text", "text": " last"}]
    assert llama_chat.message_tokens({"role": "user", "content": parts}) == (
        llama_chat.message_tokens({"role": "user", "content": trimmed})
    )


def test_chatml_does_not_trim(chatml_chat: ChatTokenizer) -> None:
    assert isinstance(chatml_chat, TemplateChatTokenizer)
    assert not any(layout.lstrip or layout.rstrip for layout in chatml_chat.layouts.values())


def test_quick_start_model_name(tmp_path: Path, raw: Tokenizer) -> None:
    """The quick-start model, named as on the Hub, counts its whole request exactly."""
    name = "meta-llama/Llama-3.1-8B-Instruct"
    chat = hf_chat_tokenizer(write_llama31_model(tmp_path / "llama"), name=name)
    assert chat.model == name
    messages = [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "Summarise this thread in one line.\n"},
        {"role": "assistant", "content": "  It is about 日本語 and emoji 🎉."},
        {"role": "user", "content": "Thanks!"},
    ]
    assert chat.count(messages) == oracle(raw, llama31(messages))
