"""Cutting a text to a token target, head and tail kept, the cut marked in the text."""

from __future__ import annotations

from ctxwindow.tokens.counter import TokenCounter

MARKER = "\n[… {chars} chars ({tokens} tokens) cut by ctxwindow …]\n"


def truncate_text(
    text: str, max_tokens: int, counter: TokenCounter, head_share: float = 0.5
) -> str:
    """Return ``text`` cut to at most ``max_tokens``, keeping its head and tail.

    The removed middle is replaced by a marker saying how many characters and
    tokens were cut. Works on characters (never splits a code point) with a
    binary search over how much to keep, so any counter can be used. Returns
    ``""`` when even the bare marker does not fit.
    """
    total = counter.count(text)
    if total <= max_tokens:
        return text
    best = ""
    lo, hi = 0, len(text) - 1
    while lo <= hi:
        keep = (lo + hi) // 2
        candidate = _cut(text, keep, total, counter, head_share)
        if counter.count(candidate) <= max_tokens:
            best, lo = candidate, keep + 1
        else:
            hi = keep - 1
    return best


def _cut(text: str, keep: int, total: int, counter: TokenCounter, head_share: float) -> str:
    head_len = round(keep * head_share)
    head, tail = text[:head_len], text[len(text) - (keep - head_len) :]
    kept_tokens = counter.count(head) + counter.count(tail)
    marker = MARKER.format(chars=len(text) - keep, tokens=max(total - kept_tokens, 0))
    return head + marker + tail
