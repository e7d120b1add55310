"""The one compressor signature and the helpers every compressor shares.

A compressor takes entries and a target (the wanted total of the returned
entries' ``tokens``) and returns entries. Entries it changes are new
``Entry`` objects (the input is never mutated: the store keeps the
originals); entries it leaves alone are returned as the same objects.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from ctxwindow.messages import Entry, Message, stored_tokens
from ctxwindow.tokens.chat import ChatTokenizer


@runtime_checkable
class Compressor(Protocol):
    """Entries and a target token count in, entries out (config in ``__init__``)."""

    name: str

    def __call__(self, entries: Sequence[Entry], target_tokens: int) -> list[Entry]: ...


def total_tokens(entries: Sequence[Entry]) -> int:
    """The sum of the entries' ``tokens`` (what a target is compared with)."""
    return sum(entry.tokens for entry in entries)


def has_text(entry: Entry) -> bool:
    """True when the entry's content is a string a compressor may rewrite."""
    return isinstance(entry.message.get("content"), str)


def framing_tokens(tokenizer: ChatTokenizer, message: Message) -> int:
    """Tokens of ``message`` without its content: role, name, tool calls, framing."""
    return tokenizer.message_tokens(dict(message, content=""))


def compressed(entry: Entry, message: Message, tokenizer: ChatTokenizer, by: str) -> Entry:
    """A new entry carrying ``message``, recounted, and marked as compressed by ``by``
    (``from_tokens``: the stored message's tokens, however often it was compressed)."""
    tokens = tokenizer.message_tokens(message)
    record = {"by": by, "from_tokens": stored_tokens(entry), "to_tokens": tokens}
    metadata: dict[str, Any] = dict(entry.metadata, compressed=record)
    return dataclasses.replace(entry, message=message, tokens=tokens, metadata=metadata)


def with_content(entry: Entry, content: str, tokenizer: ChatTokenizer, by: str) -> Entry:
    """The entry with its text content replaced, or the entry itself if that saves nothing.

    Only ``content`` changes: ``tool_calls``, ``tool_call_id`` and ``name`` stay.
    """
    new = compressed(entry, dict(entry.message, content=content), tokenizer, by)
    return new if new.tokens < entry.tokens else entry


def allot(sizes: Sequence[int], room: int) -> list[int]:
    """Share ``room`` tokens among texts in proportion to their ``sizes`` (floors)."""
    whole = sum(sizes)
    if whole <= room:
        return list(sizes)
    if room <= 0:
        return [0] * len(sizes)
    return [size * room // whole for size in sizes]


def content_targets(
    entries: Sequence[Entry], target_tokens: int, tokenizer: ChatTokenizer, eligible: list[bool]
) -> list[int]:
    """Per-entry token targets for the content of the ``eligible`` entries.

    What cannot shrink (ineligible entries, the framing of eligible ones) is
    taken off the target first; the rest is spread in proportion to the
    content sizes. Ineligible entries get ``-1``.
    """
    fixed = [
        framing_tokens(tokenizer, e.message) if ok else e.tokens
        for e, ok in zip(entries, eligible, strict=True)
    ]
    sizes = [e.tokens - f for e, f, ok in zip(entries, fixed, eligible, strict=True) if ok]
    shares = iter(allot(sizes, target_tokens - sum(fixed)))
    return [next(shares) if ok else -1 for ok in eligible]
