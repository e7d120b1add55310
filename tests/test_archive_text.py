"""The archive's text preparation: the fast functions give exactly what the reference gives.

``ctxwindow.archive.text`` finds combining marks and symbols with regular
expressions over character classes read from ``unicodedata``. The reference
below is the former implementation, which asked ``unicodedata`` about every
character: on any text (every script, emoji, marks beyond the BMP, lone
surrogates, NUL) both must give the same strings, so the archive indexes and
searches the same terms as before.
"""

from __future__ import annotations

import unicodedata

from hypothesis import example, given
from hypothesis import strategies as st

from ctxwindow.archive import text


def reference_normalize(value: str) -> str:
    if value.isascii():
        return value
    kept: list[str] = []
    latin = False
    for ch in unicodedata.normalize("NFKD", value):
        if unicodedata.combining(ch):
            if latin:
                continue
        else:
            latin = ch < "\u0250" or "\u1e00" <= ch <= "\u1eff"
        kept.append(ch)
    return unicodedata.normalize("NFC", "".join(kept))


def reference_symbols_as_tokens(value: str) -> str:
    if value.isascii():
        return value
    return "".join(f" sym{ord(ch):x} " if unicodedata.category(ch) == "So" else ch for ch in value)


def reference_segment(value: str, *, unigrams: bool) -> str:
    value = reference_symbols_as_tokens(value.replace("\x00", " "))
    return text._CJK_RUN.sub(lambda m: f" {reference_cjk_tokens(m.group(), unigrams)} ", value)


def reference_cjk_tokens(run: str, unigrams: bool) -> str:
    if len(run) == 1:
        return run
    bigrams = [run[i : i + 2] for i in range(len(run) - 1)]
    return " ".join([*run, *bigrams] if unigrams else bigrams)


# Characters where the two could part: Latin letters with and without accents, marks
# after Latin and other letters (in and beyond the BMP), symbols and emoji (with skin
# tones and joiners), CJK, Hangul jamo, full-width and compatibility forms, NUL.
TRICKY = (
    "aeEzéèÉñçøßǅǲẞạệỹ"  # Latin, precomposed (U+1Exx too)
    "\u0300\u0301\u0308\u0327\u0323\u034f\u0345\u20d7\u302a\u3099\u309a"  # combining marks
    "\U0001d165\U0001d167\U0001e94a\U000110b9\U0001133c"  # combining marks beyond the BMP
    "🎉👍🏽\u200d❤️✅©®™⌚☃♥\U0001f3fb\U0001fbca\U0001f1ef\U0001f1f5"  # symbols, emoji
    "东京都配達退货ガギｶﾞ가각\u1100\u1161\u11a8々〆ー\U00020000\U0003134f"  # CJK
    "ＡＢＣ１２３ﬁ①ｱ㍿\ufdfa"  # compatibility forms
    "कि\u093c\u094dअंعربي\u0651\u064eעִברית"  # marks of other scripts
    "\x00 \t\n-:\"'*()\ud800\udfff"  # NUL, spaces, syntax, lone surrogates
)

texts = st.text(
    st.one_of(
        st.sampled_from(TRICKY),
        st.characters(exclude_categories=()),  # any code point, surrogates included
        st.characters(max_codepoint=0x2FF),
    ),
    max_size=60,
)


@given(texts)
@example("café naïve Ångström")
@example("e\u0301\u0301 \U0001d165a\u0301")  # marks after a letter, and a mark with no letter
@example("a\U0001d165\u0301 a🎉\u0301 中\u0301 ＡＢＣ１２３")
def test_normalize_is_the_reference(value: str) -> None:
    assert text.normalize(value) == reference_normalize(value)


@given(texts)
@example("🎉👍🏽 ✅ ©® — 東京 \U0001f3fb")
def test_symbols_as_tokens_is_the_reference(value: str) -> None:
    assert text._symbols_as_tokens(value) == reference_symbols_as_tokens(value)


@given(texts, st.booleans())
@example("东京都🎉 café 가각 ＡＢＣ\x00", True)
def test_segment_is_the_reference(value: str, unigrams: bool) -> None:
    assert text._segment(value, unigrams=unigrams) == reference_segment(value, unigrams=unigrams)


@given(texts)
def test_index_text_and_query_terms_are_the_reference(value: str) -> None:
    assert text.index_text(value) == reference_segment(reference_normalize(value), unigrams=True)
    segmented = reference_segment(reference_normalize(value), unigrams=False)
    expected = dict.fromkeys(
        t for t in text._split_words(segmented) if t.lower() not in text.STOP_WORDS
    )
    assert text.query_terms(value) == list(expected)[: text.MAX_QUERY_TERMS]


def test_the_character_classes_list_every_mark_and_symbol_of_the_bmp() -> None:
    """The classes are read from ``unicodedata``: every combining mark and So character
    of the BMP is in them, and nothing else is."""
    tables = text._tables()
    for code in range(0x10000):
        ch = chr(code)
        assert bool(tables.symbol_or_astral.fullmatch(ch)) == (unicodedata.category(ch) == "So"), (
            hex(code)
        )
        assert bool(tables.marks_or_astral.fullmatch(ch)) == bool(unicodedata.combining(ch)), hex(
            code
        )
