"""Secrets carried by URLs: webhook paths and token-like query parameters."""

from __future__ import annotations

import re
from collections.abc import Iterator

from ctxwindow.redact.base import PatternDetector, Span

# Webhook URLs whose path is the secret: whoever has it can post. The host
# stays, so the model still knows it was a Slack or Discord webhook.
# A slash may come escaped (``\/``), as JSON writers such as PHP's escape it.
_S = r"\\?/"
_WEBHOOK_PATHS = (
    rf"hooks\.slack\.com{_S}(?:services|workflows|triggers){_S}"
    rf"(?P<slack>(?:[A-Za-z0-9_-]|{_S}){{20,}})",
    rf"(?:(?:ptb|canary)\.)?discord(?:app)?\.com{_S}api(?:{_S}v[0-9]+)?{_S}webhooks{_S}"
    rf"(?P<discord>[0-9]{{15,21}}{_S}[A-Za-z0-9_-]{{30,}})",
    rf"[A-Za-z0-9-]+\.webhook\.office\.com{_S}webhookb2{_S}"
    rf"(?P<teams>(?:[A-Za-z0-9@-]|{_S}){{40,}})",
)
_WEBHOOK = "|".join(rf"https?:{_S}{_S}{path}" for path in _WEBHOOK_PATHS)
# Query (or fragment) parameters named like a credential.
SECRET_PARAMS = (
    "token",
    "access_token",
    "refresh_token",
    "id_token",
    "auth_token",
    "api_key",
    "apikey",
    "api-key",
    "key",
    "secret",
    "client_secret",
    "sig",
    "signature",
    "x-amz-signature",
    "x-amz-security-token",
    "x-goog-signature",
)
_PARAM = (
    rf"(?<=[?&;#])(?i:{'|'.join(re.escape(name) for name in SECRET_PARAMS)})"
    r"=(?P<param>[^&#;\s\"'<>`]+)"
)
_TEMPLATE = re.compile(r"[{$<%]|YOUR_|xxx", re.IGNORECASE)


def _secret_looking(value: str) -> bool:
    """8+ characters with a digit, or 20+: not ``key=title``, ``token=YOUR_TOKEN``, ``{token}``."""
    value = value.rstrip(".,:!?)]}")
    if _TEMPLATE.match(value) or value.upper().startswith("YOUR"):
        return False
    return len(value) >= 20 or (len(value) >= 8 and any(ch.isdigit() for ch in value))


class UrlSecret(PatternDetector):
    """The secret part of a URL: a webhook's path, or a credential in its query.

    - Slack ``hooks.slack.com/services/…`` (also ``workflows``/``triggers``),
      Discord ``discord.com/api/webhooks/<id>/<token>`` and Microsoft Teams
      ``….webhook.office.com/webhookb2/…``: everything after the fixed part.
    - Query or fragment parameters named ``token``, ``access_token``,
      ``sig``, ``signature``, ``secret``, ``key``, ``api_key``… (see
      ``SECRET_PARAMS``): the value, when it looks like a secret (8+
      characters with a digit, or 20+) and not a template (``{token}``,
      ``YOUR_KEY``). ``?page=2&sort=key`` and ``?key=title`` stay.

    >>> text = "curl 'https://api.example.com/v1/export?format=csv&token=9f8e7d6c5b4a3210'"
    >>> [text[s:e] for s, e in UrlSecret().find(text)]
    ['9f8e7d6c5b4a3210']
    """

    def __init__(self) -> None:
        super().__init__("URL_SECRET", f"{_WEBHOOK}|{_PARAM}")

    def _spans(self, text: str) -> Iterator[Span]:
        for match in self.pattern.finditer(text):
            group = next(g for g, value in match.groupdict().items() if value is not None)
            start, end = match.span(group)
            value = text[start:end]
            if group != "param":
                yield start, start + len(value.rstrip("/"))
            elif _secret_looking(value):
                yield start, start + len(value.rstrip(".,:!?)]}"))
