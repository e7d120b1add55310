"""The runnable examples of the docs: the ``python`` code blocks of one section."""

from __future__ import annotations

import re
from pathlib import Path

DOCS = Path(__file__).parents[2] / "docs"


def examples(heading: str, doc: str = "integrations.md") -> list[str]:
    """The ``python`` blocks under ``## {heading}…`` of ``docs/{doc}``, up to the next
    ``## `` heading; fails if the section or its examples are missing."""
    text = (DOCS / doc).read_text("utf-8")
    found = re.split(rf"^## {re.escape(heading)}.*$", text, maxsplit=1, flags=re.M)
    assert len(found) == 2, f"docs/{doc} has no '## {heading}' section"
    section = re.split(r"^## ", found[1], maxsplit=1, flags=re.M)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    assert blocks, f"the '## {heading}' section of docs/{doc} has no python example"
    return blocks
