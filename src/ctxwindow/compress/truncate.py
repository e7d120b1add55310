"""Head-and-tail truncation with the cut marked in the text."""

from __future__ import annotations

from collections.abc import Sequence

from ctxwindow.compress.base import content_targets, has_text, total_tokens, with_content
from ctxwindow.errors import CompressionError
from ctxwindow.messages import Entry
from ctxwindow.tokens.chat import ChatTokenizer
from ctxwindow.tokens.truncate import truncate_text


class Truncate:
    """Keep the head and tail of each text, with a marker saying what was cut.

    The marker names the characters and tokens removed, e.g.
    ``[… 1200 chars (300 tokens) cut by ctxwindow …]``. Given several entries,
    the target is spread over the string contents in proportion to their
    sizes; other entries (tool-call-only turns, image parts) are left alone.
    ``head_share`` is the part of what is kept that comes from the head.
    """

    name = "truncate"

    def __init__(self, tokenizer: ChatTokenizer, head_share: float = 0.5) -> None:
        if not 0.0 <= head_share <= 1.0:
            raise CompressionError(f"head_share must be within [0, 1], got {head_share}")
        self.tokenizer = tokenizer
        self.head_share = head_share

    def __call__(self, entries: Sequence[Entry], target_tokens: int) -> list[Entry]:
        if total_tokens(entries) <= target_tokens:
            return list(entries)
        eligible = [has_text(entry) for entry in entries]
        rooms = content_targets(entries, target_tokens, self.tokenizer, eligible)
        return [
            self._cut(entry, room) if ok else entry
            for entry, room, ok in zip(entries, rooms, eligible, strict=True)
        ]

    def _cut(self, entry: Entry, content_tokens: int) -> Entry:
        text = entry.message["content"]
        cut = truncate_text(text, content_tokens, self.tokenizer.counter, self.head_share)
        return with_content(entry, cut, self.tokenizer, self.name)
