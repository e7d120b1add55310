"""ctxwindow: keep LLM conversations inside their token budget.

>>> from ctxwindow import TokenWindow, count_tokens
>>> w = TokenWindow(max_tokens=4096, model="gpt-4o", system="You are terse.")
>>> _ = w.add("user", "Hello!")
>>> w.total_tokens == count_tokens(w.messages(), model="gpt-4o")
True
"""

from ctxwindow.context import AsyncContextManager, ContextManager, hybrid_policy
from ctxwindow.errors import (
    BudgetError,
    CompressionError,
    CtxWindowError,
    EncodingDataError,
    IdempotencyConflictError,
    InvalidMessageError,
    InvalidRequestError,
    MessageTooLargeError,
    ModelConfigError,
    OrphanToolResultError,
    PinnedOverBudgetError,
    SessionBusyError,
    SessionFullError,
    StoreError,
    StoreInputError,
    StoreUnavailableError,
    UnknownModelError,
)
from ctxwindow.messages import Entry, Unit
from ctxwindow.policies import (
    Context,
    Folding,
    Keeping,
    Match,
    MessageWindow,
    Priority,
    PriorityWindow,
    Report,
    TokenWindow,
    Window,
)
from ctxwindow.redact import Redactor
from ctxwindow.tokens import (
    ChatTokenizer,
    EstimateWarning,
    ModelInfo,
    ModelRegistry,
    TokenCounter,
    chat_tokenizer,
    count_tokens,
    known_models,
    model_info,
    use_models,
)

__version__ = "0.1.0"

__all__ = [
    "AsyncContextManager",
    "BudgetError",
    "ChatTokenizer",
    "CompressionError",
    "Context",
    "ContextManager",
    "CtxWindowError",
    "EncodingDataError",
    "Entry",
    "EstimateWarning",
    "Folding",
    "IdempotencyConflictError",
    "InvalidMessageError",
    "InvalidRequestError",
    "Keeping",
    "Match",
    "MessageTooLargeError",
    "MessageWindow",
    "ModelConfigError",
    "ModelInfo",
    "ModelRegistry",
    "OrphanToolResultError",
    "PinnedOverBudgetError",
    "Priority",
    "PriorityWindow",
    "Redactor",
    "Report",
    "SessionBusyError",
    "SessionFullError",
    "StoreError",
    "StoreInputError",
    "StoreUnavailableError",
    "TokenCounter",
    "TokenWindow",
    "Unit",
    "UnknownModelError",
    "Window",
    "chat_tokenizer",
    "count_tokens",
    "hybrid_policy",
    "known_models",
    "model_info",
    "use_models",
]
