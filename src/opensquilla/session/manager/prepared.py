"""The manager's prepared-intent calls (docs/semantics.md#prepared-intents): what
``apply_intent`` or a prefix fork would write, decided and returned without writing.

A part of :class:`SessionManager`, kept apart by job: the front door (arguments checked,
keys canonicalised) over one use case of ``usecases/prepared.py`` each.
"""

from __future__ import annotations

from typing import Any

from ..keys import canonicalize_session_key, require_session_key
from ..models import PreparedSessionIntent, SessionIntent, SessionStatus, check_text
from ..storage import SessionStorage
from ..usecases import prepared
from ..usecases.lifecycle import member, new_node


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
        resolved = member(SessionIntent, intent)
        created = new_node(session_key, agent_id, create_kwargs)
        return await prepared.prepare_intent(self._storage.uow, resolved, created)

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
        child_key = require_session_key(new_session_key)
        child_status = member(SessionStatus, status).value
        before = check_text("fork_before_message_id", fork_before_message_id, identifier=True)
        key = canonicalize_session_key(parent_session_key)
        return await prepared.prepare_prefix_branch(
            self._storage.uow, key, child_key, before, child_status
        )
