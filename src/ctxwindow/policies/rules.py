"""Priorities, kinds and the rules that assign them (used by ``PriorityWindow``).

A rule is any callable ``rule(entry) -> Priority | None``; the first rule
that returns a priority wins. ``Match`` builds the common ones from a role, a
kind, a regular expression over the text, or a metadata key.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import IntEnum
from types import MappingProxyType
from typing import Any

from ctxwindow.messages import SYSTEM_ROLES, Entry, Message


class Priority(IntEnum):
    """How much an entry is worth keeping; the lowest goes first."""

    LOW = 0
    MEDIUM = 1
    HIGH = 2
    CRITICAL = 3  # never evicted: system prompt, pinned entries, the rolling summary


KINDS = ("chat", "document", "tool", "recalled", "summary")
CATEGORIES = ("system", "pinned", *KINDS)  # what ``caps`` can cap (see ``category_of``)

Rule = Callable[[Entry], "Priority | None"]


def text_of(message: Message) -> str:
    """The plain text of a message (text parts joined)."""
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(p.get("text", "") for p in content if p.get("type") == "text")
    return ""


@dataclass(frozen=True)
class Match:
    """A rule: ``priority`` when every given condition holds.

    >>> rule = Match(Priority.HIGH, role="user", pattern=r"(?i)\\bdeadline\\b")
    >>> rule(Entry({"role": "user", "content": "The deadline is Friday"}, 7, 0))
    <Priority.HIGH: 2>
    """

    priority: Priority
    role: str | Sequence[str] | None = None
    kind: str | Sequence[str] | None = None
    pattern: str | None = None
    metadata: str | None = None  # a metadata key whose value must be truthy

    def __post_init__(self) -> None:
        # Rules run on every add: normalize the conditions once.
        roles = None if self.role is None else _as_tuple(self.role)
        kinds = None if self.kind is None else _as_tuple(self.kind)
        regex = None if self.pattern is None else _compiled(self.pattern)
        object.__setattr__(self, "_conditions", (roles, kinds, regex))

    def __call__(self, entry: Entry) -> Priority | None:
        roles, kinds, regex = self._conditions  # type: ignore[attr-defined]
        message = entry.message
        if roles is not None and message["role"] not in roles:
            return None
        if kinds is not None and entry.kind not in kinds:
            return None
        if self.metadata is not None and not entry.metadata.get(self.metadata):
            return None
        if regex is not None and not regex.search(text_of(message)):
            return None
        return self.priority


def _as_tuple(value: str | Sequence[str]) -> tuple[str, ...]:
    return (value,) if isinstance(value, str) else tuple(value)


_patterns: dict[str, re.Pattern[str]] = {}


def _compiled(pattern: str) -> re.Pattern[str]:
    if pattern not in _patterns:
        _patterns[pattern] = re.compile(pattern)
    return _patterns[pattern]


@dataclass(frozen=True)
class Keywords:
    """A rule: ``priority`` when the text contains one of ``words`` (case-folded).

    Latin words must stand as whole words; CJK words match anywhere. Much
    faster than a case-insensitive regular expression over long texts.
    """

    priority: Priority
    words: Sequence[str]
    role: str | Sequence[str] | None = None

    def __call__(self, entry: Entry) -> Priority | None:
        if self.role is not None and entry.message["role"] not in _as_tuple(self.role):
            return None
        text = text_of(entry.message).casefold()
        return self.priority if any(_has_word(text, w) for w in self.words) else None


def _has_word(text: str, word: str) -> bool:
    start = text.find(word)
    while start != -1:
        end = start + len(word)
        before = text[start - 1] if start else " "
        after = text[end] if end < len(text) else " "
        if not word.isascii() or not (before.isalnum() or after.isalnum()):
            return True
        start = text.find(word, start + 1)
    return False


# Words by which a user marks a turn as one to keep.
IMPORTANT = (
    "remember",
    "important",
    "don't forget",
    "do not forget",
    "note that",
    "记住",
    "重点",
    "总结",
    "重要",
    "覚えて",
    "忘れないで",
)
# A whole message that is only a greeting or an acknowledgement.
SMALL_TALK = (
    r"(?i)^\s*(hi|hello|hey|thanks|thank you|thx|ok|okay|sure|great|cool|got it|bye|"
    r"good (morning|night|evening)|你好|您好|谢谢|多谢|好的|嗯|收到|再见|"
    r"こんにちは|ありがとう(ございます)?|はい|了解)[\s!！.。,，~～😀🙂👍🙏]*$"
)

DEFAULT_RULES: tuple[Rule, ...] = (
    Match(Priority.CRITICAL, role=SYSTEM_ROLES),
    Match(Priority.CRITICAL, kind="summary"),
    Match(Priority.HIGH, metadata="important"),
    Match(Priority.LOW, kind="recalled"),
    Match(Priority.LOW, role=("user", "assistant"), pattern=SMALL_TALK),
    Keywords(Priority.HIGH, IMPORTANT, role="user"),
    Match(Priority.MEDIUM),
)
"""System CRITICAL; marked important HIGH; recalled and small talk LOW; the
user's "remember"/"important"/"记住"/"重点"/"总结" turns HIGH; the rest MEDIUM.
The latest user turn is raised to HIGH by the window itself."""


def assign(entry: Entry, rules: Sequence[Rule]) -> Priority:
    """The priority of the first rule that matches (MEDIUM if none does)."""
    for rule in rules:
        priority = rule(entry)
        if priority is not None:
            return priority if type(priority) is Priority else Priority(priority)
    return Priority.MEDIUM


def priority_of(entry: Entry, rules: Sequence[Rule], given: Any = None) -> int:
    """The priority ``given`` (a ``Priority`` or its int), else that of the first rule to match."""
    return int(Priority(given)) if given is not None else int(assign(entry, rules))


def is_small_talk(entry: Entry) -> bool:
    return entry.message["role"] in ("user", "assistant") and bool(
        _compiled(SMALL_TALK).search(text_of(entry.message))
    )


def infer_kind(message: Message, tokens: int, given: str | None, document_tokens: int) -> str:
    """The kind of a new entry: as given, else tool/document/chat from the message."""
    if given is not None:
        if given not in KINDS:
            raise ValueError(f"unknown kind {given!r}; kinds are {KINDS}")
        return given
    if message["role"] == "tool" or message.get("tool_calls"):
        return "tool"
    if message["role"] == "user" and tokens >= document_tokens:
        return "document"
    return "chat"


def check_rules(rules: Sequence[Any]) -> tuple[Rule, ...]:
    if not all(callable(rule) for rule in rules):
        raise TypeError("rules: every rule must be callable: rule(entry) -> Priority | None")
    return tuple(rules)


@dataclass(frozen=True)
class Keeping:
    """What a ``PriorityWindow`` keeps: the rules that value entries, the caps, the reserve.

    - ``rules``: first match wins (``DEFAULT_RULES``);
    - ``caps``: tokens a budget category may hold, ``{"document": 3000}``
      (categories: ``CATEGORIES``);
    - ``reserve_recent``: tokens of the newest units evicted last (None: a
      quarter of the budget, at most 2,000);
    - ``recent_messages``: the units holding the newest this many messages
      are evicted last too, whatever their tokens; and before any of those
      goes, each above the compression threshold is compressed in place to
      half the threshold, so the newest turns stay, smaller;
    - ``dedupe_small_talk``: keep only the latest greeting or acknowledgement;
    - ``document_tokens``: a user message this long is a ``document``.

    Checked once, here: a bad value raises ``ValueError`` naming its field.

    >>> Keeping(caps={"document": 3000}, reserve_recent=0).caps["document"]
    3000
    >>> Keeping(reserve_recent=-1)
    Traceback (most recent call last):
    ValueError: reserve_recent must be a non-negative integer, got -1
    """

    rules: Sequence[Rule] = DEFAULT_RULES
    caps: Mapping[str, int] | None = None
    reserve_recent: int | None = None
    recent_messages: int = 0
    dedupe_small_talk: bool = True
    document_tokens: int = 1000

    def __post_init__(self) -> None:
        object.__setattr__(self, "rules", check_rules(self.rules))
        object.__setattr__(self, "caps", MappingProxyType(_checked_caps(self.caps or {})))
        if self.reserve_recent is not None:
            check_count("reserve_recent", self.reserve_recent, least=0)
        check_count("recent_messages", self.recent_messages, least=0)
        if not isinstance(self.dedupe_small_talk, bool):
            raise ValueError(
                f"dedupe_small_talk must be True or False, got {self.dedupe_small_talk!r}"
            )
        check_count("document_tokens", self.document_tokens, least=1)


def _checked_caps(caps: Mapping[str, int]) -> dict[str, int]:
    for category, tokens in caps.items():
        if category not in CATEGORIES:
            known = ", ".join(CATEGORIES)
            raise ValueError(f"caps: unknown category {category!r}; categories are {known}")
        check_count(f"caps[{category!r}]", tokens, least=0)
    return dict(caps)


def check_count(field: str, value: Any, *, least: int) -> None:
    """A whole number, at least ``least`` (not a bool), or ``ValueError`` naming ``field``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        kind = "a positive integer" if least > 0 else "a non-negative integer"
        raise ValueError(f"{field} must be {kind}, got {value!r}")


def category_of(entry: Entry) -> str:
    """The budget category of an entry: system, pinned, or its kind (summary included)."""
    if entry.message["role"] in SYSTEM_ROLES:
        return "system"
    if entry.pinned and entry.kind != "summary":
        return "pinned"  # never evicted, so outside the caps of the evictable kinds
    return entry.kind


__all__ = [
    "CATEGORIES",
    "DEFAULT_RULES",
    "IMPORTANT",
    "KINDS",
    "SMALL_TALK",
    "Keeping",
    "Keywords",
    "Match",
    "Priority",
    "Rule",
    "assign",
    "category_of",
    "check_count",
    "infer_kind",
    "is_small_talk",
    "priority_of",
    "text_of",
]
