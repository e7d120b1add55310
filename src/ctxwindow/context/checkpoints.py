"""A session's checkpoint: its window's state through a seq, so a cold load replays little.

Loading a session the manager has not in memory rebuilds its window from
the store: replaying every entry costs the whole history (evictions,
compressions, folds), seconds for tens of thousands of messages. So every
``EVERY`` stored entries, at the end of a turn that leaves no question
waiting, the manager saves a checkpoint in the store (``save_checkpoint``):
the window's ``checkpoint()`` and what the session knows besides. A cold
load reads the checkpoint and the entries after it (``load_from_checkpoint``,
one round trip where the store allows) and replays only those.

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

from ctxwindow.context.session import Session
from ctxwindow.policies.checkpoint import CheckpointError

logger = logging.getLogger("ctxwindow.context")

EVERY = 512
"""Stored entries between two checkpoints of a session (what a cold load replays at most,
beyond the checkpoint)."""


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
    session.checkpointed = seq
    return True
