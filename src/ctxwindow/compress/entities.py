"""Names that the layout of a text gives away, in any script.

Capitalization finds names in English; Chinese and Japanese have none, so
the way a name is written is read instead (the same in every script):

- the head of a list item, up to a colon, a parenthesis or a dash:
  ``- 拾味居（厦门）：…``, ``1. Blue Fin (Seattle): …``, ``・さくら亭：…``;
- a short qualifier in parentheses right after a word: ``拾味居（厦门）``,
  ``Blue Fin (Seattle)``;
- a term in bold: ``**拾味居**``, ``__Blue Fin__``.

A head or a qualifier of Latin letters counts only if it is capitalized
(``- pros: cheap`` names nothing); a CJK one needs two characters and no
digit (a number is a fact of its own).

>>> entities("- 拾味居（厦门）：菜单上没有芒果。")
['拾味居', '厦门']
>>> entities("- pros: it is cheap (mostly)")
[]
"""

from __future__ import annotations

import re

_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af"
_BULLET = re.compile(r"\s*(?:[-*•・·▪‣◦]|\d{1,2}[.)、．]|[（(]\d{1,2}[)）]|[①-⑳])\s*")
_HEAD_END = re.compile(r"\s*(?:[:：（(]|\s[-–—]\s|[—–])")
_QUALIFIER = re.compile(f"(?<=[\\w{_CJK}])\\s?[（(]([^()（）\\d:：,，、。;；!！?？]{{2,24}})[)）]")
_BOLD = re.compile(r"\*\*([^*\n]{2,40})\*\*|(?<!\w)__([^_\n]{2,40})__(?!\w)")
_MAX_WORDS = 5  # a head longer than this is a sentence, not a name
_MAX_CJK = 12


def entities(text: str) -> list[str]:
    """The names ``text`` sets out as list heads, qualifiers and bold terms, in order."""
    if not any(mark in text for mark in "(（*_") and not _BULLET.match(text):
        return []  # the common case: plain prose, read no further
    found = [*_head(text)]
    found += [m.group(1).strip() for m in _QUALIFIER.finditer(text) if _named(m.group(1))]
    found += [(m.group(1) or m.group(2)).strip() for m in _BOLD.finditer(text)]
    return [name for name in dict.fromkeys(found) if name]


def _head(text: str) -> list[str]:
    """The head of a list item (``- Name (Place): …``), if ``text`` is one."""
    bullet = _BULLET.match(text)
    if bullet is None or bullet.end() == 0:
        return []
    end = _HEAD_END.search(text, bullet.end())
    if end is None:
        return []  # a plain item ("- buy milk"): no label to name
    head = text[bullet.end() : end.start()].strip(" *_\"'“”「」『』")
    return [head] if _named(head) else []


def _named(text: str) -> bool:
    """Whether ``text`` can be a name: a capitalized run of a few words, or a short CJK run."""
    text = text.strip()
    if not text or any(ch.isdigit() for ch in text):
        return False
    if re.match(f"[{_CJK}]", text):
        return 2 <= len(text) <= _MAX_CJK
    return text[0].isupper() and len(text.split()) <= _MAX_WORDS
