"""Built-in evaluation datasets: ``ctxwindow eval --dataset builtin:NAME``.

Four scenarios, each in English (``en``) and Chinese (``zh``). Every dataset is
generated from a seed with ``random.Random(seed)`` alone (no clock, network,
files or global random state), so the same spec always gives the same
dataset. The result is a plain dict in the evaluation dataset format
(docs/eval.md): conversations of chat messages with ``id`` and ``timestamp``,
and questions whose ``evidence`` names the messages that hold the answer.

``orders``
    Customer service. Early on the user asks about 3–5 orders (order number,
    item, price) and the assistant answers each with carrier, tracking number
    and delivery date; then many turns of unrelated support talk (returns,
    shipping, payment, account, small talk). Questions ask about one early
    order, e.g. the tracking number of the blue kettle (``single-hop``).
``manual``
    The user pastes a product manual: one message of about 3,000 (en) or
    3,500 (zh) tokens in 19 sections, each with its own facts (pairing PIN,
    battery, error codes, factory reset, warranty…). Many short turns follow,
    two of which state a fact about the user's own unit. Questions about the
    manual (``document``, evidence: the pasted message) and about those facts
    (``single-hop``).
``agent``
    An operations agent's run: tool calls (some in parallel) whose results are
    JSON of 500–2,000 tokens each (host inventories, logs, latency metrics,
    tickets, configs), every call followed at once by all of its results.
    Questions about the early results (``tool-result``, evidence: the result
    message), e.g. which host had the failed deploy in the first inventory
    lookup.
``persona``
    A long chat on many topics. Personal facts are stated early (name, city,
    job, allergy, favourite food, pet, birthday) and asked late
    (``single-hop``); ``multi-hop`` questions need two or three messages: the
    restaurant from a list that is in my city and safe for my allergy; the
    food my dog must now avoid (pet + vet visit); the city I will be in on my
    birthday (birthday + trip).

Every conversation has 4–8 questions; one or two of them are asked
mid-conversation (``after``), the others after the last message.

Each generator is ``generate_NAME(lang="en", *, conversations=1, turns=…,
filler=…, seed=0)``:

``conversations``
    How many conversations (ids ``NAME-LANG-0``, ``NAME-LANG-1``, …). Adding
    conversations leaves the earlier ones unchanged.
``turns``
    Filler exchanges: a user message and the assistant's reply (for
    ``agent``: a tool step, i.e. one or two calls, their results and the
    agent's note). Defaults: orders 190, manual 150, agent 10, persona 210.
``filler``
    Words a filler reply may reach (±30 %, Chinese counting two characters as
    a word). Replies are whole sentences on the user's question, so many stop
    shorter. Defaults: 60, and 40 for the agent's notes.
``seed``
    The seed of the ``random.Random`` behind every choice.

With the defaults a conversation has 13k–25k tokens (gpt-4o; seeds 0–19):
orders 14.5k–17.5k, manual 13.4k–16.2k, agent 17k–25k, persona 15k–19.5k,
Chinese being the longer end. ``builtin_dataset`` reads specs such
as ``orders``, ``persona-zh``, ``all`` (every scenario in both languages, 8
conversations) or ``orders-zh?turns=80&filler=30&seed=3&conversations=2``.

>>> data = builtin_dataset("orders-zh?turns=4&conversations=2")
>>> [c["id"] for c in data["conversations"]]
['orders-zh-0', 'orders-zh-1']
"""

from __future__ import annotations

import itertools
import json
import random
import re
import textwrap
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime, timedelta, timezone
from typing import Any, Protocol

__all__ = [
    "BUILTIN",
    "LANGUAGES",
    "PARAMETERS",
    "ScenarioGenerator",
    "builtin_dataset",
    "builtin_names",
    "generate_agent",
    "generate_manual",
    "generate_orders",
    "generate_persona",
]

LANGUAGES = ("en", "zh")
PARAMETERS = ("conversations", "filler", "seed", "turns")

_START = datetime(2024, 5, 1, 9, 0, tzinfo=timezone.utc)
_SLOT = re.compile(r"\{(\w+)\}")
_INT = re.compile(r"-?\d+")

Slots = Mapping[str, Sequence[str]]


class ScenarioGenerator(Protocol):
    """The signature every built-in generator shares."""

    def __call__(
        self,
        lang: str = ...,
        *,
        conversations: int = ...,
        turns: int = ...,
        filler: int = ...,
        seed: int = ...,
    ) -> dict[str, Any]: ...


# --- writing a conversation ---------------------------------------------------------------


