"""``OpenSquillaSession``: an OpenAI Agents SDK session over this store.

Each SDK item is one transcript entry (``items.py``) of the session key ``keys.py`` makes;
every call is one call of the manager's public API: ``add_items`` one ``append_messages``
(one fenced transaction), ``pop_item`` one ``pop_message``, ``get_items`` one transcript
read (``get_transcript_lines``: the rows' items and the latest summary as of one moment;
the rows' own fields too when one holds no item), ``clear_session`` one ``delete`` or ``reset``.
"""

from __future__ import annotations

from typing import Any, Literal, cast

from agents.items import TResponseInputItem
from agents.memory.session import SessionABC
from agents.memory.session_settings import (
    SessionSettings,
    coerce_session_settings,
    resolve_session_limit,
)

from ...compaction import (
    CompactionConfig,
    CompactionDecision,
    CompactionResult,
    format_compaction_summary_context,
)
from ...compaction.summarizer import Summarizer
from ...errors import SessionNotFoundError
from ...keys import normalize_agent_id
from ...manager import SessionManager
from ...models import TranscriptLines
from ...storage import SessionStorage
from .._shared import ClosesOnExit, StorageLease
from .items import to_item, to_message
from .keys import session_key

ClearMode = Literal["delete", "reset"]
SummaryRole = Literal["system", "developer", "user"]
_CLEAR_MODES = ("delete", "reset")
_SUMMARY_ROLES = ("system", "developer", "user")

#: The compaction settings :meth:`OpenSquillaSession.compact` uses unless given others:
#: whole API rounds, so a call, its output and the rounds' order stay as the model saw them.
DEFAULT_COMPACTION = CompactionConfig(cut_policy="api_rounds")


