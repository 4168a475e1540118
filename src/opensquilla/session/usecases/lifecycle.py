"""Session lifecycle: create, get-or-create, intents, update, resume, finish.

The rules for which fields a caller may set live here (docs/semantics.md#keys): identity,
fencing and bookkeeping fields belong to the store; enum-valued fields are checked on
every write; every value is checked in its column's domain by the models before any write.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Any, TypeVar

from ..errors import (
    InvalidInputError,
    ProtectedFieldError,
    SessionExistsError,
    SessionKeyConflictError,
)
from ..keys import canonicalize_session_key, normalize_agent_id, require_session_key
from ..models import ChatType, QueueMode, SendPolicy, SessionIntent, SessionNode, SessionStatus
from ..storage import SessionStorage
from ..support.clock import now_ms
from .generations import GenerationCache
from .reset import Resets

# Fields only the store changes: identity, fencing, bookkeeping.
PROTECTED_FIELDS = frozenset(
    {
        "session_key",
        "session_id",
        "epoch",
        "created_at",
        "updated_at",
        "compaction_count",
        "schema_version",
    }
)
# Of those, a new session may be given only its session id (checked to be free: see
# ``SessionStorage.create_session``); epoch, timestamps, counters and the schema version
# start where the store starts them, exactly as update() refuses to change them.
CREATE_PROTECTED_FIELDS = PROTECTED_FIELDS - {"session_key", "session_id"}
SESSION_FIELDS = frozenset(SessionNode.model_fields)

E = TypeVar("E", bound=StrEnum)

# Session fields whose values are an enum's (docs/semantics.md#values): checked on every write.
ENUM_FIELDS: dict[str, type[StrEnum]] = {
    "status": SessionStatus,
    "chat_type": ChatType,
    "queue_mode": QueueMode,
    "send_policy": SendPolicy,
}


def member(kind: type[E], value: object) -> E:
    """``kind(value)``, refused as an ``InvalidInputError`` (still a ``ValueError``)."""
    if isinstance(value, kind):
        return value
    try:
        return kind(str(value))
    except ValueError:
        raise InvalidInputError(f"{value!r} is not a valid {kind.__name__}") from None


def check_agent_id(agent_id: object) -> None:
    if agent_id is not None and not isinstance(agent_id, str):
        raise InvalidInputError(f"agent_id must be a string or None, not {type(agent_id).__name__}")


def _check_enum_fields(fields: Mapping[str, Any]) -> None:
    for name, kind in ENUM_FIELDS.items():
        if name in fields:
            member(kind, fields[name])


def _check_field_names(fields: Mapping[str, Any]) -> None:
    unknown = set(fields) - SESSION_FIELDS
    if unknown:
        raise InvalidInputError(f"unknown session field(s): {', '.join(sorted(unknown))}")


def new_node(session_key: str, agent_id: str | None, fields: Mapping[str, Any]) -> SessionNode:
    """The row a new session starts with; refuses fields the store sets itself."""
    key = require_session_key(session_key)
    check_agent_id(agent_id)
    _check_field_names(fields)
    if "session_key" in fields:
        raise ProtectedFieldError("session_key is given as the first argument")
    protected = set(fields) & CREATE_PROTECTED_FIELDS
    if protected:
        raise ProtectedFieldError(
            f"field(s) {', '.join(sorted(protected))} of a new session are set by the "
            "store itself (epoch 0, the creation time, zero counters); create() takes "
            "session_id and the mutable fields"
        )
    _check_enum_fields(fields)
    now = now_ms()
    values: dict[str, Any] = {
        "created_at": now,
        "updated_at": now,
        "started_at": now,
        "status": SessionStatus.RUNNING.value,
        **fields,
        "session_key": key,
        "agent_id": normalize_agent_id(agent_id),
    }
    return SessionNode(**values)  # InvalidInputError names any value out of its domain


class Lifecycle:
    """Creating, finding and changing session rows."""

    def __init__(
        self, storage: SessionStorage, generations: GenerationCache, resets: Resets
    ) -> None:
        self._storage = storage
        self._generations = generations
        self._resets = resets

    async def create(
        self, session_key: str, agent_id: str, fields: Mapping[str, Any]
    ) -> SessionNode:
        node = new_node(session_key, agent_id, fields)
        if not await self._storage.create_session(node):
            raise SessionExistsError(f"Session already exists: {node.session_key}")
        return self._generations.remember(node)

    async def get(self, session_key: str) -> SessionNode | None:
        node = await self._storage.get_session(session_key)
        return self._generations.remember(node) if node is not None else None

    async def get_or_create(
        self, session_key: str, agent_id: str, fields: Mapping[str, Any]
    ) -> tuple[SessionNode, bool]:
        node = new_node(session_key, agent_id, fields)
        while True:
            existing = await self._storage.get_session(node.session_key)
            if existing is not None:
                return self._generations.remember(existing), False
            if await self._storage.create_session(node):
                return self._generations.remember(node), True

    async def apply_intent(
        self,
        session_key: str,
        intent: SessionIntent | str,
        agent_id: str,
        fields: Mapping[str, Any],
    ) -> tuple[SessionNode, bool]:
        intent = member(SessionIntent, intent)
        node, created = await self.get_or_create(session_key, agent_id, fields)
        if created:
            return node, True
        if intent is SessionIntent.NEW_CHAT:
            raise SessionKeyConflictError(f"session_key conflict: {node.session_key}")
        if intent is SessionIntent.RESET_SAME_KEY:
            return (await self._resets.reset(node.session_key)).session, True
        return node, False

    async def resume(self, session_key: str) -> SessionNode:
        key = canonicalize_session_key(session_key)
        return await self._storage.update_session_fields(key, {"updated_at": now_ms()})

    async def update(self, session_key: str, fields: Mapping[str, Any]) -> SessionNode:
        key = canonicalize_session_key(session_key)
        _check_field_names(fields)
        protected = set(fields) & PROTECTED_FIELDS
        if protected:
            raise ProtectedFieldError(
                f"field(s) {', '.join(sorted(protected))} of {key} can only be changed by the "
                "store itself (reset, compaction, create)"
            )
        _check_enum_fields(fields)
        validated = SessionNode(session_key=key, **fields)  # each value checked in its domain
        values: dict[str, Any] = {name: getattr(validated, name) for name in fields}
        if "agent_id" in values:
            values["agent_id"] = normalize_agent_id(values["agent_id"])
        for lineage in ("parent_session_key", "spawned_by"):
            if values.get(lineage):
                values[lineage] = canonicalize_session_key(values[lineage])
        values["updated_at"] = now_ms()
        return await self._storage.update_session_fields(key, values)

    async def finish(self, session_key: str, status: SessionStatus | str) -> SessionNode:
        value = member(SessionStatus, status).value
        return await self._storage.finish_session(session_key, value, now_ms())
