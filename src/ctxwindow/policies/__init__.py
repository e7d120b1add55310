"""Eviction policies: windows that keep a conversation inside a budget (docs/windows.md)."""

from ctxwindow.policies.base import EvictHook, Oversize, Window
from ctxwindow.policies.explain import Context, Decision, Report
from ctxwindow.policies.message_window import MessageWindow
from ctxwindow.policies.priority import PriorityWindow
from ctxwindow.policies.rules import DEFAULT_RULES, KINDS, Keywords, Match, Priority, Rule
from ctxwindow.policies.token_window import TokenWindow

__all__ = [
    "DEFAULT_RULES",
    "KINDS",
    "Context",
    "Decision",
    "EvictHook",
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
