"""What a summarizing model is sent, and the form of the summaries it returns.

A merged summary is a ``user`` message whose content starts with a heading
in the language of the text: ``Summary of earlier conversation:``, or
``此前对话摘要：`` when most of its letters are CJK (``これまでの会話の要約：``
when it has kana), then a newline and the summary.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Sequence
from typing import Any, overload

from ctxwindow.compress.sentences import script_counts
from ctxwindow.messages import Entry, Message

SYSTEM_PROMPT = (
    "You compress conversation history for an assistant that will continue it. "
    "Write a concise summary of the text the user sends. Keep every name, number, id, "
    "date and decision, and any open question or task. Write in the language of the text. "
    "Use at most {max_tokens} tokens. Reply with the summary only."
)
HEADINGS = {
    "en": "Summary of earlier conversation:",
    "zh": "此前对话摘要：",
    "ja": "これまでの会話の要約：",
}


def heading_for(text: str) -> str:
    """The summary heading in the language of ``text`` (digits are no language)."""
    return heading_of(*script_counts(text))


def heading_of(letters: int, cjk: int, kana: bool) -> str:
    """The heading of a text of these ``sentences.script_counts``: CJK if at least
    half of its letters are, Japanese if it has kana."""
    if not letters or cjk / letters < 0.5:
        return HEADINGS["en"]
    return HEADINGS["ja"] if kana else HEADINGS["zh"]


def strip_heading(text: str) -> str:
    """``text`` without a leading summary heading."""
    for heading in HEADINGS.values():
        if text.startswith(heading):
            return text[len(heading) :].lstrip()
    return text


def summary_message(heading: str, text: str) -> Message:
    return {"role": "user", "content": f"{heading}\n{text}"}


def prompt_messages(text: str, max_tokens: int) -> list[Message]:
    """The chat request asking for a summary of ``text`` within ``max_tokens``."""
    return [
        {"role": "system", "content": SYSTEM_PROMPT.format(max_tokens=max_tokens)},
        {"role": "user", "content": text},
    ]


def content_text(content: Any) -> str:
    """The text of a message content: a string, or its text parts (images as ``[image]``)."""
    if isinstance(content, str):
        return content
    if not content:
        return ""
    return "\n".join(
        part.get("text")
        or part.get("refusal")
        or ("[image]" if part.get("type") == "image_url" else "")
        for part in content
    )


def render(entry: Entry) -> str:
    """One entry as a transcript line: ``role: text`` plus its tool calls."""
    message = entry.message
    if entry.kind == "summary":
        return f"earlier summary: {strip_heading(content_text(message.get('content')))}"
    label = message["role"] + (
        f" ({message['name']})" if isinstance(message.get("name"), str) else ""
    )
    lines = [f"{label}: {content_text(message.get('content'))}".rstrip()]
    for call in message.get("tool_calls") or ():
        function = call.get("function", {})
        lines.append(f"  → calls {function.get('name')}({function.get('arguments', '')})")
    return "\n".join(lines)


def transcript(entries: Sequence[Entry]) -> str:
    return "\n\n".join(render(entry) for entry in entries)


def summarized_ids(entries: Sequence[Entry]) -> SummarizedIds:
    """The ids of the original entries behind ``entries`` (a summary stands for its sources).

    A rolling summary comes first and stands for every id folded so far: its
    ids are linked to, not copied, so a fold costs what it adds.
    """
    before: SummarizedIds | None = None
    ids: list[str] = []
    for entry in entries:
        inner = entry.metadata.get("summarized_ids") if entry.kind == "summary" else None
        if isinstance(inner, SummarizedIds) and before is None and not ids:
            before = inner
        elif isinstance(inner, Sequence) and not isinstance(inner, str):
            ids.extend(inner)
        else:
            ids.append(entry.id)
    return SummarizedIds(before, list(dict.fromkeys(ids)))


class SummarizedIds(Sequence[str]):
    """The ids a summary stands for, in order: an earlier summary's (linked), then new ones.

    >>> first = SummarizedIds(None, ["a", "b"])
    >>> SummarizedIds(first, ["c"]) == ["a", "b", "c"], len(SummarizedIds(first, ["c"]))
    (True, 3)
    """

    __slots__ = ("_before", "_flat", "_ids", "_len")

    def __init__(self, before: SummarizedIds | None, ids: list[str]) -> None:
        self._before, self._ids = before, ids
        self._len = len(ids) + (len(before) if before is not None else 0)
        self._flat: list[str] | None = None

    def _all(self) -> list[str]:
        if self._flat is None:
            links: list[list[str]] = []
            link: SummarizedIds | None = self
            while link is not None:  # walked, not recursed: a long session has many links
                if link._flat is not None:
                    links.append(link._flat)
                    break
                links.append(link._ids)
                link = link._before
            self._flat = [i for part in reversed(links) for i in part]
        return self._flat

    def __len__(self) -> int:
        return self._len

    @overload
    def __getitem__(self, index: int) -> str: ...

    @overload
    def __getitem__(self, index: slice) -> list[str]: ...

    def __getitem__(self, index: int | slice) -> str | list[str]:
        return self._all()[index]

    def __iter__(self) -> Iterator[str]:
        return iter(self._all())

    def __eq__(self, other: object) -> bool:
        return list(self) == list(other) if isinstance(other, Sequence) else NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return repr(self._all())


def digest(*parts: Any) -> str:
    """A blake2b hex digest of JSON-serialisable ``parts`` (stable across processes)."""
    data = json.dumps(parts, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.blake2b(data.encode(), digest_size=16).hexdigest()
