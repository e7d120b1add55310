"""The ``manual`` scenario: a pasted product manual, then many short turns. Its texts are
described in ``manual_text``, the English ones in ``manual_en``, the Chinese in ``manual_zh``."""

from __future__ import annotations

import itertools
import random
from typing import Any

from ctxwindow.eval.builtin._chat import _ask_midway, _Chat, _generate, _Question
from ctxwindow.eval.builtin._text import _SMALL_TALK, _code, _fill, _join, _SmallTalk
from ctxwindow.eval.builtin.manual_en import _MANUAL_EN
from ctxwindow.eval.builtin.manual_text import _ManualText
from ctxwindow.eval.builtin.manual_zh import _MANUAL_ZH

_MANUAL = {"en": _MANUAL_EN, "zh": _MANUAL_ZH}


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
