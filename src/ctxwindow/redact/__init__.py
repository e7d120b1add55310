"""Redaction: secrets in messages replaced by typed placeholders.

A redactor is a pipeline of detectors with one signature (``Detector``:
``name`` and ``find(text) -> spans``). ``Redactor(message)`` returns a new
message whose text content and tool-call arguments have each secret, not
its keyword, replaced by ``[TYPE]``; ``Redactor.counts`` feeds the metrics.

>>> redact = Redactor()
>>> redact.redact_text("身份证11010519491231002X，卡号4111 1111 1111 1111")[0]
'身份证[CN_ID]，卡号[BANK_CARD]'
>>> redact.redact_text("IBAN DE89 3704 0044 0532 0130 00，密碼：abc123")[0]
'IBAN [IBAN]，密碼：[PASSWORD]'
"""

from ctxwindow.redact.base import Detector, PatternDetector, Span, fold
from ctxwindow.redact.credentials import ApiKey, Password, Secret
from ctxwindow.redact.detectors import (
    BankCard,
    CnId,
    Email,
    IPAddress,
    Phone,
    Ssn,
    cn_id_check_digit,
    luhn_valid,
    valid_cn_id,
)
from ctxwindow.redact.iban import IBAN_LENGTHS, Iban, iban_valid
from ctxwindow.redact.keys import CloudKey, PrivateKey
from ctxwindow.redact.redactor import (
    DEFAULT_DETECTORS,
    RedactFn,
    Redactor,
    redacted_preview,
    resolve,
)
from ctxwindow.redact.urls import SECRET_PARAMS, UrlSecret

__all__ = [
    "DEFAULT_DETECTORS",
    "IBAN_LENGTHS",
    "SECRET_PARAMS",
    "ApiKey",
    "BankCard",
    "CloudKey",
    "CnId",
    "Detector",
    "Email",
    "IPAddress",
    "Iban",
    "Password",
    "PatternDetector",
    "Phone",
    "PrivateKey",
    "RedactFn",
    "Redactor",
    "Secret",
    "Span",
    "Ssn",
    "UrlSecret",
    "cn_id_check_digit",
    "fold",
    "iban_valid",
    "luhn_valid",
    "redacted_preview",
    "resolve",
    "valid_cn_id",
]
