"""Matplotlib's SVG made fit to sit inside the report's HTML.

The SVG is drawn with ``svg.fonttype = "none"``: its text stays ``<text>``,
drawn by the browser with the page's fonts (any script the system has a
font for, CJK included). Inline, it loses what HTML does not need or must
not have: the XML prolog, metadata and comments (with their URLs), the
namespace declarations, the global ``<style>``, and the ``font-family`` of
each text (the page sets one, with CJK fallbacks). Every ``id``, and every
reference to one, gets the chart's prefix, so several charts can share a page.
"""

from __future__ import annotations

import re
from html import escape

TAG = re.compile(r"<[^>]*>")  # text content has its "<" escaped, so this matches tags only
DROPPED = re.compile(r"<metadata>.*?</metadata>\s*|<style[^>]*>.*?</style>\s*|<!--.*?-->\s*", re.S)
NAMESPACE = re.compile(r'\s+xmlns(?::\w+)?="[^"]*"')
FONT_FAMILY = re.compile(r"font-family: [^;\"]*(?:; )?")


def inline_svg(svg: str, prefix: str, label: str) -> str:
    """``svg`` (a whole SVG document) as an ``<svg>`` element for an HTML page, its ids
    prefixed with ``prefix``, announced to screen readers as an image of ``label``."""
    element = DROPPED.sub("", svg[svg.index("<svg") :])
    element = TAG.sub(lambda tag: _tag(tag[0], prefix), element)
    return element.replace("<svg ", f'<svg role="img" aria-label="{escape(label)}" ', 1)


def _tag(tag: str, prefix: str) -> str:
    tag = NAMESPACE.sub("", tag).replace("xlink:href=", "href=")
    tag = re.sub(r'\bid="', f'id="{prefix}-', tag)
    tag = tag.replace('href="#', f'href="#{prefix}-').replace("url(#", f"url(#{prefix}-")
    return FONT_FAMILY.sub("", tag)
