"""``ctxwindow.validate``: each provider rule rejects its own violation, and real requests pass.

For every rule in ``RULES`` one or more cases take a minimal valid request and
break it in exactly that rule's way; the validator must report that rule (and
only the rules the case names). A meta-test holds the cases to ``RULES``, so a
rule whose check is removed fails its case, and a rule added without a case
fails the meta-test. The SDKs' and providers' own example requests, transcribed
with where they come from, must pass untouched. Hypothesis throws arbitrary
JSON at the validators (they never raise) and checks the strict-template rules
against ``ctxwindow.policies.alternate``: what ``alternate()`` builds has no
template violation, and ``chat_template`` agrees with ``is_alternating``.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from anthropic.types import Message as AnthropicReply
from anthropic.types import MessageParam
from hypothesis import given
from hypothesis import strategies as st
from openai.types.chat import ChatCompletion, ChatCompletionMessageParam
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseInputParam,
    ResponseOutputMessage,
    ResponseReasoningItem,
)

from ctxwindow.policies.alternate import STRICT_MODES, alternate, is_alternating
from ctxwindow.validate import (
    PROTOCOLS,
    RULES,
    InvalidRequestError,
    Rule,
    Violation,
    anthropic_messages,
    chat_completions,
    chat_template,
    check,
    ensure,
    responses,
)

Request = dict[str, Any]


def call(call_id: str, name: str = "lookup_order", arguments: str = "{}") -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


# --- one minimal valid request per protocol --------------------------------------------------


def chat_request() -> Request:
    """Parallel tool calls answered out of order, CJK and emoji throughout."""
    return {
        "model": "gpt-4.1",
        "messages": [
            {"role": "system", "content": "你是一个订单助手。"},
            {"role": "user", "content": "订单 A-1042 和 B-7 到哪了？"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [call("call_甲"), call("call_乙")],
            },
            {"role": "tool", "tool_call_id": "call_乙", "content": "B-7: 已签收 ✅"},
            {"role": "tool", "tool_call_id": "call_甲", "content": "A-1042: 运输中 🚚"},
            {"role": "assistant", "content": "A-1042 在路上，B-7 已签收。"},
        ],
    }


def responses_request() -> Request:
    """A reasoning item, the call it led to (with its id), the output, the answer."""
    return {
        "model": "o4-mini",
        "input": [
            {"role": "user", "content": "注文 #42 はどこ？"},
            {"type": "reasoning", "id": "rs_1", "summary": []},
            {
                "type": "function_call",
                "id": "fc_1",
                "call_id": "call_1",
                "name": "lookup_order",
                "arguments": '{"id": 42}',
            },
            {"type": "function_call_output", "call_id": "call_1", "output": "発送済み 📦"},
            {
                "type": "message",
                "id": "msg_1",
                "role": "assistant",
                "content": [{"type": "output_text", "text": "発送済みです。"}],
            },
        ],
    }


def anthropic_request() -> Request:
    """Thinking on, a signed thinking block before its tool call, the result last, cached."""
    return {
        "model": "claude-sonnet-4-5",
        "max_tokens": 2048,
        "thinking": {"type": "enabled", "budget_tokens": 1024},
        "system": [
            {
                "type": "text",
                "text": "あなたは旅行アシスタントです。",
                "cache_control": {"type": "ephemeral"},
            }
        ],
        "tools": [{"name": "weather", "input_schema": {"type": "object"}}],
        "messages": [
            {"role": "user", "content": "京都の天気は？"},
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "天気を調べる。", "signature": "EqQBCgIYAhIM"},
                    {"type": "text", "text": "調べます。"},
                    {
                        "type": "tool_use",
                        "id": "toolu_京都",
                        "name": "weather",
                        "input": {"city": "京都"},
                    },
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_京都", "content": "晴れ ☀️"}
                ],
            },
        ],
    }


def template_messages() -> list[dict[str, Any]]:
    return [
        {"role": "system", "content": "Réponds brièvement."},
        {"role": "user", "content": "¿Qué hora es en 東京?"},
        {"role": "assistant", "content": None, "tool_calls": [call("c1", "clock")]},
        {"role": "tool", "tool_call_id": "c1", "content": "21:00"},
        {"role": "assistant", "content": "Son las 21:00 🕘"},
        {"role": "user", "content": "Merci !"},
    ]


VALID: dict[str, Callable[[], Any]] = {
    "chat_completions": chat_request,
    "responses": responses_request,
    "anthropic_messages": anthropic_request,
    "chat_template": template_messages,
}


# --- one broken request (or more) per rule -----------------------------------------------------

_UNCHANGED = object()


@dataclass(frozen=True)
class Broken:
    """The valid request of ``rule``'s protocol, changed by ``edit`` (in place) or replaced by
    ``instead``: it breaks ``rule`` and, where a case says so, the rules in ``also``."""

    rule: str
    edit: Callable[[Any], object] = lambda request: None
    also: frozenset[str] = frozenset()
    instead: Any = _UNCHANGED

    @property
    def protocol(self) -> str:
        return RULES[self.rule].protocol

    def request(self) -> Any:
        if self.instead is not _UNCHANGED:
            return self.instead
        request = VALID[self.protocol]()
        self.edit(request)
        return request


def on(key: str, edit: Callable[[list[Any]], object]) -> Callable[[Any], object]:
    """An edit of ``request[key]`` (``messages`` or ``input``), or of a bare message list."""
    return lambda request: edit(request if isinstance(request, list) else request[key])


def messages(edit: Callable[[list[Any]], object]) -> Callable[[Any], object]:
    return on("messages", edit)


def items(edit: Callable[[list[Any]], object]) -> Callable[[Any], object]:
    return on("input", edit)


def setting(*path: Any, value: Any) -> Callable[[list[Any]], object]:
    """Set ``messages[path[0]]…[path[-1]] = value``."""

    def edit(target: Any) -> None:
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value

    return edit


def inserting(index: int, item: Any) -> Callable[[list[Any]], object]:
    return lambda listed: listed.insert(index, copy.deepcopy(item))


def also(*rules: str) -> frozenset[str]:
    return frozenset(rules)


THINKING = {"type": "thinking", "thinking": "考え中", "signature": "EqQBCgIYAhIM"}
CACHED = {"type": "ephemeral"}


def without_thinking(*turns: dict[str, Any]) -> Callable[[Request], object]:
    """Thinking turned off, and ``turns`` appended."""
    return lambda request: (request.pop("thinking"), request["messages"].extend(turns))


def five_breakpoints(request: Request) -> None:
    """The system prompt's breakpoint, and four more: a tool, two blocks, a tool result."""
    reply, results = request["messages"][1]["content"], request["messages"][2]["content"]
    for block in (request["tools"][0], reply[1], reply[2], results[0]):
        block["cache_control"] = CACHED


