"""Session rows: the front door of whole-row writes, reads, counts and narrow updates;
each method checks and canonicalises its arguments, then calls one use case
(``usecases/sessions.py``), which opens one unit of work."""

from __future__ import annotations

from ..db.lifecycle import StorageLifecycle
from ..errors import InvalidInputError
from ..keys import (
    MAX_SESSION_KEY_LENGTH,
    canonicalize_key_prefix,
    canonicalize_session_key,
    normalize_agent_id,
)
from ..models import (
    INT64_MAX,
    INT64_MIN,
    SessionListCursor,
    SessionListFilter,
    SessionListPage,
    SessionNode,
    check_integer,
    check_optional_text,
    check_page,
    check_record,
    check_session_values,
    check_text,
)
from ..usecases import sessions


def listing_filter(
    agent_id: str | None = None,
    status: str | None = None,
    spawned_by: str | None = None,
    parent_session_key: str | None = None,
    key_prefix: str | None = None,
) -> SessionListFilter:
    """The listing's filters in canonical form (docs/semantics.md#keys); ``key_prefix``
    checked as a key's text is (a ``str``, no NUL or surrogate, at most a key's length)."""
    prefix = check_optional_text(
        "key_prefix", key_prefix, identifier=True, max_length=MAX_SESSION_KEY_LENGTH
    )
    return SessionListFilter(
        agent_id=normalize_agent_id(agent_id) if agent_id is not None else None,
        status=str(status) if status is not None else None,
        spawned_by=canonicalize_session_key(spawned_by) if spawned_by is not None else None,
        parent_session_key=(
            canonicalize_session_key(parent_session_key) if parent_session_key is not None else None
        ),
        key_prefix=canonicalize_key_prefix(prefix) if prefix else None,
    )


class SessionRowOperations(StorageLifecycle):
    """The ``sessions`` table, one unit of work per call."""

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
        if expected_session_id is None:
            await sessions.upsert(self.uow, self.canonical_node(node))
        else:
            expected = check_text(
                "expected_session_id", expected_session_id, identifier=True, non_empty=True
            )
            await sessions.upsert_generation(self.uow, self.canonical_node(node), expected)

    async def create_session(self, node: SessionNode) -> bool:
        """Insert a new row; ``False`` when the key exists (nothing is changed then).

        A session id that another key already holds is refused (``SessionIdInUseError``)
        before anything is written.
        """
        check_record("node", node, SessionNode)
        return await sessions.create(self.uow, self.canonical_node(node))

    async def get_session(self, session_key: str) -> SessionNode | None:
        return await sessions.get(self.uow, canonicalize_session_key(session_key))

    async def list_sessions(
        self,
        agent_id: str | None = None,
        status: str | None = None,
        limit: int | None = 100,
        offset: int = 0,
        spawned_by: str | None = None,
        *,
        parent_session_key: str | None = None,
        key_prefix: str | None = None,
    ) -> list[SessionNode]:
        """Sessions by recent activity (``updated_at`` then key, both descending); with
        ``key_prefix``, those whose key starts with it (docs/semantics.md#key-prefix)."""
        check_page(limit, offset)
        filters = listing_filter(agent_id, status, spawned_by, parent_session_key, key_prefix)
        return await sessions.listing(self.uow, limit, offset, **filters)

    async def list_sessions_page(
        self,
        *,
        limit: int,
        cursor: SessionListCursor | None = None,
        agent_id: str | None = None,
        status: str | None = None,
        key_prefix: str | None = None,
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
        filters = listing_filter(agent_id, status, key_prefix=key_prefix)
        return await sessions.listing_page(self.uow, max(1, limit), cursor, **filters)

    async def count_sessions(self) -> int:
        return await sessions.count(self.uow)

    async def delete_session(self, session_key: str) -> bool:
        """Delete the session and every row it owns; ``False`` when there was none."""
        return await sessions.delete(self.uow, canonicalize_session_key(session_key))

    async def get_epoch(self, session_key: str) -> int:
        return await sessions.epoch(self.uow, canonicalize_session_key(session_key))

    async def increment_epoch(self, session_key: str) -> int:
        return await sessions.increment_epoch(self.uow, canonicalize_session_key(session_key))

    async def update_session_fields(
        self, session_key: str, values: dict[str, object]
    ) -> SessionNode:
        """Set only these columns (one statement, no read-modify-write); the new row."""
        key = canonicalize_session_key(session_key)
        checked = check_session_values(values)  # each value in its field's domain
        return await sessions.update_fields(self.uow, key, checked)

    async def finish_session(self, session_key: str, status: str, now: int) -> SessionNode:
        key = canonicalize_session_key(session_key)
        checked = check_session_values({"status": status, "ended_at": now})["status"]
        return await sessions.finish(self.uow, key, checked, now)
