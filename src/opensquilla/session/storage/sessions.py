"""Session rows: whole-row writes, reads, counts, narrow updates."""

from __future__ import annotations

from ..db.generations import GenerationRace, generation_guard
from ..errors import (
    InvalidInputError,
    SessionGenerationChangedError,
    SessionNotFoundError,
    StaleGenerationError,
)
from ..keys import canonicalize_session_key, normalize_agent_id
from ..models import (
    INT64_MAX,
    INT64_MIN,
    SessionListCursor,
    SessionListPage,
    SessionNode,
    check_integer,
    check_optional_text,
    check_page,
    check_record,
    check_session_values,
    check_text,
)
from .lifecycle import StorageLifecycle


class SessionRowOperations(StorageLifecycle):
    """The ``sessions`` table, one unit of work per call."""

    # -- sessions ----------------------------------------------------------------------

    @staticmethod
    def canonical_node(node: SessionNode) -> SessionNode:
        """``node`` with its key and agent id in canonical form (docs/semantics.md#keys)."""
        node.session_key = canonicalize_session_key(node.session_key)
        node.agent_id = normalize_agent_id(node.agent_id)
        return node

    async def upsert_session(
        self, node: SessionNode, *, expected_session_id: str | None = None
    ) -> None:
        """Write the whole row; refused (``StaleGenerationError``) for an older generation,
        and (``SessionIdInUseError``) for a session id another key holds.

        With ``expected_session_id`` the write is generation-checked (upstream HEAD): it
        updates the row only while the key still holds that generation, and never creates
        one. A node of another generation, a missing row or a row of another generation
        (a reset, a delete and re-create meanwhile) raise ``SessionGenerationChangedError``
        (a ``KeyError``: ``Session generation changed: <key>``); nothing is written."""
        check_record("node", node, SessionNode)
        if expected_session_id is not None:
            expected = check_text(
                "expected_session_id", expected_session_id, identifier=True, non_empty=True
            )
            await self._upsert_generation(self.canonical_node(node), expected)
            return
        self.canonical_node(node)
        async with (
            generation_guard(self.uow, node.session_id, node.session_key),
            self.uow.write() as tx,
        ):
            await tx.sessions.claim_generation(node.session_id, node.session_key)
            await tx.sessions.upsert(node)

    async def _upsert_generation(self, node: SessionNode, expected: str) -> None:
        changed = SessionGenerationChangedError(f"Session generation changed: {node.session_key}")
        if node.session_id != expected:
            raise changed
        async with self.uow.write() as tx:
            if await tx.sessions.update_generation(node, expected):
                return
            stored = await tx.sessions.get(node.session_key)
        if stored is None or stored.session_id != expected:
            raise changed
        raise StaleGenerationError(
            f"Stale write for {node.session_key}: the node is at epoch {node.epoch}, the "
            f"stored generation {expected} at epoch {stored.epoch}"
        )

    async def create_session(self, node: SessionNode) -> bool:
        """Insert a new row; ``False`` when the key exists (nothing is changed then).

        A session id that another key already holds is refused (``SessionIdInUseError``)
        before anything is written.
        """
        check_record("node", node, SessionNode)
        self.canonical_node(node)
        try:
            async with (
                generation_guard(self.uow, node.session_id, node.session_key, creating=True),
                self.uow.write() as tx,
            ):
                await tx.sessions.claim_generation(node.session_id, node.session_key)
                return await tx.sessions.insert_new(node)
        except GenerationRace:
            return False  # the same key and id, created concurrently: the key is taken

    async def get_session(self, session_key: str) -> SessionNode | None:
        key = canonicalize_session_key(session_key)
        async with self.uow.read() as tx:
            return await tx.sessions.get(key)

    async def list_sessions(
        self,
        agent_id: str | None = None,
        status: str | None = None,
        limit: int | None = 100,
        offset: int = 0,
        spawned_by: str | None = None,
        *,
        parent_session_key: str | None = None,
    ) -> list[SessionNode]:
        """Sessions by recent activity (``updated_at`` then key, both descending)."""
        check_page(limit, offset)
        async with self.uow.read() as tx:
            return await tx.sessions.list_sessions(
                agent_id=normalize_agent_id(agent_id) if agent_id is not None else None,
                status=str(status) if status is not None else None,
                spawned_by=(
                    canonicalize_session_key(spawned_by) if spawned_by is not None else None
                ),
                parent_session_key=(
                    canonicalize_session_key(parent_session_key)
                    if parent_session_key is not None
                    else None
                ),
                limit=limit,
                offset=offset,
            )

    async def list_sessions_page(
        self,
        *,
        limit: int,
        cursor: SessionListCursor | None = None,
        agent_id: str | None = None,
        status: str | None = None,
    ) -> SessionListPage:
        """One keyset page of the listing (``updated_at`` then key, both descending):
        ``max(1, limit)`` sessions strictly after ``cursor`` (from the start without one).
        Sessions inserted ahead of the cursor during a walk are not seen, deleted ones are
        skipped, none is repeated (docs/semantics.md#listing)."""
        check_integer("limit", limit, minimum=INT64_MIN, maximum=INT64_MAX - 1)
        if cursor is not None and not isinstance(cursor, SessionListCursor):
            raise InvalidInputError(
                f"cursor must be a SessionListCursor or None, not {type(cursor).__name__}"
            )
        check_optional_text("agent_id", agent_id)
        check_optional_text("status", status)
        page_size = max(1, limit)
        async with self.uow.read() as tx:
            nodes = await tx.sessions.list_page(
                after=(cursor.updated_at, cursor.session_key) if cursor is not None else None,
                agent_id=normalize_agent_id(agent_id) if agent_id is not None else None,
                status=str(status) if status is not None else None,
                limit=page_size + 1,
            )
        has_more = len(nodes) > page_size
        del nodes[page_size:]
        next_cursor = SessionListCursor.of(nodes[-1]) if has_more else None
        return SessionListPage(sessions=nodes, next_cursor=next_cursor, has_more=has_more)

    async def count_sessions(self) -> int:
        async with self.uow.read() as tx:
            return await tx.sessions.count()

    async def delete_session(self, session_key: str) -> bool:
        """Delete the session and every row it owns; ``False`` when there was none."""
        key = canonicalize_session_key(session_key)
        async with self.uow.write() as tx:
            return bool(await tx.sessions.delete_cascade([key]))

    async def get_epoch(self, session_key: str) -> int:
        key = canonicalize_session_key(session_key)
        async with self.uow.read() as tx:
            epoch = await tx.sessions.get_epoch(key)
        return epoch if epoch is not None else 0

    async def increment_epoch(self, session_key: str) -> int:
        key = canonicalize_session_key(session_key)
        async with self.uow.write() as tx:
            epoch = await tx.sessions.increment_epoch(key)
        if epoch is None:
            raise SessionNotFoundError(f"Session not found: {key}")
        return epoch

    async def update_session_fields(
        self, session_key: str, values: dict[str, object]
    ) -> SessionNode:
        """Set only these columns (one statement, no read-modify-write); the new row."""
        key = canonicalize_session_key(session_key)
        values = check_session_values(values)  # each value in its field's domain
        new_id = values.get("session_id")
        async with generation_guard(self.uow, new_id, key), self.uow.write() as tx:
            if isinstance(new_id, str):
                await tx.sessions.claim_generation(new_id, key)
            node = await tx.sessions.update_fields(key, dict(values))
        if node is None:
            raise SessionNotFoundError(f"Session not found: {key}")
        return node

    async def finish_session(self, session_key: str, status: str, now: int) -> SessionNode:
        key = canonicalize_session_key(session_key)
        status = check_session_values({"status": status, "ended_at": now})["status"]
        async with self.uow.write() as tx:
            node = await tx.sessions.finish(key, status, now)
        if node is None:
            raise SessionNotFoundError(f"Session not found: {key}")
        return node
