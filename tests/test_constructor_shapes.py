"""Constructor shapes: at most two arguments by position, the rest by keyword.

The old spellings keep working for one release, each with a ``DeprecationWarning``
that names the keyword to pass (``ctxwindow/policies/_deprecated.py``).
"""

from __future__ import annotations

import dataclasses
import inspect
import re
from typing import Any

import pytest

from ctxwindow.archive.sqlite import SQLiteArchive
from ctxwindow.compress import Extractive, RollingSummary, Truncate
from ctxwindow.context import AsyncContextManager, ContextManager, hybrid_policy
from ctxwindow.context.contracts import CoreSettings
from ctxwindow.context.core import Core
from ctxwindow.policies import (
    DEFAULT_RULES,
    Folding,
    Keeping,
    Match,
    MessageWindow,
    Priority,
    PriorityWindow,
    TokenWindow,
    Window,
)
from ctxwindow.recall import RecallPolicy
from ctxwindow.redact import Redactor
from ctxwindow.stores.memory import AsyncMemoryStore, MemoryStore
from ctxwindow.tokens.defaults import chat_tokenizer, default_models

BY_POSITION = (
    inspect.Parameter.POSITIONAL_ONLY,
    inspect.Parameter.POSITIONAL_OR_KEYWORD,
    inspect.Parameter.VAR_POSITIONAL,
)


def by_position(kind: type) -> list[str]:
    """The parameters of ``kind``'s constructor that can be given by position."""
    parameters = inspect.signature(kind).parameters.values()
    return [parameter.name for parameter in parameters if parameter.kind in BY_POSITION]


# --- managers

MANAGERS = [ContextManager, AsyncContextManager]
ONCE_POSITIONAL = ("policy", "archive", "summarizer", "redactor")


def summarize(texts: list[str]) -> str:
    return " / ".join(texts)


def store_for(kind: type) -> Any:
    return MemoryStore() if kind is ContextManager else AsyncMemoryStore()


def once_positional() -> dict[str, Any]:
    """A value, none of them the default, for each argument that was once positional."""
    return {
        "policy": hybrid_policy(summarize, cache=False),
        "archive": SQLiteArchive(),
        "summarizer": summarize,
        "redactor": Redactor(),
    }


@pytest.mark.parametrize("count", [1, 2, 3, 4])
@pytest.mark.parametrize("kind", MANAGERS)
def test_a_manager_argument_given_by_position_warns_and_gives_the_keyword_manager(
    kind: type, count: int
) -> None:
    values, names = once_positional(), ONCE_POSITIONAL[:count]
    store = store_for(kind)
    with pytest.warns(DeprecationWarning) as caught:
        old = kind(store, "gpt-4o-mini", *(values[name] for name in names), budget=500)
    new = kind(store, "gpt-4o-mini", **{name: values[name] for name in names}, budget=500)
    [warning] = caught
    assert str(warning.message).startswith(f"{kind.__name__}(…, {', '.join(names)}) by position")
    assert str(warning.message).endswith("pass " + ", ".join(f"{name}=…" for name in names))
    assert warning.filename == __file__  # it points at the caller
    assert old._core.settings == new._core.settings
    assert (old.store, old.budget) == (new.store, new.budget)


def test_a_redactor_given_by_position_still_masks_what_is_stored() -> None:
    secret = {"role": "user", "content": "Mail me at ada@example.com please."}
    with pytest.warns(DeprecationWarning, match="pass policy=…, archive=…, summarizer=…"):
        old = ContextManager(MemoryStore(), "gpt-4o", None, None, None, Redactor())
    new = ContextManager(MemoryStore(), "gpt-4o", redactor=Redactor())
    for manager in (old, new):
        manager.add("s", secret)
    stored = [manager.history("s")[0].message["content"] for manager in (old, new)]
    assert stored[0] == stored[1] and "ada@example.com" not in stored[0]


@pytest.mark.parametrize("kind", MANAGERS)
def test_a_manager_refuses_what_the_old_spelling_refused_too(kind: type) -> None:
    store = store_for(kind)
    with pytest.raises(TypeError, match="at most 6 positional"):
        kind(store, "gpt-4o", None, None, None, None, 0.5)
    with pytest.raises(TypeError, match="multiple values for argument 'policy'"):
        kind(store, "gpt-4o", None, policy=None)


@pytest.mark.parametrize("kind", MANAGERS)
def test_a_manager_takes_only_its_store_and_model_by_position(kind: type) -> None:
    assert by_position(kind) == ["store", "model"]
    parameters = inspect.signature(kind).parameters
    assert all(parameters[name].kind is inspect.Parameter.KEYWORD_ONLY for name in ONCE_POSITIONAL)


