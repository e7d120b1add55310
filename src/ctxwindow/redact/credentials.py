"""Detectors for API keys, tokens and passwords given in a phrase."""

from __future__ import annotations

import re

from ctxwindow.redact.base import PatternDetector, fold

# Provider key formats, most specific first (one alternation: at a given
# position the first alternative that matches wins).
PROVIDER_KEYS = {
    "anthropic": r"sk-ant-[A-Za-z0-9_-]{20,}",
    "openai": r"sk-(?:proj|svcacct|admin|None)-[A-Za-z0-9_-]{20,}|sk-[A-Za-z0-9]{20,}",
    "stripe": r"(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{16,}",
    "aws": r"(?:AKIA|ASIA)[0-9A-Z]{16}",
    "github": r"(?:ghp|gho|ghs|ghu|ghr)_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}",
    "slack": r"xox[abpors]-[A-Za-z0-9-]{10,}",
    "google": r"AIza[0-9A-Za-z_-]{35}",
    "jwt": r"eyJ[A-Za-z0-9_-]{5,}\.eyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]*",
    "bearer": r"(?<=Bearer )(?=[A-Za-z0-9._~+/-]*[0-9])[A-Za-z0-9._~+/-]{16,}=*",
}


def _has_digit(key: str) -> bool:
    return any(ch.isdigit() for ch in key)


class ApiKey(PatternDetector):
    """API keys and tokens of common providers, and ``Bearer <token>``.

    OpenAI ``sk-…``/``sk-proj-…``, Anthropic ``sk-ant-…``, Stripe
    ``sk_live_…``/``rk_live_…``, AWS ``AKIA…``, GitHub ``ghp_…``/
    ``github_pat_…``, Slack ``xox?-…``, Google ``AIza…`` and JWTs. A key
    needs a digit somewhere, so ``sk-`` in words (``task-``, ``risk-``) and
    hyphenated prose never match. For ``Bearer`` only the token is replaced.

    >>> ApiKey().find("Authorization: Bearer abcdef0123456789XYZ")
    [(22, 41)]
    """

    def __init__(self, providers: dict[str, str] | None = None) -> None:
        chosen = PROVIDER_KEYS if providers is None else providers
        alternatives = "|".join(f"(?:{pattern})" for pattern in chosen.values())
        super().__init__(
            "API_KEY",
            rf"(?<![A-Za-z0-9_-])(?:{alternatives})(?![A-Za-z0-9_-])",
            accept=_has_digit,
        )


PASSWORD_KEYWORDS = (
    r"pass(?:word|wd|code|phrase)|pwd|(?:登录|登陆|登錄|登入|支付|初始)?(?:密码|密碼)"
    r"|口令|パスワード|暗証番号"
)
_VALUE_CHARS = r"[!-~]"  # printable ASCII: a value stops at spaces, CJK text and its punctuation
# Bounded, so an unclosed quote costs a short scan, not one to the end of the text.
_QUOTED = (
    r"\"(?P<dq>[^\"\n]{1,200})\"|'(?P<sq>[^'\n]{1,200})'|「(?P<jq>[^」\n]{1,200})」"
    r"|『(?P<jq2>[^』\n]{1,200})』|“(?P<cq>[^”\n]{1,200})”|‘(?P<cq2>[^’\n]{1,200})’"
)
_QUOTE_GROUPS = ("dq", "sq", "jq", "jq2", "cq", "cq2", "url")
# 是/为 and their variants: "密码就是…", "密码改成…", "密码设置为：…".
_CJK_IS = (
    r"(?:就|都|也|还|還|仍然?)?"
    r"(?:是|为|為|は|(?:改成|改为|改為|设为|設為|设置为|設置為|设成|換成|换成)了?)"
)
_PASSWORD = (
    rf"(?:{PASSWORD_KEYWORDS})[\"']?"
    r"(?:[ \t]*(?P<colon>[:=])(?P<gap>[ \t]*)"
    rf"|[ \t]+(?:is|was)[ \t]+|[ \t]*{_CJK_IS}[ \t]*(?::[ \t]*)?"
    r"|(?P<space>[ \t]+))"
    rf"(?:{_QUOTED}|(?P<bare>{_VALUE_CHARS}+))"
)
_URL_PASSWORD = r"(?<![A-Za-z0-9+.-])[A-Za-z][A-Za-z0-9+.-]*://[^/\s:@]*:(?P<url>[^/\s:@]+)@"
_WORDS_NOT_PASSWORDS = {
    *("required", "incorrect", "invalid", "wrong", "expired", "empty", "none", "null", "n/a"),
    *("tbd", "unknown", "hidden", "redacted", "masked", "optional", "true", "false", "yes", "no"),
}
_PLACEHOLDER = re.compile(r"\[[A-Z][A-Z_]*\]")
_NEXT_WORD = re.compile(r"[ \t]+[A-Za-z]")


