"""Check a request against its provider's documented rules before sending it.

A trim, a summary or a compaction that cuts between a tool call and its
result, leaves an empty turn, or moves a thinking block, costs a 400 from the
provider, and often only in the next session. These validators say which
rule a request breaks, where, and naming which ids, without sending it: one
function per wire format (OpenAI Chat Completions, OpenAI Responses,
Anthropic Messages, strict open-model chat templates). Each rule is named
and cited in ``RULES`` and in docs/validate.md. ctxwindow's own paths are
held to them by its tests: every window, summary and protocol route builds
requests these accept.

The validators never raise on malformed input (that is the ``<protocol>.shape``
rule), read the request once (linear time), and need nothing outside the
standard library. An empty list means valid.

>>> from ctxwindow.validate import InvalidRequestError, check, ensure
>>> request = {"messages": [
...     {"role": "user", "content": "天気は？"},
...     {"role": "assistant", "content": None, "tool_calls": [{
...         "id": "call_1", "type": "function",
...         "function": {"name": "weather", "arguments": '{"city": "東京"}'}}]},
...     {"role": "user", "content": "まだ？"},
... ]}
>>> for violation in check("chat_completions", request):
...     print(violation.rule, violation.where)
chat.tool_call_answered messages[1].tool_calls[0]
>>> try:
...     ensure("chat_completions", request)
... except InvalidRequestError as error:
...     print(error)
1 broken rule: messages[1].tool_calls[0]: no tool message answers 'call_1' right after \
messages[1] (chat.tool_call_answered)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ctxwindow.validate.anthropic import anthropic_messages
from ctxwindow.validate.chat import chat_completions
from ctxwindow.validate.responses_input import responses
from ctxwindow.validate.rules import PROTOCOLS, RULES, InvalidRequestError, Rule, Violation
from ctxwindow.validate.templates import chat_template

__all__ = [
    "PROTOCOLS",
    "RULES",
    "InvalidRequestError",
    "Rule",
    "Violation",
    "anthropic_messages",
    "chat_completions",
    "chat_template",
    "check",
    "ensure",
    "responses",
]

_VALIDATORS: dict[str, Callable[[Any], list[Violation]]] = {
    "chat_completions": chat_completions,
    "responses": responses,
    "anthropic_messages": anthropic_messages,
    "chat_template": chat_template,
}


def check(protocol: str, request: Any) -> list[Violation]:
    """The rules ``request`` breaks under ``protocol`` (one of ``PROTOCOLS``), in order.

    Raises ``ValueError`` for an unknown protocol; never for the request.
    """
    validator = _VALIDATORS.get(protocol)
    if validator is None:
        raise ValueError(f"unknown protocol {protocol!r}: expected one of {PROTOCOLS}")
    return validator(request)


def ensure(protocol: str, request: Any) -> None:
    """Raise ``InvalidRequestError`` if ``request`` breaks a rule of ``protocol``."""
    violations = check(protocol, request)
    if violations:
        raise InvalidRequestError(violations)
