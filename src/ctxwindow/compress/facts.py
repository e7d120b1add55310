"""What a piece of text carries for a later question: its facts, weighed.

No model and no corpus statistics: a piece is weighed on its own, so its
weight never changes from one fold of a rolling summary to the next (and is
cached). ``weigh`` returns the piece's terms with their weights:

============  =====================================================  ======
kind          examples                                               weight
============  =====================================================  ======
identifier    ``A-1042``, ``SF9477515917953``, ``v1.8.9``, e-mails,  3
              URLs, ``HEALTHCHECK_FAILED_503``, ``#42``
number        ``42``, ``15.00``, ``3.5``, ``897元``                   2
              number words: ``two``, ``fifteen``, ``三个``, ``两次``     1
date          ``May``, ``Friday``, ``yesterday``, ``last week``,     2
              ``昨天``, ``星期五``, ``先週``
name          capitalized words inside a sentence (anywhere in CJK   2
              text), acronyms, katakana words, ``李さん``, ``王老师``,
              「quoted」 terms, what follows ``叫`` (a name being
              given), list heads, ``(Place)`` qualifiers and bold
              terms (:mod:`ctxwindow.compress.entities`)
decision      ``decided``, ``agreed to``, ``let's``, ``决定``, ``約束``  2
              plans: ``will``, ``going to``, ``打算``, ``予定``        1
problem       ``failed``, ``error``, ``refund``, ``delayed``,         2
              ``rolled back``, ``失败``, ``错误``, ``エラー``
content word  other words (stopwords and small talk left out)        0.5
              CJK character bigrams (kana-only bigrams: 0)           0.25
============  =====================================================  ======

Identifiers and numbers after the fourth of one piece count a quarter (a
table or a time series is not that many facts). A question weighs half.
Content with no name and no fact but a weak one (a number word, a plan)
counts half: generic advice (``Water less; check the drainage.``,
``一双合脚的鞋比其他装备都重要。``) gives way to what names things, in
every script alike.
Small talk — greetings, thanks, interjections,
praise, emoji — and names that only address someone (``Hey Mel!``) carry
nothing: a piece without a fact needs two content words (or a name and
one) to weigh anything; otherwise ``weigh`` returns ``()`` and the piece is
never kept.

``marks`` tells what of a message a summary can be seen to carry: its
identifiers, numbers written with digits and names (one is a trace of the
message), and its other weighed terms (words, dates, CJK bigrams); ``mentions``
whether a summary's text holds one, as a whole word (anywhere in CJK text).
That is how a summary that cannot say which messages it drew on (a model's)
is read: see ``ctxwindow.compress.rolling.credit``.

>>> dict(weigh("Order A-1042 ships on Friday."))["id:a-1042"]
3.0
>>> weigh("Hey Mel! Thanks so much, that's awesome 😊")
()
>>> marks("Order A-1042 ships to Oslo on Friday.")
(('a-1042', '1042', 'oslo'), ('friday', 'order', 'ships'))
>>> mentions("order a-1042 went to oslo.", "a-1042"), mentions("a-10421", "a-1042")
(True, False)
"""

from __future__ import annotations

import functools
import re

from ctxwindow.compress.entities import entities
from ctxwindow.compress.sentences import STOPWORDS, is_cjk, split_sentences, terms

IDENTIFIER, NUMBER, DATE, NAME, DECISION, PLAN, PROBLEM = 3.0, 2.0, 2.0, 2.0, 2.0, 1.0, 2.0
NUMBER_WORD, CONTENT, BIGRAM = 1.0, 0.5, 0.25
QUESTION = 0.5
GENERIC = 0.5  # content with no name and no fact but a weak one (advice, opinion) counts half
ENOUGH = 1.0  # without a fact, a piece needs this much content (two words) to count
MANY, MANY_WEIGHT = 4, 0.25  # identifiers and numbers of one piece after the 4th count 1/4

