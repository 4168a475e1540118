"""The five tables, declared once; the migrations must create exactly this (``alembic check``).

Column names, order and defaults are those of the older store (docs/semantics.md#tables),
widened to the union of both legacy revisions (the August 2026 one adds six ``sessions``
columns and ``turn_context`` on both transcript tables). NOT NULL columns that legacy rows
may lack carry *server* defaults, so rows written before a column existed read back with
its default.
Index names are the legacy ones, so an adopted database and a fresh one look alike.

Free text (message content, reasoning, summaries, labels) is ``LosslessText``: NUL
characters round-trip on Postgres too. Identifier-like transcript fields (message id, role,
tool-call id, provenance) are plain ``Text``; the models refuse NUL in them on both backends,
and reads of them need no decoding.
"""

from __future__ import annotations

from typing import Any, cast

from sqlalchemy import BigInteger, Boolean, Index, Integer, Table, Text, false, text, true
from sqlalchemy.orm import Mapped, mapped_column

from .base import Base
from .types import IntId, JSONText, JSONValue, LosslessText, Millis, Real

_ZERO = text("0")
_ONE = text("1")
_ZERO_REAL = text("0.0")


def _text_default(value: str) -> Any:
    return text(f"'{value}'")


class SessionRow(Base):
    __tablename__ = "sessions"
    __table_args__ = (
        Index("idx_sessions_updated_at", "updated_at"),
        Index("idx_sessions_workspace_id", "workspace_id"),
        # A session id names one generation of one session; delete, prune, cap and reset
        # act on every row carrying it, so two sessions sharing one would destroy each
        # other's rows. The database itself refuses a second one (revision 0002).
        Index("uq_sessions_session_id", "session_id", unique=True),
    )

    session_key: Mapped[str] = mapped_column(Text, primary_key=True)
    session_id: Mapped[str] = mapped_column(Text)
    created_at: Mapped[int] = mapped_column(Millis)
    updated_at: Mapped[int] = mapped_column(Millis)
    started_at: Mapped[int | None] = mapped_column(Millis)
    ended_at: Mapped[int | None] = mapped_column(Millis)
    runtime_ms: Mapped[int | None] = mapped_column(BigInteger)
    last_channel: Mapped[str | None] = mapped_column(LosslessText)
    last_to: Mapped[str | None] = mapped_column(LosslessText)
    last_account_id: Mapped[str | None] = mapped_column(LosslessText)
    last_thread_id: Mapped[str | None] = mapped_column(LosslessText)
    delivery_context: Mapped[dict[str, Any] | None] = mapped_column(JSONValue)
    model: Mapped[str | None] = mapped_column(LosslessText)
    model_provider: Mapped[str | None] = mapped_column(LosslessText)
    provider_override: Mapped[str | None] = mapped_column(LosslessText)
    model_override: Mapped[str | None] = mapped_column(LosslessText)
    auth_profile_override: Mapped[str | None] = mapped_column(LosslessText)
    auth_profile_override_source: Mapped[str | None] = mapped_column(LosslessText)
    context_tokens: Mapped[int | None] = mapped_column(BigInteger)
    model_routing_mode: Mapped[str | None] = mapped_column(LosslessText)
    # Revision counters may be clocks (milliseconds), so they are 64-bit (revision 0002).
    model_routing_revision: Mapped[int] = mapped_column(BigInteger, server_default=_ZERO)
    input_tokens: Mapped[int] = mapped_column(BigInteger, server_default=_ZERO)
    output_tokens: Mapped[int] = mapped_column(BigInteger, server_default=_ZERO)
    total_tokens: Mapped[int] = mapped_column(BigInteger, server_default=_ZERO)
    total_tokens_fresh: Mapped[bool] = mapped_column(Boolean, server_default=false())
    estimated_cost_usd: Mapped[float] = mapped_column(Real, server_default=_ZERO_REAL)
    total_cost_usd: Mapped[float] = mapped_column(Real, server_default=_ZERO_REAL)
    billed_cost_usd: Mapped[float] = mapped_column(Real, server_default=_ZERO_REAL)
    estimated_cost_component_usd: Mapped[float] = mapped_column(Real, server_default=_ZERO_REAL)
    cost_source: Mapped[str] = mapped_column(LosslessText, server_default=_text_default("none"))
    missing_cost_entries: Mapped[int] = mapped_column(BigInteger, server_default=_ZERO)
    cache_read: Mapped[int] = mapped_column(BigInteger, server_default=_ZERO)
    cache_write: Mapped[int] = mapped_column(BigInteger, server_default=_ZERO)
    compaction_count: Mapped[int] = mapped_column(Integer, server_default=_ZERO)
    session_file: Mapped[str | None] = mapped_column(LosslessText)
    spawned_by: Mapped[str | None] = mapped_column(Text)
    parent_session_key: Mapped[str | None] = mapped_column(Text)
    forked_from_parent: Mapped[bool] = mapped_column(Boolean, server_default=false())
    spawn_depth: Mapped[int] = mapped_column(Integer, server_default=_ZERO)
    status: Mapped[str] = mapped_column(LosslessText, server_default=_text_default("running"))
    chat_type: Mapped[str] = mapped_column(LosslessText, server_default=_text_default("unknown"))
    thinking_level: Mapped[str | None] = mapped_column(LosslessText)
    fast_mode: Mapped[bool] = mapped_column(Boolean, server_default=false())
    verbose_level: Mapped[str | None] = mapped_column(LosslessText)
    reasoning_level: Mapped[str | None] = mapped_column(LosslessText)
    send_policy: Mapped[str] = mapped_column(LosslessText, server_default=_text_default("allow"))
    queue_mode: Mapped[str] = mapped_column(LosslessText, server_default=_text_default("steer"))
    collaboration_mode: Mapped[str] = mapped_column(
        LosslessText, server_default=_text_default("default")
    )
    collaboration_revision: Mapped[int] = mapped_column(BigInteger, server_default=_ZERO)
    active_plan_revision_id: Mapped[str | None] = mapped_column(LosslessText)
    label: Mapped[str | None] = mapped_column(LosslessText)
    display_name: Mapped[str | None] = mapped_column(LosslessText)
    derived_title: Mapped[str | None] = mapped_column(LosslessText)
    channel: Mapped[str | None] = mapped_column(LosslessText)
    group_id: Mapped[str | None] = mapped_column(LosslessText)
    subject: Mapped[str | None] = mapped_column(LosslessText)
    origin: Mapped[dict[str, Any] | None] = mapped_column(JSONValue)
    workspace_id: Mapped[str | None] = mapped_column(LosslessText)
    agent_id: Mapped[str] = mapped_column(Text, server_default=_text_default("main"))
    schema_version: Mapped[int] = mapped_column(Integer, server_default=_ONE)
    epoch: Mapped[int] = mapped_column(BigInteger, server_default=_ZERO)


