"""What ``ctxwindow eval`` can be asked for, described from the registries (for ``--help``).

Nothing here is a copy: the strategies come from the registry of
``ctxwindow.eval.strategies`` (each described by its class's docstring), the
built-in datasets from ``ctxwindow.eval.builtin`` (their generators'
docstrings) and the benchmark files from ``ctxwindow.eval.loaders``, so what
is registered there shows up in the help.

>>> dict(strategies())["token_window"]
'TokenWindow: the newest whole messages that fit the token budget.'
>>> [form for form, _ in dataset_forms()][:3]
['builtin:NAME', 'locomo:PATH', 'longmemeval:PATH']
"""

from __future__ import annotations

import sys

from ctxwindow.eval.builtin import BUILTIN, LANGUAGES, PARAMETERS
from ctxwindow.eval.loaders import benchmarks
from ctxwindow.eval.strategies import get_strategy, strategy_names


def strategies() -> list[tuple[str, str]]:
    """Every registered strategy and what it keeps, by name."""
    return [(name, summary(type(get_strategy(name)).__doc__)) for name in strategy_names()]


def builtin_datasets() -> list[tuple[str, str]]:
    """The ``builtin:NAME`` datasets: each scenario and what it holds, then ``all``."""
    rows = [(name, summary(generate.__doc__)) for name, generate in BUILTIN.items()]
    languages = " or ".join(f"-{lang}" for lang in LANGUAGES)
    rows.append(("all", f"every scenario above in every language ({languages})"))
    return rows


def dataset_forms() -> list[tuple[str, str]]:
    """The forms a ``--dataset`` spec takes, and what each reads."""
    languages = ", ".join(LANGUAGES)
    forms = [
        (
            "builtin:NAME",
            f"a dataset generated offline, NAME as listed below, in English unless it ends"
            f" in -LANG ({languages}); parameters {', '.join(PARAMETERS)} as in"
            " builtin:orders-zh?turns=80&seed=3",
        )
    ]
    forms += [
        (f"{kind}:PATH", summary(sys.modules[convert.__module__].__doc__))
        for kind, convert in benchmarks().items()
    ]
    forms.append(("PATH", "a .json or .jsonl file in the dataset format of docs/eval.md"))
    return forms


def summary(doc: str | None) -> str:
    """The first paragraph of a docstring on one line, without reST's double backquotes."""
    first = (doc or "").strip().split("\n\n")[0]
    return " ".join(first.split()).replace("``", "")


__all__ = ["builtin_datasets", "dataset_forms", "strategies", "summary"]
