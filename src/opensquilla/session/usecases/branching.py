"""Branching: a child session of a parent, optionally with a copy of its history
(docs/semantics.md#branching), in one write transaction.

A full fork copies the live transcript, the compacted archive, every summary and the valid
context states; a prefix fork copies the canonical transcript before one message. Copies
happen only within ``max_fork_tokens`` (reported token counts, plus an estimate per copied
summary); rows are copied with set-based ``INSERT ... SELECT`` statements. A child key that
exists already is refused and nothing changes.
"""

from __future__ import annotations

from typing import Unpack

from ..compaction import estimate_tokens_for_length
from ..db.generations import generation_violation
from ..db.uow import Transaction, UnitOfWork
from ..errors import (
    IntegrityViolationError,
    InvalidInputError,
    MessageNotFoundError,
    SessionExistsError,
    SessionNotFoundError,
    TurnOutcomeUnavailableError,
)
from ..keys import CanonicalKey
from ..models import (
    CANONICAL_FORK_PROOF_SCHEMA_VERSION,
    BranchOptions,
    CanonicalTranscriptCoverage,
    SessionNode,
    SessionStatus,
    TranscriptEntry,
)
from ..models.intents import ForkMode
from ..support.clock import now_ms
from .compaction.options import MutationContext, entered


def child_of(parent: SessionNode, child_key: str, status: str, now: int) -> SessionNode:
    """The child's row: lineage, agent, model and channel from the parent."""
    return SessionNode(
        session_key=child_key,
        agent_id=parent.agent_id,
        parent_session_key=parent.session_key,
        spawned_by=parent.session_key,
        spawn_depth=parent.spawn_depth + 1,
        created_at=now,
        updated_at=now,
        started_at=now,
        status=status,
        model=parent.model,
        model_provider=parent.model_provider,
        channel=parent.channel,
        chat_type=parent.chat_type,
    )


async def branch(
    uow: UnitOfWork,
    parent_key: CanonicalKey,
    child_key: CanonicalKey,
    *,
    through_turn_id: str | None = None,
    mutation_context: MutationContext | None = None,
    **options: Unpack[BranchOptions],
) -> SessionNode:
    """The manager's branch (its arguments checked there): :func:`branch_session`, inside
    ``mutation_context()`` when one is given (held for the whole read and copy, so a
    compaction that takes the same lock cannot interleave with the fork). A fork through a
    turn reads the parent in a snapshot of its own and is refused
    (:func:`refuse_fork_through_turn`)."""
    async with entered(mutation_context):
        if through_turn_id is not None:
            await refuse_fork_through_turn(uow, parent_key, through_turn_id)
        return await branch_session(uow, parent_key, child_key, **options)


def entry_turn_id(entry: TranscriptEntry) -> str | None:
    """The turn a row belongs to: its ``turn_context["turn_id"]``, stripped, if any."""
    context = entry.turn_context
    value = context.get("turn_id") if isinstance(context, dict) else None
    return (value.strip() or None) if isinstance(value, str) else None


async def refuse_fork_through_turn(uow: UnitOfWork, key: CanonicalKey, turn_id: str) -> None:
    """A fork through a turn needs the turn's terminal outcome, which upstream reads from
    its agent tasks, a table this store does not have: after the checks that need only the
    five tables (the parent exists, its canonical transcript is complete, some row belongs
    to the turn) it is refused, before anything is written (docs/semantics.md#branching)."""
    async with uow.snapshot() as tx:
        parent = await tx.sessions.get(key)
        if parent is None:
            raise SessionNotFoundError(f"Parent session not found: {key}")
        coverage = await tx.transcript.coverage(parent.session_id, session_key=parent.session_key)
        rows = await tx.transcript.list_canonical(parent.session_id, session_key=parent.session_key)
    if not coverage.canonical_complete:
        raise InvalidInputError(
            "Cannot fork through a turn because canonical transcript history is incomplete"
        )
    if not any(entry_turn_id(entry) == turn_id for entry in rows):
        raise MessageNotFoundError(f"Transcript turn not found in {key}: {turn_id}")
    raise TurnOutcomeUnavailableError(
        f"Completion state not found for transcript turn: {turn_id} (a fork through a turn "
        "needs the turn's outcome from agent tasks, which this store does not keep; nothing "
        "was written)"
    )


