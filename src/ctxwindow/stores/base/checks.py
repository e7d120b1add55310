"""What every store checks and shares: input checks, entry JSON, URLs in errors."""

from __future__ import annotations

import dataclasses
import json
import math
import re
from collections.abc import Sequence
from typing import Any
from urllib.parse import unquote, urlsplit

import orjson

from ctxwindow.errors import StoreInputError
from ctxwindow.messages import Entry

MAX_SESSION_ID = 256
MAX_COUNT = 2**63 - 1  # the largest integer every backend holds (SQLite, PostgreSQL bigint)
MAX_DEPTH = 100  # lists and dicts in one message or metadata, each inside the last
MAX_CHECKPOINT = 64 * 2**20  # bytes of one checkpoint: 64 MiB, far below every backend's limit

Checkpoint = tuple[int, bytes]  # (seq, data): a session's window state through entry seq


@dataclasses.dataclass(frozen=True)
class Earlier:
    """What a bounded cold load needs of a session's entries before a seq (``earlier``).

    ``kept``: those a window keeps at any budget (pinned entries and system
    messages), in order; ``entries`` and ``tokens``: how many the others are
    and their stored tokens (a report counts them as left out, ``earlier``).
    """

    kept: list[Entry]
    entries: int
    tokens: int

    @classmethod
    def of_all(cls, kept: list[Entry], count: int, tokens: int) -> Earlier:
        """From ``kept`` and the count and stored tokens of *all* the entries before (kept
        ones included): what a backend that sums in place has."""
        return cls(kept, count - len(kept), tokens - sum(entry.tokens for entry in kept))


def kept_always(entry: Entry) -> bool:
    """Whether a window keeps ``entry`` at any budget: pinned, or a system message."""
    return entry.pinned or entry.message.get("role") == "system"


def earlier_of(entries: Sequence[Entry], into: Earlier | None = None) -> Earlier:
    """``Earlier`` of ``entries`` (added to ``into``: a backend that reads them in pages)."""
    kept = [entry for entry in entries if kept_always(entry)]
    others = len(entries) - len(kept)
    tokens = sum(entry.tokens for entry in entries) - sum(entry.tokens for entry in kept)
    if into is None:
        return Earlier(kept, others, tokens)
    return Earlier([*into.kept, *kept], into.entries + others, into.tokens + tokens)


# What no store can keep: NUL (PostgreSQL refuses it in text and JSON) and lone
# surrogates (text that has no UTF-8 form). Every store refuses both, so that a
# session moves between stores unchanged.


def check_session_id(session_id: str) -> str:
    """Session ids are non-empty strings of at most 256 characters, without NUL or lone
    surrogates."""
    if not isinstance(session_id, str) or not session_id or len(session_id) > MAX_SESSION_ID:
        raise StoreInputError(
            f"a session id must be a non-empty string of at most {MAX_SESSION_ID} characters"
        )
    check_text("a session id", session_id)
    return session_id


def check_text(what: str, text: str) -> None:
    """``StoreInputError`` naming ``what`` if ``text`` holds a character no store can keep."""
    why = unstorable(text)
    if why is not None:
        raise StoreInputError(f"{what} {why}")


def unstorable(text: str) -> str | None:
    """Why no store can keep ``text`` (NUL, a lone surrogate), or None if one can."""
    if "\x00" in text:
        return "holds a NUL character (U+0000), which PostgreSQL cannot store: no store keeps it"
    if text.isascii():
        return None
    try:
        text.encode("utf-8")  # only a lone surrogate has no UTF-8 form
    except UnicodeEncodeError as exc:
        return f"holds a lone surrogate (U+{ord(text[exc.start]):04X}), which is not Unicode text"
    return None


