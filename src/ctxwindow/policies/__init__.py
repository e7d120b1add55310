"""Eviction policies: windows that keep a conversation inside a budget (docs/windows.md)."""

from ctxwindow.policies.base import EvictHook, Oversize, Window
from ctxwindow.policies.message_window import MessageWindow
from ctxwindow.policies.token_window import TokenWindow

__all__ = ["EvictHook", "MessageWindow", "Oversize", "TokenWindow", "Window"]
