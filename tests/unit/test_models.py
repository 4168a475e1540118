"""The public data shapes (SEMANTICS §2): defaults, enums, and model/table agreement.

Callers build records with only the required fields and rely on the documented defaults;
rows are mapped to models field for field, so a model and its table must name the same
columns.
"""

from __future__ import annotations

import re
import time
from typing import Any

import pytest
from pydantic import ValidationError

from opensquilla.session.db import rows, tables
from opensquilla.session.errors import InvalidInputError
from opensquilla.session.models import (
    ChatType,
    CompactedTranscriptEntry,
    InputProvenanceKind,
    QueueMode,
    SendPolicy,
    SessionContextState,
    SessionIntent,
    SessionNode,
    SessionStatus,
    SessionSummary,
    TranscriptEntry,
)

UUID4 = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


SESSION_DEFAULTS: dict[str, Any] = {
    "started_at": None,
    "ended_at": None,
    "runtime_ms": None,
    "last_channel": None,
    "last_to": None,
    "last_account_id": None,
    "last_thread_id": None,
    "delivery_context": None,
    "model": None,
    "model_provider": None,
    "provider_override": None,
    "model_override": None,
    "auth_profile_override": None,
    "auth_profile_override_source": None,
    "context_tokens": None,
    "input_tokens": 0,
    "output_tokens": 0,
    "total_tokens": 0,
    "total_tokens_fresh": False,
    "estimated_cost_usd": 0.0,
    "total_cost_usd": 0.0,
    "billed_cost_usd": 0.0,
    "estimated_cost_component_usd": 0.0,
    "cost_source": "none",
    "missing_cost_entries": 0,
    "cache_read": 0,
    "cache_write": 0,
    "compaction_count": 0,
    "session_file": None,
    "spawned_by": None,
    "parent_session_key": None,
    "forked_from_parent": False,
    "spawn_depth": 0,
    "status": "running",
    "chat_type": "unknown",
    "thinking_level": None,
    "verbose_level": None,
    "reasoning_level": None,
    "fast_mode": False,
    "send_policy": "allow",
    "queue_mode": "steer",
    "label": None,
    "display_name": None,
    "derived_title": None,
    "channel": None,
    "group_id": None,
    "subject": None,
    "origin": None,
    "agent_id": "main",
    "schema_version": 1,
    "epoch": 0,
}

TRANSCRIPT_DEFAULTS: dict[str, Any] = {
    "id": None,
    "content": None,
    "tool_calls": None,
    "tool_call_id": None,
    "reasoning_content": None,
    "turn_usage": None,
    "token_count": None,
    "provenance_kind": None,
    "provenance_origin_session_id": None,
    "provenance_source_session_key": None,
    "provenance_source_channel": None,
    "provenance_source_tool": None,
    "schema_version": 1,
}

SUMMARY_DEFAULTS: dict[str, Any] = {
    "id": None,
    "compaction_index": 0,
    "compaction_id": None,
    "trigger_reason": None,
    "summary_payload": None,
    "summary_format": "text",
    "summary_source": "unknown",
    "coverage_status": "unknown",
    "missing_obligations": None,
    "critical_carry_forward": None,
    "tokens_before": None,
    "tokens_after": None,
    "removed_count": 0,
    "kept_count": 0,
    "chunk_count": 0,
    "flush_receipt_status": "unknown",
    "covered_through_id": 0,
    "schema_version": 1,
}

STATE_DEFAULTS: dict[str, Any] = {
    "id": None,
    "provider": "portable",
    "model": None,
    "payload": {},
    "covered_through_id": 0,
    "expires_at": None,
    "portable": False,
    "cacheable": False,
    "valid": True,
    "invalid_reason": None,
    "schema_version": 1,
}


def _assert_defaults(record: Any, expected: dict[str, Any]) -> None:
    actual = {name: getattr(record, name) for name in expected}
    assert actual == expected
    for name, value in expected.items():
        # 0 == False == 0.0 in Python; the type matters to callers and to the database.
        assert type(getattr(record, name)) is type(value), name


def test_session_node_defaults() -> None:
    before = _now_ms()
    node = SessionNode(session_key="agent:main:main")
    after = _now_ms()
    _assert_defaults(node, SESSION_DEFAULTS)
    assert UUID4.match(node.session_id)
    assert before <= node.created_at <= after
    assert before <= node.updated_at <= after


def test_session_ids_are_fresh_per_node() -> None:
    """Each new node is its own generation: two nodes never share a session_id."""
    assert SessionNode(session_key="a").session_id != SessionNode(session_key="a").session_id


def test_transcript_entry_defaults() -> None:
    before = _now_ms()
    entry = TranscriptEntry(session_id="s", session_key="k", role="user")
    _assert_defaults(entry, TRANSCRIPT_DEFAULTS)
    assert UUID4.match(entry.message_id)
    assert before <= entry.created_at <= _now_ms()
    other = TranscriptEntry(session_id="s", session_key="k", role="user")
    assert other.message_id != entry.message_id


def test_explicit_created_at_is_kept() -> None:
    entry = TranscriptEntry(session_id="s", session_key="k", role="user", created_at=12345)
    assert entry.created_at == 12345


