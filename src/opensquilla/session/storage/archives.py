"""Reset archives kept in the database (``archive_store="database"``, revision 0006): list
them and read one back. The rows are written by the reset itself, inside its transaction
(``usecases/reset.py``), and by ``write_session_archive``; nothing here deletes them, and
neither does deleting, pruning or capping sessions: they are the archive."""

from __future__ import annotations

from typing import Any

from ..db.lifecycle import StorageLifecycle
from ..keys import canonicalize_session_key
from ..models import StoredArchive
from ..models.checks import check_integer
from ..usecases import session_archive


class ArchiveRowOperations(StorageLifecycle):
    """List and read the reset archives of ``session_archives``."""

    async def list_session_archives(
        self, session_key: str | None = None, *, limit: int | None = None
    ) -> list[StoredArchive]:
        """The archives in the database, oldest first: all of them, or those of
        ``session_key`` (every generation it had); at most ``limit``."""
        key = None if session_key is None else canonicalize_session_key(session_key)
        if limit is not None:
            check_integer("limit", limit, minimum=1)
        return await session_archive.list_archives(self.uow, key, limit)

    async def read_session_archive(self, archive_id: int) -> dict[str, Any] | None:
        """The archive document of row ``archive_id`` (the JSON a reset archive file
        holds), or ``None`` if there is no such row."""
        check_integer("archive_id", archive_id, minimum=1)
        return await session_archive.read_archive(self.uow, archive_id)
