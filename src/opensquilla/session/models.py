"""The public data shapes: pydantic v2 models and string enums (SEMANTICS §2).

Models are plain mutable objects, detached from any database session: callers read them,
change them and hand them back. Field names, types and defaults are the contract's; each
value put into one is checked against its column's domain, the same for both backends
("the value domain" below), and refused with an ``InvalidInputError``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from enum import StrEnum
from typing import Annotated, Any, Self

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    Strict,
    ValidationError,
)

from .clock import new_message_id, new_session_id, now_ms
from .errors import InvalidInputError
from .keys import canonicalize_session_key, normalize_agent_id


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


# -- the value domain ----------------------------------------------------------------------
#
# One domain on both backends: a value is refused here, before any statement, when either
# database would refuse it or store something else (SQLite takes integers of any size in a
# 32-bit column and turns NaN into NULL; Postgres refuses NUL in plain text and index
# entries beyond ~2.7 kB). Integer ranges are the columns' (``Integer`` 32-bit,
# ``BigInteger`` 64-bit; a test keeps them in step with ``db/tables.py``). Reads build models
# without validation (``from_row``), so rows written before these rules still load.

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1

# Text that is part of a PostgreSQL btree index entry is bounded so that the entry fits
# (at most 2704 bytes; a character is at most 4 bytes of UTF-8, and a NUL-escaped value
# adds a 3-byte marker). ``session_key`` (512, keys.py) with ``state_kind`` and
# ``provider`` (64 each) is the largest composite entry: about 2.6 kB.
SESSION_ID_MAX_LENGTH = 256
COMPACTION_ID_MAX_LENGTH = 256
WORKSPACE_ID_MAX_LENGTH = 512
STATE_KIND_MAX_LENGTH = 64
PROVIDER_MAX_LENGTH = 64
LABEL_MAX_LENGTH = 512  # SEMANTICS §2.2

_FORBIDDEN_IN_IDENTIFIER = re.compile("[\x00\ud800-\udfff]")


def _identifier(value: str) -> str:
    """Identifier-like text is plain text on both backends: no NUL (Postgres could not
    store it unescaped) and no unpaired surrogate (not UTF-8 at all)."""
    if _FORBIDDEN_IN_IDENTIFIER.search(value):
        raise ValueError("must not contain NUL characters or unpaired surrogates")
    return value


def _session_key(value: str) -> str:
    """A record's own key: canonical and not empty (the store's keys.py rules)."""
    key = canonicalize_session_key(value)
    if not key:
        raise ValueError("session key must not be empty")
    return key


def _json_document(value: Any) -> Any:
    """A JSON field's object keys must be strings: ``json`` would silently turn any other
    key into one (``1`` into ``"1"``, ``None`` into ``"null"``), so the value would not come
    back as it was written. Values that are not JSON at all (NaN, sets, other objects) are
    refused where the document is encoded, before anything is written. Walked without
    recursion: a deeply nested document is refused there too, with its own message."""
    pending = [value]
    seen: set[int] = set()
    while pending:
        item = pending.pop()
        if not isinstance(item, dict | list | tuple) or id(item) in seen:
            continue  # a scalar, or a container already walked (shared or circular)
        seen.add(id(item))
        if isinstance(item, dict):
            for name, inner in item.items():
                if not isinstance(name, str):
                    raise ValueError(f"JSON object keys must be strings, not {type(name).__name__}")
                pending.append(inner)
        else:
            pending.extend(item)
    return value


def _member_of(kind: type[StrEnum]) -> AfterValidator:
    """The field holds one of ``kind``'s values (SEMANTICS §2.1), stored as plain text."""

    def check(value: str) -> str:
        try:
            return str(kind(value).value)
        except ValueError:
            raise ValueError(f"{value!r} is not a valid {kind.__name__}") from None

    return AfterValidator(check)


