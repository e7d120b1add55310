"""The ``orders`` scenario: orders stated early in a customer-service chat, asked about
after long support talk. Its English and Chinese texts are in ``orders_text``."""

from __future__ import annotations

import random
from datetime import timedelta
from typing import Any

from ctxwindow.eval.builtin._chat import _ask_midway, _Chat, _generate, _Question
from ctxwindow.eval.builtin._text import _code, _day, _fill, _SmallTalk
from ctxwindow.eval.builtin.orders_text import _ORDERS_EN, _ORDERS_ZH, _OrdersText

_ORDERS = {"en": _ORDERS_EN, "zh": _ORDERS_ZH}


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
