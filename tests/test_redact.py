"""Redaction: the detectors, the Redactor, and precision/recall over a labelled corpus."""

from __future__ import annotations

import base64
import copy
import json
import random
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ctxwindow.redact import (
    DEFAULT_DETECTORS,
    IBAN_LENGTHS,
    ApiKey,
    BankCard,
    CloudKey,
    CnId,
    Detector,
    Email,
    Iban,
    IPAddress,
    Password,
    PatternDetector,
    Phone,
    PrivateKey,
    Redactor,
    UrlSecret,
    cn_id_check_digit,
    fold,
    iban_valid,
    luhn_valid,
    redacted_preview,
    resolve,
    valid_cn_id,
)

CORPUS = Path(__file__).parent / "data" / "redaction_corpus.jsonl"
TYPES = (
    *("EMAIL", "PHONE", "CN_ID", "BANK_CARD", "API_KEY", "PASSWORD", "IP"),
    *("PRIVATE_KEY", "IBAN", "CLOUD_KEY", "URL_SECRET", "SECRET", "SSN"),
)


def found(detector: Detector, text: str) -> list[str]:
    return [text[start:end] for start, end in detector.find(text)]


# --- the corpus ------------------------------------------------------------


def load_corpus() -> list[dict[str, Any]]:
    return [json.loads(line) for line in CORPUS.read_text(encoding="utf-8").splitlines()]


def predicted(redactor: Redactor, text: str) -> set[tuple[str, int, int]]:
    spans = [
        (span, index)
        for index, detector in enumerate(redactor.detectors)
        for span in detector.find(text)
    ]
    return {(redactor.detectors[i].name, s, e) for (s, e), i in resolve(spans)}


def score(rows: list[dict[str, Any]]) -> dict[str, Counter[str]]:
    """Exact-span true positives, false positives and false negatives per type."""
    redactor = Redactor()
    table: dict[str, Counter[str]] = {name: Counter() for name in TYPES}
    for row in rows:
        gold = {(e["type"], e["start"], e["end"]) for e in row["entities"]}
        pred = predicted(redactor, row["text"])
        for name, *_ in pred & gold:
            table[name]["tp"] += 1
        for name, *_ in pred - gold:
            table[name]["fp"] += 1
        for name, *_ in gold - pred:
            table[name]["fn"] += 1
    return table


def ratio(part: int, whole: int) -> float:
    return part / whole if whole else 1.0


def test_corpus_is_well_formed() -> None:
    """300+ lines, spans point at their values, negatives and four languages present."""
    rows = load_corpus()
    assert len(rows) >= 300
    assert [row["id"] for row in rows] == list(range(1, len(rows) + 1))
    assert {row["lang"] for row in rows} == {"en", "zh", "ja", "ko"}
    assert sum(not row["entities"] for row in rows) >= 120
    for row in rows:
        for entity in row["entities"]:
            assert entity["type"] in TYPES
            assert row["text"][entity["start"] : entity["end"]] == entity["value"]
    assert {e["type"] for row in rows for e in row["entities"]} == set(TYPES)


def test_corpus_precision_and_recall() -> None:
    """Exact-span figures no lower than measured (the table prints with -s).

    Measured on 357 lines: precision 0.992 (247 tp, 2 fp) and recall 1.000
    (0 fn) overall, every type 0.91 or more; the floors sit below. The false
    positives are a four-part version without a keyword and
    `?key=2024-report-final`. (The corpus was written with the detectors:
    these floors catch regressions, they are not real-world accuracy.)
    """
    table = score(load_corpus())
    total: Counter[str] = sum(table.values(), Counter())
    print(f"\n{'type':<12} {'tp':>4} {'fp':>4} {'fn':>4} {'precision':>10} {'recall':>8}")
    for name, c in [*table.items(), ("overall", total)]:
        precision = ratio(c["tp"], c["tp"] + c["fp"])
        recall = ratio(c["tp"], c["tp"] + c["fn"])
        print(
            f"{name:<12} {c['tp']:>4} {c['fp']:>4} {c['fn']:>4} {precision:>10.3f} {recall:>8.3f}"
        )
    assert ratio(total["tp"], total["tp"] + total["fp"]) >= 0.99
    assert ratio(total["tp"], total["tp"] + total["fn"]) >= 0.99
    for c in table.values():
        assert ratio(c["tp"], c["tp"] + c["fp"]) >= 0.9
        assert ratio(c["tp"], c["tp"] + c["fn"]) >= 0.85


# --- detectors ---------------------------------------------------------------


