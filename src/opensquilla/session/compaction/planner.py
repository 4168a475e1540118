"""Where to cut: skip checks, keep budget, tool-pair repair, protected tail, turn boundaries,
under either cut policy (docs/semantics.md#skip-reasons, #api-rounds). Pure functions over
transcript dicts."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from . import rounds
from .config import CompactionConfig
from .tools import is_assistant_tool_call, is_tool_result

NO_ENTRIES = "no_entries"
WITHIN_BUDGET = "within_compaction_budget"
NO_SAFE_BOUNDARY = "no_safe_turn_boundary"
PROTECTED_TAIL_EXHAUSTS = "protected_tail_exhausts_compaction_window"
COVERAGE_BLOCKED = "coverage_blocked"
QUALITY_GATE_FAILED = "quality_gate_failed"
NO_CONTEXT_WINDOW = "no_context_window"
EMPTY_SUMMARY = "empty_summary"
STALE_PREIMAGE = "stale_preimage"
STALE_CONTEXT_STATE = "stale_context_state"
PROTECTED_BOUNDARY_MISSING = "protected_boundary_missing"


@dataclass(frozen=True)
class Cut:
    """``entries[:index]`` are summarised away; ``entries[index:]`` stay live."""

    index: int
    skip_reason: str | None = None


def budget_cut(sizes: Sequence[int], keep_budget: int) -> int:
    """Keep the longest newest suffix whose tokens fit ``keep_budget``."""
    running = 0
    start = len(sizes)
    for index in range(len(sizes) - 1, -1, -1):
        if running + sizes[index] > keep_budget:
            break
        running += sizes[index]
        start = index
    return start


def repair_pairs(entries: Sequence[Mapping[str, Any]], cut: int) -> int:
    """Never end the removed part on a tool call whose result is kept."""
    while (
        0 < cut < len(entries)
        and is_assistant_tool_call(entries[cut - 1])
        and is_tool_result(entries[cut])
    ):
        cut -= 1
    return cut


def retreat_to_turn_boundary(entries: Sequence[Mapping[str, Any]], cut: int) -> int:
    """Move the cut earlier until the kept part does not start inside a tool exchange."""
    while 0 < cut < len(entries):
        if is_tool_result(entries[cut]):
            start = cut
            while start > 0 and is_tool_result(entries[start - 1]):
                start -= 1
            if start > 0 and is_assistant_tool_call(entries[start - 1]):
                cut = start - 1
                continue
            if start < cut:
                cut = start
                continue
        if is_assistant_tool_call(entries[cut - 1]) and is_tool_result(entries[cut]):
            cut -= 1
            continue
        break
    return max(cut, 0)


def entry_cut(
    entries: Sequence[Mapping[str, Any]], sizes: Sequence[int], window: int, protected: int
) -> int:
    """The ``entries`` policy (the contract's): the longest newest suffix within the budget,
    then pair repair, the protected tail and the turn boundary, entry by entry."""
    cut = budget_cut(sizes, window // 2)
    cut = repair_pairs(entries, cut)
    if protected > 0:
        cut = max(min(cut, len(entries) - protected), 0)
    return retreat_to_turn_boundary(entries, cut)


def round_cut(
    entries: Sequence[Mapping[str, Any]],
    sizes: Sequence[int],
    window: int,
    protected: int,
    *,
    semantic_tail: bool,
) -> int:
    """The ``api_rounds`` policy (HEAD's): keep whole rounds from the newest within the budget
    (none fits: everything may go), then bound the cut by the protected tail and the semantic
    tail, and move it back to the start of the round it falls in."""
    groups = rounds.api_rounds(entries)
    first_kept = budget_cut([sum(sizes[g.start : g.stop]) for g in groups], window // 2)
    cut = groups[first_kept].start if first_kept < len(groups) else len(entries)
    cut = min(cut, max(len(entries) - protected, 0))
    if semantic_tail:
        cut = min(cut, rounds.semantic_tail_start(entries, groups))
    return rounds.round_start(groups, cut)


def plan_cut(
    entries: Sequence[Mapping[str, Any]],
    sizes: Sequence[int],
    window: int,
    config: CompactionConfig,
) -> Cut:
    """The cut for ``entries`` in a ``window``-token context, or the reason to skip."""
    if not entries:
        return Cut(0, NO_ENTRIES)
    if window <= 0:
        # No summary fits a window of nothing: compacting would only destroy the transcript.
        return Cut(0, NO_CONTEXT_WINDOW)
    total = sum(sizes)
    if total * config.safety_margin <= window:
        return Cut(0, WITHIN_BUDGET)
    protected = config.protected_tail
    if config.cut_policy == "api_rounds":
        cut = round_cut(
            entries, sizes, window, protected, semantic_tail=config.protect_semantic_tail
        )
    else:
        cut = entry_cut(entries, sizes, window, protected)
    if cut == 0:
        return Cut(0, PROTECTED_TAIL_EXHAUSTS if protected > 0 else NO_SAFE_BOUNDARY)
    return Cut(cut)


def chunk(entries: Sequence[Mapping[str, Any]], ratio: float) -> list[list[Mapping[str, Any]]]:
    """Consecutive slices of ``max(1, int(len * ratio))`` entries (docs/semantics.md#compaction)."""
    size = max(1, int(len(entries) * ratio))
    return [list(entries[i : i + size]) for i in range(0, len(entries), size)]
