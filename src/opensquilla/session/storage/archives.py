"""Reset archives kept in the database (``archive_store="database"``, revision 0006): list
them and read one back. The rows are written by the reset itself, inside its transaction
(``usecases/reset.py``), and by ``write_session_archive``; nothing here deletes them, and
neither does deleting, pruning or capping sessions: they are the archive."""

from __future__ import annotations

import json
from typing import Any

from ..keys import canonicalize_session_key
from ..models import StoredArchive
from ..models.checks import check_integer
from .lifecycle import StorageLifecycle


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
        async with self.uow.read() as tx:
            return await tx.archives.list_archives(key, limit)

    async def read_session_archive(self, archive_id: int) -> dict[str, Any] | None:
        """The archive document of row ``archive_id`` (the JSON a reset archive file
        holds), or ``None`` if there is no such row."""
        check_integer("archive_id", archive_id, minimum=1)
        async with self.uow.read() as tx:
            text = await tx.archives.document(archive_id)
        return None if text is None else json.loads(text)
