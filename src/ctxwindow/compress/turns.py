"""Reading an evicted entry as a speaker, a date and the pieces of what was said.

- **Speaker**: a name at the start of the text (``Caroline: …``, ``小明：…``),
  else the role, with the message's ``name`` if it has one (``user (ana)``);
  a tool result is ``tool`` with the function's name when its call is known.
- **Date**: a header line of the text that holds a date (``[Session 3 -
  1:56 pm on 8 May, 2023]`` gives ``8 May 2023``; ISO ``2023-05-08``,
  ``2023/05/08``, ``May 8, 2023`` and ``2023年5月8日`` are read too), else
  ``metadata["timestamp"]`` (an ISO string or seconds since the epoch, shown
  as its UTC date). The header line itself is not a fact and is left out.
- **Pieces**: the sentences of the text (see :mod:`ctxwindow.compress.sentences`),
  cut markers and omissions of earlier compression (``[… N chars (M tokens)
  cut by ctxwindow …]``, ``…``) taken out; a sentence longer than
  ``max_tokens`` is cut at clause marks, then between words (or characters
  for CJK), so a long one-sentence message still gives pieces. A list of
  JSON records (``}, {``) is first cut between records, each record its own
  piece when it fits twice ``max_tokens`` (a record is one fact: the host
  and its failed deploy stay together). Each piece has
  an index in the turn: consecutive indexes were next to each other in the
  text, a gap of two or more marks something left out between them.

>>> from ctxwindow.tokens import chat_tokenizer
>>> reader = TurnReader(chat_tokenizer("gpt-4o"))
>>> reader.speaker_and_text({"role": "user", "content": "Caroline: I moved to Oslo."}, {})
('Caroline', 'I moved to Oslo.')
>>> header_date("[Session 3 - 1:56 pm on 8 May, 2023]")
'8 May 2023'
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from ctxwindow.compress.prompt import content_text, strip_heading
from ctxwindow.compress.sentences import sentence_spans
from ctxwindow.messages import Entry, Message

_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af"
_MONTH = r"(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)[a-z]*\.?"
_DATE = re.compile(
    rf"\d{{1,2}}\s+{_MONTH},?\s+\d{{4}}|{_MONTH}\s+\d{{1,2}}(?:st|nd|rd|th)?,?\s+\d{{4}}"
    r"|\d{4}-\d{2}-\d{2}|\d{4}/\d{1,2}/\d{1,2}|\d{4}年\d{1,2}月\d{1,2}日"
)
_HEADER = re.compile(r"\s*\[([^\]\n]{1,120})\][ \t]*(?:\n|$)")
_SPEAKER = re.compile(
    rf"([A-Z][A-Za-z'’.-]*(?: [A-Z][A-Za-z'’.-]*){{0,2}}|[{_CJK}]{{1,8}})(?::[ \t]+|：[ \t]*)(?=\S)"
)
# What earlier compression left in a text: truncation and JSON cut markers, omissions.
# A truncation marker is matched whole or in part (a sentence splitter may have cut it).
_MARKERS = re.compile(
    r"\s*(?:\[?…?\s*\d+ chars \(\d+ tokens\) cut by ctxwindow\s*…?\]?|…\[\+\d+ chars\]|…+)\s*"
)
_SPACES = re.compile(r"\s+")
_CLAUSE = re.compile(r"[,;:]\s+|[，、；：]\s*|\s+[-–—]+\s+")
_RECORD = re.compile(r"\},\s*(?=\{)")  # "}, {": between two JSON records
RECORD = 2  # a JSON record up to this many times max_tokens stays one piece
_WORD = re.compile(f"[{_CJK}]\\s*|[^\\s{_CJK}]+\\s*|\\s+")  # a CJK character is a word


@dataclass(frozen=True)
class Piece:
    """One sentence (or part of one) of a turn, with its place in the turn."""

    index: int
    text: str


@dataclass(frozen=True)
class Turn:
    """What an entry said, ready to be weighed piece by piece."""

    seq: int
    speaker: str
    date: str | None
    pieces: tuple[Piece, ...]
    line: int = 0  # several lines of one entry (a summary's) keep their order


def header_date(line: str) -> str | None:
    """The date in a header line such as ``[Session 3 - 1:56 pm on 8 May, 2023]``."""
    found = _DATE.search(line)
    return " ".join(found.group().replace(",", " ").split()) if found else None


def timestamp_date(value: Any) -> str | None:
    """The UTC date (``YYYY-MM-DD``) of an ISO timestamp or of seconds since the epoch."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        try:
            return datetime.fromtimestamp(value, timezone.utc).date().isoformat()
        except (OverflowError, OSError, ValueError):
            return None
    if isinstance(value, str):
        try:
            parsed = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
        except ValueError:
            return header_date(value)
        if parsed.tzinfo is not None:
            parsed = parsed.astimezone(timezone.utc)
        return parsed.date().isoformat()
    return None


