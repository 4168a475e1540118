"""The compaction engine: pure planning and summarising, no I/O, no database, no asyncio.

The manager feeds it transcript dicts and persists what it decides.
"""

from __future__ import annotations

from .config import CompactionConfig
from .tokens import entry_tokens, estimate_tokens, estimate_tokens_for_length

__all__ = ["CompactionConfig", "entry_tokens", "estimate_tokens", "estimate_tokens_for_length"]
