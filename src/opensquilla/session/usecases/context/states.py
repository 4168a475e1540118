"""Provider context states of a session key (docs/semantics.md#tables), and
the checkpoints in force: one unit of work per call, the generation looked up inside it.
Values arrive checked and keys canonical."""

from __future__ import annotations

from typing import Unpack

from ...db.uow import UnitOfWork
from ...keys import CanonicalKey
from ...models import SessionContextState
from ...models.records import ContextStateFilter, StateSelection
from ...support.clock import now_ms
from ..generations import GenerationCache
from .provider_states import latest_context_state
from .records import CompactionContextRecord, read_context_records


async def context_records(
    uow: UnitOfWork, generations: GenerationCache, key: CanonicalKey
) -> list[CompactionContextRecord]:
    """The current generation's checkpoints in force (docs/semantics.md#rolling-checkpoints),
    from one snapshot."""
    async with uow.snapshot() as tx:
        node = generations.found(key, await tx.sessions.get(key))
        return await read_context_records(tx, node.session_key, node.session_id, now_ms())


async def latest_state(
    uow: UnitOfWork,
    generations: GenerationCache,
    key: CanonicalKey,
    provider: str | None,
    state_kind: str | None,
) -> SessionContextState | None:
    """The current generation's state to replay to ``provider``
    (:func:`provider_states.latest_context_state` over its valid states), from one snapshot."""
    async with uow.snapshot() as tx:
        node = generations.found(key, await tx.sessions.get(key))
        current = await tx.states.list_for_key(
            key, state_kind=state_kind, valid_only=True, session_id=node.session_id
        )
    return latest_context_state(current, provider, state_kind=state_kind)


async def save_state(uow: UnitOfWork, state: SessionContextState) -> SessionContextState:
    """Insert ``state`` (its key canonical) while its session id is the key's generation
    or no row's; ``state.id`` is set."""
    async with uow.write() as tx:
        await tx.sessions.check_row_generation(state.session_id, state.session_key)
        state.id = await tx.states.insert(state)
    return state


async def states(
    uow: UnitOfWork, key: CanonicalKey, **selection: Unpack[ContextStateFilter]
) -> list[SessionContextState]:
    """States of the key, every generation, ``created_at`` then id order (``[]`` for an
    unknown key)."""
    async with uow.read() as tx:
        return await tx.states.list_for_key(key, **selection)


async def invalidate_states(
    uow: UnitOfWork, key: CanonicalKey, reason: str, **selection: Unpack[StateSelection]
) -> int:
    """Invalidate the key's valid states matching ``selection``; how many changed."""
    async with uow.write() as tx:
        return await tx.states.invalidate(key, reason=reason, **selection)
