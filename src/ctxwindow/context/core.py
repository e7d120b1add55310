"""What the sync and async managers share: ``Core``, built from their settings.

``Core`` derives what the settings imply (the model's counter, the budget in
tokens less the reply's reserve, the default policy) and keeps the sessions'
windows in memory: loaded from the store, caught up with what others stored,
restored entry by entry. The rest of its work has a module each, whose class
it joins: ``admission`` (a new message checked, redacted and counted),
``recalling`` (which archived turns come back, without I/O) and ``finishing``
(the context built within the budget and finished as the model takes it).
"""

from __future__ import annotations

from collections.abc import Sequence

from ctxwindow.context import checkpoints
from ctxwindow.context.admission import Admission
from ctxwindow.context.contracts import CoreSettings
from ctxwindow.context.finishing import CARRIED as CARRIED  # their former home
from ctxwindow.context.finishing import RECALLED as RECALLED
from ctxwindow.context.finishing import Finishing
from ctxwindow.context.finishing import with_recalled as with_recalled
from ctxwindow.context.policy import default_budget, hybrid_policy
from ctxwindow.context.question import asked
from ctxwindow.context.recalling import CALM as CALM
from ctxwindow.context.recalling import CARRIED_SHARE as CARRIED_SHARE
from ctxwindow.context.recalling import Recalling
from ctxwindow.context.session import HotSessions, Session, in_tool_unit, unit_of
from ctxwindow.messages import Entry
from ctxwindow.policies.base import stored_kind
from ctxwindow.stores.base import Checkpoint, Earlier
from ctxwindow.tokens.defaults import default_models


