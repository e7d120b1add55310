"""Which scripts a chart's PNG cannot draw, and what to do about it.

Matplotlib draws a character no font in ``font.family`` has as a box, and
warns once per character ("Glyph 31383 (\\N{CJK UNIFIED IDEOGRAPH-7A97})
missing from font(s) DejaVu Sans."). Those warnings are read here and turned
into one actionable warning naming the script (CJK for Chinese, Japanese and
Korean) and the fix. Symbols and emoji are not counted: matplotlib cannot
draw colour emoji anyway, and the report's SVG charts show them.
"""

from __future__ import annotations

import re
import unicodedata
import warnings
from collections.abc import Sequence

GLYPH = re.compile(r"Glyph (\d+) .*missing from font")
CJK_NAMES = (
    "CJK",
    "HIRAGANA",
    "KATAKANA",
    "HANGUL",
    "BOPOMOFO",
    "IDEOGRAPHIC",
    "HALFWIDTH",
    "FULLWIDTH",
)


class MissingFontWarning(UserWarning):
    """A chart's PNG draws some text as boxes: no installed font matplotlib knows has its script."""


def missing_scripts(caught: Sequence[warnings.WarningMessage]) -> tuple[str, ...]:
    """The scripts of the letters matplotlib had no glyph for, sorted; any other warning
    caught is issued again."""
    scripts = set()
    for warning in caught:
        match = GLYPH.search(str(warning.message))
        if match is None:
            warnings.warn_explicit(
                warning.message, warning.category, warning.filename, warning.lineno
            )
        elif (script := script_of(chr(int(match[1])))) is not None:
            scripts.add(script)
    return tuple(sorted(scripts))


def script_of(char: str) -> str | None:
    """``"CJK"`` for Chinese, Japanese and Korean, the script's name for other letters
    (``"Arabic"``, ``"Thai"``), None for digits, punctuation, symbols and emoji.

    >>> script_of("窗"), script_of("ب"), script_of("🪟")
    ('CJK', 'Arabic', None)
    """
    if not unicodedata.category(char).startswith(("L", "M")):
        return None
    name = unicodedata.name(char, "")
    if name.startswith(CJK_NAMES):
        return "CJK"
    return name.split(" ")[0].title() or None


def advice(scripts: Sequence[str]) -> str:
    """What the PNG charts lack and how to fix it, in a sentence or three."""
    from matplotlib import get_cachedir

    font = (
        "a CJK font such as Noto Sans CJK (Debian/Ubuntu: apt install fonts-noto-cjk; "
        "Fedora: dnf install google-noto-sans-cjk-fonts)"
        if "CJK" in scripts
        else "a font that covers it, e.g. from the Noto family (Debian/Ubuntu: fonts-noto)"
    )
    return (
        f"The PNG charts draw {' and '.join(scripts)} text as boxes: matplotlib found no "
        f"installed font for it. Install {font}, then delete matplotlib's font list "
        f"({get_cachedir()}/fontlist-*.json) so that it is found. The charts inside "
        "report.html are drawn by the browser with its own fonts and are not affected."
    )
