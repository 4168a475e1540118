"""Reset archives: the old generation of a session, written before it is deleted.

One JSON file per reset, owner-only (0600) in an owner-only (0700) directory whatever the
umask. It is written and fsynced under a temporary name inside the reset transaction,
before anything is deleted, and renamed into place only once the reset has committed; a
reset that rolls back removes it. The directory is
``$OPENSQUILLA_SESSION_ARCHIVE_DIR``, resolved at each reset, else the opensquilla home's
``session-archive``.
"""

from __future__ import annotations

import asyncio
import json
import re
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from .config import archive_directory
from .files import StagedFile, stage_file
from .models import GenerationSnapshot

ARCHIVE_SCHEMA_VERSION = 1
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")


def safe_name_part(value: str) -> str:
    return _UNSAFE.sub("-", value).strip("-")[:64] or "session"


def _fields(record: BaseModel) -> dict[str, Any]:
    """A record's fields as they are. Rows read back from the database hold JSON values
    only; pydantic's serialiser is not used because it refuses values nested deeper than
    its own limit, which the store accepts, and a reset must archive whatever it deletes."""
    return {name: getattr(record, name) for name in type(record).model_fields}


def archive_document(snapshot: GenerationSnapshot, *, reason: str, now_ms: int) -> dict[str, Any]:
    archived_at = datetime.fromtimestamp(now_ms / 1000, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "schema_version": ARCHIVE_SCHEMA_VERSION,
        "archived_at": archived_at,
        "reason": reason,
        "session_key": snapshot.session.session_key,
        "session_id": snapshot.session.session_id,
        "session": _fields(snapshot.session),
        "transcript_entries": [_fields(entry) for entry in snapshot.transcript],
        "summaries": [_fields(summary) for summary in snapshot.summaries],
    }


def encode_document(document: dict[str, Any]) -> bytes:
    """Indented UTF-8 JSON; compact when a value is nested too deeply for the indenting
    encoder (which spends a Python frame per level), so that nothing the database holds
    is ever unarchivable."""
    try:
        text = json.dumps(document, indent=2, ensure_ascii=False)
    except RecursionError:
        text = json.dumps(document, ensure_ascii=False)
    return text.encode("utf-8")


def _stage(directory: Path, name: str, document: dict[str, Any]) -> StagedFile:
    # On a worker thread: a fresh stack for the encoder, and the event loop stays free.
    return stage_file(directory, name, encode_document(document))


def _discard_when_done(staging: asyncio.Future[StagedFile]) -> None:
    if not staging.cancelled() and staging.exception() is None:
        staging.result().discard()


async def stage_reset_archive(
    snapshot: GenerationSnapshot, *, now_ms: int, reason: str = "reset_same_key"
) -> StagedFile | None:
    """Write the archive of ``snapshot`` under a temporary name (fsynced, owner-only);
    ``None`` when the generation held nothing. Publish it once the reset has committed."""
    if not snapshot.transcript and not snapshot.summaries:
        return None
    document = archive_document(snapshot, reason=reason, now_ms=now_ms)
    name = (
        f"{now_ms}-{safe_name_part(snapshot.session.session_key)}-"
        f"{safe_name_part(snapshot.session.session_id)}-{uuid.uuid4().hex[:8]}.json"
    )
    staging = asyncio.ensure_future(asyncio.to_thread(_stage, archive_directory(), name, document))
    try:
        return await asyncio.shield(staging)
    except BaseException:
        # Cancelled while the thread writes: the thread finishes regardless, and nobody
        # will publish or discard what it leaves, so remove it once it is there.
        staging.add_done_callback(_discard_when_done)
        raise