CHAT_CASES = [
    Broken("chat.shape", instead={"messages": "hello"}),
    Broken("chat.shape", instead={"messages": []}),
    Broken("chat.shape", instead=["not", "messages"]),
    Broken("chat.shape", messages(lambda m: m.append(42))),
    Broken("chat.shape", messages(setting(2, "tool_calls", 0, "function", value={}))),
    Broken("chat.shape", messages(setting(1, "content", value=None))),
    Broken("chat.roles", messages(setting(1, "role", value="human"))),
    Broken("chat.tool_result_follows_call", messages(lambda m: m.append(dict(m[3])))),
    Broken(
        "chat.tool_result_follows_call",
        messages(inserting(1, {"role": "tool", "tool_call_id": "call_甲", "content": "?"})),
    ),
    Broken(  # answers a call of an earlier assistant message, not of the nearest one
        "chat.tool_result_follows_call",
        messages(
            lambda m: m.extend(
                [
                    {"role": "assistant", "content": None, "tool_calls": [call("call_丙")]},
                    {"role": "tool", "tool_call_id": "call_甲", "content": "again"},
                ]
            )
        ),
        also("chat.tool_call_answered"),
    ),
    Broken("chat.tool_call_answered", messages(lambda m: m.pop(3))),
    Broken(  # a user message cuts the block: the result after it answers nothing
        "chat.tool_call_answered",
        messages(inserting(4, {"role": "user", "content": "还有吗？"})),
        also("chat.tool_result_follows_call"),
    ),
    Broken("chat.tool_result_once", messages(lambda m: m.insert(5, dict(m[4])))),
    Broken(
        "chat.tool_call_ids_unique", messages(lambda m: m[2]["tool_calls"].append(call("call_甲")))
    ),
    Broken("chat.assistant_not_empty", messages(setting(5, "content", value=""))),
    Broken("chat.assistant_not_empty", messages(setting(5, "content", value=None))),
]

RESPONSES_CASES = [
    Broken("responses.shape", instead={"input": 42}),
    Broken("responses.shape", instead={"input": [{"type": "function_call", "call_id": 7}]}),
    Broken("responses.shape", instead={"input": [{"role": "robot", "content": "hi"}]}),
    Broken("responses.shape", instead={"previous_response_id": 3, "input": "hi"}),
    Broken(
        "responses.function_call_output_has_call",
        items(
            lambda i: i.append({"type": "function_call_output", "call_id": "call_9", "output": "?"})
        ),
    ),
    Broken("responses.function_call_answered", items(lambda i: i.pop(3))),
    Broken("responses.call_ids_unique", items(lambda i: i.insert(4, dict(i[3])))),
    Broken("responses.call_ids_unique", items(lambda i: i.insert(3, {**i[2], "id": "fc_2"}))),
    Broken("responses.reasoning_precedes_item", items(lambda i: i[2].pop("id"))),
    Broken("responses.reasoning_precedes_item", items(lambda i: i.append(dict(i[1])))),
    Broken(
        "responses.reasoning_precedes_item",
        items(inserting(2, {"role": "user", "content": "急いで"})),
    ),
    Broken(
        "responses.state_exclusive",
        lambda r: r.update(previous_response_id="resp_1", conversation="conv_1"),
    ),
]

