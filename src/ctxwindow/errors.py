"""The one exception tree of ctxwindow.

    CtxWindowError
    ├── InvalidMessageError        a message is not valid chat wire format (also ValueError)
    ├── UnknownModelError          a model name the registry does not know (also KeyError)
    ├── ModelConfigError           a model entry is not valid; names entry and field (ValueError)
    ├── EncodingDataError          the offline encoding files are missing or fail their hash
    ├── BudgetError                a budget cannot be honoured (also ValueError)
    │   ├── MessageTooLargeError   one unit is larger than the whole budget
    │   └── PinnedOverBudgetError  what can never be evicted alone exceeds the budget
    ├── OrphanToolResultError      a tool result whose call is not in the window (also ValueError)
    ├── InvalidRequestError        a request breaks its provider's rules (ctxwindow.validate.ensure;
    │                              also ValueError); ``violations`` lists them
    ├── CompressionError           a compressor cannot work at all (bad config, failing LLM
    │                              endpoint, a budget below one empty message)
    ├── SessionFullError           a batch would take a session over its message limit
    └── StoreError                 a session store failed (bad input, a backend error)
        ├── StoreUnavailableError  the store's server or file cannot be reached
        └── SessionBusyError       a session stayed locked longer than the caller would wait

Errors of third-party libraries are converted at the boundary with
``raise ... from exc``, so callers only ever catch these.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = [
    "BudgetError",
    "CompressionError",
    "CtxWindowError",
    "EncodingDataError",
    "IdempotencyConflictError",
    "InvalidMessageError",
    "InvalidRequestError",
    "MessageTooLargeError",
    "ModelConfigError",
    "OrphanToolResultError",
    "PinnedOverBudgetError",
    "SessionBusyError",
    "SessionFullError",
    "StoreError",
    "StoreInputError",
    "StoreUnavailableError",
    "UnknownModelError",
]


class CtxWindowError(Exception):
    """Base class of every error ctxwindow raises on purpose."""


class InvalidMessageError(CtxWindowError, ValueError):
    """A message does not follow the chat wire format; the text says which field."""


class UnknownModelError(CtxWindowError, KeyError):
    """A model name the registry does not know; the text lists the known ones."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0]) if self.args else ""


class ModelConfigError(CtxWindowError, ValueError):
    """A model entry (config file, ``CTXWINDOW_*`` variable, flag) is not valid; the text
    names the entry and the field."""


class EncodingDataError(CtxWindowError):
    """The packaged encoding files are missing, unreadable or fail their hash."""


class BudgetError(CtxWindowError, ValueError):
    """A budget cannot be honoured."""


class MessageTooLargeError(BudgetError):
    """A single message (or tool unit) is larger than the whole budget."""


class PinnedOverBudgetError(BudgetError):
    """Pinned entries and the system prompt alone exceed the budget."""


class OrphanToolResultError(CtxWindowError, ValueError):
    """A tool result arrived whose assistant call is not the open unit of the window."""


class InvalidRequestError(CtxWindowError, ValueError):
    """A request breaks its provider's rules; ``violations`` lists each broken rule
    (``ctxwindow.validate.Violation``), the text the first five."""

    def __init__(self, violations: Sequence[Any]) -> None:
        self.violations = tuple(violations)
        count = len(self.violations)
        listed = "; ".join(str(violation) for violation in self.violations[:5])
        more = f"; and {count - 5} more" if count > 5 else ""
        super().__init__(f"{count} broken rule{'s' if count != 1 else ''}: {listed}{more}")


class CompressionError(CtxWindowError):
    """A compressor or its completion endpoint failed; the text says how.

    Compressors that merely fall short of a target do not raise: they return
    their best effort and the caller compares the total with its budget.
    """


class SessionFullError(CtxWindowError):
    """A batch would take a session over the number of messages it may hold; nothing was stored."""


class StoreError(CtxWindowError):
    """A session store failed; the text says which store and what went wrong."""


class StoreInputError(StoreError, ValueError):
    """A store refused what it was given (a bad session id, entry or argument): nothing stored.

    Not a fault of the store: the caller must change the input (the service
    answers 400), where other ``StoreError``s are the store's own failures.
    """


class IdempotencyConflictError(CtxWindowError):
    """An idempotency key was used again with a different request; nothing was stored."""


class StoreUnavailableError(StoreError):
    """The store's server or file cannot be reached (connection refused, timeout)."""


class SessionBusyError(StoreError):
    """A session stayed locked by another holder for longer than the caller would wait."""
