"""The ``persona`` scenario: a long chat with personal facts stated early, and single- and
multi-hop questions about them late. Its English and Chinese texts are in ``persona_text``."""

from __future__ import annotations

import random
from datetime import date, timedelta
from typing import Any

from ctxwindow.eval.builtin._chat import _ask_midway, _Chat, _generate, _Question
from ctxwindow.eval.builtin._text import _day, _fill, _SmallTalk
from ctxwindow.eval.builtin.persona_text import _PERSONA_EN, _PERSONA_ZH, _PersonaText

_PERSONA = {"en": _PERSONA_EN, "zh": _PERSONA_ZH}


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
    lang: str = "en", *, conversations: int = 1, turns: int = 300, filler: int = 60, seed: int = 0
) -> dict[str, Any]:
    """A long chat with personal facts stated early; single- and multi-hop questions late."""
    return _generate("persona", _persona, lang, conversations, turns, filler, seed)