def test_every_default_detector_satisfies_the_protocol() -> None:
    names = [detector.name for detector in DEFAULT_DETECTORS]
    assert all(isinstance(detector, Detector) for detector in DEFAULT_DETECTORS)
    assert sorted(names) == sorted(TYPES)
    assert all(repr(detector) for detector in DEFAULT_DETECTORS)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("邮箱：li.lei@example.com。", ["li.lei@example.com"]),
        ("mail a+b@x.co.uk, or c_d@y.io", ["a+b@x.co.uk", "c_d@y.io"]),
        ("联系ｌｉ＠ｅｘａｍｐｌｅ．ｃｏｍ吧", ["ｌｉ＠ｅｘａｍｐｌｅ．ｃｏｍ"]),
        ("@property and pkg@1.2.3 and v2@latest", []),
        ("https://user@github.com/x and https://bob:pw@example.com", []),
        ("mailto:x@example.com", ["x@example.com"]),
    ],
)
def test_email(text: str, expected: list[str]) -> None:
    assert found(Email(), text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("手机13800138000", ["13800138000"]),
        ("电话：+86 138-0013-8000。", ["+86 138-0013-8000"]),
        ("0086 15912345678", ["0086 15912345678"]),
        ("号码１３９１２３４５６７８", ["１３９１２３４５６７８"]),
        ("座机010-62345678和(0755)86013388", ["010-62345678", "(0755)86013388"]),
        ("call +44 20 7946 0958 now", ["+44 20 7946 0958"]),
        ("US (212) 555-0199 or 650-253-0000", ["(212) 555-0199", "650-253-0000"]),
        ("toll-free 1-800-555-0199", ["1-800-555-0199"]),
        ("订单号202311291380013800", []),
        ("运单SF13800138000", []),
        ("2023-11-29 14:30, v10.2.3, 1701234567890", []),
        ("12138001380001", []),
    ],
)
def test_phone(text: str, expected: list[str]) -> None:
    assert found(Phone(), text) == expected


def test_cn_id_checksum_and_birth_date() -> None:
    good = "11010519491231002X"
    assert cn_id_check_digit(good[:17]) == "X"
    assert valid_cn_id(good) and valid_cn_id(good.lower())
    assert not valid_cn_id("110105194912310021")  # check digit
    first17 = "11010519490230002"  # 30 February
    assert not valid_cn_id(first17 + cn_id_check_digit(first17))
    assert found(CnId(), f"身份证{good}号") == [good]
    assert found(CnId(), "证件110105 19491231 002X") == ["110105 19491231 002X"]
    assert found(CnId(), f"A{good}") == []
    assert found(CnId(), f"{good}9") == []


def test_cn_id_legacy_15_digits_is_opt_in() -> None:
    text = "旧证件号110105491231002"
    assert found(CnId(), text) == []
    assert found(CnId(legacy=True), text) == ["110105491231002"]
    assert found(CnId(legacy=True), "订单202311291234567") == []  # month 12, day 34


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("卡号4111111111111111", ["4111111111111111"]),
        ("card 4111 1111 1111 1111 exp 12/27", ["4111 1111 1111 1111"]),
        ("amex 3782-822463-10005", ["3782-822463-10005"]),
        ("two: 4111111111111111 5500000000000004", ["4111111111111111", "5500000000000004"]),
        ("bad 4111111111111112", []),  # Luhn
        ("epoch 1701234567890", []),  # issuer prefix
        ("EAN 6901234567892", []),  # 13 digits, not Visa
        ("SN4111111111111111 and 4111111111111111.25", []),
        ("longer run 41111111111111110", []),
    ],
)
def test_bank_card(text: str, expected: list[str]) -> None:
    assert luhn_valid("4111111111111111")
    assert found(BankCard(), text) == expected


@pytest.mark.parametrize(
    "key",
    [
        "sk-" + "a1B2c3D4e5" * 4,
        "sk-proj-" + "Ab3_-" * 10,
        "sk-ant-api03-" + "x9Y8z7" * 10,
        "AKIAIOSFODNN7EXAMPLE",
        "ghp_" + "a1" * 18,
        "github_pat_11ABCDE" + "x1" * 20,
        "xoxb-1234567890-abcdefghij",
        "AIza" + "Sy" + "A1b2C3d4E5" * 3 + "xyz",
        "sk_live_" + "4eC39HqLyjWDarjtT1zdp7dc",
        "rk_live_" + "4eC39HqLyjWDarjtT1zdp7dc",
        "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
    ],
)
def test_api_key_formats(key: str) -> None:
    assert found(ApiKey(), f"这是key：{key}，别外传") == [key]


def test_bearer_keeps_the_keyword() -> None:
    token = "abcDEF0123456789ghiJKL"
    assert found(ApiKey(), f"Authorization: Bearer {token}") == [token]
    assert found(ApiKey(), "uses a Bearer token in the header") == []


