"""What the texts of the ``manual`` scenario hold; the texts themselves are in
``manual_en`` and ``manual_zh``, too long to share one module."""

from __future__ import annotations

import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ctxwindow.eval.builtin._text import Slots, _lines, _Talk


@dataclass(frozen=True)
class _Section:
    title: str
    sentences: Sequence[str]
    listing: str = ""  # lines after the paragraph


def _section(title: str, block: str, listing: str = "") -> _Section:
    return _Section(title, _lines(block), textwrap.dedent(listing).strip())


@dataclass(frozen=True)
class _ManualText:
    system: str
    products: Sequence[tuple[str, str, str]]  # (name, kind, replaceable part)
    buttons: Sequence[str]
    meanings: Sequence[str]
    formats: Mapping[str, str]  # how each measured fact is written
    title: str
    sections: Sequence[_Section]
    padding: Sequence[str]
    faq: tuple[str, str]  # heading, question-and-answer template
    paste: Sequence[str]
    acks: Sequence[str]
    own_facts: Mapping[str, tuple[str, str]]  # fact -> (what the user says, question)
    own_acks: Sequence[str]
    own_values: Slots
    questions: Mapping[str, str]
    talk: _Talk
