"""Whether a compaction would run: the plan's decision, without summarising
(docs/compaction.md#needs-compaction).

:func:`decide` reads a :class:`~.engine.CompactionPlan`, the same plan
``compact_with_result`` makes before it calls a summariser, so the two can never disagree
on the decision taken before the summary. What only a summary can tell (the quality gate,
obligation coverage, an empty summary) and what only the commit can (a transcript changed
meanwhile) is still ``compact_with_result``'s: a planned compaction may be refused after
its summary, never the other way round.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .engine import CompactionPlan


@dataclass(frozen=True, slots=True)
class CompactionDecision:
    """What ``compact_with_result`` would decide now, before any summary.

    ``should_compact``: it would summarise and commit (``removable_count`` rows folded
    away); else ``skip_reason`` is the reason its result would carry (``within_compaction_
    budget``, ``no_entries``, ``no_safe_turn_boundary``, ...). ``estimated_tokens`` is the
    live transcript's size as the planner sizes it; the plan looks for a cut once it is above
    ``threshold_tokens`` (``context_window_tokens / safety_margin``, rounded down).
    """

    should_compact: bool
    skip_reason: str | None
    estimated_tokens: int
    threshold_tokens: int
    context_window_tokens: int
    entry_count: int
    removable_count: int


def threshold_tokens(window: int, safety_margin: float) -> int:
    """The largest transcript size the planner keeps as it is: the largest ``t`` with
    ``t * safety_margin <= window`` (0 for a window of nothing)."""
    if window <= 0:
        return 0
    tokens = math.floor(window / safety_margin)
    while (tokens + 1) * safety_margin <= window:
        tokens += 1
    while tokens > 0 and tokens * safety_margin > window:
        tokens -= 1
    return tokens


def decide(plan: CompactionPlan) -> CompactionDecision:
    """The decision of ``plan`` (:func:`~.engine.plan_compaction`'s)."""
    request = plan.request
    window = request.context_window_tokens
    skipped = plan.skipped
    return CompactionDecision(
        should_compact=skipped is None,
        skip_reason=None if skipped is None else skipped.skip_reason,
        estimated_tokens=plan.total,
        threshold_tokens=threshold_tokens(window, request.config.safety_margin),
        context_window_tokens=window,
        entry_count=len(request.entries),
        removable_count=0 if skipped is not None else plan.cut,
    )


__all__ = ["CompactionDecision", "decide", "threshold_tokens"]
