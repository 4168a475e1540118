"""The writes of one transcript row: the append in three statements (the one-statement
append runs in ``uow.append_in_one_statement``), the plain and fenced inserts, and the
single-message operations (docs/semantics.md#message-id). Mixed into
:class:`.transcript.TranscriptRepository`, whose connection it uses.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Unpack

from sqlalchemy import delete, literal, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from ...models import TranscriptEntry
from ...models.messages import defaulted_created_at
from ..rows import values_of
from ..tables import compacted_transcript_entries as archive
from ..tables import sessions
from ..tables import transcript_entries as live
from .fenced_append import (
    APPEND_VIEW_EXISTS,
    INSERT_COLUMNS,
    INSERT_ENTRY,
    NEWEST_LIVE,
    Fence,
    append_and_touch,
    bound_row,
    floored,
    newest_live_params,
)
from .fenced_upsert import upsert_and_touch


class TranscriptWrites:
    """Inserting, upserting and rebinding single transcript rows."""

    conn: AsyncConnection

    async def append_and_touch(
        self, entry: TranscriptEntry, **fence: Unpack[Fence]
    ) -> tuple[int, int] | None:
        """The manager's append in three statements, inside the caller's write transaction
        (see ``append_and_touch``; the one-statement append is ``uow.append_in_one_statement``):
        ``(id, created_at)`` of the new row as stored, or ``None`` when the fence refused."""
        return await self.conn.run_sync(append_and_touch, entry, **fence)

    async def has_append_view(self) -> bool:
        """SQLite: whether the ``transcript_appends`` view (revision 0008) is there."""
        return bool((await self.conn.execute(APPEND_VIEW_EXISTS)).scalar_one())

    async def insert(self, entry: TranscriptEntry) -> int:
        result = await self.conn.execute(INSERT_ENTRY, values_of(entry, live))
        key = result.inserted_primary_key  # SQLite: the cursor's lastrowid, no extra fetch
        assert key is not None
        return int(key[0])

    async def insert_floored(self, entry: TranscriptEntry) -> int:
        """:meth:`insert` of a caller's entry: a defaulted ``created_at`` (the caller gave
        none) raised first to the generation's newest live one (docs/semantics.md#order),
        ``entry.created_at`` updated. Inside a write transaction (SQLite: under the write
        lock)."""
        if defaulted_created_at(entry):
            newest = (await self.conn.execute(NEWEST_LIVE, newest_live_params(entry))).scalar()
            if newest is not None and newest > entry.created_at:
                entry.__dict__["created_at"] = int(newest)
        return await self.insert(entry)

    async def insert_fenced(self, entry: TranscriptEntry, expected_epoch: int) -> int | None:
        """Insert only while ``sessions`` holds this generation at exactly this epoch; a
        defaulted ``created_at`` raised to the generation's newest live one in the
        statement (``entry.created_at`` set to the value stored).

        On Postgres the session row is read ``FOR SHARE``: a reset holding it makes this wait,
        then see the new epoch and insert nothing.
        """
        row = bound_row(entry)
        if defaulted_created_at(entry):
            at = next(i for i, c in enumerate(INSERT_COLUMNS) if c.name == "created_at")
            given = literal(entry.created_at, type_=live.c.created_at.type)
            row[at] = floored(
                self.conn.dialect.name,
                given,
                literal(entry.session_key, type_=live.c.session_key.type),
                literal(entry.session_id, type_=live.c.session_id.type),
            ).label("created_at")
        source = (
            select(*row)
            .where(
                sessions.c.session_key == entry.session_key,
                sessions.c.epoch == expected_epoch,
                sessions.c.session_id == entry.session_id,
            )
            .with_for_update(read=True, of=sessions)
        )
        stmt = live.insert().from_select([c.name for c in INSERT_COLUMNS], source)
        stmt = stmt.returning(live.c.id, live.c.created_at)
        placed = (await self.conn.execute(stmt)).first()
        if placed is None:
            return None
        entry.__dict__["created_at"] = int(placed[1])
        return int(placed[0])

    async def insert_many(self, entries: Sequence[TranscriptEntry]) -> None:
        """Insert in order; each entry gets its id."""
        for entry in entries:
            entry.id = await self.insert(entry)

    async def upsert_and_touch(
        self, entry: TranscriptEntry, **fence: Unpack[Fence]
    ) -> tuple[int, int, bool] | None:
        """The append by message id (see ``upsert_and_touch``): ``(id, created_at,
        inserted)`` of the row, or ``None`` when the fence refused."""
        return await self.conn.run_sync(upsert_and_touch, entry, **fence)

    async def delete_live_message(
        self, session_id: str, message_id: str, *, session_key: str
    ) -> int:
        """Delete every live row of ``session_id`` (stored under ``session_key``) carrying
        ``message_id`` (the archive is never touched); how many."""
        stmt = delete(live).where(
            live.c.session_key == session_key,
            live.c.session_id == session_id,
            live.c.message_id == message_id,
        )
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
