"""Compaction: read, plan, summarise outside any transaction, commit atomically.

The pure engine (``compaction/``) decides; this module does the I/O around it. The write is
:func:`.compaction_commit.rewrite_compacted_session`, which re-checks the transcript inside
its own transaction, so an append that lands while a chunk is being summarised is never
lost (docs/semantics.md#compaction). A summary the caller already has is stored by
``compaction_persist.py``; the options both take are in ``compaction_options.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Awaitable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar, Unpack

from ..compaction import (
    CompactionConfig,
    CompactionPlan,
    CompactionRequest,
    CompactionResult,
    FallbackSummarizer,
    Summarizer,
    finish_compaction,
    normalize_instructions,
    plan_compaction,
)
from ..compaction.engine import summarizer_chunks
from ..compaction.planner import EMPTY_SUMMARY, STALE_CONTEXT_STATE, STALE_PREIMAGE
from ..compaction.result import result_from_document
from ..errors import CompactionTimeoutError, InvalidInputError, SessionNotFoundError
from ..keys import canonicalize_session_key
from ..models import (
    INT64_MAX,
    SessionNode,
    SessionSummary,
    TranscriptEntry,
    check_optional_text,
)
from ..storage import SessionStorage
from ..support.clock import new_compaction_id, now_ms
from . import compaction_persist
from .compaction_commit import ContextStateChanged, rewrite_compacted_session
from .compaction_flight import Flight, flight_key, join_flight
from .compaction_lease import HeldLease, Replan, take_lease
from .compaction_options import (
    CompactionOptions,
    MutationContext,
    PersistSourceOptions,
    check_compaction_options,
    check_room_for_compaction,
    entered,
    flush_status,
    refuse_unknown,
)
from .compaction_source import compaction_input, source_preimage
from .context.records import RollingContext, read_rolling_context

# The logger keeps the name it had before the code moved: users configure it by name.
log = logging.getLogger("opensquilla.session.compactor")

_T = TypeVar("_T")


@dataclass(frozen=True)
class _Run:
    """What the owner of a flight needs to summarise and commit."""

    key: str
    node: SessionNode
    live: list[TranscriptEntry]
    plan: CompactionPlan
    summarizer: Summarizer
    window: int
    compaction_id: str | None
    trigger_reason: str | None
    flush_receipt_status: str | None
    mutation_context: MutationContext | None
    against_source: bool
    lease_key: str | None  # None: no cross-process lease (lease_seconds == 0)
    context: RollingContext | None  # None: rolling checkpoints off
    deadline: float
    total: float


async def _bounded(phase: str, step: Awaitable[_T], deadline: float, total: float) -> _T:
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


class Compactor:
    """Compaction and persisted out-of-band summaries (the repair queue is ``repair.py``)."""

    def __init__(
        self,
        storage: SessionStorage,
        summarizer: Summarizer | None = None,
        *,
        commit_against_source: bool | None = None,
    ) -> None:
        if commit_against_source is not None and not isinstance(commit_against_source, bool):
            raise InvalidInputError(
                "commit_against_source must be True, False or None, not "
                f"{type(commit_against_source).__name__}"
            )
        self._storage = storage
        self._summarizer = summarizer
        self._commit_against_source = commit_against_source

    def _against_source(self, mutation_context: MutationContext | None) -> bool:
        """Whether a compaction commits against its captured source (rows appended after
        the planned ones stay live and the compaction still commits) or needs the exact
        transcript it planned on (docs/semantics.md#compaction). ``None``, the default:
        against the source unless the caller serialises its writers with a
        ``mutation_context``, whose change seen under that lock is stale (the contract)."""
        if self._commit_against_source is not None:
            return self._commit_against_source
        return mutation_context is None

    def summarizer_for(self, config: CompactionConfig) -> Summarizer:
        if self._summarizer is not None:
            return self._summarizer
        if config.llm_enabled:
            from ..llm import OpenAICompatibleSummarizer

            return OpenAICompatibleSummarizer()
        return FallbackSummarizer()

    async def _read(self, key: str) -> tuple[SessionNode, list[TranscriptEntry]]:
        node = await self._storage.get_session(key)
        if node is None:
            raise SessionNotFoundError(f"Session not found: {key}")
        return node, await self._storage.get_transcript(node.session_id)

    async def _summarize(
        self, plan: CompactionPlan, summarizer: Summarizer
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

    async def compact_with_result(
        self,
        session_key: str,
        context_window_tokens: int,
        config: CompactionConfig | None = None,
        custom_instructions: str | None = None,
        **options: Unpack[CompactionOptions],
    ) -> CompactionResult:
        refuse_unknown("compact_with_result", options, CompactionOptions)
        compaction_id = options.get("compaction_id")
        trigger_reason = options.get("trigger_reason")
        flush_receipt_status = options.get("flush_receipt_status")
        mutation_context = options.get("mutation_context")
        summarizer = options.get("summarizer")
        boundary = options.get("protected_boundary_message_id")
        if config is None:
            config = CompactionConfig()
        elif not isinstance(config, CompactionConfig):
            raise InvalidInputError(
                f"config must be a CompactionConfig or None, not {type(config).__name__}"
            )
        if isinstance(context_window_tokens, bool) or not isinstance(context_window_tokens, int):
            raise InvalidInputError(
                "context_window_tokens must be an integer, not "
                f"{type(context_window_tokens).__name__}"
            )
        check_optional_text("custom_instructions", custom_instructions)
        try:
            normalize_instructions(custom_instructions)  # refuse bad input before any read
        except ValueError as exc:
            raise InvalidInputError(str(exc)) from exc
        check_compaction_options(compaction_id, trigger_reason, flush_receipt_status)
        check_optional_text("protected_boundary_message_id", boundary, identifier=True)
        if mutation_context is not None and not callable(mutation_context):
            raise InvalidInputError(
                "mutation_context must be a callable returning a context manager"
            )
        if summarizer is not None and not callable(getattr(summarizer, "summarize", None)):
            raise InvalidInputError("summarizer must have an async summarize() method")
        key = canonicalize_session_key(session_key)
        total = config.total_timeout_seconds
        deadline = asyncio.get_running_loop().time() + total

        async def read() -> tuple[SessionNode, list[TranscriptEntry], RollingContext | None]:
            async with entered(mutation_context):
                node, live = await self._read(key)
                return node, live, await read_rolling_context(self._storage.uow, config, node)

        chosen = summarizer if summarizer is not None else self._summarizer
        against_source = self._against_source(mutation_context)
        while True:
            node, live, context = await _bounded("read", read(), deadline, total)
            request = CompactionRequest(
                session_id=node.session_id,
                entries=compaction_input(live),
                context_window_tokens=context_window_tokens,
                config=config,
                custom_instructions=custom_instructions,
                entry_ids=[entry.id for entry in live],
                entry_message_ids=[entry.message_id for entry in live],
                protected_boundary_message_id=boundary,
                previous_summary=context.previous_summary if context is not None else None,
            )
            # A missing boundary is a skip here: no summariser call, no flight, no write.
            plan = plan_compaction(request)
            if plan.skipped is not None:
                return plan.skipped
            inputs: dict[str, Any] = {
                "session_key": key,
                "session_id": node.session_id,
                "epoch": node.epoch,
                "preimage": source_preimage(live),
                "context_window_tokens": context_window_tokens,
                "config": plan.config,  # with the tail bound to the protected boundary
                "custom_instructions": custom_instructions,
                "flush_receipt_status": flush_receipt_status,
                "compaction_id": compaction_id,
                "against_source": against_source,
                "protected_boundary_message_id": boundary,
                "context_fingerprint": context.fingerprint if context is not None else None,
            }
            flight = flight_key(
                **inputs,
                # In-process only: the object itself is held by the running flight, so its
                # id cannot be reused while the entry exists. None: chosen from the config,
                # which the key already holds (its API key as an HMAC).
                summarizer_identity="default" if chosen is None else f"object:{id(chosen)}",
            )
            lease_key = None
            if config.lease_seconds > 0:
                identity = "default"
                if chosen is not None:
                    identity = f"class:{type(chosen).__module__}.{type(chosen).__qualname__}"
                lease_key = flight_key(**inputs, summarizer_identity=identity, portable=True)
            run = _Run(
                key=key,
                node=node,
                live=live,
                plan=plan,
                summarizer=chosen if chosen is not None else self.summarizer_for(config),
                window=context_window_tokens,
                compaction_id=compaction_id,
                trigger_reason=trigger_reason,
                flush_receipt_status=flush_receipt_status,
                mutation_context=mutation_context,
                against_source=against_source,
                lease_key=lease_key,
                context=context,
                deadline=deadline,
                total=total,
            )
            try:
                return await join_flight(
                    self._storage, flight, functools.partial(self._run, run=run)
                )
            except Replan:
                continue  # another worker compacted the session meanwhile: plan again

    async def _run(self, slot: Flight, *, run: _Run) -> CompactionResult:
        """The shared task of one flight: under the session's lease (when on), summarise,
        validate, commit."""
        if run.lease_key is None:
            return await self._compact(slot, run)
        taken = await self._take_lease(run, accept_result=True)
        if isinstance(taken, str):  # an equal run in another worker finished: its result
            received = await self._received(run, taken)
            if received is not None:
                return received
            taken = await self._take_lease(run, accept_result=False)
        assert isinstance(taken, HeldLease)
        return await self._compact_holding(slot, run, taken)

    async def _take_lease(self, run: _Run, *, accept_result: bool) -> HeldLease | str:
        assert run.lease_key is not None
        taking = take_lease(
            self._storage,
            session_key=run.key,
            session_id=run.node.session_id,
            lease_key=run.lease_key,
            lease_seconds=run.plan.config.lease_seconds,
            accept_result=accept_result,
        )
        return await _bounded("lease", taking, run.deadline, run.total)

    async def _received(self, run: _Run, document: str) -> CompactionResult | None:
        """Another worker's result for these inputs, with the live rows as they now are;
        ``None`` when a commit it reports does not show in the session row (the database
        is not the one it wrote to, say a restored backup: this run compacts itself)."""
        try:
            node, current = await self._read(run.key)
        except SessionNotFoundError:
            return result_from_document(document, [])
        result = result_from_document(document, compaction_input(current))
        committed = result.removed_count > 0 and result.skip_reason is None
        if committed and node.compaction_count <= run.node.compaction_count:
            return None
        return result

    async def _compact_holding(self, slot: Flight, run: _Run, lease: HeldLease) -> CompactionResult:
        try:
            now = await self._storage.get_session(run.key)
            if now is None or (now.session_id, now.epoch, now.compaction_count) != (
                run.node.session_id,
                run.node.epoch,
                run.node.compaction_count,
            ):
                raise Replan  # compacted (or reset) between the read and the lease
            result = await self._compact(slot, run)
        except BaseException:
            await asyncio.shield(lease.release())
            raise
        await asyncio.shield(lease.finish(result))
        return result

    async def _compact(self, slot: Flight, run: _Run) -> CompactionResult:
        """Summarise, validate, commit."""
        plan, key, node, live = run.plan, run.key, run.node, run.live
        texts, sources = await _bounded(
            "summarize", self._summarize(plan, run.summarizer), run.deadline, run.total
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
        # A rolling checkpoint also covers what the checkpoints it replaces covered.
        floor = run.context.covered_through_id if run.context is not None else 0
        summary = SessionSummary(
            session_id=node.session_id,
            session_key=key,
            compaction_id=run.compaction_id or new_compaction_id(),
            trigger_reason=run.trigger_reason,
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
            removed_count=result.removed_count,
            kept_count=len(result.kept_entries),
            chunk_count=result.chunks_processed,
            flush_receipt_status=flush_status(run.flush_receipt_status),
            covered_through_id=max(floor, *(entry.id or 0 for entry in removed)),
            created_at=now,
        )
        async with contextlib.AsyncExitStack() as stack:
            # Waiting for the caller's lock counts against the deadline; the commit itself,
            # once begun, runs to its end (a transaction is never abandoned half-way).
            await _bounded(
                "commit",
                stack.enter_async_context(entered(run.mutation_context)),
                run.deadline,
                run.total,
            )
            slot.committing = True
            try:
                applied = await rewrite_compacted_session(
                    self._storage,
                    key,
                    expected_session_id=node.session_id,
                    expected_epoch=node.epoch,
                    expected_live_ids=[entry.id or 0 for entry in live],
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
        try:
            _, current = await self._read(key)
        except SessionNotFoundError:
            current = []
        return result.skipped(
            stale,
            kept_entries=compaction_input(current),
            window=run.window,
        )

    async def persist_compaction_result(
        self,
        session_key: str,
        summary: str,
        kept_entries: Sequence[Mapping[str, Any]],
        **options: Unpack[PersistSourceOptions],
    ) -> bool:
        """Store a summary the caller already has, with the positional semantics of
        docs/semantics.md#persist, or against a captured source (``source_entries``,
        docs/semantics.md#compaction-source); ``True`` when something was written."""
        return await compaction_persist.persist_compaction_result(
            self._storage, session_key, summary, kept_entries, options
        )
