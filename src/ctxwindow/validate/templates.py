"""Strict open-model chat templates: the roles they accept, in order (docs/validate.md).

Llama 2, Mistral and Gemma templates (and vLLM serving them) raise
"Conversation roles must alternate user/assistant/user/assistant/..." when
two user or two assistant messages meet, when the first message after the
system prompt is not the user's, or when a system message comes later.
Tool results belong to the assistant side: assistant → tool → assistant is
accepted, assistant → assistant is not. This is exactly what
``ctxwindow.policies.alternate`` produces (its "merge" and "bridge" modes),
and ``tests/test_validate.py`` holds the two together.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ctxwindow.validate.found import Found, kind, text_of
from ctxwindow.validate.rules import Violation

SYSTEM_ROLES = ("system", "developer")
RESULT_ROLES = ("tool", "function")
ROLES = (*SYSTEM_ROLES, "user", "assistant", *RESULT_ROLES)
# The roles each role may directly follow once the conversation started ("" is its start).
_MAY_FOLLOW = {
    "user": ("", "assistant", *RESULT_ROLES),
    "assistant": ("user", *RESULT_ROLES),
    **dict.fromkeys(RESULT_ROLES, ("assistant", *RESULT_ROLES)),
}


def chat_template(messages: Any) -> list[Violation]:
    """The strict-template rules a list of chat messages breaks (roles only), in order.

    Never raises: malformed input is reported under ``template.shape``.

    >>> [v.where for v in chat_template([
    ...     {"role": "system", "content": "Be brief."},
    ...     {"role": "user", "content": "你好"},
    ...     {"role": "user", "content": "还在吗？"},
    ... ])]
    ['messages[2]']
    """
    found = Found()
    if isinstance(messages, Mapping):
        messages = messages.get("messages")
    if not isinstance(messages, list):
        found.add((-1,), "template.shape", "messages", f"expected a list, got {kind(messages)}")
        return found.violations()
    previous: str | None = None  # None while only system messages came
    for index, message in enumerate(messages):
        role = _role(index, message, found)
        if role is None or role in SYSTEM_ROLES:
            if previous is not None and role is not None:
                found.add(
                    (index,),
                    "template.system_first",
                    f"messages[{index}]",
                    f"role {role!r} after the conversation started",
                )
            continue
        if (previous or "") not in _MAY_FOLLOW[role]:
            found.add((index,), "template.alternation", f"messages[{index}]", _why(role, previous))
        previous = role
    return found.violations()


def _role(index: int, message: Any, found: Found) -> str | None:
    where = f"messages[{index}]"
    if not isinstance(message, Mapping):
        found.add((index,), "template.shape", where, f"expected an object, got {kind(message)}")
        return None
    role = text_of(message.get("role"))
    if role not in ROLES:
        found.add(
            (index,), "template.shape", where, f"role {message.get('role')!r}: one of {ROLES}"
        )
        return None
    return role


def _why(role: str, previous: str | None) -> str:
    if previous is None:
        return f"the conversation starts with role {role!r}, not 'user'"
    return f"role {role!r} right after role {previous!r}"