ANTHROPIC_CASES = [
    Broken("anthropic.shape", instead={"messages": {"role": "user", "content": "hi"}}),
    Broken("anthropic.shape", instead={"messages": []}),
    Broken("anthropic.shape", messages(setting(0, "content", value=[{"text": "no type"}]))),
    Broken("anthropic.shape", messages(setting(1, "content", 2, "input", value="not an object"))),
    Broken(
        "anthropic.shape",
        messages(
            setting(0, "content", value=[{"type": "tool_use", "id": "t", "name": "n", "input": {}}])
        ),
    ),
    Broken("anthropic.shape", lambda r: r.update(system=[{"type": "image", "source": {}}])),
    Broken("anthropic.roles", messages(inserting(0, {"role": "system", "content": "Be brief."}))),
    Broken("anthropic.roles", messages(setting(0, "role", value="human"))),
    Broken(
        "anthropic.first_user", messages(inserting(0, {"role": "assistant", "content": "ようこそ"}))
    ),
    Broken(
        "anthropic.alternation",
        messages(lambda m: m.append({"role": "user", "content": "ありがとう"})),
    ),
    Broken("anthropic.content_not_empty", messages(setting(0, "content", value=""))),
    Broken("anthropic.content_not_empty", messages(setting(0, "content", value=[]))),
    Broken("anthropic.text_not_blank", messages(setting(0, "content", value="  \n"))),
    Broken("anthropic.text_not_blank", messages(setting(1, "content", 1, "text", value=" "))),
    Broken("anthropic.text_not_blank", lambda r: r["system"][0].update(text="\t")),
    Broken(  # a prefill that ends with whitespace
        "anthropic.text_not_blank",
        without_thinking(
            {"role": "assistant", "content": "晴れです。"},
            {"role": "user", "content": "続けて"},
            {"role": "assistant", "content": "はい、 "},
        ),
    ),
    Broken("anthropic.tool_use_answered", messages(setting(2, "content", value="続けて"))),
    Broken(
        "anthropic.tool_use_answered",
        messages(
            lambda m: m[1]["content"].append(
                {"type": "tool_use", "id": "toolu_2", "name": "weather", "input": {}}
            )
        ),
    ),
    Broken(
        "anthropic.tool_result_first",
        messages(lambda m: m[2]["content"].insert(0, {"type": "text", "text": "結果:"})),
    ),
    Broken(
        "anthropic.tool_result_has_use",
        messages(
            lambda m: m[2]["content"].append(
                {"type": "tool_result", "tool_use_id": "toolu_9", "content": "?"}
            )
        ),
    ),
    Broken(
        "anthropic.tool_result_has_use",
        messages(lambda m: m[2]["content"].append(dict(m[2]["content"][0]))),
    ),
    Broken("anthropic.tool_use_ids_unique", messages(lambda m: m.extend(copy.deepcopy(m[1:3])))),
    Broken(
        "anthropic.thinking_first",
        messages(lambda m: m[1]["content"].insert(0, m[1]["content"].pop(1))),
    ),
    Broken(
        "anthropic.thinking_not_last", messages(lambda m: m[1]["content"].append(dict(THINKING)))
    ),
    Broken("anthropic.thinking_signed", messages(lambda m: m[1]["content"][0].pop("signature"))),
    Broken(
        "anthropic.thinking_signed",
        messages(setting(1, "content", 0, value={"type": "redacted_thinking"})),
    ),
    Broken("anthropic.thinking_continued", messages(lambda m: m[1]["content"].pop(0))),
    Broken(  # thinking off, yet the final assistant message (a prefill) carries thinking
        "anthropic.thinking_continued",
        without_thinking(
            {"role": "assistant", "content": "晴れです。"},
            {"role": "user", "content": "要約して"},
            {"role": "assistant", "content": [dict(THINKING), {"type": "text", "text": "要約:"}]},
        ),
    ),
    Broken("anthropic.cache_control_limit", five_breakpoints),
]

TEMPLATE_CASES = [
    Broken("template.shape", messages(setting(5, "role", value="robot"))),
    Broken("template.shape", instead="not a list"),
    Broken(
        "template.system_first", messages(inserting(2, {"role": "system", "content": "Sois poli."}))
    ),
    Broken("template.alternation", messages(inserting(2, {"role": "user", "content": "¿Hola?"}))),
    Broken("template.alternation", messages(lambda m: m.pop(1))),
    Broken("template.alternation", messages(lambda m: m.insert(2, dict(m[4])))),
    Broken(
        "template.alternation",
        messages(inserting(2, {"role": "tool", "tool_call_id": "c0", "content": "?"})),
    ),
]

CASES = CHAT_CASES + RESPONSES_CASES + ANTHROPIC_CASES + TEMPLATE_CASES


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_the_valid_request_of_each_protocol_passes(protocol: str) -> None:
    """The requests every case starts from break no rule."""
    assert check(protocol, VALID[protocol]()) == []


@pytest.mark.parametrize(
    "case", CASES, ids=[f"{case.rule}-{index}" for index, case in enumerate(CASES)]
)
def test_each_rule_rejects_its_violation(case: Broken) -> None:
    """The broken request is reported under the case's rule, and under no rule it did not
    break: removing a rule's check fails its cases."""
    violations = check(case.protocol, case.request())
    assert {violation.rule for violation in violations} == {case.rule, *case.also}
    assert all(violation.rule.startswith(case.rule.split(".")[0] + ".") for violation in violations)


def test_every_rule_has_a_case_and_every_case_a_rule() -> None:
    """A rule added to ``RULES`` needs a case here; a case names a rule that exists."""
    assert {case.rule for case in CASES} == set(RULES)


def test_the_rules_are_named_and_cited() -> None:
    """Each rule: its name is its key and starts with its protocol's prefix, one sentence,
    a source on the provider's documentation site."""
    prefixes = {
        "chat_completions": "chat.",
        "responses": "responses.",
        "anthropic_messages": "anthropic.",
        "chat_template": "template.",
    }
    for name, rule in RULES.items():
        assert isinstance(rule, Rule) and rule.name == name
        assert name.startswith(prefixes[rule.protocol])
        assert rule.text.endswith(".") and rule.text.count(". ") == 0, name
        assert rule.source.startswith(
            (
                "https://platform.openai.com/docs/",
                "https://docs.anthropic.com/en/",
                "https://huggingface.co/docs/",
            )
        ), name
    assert {rule.protocol for rule in RULES.values()} == set(PROTOCOLS)


