"""Summaries and provider context states of a session key (docs/semantics.md#tables)."""

from __future__ import annotations

from ..errors import InvalidInputError
from ..keys import canonicalize_session_key
from ..models import (
    PROVIDER_MAX_LENGTH,
    STATE_KIND_MAX_LENGTH,
    SessionContextState,
    SessionSummary,
    check_flag,
    check_optional_text,
    check_text,
)
from ..storage import SessionStorage
from ..support.clock import now_ms
from .context_records import CompactionContextRecord, read_context_records
from .generations import GenerationCache
from .provider_states import latest_context_state


async def summaries(
    storage: SessionStorage, generations: GenerationCache, session_key: str
) -> list[SessionSummary]:
    """The current generation's summaries, oldest first."""
    node = await generations.require(session_key)
    return await storage.get_all_summaries(node.session_id)


async def latest_summary(
    storage: SessionStorage, generations: GenerationCache, session_key: str
) -> SessionSummary | None:
    """The current generation's newest summary, or ``None``."""
    node = await generations.require(session_key)
    return await storage.get_latest_summary(node.session_id)


async def context_records(
    storage: SessionStorage, generations: GenerationCache, session_key: str
) -> list[CompactionContextRecord]:
    """The current generation's checkpoints in force (docs/semantics.md#rolling-checkpoints),
    from one snapshot."""
    node = await generations.require(session_key)
    async with storage.uow.snapshot() as tx:
        return await read_context_records(tx, node.session_key, node.session_id, now_ms())


async def latest_state(
    storage: SessionStorage,
    generations: GenerationCache,
    session_key: str,
    provider: str | None,
    state_kind: str | None,
) -> SessionContextState | None:
    """The current generation's state to replay to ``provider``
    (:func:`provider_states.latest_context_state` over its valid states), from one snapshot."""
    check_optional_text("provider", provider)
    check_optional_text("state_kind", state_kind)
    key = canonicalize_session_key(session_key)
    async with storage.uow.snapshot() as tx:
        node = generations.found(key, await tx.sessions.get(key))
        current = await tx.states.list_for_key(
            key, state_kind=state_kind, valid_only=True, session_id=node.session_id
        )
    return latest_context_state(current, provider, state_kind=state_kind)


async def save_state(storage: SessionStorage, state: SessionContextState) -> SessionContextState:
    if not isinstance(state, SessionContextState):
        raise InvalidInputError(f"state must be a SessionContextState, not {type(state).__name__}")
    return await storage.save_context_state(state)


async def states(
    storage: SessionStorage,
    session_key: str,
    provider: str | None,
    state_kind: str | None,
    valid_only: bool,
) -> list[SessionContextState]:
    """States of the key, every generation (``[]`` for an unknown key)."""
    check_optional_text("provider", provider)
    check_optional_text("state_kind", state_kind)
    check_flag("valid_only", valid_only)
    return await storage.get_context_states(
        session_key, provider=provider, state_kind=state_kind, valid_only=valid_only
    )


async def invalidate_states(
    storage: SessionStorage,
    session_key: str,
    provider: str | None,
    state_kind: str | None,
    reason: str,
) -> int:
    check_optional_text("provider", provider, max_length=PROVIDER_MAX_LENGTH)
    check_optional_text("state_kind", state_kind, max_length=STATE_KIND_MAX_LENGTH)
    check_text("reason", reason)
    return await storage.invalidate_context_states(
        session_key, provider=provider, state_kind=state_kind, reason=reason
    )
