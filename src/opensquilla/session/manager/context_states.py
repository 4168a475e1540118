"""The manager's context-state calls: the compaction checkpoints in force, and the
provider context states saved, read, chosen and invalidated, by session key.

A part of :class:`SessionManager`, kept apart by job; one-line delegations to ``usecases/``.
"""

from __future__ import annotations

from ..models import SessionContextState
from ..storage import SessionStorage
from ..usecases import context
from ..usecases.context_records import CompactionContextRecord
from ..usecases.generations import GenerationCache


class ContextStateCalls:
    """The context-state calls of the front door (see :class:`SessionManager`)."""

    _storage: SessionStorage
    _generations: GenerationCache

    async def get_compaction_context_records(
        self, session_key: str
    ) -> list[CompactionContextRecord]:
        """The compaction checkpoints in force for the current generation, the texts a
        request replays (docs/semantics.md#rolling-checkpoints)."""
        return await context.context_records(self._storage, self._generations, session_key)

    async def save_context_state(self, state: SessionContextState) -> SessionContextState:
        return await context.save_state(self._storage, state)

    async def get_context_states(
        self,
        session_key: str,
        provider: str | None = None,
        state_kind: str | None = None,
        valid_only: bool = True,
    ) -> list[SessionContextState]:
        """States of the key (``[]`` for an unknown key)."""
        return await context.states(self._storage, session_key, provider, state_kind, valid_only)

    async def get_latest_context_state(
        self,
        session_key: str,
        provider: str | None = None,
        *,
        state_kind: str | None = None,
    ) -> SessionContextState | None:
        """The current generation's context state to replay to ``provider``: the newest
        usable one (valid, unexpired, a dict payload) that is the provider's own or portable
        (docs/semantics.md#provider-states); ``None`` if there is none. ``SessionNotFoundError``
        for a missing key."""
        return await context.latest_state(
            self._storage, self._generations, session_key, provider, state_kind
        )

    async def invalidate_context_states(
        self,
        session_key: str,
        provider: str | None = None,
        state_kind: str | None = None,
        reason: str = "invalidated",
    ) -> int:
        return await context.invalidate_states(
            self._storage, session_key, provider, state_kind, reason
        )