_HAN = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
_IS_CJK = re.compile(f"[{_HAN}\u3040-\u30ff\u31f0-\u31ff\uff66-\uff9f\uac00-\ud7af]")
_KANA_ONLY = re.compile("[\u3040-\u30ff\u31f0-\u31ff\uff66-\uff9f]+")

# -- Latin-script words (looked up in sets, one scan of the text) ---------------------

_MONTHS = """January February March April May June July August September October November
December Jan Feb Mar Apr Jun Jul Aug Sep Sept Oct Nov Dec"""
_WEEKDAYS = "Monday Tuesday Wednesday Thursday Friday Saturday Sunday"
DATE_NAMES = frozenset(f"{_MONTHS} {_WEEKDAYS}".split())
_PERIODS = """week weekend month year night morning afternoon evening summer winter spring
fall autumn semester season time monday tuesday wednesday thursday friday saturday sunday"""
PERIODS = frozenset(_PERIODS.split())
DAYS = frozenset({"yesterday", "today", "tonight", "tomorrow"})
_NUMBER_WORDS = """one two three four five six seven eight nine ten eleven twelve thirteen
fourteen fifteen sixteen seventeen eighteen nineteen twenty thirty forty fifty sixty seventy
eighty ninety hundred thousand million billion dozen twice half"""
NUMBER_WORDS = frozenset(_NUMBER_WORDS.split())
DECISION_STEMS = ("decid", "promis", "commit", "schedul", "confirm", "approv", "cancel", "postpon")
DECISION_WORDS = frozenset({"chose", "choose", "chosen", "deadline", "booked", "let's", "let’s"})
DECISION_PAIRS = frozenset(
    {
        ("agree", "to"), ("agree", "on"), ("agree", "that"), ("agreed", "to"), ("agreed", "on"),
        ("agreed", "that"), ("settled", "on"), ("signed", "up"), ("switch", "to"),
        ("switched", "to"), ("let", "us"),
    }
)  # fmt: skip
_PROBLEMS = """error errors failed fails failure failing crash crashed crashes broken bug
outage timeout exception denied rejected refused declined lost missing stolen damaged delayed
overdue refund refunded complaint warning"""
PROBLEM_WORDS = frozenset(_PROBLEMS.split())
PROBLEM_PAIRS = frozenset({("rolled", "back"), ("timed", "out"), ("went", "down")})
PLAN_WORDS = frozenset({"will", "gonna", "plan", "plans", "planned", "planning", "intend"})
_RELATIVE = frozenset({"last", "next", "this", "every"})
_GREETINGS = """hi hey hello hiya yo bye thanks thank thx congrats congratulations sorry dear
cheers wow whoa woah oh ooh aw aww yay yes yeah yep yup ok okay well haha lol omg hmm ah"""
GREETINGS = frozenset(_GREETINGS.split())
_NOT_NAMES = frozenset({"I", "I'm", "I’m", "I've", "I’ve", "I'd", "I’d", "I'll", "I’ll", "OK"})
_TALK_WORDS = """hi hey hello hiya yo bye goodbye cya thanks thank thx ty welcome wow whoa woah
cool great awesome amazing wonderful fantastic incredible nice lovely beautiful cute sweet super
glad happy excited stoked thrilled proud sorry congrats congratulations cheers lol lmao haha
hahaha hehe omg yeah yep yup yea nope nah oh ooh ah aw aww awww um uh hmm hm mm wait totally
absolutely definitely really truly sure good fine alright ok okay sounds seems hear glad see
meet nice means much lot appreciate dear buddy pal bro friend guys anyway btw doing going been
things thing stuff lately new ll ve re don didn doesn isn wasn aren weren couldn wouldn shouldn
won haven hasn hadn let"""
TALK = frozenset(_TALK_WORDS.split()) | STOPWORDS
_WORD = re.compile(r"(?<![A-Za-z0-9])[A-Za-z][A-Za-z'’]*(?![A-Za-z0-9])")
_DIGIT = re.compile(r"\d")
_SENTENCE_START = frozenset('.!?:;"“(')

