"""``alternate``: contexts that strict chat templates (Llama 2, Mistral) accept.

Property tests run on random valid contexts (an optional system prefix, then
user messages, plain assistant messages and tool units, with CJK, emoji and
every content shape). A small Jinja template as strict as Llama 2's is the
judge: it renders every output and refuses the inputs that do not alternate.
"""

from __future__ import annotations

import copy
import itertools
from typing import Any

import jinja2
import pytest
from hypothesis import given
from hypothesis import strategies as st
from jinja2.sandbox import ImmutableSandboxedEnvironment

from ctxwindow.errors import InvalidMessageError, OrphanToolResultError
from ctxwindow.policies.alternate import (
    BRIDGE_ASSISTANT,
    BRIDGE_USER,
    STRICT_MODES,
    alternate,
    alternate_with_trace,
    is_alternating,
)

Message = dict[str, Any]

PHRASES = [
    "hello",
    "The order A-1042 shipped.",
    "你好，世界",
    "请记住我的生日是五月三日。",
    "日本語のテキストです。",
    "🎉🚀",
    "👩‍👩‍👧‍👦",
    "mixed 中文 and English 😀",
    "",
]

texts = st.one_of(
    st.sampled_from(PHRASES),
    st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=20),
)
parts = st.lists(
    st.one_of(
        texts.map(lambda text: {"type": "text", "text": text}),
        st.builds(
            lambda: {"type": "image_url", "image_url": {"url": "https://example.invalid/a.png"}}
        ),
    ),
    min_size=1,
    max_size=3,
)
user_contents = st.one_of(texts, parts)
assistant_contents = st.one_of(st.none(), texts, parts)
names = st.sampled_from([None, "ana", "李"])


def named(message: Message, name: str | None) -> Message:
    return message if name is None else {**message, "name": name}


@st.composite
def system_prefix(draw: st.DrawFn) -> list[Message]:
    roles = draw(st.lists(st.sampled_from(["system", "developer"]), max_size=2))
    return [{"role": role, "content": draw(texts)} for role in roles]


@st.composite
def user_message(draw: st.DrawFn) -> list[Message]:
    return [named({"role": "user", "content": draw(user_contents)}, draw(names))]


@st.composite
def assistant_message(draw: st.DrawFn) -> list[Message]:
    return [named({"role": "assistant", "content": draw(assistant_contents)}, draw(names))]


@st.composite
def tool_unit(draw: st.DrawFn) -> list[Message]:
    """An assistant message with 1-3 tool calls and their results, ids unique per example."""
    tag = draw(st.uuids()).hex[:8]
    ids = [f"call_{tag}_{i}" for i in range(draw(st.integers(1, 3)))]
    calls = [
        {"id": i, "type": "function", "function": {"name": "f", "arguments": "{}"}} for i in ids
    ]
    call = {"role": "assistant", "content": draw(st.one_of(st.none(), texts)), "tool_calls": calls}
    results = [{"role": "tool", "tool_call_id": i, "content": draw(user_contents)} for i in ids]
    return [call, *results]


@st.composite
def contexts(draw: st.DrawFn) -> list[Message]:
    """Any valid context: system first, then units in any order (roles need not alternate)."""
    units = draw(st.lists(st.one_of(user_message(), assistant_message(), tool_unit()), max_size=10))
    return draw(system_prefix()) + [message for unit in units for message in unit]


@st.composite
def alternating_contexts(draw: st.DrawFn) -> list[Message]:
    """Contexts that already alternate: user, then tool units ending in an optional answer."""
    body: list[Message] = []
    for _ in range(draw(st.integers(0, 5))):
        body += draw(user_message())
        units = draw(st.lists(tool_unit(), max_size=2))
        for unit in units:
            body += unit
        if not units or draw(st.booleans()):
            body += draw(assistant_message())
    if draw(st.booleans()):
        body += draw(user_message())
    return draw(system_prefix()) + body


modes = st.sampled_from(STRICT_MODES)

