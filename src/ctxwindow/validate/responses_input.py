"""OpenAI Responses: the rules of an ``input`` list of items (docs/validate.md).

Calls and their outputs are paired by ``call_id`` across the whole input, not
by position: "No tool output found for function call …" when a call has no
output, "No tool call found for function call output with call_id …" when an
output has no call. A reasoning item belongs to the item the model produced
right after it, and the API refuses one sent without it ("Item 'rs_…' of type
'reasoning' was provided without its required following item"). With
``previous_response_id`` or ``conversation`` the calls may live in that stored
state, so an output without a call in ``input`` is then not an error here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ctxwindow.validate.found import Found, get, items, kind, text_of
from ctxwindow.validate.rules import Violation

MESSAGE_ROLES = ("user", "assistant", "system", "developer")
CALLS = ("function_call", "custom_tool_call")
OUTPUTS = ("function_call_output", "custom_tool_call_output")
# The items a model produces after a reasoning item: what a reasoning item may precede.
PRODUCED = (
    *CALLS,
    "message",
    "web_search_call",
    "file_search_call",
    "computer_call",
    "code_interpreter_call",
    "image_generation_call",
    "local_shell_call",
    "shell_call",
    "apply_patch_call",
    "mcp_call",
    "mcp_list_tools",
    "mcp_approval_request",
    "item_reference",
)


def responses(request: Any) -> list[Violation]:
    """The rules a Responses request body breaks, in request order; empty when valid.

    Never raises: malformed input is reported under ``responses.shape``.

    >>> [v.rule for v in responses({"input": [
    ...     {"type": "function_call_output", "call_id": "call_1", "output": "42"},
    ... ]})]
    ['responses.function_call_output_has_call']
    """
    found = Found()
    if not isinstance(request, Mapping):
        found.add((-1,), "responses.shape", "request", f"expected an object, got {kind(request)}")
        return found.violations()
    stateful = _state(request, found)
    listed = request.get("input")
    if listed is not None and not isinstance(listed, str | list):
        found.add(
            (-1,), "responses.shape", "input", f"expected a string or list, got {kind(listed)}"
        )
    elif listed == []:
        found.add((-1,), "responses.shape", "input", "empty: at least one item is required")
    _items(items(listed), stateful, found)
    return found.violations()


def _state(request: Mapping[str, Any], found: Found) -> bool:
    """Whether the request continues stored state; reports both kinds given at once."""
    previous = request.get("previous_response_id")
    conversation = request.get("conversation")
    if previous is not None and text_of(previous) is None:
        found.add((-1,), "responses.shape", "previous_response_id", "expected a string")
    if (
        conversation is not None
        and text_of(conversation) is None
        and text_of(get(conversation, "id")) is None
    ):
        found.add((-1,), "responses.shape", "conversation", "expected an id or {'id': id}")
    if previous is not None and conversation is not None:
        found.add(
            (-1,),
            "responses.state_exclusive",
            "conversation",
            "give previous_response_id or conversation, not both",
        )
    return previous is not None or conversation is not None


def _items(listed: list[Any], stateful: bool, found: Found) -> None:
    calls: dict[str, int] = {}  # call_id -> the index of its call
    answered: set[str] = set()
    stateful = stateful or any(get(item, "type") == "item_reference" for item in listed)
    for index, item in enumerate(listed):
        item_type = _item_type(index, item, found)
        if index and get(listed[index - 1], "type") == "reasoning" and not _produced(item):
            _unfollowed(index - 1, found)
        call_id = _call_id(index, item, item_type, found)
        if call_id is None:
            continue
        if item_type in CALLS:
            _call(index, call_id, calls, found)
        elif call_id in answered:
            found.add(
                (index,),
                "responses.call_ids_unique",
                f"input[{index}]",
                f"{call_id!r} is answered again",
            )
        elif call_id in calls:
            answered.add(call_id)
        elif not stateful:
            found.add(
                (index,),
                "responses.function_call_output_has_call",
                f"input[{index}]",
                f"no function_call with call_id {call_id!r} before this output",
            )
    if listed and get(listed[-1], "type") == "reasoning":
        _unfollowed(len(listed) - 1, found)
    for call_id, index in calls.items():
        if call_id not in answered:
            found.add(
                (index,),
                "responses.function_call_answered",
                f"input[{index}]",
                f"no function_call_output answers call_id {call_id!r}",
            )


def _item_type(index: int, item: Any, found: Found) -> str | None:
    """An item's type (``message`` for a bare ``{role, content}``), after its shape is checked."""
    where = f"input[{index}]"
    if not isinstance(item, Mapping):
        found.add((index,), "responses.shape", where, f"expected an object, got {kind(item)}")
        return None
    item_type = item.get("type", "message" if "role" in item else None)
    if text_of(item_type) is None:
        found.add((index,), "responses.shape", where, "no string 'type'")
        return None
    if item_type == "message" and item.get("role") not in MESSAGE_ROLES:
        found.add(
            (index,), "responses.shape", where, f"role {item.get('role')!r}: one of {MESSAGE_ROLES}"
        )
    if item_type == "message" and not isinstance(item.get("content"), str | list):
        found.add((index,), "responses.shape", where, "a message needs string or list 'content'")
    return str(item_type)


def _call_id(index: int, item: Any, item_type: str | None, found: Found) -> str | None:
    """The call_id of a call or an output (``None`` for other items), its fields checked."""
    if item_type not in CALLS and item_type not in OUTPUTS:
        return None
    call_id = text_of(get(item, "call_id"))
    payload = {
        "function_call": "arguments",
        "custom_tool_call": "input",
        "function_call_output": "output",
        "custom_tool_call_output": "output",
    }[str(item_type)]
    value = get(item, payload)
    if (
        call_id is None
        or not isinstance(value, str | list)
        or (item_type in CALLS and text_of(get(item, "name")) is None)
    ):
        needs = f"a string 'call_id'{', name' if item_type in CALLS else ''} and '{payload}'"
        found.add((index,), "responses.shape", f"input[{index}]", f"a {item_type} needs {needs}")
    return call_id


def _call(index: int, call_id: str, calls: dict[str, int], found: Found) -> None:
    if call_id in calls:
        found.add(
            (index,),
            "responses.call_ids_unique",
            f"input[{index}]",
            f"call_id {call_id!r} is also input[{calls[call_id]}]'s",
        )
    else:
        calls[call_id] = index


def _produced(item: Any) -> bool:
    """Whether ``item`` is one the model produced, with the ``id`` the API gave it: what a
    reasoning item must precede (the API pairs the two by that id)."""
    item_type = get(item, "type")
    if item_type is None and isinstance(item, Mapping) and "role" in item:
        item_type = "message"
    if item_type not in PRODUCED or text_of(get(item, "id")) is None:
        return False
    return bool(item_type != "message" or get(item, "role") == "assistant")


def _unfollowed(index: int, found: Found) -> None:
    found.add(
        (index,),
        "responses.reasoning_precedes_item",
        f"input[{index}]",
        "a reasoning item not followed by the item it produced, with that item's id",
    )
