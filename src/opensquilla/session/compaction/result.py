"""The request and result shapes of a compaction (docs/semantics.md#compaction)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields, replace
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
# What the manager hands the compactor for one stored row: those keys plus the row's
# identity and its turn context, which silent-reply sanitising reads (HEAD-FEATURES §5.5).
INPUT_KEYS = ("id", "message_id", *ENTRY_KEYS, "turn_context")


def entry_dict(entry: Any, keys: tuple[str, ...] = ENTRY_KEYS) -> dict[str, Any]:
    """The compaction view of a transcript entry (a model or a mapping) on ``keys``."""
    if isinstance(entry, dict):
        return {key: entry.get(key) for key in keys}
    return {key: getattr(entry, key, None) for key in keys}


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
    # Rolling checkpoints only (``config.rolling_checkpoints``): the text of the active
    # context records this compaction's summary replaces (docs/semantics.md#rolling-checkpoints).
    previous_summary: str | None = None


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


_DOCUMENT_FIELDS = tuple(f.name for f in fields(CompactionResult) if f.name != "kept_entries")


def result_document(result: CompactionResult) -> str:
    """``result`` as JSON text without its kept entries (what another worker needs to
    answer an equal compaction; the kept entries it reads from the transcript itself)."""
    document = {name: getattr(result, name) for name in _DOCUMENT_FIELDS}
    return json.dumps(document, sort_keys=True, default=str)  # ASCII: no NUL, no surrogate


def result_from_document(text: str, kept_entries: list[dict[str, Any]]) -> CompactionResult:
    """The result :func:`result_document` wrote, with ``kept_entries``."""
    document = json.loads(text)
    return CompactionResult(
        kept_entries=kept_entries,
        **{name: document[name] for name in _DOCUMENT_FIELDS if name in document},
    )
