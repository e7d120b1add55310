"""IBAN: International Bank Account Numbers, validated by length and mod-97."""

from __future__ import annotations

import re
from collections.abc import Iterator

from ctxwindow.redact.base import Span, fold

# Length of the IBAN of each country in the SWIFT IBAN registry (release 101).
IBAN_LENGTHS = {
    **dict(AD=24, AE=23, AL=28, AT=20, AZ=28, BA=20, BE=16, BG=22, BH=22, BI=27, BR=29),
    **dict(BY=28, CH=21, CR=22, CY=28, CZ=24, DE=22, DJ=27, DK=18, DO=28, EE=20, EG=29),
    **dict(ES=24, FI=18, FK=18, FO=18, FR=27, GB=22, GE=22, GI=23, GL=18, GR=27, GT=28),
    **dict(HN=28, HR=21, HU=28, IE=22, IL=23, IQ=23, IS=26, IT=27, JO=30, KW=30, KZ=20),
    **dict(LB=28, LC=32, LI=21, LT=20, LU=20, LV=21, LY=25, MC=27, MD=24, ME=22, MK=19),
    **dict(MN=20, MR=27, MT=31, MU=30, NI=28, NL=18, NO=15, OM=23, PK=24, PL=28, PS=29),
    **dict(PT=25, QA=29, RO=24, RS=22, RU=33, SA=24, SC=31, SD=18, SE=24, SI=19, SK=24),
    **dict(SM=27, SO=23, ST=25, SV=28, TL=23, TN=24, TR=26, UA=29, VA=22, VG=24, XK=20),
    **dict(YE=30),
}

# Country code and check digits, then the rest: compact, or in groups of four
# split by single spaces (the printed form). Either case (typed in lower case, too):
# the length and the mod-97 check keep words and numbers out.
_CANDIDATE = re.compile(
    r"(?<![0-9A-Za-z_])[A-Za-z]{2}[0-9]{2}"
    r"(?:[0-9A-Za-z]{11,30}|(?: [0-9A-Za-z]{4}){2,7}(?: [0-9A-Za-z]{1,3})?)"
    r"(?![0-9A-Za-z_])"
)
_GROUPED = re.compile(r"[A-Za-z]{2}[0-9]{2}(?: [0-9A-Za-z]{4})+(?: [0-9A-Za-z]{1,3})?")


def iban_valid(iban: str) -> bool:
    """The country's length and the ISO 13616 mod-97 check (spaces ignored).

    >>> iban_valid("GB82 WEST 1234 5698 7654 32"), iban_valid("GB82 WEST 1234 5698 7654 33")
    (True, False)
    """
    compact = iban.replace(" ", "").upper()
    if not compact.isascii() or not compact.isalnum():
        return False
    if IBAN_LENGTHS.get(compact[:2]) != len(compact):
        return False
    digits = "".join(str(int(ch, 36)) for ch in compact[4:] + compact[:4])
    return int(digits) % 97 == 1


class Iban:
    """IBANs with the right length for their country and a valid mod-97 check.

    Compact (``DE89370400440532013000``) or printed in groups of four
    (``DE89 3704 0044 0532 0130 00``). A number that fails the check, has
    the wrong length or an unknown country code is left alone, and so are
    a grouped IBAN's neighbours (``… 0130 00 2024`` keeps ``2024``).

    >>> Iban().find("收款账户：DE89 3704 0044 0532 0130 00，谢谢")
    [(5, 32)]
    """

    name = "IBAN"

    def find(self, text: str) -> list[Span]:
        text = fold(text)
        return [span for match in _CANDIDATE.finditer(text) for span in _ibans(match)]

    def __repr__(self) -> str:
        return "Iban()"


def _ibans(match: re.Match[str]) -> Iterator[Span]:
    """The IBAN a candidate holds: all of it, or a grouped prefix of the right length."""
    candidate, start = match.group(), match.start()
    if iban_valid(candidate):
        yield start, match.end()
        return
    length = IBAN_LENGTHS.get(candidate[:2].upper())
    if length is None or not _GROUPED.fullmatch(candidate):
        return
    # Printed: the IBAN ends with its last group, and a number may follow.
    cut = length + (length - 1) // 4  # characters including the spaces
    if cut < len(candidate) and candidate[cut] == " " and iban_valid(candidate[:cut]):
        yield start, start + cut
