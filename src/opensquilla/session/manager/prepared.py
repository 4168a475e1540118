"""The manager's prepared-intent calls (docs/semantics.md#prepared-intents): what
``apply_intent`` or a prefix fork would write, decided and returned without writing.

A part of :class:`SessionManager`, kept apart by job; one-line delegations to ``usecases/``.
"""

from __future__ import annotations

from typing import Any

from ..models import PreparedSessionIntent, SessionIntent, SessionStatus
from ..storage import SessionStorage
from ..usecases import prepared


class PreparedCalls:
    """The prepared-intent calls of the front door (see :class:`SessionManager`)."""

    _storage: SessionStorage

    async def prepare_intent(
        self,
        session_key: str,
        intent: SessionIntent | str,
        /,
        *,
        agent_id: str = "main",
        **create_kwargs: Any,
    ) -> PreparedSessionIntent:
        """What :meth:`apply_intent` would do, decided and returned without writing
        (docs/semantics.md#prepared-intents): action ``create`` (a new row), ``reset`` (the
        next generation of the stored row, ``previous_session_id`` the one it replaces) or
        ``continue`` (the stored row); ``NEW_CHAT`` on a taken key is the same
        ``SessionKeyConflictError``. Apply a ``reset`` plan with :meth:`apply_intent`, never
        by ``upsert_session(plan.node)`` (accepted, but it skips the archive and deletes);
        its ``session_id`` is a preview: ``apply_intent`` makes the id."""
        return await prepared.prepare_intent(
            self._storage, session_key, intent, agent_id, create_kwargs
        )

    async def prepare_prefix_branch(
        self,
        parent_session_key: str,
        new_session_key: str,
        *,
        fork_before_message_id: str,
        status: SessionStatus | str = SessionStatus.DONE,
    ) -> PreparedSessionIntent:
        """The prefix fork :meth:`branch` would write, decided and returned without writing
        (docs/semantics.md#prepared-intents): action ``fork``, the child row (a resting
        ``done`` by default) and copies of the parent's canonical rows before the message in
        ``initial_transcript_entries``. Missing parent or message: the same errors as
        :meth:`branch`; a taken child key: ``SessionExistsError``."""
        return await prepared.prepare_prefix_branch(
            self._storage,
            parent_session_key,
            new_session_key,
            fork_before_message_id=fork_before_message_id,
            status=status,
        )
