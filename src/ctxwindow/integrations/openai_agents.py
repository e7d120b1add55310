"""A ``Session`` for the OpenAI Agents SDK that keeps history in a ctxwindow store.

    from agents import Agent, Runner
    from ctxwindow.integrations.openai_agents import CtxWindowSession

    session = CtxWindowSession("user-42", store="sqlite:///sessions.db", model="gpt-4o",
                               max_tokens=4000)
    result = await Runner.run(agent, "Where is order A-1042?", session=session)

``get_items()`` returns the **budgeted context**, not the whole history:
what ctxwindow's window keeps within ``max_tokens`` (the system prompt,
pinned messages, tool calls with their outputs, the newest turns, compressed
ones and the rolling summary). ``max_tokens`` is the history's budget: the
agent's instructions, tools and the new turn come on top, so leave room for
them. ``get_items(limit)`` returns the newest ``limit`` items of that context.

Responses items are stored as chat messages (what windows count and keep
whole), each entry keeping the original items in its metadata so that they
come back exactly:

- a ``message`` item (user, system, developer, assistant; text, image and
  refusal parts) is one message;
- an assistant message followed by ``function_call`` items, or consecutive
  ``function_call`` items (parallel calls), are one assistant message with
  ``tool_calls``; each ``function_call_output`` is a tool message: a call and
  its outputs are one unit, kept or evicted together;
- any other item (``reasoning``, built-in tool calls…) travels with the next
  item stored in the same ``add_items`` call; trailing ones are stored alone
  as an empty assistant message.

An item that the window compressed or summarised, or that another process
stored, comes back converted from its message (same role, text and calls,
without ids or status). ``pop_item`` removes the newest item: the store keeps
an honest log (the entry is removed; what else it held is stored again).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from ctxwindow.context import AsyncContextManager
from ctxwindow.integrations._common import DEFAULT_STORE, Managers, require
from ctxwindow.messages import Entry
from ctxwindow.stores.base import AsyncStore

require("agents", "openai-agents")

from agents.memory.session import SessionABC  # noqa: E402

Item = dict[str, Any]
ITEMS = "openai_items"  # the metadata key that keeps an entry's original items
_MESSAGE_ROLES = ("user", "system", "developer", "assistant")


class CtxWindowSession(SessionABC):
    """An Agents SDK session on a ctxwindow store; see the module docstring."""

    def __init__(
        self,
        session_id: str,
        *,
        store: str | AsyncStore = DEFAULT_STORE,
        model: str = "gpt-4o",
        max_tokens: int | float = 0.75,
        manager: AsyncContextManager | None = None,
        **options: Any,
    ) -> None:
        self.session_id = session_id
        self.session_settings = None
        pair = Managers(store, model, max_tokens, options, manager=manager)
        self.manager = pair.strict_async
        self._items: dict[bytes, list[Item]] | None = None  # message -> its original items

    async def get_items(self, limit: int | None = None) -> list[Any]:
        """The budgeted context as Responses items (the newest ``limit`` of them)."""
        context = await self.manager.build(self.session_id)
        known = await self._known()
        items = [item for m in context.messages for item in known.get(_key(m)) or to_items(m)]
        if limit is not None:
            items = items[-limit:] if limit > 0 else []
        return items

    async def get_all_items(self) -> list[Any]:
        """Every stored item, in order (the whole history, not the budgeted context)."""
        history = await self.manager.history(self.session_id)
        return [item for entry in history for item in _items_of(entry)]

    async def add_items(self, items: list[Any]) -> None:
        """Store ``items`` (Responses input items) in order."""
        known = await self._known()
        for message, originals in to_messages(items):
            await self.manager.add(self.session_id, message, metadata={ITEMS: originals})
            known[_key(message)] = originals

    async def pop_item(self) -> Any | None:
        """Remove and return the newest item (None if the session is empty)."""
        async with self.manager.turn(self.session_id):
            last = await self.manager.store.tail(self.session_id, 1)
            if not last:
                return None
            entry = last[0]
            items = _items_of(entry)
            await self.manager.truncate(self.session_id, entry.seq - 1)
            if self._items is not None:
                self._items.pop(_key(entry.message), None)
            if len(items) > 1:
                await self.add_items(items[:-1])
            return items[-1] if items else None

    async def clear_session(self) -> None:
        """Delete the session: its history, window and archived turns."""
        await self.manager.delete(self.session_id)
        self._items = {}

    async def _known(self) -> dict[bytes, list[Item]]:
        """The original items of stored messages, read once per session object."""
        if self._items is None:
            history = await self.manager.history(self.session_id)
            self._items = {_key(e.message): _items_of(e) for e in history}
        return self._items


def _key(message: Mapping[str, Any]) -> bytes:
    return json.dumps(message, sort_keys=True, ensure_ascii=False).encode()


def _items_of(entry: Entry) -> list[Item]:
    stored = entry.metadata.get(ITEMS)
    return list(stored) if isinstance(stored, list) else to_items(entry.message)


# -- items -> chat messages ------------------------------------------------------------


def to_messages(items: Sequence[Any]) -> list[tuple[dict[str, Any], list[Item]]]:
    """Chat messages for Responses ``items``, each with the items it stands for."""
    out: list[tuple[dict[str, Any], list[Item]]] = []
    carried: list[Item] = []  # items with no message of their own: they go with the next
    for raw in items:
        item = _plain(raw)
        kind = item.get("type", "message")
        if kind == "message" and item.get("role") in _MESSAGE_ROLES:
            out.append(({"role": item["role"], "content": _chat_content(item)}, [*carried, item]))
        elif kind == "function_call":
            call = {
                "id": item["call_id"], "type": "function",
                "function": {"name": item["name"], "arguments": item.get("arguments") or ""},
            }  # fmt: skip
            last = out[-1][0] if out and not carried else None
            if last is not None and last["role"] == "assistant":  # text then calls, or parallel
                last.setdefault("tool_calls", []).append(call)
                out[-1][1].append(item)
            else:
                out.append(({"role": "assistant", "content": None, "tool_calls": [call]},
                            [*carried, item]))  # fmt: skip
        elif kind == "function_call_output":
            tool = {"role": "tool", "tool_call_id": item["call_id"], "content": _output(item)}
            out.append((tool, [*carried, item]))
        else:
            carried.append(item)
            continue
        carried = []
    if carried:
        out.append(({"role": "assistant", "content": ""}, carried))
    return out


def _plain(item: Any) -> Item:
    """An item as a plain dict (the SDK hands over dicts or pydantic models)."""
    if isinstance(item, Mapping):
        return dict(item)
    dump = getattr(item, "model_dump", None)
    if dump is not None:
        return dict(dump(exclude_unset=True))
    raise TypeError(f"a session item must be a dict or a pydantic model, got {type(item).__name__}")


def _chat_content(item: Item) -> Any:
    content = item.get("content")
    if isinstance(content, str):
        return content
    parts: list[dict[str, Any]] = []
    for part in content or ():
        kind = part.get("type")
        if kind in ("input_text", "output_text", "text"):
            parts.append({"type": "text", "text": part.get("text", "")})
        elif kind == "refusal":
            parts.append({"type": "text", "text": part.get("refusal", "")})
        elif kind == "input_image" and isinstance(part.get("image_url"), str):
            image = {"url": part["image_url"], "detail": part.get("detail") or "auto"}
            parts.append({"type": "image_url", "image_url": image})
        else:
            parts.append({"type": "text", "text": f"[{kind}]"})
    return parts


def _output(item: Item) -> str:
    output = item.get("output")
    if isinstance(output, str):
        return output
    texts = [p.get("text", "") for p in output or () if isinstance(p, Mapping)]
    return "\n".join(t for t in texts if t) or json.dumps(output, ensure_ascii=False)


# -- chat messages -> items (for what the window changed, or others stored) ---------------


def to_items(message: Mapping[str, Any]) -> list[Item]:
    """Responses input items for one chat message."""
    role = message["role"]
    if role == "tool":
        return [{"type": "function_call_output", "call_id": message.get("tool_call_id", ""),
                 "output": _text(message.get("content"))}]  # fmt: skip
    items: list[Item] = []
    content = message.get("content")
    calls = message.get("tool_calls")
    if content is not None and not (calls and content in ("", [])):
        items.append({"role": role, "content": _item_content(role, content)})
    for call in calls or ():
        function = call.get("function") or {}
        items.append({
            "type": "function_call", "call_id": call.get("id", ""),
            "name": function.get("name", ""), "arguments": function.get("arguments", ""),
        })  # fmt: skip
    return items


def _item_content(role: str, content: Any) -> Any:
    if isinstance(content, str):
        return content
    kind = "output_text" if role == "assistant" else "input_text"
    parts: list[Item] = []
    for part in content:
        if part.get("type") == "image_url":
            image = part.get("image_url") or {}
            parts.append({"type": "input_image", "image_url": image.get("url", ""),
                          "detail": image.get("detail", "auto")})  # fmt: skip
        else:
            parts.append({"type": kind, "text": part.get("text") or part.get("refusal") or ""})
    return parts


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "\n".join(p.get("text", "") for p in content or () if isinstance(p, Mapping))


__all__ = ["ITEMS", "CtxWindowSession", "Item", "to_items", "to_messages"]
