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

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NotRequired, Required, TypedDict

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..errors import InvalidInputError
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
    check_optional_integer,
    check_optional_text,
    check_text,
    invalid_input,
)
from .identity import chosen_message_id
from .records import SessionNode, _Record, _SessionOwned


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
    metadata: JSONObject | None = None


class CompactedTranscriptEntry(_MessageFields, _ArchivePosition):
    """One row of the compacted archive (table ``compacted_transcript_entries``)."""

    archived_at: Millis = Field(default_factory=now_ms)
    schema_version: Int32 = 1
    metadata: JSONObject | None = None


# -- the append's inputs, declared once (docs/semantics.md#message-id) ---------------------


class AppendFields(TypedDict, total=False):
    """The keyword fields of an append (``append_message``, ``prepare_message``): declared
    once, for every layer (``Unpack[AppendFields]``). Each defaults to ``None``."""

    tool_calls: list[dict[str, Any]] | None
    tool_call_id: str | None
    reasoning_content: str | None
    turn_usage: dict[str, Any] | None
    token_count: int | None
    provenance: Mapping[str, Any] | None
    turn_context: dict[str, Any] | None
    message_id: str | None
    assistant_message_id: str | None
    metadata: dict[str, Any] | None


class MessageInput(AppendFields, total=False):
    """One message of a batch (``append_messages``): ``role`` (required), ``content``
    (``None`` when absent) and the keyword fields of an append (:class:`AppendFields`)."""

    role: Required[str]
    content: NotRequired[str | None]


PROVENANCE_KEYS = (
    "kind",
    "origin_session_id",
    "source_session_key",
    "source_channel",
    "source_tool",
)
# The entry's provenance fields of an append given none.
_NO_PROVENANCE: dict[str, Any] = dict.fromkeys(f"provenance_{name}" for name in PROVENANCE_KEYS)


class _CheckedMessage(BaseModel):
    """The append's fields that the front door checks through their record types (the
    rest, with messages of their own, through ``check_*``): the same annotated types as
    :class:`_MessageFields`, so a refusal reads as the entry's ("invalid TranscriptEntry")."""

    model_config = ConfigDict(title="TranscriptEntry", extra="forbid")

    tool_calls: JSONList | None = None
    tool_call_id: Identifier | None = None
    reasoning_content: Text | None = None
    turn_usage: JSONObject | None = None
    turn_context: JSONObject | None = None
    provenance_kind: Identifier | None = None
    provenance_origin_session_id: Identifier | None = None
    provenance_source_session_key: LineageKey | None = None
    provenance_source_channel: Identifier | None = None
    provenance_source_tool: Identifier | None = None
    metadata: JSONObject | None = None


_VALIDATE_CHECKED = _CheckedMessage.__pydantic_validator__.validate_python


def provenance_values(provenance: object) -> dict[str, Any]:
    """The provenance mapping's values by key; any other shape or key is refused."""
    if not isinstance(provenance, Mapping):
        raise InvalidInputError(
            f"provenance must be a mapping with the keys {', '.join(PROVENANCE_KEYS)}, not "
            f"{type(provenance).__name__}"
        )
    unknown = [str(name)[:40] for name in provenance if name not in PROVENANCE_KEYS]
    if unknown:
        raise InvalidInputError(
            f"unknown provenance key(s) {', '.join(sorted(unknown))}; the keys are "
            f"{', '.join(PROVENANCE_KEYS)}"
        )
    return {f"provenance_{name}": provenance.get(name) for name in PROVENANCE_KEYS}


@dataclass(frozen=True, slots=True)
class CheckedMessage:
    """An append's fields checked once (:func:`check_message`): the entry's message
    ``values`` and the ``token_delta`` it adds to ``total_tokens``."""

    values: Mapping[str, Any]
    token_delta: int


# Kept for the assistant role only: any other role given one is refused, never emptied.
ASSISTANT_ONLY = ("reasoning_content", "turn_usage")


def check_message(role: object, content: object, fields: AppendFields) -> CheckedMessage:
    """The front door's one check of an append's fields (each field checked once), as the
    entry's message values but its owner, ``message_id`` (``None``: a new random one) and
    ``created_at``. ``reasoning_content`` and ``turn_usage`` belong to the assistant role:
    given (not ``None``) for another role they are refused (``InvalidInputError`` naming
    the field), never silently dropped. Trusted below: the entry is built from them
    without validating again (:func:`trusted_entry`)."""
    check_text("role", role, identifier=True, non_empty=True)
    check_optional_text("content", content)
    token_count = fields.get("token_count")
    check_optional_integer("token_count", token_count)
    message_id = fields.get("message_id")
    assistant_message_id = fields.get("assistant_message_id")
    chosen = (
        None
        if message_id is None and assistant_message_id is None
        else chosen_message_id(message_id, assistant_message_id)
    )
    provenance = fields.get("provenance")
    origin = _NO_PROVENANCE if provenance is None else provenance_values(provenance)
    if role != "assistant":
        for name in ASSISTANT_ONLY:
            if fields.get(name) is not None:
                raise InvalidInputError(
                    f"{name} is kept for the assistant role only, and this message's role "
                    f"is {describe_role(role)}: pass {name}=None (or put the value in "
                    "metadata); nothing was written"
                )
    values: dict[str, Any] = {
        "tool_calls": fields.get("tool_calls"),
        "tool_call_id": fields.get("tool_call_id"),
        "reasoning_content": fields.get("reasoning_content"),
        "turn_usage": fields.get("turn_usage"),
        "turn_context": fields.get("turn_context"),
        **origin,
        "metadata": fields.get("metadata"),
    }
    if any(value is not None for value in values.values()):
        try:
            values = _VALIDATE_CHECKED(values).__dict__
        except ValidationError as exc:
            raise invalid_input(exc) from exc
    values["role"] = role
    values["content"] = content
    values["token_count"] = token_count
    values["message_id"] = chosen
    # What the append adds to ``total_tokens``: the count when no ``turn_usage`` was given
    # (whatever the role; usage is then accounted elsewhere).
    delta = token_count if token_count and fields.get("turn_usage") is None else 0
    return CheckedMessage(values, delta)


