"""Capture the source of an inline compaction (docs/semantics.md#compaction-source).

A caller that summarises on its own (an agent runtime compacting between turns) captures
the live rows it plans on, summarises them outside any transaction, then installs the
summary with ``persist_compaction_result(..., source_entries=..., source_preimage=...)``:
the commit re-checks that those rows are still the transcript's prefix, so messages appended
meanwhile stay live with their ids and the compaction still commits.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any

from ...compaction import INPUT_KEYS, entry_dict, sanitize_silent_replies
from ...db.uow import Transaction, UnitOfWork
from ...errors import InvalidInputError, SessionNotFoundError
from ...keys import CanonicalKey
from ...models import CompactionSourceSnapshot, SessionNode, TranscriptEntry

# The columns a source row is compared on (upstream's preimage row): everything but the
# mutable bookkeeping the compaction itself does not read.
_PREIMAGE_COLUMNS = (
    "session_id",
    "session_key",
    "id",
    "message_id",
    "role",
    "content",
    "tool_call_id",
    "reasoning_content",
    "created_at",
    "token_count",
    "provenance_kind",
    "provenance_origin_session_id",
    "provenance_source_session_key",
    "provenance_source_channel",
    "provenance_source_tool",
    "schema_version",
)
_PREIMAGE_JSON_COLUMNS = ("tool_calls", "turn_usage", "turn_context")


def _preimage_line(entry: TranscriptEntry) -> bytes:
    """One row of the preimage: the compared columns, then the JSON ones, as one JSON
    array (objects with sorted keys), one line."""
    values = [getattr(entry, name) for name in _PREIMAGE_COLUMNS]
    values.extend(getattr(entry, name) for name in _PREIMAGE_JSON_COLUMNS)
    line = json.dumps(values, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return line.encode("utf-8", "surrogatepass") + b"\n"


def source_preimage(entries: Sequence[TranscriptEntry]) -> str:
    """The SHA-256 (hex) of the entries' preimage rows, in order."""
    digest = hashlib.sha256()
    for entry in entries:
        digest.update(_preimage_line(entry))
    return digest.hexdigest()


def compaction_input(entries: Sequence[TranscriptEntry]) -> list[dict[str, Any]]:
    """The compactor's input: one dict per live row, in order, its silent replies cleaned
    (docs/semantics.md#silent-replies). The stored rows are never changed."""
    return sanitize_silent_replies(entry_dict(entry, INPUT_KEYS) for entry in entries)


def check_items(name: str, value: object, kind: type, plural: str, singular: str) -> list[Any]:
    """A list or tuple of ``kind``, else ``InvalidInputError`` ("a list of ``plural``", "a
    ``singular``")."""
    if not isinstance(value, list | tuple):
        raise InvalidInputError(f"{name} must be a list of {plural}, not {type(value).__name__}")
    for position, item in enumerate(value):
        if not isinstance(item, kind):
            raise InvalidInputError(
                f"{name}[{position}] must be a {singular}, not {type(item).__name__}"
            )
    return list(value)


def check_source_entries(name: str, entries: object) -> list[TranscriptEntry]:
    """A list or tuple of :class:`TranscriptEntry`, else ``InvalidInputError``."""
    return check_items(name, entries, TranscriptEntry, "TranscriptEntry", "TranscriptEntry")


def snapshot_of(
    entries: Sequence[TranscriptEntry], boundary_message_id: str | None = None
) -> CompactionSourceSnapshot:
    """The snapshot of ``entries``, cut after the last row carrying ``boundary_message_id``
    when given (none carries it: an empty snapshot)."""
    rows = list(entries)
    if boundary_message_id is not None:
        last = max(
            (i for i, entry in enumerate(rows) if entry.message_id == boundary_message_id),
            default=None,
        )
        rows = [] if last is None else rows[: last + 1]
    return CompactionSourceSnapshot(
        entries=tuple(entry.model_copy(deep=True) for entry in rows),
        preimage=source_preimage(rows),
        boundary_message_id=rows[-1].message_id if rows else None,
        boundary_entry_id=rows[-1].id if rows else None,
    )


async def capture_compaction_source(
    uow: UnitOfWork,
    key: CanonicalKey,
    *,
    boundary_message_id: str | None = None,
    transcript_entries: Sequence[TranscriptEntry] | None = None,
) -> CompactionSourceSnapshot:
    """The source of an inline compaction: ``transcript_entries`` when given (no read), else
    the live transcript of ``key`` (empty when the session is missing), from one read unit
    of work."""
    if transcript_entries is not None:
        return snapshot_of(transcript_entries, boundary_message_id)
    async with uow.snapshot() as tx:
        _, live = await live_rows(tx, key)
    return snapshot_of(live, boundary_message_id)


async def live_rows(
    tx: Transaction, key: CanonicalKey, *, required: bool = False
) -> tuple[SessionNode | None, list[TranscriptEntry]]:
    """The session row of ``key`` and its generation's live rows, read on ``tx``; a
    missing session: ``(None, [])``, or (``required``) ``SessionNotFoundError``."""
    node = await tx.sessions.get(key)
    if node is None:
        if required:
            raise SessionNotFoundError(f"Session not found: {key}")
        return None, []
    return node, await tx.transcript.list_live(node.session_id, session_key=node.session_key)
