"""Sentence splitting and scoring terms for Latin and CJK text.

Boundaries: a newline; a bullet (``•``) after a space; the CJK marks
``。！？；…‥`` (no space needed after them); and ``. ! ?`` followed by a
space, the end of the line or a CJK character. A Latin period is not a
boundary inside a number (``3.14``), after a known abbreviation (``e.g.``,
``Dr.``) or after a single-letter initial (``J. Smith``). Closing quotes and
brackets stay with the sentence they close.

>>> split_sentences("Pi is 3.14, e.g. roughly. 你好。元気？Yes!")
['Pi is 3.14, e.g. roughly.', '你好。', '元気？', 'Yes!']
"""

from __future__ import annotations

import functools
import itertools
import re

_CJK = "\u3040-\u30ff\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af\uff66-\uff9f"
_KANA = re.compile("[\u3040-\u30ff\u31f0-\u31ff\uff66-\uff9f]")
_IS_CJK = re.compile(f"[{_CJK}]")
_CJK_RUNS = re.compile(f"[{_CJK}]+|[^{_CJK}]+")
_ALNUM = re.compile(r"[^\W_]")  # str.isalnum(), one character at a time
_LETTER = re.compile(r"[^\W\d_]")
_CJK_ALNUM = re.compile(f"(?=[{_CJK}])[^\\W_]")
_CLOSERS = "\"'”’)\\]}」』）》】〉"
_CJK_MARKS = "。！？；…‥"
_MARK = re.compile(f"[{_CJK_MARKS}]+[{_CLOSERS}]*|[.!?]+[{_CLOSERS}]*")
_BULLET = re.compile(r"(?<=\s)•")
_LINE = re.compile(r"[^\n]+")
_TOKEN = re.compile(r"\d+(?:[.,:/-]\d+)*|\w+")
_OPENERS = "\"'“‘([{"

# Kept as text: one word list reads better than a column of 150 string literals.
_ABBREVIATIONS = "mr mrs ms dr prof sr jr st vs e.g i.e cf fig approx inc ltd corp dept vol mt"
_STOPWORDS = """a an the and or but if then than so of to in on at by for from with without about
as into over under is are was were be been being am do does did done have has had having it its
this that these those there here i me my we us our you your he him his she her they them their
what which who whom whose when where why how all any both each few more most other some such no
nor not only own same too very can will just should would could may might must shall also again
once up down out off let please thanks thank hi hello ok okay yes sure get got"""
ABBREVIATIONS = frozenset(_ABBREVIATIONS.split())
STOPWORDS = frozenset(_STOPWORDS.split())


def split_sentences(text: str) -> list[str]:
    """The sentences of ``text``, stripped, in order."""
    return [text[start:end] for start, end in sentence_spans(text)]


def sentence_spans(text: str) -> list[tuple[int, int]]:
    """``(start, end)`` of each sentence; the text between two spans is whitespace."""
    spans: list[tuple[int, int]] = []
    for line in _LINE.finditer(text):
        spans.extend(_line_spans(text, line.start(), line.end()))
    return spans


def _line_spans(text: str, start: int, end: int) -> list[tuple[int, int]]:
    cuts = {start, end}
    cuts.update(m.end() for m in _MARK.finditer(text, start, end) if _ends(text, m, end))
    cuts.update(m.start() for m in _BULLET.finditer(text, start, end))
    ordered = sorted(cuts)
    spans = [_strip(text, a, b) for a, b in itertools.pairwise(ordered)]
    return [(a, b) for a, b in spans if a < b]


def _ends(text: str, mark: re.Match[str], end: int) -> bool:
    """Whether the punctuation ``mark`` ends a sentence."""
    first = mark.group()[0]
    if first in _CJK_MARKS and not (first in "…‥" and _latin_before(text, mark.start())):
        return True
    after = text[mark.end()] if mark.end() < end else ""
    if after and not after.isspace() and not is_cjk(after):
        return False  # 3.14, example.com, "?!x"
    return not (first == "." and _abbreviation(text, mark.start()))


def _latin_before(text: str, at: int) -> bool:
    return at > 0 and text[at - 1].isascii()


def _abbreviation(text: str, dot: int) -> bool:
    """Whether the word before the period at ``dot`` is an abbreviation or an initial."""
    word = text[:dot].rsplit(None, 1)[-1].lstrip(_OPENERS) if text[:dot].strip() else ""
    return word.casefold() in ABBREVIATIONS or (len(word) == 1 and word.isalpha())


def _strip(text: str, start: int, end: int) -> tuple[int, int]:
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return start, end


def is_cjk(char: str) -> bool:
    """True for Han, kana and Hangul characters."""
    return bool(_IS_CJK.match(char))


@functools.lru_cache(maxsize=16_384)
def script_counts(text: str) -> tuple[int, int, bool]:
    """Letters of ``text`` (digits are no script), the CJK ones among them, and whether
    it has kana.

    Counts of a concatenation are the sums of the parts' counts, so a text
    made of cached parts is measured without reading it again.
    """
    return len(_LETTER.findall(text)), len(_CJK_ALNUM.findall(text)), has_kana(text)


def cjk_share(text: str) -> float:
    """The share of CJK characters among the letters and digits of ``text``."""
    letters = len(_ALNUM.findall(text))
    return len(_CJK_ALNUM.findall(text)) / letters if letters else 0.0


def has_kana(text: str) -> bool:
    """True when ``text`` contains Japanese kana."""
    return bool(_KANA.search(text))


def terms(sentence: str) -> list[str]:
    """Scoring terms: casefolded words (stopwords dropped) and CJK character bigrams.

    >>> terms("The cluster 東京都 failed at 03:14")
    ['cluster', '東京', '京都', 'failed', '03:14']
    """
    return list(_terms(sentence))


@functools.lru_cache(maxsize=16_384)
def _terms(sentence: str) -> tuple[str, ...]:
    """``terms``, cached: a rolling summary re-reads the sentences it kept at every fold."""
    out: list[str] = []
    for token in _TOKEN.findall(sentence.casefold()):
        if token.isascii():  # no CJK run to split: the common case, kept fast
            if token not in STOPWORDS and (len(token) > 1 or token.isdigit()):
                out.append(token)
            continue
        for run in _CJK_RUNS.findall(token):
            if is_cjk(run[0]):
                out.extend([run[i : i + 2] for i in range(len(run) - 1)] or [run])
            elif run not in STOPWORDS and (len(run) > 1 or run.isdigit()):
                out.append(run)
    return tuple(out)