class TurnReader:
    """Entries in, ``Turn`` objects out; ``tokens`` counts a text (the reader cuts by it)."""

    def __init__(self, tokens: Callable[[str], int], max_tokens: int = 48) -> None:
        self.tokens = tokens
        self.max_tokens = max_tokens

    def read(self, entry: Entry, tool_names: Mapping[str, str]) -> Turn:
        """The turn of ``entry``; ``tool_names`` maps tool call ids to function names."""
        message = entry.message
        text = content_text(message.get("content"))
        date = timestamp_date(entry.metadata.get("timestamp"))
        header = _HEADER.match(text)
        if header and header_date(header.group(1)):
            text, date = text[header.end() :], header_date(header.group(1))
        speaker, text = self.speaker_and_text(message, tool_names, text)
        calls = [_call_text(call) for call in message.get("tool_calls") or ()]
        return Turn(entry.seq, speaker, date, tuple(self.pieces(text, *calls)))

    def speaker_and_text(
        self, message: Message, tool_names: Mapping[str, str], text: str | None = None
    ) -> tuple[str, str]:
        """Who speaks (a leading name, else the role) and the text without the name."""
        text = content_text(message.get("content")) if text is None else text
        named = _SPEAKER.match(text)
        if named and message.get("role") in ("user", "assistant"):
            return named.group(1), text[named.end() :]
        role = str(message.get("role"))
        if role == "tool" and message.get("tool_call_id") in tool_names:
            return _one_line(f"tool ({tool_names[message['tool_call_id']]})"), text
        name = message.get("name")
        return _one_line(f"{role} ({name})" if isinstance(name, str) else role), text

    def pieces(self, *texts: str) -> Iterator[Piece]:
        """The pieces of ``texts``; a marker, and the start of each text, leave a gap."""
        index = 0
        for text in texts:
            for segment in _MARKERS.split(text):
                for sentence in _sentences(segment):
                    for part in self._parts(sentence):
                        if part.strip():
                            yield Piece(index, _one_line(part))
                            index += 1
                index += 1

    def _parts(self, sentence: str) -> list[str]:
        """``sentence`` itself, or its clauses (then words) packed up to ``max_tokens``.

        Parts keep their trailing spaces, so packing them joins the original text.
        """
        if self.tokens(sentence) <= self.max_tokens:
            return [sentence]
        if "}" in sentence and _RECORD.search(sentence):
            return self._records(sentence)
        cuts = [0, *(m.end() for m in _CLAUSE.finditer(sentence)), len(sentence)]
        clauses = [sentence[a:b] for a, b in itertools.pairwise(cuts) if a < b]
        if len(clauses) == 1:
            return self._split_words(sentence)
        parts: list[str] = []
        for clause in clauses:
            if parts and self.tokens(parts[-1] + clause) <= self.max_tokens:
                parts[-1] += clause
            else:
                parts.extend(self._parts(clause))
        return parts

    def _records(self, text: str) -> list[str]:
        """``text`` cut between JSON records; a record that fits ``RECORD`` pieces is whole."""
        cuts = [0, *(m.end() for m in _RECORD.finditer(text)), len(text)]
        parts: list[str] = []
        for a, b in itertools.pairwise(cuts):
            record = text[a:b]
            whole = self.tokens(record) <= RECORD * self.max_tokens
            parts.extend([record] if whole else self._parts(record))
        return parts

    def _split_words(self, text: str) -> list[str]:
        """``text`` cut between words (between characters in CJK) into parts that fit."""
        words = _WORD.findall(text)
        if len(words) < 2:
            return []  # one word longer than a piece: no fact survives being cut inside it
        n = math.ceil(self.tokens(text) / self.max_tokens)
        size = math.ceil(len(words) / n)
        chunks = ["".join(words[i : i + size]) for i in range(0, len(words), size)]
        return [part for chunk in chunks for part in self._parts(chunk)]


def _sentences(text: str) -> Iterator[str]:
    for start, end in sentence_spans(text):
        yield text[start:end]


def _one_line(text: str) -> str:
    """``text`` stripped, each run of spaces and line breaks (``\\r``, ``\\u2028``…) one space."""
    return _SPACES.sub(" ", text).strip()


def _call_text(call: Any) -> str:
    function = call.get("function", {}) if isinstance(call, Mapping) else {}
    return f"calls {function.get('name')}({function.get('arguments', '')})"


def summary_turns(entry: Entry, reader: TurnReader) -> Iterator[Turn]:
    """The lines of a summary's text (a model's, or one without fold state) as turns."""
    text = strip_heading(content_text(entry.message.get("content")))
    date = None  # a line's date holds for the lines after it, until the next one
    for number, line in enumerate(line for line in text.splitlines() if line.strip()):
        header = re.match(r"\[([^\]\n]{1,40})\] ", line)
        if header and header_date(header.group(1)):  # a date, not "[… 9 chars … cut …]"
            date, line = header_date(header.group(1)), line[header.end() :]
        speaker, said = _line_speaker(line)
        yield Turn(entry.seq, speaker, date, tuple(reader.pieces(said)), line=number)


def _line_speaker(line: str) -> tuple[str, str]:
    found = re.match(r"([^:：\n]{1,40}?)[:：] (?=\S)", line)
    if found and len(found.group(1).split()) <= 3:
        return found.group(1), line[found.end() :]
    return "", line
