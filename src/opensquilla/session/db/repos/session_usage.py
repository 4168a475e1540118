"""The usage increment on ``sessions``: one fenced ``UPDATE ... RETURNING``
(docs/semantics.md#usage-counters).

Every counter changes by an SQL expression (``input_tokens = input_tokens + :delta``), so
concurrent increments are never lost: the database serialises the row's writers and each
adds to what the one before it left. The UPDATE is fenced on the generation, key, epoch
and session id, as an append is, and on room in every counter it touches: a 64-bit
integer column must stay one (SQLite would turn an overflowing sum into a REAL, Postgres
raise "bigint out of range"), a cost must stay finite. The room is the column's ceiling
less the delta, computed in Python and bound, so the sum itself is never evaluated on a
row without room.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import ColumnElement, and_, case, literal, or_, true, update
from sqlalchemy.ext.asyncio import AsyncConnection

from ...models import INT64_MAX, SessionNode
from ...models.usage import FLOAT_MAX, MIXED_COST_SOURCE, NO_COST_SOURCE, CheckedUsage
from ..rows import read_columns, to_model
from ..tables import sessions


def usage_values(usage: CheckedUsage, now: int) -> dict[str, Any]:
    """The SET clause of one increment: each counter it changes plus ``updated_at``;
    ``total_tokens_fresh`` true when tokens were added (the total now includes the
    provider's own count); ``cost_source`` the roll-up of the kinds recorded."""
    values: dict[str, Any] = {"updated_at": literal(now, sessions.c.updated_at.type)}
    for name, delta in usage.integer_deltas().items():
        column = sessions.c[name]
        values[name] = column + literal(delta, column.type)
    for name, cost in usage.cost_deltas().items():
        column = sessions.c[name]
        values[name] = column + literal(cost, column.type)
    if usage.total_tokens:
        values["total_tokens_fresh"] = true()
    if usage.cost_source is not None:
        source = literal(usage.cost_source, sessions.c.cost_source.type)
        values["cost_source"] = case(
            (
                or_(
                    sessions.c.cost_source.in_([NO_COST_SOURCE, ""]),
                    sessions.c.cost_source == source,
                ),
                source,
            ),
            else_=literal(MIXED_COST_SOURCE, sessions.c.cost_source.type),
        )
    return values


def room_for(usage: CheckedUsage) -> list[ColumnElement[bool]]:
    """The row has room for every delta: ``column <= ceiling - delta``."""
    conditions: list[ColumnElement[bool]] = []
    for name, delta in usage.integer_deltas().items():
        column = sessions.c[name]
        conditions.append(column <= literal(INT64_MAX - delta, column.type))
    for name, cost in usage.cost_deltas().items():
        if cost:
            column = sessions.c[name]
            conditions.append(column <= literal(FLOAT_MAX - cost, column.type))
    return conditions


class SessionUsage:
    """The usage increment of :class:`.sessions.SessionRepository`."""

    __slots__ = ()
    conn: AsyncConnection

    async def add_usage(
        self, key: str, *, session_id: str, epoch: int, usage: CheckedUsage, now: int
    ) -> SessionNode | None:
        """Add ``usage`` to the row of ``key`` while it holds generation ``session_id`` at
        ``epoch`` and has room for every delta: the updated row, or ``None`` (nothing
        written; :meth:`overflowing` tells a full counter from a moved generation)."""
        dialect = self.conn.dialect.name
        stmt = (
            update(sessions)
            .where(
                and_(
                    sessions.c.session_key == key,
                    sessions.c.epoch == epoch,
                    sessions.c.session_id == session_id,
                    *room_for(usage),
                )
            )
            .values(usage_values(usage, now))
            .returning(*read_columns(sessions, dialect))
        )
        row = (await self.conn.execute(stmt)).first()
        return to_model(SessionNode, row, dialect) if row is not None else None
