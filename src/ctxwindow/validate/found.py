"""What the validators share: the list of violations they build, and safe readers.

A validator reads input it does not trust: any JSON value, or worse. The
readers here never raise: a field of something that is not an object is
``None``, a list that is not a list is empty, an id that is not a string is no
id. Each validator walks the request once, in order, and files what it finds
under the place it found it, so the report comes out in request order however
many rules looked at one message.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ctxwindow.validate.rules import RULES, Violation

Place = tuple[int, ...]
"""Where a violation sits, for ordering: the indexes down to it (section, item, block)."""


class Found:
    """The violations of one request, filed by place; ``violations()`` gives them in order."""

    def __init__(self) -> None:
        self._filed: list[tuple[Place, Violation]] = []

    def add(self, place: Place, rule: str, where: str, message: str) -> None:
        assert rule in RULES, rule  # a typo in a rule name is ours, never the request's
        self._filed.append((place, Violation(rule, where, message)))

    def violations(self) -> list[Violation]:
        """Every violation, in request order (stable: one place keeps the order of filing)."""
        return [violation for _, violation in sorted(self._filed, key=lambda item: item[0])]


def get(value: Any, key: str) -> Any:
    """``value[key]`` if ``value`` is an object that has it, else ``None``."""
    return value.get(key) if isinstance(value, Mapping) else None


def items(value: Any) -> list[Any]:
    """``value`` if it is a list, else no items."""
    return value if isinstance(value, list) else []


def text_of(value: Any) -> str | None:
    """``value`` if it is a string, else ``None``: ids and roles are only ever strings."""
    return value if isinstance(value, str) else None


def kind(value: Any) -> str:
    """The name of a JSON value's type, for messages: object, list, string, number, …"""
    names = {dict: "object", list: "list", str: "string", bool: "boolean", type(None): "null"}
    if isinstance(value, Mapping):
        return "object"
    return names.get(type(value), "number" if isinstance(value, int | float) else "unknown")
