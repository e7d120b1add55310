"""Detectors for contact details, identity numbers, card numbers and addresses.

Every pattern avoids ``\\b``: Python's word boundary treats CJK characters
as letters, so ``电话13800138000`` would never match. Boundaries are spelled
out as ASCII lookarounds instead (``(?<![0-9A-Za-z_])``), which lets a
secret touch Chinese or Japanese text, punctuation or emoji.
"""

from __future__ import annotations

import datetime
import ipaddress
import re
from collections.abc import Iterator

from ctxwindow.redact.base import PatternDetector, Span, fold

_BEFORE = r"(?<![0-9A-Za-z_])"  # not inside an ASCII word or number
_AFTER = r"(?![0-9A-Za-z_])"


_URL_AUTHORITY = re.compile(r"://[^\s/@]*$")


class Email(PatternDetector):
    """``local@domain.tld`` with ASCII local part and domain; the ``@`` also escaped as
    JSON (``\\u0040``) or HTML (``&#64;``) writes it.

    >>> Email().find("邮箱：li.lei+cw@example.com。")
    [(3, 24)]
    """

    def __init__(self) -> None:
        super().__init__(
            "EMAIL",
            r"(?<![A-Za-z0-9._%+-])[A-Za-z0-9_%+-][A-Za-z0-9._%+-]*"
            r"(?:@|\\u0040|&#64;|&#x40;)"
            r"[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}"
            r"(?![A-Za-z0-9-])",
        )

    def find(self, text: str) -> list[Span]:
        # In ``scheme://user:pw@host`` the part before ``@`` is a login, not a mailbox.
        return [(s, e) for s, e in super().find(text) if not _URL_AUTHORITY.search(text[:s])]


_CN_MOBILE = r"(?:(?:\+|00)86[ -]?|\(\+?86\)[ ]?)?1[3-9][0-9](?:[ -]?[0-9]{4}){2}"
_CN_LANDLINE = r"(?:\(0[1-9][0-9]{1,2}\)[ -]?|0[1-9][0-9]{1,2}-)[2-9][0-9]{6,7}"
_JP_MOBILE = r"0[789]0-[0-9]{4}-[0-9]{4}"
_INTERNATIONAL = r"\+[1-9][0-9]{0,2}(?:[ .-]?(?:\([0-9]{1,4}\)|[0-9]{1,4})){2,6}"
_NANP = r"(?:1[ -])?(?:\([2-9][0-9]{2}\)[ ]?|[2-9][0-9]{2}[-.])[2-9][0-9]{2}[-.][0-9]{4}"


def _plausible_phone(candidate: str) -> bool:
    digits = sum(ch.isdigit() for ch in candidate)
    return 8 <= digits <= 15 and candidate.count("(") == candidate.count(")")


class Phone(PatternDetector):
    """Chinese mainland mobiles and landlines, ``+CC`` international, NANP, JP mobiles.

    A mobile is ``1[3-9]`` plus nine digits, optionally after ``+86``/``0086``
    and split 3-4-4 by spaces or dashes; a landline needs its area code and a
    separator; international numbers need the leading ``+``; Japanese
    mobiles (``090-1234-5678``) and North American numbers need their dashes. Digit runs
    glued to other digits or letters (order ids, ``SF…`` tracking numbers)
    never match.

    >>> Phone().find("手机＋86 138-0013-8000，座机(010)62345678")
    [(2, 19), (22, 35)]
    """

    def __init__(self) -> None:
        alternatives = "|".join((_CN_MOBILE, _CN_LANDLINE, _JP_MOBILE, _INTERNATIONAL, _NANP))
        super().__init__(
            "PHONE",
            rf"(?<![0-9A-Za-z_+])(?:{alternatives}){_AFTER}(?!\.[0-9])",
            accept=_plausible_phone,
        )


_ID_WEIGHTS = (7, 9, 10, 5, 8, 4, 2, 1, 6, 3, 7, 9, 10, 5, 8, 4, 2)
_DATE = r"(?:0[1-9]|1[0-2])(?:0[1-9]|[12][0-9]|3[01])"


def cn_id_check_digit(first17: str) -> str:
    """The GB 11643-1999 check character of the first 17 digits.

    >>> cn_id_check_digit("11010519491231002")
    'X'
    """
    total = sum(int(digit) * weight for digit, weight in zip(first17, _ID_WEIGHTS, strict=True))
    return "10X98765432"[total % 11]


def _valid_date(yyyymmdd: str) -> bool:
    try:
        datetime.date(int(yyyymmdd[:4]), int(yyyymmdd[4:6]), int(yyyymmdd[6:]))
    except ValueError:
        return False
    return True