@pytest.mark.parametrize(
    "text",
    ["a risk-assessment by the task-force", "sk-learn", "Replace sk-xxxxxxxxxxxxxxxxxxxxxxxx"],
)
def test_api_key_look_alikes(text: str) -> None:
    assert found(ApiKey(), text) == []


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("password: hunter2", "hunter2"),
        ("Password = 'P@ss w0rd'", "P@ss w0rd"),
        ('{"password": "s3cret"}', "s3cret"),
        ("pwd:qwerty123 (temp)", "qwerty123"),
        ("your passcode is 482913.", "482913"),
        ("密码：abc123，请勿外传", "abc123"),
        ("密码是Zhang@2024", "Zhang@2024"),
        ("口令：Open-42", "Open-42"),
        ("パスワード：himitsu99", "himitsu99"),
        ("パスワードは「秘密の合言葉」です", "秘密の合言葉"),
        ("redis://:s3cret-pw@127.0.0.1:6379/0", "s3cret-pw"),
        ("WiFi：MyHome 密码 12345678", "12345678"),
        ("Meeting passcode 482913", "482913"),
        ("https://bob:Hunter2@example.com/x", "Hunter2"),
        ("password: letmein", "letmein"),
        ("Password: admin, user: root", "admin"),
        ("password=letmein user=bob", "letmein"),
        ("password: hunterTwo and then log in", "hunterTwo"),
    ],
)
def test_password_value_only(text: str, value: str) -> None:
    assert found(Password(), text) == [value]


@pytest.mark.parametrize(
    "text",
    [
        "Click the password reset link.",
        "The password is incorrect.",
        "password_reset: true",
        "忘记密码？",
        "密码错误",
        "Password:",
        "password=*** and postgresql://app:***@db/prod",
        "reset your password: click the link",
        "Forgot your password: reset it here.",
        "Password: Click here to change it",
        "password: see the wiki",
        "password: [PASSWORD] and 密码：[PASSWORD]",
        "password: true",
        "Password: N/A",
    ],
)
def test_password_look_alikes(text: str) -> None:
    assert found(Password(), text) == []


def test_prose_after_password_keeps_its_words() -> None:
    """A plain word followed by more words is prose: "click" is not a password."""
    for text in ["reset your password: click the link", "your password: click here: https://x.io"]:
        assert Redactor().redact_text(text) == (text, {})


@pytest.mark.parametrize("joined", ["and", "&"])
def test_a_plain_word_before_the_next_field_is_a_password(joined: str) -> None:
    """``password: letmein and username: bob`` lists fields: the word is the value."""
    assert found(Password(), f"password: letmein {joined} username: bob") == ["letmein"]


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("密码是 abc123!", "abc123!"),
        ("口令：Open-42", "Open-42"),
        ("密碼：abc123", "abc123"),
        ("登入密碼是 Abc!123", "Abc!123"),
        ("密码是：abc123", "abc123"),
        ("我的密码就是 abc123!，别告诉别人", "abc123!"),
        ("密码改成了 qq123456。", "qq123456"),
        ("WiFi密码设置为：Qwe_123", "Qwe_123"),
        ("密码：“hello world”", "hello world"),
        ("パスワードは『ひみつ 42』です", "ひみつ 42"),
        ("パスワード：abc123😀", "abc123"),
        ("パスワードを変更しました: newPass123", "newPass123"),
        ("パスワードを設定した：Kz-2024", "Kz-2024"),
    ],
)
def test_cjk_password_phrasing(text: str, value: str) -> None:
    assert found(Password(), text) == [value]


@pytest.mark.parametrize(
    "text",
    [
        *("密码是什么？", "忘记密码了怎么办", "请输入密码：", "密码：（见附件）", "密碼錯誤"),
        "パスワードを変更しました。ご確認ください",
    ],
)
def test_cjk_password_in_prose(text: str) -> None:
    assert found(Password(), text) == []


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("服务器192.168.1.10，端口22", ["192.168.1.10"]),
        ("http://10.0.0.7:8000/", ["10.0.0.7"]),
        ("v6 2001:db8::8a2e:370:7334 and fe80::1", ["2001:db8::8a2e:370:7334", "fe80::1"]),
        ("mapped ::ffff:192.0.2.128.", ["::ffff:192.0.2.128"]),
        ("version 1.2.3.4, v1.2.3.4, 版本：2.0.1.3", []),
        ("1.2.3, 3.14, 256.1.1.1, 01.02.03.04", []),
        ("12:30:45, 00:1A:2B:3C:4D:5E, std::vector, a[1::2]", []),
    ],
)
def test_ip(text: str, expected: list[str]) -> None:
    assert found(IPAddress(), text) == expected


