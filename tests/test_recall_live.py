"""Recall in a live session: the newest turns survive, and old recall does not crowd them out.

Tried as a new user would (220 turns through the service at 3,000 tokens), the
cache mode once kept 49 recalled turns, 47 of them recalled for earlier
questions, in 73 % of the context, while only the newest 9 messages survived.
Here the same shape runs through a ``ContextManager``: a user who states facts,
chats, and asks about facts stated long before.
"""

from __future__ import annotations

import pytest

from ctxwindow import ContextManager
from ctxwindow.archive.sqlite import SQLiteArchive
from ctxwindow.context.core import CARRIED, CARRIED_SHARE
from ctxwindow.stores.memory import MemoryStore

FACTS = [
    ("sister", "My sister Alice moved to Lyon last spring and works as a night nurse."),
    ("car", "I drive a green 2014 Subaru Outback with a cracked windshield."),
    ("allergy", "I am allergic to peanuts and to penicillin, so be careful with recipes."),
    ("job", "I work as a railway signal engineer in Leeds, mostly on night shifts."),
    ("dog", "Our dog Biscuit is a seven year old beagle who hates thunderstorms."),
    ("wedding", "Tom and I got married in Porto in September 2019, on a rainy Saturday."),
    ("hobby", "I took up pottery in January and fire my bowls at a studio in Hebden Bridge."),
    ("flat", "The flat has two bedrooms and the boiler is a Worcester Bosch from 2011."),
    ("book", "I am reading The Left Hand of Darkness by Ursula K. Le Guin for my book club."),
    ("trip", "We fly to Reykjavik on the 14th of March and stay four nights near Hallgrimskirkja."),
    ("bank", "My savings account is at Nationwide and the standing order goes out on the 3rd."),
    ("garden", "In the garden I grow runner beans, courgettes and far too much mint."),
    ("piano", "I practise piano for twenty minutes a day, Satie's Gymnopedies at the moment."),
    ("mother", "My mother turns seventy in August and wants a quiet dinner in Whitby."),
    ("running", "I run the canal towpath on Sundays, ten kilometres in about fifty-five minutes."),
]
QUESTIONS = {
    "sister": "Which city did my sister move to, and what is her job?",
    "car": "What colour and year is my car again?",
    "allergy": "Which medicine am I allergic to?",
    "job": "Where do I work and what do I do there?",
    "dog": "How old is Biscuit and what breed?",
    "wedding": "In which city and month did Tom and I marry?",
    "hobby": "Where do I fire my pottery?",
    "flat": "What make is the boiler in the flat?",
    "book": "Who wrote the novel I am reading for book club?",
    "trip": "When do we fly to Iceland and for how many nights?",
    "bank": "On which day does the standing order leave my account?",
    "garden": "What vegetables do I grow?",
    "piano": "Which piece am I practising on the piano?",
    "mother": "Where does my mother want her birthday dinner?",
    "running": "How long does my Sunday run take?",
}
CHATTER = [
    "The weather has been grey all week, I could do with some sun.",
    "I made a big pot of lentil soup tonight, it should last until Thursday.",
    "Work was busy today, two signal failures before lunch.",
    "I finally fixed the squeaky hinge on the kitchen door.",
    "Watched a documentary about octopuses, they are cleverer than I thought.",
    "The neighbours are building an extension and the drilling starts at eight.",
]


def user_turns() -> list[str]:
    """110 user turns: the facts first, then chatter, asking now and then about old facts."""
    turns = [text for _, text in FACTS]
    topics = [topic for topic, _ in FACTS]
    asked = 0
    while len(turns) < 110:
        if len(turns) % 3 == 0:
            turns.append(QUESTIONS[topics[asked % len(topics)]])
            asked += 7  # a different topic each time, all of them in turn
        else:
            turns.append(CHATTER[len(turns) % len(CHATTER)] + f" (day {len(turns)})")
    return turns


@pytest.mark.parametrize("prompt_cache", [True, False])
def test_old_recall_never_crowds_out_the_newest_turns(prompt_cache: bool) -> None:
    manager = ContextManager(
        MemoryStore(), "gpt-4o", archive=SQLiteArchive(), budget=3000, reserve_output=0,
        prefetch=False, prompt_cache=prompt_cache,
    )  # fmt: skip
    sent: list[dict[str, str]] = []
    recalled_for_earlier = []
    for n, text in enumerate(user_turns()):
        question = {"role": "user", "content": text}
        manager.add("s", question)
        context = manager.build("s")
        assert context.total_tokens <= 3000
        assert context.messages[-1] == question
        newest = sent[-4:]  # every context has the 4 messages before the question
        assert all(message in context.messages for message in newest), n
        carried = sum(d.tokens for d in context.report.decisions if d.reason == CARRIED)
        assert carried <= CARRIED_SHARE * 3000
        recalled_for_earlier.append(carried / context.total_tokens)
        reply = {"role": "assistant", "content": f"Noted, thanks for telling me ({n})."}
        manager.add("s", reply)
        sent += [question, reply]
    assert len(sent) == 220
    if prompt_cache:
        assert max(recalled_for_earlier) > 0  # the cache mode does carry some recall over
    manager.close()


def test_a_question_about_an_old_fact_recalls_it() -> None:
    manager = ContextManager(
        MemoryStore(), "gpt-4o", archive=SQLiteArchive(), budget=3000, reserve_output=0,
        prefetch=False,
    )  # fmt: skip
    turns = user_turns()
    for n, text in enumerate(turns[:100]):
        manager.add("s", {"role": "user", "content": text})
        manager.add("s", {"role": "assistant", "content": f"Noted ({n})."})
    manager.add("s", {"role": "user", "content": QUESTIONS["wedding"]})
    context = manager.build("s")
    sent = "\n".join(str(m.get("content")) for m in context.messages)
    assert "Porto in September 2019" in sent
    manager.close()