def describe_role(role: object) -> str:
    """A role for a message: short ones quoted, long ones by their length."""
    shown = str(role)
    return repr(shown) if len(shown) <= 40 else f"a str of {len(shown)} characters"


_MESSAGE_KEYS = frozenset({"role", "content", *AppendFields.__optional_keys__})


def check_messages(messages: object) -> list[CheckedMessage]:
    """The front door's one check of a batch (``append_messages``): a list (or tuple) of
    mappings (:class:`MessageInput`), each checked as :func:`check_message` checks an
    append. The first bad message is refused whole, its index and field named
    (``messages[2]: ...``); nothing is written then."""
    if not isinstance(messages, list | tuple):
        raise InvalidInputError(
            f"messages must be a list of message mappings, not {type(messages).__name__}; "
            "nothing was written"
        )
    checked: list[CheckedMessage] = []
    for index, message in enumerate(messages):
        where = f"messages[{index}]"
        if not isinstance(message, Mapping):
            raise InvalidInputError(
                f"{where} must be a mapping with 'role' and 'content', not "
                f"{type(message).__name__}; nothing was written"
            )
        unknown = [key for key in message if key not in _MESSAGE_KEYS]
        if unknown:
            shown = ", ".join(sorted(repr(str(key)[:40]) for key in unknown))
            raise InvalidInputError(f"{where}: unknown field(s) {shown}; nothing was written")
        if "role" not in message:
            raise InvalidInputError(f"{where}: 'role' is required; nothing was written")
        fields = {key: value for key, value in message.items() if key not in ("role", "content")}
        try:
            checked.append(check_message(message["role"], message.get("content"), fields))  # type: ignore[arg-type]
        except InvalidInputError as exc:
            text = str(exc).removesuffix("; nothing was written")
            raise InvalidInputError(f"{where}: {text}; nothing was written") from exc
    return checked


_ENTRY_FIELDS = tuple(TranscriptEntry.model_fields)
# Every field but ``created_at``: the fields a trusted entry was given (its ``created_at``
# is defaulted, see :func:`trusted_entry`).
_GIVEN_FIELDS = frozenset(_ENTRY_FIELDS) - {"created_at"}


def trusted_entry(session_id: str, session_key: str, values: Mapping[str, Any]) -> TranscriptEntry:
    """The entry of checked ``values`` (:func:`check_message`) owned by ``session_id`` of
    canonical ``session_key``, built without validation (``from_fields``): each value was
    checked once, at the front door. A ``message_id`` of ``None`` gets a new random one."""
    row: dict[str, Any] = dict.fromkeys(_ENTRY_FIELDS)
    row.update(values)
    row["session_id"] = session_id
    row["session_key"] = session_key
    if row["message_id"] is None:
        row["message_id"] = new_message_id()
    row["created_at"] = now_ms()
    row["schema_version"] = 1
    # Defaulted, not the caller's: the append raises it to the generation's order floor
    # (docs/semantics.md#order). Each entry gets a set of its own (assignment adds to it).
    return TranscriptEntry.from_fields(row, set(_GIVEN_FIELDS))


def defaulted_created_at(entry: TranscriptEntry) -> bool:
    """Whether ``entry.created_at`` is the model's default (the caller gave none): such a
    timestamp is raised to the newest live ``created_at`` of the generation when written."""
    return "created_at" not in entry.model_fields_set


_JSON_FIELDS = ("tool_calls", "turn_usage", "turn_context", "metadata")


def first_unencodable(entries: Sequence[TranscriptEntry]) -> int | None:
    """The index of the first entry whose JSON fields are not strict JSON text (NaN, an
    infinity, a lone surrogate, a value ``json`` cannot encode): what a batch refused at
    its encoding names (the error path only)."""
    for index, entry in enumerate(entries):
        for name in _JSON_FIELDS:
            value = getattr(entry, name)
            if value is None:
                continue
            try:
                json.dumps(value, ensure_ascii=False, allow_nan=False).encode("utf-8")
            except (TypeError, ValueError, RecursionError):
                return index
    return None


class PrepareFields(AppendFields, total=False):
    """``prepare_message``'s keyword fields: the append's, and the caller's copy of the
    session row (``session_node``), which saves the read."""

    session_node: SessionNode | None