class Password:
    """The value after a password keyword; the keyword itself is kept.

    Keywords: ``password``/``passwd``/``passcode``/``passphrase``/``pwd``,
    ``密码``/``密碼`` (``登录密码``…), ``口令``, ``パスワード``, ``暗証番号``;
    then ``:``, ``=`` or ``：``, ``is``/``是``/``为``/``は`` (also ``就是``,
    ``改成``, ``设置为``…, optionally with a colon), or a space. The value is a
    quoted string (``"…"``, ``'…'``, ``「…」``, ``『…』``, ``“…”``), or a run
    of printable ASCII (trailing ``.,;)]}`` dropped), and needs a letter or
    digit (``password=***`` is masked already; ``[PASSWORD]`` is a
    placeholder). After ``is``/``是`` a bare value needs a digit or symbol
    ("the password is incorrect" stays), after a mere space a digit (``密码
    12345678``; "password reset link" stays), and after ``:`` and a space a
    word of letters only counts when no other word follows it
    (``password: letmein`` is a secret, ``reset your password: click the
    link`` is prose). The password in a URL's user info
    (``redis://user:pw@host``) counts too.

    >>> text = "密码：Tr0ub4dor&3，请勿外传"
    >>> [text[s:e] for s, e in Password().find(text)]
    ['Tr0ub4dor&3']
    """

    name = "PASSWORD"

    def __init__(self) -> None:
        self.pattern = re.compile(f"{_PASSWORD}|{_URL_PASSWORD}", re.IGNORECASE)

    def find(self, text: str) -> list[tuple[int, int]]:
        spans = []
        for match in self.pattern.finditer(fold(text)):
            span = self._value(match)
            if span is not None:
                spans.append(span)
        return spans

    def _value(self, match: re.Match[str]) -> tuple[int, int] | None:
        quoted = next((g for g in _QUOTE_GROUPS if match.group(g)), None)
        if quoted is not None:
            start, end = match.span(quoted)
        else:
            start = match.start("bare")
            end = start + len(match.group("bare").rstrip(".,;)]}"))
        value = match.string[start:end]
        if not any(ch.isalnum() for ch in value) or value.lower() in _WORDS_NOT_PASSWORDS:
            return None
        if quoted is None and not _looks_like_a_secret(match, value, end):
            return None
        return start, end

    def __repr__(self) -> str:
        return "Password()"


def _looks_like_a_secret(match: re.Match[str], value: str, end: int) -> bool:
    """Whether a bare (unquoted) value is a password rather than prose or a placeholder."""
    if _PLACEHOLDER.fullmatch(match.group("bare")):
        return False  # redacted already
    if match.group("space") is not None:
        return any(ch.isdigit() for ch in value)  # "密码 12345678"; not "password reset"
    if match.group("colon") is None:
        return not value.isalpha()  # "password is wrong"; "密码是abc" is ambiguous prose
    if match.group("gap") and value.isalpha() and value[1:].islower():
        # "reset your password: click the link": a plain word that more words follow
        return not _NEXT_WORD.match(match.string, end)
    return True
