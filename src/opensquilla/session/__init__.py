"""opensquilla-session: the durable session store for AI-agent runtimes.

Every name a documentation example uses is importable from here; ``__version__`` is the
installed distribution's version (its metadata), so it cannot disagree with the wheel.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from .compaction import CompactionConfig, CompactionResult, format_compaction_summary_context
from .config import resolve_dsn
from .errors import (
    ArchiveWriteError,
    CompactionTimeoutError,
    ConfigurationError,
    DatabaseNotFoundError,
    EventLoopMismatchError,
    InvalidInputError,
    MessageNotFoundError,
    MigrationError,
    SessionExistsError,
    SessionIdInUseError,
    SessionNotFoundError,
    SessionStoreError,
    StaleEpochError,
    StaleGenerationError,
    StaleStateError,
)
from .llm import LLMSettings, OpenAICompatibleSummarizer
from .manager import SessionManager
from .models import (
    CANONICAL_FORK_PROOF_SCHEMA_VERSION,
    CanonicalTranscriptCoverage,
    CanonicalTranscriptPage,
    CompactionSourceSnapshot,
    ContextView,
    ScopeState,
    SessionContextState,
    SessionIntent,
    SessionListCursor,
    SessionListPage,
    SessionNode,
    SessionState,
    SessionStatus,
    SessionSummary,
    StateScope,
    TranscriptEntry,
    TranscriptLine,
    TranscriptLines,
)
from .models.messages import AppendFields, MessageInput
from .models.reports import ResetReport
from .storage import SessionStorage
from .sync import SyncSessionManager, SyncSessionStorage
from .usecases.context.provider_states import (
    OPENAI_RESPONSES_COMPACTED_WINDOW_STATE_KIND,
    build_openai_responses_input_items,
    latest_context_state,
    openai_responses_compacted_window_state,
)
from .usecases.context.records import CompactionContextRecord, build_compaction_context_records

try:
    __version__ = version("opensquilla-session")
except PackageNotFoundError:  # imported from a source tree that was never installed
    __version__ = "0+unknown"

__all__ = [
    "CANONICAL_FORK_PROOF_SCHEMA_VERSION",
    "OPENAI_RESPONSES_COMPACTED_WINDOW_STATE_KIND",
    "AppendFields",
    "ArchiveWriteError",
    "CanonicalTranscriptCoverage",
    "CanonicalTranscriptPage",
    "CompactionConfig",
    "CompactionContextRecord",
    "CompactionResult",
    "CompactionSourceSnapshot",
    "CompactionTimeoutError",
    "ConfigurationError",
    "ContextView",
    "DatabaseNotFoundError",
    "EventLoopMismatchError",
    "InvalidInputError",
    "LLMSettings",
    "MessageInput",
    "MessageNotFoundError",
    "MigrationError",
    "OpenAICompatibleSummarizer",
    "ResetReport",
    "ScopeState",
    "SessionContextState",
    "SessionExistsError",
    "SessionIdInUseError",
    "SessionIntent",
    "SessionListCursor",
    "SessionListPage",
    "SessionManager",
    "SessionNode",
    "SessionNotFoundError",
    "SessionState",
    "SessionStatus",
    "SessionStorage",
    "SessionStoreError",
    "SessionSummary",
    "StaleEpochError",
    "StaleGenerationError",
    "StaleStateError",
    "StateScope",
    "SyncSessionManager",
    "SyncSessionStorage",
    "TranscriptEntry",
    "TranscriptLine",
    "TranscriptLines",
    "__version__",
    "build_compaction_context_records",
    "build_openai_responses_input_items",
    "format_compaction_summary_context",
    "latest_context_state",
    "openai_responses_compacted_window_state",
    "resolve_dsn",
]
