"""The string enums of the public models: the values some text fields may take.

They are ``StrEnum``\\ s so callers can pass either a member or its plain value; the records
store the plain text (``checks.member_of``).
"""

from __future__ import annotations

from enum import StrEnum


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
    """Values the compaction flush receipt takes (docs/semantics.md#compaction); any string
    is stored."""

    UNKNOWN = "unknown"
    SAFE = "safe"
    NOOP_NO_MEMORY = "noop_no_memory"
    ARCHIVE_ONLY = "archive_only"
    DEGRADED_FORENSIC = "degraded_forensic"
    FAILED_RETRYABLE = "failed_retryable"
    NOT_REQUIRED = "not_required"
    UNSAFE = "unsafe"