# --- the providers' and SDKs' own example requests ---------------------------------------------


def openai_reply(message: dict[str, Any]) -> Any:
    """An assistant message as the openai SDK hands it back (``completion.choices[0].message``),
    dumped as the SDK sends a model it is given: its set fields only."""
    completion = ChatCompletion.model_validate(
        {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "created": 1,
            "model": "gpt-4.1",
            "choices": [{"index": 0, "finish_reason": "tool_calls", "message": message}],
        }
    )
    return completion.choices[0].message.model_dump(exclude_unset=True)


def anthropic_reply(content: list[dict[str, Any]]) -> MessageParam:
    """An assistant turn as the anthropic SDK examples send it back:
    ``{"role": message.role, "content": message.content}``, blocks dumped by the SDK."""
    reply = AnthropicReply.model_validate(
        {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": "claude-sonnet-4-5",
            "stop_reason": "tool_use",
            "stop_sequence": None,
            "usage": {"input_tokens": 1, "output_tokens": 1},
            "content": content,
        }
    )
    return {"role": "assistant", "content": [block.model_dump() for block in reply.content]}


WEATHER_CALLS = [
    call("call_paris", "get_weather", '{"location":"Paris, France"}'),
    call("call_bogota", "get_weather", '{"location":"Bogotá, Colombia"}'),
]

# openai-python README ("Usage"), the Chat Completions example.
CHAT_README: list[ChatCompletionMessageParam] = [
    {"role": "developer", "content": "Talk like a pirate."},
    {"role": "user", "content": "How do I check if a Python object is an instance of a class?"},
]

# platform.openai.com/docs/guides/function-calling (Chat Completions): the call, the model's
# message appended as the SDK returned it, then one tool message per call id.
CHAT_FUNCTION_CALL: list[ChatCompletionMessageParam] = [
    {"role": "user", "content": "What is the weather like in Paris today?"},
    openai_reply({"role": "assistant", "content": None, "tool_calls": WEATHER_CALLS[:1]}),
    {"role": "tool", "tool_call_id": "call_paris", "content": "14°C"},
]

# platform.openai.com/docs/guides/function-calling, "Parallel function calling".
CHAT_PARALLEL: list[ChatCompletionMessageParam] = [
    {"role": "user", "content": "What is the weather like in Paris and Bogotá?"},
    openai_reply(
        {"role": "assistant", "content": None, "refusal": None, "tool_calls": WEATHER_CALLS}
    ),
    {"role": "tool", "tool_call_id": "call_paris", "content": "14°C"},
    {"role": "tool", "tool_call_id": "call_bogota", "content": "18°C"},
    {"role": "assistant", "content": "Paris: 14°C, Bogotá: 18°C."},
]

# platform.openai.com/docs/guides/images-vision (Chat Completions): an image by URL.
CHAT_IMAGE: list[ChatCompletionMessageParam] = [
    {
        "role": "user",
        "content": [
            {"type": "text", "text": "What's in this image?"},
            {"type": "image_url", "image_url": {"url": "https://upload.wikimedia.org/a.jpg"}},
        ],
    }
]

# openai-python README, the Responses example, and its vision example (input_image by URL).
RESPONSES_README = {
    "model": "gpt-5.5",
    "instructions": "You are a coding assistant that talks like a pirate.",
    "input": "How do I check if a Python object is an instance of a class?",
}
RESPONSES_IMAGE_INPUT: ResponseInputParam = [
    {
        "role": "user",
        "content": [
            {"type": "input_text", "text": "What is in this image?"},
            {
                "type": "input_image",
                "image_url": "https://api.nga.gov/iiif/a2e6da57/default.jpg",
                "detail": "auto",
            },
        ],
    }
]

# openai-python examples/responses/function_call_inputs.py: a call and its output, by call_id.
RESPONSES_FUNCTION_INPUTS: ResponseInputParam = [
    {"role": "developer", "content": "Use the supplied function results to answer."},
    {"role": "user", "content": "What is the current order status?"},
    {
        "type": "function_call",
        "call_id": "call_123",
        "name": "get_order_status",
        "arguments": '{"order_id":"order_123"}',
    },
    {"type": "function_call_output", "call_id": "call_123", "output": '{"status":"shipped"}'},
]

# openai-python examples/responses/tool_call_loop.py: only the outputs, with
# previous_response_id (the calls live in the stored response).
RESPONSES_TOOL_LOOP = {
    "model": "gpt-4o-mini",
    "previous_response_id": "resp_123",
    "input": [
        {"type": "function_call_output", "call_id": "call_tokyo", "output": '{"city": "Tokyo"}'},
        {"type": "function_call_output", "call_id": "call_london", "output": '{"city": "London"}'},
    ],
}

# platform.openai.com/docs/guides/reasoning, "Keeping reasoning items in context" (and the
# cookbook's responses_api/reasoning_items): context += response.output (a reasoning item
# and the function call it led to, as the SDK returned them), then the call's output.
RESPONSES_REASONING: list[Any] = [
    {"role": "user", "content": "What's the weather like in Paris today?"},
    ResponseReasoningItem.model_validate(
        {"id": "rs_6820f383", "type": "reasoning", "summary": [], "encrypted_content": "gAAAAB"}
    ).model_dump(exclude_none=True),
    ResponseFunctionToolCall.model_validate(
        {
            "id": "fc_6820f383",
            "type": "function_call",
            "call_id": "call_paris",
            "name": "get_weather",
            "arguments": '{"location":"Paris, France"}',
            "status": "completed",
        }
    ).model_dump(exclude_none=True),
    {"type": "function_call_output", "call_id": "call_paris", "output": "14°C"},
    ResponseReasoningItem.model_validate(
        {"id": "rs_6820f384", "type": "reasoning", "summary": []}
    ).model_dump(exclude_none=True),
    ResponseOutputMessage.model_validate(
        {
            "id": "msg_6820f384",
            "type": "message",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": "It is 14°C.", "annotations": []}],
        }
    ).model_dump(exclude_none=True),
    {"role": "user", "content": "And tomorrow?"},
]

