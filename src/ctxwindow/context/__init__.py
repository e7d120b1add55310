"""``ContextManager``: one object that keeps sessions and builds their contexts.

Per session it appends to a store (durably, before anything else), keeps a
window in memory (hydrated once from the store with the stored token counts),
archives every turn, and builds the context for a model and a
budget: the window's messages, plus archived units recalled for the query,
placed at their original position, with a report of every decision.

``AsyncContextManager`` is the same over an ``AsyncStore`` for servers.

>>> from ctxwindow.stores.memory import MemoryStore
>>> cm = ContextManager(MemoryStore(), model="gpt-4o", budget=2000)
>>> _ = cm.add("s1", {"role": "user", "content": "My order is A-1042."})
>>> cm.build("s1").messages[-1]["content"]
'My order is A-1042.'

The package, one concern a module: ``policy`` (the default window and the
budget), ``contracts`` (what the managers are given), ``session`` (a session's
window and cached archive units), ``turns`` (which sessions a task holds),
``core`` (``Core``, what both managers share, made of ``admission``,
``recalling`` and ``finishing``: a turn checked and counted, recall, the
context merged and redacted), ``archiver`` (the archive's I/O: indexing in
the background, searches for recall), ``question`` (the newest user turn, always sent),
``batch`` (validated first; a key bound to its request), ``aio``
(``AsyncContextManager``, written once) and ``manager`` (``ContextManager``,
generated from ``aio`` by ``tools/unasync.py``).
"""

from ctxwindow.context.aio import AsyncContextManager
from ctxwindow.context.batch import request_hash
from ctxwindow.context.contracts import REDACT_AT, ArchiveLike, CoreSettings, EventHook, RedactAt
from ctxwindow.context.manager import ContextManager
from ctxwindow.context.policy import COMPRESSORS, Policy, default_budget, hybrid_policy
from ctxwindow.context.session import HotSessions
from ctxwindow.recall import RecallPolicy

__all__ = [
    "COMPRESSORS",
    "REDACT_AT",
    "ArchiveLike",
    "AsyncContextManager",
    "ContextManager",
    "CoreSettings",
    "EventHook",
    "HotSessions",
    "Policy",
    "RecallPolicy",
    "RedactAt",
    "default_budget",
    "hybrid_policy",
    "request_hash",
]