def find_unstorable(value: Any, max_depth: int = MAX_DEPTH) -> tuple[list[Any], str] | None:
    """The path to the first thing in ``value`` no store can keep, and why; None if none.

    Looks at every string (dict keys too) for NUL and lone surrogates, at
    floats (NaN and infinities are not JSON) and at how deep lists and dicts
    nest. Iterative, so a deep value cannot exhaust the stack; each list or
    dict is looked at once, so a shared or circular one costs nothing more.
    """
    why = _leaf_problem(value)
    if why is not None:
        return [], why
    stack: list[tuple[Any, list[Any]]] = []
    seen: set[int] = set()
    _push(value, [], stack, seen)
    while stack:
        item, path = stack.pop()
        if len(path) >= max_depth:
            return path, f"nests lists and objects deeper than {max_depth} levels"
        for key, child in item.items() if isinstance(item, dict) else enumerate(item):
            if isinstance(key, str) and (why := unstorable(key)) is not None:
                return [*path, key], f"is a key that {why}"
            why = _leaf_problem(child)
            if why is not None:
                return [*path, key], why
            _push(child, [*path, key], stack, seen)
    return None


def _leaf_problem(value: Any) -> str | None:
    if isinstance(value, str):
        return unstorable(value)
    if isinstance(value, float) and not math.isfinite(value):
        return f"is {value!r}, which is not a JSON number"
    return None


def _push(value: Any, path: list[Any], stack: list[tuple[Any, list[Any]]], seen: set[int]) -> None:
    """Put a list or dict not seen yet on the stack (a shared one is looked at once)."""
    if isinstance(value, (dict, list, tuple)) and id(value) not in seen:
        seen.add(id(value))
        stack.append((value, path))


def entry_to_json(entry: Entry) -> str:
    """One entry as a JSON document (what durable stores write)."""
    return json.dumps(
        {
            "id": entry.id,
            "seq": entry.seq,
            "message": entry.message,
            "tokens": entry.tokens,
            "pinned": entry.pinned,
            "priority": entry.priority,
            "kind": entry.kind,
            "created_at": entry.created_at,
            "metadata": entry.metadata,
        },
        ensure_ascii=False,
        separators=(",", ":"),
    )


_LONG = 2.0**63
"""orjson reads an integer beyond 64 bits as a float, of at least this size."""


def entry_from_json(text: str | bytes) -> Entry:
    """The entry ``entry_to_json`` wrote.

    orjson reads it (stores and archives decode entries on every load and
    search), unless what it read holds a float of 2**63 or more: orjson turns
    an integer beyond 64 bits into such a float, so that text is read again by
    ``json``, which keeps the integer whole. Looking at what was read costs the
    same whatever the text's length (a scan of the text for long digit runs
    cost 2.5 µs for a chat turn, 11 µs for a 2,000-character one).
    """
    data: dict[str, Any] = orjson.loads(text)
    if _holds_long_float(data):
        data = json.loads(text)
    return Entry(
        message=data["message"],
        tokens=data["tokens"],
        seq=data["seq"],
        id=data["id"],
        pinned=data["pinned"],
        priority=data["priority"],
        kind=data["kind"],
        created_at=data["created_at"],
        metadata=data["metadata"],
    )


def _holds_long_float(data: Any) -> bool:
    """Whether a float of 2**63 or more (or not a number) is anywhere in an entry's
    document: in its fields, its message or its metadata."""
    if type(data) is not dict:
        return False  # not an entry's document: reading its fields says so
    for value in data.values():
        kind = type(value)
        if kind is float:
            if not -_LONG < value < _LONG:
                return True
        elif (kind is dict or kind is list) and value and _nested_long_float(value):
            return True
    return False


def _nested_long_float(value: dict[str, Any] | list[Any]) -> bool:
    stack: list[Any] = [value]
    while stack:
        item = stack.pop()
        kind = type(item)
        if kind is dict:
            for child in item.values():
                if type(child) is not str:  # most of a message: nothing to look at
                    stack.append(child)
        elif kind is list:
            stack.extend(item)
        elif kind is float and not -_LONG < item < _LONG:
            return True
    return False


def check_timeout(timeout: float | None) -> None:
    if timeout is not None and (
        isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout >= 0
    ):
        raise StoreInputError(f"a lock timeout must be None or seconds >= 0, got {timeout!r}")


