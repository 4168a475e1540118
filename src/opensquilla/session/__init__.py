"""opensquilla-session: the durable session store for AI-agent runtimes."""

from __future__ import annotations

from .errors import (
    ArchiveWriteError,
    CompactionTimeoutError,
    ConfigurationError,
    DatabaseNotFoundError,
    EventLoopMismatchError,
    InvalidInputError,
    SessionExistsError,
    SessionNotFoundError,
    SessionStoreError,
    StaleEpochError,
)
from .manager import SessionManager
from .models import (
    CANONICAL_FORK_PROOF_SCHEMA_VERSION,
    CanonicalTranscriptCoverage,
    CanonicalTranscriptPage,
    CompactionSourceSnapshot,
    ContextView,
    SessionContextState,
    SessionIntent,
    SessionListCursor,
    SessionListPage,
    SessionNode,
    SessionStatus,
    SessionSummary,
    TranscriptEntry,
)
from .storage import SessionStorage
from .usecases.context.provider_states import (
    OPENAI_RESPONSES_COMPACTED_WINDOW_STATE_KIND,
    build_openai_responses_input_items,
    latest_context_state,
    openai_responses_compacted_window_state,
)
from .usecases.context.records import CompactionContextRecord, build_compaction_context_records

__all__ = [
    "CANONICAL_FORK_PROOF_SCHEMA_VERSION",
    "OPENAI_RESPONSES_COMPACTED_WINDOW_STATE_KIND",
    "ArchiveWriteError",
    "CanonicalTranscriptCoverage",
    "CanonicalTranscriptPage",
    "CompactionContextRecord",
    "CompactionSourceSnapshot",
    "CompactionTimeoutError",
    "ConfigurationError",
    "ContextView",
    "DatabaseNotFoundError",
    "EventLoopMismatchError",
    "InvalidInputError",
    "SessionContextState",
    "SessionExistsError",
    "SessionIntent",
    "SessionListCursor",
    "SessionListPage",
    "SessionManager",
    "SessionNode",
    "SessionNotFoundError",
    "SessionStatus",
    "SessionStorage",
    "SessionStoreError",
    "SessionSummary",
    "StaleEpochError",
    "TranscriptEntry",
    "build_compaction_context_records",
    "build_openai_responses_input_items",
    "latest_context_state",
    "openai_responses_compacted_window_state",
]
