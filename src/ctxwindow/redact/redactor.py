"""``Redactor``: a message in, a new message with its secrets replaced out."""

from __future__ import annotations

import bisect
import copy
import functools
import itertools
import threading
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from ctxwindow.messages import Message
from ctxwindow.redact.base import Detector, Span
from ctxwindow.redact.credentials import ApiKey, Password, Secret
from ctxwindow.redact.detectors import BankCard, CnId, Email, IPAddress, Phone, Ssn
from ctxwindow.redact.iban import Iban
from ctxwindow.redact.keys import CloudKey, PrivateKey
from ctxwindow.redact.urls import UrlSecret

# Order breaks ties between equal spans: the detector that knows more
# context comes first ("password: 13800138000" is a PASSWORD; an ID that
# happens to pass Luhn is a CN_ID; "?key=AIza…" is an API_KEY).
DEFAULT_DETECTORS: tuple[Detector, ...] = (
    PrivateKey(),
    ApiKey(),
    CloudKey(),
    UrlSecret(),
    Password(),
    Secret(),
    Iban(),
    Email(),
    CnId(),
    Ssn(),
    BankCard(),
    Phone(),
    IPAddress(),
)


def resolve(found: Sequence[tuple[Span, int]]) -> list[tuple[Span, int]]:
    """Non-overlapping spans: longer first, then earlier, then detector order.

    ``found`` pairs spans with the index of their detector; the result is in
    text order.

    >>> resolve([((0, 5), 1), ((3, 12), 0), ((12, 14), 1)])
    [((3, 12), 0), ((12, 14), 1)]
    """
    chosen: list[tuple[Span, int]] = []  # kept sorted and disjoint: neighbours suffice
    for (start, end), index in sorted(found, key=lambda f: (f[0][0] - f[0][1], f[0][0], f[1])):
        at = bisect.bisect_left(chosen, ((start, end), index))
        before_ok = at == 0 or chosen[at - 1][0][1] <= start
        after_ok = at == len(chosen) or chosen[at][0][0] >= end
        if before_ok and after_ok:
            chosen.insert(at, ((start, end), index))
    return chosen


class _Placeholders:
    """Where the placeholders already in a text are, to leave them alone."""

    def __init__(self, placeholders: set[str], text: str) -> None:
        spans = sorted(
            (at, at + len(placeholder))
            for placeholder in placeholders
            for at in _occurrences(text, placeholder)
        )
        self._starts = [start for start, _ in spans]
        self._ends = list(itertools.accumulate((end for _, end in spans), max))

    def overlaps(self, span: Span) -> bool:
        """Whether ``span`` shares a character with a placeholder."""
        before = bisect.bisect_left(self._starts, span[1])  # placeholders starting before its end
        return before > 0 and self._ends[before - 1] > span[0]


def _occurrences(text: str, part: str) -> Iterator[int]:
    at = text.find(part)
    while at >= 0:
        yield at
        at = text.find(part, at + 1)


RedactFn = Callable[[Message], Message]
"""Anything that redacts a message: a ``Redactor``, or a function of your own."""


def redacted_preview(text: str, redact: RedactFn, width: int = 60) -> str:
    """The start of ``text`` for a report, redacted first and cut after.

    Whitespace is collapsed and the result cut to ``width`` characters with
    ``…``, as report previews are. Redacting comes first because a secret
    cut in half no longer looks like one (``4111 1111 11…`` is no card
    number, ``li.lei@exa…`` no address): cut first and it would show.
    ``redact`` is any ``RedactFn``; ``text`` goes through it as a user message.

    >>> redacted_preview("卡号 4111 1111 1111 1111，密码：hunter2，周五前转账", Redactor(), 16)
    '卡号 [BANK_CARD]，密…'
    """
    if isinstance(redact, Redactor):
        redact = redact.uncounted  # a preview is shown, not sent: it is not a redaction
    content = redact({"role": "user", "content": text}).get("content")
    clean = " ".join(content.split()) if isinstance(content, str) else ""
    return clean[:width] + ("…" if len(clean) > width else "")