def non_defaults() -> dict[str, Any]:
    """A value for every setting of the core, none of them the default."""
    return {
        **once_positional(),
        "model": "gpt-4",
        "budget": 900,
        "reserve_output": 10,
        "recall": RecallPolicy(depth=7),
        "hot_sessions": 3,
        "redact": "context",
        "on_event": lambda name, value: None,
        "models": default_models(),
        "prompt_cache": False,
    }


@pytest.mark.parametrize("kind", MANAGERS)
def test_a_manager_builds_its_cores_settings_from_its_keywords(kind: type) -> None:
    given = non_defaults()
    fields = {field.name: field for field in dataclasses.fields(CoreSettings)}
    assert given.keys() == fields.keys()  # every setting is tried
    defaults = CoreSettings()
    assert all(value != getattr(defaults, name) for name, value in given.items())
    manager = kind(store_for(kind), **given)
    assert manager._core.settings == CoreSettings(**given)


def test_core_is_built_from_one_settings_object() -> None:
    assert list(inspect.signature(Core).parameters) == ["settings"]
    settings = CoreSettings(model="gpt-4", budget=0.5, reserve_output=0)
    core = Core(settings)
    assert core.settings is settings
    assert core.budget == 8192 // 2
    assert core.sessions.get("s", core) is None  # an int gave a hot tier of its own


def test_core_settings_are_frozen_keywords_checked_once() -> None:
    with pytest.raises(TypeError):
        CoreSettings("gpt-4o")  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        CoreSettings().budget = 100  # type: ignore[misc]
    with pytest.raises(ValueError, match="redact must be one of"):
        CoreSettings(redact="upstream")  # type: ignore[arg-type]


# --- windows

WINDOWS = [TokenWindow, MessageWindow, PriorityWindow]


def same_window(old: Window, new: Window) -> None:
    """``old`` and ``new`` are configured alike and hold the same messages."""
    assert type(old) is type(new)
    assert old.fingerprint() == new.fingerprint()  # budget, model, caps, thresholds...
    assert (old.budget, old.system, old.messages()) == (new.budget, new.system, new.messages())
    assert getattr(old, "reserve_output", 0) == getattr(new, "reserve_output", 0)
    assert old.total_tokens == new.total_tokens


@pytest.mark.parametrize(
    ("old", "new", "names"),
    [
        (
            lambda: TokenWindow(500, "gpt-4o-mini", "Be brief.", 40),
            lambda: TokenWindow(500, "gpt-4o-mini", system="Be brief.", reserve_output=40),
            "system, reserve_output",
        ),
        (
            lambda: PriorityWindow(500, "gpt-4o-mini", "简短回答。"),
            lambda: PriorityWindow(500, "gpt-4o-mini", system="简短回答。"),
            "system",
        ),
        (
            lambda: PriorityWindow(500, "gpt-4o", "Be brief.", 40),
            lambda: PriorityWindow(500, "gpt-4o", system="Be brief.", reserve_output=40),
            "system, reserve_output",
        ),
        (
            lambda: MessageWindow(3, "手短に答えて。"),
            lambda: MessageWindow(3, system="手短に答えて。"),
            "system",
        ),
    ],
    ids=["token", "priority-system", "priority", "message"],
)
def test_a_window_argument_given_by_position_warns_and_gives_the_keyword_window(
    old: Any, new: Any, names: str
) -> None:
    with pytest.warns(DeprecationWarning) as caught:
        window = old()
    [warning] = caught
    message = str(warning.message)
    assert message.startswith(f"{type(window).__name__}(…, {names}) by position is deprecated")
    assert "pass " + ", ".join(f"{name}=…" for name in names.split(", ")) in message
    assert warning.filename == __file__  # it points at the caller
    fresh = new()
    for each in (window, fresh):
        each.extend([{"role": "user", "content": f"turn {i} 订单 A-{i}"} for i in range(8)])
    same_window(window, fresh)


def test_a_message_window_takes_the_model_second_like_the_others() -> None:
    window = MessageWindow(20, "gpt-4o-mini", system="Be brief.")  # no warning: it is a model
    assert (window.model, window.system) == ("gpt-4o-mini", "Be brief.")
    with pytest.warns(DeprecationWarning, match="'sys' names no model, so it is read as the"):
        old = MessageWindow(20, "sys")
    assert (old.model, old.system) == ("gpt-4o", "sys")


@pytest.mark.parametrize("kind", [TokenWindow, PriorityWindow])
def test_a_window_refuses_what_the_old_spelling_refused_too(kind: type) -> None:
    with pytest.raises(TypeError, match="at most 4 positional"):
        kind(500, "gpt-4o", "sys", 0, None)
    with pytest.raises(TypeError, match="multiple values for argument 'system'"):
        kind(500, "gpt-4o", "sys", system="sys")
    with pytest.raises(TypeError):
        MessageWindow(20, "gpt-4o", "sys")  # type: ignore[misc]