# platform.openai.com/docs/guides/conversation-state: the next turn names the previous response.
RESPONSES_CONVERSATION_STATE = {
    "model": "gpt-4o-mini",
    "previous_response_id": "resp_67ccd2bed1ec8190b14f964abc054267",
    "input": [{"role": "user", "content": "explain why this is funny."}],
}

# anthropic-sdk-python README ("Usage").
ANTHROPIC_README: list[MessageParam] = [{"role": "user", "content": "Hello, Claude"}]

GET_WEATHER = {
    "name": "get_weather",
    "description": "Get the weather for a specific location",
    "input_schema": {"type": "object", "properties": {"location": {"type": "string"}}},
}

# anthropic-sdk-python examples/tools.py: the reply sent back whole, then its tool_result.
ANTHROPIC_TOOLS: list[MessageParam] = [
    {"role": "user", "content": "What is the weather in SF?"},
    anthropic_reply(
        [{"type": "tool_use", "id": "toolu_01", "name": "get_weather", "input": {"location": "SF"}}]
    ),
    {
        "role": "user",
        "content": [
            {
                "type": "tool_result",
                "tool_use_id": "toolu_01",
                "content": [{"type": "text", "text": "The weather is 73f"}],
            }
        ],
    },
]

# docs.anthropic.com/en/docs/agents-and-tools/tool-use/parallel-tool-use: every tool_result
# in the next user message, before any text; a call not run answers with is_error.
ANTHROPIC_PARALLEL: list[MessageParam] = [
    {"role": "user", "content": "What's the weather in SF and NYC, and what time is it there?"},
    anthropic_reply(
        [
            {"type": "text", "text": "I'll check both."},
            {
                "type": "tool_use",
                "id": "toolu_01",
                "name": "get_weather",
                "input": {"location": "SF"},
            },
            {
                "type": "tool_use",
                "id": "toolu_02",
                "name": "get_weather",
                "input": {"location": "NYC"},
            },
            {
                "type": "tool_use",
                "id": "toolu_03",
                "name": "get_time",
                "input": {"timezone": "EST"},
            },
        ]
    ),
    {
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": "toolu_01", "content": "68°F, sunny"},
            {"type": "tool_result", "tool_use_id": "toolu_02", "content": "45°F, cloudy"},
            {
                "type": "tool_result",
                "tool_use_id": "toolu_03",
                "is_error": True,
                "content": "Not executed: the preceding call failed.",
            },
            {"type": "text", "text": "Be brief."},
        ],
    },
]

# docs.anthropic.com/en/docs/build-with-claude/extended-thinking, "Extended thinking with tool
# use" / "Preserving thinking blocks": the signed thinking block goes back untouched.
ANTHROPIC_THINKING_TOOLS: list[MessageParam] = [
    {"role": "user", "content": "What's the weather in Paris?"},
    anthropic_reply(
        [
            {
                "type": "thinking",
                "thinking": "The user wants to know the current weather in Paris.",
                "signature": "BDaL4VrbR2Oj0hO4XpJxT28J5TILnCrrUXoKiiNBZW9P+nr8XSj1zu"
                "ZzAl4egiCCpQNvfyUuFFJP5CncdYZEQPPmLxYsNrcs",
            },
            {"type": "text", "text": "I'll check the current weather in Paris for you."},
            {
                "type": "tool_use",
                "id": "toolu_01CswdEQBMshySk6Y9DFKrfq",
                "name": "weather",
                "input": {"location": "Paris"},
            },
        ]
    ),
    {
        "role": "user",
        "content": [
            {
                "type": "tool_result",
                "tool_use_id": "toolu_01CswdEQBMshySk6Y9DFKrfq",
                "content": "Current temperature: 88°F",
            }
        ],
    },
]

# The same page, "Thinking redaction": a redacted_thinking block passed back with its data.
ANTHROPIC_REDACTED: list[MessageParam] = [
    {"role": "user", "content": "ANTHROPIC_MAGIC_STRING_TRIGGER_REDACTED_THINKING"},
    {
        "role": "assistant",
        "content": [
            {
                "type": "redacted_thinking",
                "data": "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpP",
            },
            {"type": "text", "text": "I can help with that."},
        ],
    },
    {"role": "user", "content": "Thanks!"},
]

# docs.anthropic.com/en/docs/build-with-claude/prompt-caching: breakpoints on the last tool, the
# system prompt and the conversation (four, the most allowed).
ANTHROPIC_CACHING = {
    "model": "claude-sonnet-4-5",
    "max_tokens": 1024,
    "tools": [
        GET_WEATHER,
        {**GET_WEATHER, "name": "get_time", "cache_control": {"type": "ephemeral"}},
    ],
    "system": [
        {"type": "text", "text": "You are an AI assistant tasked with analyzing literary works."},
        {
            "type": "text",
            "text": "<the entire contents of Pride and Prejudice>",
            "cache_control": {"type": "ephemeral"},
        },
    ],
    "messages": [
        {
            "role": "user",
            "content": [
                {
                    "type": "text",
                    "text": "Analyze the major themes.",
                    "cache_control": {"type": "ephemeral"},
                }
            ],
        },
        {"role": "assistant", "content": "Pride, prejudice, class."},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "And Darcy?", "cache_control": {"type": "ephemeral"}}
            ],
        },
    ],
}

