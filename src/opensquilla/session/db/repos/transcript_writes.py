"""The writes of one transcript row: the append in three statements (the one-statement
append runs in ``uow.append_in_one_statement``), the plain and fenced inserts, and the
single-message operations (docs/semantics.md#message-id). Mixed into
:class:`.transcript.TranscriptRepository`, whose connection it uses.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import delete, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from ...models import TranscriptEntry
from ..rows import values_of
from ..tables import compacted_transcript_entries as archive
from ..tables import sessions
from ..tables import transcript_entries as live
from .fenced_append import (
    APPEND_VIEW_EXISTS,
    INSERT_COLUMNS,
    INSERT_ENTRY,
    append_and_touch,
    bound_row,
    upsert_and_touch,
)


class TranscriptWrites:
    """Inserting, upserting and rebinding single transcript rows."""

    conn: AsyncConnection

    async def append_and_touch(
        self,
        entry: TranscriptEntry,
        *,
        expected_epoch: int,
        now: int,
        token_delta: int,
    ) -> int | None:
        """The manager's append in three statements, inside the caller's write transaction
        (see ``append_and_touch``; the one-statement append is ``uow.append_in_one_statement``):
        the new row id, or ``None`` when the fence refused."""
        return await self.conn.run_sync(
            append_and_touch,
            entry,
            expected_epoch=expected_epoch,
            now=now,
            token_delta=token_delta,
            one_statement=False,
        )

    async def has_append_view(self) -> bool:
        """SQLite: whether the ``transcript_appends`` view (revision 0008) is there."""
        return bool((await self.conn.execute(APPEND_VIEW_EXISTS)).scalar_one())

    async def insert(self, entry: TranscriptEntry) -> int:
        result = await self.conn.execute(INSERT_ENTRY, values_of(entry, live))
        key = result.inserted_primary_key  # SQLite: the cursor's lastrowid, no extra fetch
        assert key is not None
        return int(key[0])

    async def insert_fenced(self, entry: TranscriptEntry, expected_epoch: int) -> int | None:
        """Insert only while ``sessions`` holds this generation at exactly this epoch.

        On Postgres the session row is read ``FOR SHARE``: a reset holding it makes this wait,
        then see the new epoch and insert nothing.
        """
        source = (
            select(*bound_row(entry))
            .where(
                sessions.c.session_key == entry.session_key,
                sessions.c.epoch == expected_epoch,
                sessions.c.session_id == entry.session_id,
            )
            .with_for_update(read=True, of=sessions)
        )
        stmt = live.insert().from_select([c.name for c in INSERT_COLUMNS], source)
        value = (await self.conn.execute(stmt.returning(live.c.id))).scalar_one_or_none()
        return int(value) if value is not None else None

    async def insert_many(self, entries: Sequence[TranscriptEntry]) -> None:
        """Insert in order; each entry gets its id."""
        for entry in entries:
            entry.id = await self.insert(entry)

    async def upsert_and_touch(
        self, entry: TranscriptEntry, *, expected_epoch: int, now: int, token_delta: int
    ) -> tuple[int, int, bool] | None:
        """The append by message id (see ``upsert_and_touch``): ``(id, created_at,
        inserted)`` of the row, or ``None`` when the fence refused."""
        return await self.conn.run_sync(
            upsert_and_touch,
            entry,
            expected_epoch=expected_epoch,
            now=now,
            token_delta=token_delta,
        )

    async def delete_live_message(self, session_id: str, message_id: str) -> int:
        """Delete every live row of ``session_id`` carrying ``message_id`` (the archive is
        never touched); how many."""
        stmt = delete(live).where(live.c.session_id == session_id, live.c.message_id == message_id)
        return int((await self.conn.execute(stmt)).rowcount)

    async def set_turn_context(
        self, session_key: str, message_id: str, turn_context: dict[str, Any] | None
    ) -> int:
        """Replace ``turn_context`` on every live and archived row of ``session_key`` (all
        generations) carrying ``message_id``; how many rows."""
        changed = 0
        for table in (live, archive):
            stmt = (
                update(table)
                .where(table.c.session_key == session_key, table.c.message_id == message_id)
                .values(turn_context=turn_context)
            )
            changed += int((await self.conn.execute(stmt)).rowcount)
        return changed


__all__ = ["TranscriptWrites"]
