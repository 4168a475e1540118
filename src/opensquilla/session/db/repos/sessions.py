"""Statements on ``sessions``."""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any, Literal, Unpack

from sqlalchemy import (
    Select,
    and_,
    bindparam,
    case,
    func,
    or_,
    select,
    tuple_,
    update,
)

from ...errors import InvalidInputError, StaleGenerationError
from ...models import INT64_MAX, SessionListFilter, SessionNode
from ..routing import cross_session
from ..rows import read_columns, select_rows, to_model, to_models, values_of
from ..sql import chunks, insert_for, prefix_range
from ..tables import sessions
from .repository import Repository
from .session_deletion import RETENTION_ORDER as RETENTION_ORDER
from .session_deletion import SessionDeletion, _listed, _one_of
from .session_deletion import owned_rows as owned_rows
from .session_generations import SessionGenerations
from .session_generations import generation_in_use as generation_in_use
from .session_usage import SessionUsage

Lock = Literal["share", "update"] | None

ACTIVITY_ORDER = (sessions.c.updated_at.desc(), sessions.c.session_key.desc())


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


@functools.cache
def _by_key(dialect_name: str, lock: Lock) -> Select[Any]:
    """The row of ``:session_key`` (the read of every call by key: built once per shape)."""
    query = select(*read_columns(sessions, dialect_name)).where(
        sessions.c.session_key == bindparam("session_key")
    )
    return query if lock is None else query.with_for_update(read=lock == "share")


def _filtered(query: Select[Any], filters: Mapping[str, object], dialect: str) -> Select[Any]:
    """``query`` narrowed to the listing's filters (each one given and not ``None``); the
    key prefix as a range of the key's index (``sql.prefix_range``)."""
    for name, value in filters.items():
        if value is None:
            continue
        if name == "key_prefix":
            query = query.where(*prefix_range(sessions.c.session_key, str(value), dialect))
        else:
            query = query.where(sessions.c[name] == value)
    return query


class SessionRepository(SessionDeletion, SessionGenerations, SessionUsage, Repository):
    """Statements on ``sessions``, on the connection of one unit of work; never commits
    (deletion and retention: ``session_deletion.py``; generation ids:
    ``session_generations.py``; the usage increment: ``session_usage.py``)."""

    __slots__ = ()

    async def get(self, key: str, *, lock: Lock = None) -> SessionNode | None:
        dialect = self.conn.dialect.name
        row = (await self.conn.execute(_by_key(dialect, lock), {"session_key": key})).first()
        return to_model(SessionNode, row, dialect) if row is not None else None

    async def key_of(self, session_id: str) -> str | None:
        """The key of the session whose current generation is ``session_id``, ``None`` when no
        session row names it. By id alone: under distribution it fans out to every shard
        (``listing``); the by-key reads do not (docs/scaling.md#keys-and-statements)."""
        with cross_session("listing"):
            query = select(sessions.c.session_key).where(sessions.c.session_id == session_id)
            found = (await self.conn.execute(query.limit(1))).scalar()
        return None if found is None else str(found)

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
        self, *, limit: int | None, offset: int, **filters: Unpack[SessionListFilter]
    ) -> list[SessionNode]:
        query = _filtered(select_rows(sessions, self.conn), filters, self.conn.dialect.name)
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

    # -- keyset pages --------------------------------------------------------------------

    async def list_page(
        self, *, after: tuple[int, str] | None, limit: int, **filters: Unpack[SessionListFilter]
    ) -> list[SessionNode]:
        """At most ``limit`` sessions in listing order (:data:`ACTIVITY_ORDER`), strictly
        after the position ``after`` = ``(updated_at, session_key)`` when given."""
        query = _filtered(select_rows(sessions, self.conn), filters, self.conn.dialect.name)
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
