"""The manager's context calls: the context view, the compaction
checkpoints in force, and the provider context states saved, read, chosen and
invalidated, by session key.

A part of :class:`SessionManager`, kept apart by job: the front door (arguments checked,
the key canonicalised) over one use case of ``usecases/context/`` each.
"""

from __future__ import annotations

from ..keys import canonicalize_session_key
from ..models import (
    PROVIDER_MAX_LENGTH,
    STATE_KIND_MAX_LENGTH,
    ContextView,
    SessionContextState,
    check_flag,
    check_integer,
    check_optional_text,
    check_text,
)
from ..storage import SessionStorage
from ..usecases.context import states
from ..usecases.context.records import CompactionContextRecord
from ..usecases.context.view import context_view
from ..usecases.generations import GenerationCache


class ContextStateCalls:
    """The context-state calls of the front door (see :class:`SessionManager`)."""

    _storage: SessionStorage
    _generations: GenerationCache

    async def get_context_view(self, session_key: str, *, max_tokens: int) -> ContextView:
        """What a prompt needs, from one snapshot: the latest summary and the newest live
        messages that fit ``max_tokens`` with it, starting on a turn boundary (docs/reading.md,
        "Reading a session")."""
        check_integer("max_tokens", max_tokens)
        key = canonicalize_session_key(session_key)
        return await context_view(self._storage.uow, key, max_tokens)

    async def get_compaction_context_records(
        self, session_key: str
    ) -> list[CompactionContextRecord]:
        """The compaction checkpoints in force for the current generation, the texts a
        request replays (docs/semantics.md#rolling-checkpoints)."""
        key = canonicalize_session_key(session_key)
        return await states.context_records(self._storage.uow, self._generations, key)

    async def save_context_state(self, state: SessionContextState) -> SessionContextState:
        """Save ``state`` (the storage's front door checks it): its ``id`` is set."""
        return await self._storage.save_context_state(state)

    async def get_context_states(
        self,
        session_key: str,
        provider: str | None = None,
        state_kind: str | None = None,
        valid_only: bool = True,
    ) -> list[SessionContextState]:
        """States of the key (``[]`` for an unknown key)."""
        check_optional_text("provider", provider)
        check_optional_text("state_kind", state_kind)
        check_flag("valid_only", valid_only)
        key = canonicalize_session_key(session_key)
        return await states.states(
            self._storage.uow, key, provider=provider, state_kind=state_kind, valid_only=valid_only
        )

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
        check_optional_text("provider", provider)
        check_optional_text("state_kind", state_kind)
        key = canonicalize_session_key(session_key)
        return await states.latest_state(
            self._storage.uow, self._generations, key, provider, state_kind
        )

    async def invalidate_context_states(
        self,
        session_key: str,
        provider: str | None = None,
        state_kind: str | None = None,
        reason: str = "invalidated",
    ) -> int:
        check_optional_text("provider", provider, max_length=PROVIDER_MAX_LENGTH)
        check_optional_text("state_kind", state_kind, max_length=STATE_KIND_MAX_LENGTH)
        check_text("reason", reason)
        key = canonicalize_session_key(session_key)
        return await states.invalidate_states(
            self._storage.uow, key, reason, provider=provider, state_kind=state_kind
        )