class Redactor:
    """Replaces secrets with typed placeholders (``[EMAIL]``, ``[CN_ID]``…).

    ``detectors`` run in order (order breaks ties between equal spans);
    ``placeholders`` maps a detector name to its replacement (default
    ``[NAME]``). ``redactor(message)`` returns a new message with text
    content and tool-call arguments redacted (anything else, valid or not, is
    passed on as it came); ``counts`` totals what every call replaced, by
    type, for the metrics.

    >>> redact = Redactor()
    >>> redact({"role": "user", "content": "我的邮箱是 li@example.com，密码：hunter2"})
    {'role': 'user', 'content': '我的邮箱是 [EMAIL]，密码：[PASSWORD]'}
    >>> dict(redact.counts)
    {'EMAIL': 1, 'PASSWORD': 1}
    """

    def __init__(
        self,
        detectors: Sequence[Detector] = DEFAULT_DETECTORS,
        placeholders: Mapping[str, str] | None = None,
    ) -> None:
        self.detectors = tuple(detectors)
        self.placeholders = dict(placeholders or {})
        self._placeholder_texts = {self.placeholder(d.name) for d in self.detectors} - {""}
        self._counts: Counter[str] = Counter()
        self._lock = threading.Lock()

    @property
    def counts(self) -> Counter[str]:
        """A snapshot of the replacements made so far, by type."""
        with self._lock:
            return Counter(self._counts)

    @functools.cached_property
    def uncounted(self) -> Redactor:
        """The same redaction, left out of ``counts`` (for previews in reports).

        >>> redact = Redactor()
        >>> redact.uncounted({"role": "user", "content": "a@b.cn"})["content"], dict(redact.counts)
        ('[EMAIL]', {})
        """
        twin = copy.copy(self)
        twin._counts, twin._lock = Counter(), threading.Lock()
        return twin

    def placeholder(self, name: str) -> str:
        return self.placeholders.get(name, f"[{name}]")

    def redact_text(self, text: str) -> tuple[str, dict[str, int]]:
        """``text`` with its secrets replaced, and how many of each type.

        Idempotent: placeholders already in the text are never matched again,
        and replacing is repeated until nothing more is found (a replacement
        can change what its neighbours look like), so redacting the result
        finds nothing and ``redact_text(redact_text(x)[0])[0] == redact_text(x)[0]``.

        >>> Redactor().redact_text("call +86 138 0013 8000 or mail a@b.cn")
        ('call [PHONE] or mail [EMAIL]', {'PHONE': 1, 'EMAIL': 1})
        >>> Redactor().redact_text("password: [PASSWORD]")
        ('password: [PASSWORD]', {})
        """
        counts: Counter[str] = Counter()
        while True:  # ends: each pass turns unprotected characters into placeholders
            text, found = self._replace(text)
            if not found:
                break
            counts.update(found)
        self._add(counts)
        return text, dict(counts)

    def _replace(self, text: str) -> tuple[str, Counter[str]]:
        """One pass: every secret outside the placeholders already there, replaced."""
        kept = _Placeholders(self._placeholder_texts, text)
        found = [
            (span, index)
            for index, detector in enumerate(self.detectors)
            for span in detector.find(text)
            if span[0] < span[1] and not kept.overlaps(span)
        ]
        pieces: list[str] = []
        counts: Counter[str] = Counter()
        last = 0
        for (start, end), index in resolve(found):
            name = self.detectors[index].name
            pieces += (text[last:start], self.placeholder(name))
            counts[name] += 1
            last = end
        pieces.append(text[last:])
        return "".join(pieces), counts

    def __call__(self, message: Mapping[str, Any]) -> Message:
        redacted = dict(message)
        content = message.get("content")
        if isinstance(content, str):
            redacted["content"] = self._text(content)
        elif isinstance(content, list):
            redacted["content"] = [self._part(part) for part in content]
        if isinstance(message.get("tool_calls"), list):
            redacted["tool_calls"] = [self._call(call) for call in message["tool_calls"]]
        return redacted

    def _text(self, text: str) -> str:
        return self.redact_text(text)[0]

    def _part(self, part: Any) -> Any:
        if isinstance(part, Mapping) and isinstance(part.get("text"), str):
            return {**part, "text": self._text(part["text"])}
        return part

    def _call(self, call: Any) -> Any:
        function = call.get("function") if isinstance(call, Mapping) else None
        if not isinstance(function, Mapping) or not isinstance(function.get("arguments"), str):
            return call
        # Text-level, not parsed: "password" keys keep their values in reach,
        # and placeholders hold no quote or backslash, so JSON stays valid.
        return {**call, "function": {**function, "arguments": self._text(function["arguments"])}}

    def _add(self, counts: Counter[str]) -> None:
        if counts:
            with self._lock:
                self._counts.update(counts)

    def __repr__(self) -> str:
        return f"Redactor({list(self.detectors)!r})"
