"""Text: templates with slots, word counts, compactly written word lists and text blocks,
and the filler talk every scenario shares (small talk, padding lines)."""

from __future__ import annotations

import itertools
import random
import re
import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import date

from ctxwindow.eval.builtin._chat import _Chat

_SLOT = re.compile(r"\{(\w+)\}")

Slots = Mapping[str, Sequence[str]]


def _fill(
    template: str, rng: random.Random, slots: Slots, facts: Mapping[str, str] | None = None
) -> str:
    """Replace each ``{name}`` by ``facts[name]`` or else a random choice from ``slots[name]``."""

    def value(match: re.Match[str]) -> str:
        name = match.group(1)
        if facts is not None and name in facts:
            return facts[name]
        return rng.choice(slots[name])

    return _SLOT.sub(value, template)


def _is_cjk(char: str) -> bool:
    return ord(char) >= 0x2E80


def _words(text: str, lang: str) -> int:
    if lang == "zh":
        return max(1, len("".join(text.split())) // 2)
    return len(text.split())


def _join(parts: Sequence[str], lang: str) -> str:
    return ("" if lang == "zh" else " ").join(parts)


def _prose(rng: random.Random, lang: str, sentences: Sequence[str], words: int) -> str:
    """Sentences in random order (repeating if need be) until about ``words`` words."""
    target = max(1, round(words * rng.uniform(0.7, 1.3)))
    parts: list[str] = []
    for sentence in itertools.cycle(rng.sample(list(sentences), len(sentences))):
        if sum(_words(part, lang) for part in parts) >= target:
            break
        parts.append(sentence)
    return _join(parts, lang)


def _code(rng: random.Random, pattern: str, taken: set[str]) -> str:
    """A code not in ``taken`` for ``pattern``: ``#`` is a digit, ``@`` an uppercase letter."""
    digits, letters = "0123456789", "ABCDEFGHJKLMNPRSTUVWXYZ"
    while True:
        code = "".join(
            rng.choice(digits) if c == "#" else rng.choice(letters) if c == "@" else c
            for c in pattern
        )
        if code not in taken:
            taken.add(code)
            return code


def _day(d: date, lang: str) -> str:
    return f"{d.month}月{d.day}日" if lang == "zh" else f"{d:%B} {d.day}"


def _split(text: str) -> list[str]:
    """``"a, b、c"`` → ``["a", "b", "c"]``: word lists written compactly."""
    return [w.strip() for w in re.split(r"[,、]", text) if w.strip()]


def _lines(block: str) -> list[str]:
    """One item per line of a text block; an indented line continues the item before it."""
    items: list[str] = []
    for line in textwrap.dedent(block).splitlines():
        if line[:1].isspace() and items:
            more = line.strip()
            glue = "" if _is_cjk(items[-1][-1]) or _is_cjk(more[0]) else " "
            items[-1] += glue + more
        elif line.strip():
            items.append(line.strip())
    return items


@dataclass(frozen=True)
class _Topic:
    """What users ask about one topic: each ask with its own reply lines, plus shared lines."""

    asks: Sequence[tuple[str, Sequence[str]]]
    shared: Sequence[str]


def _topics(block: str) -> list[_Topic]:
    """Topics separated by blank lines.

    In a topic, ``? `` starts what the user asks and the lines below it are the
    start of the reply; lines before the first ``? `` may end any reply.
    """
    topics = []
    for chunk in textwrap.dedent(block).strip().split("\n\n"):
        asks: list[tuple[str, list[str]]] = []
        shared: list[str] = []
        for item in _lines(chunk):
            if item.startswith("? "):
                asks.append((item[2:], []))
            elif asks:
                asks[-1][1].append(item)
            else:
                shared.append(item)
        topics.append(_Topic(asks, shared))
    return topics


@dataclass(frozen=True)
class _Talk:
    """Filler talk of one scenario in one language: topics, reply openers and slot values."""

    topics: Sequence[_Topic]
    openers: Sequence[str]  # may start a reply to a question
    slots: Slots


class _SmallTalk:
    """Writes filler exchanges out of a fixed budget of ``turns``."""

    def __init__(self, chat: _Chat, talk: _Talk, turns: int, words: int) -> None:
        self.chat, self.talk, self.left, self.words = chat, talk, turns, words
        self._last: _Topic | None = None

    def run(self, n: int) -> None:
        for _ in range(min(n, self.left)):
            self.left -= 1
            self._exchange()

    def rest(self) -> None:
        self.run(self.left)

    def _exchange(self) -> None:
        chat, talk, rng = self.chat, self.talk, self.chat.rng
        topic = rng.choice([t for t in talk.topics if t is not self._last])
        self._last = topic
        ask, own = rng.choice(topic.asks)
        # One value per slot for the whole exchange, so the reply matches the question.
        values = {name: rng.choice(choices) for name, choices in talk.slots.items()}
        chat.say("user", _fill(ask, rng, {}, values))
        lines = [*own, *rng.sample(list(topic.shared), len(topic.shared))]
        lines += rng.sample(list(_PADDING[chat.lang]), rng.randint(0, 1))
        target = max(1, round(self.words * rng.uniform(0.7, 1.3)))
        reply = [rng.choice(talk.openers)] if ask[-1] in "?？" and rng.random() < 0.5 else []
        for line in lines:
            reply.append(_fill(line, rng, {}, values))
            if sum(_words(part, chat.lang) for part in reply) >= target:
                break
        chat.say("assistant", _join(reply, chat.lang))


# --- shared vocabulary -----------------------------------------------------------------------

_PADDING: Mapping[str, Sequence[str]] = {
    "en": _lines("""
        I hope that makes things a bit clearer.
        If anything is still unclear, just ask and I'll go through it again.
        It's a common question, so you're in good company.
        Let me know if you'd like more detail on any part of that.
        Every situation is a little different, so take this as a general guide.
        Happy to look at the specifics with you if it comes up again.
        That's the short version; there are always exceptions.
        Feel free to come back to this later if you think of something else.
    """),
    "zh": _lines("""
        希望这样说能清楚一些。
        如果还有哪里不明白，随时再问我，我再详细说一遍。
        这个问题问的人挺多的，您不是一个人。
        要是想了解哪一部分的细节，告诉我就行。
        每个人的情况都不太一样，以上可以当作一般参考。
        之后遇到具体情况，也可以再来找我一起看看。
        大致就是这样，当然也会有一些例外。
        之后想到别的问题，随时回来问就好。
    """),
}

_SMALL_TALK: Mapping[str, Sequence[_Topic]] = {
    "en": _topics("""
        Days like that are perfect for getting small chores out of the way.
        At least it's a good excuse to stay in and get organised.
        Some people love that kind of weather; it depends on your plans.
        ? The weather here is {weather} today, honestly.
        Oh no, I hope it gets better later in the day.
        A warm drink and a quiet hour can make a day like that feel a lot better.
        ? It's {weather} outside, so I'm staying in and sorting things out.
        That sounds like a sensible plan.
        I hope it clears up in time for the weekend.

        ? I'm having my {drink} while we chat, it's a slow morning.
        Slow mornings are underrated; enjoy the {drink}.
        There's no rush at all, we can take this one step at a time.
        ? Thanks for being so patient with me, by the way.
        It's no trouble at all; that's exactly what I'm here for.
        Taking a moment to sort things out properly usually saves time later.
        ? Do you get a lot of questions like mine?
        Questions like yours come up all the time, and they're good ones.
        Asking early is always better than guessing and having to fix things later.

        A change of scene at the weekend does wonders after a busy week.
        It's nice to have something simple to look forward to.
        Just make sure to leave some time to rest as well.
        ? Any plans for the weekend? I'm thinking of going {weekend}.
        That sounds like a lovely way to spend a Saturday.
        ? I might go {weekend} on Saturday if I finish everything.
        If the weather plays along, that sounds ideal.
    """),
    "zh": _topics("""
        这种天气最适合在家把小事情一件件处理掉。
        正好有理由宅在家里收拾收拾。
        有的人反而很喜欢这种天气，主要看您有什么安排。
        ? 我们这儿今天{weather}，干脆在家处理点杂事。
        这个安排挺好的，趁这种天气把杂事一口气做完。
        泡杯热饮、安安静静待一会儿，心情也会好不少。
        ? 外面{weather}，哪儿也不想去。
        那就在家好好歇着吧，偶尔宅一天也挺舒服的。
        希望周末之前天气能好起来。

        ? 我一边喝{drink}一边跟你聊，今天早上挺悠闲的。
        悠闲的早上很难得，慢慢喝您的{drink}吧。
        不着急，我们一步一步来。
        ? 对了，谢谢你这么耐心。
        一点都不麻烦，这本来就是我该做的。
        把事情一次弄清楚，之后反而能省不少时间。
        ? 像我这种问题，你们是不是经常遇到？
        这类问题确实很常见，而且都问得很在点子上。
        提前问清楚总比自己猜、事后再补救要好。

        忙了一周，周末换个环境特别能放松。
        有件简单的小事可以期待，日子也会轻松一点。
        不过也记得给自己留点时间好好休息。
        ? 周末你有什么建议吗？我在考虑去{weekend}。
        听起来是个很不错的周末安排。
        ? 要是这周忙完了，周六我可能去{weekend}。
        天气好的话，再合适不过了。
    """),
}

_SMALL_SLOTS: Mapping[str, Slots] = {
    "en": {
        "weather": _split("grey and drizzly, unusually hot, windy, foggy, freezing, sunny"),
        "drink": _split("coffee, green tea, hot chocolate, chai, oat latte"),
        "weekend": _split("to the farmers' market, hiking by the lake, to a flea market, cycling"),
    },
    "zh": {
        "weather": _split("阴雨绵绵、热得要命、风特别大、雾蒙蒙的、冷得出奇、阳光很好"),
        "drink": _split("咖啡、绿茶、热可可、奶茶、燕麦拿铁"),
        "weekend": _split("逛菜市场、湖边徒步、逛跳蚤市场、郊外骑车、看个展览"),
    },
}


def _talk(lang: str, topics: Sequence[_Topic], openers: Sequence[str], slots: Slots) -> _Talk:
    """A scenario's own topics plus the shared small talk."""
    return _Talk([*topics, *_SMALL_TALK[lang]], openers, {**slots, **_SMALL_SLOTS[lang]})