# anthropic-sdk-python examples/images.py: text and a base64 image in one user turn.
ANTHROPIC_IMAGE: list[MessageParam] = [
    {
        "role": "user",
        "content": [
            {"type": "text", "text": "Hello!"},
            {
                "type": "image",
                "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="},
            },
        ],
    }
]

SDK_EXAMPLES: dict[str, tuple[str, Any]] = {
    "openai README chat": ("chat_completions", {"model": "gpt-5.5", "messages": CHAT_README}),
    "function calling": ("chat_completions", {"model": "gpt-4.1", "messages": CHAT_FUNCTION_CALL}),
    "parallel function calling": ("chat_completions", CHAT_PARALLEL),
    "chat image": ("chat_completions", {"model": "gpt-4.1", "messages": CHAT_IMAGE}),
    "openai README responses": ("responses", RESPONSES_README),
    "responses image": ("responses", {"model": "gpt-5.5", "input": RESPONSES_IMAGE_INPUT}),
    "function_call_inputs.py": (
        "responses",
        {"model": "gpt-4o-mini", "input": RESPONSES_FUNCTION_INPUTS},
    ),
    "tool_call_loop.py": ("responses", RESPONSES_TOOL_LOOP),
    "reasoning items": (
        "responses",
        {"model": "o4-mini", "store": False, "input": RESPONSES_REASONING},
    ),
    "conversation state": ("responses", RESPONSES_CONVERSATION_STATE),
    "anthropic README": (
        "anthropic_messages",
        {"model": "claude-opus-4-5", "max_tokens": 1024, "messages": ANTHROPIC_README},
    ),
    "tools.py": (
        "anthropic_messages",
        {"max_tokens": 1024, "tools": [GET_WEATHER], "messages": ANTHROPIC_TOOLS},
    ),
    "parallel tool use": (
        "anthropic_messages",
        {"max_tokens": 1024, "messages": ANTHROPIC_PARALLEL},
    ),
    "thinking with tools": (
        "anthropic_messages",
        {
            "max_tokens": 16000,
            "thinking": {"type": "enabled", "budget_tokens": 10000},
            "messages": ANTHROPIC_THINKING_TOOLS,
        },
    ),
    "redacted thinking": (
        "anthropic_messages",
        {
            "max_tokens": 16000,
            "thinking": {"type": "enabled", "budget_tokens": 10000},
            "messages": ANTHROPIC_REDACTED,
        },
    ),
    "prompt caching": ("anthropic_messages", ANTHROPIC_CACHING),
    "images.py": ("anthropic_messages", {"max_tokens": 1024, "messages": ANTHROPIC_IMAGE}),
}


@pytest.mark.parametrize("name", SDK_EXAMPLES)
def test_the_providers_own_examples_pass(name: str) -> None:
    """The request a provider's docs or SDK shows, sent as the SDK sends it, breaks no rule."""
    protocol, request = SDK_EXAMPLES[name]
    assert check(protocol, copy.deepcopy(request)) == []


def test_there_are_examples_of_every_wire_format() -> None:
    protocols = [protocol for protocol, _ in SDK_EXAMPLES.values()]
    assert len(protocols) >= 12
    assert set(protocols) == {"chat_completions", "responses", "anthropic_messages"}


# --- the API: check, ensure, places, order ----------------------------------------------------


def test_check_dispatches_to_each_validator() -> None:
    functions = {
        "chat_completions": chat_completions,
        "responses": responses,
        "anthropic_messages": anthropic_messages,
        "chat_template": chat_template,
    }
    for case in CASES:
        assert check(case.protocol, case.request()) == functions[case.protocol](case.request())


def test_check_refuses_an_unknown_protocol_by_name() -> None:
    with pytest.raises(ValueError, match=r"unknown protocol 'gemini': expected one of \("):
        check("gemini", {})


def test_ensure_raises_with_every_violation_and_passes_a_valid_request() -> None:
    """``ensure`` is silent on a valid request; otherwise its error lists the violations, and
    its text names the rule, the place and the id."""
    ensure("chat_completions", chat_request())
    broken = chat_request()
    del broken["messages"][3:5]
    with pytest.raises(InvalidRequestError) as raised:
        ensure("chat_completions", broken)
    assert raised.value.violations == tuple(chat_completions(broken))
    assert len(raised.value.violations) == 2
    assert str(raised.value).startswith("2 broken rules: messages[2].tool_calls[0]: ")
    assert "'call_甲'" in str(raised.value) and "(chat.tool_call_answered)" in str(raised.value)
    assert isinstance(raised.value, ValueError)


def test_a_long_list_of_violations_is_cut_in_the_message_only() -> None:
    request = {"messages": [{"role": "robot", "content": "?"}] * 9}
    with pytest.raises(InvalidRequestError) as raised:
        ensure("chat_completions", request)
    assert len(raised.value.violations) == 9
    assert str(raised.value).endswith("; and 4 more")