def test_loopback_and_unspecified_are_kept_unless_asked() -> None:
    text = "bind 127.0.0.1, ::1 or 0.0.0.0"
    assert found(IPAddress(), text) == []
    assert found(IPAddress(loopback=True), text) == ["127.0.0.1", "::1", "0.0.0.0"]


# --- private keys, IBANs, cloud keys, URL secrets ---------------------------------


def key_material(size: int, seed: int = 0) -> str:
    """Random base64 in 64-character lines, like a PEM body (random bytes, not a key)."""
    encoded = base64.b64encode(random.Random(seed).randbytes(size)).decode()
    return "\n".join(encoded[i : i + 64] for i in range(0, len(encoded), 64))


def pem(label: str, size: int = 600, seed: int = 0) -> str:
    return f"-----BEGIN {label}-----\n{key_material(size, seed)}\n-----END {label}-----"


@pytest.mark.parametrize(
    "label",
    [
        "RSA PRIVATE KEY",
        "PRIVATE KEY",
        "EC PRIVATE KEY",
        "DSA PRIVATE KEY",
        "ENCRYPTED PRIVATE KEY",
        "OPENSSH PRIVATE KEY",
        "PGP PRIVATE KEY BLOCK",
    ],
)
def test_private_key_blocks_are_masked_whole(label: str) -> None:
    block = pem(label)
    text = f"这是我的私钥 🔑\n```\n{block}\n```\n能帮我看看吗？"
    assert found(PrivateKey(), text) == [block]
    assert (
        Redactor().redact_text(text)[0]
        == "这是我的私钥 🔑\n```\n[PRIVATE_KEY]\n```\n能帮我看看吗？"
    )


def test_private_key_forms() -> None:
    """Legacy encrypted headers, YAML indentation, spaces for newlines, CRLF."""
    body = key_material(300)
    encrypted = (
        "-----BEGIN RSA PRIVATE KEY-----\nProc-Type: 4,ENCRYPTED\n"
        f"DEK-Info: AES-128-CBC,5E6B5A9C2C8F2E3D\n\n{body}\n-----END RSA PRIVATE KEY-----"
    )
    assert found(PrivateKey(), f"x\n{encrypted}\ny") == [encrypted]
    indented = "\n".join("    " + line for line in pem("EC PRIVATE KEY").splitlines())
    assert found(PrivateKey(), f"tls:\n  key: |\n{indented}\nname: web") == [indented.strip()]
    flat = pem("PRIVATE KEY").replace("\n", " ")
    assert found(PrivateKey(), f"粘贴：{flat} 完") == [flat]
    crlf = pem("OPENSSH PRIVATE KEY").replace("\n", "\r\n")
    assert found(PrivateKey(), crlf) == [crlf]


def test_a_service_account_file_keeps_its_json() -> None:
    """The ``private_key`` of a GCP service-account file, with ``\\n`` escapes."""
    account = {
        "type": "service_account",
        "project_id": "demo-123",
        "private_key": pem("PRIVATE KEY", 1200) + "\n",
        "client_email": "bot@demo-123.iam.gserviceaccount.com",
    }
    text = json.dumps(account, indent=2)
    redacted = json.loads(Redactor().redact_text(text)[0])
    assert redacted["private_key"] == "[PRIVATE_KEY]\n"
    assert redacted["client_email"] == "[EMAIL]"
    assert redacted["project_id"] == "demo-123"


def test_a_key_cut_short_is_masked_to_the_end_of_its_lines() -> None:
    head = "-----BEGIN OPENSSH PRIVATE KEY-----\n" + key_material(200)
    assert found(PrivateKey(), f"前半部分：\n{head}\n后面的丢了，怎么办？") == [head]
    assert found(PrivateKey(), f"{head}…\nok?") == [head]
    escaped = json.dumps({"private_key": head})  # a preview cut inside JSON
    assert Redactor().redact_text(escaped)[0] == '{"private_key": "[PRIVATE_KEY]"}'


def test_a_key_cut_to_its_last_lines_is_masked_from_its_first_line() -> None:
    tail = key_material(120) + "\nAGeRCGibjCg=\n-----END RSA PRIVATE KEY-----"
    assert found(PrivateKey(), f"Only the end survived:\n{tail}\nhelp?") == [tail]
    public = key_material(120) + "\n-----END PUBLIC KEY-----"
    assert found(PrivateKey(), f"the end:\n{public}") == []  # public: no secret


def test_a_putty_key_file_masks_its_private_lines() -> None:
    lines = [key_material(45), key_material(30, seed=1)]  # one line each
    ppk = (
        "PuTTY-User-Key-File-3: ssh-rsa\nPublic-Lines: 1\nAAAAB3NzaC1yc2E=\n"
        f"Private-Lines: 2\n{lines[0]}\n{lines[1]}\nPrivate-MAC: 5a1c9e0f"
    )
    assert found(PrivateKey(), ppk) == ["\n".join(lines)]
    assert found(PrivateKey(), "Private-Lines: 1\n(see the file)") == []


