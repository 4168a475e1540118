"""Compaction: read, plan, summarise outside any transaction, commit atomically.

The pure engine (``compaction/``) decides; this package does the I/O around it. This module
is the plan: :func:`compact_with_result` reads the source, plans, and joins (or starts) the
single flight of equal runs; the flight's run (``execute.py``) takes the lease, calls the
summariser and commits through :func:`.commit.rewrite_compacted_session`, which re-checks
the transcript inside its own transaction, so an append that lands while a chunk is being
summarised is never lost (docs/semantics.md#compaction). A summary the caller already has is
stored by ``persist.py``; the options both take, and the front door's checks, are in
``options.py``.

Units of work of one ``compact_with_result`` (each phase its own, the summariser between
them outside any): 1 when the plan skips (the read); 2 without the lease
(``lease_seconds=0``: the read, the commit); 4 with it (the read, the lease's take, the
commit, the lease's finish). A commit found stale re-reads the transcript for the result (one
more); renewing a lease, waiting for another worker's and planning again add their own.
"""

from __future__ import annotations

import asyncio
import functools
from dataclasses import dataclass
from typing import Any

from ...compaction import (
    CompactionConfig,
    CompactionPlan,
    CompactionRequest,
    CompactionResult,
    FallbackSummarizer,
    Summarizer,
    plan_compaction,
)
from ...db.uow import UnitOfWork
from ...errors import InvalidInputError
from ...keys import CanonicalKey
from ...models import SessionNode, TranscriptEntry
from ...support.clock import now_ms
from ..context.records import RollingContext, read_context_records
from .execute import Run, bounded, run_flight
from .flight import flight_key, join_flight
from .lease import Replan
from .options import CompactionOptions, MutationContext, entered
from .source import compaction_input, live_rows, source_preimage


@dataclass(frozen=True)
class Compactor:
    """The manager's compaction wiring, checked once when built: the summariser of its
    runs (``None``: chosen from each run's config) and how a run commits."""

    summarizer: Summarizer | None = None
    commit_against_source: bool | None = None

    def __post_init__(self) -> None:
        against = self.commit_against_source
        if against is not None and not isinstance(against, bool):
            raise InvalidInputError(
                f"commit_against_source must be True, False or None, not {type(against).__name__}"
            )

    def against_source(self, mutation_context: MutationContext | None) -> bool:
        """Whether a compaction commits against its captured source (rows appended after
        the planned ones stay live and the compaction still commits) or needs the exact
        transcript it planned on (docs/semantics.md#compaction). ``None``, the default:
        against the source unless the caller serialises its writers with a
        ``mutation_context``, whose change seen under that lock is stale (the contract)."""
        if self.commit_against_source is not None:
            return self.commit_against_source
        return mutation_context is None

    def summarizer_for(self, config: CompactionConfig) -> Summarizer:
        if self.summarizer is not None:
            return self.summarizer
        if config.llm_enabled:
            from ...llm import OpenAICompatibleSummarizer

            return OpenAICompatibleSummarizer()
        return FallbackSummarizer()


async def read_source(
    uow: UnitOfWork, key: CanonicalKey, config: CompactionConfig
) -> tuple[SessionNode, list[TranscriptEntry], RollingContext | None]:
    """The source, from one snapshot: the session row, its live rows and (rolling
    checkpoints on) the checkpoints a summary of them replaces."""
    async with uow.snapshot() as tx:
        node, live = await live_rows(tx, key, required=True)
        assert node is not None
        if not config.rolling_checkpoints:
            return node, live, None
        records = await read_context_records(tx, key, node.session_id, now_ms())
    return node, live, RollingContext.of(records)


def plan_for(
    node: SessionNode,
    live: list[TranscriptEntry],
    context: RollingContext | None,
    context_window_tokens: int,
    config: CompactionConfig,
    custom_instructions: str | None,
    boundary: str | None,
) -> CompactionPlan:
    """The engine's plan for the source :func:`read_source` read: what
    :func:`compact_with_result` runs and ``needs_compaction`` reports (one code path)."""
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
    return plan_compaction(request)


async def compact_with_result(
    uow: UnitOfWork,
    compactor: Compactor,
    key: CanonicalKey,
    context_window_tokens: int,
    config: CompactionConfig,
    custom_instructions: str | None,
    options: CompactionOptions,
) -> CompactionResult:
    """Plan a compaction of ``key`` and run it, or share an equal run already going
    (the arguments as :func:`.options.check_compaction_call` passed them)."""
    mutation_context = options.get("mutation_context")
    chosen = options.get("summarizer")
    if chosen is None:
        chosen = compactor.summarizer
    boundary = options.get("protected_boundary_message_id")
    against_source = compactor.against_source(mutation_context)
    total = config.total_timeout_seconds
    deadline = asyncio.get_running_loop().time() + total

    async def read() -> tuple[SessionNode, list[TranscriptEntry], RollingContext | None]:
        async with entered(mutation_context):
            return await read_source(uow, key, config)

    while True:
        node, live, context = await bounded("read", read(), deadline, total)
        # A missing boundary is a skip here: no summariser call, no flight, no write.
        plan = plan_for(
            node, live, context, context_window_tokens, config, custom_instructions, boundary
        )
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
            "flush_receipt_status": options.get("flush_receipt_status"),
            "compaction_id": options.get("compaction_id"),
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
        run = Run(
            key=key,
            node=node,
            live=live,
            plan=plan,
            summarizer=chosen if chosen is not None else compactor.summarizer_for(config),
            window=context_window_tokens,
            record={
                "compaction_id": options.get("compaction_id"),
                "trigger_reason": options.get("trigger_reason"),
                "flush_receipt_status": options.get("flush_receipt_status"),
            },
            mutation_context=mutation_context,
            against_source=against_source,
            lease_key=lease_key,
            context=context,
            deadline=deadline,
            total=total,
        )
        try:
            return await join_flight(uow, flight, functools.partial(run_flight, uow, run=run))
        except Replan:
            continue  # another worker compacted the session meanwhile: plan again