Int32 = Annotated[int, Strict(), Field(ge=INT32_MIN, le=INT32_MAX)]
Int64 = Annotated[int, Strict(), Field(ge=INT64_MIN, le=INT64_MAX)]
Count32 = Annotated[int, Strict(), Field(ge=0, le=INT32_MAX)]
Count64 = Annotated[int, Strict(), Field(ge=0, le=INT64_MAX)]
Millis = Int64
Finite = Annotated[float, Strict(), Field(allow_inf_nan=False)]
Flag = Annotated[bool, Strict()]
Text = Annotated[str, Strict()]
Identifier = Annotated[str, Strict(), AfterValidator(_identifier)]
Role = Annotated[str, Strict(), Field(min_length=1), AfterValidator(_identifier)]
SessionId = Annotated[
    str,
    Strict(),
    Field(min_length=1, max_length=SESSION_ID_MAX_LENGTH),
    AfterValidator(_identifier),
]
SessionKey = Annotated[str, Strict(), AfterValidator(_session_key)]
LineageKey = Annotated[str, Strict(), AfterValidator(canonicalize_session_key)]
AgentId = Annotated[str, Strict(), AfterValidator(normalize_agent_id)]
ArchiveCompactionId = Annotated[
    str, Strict(), Field(max_length=COMPACTION_ID_MAX_LENGTH), AfterValidator(_identifier)
]
SummaryCompactionId = Annotated[str, Strict(), Field(max_length=COMPACTION_ID_MAX_LENGTH)]
JSONObject = Annotated[dict[Text, Any], AfterValidator(_json_document)]
JSONList = Annotated[list[dict[Text, Any]], AfterValidator(_json_document)]


def _describe(value: object) -> str:
    """The kind of a refused value, for messages (never a long or secret-looking value)."""
    if value is None or isinstance(value, bool):
        return repr(value)
    if isinstance(value, int | float):
        shown = repr(value)
        return shown if len(shown) <= 40 else f"an {type(value).__name__} of {len(shown)} digits"
    if isinstance(value, str):
        return f"a str of {len(value)} characters"
    return f"a {type(value).__name__}"


def invalid_input(exc: ValidationError) -> InvalidInputError:
    """The package's error for a pydantic ``ValidationError``: each field, what is wrong
    with it and the kind of value given (the one place where pydantic errors are turned
    into ours)."""
    problems = []
    for error in exc.errors(include_url=False):
        where = ".".join(str(part) for part in error["loc"]) or "value"
        problems.append(f"{where}: {error['msg']} (got {_describe(error.get('input'))})")
    return InvalidInputError(f"invalid {exc.title}: " + "; ".join(problems))


