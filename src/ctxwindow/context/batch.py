"""A batch of messages stored at once: validated first, within the session's limit, and
its idempotency key bound to the request it first came with.

A retry with the same key and the same request is answered with what the
first one stored; the same key with another request is refused
(``IdempotencyConflictError``, nothing stored), as payment APIs do: a client
reusing a key by mistake must not get the answer to an earlier question.
The request is known by ``request_hash`` — of the caller's request (the
service hashes the whole body), or by default of the messages — kept in the
stored entries' metadata under ``"request_hash"``. Entries stored before
keys were bound carry none, and match any request.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any

from ctxwindow.errors import IdempotencyConflictError, SessionFullError
from ctxwindow.messages import Entry, Message, make_message

HASH_KEY = "request_hash"


def validated(messages: Sequence[Any]) -> list[Message]:
    """The messages of a batch, each validated (before anything else is done)."""
    return [make_message(message) for message in messages]


def check_room(stored: int, new: int, max_messages: int | None) -> None:
    """``SessionFullError`` if ``new`` messages take a session of ``stored`` over the limit."""
    if max_messages is not None and new and stored + new > max_messages:
        raise SessionFullError(f"the session would have over {max_messages} messages")


def batch_key(idempotency_key: str) -> str:
    """The store key of a batch: ``KEY:0``, the key its first message had when each
    message of a batch was stored on its own (so retries of those still find it)."""
    return f"{idempotency_key}:0"


def hash_of_messages(messages: Sequence[Message]) -> str:
    """The default request of a batch: its (validated) messages."""
    return request_hash(list(messages))


def request_hash(request: Any) -> str:
    """``"sha256:…"`` of ``request`` as canonical JSON (keys sorted, no spaces, UTF-8).

    What JSON has no form for (NaN, other objects) is hashed as Python writes it:
    the store refuses it later, the hash only has to be the same for the same request.

    >>> request_hash({"b": 1, "a": "東京"}) == request_hash({"a": "東京", "b": 1})
    True
    """
    canonical = json.dumps(
        request, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str
    )
    return "sha256:" + hashlib.sha256(canonical.encode("utf-8", "surrogatepass")).hexdigest()


def check_same_request(key: str, earlier: Sequence[Entry], request: str) -> None:
    """Refuse a request whose hash is not the one ``key`` was first stored with."""
    bound = earlier[0].metadata.get(HASH_KEY) if earlier else None
    if bound is not None and bound != request:
        raise IdempotencyConflictError(
            f"the idempotency key {key!r} was used before with another request; "
            "a retry must send the same request, a new request a new key"
        )
