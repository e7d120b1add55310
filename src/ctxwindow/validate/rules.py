"""The request rules of each wire format: named, stated in one sentence, cited.

A rule is what a provider documents, or enforces with a 400 whose text is
quoted beside it in docs/validate.md. Each validator reports a broken rule as
a ``Violation`` naming the rule, the place in the request and the ids
involved. ``RULES`` is the catalogue; ``tests/test_validate.py`` holds every
name in it to a request that breaks it.

Some rules are stricter than one provider is today, on purpose: Anthropic's
API merges consecutive turns of one role and no longer insists on a leading
user turn, but Amazon Bedrock still refuses both (as the API did before), and
other hosts and proxies of the format may lag it, so a request that passes
here passes wherever the format is spoken.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from ctxwindow.errors import InvalidRequestError as InvalidRequestError  # raised by ensure

PROTOCOLS = ("chat_completions", "responses", "anthropic_messages", "chat_template")


@dataclass(frozen=True)
class Violation:
    """One broken rule: which, where in the request, and what is wrong there.

    ``where`` is a JSON-path-like place (``messages[3].tool_calls[0]``,
    ``input[2]``, ``system[1]``); ``message`` is one line naming the ids involved.
    """

    rule: str
    where: str
    message: str

    def __str__(self) -> str:
        return f"{self.where}: {self.message} ({self.rule})"


@dataclass(frozen=True)
class Rule:
    """A request rule: its name (a key of ``RULES``), its protocol, one sentence, its source."""

    name: str
    protocol: str
    text: str
    source: str


_OPENAI = "https://platform.openai.com/docs"
CHAT = f"{_OPENAI}/api-reference/chat/create"
FUNCTION_CALLING = f"{_OPENAI}/guides/function-calling"
RESPONSES = f"{_OPENAI}/api-reference/responses/create"
REASONING = f"{_OPENAI}/guides/reasoning"
_ANTHROPIC = "https://docs.anthropic.com/en"
MESSAGES = f"{_ANTHROPIC}/api/messages"
TOOL_USE = f"{_ANTHROPIC}/docs/build-with-claude/tool-use"
THINKING = f"{_ANTHROPIC}/docs/build-with-claude/extended-thinking"
CACHING = f"{_ANTHROPIC}/docs/build-with-claude/prompt-caching"
TEMPLATES = "https://huggingface.co/docs/transformers/chat_templating"

_TABLE: tuple[tuple[str, str, str], ...] = (
    # (name, source, the rule in one sentence); the protocol is the name's prefix.
    (
        "chat.shape",
        CHAT,
        "The body has a non-empty `messages` list of objects, each with a string `role`, "
        "string or list `content`, well-formed `tool_calls` and a string `tool_call_id` "
        "on tool messages.",
    ),
    (
        "chat.roles",
        CHAT,
        "A message's role is system, developer, user, assistant, tool or function.",
    ),
    (
        "chat.tool_result_follows_call",
        FUNCTION_CALLING,
        "A tool message answers an id of the nearest preceding assistant message's "
        "`tool_calls`, inside the run of tool messages right after it.",
    ),
    (
        "chat.tool_call_answered",
        FUNCTION_CALLING,
        "Every id of an assistant message's `tool_calls` is answered by a tool message "
        "in the run of tool messages right after it.",
    ),
    (
        "chat.tool_result_once",
        FUNCTION_CALLING,
        "A tool call is answered by one tool message, not several.",
    ),
    (
        "chat.tool_call_ids_unique",
        FUNCTION_CALLING,
        "The tool calls of one assistant message have distinct ids.",
    ),
    (
        "chat.assistant_not_empty",
        CHAT,
        "An assistant message without `tool_calls` has non-empty `content` "
        "(or a `refusal`, `audio` or `function_call`).",
    ),
    (
        "responses.shape",
        RESPONSES,
        "`input` is a string or a list of items, each an object whose `type` and fields "
        "are well formed, with string `call_id`s.",
    ),
    (
        "responses.function_call_output_has_call",
        FUNCTION_CALLING,
        "A `function_call_output` answers the `call_id` of a `function_call` earlier in "
        "`input` (unless the call lives in the state named by `previous_response_id` "
        "or `conversation`).",
    ),
    (
        "responses.function_call_answered",
        FUNCTION_CALLING,
        "Every `function_call` in `input` is answered by a `function_call_output` with "
        "its `call_id` later in `input`.",
    ),
    (
        "responses.call_ids_unique",
        FUNCTION_CALLING,
        "The function calls in `input` have distinct `call_id`s, and each is answered once.",
    ),
    (
        "responses.reasoning_precedes_item",
        REASONING,
        "A `reasoning` item is directly followed by the output item it belongs to (a function "
        "or tool call, or an assistant message) with that item's `id`, as the API returned it.",
    ),
    (
        "responses.state_exclusive",
        RESPONSES,
        "`previous_response_id` and `conversation` are not both given.",
    ),
    (
        "anthropic.shape",
        MESSAGES,
        "The body has a `messages` list of objects with a `role` and string or block-list "
        "`content`; blocks have a `type` and their fields; `system` is a string or a list of "
        "text blocks.",
    ),
    (
        "anthropic.roles",
        MESSAGES,
        "A message's role is user or assistant; the system prompt goes in the top-level `system`.",
    ),
    ("anthropic.first_user", MESSAGES, "The first message is the user's."),
    (
        "anthropic.alternation",
        MESSAGES,
        "User and assistant messages alternate: no two consecutive messages of one role.",
    ),
    (
        "anthropic.content_not_empty",
        MESSAGES,
        "Every message has non-empty content, except an optional final assistant message.",
    ),
    (
        "anthropic.text_not_blank",
        MESSAGES,
        "Text blocks (in messages and `system`) contain non-whitespace text, and a final "
        "assistant message does not end with whitespace.",
    ),
    (
        "anthropic.tool_use_answered",
        TOOL_USE,
        "Every `tool_use` is answered by a `tool_result` with its id in the very next "
        "message, a user message.",
    ),
    (
        "anthropic.tool_result_first",
        TOOL_USE,
        "In a user message, `tool_result` blocks come before any other block.",
    ),
    (
        "anthropic.tool_result_has_use",
        TOOL_USE,
        "A `tool_result` answers a `tool_use` of the message right before it, once.",
    ),
    ("anthropic.tool_use_ids_unique", TOOL_USE, "`tool_use` ids are unique across the request."),
    (
        "anthropic.thinking_first",
        THINKING,
        "An assistant message that has `thinking` or `redacted_thinking` blocks starts with one.",
    ),
    (
        "anthropic.thinking_not_last",
        THINKING,
        "An assistant message does not end with a thinking block.",
    ),
    (
        "anthropic.thinking_signed",
        THINKING,
        "A `thinking` block carries its `signature` and a `redacted_thinking` block its "
        "`data`, as the API returned them.",
    ),
    (
        "anthropic.thinking_continued",
        THINKING,
        "With `thinking` enabled, the assistant turn a request continues (the final assistant "
        "message, or the one whose `tool_use` the final message answers) starts with its "
        "thinking; with it disabled, a final assistant message carries none.",
    ),
    (
        "anthropic.cache_control_limit",
        CACHING,
        "At most 4 blocks carry `cache_control`, counted across `tools`, `system` and `messages`.",
    ),
    (
        "template.shape",
        TEMPLATES,
        "The conversation is a list of messages, each an object with a known string role.",
    ),
    (
        "template.system_first",
        TEMPLATES,
        "System and developer messages come first, before any other message.",
    ),
    (
        "template.alternation",
        TEMPLATES,
        "After the system messages, roles alternate starting with the user's: the assistant "
        "side is an assistant message and the tool results that follow it, and two user or "
        "two assistant messages are never adjacent.",
    ),
)

_PREFIXES = {
    "chat": "chat_completions",
    "responses": "responses",
    "anthropic": "anthropic_messages",
    "template": "chat_template",
}

RULES: Mapping[str, Rule] = MappingProxyType(
    {name: Rule(name, _PREFIXES[name.split(".")[0]], text, source) for name, source, text in _TABLE}
)
"""Every rule by name, in the order docs/validate.md lists them."""
