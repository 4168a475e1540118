"""What a prompt needs from a session, read in one snapshot: :class:`ContextView`."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, Literal, get_args

from ..compaction.summary_replay import format_compaction_summary_context
from ..errors import InvalidInputError
from .checks import check_flag, describe
from .messages import TranscriptEntry
from .records import SessionSummary

SummaryRole = Literal["system", "user"]
SUMMARY_ROLES: tuple[str, ...] = get_args(SummaryRole)
ChatMessage = dict[str, Any]


def chat_message(entry: TranscriptEntry, *, include_reasoning: bool = False) -> ChatMessage:
    """One transcript entry as an OpenAI chat-completions message: ``role`` and ``content``
    always (``None`` content is ``""``, except an assistant message carrying tool calls,
    which keeps ``None`` as that API allows), ``tool_calls`` when the entry has any (a
    copy, in the shape they were stored in), ``tool_call_id`` when set, and
    ``reasoning_content`` only with ``include_reasoning`` and when set. Nothing else of the
    entry (``metadata``, ``turn_usage``, ``turn_context``, provenance, ids) goes to a model."""
    content = entry.content
    if content is None and not (entry.role == "assistant" and entry.tool_calls):
        content = ""
    message: ChatMessage = {"role": entry.role, "content": content}
    if entry.tool_calls:
        message["tool_calls"] = copy.deepcopy(entry.tool_calls)
    if entry.tool_call_id is not None:
        message["tool_call_id"] = entry.tool_call_id
    if include_reasoning and entry.reasoning_content is not None:
        message["reasoning_content"] = entry.reasoning_content
    return message


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

    def summary_message(self, *, role: SummaryRole = "system") -> ChatMessage | None:
        """The summary as one chat message, or ``None`` without one (or with an empty
        text): ``content`` is the store's replay text of it,
        ``format_compaction_summary_context([summary_text])`` (``[Compacted Session
        Summaries]``, ``[Summary 1]``, the text; upstream's request replay, at most 16,000
        characters), ``role`` ``"system"`` (the default) or ``"user"`` (for a provider that
        takes one system prompt only)."""
        if not isinstance(role, str) or role not in SUMMARY_ROLES:
            raise InvalidInputError(
                f"summary_role must be 'system' or 'user', not {describe(role)}"
            )
        if self.summary is None:
            return None
        text = format_compaction_summary_context([self.summary.summary_text])
        return None if text is None else {"role": role, "content": text}

    def as_chat_messages(
        self, *, include_reasoning: bool = False, summary_role: SummaryRole = "system"
    ) -> list[ChatMessage]:
        """The view as OpenAI chat-completions messages, oldest first: the summary first
        (:meth:`summary_message`, a ``system`` message unless ``summary_role="user"``),
        then one message per entry of :attr:`messages` (:func:`chat_message`), in order and
        none left out, so a tool call and its results stay together as the view holds them
        (a view never starts on a tool result). ``reasoning_content`` only with
        ``include_reasoning=True``. Pure: the view is read, nothing else; new dicts each
        call (docs/reading.md#chat-messages)."""
        check_flag("include_reasoning", include_reasoning)
        summary = self.summary_message(role=summary_role)
        messages = [] if summary is None else [summary]
        messages += [
            chat_message(entry, include_reasoning=include_reasoning) for entry in self.messages
        ]
        return messages


__all__ = ["ChatMessage", "ContextView", "SummaryRole", "chat_message"]
