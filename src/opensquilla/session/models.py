"""The public data shapes: pydantic v2 models and string enums (SEMANTICS §2).

Models are plain mutable objects, detached from any database session: callers read them,
change them and hand them back. Field names, types and defaults are the contract's.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any, Self

from pydantic import BaseModel, ConfigDict, Field, field_validator

from .clock import new_message_id, new_session_id, now_ms


class SessionStatus(StrEnum):
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    KILLED = "killed"
    TIMEOUT = "timeout"


class SessionIntent(StrEnum):
    CONTINUE = "continue"
    NEW_CHAT = "new_chat"
    RESET_SAME_KEY = "reset_same_key"


class ChatType(StrEnum):
    DIRECT = "direct"
    GROUP = "group"
    CHANNEL = "channel"
    UNKNOWN = "unknown"


class QueueMode(StrEnum):
    STEER = "steer"
    FOLLOWUP = "followup"
    COLLECT = "collect"
    STEER_BACKLOG = "steer-backlog"
    STEER_PLUS_BACKLOG = "steer+backlog"
    QUEUE = "queue"
    INTERRUPT = "interrupt"


class SendPolicy(StrEnum):
    ALLOW = "allow"
    DENY = "deny"


class InputProvenanceKind(StrEnum):
    EXTERNAL_USER = "external_user"
    INTER_SESSION = "inter_session"
    INTERNAL_SYSTEM = "internal_system"


class FlushReceiptStatus(StrEnum):
    """Values the compaction flush receipt takes (SEMANTICS §10.2); any string is stored."""

    UNKNOWN = "unknown"
    SAFE = "safe"
    NOOP_NO_MEMORY = "noop_no_memory"
    ARCHIVE_ONLY = "archive_only"
    DEGRADED_FORENSIC = "degraded_forensic"
    FAILED_RETRYABLE = "failed_retryable"
    NOT_REQUIRED = "not_required"
    UNSAFE = "unsafe"


_set = object.__setattr__


# Identifier-like message fields: plain text on both backends, so NUL is refused in them.
IDENTIFIER_FIELDS = (
    "session_id",
    "session_key",
    "message_id",
    "role",
    "tool_call_id",
    "provenance_kind",
    "provenance_origin_session_id",
    "provenance_source_session_key",
    "provenance_source_channel",
    "provenance_source_tool",
)


def _refuse_nul(cls: type, value: str | None) -> str | None:
    """Identifier-like text may not hold NUL (Postgres could not store it as plain text)."""
    if value is not None and "\x00" in value:
        raise ValueError("must not contain NUL characters")
    return value


class _Record(BaseModel):
    """Base of the persisted records: mutable, strict about unknown fields."""

    model_config = ConfigDict(extra="forbid", validate_assignment=False)

    @classmethod
    def from_row(cls, values: dict[str, Any]) -> Self:
        """Build from a complete row whose values the database already typed.

        No validation and no defaults to fill: what ``model_construct`` does for a full set
        of fields, without its per-field bookkeeping (reads build thousands of these).
        """
        obj = cls.__new__(cls)
        _set(obj, "__dict__", values)
        _set(obj, "__pydantic_fields_set__", set(values))
        _set(obj, "__pydantic_extra__", None)
        _set(obj, "__pydantic_private__", None)
        return obj


class SessionNode(_Record):
    """One session row (table ``sessions``): identity, routing, counters, lineage."""

    session_key: str
    session_id: str = Field(default_factory=new_session_id)
    created_at: int = Field(default_factory=now_ms)
    updated_at: int = Field(default_factory=now_ms)
    started_at: int | None = None
    ended_at: int | None = None
    runtime_ms: int | None = None
    last_channel: str | None = None
    last_to: str | None = None
    last_account_id: str | None = None
    last_thread_id: str | None = None
    delivery_context: dict[str, Any] | None = None
    model: str | None = None
    model_provider: str | None = None
    provider_override: str | None = None
    model_override: str | None = None
    auth_profile_override: str | None = None
    auth_profile_override_source: str | None = None
    context_tokens: int | None = None
    model_routing_mode: str | None = None
    model_routing_revision: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    total_tokens: int = 0
    total_tokens_fresh: bool = False
    estimated_cost_usd: float = 0.0
    total_cost_usd: float = 0.0
    billed_cost_usd: float = 0.0
    estimated_cost_component_usd: float = 0.0
    cost_source: str = "none"
    missing_cost_entries: int = 0
    cache_read: int = 0
    cache_write: int = 0
    compaction_count: int = 0
    session_file: str | None = None
    spawned_by: str | None = None
    parent_session_key: str | None = None
    forked_from_parent: bool = False
    spawn_depth: int = 0
    status: str = SessionStatus.RUNNING.value
    chat_type: str = ChatType.UNKNOWN.value
    thinking_level: str | None = None
    fast_mode: bool = False
    verbose_level: str | None = None
    reasoning_level: str | None = None
    send_policy: str = SendPolicy.ALLOW.value
    queue_mode: str = QueueMode.STEER.value
    collaboration_mode: str = "default"
    collaboration_revision: int = 0
    active_plan_revision_id: str | None = None
    label: str | None = None
    display_name: str | None = None
    derived_title: str | None = None
    channel: str | None = None
    group_id: str | None = None
    subject: str | None = None
    origin: dict[str, Any] | None = None
    workspace_id: str | None = None
    agent_id: str = "main"
    schema_version: int = 1
    epoch: int = 0


class TranscriptEntry(_Record):
    """One transcript row (table ``transcript_entries``)."""

    id: int | None = None
    session_id: str
    session_key: str
    message_id: str = Field(default_factory=new_message_id)
    role: str
    content: str | None = None
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None
    reasoning_content: str | None = None
    turn_usage: dict[str, Any] | None = None
    turn_context: dict[str, Any] | None = None
    created_at: int = Field(default_factory=now_ms)
    token_count: int | None = None
    provenance_kind: str | None = None
    provenance_origin_session_id: str | None = None
    provenance_source_session_key: str | None = None
    provenance_source_channel: str | None = None
    provenance_source_tool: str | None = None
    schema_version: int = 1

    _identifiers_have_no_nul = field_validator(*IDENTIFIER_FIELDS)(_refuse_nul)


class CompactedTranscriptEntry(_Record):
    """One row of the compacted archive (table ``compacted_transcript_entries``)."""

    id: int | None = None
    session_id: str
    session_key: str
    compaction_id: str | None = None
    compaction_index: int | None = None
    original_entry_id: int | None = None
    message_id: str = Field(default_factory=new_message_id)
    role: str
    content: str | None = None
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None
    reasoning_content: str | None = None
    turn_usage: dict[str, Any] | None = None
    turn_context: dict[str, Any] | None = None
    created_at: int = Field(default_factory=now_ms)
    token_count: int | None = None
    provenance_kind: str | None = None
    provenance_origin_session_id: str | None = None
    provenance_source_session_key: str | None = None
    provenance_source_channel: str | None = None
    provenance_source_tool: str | None = None
    archived_at: int = Field(default_factory=now_ms)
    schema_version: int = 1

    _identifiers_have_no_nul = field_validator(*IDENTIFIER_FIELDS)(_refuse_nul)


class SessionSummary(_Record):
    """One compaction summary (table ``session_summaries``)."""

    id: int | None = None
    session_id: str
    session_key: str
    compaction_index: int = 0
    compaction_id: str | None = None
    trigger_reason: str | None = None
    summary_text: str
    summary_payload: dict[str, Any] | None = None
    summary_format: str = "text"
    summary_source: str = "unknown"
    coverage_status: str = "unknown"
    missing_obligations: list[str] | None = None
    critical_carry_forward: list[str] | None = None
    tokens_before: int | None = None
    tokens_after: int | None = None
    removed_count: int = 0
    kept_count: int = 0
    chunk_count: int = 0
    flush_receipt_status: str = FlushReceiptStatus.UNKNOWN.value
    covered_through_id: int = 0
    created_at: int = Field(default_factory=now_ms)
    schema_version: int = 1


class SessionContextState(_Record):
    """A provider context state (table ``session_context_states``)."""

    id: int | None = None
    session_id: str
    session_key: str
    provider: str = "portable"
    model: str | None = None
    state_kind: str
    payload: dict[str, Any] = Field(default_factory=dict)
    covered_through_id: int = 0
    created_at: int = Field(default_factory=now_ms)
    expires_at: int | None = None
    portable: bool = False
    cacheable: bool = False
    valid: bool = True
    invalid_reason: str | None = None
    schema_version: int = 1


__all__ = [
    "ChatType",
    "CompactedTranscriptEntry",
    "FlushReceiptStatus",
    "InputProvenanceKind",
    "QueueMode",
    "SendPolicy",
    "SessionContextState",
    "SessionIntent",
    "SessionNode",
    "SessionStatus",
    "SessionSummary",
    "TranscriptEntry",
]


class GenerationSnapshot(BaseModel):
    """One session generation as it stood inside a reset transaction, for its archive.

    ``session`` already carries the bumped epoch but still the old ``session_id``;
    ``transcript`` is the canonical transcript (compacted archive and live rows).
    """

    session: SessionNode
    transcript: list[TranscriptEntry]
    summaries: list[SessionSummary]