@pytest.mark.parametrize(
    "text",
    [
        pem("CERTIFICATE"),
        pem("PUBLIC KEY"),
        pem("RSA PUBLIC KEY"),
        "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl me@host",
        "-----BEGIN PRIVATE KEY-----\n<your key here>\n-----END PRIVATE KEY-----",
        "The file starts with -----BEGIN RSA PRIVATE KEY----- and ends with the END line.",
    ],
)
def test_private_key_look_alikes(text: str) -> None:
    assert found(PrivateKey(), text) == []


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("IBAN: DE89 3704 0044 0532 0130 00.", ["DE89 3704 0044 0532 0130 00"]),
        ("pay GB82WEST12345698765432 today", ["GB82WEST12345698765432"]),
        (
            "收款账户：FR14 2004 1010 0505 0001 3M02 606，谢谢",
            ["FR14 2004 1010 0505 0001 3M02 606"],
        ),
        ("振込先 NL91ABNA0417164300 です", ["NL91ABNA0417164300"]),
        (
            "IBAN：ＣＨ９３００７６２０１１６２３８５２９５７",
            ["ＣＨ９３００７６２０１１６２３８５２９５７"],
        ),
        ("BE68 5390 0754 7034 2024年", ["BE68 5390 0754 7034"]),  # the year is not the IBAN's
        ("Norway NO93 8601 1117 947 and Malta MT84MALT011000012345MTLCAST001S", None),
        ("bad check DE89 3704 0044 0532 0130 01", []),
        ("wrong length DE8937040044053201300", []),
        ("unknown country XX89370400440532013000", []),
        ("glued SKU-DE89370400440532013000X", []),
        ("ref AB12 3456 7890 1234, order DE12 3456", []),
        ("iban: it60 x054 2811 1010 0000 0123 456", ["it60 x054 2811 1010 0000 0123 456"]),
        ("typed gb82west12345698765432 in lower case", ["gb82west12345698765432"]),
        ("it60 is not an iban, nor de12 word word", []),
    ],
)
def test_iban(text: str, expected: list[str] | None) -> None:
    if expected is None:
        expected = ["NO93 8601 1117 947", "MT84MALT011000012345MTLCAST001S"]
    assert found(Iban(), text) == expected


def test_iban_check() -> None:
    assert iban_valid("DE89370400440532013000") and iban_valid("de89 3704 0044 0532 0130 00")
    assert not iban_valid("DE89370400440532013001")  # mod 97
    assert not iban_valid("DE8937040044053201300")  # length for DE
    assert not iban_valid("DE89 3704 0044 0532 0130 ０0")  # full-width: fold first
    assert all(15 <= n <= 34 for n in IBAN_LENGTHS.values()) and len(IBAN_LENGTHS) == 89


AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
AZURE_KEY = (
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)
SESSION_TOKEN = "FwoGZXIvYXdzEBYaDH" + "kq9Lw3/Pd7+Rt2Ux" * 12 + "=="
BUS_KEY = "Ab1Cd2Ef3Gh4Ij5Kl6Mn7Op8Qr9St0UvWxYzAbCdE="


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (f"aws_access_key_id = AKIAI\naws_secret_access_key = {AWS_SECRET}\n", [AWS_SECRET]),
        (f"export AWS_SECRET_ACCESS_KEY={AWS_SECRET}", [AWS_SECRET]),
        (f"the AWS secret key {AWS_SECRET} for the deploy", [AWS_SECRET]),  # a space alone
        (
            f'{{"SecretAccessKey": "{AWS_SECRET}", "SessionToken": "{SESSION_TOKEN}"}}',
            [AWS_SECRET, SESSION_TOKEN],
        ),
        (f"id AKIAIOSFODNN7EXAMPLE，密钥 {AWS_SECRET}，别外传", [AWS_SECRET]),
        (f"{AWS_SECRET} は ASIAIOSFODNN7EXAMPLE の secret", [AWS_SECRET]),
        (f"Protocol=https;AccountName=acct;AccountKey={AZURE_KEY};EndpointSuffix=x", [AZURE_KEY]),
        (f"Endpoint=sb://ns/;SharedAccessKeyName=Root;SharedAccessKey={BUS_KEY}", [BUS_KEY]),
        (
            "AZURE_CLIENT_SECRET=abc8Q~xyzDEFghiJKLmno123PQRstuVWX45yzAB",
            ["abc8Q~xyzDEFghiJKLmno123PQRstuVWX45yzAB"],
        ),
    ],
)
def test_cloud_keys(text: str, expected: list[str]) -> None:
    assert found(CloudKey(), text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "commit 9fceb02d0ae598e95dc970b74767f19372d61af8 rotated AKIAIOSFODNN7EXAMPLE",
        "AKIAIOSFODNN7EXAMPLE ThisIsAVeryLongCamelCaseIdentifierHereXyz",
        f"no key id near: {AWS_SECRET}",
        "aws_secret_access_key=YOUR_SECRET_ACCESS_KEY",
        "AccountName=acct;AccountKey=<key>",
        "secretsManagerArnPrefix1234567890abcdefghijklmn",  # glued to the keyword: a name
    ],
)
def test_cloud_key_look_alikes(text: str) -> None:
    assert found(CloudKey(), text) == []