def valid_cn_id(number: str) -> bool:
    """An 18-digit resident ID with a real birth date and the right check digit."""
    number = number.replace(" ", "").upper()
    return (
        len(number) == 18
        and _valid_date(number[6:14])
        and cn_id_check_digit(number[:17]) == number[17]
    )


def _valid_legacy_id(number: str) -> bool:
    return len(number) == 15 and _valid_date("19" + number[6:12])


class CnId(PatternDetector):
    """Chinese resident ID numbers, checksum and birth date validated.

    18 digits (the last may be ``X``), optionally split 6-8-4 by spaces.
    ``legacy=True`` also matches the 15-digit pre-1999 form, which has no
    check digit (only the date is checked), so it is off by default.

    >>> CnId().find("身份证号11010519491231002X，另一个110105194912310021")
    [(4, 22)]
    """

    def __init__(self, legacy: bool = False) -> None:
        modern = rf"[1-9][0-9]{{5}} ?(?:18|19|20)[0-9]{{2}}{_DATE} ?[0-9]{{3}}[0-9Xx]"
        legacy_form = rf"|[1-9][0-9]{{5}}[0-9]{{2}}{_DATE}[0-9]{{3}}" if legacy else ""
        super().__init__(
            "CN_ID",
            rf"{_BEFORE}(?:{modern}{legacy_form}){_AFTER}",
            accept=lambda number: valid_cn_id(number) or _valid_legacy_id(number),
        )


def luhn_valid(digits: str) -> bool:
    """The Luhn (mod 10) check used by payment card numbers.

    >>> luhn_valid("4111111111111111"), luhn_valid("4111111111111112")
    (True, False)
    """
    total = 0
    for i, char in enumerate(reversed(digits)):
        value = int(char) * (2 if i % 2 else 1)
        total += value - 9 if value > 9 else value
    return total % 10 == 0


# Issuer prefixes: Mastercard 2221-2720, Diners/Amex/JCB 30 and 34-38,
# Visa 4, Mastercard 51-55, UnionPay/Discover/Maestro 6. Epoch milliseconds
# (1…), most order numbers and phone numbers fall outside.
_ISSUER = re.compile(r"2(?:22[1-9]|2[3-9][0-9]|[3-6][0-9]{2}|7[01][0-9]|720)|3[04-8]|4|5[1-5]|6")
_MAX_GROUPS = 6  # 19 digits in groups of at least 3
_DIGIT_RUN = re.compile(r"(?<![0-9A-Za-z_.+])[0-9]+(?:[ -][0-9]+)*")


def _card_like(groups: list[str]) -> bool:
    digits = "".join(groups)
    if not 13 <= len(digits) <= 19 or not _ISSUER.match(digits):
        return False
    if len(digits) == 13 and digits[0] != "4":
        return False  # only Visa issued 13-digit cards; EAN-13 barcodes look alike
    if len(groups) > 1 and not (len(groups[0]) == 4 and all(3 <= len(g) <= 6 for g in groups)):
        return False
    return luhn_valid(digits)


class BankCard:
    """Payment card numbers: 13-19 digits, issuer prefix, Luhn-valid.

    Issuer prefixes: 2221-2720, 30, 34-38, 4, 51-55 and 6 (epoch
    milliseconds, order numbers and phone numbers mostly fall outside); 13
    digits only for Visa (``4``).

    Digits may be grouped by single spaces or dashes (4-4-4-4, 4-6-5…). A
    run of several numbers yields each card in it; digits glued to letters,
    dots or other digits do not match.

    >>> BankCard().find("卡号 6222 0200 0000 0000 000 已绑定")
    [(3, 26)]
    """

    name = "BANK_CARD"

    def find(self, text: str) -> list[Span]:
        text = fold(text)
        spans: list[Span] = []
        for run in _DIGIT_RUN.finditer(text):
            if re.match(r"[A-Za-z_]|\.[0-9]", text[run.end() : run.end() + 2]):
                continue
            spans.extend(self._cards(run.group(), run.start()))
        return spans

    def _cards(self, run: str, offset: int) -> Iterator[Span]:
        bounds = [(m.start(), m.end()) for m in re.finditer(r"[0-9]+", run)]
        groups = [run[start:end] for start, end in bounds]
        i = 0
        while i < len(groups):
            last = min(len(groups), i + _MAX_GROUPS)  # bounded: long digit runs stay linear
            j = next((j for j in range(last, i, -1) if _card_like(groups[i:j])), None)
            if j is None:
                i += 1
                continue
            yield offset + bounds[i][0], offset + bounds[j - 1][1]
            i = j

    def __repr__(self) -> str:
        return "BankCard()"


