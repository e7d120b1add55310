"""The public API: the modules users import from (docs/api.md).

Import from these modules, and only the names in their ``__all__``. Every
other module is internal, whether or not its name starts with an underscore
(``ctxwindow.context.core``, ``ctxwindow.stores.redis.aio``, …): it may
change or go in any release. A public name that changes keeps its old
spelling for one release, with a ``DeprecationWarning`` (CHANGELOG.md,
"Deprecated").

``tests/test_exported.py`` holds docs/api.md, the README, the docs and the
examples to this list, and each module's ``__all__`` to what it defines.
"""

MODULES = (
    "ctxwindow",
    "ctxwindow.archive",
    "ctxwindow.compress",
    "ctxwindow.context",
    "ctxwindow.errors",
    "ctxwindow.eval",
    "ctxwindow.eval.builtin",
    "ctxwindow.eval.report",
    "ctxwindow.integrations.langchain",
    "ctxwindow.integrations.llamaindex",
    "ctxwindow.integrations.openai_agents",
    "ctxwindow.messages",
    "ctxwindow.policies",
    "ctxwindow.redact",
    "ctxwindow.server",
    "ctxwindow.stores",
    "ctxwindow.tokens",
    "ctxwindow.validate",
)
