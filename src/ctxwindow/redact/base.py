"""The one detector signature and the helpers detectors share.

A detector has a ``name`` (the placeholder type, e.g. ``"EMAIL"``) and
``find(text) -> [(start, end), ...]``: the spans of the *secrets* in
``text``, keywords excluded. Detectors see the text *folded* (``fold``):
full-width digits, letters, ``＋－：＝＠．＿`` and the ideographic space
become their ASCII forms one character for one, so spans found in the folded text
are spans of the original.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Protocol, runtime_checkable

Span = tuple[int, int]

# Full-width digits, letters and the few marks secrets are written with map
# to ASCII; other full-width punctuation (，（）！…) stays, so it still ends a
# value. One character for one keeps spans aligned.
_WIDE = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz+-:=@._"
_FOLD = {ord(char) + 0xFEE0: ord(char) for char in _WIDE}
_FOLD[0x3000] = 0x20  # ideographic space
_FOLDABLE = re.compile("[" + "".join(map(chr, sorted(_FOLD))) + "]")


def fold(text: str) -> str:
    """Full-width digits, letters and ``＋－：＝＠．＿`` to ASCII, keeping the length.

    >>> fold("电话：１３８ ００１３ ８０００")
    '电话:138 0013 8000'
    """
    # Most texts have nothing to fold, and a search costs a tenth of a translate.
    return text.translate(_FOLD) if _FOLDABLE.search(text) else text


@runtime_checkable
class Detector(Protocol):
    """Finds one type of secret: ``name`` is the placeholder type."""

    name: str

    def find(self, text: str) -> list[Span]: ...


class PatternDetector:
    """Spans of a regex (group ``secret`` if it has one), kept when ``accept`` says so.

    The building block of the built-in detectors; also the quickest way to
    add one:

    >>> order = PatternDetector("ORDER", r"ORD-[0-9]{8}")
    >>> order.find("see ORD-20231129 and ORD-1")
    [(4, 16)]
    """

    def __init__(
        self,
        name: str,
        pattern: str | re.Pattern[str],
        accept: Callable[[str], bool] | None = None,
        flags: int = 0,
    ) -> None:
        self.name = name
        self.pattern = re.compile(pattern, flags) if isinstance(pattern, str) else pattern
        self.accept = accept

    def find(self, text: str) -> list[Span]:
        return list(self._spans(fold(text)))

    def _spans(self, text: str) -> Iterable[Span]:
        has_group = "secret" in self.pattern.groupindex
        for match in self.pattern.finditer(text):
            start, end = match.span("secret") if has_group else match.span()
            if start < end and (self.accept is None or self.accept(text[start:end])):
                yield start, end

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"
