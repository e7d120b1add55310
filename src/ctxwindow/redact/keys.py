"""Detectors for private keys and the secret keys of cloud accounts."""

from __future__ import annotations

import re
from collections.abc import Iterator

from ctxwindow.redact.base import PatternDetector, Span, fold

# PEM (PKCS#1, PKCS#8, SEC1, encrypted), OpenSSH and PGP private keys, and
# the SSH2 form ("---- BEGIN SSH2 ENCRYPTED PRIVATE KEY ----"). Certificates
# and public keys are public and never match.
_LABEL = r"(?:[A-Z0-9]+ ){0,3}PRIVATE KEY(?: BLOCK)?"
_BEGIN = re.compile(rf"-{{4,5}} ?BEGIN {_LABEL} ?-{{4,5}}")
_END = re.compile(rf"-{{4,5}} ?END {_LABEL} ?-{{4,5}}")
# What lies between: base64, whitespace, JSON escapes (``\n``, ``\/``) and
# the headers of legacy encrypted keys. No dash, so it stops at the END line.
_HEADER = r"(?:Proc-Type|DEK-Info|Comment|Version|Hash):[^\r\n\\]*(?:\\[nr])*"
_BODY = re.compile(rf"(?:{_HEADER}|[A-Za-z0-9+/=\s\\])*")
# A key cut short (pasted in part, or a preview): the lines of base64 after BEGIN.
_LINE_END = r"(?=[ \t]*(?:\r?\n|\Z|[\"'`,.…]))"
_TRUNCATED = re.compile(
    rf"(?:[ \t]*[A-Za-z0-9+/=\\]+{_LINE_END})?"
    rf"(?:\r?\n[ \t]*(?:{_HEADER}|[A-Za-z0-9+/=\\]+{_LINE_END}))*"
)
_KEY_MATERIAL = re.compile(r"[A-Za-z0-9+/]{16}")  # "<your key here>" is not a key
# A key cut to its last lines: base64 lines, then the END line (no BEGIN before them).
_TAIL = re.compile(rf"(?m)^(?:[ \t]*[A-Za-z0-9+/=]{{4,}}[ \t]*\r?\n)+[ \t]*{_END.pattern}")
# A PuTTY key file's private part: "Private-Lines: N", then N lines of base64.
_PUTTY = re.compile(r"Private-Lines:[ \t]*(?P<n>[0-9]{1,3})[ \t]*\r?\n")
_BASE64_LINE = re.compile(r"[A-Za-z0-9+/=]{4,}(?=[ \t]*(?:\r?\n|\Z))")


class PrivateKey:
    """Private key blocks, masked whole: ``-----BEGIN … PRIVATE KEY-----`` to ``-----END …-----``.

    PEM keys (RSA, EC, DSA, PKCS#8, encrypted), OpenSSH and PGP private
    keys; also inside JSON with ``\\n`` escapes (a GCP service-account
    file's ``private_key``). A block cut short (no END line) is masked from
    BEGIN to the end of its base64 lines. A block needs 16 base64 characters
    in a row, so a template (``<your key here>``) is left alone, and
    ``-----BEGIN CERTIFICATE-----`` or ``PUBLIC KEY`` blocks never match.

    >>> pem = "-----BEGIN EC PRIVATE KEY-----\\nMHcCAQEEIBkg4LVWM9n\\n-----END EC PRIVATE KEY-----"
    >>> PrivateKey().find(f"key:\\n{pem}\\nok?") == [(5, 5 + len(pem))]
    True
    """

    name = "PRIVATE_KEY"

    def find(self, text: str) -> list[Span]:
        text = fold(text)
        blocks = list(self._blocks(text))
        for start, end in [*self._tails(text), *self._putty(text)]:
            if not any(s < end and start < e for s, e in blocks):
                blocks.append((start, end))
        return sorted(blocks)

    @staticmethod
    def _tails(text: str) -> Iterator[Span]:
        for match in _TAIL.finditer(text):
            if _KEY_MATERIAL.search(match.group()):
                yield match.start() + len(match.group()) - len(match.group().lstrip()), match.end()

    @staticmethod
    def _putty(text: str) -> Iterator[Span]:
        for match in _PUTTY.finditer(text):
            start = at = end = match.end()
            for _ in range(int(match.group("n"))):
                line = _BASE64_LINE.match(text, at)
                if line is None:
                    break
                end = line.end()
                at = text.find("\n", end) + 1 or len(text)
            if _KEY_MATERIAL.search(text, start, end):
                yield start, end

    def _blocks(self, text: str) -> Iterator[Span]:
        at = 0
        while (begin := _BEGIN.search(text, at)) is not None:
            body = _BODY.match(text, begin.end())
            assert body is not None  # the pattern matches the empty string
            end = _END.match(text, body.end())
            if end is None:  # cut short: only the base64 lines that follow BEGIN
                body = _TRUNCATED.match(text, begin.end())
                assert body is not None
            if _KEY_MATERIAL.search(body.group()):
                yield begin.start(), (end or body).end()
            at = (end or body).end()

    def __repr__(self) -> str:
        return "PrivateKey()"