class _Chat:
    """A conversation being written: messages with ids ``m0, m1, …`` and rising timestamps."""

    def __init__(self, rng: random.Random, lang: str) -> None:
        self.rng = rng
        self.lang = lang
        self.messages: list[dict[str, Any]] = []
        self.now = _START + timedelta(days=rng.randrange(150), minutes=rng.randrange(480))

    def say(self, role: str, content: str) -> str:
        return self._add({"role": role, "content": content})

    def call(self, *calls: tuple[str, Mapping[str, Any]]) -> list[str]:
        """One assistant message with tool calls; returns their call ids."""
        n = len(self.messages)
        ids = [f"call_{n}" if len(calls) == 1 else f"call_{n}_{k}" for k in range(len(calls))]
        tool_calls = [
            {
                "id": call_id,
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(args, ensure_ascii=False)},
            }
            for call_id, (name, args) in zip(ids, calls, strict=True)
        ]
        self._add({"role": "assistant", "content": None, "tool_calls": tool_calls})
        return ids

    def result(self, call_id: str, payload: Any) -> str:
        content = json.dumps(payload, ensure_ascii=False)
        return self._add({"role": "tool", "tool_call_id": call_id, "content": content})

    def index(self, message_id: str) -> int:
        return int(message_id[1:])

    def point_after(self, evidence: Sequence[str]) -> str:
        """A message id mid-way between the evidence and the end, for an ``after`` question."""
        last = max(self.index(e) for e in evidence)
        later: list[str] = [
            m["id"]
            for m in self.messages[last + 1 : -1]
            if m["role"] == "assistant" and "tool_calls" not in m
        ]
        if later:
            return self.rng.choice(later[: max(1, len(later) // 2)])
        while last + 1 < len(self.messages) and self.messages[last + 1]["role"] == "tool":
            last += 1  # never between a tool call and its last result
        return f"m{last}"

    def _add(self, fields: dict[str, Any]) -> str:
        message_id = f"m{len(self.messages)}"
        self.messages.append({"id": message_id, **fields, "timestamp": self._tick()})
        return message_id

    def _tick(self) -> str:
        seconds = self.rng.randint(15, 240)
        if self.rng.random() < 0.03:
            seconds += self.rng.randint(1, 18) * 3600  # the user comes back later
        self.now += timedelta(seconds=seconds)
        return self.now.strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class _Question:
    question: str
    answer: str
    evidence: list[str]
    category: str
    after: str | None = None


def _conversation(cid: str, chat: _Chat, questions: list[_Question]) -> dict[str, Any]:
    """The dataset dict of one conversation; questions ordered by where they are asked."""
    end = len(chat.messages)
    ordered = sorted(questions, key=lambda q: chat.index(q.after) if q.after else end)
    out = []
    for i, q in enumerate(ordered):
        entry: dict[str, Any] = {
            "id": f"q{i}",
            "question": q.question,
            "answer": q.answer,
            "evidence": list(q.evidence),
        }
        if q.after is not None:
            entry["after"] = q.after
        entry["category"] = q.category
        out.append(entry)
    return {"id": cid, "messages": chat.messages, "questions": out}


def _ask_midway(chat: _Chat, questions: list[_Question], how_many: int) -> None:
    """Ask ``how_many`` of the questions mid-conversation (``after``) instead of at the end."""
    for q in chat.rng.sample(questions, min(how_many, len(questions))):
        q.after = chat.point_after(q.evidence)


class _Builder(Protocol):
    def __call__(self, chat: _Chat, turns: int, filler: int) -> list[_Question]: ...


def _generate(
    scenario: str,
    build: _Builder,
    lang: str,
    conversations: int,
    turns: int,
    filler: int,
    seed: int,
) -> dict[str, Any]:
    if lang not in LANGUAGES:
        raise ValueError(f"unknown language {lang!r}: expected one of {', '.join(LANGUAGES)}")
    for name, value, least in (("conversations", conversations, 1), ("turns", turns, 0)):
        if value < least:
            raise ValueError(f"{name} must be at least {least}, got {value}")
    if filler < 1:
        raise ValueError(f"filler must be at least 1, got {filler}")
    rng = random.Random(seed)
    out = []
    for i in range(conversations):
        chat = _Chat(rng, lang)
        questions = build(chat, turns, filler)
        out.append(_conversation(f"{scenario}-{lang}-{i}", chat, questions))
    return {"conversations": out}


# --- text ----------------------------------------------------------------------------------


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


# --- orders ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class _OrdersText:
    system: str
    shops: Sequence[str]
    items: Sequence[str]
    carriers: Sequence[tuple[str, str]]  # (name, tracking number pattern)
    order_pattern: str
    first_asks: Sequence[str]
    more_asks: Sequence[str]
    replies: Sequence[str]
    questions: Mapping[str, str]
    talk: _Talk


# Which message states each fact about an order: the user's ask or the assistant's reply.
_ORDER_FACTS = {
    "tracking": "reply",
    "order": "ask",
    "eta": "reply",
    "price": "ask",
    "carrier": "reply",
}


def _price(rng: random.Random, lang: str) -> str:
    if lang == "zh":
        return f"{rng.randint(39, 1299)}元"
    return f"${rng.randint(12, 240)}.{rng.choice(['00', '49', '50', '90', '99'])}"


def _order(chat: _Chat, text: _OrdersText, item: str, taken: set[str]) -> dict[str, str]:
    rng, lang = chat.rng, chat.lang
    carrier, pattern = rng.choice(text.carriers)
    shipped = chat.now.date() - timedelta(days=rng.randint(1, 4))
    return {
        "item": item,
        "order": _code(rng, text.order_pattern, taken),
        "price": _price(rng, lang),
        "carrier": carrier,
        "tracking": _code(rng, pattern, taken),
        "ship": _day(shipped, lang),
        "eta": _day(shipped + timedelta(days=rng.randint(2, 6)), lang),
    }


def _orders(chat: _Chat, turns: int, filler: int) -> list[_Question]:
    rng = chat.rng
    text = _ORDERS[chat.lang]
    chat.say("system", _fill(text.system, rng, {"shop": text.shops}))
    small = _SmallTalk(chat, text.talk, turns, filler)
    small.run(rng.randint(0, 1))
    taken: set[str] = set()
    orders = []
    for i, item in enumerate(rng.sample(list(text.items), rng.randint(3, 5))):
        facts = _order(chat, text, item, taken)
        asks = text.first_asks if i == 0 else text.more_asks
        facts["ask"] = chat.say("user", _fill(rng.choice(asks), rng, {}, facts))
        facts["reply"] = chat.say("assistant", _fill(rng.choice(text.replies), rng, {}, facts))
        orders.append(facts)
        small.run(rng.randint(0, 2))
    small.rest()
    others = [(o, kind) for o in orders for kind in _ORDER_FACTS if kind != "tracking"]
    chosen = [(o, "tracking") for o in rng.sample(orders, rng.randint(1, 2))]
    chosen += rng.sample(others, rng.randint(3, 4))
    questions = [
        _Question(
            _fill(text.questions[kind], rng, {}, o), o[kind], [o[_ORDER_FACTS[kind]]], "single-hop"
        )
        for o, kind in chosen
    ]
    _ask_midway(chat, questions, rng.randint(1, 2))
    return questions


def generate_orders(
    lang: str = "en", *, conversations: int = 1, turns: int = 190, filler: int = 60, seed: int = 0
) -> dict[str, Any]:
    """Customer-service chats: orders stated early, asked about after long support talk."""
    return _generate("orders", _orders, lang, conversations, turns, filler, seed)


_ORDERS_EN = _OrdersText(
    system="You are Mia, a customer-service assistant for {shop}. Be concise, friendly and "
    "accurate, and never invent order data.",
    shops=_split("Northwind Home, Brightcart, Maple & Co., Harbor Goods, Lumen Living"),
    items=_split(
        "blue kettle, red backpack, wireless mouse, desk lamp, green yoga mat, ceramic teapot, "
        "Bluetooth speaker, cast-iron skillet, wool blanket, bathroom scale, "
        "bamboo cutting board, mechanical keyboard, linen bedsheet set, steel water bottle, "
        "rice cooker, coffee grinder"
    ),
    carriers=[
        ("UPS", "1Z@@@@@@##########"),
        ("FedEx", "############"),
        ("DHL Express", "##########"),
        ("USPS", "9400####################"),
    ],
    order_pattern="@-####",
    first_asks=_lines("""
        Hi! I've got a few orders with you and I'd like to check on them. First one: order {order},
          a {item}. I paid {price} for it.
        Hello, I need an update on several orders. Let's start with the {item}, order number
          {order}. It was {price}.
        Hi there. Could you look up my order {order}? It's the {item}, {price}. I have a couple more
          after that.
    """),
    more_asks=_lines("""
        Next one: order {order}, the {item}. That came to {price}.
        Could you also check order {order}? It's a {item} I bought for {price}.
        And there's the {item}: order {order}, {price} with tax.
        One more, please: order number {order}, a {item}, paid {price}.
        Also order {order}, the {item}, which was {price} on sale.
    """),
    replies=_lines("""
        Thanks! Your {item} left our warehouse on {ship} with {carrier}. The tracking number is
          {tracking}, and it should arrive by {eta}.
        Found it. The {item} was handed to {carrier} on {ship}, tracking number {tracking}. Expected
          delivery: {eta}.
        Good news: the {item} shipped on {ship} via {carrier}, tracking number {tracking}. The
          estimated delivery date is {eta}.
        The {item} is on its way. {carrier} picked it up on {ship}; you can follow it with tracking
          number {tracking}, and delivery is planned for {eta}.
    """),
    questions={
        "tracking": "What is the tracking number of my order for the {item}?",
        "order": "What was the order number of the {item}?",
        "eta": "When is the {item} expected to arrive?",
        "price": "How much did I pay for the {item}?",
        "carrier": "Which carrier is delivering the {item}?",
    },
    talk=_talk(
        "en",
        _topics("""
            You can start a return from the Orders page of your account, and the system prints a
              prepaid label for you.
            Refunds go back to the original payment method, usually within {n} business days after
              the parcel reaches our warehouse.
            Please include all accessories and manuals in the box; it speeds up the check at the
              warehouse.
            ? How long do I have to return something if it doesn't fit?
            Most items can be returned within {days} days of delivery, as long as they are unused
              and in their original packaging.
            If it's just the size, an exchange is often quicker than a return and a new order.
            ? What's your return policy for items that were on sale?
            Sale items follow the same rules as full-price ones.
            The only exception is the clearance section, where everything is final sale.
            ? If I send something back, do I pay for the return shipping?
            Returns are free for members; otherwise a small fee is taken off the refund.
            If an item arrived damaged or faulty, the return shipping is always on us.
            For bulky items we arrange a pickup instead of asking you to drop the parcel off.

            Delivery times stretch a little around public holidays, so it's worth ordering early.
            ? Do you ship to {region}?
            Yes, we ship to {region}; the checkout page shows the exact options for your address.
            Deliveries there usually take a few extra days, and import duties may apply.
            ? Is express shipping worth it?
            Standard shipping is free above a minimum basket, and express delivery adds a small flat
              fee.
            Express is mostly worth it for gifts or anything you need by a fixed date.
            ? What happens if I'm not home when the courier comes?
            Couriers usually leave a note and try again on the next working day.
            If a parcel can't be delivered after three attempts, it waits at the local depot for a
              week.
            You can pick a pickup point at checkout if daytime deliveries are awkward for you.

            All payments go through an encrypted checkout, and we never store full card numbers.
            ? Can I pay with {payment}?
            Yes, we accept {payment}, as well as the major credit cards and bank transfers.
            You can choose it on the last step of checkout.
            ? Is it possible to split a payment across two cards?
            Splitting one order across two cards isn't supported yet.
            A gift card can be combined with a card, though.
            ? Why was my card charged before anything shipped?
            What you see before shipping is an authorisation hold; the actual charge happens when
              the parcel leaves the warehouse.
            Holds disappear from your statement within a few days if an order is cancelled.
            If your bank flags a payment, approving it in your banking app usually clears it within
              minutes.

            For security, changes to your account details are confirmed by email.
            Turning on two-step sign-in is a good idea if you shop with us often.
            ? How do I change the email address on my account?
            You can change it under Account settings; we send a confirmation link to the new
              address.
            If you no longer have access to your old email, our team can verify your identity
              another way.
            ? I forgot my password, what should I do?
            The 'Forgot password' link on the sign-in page sends you a reset link that is valid for
              one hour.
            Check your spam folder if the email doesn't arrive within a few minutes.
            ? Can I have two delivery addresses saved?
            You can save as many delivery addresses as you like and choose one at checkout.
            You can also mark one of them as the default.

            Members also get early access to limited collections.
            ? Can I combine two discount codes?
            Only one discount code can be used per order, but loyalty points can be added on top.
            Codes from partner websites sometimes have their own conditions, so it's worth reading
              the small print.
            ? How do loyalty points work?
            You earn a point for every unit of currency you spend, and points can be redeemed at
              checkout.
            Points expire after twelve months without any purchase on the account.
            ? Are there any sales coming up for {season}?
            We usually run a {season} sale, and newsletter subscribers hear about it first.
            The exact dates are announced about a week in advance.

            Most products come with a care label or a leaflet with specific advice.
            A little regular care makes things last much longer than an occasional deep clean.
            ? Any tips for cleaning {material} things?
            For {material}, a soft cloth and mild soapy water are usually enough.
            Avoid harsh cleaners; they can dull the surface over time.
            Let everything dry completely before putting it away.
            ? How should I store {material} items when I'm not using them?
            A cool, dry cupboard is the best place for anything made of {material}.
            Keep them out of direct sunlight, and give them a little room so air can circulate.

            Wrapped parcels sometimes take an extra day to leave the warehouse.
            ? Do you offer gift wrapping?
            Gift wrapping is available for most items; you can select it in the basket.
            You can choose between recycled paper and a reusable fabric wrap.
            ? Can I send an order to someone else as a present?
            Yes: enter their delivery address and add a personal message at checkout.
            The person receiving the gift can exchange it without needing your receipt.
            ? Can you leave the price off the delivery note?
            Gift orders ship with a delivery note that doesn't show any prices.
            Just tick the gift option at checkout and the prices are left off automatically.
        """),
        ["Good question.", "Happy to explain.", "Thanks for asking.", "Let me explain."],
        {
            "days": ["14", "30", "45"],
            "n": ["3", "5", "7"],
            "region": _split("Canada, Ireland, the Canary Islands, Norway, Hawaii"),
            "payment": _split("PayPal, Apple Pay, Google Pay, Klarna"),
            "season": _split("the holidays, spring, back-to-school, summer"),
            "material": _split("cast-iron, linen, wool, bamboo, ceramic, stainless steel"),
        },
    ),
)

_ORDERS_ZH = _OrdersText(
    system="你是{shop}的在线客服小满。回答要简洁、友好、准确，不要编造任何订单信息。",
    shops=_split("优品家居、悦购商城、小满生活馆、禾木良品、云朵百货"),
    items=_split(
        "蓝色电热水壶、红色双肩包、无线鼠标、护眼台灯、绿色瑜伽垫、陶瓷茶壶、降噪耳机、"
        "铸铁平底锅、羊毛毯、智能体重秤、竹制砧板、机械键盘、亚麻四件套、不锈钢保温杯、"
        "电饭煲、磨豆机"
    ),
    carriers=[
        ("顺丰速运", "SF#############"),
        ("京东物流", "JDX############"),
        ("中通快递", "7#############"),
        ("圆通速递", "YT#############"),
        ("韵达快递", "43#############"),
    ],
    order_pattern="############",
    first_asks=_lines("""
        你好，我在你们这儿下了好几单，想查一下物流。先说第一单：订单号{order}，买的是{item}，
          付了{price}。
        在吗？我有几个订单想问问进度。先查{item}那单，订单号{order}，当时花了{price}。
        你好，麻烦帮我查一下订单{order}，是一个{item}，{price}。后面还有几单。
    """),
    more_asks=_lines("""
        下一单：订单号{order}，{item}，一共{price}。
        还有订单{order}也帮我看看，是{item}，{price}买的。
        另外那个{item}，订单号{order}，付了{price}，现在到哪了？
        再麻烦查一单：{order}，买的{item}，{price}。
        还有一单是{item}，订单号{order}，活动价{price}。
    """),
    replies=_lines("""
        查到了！您的{item}已于{ship}从仓库发出，承运快递是{carrier}，运单号{tracking}，
          预计{eta}送达。
        好的，{item}在{ship}交给了{carrier}，运单号是{tracking}，预计{eta}能到。
        您的{item}已经在路上啦：{ship}发货，{carrier}承运，运单号{tracking}，预计送达时间{eta}。
        帮您看了，{item}{ship}出库，走的是{carrier}，单号{tracking}，正常情况下{eta}前送到。
    """),
    questions={
        "tracking": "我买的{item}那单，快递单号是多少？",
        "order": "{item}那一单的订单号是多少？",
        "eta": "{item}预计哪天送到？",
        "price": "我买{item}花了多少钱？",
        "carrier": "{item}是哪家快递在送？",
    },
    talk=_talk(
        "zh",
        _topics("""
            您可以在“我的订单”里直接点“申请售后”，系统会帮您生成上门取件单。
            退款会原路退回，仓库收到退货后一般{n}个工作日内到账。
            退货时记得把配件、说明书和赠品一起寄回，这样审核会快一些。
            ? 衣服尺码不合适的话，多久之内可以退？
            大部分商品签收后{days}天内都可以申请无理由退货，只要不影响二次销售就行。
            如果只是尺码问题，直接申请换货通常比退了再买要快。
            ? 打折买的东西也能退吗？
            活动商品和正价商品的退货规则是一样的。
            只有清仓专区的商品是不退不换的。
            ? 退货的运费要我自己出吗？
            会员退货免运费，非会员的话会从退款里扣一点运费。
            如果收到的商品有破损或者质量问题，来回运费都由我们承担。
            大件商品我们会安排师傅上门取件，不用您自己跑快递点。

            节假日前后配送会稍微慢一点，有急用的话建议早点下单。
            ? 你们能发{region}吗？
            {region}是可以发的，具体能选哪些配送方式，下单时页面上会显示。
            偏远地区一般要多等几天，部分商品可能需要补一点运费。
            ? 加急配送值得吗？
            订单满一定金额就包邮，加急配送需要另付一点运费。
            如果是送礼或者有明确的截止日期，加急还是挺划算的。
            ? 快递来的时候我不在家怎么办？
            快递员一般会先打电话，联系不上的话第二天会再送一次。
            如果三次都没送成，包裹会在当地网点保留七天。
            白天不方便收件的话，下单时可以选择送到附近的快递柜或驿站。

            所有支付都走加密通道，我们不会保存完整的卡号。
            ? 可以用{payment}付款吗？
            可以的，我们支持{payment}，也支持银行卡和信用卡。
            在结算页面最后一步选择就行。
            ? 一笔订单能分两张卡付吗？
            目前一笔订单还不能拆成两张卡支付。
            不过礼品卡可以和银行卡一起用。
            ? 还没发货怎么就扣款了？
            下单后显示的是预授权冻结，真正扣款是在包裹出库的时候。
            如果订单取消了，冻结的金额一般几天内就会自动解冻。
            如果银行拦截了这笔支付，在手机银行里确认一下，通常几分钟就好。

            为了账户安全，修改重要信息时我们都会发短信确认。
            经常网购的话，建议打开登录保护，会更安心一些。
            ? 账号绑定的手机号怎么换？
            在“账户设置”里就能更换手机号，需要新旧号码各验证一次。
            如果旧手机号已经停用了，我们可以通过其他方式帮您核实身份。
            ? 密码忘了怎么办？
            登录页点“忘记密码”，按短信验证码重新设置就可以了，验证码十分钟内有效。
            如果收不到短信，可以稍等一分钟后重新获取。
            ? 可以保存两个收货地址吗？
            收货地址可以保存好几个，下单时选一个就行。
            还可以把最常用的那个设成默认地址。

            会员还能提前购买一些限量款。
            ? 两张优惠券能一起用吗？
            每笔订单只能用一张优惠券，不过积分可以叠加抵扣。
            第三方平台发的券有时候有单独的使用条件，用之前最好看清楚说明。
            ? 会员积分是怎么算的？
            每消费一元积一分，结算时可以直接抵现。
            如果账户连续十二个月没有消费，积分会自动清零。
            ? {season}会有活动吗？
            {season}一般都会有大促，关注店铺的会员能最早收到通知。
            具体时间一般会提前一周左右公布。

            大部分商品都附有保养说明，可以照着上面的建议来。
            平时顺手保养一下，比隔很久才大扫除一次要管用得多。
            ? {material}的东西平时怎么清洁比较好？
            {material}的东西用软布蘸一点温和的清洁剂擦一擦就够了。
            尽量别用太刺激的清洁剂，时间长了表面会变得暗淡。
            洗完一定要彻底晾干再收起来。
            ? {material}制品不用的时候怎么收纳？
            {material}制品最好放在阴凉干燥的柜子里。
            别让阳光直射，也别塞得太满，留点空间透气。

            选了礼品包装的订单，出库可能会晚一天。
            ? 你们可以帮忙包装成礼物吗？
            大部分商品都可以选礼品包装，在购物车里勾选就行。
            包装纸有环保纸和可重复使用的布包两种可选。
            ? 能直接寄给朋友当礼物吗？
            可以的，下单时填朋友的地址，还能附上一段祝福语。
            收到礼物的人不需要小票也能申请换货。
            ? 发货单上能不显示价格吗？
            礼品订单的发货单上不会显示任何价格。
            下单时勾选“礼品订单”，价格就会自动隐藏。
        """),
        ["好问题。", "我来给您解释一下。", "谢谢您的提问。", "这个我来说明一下。"],
        {
            "days": ["7", "15", "30"],
            "n": ["3", "5", "7"],
            "region": _split("新疆、西藏、香港、海南、内蒙古"),
            "payment": _split("微信支付、支付宝、云闪付、花呗"),
            "season": _split("双十一、年货节、618、开学季"),
            "material": _split("铸铁、亚麻、羊毛、竹子、陶瓷、不锈钢"),
        },
    ),
)

_ORDERS = {"en": _ORDERS_EN, "zh": _ORDERS_ZH}


# --- manual ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Section:
    title: str
    sentences: Sequence[str]
    listing: str = ""  # lines after the paragraph


def _section(title: str, block: str, listing: str = "") -> _Section:
    return _Section(title, _lines(block), textwrap.dedent(listing).strip())


@dataclass(frozen=True)
class _ManualText:
    system: str
    products: Sequence[tuple[str, str, str]]  # (name, kind, replaceable part)
    buttons: Sequence[str]
    meanings: Sequence[str]
    formats: Mapping[str, str]  # how each measured fact is written
    title: str
    sections: Sequence[_Section]
    padding: Sequence[str]
    faq: tuple[str, str]  # heading, question-and-answer template
    paste: Sequence[str]
    acks: Sequence[str]
    own_facts: Mapping[str, tuple[str, str]]  # fact -> (what the user says, question)
    own_acks: Sequence[str]
    own_values: Slots
    questions: Mapping[str, str]
    talk: _Talk


def _manual_facts(rng: random.Random, text: _ManualText) -> dict[str, str]:
    name, kind, part = rng.choice(text.products)
    b1, b2 = rng.sample(list(text.buttons), 2)
    f = text.formats
    codes = [f"E{n:02d}" for n in sorted(rng.sample(range(1, 40), 5))]
    meanings = [_fill(m, rng, {}, {"part": part}) for m in rng.sample(list(text.meanings), 5)]
    pick = rng.randrange(5)
    return {
        "name": name,
        "kind": kind,
        "part": part,
        "b1": b1,
        "b2": b2,
        "model": _code(rng, "@@-####", set()),
        "tmin": f["temp"].format(rng.choice([0, 5, 10])),
        "tmax": f["temp"].format(rng.choice([35, 38, 40, 45])),
        "mah": f"{rng.randrange(2000, 6001, 100)} mAh",
        "charge": f["hours"].format(rng.choice(["2.5", "3", "3.5", "4", "5"])),
        "reset": f["reset"].format(b1=b1, b2=b2, secs=rng.choice([8, 10, 12, 15, 20])),
        "pin": f"{rng.randrange(10000):04d}",
        "interval": f["interval"].format(rng.choice([4, 6, 8, 10, 12])),
        "kg": f"{rng.randint(2, 40) / 10} kg",
        "db": f"{rng.randint(42, 68)} dB",
        "months": f["months"].format(rng.choice([12, 18, 24, 36])),
        "phone": _code(rng, f["phone"], set()),
        "code": codes[pick],
        "meaning": meanings[pick],
        "codes": "\n".join(f"- {c}: {m}" for c, m in zip(codes, meanings, strict=True)),
    }


def _manual_document(
    rng: random.Random, lang: str, text: _ManualText, facts: dict[str, str]
) -> str:
    """The manual: numbered sections with the facts, a few general notes, and a FAQ."""
    notes = iter(rng.sample(list(text.padding), len(text.padding)))
    blocks = [_fill(text.title, rng, {}, facts)]
    for number, section in enumerate(text.sections, 1):
        sentences = [_fill(s, rng, {}, facts) for s in section.sentences]
        sentences += itertools.islice(notes, rng.randint(1, 2))
        blocks += [f"## {number}. {section.title}", _join(sentences, lang)]
        if section.listing:
            blocks.append(_fill(section.listing, rng, {}, facts))
    heading, template = text.faq
    blocks.append(f"## {len(text.sections) + 1}. {heading}")
    product_topics = [t for t in text.talk.topics if t not in _SMALL_TALK[lang]]
    for topic in rng.sample(product_topics, len(product_topics)):
        for ask, own in topic.asks:
            values = {name: rng.choice(choices) for name, choices in text.talk.slots.items()}
            answer = _join([_fill(line, rng, {}, values) for line in own], lang)
            blocks.append(template.format(ask=_fill(ask, rng, {}, values), answer=answer))
    return "\n\n".join(blocks)


def _manual(chat: _Chat, turns: int, filler: int) -> list[_Question]:
    rng, lang = chat.rng, chat.lang
    text = _MANUAL[lang]
    facts = _manual_facts(rng, text)
    chat.say("system", text.system)
    facts["manual"] = _manual_document(rng, lang, text, facts)
    manual = chat.say("user", _fill(rng.choice(text.paste), rng, {}, facts))
    chat.say("assistant", _fill(rng.choice(text.acks), rng, {}, facts))
    questions = [
        _Question(_fill(text.questions[key], rng, {}, facts), facts[key], [manual], "document")
        for key in rng.sample(sorted(text.questions), rng.randint(3, 4))
    ]
    small = _SmallTalk(chat, text.talk, turns, filler)
    for key in rng.sample(sorted(text.own_facts), 2):
        small.run(rng.randint(1, 4))
        facts[key] = rng.choice(text.own_values[key])
        statement, question = text.own_facts[key]
        said = chat.say("user", _fill(statement, rng, {}, facts))
        chat.say("assistant", rng.choice(text.own_acks))
        questions.append(
            _Question(_fill(question, rng, {}, facts), facts[key], [said], "single-hop")
        )
    small.rest()
    _ask_midway(chat, questions, rng.randint(1, 2))
    return questions


def generate_manual(
    lang: str = "en", *, conversations: int = 1, turns: int = 150, filler: int = 60, seed: int = 0
) -> dict[str, Any]:
    """A pasted product manual, then many short turns; questions about single passages."""
    return _generate("manual", _manual, lang, conversations, turns, filler, seed)


_MANUAL_EN = _ManualText(
    system="You are a helpful assistant. When the user shares a document, answer questions "
    "about it accurately and say so when the document does not cover something.",
    products=[
        ("Aeris P7", "portable air purifier", "filter cartridge"),
        ("Tidybot S3", "robot vacuum", "side brush"),
        ("Whisk V8", "cordless stick vacuum", "dust filter"),
        ("Brio Sonic 5", "smart toothbrush", "brush head"),
        ("Blendr Go", "portable blender", "blade gasket"),
    ],
    buttons=_split("Power, Mode, Home, Timer, Boost, Light"),
    meanings=_lines("""
        the battery is too hot
        the motor is blocked
        a sensor needs cleaning
        the {part} is missing or not seated correctly
        the last firmware update did not finish
        the charging contacts are dirty
        the battery voltage is too low
        the device has tipped over
    """),
    formats={
        "temp": "{} °C",
        "hours": "{} hours",
        "reset": "hold the {b1} and {b2} buttons together for {secs} seconds",
        "interval": "every {} weeks",
        "months": "{} months",
        "phone": "1-800-###-####",
    },
    title="# {name} {kind}: User Manual (model {model})",
    sections=[
        _section(
            "About this manual",
            """
            This manual covers the {name} {kind}, model {model}.
            Read it completely before first use and keep it for future reference.
            The box contains the main unit, a USB-C charging cable, a quick-start card and a spare
              {part}.
            Check that nothing is missing or damaged before you throw the packaging away.
            Keep the original box for the first month; it is the safest way to send the unit in for
              service.
            Illustrations may differ slightly from your unit depending on colour and market.
            Accessories sold separately are listed on our website with the models they fit.
            Words in bold refer to buttons or labels printed on the device.
            """,
        ),
        _section(
            "Safety instructions",
            """
            Use and charge the device only at room temperatures between {tmin} and {tmax}.
            Do not use the device if the cable or the plug is damaged.
            Keep the device away from open flames, heaters and direct sunlight.
            Children may use the device only under adult supervision.
            Never immerse the main unit in water or any other liquid.
            Do not open the housing; there are no user-serviceable parts inside.
            Use only the supplied cable or an approved replacement to charge the device.
            Stop using the device immediately if it smells of burning or makes a crackling sound.
            """,
        ),
        _section(
            "Product overview",
            """
            The {name} consists of the main unit, the charging cable and a removable {part}.
            The ring light on the front shows the operating status at a glance.
            The {b1} and {b2} buttons sit on the top of the unit, within easy reach.
            The charging port is on the back and is protected by a rubber cover.
            The serial number is printed on a label on the bottom of the unit.
            Do not remove this label; it is needed for warranty claims.
            """,
        ),
        _section(
            "Getting started",
            """
            Follow these steps the first time you use the {name}.
            Setup takes about ten minutes, most of it for the first charge.
            """,
            """
            1. Unpack the device and remove all protective film.
            2. Fit the {part} until it clicks into place.
            3. Connect the charging cable and charge the battery fully.
            4. Press the {b1} button to switch the device on.
            5. Install the app and pair the device (see Pairing with the app).
            6. Choose a mode with the {b2} button or in the app.
            """,
        ),
        _section(
            "Charging and battery",
            """
            The built-in lithium-ion battery has a capacity of {mah}, and a full charge takes about
              {charge}.
            Charge the battery fully before the first use.
            The indicator pulses while charging and stays on when the battery is full.
            Battery life depends on the selected mode and on the room temperature.
            If you will not use the device for several weeks, store it about half charged.
            It is normal for the device to become slightly warm while charging.
            The battery is not user-replaceable; an authorised service centre can replace it.
            Avoid leaving the device on the charger in a hot car or next to a radiator.
            """,
        ),
        _section(
            "Controls and indicators",
            """
            The {b1} button switches the device on and off, and the {b2} button cycles through the
              operating modes.
            A short press on any button wakes the device from standby.
            The ring light is white during normal operation, amber while charging and red when there
              is an error.
            Press and hold the {b2} button for two seconds to lock the controls.
            Every button gives a short beep, which you can turn off in the app.
            The display dims automatically after one minute without input.
            A slowly blinking light means the device is waiting to be paired.
            """,
        ),
        _section(
            "Pairing with the app",
            """
            To pair the device with the app, turn on Bluetooth on your phone, open the app and enter
              the default pairing PIN {pin} when asked.
            The app is available for iOS and Android.
            Pairing is needed only once; the device reconnects automatically afterwards.
            Keep the phone within two metres of the device while pairing.
            You can change the PIN in the app settings after the first connection.
            Firmware updates are delivered through the app and take a few minutes.
            Up to three phones can be paired with the same device.
            """,
        ),
        _section(
            "Everyday use",
            """
            Auto mode adjusts the power level to the conditions the device detects.
            Place the device on a flat, stable surface before switching it on.
            Night mode dims the light and lowers the noise for use in bedrooms.
            Eco mode extends battery life at the cost of some performance.
            You can set a schedule in the app so the device starts on its own.
            Switch the device off and let it cool down after long sessions.
            The app shows the usage history of the last thirty days.
            """,
        ),
        _section(
            "Modes in detail",
            """
            The {name} has four modes: auto, eco, night and boost.
            Auto mode is the best choice for everyday use and needs no adjustment.
            Eco mode reduces power to make the battery last longer.
            Night mode keeps the light dim and the noise low.
            Boost mode runs at full power for ten minutes and then returns to the previous mode.
            The selected mode is remembered when you switch the device off.
            """,
        ),
        _section(
            "Schedules and automation",
            """
            In the app you can create up to five schedules, each with its own mode and duration.
            Schedules run even when your phone is out of range, because they are stored on the
              device.
            A schedule can repeat on selected weekdays or run once.
            If two schedules overlap, the one that started later takes priority.
            You can pause all schedules at once from the app's home screen, for example when you go
              on holiday.
            """,
        ),
        _section(
            "Firmware updates",
            """
            The app checks for new firmware every time it connects to the device.
            Updates are optional, but we recommend installing them for the latest fixes.
            Keep the device charging and the phone nearby until the update is complete.
            The ring light blinks slowly during the update; do not press any buttons.
            If an update is interrupted, the device restarts with the previous version and you can
              try again.
            """,
        ),
        _section(
            "Cleaning and maintenance",
            """
            Replace the {part} {interval} of normal use; a worn {part} noticeably reduces
              performance.
            Wipe the housing with a soft, dry cloth once a week.
            Do not use solvents, alcohol or abrasive cleaners on any part of the device.
            If the {part} looks dirty, rinse it under lukewarm water and let it dry completely
              before refitting it.
            Replacement parts can be ordered in the app or from authorised dealers.
            Check the air vents regularly and remove any dust or hair.
            The app reminds you when the {part} is due for replacement.
            """,
        ),
        _section(
            "Storage and transport",
            """
            Switch the device off and let it cool down before storing it.
            Store it in a dry place, away from direct sunlight and out of reach of children.
            For longer storage, charge the battery to about half and recharge it every three months.
            Use the original box or a padded bag when you carry the device.
            Do not leave the device in a car on hot or freezing days.
            """,
        ),
        _section(
            "Accessories",
            """
            The following accessories are available for the {name}.
            Accessories are sold separately and may not be available in every country.
            Only use accessories made for this model.
            """,
            """
            - Spare {part} (pack of two)
            - Charging stand with indicator light
            - Padded travel case
            - Wall mount kit
            - Extra USB-C cable, 1.5 m
            """,
        ),
        _section(
            "Troubleshooting and error codes",
            """
            When an error code appears, switch the device off, wait ten seconds and switch it on
              again.
            If the device does not turn on, charge it for at least thirty minutes and try again.
            If the app cannot find the device, restart Bluetooth on your phone.
            Unusual noises often mean that something is stuck in an opening.
            If a problem persists after a restart, note the error code before contacting support.
            The display and the app show the following codes.
            """,
            "{codes}",
        ),
        _section(
            "Factory reset",
            """
            To restore the factory settings, {reset}; the ring light flashes three times when the
              reset is complete.
            A factory reset erases schedules, paired phones and all custom settings.
            Use the reset only when the troubleshooting steps do not help.
            After a reset, pair the device with the app again as described under Pairing with the
              app.
            Firmware updates are kept after a factory reset.
            Do not switch the device off while the reset is in progress.
            """,
        ),
        _section(
            "Technical specifications",
            """
            Specifications may change without notice as part of product improvements.
            Noise levels are measured at a distance of one metre in a quiet room.
            Battery runtime is measured in eco mode at room temperature.
            Weights are given without accessories.
            """,
            """
            - Model: {model}
            - Weight: {kg}
            - Maximum noise level: {db}
            - Battery: {mah}, lithium-ion
            - Charging input: 5 V, 3 A (USB-C)
            - Wireless: Bluetooth 5.2
            - Operating humidity: 20–80 % (non-condensing)
            """,
        ),
        _section(
            "Warranty",
            """
            The {name} is covered by a warranty of {months} from the date of purchase.
            Keep your receipt or invoice; it is required for any warranty claim.
            The warranty covers defects in materials and workmanship under normal use.
            Damage caused by accidents, misuse, liquids or unauthorised repairs is not covered.
            Consumable parts such as the {part} are not covered by the warranty.
            Repairs under warranty do not extend the original warranty period.
            Your statutory rights as a consumer are not affected by this warranty.
            """,
        ),
        _section(
            "Regulatory and environmental information",
            """
            This product complies with the applicable safety and radio equipment regulations.
            The full declaration of conformity is available on our website.
            The built-in battery contains materials that must be recycled separately.
            The packaging is made of recyclable cardboard; please sort it accordingly.
            Changes or modifications not approved by the manufacturer may void your right to use the
              device.
            """,
        ),
        _section(
            "Customer support",
            """
            Our customer support hotline is {phone}, open Monday to Friday from 9:00 to 18:00.
            Have the model number and, if possible, the serial number ready when you call.
            You can also reach us through the contact form in the app.
            Take the device to an electronics collection point at the end of its life; do not throw
              it away with household waste.
            Our website has video guides for the most common questions.
            """,
        ),
    ],
    padding=_lines("""
        Follow the steps in the order given.
        If in doubt, contact customer support before continuing.
        Actual performance may vary with room size and usage.
        The manufacturer is not liable for damage caused by ignoring these instructions.
        Note: keep the device out of reach of pets when it is not in use.
        Tip: the quick-start card in the box summarises the most important steps.
        Always switch the device off before moving it.
        Let the device reach room temperature before use if it has been stored in the cold.
        Do not cover the device while it is running.
        Only use spare parts and accessories recommended by the manufacturer.
        Keep the firmware up to date for the best performance and safety.
        Make sure the device is completely dry before charging it.
        Store the device in a dry place when it is not in use.
        Note: the indicator colours are explained under Controls and indicators.
        Tip: most settings can also be changed in the app.
        Never force a part into place; it should click in easily.
        Read the safety instructions again if you lend the device to someone else.
        Check the device for visible damage after a fall.
        Do not place heavy objects on top of the device.
        Make sure any openings are free of dust, hair and fluff.
    """),
    faq=("Frequently asked questions", "Q: {ask}\nA: {answer}"),
    paste=[
        "Here's the manual for my new {kind}. I'll paste the whole thing so you can refer to it "
        "later:\n\n{manual}",
        "I just got a {name} and the manual is long, so here it is in full. Please keep it in "
        "mind for my questions:\n\n{manual}",
    ],
    acks=_lines("""
        Thanks, I've read through the whole manual. Ask me anything about the {name} whenever you
          like.
        Got it, I've gone through every section. What would you like to know first?
    """),
    own_facts={
        "store": (
            "By the way, I bought mine at {store}, in case that matters for the warranty.",
            "Where did I say I bought my {name}?",
        ),
        "serial": (
            "The serial number on the bottom of my unit is {serial}, if you ever need it.",
            "What is the serial number of my unit?",
        ),
        "nickname": (
            "My kids have named it {nickname}, so don't be surprised if I call it that.",
            "What nickname did my kids give the {name}?",
        ),
    },
    own_acks=_lines("""
        Noted, thanks. Keep your receipt handy as well.
        Thanks for telling me, I'll keep that in mind.
        Good to know!
    """),
    own_values={
        "store": _split("Harbor Electronics, Techno Depot, GadgetNest, the Brightmart on Elm Road"),
        "serial": _split("SN4K7-22918, QX19-0384-77, B7T-556120, HP-20931-K"),
        "nickname": _split("Captain Breeze, Mister Hum, Dusty, Little Robin"),
    },
    questions={
        "reset": "How do I do a factory reset on the {name}?",
        "months": "How long is the warranty on the {name}?",
        "mah": "What is the battery capacity of the {name}?",
        "charge": "How long does a full charge take, according to the manual?",
        "interval": "How often should I replace the {part}?",
        "meaning": "What does error code {code} mean?",
        "pin": "What is the default pairing PIN for the app?",
        "tmax": "What is the highest room temperature the {name} may be used at?",
        "phone": "What is the customer support hotline number in the manual?",
        "db": "How loud is the {name} at most, according to the specifications?",
    },
    talk=_talk(
        "en",
        _topics("""
            Keep it away from radiators and sunny windowsills.
            ? Where's the best place to put it?
            A flat, open spot usually works best.
            Leave a little space around it so air can move freely.
            Corners tend to collect dust, so a more central spot is better.
            Near a socket is convenient if you charge it often.
            ? Does it matter if it sits on a {surface}?
            A {surface} is fine as long as the device stands steadily.
            If it wobbles at all, a small tray or board underneath solves the problem.

            Switch it off and unplug it before you clean anything.
            ? How should I clean the outside?
            A soft, dry cloth is the safest choice for the housing.
            A slightly damp cloth is fine for stubborn marks, as long as no water gets inside.
            A soft brush is handy for the gaps around the buttons.
            ? Is it okay to use wet wipes on it?
            I'd avoid them: wet wipes often contain alcohol, which can dull the finish over time.
            A cloth with a drop of water does the same job more safely.

            ? Can I leave it running overnight?
            Yes, that's fine as long as the vents are not covered.
            Night mode is designed for exactly that: it dims the light and keeps the noise down.
            Scheduling it to stop after a few hours is a good compromise.
            ? Is it loud enough to wake a light sleeper?
            In night mode it is very quiet, and most people stop noticing the sound after a few
              minutes.
            If you are sensitive to noise, try it for an evening before relying on it.

            Everything essential also works with the buttons on the device.
            ? What can the app actually do?
            The app lets you switch modes, set schedules and see the usage history.
            It also tells you when a part needs replacing and installs firmware updates.
            Notifications can be switched off if you find them annoying.
            ? Do I need an account to use the app?
            An account is only needed if you want to control it away from home.
            At home, a direct Bluetooth connection is enough.

            Keep the cable out of reach so nobody trips over it or chews it.
            A stable spot matters more than anything else with kids and pets around.
            ? Is it safe around small kids?
            It is best to let children use it only with an adult nearby.
            The control lock is useful if little hands like pressing buttons.
            ? My {pet} keeps sniffing at it, is that a problem?
            Not really; animals are usually curious at first and lose interest after a day or two.

            Switch it off completely before packing it.
            ? Can I take it with me when I travel?
            Yes, and a padded bag protects it well in a suitcase.
            If you fly, check the airline's rules for devices with built-in batteries.
            Hotel rooms can be dry or dusty, so it may need cleaning after a trip.
            ? Will it charge from a power bank?
            Most USB-C power banks can charge it, although more slowly than the wall adapter.

            ? Do firmware updates change anything important?
            Updates usually fix small bugs and sometimes improve battery management.
            It's worth installing them, ideally while the device is charging.
            ? Are third-party spare parts okay to use?
            Third-party parts may fit, but they can affect performance and the warranty.
            Original parts are designed for the exact dimensions of the device.
            If you try a third-party part, keep the original one in case of problems.
        """),
        ["Good question.", "Happy to help.", "That's a sensible thing to ask."],
        {
            "surface": _split("carpet, wooden floor, rug, glass shelf"),
            "pet": _split("cat, dog, puppy"),
        },
    ),
)

_MANUAL_ZH = _ManualText(
    system="你是一个乐于助人的助手。用户分享文档时，请根据文档准确回答；文档里没有的内容要如实说明。",
    products=[
        ("澄风 P7", "便携式空气净化器", "滤芯"),
        ("洁宝 S3", "扫地机器人", "边刷"),
        ("轻扫 V8", "无线手持吸尘器", "尘杯滤网"),
        ("亮齿 Sonic 5", "智能电动牙刷", "刷头"),
        ("随享 Go", "便携榨汁杯", "刀头密封圈"),
    ],
    buttons=_split("电源、模式、主页、定时、强力、灯光"),
    meanings=_lines("""
        电池温度过高
        电机被异物卡住
        传感器需要清洁
        {part}未安装或没有装到位
        上一次固件升级没有完成
        充电触点有污渍
        电池电压过低
        机身发生倾倒
    """),
    formats={
        "temp": "{}°C",
        "hours": "{}小时",
        "reset": "同时按住{b1}键和{b2}键{secs}秒",
        "interval": "每{}周",
        "months": "{}个月",
        "phone": "400-###-####",
    },
    title="# {name} {kind} 使用说明书（型号 {model}）",
    sections=[
        _section(
            "关于本说明书",
            """
            本说明书适用于{name}{kind}，型号为{model}。
            首次使用前请完整阅读本说明书，并妥善保管以备日后查阅。
            包装内含主机、USB-C 充电线、快速入门卡片和一个备用{part}。
            丢弃包装前，请确认配件齐全且没有破损。
            建议在购买后的第一个月内保留原包装，送修时这是最安全的运输方式。
            说明书中的插图可能因颜色和销售地区不同而与实物略有差异。
            另购配件及其适用型号请以官方网站公布的信息为准。
            文中加粗的文字指机身上印有的按键或标识。
            """,
        ),
        _section(
            "安全须知",
            """
            请仅在室温{tmin}至{tmax}之间使用和充电。
            电源线或插头破损时，请勿继续使用本产品。
            请让产品远离明火、取暖器和阳光直射的地方。
            儿童须在成人看护下使用本产品。
            切勿将主机浸入水或其他任何液体中。
            请勿自行拆开外壳，内部没有可供用户维修的部件。
            请只使用原装充电线或经认证的替换线为产品充电。
            如闻到焦味或听到噼啪声，请立即停止使用。
            """,
        ),
        _section(
            "产品概览",
            """
            {name}由主机、充电线和可拆卸的{part}组成。
            主机正面的环形灯可以直观显示当前工作状态。
            {b1}键和{b2}键位于机身顶部，方便操作。
            充电接口在机身背面，并配有橡胶防尘盖。
            序列号印在机身底部的标签上。
            请勿撕掉这张标签，申请保修时需要用到。
            """,
        ),
        _section(
            "快速上手",
            """
            首次使用{name}时，请按以下步骤操作。
            整个设置过程大约需要十分钟，其中大部分时间用于首次充电。
            """,
            """
            1. 取出设备，撕掉所有保护膜。
            2. 装上{part}，听到“咔哒”声即表示安装到位。
            3. 连接充电线，把电池充满。
            4. 按{b1}键开机。
            5. 安装 App 并完成配对（参见“连接 App”一节）。
            6. 用{b2}键或在 App 中选择工作模式。
            """,
        ),
        _section(
            "充电与电池",
            """
            内置锂离子电池容量为{mah}，充满电约需{charge}。
            首次使用前请先将电池充满。
            充电时指示灯呼吸闪烁，充满后保持常亮。
            续航时间与所选模式和环境温度有关。
            如果几周内都不使用，请在电量约一半时存放。
            充电时机身微微发热属于正常现象。
            电池不可由用户自行更换，如需更换请联系授权服务中心。
            请勿把正在充电的产品留在高温车厢内或暖气片旁。
            """,
        ),
        _section(
            "按键与指示灯",
            """
            {b1}键用于开关机，{b2}键用于切换工作模式。
            待机状态下短按任意键即可唤醒。
            正常工作时环形灯为白色，充电时为橙色，出现故障时为红色。
            长按{b2}键两秒可以锁定按键，防止误触。
            每次按键都会有提示音，可以在 App 中关闭。
            一分钟内没有操作，屏幕会自动调暗。
            指示灯缓慢闪烁表示设备正在等待配对。
            """,
        ),
        _section(
            "连接 App",
            """
            与 App 配对时，请打开手机蓝牙，进入 App，按提示输入默认配对码{pin}。
            App 支持 iOS 和安卓系统。
            只需配对一次，之后设备会自动重新连接。
            配对过程中请让手机与设备保持在两米以内。
            首次连接后，可以在 App 设置中修改配对码。
            固件升级通过 App 推送，整个过程需要几分钟。
            同一台设备最多可以与三部手机配对。
            """,
        ),
        _section(
            "日常使用",
            """
            自动模式会根据检测到的环境自动调节功率。
            开机前请把设备放在平稳的表面上。
            睡眠模式会调暗灯光、降低噪音，适合在卧室使用。
            节能模式可以延长续航，但性能会略有下降。
            可以在 App 中设置定时，让设备按计划自动启动。
            长时间使用后，请关机让设备冷却一会儿。
            App 中可以查看最近三十天的使用记录。
            """,
        ),
        _section(
            "工作模式详解",
            """
            {name}共有四种模式：自动、节能、睡眠和强力。
            自动模式适合日常使用，无需手动调节。
            节能模式会降低功率，让电池用得更久。
            睡眠模式下灯光较暗，噪音也更低。
            强力模式会全功率运行十分钟，之后自动回到之前的模式。
            关机后，设备会记住上一次选择的模式。
            """,
        ),
        _section(
            "定时与自动化",
            """
            在 App 中最多可以创建五个定时计划，每个计划都可以单独设置模式和时长。
            定时计划保存在设备上，即使手机不在附近也会照常执行。
            定时计划可以按星期重复，也可以只执行一次。
            如果两个计划时间重叠，以后开始的那个为准。
            外出度假时，可以在 App 首页一键暂停所有定时计划。
            """,
        ),
        _section(
            "固件升级",
            """
            每次连接设备时，App 都会检查是否有新固件。
            升级不是强制的，但建议及时安装，以获得最新的修复。
            升级期间请保持设备充电，并让手机待在附近，直到升级完成。
            升级过程中环形灯会缓慢闪烁，请不要按任何按键。
            如果升级中断，设备会以原来的版本重新启动，您可以再试一次。
            """,
        ),
        _section(
            "清洁与保养",
            """
            正常使用情况下，请{interval}更换一次{part}，{part}磨损后性能会明显下降。
            每周用干燥的软布擦拭一次机身。
            请勿在任何部件上使用溶剂、酒精或含磨砂颗粒的清洁剂。
            {part}较脏时，可以用温水冲洗，彻底晾干后再装回。
            替换配件可以在 App 内或授权经销商处购买。
            请定期检查出风口，清除灰尘和毛发。
            {part}需要更换时，App 会发出提醒。
            """,
        ),
        _section(
            "存放与运输",
            """
            存放前请先关机，并等待设备冷却。
            请存放在干燥、避光且儿童接触不到的地方。
            长期存放时，请把电量充到一半左右，并每三个月补充一次电。
            携带时请使用原包装或带衬垫的收纳包。
            天气炎热或严寒时，请勿把设备留在车内。
            """,
        ),
        _section(
            "配件",
            """
            {name}可选购以下配件。
            配件需另行购买，部分地区可能暂不供应。
            请只使用适用于本型号的配件。
            """,
            """
            - 备用{part}（两只装）
            - 带指示灯的充电底座
            - 带衬垫的旅行收纳包
            - 壁挂安装套件
            - 1.5 米 USB-C 充电线
            """,
        ),
        _section(
            "故障排查与错误代码",
            """
            出现错误代码时，请先关机，等待十秒后再重新开机。
            如果无法开机，请先充电至少三十分钟再试。
            如果 App 搜索不到设备，请重启手机蓝牙。
            出现异常噪音，通常是有异物卡在了开口处。
            重启后问题依旧的，请记下错误代码再联系客服。
            屏幕和 App 会显示以下错误代码。
            """,
            "{codes}",
        ),
        _section(
            "恢复出厂设置",
            """
            如需恢复出厂设置，请{reset}，环形灯闪烁三次即表示重置完成。
            恢复出厂设置会清除定时计划、已配对的手机和所有自定义设置。
            只有在故障排查步骤都无效时，才建议进行重置。
            重置后，请按照“连接 App”一节的说明重新与 App 配对。
            恢复出厂设置不会回退已经安装的固件版本。
            重置过程中请勿关机。
            """,
        ),
        _section(
            "技术参数",
            """
            产品规格如因改进而变更，恕不另行通知。
            噪音数值是在安静房间内距离一米处测得的。
            续航时间是在节能模式、室温条件下测得的。
            重量不含配件。
            """,
            """
            - 型号：{model}
            - 重量：{kg}
            - 最大噪音：{db}
            - 电池：{mah}，锂离子电池
            - 充电输入：5 V 3 A（USB-C）
            - 无线连接：蓝牙 5.2
            - 工作湿度：20%–80%（无冷凝）
            """,
        ),
        _section(
            "保修条款",
            """
            {name}自购买之日起享受{months}保修。
            请保留购物小票或发票，申请保修时需要出示。
            在正常使用情况下，材料和工艺缺陷均在保修范围内。
            因意外、使用不当、进液或非授权维修造成的损坏不在保修范围内。
            {part}等易耗件不在保修范围内。
            保修期内的维修不会延长原有的保修期限。
            本保修条款不影响您依法享有的消费者权益。
            """,
        ),
        _section(
            "法规与环保信息",
            """
            本产品符合适用的安全及无线电设备相关法规。
            完整的合格声明可在官方网站查阅。
            内置电池含有需要单独回收的材料。
            包装采用可回收纸板，请按垃圾分类要求处理。
            未经制造商许可擅自改装，可能导致您失去使用本设备的权利。
            """,
        ),
        _section(
            "客户服务",
            """
            客服热线为{phone}，服务时间为周一至周五 9:00–18:00。
            致电前请准备好产品型号，最好也准备好序列号。
            也可以通过 App 里的在线客服联系我们。
            产品报废时，请送到电子产品回收点，不要当作生活垃圾丢弃。
            官方网站提供常见问题的视频教程。
            """,
        ),
    ],
    padding=_lines("""
        请按照上述顺序逐步操作。
        如有疑问，请先联系客服再继续操作。
        实际效果会因房间大小和使用习惯而有所不同。
        因未按本说明书操作造成的损坏，制造商不承担责任。
        注意：不使用时，请将设备放在宠物够不到的地方。
        提示：包装内的快速入门卡片汇总了最重要的操作步骤。
        移动设备前请务必先关机。
        如果设备在低温环境中存放过，请待其恢复到室温后再使用。
        设备运行时请勿遮盖。
        请只使用制造商推荐的配件和替换件。
        保持固件为最新版本，可以获得更好的性能和安全性。
        充电前请确保设备完全干燥。
        长期不用时，请将设备存放在干燥的地方。
        注意：指示灯颜色的含义请参见“按键与指示灯”一节。
        提示：大部分设置也可以在 App 中修改。
        安装部件时请勿用力硬塞，正确安装时会听到轻轻的“咔哒”声。
        把设备借给别人使用时，请提醒对方阅读安全须知。
        设备跌落后，请检查外观是否有明显损坏。
        请勿在设备上放置重物。
        请确保各个开口处没有灰尘、毛发和絮状物。
    """),
    faq=("常见问题", "问：{ask}\n答：{answer}"),
    paste=[
        "这是我新买的{kind}的说明书，我全文贴过来，之后有问题方便你查：\n\n{manual}",
        "刚入手了{name}，说明书挺长的，我整篇发给你，后面问问题的时候请参考它：\n\n{manual}",
    ],
    acks=_lines("""
        收到，说明书我已经从头到尾看过了。关于{name}有任何问题，随时问我。
        好的，每一节我都看过了。你想先了解哪方面？
    """),
    own_facts={
        "store": (
            "顺便说一下，我是在{store}买的，不知道保修的时候有没有影响。",
            "我说过我的{name}是在哪儿买的？",
        ),
        "serial": (
            "我这台机器底部的序列号是{serial}，以后可能用得上。",
            "我这台机器的序列号是多少？",
        ),
        "nickname": (
            "家里孩子给它起了个名字叫“{nickname}”，以后我这么叫你别奇怪。",
            "孩子们给{name}起的外号叫什么？",
        ),
    },
    own_acks=_lines("""
        好的，记下了。购物凭证也记得收好。
        谢谢告诉我，我会记住的。
        了解！
    """),
    own_values={
        "store": _split("京东自营店、苏宁门店、天猫旗舰店、小区门口的数码店"),
        "serial": _split("SN4K7-22918, QX19-0384-77, B7T-556120, HP-20931-K"),
        "nickname": _split("小白、团子、阿福、豆包"),
    },
    questions={
        "reset": "{name}怎么恢复出厂设置？",
        "months": "{name}的保修期是多久？",
        "mah": "{name}的电池容量是多少？",
        "charge": "说明书上说充满一次电要多长时间？",
        "interval": "{part}多久需要更换一次？",
        "meaning": "错误代码{code}是什么意思？",
        "pin": "连接 App 的默认配对码是多少？",
        "tmax": "{name}最高可以在多少度的室温下使用？",
        "phone": "说明书里的客服热线是多少？",
        "db": "根据技术参数，{name}最大噪音是多少？",
    },
    talk=_talk(
        "zh",
        _topics("""
            别放在暖气片旁边或者阳光直射的窗台上。
            ? 这个放在哪里比较好？
            一般放在平整、开阔的地方效果最好。
            周围最好留一点空间，让空气能流通。
            墙角容易积灰，尽量放在房间中间一点的位置。
            如果经常充电，放在插座附近会方便很多。
            ? 放在{surface}上会有影响吗？
            只要放得稳，放在{surface}上也没问题。
            如果有点晃，在下面垫一块托盘或木板就行。

            清洁之前记得先关机、拔掉电源。
            ? 外壳应该怎么清洁？
            外壳用干燥的软布擦是最稳妥的。
            有顽固污渍的话可以用微湿的布，只要别让水渗进去就行。
            按键周围的缝隙可以用软毛刷清理。
            ? 可以用湿巾擦吗？
            不太建议，很多湿巾含酒精，时间长了会让表面失去光泽。
            用沾了一点清水的软布，效果一样，还更安全。

            ? 晚上可以一直开着吗？
            可以的，只要出风口没有被挡住，整晚开着没问题。
            睡眠模式就是为这个设计的，灯光会调暗，噪音也会降下来。
            设置成运行几个小时后自动关闭，是个不错的折中办法。
            ? 声音会不会吵到睡眠浅的人？
            睡眠模式下声音很小，大多数人过几分钟就不太注意到了。
            如果对声音比较敏感，可以先试一个晚上再决定。

            所有基本功能用机身上的按键也都能完成。
            ? App 到底能做些什么？
            在 App 里可以切换模式、设置定时，还能查看使用记录。
            它还会提醒你更换配件，并负责安装固件升级。
            如果觉得通知太多，可以在设置里关掉。
            ? 用 App 一定要注册账号吗？
            只有想在外面远程控制时，才需要注册账号。
            在家里直接用蓝牙连接就够了。

            把电源线收好，免得有人被绊倒或者被咬坏。
            家里有孩子和宠物的话，放得稳比什么都重要。
            ? 家里有小孩，用起来安全吗？
            孩子使用时最好有大人在旁边看着。
            如果小朋友喜欢乱按，按键锁就很有用了。
            ? 我家{pet}老是凑过去闻它，要紧吗？
            没什么关系，小动物一开始都会好奇，一两天后通常就没兴趣了。

            打包之前记得完全关机。
            ? 出门旅行可以带着吗？
            可以，放在行李箱里时用一个带衬垫的收纳包会更安心。
            坐飞机的话，最好先查一下航空公司对带电池设备的规定。
            酒店房间有时比较干燥或灰尘多，旅行回来可能需要清洁一下。
            ? 能用充电宝充电吗？
            大部分 USB-C 充电宝都能给它充电，只是比原装充电器慢一些。

            ? 固件升级会改动什么重要的东西吗？
            升级一般是修复小问题，有时也会优化电池管理。
            建议还是装上，最好在充电的时候升级。
            ? 可以用第三方的配件吗？
            第三方配件也许能装上，但可能影响效果和保修。
            原装配件是按照机器的尺寸专门设计的。
            如果想试试第三方配件，最好把原装的留着，出问题时可以换回来。
        """),
        ["好问题。", "我来说说。", "这个问得很实在。"],
        {"surface": _split("地毯、木地板、小块地垫、玻璃搁板"), "pet": _split("猫、狗、小狗")},
    ),
)

_MANUAL = {"en": _MANUAL_EN, "zh": _MANUAL_ZH}


# --- agent -----------------------------------------------------------------------------------

_SERVICES = _split("checkout-api, search-svc, payments-gateway, user-profile, notify-worker")
_REGIONS = _split("eu-west-1, us-east-1, ap-southeast-1, us-west-2, eu-central-1")
_ERRORS = _split(
    "DB_POOL_EXHAUSTED, TLS_HANDSHAKE_TIMEOUT, OOM_KILLED, MIGRATION_LOCK_TIMEOUT, "
    "HEALTHCHECK_FAILED_503, IMAGE_PULL_BACKOFF"
)
_FLAGS = _split(
    "new_checkout_flow, async_receipts, cache_v2, strict_tls, rate_limit_v3, search_rerank, "
    "dark_mode_api, batch_writes, shadow_traffic, grpc_upstream, compression_zstd, "
    "retry_budget, bulk_export, pii_masking, geo_routing, early_hints, read_replicas, "
    "idempotency_keys, audit_log_v2, canary_metrics, queue_sharding, lazy_sessions, "
    "fast_refunds, edge_cache, otel_tracing, warm_pool, circuit_breaker, json_streaming, "
    "partial_responses, bot_filter"
)
_TABLES = _split("orders, sessions, payments, users, inventory, audit_log")
_ACTIONS = _split("list, get, search, update, export")
_DEPENDENCIES = _split("auth-svc, pricing-svc, redis-main, postgres-primary, kafka-events")
_LABELS = _split("deploy, latency, database, network, customer, infra, flaky-test, security")
_NUMBERS = [str(n) for n in range(3, 990, 7)]


@dataclass(frozen=True)
class _AgentText:
    system: str
    tasks: Sequence[str]
    remarks: Mapping[str, Sequence[str]]  # deploy status -> remarks
    log_info: Sequence[str]
    log_warn: Sequence[str]
    log_error: str
    tickets: Sequence[str]
    people: Sequence[str]
    deploy_notes: Sequence[str]
    teams: Sequence[str]
    config_note: str
    notes: Sequence[str]
    interjections: Sequence[str]
    questions: Mapping[str, str]


class _Ops:
    """One agent run: the service under audit, and the tool results it sees."""

    def __init__(self, chat: _Chat) -> None:
        rng = chat.rng
        self.chat, self.rng, self.text = chat, rng, _AGENT[chat.lang]
        self.service = rng.choice(_SERVICES)
        major, minor, patch = rng.randint(1, 4), rng.randint(0, 30), rng.randint(1, 9)
        self.version = f"v{major}.{minor}.{patch}"
        self.previous = f"v{major}.{minor}.{patch - 1}"
        self.regions = rng.sample(_REGIONS, len(_REGIONS))
        self.hosts: list[str] = []
        self.slots: Slots = {
            "n": _NUMBERS,
            "ms": _NUMBERS,
            "k": ["2", "3", "4"],
            "table": _TABLES,
            "dep": _DEPENDENCIES,
            "lb": ["lb-public-1", "lb-public-2", "lb-internal"],
            "image": [f"registry.local/{self.service}"],
            "version": [self.version],
            "previous": [self.previous],
        }

    def stamp(self, minutes_ago: float) -> str:
        moment = self.chat.now - timedelta(minutes=minutes_ago)
        return moment.strftime("%Y-%m-%dT%H:%M:%SZ")

    def inventory(self, region: str, failing: bool) -> tuple[dict[str, Any], dict[str, Any]]:
        """Hosts of one region and, with ``failing``, the one host whose deploy failed."""
        rng = self.rng
        a, b, c = region.split("-")
        names = [f"{self.service.split('-')[0]}-{a}{b[0]}{c}-{n:02d}" for n in range(1, 40)]
        names = sorted(rng.sample(names, rng.randint(8, 17)))
        bad = rng.randrange(len(names)) if failing else -1
        hosts = [
            self._host(name, region, "failed" if i == bad else "") for i, name in enumerate(names)
        ]
        self.hosts += names
        payload = {"service": self.service, "region": region, "count": len(hosts), "hosts": hosts}
        return payload, hosts[bad] if failing else {}

    def _host(self, name: str, region: str, status: str) -> dict[str, Any]:
        rng = self.rng
        status = status or rng.choice(["ok"] * 6 + ["pending", "draining"])
        return {
            "host": name,
            "ip": f"10.{rng.randint(0, 255)}.{rng.randint(0, 255)}.{rng.randint(1, 254)}",
            "zone": f"{region}{rng.choice('abc')}",
            "version": self.version if status == "ok" else self.previous,
            "deploy_status": status,
            "uptime_h": rng.randint(1, 2000),
            "cpu_pct": round(rng.uniform(3, 95), 1),
            "mem_pct": round(rng.uniform(20, 90), 1),
            "last_deploy": self.stamp(rng.uniform(20, 600)),
            "remark": rng.choice(self.text.remarks[status]),
        }

    def logs(self, host: str, error: str | None) -> dict[str, Any]:
        """Recent log lines of a host; with ``error``, one ERROR line names it."""
        rng, text = self.rng, self.text
        count = rng.randint(18, 40)
        lines = []
        for i in range(count):
            warn = rng.random() < 0.15
            template = rng.choice(text.log_warn if warn else text.log_info)
            lines.append(
                {
                    "ts": self.stamp(120 - i * 100 / count),
                    "level": "WARN" if warn else "INFO",
                    "msg": _fill(template, rng, self.slots),
                }
            )
        if error is not None:
            at = rng.randint(count * 2 // 3, count)
            message = _fill(text.log_error, rng, self.slots, {"error": error})
            lines.insert(at, {"ts": lines[at - 1]["ts"], "level": "ERROR", "msg": message})
        return {"host": host, "lines": lines, "truncated": False}

    def metrics(self, metric: str, regions: Sequence[str]) -> dict[str, Any]:
        """A 6-hour series per region; p99 latency has one spike per region."""
        rng = self.rng
        start = self.chat.now - timedelta(hours=6)
        times = [(start + timedelta(minutes=15 * i)).strftime("%H:%M") for i in range(24)]
        series = []
        for region in regions:
            if metric == "p99_latency_ms":
                base = rng.randint(140, 420)
                values: list[float] = [base + rng.randint(-40, 60) for _ in times]
                values[rng.randrange(12, 24)] = base + rng.randint(300, 2200)
            else:
                values = [round(rng.uniform(0.2, 80), 2) for _ in times]
            points = [[t, v] for t, v in zip(times, values, strict=True)]
            series.append({"region": region, "peak": max(values), "points": points})
        return {"service": self.service, "metric": metric, "window": "6h", "series": series}

    def tickets(self, status: str, urgent: bool) -> tuple[dict[str, Any], str]:
        """Tickets and, with ``urgent``, the assignee of the single P1 among them."""
        rng, text = self.rng, self.text
        count = rng.randint(10, 22)
        p1 = rng.randrange(count) if urgent else -1
        taken: set[str] = set()
        topics: Slots = {"service": _SERVICES, "region": _REGIONS}
        tickets = [
            {
                "id": _code(rng, "OPS-####", taken),
                "title": _fill(rng.choice(text.tickets), rng, topics),
                "priority": "P1" if i == p1 else rng.choice(["P2", "P3", "P3", "P4"]),
                "status": status,
                "assignee": rng.choice(text.people),
                "created": self.stamp(rng.uniform(60, 20000)),
                "labels": rng.sample(_LABELS, rng.randint(1, 3)),
                "comments": rng.randint(0, 14),
            }
            for i in range(count)
        ]
        assignee = str(tickets[p1]["assignee"]) if urgent else ""
        return {"status": status, "count": count, "tickets": tickets}, assignee

    def config(self, service: str) -> tuple[dict[str, Any], str]:
        """A service's config and its database pool size."""
        rng = self.rng
        pool = rng.randint(20, 120)
        routes = [
            {
                "path": f"/api/v{rng.randint(1, 3)}/{rng.choice(_TABLES)}/{rng.choice(_ACTIONS)}",
                "timeout_ms": rng.choice([500, 1000, 2000, 5000]),
                "rate_limit_rps": rng.choice([50, 100, 200, 500, 1000]),
                "auth": rng.choice(["jwt", "mtls", "none"]),
            }
            for _ in range(rng.randint(10, 16))
        ]
        payload = {
            "service": service,
            "owner_team": rng.choice(self.text.teams),
            "note": self.text.config_note,
            "replicas": rng.randint(3, 24),
            "db": {
                "host": "postgres-primary.internal",
                "pool_size": pool,
                "timeout_ms": rng.choice([1000, 3000, 5000]),
                "max_idle": rng.randint(2, 10),
            },
            "cache": {"backend": "redis", "ttl_s": rng.choice([60, 300, 900]), "max_keys": 50000},
            "feature_flags": {
                f: rng.random() < 0.5 for f in rng.sample(_FLAGS, rng.randint(20, 30))
            },
            "routes": routes,
        }
        return payload, str(pool)

    def deploys(self) -> dict[str, Any]:
        rng, text = self.rng, self.text
        taken: set[str] = set()
        deploys = []
        for i in range(rng.randint(10, 20)):
            started = rng.uniform(600, 60000) - i
            deploys.append(
                {
                    "id": _code(rng, "dep-####", taken),
                    "version": f"{self.version.rsplit('.', 1)[0]}.{rng.randint(0, 9)}",
                    "started": self.stamp(started),
                    "finished": self.stamp(started - rng.uniform(3, 25)),
                    "status": rng.choice(["succeeded"] * 5 + ["rolled_back"]),
                    "by": rng.choice(text.people),
                    "changes": rng.randint(1, 40),
                    "note": rng.choice(text.deploy_notes),
                }
            )
        return {"service": self.service, "deploys": deploys}


@dataclass(frozen=True)
class _Call:
    """A tool call, its result, and the questions (with answers) asked about that result."""

    tool: str
    args: dict[str, Any]
    payload: dict[str, Any]
    asks: Sequence[tuple[str, str]] = ()


def _agent_facts(ops: _Ops) -> list[list[_Call]]:
    """The early tool calls the questions ask about, grouped by assistant message."""
    rng, q, region = ops.rng, ops.text.questions, ops.regions[0]
    inventory, bad = ops.inventory(region, failing=True)
    asks = [(q["host"], bad["host"])]
    if rng.random() < 0.5:
        asks.append((q["zone"], bad["zone"]))
    first = _Call("get_inventory", {"service": ops.service, "region": region}, inventory, asks)
    error = rng.choice(_ERRORS)
    logs = _Call(
        "fetch_logs",
        {"host": bad["host"], "since": "2h"},
        ops.logs(bad["host"], error),
        [(_fill(q["error"], rng, {}, {"host": bad["host"]}), error)],
    )
    kinds = rng.sample(["metrics", "tickets", "config"], rng.randint(2, 3))
    extras = [_extra_fact(ops, kind) for kind in kinds]
    groups = [[first], [logs]]
    if rng.random() < 0.5:
        groups.append(extras[:2])  # two calls in one assistant message
        extras = extras[2:]
    return groups + [[e] for e in extras]


def _extra_fact(ops: _Ops, kind: str) -> _Call:
    rng, q, region = ops.rng, ops.text.questions, ops.regions[0]
    if kind == "metrics":
        payload = ops.metrics("p99_latency_ms", [region, *rng.sample(ops.regions[1:], 3)])
        asked = rng.choice(payload["series"])
        question = _fill(q["latency"], rng, {}, {"region": asked["region"]})
        args = {"service": ops.service, "metric": "p99_latency_ms", "window": "6h"}
        return _Call("query_metrics", args, payload, [(question, str(asked["peak"]))])
    if kind == "tickets":
        tickets, assignee = ops.tickets("open", urgent=True)
        return _Call("list_tickets", {"status": "open"}, tickets, [(q["ticket"], assignee)])
    config, pool = ops.config(ops.service)
    question = _fill(q["pool"], rng, {}, {"service": ops.service})
    return _Call("get_config", {"service": ops.service}, config, [(question, pool)])


def _filler_call(ops: _Ops) -> _Call:
    rng = ops.rng
    kind = rng.choice(["inventory", "logs", "metrics", "deploys", "tickets", "config"])
    if kind == "inventory":
        region = rng.choice(ops.regions)
        args = {"service": ops.service, "region": region}
        return _Call("get_inventory", args, ops.inventory(region, failing=False)[0])
    if kind == "logs":
        host = rng.choice(ops.hosts)
        return _Call("fetch_logs", {"host": host, "since": "1h"}, ops.logs(host, None))
    if kind == "metrics":
        metric = rng.choice(["error_rate_pct", "cpu_pct", "mem_pct", "saturation_pct"])
        args = {"service": ops.service, "metric": metric, "window": "6h"}
        return _Call("query_metrics", args, ops.metrics(metric, rng.sample(ops.regions, 4)))
    if kind == "deploys":
        return _Call("list_deploys", {"service": ops.service}, ops.deploys())
    if kind == "tickets":
        return _Call("list_tickets", {"status": "closed"}, ops.tickets("closed", urgent=False)[0])
    service = rng.choice([s for s in _SERVICES if s != ops.service])
    return _Call("get_config", {"service": service}, ops.config(service)[0])


def _agent_steps(ops: _Ops, turns: int) -> Iterator[list[_Call]]:
    """The fact steps, then ``turns`` filler steps, each made only when it is written."""
    yield from _agent_facts(ops)
    for _ in range(turns):
        yield [_filler_call(ops) for _ in range(2 if ops.rng.random() < 0.25 else 1)]


def _agent(chat: _Chat, turns: int, filler: int) -> list[_Question]:
    rng = chat.rng
    ops = _Ops(chat)
    text = ops.text
    chat.say("system", text.system)
    task = {"service": ops.service, "version": ops.version, "region": ops.regions[0]}
    chat.say("user", _fill(rng.choice(text.tasks), rng, {}, task))
    questions = []
    for step, group in enumerate(_agent_steps(ops, turns)):
        if step > 3 and rng.random() < 0.2:
            chat.say("user", _fill(rng.choice(text.interjections), rng, {"region": _REGIONS}))
        ids = chat.call(*((c.tool, c.args) for c in group))
        for call_id, c in zip(ids, group, strict=True):
            result = chat.result(call_id, c.payload)
            questions += [_Question(q, a, [result], "tool-result") for q, a in c.asks]
        chat.say("assistant", _prose(rng, chat.lang, text.notes, filler))
    _ask_midway(chat, questions, rng.randint(1, 2))
    return questions


def generate_agent(
    lang: str = "en", *, conversations: int = 1, turns: int = 10, filler: int = 40, seed: int = 0
) -> dict[str, Any]:
    """An agent run with long JSON tool results; questions about the early results."""
    return _generate("agent", _agent, lang, conversations, turns, filler, seed)


_AGENT_EN = _AgentText(
    system="You are an SRE agent. Investigate with the tools you have, never restart or roll "
    "back anything without approval, and report what you find.",
    tasks=_lines("""
        The {service} deploy of {version} went out this morning and some users in {region} see
          errors. Please audit it: check the inventory, the logs and the metrics, and tell me what
          you find.
        We shipped {version} of {service} a few hours ago and the error budget in {region} is
          burning. Can you go through the fleet and figure out what's going on?
    """),
    remarks={
        "ok": _split("healthy, serving traffic, all checks green, warm and in rotation"),
        "pending": _split("waiting for a rollout slot, queued behind the canary"),
        "draining": _split("being drained for maintenance, out of rotation for a kernel patch"),
        "failed": _split("deploy failed and rolled back automatically, deploy failed"),
    },
    log_info=_lines("""
        pulling image {image}:{version}
        health check passed in {ms} ms
        registered with load balancer {lb}
        configuration reloaded
        warming cache: {n} keys loaded
        connection pool ready with {n} connections
        GC pause of {ms} ms
        serving {n} requests per second
        feature flags refreshed
        upstream {dep} reachable, latency {ms} ms
    """),
    log_warn=_lines("""
        slow query on table {table}: {ms} ms
        retrying call to {dep} (attempt {k})
        request queue above {n} items
    """),
    log_error="deploy of {version} failed: {error}; rolling back to {previous}",
    tickets=_lines("""
        Latency spike on {service} in {region}
        Flaky integration test blocks the {service} pipeline
        Rotate TLS certificates for {service}
        Customer reports duplicate emails from {service}
        Disk usage above 85 % on {region} database replicas
        Upgrade base image for {service}
        Alert noise: CPU warnings in {region} during backups
        Add dashboards for {service} queue depth
        Investigate memory growth in {service}
        Runbook for {region} failover is out of date
    """),
    people=_split(
        "Maya Chen, Oliver Grant, Ines Duarte, Rahul Mehta, Lena Novak, Samuel Adeyemi, "
        "Yuki Tanaka, Chloe Martin"
    ),
    deploy_notes=_split(
        "routine release, dependency bumps, hotfix for timeouts, config-only change, "
        "canary promoted, rolled back after alerts"
    ),
    teams=_split("payments platform, search infrastructure, core services, growth engineering"),
    config_note="managed by the deploy pipeline; edit through a pull request",
    notes=_lines("""
        Got the results; nothing here changes the plan yet.
        I'll compare these numbers with last week's baseline before drawing conclusions.
        This batch looks consistent with the earlier readings.
        Next I'll widen the search a little to rule out a regional issue.
        The data is noisy, so I'm looking at trends rather than single points.
        I'm noting this down for the final summary.
        No action is needed on this part for now; moving on.
        Let me cross-check this against the deploy history.
        These values are within the normal range for this time of day.
        I'll keep the rollback option in mind while I continue.
        Nothing here needs your approval yet.
        I want one more data point before I call this a pattern.
    """),
    interjections=_lines("""
        Any progress so far?
        Also keep an eye on {region}, we had alerts there last week.
        Take your time, just don't restart anything without asking me.
        The team lead is asking for an ETA. Roughly how long?
        Can you also glance at the deploy history when you get a chance?
    """),
    questions={
        "host": "Which host had the failed deploy in the first inventory lookup?",
        "zone": "In the first inventory lookup, which availability zone was the failed host in?",
        "error": "What error code did the logs of {host} show for the failed deploy?",
        "latency": "In the first latency query, what was the peak p99 latency in {region} (ms)?",
        "ticket": "Who is assigned to the P1 ticket in the list of open tickets?",
        "pool": "What database pool size does the {service} config set?",
    },
)

_AGENT_ZH = _AgentText(
    system="你是一名 SRE 运维助手。请使用现有工具排查问题，未经批准不要重启或回滚任何服务，"
    "并汇报你的发现。",
    tasks=_lines("""
        今天早上 {service} 发布了 {version}，{region} 有用户反馈报错。麻烦你排查一下：
          看看主机清单、日志和监控指标，然后告诉我结论。
        {service} 的 {version} 几个小时前上线了，{region} 的错误预算一直在掉。
          你把机器都过一遍，看看到底是怎么回事？
    """),
    remarks={
        "ok": _split("运行正常、正常接流量、各项检查通过、已预热并在线服务"),
        "pending": _split("等待发布窗口、排在金丝雀之后"),
        "draining": _split("正在摘流维护、内核补丁升级，暂时下线"),
        "failed": _split("部署失败，已自动回滚、部署失败，已摘除流量"),
    },
    log_info=_lines("""
        开始拉取镜像 {image}:{version}
        健康检查通过，耗时 {ms} ms
        已注册到负载均衡 {lb}
        配置已重新加载
        缓存预热完成，共加载 {n} 个键
        连接池就绪，共 {n} 个连接
        GC 暂停 {ms} ms
        当前每秒处理 {n} 个请求
        功能开关已刷新
        上游 {dep} 可达，延迟 {ms} ms
    """),
    log_warn=_lines("""
        表 {table} 出现慢查询，耗时 {ms} ms
        调用 {dep} 失败，正在重试（第 {k} 次）
        请求队列超过 {n} 条
    """),
    log_error="{version} 部署失败：{error}，正在回滚到 {previous}",
    tickets=_lines("""
        {region} 的 {service} 延迟突增
        集成测试不稳定，卡住了 {service} 的流水线
        更新 {service} 的 TLS 证书
        用户反馈 {service} 重复发送邮件
        {region} 数据库从库磁盘使用率超过 85%
        升级 {service} 的基础镜像
        {region} 备份期间 CPU 告警过多
        为 {service} 增加队列深度监控面板
        排查 {service} 内存持续增长
        {region} 故障切换手册内容过时
    """),
    people=_split("王磊、李静、张伟、刘洋、陈晨、杨帆、赵敏、孙浩"),
    deploy_notes=_split(
        "常规发布、依赖升级、修复超时问题的热补丁、仅配置变更、金丝雀全量、告警后回滚"
    ),
    teams=_split("支付平台组、搜索基础设施组、核心服务组、增长技术组"),
    config_note="由发布流水线管理，如需修改请提交合并请求",
    notes=_lines("""
        结果拿到了，目前还不需要调整排查思路。
        下结论之前，我先和上周的基线数据对比一下。
        这一批数据和前面看到的基本一致。
        接下来我把范围再扩大一点，排除是地域性的问题。
        数据波动比较大，我主要看趋势，不看单个点。
        这一点我先记下来，最后汇总时一起说明。
        这部分暂时不需要处理，继续往下查。
        我再拿发布记录交叉核对一下。
        这些数值在这个时段属于正常范围。
        继续排查的同时，我会把回滚作为备选方案。
        目前还没有需要您审批的操作。
        我想再多看一个数据点，再判断这是不是规律。
    """),
    interjections=_lines("""
        现在进展怎么样了？
        顺便也盯一下 {region}，上周那边报过警。
        不着急，但是重启任何东西之前先问我一声。
        组长在问大概什么时候能有结论？
        有空的话也看一眼发布记录吧。
    """),
    questions={
        "host": "第一次查询主机清单时，哪台主机部署失败了？",
        "zone": "第一次查主机清单时，部署失败的那台主机在哪个可用区？",
        "error": "{host} 的日志里，部署失败时报的错误码是什么？",
        "latency": "第一次查询延迟指标时，{region} 的 p99 延迟峰值是多少毫秒？",
        "ticket": "未关闭工单列表里，那张 P1 工单分配给了谁？",
        "pool": "{service} 的配置里，数据库连接池大小设置的是多少？",
    },
)

_AGENT = {"en": _AGENT_EN, "zh": _AGENT_ZH}


# --- persona ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class _PersonaText:
    system: str
    values: Slots
    statements: Mapping[str, Sequence[str]]  # fact -> what the user says
    acks: Mapping[str, Sequence[str]]  # fact -> the assistant's reply, which never repeats it
    restaurants: Sequence[str]
    safe: str
    unsafe: Sequence[str]
    neutral: Sequence[str]
    list_asks: Sequence[str]
    list_reply: tuple[str, str, str]  # intro, line per restaurant, outro
    comma: str  # between the city names of the request
    questions: Mapping[str, str]
    talk: _Talk


_SINGLE = ("name", "city", "job", "allergen", "food", "pet", "birthday")
# A multi-hop answer, and the statements it needs (the last one holds the answer).
_MULTI = {
    "restaurant": ("city", "allergen", "restaurants"),
    "pet_food": ("pet", "vet"),
    "trip_city": ("birthday", "trip"),
}


def _persona_facts(rng: random.Random, text: _PersonaText, lang: str) -> dict[str, str]:
    facts = {key: rng.choice(values) for key, values in text.values.items()}
    facts["city"], facts["trip_city"] = rng.sample(list(text.values["city"]), 2)
    birthday = date(2024, rng.randint(1, 12), rng.randint(1, 28))
    facts["birthday"] = _day(birthday, lang)
    facts["trip_start"] = _day(birthday - timedelta(days=rng.randint(1, 3)), lang)
    facts["trip_end"] = _day(birthday + timedelta(days=rng.randint(1, 3)), lang)
    return facts


def _restaurants(rng: random.Random, text: _PersonaText, facts: dict[str, str]) -> str:
    """Places in three cities; in the user's city exactly one is safe for their allergy."""
    names = iter(rng.sample(list(text.restaurants), 7))
    mine = [text.safe, *rng.sample(list(text.unsafe), 2)]
    entries = []
    for note in rng.sample(mine, 3):
        name = next(names)
        entries.append((name, facts["city"], _fill(note, rng, {}, facts)))
        if note == text.safe:
            facts["restaurant"] = name
    other_cities = rng.sample([c for c in text.values["city"] if c != facts["city"]], 2)
    other_allergens = {"allergen": [a for a in text.values["allergen"] if a != facts["allergen"]]}
    notes = [text.safe, *text.unsafe, *text.neutral, *text.neutral]
    for city in other_cities:
        for _ in range(2):
            note = _fill(rng.choice(notes), rng, other_allergens)
            entries.append((next(names), city, note))
    order = rng.sample([facts["city"], *other_cities], 3)
    entries.sort(key=lambda entry: order.index(entry[1]))
    facts["list_cities"] = text.comma.join(order)
    intro, line, outro = text.list_reply
    lines = [line.format(name=n, city=c, note=note) for n, c, note in entries]
    return "\n".join([intro, *lines, outro])


def _persona(chat: _Chat, turns: int, filler: int) -> list[_Question]:
    rng = chat.rng
    text = _PERSONA[chat.lang]
    facts = _persona_facts(rng, text, chat.lang)
    chat.say("system", text.system)
    small = _SmallTalk(chat, text.talk, turns, filler)
    said: dict[str, str] = {}
    for key in ["name", *rng.sample(_SINGLE[1:], len(_SINGLE) - 1)]:
        said[key] = chat.say("user", _fill(rng.choice(text.statements[key]), rng, {}, facts))
        chat.say("assistant", rng.choice(text.acks[key]))
        small.run(rng.randint(0, 2))
    small.run(rng.randint(2, 5))
    for key in rng.sample(["vet", "trip", "restaurants"], 3):
        if key == "restaurants":
            reply = _restaurants(rng, text, facts)
            chat.say("user", _fill(rng.choice(text.list_asks), rng, {}, facts))
            said[key] = chat.say("assistant", reply)
        else:
            said[key] = chat.say("user", _fill(rng.choice(text.statements[key]), rng, {}, facts))
            chat.say("assistant", rng.choice(text.acks[key]))
        small.run(rng.randint(1, 4))
    small.rest()
    singles = rng.sample(_SINGLE, rng.randint(3, 4))
    multis = rng.sample(sorted(_MULTI), rng.randint(2, 3))
    questions = [
        _Question(_fill(text.questions[k], rng, {}, facts), facts[k], [said[k]], "single-hop")
        for k in singles
    ]
    questions += [
        _Question(
            _fill(text.questions[k], rng, {}, facts),
            facts[k],
            [said[needed] for needed in _MULTI[k]],
            "multi-hop",
        )
        for k in multis
    ]
    _ask_midway(chat, questions, rng.randint(1, 2))
    return questions


def generate_persona(
    lang: str = "en", *, conversations: int = 1, turns: int = 210, filler: int = 60, seed: int = 0
) -> dict[str, Any]:
    """A long chat with personal facts stated early; single- and multi-hop questions late."""
    return _generate("persona", _persona, lang, conversations, turns, filler, seed)


_PERSONA_EN = _PersonaText(
    system="You are a friendly, thoughtful assistant. Remember what the user tells you about "
    "themselves and use it when it helps.",
    values={
        "name": _split("Dana, Priya, Marco, Sofia, Tom, Hannah, Lucas, Aisha"),
        "city": _split(
            "Lisbon, Toronto, Melbourne, Edinburgh, Austin, Copenhagen, Wellington, Seattle"
        ),
        "landmark": _split(
            "the old harbour, the botanical garden, the main station, the university, the river"
        ),
        "job": _split(
            "paediatric nurse, landscape architect, chemistry teacher, data analyst, "
            "sound engineer, veterinary surgeon, bakery owner"
        ),
        "allergen": _split("peanuts, shellfish, sesame, kiwi, mustard"),
        "food": _split(
            "mushroom risotto, lamb tagine, margherita pizza, pho, spinach lasagna, fish tacos"
        ),
        "pet_kind": _split("dog, cat"),
        "pet": _split("Biscuit, Pepper, Mochi, Juniper, Waffles, Ziggy, Olive"),
        "pet_food": _split("chicken, beef, dairy, wheat, salmon"),
    },
    statements={
        "name": _lines("""
            Hi! I'm {name}. I figured I'd introduce myself since we'll probably chat a lot.
            Hello, my name is {name}. Nice to finally try this out.
        """),
        "city": _lines("""
            I live in {city}, in a small flat near {landmark}.
            I moved to {city} a few years ago and I'm still discovering it.
        """),
        "job": _lines("""
            I work as a {job}, so my weeks can get pretty hectic.
            By day I'm a {job}. It's tiring, but I love it.
        """),
        "allergen": _lines("""
            Something important: I'm allergic to {allergen}, so please keep that in mind whenever
              food comes up.
            Just so you know, I can't eat {allergen}. I'm allergic, and it's fairly serious.
        """),
        "food": _lines("""
            If I could eat one thing forever, it would be {food}.
            My favourite food is {food}, no contest.
        """),
        "pet": _lines("""
            I have a {pet_kind} called {pet}, who is basically the boss of the house.
            My {pet_kind}, {pet}, is sitting on my feet as I type this.
        """),
        "birthday": _lines("""
            My birthday is on {birthday}, and I never know how to celebrate it.
            Fun fact: my birthday is {birthday}. Ideas for a low-key celebration are welcome.
        """),
        "vet": _lines("""
            {pet} was unwell again last night. The vet says no more {pet_food} from now on; it was
              in the treats.
            Back from the vet with {pet}. Verdict: an intolerance, so {pet_food} is off the menu for
              good.
        """),
        "trip": _lines("""
            Work is sending me to {trip_city} from {trip_start} to {trip_end} for a conference.
            I just booked my trip: I'll be in {trip_city} from {trip_start} until {trip_end}.
        """),
    },
    acks={
        "name": ["Lovely to meet you! I'm happy to help with whatever you have in mind."],
        "city": [
            "That sounds like a nice place to live.",
            "Nice! It's fun to get to know a place.",
        ],
        "job": ["That sounds demanding. I hope you get some proper breaks."],
        "allergen": ["Thanks for telling me. I'll keep it in mind for anything food-related."],
        "food": ["Great choice, that's hard to beat.", "Good taste! That's a classic."],
        "pet": ["Sounds like a real character!", "Every home needs a boss like that."],
        "birthday": ["A quiet dinner with a few close friends is always a good option."],
        "vet": ["Poor thing. I hope the new diet helps quickly."],
        "trip": ["That sounds busy but interesting. Remember to pack something comfortable."],
    },
    restaurants=_split(
        "Casa Verde, The Copper Pot, Little Saigon Kitchen, Olive & Thyme, Harbor Lights, "
        "Blue Lantern, Saffron Room, Nori House, Field & Fork, Juniper Table"
    ),
    safe="nothing on the menu contains {allergen}, and the staff are careful about it",
    unsafe=_lines("""
        almost every dish is cooked with {allergen}
        their signature dish is full of {allergen}
        great food, but {allergen} is in most of the sauces
    """),
    neutral=_lines("""
        lovely for a long brunch
        small and cosy, book ahead
        the best grilled fish in town
        a vegetarian tasting menu worth trying
        open late and good for groups
    """),
    list_asks=_lines("""
        I'm putting together restaurant tips for friends who are travelling around {list_cities}.
          Could you suggest a few places in each?
        Friends are visiting {list_cities} next month. Any restaurant recommendations for them?
    """),
    list_reply=(
        "Here are some places worth a visit:",
        "- {name} ({city}): {note}.",
        "I hope your friends enjoy them!",
    ),
    comma=", ",
    questions={
        "name": "What's my name?",
        "city": "Which city do I live in?",
        "job": "What do I do for a living?",
        "allergen": "What am I allergic to?",
        "food": "What's my favourite food?",
        "pet": "What's my {pet_kind}'s name?",
        "birthday": "When is my birthday?",
        "restaurant": "Which restaurant from your list is in my city and safe for me to eat at, "
        "given my allergy?",
        "pet_food": "What food does my {pet_kind} have to avoid now?",
        "trip_city": "Which city will I be in on my birthday?",
    },
    talk=_talk(
        "en",
        _topics("""
            A library card is still one of the best deals around.
            ? Can you recommend a good {genre} novel?
            A good {genre} novel pulls you in within the first few chapters, so give a new one a
              fair try.
            Browsing the staff picks in a local bookshop is a great way to find one.
            Keeping a short list of books to read next makes it easier to start.
            ? How can I make more time to read?
            Reading twenty minutes before bed adds up to a surprising number of books.
            Audiobooks are great for commutes and long walks.
            It's fine to abandon a book that isn't working for you.

            ? Any series worth watching this month?
            Limited series are a nice choice when you don't want a huge commitment.
            Critics and audiences often disagree, so trailers are a better guide.
            Subtitles help a lot with fast dialogue.
            ? Is it worth rewatching old {genre} films?
            Definitely: rewatching a favourite often shows you details you missed the first time.
            A film night with friends makes even an average {genre} film fun.

            Early starts mean quieter trails and cooler temperatures.
            ? I want to start hiking. Where do I begin?
            Start with short, well-marked trails and build up slowly.
            Good shoes matter more than any other piece of gear.
            Local hiking groups are a friendly way to learn the routes.
            ? What should I pack for a day hike?
            Pack water, a snack, a light jacket and a charged phone.
            A simple offline map app is a good safety net.
            Tell someone where you're going and when you expect to be back.

            ? How do I get better at cooking without recipes?
            Learning a few basic techniques matters more than collecting recipes.
            Taste as you go and adjust the salt and acidity at the end.
            Roasting vegetables at a high heat brings out a lot of flavour.
            Keeping a few sauces in the fridge makes quick meals more interesting.
            Cooking a big batch on Sunday makes weekday evenings easier.
            ? What knife should a home cook own?
            One good chef's knife and a sharpener cover most tasks.
            A small paring knife and a bread knife are nice extras, but not essential.

            Small, steady progress is easier to keep up than big jumps.
            ? How many times a week should I {exercise}?
            Two or three sessions a week is a realistic place to start.
            Rest days are part of the training, not a break from it.
            ? I keep skipping workouts. Any tips?
            Consistency beats intensity, especially in the first few months.
            Scheduling workouts like meetings makes them harder to skip.
            Finding a friend to train with makes it more fun.

            Don't worry about mistakes; they are how you learn.
            ? I'm trying to learn {language}. How should I practise?
            Fifteen minutes every day works better than two hours once a week.
            Listening to podcasts in {language} trains your ear without much effort.
            Labelling things around the house is an old trick that still works.
            ? Are language apps enough?
            Apps are a good start, but speaking with people is what builds confidence.
            A weekly conversation exchange, even online, makes a big difference.

            Most plants prefer bright, indirect light.
            ? My {plant} keeps drooping. What am I doing wrong?
            Overwatering is the most common problem with houseplants.
            Check that the pot drains well and let the top of the soil dry out.
            Yellow leaves often mean too much water rather than too little.
            Turning the pot every week keeps growth even.
            ? Which houseplants are hard to kill?
            Snake plants and pothos are famously forgiving.
            A ZZ plant also copes well with low light and the occasional forgotten watering.

            ? How do I stay focused when working from home?
            A fixed start time and a short walk before work create a sense of routine.
            Working in focused blocks with short breaks helps a lot.
            Putting the phone in another room removes the biggest distraction.
            A weekly plan on paper keeps the big tasks visible.

            ? Any tips for a tidier flat?
            Ten minutes of tidying every evening keeps things under control.
            Everything needs a home; clutter is mostly things without one.
            A box by the door for things that need to leave the house helps more than you'd think.
        """),
        ["Good question!", "Oh, I like this one.", "Happy to share some ideas."],
        {
            "genre": _split("mystery, science fiction, historical, fantasy, romance"),
            "exercise": _split("run, swim, cycle, do yoga, lift weights"),
            "language": _split("Spanish, Japanese, German, Italian, Korean"),
            "plant": _split("monstera, fiddle-leaf fig, basil, peace lily"),
        },
    ),
)

_PERSONA_ZH = _PersonaText(
    system="你是一个友好、贴心的助手。请记住用户告诉你的个人信息，并在合适的时候用上。",
    values={
        "name": _split("林晓雨、陈思远、王可欣、张子涵、刘一帆、赵雅琪、周明轩、吴佳怡"),
        "city": _split("杭州、成都、苏州、厦门、青岛、武汉、西安、南京"),
        "landmark": _split("老城区、植物园、火车站、大学城、江边"),
        "job": _split(
            "儿科护士、景观设计师、中学化学老师、数据分析师、录音师、宠物医生、面包店老板"
        ),
        "allergen": _split("花生、虾、芝麻、芒果、猕猴桃"),
        "food": _split("酸菜鱼、小笼包、煲仔饭、牛肉面、糖醋排骨、番茄炒蛋"),
        "pet_kind": _split("狗、猫"),
        "pet": _split("年糕、豆豆、可乐、汤圆、布丁、雪球、奶茶"),
        "pet_food": _split("鸡肉、牛肉、奶制品、小麦、三文鱼"),
    },
    statements={
        "name": _lines("""
            你好！我叫{name}，以后可能会常来找你聊天，先自我介绍一下。
            嗨，我是{name}，第一次用，请多关照。
        """),
        "city": _lines("""
            我住在{city}，家就在{landmark}附近。
            我几年前搬到了{city}，到现在还在慢慢熟悉这座城市。
        """),
        "job": _lines("""
            我是一名{job}，平时工作挺忙的。
            我白天的工作是{job}，挺累的，但我很喜欢。
        """),
        "allergen": _lines("""
            有件事很重要：我对{allergen}过敏，以后聊到吃的请一定记得。
            提前说一下，我不能吃{allergen}，过敏，而且还挺严重的。
        """),
        "food": _lines("""
            要是只能吃一样东西，我选{food}。
            我最喜欢吃的就是{food}，没有之一。
        """),
        "pet": _lines("""
            我养了一只{pet_kind}，叫{pet}，在家里基本是老大。
            我家{pet_kind}{pet}这会儿正趴在我脚边呢。
        """),
        "birthday": _lines("""
            我的生日是{birthday}，每年都不知道该怎么过。
            说个小事：我生日是{birthday}，有什么低调的庆祝点子欢迎推荐。
        """),
        "vet": _lines("""
            {pet}昨晚又不舒服了。兽医说以后不能再吃{pet_food}了，零食里就有这个。
            刚带{pet}看完兽医，结论是不耐受，{pet_food}以后彻底不能碰了。
        """),
        "trip": _lines("""
            单位派我去{trip_city}开会，{trip_start}出发，{trip_end}回来。
            行程刚订好：{trip_start}到{trip_end}我都在{trip_city}。
        """),
    },
    acks={
        "name": ["很高兴认识你！有什么想聊的、想问的，尽管说。"],
        "city": ["听起来是个很宜居的地方。", "不错呀，慢慢逛总能发现新去处。"],
        "job": ["听起来很辛苦，记得给自己留出休息的时间。"],
        "allergen": ["谢谢提醒，以后聊到吃的我都会注意。"],
        "food": ["好眼光，这个确实让人吃不腻。", "懂吃！这可是经典。"],
        "pet": ["听起来是个很有个性的小家伙！", "每个家里都需要这样一位老大。"],
        "birthday": ["约上几个好朋友安安静静吃顿饭，永远是个不错的选择。"],
        "vet": ["小可怜，希望换了饮食之后很快就好起来。"],
        "trip": ["听起来会很忙，但也挺有意思的。记得带几件舒服的衣服。"],
    },
    restaurants=_split(
        "知味小馆、老灶台、山野食堂、青禾餐厅、南巷面馆、半日闲茶餐厅、渔火小厨、拾味居、"
        "云间小院、巷口私房菜"
    ),
    safe="菜单上没有任何含{allergen}的菜，店员也很注意过敏问题",
    unsafe=_lines("""
        几乎每道菜都用到了{allergen}
        招牌菜里放了很多{allergen}
        味道很好，但大部分酱汁里都有{allergen}
    """),
    neutral=_lines("""
        适合周末慢慢吃个早午餐
        店面不大但很温馨，最好提前订位
        城里烤鱼做得最好的一家
        素食套餐值得一试
        营业到很晚，适合聚餐
    """),
    list_asks=_lines("""
        我在帮要去{list_cities}玩的朋友整理餐厅推荐，每个城市能推荐几家吗？
        下个月有朋友要去{list_cities}，你能帮他们推荐几家餐厅吗？
    """),
    list_reply=("这几家都值得一去：", "- {name}（{city}）：{note}。", "希望你的朋友们吃得开心！"),
    comma="、",
    questions={
        "name": "我叫什么名字？",
        "city": "我住在哪个城市？",
        "job": "我是做什么工作的？",
        "allergen": "我对什么过敏？",
        "food": "我最喜欢吃什么？",
        "pet": "我家{pet_kind}叫什么名字？",
        "birthday": "我的生日是哪天？",
        "restaurant": "你推荐的餐厅里，哪一家在我住的城市，而且考虑到我的过敏，我可以放心去吃？",
        "pet_food": "我家{pet_kind}现在不能吃什么？",
        "trip_city": "我过生日那天会在哪个城市？",
    },
    talk=_talk(
        "zh",
        _topics("""
            办一张图书馆的借书证，真的非常划算。
            ? 能推荐一本好看的{genre}小说吗？
            好的{genre}小说，往往前几章就能把人吸引住，新书可以多给它一点耐心。
            去书店逛逛店员推荐的书架，常常能发现惊喜。
            列一个“下一本读什么”的小清单，开始读新书会容易很多。
            ? 平时怎么才能挤出时间看书？
            每天睡前读二十分钟，一年下来能读完不少书。
            通勤或者散步的时候听有声书也很不错。
            读不下去的书放下也没关系，不必勉强自己。

            ? 这个月有什么值得追的剧吗？
            不想投入太多时间的话，可以选短一点的迷你剧。
            影评人和观众的口味经常不一样，看看预告片反而更靠谱。
            对白节奏快的片子，开着字幕会轻松很多。
            ? 老的{genre}电影值得重看吗？
            当然值得，重看喜欢的作品，常常能发现第一次没注意到的细节。
            和朋友一起看，哪怕是普通的{genre}片也会很有意思。

            早点出发，人少，天气也凉快。
            ? 我想开始徒步，应该从哪儿入手？
            先从路线清晰、距离较短的步道开始，慢慢加量。
            一双合脚的鞋比其他任何装备都重要。
            跟着本地的徒步群走几次，很快就能熟悉路线。
            ? 一天的短途徒步要带些什么？
            带上水、零食、一件薄外套，手机记得充满电。
            手机里装一个离线地图，关键时刻很管用。
            出发前告诉家人或朋友你去哪儿、大概几点回来。

            ? 不看菜谱的话，怎么提高做饭水平？
            掌握几种基本做法，比收藏一堆菜谱更有用。
            边做边尝，最后再调整咸淡和酸度。
            蔬菜用高温烤一烤，香味会出来很多。
            冰箱里常备几种酱料，快手菜也能做出花样。
            周末提前备好一批菜，工作日晚上会轻松很多。
            ? 家里做饭需要备一把什么样的刀？
            一把好用的主厨刀再加一个磨刀器，基本就够用了。
            再有一把小水果刀和面包刀更好，但不是必需的。

            小步慢慢进步，比一下子加很多更容易坚持。
            ? 一周{exercise}几次比较合适？
            刚开始每周两三次是比较现实的目标。
            休息日也是训练的一部分，不算偷懒。
            ? 我老是坚持不了锻炼，有什么办法吗？
            坚持比强度重要，尤其是在头几个月。
            把锻炼像开会一样写进日程，就不容易找借口跳过。
            找个朋友一起练，会有意思得多。

            别怕犯错，犯错本来就是学习的一部分。
            ? 我在学{language}，平时该怎么练？
            每天练十五分钟，比一周集中学两个小时效果好。
            平时听听{language}播客，不费力气就能练耳朵。
            在家里的东西上贴标签，这个老办法到现在还很管用。
            ? 只用学语言的 App 够吗？
            App 适合入门，但真正建立信心还得多开口和人说。
            每周找人做一次语言交换，哪怕是线上的，进步也会快很多。

            大多数植物喜欢明亮的散射光。
            ? 我的{plant}叶子老是耷拉着，是哪里没养对？
            养绿植最常见的问题其实是浇水太多。
            检查一下花盆排水好不好，等表层土干了再浇。
            叶子发黄往往是水浇多了，而不是浇少了。
            每周把花盆转个方向，植株会长得更均匀。
            ? 有哪些绿植特别好养？
            虎尾兰和绿萝出了名的皮实。
            金钱树也很耐阴，偶尔忘了浇水也没关系。

            ? 在家办公总是没法专心怎么办？
            固定上班时间，开工前出门走一小圈，会更有仪式感。
            分段专注工作、中间短暂休息，效果会好很多。
            把手机放到另一个房间，最大的干扰就没了。
            每周在纸上列个计划，重要的事情就不会被忘掉。

            ? 有什么让家里保持整洁的小技巧？
            每天晚上花十分钟收拾一下，家里就不容易乱。
            每样东西都要有固定的位置，杂乱大多是东西没有“家”。
            在门口放个箱子，专门放要带出门处理的东西，比想象中好用。
        """),
        ["好问题！", "这个我喜欢聊。", "给你分享几个想法。"],
        {
            "genre": _split("悬疑、科幻、历史、奇幻、爱情"),
            "exercise": _split("跑步、游泳、骑车、练瑜伽、撸铁"),
            "language": _split("西班牙语、日语、德语、意大利语、韩语"),
            "plant": _split("龟背竹、琴叶榕、罗勒、白掌"),
        },
    ),
)

_PERSONA = {"en": _PERSONA_EN, "zh": _PERSONA_ZH}


# --- the registry ----------------------------------------------------------------------------

BUILTIN: dict[str, ScenarioGenerator] = {
    "orders": generate_orders,
    "manual": generate_manual,
    "agent": generate_agent,
    "persona": generate_persona,
}


def builtin_names() -> list[str]:
    """Every dataset name ``builtin_dataset`` accepts (before any ``?parameters``)."""
    names = ["all"]
    for scenario in BUILTIN:
        names += [scenario, *(f"{scenario}-{lang}" for lang in LANGUAGES)]
    return names


def builtin_dataset(spec: str) -> dict[str, Any]:
    """The dataset a spec names: ``NAME``, ``NAME-en``, ``NAME-zh`` or ``all``, with parameters.

    ``NAME`` alone is English; ``all`` is every scenario in both languages.
    Parameters are integers in query form (``?turns=80&seed=3``) and apply to
    every scenario of the spec; a leading ``builtin:`` is ignored.

    >>> data = builtin_dataset("persona-zh?turns=10&filler=30&seed=3")
    >>> data["conversations"][0]["id"]
    'persona-zh-0'

    Raises ``ValueError`` naming the valid choices for an unknown name or parameter.
    """
    name, _, query = spec.strip().removeprefix("builtin:").partition("?")
    params = _parameters(query)
    if name == "all":
        conversations = []
        for generate in BUILTIN.values():
            for lang in LANGUAGES:
                conversations += generate(lang, **params)["conversations"]
        return {"conversations": conversations}
    scenario, lang = _scenario(name)
    return BUILTIN[scenario](lang, **params)


def _scenario(name: str) -> tuple[str, str]:
    if name in BUILTIN:
        return name, "en"
    scenario, _, lang = name.rpartition("-")
    if scenario in BUILTIN and lang in LANGUAGES:
        return scenario, lang
    raise ValueError(
        f"unknown builtin dataset {name!r}; valid names: {', '.join(builtin_names())}"
        " (with optional parameters, e.g. orders-zh?turns=80&seed=3)"
    )


def _parameters(query: str) -> dict[str, int]:
    params: dict[str, int] = {}
    for item in filter(None, query.split("&")):
        key, equals, value = item.partition("=")
        if key not in PARAMETERS:
            raise ValueError(
                f"unknown parameter {key!r} in builtin dataset spec; "
                f"valid parameters: {', '.join(PARAMETERS)}"
            )
        if not equals or not _INT.fullmatch(value):
            raise ValueError(f"parameter {key!r} needs an integer value, got {item!r}")
        if key in params:
            raise ValueError(f"parameter {key!r} is given twice")
        params[key] = int(value)
    return params
