"""Statements on ``sessions``."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any, Literal, cast

from sqlalchemy import (
    Select,
    Table,
    Text,
    and_,
    any_,
    bindparam,
    case,
    delete,
    exists,
    func,
    or_,
    select,
    tuple_,
    update,
)
from sqlalchemy.dialects import postgresql
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.sql.expression import BindParameter, ColumnElement

from ...errors import InvalidInputError, SessionIdInUseError, StaleGenerationError
from ...models import INT64_MAX, SessionNode
from ..rows import read_columns, select_rows, to_model, to_models, values_of
from ..sql import chunks, insert_for, is_postgres
from ..tables import (
    OWNED_TABLES,
    session_context_states,
    session_summaries,
    sessions,
)

Lock = Literal["share", "update"] | None

ACTIVITY_ORDER = (sessions.c.updated_at.desc(), sessions.c.session_key.desc())
RETENTION_ORDER = (sessions.c.updated_at, sessions.c.created_at, sessions.c.session_key)


@functools.cache
def insert_if_absent(dialect_name: str) -> Any:
    """INSERT of a session row that does nothing when the key exists (built once per dialect)."""
    return insert_for(dialect_name, sessions).on_conflict_do_nothing(
        index_elements=[sessions.c.session_key]
    )


@functools.cache
def _generation_checked_upsert(dialect_name: str) -> Any:
    """Whole-row insert-or-update, applied only to the same or an older generation."""
    stmt = insert_for(dialect_name, sessions)
    excluded = stmt.excluded
    return stmt.on_conflict_do_update(
        index_elements=[sessions.c.session_key],
        set_={c.name: excluded[c.name] for c in sessions.columns if c.name != "session_key"},
        where=or_(
            sessions.c.epoch < excluded.epoch,
            and_(
                sessions.c.epoch == excluded.epoch,
                sessions.c.session_id == excluded.session_id,
            ),
        ),
    )


def owned_rows(
    table: Table, keys: Any, session_ids: Any, *, sessions_deleted: bool = False
) -> tuple[ColumnElement[bool], ...]:
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

    ``sessions_deleted``: the conditions run in this order, right after the session rows
    of ``keys`` were deleted, in the same transaction: the second then needs neither to
    exclude the first one's rows nor to exclude ``keys`` from the sessions it looks at
    (fewer parameters: each is a value SQLAlchemy and the driver process).
    """
    if table is session_context_states:
        mine, others, link = table.c.session_key, table.c.session_id, sessions.c.session_key
        this_generation, other_rows = _one_of(mine, keys), _one_of(others, session_ids)
    else:
        mine, others, link = table.c.session_id, table.c.session_key, sessions.c.session_id
        this_generation, other_rows = _one_of(mine, session_ids), _one_of(others, keys)
    if sessions_deleted:
        shown_elsewhere = exists().where(link == mine)
        return this_generation, and_(other_rows, ~shown_elsewhere)
    shown_elsewhere = exists().where(link == mine, sessions.c.session_key.not_in(keys))
    return this_generation, and_(other_rows, ~this_generation, ~shown_elsewhere)


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


def _shown(text: str, limit: int = 120) -> str:
    return repr(text if len(text) <= limit else text[:limit] + "...")


def generation_in_use(
    session_id: str, holder: str, session_key: str | None, *, holder_is_session: bool = True
) -> SessionIdInUseError:
    """The error for ``session_key`` (``None``: a new generation) taking an id ``holder``
    holds: as its current generation, or (``holder_is_session=False``) in rows stored
    under that key."""
    taker = f"session {_shown(session_key)}" if session_key is not None else "a new generation"
    held = (
        f"already belongs to session {_shown(holder)}"
        if holder_is_session
        else f"is already carried by rows stored under the key {_shown(holder)}"
    )
    return SessionIdInUseError(
        f"session id {_shown(session_id)} {held}; {taker} cannot take it (a session id names "
        "one generation of one session, and deleting or resetting a session removes every "
        "row carrying it). Nothing was written"
    )


@functools.cache
def _by_key(dialect_name: str, lock: Lock) -> Select[Any]:
    """The row of ``:session_key`` (the read of every call by key: built once per shape)."""
    query = select(*read_columns(sessions, dialect_name)).where(
        sessions.c.session_key == bindparam("session_key")
    )
    return query if lock is None else query.with_for_update(read=lock == "share")


