"""LongMemEval in the dataset format: one conversation, with its one question, per instance.

The rendering is specified in docs/eval.md, "Public benchmarks".
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

from ctxwindow.eval.conversion import (
    Conversion,
    Malformed,
    benchmark_items,
    check_kind,
    convert_items,
    parse_time,
    session_messages,
    value_of,
)

LONGMEMEVAL_TIME = "%Y/%m/%d (%a) %H:%M"  # "2023/05/20 (Sat) 02:21"


def from_longmemeval(data: Any, *, include_unanswerable: bool = False) -> Conversion:
    """Convert a parsed LongMemEval file: one conversation, with one question, per instance."""
    instances = benchmark_items(data, "longmemeval")
    conversion = convert_items(
        instances,
        "instance",
        "question_id",
        _longmemeval_instance,
        _abstention,
        include_unanswerable,
    )
    if conversion.unanswerable:
        conversion.notes.append(
            f"left out {conversion.unanswerable} abstention question(s) (question_id ending in "
            "_abs: no answer in the history); --include-unanswerable keeps them"
        )
    return conversion


def _abstention(question: Mapping[str, Any]) -> bool:
    return bool(question["id"].endswith("_abs"))


def _longmemeval_instance(raw: Any) -> dict[str, Any]:
    question_id = value_of(raw, "question_id", "a string")
    messages, evidence = _longmemeval_messages(raw)
    date = value_of(raw, "question_date", "a string", optional=True)
    asked = None if date is None else parse_time(date, LONGMEMEVAL_TIME)
    question = {
        "id": question_id,
        "question": value_of(raw, "question", "a string"),
        "answer": str(value_of(raw, "answer", "a string or a number")),
        "evidence": evidence,
        "category": value_of(raw, "question_type", "a string"),
        "date": date if asked is None else asked.isoformat(),
    }
    return {"id": question_id, "messages": messages, "questions": [question]}


def _longmemeval_messages(raw: Any) -> tuple[list[dict[str, Any]], list[str]]:
    """The haystack's messages, sessions by date, and the ids of the turns marked has_answer."""
    messages: list[dict[str, Any]] = []
    evidence: list[str] = []
    occurrences: Counter[str] = Counter()
    for index, session_id, date, turns in _haystack(raw):
        occurrences[session_id] += 1  # a session repeated in a history gets ids "S#2:1", …
        n = occurrences[session_id]
        prefix = session_id if n == 1 else f"{session_id}#{n}"
        session = []
        for number, turn in enumerate(turns, 1):
            where = f"haystack_sessions[{index}][{number - 1}]: "
            session.append({"id": f"{prefix}:{number}", **_longmemeval_turn(turn, where)})
            if turn.get("has_answer") is True:
                evidence.append(f"{prefix}:{number}")
        header = f"[Session {session_id} - {date}]\n"
        messages += session_messages(session, header, parse_time(date, LONGMEMEVAL_TIME))
    return messages, evidence


def _haystack(raw: Any) -> list[tuple[int, str, str, list[Any]]]:
    """``(index, session id, date, turns)`` per session: by date if every date parses."""
    ids = value_of(raw, "haystack_session_ids", "a list")
    dates = value_of(raw, "haystack_dates", "a list")
    sessions = value_of(raw, "haystack_sessions", "a list")
    if not len(ids) == len(dates) == len(sessions):
        raise Malformed(
            "'haystack_session_ids', 'haystack_dates' and 'haystack_sessions' differ in length "
            f"({len(ids)}, {len(dates)}, {len(sessions)})"
        )
    for index, (session_id, date, turns) in enumerate(zip(ids, dates, sessions, strict=True)):
        check_kind(session_id, "a string", f"haystack_session_ids[{index}]")
        check_kind(date, "a string", f"haystack_dates[{index}]")
        check_kind(turns, "a list", f"haystack_sessions[{index}]")
    times = [t for date in dates if (t := parse_time(date, LONGMEMEVAL_TIME)) is not None]
    order = (
        sorted(range(len(ids)), key=times.__getitem__)
        if len(times) == len(ids)
        else range(len(ids))
    )
    return [(i, ids[i], dates[i], sessions[i]) for i in order]


def _longmemeval_turn(turn: Any, where: str) -> dict[str, Any]:
    role = value_of(turn, "role", "a string", where)
    return {"role": role, "content": value_of(turn, "content", "a string", where)}
