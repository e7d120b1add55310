"""BEAM (a tier folder such as ``chats/100K``, or one chat folder) in the dataset format: one
conversation per chat.

A chat folder holds ``chat.json`` (or ``chat_trunecated.json``) and
``probing_questions/probing_questions.json``; ``beam_chats`` finds the chat
folders, ``from_beam`` reads them. The rendering is specified in
docs/eval.md, "Public benchmarks".
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Mapping
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import Any

from ctxwindow.eval.conversion import (
    Conversion,
    Malformed,
    check_kind,
    convert_items,
    parse_time,
    session_messages,
    value_of,
)
from ctxwindow.eval.dataset import DatasetError, read_json

# The (sic) truncated chat first: BEAM's own answer generation reads it where it exists, and
# every question's source_chat_ids lie inside it.
CHAT_FILES = ("chat_trunecated.json", "chat.json")
QUESTIONS_FILE = "probing_questions/probing_questions.json"
BEAM_TIME = "%B-%d-%Y"  # a time anchor, "March-15-2024"
# Where each ability keeps its reference answer (BEAM's own scoring reads the rubric instead).
ANSWER_KEYS = ("answer", "ideal_answer", "ideal_response", "ideal_summary", "expected_compliance")

_WHERE = "expected a BEAM tier folder such as chats/100K, or one chat folder"


def beam_chats(path: Path) -> list[dict[str, Any]]:
    """The chat folders of ``path``, as ``{"chat": id, "folder": Path}``; ``DatasetError`` if none.

    ``path`` is a chat folder (it has a chat file) or a tier folder, whose
    subfolders are its chats, in numeric order (``2`` before ``10``). A chat's
    id is ``"{tier}/{chat}"`` (``100K/3``), unique across tiers.
    """
    if not path.is_dir():
        what = "a file, not a folder" if path.is_file() else "no such folder"
        raise DatasetError(str(path), [f"{what}: {_WHERE}"])
    if is_chat_folder(path):
        folders = [path]
    else:
        folders = sorted(
            (p for p in path.iterdir() if p.is_dir() and not p.name.startswith(".")),
            key=_by_number,
        )
        if not any(is_chat_folder(folder) for folder in folders):
            files = " or ".join(CHAT_FILES)
            raise DatasetError(str(path), [f"no chat folder in it (one with {files}): {_WHERE}"])
    return [{"chat": _chat_id(folder), "folder": folder} for folder in folders]


def is_chat_folder(path: Path) -> bool:
    """Whether ``path`` holds a BEAM chat file."""
    return any((path / name).is_file() for name in CHAT_FILES)


def _by_number(folder: Path) -> tuple[int, int, str]:
    name = folder.name
    return (0, int(name), "") if name.isdigit() else (1, 0, name)


def _chat_id(folder: Path) -> str:
    folder = folder.resolve()
    return f"{folder.parent.name}/{folder.name}"


def from_beam(chats: list[Mapping[str, Any]], *, include_unanswerable: bool = False) -> Conversion:
    """Convert BEAM chat folders (as ``beam_chats`` lists them): one conversation per chat.

    Questions with no ``source_chat_ids`` (absent, as for every abstention
    question, or empty) cannot be measured and are counted in one note.
    ``include_unanswerable`` changes nothing: BEAM's unanswerable (abstention)
    questions are among those.
    """
    no_evidence: Counter[str] = Counter()
    convert = partial(_beam_chat, no_evidence=no_evidence)
    conversion = convert_items(chats, "chat", "chat", convert, _never, include_unanswerable)
    if no_evidence:
        counts = ", ".join(f"{ability} {n}" for ability, n in sorted(no_evidence.items()))
        conversion.notes.append(
            f"left out {sum(no_evidence.values())} question(s) with no source_chat_ids (absent "
            f"or empty), which evidence recall cannot measure: {counts}"
        )
    return conversion


def _never(question: Mapping[str, Any]) -> bool:
    return False


def _beam_chat(chat: Mapping[str, Any], no_evidence: Counter[str]) -> dict[str, Any]:
    chat_id, folder = chat["chat"], Path(chat["folder"])
    name = next((n for n in CHAT_FILES if (folder / n).is_file()), None)
    if name is None:
        raise Malformed(f"neither {' nor '.join(CHAT_FILES)} is in {folder}")
    messages = _messages(_read(folder, name), name)
    questions, unmeasured = _questions(_read(folder, QUESTIONS_FILE), chat_id)
    no_evidence.update(unmeasured)  # only once the whole chat has converted
    return {"id": chat_id, "messages": messages, "questions": questions}


def _read(folder: Path, name: str) -> Any:
    try:
        return read_json(folder / name)
    except DatasetError as exc:
        raise Malformed(f"{name}: {'; '.join(exc.problems)}") from exc


def _messages(chat: Any, name: str) -> list[dict[str, Any]]:
    """Every turn's messages in file order."""
    check_kind(chat, "a list", name)
    return [message for where, batch in _batches(chat, name) for message in _batch(batch, where)]