def check_integer(name: str, value: object, *, minimum: int = 0, maximum: int = INT64_MAX) -> int:
    """``value`` as an argument that must be an ``int`` (not a ``bool``) in range."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidInputError(f"{name} must be an integer, not {_describe(value)}")
    if value < minimum:
        raise InvalidInputError(f"{name} must be >= {minimum}, not {_describe(value)}")
    if value > maximum:
        raise InvalidInputError(
            f"{name} must be <= {maximum} (what the database can store), not {_describe(value)}"
        )
    return value


def check_optional_integer(
    name: str, value: object, *, minimum: int = 0, maximum: int = INT64_MAX
) -> int | None:
    return None if value is None else check_integer(name, value, minimum=minimum, maximum=maximum)


def check_text(
    name: str,
    value: object,
    *,
    identifier: bool = False,
    max_length: int | None = None,
    non_empty: bool = False,
) -> str:
    """``value`` as a text argument: a ``str``; with ``identifier`` no NUL or unpaired
    surrogate; at most ``max_length`` characters."""
    if not isinstance(value, str):
        raise InvalidInputError(f"{name} must be a string, not {_describe(value)}")
    if non_empty and not value:
        raise InvalidInputError(f"{name} must not be empty")
    if max_length is not None and len(value) > max_length:
        raise InvalidInputError(
            f"{name} is {len(value)} characters long; the limit is {max_length}"
        )
    if identifier and _FORBIDDEN_IN_IDENTIFIER.search(value):
        raise InvalidInputError(f"{name} must not contain NUL characters or unpaired surrogates")
    return value


def check_optional_text(
    name: str,
    value: object,
    *,
    identifier: bool = False,
    max_length: int | None = None,
    non_empty: bool = False,
) -> str | None:
    if value is None:
        return None
    return check_text(
        name, value, identifier=identifier, max_length=max_length, non_empty=non_empty
    )


def check_flag(name: str, value: object) -> bool:
    """``value`` as a yes/no argument: only ``True`` or ``False`` (``"no"`` is truthy)."""
    if not isinstance(value, bool):
        raise InvalidInputError(f"{name} must be True or False, not {_describe(value)}")
    return value


def check_session_id(name: str, value: object) -> str:
    """``value`` as a session id argument (the ``session_id`` fields' domain)."""
    return check_text(
        name, value, identifier=True, max_length=SESSION_ID_MAX_LENGTH, non_empty=True
    )


def check_record(name: str, value: object, kind: type[_Record]) -> None:
    """``value`` must be a ``kind`` (a record of the right type, not a dict or a row)."""
    if not isinstance(value, kind):
        raise InvalidInputError(f"{name} must be a {kind.__name__}, not {_describe(value)}")


# -- records --------------------------------------------------------------------------------


class _Record(BaseModel):
    """Base of the persisted records: mutable, strict about unknown fields and values.

    Every way to put a value into a record validates it against the domain above
    (construction, assignment, ``model_copy(update=...)``) and refuses it with an
    :class:`InvalidInputError`; only :meth:`from_row` (the read path) does not.
    """

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    def __init__(self, /, **data: Any) -> None:
        try:
            super().__init__(**data)
        except ValidationError as exc:
            raise invalid_input(exc) from exc

    def __setattr__(self, name: str, value: Any) -> None:
        try:
            super().__setattr__(name, value)
        except ValidationError as exc:
            raise invalid_input(exc) from exc

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Self:
        """A copy; the ``update`` values are validated like assignments."""
        copied = super().model_copy(deep=deep)
        for name, value in (update or {}).items():
            setattr(copied, name, value)
        return copied

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

    session_key: SessionKey
    session_id: SessionId = Field(default_factory=new_session_id)
    created_at: Millis = Field(default_factory=now_ms)
    updated_at: Millis = Field(default_factory=now_ms)
    started_at: Millis | None = None
    ended_at: Millis | None = None
    runtime_ms: Int64 | None = None
    last_channel: Text | None = None
    last_to: Text | None = None
    last_account_id: Text | None = None
    last_thread_id: Text | None = None
    delivery_context: JSONObject | None = None
    model: Text | None = None
    model_provider: Text | None = None
    provider_override: Text | None = None
    model_override: Text | None = None
    auth_profile_override: Text | None = None
    auth_profile_override_source: Text | None = None
    context_tokens: Count64 | None = None
    model_routing_mode: Text | None = None
    model_routing_revision: Int64 = 0
    input_tokens: Count64 = 0
    output_tokens: Count64 = 0
    total_tokens: Count64 = 0
    total_tokens_fresh: Flag = False
    estimated_cost_usd: Finite = 0.0
    total_cost_usd: Finite = 0.0
    billed_cost_usd: Finite = 0.0
    estimated_cost_component_usd: Finite = 0.0
    cost_source: Text = "none"
    missing_cost_entries: Count64 = 0
    cache_read: Count64 = 0
    cache_write: Count64 = 0
    compaction_count: Count32 = 0
    session_file: Text | None = None
    spawned_by: LineageKey | None = None
    parent_session_key: LineageKey | None = None
    forked_from_parent: Flag = False
    spawn_depth: Count32 = 0
    status: Annotated[Text, _member_of(SessionStatus)] = SessionStatus.RUNNING.value
    chat_type: Annotated[Text, _member_of(ChatType)] = ChatType.UNKNOWN.value
    thinking_level: Text | None = None
    fast_mode: Flag = False
    verbose_level: Text | None = None
    reasoning_level: Text | None = None
    send_policy: Annotated[Text, _member_of(SendPolicy)] = SendPolicy.ALLOW.value
    queue_mode: Annotated[Text, _member_of(QueueMode)] = QueueMode.STEER.value
    collaboration_mode: Text = "default"
    collaboration_revision: Int64 = 0
    active_plan_revision_id: Text | None = None
    label: Annotated[Text, Field(max_length=LABEL_MAX_LENGTH)] | None = None
    display_name: Text | None = None
    derived_title: Text | None = None
    channel: Text | None = None
    group_id: Text | None = None
    subject: Text | None = None
    origin: JSONObject | None = None
    workspace_id: Annotated[Text, Field(max_length=WORKSPACE_ID_MAX_LENGTH)] | None = None
    agent_id: AgentId = "main"
    schema_version: Int32 = 1
    epoch: Count64 = 0


def check_session_values(values: object) -> dict[str, Any]:
    """Column values for a partial update of a session row, each checked in the domain of
    its :class:`SessionNode` field (unknown names refused); the values to write."""
    if not isinstance(values, Mapping):
        raise InvalidInputError(f"values must be a mapping, not {_describe(values)}")
    unknown = sorted(str(name)[:40] for name in values if name not in SessionNode.model_fields)
    if unknown:
        raise InvalidInputError(f"unknown session field(s): {', '.join(unknown)}")
    node = SessionNode.model_construct(session_key="-")
    for name, value in values.items():
        setattr(node, name, value)
    return {name: node.__dict__[name] for name in values}


class TranscriptEntry(_Record):
    """One transcript row (table ``transcript_entries``)."""

    id: Int64 | None = None
    session_id: SessionId
    session_key: SessionKey
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
    schema_version: Int32 = 1


class CompactedTranscriptEntry(_Record):
    """One row of the compacted archive (table ``compacted_transcript_entries``)."""

    id: Int64 | None = None
    session_id: SessionId
    session_key: SessionKey
    compaction_id: ArchiveCompactionId | None = None
    compaction_index: Count32 | None = None
    original_entry_id: Int64 | None = None
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
    archived_at: Millis = Field(default_factory=now_ms)
    schema_version: Int32 = 1


class SessionSummary(_Record):
    """One compaction summary (table ``session_summaries``)."""

    id: Int64 | None = None
    session_id: SessionId
    session_key: SessionKey
    compaction_index: Count32 = 0
    # Free text in this table (NUL kept); bounded because the compacted archive's index
    # (session_id, compaction_id) carries it too.
    compaction_id: SummaryCompactionId | None = None
    trigger_reason: Text | None = None
    summary_text: Text
    summary_payload: JSONObject | None = None
    summary_format: Text = "text"
    summary_source: Text = "unknown"
    coverage_status: Text = "unknown"
    missing_obligations: list[Text] | None = None
    critical_carry_forward: list[Text] | None = None
    tokens_before: Count64 | None = None
    tokens_after: Count64 | None = None
    removed_count: Count32 = 0
    kept_count: Count32 = 0
    chunk_count: Count32 = 0
    flush_receipt_status: Text = FlushReceiptStatus.UNKNOWN.value
    covered_through_id: Int64 = 0
    created_at: Millis = Field(default_factory=now_ms)
    schema_version: Int32 = 1


class SessionContextState(_Record):
    """A provider context state (table ``session_context_states``)."""

    id: Int64 | None = None
    session_id: SessionId
    session_key: SessionKey
    provider: Annotated[Text, Field(max_length=PROVIDER_MAX_LENGTH)] = "portable"
    model: Text | None = None
    state_kind: Annotated[Text, Field(max_length=STATE_KIND_MAX_LENGTH)]
    payload: JSONObject = Field(default_factory=dict)
    covered_through_id: Int64 = 0
    created_at: Millis = Field(default_factory=now_ms)
    expires_at: Millis | None = None
    portable: Flag = False
    cacheable: Flag = False
    valid: Flag = True
    invalid_reason: Text | None = None
    schema_version: Int32 = 1


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
