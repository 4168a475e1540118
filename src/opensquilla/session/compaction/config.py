"""Compaction settings (SEMANTICS §2.6)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

IdentifierPolicy = Literal["strict", "custom", "off"]
PROFILES_WITH_PROTECTED_TAIL = frozenset({"coding", "research", "support"})
PROFILE_PROTECTED_TAIL = 12


@dataclass
class CompactionConfig:
    """How compaction sizes chunks, when it triggers, and what it protects.

    The LLM summariser runs only when both ``api_key`` and ``model`` are set; otherwise
    the deterministic fallback summary is used.
    """

    base_chunk_ratio: float = 0.4
    min_chunk_ratio: float = 0.15
    safety_margin: float = 1.2
    default_parts: int = 2
    identifier_policy: IdentifierPolicy | str = "strict"
    model: str | None = None
    api_key: str = ""
    base_url: str = "https://openrouter.ai/api/v1"
    timeout_seconds: float = 90.0
    coverage_blocking: bool = False
    compaction_profile: str = "conversation"
    protected_recent_messages: int = 0

    def __repr__(self) -> str:
        # Never show the API key.
        shown = {k: ("***" if k == "api_key" and v else v) for k, v in self.__dict__.items()}
        return "CompactionConfig(" + ", ".join(f"{k}={v!r}" for k, v in shown.items()) + ")"

    @property
    def protected_tail(self) -> int:
        """Recent messages compaction never removes (0 = none)."""
        if self.protected_recent_messages > 0:
            return self.protected_recent_messages
        if self.compaction_profile in PROFILES_WITH_PROTECTED_TAIL:
            return PROFILE_PROTECTED_TAIL
        return 0

    @property
    def chunk_ratio(self) -> float:
        return max(self.min_chunk_ratio, self.base_chunk_ratio / max(1, self.default_parts))

    @property
    def llm_enabled(self) -> bool:
        return bool(self.api_key and self.model)