SLACK = "https://hooks.slack.com/services/T0123ABCD/B0456EFGH/aBcDeFgHiJkLmNoPqRsTuVwX"
DISCORD = "https://discord.com/api/webhooks/123456789012345678/" + "AbCdEfGh0123456789_-" * 3
TENANT = "72f988bf-86f1-41af-91ab-2d7cd011db47"
TEAMS = f"{TENANT}@{TENANT}/IncomingWebhook/0123456789abcdef0123456789abcdef/{TENANT}"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (f"post to {SLACK} now", ["T0123ABCD/B0456EFGH/aBcDeFgHiJkLmNoPqRsTuVwX"]),
        (f"webhook：{DISCORD}。", [DISCORD.removeprefix("https://discord.com/api/webhooks/")]),
        (f"https://contoso.webhook.office.com/webhookb2/{TEAMS}", [TEAMS]),
        ("https://example.com/hook?token=abc123def456&page=2", ["abc123def456"]),
        ("see [link](https://x.io/a?sig=Ab3dEf9hIjK1mN0pQ) ok", ["Ab3dEf9hIjK1mN0pQ"]),
        (
            "https://acct.blob.core.windows.net/c/b.txt?sv=2021-06-08&sr=b&sp=r&sig=AbCd%2BeFgH1%3D",
            ["AbCd%2BeFgH1%3D"],
        ),
        (
            "https://app.example.com/cb#access_token=ya29a0AfH6SMBx1&expires_in=3600",
            ["ya29a0AfH6SMBx1"],
        ),
        ("GET /v1/data?API_KEY=4f9c2b7e1d8a", ["4f9c2b7e1d8a"]),
        ("https://example.com/?secret=abcdefghijklmnopqrstuvwxyz", ["abcdefghijklmnopqrstuvwxyz"]),
    ],
)
def test_url_secrets(text: str, expected: list[str]) -> None:
    assert found(UrlSecret(), text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "https://example.com/search?q=token&page=2&sort=key",
        "https://example.com/items?key=title&order=asc",
        "https://example.com/hook?token=YOUR_TOKEN_HERE and ?token={token}",
        "https://example.com/a?signature=true&utm_source=newsletter",
        "https://hooks.slack.com/services/XXX/YYY/ZZZ",
        "https://api.slack.com/messaging/webhooks",
        "https://discord.com/api/webhooks/",
    ],
)
def test_url_secret_look_alikes(text: str) -> None:
    assert found(UrlSecret(), text) == []


def test_a_provider_key_in_a_query_is_an_api_key() -> None:
    text = "https://maps.googleapis.com/maps/api/js?key=AIzaSyA1b2C3d4E5A1b2C3d4E5A1b2C3d4E5xyz"
    assert Redactor().redact_text(text)[0].endswith("?key=[API_KEY]")


def test_a_preview_is_redacted_before_it_is_cut() -> None:
    """Cut first, ``4111 1111 11…`` would show: it no longer looks like a card."""
    text = "my card 4111 1111 1111 1111, thanks"
    assert text[:18] == "my card 4111 1111 "
    assert redacted_preview(text, Redactor(), 18) == "my card [BANK_CARD…"
    key = f"key:\n{pem('RSA PRIVATE KEY')}\n\n  works? 🙂"
    assert redacted_preview(key, Redactor()) == "key: [PRIVATE_KEY] works? 🙂"
    assert redacted_preview("short", Redactor()) == "short"


def test_a_preview_takes_any_redact_function() -> None:
    def shout(message: Any) -> Any:
        return {**message, "content": message["content"].upper()}

    assert redacted_preview("a  b\nc", shout, 3) == "A B…"
    assert redacted_preview("x", lambda message: {**message, "content": None}) == ""


def test_fold_keeps_length() -> None:
    text = "１２３：ＡＢＣ　＋８６"
    assert fold(text) == "123:ABC +86"
    assert len(fold(text)) == len(text)
    assert fold("密码：abc，🙂") == "密码:abc，🙂"  # ， stays: it ends a value
    assert fold("nothing to fold 密码 🙂") == "nothing to fold 密码 🙂"


