"""The transcript records: live entries and their compacted archive.

Both tables carry the same message columns (docs/semantics.md#tables), declared once in
:class:`_MessageFields`. Pydantic orders a model's fields base class first, along the
reversed method resolution order, so the bases below are listed last-columns-first: a
live entry is the owner columns, then the message, then its own columns; an archived
one puts where it came from (:class:`_ArchivePosition`) between the owner columns and the
message: the columns' order in ``db/tables.py``, which ``model_dump`` and the export
format follow.
"""

from __future__ import annotations

from pydantic import Field

from ..support.clock import new_message_id, now_ms
from .checks import (
    ArchiveCompactionId,
    Count32,
    Count64,
    Identifier,
    Int32,
    Int64,
    JSONList,
    JSONObject,
    LineageKey,
    Millis,
    Role,
    Text,
)
from .records import _Record, _SessionOwned


class _MessageFields(_Record):
    """One message as the runtime produced it: the columns both transcript tables share."""

    message_id: Identifier = Field(default_factory=new_message_id)
    role: Role
    content: Text | None = None
    tool_calls: JSONList | None = None
    tool_call_id: Identifier | None = None
    reasoning_content: Text | None = None
    turn_usage: JSONObject | None = None
    turn_context: JSONObject | None = None
    created_at: Millis = Field(default_factory=now_ms)
    token_count: Count64 | None = None
    provenance_kind: Identifier | None = None
    provenance_origin_session_id: Identifier | None = None
    provenance_source_session_key: LineageKey | None = None
    provenance_source_channel: Identifier | None = None
    provenance_source_tool: Identifier | None = None


class _ArchivePosition(_SessionOwned):
    """Where an archived entry came from: the compaction that folded it away and its id in
    the live table."""

    compaction_id: ArchiveCompactionId | None = None
    compaction_index: Count32 | None = None
    original_entry_id: Int64 | None = None


class TranscriptEntry(_MessageFields, _SessionOwned):
    """One transcript row (table ``transcript_entries``)."""

    schema_version: Int32 = 1


class CompactedTranscriptEntry(_MessageFields, _ArchivePosition):
    """One row of the compacted archive (table ``compacted_transcript_entries``)."""

    archived_at: Millis = Field(default_factory=now_ms)
    schema_version: Int32 = 1
