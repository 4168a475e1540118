"""The manager's branch call: a child session of a parent, optionally with a copy of its
history (docs/semantics.md#branching).

A part of :class:`SessionManager`, kept apart by job: the arguments checked here, once,
then one use case (``usecases/branching.py``).
"""

from __future__ import annotations

from ..errors import InvalidInputError
from ..keys import canonicalize_session_key, require_session_key
from ..models import (
    BranchOptions,
    SessionNode,
    SessionStatus,
    check_flag,
    check_optional_integer,
    check_optional_text,
)
from ..models.intents import ForkMode
from ..storage import SessionStorage
from ..usecases import branching
from ..usecases.compaction.options import MutationContext
from ..usecases.lifecycle import member


def through_turn(
    fork_through_turn_id: object, fork_transcript: bool, fork_before_message_id: str | None
) -> str | None:
    """``fork_through_turn_id`` stripped, after upstream HEAD's argument checks."""
    check_optional_text("fork_through_turn_id", fork_through_turn_id, identifier=True)
    if fork_through_turn_id is None:
        return None
    assert isinstance(fork_through_turn_id, str)
    turn_id = fork_through_turn_id.strip()
    if not turn_id:
        raise InvalidInputError("fork_through_turn_id must not be empty")
    if fork_before_message_id:
        raise InvalidInputError(
            "fork_before_message_id and fork_through_turn_id are mutually exclusive"
        )
    if not fork_transcript:
        raise InvalidInputError("fork_through_turn_id requires fork_transcript=True")
    return turn_id


class BranchCalls:
    """The branch call of the front door (see :class:`SessionManager`)."""

    _storage: SessionStorage

    async def branch(
        self,
        parent_session_key: str,
        new_session_key: str,
        fork_transcript: bool = False,
        max_fork_tokens: int | None = None,
        status: SessionStatus | str = SessionStatus.RUNNING,
        fork_before_message_id: str | None = None,
        fork_through_turn_id: str | None = None,
        display_name: str | None = None,
        *,
        mutation_context: MutationContext | None = None,
    ) -> SessionNode:
        """A child session of ``parent_session_key`` (docs/semantics.md#branching), in one
        transaction: with ``fork_transcript`` a full fork (live transcript, compacted
        archive, summaries, valid context states) or, with ``fork_before_message_id``, a
        prefix fork, when it fits ``max_fork_tokens``. An existing child key is refused.
        ``display_name`` names the child; ``mutation_context`` (a callable returning an async
        context manager, the lock a compaction takes) is held for the whole read and copy.
        ``fork_through_turn_id`` (upstream's fork through a completed turn) is checked, then
        refused with ``TurnOutcomeUnavailableError``: it needs turn outcomes from agent
        tasks, which this store does not keep."""
        # Checked in the order the manager always checked them: the child key, the
        # status, the fork options (the turn's as upstream HEAD checks them), the lock.
        child_key = require_session_key(new_session_key)
        child_status = member(SessionStatus, status).value
        fork: ForkMode = "none"
        if check_flag("fork_transcript", fork_transcript):
            fork = "prefix" if fork_before_message_id is not None else "full"
        options = BranchOptions(
            status=child_status,
            fork=fork,
            max_fork_tokens=check_optional_integer("max_fork_tokens", max_fork_tokens),
            before_message_id=check_optional_text(
                "fork_before_message_id", fork_before_message_id, identifier=True
            ),
            display_name=check_optional_text("display_name", display_name),
        )
        turn_id = through_turn(fork_through_turn_id, fork_transcript, fork_before_message_id)
        if mutation_context is not None and not callable(mutation_context):
            raise InvalidInputError(
                "mutation_context must be a callable returning a context manager"
            )
        return await branching.branch(
            self._storage.uow,
            canonicalize_session_key(parent_session_key),
            child_key,
            through_turn_id=turn_id,
            mutation_context=mutation_context,
            **options,
        )