# Column groups that several tables share, each declared once. Declarative places a class's
# own columns before its mixins' unless ``sort_order`` says otherwise, so each group carries
# its place: the owner columns first, then an archived row's origin, then the message, then
# the table's own (``sort_order`` 0). The stable sort keeps declaration order within a group.
_OWNER_COLUMNS = -3
_ARCHIVE_POSITION_COLUMNS = -2
_MESSAGE_COLUMNS = -1
_ADDED_COLUMNS = 1


class _SessionOwnedColumns:
    """The first columns of every table whose rows a session owns (docs/semantics.md#tables):
    the row id (the database's) and the generation and key the row belongs to."""

    id: Mapped[int] = mapped_column(
        IntId, primary_key=True, autoincrement=True, sort_order=_OWNER_COLUMNS
    )
    session_id: Mapped[str] = mapped_column(Text, sort_order=_OWNER_COLUMNS)
    session_key: Mapped[str] = mapped_column(Text, sort_order=_OWNER_COLUMNS)


class _ArchivePositionColumns:
    """Where an archived transcript row came from: the compaction that folded it away and
    its id in the live table."""

    compaction_id: Mapped[str | None] = mapped_column(Text, sort_order=_ARCHIVE_POSITION_COLUMNS)
    compaction_index: Mapped[int | None] = mapped_column(
        Integer, sort_order=_ARCHIVE_POSITION_COLUMNS
    )
    original_entry_id: Mapped[int | None] = mapped_column(
        BigInteger, sort_order=_ARCHIVE_POSITION_COLUMNS
    )


