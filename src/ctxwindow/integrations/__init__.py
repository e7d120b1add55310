"""Adapters for the frameworks people already use (docs/integrations.md).

Each lives in its own module and needs its extra; importing one without it
raises ``ImportError`` with the install command:

- ``ctxwindow.integrations.langchain`` (the ``langchain`` extra):
  ``CtxWindowChatMessageHistory``, ``trim_messages``, ``CtxWindowMiddleware``;
- ``ctxwindow.integrations.llamaindex`` (the ``llamaindex`` extra):
  ``CtxWindowMemory``;
- ``ctxwindow.integrations.openai_agents`` (the ``openai-agents`` extra):
  ``CtxWindowSession``.

All are made the same way: ``session_id``, ``store=`` (a store URL or a
store object), ``model=`` and ``max_tokens=``; the managers behind them are
``_common.Managers``.
"""
