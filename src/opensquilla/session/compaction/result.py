"""The request and result shapes of a compaction (docs/semantics.md#compaction)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from .config import CompactionConfig

# The keys of a transcript dict as compaction sees it (and returns it in kept_entries).
ENTRY_KEYS = (
    "role",
    "content",
    "token_count",
    "tool_calls",
    "tool_call_id",
    "reasoning_content",
    "turn_usage",
)


def entry_dict(entry: Any) -> dict[str, Any]:
    """The compaction view of a transcript entry (a model or a mapping)."""
    if isinstance(entry, dict):
        return {key: entry.get(key) for key in ENTRY_KEYS}
    return {key: getattr(entry, key, None) for key in ENTRY_KEYS}


@dataclass
class CompactionRequest:
    session_id: str
    entries: list[dict[str, Any]]
    context_window_tokens: int
    config: CompactionConfig = field(default_factory=CompactionConfig)
    custom_instructions: str | None = None
    entry_ids: list[int | None] | None = None  # row ids, for obligation provenance
    # The entries' message ids, for the protected boundary (one per entry).
    entry_message_ids: list[str | None] | None = None
    # Keep the entry carrying this message id and every later one (HEAD-FEATURES §5.2);
    # no entry carries it: skip with ``protected_boundary_missing``.
    protected_boundary_message_id: str | None = None


@dataclass
class CompactionResult:
    summary: str
    kept_entries: list[dict[str, Any]]
    removed_count: int
    chunks_processed: int
    summary_source: str = "unknown"
    tokens_before: int = 0
    tokens_after: int = 0
    remaining_budget_tokens: int = 0
    summary_payload: dict[str, Any] | None = None
    summary_format: str = "text"
    coverage_status: str = "unknown"
    missing_obligations: list[str] | None = None
    critical_carry_forward: list[str] | None = None
    skip_reason: str | None = None
    quality_report: dict[str, Any] = field(default_factory=dict)

    def skipped(
        self, reason: str, *, kept_entries: list[dict[str, Any]], window: int
    ) -> CompactionResult:
        """This result turned into "nothing was removed" (the transcript stays as it is)."""
        return replace(
            self,
            summary="",
            removed_count=0,
            chunks_processed=0,
            summary_source="skipped",
            kept_entries=kept_entries,
            tokens_after=self.tokens_before,
            remaining_budget_tokens=max(window - self.tokens_before, 0),
            skip_reason=reason,
        )