@pytest.mark.parametrize("kind", WINDOWS)
def test_a_window_takes_only_its_limit_and_model_by_position(kind: type) -> None:
    limit = "max_messages" if kind is MessageWindow else "max_tokens"
    assert by_position(kind) == [limit, "model"]
    assert by_position(Window) == ["budget"]


@pytest.mark.parametrize(
    ("kind", "field", "bad"),
    [
        (Keeping, "caps", {"documents": 10}),
        (Keeping, "caps['document']", {"document": -1}),
        (Keeping, "reserve_recent", -1),
        (Keeping, "reserve_recent", 1.5),
        (Keeping, "dedupe_small_talk", "yes"),
        (Keeping, "document_tokens", 0),
        (Keeping, "document_tokens", True),
        (Folding, "compressor", "chain"),
        (Folding, "compress_threshold", -1),
        (Folding, "summarizer", 3),
        (Folding, "summary_tokens", -5),
        (Folding, "fold_tokens", 0),
    ],
)
def test_the_value_objects_refuse_a_bad_value_naming_its_field(
    kind: type, field: str, bad: Any
) -> None:
    name = field.split("[")[0]
    with pytest.raises(ValueError, match=re.escape(field)):
        kind(**{name: bad})
    with pytest.raises(ValueError, match=re.escape(field)), pytest.warns(DeprecationWarning):
        PriorityWindow(500, **{name: bad})  # the flat spelling is checked by the same code
    with pytest.raises(TypeError, match="rules: every rule must be callable"):
        Keeping(rules=["not a rule"])  # type: ignore[list-item]


def test_the_value_objects_are_frozen_and_compare_by_value() -> None:
    keeping = Keeping(caps={"document": 300}, reserve_recent=0)
    assert keeping == Keeping(caps={"document": 300}, reserve_recent=0) != Keeping()
    with pytest.raises(dataclasses.FrozenInstanceError):
        keeping.reserve_recent = 5  # type: ignore[misc]
    with pytest.raises(TypeError):
        keeping.caps["document"] = 1  # type: ignore[index]
    assert Folding(summary_tokens=400).batch_tokens == 200
    assert Folding(summary_tokens=400, fold_tokens=50).batch_tokens == 50


def test_flat_priority_keywords_warn_and_give_the_value_objects() -> None:
    rules = [Match(Priority.HIGH, pattern=r"ORDER-\d+"), *DEFAULT_RULES]
    tokenizer = chat_tokenizer("gpt-4o")
    summarizer = RollingSummary(Extractive(tokenizer), tokenizer).fold
    keeping = dict(
        rules=rules, caps={"document": 300}, reserve_recent=0, dedupe_small_talk=False,
        document_tokens=200,
    )  # fmt: skip
    folding = dict(
        compressor=Truncate(tokenizer), compress_threshold=120, summarizer=summarizer,
        summary_tokens=60, fold_tokens=30,
    )  # fmt: skip
    with pytest.warns(DeprecationWarning) as caught:
        old = PriorityWindow(400, "gpt-4o", system="sys", **keeping, **folding)
    messages = sorted(str(warning.message) for warning in caught)
    assert messages == [
        "PriorityWindow(compressor=…, compress_threshold=…, summarizer=…, summary_tokens=…, "
        "fold_tokens=…) is deprecated: pass folding=Folding(compressor=…, "
        "compress_threshold=…, summarizer=…, summary_tokens=…, fold_tokens=…)",
        "PriorityWindow(rules=…, caps=…, reserve_recent=…, dedupe_small_talk=…, "
        "document_tokens=…) is deprecated: pass keeping=Keeping(rules=…, caps=…, "
        "reserve_recent=…, dedupe_small_talk=…, document_tokens=…)",
    ]
    assert all(warning.filename == __file__ for warning in caught)
    new = PriorityWindow(
        400, "gpt-4o", system="sys", keeping=Keeping(**keeping), folding=Folding(**folding)
    )
    assert (old.keeping, old.folding) == (new.keeping, new.folding)
    for window in (old, new):
        window.add("user", "Your ORDER-77 shipped.")
        window.extend([{"role": "user", "content": f"hi, question {i} " * 9} for i in range(30)])
    same_window(old, new)
    assert "Your ORDER-77 shipped." in [m["content"] for m in new.messages()]


def test_a_flat_keyword_beside_its_value_object_is_refused() -> None:
    with pytest.raises(TypeError, match="pass caps in keeping=, not beside it"):
        PriorityWindow(400, keeping=Keeping(), caps={"document": 3})
