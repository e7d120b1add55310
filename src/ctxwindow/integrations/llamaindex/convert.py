"""LlamaIndex's ``ChatMessage`` as the OpenAI chat message ctxwindow stores, and back.

Messages are stored as OpenAI chat messages, as ``llama-index-llms-openai``
writes them (``to_openai_message``, ``from_openai_message``):

- the role; the content as a string (one text block), a list of ``text`` and
  ``image_url`` parts (several blocks, or images: a URL, or a data URL for
  image bytes and files), or none (an assistant turn that only calls tools);
- ``additional_kwargs`` become fields of the message (``tool_calls``,
  ``tool_call_id``, ``name``...), the way LlamaIndex's OpenAI integration does;
- ``ToolCallBlock`` blocks become ``tool_calls``, and the key
  ``"llamaindex_tool_call_blocks"`` says they were blocks, so that they come
  back as blocks (after the message's other blocks; arguments that are a JSON
  object come back as a dict);
- ``CachePoint`` and ``ThinkingBlock`` blocks are not stored (neither is sent
  back in the OpenAI chat format); audio, video and document blocks raise
  ``ValueError``. The roles ``chatbot`` and ``model`` are stored as
  ``assistant``.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable, Mapping
from typing import Any, cast

from llama_index.core.base.llms.types import (
    CachePoint,
    ChatMessage,
    ImageBlock,
    MessageRole,
    TextBlock,
    ThinkingBlock,
    ToolCallBlock,
)

from ctxwindow.messages import Message

TOOL_CALL_BLOCKS = "llamaindex_tool_call_blocks"
"""The message key saying its ``tool_calls`` were ``ToolCallBlock`` blocks: ``"blocks"``, or
``"both"`` when ``additional_kwargs["tool_calls"]`` held them too."""

_AS_ASSISTANT = ("chatbot", "model")  # other providers' names for the assistant
_SKIPPED = (CachePoint, ThinkingBlock)  # hints and reasoning, not sent back as chat content
_RESERVED = ("role", "content", TOOL_CALL_BLOCKS)


def to_openai_message(message: ChatMessage) -> Message:
    """The OpenAI chat message for ``message`` (see the module docstring); ``ValueError`` for
    blocks that format cannot hold."""
    role = message.role.value
    role = "assistant" if role in _AS_ASSISTANT else role
    extra = _plain_kwargs(message)
    parts: list[dict[str, Any]] = []
    calls: list[dict[str, Any]] = []
    for block in message.blocks:
        if isinstance(block, ToolCallBlock):
            calls.append(_call_of(block))
        elif isinstance(block, TextBlock):
            parts.append({"type": "text", "text": block.text})
        elif isinstance(block, ImageBlock):
            parts.append(_image_part(block))
        elif not isinstance(block, _SKIPPED):
            raise ValueError(
                f"a {type(block).__name__} cannot be stored: ctxwindow keeps OpenAI chat "
                "messages, whose content is text and image_url parts"
            )
    out: Message = {**extra, "role": role, "content": _content(role, parts)}
    if calls:
        out[TOOL_CALL_BLOCKS] = "both" if "tool_calls" in extra else "blocks"
        out.setdefault("tool_calls", calls)
    return out


def from_openai_message(message: Mapping[str, Any]) -> ChatMessage:
    """The ``ChatMessage`` for an OpenAI chat message (the inverse of ``to_openai_message``)."""
    extra = {k: copy.deepcopy(v) for k, v in message.items() if k not in _RESERVED}
    blocks: list[Any] = _blocks(message.get("content"))
    form = message.get(TOOL_CALL_BLOCKS)
    if form:
        blocks += [_block_of(call) for call in message.get("tool_calls") or ()]
        if form == "blocks":
            extra.pop("tool_calls", None)
    return ChatMessage(role=MessageRole(message["role"]), blocks=blocks, additional_kwargs=extra)


def _plain_kwargs(message: ChatMessage) -> dict[str, Any]:
    """``additional_kwargs`` as JSON values (SDK objects such as OpenAI's tool calls dumped)."""
    if not message.additional_kwargs:
        return {}
    dumped = message.model_dump(mode="json", include={"additional_kwargs"})
    kwargs = cast(dict[str, Any], dumped["additional_kwargs"])
    clash = [key for key in _RESERVED if key in kwargs]
    if clash:
        raise ValueError(f"additional_kwargs may not hold {clash}: they are message fields")
    return kwargs


def _content(role: str, parts: list[dict[str, Any]]) -> str | list[dict[str, Any]] | None:
    if len(parts) == 1 and parts[0]["type"] == "text":
        return cast(str, parts[0]["text"])
    if not parts and role == "assistant":
        return None  # a turn that only calls tools
    return parts


def _image_part(block: ImageBlock) -> dict[str, Any]:
    url = str(block.url) if block.url is not None else block.inline_url()
    image: dict[str, Any] = {"url": url}
    if block.detail is not None:
        image["detail"] = block.detail
    return {"type": "image_url", "image_url": image}


def _call_of(block: ToolCallBlock) -> dict[str, Any]:
    arguments = block.tool_kwargs
    if not isinstance(arguments, str):
        arguments = json.dumps(arguments, ensure_ascii=False, default=str)
    function = {"name": block.tool_name, "arguments": arguments}
    return {"id": block.tool_call_id or "", "type": "function", "function": function}


def _blocks(content: Any) -> list[Any]:
    if content is None:
        return []
    if isinstance(content, str):
        return [TextBlock(text=content)]
    return [_block_of_part(part) for part in content]


def _block_of_part(part: Mapping[str, Any]) -> TextBlock | ImageBlock:
    kind = part["type"]
    if kind in ("text", "refusal"):
        return TextBlock(text=part[kind])
    image = part["image_url"]
    url, detail = image["url"], image.get("detail")
    if url.startswith("data:") and ";base64," in url:
        mimetype, _, data = url[len("data:") :].partition(";base64,")
        return ImageBlock(image=data.encode(), image_mimetype=mimetype or None, detail=detail)
    return ImageBlock(url=url, detail=detail)


def _block_of(call: Mapping[str, Any]) -> ToolCallBlock:
    function = call.get("function") or {}
    arguments = function.get("arguments", "")
    try:
        parsed = json.loads(arguments)
    except (TypeError, ValueError):
        parsed = None
    return ToolCallBlock(
        tool_call_id=call.get("id") or None,
        tool_name=function.get("name", ""),
        tool_kwargs=parsed if isinstance(parsed, dict) else arguments,
    )


def from_openai_messages(context_messages: Iterable[Mapping[str, Any]]) -> list[ChatMessage]:
    """The ``ChatMessage`` of each OpenAI chat message (a built context's, or a history's)."""
    return [from_openai_message(m) for m in context_messages]