_VOCABULARY: dict[str, tuple[str, float]] = {
    **{w: (f"n:{w}", NUMBER_WORD) for w in NUMBER_WORDS},
    **{w: (f"p:{w}", PLAN) for w in PLAN_WORDS},
    **{w: (f"x:{w}", DECISION) for w in DECISION_WORDS},
    **{w: (f"d:{w}", DATE) for w in DAYS},
    **{w: (f"!:{w}", PROBLEM) for w in PROBLEM_WORDS},
}

_TRIGGERS = frozenset(_VOCABULARY) | PERIODS | {"ago", "going"}
_TRIGGERS |= {first for first, _ in DECISION_PAIRS | PROBLEM_PAIRS}
_WILL = ("'ll", "’ll")

# -- patterns, each run only when a cheap test says it can match ----------------------

_NUMBER = re.compile(r"\d+(?:[.,:/]\d+)*")
_CODE = re.compile(
    r"(?<![A-Za-z0-9_-])(?=[A-Za-z0-9_.-]*[0-9])(?=[A-Za-z0-9_.-]*[A-Za-z])"
    r"[A-Za-z0-9]+(?:[-_.][A-Za-z0-9]+)*"
)
_ADDRESS = re.compile(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+|(?:https?://|www\.)[^\s)>\]]+")
_HANDLE = re.compile(r"(?<![\w-])[#@][A-Za-z0-9_]+")
_CONSTANT = re.compile(r"\b[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+\b")
_CJK_NUMERAL = "[一二三四五六七八九十两兩百千万萬亿億〇零]+"
_COUNTER = "[个個年月日号號天岁歳次回本只隻位名件家周週小时時分秒点點元块塊円人つ枚台杯张張条條]"
_CJK_DATES = (
    "昨天|今天|明天|(?<![之以此从從提])前天|(?<![之以此然])[后後]天|去年|明年|今年|前年|上周|下周|"
    "本周|这周|上个月|下个月|这个月|星期[一二三四五六日天]|礼拜[一二三四五六日天]|昨日|今日|明日|一昨日|明後日|先週|"
    "来週|今週|先月|来月|今月|昨年|来年|[月火水木金土日]曜日?|暑假|寒假|春节|春節|夏休み|冬休み|正月"
)
_CJK_FACTS = re.compile(
    f"(?P<n>{_CJK_NUMERAL}{_COUNTER})|(?P<d>{_CJK_DATES})"
    "|(?P<x>决定|決定|決め|同意|约定|約束|约好|商定|定了|确定|確定|合意|答应)"
    "|(?P<p>打算|计划|計画|准备|準備|安排|予定|つもり)"
    "|(?P<e>失败|失敗|错误|錯誤|异常|異常|超时|超時|故障|报错|損壊|损坏|破損|丢失|紛失|延误|遅延|"
    "退款|返金|投诉|エラー|障害|キャンセル)"
)
_CJK_WEIGHTS = {"n": NUMBER_WORD, "d": DATE, "x": DECISION, "p": PLAN, "e": PROBLEM}
_CJK_NAMES = re.compile(
    "[\u30a1-\u30faー]{2,}"  # katakana words: names, places, brands
    f"|[{_HAN}\u30a0-\u30ff]{{1,4}}(?:さん|様|さま|先生|君|くん|ちゃん|老师|老師|女士|小姐|"
    "经理|經理|部長|課長|社長)"
    f"|(?:叫|名为|名為|名字是|我是)(?![你我他她它您])([{_HAN}]{{1,4}})"  # a name being given
    "|「([^」]{1,20})」|『([^』]{1,20})』|《([^》]{1,30})》|“([^”]{1,30})”"
)
_CJK_TALK = re.compile(
    "你好|您好|大家好|谢谢|謝謝|多谢|不客气|哈哈+|嘿嘿|呵呵|好的|好吧|嗯+|对啊|是啊|是的|没问题|"
    "再见|拜拜|太好了|真棒|真好|厉害|加油|辛苦了|不错|可以的|"
    "こんにちは|こんばんは|おはよう(?:ございます)?|ありがとう(?:ございます)?|どうも|"
    "よろしく(?:お願いします)?|すごい(?:ね|です)?|いいね|なるほど|お疲れ(?:様)?(?:です)?|"
    "じゃあね|またね|はい|うん|そうですね|そうだね|了解|わかりました|オッケー|笑"
)


@functools.lru_cache(maxsize=32_768)
def weigh(text: str) -> tuple[tuple[str, float], ...]:
    """The terms ``text`` carries and their weights; ``()`` when it carries nothing."""
    found: dict[str, float] = {}
    _marks(text, found)
    cjk = bool(_IS_CJK.search(text))
    names, vocatives = _words(text, found, cjk)
    names += entities(text)
    plain = text
    if cjk:
        plain = _CJK_TALK.sub(" ", text)
        names += _cjk(plain, found)
    left_out = {name.casefold() for name in names} | vocatives
    content = [(t, w) for t, w in map(_term, terms(plain)) if w and t not in left_out]
    enough = CONTENT if names else ENOUGH  # a name and what is said of it: "I met Tom."
    if not found and sum(weight for _, weight in content) < enough:
        return ()  # no fact, one word of content: "Wow, Caroline, that's gorgeous!"
    generic = 1.0 if names or any(w >= NAME for w in found.values()) else GENERIC
    for name in names:
        found.setdefault(f"name:{name.casefold()}", NAME)
    for term, weight in content:
        found.setdefault(f"w:{term}", weight * generic)
    factor = QUESTION if text.rstrip(" \"'”’)]」』）").endswith(("?", "？")) else 1.0
    marks = 0
    weighed: list[tuple[str, float]] = []
    for term, weight in found.items():
        if term.startswith(("id:", "n:")):
            marks += 1
            weight *= MANY_WEIGHT if marks > MANY else 1.0
        weighed.append((term, weight * factor))
    return tuple(weighed)


def marks(text: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """What of ``text`` a summary can be seen to carry, casefolded, each once: its traces
    (identifiers, numbers with digits, names), then its other weighed terms."""
    traces: dict[str, None] = {}
    others: dict[str, None] = {}
    for sentence in split_sentences(text):  # weighed (and cached) one sentence at a time
        for term, _ in weigh(sentence):
            kind, _, value = term.partition(":")
            if kind in ("id", "name") or (kind == "n" and _DIGIT.search(value)):
                traces[value.casefold()] = None
            elif kind in ("w", "d") or kind == "n":
                others[value.casefold()] = None
    return tuple(traces), tuple(t for t in others if t not in traces)


def mentions(text: str, mark: str) -> bool:
    """Whether ``text`` (casefolded) holds ``mark`` as a whole word: ``42`` is not in
    ``1042``; next to a CJK character or punctuation, anywhere."""
    start = text.find(mark) if mark else -1
    while start >= 0:
        end = start + len(mark)
        if not (_joined(mark[0]) and start and _joined(text[start - 1])) and not (
            _joined(mark[-1]) and end < len(text) and _joined(text[end])
        ):
            return True
        start = text.find(mark, start + 1)
    return False


def _joined(char: str) -> bool:
    """A letter or digit that runs into the next one (CJK characters do not need spaces)."""
    return char.isalnum() and not is_cjk(char)


def _marks(text: str, found: dict[str, float]) -> None:
    """Identifiers and numbers: patterns run only if a character they need is there."""
    checks = (
        (_ADDRESS, "@" in text or "://" in text or "www." in text),
        (_HANDLE, "#" in text or "@" in text),
        (_CONSTANT, "_" in text),
    )
    for pattern, may in checks:
        if may:
            for match in pattern.finditer(text):
                found.setdefault(f"id:{match.group().casefold()}", IDENTIFIER)
    if _DIGIT.search(text):
        for match in _CODE.finditer(text):
            found.setdefault(f"id:{match.group().casefold()}", IDENTIFIER)
        for match in _NUMBER.finditer(text):
            found.setdefault(f"n:{match.group()}", NUMBER)


def _words(text: str, found: dict[str, float], cjk: bool) -> tuple[list[str], set[str]]:
    """Facts among the Latin-script words; returns the names, and the names only addressed.

    In CJK text (``cjk``), a capitalized Latin word is a name wherever it stands.
    """
    matches = list(_WORD.finditer(text))
    words = [m.group() for m in matches]
    lower = [word.casefold() for word in words]
    names: list[str] = []
    vocatives: set[str] = set()
    looked_up = [  # most words are neither a fact nor a name: skip them in one sweep
        i
        for i, low in enumerate(lower)
        if low in _TRIGGERS
        or words[i][0].isupper()
        or low.startswith(DECISION_STEMS)
        or low.endswith(_WILL)
    ]
    for i in looked_up:
        low, word = lower[i], words[i]
        before = lower[i - 1] if i else ""
        after = lower[i + 1] if i + 1 < len(lower) else ""
        if word in DATE_NAMES:  # capitalized only: "May", not "may"
            found.setdefault(f"d:{low}", DATE)
        fact = _VOCABULARY.get(low) or _phrase(low, before, after)
        if fact is not None:
            found.setdefault(fact[0], fact[1])
        if word[0].isupper() and _is_name(text, matches[i].start(), word, i, cjk):
            if before in GREETINGS or _ends_addressing(text, matches, i):
                vocatives.add(low)
            else:
                names.append(word)
    return names, vocatives


def _phrase(low: str, before: str, after: str) -> tuple[str, float] | None:
    """Facts of two words (``last week``, ``2 days ago``, ``agreed to``) and word forms."""
    if low in PERIODS and before in _RELATIVE:
        return f"d:{before} {low}", DATE
    if low == "ago" and before:
        return f"d:{before} ago", DATE
    if (low, after) in DECISION_PAIRS:
        return f"x:{low}", DECISION
    if (low, after) in PROBLEM_PAIRS:
        return f"!:{low} {after}", PROBLEM
    if low.startswith(DECISION_STEMS):
        return f"x:{low}", DECISION
    if low.endswith(_WILL) or (low == "going" and after == "to"):
        return f"p:{low}", PLAN
    return None


def _is_name(text: str, start: int, word: str, i: int, cjk: bool = False) -> bool:
    """A capitalized word that does not start a sentence (or is in CJK text), or an acronym."""
    if len(word) < 2 or word in _NOT_NAMES or word in DATE_NAMES:
        return False
    if word.isupper() or (cjk and word.casefold() not in TALK):
        return True
    j = start - 1
    while j >= 0 and text[j].isspace():
        j -= 1
    return i > 0 and j >= 0 and text[j] not in _SENTENCE_START


def _ends_addressing(text: str, matches: list[re.Match[str]], i: int) -> bool:
    """A last word after a comma, only punctuation after it: ``That's great, Mel!``."""
    if i != len(matches) - 1 or any(ch.isalnum() for ch in text[matches[i].end() :]):
        return False
    j = matches[i].start() - 1
    while j >= 0 and text[j].isspace():
        j -= 1
    return j >= 0 and text[j] == ","


def _cjk(text: str, found: dict[str, float]) -> list[str]:
    """Facts of CJK text (numerals with counters, dates, decisions, plans); returns names."""
    for match in _CJK_FACTS.finditer(text):
        kind = match.lastgroup or "n"
        found.setdefault(f"{kind}:{match.group()}", _CJK_WEIGHTS[kind])
    return [m.group(m.lastindex or 0) for m in _CJK_NAMES.finditer(text)]


@functools.lru_cache(maxsize=65_536)
def _term(term: str) -> tuple[str, float]:
    """A scoring term as content: words 0.5, CJK bigrams 0.25; talk, kana-only, digits 0."""
    if term in TALK or _DIGIT.search(term):
        return term, 0.0
    if not is_cjk(term[0]):
        return term, CONTENT
    return term, 0.0 if _KANA_ONLY.fullmatch(term) else BIGRAM
