"""Session lifecycle: create, get-or-create, intents, update, resume, finish.

The manager's session calls: each checks its arguments here (the manager's front-door
checks), then runs the session-row use cases of ``sessions.py`` on the unit of work it is
given: one unit per call (``get_or_create`` and ``apply_intent`` on a missing key: a read,
then the create; ``RESET_SAME_KEY`` on an existing key: the read, then the reset).

The rules for which fields a caller may set live here (docs/semantics.md#keys): identity,
fencing and bookkeeping fields belong to the store; enum-valued fields are checked on
every write; every value is checked in its column's domain by the models before any write.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Any, TypeVar

from ..db.uow import UnitOfWork
from ..errors import (
    InvalidInputError,
    ProtectedFieldError,
    SessionExistsError,
    SessionKeyConflictError,
)
from ..keys import CanonicalKey, canonicalize_session_key, normalize_agent_id, require_session_key
from ..models import (
    ChatType,
    QueueMode,
    SendPolicy,
    SessionIntent,
    SessionNode,
    SessionStatus,
)
from ..models.reports import ResetReport
from ..support.clock import now_ms
from . import sessions
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
    """Creating, finding and changing session rows, remembered in the generation cache."""

    def __init__(self, generations: GenerationCache, resets: Resets) -> None:
        self._generations = generations
        self._resets = resets

    async def create(
        self, uow: UnitOfWork, session_key: str, agent_id: str, fields: Mapping[str, Any]
    ) -> SessionNode:
        node = new_node(session_key, agent_id, fields)
        if not await sessions.create(uow, node):
            raise SessionExistsError(f"Session already exists: {node.session_key}")
        return self._generations.remember(node)

    async def get(self, uow: UnitOfWork, session_key: str) -> SessionNode | None:
        node = await sessions.get(uow, canonicalize_session_key(session_key))
        return self._generations.remember(node) if node is not None else None

    async def get_or_create(
        self, uow: UnitOfWork, session_key: str, agent_id: str, fields: Mapping[str, Any]
    ) -> tuple[SessionNode, bool]:
        return await self._get_or_create(uow, new_node(session_key, agent_id, fields))

    async def _get_or_create(self, uow: UnitOfWork, node: SessionNode) -> tuple[SessionNode, bool]:
        key = CanonicalKey(node.session_key)
        while True:
            existing = await sessions.get(uow, key)
            if existing is not None:
                return self._generations.remember(existing), False
            if await sessions.create(uow, node):
                return self._generations.remember(node), True

    async def apply_intent(
        self,
        uow: UnitOfWork,
        session_key: str,
        intent: SessionIntent | str,
        agent_id: str,
        fields: Mapping[str, Any],
    ) -> tuple[SessionNode, bool]:
        intent = member(SessionIntent, intent)
        node, created = await self._get_or_create(uow, new_node(session_key, agent_id, fields))
        if created:
            return node, True
        if intent is SessionIntent.NEW_CHAT:
            raise SessionKeyConflictError(f"session_key conflict: {node.session_key}")
        if intent is SessionIntent.RESET_SAME_KEY:
            return (await self._resets.reset(uow, CanonicalKey(node.session_key))).session, True
        return node, False

    async def reset(self, uow: UnitOfWork, session_key: str) -> ResetReport:
        return await self._resets.reset(uow, canonicalize_session_key(session_key))

    async def resume(self, uow: UnitOfWork, session_key: str) -> SessionNode:
        key = canonicalize_session_key(session_key)
        return await sessions.update_fields(uow, key, {"updated_at": now_ms()})

    async def update(
        self, uow: UnitOfWork, session_key: str, fields: Mapping[str, Any]
    ) -> SessionNode:
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
        return await sessions.update_fields(uow, key, values)

    async def finish(
        self, uow: UnitOfWork, session_key: str, status: SessionStatus | str
    ) -> SessionNode:
        key = canonicalize_session_key(session_key)
        value = member(SessionStatus, status).value
        return await sessions.finish(uow, key, value, now_ms())