# A judge modelled on Llama 2's and Mistral's templates: roles alternate
# user/assistant after the system messages, tool results are part of the
# assistant side (as in Mistral's tool templates), anything else raises.
STRICT_TEMPLATE = """
{%- macro text(content) -%}
  {%- if content is string -%}{{ content }}
  {%- elif content is iterable -%}
    {%- for part in content -%}
      {%- if part.type == "text" -%}{{ part.text }}{%- else -%}[IMG]{%- endif -%}
    {%- endfor -%}
  {%- endif -%}
{%- endmacro -%}
{%- set ns = namespace(previous="system") -%}
{{- bos_token -}}
{%- for message in messages -%}
  {%- set role = message.role -%}
  {%- if role in ["system", "developer"] -%}
    {%- if ns.previous != "system" -%}
      {{- raise_exception("System messages must come first") -}}
    {%- endif -%}
    {{- "<<SYS>>\n" + text(message.content) + "\n<</SYS>>\n\n" -}}
    {%- set role = "system" -%}
  {%- elif role == "user" -%}
    {%- if ns.previous == "user" -%}
      {{- raise_exception("Conversation roles must alternate user/assistant/user/assistant/...") -}}
    {%- endif -%}
    {{- "[INST] " + text(message.content) + " [/INST]" -}}
  {%- elif role == "assistant" -%}
    {%- if ns.previous == "system" -%}
      {{- raise_exception("The conversation must start with a user message") -}}
    {%- elif ns.previous == "assistant" -%}
      {{- raise_exception("Conversation roles must alternate user/assistant/user/assistant/...") -}}
    {%- endif -%}
    {{- " " + text(message.content) -}}
    {%- for call in message.tool_calls or [] -%}
      {{- "[TOOL_CALLS]" + call.id + ":" + call.function.name -}}
    {%- endfor -%}
    {{- eos_token -}}
  {%- elif role == "tool" -%}
    {%- if ns.previous not in ["assistant", "tool"] -%}
      {{- raise_exception("A tool result must follow an assistant tool call") -}}
    {%- endif -%}
    {{- "[TOOL_RESULTS]" + message.tool_call_id + ":" + text(message.content) -}}
    {{- "[/TOOL_RESULTS]" -}}
  {%- else -%}
    {{- raise_exception("Unknown role " + role) -}}
  {%- endif -%}
  {%- set ns.previous = role -%}
{%- endfor -%}
"""


def _raise(message: str) -> None:
    raise jinja2.TemplateError(message)


_environment = ImmutableSandboxedEnvironment()
_environment.globals["raise_exception"] = _raise
strict_template = _environment.from_string(STRICT_TEMPLATE)


def render(messages: list[Message]) -> str:
    return str(strict_template.render(messages=messages, bos_token="<s>", eos_token="</s>"))


def renders(messages: list[Message]) -> bool:
    try:
        render(messages)
    except jinja2.TemplateError:
        return False
    return True


def texts_of(message: Message) -> list[str]:
    content = message.get("content")
    if isinstance(content, str):
        return [content]
    return [part["text"] for part in content or () if part["type"] == "text"]


def images_of(messages: list[Message]) -> list[Any]:
    return [
        part
        for message in messages
        if isinstance(message.get("content"), list)
        for part in message["content"]
        if part["type"] == "image_url"
    ]


def call_ids(messages: list[Message]) -> list[str]:
    return [call["id"] for message in messages for call in message.get("tool_calls") or ()]


def result_ids(messages: list[Message]) -> list[str]:
    return [message["tool_call_id"] for message in messages if message["role"] == "tool"]


def system_length(messages: list[Message]) -> int:
    return next(
        (i for i, m in enumerate(messages) if m["role"] not in ("system", "developer")),
        len(messages),
    )


