"""What an archive indexes and searches for: text made searchable in every script.

Both backends tokenize on spaces and punctuation, which leaves a run of
Chinese or Japanese characters as one long "word" that nothing but the exact
run would find. So before indexing, each CJK run is cut into overlapping
bigrams plus its single characters (``东京都`` → ``东 京 都 东京 京都``), and a
query's CJK runs into bigrams alone: a two-character word such as ``东京``
matches wherever it occurs, a longer one matches on each of its bigrams, a
single character matches on its unigram. Emoji and other symbols become
tokens (``sym1f389``) so they can be searched too. Text is NFKC-normalized
(full-width letters and digits, half-width kana) and accents are stripped
from Latin letters (``café`` = ``cafe``) the same way for every backend.
"""

from __future__ import annotations

import functools
import json
import re
import unicodedata
from typing import NamedTuple

from ctxwindow.messages import Entry
from ctxwindow.policies.rules import text_of

MAX_QUERY_TERMS = 128
"""Longer queries keep their first 128 distinct terms."""

_ENGLISH_STOP_WORDS = """
    i me my myself we our ours ourselves you your yours yourself yourselves he him his
    himself she her hers herself it its itself they them their theirs themselves what
    which who whom this that these those am is are was were be been being have has had
    having do does did doing a an the and but if or because as until while of at by for
    with about against between into through during before after above below to from up
    down in out on off over under again further then once here there when where why how
    all any both each few more most other some such no nor not only own same so than too
    very s t can will just don should now
"""

STOP_WORDS = frozenset(_ENGLISH_STOP_WORDS.split())
"""English stop words, left out of queries: PostgreSQL's ``english.stop`` (Snowball's list).

They would match nearly every message; with them gone a weak match on "my"
cannot outrank a strong match by meaning in the fused ranking, and both
backends drop the same words.
"""

# Han (with extensions and compatibility ideographs), kana, Hangul; the
# iteration marks 々〆〇 and the prolonged sound mark ー, but not CJK punctuation.
_CJK_RUN = re.compile(
    "[\u3005-\u3007\u3041-\u3096\u309d-\u309f\u30a1-\u30fa\u30fc-\u30ff\u31f0-\u31ff"
    "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\u1100-\u11ff\u3131-\u318e\uac00-\ud7af"
    "\U00020000-\U0003134f]+"
)


def entry_text(entry: Entry) -> str:
    """The text an entry is found by: its text parts, and the tool calls it makes."""
    parts = [text_of(entry.message)]
    for call in entry.message.get("tool_calls") or ():
        function = call.get("function") or {}
        parts.append(f"{function.get('name', '')} {_arguments_text(function.get('arguments'))}")
    return " ".join(part for part in parts if part)


def _arguments_text(arguments: object) -> str:
    if not isinstance(arguments, str):
        return ""
    try:
        return " ".join(_json_strings(json.loads(arguments)))
    except ValueError:
        return arguments


def _json_strings(value: object) -> list[str]:
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in (str(k), *_json_strings(v))]
    if isinstance(value, list):
        return [s for item in value for s in _json_strings(item)]
    return [] if value is None else [str(value)]


def normalize(text: str) -> str:
    """NFKC, with the accents of Latin letters removed (other scripts' marks kept)."""
    if text.isascii():
        return text
    decomposed = unicodedata.normalize("NFKD", text)
    tables = _tables()
    first = tables.marks_or_astral.search(decomposed)
    if first is None:
        return unicodedata.normalize("NFC", decomposed)  # no accent to remove
    if tables.astral.search(decomposed, first.start()) is None:  # all in C
        return unicodedata.normalize("NFC", tables.latin_accents.sub("", decomposed))
    return unicodedata.normalize("NFC", _without_latin_accents(decomposed, first.start()))


def _without_latin_accents(decomposed: str, start: int = 0) -> str:
    """The text less the combining marks that follow a Latin letter (``café`` → ``cafe``),
    run by run (runs of marks and of characters beyond the BMP), from ``start``."""
    kept: list[str] = [decomposed[:start]]
    for run in _tables().marks_or_astral.finditer(decomposed, start):
        at = run.start()
        # Runs are maximal, so a letter of the BMP precedes one (or nothing does).
        if at and _is_latin(decomposed[at - 1]) and (marks := _leading_marks(run.group())):
            kept.append(decomposed[start:at])
            start = at + marks
    kept.append(decomposed[start:])
    return "".join(kept)


def _leading_marks(run: str) -> int:
    """How many characters ``run`` starts with that are combining marks."""
    for i, ch in enumerate(run):
        if not unicodedata.combining(ch):
            return i
    return len(run)


