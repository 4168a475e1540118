"""The compaction engine: pure planning and summarising, no I/O, no database, no asyncio.

The manager reads the transcript, cleans its silent replies out of the compactor's input
(:func:`sanitize_silent_replies`, never in storage), asks :func:`plan_compaction` where to
cut, has each chunk summarised (a :class:`Summarizer`, the deterministic fallback by
default), asks :func:`finish_compaction` for the result, and persists it atomically.
"""

from __future__ import annotations

from .config import CompactionConfig
from .decision import CompactionDecision
from .engine import (
    CompactionPlan,
    compact_entries,
    finish_compaction,
    normalize_instructions,
    plan_compaction,
)
from .result import ENTRY_KEYS, INPUT_KEYS, CompactionRequest, CompactionResult, entry_dict
from .rounds import api_rounds
from .silent_lines import SILENT_REPLY_TOKENS
from .silent_reply import sanitize_silent_replies, sanitize_silent_reply
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
from .tools import is_assistant_tool_call, is_tool_result

__all__ = [
    "ENTRY_KEYS",
    "INPUT_KEYS",
    "SILENT_REPLY_TOKENS",
    "CompactionConfig",
    "CompactionDecision",
    "CompactionPlan",
    "CompactionRequest",
    "CompactionResult",
    "FallbackSummarizer",
    "Summarizer",
    "api_rounds",
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
    "sanitize_silent_replies",
    "sanitize_silent_reply",
    "summarize_tool_calls",
]
