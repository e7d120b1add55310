"""Detectors for API keys, tokens and passwords given in a phrase."""

from __future__ import annotations

import re
from collections.abc import Iterator

from ctxwindow.redact.base import PatternDetector, Span, fold

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
    "sendgrid": r"SG\.[A-Za-z0-9_-]{22}\.[A-Za-z0-9_-]{43}",
    "npm": r"npm_[A-Za-z0-9]{36}",
    "gitlab": r"glpat-[A-Za-z0-9_-]{20,}",
    "huggingface": r"hf_[A-Za-z0-9]{34}",
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
    r"pass(?:word|wd|code|phrase)|pwd"
    r"|(?:登录|登陆|登錄|登入|支付|初始)?(?:密码|密碼|口令)(?:短语|短語)?"
    r"|パスワード|パスフレーズ|暗証番号|비밀번호|비번"
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
    r"(?:就|都|也|还|還|仍然?|已经?|已經)?"
    r"(?:是|为|為|は|如下"
    r"|(?:修改|更改|更新|重置|设置|設置|改|设|設|换|換)(?:成|为|為)了?"
    r"|を?(?:変更|設定|更新|リセット)(?:しました|した|済み)?(?:ね|よ)?"
    r"|(?:는|은|이|가)(?:[ \t]+(?:바로|그냥))?)"
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
_NEXT_KEY = re.compile(r"[ \t]+(?:and|&)[ \t]+[A-Za-z_][A-Za-z0-9_]{0,30}[ \t]*[:=]")
_NEXT_FIELD = re.compile(r";(?=[A-Za-z_][A-Za-z0-9_ ]*=)")


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
            # a connection string's next field ends the value: "pwd=x1;timeout=30"
            bare = _NEXT_FIELD.split(match.group("bare"), maxsplit=1)[0]
            end = start + len(bare.rstrip(".,;)]}"))
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
        # "reset your password: click the link": a plain word that more words follow,
        # unless they are the next field ("password: letmein and username: bob")
        return not _NEXT_WORD.match(match.string, end) or bool(_NEXT_KEY.match(match.string, end))
    return True


# Names of settings that hold a secret (environment variables, config keys):
# ``SECRET``, ``…_SECRET``, ``…_TOKEN``, ``…_API_KEY``, ``…_ACCESS_KEY``…
_SECRET_NAME = (
    r"(?:[A-Za-z0-9]+[_.-])*(?:secret(?:[_.-]?(?:key|token))?|token|api[_-]?key|apikey"
    r"|access[_-]?key|auth[_-]?key|private[_-]?key|client[_-]?secret|credentials?"
    r"|signing[_-]?key)"
)
_TEMPLATE = re.compile(
    r"(?i)^(?:your|my|<|\$\{|\{\{|%\(|x{4,}|\*{3,}|changeme|example|placeholder|none|null|"
    r"true|false|redacted)"
)


class Secret(PatternDetector):
    """The value of a setting named as a secret: ``SECRET=…``, ``DJANGO_SECRET_KEY=…``,
    ``GITHUB_TOKEN: …``, ``"client_secret": "…"``, ``app.api-key=…``; the name stays.

    The name ends in, or is, ``secret``, ``secret_key``, ``token``, ``api_key``,
    ``access_key``, ``auth_key``, ``private_key``, ``client_secret``,
    ``credentials`` or ``signing_key`` (any case, ``_ . -`` between words; not
    ``private_key_id``, ``token_type``; not a URL's query parameter, which is
    ``UrlSecret``'s); then ``=`` or ``:``,
    and a value (quoted or bare, 8 to 512 characters without spaces) that has a
    digit or both cases, and is no template (``YOUR_TOKEN``, ``<token>``,
    ``${SECRET}``, ``xxxx``, ``changeme``) and no placeholder. Prose ("the
    secret: patience", "token: expired") is left alone; keys of a known
    provider are ``API_KEY`` (``ApiKey`` comes first).

    >>> text = "export DJANGO_SECRET_KEY=k3y-9f8e7d6c5b4a"
    >>> [text[s:e] for s, e in Secret().find(text)]
    ['k3y-9f8e7d6c5b4a']
    """

    def __init__(self) -> None:
        super().__init__(
            "SECRET",
            rf"(?<![A-Za-z0-9_.&?#/=%-])(?i:{_SECRET_NAME})(?![A-Za-z0-9_.-])[\"']?[ \t]*[:=]"
            r"[ \t]*(?:\"(?P<dq>[^\"\s]{8,512})\"|'(?P<sq>[^'\s]{8,512})'"
            r"|(?P<bare>(?:(?![\"',;&)\]}])[!-~]){8,512}))",
        )

    def _spans(self, text: str) -> Iterator[Span]:
        for match in self.pattern.finditer(text):
            group = next(g for g in ("dq", "sq", "bare") if match.group(g) is not None)
            value = match.group(group)
            if _PLACEHOLDER.search(value) or _TEMPLATE.match(value):
                continue
            mixed = any(c.isupper() for c in value) and any(c.islower() for c in value)
            if any(c.isdigit() for c in value) or mixed:
                yield match.span(group)