def test_violations_name_the_place_and_the_ids() -> None:
    """``where`` is the JSON path of the offending item; the message names the id."""
    request = chat_request()
    request["messages"].pop(3)
    assert chat_completions(request) == [
        Violation(
            "chat.tool_call_answered",
            "messages[2].tool_calls[1]",
            "no tool message answers 'call_乙' right after messages[2]",
        )
    ]
    request = anthropic_request()
    request["messages"][2]["content"][0]["tool_use_id"] = "toolu_🌧"
    places = [(v.rule, v.where) for v in anthropic_messages(request)]
    assert places == [
        ("anthropic.tool_use_answered", "messages[1].content[2]"),
        ("anthropic.tool_result_has_use", "messages[2].content[0]"),
    ]
    assert "'toolu_🌧'" in anthropic_messages(request)[1].message


def test_violations_come_in_request_order() -> None:
    """However many rules look at one message, the report follows the request: tools, then
    the system prompt, then each message and its blocks."""
    request = {
        "tools": [{"name": f"tool_{i}", "cache_control": CACHED} for i in range(5)],
        "messages": [
            {"role": "assistant", "content": [{"type": "text", "text": "x"}, dict(THINKING)]},
            {"role": "assistant", "content": ""},
            {"role": "system", "content": "late"},
        ],
    }
    assert [(v.rule, v.where) for v in anthropic_messages(request)] == [
        ("anthropic.cache_control_limit", "tools[4]"),
        ("anthropic.first_user", "messages[0]"),
        ("anthropic.thinking_first", "messages[0].content[0]"),
        ("anthropic.thinking_not_last", "messages[0].content[1]"),
        ("anthropic.content_not_empty", "messages[1]"),
        ("anthropic.alternation", "messages[1]"),
        ("anthropic.roles", "messages[2]"),
    ]


def test_a_message_list_alone_is_a_chat_request() -> None:
    assert chat_completions(chat_request()["messages"]) == []
    assert chat_template({"messages": template_messages()}) == []


def test_state_makes_an_output_without_its_call_valid() -> None:
    """With previous_response_id or conversation the call lives in the stored state; an
    item_reference may point at it too. A call in input still needs its output there."""
    output = {"type": "function_call_output", "call_id": "call_1", "output": "ok"}
    assert responses({"input": [output]})[0].rule == "responses.function_call_output_has_call"
    assert responses({"conversation": {"id": "conv_1"}, "input": [output]}) == []
    assert responses({"input": [{"type": "item_reference", "id": "fc_1"}, output]}) == []
    pending = {"type": "function_call", "call_id": "call_2", "name": "f", "arguments": "{}"}
    violations = responses({"previous_response_id": "resp_1", "input": [output, pending]})
    assert [v.rule for v in violations] == ["responses.function_call_answered"]


def test_anthropic_tool_use_at_the_end_is_unanswered() -> None:
    """A request may not end with a tool call: its result never came."""
    request = anthropic_request()
    request["messages"].pop()
    assert [v.rule for v in anthropic_messages(request)] == ["anthropic.tool_use_answered"]


def test_a_huge_request_is_read_in_one_pass() -> None:
    """Fifty thousand messages, a broken unit at the end: found, and only it (the validators
    keep sets and dicts of ids, never rescan earlier messages)."""
    units = [
        message
        for i in range(10_000)
        for message in (
            {"role": "user", "content": f"问题 {i}"},
            {"role": "assistant", "content": None, "tool_calls": [call(f"call_{i}")]},
            {"role": "tool", "tool_call_id": f"call_{i}", "content": "✅"},
            {"role": "assistant", "content": "好"},
        )
    ]
    units.append({"role": "tool", "tool_call_id": "call_3", "content": "late"})
    violations = chat_completions(units)
    assert [(v.rule, v.where) for v in violations] == [
        ("chat.tool_result_follows_call", f"messages[{len(units) - 1}]")
    ]
    assert chat_template(units[:-1]) == []


# --- never raising, whatever the input ---------------------------------------------------------

TEXTS = [
    "",
    " ",
    "hello",
    "你好，世界",
    "日本語のテキスト",
    "🎉🚀",
    "👩‍👩‍👧‍👦",
    "mixed 中文 and English 😀",
]
texts = st.one_of(
    st.sampled_from(TEXTS),
    st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12),
)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | texts,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(texts, children, max_size=4),
    max_leaves=30,
)
KEYS = [
    "role",
    "content",
    "type",
    "id",
    "call_id",
    "tool_call_id",
    "tool_use_id",
    "tool_calls",
    "function",
    "name",
    "arguments",
    "input",
    "output",
    "text",
    "thinking",
    "signature",
    "data",
    "cache_control",
    "summary",
    "source",
]
VALUES = [
    "user",
    "assistant",
    "system",
    "tool",
    "developer",
    "function",
    "text",
    "tool_use",
    "tool_result",
    "thinking",
    "redacted_thinking",
    "function_call",
    "function_call_output",
    "reasoning",
    "message",
    "item_reference",
    "call_1",
    "toolu_1",
]
# JSON shaped like requests: the keys and values the validators look at, nested anywhere.
request_like = st.recursive(
    st.none() | st.sampled_from(VALUES) | texts | st.integers(),
    lambda children: (
        st.lists(children, max_size=5)
        | st.dictionaries(st.sampled_from(KEYS), children, max_size=6)
    ),
    max_leaves=60,
)