# -- shared by every store: input checks, and URLs in error messages ---------------


def check_entries(entries: Sequence[Entry]) -> None:
    """Raise ``StoreInputError`` unless ``entries`` is a sequence of entries a store can keep.

    Shared by the stores so that they reject the same input with the same words:
    each item is an ``Entry`` with a non-empty string id (unique in the batch),
    a message dict, a non-negative integer token count and a finite numeric
    ``created_at``; its id, message and metadata hold nothing a store cannot
    keep (see ``find_unstorable``).
    """
    if not isinstance(entries, Sequence) or isinstance(entries, (str, bytes)):
        raise StoreInputError(f"append takes a sequence of entries, got {type(entries).__name__}")
    seen: set[str] = set()
    for i, entry in enumerate(entries):
        if not isinstance(entry, Entry):
            raise StoreInputError(
                f"entries[{i}]: a store keeps Entry objects, got {type(entry).__name__}"
            )
        if not isinstance(entry.id, str) or not entry.id:
            raise StoreInputError(f"entries[{i}]: an entry id must be a non-empty string")
        check_text(f"entries[{i}]: the entry id", entry.id)
        if entry.id in seen:
            raise StoreInputError(f"entries[{i}]: entry id {entry.id!r} appears twice in the batch")
        seen.add(entry.id)
        if not isinstance(entry.message, dict):
            raise StoreInputError(f"entries[{i}]: the message must be a dict")
        if type(entry.tokens) is not int or entry.tokens < 0:
            raise StoreInputError(
                f"entries[{i}]: tokens must be a non-negative int, got {entry.tokens!r}"
            )
        if (
            isinstance(entry.created_at, bool)
            or not isinstance(entry.created_at, (int, float))
            or not math.isfinite(entry.created_at)
        ):
            raise StoreInputError(f"entries[{i}]: created_at must be a finite number of seconds")
        _check_document(f"entries[{i}].message", entry.message)
        _check_document(f"entries[{i}].metadata", entry.metadata)


def _check_document(where: str, value: Any) -> None:
    bad = find_unstorable(value)
    if bad is not None:
        path, why = bad
        raise StoreInputError(f"{where}{''.join(f'[{key!r}]' for key in path)} {why}")


def encode_entry(entry: Entry, seq: int) -> str:
    """The JSON document of ``entry`` stored at ``seq``; ``StoreInputError`` if not JSON."""
    try:
        return entry_to_json(dataclasses.replace(entry, seq=seq))
    except (TypeError, ValueError) as exc:
        raise StoreInputError(f"entry {entry.id!r} cannot be stored as JSON: {exc}") from exc


def check_idempotency_key(key: str | None) -> None:
    if key is not None:
        check_replay_key(key)


def check_last(last: object) -> None:
    """``append_after``'s ``last``: an entry's ``(seq, id)``, or ``(0, "")`` for none."""
    ok = (
        isinstance(last, tuple) and len(last) == 2
        and isinstance(last[0], int) and not isinstance(last[0], bool) and last[0] >= 0
        and isinstance(last[1], str) and (last[0] == 0) == (last[1] == "")
    )  # fmt: skip
    if not ok:
        raise StoreInputError(
            f'last must be the newest entry\'s (seq, id), or (0, "") for none; got {last!r}'
        )


def check_replay_key(key: str) -> None:
    """``replayed`` needs a key (``append`` also takes None: no key)."""
    if not isinstance(key, str) or not key:
        raise StoreInputError("an idempotency key must be a non-empty string")
    check_text("an idempotency key", key)


def check_prefix(prefix: str | None) -> str:
    """A ``sessions(prefix=…)`` argument: None or a string; returns the prefix ("" for all)."""
    if prefix is not None and not isinstance(prefix, str):
        raise StoreInputError("a session prefix must be a string")
    check_text("a session prefix", prefix or "")
    return prefix or ""


