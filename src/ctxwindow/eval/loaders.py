"""The public long-conversation benchmarks LoCoMo and LongMemEval as evaluation datasets.

``load_dataset("locomo:PATH")`` and ``load_dataset("longmemeval:PATH")`` come
here. The original file is turned into the dataset format of docs/eval.md
(conversations of messages with ``id`` and ``timestamp``, and their
questions), which ``parse_dataset`` then validates like any JSON dataset.
The rendering is specified in docs/eval.md, "Public benchmarks"; reference
figures and recall code depend on it, so it changes only on purpose.

What can be wrong, and what happens::

    the file cannot be read, or is not the benchmark's shape  -> DatasetError
    a sample / instance is malformed (a key missing, a wrong   -> a problem naming it and
      type)                                                       the key; DatasetError
                                                                  unless skip_invalid
    a question the benchmark itself leaves unmeasurable (no    -> always left out,
      evidence, evidence naming turns that do not exist)          with a note
    an unanswerable question (LoCoMo category 5,               -> left out, counted in one
      LongMemEval ``_abs``)                                       note, unless
                                                                  include_unanswerable
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from ctxwindow.eval.dataset import Dataset, DatasetError, parse_dataset, read_json

NOT_MENTIONED = "Not mentioned in the conversation"
"""The answer to a LoCoMo category 5 question: the one it baits is not in the conversation."""

_ANSWER = "a string or a number"

LOCOMO_CATEGORIES = {
    1: "multi-hop",
    2: "temporal",
    3: "open-domain",
    4: "single-hop",
    5: "adversarial",
}
LOCOMO_TIME = "%I:%M %p on %d %B, %Y"  # "1:56 pm on 8 May, 2023"
LONGMEMEVAL_TIME = "%Y/%m/%d (%a) %H:%M"  # "2023/05/20 (Sat) 02:21"

_SESSION = re.compile(r"session_(\d+)")
_EVIDENCE_SEPARATORS = re.compile(r"[;,\s]+")
# locomo10.json writes D11:26 once as "D:11:26"; the reference figures count it as D11:26.
_DIA_ID = re.compile(r"D:?(\d+):(\d+)")
# A marker key of each format, to recognize a file given under the other prefix.
_FORMATS = {
    "locomo": ("LoCoMo", "conversation"),
    "longmemeval": ("LongMemEval", "haystack_sessions"),
}
_KINDS: dict[str, Any] = {
    "a string": str,
    "a list": list,
    "an object": Mapping,
    "an integer": int,
    "a string or a number": (str, int, float),
}


class _Malformed(Exception):
    """The file, a sample or an instance is not the benchmark's shape; the text says where."""


