"""Scoring one built context: what became of its question's evidence, and the rest.

Each measured context scores whether the question's evidence messages are in
it, how many tokens it costs, how long it took to build, and the share of the
newest ``RECENT`` history messages it has, whole or compressed
(``recent_share``). What became of the evidence is one letter a question
(``OUTCOMES``): kept whole, compressed with the answer in the compressed form
of the evidence, partly lost or lost.

A compressed or summarized evidence message is credited only when the answer
is in that message's own text as sent (``Built.compressed_text``), as whole
words (``answer_in``): not anywhere in the context, where a short answer such
as "yes" or "two" is found whether the evidence kept it or not.
"""

from __future__ import annotations

import re
import time
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ctxwindow.eval.dataset import Question
from ctxwindow.eval.strategies import Built, Case, Strategy
from ctxwindow.messages import Message
from ctxwindow.tokens.chat import ChatTokenizer

# What became of a question's evidence messages in a built context, one letter each.
# A compressed evidence message is present only if the answer is in its compressed form.
KEPT = "k"  # all kept whole
COMPRESSED = "c"  # all present, some only compressed or summarized, each with the answer
PARTLY_LOST = "p"  # some present, not all
LOST = "l"  # none present
OUTCOMES = {
    KEPT: "kept whole",
    COMPRESSED: "compressed, the answer in the compressed form of the evidence",
    PARTLY_LOST: "partly lost",
    LOST: "lost",
}
RECENT = 4  # recent_recall: how many of the newest history messages every context should keep

# Given a built context and its question, return a score in [0, 1].
Answerer = Callable[[list[Message], Question], float]


@dataclass(frozen=True)
class Measurement:
    """What one built context scored."""

    category: str
    all_evidence: bool
    evidence_share: float
    tokens: int
    build_ms: float
    outcome: str  # one of OUTCOMES
    score: float | None = None
    recent_share: float = 1.0  # of the newest RECENT history messages, the share present


def measure(
    strategy: Strategy,
    case: Case,
    budget: int | None,
    tokenizer: ChatTokenizer,
    answerer: Answerer | None = None,
) -> Measurement:
    """Ingest one case's history from scratch (untimed), then build and score its context."""
    return score(strategy, strategy.prepare(case, budget, tokenizer), case, tokenizer, answerer)


def score(
    strategy: Strategy,
    state: Any,
    case: Case,
    tokenizer: ChatTokenizer,
    answerer: Answerer | None = None,
) -> Measurement:
    """Build the case's context on ``state`` (timed) and score it."""
    start = time.perf_counter()
    built: Built = strategy.build(state, case)
    build_ms = (time.perf_counter() - start) * 1000
    evidence = case.question.evidence
    whole, compressed = _present(evidence, built, case.question.answer)
    present = whole + compressed
    score = answerer(built.messages, case.question) if answerer is not None else None
    return Measurement(
        category=case.question.category or "uncategorized",
        all_evidence=present == len(evidence),
        evidence_share=present / len(evidence),
        tokens=tokenizer.count(built.messages),
        build_ms=build_ms,
        outcome=_outcome(whole, compressed, len(evidence)),
        score=score,
        recent_share=recent_share(built, case),
    )


def _present(evidence: Sequence[str], built: Built, answer: str) -> tuple[int, int]:
    """How many evidence messages are kept whole, and how many more are compressed with
    the answer in their own compressed text."""
    whole = sum(1 for mid in evidence if mid in built.kept_ids)
    compressed = sum(
        1
        for mid in evidence
        if mid not in built.kept_ids
        and mid in built.compressed_ids
        and answer_in(answer, built.compressed_text.get(mid, ""))
    )
    return whole, compressed


def recent_share(built: Built, case: Case) -> float:
    """The share of the case's newest ``RECENT`` history messages (a tool call or result
    is one too) that the context has, whole or compressed; 1.0 with no history."""
    newest = [mid for mid, _ in case.history[-RECENT:]]
    if not newest:
        return 1.0
    present = sum(1 for mid in newest if mid in built.kept_ids or mid in built.compressed_ids)
    return present / len(newest)


# A run of letters and numbers (\w less the underscore), as normalize() keeps them.
_WORD = re.compile(r"[^\W_]+")
# Scripts written without spaces between words (Han, kana, and Hangul, whose particles
# attach to the word): one of their characters ends a word wherever it stands.
_UNSPACED = (
    (0x1100, 0x11FF), (0x2E80, 0x2FDF), (0x3040, 0x30FF), (0x3130, 0x318F),
    (0x31F0, 0x31FF), (0x3400, 0x4DBF), (0x4E00, 0x9FFF), (0xAC00, 0xD7AF),
    (0xF900, 0xFAFF), (0x20000, 0x3FFFF),
)  # fmt: skip


def answer_in(answer: str, text: str) -> bool:
    """Whether ``answer`` is in ``text`` as whole words: both NFKC-normalized and
    casefolded, punctuation and spacing ignored ("A-1042" is found in "a 1042"), and
    each end of the answer at a word boundary, so "two" is not found in "network".
    In scripts that put no spaces between words (Chinese, Japanese, Korean) a
    boundary cannot be seen: an end of the answer in such a character needs none
    (plain containment), and such a character next to it is a boundary.

    >>> answer_in("two", "a network of two"), answer_in("two", "a network")
    (True, False)
    >>> answer_in("东京", "我住在东京市"), answer_in("iPhone", "买了iPhone手机")
    (True, True)
    """
    wanted, words = _words(answer), _words(text)
    if not wanted:
        return False
    start = words.find(wanted)
    while start != -1:
        end = start + len(wanted)
        if _ends_a_word(wanted[0], words[start - 1 : start]) and _ends_a_word(
            wanted[-1], words[end : end + 1]
        ):
            return True
        start = words.find(wanted, start + 1)
    return False


def _words(text: str) -> str:
    """NFKC, casefolded: its runs of letters and numbers, one space between them."""
    return " ".join(_WORD.findall(unicodedata.normalize("NFKC", text).casefold()))


def _ends_a_word(edge: str, neighbour: str) -> bool:
    """Whether the answer's ``edge`` character, beside ``neighbour`` ("" at an end of the
    text), ends a word there."""
    return neighbour in ("", " ") or _unspaced(edge) or _unspaced(neighbour)


def _unspaced(char: str) -> bool:
    return any(low <= ord(char) <= high for low, high in _UNSPACED)


def _outcome(whole: int, compressed: int, total: int) -> str:
    if whole == total:
        return KEPT
    if whole + compressed == total:
        return COMPRESSED
    return PARTLY_LOST if whole + compressed else LOST
