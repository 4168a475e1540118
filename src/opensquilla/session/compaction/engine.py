"""Compaction as two pure steps around the summariser (docs/semantics.md#compaction).

1. :func:`plan_compaction` sizes every entry, applies the skip checks and the cut planner,
   and splits the removed part into chunks. The caller then summarises each chunk (the
   summariser may be a model, so it runs outside this package and outside any transaction).
2. :func:`finish_compaction` merges the chunk summaries, checks obligation coverage, builds
   the structured payload, applies the quality gate and returns the result.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from . import planner
from .config import CompactionConfig
from .coverage import cover_summary, removed_obligations
from .fallback import budget_tokens_for, fallback_summary, merge_chunk_summaries
from .result import CompactionRequest, CompactionResult
from .tokens import entry_tokens, estimate_tokens

MAX_CUSTOM_INSTRUCTIONS = 2000
PREVIOUS_SUMMARY_MARKER = "__prev_summary__:"
ROLLING_HEADER = "[Deterministic rolling context]"


def normalize_instructions(custom_instructions: str | None) -> tuple[str | None, str | None]:
    """``(instructions, previous_summary)``; refuses instructions over 2000 characters."""
    text = (custom_instructions or "").strip()
    if len(text) > MAX_CUSTOM_INSTRUCTIONS:
        raise ValueError("custom compaction instructions are too long")
    if not text:
        return None, None
    first, _, rest = text.partition("\n")
    if first.startswith(PREVIOUS_SUMMARY_MARKER):
        previous = first[len(PREVIOUS_SUMMARY_MARKER) :].strip() or None
        return rest.strip() or None, previous
    return text, None


def rolling_checkpoint(request: CompactionRequest) -> str | None:
    """The previous checkpoint a rolling compaction folds in (stripped), or ``None``: the
    switch is off or there is none."""
    if not request.config.rolling_checkpoints:
        return None
    return (request.previous_summary or "").strip() or None


def summarizer_chunks(plan: CompactionPlan) -> list[list[dict[str, Any]]]:
    """The chunks as a summariser is handed them: under rolling checkpoints the first one
    opens with the previous checkpoint (a ``system`` row), so that a model folds it and the
    new rows into one replacement checkpoint (docs/semantics.md#rolling-checkpoints)."""
    rolling = rolling_checkpoint(plan.request)
    if rolling is None or not plan.chunks:
        return plan.chunks
    first = [{"role": "system", "content": f"{ROLLING_HEADER}\n{rolling}"}, *plan.chunks[0]]
    return [first, *plan.chunks[1:]]


def _kept(entries: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The caller's entries as given (shallow copies, every key kept)."""
    return [dict(entry) for entry in entries]


@dataclass
class CompactionPlan:
    """A planned compaction: either a finished skip, or the chunks to summarise."""

    request: CompactionRequest
    sizes: list[int]
    cut: int
    chunks: list[list[dict[str, Any]]]
    instructions: str | None
    previous_summary: str | None
    skipped: CompactionResult | None = None

    @property
    def total(self) -> int:
        return sum(self.sizes)

    @property
    def config(self) -> CompactionConfig:
        return self.request.config


def bound_to_boundary(request: CompactionRequest) -> CompactionRequest | None:
    """``request`` with its protected tail reaching back to the first entry carrying its
    ``protected_boundary_message_id`` (``protected_recent_messages = max(protected tail,
    entries from there on)``, on a copy of the config); ``request`` itself without a
    boundary; ``None`` when no entry carries it (HEAD-FEATURES §5.2)."""
    boundary = request.protected_boundary_message_id
    if boundary is None:
        return request
    message_ids = request.entry_message_ids or []
    index = next((i for i, found in enumerate(message_ids) if found == boundary), None)
    if index is None:
        return None
    config = request.config
    protected = max(config.protected_tail, len(request.entries) - index)
    return replace(request, config=config.replace(protected_recent_messages=protected))


def _skip(request: CompactionRequest, total: int, reason: str) -> CompactionResult:
    """Nothing removed: every entry kept, for ``reason``."""
    return CompactionResult(
        summary="",
        kept_entries=_kept(request.entries),
        removed_count=0,
        chunks_processed=0,
        summary_source="skipped",
        tokens_before=total,
        tokens_after=total,
        remaining_budget_tokens=max(request.context_window_tokens - total, 0),
        skip_reason=reason,
    )


def plan_compaction(request: CompactionRequest) -> CompactionPlan:
    instructions, previous = normalize_instructions(request.custom_instructions)
    entries = request.entries
    window = request.context_window_tokens
    sizes = [entry_tokens(entry) for entry in entries]
    bounded = bound_to_boundary(request)
    if bounded is None:
        skipped = _skip(request, sum(sizes), planner.PROTECTED_BOUNDARY_MISSING)
        return CompactionPlan(request, sizes, 0, [], instructions, previous, skipped)
    request = bounded
    cut = planner.plan_cut(entries, sizes, window, request.config)
    plan = CompactionPlan(request, sizes, cut.index, [], instructions, previous)
    if cut.skip_reason is not None:
        plan.skipped = _skip(request, sum(sizes), cut.skip_reason)
        return plan
    plan.chunks = [
        [dict(e) for e in part]
        for part in planner.chunk(entries[: cut.index], request.config.chunk_ratio)
    ]
    return plan


def fallback_for(plan: CompactionPlan, index: int) -> str:
    """The fallback for one chunk a summariser left empty, budgeted on that chunk."""
    chunk = plan.chunks[index]
    return fallback_summary(
        chunk,
        identifier_policy=str(plan.config.identifier_policy),
        budget_tokens=budget_tokens_for(sum(entry_tokens(entry) for entry in chunk)),
    )


def finish_compaction(
    plan: CompactionPlan, chunk_summaries: Sequence[str | None], chunk_sources: Sequence[str]
) -> CompactionResult:
    """The result of ``plan`` given each chunk's summary (``None``: use the fallback) and
    where each came from (``"llm"`` or ``"fallback"``)."""
    if plan.skipped is not None:
        return plan.skipped
    request, config = plan.request, plan.config
    window = request.context_window_tokens
    entries = request.entries
    removed = entries[: plan.cut]
    kept = entries[plan.cut :]
    ids = request.entry_ids[: plan.cut] if request.entry_ids is not None else None
    verified = config.verified_backfill
    obligations, pending = removed_obligations(removed, ids, entries, verified=verified)
    removed_found = obligations  # what the fallback keeps: the removed rows' own facts
    rolling = rolling_checkpoint(request)
    if rolling is not None:  # the previous checkpoint's facts must survive the fold too
        obligations, pending = removed_obligations(
            [{"role": "user", "content": rolling}, *removed],
            None if ids is None else [None, *ids],
            entries,
            verified=verified,
        )
    texts = [text.strip() if text and text.strip() else None for text in chunk_summaries]
    llm_parts = sum(
        text is not None and source == "llm"
        for text, source in zip(texts, chunk_sources, strict=True)
    )
    if llm_parts == len(texts):
        summary_source = "llm"
    elif llm_parts:
        summary_source = "mixed"
    else:
        summary_source = "fallback"
    if all(text is None for text in texts):
        # No summariser text at all: one fallback over everything removed, in one budget.
        summary = fallback_summary(
            removed,
            identifier_policy=str(config.identifier_policy),
            budget_tokens=budget_tokens_for(sum(plan.sizes[: plan.cut])),
            obligations=removed_found,
        )
    else:
        summary = merge_chunk_summaries(
            [text if text is not None else fallback_for(plan, i) for i, text in enumerate(texts)]
        )
    if plan.previous_summary:
        summary = f"[Previous context]\n{plan.previous_summary}\n\n[New context]\n{summary}"
    previous_tokens: int | None = None
    if config.rolling_checkpoints:
        previous_tokens = estimate_tokens(rolling) if rolling else 0
        if rolling and summary_source != "llm":
            # A model was handed the checkpoint and folded it (summarizer_chunks); without
            # one for every chunk, the fold is deterministic: header, previous body, new part.
            summary = f"{ROLLING_HEADER}\n{rolling}\n\n{summary}"

    covered = cover_summary(
        summary, obligations, blocking=config.coverage_blocking, verified=verified, pending=pending
    )
    summary, coverage = covered.summary, covered.coverage
    if previous_tokens is not None:
        # Rolling checkpoints: whether this summary replaces a previous one, and its size.
        covered.payload["source_coverage"]["replaces_prior_context"] = previous_tokens > 0
        covered.payload["source_coverage"]["previous_summary_tokens"] = previous_tokens
    kept_tokens = sum(plan.sizes[plan.cut :])
    tokens_after = estimate_tokens(summary) + kept_tokens
    # The context a rolling checkpoint replaces includes the previous checkpoint.
    tokens_before = plan.total + (previous_tokens or 0)
    result = CompactionResult(
        summary=summary,
        kept_entries=_kept(kept),
        removed_count=len(removed),
        chunks_processed=len(texts),
        summary_source=summary_source,
        tokens_before=tokens_before,
        tokens_after=tokens_after,
        remaining_budget_tokens=max(window - tokens_after, 0),
        summary_payload=covered.payload,
        summary_format="structured_v1",
        coverage_status=coverage.status,
        missing_obligations=list(coverage.missing),
        critical_carry_forward=list(coverage.carry_forward),
    )
    if coverage.status == "fail_blocked":
        return _refused(result, entries, tokens_before, window, planner.COVERAGE_BLOCKED)

    protected = config.protected_tail
    tail_preserved = protected <= 0 or result.kept_entries[-protected:] == _kept(
        entries[-protected:]
    )
    result.quality_report = {
        "profile": config.compaction_profile,
        "protected_recent_messages": protected,
        "protected_tail_preserved": tail_preserved,
        "compression_ratio": tokens_after / tokens_before if tokens_before else 0.0,
        "fits_context_window": tokens_after * config.safety_margin <= window,
        "passes_structural_gate": bool(
            result.removed_count > 0 and tail_preserved and tokens_after < tokens_before
        ),
    }
    if not result.quality_report["passes_structural_gate"]:
        return _refused(result, entries, tokens_before, window, planner.QUALITY_GATE_FAILED)
    return result


def _refused(
    result: CompactionResult,
    entries: list[dict[str, Any]],
    tokens_before: int,
    window: int,
    reason: str,
) -> CompactionResult:
    """``result`` turned into a refusal: nothing removed, every entry kept, ``reason``."""
    result.summary = ""
    result.removed_count = 0
    result.kept_entries = _kept(entries)
    result.tokens_after = tokens_before
    result.remaining_budget_tokens = max(window - tokens_before, 0)
    result.skip_reason = reason
    return result


def compact_entries(request: CompactionRequest) -> CompactionResult:
    """Plan and finish with the deterministic fallback for every chunk (no summariser)."""
    plan = plan_compaction(request)
    if plan.skipped is not None:
        return plan.skipped
    return finish_compaction(plan, [None] * len(plan.chunks), ["fallback"] * len(plan.chunks))