def test_summary_defaults() -> None:
    summary = SessionSummary(session_id="s", session_key="k", summary_text="t")
    _assert_defaults(summary, SUMMARY_DEFAULTS)
    assert summary.created_at <= _now_ms()


def test_context_state_defaults() -> None:
    state = SessionContextState(session_id="s", session_key="k", state_kind="structured")
    _assert_defaults(state, STATE_DEFAULTS)
    assert state.created_at <= _now_ms()


def test_context_state_payload_default_is_not_shared() -> None:
    """A mutable default shared between instances would leak one state into another."""
    first = SessionContextState(session_id="s", session_key="k", state_kind="x")
    first.payload["leak"] = True
    assert SessionContextState(session_id="s", session_key="k", state_kind="x").payload == {}


@pytest.mark.parametrize(
    ("model", "missing"),
    [
        (SessionNode, {"session_key"}),
        (TranscriptEntry, {"session_id", "session_key", "role"}),
        (SessionSummary, {"session_id", "session_key", "summary_text"}),
        (SessionContextState, {"session_id", "session_key", "state_kind"}),
    ],
)
def test_required_fields(model: type[Any], missing: set[str]) -> None:
    # The package's own error (a ValueError), caused by pydantic's, naming every field.
    with pytest.raises(InvalidInputError) as info:
        model()
    assert isinstance(info.value.__cause__, ValidationError)
    assert {str(error["loc"][0]) for error in info.value.__cause__.errors()} == missing
    assert all(name in str(info.value) for name in missing)


def test_unknown_fields_are_refused() -> None:
    """A typo in a field name must fail loudly instead of being dropped."""
    with pytest.raises(InvalidInputError, match="sesion_id"):
        SessionNode(session_key="k", sesion_id="typo")  # type: ignore[call-arg]


def test_models_are_mutable() -> None:
    """The manager and callers change records in place and hand them back."""
    node = SessionNode(session_key="k")
    node.status = SessionStatus.DONE
    node.epoch = 3
    assert (node.status, node.epoch) == ("done", 3)


@pytest.mark.parametrize(
    ("enum", "values"),
    [
        (SessionStatus, ["running", "done", "failed", "killed", "timeout"]),
        (SessionIntent, ["continue", "new_chat", "reset_same_key"]),
        (ChatType, ["direct", "group", "channel", "unknown"]),
        (
            QueueMode,
            [
                "steer",
                "followup",
                "collect",
                "steer-backlog",
                "steer+backlog",
                "queue",
                "interrupt",
            ],
        ),
        (SendPolicy, ["allow", "deny"]),
        (InputProvenanceKind, ["external_user", "inter_session", "internal_system"]),
    ],
)
def test_enum_values_compare_equal_to_strings(enum: Any, values: list[str]) -> None:
    """Statuses are stored as plain strings; enum members must equal those strings."""
    assert [member.value for member in enum] == values
    for member, value in zip(enum, values, strict=True):
        assert member == value
        assert value == member
        assert str(member) == value
        assert f"{member}" == value
        assert enum(value) is member
        assert isinstance(member, str)


def test_invalid_intent_is_the_enum_constructors_value_error() -> None:
    with pytest.raises(ValueError, match="'bogus' is not a valid SessionIntent"):
        SessionIntent("bogus")


def test_status_default_matches_the_enum() -> None:
    node = SessionNode(session_key="k")
    assert node.status == SessionStatus.RUNNING
    assert node.chat_type == ChatType.UNKNOWN
    assert node.queue_mode == QueueMode.STEER
    assert node.send_policy == SendPolicy.ALLOW


TABLES_AND_MODELS = [
    (tables.sessions, SessionNode),
    (tables.transcript_entries, TranscriptEntry),
    (tables.compacted_transcript_entries, CompactedTranscriptEntry),
    (tables.session_summaries, SessionSummary),
    (tables.session_context_states, SessionContextState),
]


@pytest.mark.parametrize(
    ("table", "model"), TABLES_AND_MODELS, ids=[t.name for t, _ in TABLES_AND_MODELS]
)
def test_model_fields_are_the_table_columns(table: Any, model: type[Any]) -> None:
    """Rows map to models by name; a field without a column (or the reverse) loses data."""
    assert set(model.model_fields) == {column.name for column in table.columns}
    assert rows.MODEL_FOR_TABLE[table.name] is model


def test_every_table_has_a_model() -> None:
    assert set(rows.MODEL_FOR_TABLE) == set(tables.OUR_TABLES)
    assert {t.name for t, _ in TABLES_AND_MODELS} == set(tables.OUR_TABLES)


@pytest.mark.parametrize(
    ("model", "table"),
    [(SessionNode, tables.sessions), (SessionSummary, tables.session_summaries)],
)
def test_from_row_builds_an_equal_model(model: type[Any], table: Any) -> None:
    """Reads bypass validation; the result must still be an ordinary, equal model."""
    original: SessionNode | SessionSummary
    if model is SessionNode:
        original = SessionNode(session_key="agent:main:x", label="L", epoch=4)
    else:
        original = SessionSummary(session_id="s", session_key="k", summary_text="t", id=9)
    values = {column.name: getattr(original, column.name) for column in table.columns}
    rebuilt = model.from_row(values)
    assert rebuilt == original
    assert rebuilt.model_dump() == original.model_dump()
