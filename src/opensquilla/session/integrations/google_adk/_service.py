"""``OpenSquillaSessionService``: a Google ADK session service over this store.

See docs/integrations-google-adk.md for the behaviour, call by call, and where it differs
from ADK's own services.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

from google.adk.errors.already_exists_error import AlreadyExistsError
from google.adk.errors.session_not_found_error import SessionNotFoundError as AdkNotFound
from google.adk.events import Event
from google.adk.platform import time as platform_time
from google.adk.platform import uuid as platform_uuid
from google.adk.sessions import _session_util
from google.adk.sessions.base_session_service import (
    BaseSessionService,
    GetSessionConfig,
    ListSessionsResponse,
)
from google.adk.sessions.session import Session
from google.adk.sessions.state import State
from typing_extensions import override

from ...errors import SessionExistsError, SessionNotFoundError, StaleStateError
from ...manager import SessionManager
from ...models import SessionListCursor, SessionState, TranscriptEntry
from ...models.state import check_state_change
from ...storage import SessionStorage
from .._shared import ClosesOnExit, StorageLease
from . import _keys
from ._errors import StaleSessionError, stale_session
from ._events import compaction_event, entry_event, event_message

LIST_PAGE_SIZE = 500


def _merged(
    session_state: dict[str, Any], app: dict[str, Any], user: dict[str, Any]
) -> dict[str, Any]:
    """The state as ADK's services return it: the session's keys, then ``app:`` and
    ``user:`` keys."""
    merged = dict(session_state)
    for key, value in app.items():
        merged[State.APP_PREFIX + key] = value
    for key, value in user.items():
        merged[State.USER_PREFIX + key] = value
    return merged


def _seconds(state: SessionState, fallback_ms: int | None = None) -> float:
    millis = state.updated_at if state.updated_at is not None else fallback_ms
    return millis / 1000 if millis is not None else 0.0


class OpenSquillaSessionService(ClosesOnExit, BaseSessionService):
    """A ``BaseSessionService`` on an opensquilla session store.

    ``storage`` is a connected or unconnected :class:`~opensquilla.session.SessionStorage`
    (yours: never closed here) or a DSN (a SQLite path, ``":memory:"`` or a PostgreSQL URL:
    the service leases the process's one store for it and :meth:`close` releases it).
    ``agent_id`` is the first segment of every key (docs: the key scheme).
    ``compaction_summary``: after a compaction folded older events, :meth:`get_session`
    starts its events with one ADK compaction event holding the summary.
    """

    def __init__(
        self,
        storage: SessionStorage | str,
        *,
        agent_id: str = "main",
        compaction_summary: bool = True,
    ) -> None:
        self._lease = StorageLease(storage)
        self._agent_id = agent_id
        self._compaction_summary = compaction_summary
        self._manager: SessionManager | None = None
        self._locks: dict[tuple[int, str], tuple[asyncio.Lock, list[int]]] = {}

    # -- plumbing -----------------------------------------------------------------------

    async def manager(self) -> SessionManager:
        """The :class:`SessionManager` the service writes through (the store connected):
        compaction, search, reset, forks and the rest by :meth:`session_key`."""
        storage = await self._lease.storage()
        if self._manager is None:
            self._manager = SessionManager(storage, inject_time_prefix=False)
        return self._manager

    def session_key(self, *, app_name: str, user_id: str, session_id: str) -> str:
        """The store's key of an ADK session (reversible: :func:`parse_session_key`)."""
        return _keys.session_key(self._agent_id, app_name, user_id, session_id)

    async def close(self) -> None:
        """Release the store when the service leased it from a DSN (yours stays open)."""
        await self._lease.release()

    @contextlib.asynccontextmanager
    async def _serialized(self, key: str) -> AsyncIterator[None]:
        """One ``append_event`` of a session at a time in this process and loop (as
        ``DatabaseSessionService``): two tasks appending through one session object both
        succeed, in turn, instead of one being refused as stale."""
        slot = (id(asyncio.get_running_loop()), key)
        held = self._locks.get(slot)
        if held is None:
            held = self._locks[slot] = (asyncio.Lock(), [0])
        held[1][0] += 1
        try:
            async with held[0]:
                yield
        finally:
            held[1][0] -= 1
            if held[1][0] == 0 and self._locks.get(slot) is held:
                del self._locks[slot]

    async def _scoped(
        self, manager: SessionManager, app_name: str, user_id: str
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        app = await manager.get_scope_state("app", _keys.app_scope_id(self._agent_id, app_name))
        user = await manager.get_scope_state(
            "user", _keys.user_scope_id(self._agent_id, app_name, user_id)
        )
        return app.state, user.state

    async def _write_scoped(
        self, manager: SessionManager, app_name: str, user_id: str, deltas: dict[str, Any]
    ) -> None:
        if deltas["app"]:
            scope_id = _keys.app_scope_id(self._agent_id, app_name)
            await manager.update_scope_state("app", scope_id, deltas["app"])
        if deltas["user"]:
            scope_id = _keys.user_scope_id(self._agent_id, app_name, user_id)
            await manager.update_scope_state("user", scope_id, deltas["user"])

    # -- BaseSessionService -------------------------------------------------------------

    @override
    async def create_session(
        self,
        *,
        app_name: str,
        user_id: str,
        state: dict[str, Any] | None = None,
        session_id: str | None = None,
    ) -> Session:
        if session_id is None or session_id == "":
            session_id = platform_uuid.new_uuid()
        key = self.session_key(app_name=app_name, user_id=user_id, session_id=session_id)
        deltas = _session_util.extract_json_safe_state_delta(state or {})
        for part in ("session", "app", "user"):  # refused before anything is written
            check_state_change(deltas[part], (), None)
        manager = await self.manager()
        try:
            await manager.create(key, agent_id=self._agent_id)
        except SessionExistsError as exc:
            raise AlreadyExistsError(f"Session with id {session_id} already exists.") from exc
        revision = await manager.update_state(key, deltas["session"], expected_revision=0)
        await self._write_scoped(manager, app_name, user_id, deltas)
        app, user = await self._scoped(manager, app_name, user_id)
        session = Session(
            id=session_id,
            app_name=app_name,
            user_id=user_id,
            state=_merged(deltas["session"], app, user),
            events=[],
            last_update_time=platform_time.get_time(),
        )
        session._storage_update_marker = str(revision)
        return session

    @override
    async def get_session(
        self,
        *,
        app_name: str,
        user_id: str,
        session_id: str,
        config: GetSessionConfig | None = None,
    ) -> Session | None:
        key = self.session_key(app_name=app_name, user_id=user_id, session_id=session_id)
        manager = await self.manager()
        try:
            # The revision first: an append that lands between this read and the events'
            # makes the object stale (refused later), never silently behind.
            stored = await manager.get_state(key)
            events = await self._events(manager, key, config)
        except SessionNotFoundError:  # missing, or deleted meanwhile
            return None
        app, user = await self._scoped(manager, app_name, user_id)
        session = Session(
            id=session_id,
            app_name=app_name,
            user_id=user_id,
            state=_merged(stored.state, app, user),
            events=events,
            last_update_time=_seconds(stored),
        )
        session._storage_update_marker = str(stored.revision)
        return session

    async def _events(
        self, manager: SessionManager, key: str, config: GetSessionConfig | None
    ) -> list[Event]:
        limit = config.num_recent_events if config is not None else None
        after = config.after_timestamp if config is not None else None
        if limit == 0:
            return []
        entries: list[TranscriptEntry]
        if limit is not None and not after:
            entries = await manager.get_recent_transcript(key, limit)
        else:
            entries = await manager.get_transcript(key)
        events = [event for event in map(entry_event, entries) if event is not None]
        # Truncated: older live events exist that the answer leaves out.
        truncated = limit is not None and not after and len(entries) >= limit
        if after:
            kept = [event for event in events if event.timestamp >= after]
            truncated, events = len(kept) < len(events), kept
        if limit is not None and len(events) > limit:
            truncated, events = True, events[len(events) - limit :]
        if self._compaction_summary and not truncated and (limit is None or len(events) < limit):
            summary = await manager.get_latest_summary(key)
            if summary is not None:
                events.insert(0, compaction_event(summary, events[0] if events else None))
        return events

    @override
    async def list_sessions(
        self, *, app_name: str, user_id: str | None = None
    ) -> ListSessionsResponse:
        if user_id is None:
            prefix = _keys.app_prefix(self._agent_id, app_name)
        else:
            prefix = _keys.user_prefix(self._agent_id, app_name, user_id)
        manager = await self.manager()
        app = (
            await manager.get_scope_state("app", _keys.app_scope_id(self._agent_id, app_name))
        ).state
        users: dict[str, dict[str, Any]] = {}
        sessions: list[Session] = []
        cursor: SessionListCursor | None = None
        while True:
            page = await manager.list_sessions_page(
                limit=LIST_PAGE_SIZE, cursor=cursor, key_prefix=prefix
            )
            for node in page.sessions:
                try:
                    address = _keys.parse_session_key(node.session_key)
                    stored = await manager.get_state(node.session_key)
                except (ValueError, SessionNotFoundError):
                    continue  # not a key of ours, or deleted meanwhile
                user = users.get(address.user_id)
                if user is None:
                    scope_id = _keys.user_scope_id(self._agent_id, app_name, address.user_id)
                    user = users[address.user_id] = (
                        await manager.get_scope_state("user", scope_id)
                    ).state
                sessions.append(
                    Session(
                        id=address.session_id,
                        app_name=app_name,
                        user_id=address.user_id,
                        state=_merged(stored.state, app, user),
                        events=[],
                        last_update_time=_seconds(stored, node.updated_at),
                    )
                )
            if page.next_cursor is None:
                break
            cursor = page.next_cursor
        sessions.sort(key=lambda s: (s.last_update_time, s.user_id, s.id))
        return ListSessionsResponse(sessions=sessions)

    @override
    async def delete_session(self, *, app_name: str, user_id: str, session_id: str) -> None:
        key = self.session_key(app_name=app_name, user_id=user_id, session_id=session_id)
        await (await self.manager()).delete(key)

    @override
    async def get_user_state(self, *, app_name: str, user_id: str) -> dict[str, Any]:
        manager = await self.manager()
        scope_id = _keys.user_scope_id(self._agent_id, app_name, user_id)
        return dict((await manager.get_scope_state("user", scope_id)).state)

    @override
    async def append_event(self, session: Session, event: Event) -> Event:
        if event.partial:
            return event
        self._apply_temp_state(session, event)
        event = self._trim_temp_delta_state(event)
        deltas = _session_util.extract_json_safe_state_delta(event.actions.state_delta or {})
        key = self.session_key(
            app_name=session.app_name, user_id=session.user_id, session_id=session.id
        )
        role, content, fields = event_message(event)
        manager = await self.manager()
        async with self._serialized(key):
            expected = await self._expected_revision(manager, key, session)
            try:
                # The compare-and-set first: a stale object writes nothing at all.
                revision = await manager.update_state(
                    key, deltas["session"], expected_revision=expected
                )
            except StaleStateError as exc:
                raise stale_session() from exc
            except SessionNotFoundError as exc:
                raise AdkNotFound(f"Session {session.id} not found.") from exc
            # Failing here leaves the object at its old revision: stale, so reloaded.
            await manager.append_message(key, role, content, **fields)
            await self._write_scoped(manager, session.app_name, session.user_id, deltas)
            session._storage_update_marker = str(revision)
            session.last_update_time = event.timestamp
        return self._commit_event_to_session(session, event)

    async def _expected_revision(self, manager: SessionManager, key: str, session: Session) -> int:
        marker = session._storage_update_marker
        if marker is not None:
            try:
                return int(marker)
            except ValueError:
                pass  # another service's marker: check as a marker-less object
        try:
            stored = await manager.get_state(key)
        except SessionNotFoundError as exc:
            raise AdkNotFound(f"Session {session.id} not found.") from exc
        # A session object of ADK's own making (no marker): stale when the store moved
        # after its last update time, as DatabaseSessionService's fallback decides.
        if stored.updated_at is not None and stored.updated_at > session.last_update_time * 1000:
            raise stale_session()
        return stored.revision


__all__ = ["OpenSquillaSessionService", "StaleSessionError"]
