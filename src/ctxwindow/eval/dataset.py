"""Evaluation datasets: loading, validation, and the cases a strategy is asked about.

The format (JSON, or JSON Lines with one conversation per line) is documented
in docs/eval.md. ``load_dataset`` (in ``ctxwindow.eval.loaders``) reads a file,
a built-in dataset, or the files of a public benchmark (``locomo:PATH``,
``longmemeval:PATH``, ``beam:PATH``).
Validation collects every problem, each naming the conversation, message or
question and what is wrong; by default any problem stops the run before anything is measured, and
with ``skip_invalid`` the invalid conversations and questions are left out and
reported.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ctxwindow._moved import warn_moved
from ctxwindow.errors import CtxWindowError, InvalidMessageError
from ctxwindow.messages import Message, tool_call_ids, validate_message

if TYPE_CHECKING:  # its old import path (see ``__getattr__``)
    from ctxwindow.eval.loaders import load_dataset as load_dataset

# Keys of a dataset message that are ours, not the chat wire format.
DATASET_KEYS = ("id", "timestamp")
_MOVED = ("load_dataset",)  # to ctxwindow.eval.loaders, with the benchmarks it reads


class DatasetError(CtxWindowError, ValueError):
    """A dataset cannot be used; ``problems`` lists everything that is wrong."""

    def __init__(self, source: str, problems: Sequence[str]) -> None:
        self.problems = list(problems)
        shown = "\n  ".join(self.problems[:20])
        more = f"\n  ... and {len(self.problems) - 20} more" if len(self.problems) > 20 else ""
        super().__init__(f"{source}: {len(self.problems)} problem(s):\n  {shown}{more}")


@dataclass(frozen=True)
class Question:
    id: str
    question: str
    answer: str
    evidence: tuple[str, ...]
    after: str | None = None
    category: str | None = None
    date: str | None = None  # when the question is asked; kept for the record, not used


@dataclass(frozen=True)
class Conversation:
    id: str
    messages: tuple[Message, ...]  # wire format, dataset keys removed
    message_ids: tuple[str, ...]
    questions: tuple[Question, ...]

    def history(self, question: Question) -> list[tuple[str, Message]]:
        """The ``(id, message)`` pairs seen before ``question`` is asked."""
        end = self.seen(question)
        return list(zip(self.message_ids[:end], self.messages[:end], strict=True))

    def seen(self, question: Question) -> int:
        """How many messages have been seen when ``question`` is asked."""
        if question.after is None:
            return len(self.messages)
        return self.message_ids.index(question.after) + 1


@dataclass(frozen=True)
class Dataset:
    name: str
    conversations: tuple[Conversation, ...]

    @property
    def n_questions(self) -> int:
        return sum(len(c.questions) for c in self.conversations)


def read_json(path: Path) -> Any:
    """The parsed JSON (or JSON Lines) file; ``DatasetError`` naming the file if it cannot be."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise DatasetError(str(path), [f"cannot read the file: {exc}"]) from exc
    if path.suffix == ".jsonl":
        lines = [(n, line) for n, line in enumerate(text.splitlines(), 1) if line.strip()]
        return {"conversations": [_json(line, f"{path}:{n}") for n, line in lines]}
    return _json(text, str(path))


