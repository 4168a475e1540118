"""The run of one compaction flight (``run.py`` plans it, ``flight.py`` shares it): under
the session's lease when on (``lease.py``), call the summariser outside any transaction,
validate its result, and commit fenced (``commit.py``)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import TypeVar

from ...compaction import (
    CompactionPlan,
    CompactionResult,
    Summarizer,
    finish_compaction,
)
from ...compaction.engine import summarizer_chunks
from ...compaction.planner import EMPTY_SUMMARY, STALE_CONTEXT_STATE, STALE_PREIMAGE
from ...compaction.result import result_from_document
from ...db.uow import UnitOfWork
from ...errors import CompactionTimeoutError
from ...keys import CanonicalKey
from ...models import INT64_MAX, SessionNode, TranscriptEntry
from ...support.clock import now_ms
from ..context.records import RollingContext
from .commit import ContextStateChanged, rewrite_compacted_session
from .flight import Flight
from .lease import HeldLease, take_lease
from .options import MutationContext, PersistOptions, check_room_for_compaction, entered
from .record import summary_record
from .source import compaction_input, live_rows

# The logger keeps the name it had before the code moved: users configure it by name.
log = logging.getLogger("opensquilla.session.compactor")

_T = TypeVar("_T")


@dataclass(frozen=True)
class Run:
    """What the owner of a flight needs to summarise and commit."""

    key: CanonicalKey
    node: SessionNode
    live: list[TranscriptEntry]
    plan: CompactionPlan
    summarizer: Summarizer
    window: int
    record: PersistOptions  # what the stored summary records about its compaction
    mutation_context: MutationContext | None
    against_source: bool
    lease_key: str | None  # None: no cross-process lease (lease_seconds == 0)
    context: RollingContext | None  # None: rolling checkpoints off
    deadline: float
    total: float


async def bounded(phase: str, step: Awaitable[_T], deadline: float, total: float) -> _T:
    """``step``, or ``CompactionTimeoutError(phase, total)`` once the loop's clock passes
    ``deadline`` (a ``TimeoutError`` raised inside ``step`` on its own passes through)."""
    bound = asyncio.timeout_at(deadline)
    try:
        async with bound:
            return await step
    except TimeoutError as exc:
        if bound.expired():
            raise CompactionTimeoutError(phase, total) from exc
        raise


async def run_flight(uow: UnitOfWork, slot: Flight, *, run: Run) -> CompactionResult:
    """The shared task of one flight: under the session's lease (when on), summarise,
    validate, commit."""
    if run.lease_key is None:
        return await _compact(uow, slot, run)
    taken = await _take_lease(uow, run, accept_result=True)
    if isinstance(taken, str):  # an equal run in another worker finished: its result
        received = await _received(uow, run, taken)
        if received is not None:
            return received
        taken = await _take_lease(uow, run, accept_result=False)
    assert isinstance(taken, HeldLease)
    try:
        result = await _compact(uow, slot, run)
    except BaseException:
        await asyncio.shield(taken.release())
        raise
    await asyncio.shield(taken.finish(result))
    return result


async def _take_lease(uow: UnitOfWork, run: Run, *, accept_result: bool) -> HeldLease | str:
    assert run.lease_key is not None
    taking = take_lease(
        uow,
        planned=run.node,
        lease_key=run.lease_key,
        lease_seconds=run.plan.config.lease_seconds,
        accept_result=accept_result,
    )
    return await bounded("lease", taking, run.deadline, run.total)


async def _current(
    uow: UnitOfWork, key: CanonicalKey
) -> tuple[SessionNode | None, list[TranscriptEntry]]:
    async with uow.snapshot() as tx:
        return await live_rows(tx, key)


async def _received(uow: UnitOfWork, run: Run, document: str) -> CompactionResult | None:
    """Another worker's result for these inputs, with the live rows as they now are;
    ``None`` when a commit it reports does not show in the session row (the database
    is not the one it wrote to, say a restored backup: this run compacts itself)."""
    node, current = await _current(uow, run.key)
    if node is None:
        return result_from_document(document, [])
    result = result_from_document(document, compaction_input(current))
    committed = result.removed_count > 0 and result.skip_reason is None
    if committed and node.compaction_count <= run.node.compaction_count:
        return None
    return result


async def _summarize(
    plan: CompactionPlan, summarizer: Summarizer
) -> tuple[list[str | None], list[str]]:
    texts: list[str | None] = []
    sources: list[str] = []
    for chunk in summarizer_chunks(plan):
        try:
            text = await summarizer.summarize(
                chunk, config=plan.config, custom_instructions=plan.instructions
            )
        except Exception:
            log.warning(
                "summariser failed on a chunk; using the fallback",
                exc_info=True,
                extra={"operation": "compact"},
            )
            text = None
        texts.append(text)
        sources.append(summarizer.source if text else "fallback")
    return texts, sources


async def _compact(uow: UnitOfWork, slot: Flight, run: Run) -> CompactionResult:
    """Summarise, validate, commit."""
    plan, key, node, live = run.plan, run.key, run.node, run.live
    texts, sources = await bounded(
        "summarize", _summarize(plan, run.summarizer), run.deadline, run.total
    )
    result = finish_compaction(plan, texts, sources)
    if result.removed_count == 0:
        return result
    if not result.summary.strip():
        result.skip_reason = result.skip_reason or EMPTY_SUMMARY
        return result
    check_room_for_compaction(node)
    now = now_ms()
    removed = live[: result.removed_count]
    summary = summary_record(
        node,
        run.record,
        removed,
        kept_count=len(result.kept_entries),
        now=now,
        # A rolling checkpoint also covers what the checkpoints it replaces covered.
        covered_floor=run.context.covered_through_id if run.context is not None else 0,
        summary_text=result.summary,
        summary_payload=result.summary_payload,
        summary_format=result.summary_format,
        summary_source=result.summary_source,
        coverage_status=result.coverage_status,
        missing_obligations=result.missing_obligations,
        critical_carry_forward=result.critical_carry_forward,
        # Sums of reported counts, each within 64 bits, may together exceed them: the
        # statistic saturates rather than make the session impossible to compact.
        tokens_before=min(result.tokens_before, INT64_MAX),
        tokens_after=min(result.tokens_after, INT64_MAX),
        chunk_count=result.chunks_processed,
    )
    async with contextlib.AsyncExitStack() as stack:
        # Waiting for the caller's lock counts against the deadline; the commit itself,
        # once begun, runs to its end (a transaction is never abandoned half-way).
        await bounded(
            "commit",
            stack.enter_async_context(entered(run.mutation_context)),
            run.deadline,
            run.total,
        )
        slot.committing = True
        try:
            applied = await rewrite_compacted_session(
                uow,
                node,
                live,
                expected_prefix=removed,
                archive_count=len(removed),
                summary=summary,
                now=now,
                allow_appended=run.against_source,
                expected_context_fingerprint=run.context.fingerprint if run.context else None,
            )
            stale = STALE_PREIMAGE
        except ContextStateChanged:
            applied, stale = False, STALE_CONTEXT_STATE
    if applied:
        return result
    log.info(
        "compaction of %s skipped (%s): the transcript or its checkpoints changed meanwhile",
        key,
        stale,
        extra={"session_key": key, "operation": "compact"},
    )
    _, current = await _current(uow, key)
    return result.skipped(stale, kept_entries=compaction_input(current), window=run.window)
