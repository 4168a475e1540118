"""What a prompt needs from a session, read in one snapshot: :class:`ContextView`."""

from __future__ import annotations

from dataclasses import dataclass

from .messages import TranscriptEntry
from .records import SessionSummary


@dataclass(frozen=True, slots=True)
class ContextView:
    """The latest compaction summary and the newest live messages that fit a token budget.

    ``messages`` are oldest first and start on a turn boundary: at a ``user`` message when
    one fits, otherwise at the oldest fitting message that is not a tool result, so a tool
    call is never separated from its result. Token figures use the store's estimator
    (``compaction.tokens``): ``summary_tokens`` for the summary text, ``message_tokens`` for
    the returned messages (tool-call payloads and reasoning included), ``budget_tokens`` is
    what was left for messages after the summary. ``truncated``: older live messages were
    left out (``False``: the view holds the whole live transcript). The read is bounded by
    the budget, not by the transcript's length.
    """

    session_key: str
    session_id: str
    epoch: int
    summary: SessionSummary | None
    messages: list[TranscriptEntry]
    max_tokens: int
    summary_tokens: int
    budget_tokens: int
    message_tokens: int
    truncated: bool

    @property
    def total_tokens(self) -> int:
        """Summary plus messages: what the view costs in a prompt."""
        return self.summary_tokens + self.message_tokens


__all__ = ["ContextView"]