def check_results_follow_calls(messages: list[Message]) -> None:
    """Each tool result sits in a run of results right after the assistant that called it."""
    for at, message in enumerate(messages):
        if message["role"] != "tool":
            continue
        call = at - 1
        while messages[call]["role"] == "tool":
            call -= 1
        assert messages[call]["role"] == "assistant"
        assert message["tool_call_id"] in call_ids([messages[call]])


# Properties ------------------------------------------------------------------


@given(contexts(), modes)
def test_output_alternates_and_renders_with_a_strict_template(
    messages: list[Message], mode: str
) -> None:
    """Whatever the valid input, the output passes ``is_alternating`` and the strict template."""
    out = alternate(messages, mode)
    assert is_alternating(out)
    render(out)


@given(st.one_of(contexts(), alternating_contexts()))
def test_is_alternating_agrees_with_the_strict_template(messages: list[Message]) -> None:
    """The template raises on exactly the inputs ``is_alternating`` rejects."""
    assert renders(messages) == is_alternating(messages)


@given(contexts(), modes)
def test_system_messages_stay_first_and_unchanged(messages: list[Message], mode: str) -> None:
    out = alternate(messages, mode)
    head = system_length(messages)
    assert out[:head] == messages[:head]
    assert system_length(out) == head


@given(contexts(), modes)
def test_no_text_image_or_tool_call_is_lost_or_reordered(
    messages: list[Message], mode: str
) -> None:
    out, trace = alternate_with_trace(messages, mode)
    real = [message for message, origin in zip(out, trace, strict=True) if origin]
    written = "\x00".join(text for message in real for text in texts_of(message))
    at = 0
    for text in (text for message in messages for text in texts_of(message)):
        found = written.find(text, at)
        assert found >= 0, f"{text!r} lost or out of order"
        at = found + len(text)
    assert images_of(out) == images_of(messages)
    assert call_ids(out) == call_ids(messages)
    assert result_ids(out) == result_ids(messages)
    check_results_follow_calls(out)


@given(contexts(), modes)
def test_the_trace_maps_every_input_once_in_order(messages: list[Message], mode: str) -> None:
    out, trace = alternate_with_trace(messages, mode)
    assert len(trace) == len(out)
    assert list(itertools.chain.from_iterable(trace)) == list(range(len(messages)))
    for message, origin in zip(out, trace, strict=True):
        if len(origin) == 1:
            assert message == messages[origin[0]]
        elif not origin:
            assert (message["role"], message["content"]) in (
                ("user", BRIDGE_USER),
                ("assistant", BRIDGE_ASSISTANT),
            )
            assert set(message) == {"role", "content"}  # nothing but wire format
        else:
            assert mode == "merge"
            assert {messages[i]["role"] for i in origin} == {message["role"]}


@given(contexts(), modes)
def test_each_mode_only_does_its_own_repairs(messages: list[Message], mode: str) -> None:
    """Bridge never merges; merge inserts at most one placeholder, before a leading assistant."""
    trace = alternate_with_trace(messages, mode)[1]
    inserted = [at for at, origin in enumerate(trace) if not origin]
    if mode == "bridge":
        assert all(len(origin) <= 1 for origin in trace)
    else:
        assert inserted in ([], [system_length(messages)])


@given(contexts(), modes)
def test_input_is_not_changed_and_output_dicts_are_new(messages: list[Message], mode: str) -> None:
    before = copy.deepcopy(messages)
    out = alternate(messages, mode)
    assert messages == before
    assert not {id(message) for message in out} & {id(message) for message in messages}


@given(contexts(), modes)
def test_idempotent(messages: list[Message], mode: str) -> None:
    once = alternate(messages, mode)
    assert alternate(once, mode) == once


@given(alternating_contexts(), modes)
def test_an_alternating_context_comes_back_equal(messages: list[Message], mode: str) -> None:
    assert is_alternating(messages)
    out, trace = alternate_with_trace(messages, mode)
    assert out == messages
    assert trace == [(i,) for i in range(len(messages))]