def _is_latin(ch: str) -> bool:
    return ch < "\u0250" or "\u1e00" <= ch <= "\u1eff"  # as _LATIN


def index_text(text: str) -> str:
    """``text`` as it is indexed: normalized, CJK as unigrams + bigrams, symbols as tokens."""
    return _segment(normalize(text), unigrams=True)


def query_terms(query: str) -> list[str]:
    """The distinct search terms of a query: words (less stop words), CJK bigrams, symbols.

    Terms hold only letters, digits and marks, so no query syntax of any
    backend survives in them (quotes, ``*``, ``-``, parentheses, ``:``);
    backends still quote each term and OR them together.

    >>> query_terms('What is the "return policy" (退货政策)?')
    ['return', 'policy', '退货', '货政', '政策']
    """
    segmented = _segment(normalize(query), unigrams=False)
    terms = dict.fromkeys(t for t in _split_words(segmented) if t.lower() not in STOP_WORDS)
    return list(terms)[:MAX_QUERY_TERMS]


def _segment(text: str, *, unigrams: bool) -> str:
    text = _symbols_as_tokens(text.replace("\x00", " "))  # PostgreSQL text cannot hold NUL
    return _CJK_RUN.sub(lambda m: f" {_cjk_tokens(m.group(), unigrams)} ", text)


def _cjk_tokens(run: str, unigrams: bool) -> str:
    if len(run) == 1:
        return run
    bigrams = [run[i : i + 2] for i in range(len(run) - 1)]
    return " ".join([*run, *bigrams] if unigrams else bigrams)


def _symbols_as_tokens(text: str) -> str:
    if text.isascii():
        return text
    return _tables().symbol_or_astral.sub(_symbol_token, text)


def _symbol_token(match: re.Match[str]) -> str:
    ch = match.group()
    if ch < "\U00010000" or unicodedata.category(ch) == "So":
        return f" sym{ord(ch):x} "
    return ch  # beyond the BMP, but no symbol


_ASTRAL = "\U00010000-\U0010ffff"
_LATIN = "\x00-\u024f\u1e00-\u1eff"  # as _is_latin: below U+0250, or U+1E00-U+1EFF


class _Tables(NamedTuple):
    """Character classes read from ``unicodedata`` (see ``_tables``)."""

    latin_accents: re.Pattern[str]
    """A run of combining marks of the BMP after a Latin letter (text all in the BMP)."""
    astral: re.Pattern[str]
    """A character beyond the BMP."""
    marks_or_astral: re.Pattern[str]
    """A run of combining marks of the BMP (canonical combining class above 0) and of
    characters beyond the BMP."""
    symbol_or_astral: re.Pattern[str]
    """A symbol (category So) of the BMP, or a character beyond it."""


@functools.cache
def _tables() -> _Tables:
    """The character classes of ``normalize`` and ``_symbols_as_tokens``, read once.

    Read on the first text that is not ASCII (about 10 ms). A regular
    expression matches a class of characters in C, where asking
    ``unicodedata`` about each character cost 10-20 µs a message. The classes
    list the Basic Multilingual Plane only, since ``re`` tests such a class
    with one bitmap lookup but a class beyond it range by range: characters
    beyond it (emoji, mostly) all match, and are looked up one by one.
    """
    marks, symbols = [], []
    for code in range(0x10000):
        ch = chr(code)
        if unicodedata.combining(ch):
            marks.append(code)
        if unicodedata.category(ch) == "So":
            symbols.append(code)
    return _Tables(
        re.compile(f"(?<=[{_LATIN}])[{_ranges(marks)}]+"),
        re.compile(f"[{_ASTRAL}]"),
        re.compile(f"[{_ranges(marks)}{_ASTRAL}]+"),
        re.compile(f"[{_ranges(symbols)}{_ASTRAL}]"),
    )


def _ranges(codes: list[int]) -> str:
    """A regular-expression class body for sorted code points: ``a-b`` runs, escaped."""
    parts: list[str] = []
    start = previous = codes[0]
    for code in [*codes[1:], -1]:
        if code == previous + 1:
            previous = code
            continue
        first, last = f"\\u{start:04x}", f"\\u{previous:04x}"
        parts.append(first if start == previous else f"{first}-{last}")
        start = previous = code
    return "".join(parts)


def _split_words(text: str) -> list[str]:
    """Split on everything but letters, digits and marks (spaces, punctuation, symbols)."""
    words: list[str] = []
    word: list[str] = []
    for ch in text:
        if unicodedata.category(ch)[0] in "LNM":
            word.append(ch)
        elif word:
            words.append("".join(word))
            word = []
    if word:
        words.append("".join(word))
    return words