def _json(text: str, where: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise DatasetError(where, [f"not valid JSON: {exc}"]) from exc


def parse_dataset(data: Any, name: str, *, skip_invalid: bool = False) -> tuple[Dataset, list[str]]:
    """Validate a dataset given as parsed JSON; raise ``DatasetError`` unless ``skip_invalid``."""
    if isinstance(data, list):
        data = {"conversations": data}
    if not isinstance(data, Mapping) or not isinstance(data.get("conversations"), list):
        raise DatasetError(name, ['expected an object {"conversations": [...]}'])
    problems: list[str] = []
    conversations: list[Conversation] = []
    seen: set[str] = set()
    for index, raw in enumerate(data["conversations"]):
        conversation = _conversation(raw, index, seen, problems, skip_invalid)
        if conversation is not None:
            conversations.append(conversation)
    if problems and not skip_invalid:
        raise DatasetError(name, problems)
    if not any(c.questions for c in conversations):
        raise DatasetError(name, [*problems, "no valid question to evaluate"])
    return Dataset(name, tuple(conversations)), problems


def _conversation(
    raw: Any, index: int, seen: set[str], problems: list[str], skip_invalid: bool
) -> Conversation | None:
    if not isinstance(raw, Mapping):
        problems.append(f"conversation {index}: must be an object")
        return None
    cid = raw.get("id")
    where = f"conversation {cid!r}" if isinstance(cid, str) else f"conversation {index}"
    before = len(problems)
    if not isinstance(cid, str) or not cid:
        problems.append(f"{where}: needs a string 'id'")
    elif cid in seen:
        problems.append(f"{where}: duplicate conversation id")
    seen.add(str(cid))
    ids, messages, open_at = _messages(raw.get("messages"), where, problems)
    if len(problems) > before:
        return None  # questions cannot be judged against broken messages
    questions: list[Question] = []
    for qindex, rawq in enumerate(raw.get("questions") or []):
        taken = {q.id for q in questions}
        question = _question(rawq, qindex, (ids, open_at), where, problems, taken)
        if question is not None:
            questions.append(question)
    if len(problems) > before and not skip_invalid:
        return None
    return Conversation(str(cid), tuple(messages), tuple(ids), tuple(questions))


def _messages(
    raw: Any, where: str, problems: list[str]
) -> tuple[list[str], list[Message], set[str]]:
    """Valid messages with their ids, and the ids after which tool results are still due."""
    if not isinstance(raw, list) or not raw:
        problems.append(f"{where}: 'messages' must be a non-empty list")
        return [], [], set()
    ids: list[str] = []
    seen: set[str] = set()  # a list lookup would be quadratic: benchmark histories are long
    messages: list[Message] = []
    open_at: set[str] = set()
    pending: set[str] = set()
    for index, message in enumerate(raw):
        at = f"{where}, message {index}"
        if not isinstance(message, Mapping):
            problems.append(f"{at}: must be an object")
            continue
        mid = message.get("id")
        at = f"{where}, message {mid!r}" if isinstance(mid, str) else at
        if not isinstance(mid, str) or not mid:
            problems.append(f"{at}: needs a string 'id'")
        elif mid in seen:
            problems.append(f"{at}: duplicate message id")
        wire = {k: v for k, v in message.items() if k not in DATASET_KEYS}
        try:
            validate_message(wire, where=at)
        except InvalidMessageError as exc:
            problems.append(str(exc))
            continue
        pending = _check_tool_order(wire, pending, at, problems)
        ids.append(str(mid))
        seen.add(str(mid))
        messages.append(wire)
        if pending:
            open_at.add(str(mid))
    if pending:
        problems.append(f"{where}: tool calls {sorted(pending)} have no results at the end")
    return ids, messages, open_at


def _check_tool_order(
    message: Message, pending: set[str], at: str, problems: list[str]
) -> set[str]:
    """Tool results must follow their call; returns the calls still waiting for results."""
    if message["role"] == "tool":
        if message["tool_call_id"] not in pending:
            problems.append(
                f"{at}: tool result for {message['tool_call_id']!r} does not follow its call"
            )
        return pending - {message["tool_call_id"]}
    if pending:
        problems.append(f"{at}: tool calls {sorted(pending)} have no results before this message")
    return set(tool_call_ids(message))


def _question(
    raw: Any,
    index: int,
    known: tuple[list[str], set[str]],
    where: str,
    problems: list[str],
    taken: set[str],
) -> Question | None:
    at = f"{where}, question {index}"
    if not isinstance(raw, Mapping):
        problems.append(f"{at}: must be an object")
        return None
    qid = raw.get("id")
    at = f"{where}, question {qid!r}" if isinstance(qid, str) else at
    found = _question_problems(raw, qid, known, taken)
    problems.extend(f"{at}: {problem}" for problem in found)
    if found:
        return None
    return Question(
        id=str(qid),
        question=raw["question"],
        answer=raw.get("answer", ""),
        evidence=tuple(raw["evidence"]),
        after=raw.get("after"),
        category=raw.get("category"),
        date=raw.get("date"),
    )


def _question_problems(
    raw: Mapping[str, Any], qid: Any, known: tuple[list[str], set[str]], taken: set[str]
) -> list[str]:
    ids, open_at = known
    found = []
    if not isinstance(qid, str) or not qid:
        found.append("needs a string 'id'")
    elif qid in taken:
        found.append("duplicate question id")
    if not isinstance(raw.get("question"), str) or not raw["question"].strip():
        found.append("needs a non-empty 'question'")
    if not isinstance(raw.get("answer", ""), str):
        found.append("'answer' must be a string")
    if not isinstance(raw.get("category", ""), str | None):
        found.append("'category' must be a string")
    if not isinstance(raw.get("date", ""), str | None):
        found.append("'date' must be a string")
    evidence = raw.get("evidence")
    if (
        not isinstance(evidence, list)
        or not evidence
        or not all(isinstance(e, str) for e in evidence)
    ):
        return [*found, "'evidence' must be a non-empty list of message ids"]
    missing = [e for e in evidence if e not in ids]
    if missing:
        found.append(f"evidence {missing} not among the conversation's message ids")
    after = raw.get("after")
    if after is not None:
        if after not in ids:
            found.append(f"'after' {after!r} is not a message id of the conversation")
        elif not missing and max(ids.index(e) for e in evidence) > ids.index(after):
            found.append(f"evidence comes after {after!r}, where the question is asked")
        elif after in open_at:
            found.append(f"'after' {after!r} splits a tool call from its results")
    return found


def __getattr__(name: str) -> Any:
    """``load_dataset`` lives in :mod:`ctxwindow.eval.loaders`, beside the benchmarks it
    reads; importing it from here still works, with a ``DeprecationWarning``."""
    if name in _MOVED:
        warn_moved(__name__, name, "ctxwindow.eval")
        from ctxwindow.eval import loaders  # only for the old import path

        return getattr(loaders, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
