"""LoCoMo (``locomo10.json``) in the dataset format: one conversation per sample.

The rendering is specified in docs/eval.md, "Public benchmarks".
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from ctxwindow.eval.conversion import (
    Conversion,
    Malformed,
    benchmark_items,
    convert_items,
    parse_time,
    session_messages,
    value_of,
)

NOT_MENTIONED = "Not mentioned in the conversation"
"""The answer to a LoCoMo category 5 question: the one it baits is not in the conversation."""

LOCOMO_CATEGORIES = {
    1: "multi-hop",
    2: "temporal",
    3: "open-domain",
    4: "single-hop",
    5: "adversarial",
}
LOCOMO_TIME = "%I:%M %p on %d %B, %Y"  # "1:56 pm on 8 May, 2023"

_SESSION = re.compile(r"session_(\d+)")
_EVIDENCE_SEPARATORS = re.compile(r"[;,\s]+")
# locomo10.json writes D11:26 once as "D:11:26" (the reference figures count it as D11:26),
# and a turn number with a leading zero ("D30:05") names no turn: both are read as numbers.
_DIA_ID = re.compile(r"D:?(\d+):(\d+)")


def from_locomo(data: Any, *, include_unanswerable: bool = False) -> Conversion:
    """Convert a parsed LoCoMo file (``locomo10.json``): one conversation per sample.

    >>> sample = {"sample_id": "s1", "conversation": {
    ...     "speaker_a": "Ann", "speaker_b": "Bo",
    ...     "session_1_date_time": "1:56 pm on 8 May, 2023",
    ...     "session_1": [{"speaker": "Bo", "dia_id": "D1:1", "text": "Hi!"}]},
    ...     "qa": [{"question": "Who?", "answer": "Bo", "evidence": ["D1:1"], "category": 4}]}
    >>> conversation = from_locomo([sample]).conversations[0]
    >>> message = conversation["messages"][0]
    >>> print(message["role"], message["timestamp"])
    assistant 2023-05-08T13:56:00
    >>> print(message["content"])
    [Session 1 - 1:56 pm on 8 May, 2023]
    Bo: Hi!
    >>> conversation["questions"][0]["id"], conversation["questions"][0]["category"]
    ('s1:q1', 'single-hop')
    """
    samples = benchmark_items(data, "locomo")
    conversion = convert_items(
        samples, "sample", "sample_id", _locomo_sample, _adversarial, include_unanswerable
    )
    if conversion.unanswerable:
        conversion.notes.append(
            f"left out {conversion.unanswerable} adversarial question(s) (category 5: no answer "
            "in the conversation); --include-unanswerable keeps them"
        )
    return conversion


def _locomo_sample(sample: Any) -> dict[str, Any]:
    sample_id = value_of(sample, "sample_id", "a string")
    messages = _locomo_messages(value_of(sample, "conversation", "an object"))
    questions = [
        _locomo_question(raw, f"{sample_id}:q{number}", f"qa[{number - 1}]: ")
        for number, raw in enumerate(value_of(sample, "qa", "a list"), 1)
    ]
    return {"id": sample_id, "messages": messages, "questions": questions}


def _locomo_messages(conversation: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One message per turn, sessions in numeric order, a header on each session's first turn."""
    at = "conversation: "
    roles = {value_of(conversation, "speaker_b", "a string", at): "assistant"}
    roles[value_of(conversation, "speaker_a", "a string", at)] = "user"
    messages: list[dict[str, Any]] = []
    for number in _session_numbers(conversation):
        when = value_of(conversation, f"session_{number}_date_time", "a string", at)
        turns = value_of(conversation, f"session_{number}", "a list", at)
        session = [
            _locomo_turn(turn, roles, f"conversation.session_{number}[{position}]: ")
            for position, turn in enumerate(turns)
        ]
        messages += session_messages(
            session, f"[Session {number} - {when}]\n", parse_time(when, LOCOMO_TIME)
        )
    return messages


def _session_numbers(conversation: Mapping[str, Any]) -> list[int]:
    return sorted(int(match[1]) for key in conversation if (match := _SESSION.fullmatch(key)))


def _locomo_turn(turn: Any, roles: Mapping[str, str], where: str) -> dict[str, Any]:
    speaker = value_of(turn, "speaker", "a string", where)
    if speaker not in roles:
        raise Malformed(f"{where}speaker {speaker!r} is neither speaker_a nor speaker_b")
    content = f"{speaker}: {value_of(turn, 'text', 'a string', where)}"
    caption = value_of(turn, "blip_caption", "a string", where, optional=True)
    if caption:
        content += f" [shares a photo: {caption}]"
    return {
        "id": value_of(turn, "dia_id", "a string", where),
        "role": roles[speaker],
        "content": content,
    }


def _adversarial(question: Mapping[str, Any]) -> bool:
    return bool(question["category"] == "adversarial")


def _locomo_question(raw: Any, question_id: str, where: str) -> dict[str, Any]:
    category = value_of(raw, "category", "an integer", where)
    if category not in LOCOMO_CATEGORIES:
        raise Malformed(f"{where}'category' must be 1 to 5, got {category}")
    evidence = value_of(raw, "evidence", "a list", where)
    return {
        "id": question_id,
        "question": value_of(raw, "question", "a string", where),
        "answer": (
            NOT_MENTIONED
            if category == 5
            else str(value_of(raw, "answer", "a string or a number", where))
        ),
        "evidence": _dia_ids(evidence, f"{where}evidence: "),
        "category": LOCOMO_CATEGORIES[category],
    }


def _dia_ids(entries: list[Any], where: str) -> list[str]:
    """Dialogue ids from the evidence list, repairing the original file's slips.

    >>> _dia_ids(["D8:6; D9:17", " D1:3 ", "D:11:26", "D1:3", "D30:05"], "")
    ['D8:6', 'D9:17', 'D1:3', 'D11:26', 'D30:5']
    """
    if not all(isinstance(entry, str) for entry in entries):
        raise Malformed(f"{where}must be a list of strings")
    tokens = [t for entry in entries for t in _EVIDENCE_SEPARATORS.split(entry) if t]
    ids = [f"D{int(m[1])}:{int(m[2])}" if (m := _DIA_ID.fullmatch(t)) else t for t in tokens]
    return list(dict.fromkeys(ids))
