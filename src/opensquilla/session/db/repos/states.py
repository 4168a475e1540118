"""Statements on ``session_states`` and ``scope_states`` (revision 0009): a session's state
and state wider than one session, each a JSON object with a compare-and-set ``revision``
(docs/state.md). The merge of an update is the use case's (``usecases/state.py``); here the
reads and the conditional writes."""

from __future__ import annotations

import functools
from typing import Any, NamedTuple, TypedDict, Unpack

from sqlalchemy import (
    BigInteger,
    Column,
    MetaData,
    Select,
    Table,
    Text,
    Update,
    bindparam,
    case,
    delete,
    literal,
    select,
    update,
)

from ..sql import insert_for, lock_key
from ..tables import sessions
from ..types import JSONText, loads_json_text
from .repository import Generation, Repository

# Not among the five tables: their own metadata, so export, import, retention and the drift
# check (which compare the five) never see them, and a session row's upsert never writes the
# state back from a stale read.
_metadata = MetaData()


def _state_columns() -> list[Column[Any]]:
    """What a state row holds beside its key, in both tables: the JSON object, its
    compare-and-set revision, and when it was last written (what :class:`StoredState`
    reads)."""
    return [
        Column("state", JSONText, nullable=False),
        Column("revision", BigInteger, nullable=False),
        Column("updated_at", BigInteger, nullable=False),
    ]


session_states = Table(
    "session_states",
    _metadata,
    Column("session_key", Text, primary_key=True),
    # The generation the state belongs to: a state row of another session id is not this
    # generation's (a reset or a re-creation under the key starts from an empty state).
    Column("session_id", Text, nullable=False),
    *_state_columns(),
)

scope_states = Table(
    "scope_states",
    _metadata,
    Column("scope", Text, primary_key=True),
    Column("scope_id", Text, primary_key=True),
    *_state_columns(),
)


class StoredState(NamedTuple):
    """A state row as stored: its generation (``None`` for a scope's), the state, its
    revision and when it was last written."""

    session_id: str | None
    state: dict[str, Any]
    revision: int
    updated_at: int


class StateWrite(TypedDict):
    """One compare-and-set write of a state row, declared once for the layers passing it
    on (``Unpack[StateWrite]``): the new state, its revision, the time, and the revision
    the write expects stored (``None``: the first write, an insert)."""

    state: dict[str, Any]
    revision: int
    now: int
    stored_revision: int | None


class SessionStateWrite(StateWrite):
    """A session's state write: :class:`StateWrite` and the generation it is for."""

    session_id: str


_LOCK_PREFIX_SESSION = "session_states:"
_LOCK_PREFIX_SCOPE = "scope_states:"


def _stored(row: Any, session_id: str | None) -> StoredState | None:
    if row is None or row.revision is None:
        return None
    return StoredState(session_id, row.state, int(row.revision), int(row.updated_at))


def write_statement(
    dialect_name: str,
    table: Table,
    key: dict[str, str],
    values: dict[str, Any],
    stored_revision: int | None,
) -> tuple[Any, dict[str, Any]]:
    """:func:`_write`'s statement (built once per shape) and its parameters by bind name."""
    params = {f"w_{name}": value for name, value in (*key.items(), *values.items())}
    if stored_revision is None:
        return _first_write(dialect_name, table, tuple(key), tuple(values)), params
    params["w_stored_revision"] = stored_revision
    return _compare_and_set(table, tuple(key), tuple(values)), params


def _bound_as(table: Table, name: str) -> Any:
    return bindparam(f"w_{name}", type_=table.c[name].type)


@functools.cache
def _first_write(
    dialect_name: str, table: Table, key: tuple[str, ...], values: tuple[str, ...]
) -> Any:
    """``INSERT ... ON CONFLICT DO NOTHING`` of a new row (binds ``w_``-prefixed). A
    session's state only while the session row is still the state's generation, read in
    the statement (PostgreSQL: held ``FOR KEY SHARE`` until it commits, so a delete,
    which locks the session row first, runs wholly before, and this inserts nothing, or
    after, and deletes this row too)."""
    inserted = insert_for(dialect_name, table)
    names = (*key, *values)
    if table is session_states:
        source = select(*(_bound_as(table, name).label(name) for name in names)).where(
            sessions.c.session_key == _bound_as(table, "session_key"),
            sessions.c.session_id == _bound_as(table, "session_id"),
        )
        if dialect_name == "postgresql":
            source = source.with_for_update(key_share=True, of=sessions)
        stmt = inserted.from_select(list(names), source)
    else:
        stmt = inserted.values({name: _bound_as(table, name) for name in names})
    return stmt.on_conflict_do_nothing(index_elements=[table.c[name] for name in key])