class _MessageColumns:
    """One message as the runtime produced it: the columns both transcript tables share
    (the models declare them once too, in ``models/messages.py``)."""

    message_id: Mapped[str] = mapped_column(Text, sort_order=_MESSAGE_COLUMNS)
    role: Mapped[str] = mapped_column(Text, sort_order=_MESSAGE_COLUMNS)
    content: Mapped[str | None] = mapped_column(LosslessText, sort_order=_MESSAGE_COLUMNS)
    tool_calls: Mapped[list[dict[str, Any]] | None] = mapped_column(
        JSONValue, sort_order=_MESSAGE_COLUMNS
    )
    tool_call_id: Mapped[str | None] = mapped_column(Text, sort_order=_MESSAGE_COLUMNS)
    reasoning_content: Mapped[str | None] = mapped_column(LosslessText, sort_order=_MESSAGE_COLUMNS)
    turn_usage: Mapped[dict[str, Any] | None] = mapped_column(
        JSONValue, sort_order=_MESSAGE_COLUMNS
    )
    turn_context: Mapped[dict[str, Any] | None] = mapped_column(
        JSONValue, sort_order=_MESSAGE_COLUMNS
    )
    created_at: Mapped[int] = mapped_column(Millis, sort_order=_MESSAGE_COLUMNS)
    token_count: Mapped[int | None] = mapped_column(BigInteger, sort_order=_MESSAGE_COLUMNS)
    provenance_kind: Mapped[str | None] = mapped_column(Text, sort_order=_MESSAGE_COLUMNS)
    provenance_origin_session_id: Mapped[str | None] = mapped_column(
        Text, sort_order=_MESSAGE_COLUMNS
    )
    provenance_source_session_key: Mapped[str | None] = mapped_column(
        Text, sort_order=_MESSAGE_COLUMNS
    )
    provenance_source_channel: Mapped[str | None] = mapped_column(Text, sort_order=_MESSAGE_COLUMNS)
    provenance_source_tool: Mapped[str | None] = mapped_column(Text, sort_order=_MESSAGE_COLUMNS)
    # Revision 0009, so after the table's own columns: the caller's JSON object, as text
    # (it reads back exactly, key order included), never read by the store. Declarative
    # reserves the attribute name ``metadata``; the column is named ``metadata``.
    entry_metadata: Mapped[dict[str, Any] | None] = mapped_column(
        "metadata", JSONText, sort_order=_ADDED_COLUMNS
    )


class TranscriptRow(_SessionOwnedColumns, _MessageColumns, Base):
    __tablename__ = "transcript_entries"
    __table_args__ = (
        Index("idx_transcript_session_id", "session_id"),
        Index("idx_transcript_session_key", "session_key"),
        Index("idx_transcript_session_cursor", "session_id", "created_at", "id"),
        {"sqlite_autoincrement": True},
    )

    schema_version: Mapped[int] = mapped_column(Integer, server_default=_ONE)


class CompactedTranscriptRow(_SessionOwnedColumns, _ArchivePositionColumns, _MessageColumns, Base):
    __tablename__ = "compacted_transcript_entries"
    __table_args__ = (
        Index("idx_compacted_transcript_session_id", "session_id"),
        Index("idx_compacted_transcript_session_key", "session_key"),
        Index(
            "idx_compacted_transcript_session_cursor",
            "session_id",
            "created_at",
            "original_entry_id",
            "id",
        ),
        Index("idx_compacted_transcript_session_compaction", "session_id", "compaction_id"),
        {"sqlite_autoincrement": True},
    )

    archived_at: Mapped[int] = mapped_column(Millis)
    schema_version: Mapped[int] = mapped_column(Integer, server_default=_ONE)