_OCTET = r"(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])"
_IPV4 = rf"(?<![0-9A-Za-z_.]){_OCTET}(?:\.{_OCTET}){{3}}(?![0-9A-Za-z_]|\.[0-9])"
_IPV6 = (
    r"(?<![0-9A-Za-z_:.])(?:[0-9A-Fa-f]{0,4}:){2,7}"
    r"(?:[0-9A-Fa-f]{1,4}|(?:[0-9]{1,3}\.){3}[0-9]{1,3})?"  # the last group, or an IPv4 tail
    r"(?![0-9A-Za-z_:]|\.[0-9])"
)
_VERSION_CONTEXT = re.compile(
    r"(?:\bv|version|ver\.?|release|build|版本号?|バージョン)\s*[:=]?\s*$", re.IGNORECASE
)


def _ipv6(candidate: str) -> bool:
    try:
        ipaddress.IPv6Address(candidate)
    except ValueError:
        return False
    groups = [group for group in re.split(r":+", candidate) if group]
    # "1::2" is a slice and "dead::beef" a word; a real address has a digit
    # and a group of three or more characters (or is the loopback ``::1``).
    return candidate == "::1" or (
        any(ch.isdigit() for ch in candidate) and any(len(group) >= 3 for group in groups)
    )


def _says_nothing(address: str) -> bool:
    ip = ipaddress.ip_address(address)
    return ip.is_loopback or ip.is_unspecified


class IPAddress:
    """IPv4 (each octet 0-255, no leading zeros) and IPv6 (compressed forms too).

    A dotted quad right after ``v``, ``version``, ``release``, ``build``,
    ``版本`` or ``バージョン`` is a version number, not an address; three
    parts (``1.2.3``) never match. Loopback and unspecified addresses
    (``127.0.0.1``, ``::1``, ``0.0.0.0``) identify no one and are kept unless
    ``loopback=True``.

    >>> IPAddress().find("服务器192.168.1.10，版本 1.2.3.4，网关 fe80::1ff:fe23:4567:890a")
    [(3, 15), (30, 54)]
    """

    name = "IP"

    def __init__(self, loopback: bool = False) -> None:
        self.loopback = loopback

    def find(self, text: str) -> list[Span]:
        text = fold(text)
        v6 = [m.span() for m in re.finditer(_IPV6, text) if _ipv6(m.group())]
        v4 = [
            m.span()
            for m in re.finditer(_IPV4, text)
            if not _VERSION_CONTEXT.search(text[max(0, m.start() - 16) : m.start()])
            and not any(s <= m.start() < e for s, e in v6)  # the tail of ::ffff:1.2.3.4
        ]
        spans = sorted(v4 + v6)
        if self.loopback:
            return spans
        return [(s, e) for s, e in spans if not _says_nothing(text[s:e])]

    def __repr__(self) -> str:
        return f"IPAddress(loopback={self.loopback})"


_SSN = r"(?!000|666|9[0-9]{2})[0-9]{3}-(?!00)[0-9]{2}-(?!0000)[0-9]{4}"
_SSN_KEYWORD = r"(?i:ssn|social[ \t]+security(?:[ \t]+(?:number|no\.?|#))?)[ \t]*[:#]?[ \t]*"
_SSN_PLAIN = r"(?!000|666|9[0-9]{2})[0-9]{3}[ ]?(?!00)[0-9]{2}[ ]?(?!0000)[0-9]{4}"


class Ssn(PatternDetector):
    """US Social Security numbers: ``123-45-6789`` anywhere (area not 000, 666 or 9xx,
    group not 00, serial not 0000), and nine digits (spaced 3-2-4 or not) after ``SSN``
    or ``social security number``. Dashed runs glued to other digits, letters or
    dashes (``2024-01-1234``, order ids) never match.

    >>> text = "SSN: 219 09 9999, backup 078-05-1120"
    >>> [text[s:e] for s, e in Ssn().find(text)]
    ['219 09 9999', '078-05-1120']
    """

    def __init__(self) -> None:
        super().__init__(
            "SSN",
            rf"(?:(?<![A-Za-z]){_SSN_KEYWORD}(?P<keyed>{_SSN_PLAIN})|(?<![0-9A-Za-z-])"
            rf"(?P<dashed>{_SSN}))(?![0-9A-Za-z-])",
        )

    def _spans(self, text: str) -> Iterator[Span]:
        for match in self.pattern.finditer(text):
            yield match.span("keyed" if match.group("keyed") is not None else "dashed")
