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
    agent's note). Defaults: orders 190, manual 150, agent 10, persona 300 (the
    longest: its facts are spread over ~22k-28k tokens).
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

import re
from typing import Any, Protocol

from ctxwindow.eval.builtin._chat import LANGUAGES
from ctxwindow.eval.builtin._text import Slots as Slots
from ctxwindow.eval.builtin.agent import generate_agent
from ctxwindow.eval.builtin.manual import generate_manual
from ctxwindow.eval.builtin.orders import generate_orders
from ctxwindow.eval.builtin.persona import generate_persona

__all__ = [
    "BUILTIN",
    "LANGUAGES",
    "PARAMETERS",
    "ScenarioGenerator",
    "Slots",
    "builtin_dataset",
    "builtin_names",
    "generate_agent",
    "generate_manual",
    "generate_orders",
    "generate_persona",
]

PARAMETERS = ("conversations", "filler", "seed", "turns")

_INT = re.compile(r"-?\d+")


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