# The value after a keyword that names a cloud secret: AWS secret access keys
# and session tokens, Azure storage account keys and Service Bus keys.
_CLOUD_KEYWORDS = {
    r"(?:aws[ _-]?)?secret[ _-]?access[ _-]?key|aws[ _-]?secret(?:[ _-]?key)?": (
        r"[A-Za-z0-9/+]{40}"
    ),
    # "the secret: <40 base64 characters>": the shape of an AWS secret access key
    r"(?<![_.-])secret": r"(?=[A-Za-z0-9/+]*[0-9/+])(?=[A-Za-z0-9/+]*[a-z])[A-Za-z0-9/+]{40}",
    r"aws_?session_?token|SessionToken|x-amz-security-token": r"[A-Za-z0-9/+=%]{100,}",
    r"AccountKey|SharedAccessKey|azure_?storage_?(?:account_?)?(?:access_?)?key": (
        r"[A-Za-z0-9+/]{20,}={0,2}"
    ),
    r"azure_?client_?secret": r"[A-Za-z0-9_.~-]{30,}",
}
_KEYED = "|".join(
    rf"(?i:{keyword})[\"']?(?:[ \t]*[:=]|[ \t]+(?i:is|was)|(?=[ \t]))[ \t]*[\"']?(?P<v{i}>{value})"
    for i, (keyword, value) in enumerate(_CLOUD_KEYWORDS.items())
)
# An access key id (AWS, or a GCS HMAC key) makes a nearby 40-character
# base64 string its secret, even without a keyword.
_ACCESS_KEY_ID = re.compile(r"(?<![A-Za-z0-9])(?:AKIA|ASIA)[0-9A-Z]{16}|GOOG1[0-9A-Z]{20,}")
_BARE_SECRET = re.compile(r"(?<![A-Za-z0-9/+=])[A-Za-z0-9/+]{40}(?![A-Za-z0-9/+=])")
_NEAR = 200  # characters either side


def _random_looking(value: str) -> bool:
    """Upper and lower case and a digit or ``/+``: not a word, not a hex hash."""
    return (
        any(ch.isupper() for ch in value)
        and any(ch.islower() for ch in value)
        and any(ch.isdigit() or ch in "/+" for ch in value)
    )


class CloudKey(PatternDetector):
    """Secret keys of cloud accounts; the keyword or the key id stays.

    - AWS: the value of ``aws_secret_access_key``/``SecretAccessKey``/"AWS
      secret key" (40 characters, after ``:``, ``=`` or ``is``), of
      ``secret:`` when it has that shape, and ``aws_session_token``/
      ``SessionToken``; and a
      40-character secret within 200 characters of an access key id
      (``AKIA…``/``ASIA…``, or a GCS HMAC ``GOOG1…``) when it looks random
      (both cases and a digit or ``/+``: never a commit hash or a word).
    - Azure: ``AccountKey=`` and ``SharedAccessKey=`` in connection strings,
      ``AZURE_STORAGE_KEY``, ``AZURE_CLIENT_SECRET``.

    GCP service-account keys are PEM blocks: ``PrivateKey`` masks them.

    >>> CloudKey().find("aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY")
    [(24, 64)]
    """

    def __init__(self) -> None:
        super().__init__("CLOUD_KEY", rf"(?<![A-Za-z0-9])(?:{_KEYED})(?![A-Za-z0-9/+=])")

    def _spans(self, text: str) -> Iterator[Span]:
        keyed = {_value_span(match) for match in self.pattern.finditer(text)}
        near = set(_near_a_key_id(text)) if _ACCESS_KEY_ID.search(text) else set()
        return iter(sorted(keyed | near))


def _value_span(match: re.Match[str]) -> Span:
    return next(match.span(g) for g, value in match.groupdict().items() if value is not None)


def _near_a_key_id(text: str) -> Iterator[Span]:
    for match in _BARE_SECRET.finditer(text):
        start, end = match.span()
        around = text[max(0, start - _NEAR) : end + _NEAR]
        if _random_looking(match.group()) and _ACCESS_KEY_ID.search(around):
            yield start, end
