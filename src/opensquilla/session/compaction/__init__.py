"""The compaction engine: pure planning and summarising, no I/O, no database, no asyncio.

The manager reads the transcript, asks :func:`plan_compaction` where to cut, has each chunk
summarised (a :class:`Summarizer`, the deterministic fallback by default), asks
:func:`finish_compaction` for the result, and persists it atomically.
"""

from __future__ import annotations

from .config import CompactionConfig
from .engine import (
    CompactionPlan,
    compact_entries,
    finish_compaction,
    normalize_instructions,
    plan_compaction,
)
from .planner import is_assistant_tool_call, is_tool_result
from .result import ENTRY_KEYS, CompactionRequest, CompactionResult, entry_dict
from .summarizer import FallbackSummarizer, Summarizer
from .summary_replay import format_compaction_summary_context
from .tokens import (
    entry_tokens,
    estimate_entries_model_replay_chars,
    estimate_entry_model_replay_tokens,
    estimate_tokens,
    estimate_tokens_for_length,
)
from .tool_payload import estimate_entry_replay_tokens, summarize_tool_calls

__all__ = [
    "ENTRY_KEYS",
    "CompactionConfig",
    "CompactionPlan",
    "CompactionRequest",
    "CompactionResult",
    "FallbackSummarizer",
    "Summarizer",
    "compact_entries",
    "entry_dict",
    "entry_tokens",
    "estimate_entries_model_replay_chars",
    "estimate_entry_model_replay_tokens",
    "estimate_entry_replay_tokens",
    "estimate_tokens",
    "estimate_tokens_for_length",
    "finish_compaction",
    "format_compaction_summary_context",
    "is_assistant_tool_call",
    "is_tool_result",
    "normalize_instructions",
    "plan_compaction",
    "summarize_tool_calls",
]