class Core(Admission, Recalling, Finishing):
    """What the sync and async managers share: windows, admission, recall, finishing.

    Built from the manager's ``CoreSettings``; it derives what they imply: the model's
    counter, the budget in tokens (less the reply's reserve), the default policy."""

    def __init__(self, settings: CoreSettings) -> None:
        self.settings = settings
        models = settings.models or default_models()
        info = models.resolve(settings.model)
        self.tokenizer = models.tokenizer_of(info)
        self.strict_roles = info.strict_roles
        reserve = settings.reserve_output
        reserve = min(4096, info.max_output) if reserve is None else reserve
        self.budget = default_budget(settings.model, settings.budget, reserve, models=models)
        self.policy = settings.policy or hybrid_policy(
            settings.summarizer, cache=settings.prompt_cache
        )
        self.archive = settings.archive
        self.redactor = settings.redactor
        self.redact_context = self.redactor is not None and settings.redact == "context"
        self.recall = settings.recall
        self.on_event = settings.on_event
        hot = settings.hot_sessions
        self.sessions = hot if isinstance(hot, HotSessions) else HotSessions(hot)

    # -- sessions in the hot tier ---------------------------------------------------

    def cached(self, session_id: str) -> Session | None:
        """The session's window, if this manager's is in memory."""
        return self.sessions.get(session_id, self)

    def loaded(
        self, session_id: str, checkpoint: Checkpoint | None, stored: Sequence[Entry]
    ) -> Session | None:
        """The session from its ``checkpoint`` and the entries ``stored`` after it (None if
        the checkpoint cannot be used: see ``context/checkpoints.py``), or from all its
        entries. Not kept in the hot tier yet (``keep``): this may run off the event loop."""
        window = self.policy(self.budget, self.tokenizer)
        session = Session(session_id, window, owner=self)
        window.on_event = self.on_event
        if checkpoint is not None and not checkpoints.resumed(session, *checkpoint):
            return None
        self.restore(session, stored)
        return session

    def loaded_whole(self, session_id: str, stored: Sequence[Entry]) -> Session:
        """The session from all its entries, ``stored``."""
        session = self.loaded(session_id, None, stored)
        assert session is not None  # only a checkpoint can be refused
        return session

    def loaded_newest(self, session_id: str, earlier: Earlier, newest: Sequence[Entry]) -> Session:
        """The session from its ``newest`` entries, after ``earlier.kept`` (what a window
        keeps at any budget among the entries before them); the others are counted as
        left out. See ``context/checkpoints.py``. Off the event loop, like ``loaded``."""
        window = self.policy(self.budget, self.tokenizer)
        session = Session(session_id, window, owner=self)
        window.on_event = self.on_event
        # A kept entry of a tool unit cannot be replayed without the rest of its unit.
        alone = [e for e in earlier.kept if in_tool_unit(e)]
        self.restore(session, [e for e in earlier.kept if not in_tool_unit(e)], archive=False)
        if earlier.entries or alone:
            window.left_out(
                earlier.entries + len(alone), earlier.tokens + sum(e.tokens for e in alone)
            )
            session.whole = False
        self.restore(session, newest)
        session.replayed_after = newest[0].seq - 1 if newest else session.last_seq
        return session

    def keep(self, session: Session) -> None:
        self.sessions.put(session)

    def forget(self, session_id: str) -> None:
        self.sessions.pop(session_id)

    def stale(self, session: Session, last: Sequence[Entry]) -> int | None:
        """Where to read what others stored since the window last saw the store.

        ``last`` is the store's last entry (or nothing). None: the window is
        current. Otherwise the ``after`` to load from: it includes the window's
        own last entry, so ``catch_up`` can check the session was not rebuilt.
        """
        if last and last[0].seq == session.last_seq and last[0].id == session.last_id:
            return None
        if not last and session.last_seq == 0:
            return None
        return max(session.last_seq - 1, 0)

    def catch_up(self, session_id: str, session: Session, newer: Sequence[Entry]) -> None:
        """Add what others stored to the window; forget a window that no longer matches."""
        if session.last_seq == 0:
            self.restore(session, newer)
        elif newer and newer[0].seq == session.last_seq and newer[0].id == session.last_id:
            self.restore(session, newer[1:])
        else:
            self.forget(session_id)  # deleted or rebuilt meanwhile: reloaded on next use

    def restore(self, session: Session, stored: Sequence[Entry], *, archive: bool = True) -> None:
        """Add stored entries the window has not seen, with their stored tokens.

        Each is also queued for the archive, as stored (see ``unarchived``), unless
        ``archive`` is False (the manager queues them otherwise), and, when it is a
        unit alone (not of a tool unit, which is whole only with its results), kept
        among the session's units as the archive will give it back: the window's
        turns are recall's candidates too, and the first query that ranks them no
        longer reads them back (on LoCoMo dev, the first questions of a conversation
        read 50-230 entries each, the slowest builds of all).
        """
        window = session.window
        if self.archive is not None and archive:
            new = [e for e in stored if e.seq > session.last_seq and e.message["role"] != "system"]
            session.unarchived.extend(new)
            for entry in new:
                if not in_tool_unit(entry):
                    self.cache(session, unit_of(entry, None))
        for entry in stored:
            if entry.seq <= session.last_seq:
                continue  # an idempotent retry returned what the window already has
            if entry.message["role"] == "tool" and entry.message.get("tool_call_id") not in (
                window.pending_tool_calls
            ):
                session.last_seq, session.last_id = entry.seq, entry.id
                session.question = None
                continue  # its call is older than what was loaded: never an orphan
            kept = None
            if entry.message["role"] == "system":
                window.set_system(
                    entry.message["content"], entry_id=entry.id, seq=entry.seq, tokens=entry.tokens
                )
            else:
                kept = window.add(
                    entry.message, pin=entry.pinned, metadata=entry.metadata,
                    kind=stored_kind(entry), tokens=entry.tokens, entry_id=entry.id, seq=entry.seq,
                )  # fmt: skip
            session.question = asked(session.question, entry, kept)
            session.last_seq, session.last_id = entry.seq, entry.id

    def unarchived(self, session: Session, after: int = 0) -> list[Entry]:
        """The turns the window saw since last asked, to archive, less those up to ``after``
        (the archive's watermark, on a cold load): see ``context/archiving.py``."""
        queued, session.unarchived = session.unarchived, []
        return [entry for entry in queued if entry.seq > after] if after else queued
