"""Deleting sessions with everything they own, and the retention order they go in: the
deleting half of the statements on ``sessions`` (:class:`SessionDeletion`, a part of
``SessionRepository``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

from sqlalchemy import Table, Text, and_, any_, bindparam, delete, exists, select
from sqlalchemy.dialects import postgresql
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.sql.expression import BindParameter, ColumnElement

from ..routing import cross_session
from ..sql import is_postgres
from ..tables import OWNED_TABLES, session_context_states, session_summaries, sessions
from .states import session_states

RETENTION_ORDER = (sessions.c.updated_at, sessions.c.created_at, sessions.c.session_key)


def owned_rows(
    table: Table, keys: Any, session_ids: Any, *, sessions_deleted: bool = False
) -> tuple[ColumnElement[bool], ColumnElement[bool]]:
    """The rows of ``table`` that belong to the sessions ``keys`` (current generations
    ``session_ids``), as disjoint conditions, one statement each (so that each is an index
    probe; together, with an ``OR``, PostgreSQL would hash every session per statement).

    ``keys`` and ``session_ids`` are lists, one-column selects or :func:`_listed` arrays.
    A session owns every row stored under its key, of every generation (a legacy file or
    an import can hold rows of an older one), and every row carrying its current session
    id. Excepted is a row
    that another session, one not among ``keys``, shows as its own: transcript, archive
    and summaries are read by session id, context states by key. (Such a row can only
    come from data written before session ids were unique; deleting one session must not
    take it from the other.)

    The conditions come as ``(by key, by id)``: the first routes to each key's shard under
    distribution, the second (the rows carrying the ids, under whatever key they are
    stored) fans out to every shard.

    ``sessions_deleted``: the conditions run right after the session rows of ``keys`` were
    deleted, in the same transaction: they then need neither be disjoint nor exclude
    ``keys`` from the sessions they look at (fewer parameters: each is a value SQLAlchemy
    and the driver process).
    """
    if table is session_context_states:
        mine, others, link = table.c.session_key, table.c.session_id, sessions.c.session_key
        this_generation, other_rows = _one_of(mine, keys), _one_of(others, session_ids)
    else:
        mine, others, link = table.c.session_id, table.c.session_key, sessions.c.session_id
        this_generation, other_rows = _one_of(mine, session_ids), _one_of(others, keys)
    if sessions_deleted:
        rest = and_(other_rows, ~exists().where(link == mine))
    else:
        shown_elsewhere = exists().where(link == mine, sessions.c.session_key.not_in(keys))
        rest = and_(other_rows, ~this_generation, ~shown_elsewhere)
    if table is session_context_states:
        return this_generation, rest
    return rest, this_generation


def _listed(conn: AsyncConnection, values: Sequence[str]) -> Any:
    """``values`` for :func:`_one_of`: on PostgreSQL one array parameter (``= ANY``), which
    the driver and the planner take several times faster than hundreds of ``IN``
    parameters; on SQLite the list itself."""
    if is_postgres(conn):
        return bindparam(None, list(values), type_=postgresql.ARRAY(Text))
    return list(values)


def _one_of(column: Any, values: Any) -> ColumnElement[bool]:
    if isinstance(values, BindParameter):
        return cast(ColumnElement[bool], column == any_(values))
    return cast(ColumnElement[bool], column.in_(values))


class SessionDeletion:
    """Retention's statements on ``sessions`` and the tables its sessions own."""

    __slots__ = ()
    conn: AsyncConnection

    async def oldest_keys(self, limit: int, *, updated_before: int | None = None) -> list[str]:
        """Keys in retention order (least recently updated first)."""
        query = select(sessions.c.session_key)
        if updated_before is not None:
            query = query.where(sessions.c.updated_at < updated_before)
        query = query.order_by(*RETENTION_ORDER).limit(limit)
        return list((await self.conn.execute(query)).scalars())

    async def delete_cascade(
        self, keys: Sequence[str], *, updated_before: int | None = None
    ) -> list[str]:
        """Delete sessions and everything they own (:func:`owned_rows`, and their state
        rows); returns the keys actually deleted.

        The session rows go first: on Postgres that locks them, so an append or branch racing
        this delete either committed before (and its rows are deleted here too) or finds the
        session gone. ``updated_before`` re-checks staleness inside the transaction.
        """
        if not keys:
            return []
        stmt = delete(sessions).where(_one_of(sessions.c.session_key, _listed(self.conn, keys)))
        if updated_before is not None:
            stmt = stmt.where(sessions.c.updated_at < updated_before)
        rows = (
            await self.conn.execute(stmt.returning(sessions.c.session_key, sessions.c.session_id))
        ).all()
        if not rows:
            return []
        deleted_keys = [row.session_key for row in rows]
        session_ids = [row.session_id for row in rows]
        listed_keys, listed_ids = _listed(self.conn, deleted_keys), _listed(self.conn, session_ids)
        for table in OWNED_TABLES:
            # Summaries have no index on session_key, so that test scans the table: a list of
            # parameters is hashed once per statement there, an array searched row by row.
            keys = deleted_keys if table is session_summaries else listed_keys
            by_key, by_id = owned_rows(table, keys, listed_ids, sessions_deleted=True)
            await self.conn.execute(delete(table).where(by_key))
            # The rows carrying the sessions' current ids under whatever key they are stored
            # (a legacy spelling of the key among them): by id alone, a fan-out.
            with cross_session("retention"):
                await self.conn.execute(delete(table).where(by_id))
        # The sessions' state (one row per key, outside the five tables), in the same
        # transaction.
        await self.conn.execute(
            delete(session_states).where(_one_of(session_states.c.session_key, listed_keys))
        )
        return deleted_keys