@functools.cache
def _compare_and_set(table: Table, key: tuple[str, ...], values: tuple[str, ...]) -> Update:
    """``UPDATE table SET values WHERE key AND revision = :w_stored_revision``, built once
    (its binds ``w_``-prefixed: an UPDATE's bind named like a column would set it)."""
    return (
        update(table)
        .where(
            *(table.c[name] == bindparam(f"w_{name}") for name in key),
            table.c.revision == bindparam("w_stored_revision"),
        )
        .values({name: _bound_as(table, name) for name in values})
    )


@functools.cache
def _session_and_state(dialect_name: str, locked: bool) -> Select[Any]:
    """The session's current generation and its key's state row, one statement (a key's
    state row is at most one: the key is its primary key). ``locked`` (PostgreSQL): the
    session row ``FOR KEY SHARE``, which a reset (``FOR UPDATE``) and a delete wait for and
    an append (``FOR NO KEY UPDATE``) does not."""
    query = (
        select(
            sessions.c.session_id,
            session_states.c.session_id.label("state_session_id"),
            session_states.c.state,
            session_states.c.revision,
            session_states.c.updated_at,
        )
        .select_from(
            sessions.outerjoin(
                session_states, session_states.c.session_key == sessions.c.session_key
            )
        )
        .where(sessions.c.session_key == bindparam("session_key"))
    )
    if locked and dialect_name == "postgresql":
        query = query.with_for_update(key_share=True, of=sessions)
    return query


def session_state_read(dialect_name: str) -> Select[Any]:
    """The read of :meth:`SessionStateRepository.read` (unlocked), bound by
    ``session_key``: for a read on the pool's DBAPI connection (``uow``)."""
    return _session_and_state(dialect_name, False)


def decoded_state(state: Any) -> dict[str, Any]:
    """A state as the driver returned it (its JSON text), or as a ``Connection`` whose
    statement had no direct plan decoded it already."""
    decoded: dict[str, Any] = loads_json_text(state) if isinstance(state, str) else state
    return decoded


def found_of_row(row: tuple[Any, ...] | None) -> tuple[str, StoredState | None] | None:
    """:func:`session_state_read`'s row as the driver returned it (its JSON text not yet
    decoded), as :meth:`SessionStateRepository.read` returns it."""
    if row is None:
        return None
    session_id, state_session_id, state, revision, updated_at = row
    if revision is None:
        return str(session_id), None
    stored = StoredState(state_session_id, decoded_state(state), int(revision), int(updated_at))
    return str(session_id), stored


def _row_values(write: StateWrite) -> dict[str, Any]:
    return {"state": write["state"], "revision": write["revision"], "updated_at": write["now"]}


def session_state_write(
    dialect_name: str, session_key: str, **write: Unpack[SessionStateWrite]
) -> tuple[Any, dict[str, Any]]:
    """:meth:`SessionStateRepository.write`'s statement and parameters."""
    values = {"session_id": write["session_id"], **_row_values(write)}
    key = {"session_key": session_key}
    return write_statement(dialect_name, session_states, key, values, write["stored_revision"])


def scope_state_write(
    dialect_name: str, scope: str, scope_id: str, **write: Unpack[StateWrite]
) -> tuple[Any, dict[str, Any]]:
    """:meth:`ScopeStateRepository.write`'s statement and parameters."""
    key = {"scope": scope, "scope_id": scope_id}
    return write_statement(
        dialect_name, scope_states, key, _row_values(write), write["stored_revision"]
    )


