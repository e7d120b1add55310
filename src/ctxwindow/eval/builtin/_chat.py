"""Writing a conversation: messages with ids and timestamps, its questions, and the loop
that turns a scenario's builder into a dataset."""

from __future__ import annotations

import json
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any, Protocol

LANGUAGES = ("en", "zh")

_START = datetime(2024, 5, 1, 9, 0, tzinfo=timezone.utc)


class _Chat:
    """A conversation being written: messages with ids ``m0, m1, …`` and rising timestamps."""

    def __init__(self, rng: random.Random, lang: str) -> None:
        self.rng = rng
        self.lang = lang
        self.messages: list[dict[str, Any]] = []
        self.now = _START + timedelta(days=rng.randrange(150), minutes=rng.randrange(480))

    def say(self, role: str, content: str) -> str:
        return self._add({"role": role, "content": content})

    def call(self, *calls: tuple[str, Mapping[str, Any]]) -> list[str]:
        """One assistant message with tool calls; returns their call ids."""
        n = len(self.messages)
        ids = [f"call_{n}" if len(calls) == 1 else f"call_{n}_{k}" for k in range(len(calls))]
        tool_calls = [
            {
                "id": call_id,
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(args, ensure_ascii=False)},
            }
            for call_id, (name, args) in zip(ids, calls, strict=True)
        ]
        self._add({"role": "assistant", "content": None, "tool_calls": tool_calls})
        return ids

    def result(self, call_id: str, payload: Any) -> str:
        content = json.dumps(payload, ensure_ascii=False)
        return self._add({"role": "tool", "tool_call_id": call_id, "content": content})

    def index(self, message_id: str) -> int:
        return int(message_id[1:])

    def point_after(self, evidence: Sequence[str]) -> str:
        """A message id mid-way between the evidence and the end, for an ``after`` question."""
        last = max(self.index(e) for e in evidence)
        later: list[str] = [
            m["id"]
            for m in self.messages[last + 1 : -1]
            if m["role"] == "assistant" and "tool_calls" not in m
        ]
        if later:
            return self.rng.choice(later[: max(1, len(later) // 2)])
        while last + 1 < len(self.messages) and self.messages[last + 1]["role"] == "tool":
            last += 1  # never between a tool call and its last result
        return f"m{last}"

    def _add(self, fields: dict[str, Any]) -> str:
        message_id = f"m{len(self.messages)}"
        self.messages.append({"id": message_id, **fields, "timestamp": self._tick()})
        return message_id

    def _tick(self) -> str:
        seconds = self.rng.randint(15, 240)
        if self.rng.random() < 0.03:
            seconds += self.rng.randint(1, 18) * 3600  # the user comes back later
        self.now += timedelta(seconds=seconds)
        return self.now.strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class _Question:
    question: str
    answer: str
    evidence: list[str]
    category: str
    after: str | None = None


def _conversation(cid: str, chat: _Chat, questions: list[_Question]) -> dict[str, Any]:
    """The dataset dict of one conversation; questions ordered by where they are asked."""
    end = len(chat.messages)
    ordered = sorted(questions, key=lambda q: chat.index(q.after) if q.after else end)
    out = []
    for i, q in enumerate(ordered):
        entry: dict[str, Any] = {
            "id": f"q{i}",
            "question": q.question,
            "answer": q.answer,
            "evidence": list(q.evidence),
        }
        if q.after is not None:
            entry["after"] = q.after
        entry["category"] = q.category
        out.append(entry)
    return {"id": cid, "messages": chat.messages, "questions": out}


def _ask_midway(chat: _Chat, questions: list[_Question], how_many: int) -> None:
    """Ask ``how_many`` of the questions mid-conversation (``after``) instead of at the end."""
    for q in chat.rng.sample(questions, min(how_many, len(questions))):
        q.after = chat.point_after(q.evidence)


class _Builder(Protocol):
    def __call__(self, chat: _Chat, turns: int, filler: int) -> list[_Question]: ...


def _generate(
    scenario: str,
    build: _Builder,
    lang: str,
    conversations: int,
    turns: int,
    filler: int,
    seed: int,
) -> dict[str, Any]:
    if lang not in LANGUAGES:
        raise ValueError(f"unknown language {lang!r}: expected one of {', '.join(LANGUAGES)}")
    for name, value, least in (("conversations", conversations, 1), ("turns", turns, 0)):
        if value < least:
            raise ValueError(f"{name} must be at least {least}, got {value}")
    if filler < 1:
        raise ValueError(f"filler must be at least 1, got {filler}")
    rng = random.Random(seed)
    out = []
    for i in range(conversations):
        chat = _Chat(rng, lang)
        questions = build(chat, turns, filler)
        out.append(_conversation(f"{scenario}-{lang}-{i}", chat, questions))
    return {"conversations": out}
