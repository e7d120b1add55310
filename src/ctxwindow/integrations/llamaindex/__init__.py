"""LlamaIndex memory on ctxwindow: ``CtxWindowMemory`` and ``CtxWindowRecallBlock``.

    from llama_index.core.chat_engine import SimpleChatEngine
    from ctxwindow.integrations.llamaindex import CtxWindowMemory

    memory = CtxWindowMemory(session_id="user-42", store="sqlite:///chat.db",
                             model="gpt-4o", max_tokens=2000)
    engine = SimpleChatEngine.from_defaults(llm=llm, memory=memory)

- ``CtxWindowMemory`` (``memory``) is a ``BaseMemory``: ``get(input)`` returns
  the **budgeted context** (what ctxwindow builds within ``max_tokens``: the
  system prompt, tool calls with all their results, the newest turns,
  compressed ones, the rolling summary, and with an ``archive=`` the old
  turns that match ``input``); ``get_all()`` the whole stored history;
  ``put`` and ``put_messages`` append (a list is stored atomically); ``set``
  replaces the history; ``reset`` deletes it. The ``a``-prefixed twins run on
  an ``AsyncContextManager``: awaited, never a sync call in a thread.
- ``CtxWindowRecallBlock`` (``recall``) is a memory block for LlamaIndex's own
  ``Memory``: the turns ``Memory`` flushes from its short-term queue go to a
  ctxwindow session with an archive, and each ``get`` brings back, for the
  newest user message, what ctxwindow builds from them within the block's
  ``max_tokens``: the archived turns that match it, at their place, with the
  newest flushed turns.
- ``to_openai_message`` / ``from_openai_message`` (``convert``): a
  ``ChatMessage`` as the OpenAI chat message it is stored as, and back, the
  way ``llama-index-llms-openai`` writes them.

``max_tokens`` bounds what ``get`` returns, counted as the provider bills
it. Give the system prompt to the memory (``put`` a system message) rather
than to the engine, so that it is pinned and counted. An agent
(``FunctionAgent``) sends the steps of its current run — its tool calls and
their results — after the memory's messages: leave room for them.
"""

from __future__ import annotations

from ctxwindow.integrations._common import require as _require

# Here, before any submodule: a submodule left in ``sys.modules`` must not hide the hint.
_require("llama_index.core", "llamaindex")

from ctxwindow.integrations.llamaindex.convert import (  # noqa: E402
    TOOL_CALL_BLOCKS,
    from_openai_message,
    to_openai_message,
)
from ctxwindow.integrations.llamaindex.memory import CtxWindowMemory  # noqa: E402
from ctxwindow.integrations.llamaindex.recall import CtxWindowRecallBlock  # noqa: E402

__all__ = [
    "TOOL_CALL_BLOCKS",
    "CtxWindowMemory",
    "CtxWindowRecallBlock",
    "from_openai_message",
    "to_openai_message",
]