def check_cursor(after: str | None) -> None:
    """A ``sessions(after=…)`` cursor: None or a string, the last id of the previous page.

    Any string is a cursor (the ids listed are those above it), not only an
    id that exists: a page may end on a session deleted since.
    """
    if after is not None and not isinstance(after, str):
        raise StoreInputError(
            f"after must be None or a session id (a string), got {type(after).__name__}"
        )
    check_text("after", after or "")


def check_page_size(limit: int | None) -> None:
    """A ``sessions(limit=…)`` argument: None (every id) or an int from 1 to 2**63 - 1."""
    if limit is not None and (type(limit) is not int or limit < 1):
        raise StoreInputError(f"limit must be None or a positive int, got {limit!r}")
    check_count("limit", limit)


def page_start(prefix: str, after: str | None) -> tuple[str, bool]:
    """Where a page of ``sessions(prefix, after)`` starts: ``(bound, inclusive)``.

    The ids listed are those starting with ``prefix`` and above ``after``: the
    page starts at ``prefix`` itself (inclusive) unless ``after`` is at or
    past it (then just above ``after``). Strings compare by code point, which
    is the order of their UTF-8 bytes: every backend orders ids alike.
    """
    if after is not None and after >= prefix:
        return after, False
    return prefix, True


def prefix_end(prefix: str) -> str | None:
    """The smallest string above every string starting with ``prefix`` (None: no bound).

    SQLite and PostgreSQL (``COLLATE "C"``) compare text as UTF-8 bytes, which
    orders like code points.
    """
    chars = list(prefix)
    while chars:
        following = ord(chars.pop()) + 1
        if following == 0xD800:  # skip the surrogates, which UTF-8 cannot encode
            following = 0xE000
        if following <= 0x10FFFF:
            return "".join(chars) + chr(following)
    return None


def check_count(name: str, value: int | None) -> None:
    if value is not None and (type(value) is not int or value < 0):
        raise StoreInputError(f"{name} must be a non-negative int, got {value!r}")
    if value is not None and value > MAX_COUNT:
        raise StoreInputError(f"{name} must be at most 2**63 - 1, got {value!r}")


def check_after(after: int) -> None:
    """A ``truncate`` cut: an int >= 0 (``check_count`` also lets None through)."""
    if after is None:
        raise StoreInputError("after must be a non-negative int, got None")
    check_count("after", after)


def check_checkpoint(seq: int, data: bytes) -> bytes:
    """A ``save_checkpoint`` argument pair: ``seq`` a count, ``data`` at most 64 MiB of bytes.

    Returns ``data`` as ``bytes`` (a copy of a ``bytearray`` or ``memoryview``,
    so the caller may reuse its buffer).
    """
    check_count("seq", seq)
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise StoreInputError(f"checkpoint data must be bytes, got {type(data).__name__}")
    data = bytes(data)
    if len(data) > MAX_CHECKPOINT:
        raise StoreInputError(
            f"checkpoint data must be at most {MAX_CHECKPOINT // 2**20} MiB"
            f" ({MAX_CHECKPOINT} bytes), got {len(data)} bytes"
        )
    return data


_PASSWORD_PARAM = re.compile(r"(?i)(\bpassword\s*=\s*)('(?:[^'\\]|\\.)*'|[^\s&]*)")


def redact_url(url: str) -> str:
    """The URL with its password (in the user info or a ``password=`` parameter) as ``***``."""
    parts = urlsplit(url)
    if parts.password is not None:
        user, host = parts.username or "", parts.netloc.rpartition("@")[2]
        url = parts._replace(netloc=f"{user}:***@{host}").geturl()
    return _PASSWORD_PARAM.sub(r"\1***", url)


def scrub(text: str, url: str) -> str:
    """``text`` (an error message) without the passwords that ``url`` holds."""
    secrets = [urlsplit(url).password or ""]
    secrets += [match.group(2).strip("'") for match in _PASSWORD_PARAM.finditer(url)]
    text = text.replace(url, redact_url(url))
    for secret in {s for raw in secrets for s in (raw, unquote(raw)) if len(s) > 2}:
        text = text.replace(secret, "***")  # shorter ones would mangle ordinary words
    return text