class OpenSquillaSession(ClosesOnExit, SessionABC):
    """An Agents SDK session (``agents.memory.session.SessionABC``) kept in this store.

    ``storage`` is a :class:`SessionStorage` (the caller's: connected if needed, never
    closed) or a DSN string (a SQLite path, ``":memory:"``, a ``postgresql://`` URL): then
    the session leases the process's one store of that DSN (``_shared.StorageLease``) and
    :meth:`close` (or leaving ``async with``) gives the lease back. The key is
    ``agent:<agent_id>:openai-agents:<session_id percent-encoded>`` (:attr:`session_key`).

    Options: ``clear="delete"`` (``clear_session`` deletes the session and everything under
    its key, as the SDK's backends do) or ``"reset"`` (a new generation: the old one is
    archived and fenced, docs/semantics.md#reset); ``summary_role`` (``"system"``): after a
    compaction, ``get_items`` starts with the latest summary as a message of that role
    (``None``: no summary item); ``summarizer`` and ``compaction`` for :meth:`compact`.
    """

    session_settings: SessionSettings | None = None

    def __init__(
        self,
        session_id: str,
        storage: SessionStorage | str,
        *,
        agent_id: str = "main",
        session_settings: SessionSettings | dict[str, Any] | None = None,
        clear: ClearMode = "delete",
        summary_role: SummaryRole | None = "system",
        summarizer: Summarizer | None = None,
        compaction: CompactionConfig | None = None,
    ) -> None:
        if clear not in _CLEAR_MODES:
            raise ValueError(f"clear must be 'delete' or 'reset', not {clear!r}")
        if summary_role is not None and summary_role not in _SUMMARY_ROLES:
            raise ValueError(
                f"summary_role must be 'system', 'developer', 'user' or None, not {summary_role!r}"
            )
        if compaction is not None and not isinstance(compaction, CompactionConfig):
            raise TypeError(
                f"compaction must be a CompactionConfig, not {type(compaction).__name__}"
            )
        self.session_id = session_id
        self.agent_id = normalize_agent_id(agent_id)
        self.session_key = session_key(session_id, self.agent_id)
        self.session_settings = (
            coerce_session_settings(session_settings)
            if session_settings is not None
            else SessionSettings()
        )
        self.clear_mode: ClearMode = clear
        self.summary_role: SummaryRole | None = summary_role
        self.compaction = compaction if compaction is not None else DEFAULT_COMPACTION
        self._summarizer = summarizer
        self._lease = StorageLease(storage)
        self._manager: SessionManager | None = None

    async def manager(self) -> SessionManager:
        """The :class:`SessionManager` this session writes through (its store connected):
        for what the SDK has no call for (search, branch, state, the CLI's reads)."""
        storage = await self._lease.storage()
        manager = self._manager
        if manager is None or manager.storage is not storage:
            manager = self._manager = SessionManager(
                storage, inject_time_prefix=False, summarizer=self._summarizer
            )
        return manager

    # -- the SDK's session protocol ------------------------------------------------------

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """The items, oldest first; with ``limit`` (else ``session_settings.limit``) the
        newest ``limit`` of them (0: none; negative: all, as ``SQLiteSession``). After a
        compaction the latest summary leads as one message of ``summary_role``, counted
        as the oldest item (so a ``limit`` that reaches back past the live items gets it)."""
        manager = await self.manager()
        wanted = resolve_session_limit(limit, self.session_settings)
        if wanted is not None and wanted < 0:
            wanted = None
        if wanted == 0:
            return []
        try:
            read = await self._lines(manager, wanted, metadata_only=True)
            items = [item for line in read.lines if (item := to_item(line)) is not None]
            if len(items) < len(read.lines):
                # A row without an item (written by other code): read the rows' own fields.
                read = await self._lines(manager, wanted, metadata_only=False)
                items = [item for line in read.lines if (item := to_item(line)) is not None]
        except SessionNotFoundError:
            return []
        summary = read.summary
        if (
            summary is not None
            and summary.summary_text
            and (wanted is None or len(read.lines) < wanted)
        ):
            text = format_compaction_summary_context([summary.summary_text])
            items.insert(0, {"role": self.summary_role, "content": text})
        return cast(list[TResponseInputItem], items)

    async def _lines(
        self, manager: SessionManager, wanted: int | None, *, metadata_only: bool
    ) -> TranscriptLines:
        """The rows and the latest summary as of one moment (a compaction committing
        meanwhile shows whole, its summary and the rows it left, or not at all)."""
        return await manager.get_transcript_lines(
            self.session_key,
            wanted,
            summary=self.summary_role is not None,
            metadata_only=metadata_only,
        )

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Append ``items`` in order, all or nothing, in one transaction (the session is
        created on the first add); a failure or a cancellation leaves none of them."""
        if not items:
            await self._lease.storage()  # a closed session still refuses
            return
        messages = [to_message(cast(Any, item)) for item in items]
        manager = await self.manager()
        try:
            await manager.append_messages(self.session_key, messages)
        except SessionNotFoundError:
            await manager.get_or_create(self.session_key, agent_id=self.agent_id)
            await manager.append_messages(self.session_key, messages)

    async def pop_item(self) -> TResponseInputItem | None:
        """Remove the newest item and return it, atomically; ``None`` when there is none
        (the summary item of a compaction is never popped: it is not stored as an item)."""
        manager = await self.manager()
        while True:
            entry = await manager.pop_message(self.session_key)
            if entry is None:
                return None
            item = to_item(entry)
            if item is not None:
                return cast(TResponseInputItem, item)

    async def clear_session(self) -> None:
        """``clear="delete"``: delete the session and every row under its key;
        ``"reset"``: start a new generation (the old one archived, and fenced so that a
        writer still holding it cannot write into the new one)."""
        manager = await self.manager()
        if self.clear_mode == "delete":
            await manager.delete(self.session_key)
            return
        try:
            await manager.reset(self.session_key)
        except SessionNotFoundError:
            return

    # -- what the store adds ---------------------------------------------------------------

    async def needs_compaction(self, context_window_tokens: int) -> CompactionDecision:
        """What :meth:`compact` would decide now, without running it (one read)."""
        manager = await self.manager()
        return await manager.needs_compaction(
            self.session_key, context_window_tokens, self.compaction
        )

    async def compact(
        self, context_window_tokens: int, *, custom_instructions: str | None = None
    ) -> CompactionResult:
        """Fold the oldest items into a summary when they pass the window
        (``SessionManager.compact_with_result`` with :attr:`compaction`): they move to the
        compacted archive, kept; later ``get_items`` start with the summary."""
        manager = await self.manager()
        return await manager.compact_with_result(
            self.session_key, context_window_tokens, self.compaction, custom_instructions
        )

    async def close(self) -> None:
        """Release the store (a DSN's shared store closes with its last session); later
        calls raise ``RuntimeError``. Idempotent."""
        self._manager = None
        await self._lease.release()