def test_the_strict_template_refuses_raw_contexts() -> None:
    """The judge is not lenient: the cases ``alternate`` exists for make it raise."""
    system = {"role": "system", "content": "Be brief."}
    user = {"role": "user", "content": "你好"}
    assistant = {"role": "assistant", "content": "Hi 👋"}
    for raw in ([system, assistant, user], [system, user, user], [user, assistant, assistant]):
        with pytest.raises(jinja2.TemplateError, match="must"):
            render(raw)
        for mode in STRICT_MODES:
            render(alternate(raw, mode))


# Examples --------------------------------------------------------------------

SYSTEM = {"role": "system", "content": "You are helpful."}


def user(content: Any, **extra: Any) -> Message:
    return {"role": "user", "content": content, **extra}


def assistant(content: Any, **extra: Any) -> Message:
    return {"role": "assistant", "content": content, **extra}


def calls(*ids: str) -> list[Message]:
    return [
        {"id": i, "type": "function", "function": {"name": "f", "arguments": "{}"}} for i in ids
    ]


@pytest.mark.parametrize("mode", STRICT_MODES)
def test_history_evicted_down_to_an_answer_starts_with_a_user_message(mode: str) -> None:
    """[system, assistant, user]: eviction took the question the answer was for."""
    messages = [SYSTEM, assistant("Sure, here it is."), user("谢谢！")]
    out, trace = alternate_with_trace(messages, mode)
    assert out == [SYSTEM, user(BRIDGE_USER), assistant("Sure, here it is."), user("谢谢！")]
    assert trace == [(0,), (), (1,), (2,)]


def test_merge_joins_two_user_turns_sent_together() -> None:
    out, trace = alternate_with_trace([SYSTEM, user("first 🎉"), user("second 日本語")], "merge")
    assert out == [SYSTEM, user("first 🎉\n\nsecond 日本語")]
    assert trace == [(0,), (1, 2)]


def test_bridge_puts_an_assistant_placeholder_between_two_user_turns() -> None:
    out, trace = alternate_with_trace([SYSTEM, user("first"), user("second")], "bridge")
    assert out == [SYSTEM, user("first"), assistant(BRIDGE_ASSISTANT), user("second")]
    assert trace == [(0,), (1,), (), (2,)]


def test_bridge_puts_a_user_placeholder_between_two_assistant_messages() -> None:
    messages = [user("q"), assistant("a"), assistant("b")]
    assert alternate(messages, "bridge") == [
        user("q"),
        assistant("a"),
        user(BRIDGE_USER),
        assistant("b"),
    ]


def test_merge_of_assistant_messages_keeps_the_later_tool_calls() -> None:
    messages = [
        user("q"),
        assistant("Let me look."),
        assistant(None, tool_calls=calls("c1")),
        {"role": "tool", "tool_call_id": "c1", "content": "42"},
        assistant("It is 42."),
    ]
    out, trace = alternate_with_trace(messages, "merge")
    assert out == [
        user("q"),
        assistant("Let me look.", tool_calls=calls("c1")),
        messages[3],
        messages[4],
    ]
    assert trace == [(0,), (1, 2), (3,), (4,)]


def test_merge_never_drops_tool_calls_even_of_an_unanswered_call() -> None:
    """An open call directly followed by an answer is not a valid context; still no call is lost."""
    messages = [
        user("q"),
        assistant(None, tool_calls=calls("c1")),
        assistant("a", tool_calls=calls("c2")),
    ]
    assert alternate(messages, "merge") == [user("q"), assistant("a", tool_calls=calls("c1", "c2"))]


def test_assistant_tool_assistant_is_already_acceptable() -> None:
    messages = [
        user("q"),
        assistant(None, tool_calls=calls("c1", "c2")),
        {"role": "tool", "tool_call_id": "c1", "content": "a"},
        {"role": "tool", "tool_call_id": "c2", "content": "b"},
        assistant("done"),
    ]
    assert is_alternating(messages)
    for mode in STRICT_MODES:
        assert alternate(messages, mode) == messages


