"""A model that can only read its context, served by the fake endpoint of ``fake_openai``.

Asked about "fact N", it replies with the codes ``K...`` of the messages in
the context that state those facts, or "I don't know". Asked to judge (the
system prompt of ``ctxwindow.eval.llm``), it says YES when the candidate
contains the reference answer.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from .fake_openai import FakeOpenAI, fake_openai


def context_reader(body: dict[str, Any]) -> str:
    messages = body["messages"]
    if messages[0]["role"] == "system" and "grade answers" in messages[0]["content"]:
        text = messages[-1]["content"]
        reference = re.search(r"Reference answer: (.*)\n", text)
        candidate = text.split("Candidate answer: ", 1)[1]
        return "YES" if reference and reference.group(1) in candidate else "NO"
    codes = []
    for number in re.findall(r"\d+", messages[-1]["content"]):
        for message in messages[:-1]:
            found = re.search(rf"Fact {number}: the code is (K\d+)", message.get("content") or "")
            if found:
                codes.append(found.group(1))
    return " ".join(codes) or "I don't know."


@contextmanager
def fake_llm() -> Iterator[FakeOpenAI]:
    with fake_openai(context_reader) as fake:
        yield fake
