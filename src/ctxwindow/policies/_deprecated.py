"""The constructors' old spellings, kept working for one release with a ``DeprecationWarning``.

Constructors take at most two arguments by position (a window: its limit and
the model; a manager: its store and the model) and everything else by
keyword, as httpx's ``Client(*, timeout=…, limits=…)`` does; related options
travel together in small value objects (``PriorityWindow(keeping=Keeping(…),
folding=Folding(…))``). Two decorators for ``__init__`` let the old calls
through, each with a warning that gives the spelling to use:

- ``keyword_only(*names)``: ``names`` once came by position after the
  parameters that still do;
- ``grouped(keyword=ValueObject, …)``: the value object's fields were once
  flat keywords;
- ``system_second``: ``MessageWindow``'s second positional was the system
  prompt; it is the model now, as for every window.

The signature seen by ``inspect.signature``, by type checkers and in the docs
stays the new one. Both go in the release after the one that deprecates them
(CHANGELOG, "Deprecated").
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import sys
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar, cast

from ctxwindow.tokens import default_models

Init = TypeVar("Init", bound=Callable[..., None])


def warn_positional(owner: str, names: Sequence[str], why: str = "") -> None:
    """Warn that ``names`` were given to ``owner`` by position; say which keywords to use."""
    use = ", ".join(f"{name}=…" for name in names)
    message = f"{owner}(…, {', '.join(names)}) by position is deprecated: pass {use}{why}"
    warnings.warn(message, DeprecationWarning, stacklevel=_caller())


def _caller() -> int:
    """The stack level of the first frame outside the decorators (they can be stacked)."""
    frame, level = sys._getframe(2), 2
    while frame.f_back is not None and frame.f_code.co_filename == __file__:
        frame, level = frame.f_back, level + 1
    return level


def keyword_only(*names: str) -> Callable[[Init], Init]:
    """For an ``__init__`` whose parameters ``names`` (in their old order) were once
    positional: given by position after the parameters that still are, they are
    passed by keyword, with a warning."""

    def decorate(init: Init) -> Init:
        kept = _positional_count(init)

        @functools.wraps(init)
        def init_(self: Any, *args: Any, **kwargs: Any) -> None:
            if len(args) > kept:
                owner = type(self).__name__
                kwargs.update(_by_keyword(owner, names, args[kept:], kwargs, kept))
                args = args[:kept]
            init(self, *args, **kwargs)

        return cast(Init, init_)

    return decorate


def _positional_count(init: Callable[..., None]) -> int:
    """How many parameters ``init`` takes by position, ``self`` aside."""
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    parameters = inspect.signature(init).parameters.values()
    return sum(parameter.kind in kinds for parameter in parameters) - 1


def _by_keyword(
    owner: str, names: Sequence[str], values: Sequence[Any], given: Mapping[str, Any], kept: int
) -> dict[str, Any]:
    if len(values) > len(names):
        most = kept + len(names)
        raise TypeError(f"{owner}() takes at most {most} positional arguments")
    moved = dict(zip(names, values, strict=False))
    for name in moved:
        if name in given:
            raise TypeError(f"{owner}() got multiple values for argument {name!r}")
    warn_positional(owner, list(moved))
    return moved


def grouped(**groups: type) -> Callable[[Init], Init]:
    """For an ``__init__`` that takes value objects (frozen dataclasses) by keyword:
    their fields given as flat keywords still build them, with a warning.

    ``grouped(folding=Folding)`` turns ``summary_tokens=400`` into
    ``folding=Folding(summary_tokens=400)``.
    """

    def decorate(init: Init) -> Init:
        @functools.wraps(init)
        def init_(self: Any, *args: Any, **kwargs: Any) -> None:
            for keyword, kind in groups.items():
                _regroup(type(self).__name__, keyword, kind, kwargs)
            init(self, *args, **kwargs)

        return cast(Init, init_)

    return decorate


def _regroup(owner: str, keyword: str, kind: type, kwargs: dict[str, Any]) -> None:
    """Move the flat keywords that are fields of ``kind`` into ``kwargs[keyword]``."""
    fields = [field.name for field in dataclasses.fields(kind)]
    flat = {name: kwargs.pop(name) for name in fields if name in kwargs}
    if not flat:
        return
    if kwargs.get(keyword) is not None:
        raise TypeError(f"{owner}(): pass {', '.join(flat)} in {keyword}=, not beside it")
    spelled = ", ".join(f"{name}=…" for name in flat)
    warnings.warn(
        f"{owner}({spelled}) is deprecated: pass {keyword}={kind.__name__}({spelled})",
        DeprecationWarning,
        stacklevel=_caller(),
    )
    kwargs[keyword] = kind(**flat)


def system_second(init: Init) -> Init:
    """For ``MessageWindow.__init__``: ``MessageWindow(20, "Be brief.")`` keeps its old
    meaning, with a warning. A second positional that names no model (no registry
    entry, not the tokenizer's model) is the system prompt, unless ``system=`` is given."""

    @functools.wraps(init)
    def init_(self: Any, *args: Any, **kwargs: Any) -> None:
        if len(args) == 2 and "system" not in kwargs:
            limit, second = args
            if not _names_model(second, kwargs.get("tokenizer")):
                why = f" ({second!r} names no model, so it is read as the system prompt, as before)"
                warn_positional(type(self).__name__, ["system"], why)
                args, kwargs["system"] = (limit,), second
        init(self, *args, **kwargs)

    return cast(Init, init_)


def _names_model(value: Any, tokenizer: Any) -> bool:
    if not isinstance(value, str):
        return False
    if tokenizer is not None and value == tokenizer.model:
        return True
    return default_models().find(value) is not None


__all__ = ["grouped", "keyword_only", "system_second", "warn_positional"]