def _batch(batch: Any, where: str) -> list[dict[str, Any]]:
    """A batch's messages, all dated by its time anchor: the batch's, else its first message's."""
    turns = value_of(batch, "turns", "a list", where)
    anchor = value_of(batch, "time_anchor", "a string", where, optional=True)
    messages: list[dict[str, Any]] = []
    for t, turn in enumerate(turns):
        check_kind(turn, "a list", f"{where}'turns'[{t}]")
        for m, raw in enumerate(turn):
            message, own_anchor = _message(raw, f"{where}'turns'[{t}][{m}]: ")
            anchor = anchor or own_anchor
            messages.append(message)
    return session_messages(messages, "", _anchor_time(anchor))


def _batches(chat: list[Any], name: str) -> Iterator[tuple[str, Any]]:
    """``(where, batch)`` for each batch, also of the 10M tier's plans (``[{"plan-0": [...]}]``)."""
    for index, entry in enumerate(chat):
        plan = _plan(entry)
        if plan is None:
            yield f"{name}[{index}]: ", entry
            continue
        key, batches = plan
        for number, batch in enumerate(batches):
            yield f"{name}[{index}][{key!r}][{number}]: ", batch


def _plan(entry: Any) -> tuple[str, list[Any]] | None:
    """The name and batches of a plan: an object whose one value is the list of batches."""
    if isinstance(entry, Mapping) and "turns" not in entry and len(entry) == 1:
        ((key, batches),) = entry.items()
        if isinstance(key, str) and isinstance(batches, list):
            return key, batches
    return None


def _message(raw: Any, where: str) -> tuple[dict[str, Any], str | None]:
    """The message of a turn entry, and the time anchor the entry carries, if any."""
    message = {
        "id": str(value_of(raw, "id", "an integer", where)),
        "role": value_of(raw, "role", "a string", where),
        "content": value_of(raw, "content", "a string", where),
    }
    return message, value_of(raw, "time_anchor", "a string", where, optional=True)


def _anchor_time(anchor: str | None) -> datetime | None:
    return None if anchor is None else parse_time(anchor, BEAM_TIME)


def _questions(raw: Any, chat_id: str) -> tuple[list[dict[str, Any]], Counter[str]]:
    """The questions with evidence, ability by ability, and how many of each had none."""
    if not isinstance(raw, Mapping):
        raise Malformed(
            f"{QUESTIONS_FILE}: must be an object of abilities and their questions, "
            f"got {type(raw).__name__}"
        )
    questions: list[dict[str, Any]] = []
    no_evidence: Counter[str] = Counter()
    for ability, listed in raw.items():
        check_kind(listed, "a list", f"{QUESTIONS_FILE}: {ability!r}")
        for number, question in enumerate(listed, 1):
            where = f"{QUESTIONS_FILE}: {ability}[{number - 1}]: "
            converted = _question(question, f"{chat_id}:{ability}:{number}", ability, where)
            if converted["evidence"]:
                questions.append(converted)
            else:
                no_evidence[ability] += 1
    return questions, no_evidence


def _question(raw: Any, question_id: str, ability: str, where: str) -> dict[str, Any]:
    return {
        "id": question_id,
        "question": value_of(raw, "question", "a string", where),
        "answer": _answer(raw, where),
        "evidence": _evidence(raw, where),
        "category": ability,
    }


def _answer(raw: Mapping[str, Any], where: str) -> str:
    """The ability's reference answer, or ``""`` if the question has none."""
    for key in ANSWER_KEYS:
        answer = value_of(raw, key, "a string or a number", where, optional=True)
        if answer is not None:
            return str(answer)
    return ""


def _evidence(raw: Mapping[str, Any], where: str) -> list[str]:
    """The turn ids of ``source_chat_ids``: a list, or an object of lists (``first_statement``, …),
    whose entries are ids or lists of ids (one per event an ordering question names).

    >>> _evidence({"source_chat_ids": {"original_info": [4], "updated_info": [[8, 10], 4]}}, "")
    ['4', '8', '10']
    >>> _evidence({"question": "Where do I live?"}, "")
    []
    """
    value = raw.get("source_chat_ids")
    if value is None:
        return []
    what = f"{where}'source_chat_ids'"
    if isinstance(value, Mapping):
        parts = [(f"{what}[{key!r}]", part) for key, part in value.items()]
    else:
        parts = [(what, value)]
    ids: list[str] = []
    for at, part in parts:
        ids += [str(turn_id) for turn_id in _turn_ids(part, at)]
    return list(dict.fromkeys(ids))


def _turn_ids(part: Any, what: str) -> list[int]:
    expected = "a list of turn ids (or of lists of them), or an object of such lists"
    if not isinstance(part, list):
        raise Malformed(f"{what} must be {expected}, got {type(part).__name__}")
    ids = [turn_id for entry in part for turn_id in (entry if isinstance(entry, list) else [entry])]
    wrong = [i for i in ids if isinstance(i, bool) or not isinstance(i, int)]
    if wrong:
        raise Malformed(f"{what} must be {expected}; {wrong[0]!r} is not a turn id")
    return ids