class SessionStateRepository(Repository):
    """Statements on ``session_states`` (``tx.session_states``), on one unit of work's
    connection; never commits. Not ``tx.states``, the context states."""

    __slots__ = ()

    async def read(
        self, session_key: str, *, for_update: bool = False
    ) -> tuple[str, StoredState | None] | None:
        """``(session_id, stored state or None)`` of the session ``session_key``, ``None``
        when there is no session. ``for_update`` (in a write transaction): writers of this
        key's state are serialised first (PostgreSQL: a transaction advisory lock on the
        key; SQLite's write transaction holds the database lock) and the session row is
        held against a reset or a delete until the transaction ends."""
        if for_update:
            await lock_key(self.conn, _LOCK_PREFIX_SESSION + session_key)
        query = _session_and_state(self.conn.dialect.name, for_update)
        row = (await self.conn.execute(query, {"session_key": session_key})).first()
        if row is None:
            return None
        return str(row.session_id), _stored(row, row.state_session_id)

    async def write(self, session_key: str, **write: Unpack[SessionStateWrite]) -> bool:
        """Store ``state`` at ``revision`` for generation ``session_id``: a new row when
        ``stored_revision`` is ``None``, else the row while it is still at
        ``stored_revision`` (the compare-and-set in the statement itself). ``False``:
        nothing written (another writer's row, or its revision moved)."""
        stmt, params = session_state_write(self.conn.dialect.name, session_key, **write)
        return bool((await self.conn.execute(stmt, params)).rowcount)

    async def restart(
        self, session_key: str, *, old_session_id: str, new_session_id: str, now: int
    ) -> None:
        """A reset's new, empty state for ``new_session_id``, at a revision above any the
        old generation showed (so a compare-and-set read before the reset fails): revision
        1 where there was no row; the row's revision + 1 where it was the old generation's;
        + 2 where it was an older one's (which read as ``{}`` at revision + 1)."""
        stmt = insert_for(self.conn.dialect, session_states)
        stmt = stmt.on_conflict_do_update(
            index_elements=[session_states.c.session_key],
            set_={
                "session_id": stmt.excluded.session_id,
                "state": stmt.excluded.state,
                "revision": session_states.c.revision
                + case((session_states.c.session_id == old_session_id, 1), else_=2),
                "updated_at": stmt.excluded.updated_at,
            },
        )
        await self.conn.execute(
            stmt,
            {
                "session_key": session_key,
                "session_id": new_session_id,
                "state": {},
                "revision": 1,
                "updated_at": now,
            },
        )

    async def copy_to_session(self, source: Generation, target: Generation, *, now: int) -> int:
        """A fork's copy: the source generation's state (if any) as the target's, at
        revision 0 (a row an older session left under the target key is replaced)."""
        await self.conn.execute(
            delete(session_states).where(session_states.c.session_key == target.session_key)
        )
        copied = select(
            literal(target.session_key, type_=Text),
            literal(target.session_id, type_=Text),
            session_states.c.state,
            literal(0, type_=BigInteger),
            literal(now, type_=BigInteger),
        ).where(
            session_states.c.session_key == source.session_key,
            session_states.c.session_id == source.session_id,
        )
        stmt = session_states.insert().from_select(
            ["session_key", "session_id", "state", "revision", "updated_at"], copied
        )
        return int((await self.conn.execute(stmt)).rowcount)


class ScopeStateRepository(Repository):
    """Statements on ``scope_states`` (``tx.scope_states``), on one unit of work's
    connection; never commits."""

    __slots__ = ()

    async def read(
        self, scope: str, scope_id: str, *, for_update: bool = False
    ) -> StoredState | None:
        """The stored state of ``(scope, scope_id)``, ``None`` when never written.
        ``for_update``: writers of this scope's state serialised first, as
        :meth:`SessionStateRepository.read`."""
        if for_update:
            await lock_key(self.conn, f"{_LOCK_PREFIX_SCOPE}{scope}\x1f{scope_id}")
        query = select(
            scope_states.c.state, scope_states.c.revision, scope_states.c.updated_at
        ).where(scope_states.c.scope == scope, scope_states.c.scope_id == scope_id)
        return _stored((await self.conn.execute(query)).first(), None)

    async def write(self, scope: str, scope_id: str, **write: Unpack[StateWrite]) -> bool:
        """As :meth:`SessionStateRepository.write`, for a scope's row."""
        stmt, params = scope_state_write(self.conn.dialect.name, scope, scope_id, **write)
        return bool((await self.conn.execute(stmt, params)).rowcount)