def test_merge_with_parts_gives_one_list_of_parts() -> None:
    image = {"type": "image_url", "image_url": {"url": "https://example.invalid/cat.png"}}
    out = alternate([user("look"), user([image]), user("猫です")], "merge")
    assert out == [
        user(
            [
                {"type": "text", "text": "look"},
                image,
                {"type": "text", "text": "猫です"},
            ]
        )
    ]


def test_merge_skips_none_and_empty_contents() -> None:
    out = alternate([user("q"), assistant(None), assistant(""), assistant("a")], "merge")
    assert out == [user("q"), assistant("a")]
    assert alternate([user("q"), assistant(None), assistant(None)], "merge") == [
        user("q"),
        assistant(None),
    ]


def test_merge_keeps_a_name_only_when_all_share_it() -> None:
    same = alternate([user("a", name="ana"), user("b", name="ana")], "merge")
    assert same == [user("a\n\nb", name="ana")]
    mixed = alternate([user("a", name="ana"), user("b", name="李"), user("c", name="李")], "merge")
    assert mixed == [user("a\n\nb\n\nc")]


def test_merged_messages_keep_only_wire_keys() -> None:
    out = alternate([user("q"), assistant("a", refusal=None), assistant("b", audio=None)], "merge")
    assert out == [user("q"), assistant("a\n\nb")]


@pytest.mark.parametrize("mode", STRICT_MODES)
def test_system_and_developer_messages_are_kept_as_they_are(mode: str) -> None:
    developer = {"role": "developer", "content": "Answer in 中文."}
    messages = [SYSTEM, developer, assistant("hi")]
    assert alternate(messages, mode) == [SYSTEM, developer, user(BRIDGE_USER), assistant("hi")]


@pytest.mark.parametrize("mode", STRICT_MODES)
@pytest.mark.parametrize("messages", [[], [SYSTEM], [user("only")]])
def test_small_contexts_come_back_equal(mode: str, messages: list[Message]) -> None:
    assert alternate(messages, mode) == messages


@pytest.mark.parametrize(
    ("messages", "expected"),
    [
        ([], True),
        ([SYSTEM, SYSTEM, user("q")], True),
        ([user("q"), assistant("a"), user("q")], True),
        ([assistant("a")], False),
        ([SYSTEM, {"role": "tool", "tool_call_id": "c", "content": "x"}], False),
        ([user("q"), user("q")], False),
        ([user("q"), assistant("a"), assistant("b")], False),
        ([user("q"), SYSTEM], False),
        ([{"role": "narrator", "content": "x"}], False),
    ],
)
def test_is_alternating(messages: list[Message], expected: bool) -> None:
    assert is_alternating(messages) is expected


def test_an_unknown_mode_is_named() -> None:
    with pytest.raises(ValueError, match=r"unknown alternation mode 'strict'.*merge.*bridge"):
        alternate([user("q")], "strict")


@pytest.mark.parametrize(
    ("messages", "error", "match"),
    [
        ([user("q"), SYSTEM], ValueError, "message 1 is a system message"),
        (
            [SYSTEM, {"role": "tool", "tool_call_id": "c", "content": "x"}],
            OrphanToolResultError,
            "1",
        ),
        (
            [user("q"), {"role": "tool", "tool_call_id": "c", "content": "x"}],
            OrphanToolResultError,
            "message 1",
        ),
        ([{"role": "narrator", "content": "x"}], InvalidMessageError, "narrator"),
    ],
)
@pytest.mark.parametrize("mode", STRICT_MODES)
def test_what_cannot_be_fixed_without_reordering_is_refused(
    messages: list[Message], error: type[Exception], match: str, mode: str
) -> None:
    with pytest.raises(error, match=match):
        alternate(messages, mode)


def test_alternate_is_alternate_with_trace_without_the_trace() -> None:
    messages = [SYSTEM, assistant("a"), user("q"), user("r")]
    for mode in STRICT_MODES:
        assert alternate(messages, mode) == alternate_with_trace(messages, mode)[0]
