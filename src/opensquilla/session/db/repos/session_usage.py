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

import functools
from typing import Any

from sqlalchemy import ColumnElement, Update, bindparam, case, literal, or_, true, update
from sqlalchemy.ext.asyncio import AsyncConnection

from ...models import INT64_MAX, SessionNode
from ...models.usage import FLOAT_MAX, MIXED_COST_SOURCE, NO_COST_SOURCE, CheckedUsage
from ..rows import read_columns, to_model
from ..tables import sessions

# The shape of one increment: which integer counters and which cost columns it changes,
# which costs need room (a zero cost always has it), whether it adds tokens and whether it
# sets ``cost_source``. One statement per shape, built once, its values bound by name: the
# statement (and its compiled form) is reused, not rebuilt with literals on every call.
UsageShape = tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...], bool, bool]


def usage_shape(usage: CheckedUsage) -> UsageShape:
    costs = usage.cost_deltas()
    return (
        tuple(usage.integer_deltas()),
        tuple(costs),
        tuple(name for name, cost in costs.items() if cost),
        bool(usage.total_tokens),
        usage.cost_source is not None,
    )


@functools.lru_cache(maxsize=128)
def usage_statement(dialect_name: str, shape: UsageShape) -> Update:
    """The fenced increment of ``shape`` (:func:`usage_params` binds it): every counter
    changed by an SQL expression, ``updated_at`` set, ``total_tokens_fresh`` true when
    tokens were added, ``cost_source`` rolled up; only on the row of the generation's
    key, epoch and session id with room for every delta (``column <= ceiling - delta``);
    the updated row returned."""
    integers, costs, priced, adds_tokens, sets_source = shape
    values: dict[str, Any] = {"updated_at": bindparam("now", type_=sessions.c.updated_at.type)}
    room: list[ColumnElement[bool]] = []
    for name in (*integers, *costs):
        column = sessions.c[name]
        values[name] = column + bindparam(f"d_{name}", type_=column.type)
    for name in (*integers, *priced):
        column = sessions.c[name]
        room.append(column <= bindparam(f"room_{name}", type_=column.type))
    if adds_tokens:
        values["total_tokens_fresh"] = true()
    if sets_source:
        text_type = sessions.c.cost_source.type
        source = bindparam("source", type_=text_type)
        values["cost_source"] = case(
            (
                or_(  # (no IN: its expanding parameter would rule out the direct path)
                    sessions.c.cost_source == literal(NO_COST_SOURCE, text_type),
                    sessions.c.cost_source == literal("", text_type),
                    sessions.c.cost_source == source,
                ),
                source,
            ),
            else_=literal(MIXED_COST_SOURCE, text_type),
        )
    return (
        update(sessions)
        .where(
            sessions.c.session_key == bindparam("row_key"),
            sessions.c.epoch == bindparam("fence_epoch"),
            sessions.c.session_id == bindparam("fence_session_id"),
            *room,
        )
        .values(values)
        .returning(*read_columns(sessions, dialect_name))
    )


def usage_params(
    dialect_name: str, key: str, *, session_id: str, epoch: int, usage: CheckedUsage, now: int
) -> tuple[Update, dict[str, Any]]:
    """The increment of ``usage`` on the row of ``key`` while it holds generation
    ``session_id`` at ``epoch`` (:func:`usage_statement` of its shape) and its values."""
    params: dict[str, Any] = {
        "row_key": key,
        "fence_epoch": epoch,
        "fence_session_id": session_id,
        "now": now,
    }
    for name, delta in usage.integer_deltas().items():
        params[f"d_{name}"] = delta
        params[f"room_{name}"] = INT64_MAX - delta
    for name, cost in usage.cost_deltas().items():
        params[f"d_{name}"] = cost
        if cost:
            params[f"room_{name}"] = FLOAT_MAX - cost
    if usage.cost_source is not None:
        params["source"] = usage.cost_source
    return usage_statement(dialect_name, usage_shape(usage)), params


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
        stmt, params = usage_params(
            dialect, key, session_id=session_id, epoch=epoch, usage=usage, now=now
        )
        row = (await self.conn.execute(stmt, params)).first()
        return to_model(SessionNode, row, dialect) if row is not None else None