async def branch_session(
    uow: UnitOfWork,
    key: CanonicalKey,
    child_key: CanonicalKey,
    **options: Unpack[BranchOptions],
) -> SessionNode:
    """Create the child session in one write transaction (see the module docstring).

    ``session_id`` gives the child a chosen generation id (as ``create`` allows); it must be
    free (``SessionIdInUseError``). Without, the child's id is a ``uuid4`` generated now,
    new everywhere by the store's rule (docs/scaling.md#keys-and-statements), so the fork
    reads and writes the parent's and the child's rows only: no lookup of the id in every
    table (which fans out to every shard). ``MessageNotFoundError`` before any write when a prefix
    fork's ``before_message_id`` is not in the parent's canonical transcript.
    """
    fork = options.get("fork", "none")
    now = now_ms()
    child: SessionNode | None = None
    try:
        async with uow.write() as tx:
            parent = await tx.sessions.get(key, lock="share")
            if parent is None:
                raise SessionNotFoundError(f"Parent session not found: {key}")
            status = options.get("status", SessionStatus.RUNNING.value)
            child = child_of(parent, child_key, status, now)
            child.display_name = options.get("display_name")
            if (session_id := options.get("session_id")) is not None:
                child.session_id = session_id
                await tx.sessions.claim_generation(child.session_id, child.session_key)
            before, budget = options.get("before_message_id"), options.get("max_fork_tokens")
            await _fill(tx, parent, child, fork, before, budget)
    except IntegrityViolationError as exc:
        if child is None:
            raise
        error = await generation_violation(uow, exc, child.session_id, child.session_key)
        if error is exc:
            raise
        raise error from exc
    return child


def set_lineage(
    child: SessionNode,
    parent_coverage: CanonicalTranscriptCoverage,
    fork: ForkMode,
    copied_summaries: int = 0,
) -> None:
    """The fork-lineage proof on the child's row (docs/semantics.md#pages), from the
    parent's coverage (pure: a branch reads it inside its transaction, a prepared prefix
    fork in its snapshot).

    ``schema_version`` at least ``CANONICAL_FORK_PROOF_SCHEMA_VERSION`` says that this
    fork logic wrote the count. A full fork inherits the parent's compaction count (its
    summaries come along); a prefix fork copies rows only, so starts at 0. A child of an
    incomplete parent gets a count its summaries cannot match, so it stays incomplete for
    good: at least 1 (upstream's rule) and, for a full fork, one more than the
    ``copied_summaries`` (upstream's ``max(1, C)`` would certify the child of a legacy fork
    whose own summaries all match)."""
    inherited = parent_coverage.compaction_count
    child.schema_version = max(child.schema_version, CANONICAL_FORK_PROOF_SCHEMA_VERSION)
    if not parent_coverage.canonical_complete:
        copied = copied_summaries if fork == "full" else 0
        child.compaction_count = max(1, inherited, copied + 1)
    else:
        child.compaction_count = inherited if fork == "full" else 0


async def _record_lineage(
    tx: Transaction, parent: SessionNode, child: SessionNode, fork: ForkMode
) -> None:
    """:func:`set_lineage` from the parent's coverage read now, inside the branch
    transaction."""
    coverage = await tx.transcript.coverage(parent.session_id, session_key=parent.session_key)
    copied = 0
    if fork == "full" and not coverage.canonical_complete:
        copied = len(
            await tx.summaries.text_lengths(parent.session_id, session_key=parent.session_key)
        )
    set_lineage(child, coverage, fork, copied)


async def _fill(
    tx: Transaction,
    parent: SessionNode,
    child: SessionNode,
    fork: ForkMode,
    before_message_id: str | None,
    max_fork_tokens: int | None,
) -> None:
    """Insert the child and copy what the fork takes, inside the branch transaction."""
    position: tuple[int, int] | None = None
    copy = False
    if fork != "none":
        if fork == "prefix":
            if before_message_id is None:
                raise InvalidInputError("a prefix fork needs before_message_id")
            position = await tx.transcript.find_canonical_position(
                parent.session_id, before_message_id, session_key=parent.session_key
            )
            if position is None:
                raise MessageNotFoundError(
                    f"Transcript message not found in {parent.session_key}: {before_message_id}"
                )
        tokens = await tx.transcript.token_sum_before(
            parent.session_id, position, session_key=parent.session_key
        )
        if fork == "full":
            lengths = await tx.summaries.text_lengths(
                parent.session_id, session_key=parent.session_key
            )
            tokens += sum(estimate_tokens_for_length(n) for n in lengths)
        copy = max_fork_tokens is None or tokens <= max_fork_tokens
    child.forked_from_parent = copy
    if copy:
        await _record_lineage(tx, parent, child, fork)
    if not await tx.sessions.insert_new(child):
        raise SessionExistsError(f"Session already exists: {child.session_key}")
    if not copy:
        return
    # Each copy is one INSERT ... SELECT from the parent's key into the child's: under
    # distribution a statement across two shards (the coordinator pulls the source rows),
    # the transaction committed on both by two-phase commit (docs/scaling.md).
    if fork == "full":
        await tx.transcript.copy_archive_to_session(parent, child)
    await tx.transcript.copy_to_session(parent, child, before=position)
    # The parent's current state, whole (also for a prefix fork), at revision 0
    # (docs/state.md#reset-and-fork).
    await tx.session_states.copy_to_session(parent, child, now=child.created_at)
    if fork == "full":
        await tx.summaries.copy_to_session(parent, child)
        await tx.states.copy_valid_to_session(parent, child)
