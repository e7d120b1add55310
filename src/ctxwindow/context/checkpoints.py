"""A session's checkpoint: its window's state through a seq, so a cold load replays little.

Loading a session the manager has not in memory rebuilds its window from
the store: replaying every entry costs the whole history (evictions,
compressions, folds), seconds for tens of thousands of messages. So every
``EVERY`` stored entries, at the end of a turn that leaves no question
waiting, the manager saves a checkpoint in the store (``save_checkpoint``):
the window's ``checkpoint()`` and what the session knows besides. A cold
load reads the checkpoint and the entries after it (``load_from_checkpoint``,
one round trip where the store allows) and replays only those.

A session without a checkpoint the manager can use (written through the
store, by another version or configuration), or with more than ``NEWEST``
entries after it, is not replayed whole: the manager replays its newest
entries that fill the budget, after the ones a window keeps at any budget
(pinned entries, the system prompt: the store's ``earlier``, found without
reading the rest); the others are counted as left out (a report's
``earlier``) and reach the archive in the background. A checkpoint is then
saved at once, so that every later load resumes this same window.

A checkpoint is only a shortcut: one that cannot be used (written by a
window configured otherwise — another model, budget or policy — or by
another version, or damaged) is passed over, logged, and the session is
replayed whole; a checkpoint that fails to save is logged and the turn goes
on. The store keeps one per session, never moving backwards, and drops it
with the session.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence

from ctxwindow.context.session import Session
from ctxwindow.messages import Entry, stored_tokens
from ctxwindow.policies.checkpoint import CheckpointError

logger = logging.getLogger("ctxwindow.context")

EVERY = 512
"""Stored entries between two checkpoints of a session (what a cold load replays at most,
beyond the checkpoint)."""

NEWEST = 2 * EVERY
"""Entries after the checkpoint a cold load reads at first, at most: more, and it replays
only the newest entries that fill the budget (see ``context/aio.py``, ``_load``)."""

PAGE = 1024
"""Entries read at a time, going back from the newest, to fill the budget."""


def fill(newest: Sequence[Entry], budget: int) -> list[Entry]:
    """The newest of ``newest`` (in seq order) whose stored tokens fill ``budget``: the
    shortest suffix that reaches it (all, if none does)."""
    tokens, start = 0, len(newest)
    while start > 0 and tokens < budget:
        start -= 1
        tokens += stored_tokens(newest[start])
    return list(newest[start:])


def due(session: Session) -> bool:
    """Whether the session should be checkpointed now: ``EVERY`` entries since the last
    one, and no question waiting (a checkpoint holds no unanswered turn)."""
    return session.question is None and session.last_seq - session.checkpointed >= EVERY


def encoded(session: Session) -> tuple[int, bytes]:
    """(seq, data): the session's checkpoint through its last entry."""
    state = {
        "window": session.window.checkpoint(),
        "last_id": session.last_id,
        "whole": session.whole,
    }
    session.checkpointed = session.last_seq
    data = json.dumps(state, ensure_ascii=False, separators=(",", ":")).encode()
    return session.last_seq, data


def resumed(session: Session, seq: int, data: bytes) -> bool:
    """Carry a fresh session on from its checkpoint through ``seq``; False (logged, the
    session unchanged) if the checkpoint cannot be used."""
    try:
        state = json.loads(data)
        session.window.resume(state["window"])
        last_id, whole = str(state["last_id"]), bool(state["whole"])
    except (CheckpointError, ValueError, KeyError, TypeError) as exc:
        logger.info("session %r: its checkpoint is not used (%s); replaying it", session.id, exc)
        return False
    session.last_seq, session.last_id, session.whole = seq, last_id, whole
    session.checkpointed = session.replayed_after = seq
    return True