class SummaryRow(_SessionOwnedColumns, Base):
    __tablename__ = "session_summaries"
    __table_args__ = (
        Index("idx_summaries_session_id", "session_id"),
        # compaction_index is assigned inside the write transaction; the unique index is
        # the database's own guarantee that two writers can never share one.
        Index(
            "uq_summaries_session_compaction_index",
            "session_id",
            "compaction_index",
            unique=True,
        ),
        {"sqlite_autoincrement": True},
    )

    compaction_index: Mapped[int] = mapped_column(Integer, server_default=_ZERO)
    compaction_id: Mapped[str | None] = mapped_column(LosslessText)
    trigger_reason: Mapped[str | None] = mapped_column(LosslessText)
    summary_text: Mapped[str] = mapped_column(LosslessText)
    summary_payload: Mapped[dict[str, Any] | None] = mapped_column(JSONValue)
    summary_format: Mapped[str] = mapped_column(LosslessText, server_default=_text_default("text"))
    summary_source: Mapped[str] = mapped_column(
        LosslessText, server_default=_text_default("unknown")
    )
    coverage_status: Mapped[str] = mapped_column(
        LosslessText, server_default=_text_default("unknown")
    )
    missing_obligations: Mapped[list[str] | None] = mapped_column(JSONValue)
    critical_carry_forward: Mapped[list[str] | None] = mapped_column(JSONValue)
    tokens_before: Mapped[int | None] = mapped_column(BigInteger)
    tokens_after: Mapped[int | None] = mapped_column(BigInteger)
    removed_count: Mapped[int] = mapped_column(Integer, server_default=_ZERO)
    kept_count: Mapped[int] = mapped_column(Integer, server_default=_ZERO)
    chunk_count: Mapped[int] = mapped_column(Integer, server_default=_ZERO)
    flush_receipt_status: Mapped[str] = mapped_column(
        LosslessText, server_default=_text_default("unknown")
    )
    covered_through_id: Mapped[int] = mapped_column(BigInteger, server_default=_ZERO)
    created_at: Mapped[int] = mapped_column(Millis)
    schema_version: Mapped[int] = mapped_column(Integer, server_default=_ONE)


class ContextStateRow(_SessionOwnedColumns, Base):
    __tablename__ = "session_context_states"
    __table_args__ = (
        Index("idx_context_states_session_id", "session_id"),
        Index("idx_context_states_key_valid", "session_key", "valid", "state_kind", "provider"),
        {"sqlite_autoincrement": True},
    )

    provider: Mapped[str] = mapped_column(LosslessText, server_default=_text_default("portable"))
    model: Mapped[str | None] = mapped_column(LosslessText)
    state_kind: Mapped[str] = mapped_column(LosslessText)
    payload: Mapped[dict[str, Any]] = mapped_column(JSONValue, server_default=_text_default("{}"))
    covered_through_id: Mapped[int] = mapped_column(BigInteger, server_default=_ZERO)
    created_at: Mapped[int] = mapped_column(Millis)
    expires_at: Mapped[int | None] = mapped_column(Millis)
    portable: Mapped[bool] = mapped_column(Boolean, server_default=false())
    cacheable: Mapped[bool] = mapped_column(Boolean, server_default=false())
    valid: Mapped[bool] = mapped_column(Boolean, server_default=true())
    invalid_reason: Mapped[str | None] = mapped_column(LosslessText)
    schema_version: Mapped[int] = mapped_column(Integer, server_default=_ONE)


sessions = cast(Table, SessionRow.__table__)
transcript_entries = cast(Table, TranscriptRow.__table__)
compacted_transcript_entries = cast(Table, CompactedTranscriptRow.__table__)
session_summaries = cast(Table, SummaryRow.__table__)
session_context_states = cast(Table, ContextStateRow.__table__)

# The lists of tables everything else uses, derived from the metadata, so a table's name is
# written once (its ``__tablename__``). The classes above are declared in the order export
# writes and import inserts the tables: the session first, then the rows it owns.
TABLES: tuple[Table, ...] = tuple(Base.metadata.tables.values())
OUR_TABLES: tuple[str, ...] = tuple(table.name for table in TABLES)
SESSIONS_TABLE: str = sessions.name
OWNED_TABLES: tuple[Table, ...] = tuple(table for table in TABLES if table is not sessions)
"""The tables whose rows a session owns, in export and insert order."""
CHILD_TABLES: tuple[str, ...] = tuple(table.name for table in OWNED_TABLES)
"""The names of :data:`OWNED_TABLES`."""