@given(request=st.one_of(json_values, request_like), protocol=st.sampled_from(PROTOCOLS))
def test_the_validators_never_raise(request: Any, protocol: str) -> None:
    """Any JSON value, as the body or as its messages, gives violations, never an exception;
    each violation names a known rule of that protocol."""
    for shaped in (
        request,
        {"messages": request, "input": request, "system": request, "tools": request},
    ):
        for violation in check(protocol, shaped):
            assert RULES[violation.rule].protocol == protocol
            assert isinstance(violation.where, str) and isinstance(violation.message, str)


@given(messages=st.lists(request_like, max_size=8))
def test_malformed_messages_are_reported_under_shape(messages: list[Any]) -> None:
    """A list of anything: every message that is not an object is a shape violation."""
    non_objects = {f"messages[{i}]" for i, m in enumerate(messages) if not isinstance(m, dict)}
    for validator, prefix in ((chat_completions, "chat"), (chat_template, "template")):
        shape = {v.where for v in validator(messages) if v.rule == f"{prefix}.shape"}
        assert non_objects <= shape
    assert non_objects <= {v.where for v in anthropic_messages({"messages": messages})}


# --- Unicode ids and texts ---------------------------------------------------------------------

ids = st.text(
    st.characters(codec="utf-8", exclude_categories=("Cs", "Cc")), min_size=1, max_size=12
)
words = st.one_of(
    st.sampled_from(TEXTS[2:]),
    st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1).filter(str.strip),
)


@given(call_ids=st.lists(ids, min_size=1, max_size=4, unique=True), text=words)
def test_unicode_ids_and_texts_are_accepted(call_ids: list[str], text: str) -> None:
    """Ids and texts in any script (CJK, emoji, RTL) are just strings to every validator."""
    chat = [
        {"role": "user", "content": text},
        {"role": "assistant", "content": None, "tool_calls": [call(i) for i in call_ids]},
        *({"role": "tool", "tool_call_id": i, "content": text} for i in reversed(call_ids)),
        {"role": "assistant", "content": text},
    ]
    assert chat_completions(chat) == []
    assert chat_template(chat) == []
    items_ = [
        {"role": "user", "content": text},
        *(
            {"type": "function_call", "call_id": i, "name": "f", "arguments": "{}"}
            for i in call_ids
        ),
        *({"type": "function_call_output", "call_id": i, "output": text} for i in call_ids),
    ]
    assert responses({"input": items_}) == []
    uses = [{"type": "tool_use", "id": i, "name": "f", "input": {"q": text}} for i in call_ids]
    results = [{"type": "tool_result", "tool_use_id": i, "content": text} for i in call_ids]
    anthropic = [
        {"role": "user", "content": text},
        {"role": "assistant", "content": [{"type": "text", "text": text.strip()}, *uses]},
        {"role": "user", "content": results},
    ]
    assert anthropic_messages({"messages": anthropic}) == []


# --- strict templates agree with ctxwindow.policies.alternate -----------------------------------


@st.composite
def conversations(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Valid chat conversations whose roles need not alternate: a system prefix, then users,
    assistant answers and tool units (parallel calls, results in any order) in any order."""
    body: list[dict[str, Any]] = [
        {"role": role, "content": draw(words)}
        for role in draw(st.lists(st.sampled_from(["system", "developer"]), max_size=2))
    ]
    for unit in range(draw(st.integers(1, 8))):
        kind = draw(st.sampled_from(["user", "assistant", "tools"]))
        if kind != "tools":
            body.append({"role": kind, "content": draw(words)})
            continue
        call_ids = [f"call_{unit}_{i}_调用" for i in range(draw(st.integers(1, 3)))]
        body.append(
            {"role": "assistant", "content": None, "tool_calls": [call(i) for i in call_ids]}
        )
        body += [
            {"role": "tool", "tool_call_id": i, "content": draw(words)}
            for i in draw(st.permutations(call_ids))
        ]
    return body


@given(conversation=conversations(), mode=st.sampled_from(STRICT_MODES))
def test_what_alternate_builds_breaks_no_template_rule(
    conversation: list[dict[str, Any]], mode: str
) -> None:
    """``alternate()``'s output, in both modes, passes the strict-template rules, and is
    still a valid Chat Completions request (merging and bridging keep tool units whole)."""
    built = alternate(conversation, mode)
    assert chat_template(built) == []
    assert chat_completions(built) == []
    assert chat_completions(conversation) == []


role_sequences = st.lists(
    st.sampled_from(["system", "developer", "user", "assistant", "tool", "function"]), max_size=8
)


@given(roles=role_sequences)
def test_chat_template_agrees_with_is_alternating(roles: list[str]) -> None:
    """The template rules and ``is_alternating`` accept exactly the same role sequences."""
    messages_ = [{"role": role, "content": "x"} for role in roles]
    assert (chat_template(messages_) == []) == is_alternating(messages_)


def test_the_docs_list_every_rule_with_its_source() -> None:
    """docs/validate.md has a table row per rule: its name, its sentence, its source."""
    page = (Path(__file__).parent.parent / "docs" / "validate.md").read_text("utf-8")
    rows = {
        line.split(" | ")[0].strip("| `"): line
        for line in page.splitlines()
        if line.startswith("| `")
    }
    for name, rule in RULES.items():
        assert name in rows, f"docs/validate.md has no row for {name}"
        assert rule.text in rows[name] and f"({rule.source})" in rows[name], name


def test_an_empty_input_list_is_no_responses_request() -> None:
    """An empty ``input`` (what a context left with nothing would send) is refused."""
    assert [v.rule for v in responses({"model": "gpt-4.1", "input": []})] == ["responses.shape"]
    assert responses({"model": "gpt-4.1", "input": "hi"}) == []
