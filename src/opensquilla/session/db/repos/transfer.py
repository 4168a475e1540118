"""Statements for moving whole sessions between databases: export, import and copy.

Rows are read and written as plain ``{column: value}`` dicts through the tables' own types,
so the lossless text and JSON handling of ``db/types.py`` applies on both backends. Inserts
carry explicit ids; on Postgres the id sequences are then advanced past them.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from typing import Any

from sqlalchemy import JSON, BigInteger, Boolean, Float, Integer, Select, Table, Text, func, select
from sqlalchemy.dialects.postgresql import REGCLASS
from sqlalchemy.types import TypeDecorator, TypeEngine

from ...models.reports import ColumnKind, SessionRows, TableLayout
from ..routing import cross_session
from ..sql import chunks, is_postgres
from ..tables import CHILD_TABLES, sessions
from ..tables import TABLES as _ALL
from ..types import JSONText
from .repository import Repository
from .sessions import insert_if_absent

TABLES: dict[str, Table] = {table.name: table for table in _ALL}


def _kind(type_: TypeEngine[Any]) -> ColumnKind:
    if isinstance(type_, JSONText):
        # JSON kept as text (per-entry ``metadata``): a JSON value in the file like any
        # other JSON column, its key order kept by the format's own encoding.
        return "json"
    if isinstance(type_, TypeDecorator):
        type_ = type_.impl_instance
    if isinstance(type_, JSON):
        return "json"
    if isinstance(type_, Boolean):
        return "bool"
    if isinstance(type_, Float):
        return "float"
    if isinstance(type_, Integer | BigInteger):
        return "int"
    if isinstance(type_, Text):
        return "text"
    raise TypeError(f"no transfer kind for column type {type_!r}")


def table_layout() -> TableLayout:
    """Every table's columns in table order, each with the kind of value it holds."""
    return {
        name: tuple((column.name, _kind(column.type)) for column in table.columns)
        for name, table in TABLES.items()
    }


@functools.cache
def _advance_statement(table_names: tuple[str, ...]) -> Select[Any]:
    calls = []
    for name in table_names:
        table = TABLES[name]
        sequence = func.pg_get_serial_sequence(name, "id").cast(REGCLASS)
        highest = select(func.max(table.c.id)).scalar_subquery()
        floor = func.coalesce(func.pg_sequence_last_value(sequence), 0)
        calls.append(func.setval(sequence, func.greatest(highest, floor)))
    return select(*calls)


# Ids per statement in the look-ups below: well under both drivers' parameter limits.
_LOOKUP_CHUNK = 2000


class TransferRepository(Repository):
    """Whole sessions as raw rows (export, import, copy); bound to one connection, never commits."""

    __slots__ = ()

    async def all_session_keys(self) -> list[str]:
        return list((await self.conn.execute(select(sessions.c.session_key))).scalars())

    async def existing_keys(self, keys: Sequence[str]) -> set[str]:
        if not keys:
            return set()
        query = select(sessions.c.session_key).where(sessions.c.session_key.in_(list(keys)))
        return set((await self.conn.execute(query)).scalars())

    async def read_rows(self, keys: Sequence[str]) -> list[SessionRows]:
        """The sessions with these keys (missing keys are left out), in the order asked, each
        with its child rows in ``id`` order: five statements however many keys."""
        if not keys:
            return []
        wanted = list(dict.fromkeys(keys))
        query = select(sessions).where(sessions.c.session_key.in_(wanted))
        found = {row.session_key: dict(row._mapping) for row in await self.conn.execute(query)}
        bundles = {key: SessionRows(session=found[key]) for key in wanted if key in found}
        for name in CHILD_TABLES:
            table = TABLES[name]
            for bundle in bundles.values():
                bundle.children[name] = []
            if not bundles:
                continue
            query = (
                select(table)
                .where(table.c.session_key.in_(list(bundles)))
                .order_by(table.c.session_key, table.c.id)
            )
            for row in await self.conn.execute(query):
                bundles[row.session_key].children[name].append(dict(row._mapping))
        return list(bundles.values())

    async def insert_session(self, values: dict[str, Any]) -> bool:
        """Insert the session row as given; ``False`` (nothing written) when the key is taken."""
        result = await self.conn.execute(insert_if_absent(self.conn.dialect.name), values)
        return bool(result.rowcount)

    async def insert_children(self, bundle: SessionRows) -> list[str]:
        """Insert the child rows with their ids; the tables that received rows."""
        filled: list[str] = []
        for name in CHILD_TABLES:
            rows = bundle.rows(name)
            if rows:
                await self.conn.execute(TABLES[name].insert(), rows)
                filled.append(name)
        return filled

    async def advance_sequences(self, table_names: Iterable[str]) -> None:
        """Postgres: move each table's id sequence past the largest id in the table.

        The sequence only ever moves forward (``GREATEST`` with its current value), so ids that
        concurrent writers already drew stay unused by later inserts. No-op on SQLite, where an
        ``AUTOINCREMENT`` table records explicit ids in ``sqlite_sequence`` by itself.
        The largest id is the whole table's: the caller runs it as its cross-session
        operation (``import``, ``copy``).
        """
        if not is_postgres(self.conn):
            return
        names = tuple(name for name in CHILD_TABLES if name in set(table_names))
        if names:
            await self.conn.execute(_advance_statement(names))

    async def ids_in_use(self, table_name: str, ids: Sequence[int]) -> dict[int, str]:
        """Which of these ids ``table_name`` (a child table) already holds, each with the key
        its row is stored under. An index probe per id; by id alone, so under distribution it
        fans out to every shard (``listing``, the by-id resolution)."""
        table = TABLES[table_name]
        found: dict[int, str] = {}
        for chunk in chunks(sorted(set(ids)), _LOOKUP_CHUNK):
            query = select(table.c.id, table.c.session_key).where(table.c.id.in_(chunk))
            with cross_session("listing"):
                rows = (await self.conn.execute(query)).all()
            for row in rows:
                found[int(row.id)] = str(row.session_key)
        return found

    async def generation_holders(self, session_ids: Sequence[str]) -> dict[str, set[str]]:
        """For each of these session ids that is in use: the keys holding it, as the current
        generation of a session or on rows stored under a key (every table has an index on
        ``session_id``, since the unique constraint on ``sessions`` has one too). By id
        alone: under distribution they fan out to every shard (``listing``)."""
        holders: dict[str, set[str]] = {}
        for chunk in chunks(sorted(set(session_ids)), _LOOKUP_CHUNK):
            for table in TABLES.values():
                query = (
                    select(table.c.session_id, table.c.session_key)
                    .where(table.c.session_id.in_(chunk))
                    .distinct()
                )
                with cross_session("listing"):
                    rows = (await self.conn.execute(query)).all()
                for row in rows:
                    holders.setdefault(str(row.session_id), set()).add(str(row.session_key))
        return holders
