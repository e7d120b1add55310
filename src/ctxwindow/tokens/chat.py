"""Chat framing: what a request costs beyond the bare text of its messages.

Following OpenAI's token-counting guide, every message costs
``per_message`` (3) tokens of framing plus the tokens of its fields, a
``name`` costs ``per_name`` (1) more, and every request is primed with
``reply_priming`` (3) tokens for the reply. Tool definitions are counted with
the guide's published formula. Fields counted: ``role``, ``content`` (text,
refusal and image parts), ``name``, ``tool_call_id``, and for each of an
assistant's ``tool_calls`` the function name and JSON arguments plus
``TOOL_CALL_OVERHEAD``; other keys (ids, timestamps) are not sent as text and
are not counted.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ctxwindow._moved import warn_moved
from ctxwindow.tokens.counter import CachedCounter, TokenCounter
from ctxwindow.tokens.images import image_tokens
from ctxwindow.tokens.models import ImagePricing, ToolFraming

if TYPE_CHECKING:  # their old import path (see ``__getattr__``)
    from ctxwindow.tokens.defaults import chat_tokenizer as chat_tokenizer
    from ctxwindow.tokens.defaults import count_tokens as count_tokens

# OpenAI does not publish how tool calls are rendered; measured request sizes
# sit within a few tokens of name + arguments + 3 per call.
TOOL_CALL_OVERHEAD = 3
_TEXT_FIELDS = ("role", "name", "tool_call_id")
_MOVED = ("chat_tokenizer", "count_tokens")  # to ctxwindow.tokens.defaults


@dataclass(frozen=True)
class ChatFraming:
    """The per-message, per-name and reply-priming costs of a chat format."""

    per_message: int = 3
    per_name: int = 1
    reply_priming: int = 3
    tools: ToolFraming = field(default_factory=lambda: ToolFraming(func_init=7))
    images: ImagePricing = field(default_factory=ImagePricing)


class ChatTokenizer:
    """Counts chat requests for one model: a ``TokenCounter`` plus a ``ChatFraming``."""

    def __init__(self, counter: TokenCounter, framing: ChatFraming, model: str = "") -> None:
        self.counter = counter if isinstance(counter, CachedCounter) else CachedCounter(counter)
        self.framing = framing
        self.model = model

    @property
    def exact(self) -> bool:
        return self.counter.exact

    def text(self, text: str) -> int:
        """Tokens of a bare text, no framing."""
        return self.counter.count(text)

    def message_tokens(self, message: Mapping[str, Any]) -> int:
        """Tokens one message adds to a request, framing included."""
        framing = self.framing
        n = framing.per_message
        for key in _TEXT_FIELDS:
            value = message.get(key)
            if isinstance(value, str):
                n += self.counter.count(value)
        if isinstance(message.get("name"), str):
            n += framing.per_name
        n += self.content_tokens(message.get("content"))
        for call in message.get("tool_calls") or ():
            n += self._call_tokens(call.get("function", {}))
        if isinstance(message.get("function_call"), Mapping):
            n += self._call_tokens(message["function_call"])
        for block in message.get("thinking") or ():  # Anthropic's, kept for a tool loop
            n += self.counter.count(block.get("thinking") or block.get("data") or "")
        return n

    def content_tokens(self, content: Any) -> int:
        if content is None:
            return 0
        if isinstance(content, str):
            return self.counter.count(content)
        n = 0
        for part in content:
            kind = part.get("type")
            if kind in ("text", "refusal"):
                n += self.counter.count(part[kind])
            elif kind == "image_url":
                n += image_tokens(part, self.framing.images)
        return n

    def _call_tokens(self, function: Mapping[str, Any]) -> int:
        name = function.get("name") or ""
        arguments = function.get("arguments") or ""
        return TOOL_CALL_OVERHEAD + self.counter.count(name) + self.counter.count(arguments)

    def tools_tokens(self, tools: Sequence[Mapping[str, Any]] | None) -> int:
        """Tokens of tool (or legacy function) definitions, by OpenAI's published formula."""
        if not tools:
            return 0
        t = self.framing.tools
        n = t.func_end
        for tool in tools:
            function = tool.get("function", tool)
            n += t.func_init
            description = _strip_period(function.get("description") or "")
            n += self.counter.count(f"{function.get('name', '')}:{description}")
            properties = (function.get("parameters") or {}).get("properties") or {}
            if properties:
                n += t.prop_init
            for key, schema in properties.items():
                n += t.prop_key
                for item in schema.get("enum") or ():
                    n += t.enum_item + self.counter.count(str(item))
                if schema.get("enum"):
                    n += t.enum_init
                kind = schema.get("type", "")
                kind = kind if isinstance(kind, str) else "|".join(map(str, kind))
                line = f"{key}:{kind}:{_strip_period(schema.get('description') or '')}"
                n += self.counter.count(line)
        return n

    def count(
        self,
        messages: Iterable[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]] | None = None,
    ) -> int:
        """Prompt tokens of a whole request: messages, reply priming and tools."""
        total = self.framing.reply_priming + self.tools_tokens(tools)
        return total + sum(self.message_tokens(m) for m in messages)


def _strip_period(text: str) -> str:
    return text[:-1] if text.endswith(".") else text


def __getattr__(name: str) -> Any:
    """``chat_tokenizer`` and ``count_tokens`` live in :mod:`ctxwindow.tokens.defaults`, above
    the registry they ask; importing them from here still works, with a ``DeprecationWarning``."""
    if name in _MOVED:
        warn_moved(__name__, name, "ctxwindow.tokens")
        from ctxwindow.tokens import defaults  # only for the old import path

        return getattr(defaults, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
