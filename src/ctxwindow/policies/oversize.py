"""The oversize policy: what a window does with a message bigger than all the room it has.

``"error"`` (the default) refuses it with ``MessageTooLargeError`` and adds
nothing; ``"truncate"`` cuts its text to fit, head and tail kept
(``tokens/truncate.py``), and refuses what cannot be cut; ``"drop"`` leaves
it out, with the results of its tool calls. ``Window._fit_oversize``
applies the policy; here are its names, the cut and the refusal.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

from ctxwindow.errors import MessageTooLargeError
from ctxwindow.messages import Entry
from ctxwindow.tokens.chat import ChatTokenizer
from ctxwindow.tokens.truncate import truncate_text

Oversize = Literal["error", "truncate", "drop"]
OVERSIZE: tuple[Oversize, ...] = ("error", "truncate", "drop")


def truncated(
    entry: Entry, room: int, tokenizer: ChatTokenizer, size_of: Callable[[Entry], int]
) -> bool:
    """Cut the entry's text so its size (``size_of``) is at most ``room``; False if impossible."""
    if not isinstance(entry.message.get("content"), str):
        return False
    framing = tokenizer.message_tokens(dict(entry.message, content=""))
    target = room - framing
    if target < 1:
        return False
    text = truncate_text(entry.message["content"], target, tokenizer.counter)
    if not text.strip() and not entry.message.get("tool_calls"):
        return False  # no text left: an empty message, which providers refuse
    entry.message = dict(entry.message, content=text)
    entry.tokens = tokenizer.message_tokens(entry.message)
    entry.metadata["truncated"] = True
    return size_of(entry) <= room


def too_large(entry: Entry, size: int, budget: int, pinned: int) -> MessageTooLargeError:
    """The refusal of ``entry``, of ``size`` with what it joins, where ``pinned`` of the
    ``budget`` is taken by what is never evicted."""
    return MessageTooLargeError(
        f"a {entry.message['role']} message of size {size} does not fit: the budget is "
        f"{budget} and {pinned} of it is taken by the system prompt, "
        "pinned messages and fixed overhead; nothing was added "
        "(choose oversize='truncate' or 'drop' to allow this)"
    )