@dataclass
class Conversion:
    """A benchmark file in the dataset format of docs/eval.md, and what was left out."""

    conversations: list[dict[str, Any]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # malformed samples or instances
    notes: list[str] = field(default_factory=list)  # questions left out on purpose
    unanswerable: int = 0  # unanswerable questions left out


def load_benchmark(
    spec: str, *, skip_invalid: bool = False, include_unanswerable: bool = False
) -> tuple[Dataset, list[str]]:
    """Load ``locomo:PATH`` or ``longmemeval:PATH``; returns the dataset and what was left out."""
    kind, _, path = spec.partition(":")
    convert = _CONVERTERS[kind]
    try:
        conversion = convert(read_json(Path(path)), include_unanswerable=include_unanswerable)
    except _Malformed as exc:
        raise DatasetError(spec, [str(exc)]) from exc
    if conversion.problems and not skip_invalid:
        raise DatasetError(spec, conversion.problems)
    data = {"conversations": conversion.conversations}
    dataset, invalid = parse_dataset(data, spec, skip_invalid=skip_invalid)
    return dataset, [*conversion.notes, *conversion.problems, *invalid]


# -- LoCoMo ----------------------------------------------------------------------


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
    samples = _items(data, "locomo")
    conversion = _convert(
        samples, "sample", "sample_id", _locomo_sample, _adversarial, include_unanswerable
    )
    if conversion.unanswerable:
        conversion.notes.append(
            f"left out {conversion.unanswerable} adversarial question(s) (category 5: no answer "
            "in the conversation); --include-unanswerable keeps them"
        )
    return conversion


def _locomo_sample(sample: Any) -> dict[str, Any]:
    sample_id = _get(sample, "sample_id", "a string")
    messages = _locomo_messages(_get(sample, "conversation", "an object"))
    questions = [
        _locomo_question(raw, f"{sample_id}:q{number}", f"qa[{number - 1}]: ")
        for number, raw in enumerate(_get(sample, "qa", "a list"), 1)
    ]
    return {"id": sample_id, "messages": messages, "questions": questions}


def _locomo_messages(conversation: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One message per turn, sessions in numeric order, a header on each session's first turn."""
    at = "conversation: "
    roles = {_get(conversation, "speaker_b", "a string", at): "assistant"}
    roles[_get(conversation, "speaker_a", "a string", at)] = "user"
    messages: list[dict[str, Any]] = []
    for number in _session_numbers(conversation):
        when = _get(conversation, f"session_{number}_date_time", "a string", at)
        turns = _get(conversation, f"session_{number}", "a list", at)
        session = [
            _locomo_turn(turn, roles, f"conversation.session_{number}[{position}]: ")
            for position, turn in enumerate(turns)
        ]
        messages += _session(
            session, f"[Session {number} - {when}]\n", _timestamp(when, LOCOMO_TIME)
        )
    return messages


def _session_numbers(conversation: Mapping[str, Any]) -> list[int]:
    return sorted(int(match[1]) for key in conversation if (match := _SESSION.fullmatch(key)))


def _locomo_turn(turn: Any, roles: Mapping[str, str], where: str) -> dict[str, Any]:
    speaker = _get(turn, "speaker", "a string", where)
    if speaker not in roles:
        raise _Malformed(f"{where}speaker {speaker!r} is neither speaker_a nor speaker_b")
    content = f"{speaker}: {_get(turn, 'text', 'a string', where)}"
    caption = _get(turn, "blip_caption", "a string", where, optional=True)
    if caption:
        content += f" [shares a photo: {caption}]"
    return {
        "id": _get(turn, "dia_id", "a string", where),
        "role": roles[speaker],
        "content": content,
    }


def _adversarial(question: Mapping[str, Any]) -> bool:
    return bool(question["category"] == "adversarial")


def _locomo_question(raw: Any, question_id: str, where: str) -> dict[str, Any]:
    category = _get(raw, "category", "an integer", where)
    if category not in LOCOMO_CATEGORIES:
        raise _Malformed(f"{where}'category' must be 1 to 5, got {category}")
    evidence = _get(raw, "evidence", "a list", where)
    return {
        "id": question_id,
        "question": _get(raw, "question", "a string", where),
        "answer": (
            NOT_MENTIONED
            if category == 5
            else str(_get(raw, "answer", "a string or a number", where))
        ),
        "evidence": _dia_ids(evidence, f"{where}evidence: "),
        "category": LOCOMO_CATEGORIES[category],
    }


def _dia_ids(entries: list[Any], where: str) -> list[str]:
    """Dialogue ids from the evidence list, repairing the original file's slips.

    >>> _dia_ids(["D8:6; D9:17", " D1:3 ", "D:11:26", "D1:3"], "")
    ['D8:6', 'D9:17', 'D1:3', 'D11:26']
    """
    if not all(isinstance(entry, str) for entry in entries):
        raise _Malformed(f"{where}must be a list of strings")
    tokens = [t for entry in entries for t in _EVIDENCE_SEPARATORS.split(entry) if t]
    ids = [f"D{m[1]}:{m[2]}" if (m := _DIA_ID.fullmatch(t)) else t for t in tokens]
    return list(dict.fromkeys(ids))


# -- LongMemEval -----------------------------------------------------------------


def from_longmemeval(data: Any, *, include_unanswerable: bool = False) -> Conversion:
    """Convert a parsed LongMemEval file: one conversation, with one question, per instance."""
    instances = _items(data, "longmemeval")
    conversion = _convert(
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
    question_id = _get(raw, "question_id", "a string")
    messages, evidence = _longmemeval_messages(raw)
    date = _get(raw, "question_date", "a string", optional=True)
    asked = None if date is None else _timestamp(date, LONGMEMEVAL_TIME)
    question = {
        "id": question_id,
        "question": _get(raw, "question", "a string"),
        "answer": str(_get(raw, "answer", "a string or a number")),
        "evidence": evidence,
        "category": _get(raw, "question_type", "a string"),
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
        messages += _session(session, header, _timestamp(date, LONGMEMEVAL_TIME))
    return messages, evidence


def _haystack(raw: Any) -> list[tuple[int, str, str, list[Any]]]:
    """``(index, session id, date, turns)`` per session: by date if every date parses."""
    ids = _get(raw, "haystack_session_ids", "a list")
    dates = _get(raw, "haystack_dates", "a list")
    sessions = _get(raw, "haystack_sessions", "a list")
    if not len(ids) == len(dates) == len(sessions):
        raise _Malformed(
            "'haystack_session_ids', 'haystack_dates' and 'haystack_sessions' differ in length "
            f"({len(ids)}, {len(dates)}, {len(sessions)})"
        )
    for index, (session_id, date, turns) in enumerate(zip(ids, dates, sessions, strict=True)):
        _check(session_id, "a string", f"haystack_session_ids[{index}]")
        _check(date, "a string", f"haystack_dates[{index}]")
        _check(turns, "a list", f"haystack_sessions[{index}]")
    times = [t for date in dates if (t := _timestamp(date, LONGMEMEVAL_TIME)) is not None]
    order = (
        sorted(range(len(ids)), key=times.__getitem__)
        if len(times) == len(ids)
        else range(len(ids))
    )
    return [(i, ids[i], dates[i], sessions[i]) for i in order]


def _longmemeval_turn(turn: Any, where: str) -> dict[str, Any]:
    role = _get(turn, "role", "a string", where)
    return {"role": role, "content": _get(turn, "content", "a string", where)}


# -- shared ----------------------------------------------------------------------


def _items(data: Any, kind: str) -> list[Any]:
    """The file's list of samples or instances; ``_Malformed`` unless it looks like ``kind``."""
    name, marker = _FORMATS[kind]
    if _looks_like(data, marker):
        return list(data)
    hint = "".join(
        f"; it looks like a {other} file: use {prefix}:PATH"
        for prefix, (other, key) in _FORMATS.items()
        if prefix != kind and _looks_like(data, key)
    )
    raise _Malformed(f"not a {name} file: expected a JSON list of objects with {marker!r}{hint}")


def _looks_like(data: Any, marker: str) -> bool:
    return isinstance(data, list) and any(isinstance(x, Mapping) and marker in x for x in data)


def _convert(
    items: list[Any],
    noun: str,
    id_key: str,
    convert_one: Callable[[Any], dict[str, Any]],
    unanswerable: Callable[[Mapping[str, Any]], bool],
    include_unanswerable: bool,
) -> Conversion:
    """Each item as a conversation of its measurable questions; malformed ones as problems."""
    conversion = Conversion()
    for index, item in enumerate(items):
        try:
            conversation = convert_one(item)
        except _Malformed as exc:
            name = item.get(id_key) if isinstance(item, Mapping) else None
            named = f" ({name!r})" if isinstance(name, str) else ""
            conversion.problems.append(f"{noun} {index}{named}: {exc}")
            continue
        skip = None if include_unanswerable else unanswerable
        _add_measurable(conversation, conversion, skip)
    return conversion


def _add_measurable(
    conversation: dict[str, Any],
    conversion: Conversion,
    skip: Callable[[Mapping[str, Any]], bool] | None,
) -> None:
    """Add ``conversation`` with the questions evidence recall can measure; note the others.

    ``skip`` says which unanswerable questions to leave out (only counted).
    """
    ids = {message["id"] for message in conversation["messages"]}
    kept = []
    for question in conversation["questions"]:
        note = _unmeasurable(question, ids)
        if skip is not None and skip(question):
            conversion.unanswerable += 1
        elif note is not None:
            conversion.notes.append(note)
        else:
            kept.append(question)
    if kept:
        conversion.conversations.append({**conversation, "questions": kept})


def _unmeasurable(question: Mapping[str, Any], ids: set[str]) -> str | None:
    """Why evidence recall cannot measure ``question``, or None if it can."""
    at = f"question {question['id']!r} ({question['category']})"
    if not question["evidence"]:
        return f"{at}: no evidence turn in the file; left out"
    missing = [e for e in question["evidence"] if e not in ids]
    if missing:
        return f"{at}: evidence {missing} not among the conversation's turns; left out"
    return None


def _session(messages: list[dict[str, Any]], header: str, when: datetime | None) -> list[Any]:
    """A session's messages: ``header`` before the first one's content, all with ``when``."""
    if messages:
        messages[0]["content"] = header + messages[0]["content"]
    if when is not None:
        for message in messages:
            message["timestamp"] = when.isoformat()
    return messages


def _timestamp(text: str, layout: str) -> datetime | None:
    try:
        return datetime.strptime(text.strip(), layout)
    except ValueError:
        return None


def _get(raw: Any, key: str, kind: str, where: str = "", *, optional: bool = False) -> Any:
    """``raw[key]`` if it is ``kind`` (None if absent and ``optional``), else ``_Malformed``."""
    if not isinstance(raw, Mapping):
        raise _Malformed(f"{where}must be an object, got {type(raw).__name__}")
    value = raw.get(key)
    if value is None and optional:
        return None
    if key not in raw:
        raise _Malformed(f"{where}{key!r} is missing")
    _check(value, kind, f"{where}{key!r}")
    return value


def _check(value: Any, kind: str, what: str) -> None:
    if isinstance(value, bool) or not isinstance(value, _KINDS[kind]):
        raise _Malformed(f"{what} must be {kind}, got {type(value).__name__}")


_CONVERTERS: dict[str, Callable[..., Conversion]] = {
    "locomo": from_locomo,
    "longmemeval": from_longmemeval,
}
