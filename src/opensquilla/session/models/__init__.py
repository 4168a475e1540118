"""The public data shapes: pydantic v2 models and string enums (docs/semantics.md#tables).

Models are plain mutable objects, detached from any database session: callers read them,
change them and hand them back. Field names, types and defaults are the contract's; each
value put into one is checked against its column's domain, the same for both backends
(docs/semantics.md#values), and refused with an ``InvalidInputError``.

The package's modules: ``enums`` (the string enums), ``checks`` (the value domain: limits,
field types, ``check_*`` for plain arguments, ``invalid_input``), ``records`` (the
``_Record`` base, sessions, summaries, context states), ``messages`` (live and compacted
transcript entries), ``identity`` (caller-chosen message ids, assistant reservations),
``intents`` (prepared session intents), ``pages`` (canonical transcript pages and coverage),
``listing`` (keyset pages of the session listing), ``lines`` (the lean transcript read),
``context_view`` (the prompt's view) and ``snapshot`` (what a reset archives) and
``state`` (session state and scoped state).
Everything is imported from here, ``opensquilla.session.models``, as it was before the split.
"""

from __future__ import annotations

from .archives import StoredArchive as StoredArchive
from .checks import COMPACTION_ID_MAX_LENGTH as COMPACTION_ID_MAX_LENGTH
from .checks import INT32_MAX as INT32_MAX
from .checks import INT32_MIN as INT32_MIN
from .checks import INT64_MAX as INT64_MAX
from .checks import INT64_MIN as INT64_MIN
from .checks import LABEL_MAX_LENGTH as LABEL_MAX_LENGTH
from .checks import PROVIDER_MAX_LENGTH as PROVIDER_MAX_LENGTH
from .checks import SESSION_ID_MAX_LENGTH as SESSION_ID_MAX_LENGTH
from .checks import STATE_KIND_MAX_LENGTH as STATE_KIND_MAX_LENGTH
from .checks import WORKSPACE_ID_MAX_LENGTH as WORKSPACE_ID_MAX_LENGTH
from .checks import AgentId as AgentId
from .checks import ArchiveCompactionId as ArchiveCompactionId
from .checks import Count32 as Count32
from .checks import Count64 as Count64
from .checks import Finite as Finite
from .checks import Flag as Flag
from .checks import Identifier as Identifier
from .checks import Int32 as Int32
from .checks import Int64 as Int64
from .checks import JSONList as JSONList
from .checks import JSONObject as JSONObject
from .checks import LineageKey as LineageKey
from .checks import Millis as Millis
from .checks import Role as Role
from .checks import SessionId as SessionId
from .checks import SessionKey as SessionKey
from .checks import SummaryCompactionId as SummaryCompactionId
from .checks import Text as Text
from .checks import check_flag as check_flag
from .checks import check_instance as check_instance
from .checks import check_instances as check_instances
from .checks import check_integer as check_integer
from .checks import check_millis as check_millis
from .checks import check_optional_integer as check_optional_integer
from .checks import check_optional_text as check_optional_text
from .checks import check_page as check_page
from .checks import check_record as check_record
from .checks import check_session_id as check_session_id
from .checks import check_text as check_text
from .checks import check_text_list as check_text_list
from .checks import invalid_input as invalid_input
from .context_view import ContextView as ContextView
from .enums import (
    ChatType,
    FlushReceiptStatus,
    InputProvenanceKind,
    QueueMode,
    SendPolicy,
    SessionIntent,
    SessionStatus,
)
from .identity import AssistantMessageReservation
from .intents import BranchOptions as BranchOptions
from .intents import PreparedAction, PreparedSessionIntent
from .lines import TranscriptLine, TranscriptLines
from .listing import SessionListCursor, SessionListPage
from .listing import SessionListFilter as SessionListFilter
from .messages import CompactedTranscriptEntry, TranscriptEntry
from .pages import (
    CANONICAL_FORK_PROOF_SCHEMA_VERSION,
    CanonicalTranscriptCoverage,
    CanonicalTranscriptPage,
)
from .pages import Cursor as Cursor
from .records import SessionContextState, SessionNode, SessionSummary
from .records import _Record as _Record
from .records import check_session_values as check_session_values
from .snapshot import CompactionSourceSnapshot as CompactionSourceSnapshot
from .snapshot import GenerationSnapshot as GenerationSnapshot
from .state import ScopeState, SessionState, StateScope

__all__ = [
    "CANONICAL_FORK_PROOF_SCHEMA_VERSION",
    "AssistantMessageReservation",
    "CanonicalTranscriptCoverage",
    "CanonicalTranscriptPage",
    "ChatType",
    "CompactedTranscriptEntry",
    "FlushReceiptStatus",
    "InputProvenanceKind",
    "PreparedAction",
    "PreparedSessionIntent",
    "QueueMode",
    "ScopeState",
    "SendPolicy",
    "SessionContextState",
    "SessionIntent",
    "SessionListCursor",
    "SessionListPage",
    "SessionNode",
    "SessionState",
    "SessionStatus",
    "SessionSummary",
    "StateScope",
    "StoredArchive",
    "TranscriptEntry",
    "TranscriptLine",
    "TranscriptLines",
]