class SessionRepository:
    """Statements on ``sessions``, on the connection of one unit of work; never commits."""

    __slots__ = ("conn",)

    def __init__(self, conn: AsyncConnection) -> None:
        self.conn = conn

    async def get(self, key: str, *, lock: Lock = None) -> SessionNode | None:
        dialect = self.conn.dialect.name
        row = (await self.conn.execute(_by_key(dialect, lock), {"session_key": key})).first()
        return to_model(SessionNode, row, dialect) if row is not None else None

    async def insert_new(self, node: SessionNode) -> bool:
        """Insert ``node``; ``False`` (and no change) when the key is already taken."""
        result = await self.conn.execute(
            insert_if_absent(self.conn.dialect.name), values_of(node, sessions)
        )
        return bool(result.rowcount)

    async def upsert(self, node: SessionNode) -> None:
        """Whole-row insert-or-update, refused when ``node`` is an older generation.

        The update applies when the stored row is the same generation (same ``session_id`` and
        epoch) or an older epoch. A node read before a reset (lower epoch) or one of another
        generation at the same epoch is refused, so it can neither lower the epoch nor restore
        an old ``session_id``.
        """
        result = await self.conn.execute(
            _generation_checked_upsert(self.conn.dialect.name), values_of(node, sessions)
        )
        if result.rowcount:
            return
        stored = await self.get(node.session_key)
        raise StaleGenerationError(
            f"Stale write for {node.session_key}: the node is generation {node.session_id} at "
            f"epoch {node.epoch}, the stored session is generation "
            f"{stored.session_id if stored else None} at epoch {stored.epoch if stored else None}"
        )

    async def update_generation(self, node: SessionNode, expected_session_id: str) -> bool:
        """Whole-row UPDATE of ``node``'s row, only while it still holds generation
        ``expected_session_id`` at an epoch no higher than ``node``'s (one statement: the
        check and the write cannot be separated). ``False``, nothing written, otherwise;
        a missing row is never inserted."""
        values = values_of(node, sessions)
        key = values.pop("session_key")
        stmt = (
            update(sessions)
            .where(
                sessions.c.session_key == key,
                sessions.c.session_id == expected_session_id,
                sessions.c.epoch <= node.epoch,
            )
            .values(values)
        )
        return bool((await self.conn.execute(stmt)).rowcount)

    async def update_fields(self, key: str, values: dict[str, Any]) -> SessionNode | None:
        """Set only ``values`` on the row (no read-modify-write); the new row, or ``None``."""
        stmt = update(sessions).where(sessions.c.session_key == key).values(values)
        row = (
            await self.conn.execute(stmt.returning(*read_columns(sessions, self.conn.dialect.name)))
        ).first()
        return to_model(SessionNode, row, self.conn.dialect.name) if row is not None else None

    async def add_compaction(
        self, key: str, now: int, *, session_id: str, epoch: int, count: int
    ) -> None:
        """A compaction committed: ``compaction_count = max(stored, count + 1)`` and
        ``updated_at = max(stored, now)`` (an append that touched the row after ``now`` was
        taken keeps its freshness), on exactly the row of this key, session id and epoch;
        ``RuntimeError`` unless there is one. Nothing else is touched: the token counters of
        an append that landed meanwhile stay."""
        new_count = count + 1
        stmt = (
            update(sessions)
            .where(
                sessions.c.session_key == key,
                sessions.c.session_id == session_id,
                sessions.c.epoch == epoch,
            )
            .values(
                compaction_count=case(
                    (sessions.c.compaction_count > new_count, sessions.c.compaction_count),
                    else_=new_count,
                ),
                updated_at=case((sessions.c.updated_at > now, sessions.c.updated_at), else_=now),
            )
        )
        changed = int((await self.conn.execute(stmt)).rowcount)
        if changed != 1:
            raise RuntimeError(f"compaction commit of {key} updated {changed} session rows, not 1")

    async def finish(self, key: str, status: str, now: int) -> SessionNode | None:
        started = sessions.c.started_at
        runtime = case(
            (and_(started.is_not(None), started != 0), now - started),
            else_=sessions.c.runtime_ms,
        )
        stmt = (
            update(sessions)
            .where(sessions.c.session_key == key)
            .values(status=status, ended_at=now, updated_at=now, runtime_ms=runtime)
            .returning(*read_columns(sessions, self.conn.dialect.name))
        )
        row = (await self.conn.execute(stmt)).first()
        return to_model(SessionNode, row, self.conn.dialect.name) if row is not None else None

    async def list_sessions(
        self,
        *,
        agent_id: str | None,
        status: str | None,
        spawned_by: str | None,
        parent_session_key: str | None,
        limit: int | None,
        offset: int,
    ) -> list[SessionNode]:
        query = select_rows(sessions, self.conn)
        if agent_id is not None:
            query = query.where(sessions.c.agent_id == agent_id)
        if status is not None:
            query = query.where(sessions.c.status == status)
        if spawned_by is not None:
            query = query.where(sessions.c.spawned_by == spawned_by)
        if parent_session_key is not None:
            query = query.where(sessions.c.parent_session_key == parent_session_key)
        query = query.order_by(*ACTIVITY_ORDER).offset(offset)
        if limit is not None:
            query = query.limit(limit)
        return to_models(SessionNode, self.conn.dialect.name, await self.conn.execute(query))

    async def count(self) -> int:
        return int(
            (await self.conn.execute(select(func.count()).select_from(sessions))).scalar_one()
        )

    async def get_epoch(self, key: str) -> int | None:
        query = select(sessions.c.epoch).where(sessions.c.session_key == key)
        value = (await self.conn.execute(query)).scalar_one_or_none()
        return int(value) if value is not None else None

    async def increment_epoch(self, key: str) -> int | None:
        """``epoch + 1``; ``None`` for a missing key. An epoch already at the 64-bit maximum is
        refused (SQLite would silently make it a REAL, Postgres raise "bigint out of range")."""
        stmt = (
            update(sessions)
            .where(sessions.c.session_key == key, sessions.c.epoch < INT64_MAX)
            .values(epoch=sessions.c.epoch + 1)
            .returning(sessions.c.epoch)
        )
        value = (await self.conn.execute(stmt)).scalar_one_or_none()
        if value is None and await self.get_epoch(key) is not None:
            raise InvalidInputError(
                f"the epoch of {key} is at {INT64_MAX}, the largest value it can hold; "
                "nothing was written"
            )
        return int(value) if value is not None else None

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
        """Delete sessions and everything they own (:func:`owned_rows`); returns the keys
        actually deleted.

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
            for owned in owned_rows(table, keys, listed_ids, sessions_deleted=True):
                await self.conn.execute(delete(table).where(owned))
        return deleted_keys

    async def generation_claimant(self, session_id: str, session_key: str | None) -> str | None:
        """A session key other than ``session_key`` that already holds ``session_id``: the
        key of the session whose generation it is, or of any row stored under it; ``None``
        when the id is free for ``session_key``. One statement, an index probe per table."""
        probes = []
        for table in (sessions, *OWNED_TABLES):
            probe = select(table.c.session_key).where(table.c.session_id == session_id)
            if session_key is not None:
                probe = probe.where(table.c.session_key != session_key)
            probes.append(probe.limit(1).scalar_subquery())
        claimant = (await self.conn.execute(select(func.coalesce(*probes)))).scalar_one_or_none()
        return str(claimant) if claimant is not None else None

    async def generation_owner(self, session_id: str) -> str | None:
        """The key of the session whose current generation is ``session_id``, if any."""
        query = select(sessions.c.session_key).where(sessions.c.session_id == session_id).limit(1)
        owner = (await self.conn.execute(query)).scalar_one_or_none()
        return str(owner) if owner is not None else None

    async def claim_generation(self, session_id: str, session_key: str | None) -> None:
        """Refuse (``SessionIdInUseError``) to give ``session_key`` a session id that another
        key already holds (:func:`generation_claimant`). Inside the writing transaction, before
        anything is written; the unique index on ``sessions.session_id`` backs it against a
        concurrent writer (``db/generations.py`` translates that violation into the same error)."""
        claimant = await self.generation_claimant(session_id, session_key)
        if claimant is not None:
            owner = await self.generation_owner(session_id)
            if owner is not None and owner != session_key:
                raise generation_in_use(session_id, owner, session_key)
            raise generation_in_use(session_id, claimant, session_key, holder_is_session=False)

    async def check_row_generation(self, session_id: str, session_key: str) -> None:
        """Refuse a row stored under ``session_key`` that carries the session id of another
        session: it would show up in that session's transcript, and go when it is deleted."""
        owner = await self.generation_owner(session_id)
        if owner is not None and owner != session_key:
            raise SessionIdInUseError(
                f"session id {_shown(session_id)} belongs to session {_shown(owner)}; a row of "
                f"session {_shown(session_key)} cannot carry it. Nothing was written"
            )

    # -- keyset pages --------------------------------------------------------------------

    async def list_page(
        self,
        *,
        after: tuple[int, str] | None,
        agent_id: str | None,
        status: str | None,
        limit: int,
    ) -> list[SessionNode]:
        """At most ``limit`` sessions in listing order (:data:`ACTIVITY_ORDER`), strictly
        after the position ``after`` = ``(updated_at, session_key)`` when given."""
        query = select_rows(sessions, self.conn)
        if agent_id is not None:
            query = query.where(sessions.c.agent_id == agent_id)
        if status is not None:
            query = query.where(sessions.c.status == status)
        if after is not None:
            query = query.where(
                tuple_(sessions.c.updated_at, sessions.c.session_key) < tuple_(*after)
            )
        query = query.order_by(*ACTIVITY_ORDER).limit(limit)
        return to_models(SessionNode, self.conn.dialect.name, await self.conn.execute(query))

    # Keys per statement of current_session_ids (each is one parameter on SQLite).
    KEY_CHUNK = 500

    async def current_session_ids(self, keys: Sequence[str]) -> dict[str, str]:
        """``{session_key: session_id}`` of those of ``keys`` that exist; one statement per
        :attr:`KEY_CHUNK` keys."""
        found: dict[str, str] = {}
        for chunk in chunks(list(dict.fromkeys(keys)), self.KEY_CHUNK):
            query = select(sessions.c.session_key, sessions.c.session_id).where(
                _one_of(sessions.c.session_key, _listed(self.conn, chunk))
            )
            found.update(
                {row.session_key: row.session_id for row in await self.conn.execute(query)}
            )
        return found