# --- the Redactor ------------------------------------------------------------


def test_redact_text_replaces_the_secret_and_keeps_the_keyword() -> None:
    text, counts = Redactor().redact_text("登录密码：hunter2，邮箱a@b.cn 🙂")
    assert text == "登录密码：[PASSWORD]，邮箱[EMAIL] 🙂"
    assert counts == {"PASSWORD": 1, "EMAIL": 1}


def test_overlaps_longer_then_earlier_then_detector_order() -> None:
    """An e-mail wins over the phone inside it; equal spans go to the first detector."""
    redact = Redactor()
    assert redact.redact_text("13800138000@139.com")[0] == "[EMAIL]"
    assert redact.redact_text("password: 13800138000")[0] == "password: [PASSWORD]"
    assert resolve([((0, 4), 1), ((0, 4), 0)]) == [((0, 4), 0)]
    assert resolve([((2, 6), 0), ((0, 4), 1)]) == [((0, 4), 1)]


def test_custom_detectors_and_placeholders() -> None:
    order = PatternDetector("ORDER", r"ORD-[0-9]{8}")
    redact = Redactor([order, Email()], placeholders={"EMAIL": "<email>"})
    assert redact.redact_text("ORD-20231129 to x@y.io")[0] == "[ORDER] to <email>"


def test_call_returns_a_new_message_and_never_mutates() -> None:
    message = {
        "role": "user",
        "name": "alice@example.com",  # not content: left alone
        "content": [
            {"type": "text", "text": "卡号4111111111111111"},
            {"type": "image_url", "image_url": {"url": "https://x/1.png"}},
        ],
    }
    before = copy.deepcopy(message)
    out = Redactor()(message)
    assert message == before
    assert out["content"][0] == {"type": "text", "text": "卡号[BANK_CARD]"}
    assert out["content"][1] is message["content"][1]
    assert out["name"] == "alice@example.com"


def test_string_content_and_none_content() -> None:
    redact = Redactor()
    assert redact({"role": "user", "content": "ip 8.8.8.8"})["content"] == "ip [IP]"
    assert redact({"role": "assistant", "content": None}) == {"role": "assistant", "content": None}


def test_tool_call_arguments_are_redacted_and_stay_json() -> None:
    arguments = json.dumps({"user": "bob@example.com", "password": "s3cret!"})
    message = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "login", "arguments": arguments}}
        ],
    }
    before = copy.deepcopy(message)
    out = Redactor()(message)
    assert message == before
    assert json.loads(out["tool_calls"][0]["function"]["arguments"]) == {
        "user": "[EMAIL]",
        "password": "[PASSWORD]",
    }
    assert out["tool_calls"][0]["id"] == "c1"


