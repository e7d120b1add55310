"""The strategy registry: built-ins load when first asked for, under the name each declares."""

from __future__ import annotations

import pytest

from ctxwindow.eval import Strategy, get_strategy, strategy_names

BUILTIN = [
    "bm25",
    "bm25_fill",
    "bm25_fill_nb",
    "dense_fill",
    "dense_fill_nb",
    "full",
    "hybrid",
    "hybrid_minilm",
    "hybrid_nocache",
    "hybrid_norecall",
    "hybrid_nosummary",
    "hybrid_words",
    "message_window",
    "recent_rrf",
    "rrf_fill",
    "rrf_fill_nb",
    "token_window",
]


def test_every_builtin_strategy_is_registered() -> None:
    assert set(BUILTIN) <= set(strategy_names())


@pytest.mark.parametrize("name", BUILTIN)
def test_a_builtin_strategy_is_a_new_instance_of_its_name(name: str) -> None:
    strategy = get_strategy(name)
    assert isinstance(strategy, Strategy)
    assert strategy.name == name
    assert get_strategy(name) is not strategy


def test_an_unknown_name_lists_the_known_ones() -> None:
    known = r"unknown strategy 'mine'; known strategies: bm25, bm25_fill, "
    with pytest.raises(ValueError, match=known):
        get_strategy("mine")
