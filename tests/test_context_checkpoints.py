"""Session checkpoints in the managers: shortcuts that never change a context."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from ctxwindow.context import ContextManager, checkpoints
from ctxwindow.errors import StoreUnavailableError
from ctxwindow.stores.memory import MemoryStore
from ctxwindow.stores.sqlite import SQLiteStore


def talk(manager: ContextManager, sid: str, turns: int) -> None:
    for i in range(turns):
        manager.add(sid, {"role": "user", "content": f"question {i}: 包裹 {i} 在哪里？"})
        manager.add(sid, {"role": "assistant", "content": f"answer {i}: it left the depot 🚚"})


def test_a_checkpoint_of_another_budget_is_passed_over_and_the_session_replayed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(checkpoints, "EVERY", 10)
    url = f"sqlite:///{tmp_path / 's.db'}"
    with ContextManager(url, budget=300) as small:
        talk(small, "s", 20)
    assert SQLiteStore(tmp_path / "s.db").checkpoint("s") is not None
    with caplog.at_level(logging.INFO, "ctxwindow.context"):
        other = ContextManager(url, budget=400).build("s")
    assert "its checkpoint is not used" in caplog.text
    replayed = ContextManager(MemoryStore(), budget=400)
    talk(replayed, "s", 20)
    assert other.messages == replayed.build("s").messages


class NoCheckpoints(MemoryStore):
    """A store whose checkpoints cannot be saved (a full disk, say)."""

    def _save_checkpoint(self, session_id: str, seq: int, data: bytes) -> Any:
        raise StoreUnavailableError("disk full")


def test_a_checkpoint_that_cannot_be_saved_is_logged_and_the_turn_goes_on(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(checkpoints, "EVERY", 4)
    store = NoCheckpoints()
    manager = ContextManager(store, budget=300)
    with caplog.at_level(logging.WARNING, "ctxwindow.context"):
        talk(manager, "s", 6)
    assert "could not save its checkpoint (disk full)" in caplog.text
    assert len(manager.history("s")) == 12  # every turn stored all the same
    assert store.checkpoint("s") is None


def test_checkpoints_come_every_so_many_entries_and_never_with_a_question_waiting(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(checkpoints, "EVERY", 5)
    store = MemoryStore()
    manager = ContextManager(store, budget=300)
    manager.add("s", {"role": "system", "content": "Be brief."})
    for i in range(6):
        manager.add("s", {"role": "user", "content": f"q{i}"})
    assert store.checkpoint("s") is None  # a question waits: not now
    manager.add("s", {"role": "assistant", "content": "a"})
    saved = store.checkpoint("s")
    assert saved is not None and saved[0] == 8
    manager.add("s", {"role": "user", "content": "q"})
    manager.add("s", {"role": "assistant", "content": "a"})
    assert store.checkpoint("s") == saved  # 2 entries since: not yet