def test_counts_accumulate_across_calls_and_threads() -> None:
    redact = Redactor()
    message = {"role": "user", "content": "a@b.cn 13800138000 a@b.cn"}

    def work() -> None:
        for _ in range(50):
            redact(message)

    threads = [threading.Thread(target=work) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert redact.counts == Counter({"EMAIL": 800, "PHONE": 400})
    redact.counts["EMAIL"] = 0  # a snapshot: changing it changes nothing
    assert redact.counts["EMAIL"] == 800


@given(st.text())
def test_redaction_never_raises_and_is_deterministic(text: str) -> None:
    first = Redactor().redact_text(text)
    assert Redactor().redact_text(text) == first
    assert sum(first[1].values()) <= len(text)


def test_redacting_twice_changes_nothing() -> None:
    """A placeholder is never taken for a secret: ``password: [PASSWORD]`` stays as it is."""
    redact = Redactor()
    once = redact.redact_text("password: hunter2, mail li@example.com")[0]
    assert once == "password: [PASSWORD], mail [EMAIL]"
    assert redact.redact_text(once) == (once, {})
    assert redact.redact_text("password: [PASSWORD]") == ("password: [PASSWORD]", {})
    assert redact.redact_text("Bearer [API_KEY] and 密码：[PASSWORD]")[1] == {}


def test_custom_placeholders_are_left_alone_too() -> None:
    redact = Redactor(placeholders={"PASSWORD": "***", "EMAIL": "<email>"})
    once = redact.redact_text("password=s3cret! to x@y.io")[0]
    assert once == "password=*** to <email>"
    assert redact.redact_text(once) == (once, {})


@given(st.text())
def test_redaction_is_idempotent_on_any_text(text: str) -> None:
    redact = Redactor()
    once = redact.redact_text(text)[0]
    assert redact.redact_text(once) == (once, {})


# One secret of each type, look-alikes, keywords and glue in Chinese, Japanese
# and emoji: the pieces Hypothesis mixes to look for a text redacted differently twice.
SECRETS = {
    "EMAIL": "li.lei@example.com",
    "PHONE": "+86 138-0013-8000",
    "CN_ID": "11010519491231002X",
    "BANK_CARD": "4111 1111 1111 1111",
    "API_KEY": "sk-" + "a1B2c3D4e5" * 4,
    "PASSWORD": "password: hunter2",
    "IP": "192.168.1.10",
    "PRIVATE_KEY": pem("OPENSSH PRIVATE KEY", 120),
    "IBAN": "DE89 3704 0044 0532 0130 00",
    "CLOUD_KEY": f"aws_secret_access_key={AWS_SECRET}",
    "URL_SECRET": SLACK,
    "SECRET": "DJANGO_SECRET_KEY=k3y-9f8e7d6c5b4a",
    "SSN": "SSN 078-05-1120",
}
PIECES = [
    *SECRETS.values(),
    *("密码是 abc123!", "口令：Open-42", "パスワードは「秘密」", "密碼：", "password: ", "Bearer "),
    *("AKIAIOSFODNN7EXAMPLE ", AWS_SECRET, "?token=abc123def456", "&key=title", "[PASSWORD]"),
    *("DE89 3704 0044 0532 0130 01", pem("CERTIFICATE", 60), "-----END PRIVATE KEY-----"),
    *("9fceb02d0ae598e95dc970b74767f19372d61af8", "reset your password: click the link"),
    *("비밀번호는 qwer1234!", "token: expired", "SECRET=${SECRET}", "alice\\u0040example.com"),
]
GLUE = st.text(
    st.sampled_from(list(" \n:：=@./?&-_'\"「」“”，。、是为はabcXYZ0189[]密码日本語🙂🔑"))
)
MIXED = st.lists(st.one_of(st.sampled_from(PIECES), GLUE), max_size=10).map("".join)


@given(MIXED)
def test_redacting_mixed_text_twice_is_redacting_it_once(text: str) -> None:
    redact = Redactor()
    once = redact.redact_text(text)[0]
    assert redact.redact_text(once) == (once, {})


def test_every_type_is_redacted_in_mixed_text_and_stays_redacted() -> None:
    text = "，还有 🙂 ".join(SECRETS.values()) + " 就这些。"
    once, counts = Redactor().redact_text(text)
    assert counts == dict.fromkeys(SECRETS, 1)
    assert Redactor().redact_text(once) == (once, {})


@pytest.mark.parametrize(
    "text",
    [
        "a." * 20000 + "@",
        "x" * 50000,
        "eyJabcdef." * 5000,
        "1234 " * 10000,
        "password: " * 10000,
        "1:" * 20000,
        "-----BEGIN PRIVATE KEY-----\n" * 5000,
        ("-----BEGIN RSA PRIVATE KEY-----\n" + "QUJD" * 16 + "\n") * 2000,
        "DE89 3704 " * 10000,
        "AKIAIOSFODNN7EXAMPLE " + "Ab1/Cd2+Ef" * 4 * 4000,
        "?token=" * 10000 + "&sig=a1" * 10000,
        "密码：“" * 10000 + "パスワードは「" * 10000,
        "password: [PASSWORD] " * 5000,
    ],
)
def test_long_repetitive_input_is_handled(text: str) -> None:
    """Inputs that made early patterns quadratic (seconds to minutes); now linear."""
    Redactor().redact_text(text)


def naive_resolve(found: list[tuple[tuple[int, int], int]]) -> list[tuple[tuple[int, int], int]]:
    chosen: list[tuple[tuple[int, int], int]] = []
    for (start, end), index in sorted(found, key=lambda f: (f[0][0] - f[0][1], f[0][0], f[1])):
        if all(end <= s or start >= e for (s, e), _ in chosen):
            chosen.append(((start, end), index))
    return sorted(chosen)


spans = st.tuples(st.integers(0, 40), st.integers(1, 10)).map(lambda p: (p[0], p[0] + p[1]))


@given(st.lists(st.tuples(spans, st.integers(0, 6)), max_size=30))
def test_resolve_matches_the_obvious_quadratic_rule(found: list[Any]) -> None:
    assert resolve(found) == naive_resolve(found)


def test_what_is_not_text_passes_through_unchanged() -> None:
    redact = Redactor()
    odd = [
        {"role": "user", "content": 42},
        {"role": "user"},
        {"role": "assistant", "content": None, "tool_calls": "x"},
        {"role": "user", "content": [1, {"type": "text", "text": 5}, {"type": "image_url"}]},
    ]
    for message in odd:
        assert redact(message) == message
    parts = [{"type": "text", "text": "mail li@example.com"}]
    assert redact({"role": "user", "content": parts})["content"][0]["text"] == "mail [EMAIL]"
