"""Eviction policies: windows that keep a conversation inside a budget (docs/windows.md).

One module a concern:

- ``kept``: how every window stores its units and messages, with running totals;
- ``view``: what a window reads out (messages, totals, ``build``, ``preview``);
- ``base``: ``Window``, the template: adding, the budget, "evict until it fits",
  with ``oversize`` (a message too large for the budget) and ``resumable``
  (checkpoints);
- ``message_window``, ``token_window``: the size measures (victim: the oldest);
- ``priority``: ``PriorityWindow``: priorities, caps and small talk, over
  ``victims`` (which unit goes next), ``folding_window`` (a victim compressed
  or summarized instead) and ``journal`` (what it did, told as a ``Report``);
- ``rules``: priorities, kinds and the rules that assign them (``Keeping``:
  what a ``PriorityWindow`` keeps); ``folding``: ``Folding``, what it makes
  of victims; ``explain``: ``Decision``, ``Report``, ``Context``;
- ``_deprecated``: the constructors' old spellings, for one release.
"""

from ctxwindow.policies.base import EvictHook, Oversize, Window
from ctxwindow.policies.explain import Context, Decision, Report
from ctxwindow.policies.folding import Folding
from ctxwindow.policies.message_window import MessageWindow
from ctxwindow.policies.priority import PriorityWindow
from ctxwindow.policies.rules import (
    CATEGORIES,
    DEFAULT_RULES,
    KINDS,
    Keeping,
    Keywords,
    Match,
    Priority,
    Rule,
)
from ctxwindow.policies.token_window import TokenWindow

__all__ = [
    "CATEGORIES",
    "DEFAULT_RULES",
    "KINDS",
    "Context",
    "Decision",
    "EvictHook",
    "Folding",
    "Keeping",
    "Keywords",
    "Match",
    "MessageWindow",
    "Oversize",
    "Priority",
    "PriorityWindow",
    "Report",
    "Rule",
    "TokenWindow",
    "Window",
]
