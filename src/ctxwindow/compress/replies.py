"""Which replies of a summarizing model are no summary, and must not replace history.

A summary endpoint that is down, overloaded, behind a proxy or refusing can
still answer "200 OK" with text: an error message, a refusal, an HTML error
page, or the request echoed back. Taken as a summary, that text would stand
in for the turns it replaces (the field's bug reports: the error text became
the summary; an empty summary replaced the history). ``unusable`` says why a
reply is no summary, or None.

The rule is conservative: a wrong "no summary" only costs the extractive
fallback, but it should not happen to a real summary. A reply is no summary
when it

- is empty or only whitespace;
- *starts* with an error or refusal marker (``Error:``, ``RuntimeError:``,
  ``Error code: 503``, ``Traceback (most recent call last)``, ``502 Bad
  Gateway``, ``Service Unavailable``, ``Rate limit exceeded``, an HTML
  document, a JSON ``{"error": …}`` body, ``I'm sorry, but I can't…``,
  ``I cannot help with…``, ``As an AI…``, ``抱歉，我无法…``,
  ``申し訳ありませんが…``) that the text it was asked to summarize does not
  hold itself, compared as words (case and punctuation aside; an HTML or
  JSON marker as it is): a summary of a debugging session may well start
  with ``Error:`` when the session says "error";
- holds a sentence of the request's instructions (the prompt echoed);
- starts with the transcript's first line, ``role: text`` (the conversation
  echoed, not summarized; only for a transcript of several messages, since a
  summary of one message may rightly start with its first words).

A marker elsewhere in the text, or an apology that says nothing of being
unable (``Sorry for the delay: the order ships Friday``) is no reason.

>>> print(unusable("I'm sorry, but I can't help with that.", "user: my order A-7 is late"))
an error or a refusal, not a summary (it starts "I'm sorry, but I can't")
>>> unusable("Error: E4021 on kappa-7; restart node 12.", "user: error: E4021 again") is None
True
"""

from __future__ import annotations

import re

from ctxwindow.compress import prompt

_MARKERS = re.compile(
    r"""
    (?:[a-z]*error|[a-z]*exception)(?:\ code)?\s*:            # Error: / RuntimeError: / Error code:
  | traceback\ \(most\ recent\ call\ last\)
  | (?:\d{3}\s+)?(?:bad\ gateway|internal\ server\ error|gateway\ time-?out
      |service\ (?:temporarily\ )?unavailable|too\ many\ requests)\b
  | rate\ limit(?:ed|\ exceeded|\ reached)\b
  | <!doctype\ html\b|<html\b|<head\b|<body\b
  | \{\s*"(?:error|errors|detail)"\s*:
  | (?:(?:i'm|i\ am)(?:\ (?:very|so|really|truly))?\ sorry|sorry|i\ apologi[sz]e)
      \b[^.!?\n]{0,60}?\b(?:i|we)(?:\ cannot|\ can\ not|\ can't|\ won't|\ will\ not
      |(?:\ am|'m|\ are|'re)\ (?:unable|not\ able))\b
  | (?:i|we)(?:\ cannot|\ can\ not|\ can't|\ won't|\ will\ not
      |(?:\ am|'m|\ are|'re)\ (?:unable|not\ able)\ to)
      \ (?:help|assist|summari[sz]e|comply|fulfil+|provide|do\ that|complete|process|continue)\b
  | as\ an\ ai\b
  | (?:很?抱歉|对不起)[，,。！!\s]*(?:但是?)?我?(?:无法|不能)
  | 申し訳(?:ありません|ございません)(?:が|。|、)
    """,
    re.VERBOSE | re.IGNORECASE,
)
_LEADING = " \t\r\n\"'`*#>_"  # quotes and markdown a model may put before its first word
# The instructions' sentences that carry no number (one carries the token limit).
_INSTRUCTIONS = [
    sentence.strip().rstrip(".").casefold()
    for sentence in prompt.SYSTEM_PROMPT.split(". ")
    if "{" not in sentence and len(sentence) >= 20
]


def unusable(reply: str, text: str, *, transcript: bool = True) -> str | None:
    """Why ``reply`` is no summary of ``text`` (what the model was asked to summarize),
    or None when it may be one. ``transcript``: ``text`` is the transcript of several
    messages (``prompt.transcript``), not one message's own text."""
    stripped = reply.strip()
    if not stripped:
        return "an empty reply"
    start = stripped.lstrip(_LEADING).replace("\u2019", "'")
    found = _MARKERS.match(start)
    if found is not None and not _said(found.group(0), text):
        return f'an error or a refusal, not a summary (it starts "{found.group(0)}")'
    folded = stripped.casefold()
    if any(sentence in folded for sentence in _INSTRUCTIONS):
        return "the request's instructions echoed back, not a summary"
    first = text.split("\n", 1)[0][:80]
    if transcript and len(first) >= 24 and stripped.startswith(first):
        return "the conversation echoed back, not summarized"
    return None


def _said(marker: str, text: str) -> bool:
    """Whether ``text`` holds ``marker``: as words (case, punctuation and spacing aside)
    for a marker of words, else (``<html``, ``{"error":``) as it is, case aside."""
    if not marker[0].isalnum():
        return marker.casefold() in text.casefold()
    return f" {_words(marker)} " in f" {_words(text)} "


def _words(text: str) -> str:
    """The words of ``text``, casefolded, one space between them."""
    return " ".join(re.findall(r"\w+", text.replace("\u2019", "'").casefold()))
