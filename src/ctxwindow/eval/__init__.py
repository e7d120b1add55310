"""``ctxwindow eval``: measure context strategies and budgets on conversations (docs/eval.md)."""

from ctxwindow.eval.dataset import Conversation, Dataset, DatasetError, Question
from ctxwindow.eval.loaders import load_dataset
from ctxwindow.eval.runner import DEFAULT_BUDGETS, run_eval
from ctxwindow.eval.strategies import (
    DEFAULT_STRATEGIES,
    Built,
    Case,
    Strategy,
    get_strategy,
    register_strategy,
    strategy_names,
    unregister_strategy,
)

__all__ = [
    "DEFAULT_BUDGETS",
    "DEFAULT_STRATEGIES",
    "Built",
    "Case",
    "Conversation",
    "Dataset",
    "DatasetError",
    "Question",
    "Strategy",
    "get_strategy",
    "load_dataset",
    "register_strategy",
    "run_eval",
    "strategy_names",
    "unregister_strategy",
]
