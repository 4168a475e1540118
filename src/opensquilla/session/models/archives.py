"""A reset archive kept in the database (``archive_store="database"``, revision 0006;
docs/semantics.md#reset-archive)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class StoredArchive:
    """One row of ``session_archives``: the archive of one generation, without its document
    (``SessionManager.read_session_archive(id)`` gives that)."""

    id: int
    session_key: str
    session_id: str  # the archived (old) generation
    epoch: int  # the session's epoch after the reset, as in the document's ``session``
    reason: str
    created_at: int  # milliseconds since the epoch
    size_bytes: int  # the document's size in UTF-8 bytes
