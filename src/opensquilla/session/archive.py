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
from typing import Any

from .config import archive_directory
from .files import StagedFile, stage_file
from .models import GenerationSnapshot

ARCHIVE_SCHEMA_VERSION = 1
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")


def safe_name_part(value: str) -> str:
    return _UNSAFE.sub("-", value).strip("-")[:64] or "session"


def archive_document(snapshot: GenerationSnapshot, *, reason: str, now_ms: int) -> dict[str, Any]:
    archived_at = datetime.fromtimestamp(now_ms / 1000, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "schema_version": ARCHIVE_SCHEMA_VERSION,
        "archived_at": archived_at,
        "reason": reason,
        "session_key": snapshot.session.session_key,
        "session_id": snapshot.session.session_id,
        "session": snapshot.session.model_dump(mode="json"),
        "transcript_entries": [entry.model_dump(mode="json") for entry in snapshot.transcript],
        "summaries": [summary.model_dump(mode="json") for summary in snapshot.summaries],
    }


async def stage_reset_archive(
    snapshot: GenerationSnapshot, *, now_ms: int, reason: str = "reset_same_key"
) -> StagedFile | None:
    """Write the archive of ``snapshot`` under a temporary name (fsynced, owner-only);
    ``None`` when the generation held nothing. Publish it once the reset has committed."""
    if not snapshot.transcript and not snapshot.summaries:
        return None
    document = archive_document(snapshot, reason=reason, now_ms=now_ms)
    data = json.dumps(document, indent=2, ensure_ascii=False).encode("utf-8")
    name = (
        f"{now_ms}-{safe_name_part(snapshot.session.session_key)}-"
        f"{safe_name_part(snapshot.session.session_id)}-{uuid.uuid4().hex[:8]}.json"
    )
    return await asyncio.to_thread(stage_file, archive_directory(), name, data)
