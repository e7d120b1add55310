"""LangChain adapters (the ``langchain`` extra; docs/integrations.md).

- ``CtxWindowChatMessageHistory`` (``history``): a ``BaseChatMessageHistory``
  over any store, whose ``messages`` is the budgeted context
  (``RunnableWithMessageHistory`` sends at most ``max_tokens``) and
  ``all_messages`` the whole history;
- ``trim_messages`` (``trim``): a drop-in for
  ``langchain_core.messages.trim_messages`` (``strategy="last"``) with exact
  counts and tool units kept whole, O(1) a turn when called turn after turn
  on one growing history;
- ``CtxWindowMiddleware`` (``middleware``): an ``AgentMiddleware`` for
  ``create_agent`` that stores each turn and hands the model ctxwindow's
  context instead of the whole conversation;
- ``to_openai`` / ``from_openai`` (``convert``): LangChain messages to chat
  wire format and back (roles, content parts, names, tool calls and their ids).

The history and the middleware hold up to two managers over one store: a
``ContextManager`` for their sync methods and an ``AsyncContextManager`` for
their async ones, each made on first use (``Managers``, shared by every
adapter in ``ctxwindow.integrations._common``).
"""

from __future__ import annotations

from ctxwindow.integrations._common import Managers
from ctxwindow.integrations._common import require as _require

# Here, before any submodule: a submodule left in ``sys.modules`` must not hide the hint.
_require("langchain_core", "langchain")
_require("langchain.agents.middleware", "langchain")

from ctxwindow.integrations.langchain.convert import from_openai, to_openai  # noqa: E402
from ctxwindow.integrations.langchain.history import CtxWindowChatMessageHistory  # noqa: E402
from ctxwindow.integrations.langchain.middleware import CtxWindowMiddleware  # noqa: E402
from ctxwindow.integrations.langchain.trim import trim_messages  # noqa: E402

__all__ = [
    "CtxWindowChatMessageHistory",
    "CtxWindowMiddleware",
    "Managers",
    "from_openai",
    "to_openai",
    "trim_messages",
]
